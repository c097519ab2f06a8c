package mlogclient

import (
	"context"
	"sync/atomic"
	"testing"

	"quire/internal/loop"
	"quire/internal/mlog"
)

func TestEntryCacheIsBoundedByCountAndBytes(t *testing.T) {
	c := newEntryCache(100, 1000)
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
