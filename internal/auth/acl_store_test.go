package auth_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"slices"
	"testing"
	"time"

	"quire/internal/auth"
	"quire/internal/meta"
	"quire/internal/testutil"
)

func quietLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func openACLs(t *testing.T, store meta.Store) *auth.ACLStore {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := auth.OpenACLStore(ctx, store, quietLog())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

var everyACL = auth.ACLFilter{ResourceType: auth.ResourceAny, PatternType: auth.PatternAny, Operation: auth.OpAny, Permission: auth.PermissionAny}

// runACLStoreScenario: what one broker creates, a second broker's copy
// gets; a delete by filter removes exactly what it matched, everywhere;
// creating twice is a no-op.
func runACLStoreScenario(t *testing.T, storeA, storeB meta.Store) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	a, b := openACLs(t, storeA), openACLs(t, storeB)
	readAlice := allow(topic, literal, "orders", "User:alice", auth.OpRead)
	writeApp := allow(topic, prefix, "app-", "User:bob", auth.OpWrite)
	denyHost := onHost(deny(topic, literal, "orders", "User:*", auth.OpRead), "10.1.2.3")
	for _, acl := range []auth.ACL{readAlice, writeApp, denyHost, readAlice} {
		if err := a.Create(ctx, acl); err != nil {
			t.Fatalf("create %v: %v", acl, err)
		}
	}
	// The creating broker's copy has them as soon as Create returns.
	if got := a.List(everyACL); len(got) != 3 {
		t.Fatalf("creating broker lists %d ACLs, want 3: %v", len(got), got)
	}
	testutil.WaitFor(t, "the other broker's copy to have the ACLs", func() bool { return len(b.List(everyACL)) == 3 })
	az := auth.NewAuthorizer(b, auth.AuthorizerConfig{})
	alice := auth.Requester{Principal: auth.User("alice"), Host: netip.MustParseAddr("127.0.0.1")}
	if !az.Authorize(alice, auth.OpRead, auth.ResourceTopic, "orders") {
		t.Fatal("alice may not read orders on the other broker")
	}
	aliceThere := alice
	aliceThere.Host = netip.MustParseAddr("10.1.2.3")
	if az.Authorize(aliceThere, auth.OpRead, auth.ResourceTopic, "orders") {
		t.Fatal("alice may read orders from the denied host")
	}

	if err := a.Create(ctx, auth.ACL{ResourceType: auth.ResourceCluster, ResourceName: "x", PatternType: literal,
		Principal: auth.User("a"), Host: "*", Operation: auth.OpAlter, Permission: auth.PermissionAllow}); err == nil {
		t.Fatal("stored a CLUSTER ACL not named kafka-cluster")
	}

	bobFilter := everyACL
	bobFilter.Principal = ptr("User:bob")
	deleted, err := b.Delete(ctx, bobFilter)
	if err != nil {
		t.Fatal(err)
	}
	if len(deleted) != 1 || deleted[0] != writeApp {
		t.Fatalf("deleted %v, want [%v]", deleted, writeApp)
	}
	if got := b.List(everyACL); len(got) != 2 || slices.Contains(got, writeApp) {
		t.Fatalf("deleting broker still lists %v", got)
	}
	testutil.WaitFor(t, "the delete to reach the first broker", func() bool { return len(a.List(everyACL)) == 2 })
	again, err := a.Delete(ctx, bobFilter)
	if err != nil || len(again) != 0 {
		t.Fatalf("second delete: %v, %v", again, err)
	}
	matchOrders := everyACL
	matchOrders.ResourceName, matchOrders.PatternType = ptr("orders"), auth.PatternMatch
	if got := a.List(matchOrders); len(got) != 2 {
		t.Fatalf("MATCH orders lists %v", got)
	}
}

func TestACLStoreMem(t *testing.T) {
	srv := meta.NewMemServer(meta.MemConfig{})
	ca, cb := srv.NewClient(), srv.NewClient()
	t.Cleanup(func() { ca.Close(); cb.Close() })
	runACLStoreScenario(t, ca, cb)
}

// TestACLStoreFollowsAfterBrokenWatch: a copy whose watch breaks (and
// whose history was compacted meanwhile) lists again and converges; an
// undecodable value under the prefix is left out, not fatal.
func TestACLStoreFollowsAfterBrokenWatch(t *testing.T) {
	ctx := context.Background()
	srv := meta.NewMemServer(meta.MemConfig{})
	ca, cb := srv.NewClient(), srv.NewClient()
	t.Cleanup(func() { ca.Close(); cb.Close() })
	if _, err := ca.Create(ctx, auth.ACLKeyPrefix+"garbage", []byte("{not json")); err != nil {
		t.Fatal(err)
	}
	a, b := openACLs(t, ca), openACLs(t, cb)
	if got := b.List(everyACL); len(got) != 0 {
		t.Fatalf("listed %v from garbage", got)
	}
	srv.DisconnectWatches()
	for i := range 5 {
		if err := a.Create(ctx, allow(topic, literal, fmt.Sprint("t", i), "User:alice", auth.OpRead)); err != nil {
			t.Fatal(err)
		}
	}
	srv.Compact(srv.Revision())
	srv.DisconnectWatches()
	if err := a.Create(ctx, allow(topic, literal, "last", "User:alice", auth.OpRead)); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, "the other copy to converge", func() bool { return len(b.List(everyACL)) == 6 })
}

func TestACLStoreEtcd(t *testing.T) {
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
	client := func() meta.Store {
		s, err := meta.NewEtcd(meta.EtcdConfig{Endpoints: []string{e.Endpoint()}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	runACLStoreScenario(t, client(), client())
}
