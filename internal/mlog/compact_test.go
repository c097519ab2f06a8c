package mlog

import (
	"errors"
	"slices"
	"testing"
)

// compactionOwner is an open topic without cursors, with three closed
// ledgers of three entries and a current one holding one.
func compactionOwner(t *testing.T) (*fakeEnv, *owner, []LedgerInfo) {
	e := newFakeEnv(t)
	o := e.newOwner(compactionConfig)
	o.open()
	o.append(10, 10)
	ls := o.tp.Ledgers()
	if len(ls) != 4 {
		t.Fatalf("ledgers %+v", ls)
	}
	return e, o, ls
}

// compactorLedger is what the compactor does before registering: create a
// ledger of its own (here, straight in the fake env).
func (e *fakeEnv) compactorLedger() int64 {
	e.nextLedger += 3
	e.ledgers[e.nextLedger] = &fakeLedger{}
	return e.nextLedger
}

// compaction registers a compacted ledger, writes n entries of size bytes
// to it and closes it.
func (o *owner) compaction(n int) int64 {
	o.e.t.Helper()
	id := o.e.compactorLedger()
	o.token++
	o.tp.RegisterCompaction(o.token, id, o.e.now)
	o.drive()
	if d, ok := o.compactions[o.token]; !ok || d.Err != nil {
		o.e.t.Fatalf("register compaction: %+v (answered %v)", d, ok)
	}
	if got := o.e.record("t").Garbage; !slices.Contains(got, id) {
		o.e.t.Fatalf("the record names the compacted ledger %d as garbage before it is written: %v", id, got)
	}
	l := o.e.ledgers[id]
	for range n {
		l.entries = append(l.entries, make([]byte, 10))
	}
	l.closed = true
	return id
}

func (o *owner) endCompaction(s CompactSwap) CompactionDone {
	o.e.t.Helper()
	o.token++
	o.tp.EndCompaction(o.token, s, o.e.now)
	o.drive()
	d, ok := o.compactions[o.token]
	if !ok {
		o.e.t.Fatal("end compaction not answered")
	}
	return d
}

func TestCompactionSwap(t *testing.T) {
	e, o, ls := compactionOwner(t)
	id := o.compaction(2)
	d := o.endCompaction(CompactSwap{Replace: []int64{ls[0].ID, ls[1].ID}, Data: id, Entries: 2, Size: 20})
	if d.Err != nil {
		t.Fatal(d.Err)
	}
	rec := e.record("t")
	want := []int64{ls[0].ID, ls[2].ID, ls[3].ID}
	if got := ledgerIDs(rec.Ledgers); !slices.Equal(got, want) {
		t.Fatalf("list after the swap %v, want %v", got, want)
	}
	seg := rec.Ledgers[0]
	if seg.Data != id || seg.Entries != 2 || seg.Size != 20 || !seg.Closed.Equal(ls[1].Closed) {
		t.Fatalf("compacted segment %+v", seg)
	}
	for _, l := range ls[:2] {
		if _, ok := e.ledgers[l.ID]; ok {
			t.Fatalf("replaced ledger %d not deleted", l.ID)
		}
	}
	if _, ok := e.ledgers[id]; !ok {
		t.Fatal("the compacted ledger was deleted")
	}
	// Reads of the segment go to the compacted ledger.
	spans := o.tp.Locate(BeforeLedger(ls[0].ID), 3)
	if len(spans) != 2 || spans[0] != (ReadSpan{Ledger: ls[0].ID, First: 0, Last: 1, Stored: id}) || spans[1].Stored != ls[2].ID {
		t.Fatalf("Locate after the swap: %+v", spans)
	}
	// Once the deletes are done the record forgets them.
	o.tick()
	if g := e.record("t").Garbage; len(g) != 0 {
		t.Fatalf("garbage left in the record: %v", g)
	}
	if s := o.tp.Stats(); s.Compactions != 1 || s.CompactedBytes != 40 {
		t.Fatalf("stats: %d compactions, %d bytes reclaimed", s.Compactions, s.CompactedBytes)
	}
	// Compacting the compacted segment again (with its neighbour) works,
	// and deletes the first compacted ledger.
	id2 := o.compaction(1)
	if d := o.endCompaction(CompactSwap{Replace: []int64{ls[0].ID, ls[2].ID}, Data: id2, Entries: 1, Size: 10}); d.Err != nil {
		t.Fatal(d.Err)
	}
	if _, ok := e.ledgers[id]; ok {
		t.Fatal("the first compacted ledger was not deleted when replaced")
	}
	if got := ledgerIDs(e.record("t").Ledgers); !slices.Equal(got, []int64{ls[0].ID, ls[3].ID}) {
		t.Fatalf("list %v", got)
	}
}

func TestCompactionRefused(t *testing.T) {
	e, o, ls := compactionOwner(t)
	// The current ledger is never compacted.
	id := o.compaction(1)
	if d := o.endCompaction(CompactSwap{Replace: []int64{ls[2].ID, ls[3].ID}, Data: id, Entries: 1}); !errors.Is(d.Err, ErrCompactionStale) {
		t.Fatalf("swapping the current ledger: %v", d.Err)
	}
	// Nor a run with a hole.
	if d := o.endCompaction(CompactSwap{Replace: []int64{ls[0].ID, ls[2].ID}, Data: id, Entries: 1}); !errors.Is(d.Err, ErrCompactionStale) {
		t.Fatalf("swapping a run with a hole: %v", d.Err)
	}
	// One compaction at a time.
	o.token++
	o.tp.RegisterCompaction(o.token, e.compactorLedger(), e.now)
	o.drive()
	if d := o.compactions[o.token]; !errors.Is(d.Err, ErrCompactionBusy) {
		t.Fatalf("a second registration: %v", d.Err)
	}
	// Abandoning deletes the compacted ledger, and the record forgets it.
	if d := o.endCompaction(CompactSwap{Data: id}); d.Err != nil {
		t.Fatal(d.Err)
	}
	if _, ok := e.ledgers[id]; ok {
		t.Fatal("abandoned compacted ledger not deleted")
	}
	o.tick()
	if g := e.record("t").Garbage; len(g) != 0 {
		t.Fatalf("garbage left: %v", g)
	}
	if got := ledgerIDs(e.record("t").Ledgers); !slices.Equal(got, ledgerIDs(ls)) {
		t.Fatalf("list changed: %v", got)
	}
	// Not on a topic with cursors.
	if err := o.tp.OpenCursor("sub", true, e.now); err != nil {
		t.Fatal(err)
	}
	o.token++
	o.tp.RegisterCompaction(o.token, e.compactorLedger(), e.now)
	o.drive()
	if d := o.compactions[o.token]; !errors.Is(d.Err, ErrCompactionCursors) {
		t.Fatalf("compacting a topic with cursors: %v", d.Err)
	}
}

// TestCompactionCrash: the owner dies (a new one takes over) before the
// swap, or after it but before the replaced ledgers were deleted; either
// way the new owner sees a whole version of the log and deletes the rest.
func TestCompactionCrash(t *testing.T) {
	t.Run("before the swap", func(t *testing.T) {
		e, o, ls := compactionOwner(t)
		id := o.compaction(2)
		o2 := e.newOwner(compactionConfig)
		o2.open()
		if _, ok := e.ledgers[id]; ok {
			t.Fatal("the half-written compacted ledger survived the takeover")
		}
		for _, l := range ls {
			if _, ok := e.ledgers[l.ID]; !ok {
				t.Fatalf("ledger %d lost", l.ID)
			}
		}
		if got := ledgerIDs(e.record("t").Ledgers); !slices.Equal(got, append(ledgerIDs(ls), o2.tp.Current())) {
			t.Fatalf("list after takeover %v", got)
		}
		// The old owner's swap now loses the CAS: it is fenced, and the
		// new owner's list stands.
		d := o.endCompaction(CompactSwap{Replace: []int64{ls[0].ID, ls[1].ID}, Data: id, Entries: 2, Size: 20})
		if !errors.Is(d.Err, ErrFenced) || !errors.Is(o.tp.Err(), ErrFenced) {
			t.Fatalf("zombie swap: %v, topic %v", d.Err, o.tp.Err())
		}
		if got := ledgerIDs(e.record("t").Ledgers); !slices.Equal(got, append(ledgerIDs(ls), o2.tp.Current())) {
			t.Fatalf("list after the zombie's swap %v", got)
		}
		o2.tick()
		if g := e.record("t").Garbage; len(g) != 0 {
			t.Fatalf("garbage left: %v", g)
		}
	})
	t.Run("after the swap", func(t *testing.T) {
		e, o, ls := compactionOwner(t)
		id := o.compaction(2)
		var deletes []int64
		e.checkDelete = func(_ *owner, ledger int64) { deletes = append(deletes, ledger) }
		// The swap's deletes never happen: the owner dies with them sent.
		o.token++
		o.tp.EndCompaction(o.token, CompactSwap{Replace: []int64{ls[0].ID, ls[1].ID}, Data: id, Entries: 2, Size: 20}, e.now)
		rd := o.tp.Ready()
		for _, op := range rd.MetaOps {
			o.tp.StepMeta(e.doMeta(op), e.now)
		}
		_ = o.tp.Ready() // the deletes, lost with the owner
		if g := e.record("t").Garbage; !slices.Equal(g, []int64{ls[0].ID, ls[1].ID}) {
			t.Fatalf("the swap names the replaced ledgers as garbage: %v", g)
		}
		o2 := e.newOwner(compactionConfig)
		o2.open()
		for _, l := range ls[:2] {
			if _, ok := e.ledgers[l.ID]; ok {
				t.Fatalf("replaced ledger %d not deleted by the new owner", l.ID)
			}
		}
		rec := e.record("t")
		if rec.Ledgers[0].Data != id || len(rec.Ledgers) != 4 {
			t.Fatalf("list after takeover %+v", rec.Ledgers)
		}
		o2.tick()
		if g := e.record("t").Garbage; len(g) != 0 {
			t.Fatalf("garbage left: %v", g)
		}
	})
}

// TestCompactionUnknownOutcome: the swap's CAS fails with an error that
// may hide a write that applied; the record decides.
func TestCompactionUnknownOutcome(t *testing.T) {
	e, o, ls := compactionOwner(t)
	id := o.compaction(2)
	o.token++
	o.tp.EndCompaction(o.token, CompactSwap{Replace: []int64{ls[0].ID, ls[1].ID}, Data: id, Entries: 2, Size: 20}, e.now)
	rd := o.tp.Ready()
	if len(rd.MetaOps) != 1 {
		t.Fatalf("ops %+v", rd)
	}
	e.doMeta(rd.MetaOps[0]) // applied, answer lost
	o.tp.StepMeta(MetaResult{ID: rd.MetaOps[0].ID, Err: errors.New("timeout")}, e.now)
	o.drive()
	if d, ok := o.compactions[o.token]; !ok || d.Err != nil {
		t.Fatalf("swap answered %+v (%v)", d, ok)
	}
	if got := o.tp.Ledgers(); got[0].Data != id {
		t.Fatalf("list %+v", got)
	}
	if _, ok := e.ledgers[ls[0].ID]; ok {
		t.Fatal("replaced ledger not deleted")
	}
}

// compactionConfig keeps every ledger (no cursors: nothing consumed).
var compactionConfig = Config{Rollover: RolloverPolicy{MaxEntries: 3}, Retention: RetentionPolicy{Time: -1, Size: -1}}
