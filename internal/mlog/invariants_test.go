//go:build invariants

package mlog

import (
	"fmt"
	"strings"
	"testing"
)

// expectInvariantPanic runs input and asserts that it panics with a message
// naming the broken invariant (want is part of that message).
func expectInvariantPanic(t *testing.T, want string, input func()) {
	t.Helper()
	msg := func() (msg string) {
		defer func() {
			if p := recover(); p != nil {
				msg = fmt.Sprint(p)
			}
		}()
		input()
		return ""
	}()
	if msg == "" {
		t.Fatalf("no panic, want invariant %q violated", want)
	}
	if !strings.Contains(msg, "invariant violated: "+want) {
		t.Fatalf("panic %q, want invariant %q violated", msg, want)
	}
	t.Log(msg)
}

// TestInvariantsFire corrupts a cursor, a range set and a managed ledger the
// way a bug would and checks that the next input stops at once, naming the
// invariant and the values.
func TestInvariantsFire(t *testing.T) {
	t.Run("cursor range at markDelete", func(t *testing.T) {
		c := newTestCursor(t, p(4, 2), CursorOptions{})
		c.Ack(p(4, 5))
		// An acknowledged range left behind at or below markDelete.
		c.acked.tree.ReplaceOrInsert(Range{Lo: p(4, 1), Hi: p(4, 1)})
		expectInvariantPanic(t, "every range is above markDelete with an entry between: markDelete 4:2, first range [4:1, 4:1]",
			func() { c.Ack(p(4, 9)) })
	})
	t.Run("cursor mark-delete moves back", func(t *testing.T) {
		c := newTestCursor(t, p(4, 2), CursorOptions{})
		c.AckCumulative(p(4, 7))
		c.markDelete = p(4, 6)
		expectInvariantPanic(t, "the mark-delete position never moves back: 4:6 after 4:7", func() { c.Ack(p(4, 9)) })
	})
	t.Run("range set overlapping ranges", func(t *testing.T) {
		var s RangeSet
		s.Add(Range{p(1, 0), p(1, 4)})
		s.tree.ReplaceOrInsert(Range{p(1, 3), p(1, 8)})
		expectInvariantPanic(t, "ranges are sorted, disjoint and not adjacent: range 1 [1:3, 1:8] follows [1:0, 1:4]",
			func() { s.Add(Range{p(2, 0), p(2, 0)}) })
	})
	t.Run("managed ledger second record CAS", func(t *testing.T) {
		e, o, _ := threeLedgers(t, Config{})
		o.tick() // the uncorrupted topic passes its checks
		// Two record CASes built from the same version: the second is
		// sent without looking at recordBusy.
		o.tp.casRecord(pendingMeta{purpose: metaRecordSync}, o.tp.Ledgers())
		o.tp.casRecord(pendingMeta{purpose: metaRecordSync}, o.tp.Ledgers())
		expectInvariantPanic(t, "at most one record CAS in flight: 2 (recordBusy true)", func() { o.tp.Tick(e.now) })
	})
	t.Run("managed ledger queue overtaken", func(t *testing.T) {
		e, o, _ := threeLedgers(t, Config{})
		o.tp.queue = append(o.tp.queue, queuedAppend{token: 99})
		expectInvariantPanic(t, "appends queue only while no ledger takes them: 2 queued in phase open without a rollover",
			func() { o.tp.Append(100, []byte("x"), e.now) })
	})
}
