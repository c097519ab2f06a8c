//go:build invariants

package ledger

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

// TestInvariantsFire corrupts a writer's state the way a bug would and
// checks that its next input stops at once, naming the invariant and the
// numbers. Without -tags invariants the same corruption goes unnoticed
// until (at best) a checker sees its consequence.
func TestInvariantsFire(t *testing.T) {
	newWriter := func(t *testing.T) *Writer {
		md := Metadata{ID: 7, EnsembleSize: 3, WriteQuorum: 3, AckQuorum: 2, State: StateOpen, LastEntryID: -1,
			Fragments: []Fragment{{Ensemble: []BookieID{"b1", "b2", "b3"}}}}
		w, err := NewWriter(WriterConfig{Metadata: md, Version: 1})
		if err != nil {
			t.Fatal(err)
		}
		for range 3 {
			if _, err := w.Add([]byte("x")); err != nil {
				t.Fatal(err)
			}
		}
		// Entry 0 reaches its ack quorum; 1 and 2 stay pending.
		for _, req := range w.Ready().Requests[:2] {
			w.Step(Response{ID: req.ID, From: req.To, Status: StatusOK})
		}
		if acks := w.Ready().Acks; len(acks) != 1 || w.LastAddConfirmed() != 0 {
			t.Fatalf("acks %+v, LAC %d", acks, w.LastAddConfirmed())
		}
		return w
	}
	for _, tc := range []struct {
		name    string
		corrupt func(w *Writer)
		want    string
	}{
		{"lost pending entry", func(w *Writer) { delete(w.pending, 2) },
			"pending = (lastAddConfirmed, nextEntry): 1 pending, lastAddConfirmed(0) nextEntry(3)"},
		{"LAC past the end", func(w *Writer) { w.lastAddConfirmed = 3 },
			"-1 <= lastAddConfirmed < nextEntry: lastAddConfirmed(3) nextEntry(3)"},
		{"ack out of order", func(w *Writer) { w.ready.Acks = append(w.ready.Acks, Ack{EntryID: 2}) },
			"acks in entry order: ack of entry 2 follows the ack of entry 0"},
		{"ack held back", func(w *Writer) { w.pending[1].acked = map[int]bool{0: true, 2: true} },
			"the entry after lastAddConfirmed lacks an ack quorum: entry 1 has 2 acks, Qa=2"},
		{"LAC sent ahead of the acks", func(w *Writer) { w.lacSent = 1 },
			"-1 <= lacSent <= lastAddConfirmed: lacSent(1) lastAddConfirmed(0)"},
		{"LAC sent uncounted", func(w *Writer) {
			w.ready.Requests = append(w.ready.Requests, Request{Kind: RequestWriteLac, EntryID: -1, To: "b1", LastAddConfirmed: 0})
		}, "every LAC sent is counted in lacSent: write-lac of entry -1 to b1 carries LAC 0, lacSent(-1)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWriter(t)
			w.Tick() // the uncorrupted writer passes its checks
			tc.corrupt(w)
			expectInvariantPanic(t, tc.want, w.Tick)
		})
	}

	t.Run("reader delivers out of order", func(t *testing.T) {
		md := Metadata{ID: 7, EnsembleSize: 3, WriteQuorum: 2, AckQuorum: 2, State: StateClosed, LastEntryID: 9,
			Fragments: []Fragment{{Ensemble: []BookieID{"b1", "b2", "b3"}}}}
		r := NewReader(ReaderConfig{Metadata: md}, 0, 9)
		r.Tick()
		r.ready = append(r.ready, ReadResult{EntryID: 4})
		expectInvariantPanic(t, "results in entry order: result for entry 4 follows entry -1", r.Tick)
	})

	t.Run("reader range with nothing in flight", func(t *testing.T) {
		md := Metadata{ID: 7, EnsembleSize: 3, WriteQuorum: 3, AckQuorum: 2, State: StateClosed, LastEntryID: 9,
			Fragments: []Fragment{{Ensemble: []BookieID{"b1", "b2", "b3"}}}}
		r := NewReader(ReaderConfig{Metadata: md, MaxRangeEntries: 4}, 0, 9)
		r.Tick()
		for id := range r.ranges[1].asked {
			delete(r.ranges[1].asked, id)
			delete(r.byReq, id)
		}
		expectInvariantPanic(t, "an incomplete range has a read in flight: range 4..7 next 4", r.Tick)
	})
}
