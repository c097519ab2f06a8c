package ownership

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"runtime"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"quire/internal/catalog"
	"quire/internal/meta"
	"quire/internal/testutil"
)

// recorder collects a Cluster's ownership events.
type recorder struct {
	mu       sync.Mutex
	held     map[catalog.Bundle]bool
	acquires int
	releases int
	bad      []string // protocol violations: double acquire, release of a bundle not held
}

func newRecorder() *recorder { return &recorder{held: map[catalog.Bundle]bool{}} }

func (r *recorder) onAcquire(b catalog.Bundle) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.held[b] {
		r.bad = append(r.bad, "acquire of held "+b.String())
	}
	r.held[b] = true
	r.acquires++
}

func (r *recorder) onRelease(b catalog.Bundle) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.held[b] {
		r.bad = append(r.bad, "release of unheld "+b.String())
	}
	delete(r.held, b)
	r.releases++
}

func (r *recorder) snapshot() (held map[catalog.Bundle]bool, acquires, releases int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	held = map[catalog.Bundle]bool{}
	for b := range r.held {
		held[b] = true
	}
	return held, r.acquires, r.releases
}

func (r *recorder) check(t *testing.T) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.bad) > 0 {
		t.Fatalf("event protocol violated: %v", r.bad)
	}
}

type testBroker struct {
	client  *meta.MemClient
	session meta.Session
	cluster *Cluster
	rec     *recorder
}

type brokerOpts struct {
	id           int32
	ttl          time.Duration
	acquireGrace time.Duration
	lookupWait   time.Duration
	handoffAfter time.Duration
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func startMemBroker(t *testing.T, srv *meta.MemServer, o brokerOpts) *testBroker {
	t.Helper()
	if o.ttl == 0 {
		o.ttl = 2 * time.Second
	}
	if o.acquireGrace == 0 {
		o.acquireGrace = time.Minute // tests rely on the prompt path unless they set it
	}
	ctx := context.Background()
	tb := &testBroker{client: srv.NewClient(), rec: newRecorder()}
	var err error
	if tb.session, err = tb.client.NewSession(ctx, o.ttl); err != nil {
		t.Fatal(err)
	}
	tb.cluster, err = New(Config{
		Store:        tb.client,
		Session:      tb.session,
		Self:         Member{ID: o.id, KafkaAddr: fmt.Sprintf("127.0.0.1:%d", 9092+o.id), HTTPAddr: fmt.Sprintf("127.0.0.1:%d", 8080+o.id), Zone: "z1"},
		Logger:       quietLogger(),
		OnAcquire:    tb.rec.onAcquire,
		OnRelease:    tb.rec.onRelease,
		AcquireGrace: o.acquireGrace,
		LookupWait:   o.lookupWait,
		HandoffAfter: o.handoffAfter,
	})
	if err != nil {
		t.Fatal(err)
	}
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := tb.cluster.Start(sctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		tb.cluster.Close()
		tb.client.Close()
		tb.rec.check(t)
	})
	return tb
}

// waitEventsMatch waits until the events delivered (asynchronously) to rec
// add up to c.OwnedBundles, and returns the bundles held.
func waitEventsMatch(t *testing.T, rec *recorder, c *Cluster) map[catalog.Bundle]bool {
	t.Helper()
	var held map[catalog.Bundle]bool
	testutil.WaitForWithin(t, 5*time.Second, "events match OwnedBundles", func() bool {
		held, _, _ = rec.snapshot()
		owned := c.OwnedBundles()
		if len(held) != len(owned) {
			return false
		}
		for _, b := range owned {
			if !held[b] {
				return false
			}
		}
		return true
	})
	return held
}

// ownedBy returns, per bundle, the brokers that believe they own it.
func ownedBy(brokers ...*testBroker) map[catalog.Bundle][]int32 {
	out := map[catalog.Bundle][]int32{}
	for _, b := range brokers {
		for _, bundle := range b.cluster.OwnedBundles() {
			out[bundle] = append(out[bundle], b.cluster.Self().ID)
		}
	}
	return out
}

// allOwnedOnce: every bundle of bounds is owned by exactly one broker.
func allOwnedOnce(ns string, bounds []uint32, brokers ...*testBroker) bool {
	owners := ownedBy(brokers...)
	for _, b := range catalog.BundlesOf(ns, bounds) {
		if len(owners[b]) != 1 {
			return false
		}
	}
	return true
}

func createNamespace(t *testing.T, a *catalog.Catalog, ns string, bundles int) []uint32 {
	t.Helper()
	ctx := context.Background()
	tenant, _, _ := catalog.ParseNamespace(ns)
	if err := a.CreateTenant(ctx, tenant, catalog.TenantInfo{}); err != nil && !errors.Is(err, catalog.ErrTenantExists) {
		t.Fatal(err)
	}
	p := catalog.DefaultPolicies()
	p.Bundles = catalog.BundlesPolicy{NumBundles: bundles}
	if err := a.CreateNamespace(ctx, ns, &p); err != nil {
		t.Fatal(err)
	}
	return catalog.EqualBoundaries(bundles)
}

// waitBrokers waits until every cluster sees n live brokers.
func waitBrokers(t *testing.T, n int, brokers ...*testBroker) {
	t.Helper()
	testutil.WaitForWithin(t, 5*time.Second, fmt.Sprintf("%d brokers seen by all", n), func() bool {
		for _, b := range brokers {
			if len(b.cluster.Brokers()) != n {
				return false
			}
		}
		return true
	})
}

func TestRegistry(t *testing.T) {
	srv := meta.NewMemServer(meta.MemConfig{})
	a := startMemBroker(t, srv, brokerOpts{})
	b := startMemBroker(t, srv, brokerOpts{})
	if a.cluster.Self().ID <= 0 || b.cluster.Self().ID <= 0 || a.cluster.Self().ID == b.cluster.Self().ID {
		t.Fatalf("allocated ids %d %d", a.cluster.Self().ID, b.cluster.Self().ID)
	}
	waitBrokers(t, 2, a, b)
	changed := a.cluster.BrokersChanged()
	c := startMemBroker(t, srv, brokerOpts{id: 100})
	select {
	case <-changed:
	case <-time.After(5 * time.Second):
		t.Fatal("no change notification when a broker joined")
	}
	waitBrokers(t, 3, a, b, c)
	list := a.cluster.Brokers()
	if !sort.SliceIsSorted(list, func(i, j int) bool { return list[i].ID < list[j].ID }) || list[2].ID != 100 || list[2].Zone != "z1" || list[2].Started.IsZero() {
		t.Fatalf("brokers %+v", list)
	}

	ctx := context.Background()
	// Another broker on id 100 at other addresses: refused.
	other := srv.NewClient()
	defer other.Close()
	s, _ := other.NewSession(ctx, 2*time.Second)
	dup, _ := New(Config{Store: other, Session: s, Self: Member{ID: 100, KafkaAddr: "10.0.0.9:9092"}, Logger: quietLogger()})
	if err := dup.Start(ctx); !errors.Is(err, ErrBrokerIDInUse) {
		t.Fatalf("duplicate id: %v", err)
	}
	dup.Close()

	// The same identity again (a restart while the old session lives):
	// Start waits for the old registration to expire.
	same, _ := New(Config{Store: other, Session: s, Self: c.cluster.Self(), Logger: quietLogger()})
	started := make(chan error, 1)
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	go func() { started <- same.Start(sctx) }()
	select {
	case err := <-started:
		t.Fatalf("started while the old registration lives: %v", err)
	case <-time.After(100 * time.Millisecond): // it must still be waiting
	}
	srv.ExpireSession(c.session.ID())
	if err := <-started; err != nil {
		t.Fatalf("restart after expiry: %v", err)
	}
	waitBrokers(t, 3, a, b)
	same.Close()
	waitBrokers(t, 2, a, b)
}

func TestLookupAgrees(t *testing.T) {
	srv := meta.NewMemServer(meta.MemConfig{})
	a := startMemBroker(t, srv, brokerOpts{id: 1})
	b := startMemBroker(t, srv, brokerOpts{id: 2})
	waitBrokers(t, 2, a, b)
	const ns = "acme/orders"
	bounds := createNamespace(t, a.cluster.Catalog(), ns, 16)
	ctx := context.Background()
	// Lookups right after creation, from both brokers at once.
	var wg sync.WaitGroup
	results := make([][2]Member, 32)
	errs := make([]error, 64)
	for i := range results {
		name := catalog.PartitionName(ns, "t", int32(i))
		for j, tb := range []*testBroker{a, b} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				results[i][j], errs[2*i+j] = tb.cluster.Lookup(ctx, name)
			}()
		}
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	for i, r := range results {
		if r[0].ID != r[1].ID || r[0].KafkaAddr != r[1].KafkaAddr {
			t.Fatalf("partition %d: broker 1 says %+v, broker 2 says %+v", i, r[0], r[1])
		}
		name := catalog.PartitionName(ns, "t", int32(i))
		owner := map[int32]*testBroker{1: a, 2: b}[r[0].ID]
		if owner == nil || !owner.cluster.Owns(name) {
			t.Fatalf("partition %d: owner %d does not own it", i, r[0].ID)
		}
		// The rendezvous choice took it.
		if want := rendezvousChoice(catalog.BundleFor(ns, bounds, name), []int32{1, 2}); r[0].ID != want {
			t.Fatalf("partition %d owned by %d, rendezvous chose %d", i, r[0].ID, want)
		}
	}
	testutil.WaitForWithin(t, 5*time.Second, "every bundle owned once", func() bool { return allOwnedOnce(ns, bounds, a, b) })
	for _, tb := range []*testBroker{a, b} {
		if held := waitEventsMatch(t, tb.rec, tb.cluster); len(held) == 0 {
			t.Fatalf("broker %d owns nothing", tb.cluster.Self().ID)
		}
		// OwnerOf (cache only) agrees once the watch caught up.
		testutil.WaitForWithin(t, 5*time.Second, "caches agree", func() bool {
			for i := range 32 {
				name := catalog.PartitionName(ns, "t", int32(i))
				o, ok := tb.cluster.OwnerOf(name)
				if !ok || o.Owner.ID != results[i][0].ID || o.Version == 0 {
					return false
				}
			}
			return true
		})
	}
	if _, err := a.cluster.Lookup(ctx, catalog.PartitionName("acme/none", "t", 0)); !errors.Is(err, catalog.ErrNamespaceNotFound) {
		t.Fatalf("lookup in a missing namespace: %v", err)
	}
	if _, err := a.cluster.Lookup(ctx, "orders"); !errors.Is(err, catalog.ErrInvalidTopicName) {
		t.Fatalf("lookup of a bad name: %v", err)
	}
}

func TestRendezvousSpreadsBundles(t *testing.T) {
	srv := meta.NewMemServer(meta.MemConfig{})
	brokers := []*testBroker{
		startMemBroker(t, srv, brokerOpts{id: 1}),
		startMemBroker(t, srv, brokerOpts{id: 2}),
		startMemBroker(t, srv, brokerOpts{id: 3}),
	}
	waitBrokers(t, 3, brokers...)
	bounds := createNamespace(t, brokers[0].cluster.Catalog(), "acme/wide", 64)
	testutil.WaitForWithin(t, 5*time.Second, "64 bundles owned", func() bool { return allOwnedOnce("acme/wide", bounds, brokers...) })
	for _, tb := range brokers {
		n := len(tb.cluster.OwnedBundles())
		if n < 5 {
			t.Fatalf("broker %d owns %d of 64 bundles", tb.cluster.Self().ID, n)
		}
	}
}

// TestFailover: a broker's session expires; it releases everything, and the
// surviving broker (the rendezvous choice among the living) takes every
// orphaned bundle promptly, without waiting out the grace period.
func TestFailover(t *testing.T) {
	srv := meta.NewMemServer(meta.MemConfig{})
	a := startMemBroker(t, srv, brokerOpts{id: 1})
	b := startMemBroker(t, srv, brokerOpts{id: 2})
	waitBrokers(t, 2, a, b)
	const ns = "acme/orders"
	bounds := createNamespace(t, a.cluster.Catalog(), ns, 16)
	testutil.WaitForWithin(t, 5*time.Second, "every bundle owned once", func() bool { return allOwnedOnce(ns, bounds, a, b) })
	aHeld := waitEventsMatch(t, a.rec, a.cluster)
	if len(aHeld) == 0 || len(b.cluster.OwnedBundles()) == 0 {
		t.Fatalf("rendezvous left a broker empty: a=%d b=%d", len(aHeld), len(b.cluster.OwnedBundles()))
	}

	var moved catalog.Bundle
	for bundle := range aHeld {
		moved = bundle
	}
	testutil.WaitForWithin(t, 5*time.Second, "b's cache shows a's ownership", func() bool {
		o, ok := b.cluster.BundleOwner(moved)
		return ok && o.Owner.ID == 1
	})
	before, _ := b.cluster.BundleOwner(moved)

	expired := time.Now()
	srv.ExpireSession(a.session.ID())
	select {
	case <-a.cluster.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("Done not closed after the session expired")
	}
	testutil.WaitForWithin(t, 2*time.Second, "the dead broker's release events", func() bool {
		held, _, releases := a.rec.snapshot()
		return len(held) == 0 && releases == len(aHeld)
	})
	if n := len(a.cluster.OwnedBundles()); n != 0 {
		t.Fatalf("dead broker still owns %d bundles", n)
	}
	testutil.WaitForWithin(t, time.Second, "survivor owns every bundle", func() bool { return allOwnedOnce(ns, bounds, b) })
	t.Logf("takeover of %d bundles in %v", len(aHeld), time.Since(expired))
	held := waitEventsMatch(t, b.rec, b.cluster)
	for bundle := range aHeld {
		if !held[bundle] {
			t.Fatalf("survivor got no acquire event for %s", bundle)
		}
	}
	if after, ok := b.cluster.BundleOwner(moved); !ok || after.Owner.ID != 2 || after.Version <= before.Version {
		t.Fatalf("ownership of %s: before %+v, after %+v: the epoch must grow", moved, before, after)
	}
	ctx := context.Background()
	if _, err := a.cluster.Lookup(ctx, catalog.PartitionName(ns, "t", 0)); !errors.Is(err, ErrSessionLost) {
		t.Fatalf("lookup on the dead broker: %v", err)
	}
	if o, err := b.cluster.Lookup(ctx, catalog.PartitionName(ns, "t", 0)); err != nil || o.ID != 2 {
		t.Fatalf("lookup on the survivor: %+v %v", o, err)
	}
	// A broker's registration left with its session.
	waitBrokers(t, 1, b)
}

// TestGracefulClose: Close releases everything at once and the other broker
// takes over within a watch round trip.
func TestGracefulClose(t *testing.T) {
	srv := meta.NewMemServer(meta.MemConfig{})
	a := startMemBroker(t, srv, brokerOpts{id: 1})
	b := startMemBroker(t, srv, brokerOpts{id: 2})
	waitBrokers(t, 2, a, b)
	bounds := createNamespace(t, a.cluster.Catalog(), "acme/orders", 8)
	testutil.WaitForWithin(t, 5*time.Second, "every bundle owned once", func() bool { return allOwnedOnce("acme/orders", bounds, a, b) })
	if err := a.cluster.Close(); err != nil {
		t.Fatal(err)
	}
	held, acquires, releases := a.rec.snapshot()
	if len(held) != 0 || acquires != releases || acquires == 0 {
		t.Fatalf("after Close: held %d, %d acquires, %d releases", len(held), acquires, releases)
	}
	testutil.WaitForWithin(t, time.Second, "survivor owns every bundle", func() bool { return allOwnedOnce("acme/orders", bounds, b) })
	select {
	case <-a.cluster.Done():
	default:
		t.Fatal("Done open after Close")
	}
	if _, err := a.cluster.Lookup(context.Background(), catalog.PartitionName("acme/orders", "t", 0)); !errors.Is(err, ErrClosed) {
		t.Fatalf("lookup after close: %v", err)
	}
}

// TestGracePeriod: the rendezvous choice is registered but not running a
// Cluster (stalled). The other broker takes its bundles after the grace
// period; a Lookup takes one after LookupWait, without waiting for the grace.
func TestGracePeriod(t *testing.T) {
	for _, tt := range []struct {
		name         string
		acquireGrace time.Duration
		lookup       bool
	}{
		{"grace", 300 * time.Millisecond, false},
		{"lookup", time.Minute, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			srv := meta.NewMemServer(meta.MemConfig{})
			ctx := context.Background()
			stalled := srv.NewClient()
			defer stalled.Close()
			s, _ := stalled.NewSession(ctx, 5*time.Second)
			if _, err := s.CreateEphemeral(ctx, brokerKey(7), []byte(`{"id":7,"kafkaAddr":"10.0.0.7:9092"}`)); err != nil {
				t.Fatal(err)
			}
			a := startMemBroker(t, srv, brokerOpts{id: 1, acquireGrace: tt.acquireGrace, lookupWait: 100 * time.Millisecond})
			waitBrokers(t, 2, a)
			start := time.Now()
			bounds := createNamespace(t, a.cluster.Catalog(), "acme/orders", 16)
			var stalledBundles []catalog.Bundle
			for _, b := range catalog.BundlesOf("acme/orders", bounds) {
				if rendezvousChoice(b, []int32{1, 7}) == 7 {
					stalledBundles = append(stalledBundles, b)
				}
			}
			if len(stalledBundles) == 0 {
				t.Fatal("test needs bundles that rendezvous gives to broker 7")
			}
			if !tt.lookup {
				testutil.WaitForWithin(t, 10*time.Second, "grace takeover", func() bool { return allOwnedOnce("acme/orders", bounds, a) })
				if d := time.Since(start); d < tt.acquireGrace {
					t.Fatalf("took the stalled broker's bundles after %v, grace is %v", d, tt.acquireGrace)
				}
				return
			}
			var name string
			for i := int32(0); name == ""; i++ {
				n := catalog.PartitionName("acme/orders", "t", i)
				if catalog.BundleFor("acme/orders", bounds, n) == stalledBundles[0] {
					name = n
				}
			}
			o, err := a.cluster.Lookup(ctx, name)
			if err != nil || o.ID != 1 || !a.cluster.Owns(name) {
				t.Fatalf("lookup: %+v %v", o, err)
			}
			if d := time.Since(start); d < 100*time.Millisecond || d > 30*time.Second {
				t.Fatalf("lookup answered after %v: LookupWait is 100ms, grace 1m", d)
			}
			if a.cluster.OwnsBundle(stalledBundles[len(stalledBundles)-1]) && len(stalledBundles) > 1 {
				t.Fatal("took a bundle of the stalled broker before the grace period without a lookup")
			}
		})
	}
}

// TestSplitMovesOwnership: after a split the owner releases the old bundle
// and the two halves are owned.
func TestSplitMovesOwnership(t *testing.T) {
	srv := meta.NewMemServer(meta.MemConfig{})
	a := startMemBroker(t, srv, brokerOpts{id: 1})
	bounds := createNamespace(t, a.cluster.Catalog(), "acme/orders", 2)
	testutil.WaitForWithin(t, 5*time.Second, "owned", func() bool { return allOwnedOnce("acme/orders", bounds, a) })
	first := catalog.BundlesOf("acme/orders", bounds)[0]
	halves, err := a.cluster.Catalog().SplitBundle(context.Background(), first)
	if err != nil {
		t.Fatal(err)
	}
	testutil.WaitForWithin(t, 5*time.Second, "halves owned, old bundle released", func() bool {
		held, _, _ := a.rec.snapshot()
		return held[halves[0]] && held[halves[1]] && !held[first] && len(a.cluster.OwnedBundles()) == 3
	})
}

// TestUnload: a voluntary release deletes the key after the release event;
// the bundle is then placed again (here on the only broker).
func TestUnload(t *testing.T) {
	srv := meta.NewMemServer(meta.MemConfig{})
	a := startMemBroker(t, srv, brokerOpts{id: 1})
	bounds := createNamespace(t, a.cluster.Catalog(), "acme/orders", 2)
	testutil.WaitForWithin(t, 5*time.Second, "owned", func() bool { return allOwnedOnce("acme/orders", bounds, a) })
	b := catalog.BundlesOf("acme/orders", bounds)[1]
	if err := a.cluster.Unload(context.Background(), b); err != nil {
		t.Fatal(err)
	}
	if err := a.cluster.Unload(context.Background(), catalog.Bundle{Namespace: "acme/none", Lower: 0, Upper: 1}); !errors.Is(err, ErrNotOwner) {
		t.Fatalf("unload of a bundle not owned: %v", err)
	}
	testutil.WaitForWithin(t, 5*time.Second, "reacquired", func() bool {
		_, acquires, releases := a.rec.snapshot()
		return acquires == 3 && releases == 1 && a.cluster.OwnsBundle(b)
	})
}

// TestDisconnectedBrokerLosesSession: a partitioned broker's session expires
// on the server; it hears of it (Done), releases everything, and its bundles
// move to the connected broker.
func TestDisconnectedBrokerLosesSession(t *testing.T) {
	srv := meta.NewMemServer(meta.MemConfig{})
	a := startMemBroker(t, srv, brokerOpts{id: 1, ttl: 300 * time.Millisecond})
	b := startMemBroker(t, srv, brokerOpts{id: 2, ttl: 2 * time.Second})
	waitBrokers(t, 2, a, b)
	bounds := createNamespace(t, a.cluster.Catalog(), "acme/orders", 8)
	testutil.WaitForWithin(t, 5*time.Second, "owned", func() bool { return allOwnedOnce("acme/orders", bounds, a, b) })
	a.client.Disconnect()
	testutil.WaitForWithin(t, 5*time.Second, "survivor owns all", func() bool { return allOwnedOnce("acme/orders", bounds, b) })
	// The memory store tells a partitioned session's owner when it expired.
	select {
	case <-a.cluster.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("partitioned broker never noticed its session ended")
	}
	testutil.WaitForWithin(t, 2*time.Second, "releases on the partitioned broker", func() bool {
		held, _, _ := a.rec.snapshot()
		return len(held) == 0
	})
	a.client.Reconnect()
}

// TestNoGoroutineLeak: Start then Close leaves no goroutine behind.
func TestNoGoroutineLeak(t *testing.T) {
	srv := meta.NewMemServer(meta.MemConfig{})
	client := srv.NewClient()
	ctx := context.Background()
	session, _ := client.NewSession(ctx, 2*time.Second)
	if err := catalog.New(client).EnsureDefaults(ctx); err != nil {
		t.Fatal(err)
	}
	before := runtime.NumGoroutine()
	for range 3 {
		c, _ := New(Config{Store: client, Session: session, Self: Member{ID: 1, KafkaAddr: "a:1"}, Logger: quietLogger()})
		if err := c.Start(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Lookup(ctx, catalog.PartitionName(catalog.DefaultNamespace, "t", 0)); err != nil {
			t.Fatal(err)
		}
		c.Close()
	}
	testutil.WaitForWithin(t, 2*time.Second, "goroutines back to the baseline", func() bool { return runtime.NumGoroutine() <= before })
	client.Close()
}

// TestWatchCompactedRelists: a watch that breaks with its history compacted
// is replaced by a fresh listing, and the caches converge.
func TestWatchCompactedRelists(t *testing.T) {
	srv := meta.NewMemServer(meta.MemConfig{})
	a := startMemBroker(t, srv, brokerOpts{id: 1})
	bounds := createNamespace(t, a.cluster.Catalog(), "acme/one", 2)
	testutil.WaitForWithin(t, 5*time.Second, "owned", func() bool { return allOwnedOnce("acme/one", bounds, a) })
	// Break every watch, and make its resumption point unavailable.
	srv.Compact(srv.Revision())
	srv.DisconnectWatches()
	bounds2 := createNamespace(t, a.cluster.Catalog(), "acme/two", 4)
	testutil.WaitForWithin(t, 5*time.Second, "new namespace owned after relist", func() bool { return allOwnedOnce("acme/two", bounds2, a) })
	testutil.WaitForWithin(t, 5*time.Second, "old namespace still owned", func() bool { return allOwnedOnce("acme/one", bounds, a) })
}

// TestForeignDeleteOfOwnership: when someone else deletes our ownership key
// (an operator), we hear of it, release, and the bundle is placed again.
func TestForeignDeleteOfOwnership(t *testing.T) {
	srv := meta.NewMemServer(meta.MemConfig{})
	a := startMemBroker(t, srv, brokerOpts{id: 1})
	bounds := createNamespace(t, a.cluster.Catalog(), "acme/orders", 2)
	testutil.WaitForWithin(t, 5*time.Second, "owned", func() bool { return allOwnedOnce("acme/orders", bounds, a) })
	b := catalog.BundlesOf("acme/orders", bounds)[0]
	op := srv.NewClient()
	defer op.Close()
	kv, err := op.Get(context.Background(), ownershipKey(b))
	if err != nil {
		t.Fatal(err)
	}
	if err := op.Delete(context.Background(), kv.Key, kv.Version); err != nil {
		t.Fatal(err)
	}
	testutil.WaitForWithin(t, 5*time.Second, "released and reacquired", func() bool {
		_, acquires, releases := a.rec.snapshot()
		o, ok := a.cluster.BundleOwner(b)
		return releases == 1 && acquires == 3 && ok && o.Version > kv.Version
	})
}

// TestHandoffOnJoin: with HandoffAfter set, a broker that joins late gets
// exactly the bundles rendezvous gives it, each moved once.
func TestHandoffOnJoin(t *testing.T) {
	srv := meta.NewMemServer(meta.MemConfig{})
	a := startMemBroker(t, srv, brokerOpts{id: 1, handoffAfter: 200 * time.Millisecond})
	bounds := createNamespace(t, a.cluster.Catalog(), "acme/orders", 32)
	testutil.WaitForWithin(t, 5*time.Second, "first broker owns all", func() bool { return allOwnedOnce("acme/orders", bounds, a) })
	joined := time.Now()
	b := startMemBroker(t, srv, brokerOpts{id: 2, handoffAfter: 200 * time.Millisecond})
	want := map[catalog.Bundle]int32{}
	toB := 0
	for _, bundle := range catalog.BundlesOf("acme/orders", bounds) {
		want[bundle] = rendezvousChoice(bundle, []int32{1, 2})
		if want[bundle] == 2 {
			toB++
		}
	}
	testutil.WaitForWithin(t, 5*time.Second, "rendezvous placement", func() bool {
		owners := ownedBy(a, b)
		for bundle, id := range want {
			if len(owners[bundle]) != 1 || owners[bundle][0] != id {
				return false
			}
		}
		return true
	})
	if d := time.Since(joined); d < 200*time.Millisecond {
		t.Fatalf("handoff after %v, before HandoffAfter", d)
	}
	waitEventsMatch(t, b.rec, b.cluster)
	_, acquiresB, releasesB := b.rec.snapshot()
	_, _, releasesA := a.rec.snapshot()
	if acquiresB != toB || releasesB != 0 || releasesA != toB {
		t.Fatalf("%d bundles should move: b acquired %d released %d, a released %d", toB, acquiresB, releasesB, releasesA)
	}
}

// TestUnloadDeleteFailsAdopts: when Unload cannot delete the ownership key
// (the store is unavailable), the key would keep the bundle from everyone;
// the broker adopts its own key again instead of leaving it ownerless.
func TestUnloadDeleteFailsAdopts(t *testing.T) {
	srv := meta.NewMemServer(meta.MemConfig{})
	a := startMemBroker(t, srv, brokerOpts{id: 1})
	bounds := createNamespace(t, a.cluster.Catalog(), "acme/orders", 2)
	testutil.WaitForWithin(t, 5*time.Second, "owned", func() bool { return allOwnedOnce("acme/orders", bounds, a) })
	b := catalog.BundlesOf("acme/orders", bounds)[0]
	srv.SetFault(func(op meta.Op, key string) error {
		if op == meta.OpDelete && strings.HasPrefix(key, OwnershipPrefix) {
			return meta.ErrUnavailable
		}
		return nil
	})
	if err := a.cluster.Unload(context.Background(), b); !errors.Is(err, meta.ErrUnavailable) {
		t.Fatalf("unload with the store failing deletes: %v", err)
	}
	srv.SetFault(nil)
	testutil.WaitForWithin(t, 5*time.Second, "own key adopted", func() bool {
		_, acquires, releases := a.rec.snapshot()
		return a.cluster.OwnsBundle(b) && acquires == 3 && releases == 1
	})
}

// TestLookupDuringUnload: between an Unload's release of a bundle and the
// store showing its key deleted, the owners cache still names this broker;
// Lookup must not answer "this broker" then (a client sent here would be
// refused the topic) but wait for what the store shows next.
func TestLookupDuringUnload(t *testing.T) {
	srv := meta.NewMemServer(meta.MemConfig{})
	a := startMemBroker(t, srv, brokerOpts{id: 1})
	bounds := createNamespace(t, a.cluster.Catalog(), "acme/orders", 2)
	testutil.WaitForWithin(t, 5*time.Second, "owned", func() bool { return allOwnedOnce("acme/orders", bounds, a) })
	topic := catalog.PartitionName("acme/orders", "t", 0)
	b, err := a.cluster.BundleOf(topic)
	if err != nil {
		t.Fatal(err)
	}
	// Unload's first step (the bundle released), the key's delete not yet
	// made.
	c := a.cluster
	c.mu.Lock()
	v := c.owned[b]
	delete(c.owned, b)
	c.unloading[b] = v
	c.events.push(event{bundle: b})
	c.notifyOwnersLocked()
	c.mu.Unlock()
	done, cancel := context.WithCancel(context.Background())
	cancel() // nothing may change while it looks: it must answer from what it has, or wait
	if m, err := c.Lookup(done, topic); err == nil {
		t.Fatalf("lookup during the unload answered broker %d", m.ID)
	}
	// The delete lands; the bundle is placed again, on the only broker.
	if err := a.client.Delete(context.Background(), ownershipKey(b), v); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if m, err := c.Lookup(ctx, topic); err != nil || m.ID != 1 {
		t.Fatalf("lookup after the unload: broker %d, %v", m.ID, err)
	}
}
