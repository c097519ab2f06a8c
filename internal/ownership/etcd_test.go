package ownership

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"quire/internal/catalog"
	"quire/internal/meta"
	"quire/internal/testutil"
)

// TestEtcdFailover runs two Clusters against a real (embedded) etcd: they
// agree on lookups, and when one broker's session ends the other takes its
// bundles within a bound and gets the acquire events.
func TestEtcdFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an embedded etcd; run without -short")
	}
	e, err := meta.StartEmbedded(meta.EmbedConfig{
		DataDir:   t.TempDir(),
		ClientURL: fmt.Sprintf("http://127.0.0.1:%d", testutil.FreePort(t)),
		PeerURL:   fmt.Sprintf("http://127.0.0.1:%d", testutil.FreePort(t)),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	ctx := context.Background()
	start := func(id int32) (*meta.Etcd, meta.Session, *Cluster, *recorder) {
		store, err := meta.NewEtcd(meta.EtcdConfig{Endpoints: []string{e.Endpoint()}})
		if err != nil {
			t.Fatal(err)
		}
		session, err := store.NewSession(ctx, 2*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		rec := newRecorder()
		c, err := New(Config{
			Store: store, Session: session, Logger: quietLogger(),
			Self:      Member{ID: id, KafkaAddr: fmt.Sprintf("127.0.0.1:%d", 9092+id)},
			OnAcquire: rec.onAcquire, OnRelease: rec.onRelease,
			AcquireGrace: time.Minute,
		})
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Start(ctx); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			c.Close()
			store.Close()
			rec.check(t)
		})
		return store, session, c, rec
	}
	_, sessionA, a, recA := start(1)
	_, _, b, recB := start(2)
	if err := a.Catalog().EnsureDefaults(ctx); err != nil {
		t.Fatal(err)
	}
	testutil.WaitForWithin(t, 10*time.Second, "both brokers see both", func() bool { return len(a.Brokers()) == 2 && len(b.Brokers()) == 2 })
	bounds := createNamespace(t, a.Catalog(), "acme/orders", 8)

	var wg sync.WaitGroup
	answers := make([][2]Member, 16)
	for i := range answers {
		for j, c := range []*Cluster{a, b} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				o, err := c.Lookup(ctx, catalog.PartitionName("acme/orders", "t", int32(i)))
				if err != nil {
					t.Error(err)
				}
				answers[i][j] = o
			}()
		}
	}
	wg.Wait()
	for i, ans := range answers {
		if ans[0].ID != ans[1].ID || ans[0].ID == 0 {
			t.Fatalf("partition %d: %d vs %d", i, ans[0].ID, ans[1].ID)
		}
	}
	owned := func(cs ...*Cluster) map[catalog.Bundle]int {
		out := map[catalog.Bundle]int{}
		for _, c := range cs {
			for _, bundle := range c.OwnedBundles() {
				out[bundle]++
			}
		}
		return out
	}
	allOnce := func(cs ...*Cluster) bool {
		o := owned(cs...)
		all := append(catalog.BundlesOf("acme/orders", bounds), catalog.BundlesOf(catalog.DefaultNamespace, catalog.EqualBoundaries(catalog.DefaultNumBundles))...)
		for _, bundle := range all {
			if o[bundle] != 1 {
				return false
			}
		}
		return true
	}
	testutil.WaitForWithin(t, 10*time.Second, "every bundle owned once", func() bool { return allOnce(a, b) })
	heldA := waitEventsMatch(t, recA, a)
	if len(heldA) == 0 {
		t.Fatal("broker 1 owns nothing; the failover below would prove nothing")
	}

	// Broker 1's session ends (closing it revokes the lease: its keys go at once).
	ended := time.Now()
	if err := sessionA.Close(); err != nil {
		t.Fatal(err)
	}
	testutil.WaitForWithin(t, 5*time.Second, "survivor owns every bundle", func() bool { return allOnce(b) })
	t.Logf("takeover of %d bundles in %v", len(heldA), time.Since(ended))
	if d := time.Since(ended); d > 3*time.Second {
		t.Fatalf("takeover took %v", d)
	}
	held := waitEventsMatch(t, recB, b)
	for bundle := range heldA {
		if !held[bundle] {
			t.Fatalf("no acquire event on the survivor for %s", bundle)
		}
	}
	select {
	case <-a.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("broker 1 did not notice its session ended")
	}
	testutil.WaitForWithin(t, 5*time.Second, "release events on broker 1", func() bool {
		h, _, _ := recA.snapshot()
		return len(h) == 0
	})
	if o, err := b.Lookup(ctx, catalog.PartitionName("acme/orders", "t", 0)); err != nil || o.ID != 2 {
		t.Fatalf("lookup after failover: %+v %v", o, err)
	}
}
