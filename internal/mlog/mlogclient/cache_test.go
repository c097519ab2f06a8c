package mlogclient

import (
	"context"
	"sync/atomic"
	"testing"

	"quire/internal/loop"
	"quire/internal/mlog"
)

func TestEntryCacheIsBoundedByCountAndBytes(t *testing.T) {
	c := newEntryCache(100, 1000, nil)
	pos := func(i int) mlog.Position { return mlog.Position{LedgerID: 1, EntryID: int64(i)} }
	// 10 entries of 300 bytes: the byte bound keeps the newest 3.
	for i := range 10 {
		c.put(pos(i), make([]byte, 300))
	}
	if len(c.entries) != 3 || c.bytes != 900 {
		t.Fatalf("%d entries, %d bytes, want 3 and 900", len(c.entries), c.bytes)
	}
	for i := range 10 {
		if _, ok := c.get(pos(i)); ok != (i >= 7) {
			t.Fatalf("entry %d cached: %v", i, ok)
		}
	}
	// Small entries: the count bound keeps the newest 100.
	for i := 10; i < 10_000; i++ {
		c.put(pos(i), make([]byte, 1))
	}
	if len(c.entries) != 100 || c.bytes != 100 {
		t.Fatalf("%d entries, %d bytes, want 100 and 100", len(c.entries), c.bytes)
	}
	if _, ok := c.get(pos(9_900)); !ok {
		t.Fatal("newest entries evicted")
	}
	// An entry larger than the whole cache is not kept (and evicts nothing).
	c.put(pos(20_000), make([]byte, 2000))
	if _, ok := c.get(pos(20_000)); ok || len(c.entries) != 100 {
		t.Fatal("an oversized entry was cached")
	}
	if len(c.order)-c.head != 100 {
		t.Fatalf("order holds %d live positions", len(c.order)-c.head)
	}
}

// TestEntryCachesShareABudget: two caches under one budget hold no more
// than it together. A cache that needs room evicts its own oldest entries
// (never the other's) and keeps an entry out when that is not enough; a
// dropped cache gives its bytes back.
func TestEntryCachesShareABudget(t *testing.T) {
	budget := NewReadAheadBudget(1000)
	a, b := newEntryCache(100, 800, budget), newEntryCache(100, 800, budget)
	pos := func(i int) mlog.Position { return mlog.Position{LedgerID: 1, EntryID: int64(i)} }
	for i := range 6 {
		a.put(pos(i), make([]byte, 100)) // a holds 600
	}
	for i := range 6 {
		b.put(pos(i), make([]byte, 100)) // b gets 400, then evicts its own
	}
	if a.bytes+b.bytes > budget.Size() || budget.InUse() != a.bytes+b.bytes {
		t.Fatalf("caches hold %d + %d bytes, budget %d in use of %d", a.bytes, b.bytes, budget.InUse(), budget.Size())
	}
	if a.bytes != 600 || b.bytes != 400 {
		t.Fatalf("a holds %d, b %d: want 600 and 400 (b evicts only its own)", a.bytes, b.bytes)
	}
	if _, ok := b.get(pos(5)); !ok {
		t.Fatal("b's newest entry was not kept")
	}
	// An entry larger than the budget left after b's own entries are gone
	// stays out.
	b.put(pos(100), make([]byte, 500))
	if _, ok := b.get(pos(100)); ok || b.bytes != 0 {
		t.Fatalf("b kept an entry the budget has no room for (b holds %d)", b.bytes)
	}
	a.drop()
	b.drop()
	if budget.InUse() != 0 {
		t.Fatalf("%d bytes of budget held after both caches were dropped", budget.InUse())
	}
}

// A call that gives up (its context ended) must never run its function
// later: callers read what the function writes once call returns, and the
// race detector caught Ledgers doing so while the loop was still writing.
func TestAbandonedCallNeverRuns(t *testing.T) {
	tp := &ManagedLedger{loop: loop.New(loop.Config{QueueBound: 8})}
	go tp.loop.Run()
	defer tp.loop.Stop()
	release := make(chan struct{})
	// The loop, held up by the first function.
	if err := tp.loop.Post(context.Background(), func() { <-release }); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var ran atomic.Bool
	if err := tp.call(ctx, func() { ran.Store(true) }); err == nil {
		t.Fatal("call with an ended context succeeded while the loop was busy")
	}
	close(release)
	// A later call runs after the abandoned one would have: if that one
	// had run, ran is set by now.
	if err := tp.call(context.Background(), func() {}); err != nil {
		t.Fatal(err)
	}
	if ran.Load() {
		t.Fatal("the abandoned function ran")
	}
}
