package bookie

import (
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// TestReadGateAdmission: with no add noted, the gate admits every read; for
// the quiet period after an add, WhileWriting reads at once, the next one
// once an admitted read leaves; past the quiet period, every read again.
func TestReadGateAdmission(t *testing.T) {
	now := time.Unix(1000, 0)
	g := NewReadGate(2, time.Second)
	g.now = func() time.Time { return now }
	mustEnter := func(what string) func() {
		t.Helper()
		leave, ok := g.tryEnter()
		if !ok {
			t.Fatalf("%s: refused", what)
		}
		return leave
	}
	for i := range 5 {
		defer mustEnter("no add yet, read " + string(rune('0'+i)))()
	}

	g.noteAdd()
	now = now.Add(999 * time.Millisecond)
	first, second := mustEnter("adds arriving, first"), mustEnter("adds arriving, second")
	if _, ok := g.tryEnter(); ok {
		t.Fatal("adds arriving: a third read admitted beside two, want it to wait")
	}
	first()
	third := mustEnter("adds arriving, after one left")
	if _, ok := g.tryEnter(); ok {
		t.Fatal("adds arriving: a read admitted beside two again")
	}

	now = now.Add(time.Millisecond) // the quiet period since the add is over
	defer mustEnter("quiet again")()
	second()
	third()

	var nilGate *ReadGate
	if leave, ok := nilGate.tryEnter(); !ok {
		t.Fatal("a nil gate refused a read")
	} else {
		leave()
	}
	nilGate.noteAdd()
}

// TestRangeReadWaitsAtGate: an engine's range read from the entry logs
// started while adds arrive and the gate is full waits (counted in
// ReadGateWaits) until the read holding the gate leaves, then returns its
// entries.
func TestRangeReadWaitsAtGate(t *testing.T) {
	fs := vfs.NewMem()
	cfg := testConfig(fs)
	gate := NewReadGate(1, time.Hour)
	cfg.ReadGate = gate
	e := openTest(t, cfg)
	for i := range int64(10) {
		mustAdd(t, e, AddRequest{LedgerID: 1, EntryID: i, LastAddConfirmed: i - 1, Payload: payloadFor(1, i, 100)})
	}
	if err := e.Checkpoint(); err != nil { // the entries in the entry logs, not the write cache
		t.Fatal(err)
	}
	if _, err := e.ReadRange(1, 0, 10, 0); err != nil { // admitted: the gate is free
		t.Fatal(err)
	}
	if w := e.Stats().ReadGateWaits; w != 0 {
		t.Fatalf("ReadGateWaits %d with the gate free, want 0", w)
	}
	leave, ok := gate.tryEnter() // another engine's read holds the gate
	if !ok {
		t.Fatal("the gate refused its first read")
	}
	type result struct {
		n   int
		err error
	}
	done := make(chan result, 1)
	go func() {
		es, err := e.ReadRange(1, 0, 10, 0)
		done <- result{len(es), err}
	}()
	waitFor(t, "the range read waiting at the gate", func() bool { return e.Stats().ReadGateWaits == 1 })
	select {
	case r := <-done:
		t.Fatalf("the range read returned (%d entries, %v) while the gate was full", r.n, r.err)
	default:
	}
	leave()
	if r := recvWithin(t, done); r.n != 10 || r.err != nil {
		t.Fatalf("after the gate emptied: %d entries, %v; want 10", r.n, r.err)
	}
}
