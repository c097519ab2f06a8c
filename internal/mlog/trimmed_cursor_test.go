package mlog

import (
	"errors"
	"slices"
	"testing"
	"time"
)

// TestManagedLedgerTakeoverCursorBehindTrim: the owner trims a ledger once
// the cursor acknowledged all of it, but crashes before persisting that
// acknowledgement; the snapshot the next owner restores still has a hole in
// the trimmed ledger. The hole's entry is gone, so no consumer can ever
// acknowledge it: the new owner must move the cursor to the first ledger it
// has, or the mark-delete position (and with it every later trim) is stuck
// for good. Found by the invariant "an entry lies between neighbouring
// ranges" (quire sim topic, seed 44, -tags invariants).
func TestManagedLedgerTakeoverCursorBehindTrim(t *testing.T) {
	e, o, ls := threeLedgers(t, Config{CursorPersistInterval: time.Hour})
	first, second := ls[0].ID, ls[1].ID
	// Persisted: a hole at first:0, then first:1..2 acknowledged.
	for _, p := range []Position{{first, 1}, {first, 2}} {
		if err := o.tp.Ack("sub", p, e.now); err != nil {
			t.Fatal(err)
		}
	}
	o.tick()
	if st := o.tp.Stats().Cursors[0]; st.Unpersisted || st.Holes != 1 {
		t.Fatalf("cursor not persisted with its hole: %+v", st)
	}
	// In memory only (the next persist is an hour away): first:0 too, and
	// the first ledger is trimmed.
	if err := o.tp.Ack("sub", Position{first, 0}, e.now); err != nil {
		t.Fatal(err)
	}
	o.tick()
	if got := ledgerIDs(e.record("t").Ledgers); slices.Contains(got, first) {
		t.Fatalf("ledger %d not trimmed: record lists %v", first, got)
	}

	// The owner crashes; the next one restores the older snapshot.
	b := e.newOwner(Config{Rollover: noRoll})
	b.open()
	c, ok := b.tp.Cursor("sub")
	if !ok {
		t.Fatal("cursor lost in takeover")
	}
	if md := c.MarkDelete(); md.Less(BeforeLedger(second)) || c.Holes() != 0 {
		t.Fatalf("restored cursor md=%v ranges=%v: still behind the trimmed ledger %d", md, slices.Collect(c.AckedRanges()), first)
	}
	if err := b.tp.Ack("sub", Position{first, 0}, e.now); !errors.Is(err, ErrNoSuchEntry) {
		t.Fatalf("ack of the trimmed entry: %v, want ErrNoSuchEntry", err)
	}
	// Acknowledging all of the second ledger lets it be trimmed.
	for entry := range ls[1].Entries {
		if err := b.tp.Ack("sub", Position{second, entry}, e.now); err != nil {
			t.Fatal(err)
		}
	}
	b.tick()
	if got := ledgerIDs(e.record("t").Ledgers); slices.Contains(got, second) {
		t.Fatalf("ledger %d consumed but not trimmed: record lists %v, md %v", second, got, c.MarkDelete())
	}
}
