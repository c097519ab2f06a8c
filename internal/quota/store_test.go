package quota_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"quire/internal/meta"
	"quire/internal/quota"
	"quire/internal/testutil"
)

// TestQuotaStoreRoundTrip: what one broker alters, another's copy gets;
// removing the last key deletes the entity; validate_only changes nothing;
// garbage in the store is ignored.
func TestQuotaStoreRoundTrip(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	srv := meta.NewMemServer(meta.MemConfig{})
	ca, cb := srv.NewClient(), srv.NewClient()
	t.Cleanup(func() { ca.Close(); cb.Close() })
	if _, err := ca.Create(ctx, quota.KeyPrefix+"garbage", []byte("{")); err != nil {
		t.Fatal(err)
	}
	a, err := quota.Open(ctx, ca, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Close)
	b, err := quota.Open(ctx, cb, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)

	alice := quota.Entity{User: quota.Name("alice/x")}
	if err := a.Alter(ctx, alice, []quota.Op{{Key: quota.ProducerByteRate, Value: 1 << 20}}, true); err != nil {
		t.Fatal(err)
	}
	if !a.Snapshot().Empty() {
		t.Fatal("validate_only stored a quota")
	}
	if err := a.Alter(ctx, alice, []quota.Op{{Key: quota.ProducerByteRate, Value: 1 << 20}, {Key: quota.RequestPercentage, Value: 50}}, false); err != nil {
		t.Fatal(err)
	}
	if got := a.Snapshot().Get(alice); got[quota.ProducerByteRate] != 1<<20 || got[quota.RequestPercentage] != 50 {
		t.Fatalf("altering broker's copy: %v", got)
	}
	testutil.WaitFor(t, "the other broker's copy to have alice's quota", func() bool {
		return b.Snapshot().Get(alice)[quota.ProducerByteRate] == 1<<20
	})
	if err := b.Alter(ctx, alice, []quota.Op{{Key: quota.RequestPercentage, Remove: true}}, false); err != nil {
		t.Fatal(err)
	}
	if got := b.Snapshot().Get(alice); len(got) != 1 {
		t.Fatalf("after removing a key: %v", got)
	}
	if err := b.Alter(ctx, alice, []quota.Op{{Key: quota.ProducerByteRate, Remove: true}}, false); err != nil {
		t.Fatal(err)
	}
	if _, err := cb.Get(ctx, quota.Key(alice)); !errors.Is(err, meta.ErrNotFound) {
		t.Fatalf("entity without quotas still stored: %v", err)
	}
	testutil.WaitFor(t, "the first broker's copy to drop alice", func() bool { return a.Snapshot().Empty() })
	if err := a.Alter(ctx, quota.Entity{User: quota.Name("x")}, []quota.Op{{Key: "bogus", Value: 1}}, false); !errors.Is(err, quota.ErrInvalid) {
		t.Fatalf("bogus key: %v", err)
	}
	// The default and a named entity never share a key.
	if quota.Key(quota.Entity{User: quota.DefaultPart}) == quota.Key(quota.Entity{User: quota.Name("<default>")}) {
		t.Fatal("<default> user and the default share a key")
	}
}
