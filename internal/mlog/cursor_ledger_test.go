package mlog

import (
	"errors"
	"testing"
	"time"
)

// cursorPointer returns the pointer in sub's cursor record.
func cursorPointer(t *testing.T, e *fakeEnv) CursorPointer {
	t.Helper()
	kv, ok := e.store[CursorKey("t", "sub")]
	if !ok {
		t.Fatal("no cursor record")
	}
	ptr, ok := DecodeCursorPointer(kv.value)
	if !ok {
		t.Fatalf("cursor record is not a pointer: %q", kv.value)
	}
	return ptr
}

// A takeover restores the cursor from the newest snapshot in its cursor
// ledger, not from the metadata record (which holds only a small pointer,
// possibly behind the ledger).
func TestManagedLedgerTakeoverRestoresCursorFromCursorLedger(t *testing.T) {
	e, a, ls := threeLedgers(t, Config{CursorPersistInterval: time.Second})
	if err := a.tp.AckCumulative("sub", Position{ls[0].ID, 1}, e.now); err != nil {
		t.Fatal(err)
	}
	a.tick()
	first := cursorPointer(t, e)
	e.advance(time.Second)
	for _, p := range []Position{{ls[1].ID, 0}, {ls[1].ID, 2}} {
		if err := a.tp.Ack("sub", p, e.now); err != nil {
			t.Fatal(err)
		}
	}
	a.tick()
	ptr := cursorPointer(t, e)
	if ptr.Ledger != first.Ledger || ptr.Entry != first.Entry+1 || ptr.MarkDelete != (Position{ls[0].ID, 1}) {
		t.Fatalf("pointers %+v then %+v", first, ptr)
	}
	if n := len(e.store[CursorKey("t", "sub")].value); n > 200 {
		t.Fatalf("cursor record of %d bytes: a snapshot, not a pointer", n)
	}
	if got := len(e.ledgers[ptr.Ledger].entries); got != int(ptr.Entry)+1 {
		t.Fatalf("cursor ledger holds %d snapshots, pointer names entry %d", got, ptr.Entry)
	}
	// Make the pointer lag behind the ledger (as when its update is lost):
	// the newest entry of the cursor ledger is still what is restored.
	kv := e.store[CursorKey("t", "sub")]
	kv.value = first.marshal()
	e.store[CursorKey("t", "sub")] = kv

	b := e.newOwner(Config{Rollover: noRoll})
	b.open()
	bc, ok := b.tp.Cursor("sub")
	if !ok {
		t.Fatal("cursor lost in takeover")
	}
	if bc.MarkDelete() != (Position{ls[0].ID, 1}) || !bc.IsAcked(Position{ls[1].ID, 0}) || !bc.IsAcked(Position{ls[1].ID, 2}) || bc.IsAcked(Position{ls[1].ID, 1}) {
		t.Fatalf("restored md=%v holes=%d", bc.MarkDelete(), bc.Holes())
	}
	var recovered, read bool
	for _, op := range e.ledgerOps {
		recovered = recovered || op.Kind == LedgerRecover && op.Ledger == ptr.Ledger
		read = read || op.Kind == LedgerRead && op.Ledger == ptr.Ledger && op.Entry == ptr.Entry
	}
	if !recovered || !read {
		t.Fatalf("cursor ledger %d recovered %v, last entry read %v", ptr.Ledger, recovered, read)
	}
	// The new owner writes its own cursor ledger and deletes the old one.
	b.tick()
	if np := cursorPointer(t, e); np.Ledger == ptr.Ledger || np.Entry != 0 {
		t.Fatalf("new owner's pointer %+v", np)
	}
	if _, ok := e.ledgers[ptr.Ledger]; ok {
		t.Fatal("previous owner's cursor ledger not deleted")
	}
}

// A zombie owner's cursor write goes to the cursor ledger the new owner
// recovered: the ledger fences it and the zombie stops.
func TestManagedLedgerZombieCursorWriteFenced(t *testing.T) {
	e, a, ls := threeLedgers(t, Config{CursorPersistInterval: time.Second})
	a.tick()
	ptr := cursorPointer(t, e)
	b := e.newOwner(Config{Rollover: noRoll, CursorPersistInterval: time.Second})
	b.open()
	if !e.ledgers[ptr.Ledger].fenced {
		t.Fatal("takeover did not fence the cursor ledger")
	}
	snapshots := len(e.ledgers[ptr.Ledger].entries)
	e.advance(time.Second)
	if err := a.tp.AckCumulative("sub", Position{ls[2].ID, 0}, e.now); err != nil {
		t.Fatal(err)
	}
	a.tick()
	if !errors.Is(a.tp.Err(), ErrFenced) {
		t.Fatalf("zombie: %v", a.tp.Err())
	}
	if got := len(e.ledgers[ptr.Ledger].entries); got != snapshots {
		t.Fatalf("zombie's snapshot landed: %d entries, was %d", got, snapshots)
	}
	b.tick()
	if b.tp.Err() != nil || b.tp.Phase() != "open" {
		t.Fatalf("new owner: %v %s", b.tp.Err(), b.tp.Phase())
	}
}

// The cursor ledger rolls after CursorLedgerMaxSnapshots snapshots; the old
// one is deleted once the pointer names the new one, and a takeover restores
// from the new one.
func TestManagedLedgerCursorLedgerRolls(t *testing.T) {
	e, a, ls := threeLedgers(t, Config{CursorPersistInterval: time.Second, CursorLedgerMaxSnapshots: 2})
	a.tick()
	first := cursorPointer(t, e)
	var acks []Position
	for l := range 2 {
		for en := range 3 {
			acks = append(acks, Position{ls[l].ID, int64(en)})
		}
	}
	seen := map[int64]bool{first.Ledger: true}
	for _, p := range acks[:5] {
		e.advance(time.Second)
		if err := a.tp.AckCumulative("sub", p, e.now); err != nil {
			t.Fatal(err)
		}
		a.tick()
		ptr := cursorPointer(t, e)
		if ptr.MarkDelete != p {
			t.Fatalf("pointer %+v after acking through %v", ptr, p)
		}
		if !seen[ptr.Ledger] {
			seen[ptr.Ledger] = true
			if ptr.Entry != 0 {
				t.Fatalf("new cursor ledger's first snapshot at %d", ptr.Entry)
			}
		}
		for id := range seen {
			if _, ok := e.ledgers[id]; ok != (id == ptr.Ledger) {
				t.Fatalf("cursor ledger %d stored %v, pointer names %d", id, ok, ptr.Ledger)
			}
		}
		if n := len(e.ledgers[ptr.Ledger].entries); n > 2 {
			t.Fatalf("cursor ledger %d holds %d snapshots", ptr.Ledger, n)
		}
	}
	if len(seen) != 3 {
		t.Fatalf("6 snapshots in ledgers of 2 went to %d cursor ledgers", len(seen))
	}
	b := e.newOwner(Config{Rollover: noRoll})
	b.open()
	if bc, _ := b.tp.Cursor("sub"); bc.MarkDelete() != acks[4] {
		t.Fatalf("restored md %v, want %v", bc.MarkDelete(), acks[4])
	}
}
