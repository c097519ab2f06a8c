package mlogclient

import (
	"context"
	"math"
	"testing"
	"time"

	"quire/internal/mlog"
)

// Cursors positioned where a subscription asks (OpenCursorAt), reset back
// and forth (a seek), and a reader's in-memory cursor, across ledger
// boundaries; a durable cursor opened just before a clean close survives
// the takeover that follows, a non-durable one does not.
func TestCursorsAtResetAndNonDurable(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	srv := startCluster(t)
	topic := mlog.Config{Retention: keepAll, Rollover: mlog.RolloverPolicy{MaxEntries: 5, MaxSize: 1 << 30, MaxAge: time.Hour}}
	tp, err := Open(ctx, "tenant/ns/cursors", config(t, srv, "a", topic))
	if err != nil {
		t.Fatal(err)
	}
	var pos []mlog.Position
	for i := range 12 {
		p, err := tp.Append(ctx, payload(i))
		if err != nil {
			t.Fatal(err)
		}
		pos = append(pos, p)
	}
	if pos[0].LedgerID == pos[11].LedgerID {
		t.Fatalf("12 entries in one ledger (%v): the test wants ledger boundaries", pos)
	}
	last := pos[11]
	earliest := mlog.Position{LedgerID: -1, EntryID: -1}
	latest := mlog.Position{LedgerID: math.MaxInt64, EntryID: math.MaxInt64}
	mdIs := func(what string, got mlog.Position, err error, want mlog.Position) {
		t.Helper()
		if err != nil || got != want {
			t.Fatalf("%s: mark-delete %v (%v), want %v", what, got, err, want)
		}
	}

	d, err := tp.OpenCursorAt(ctx, "d", earliest)
	if err != nil {
		t.Fatal(err)
	}
	md, err := d.MarkDelete(ctx)
	if err != nil || !md.Less(pos[0]) {
		t.Fatalf("a cursor opened at the earliest position has mark-delete %v (%v), after the first entry %v", md, err, pos[0])
	}
	if err := d.AckAll(ctx, pos[:7]); err != nil {
		t.Fatal(err)
	}
	md, err = d.MarkDelete(ctx)
	mdIs("after acking 7 entries one by one", md, err, pos[6])
	if err := d.Reset(ctx, pos[2]); err != nil {
		t.Fatal(err)
	}
	md, err = d.MarkDelete(ctx)
	mdIs("after a reset back", md, err, pos[2])
	if acked, _ := d.IsAcked(ctx, pos[3]); acked {
		t.Fatalf("%v acknowledged after a reset to %v", pos[3], pos[2])
	}
	if err := d.Reset(ctx, latest); err != nil {
		t.Fatal(err)
	}
	md, err = d.MarkDelete(ctx)
	mdIs("after a reset past the end", md, err, last)
	// Opening it again keeps its position.
	if d, err = tp.OpenCursorAt(ctx, "d", earliest); err != nil {
		t.Fatal(err)
	}
	md, err = d.MarkDelete(ctx)
	mdIs("opened again", md, err, last)

	r, err := tp.OpenNonDurableCursor(ctx, "reader", earliest)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.AckAll(ctx, []mlog.Position{pos[0], pos[2]}); err != nil {
		t.Fatal(err)
	}
	md, err = r.MarkDelete(ctx)
	mdIs("reader after acking 0 and 2", md, err, pos[0])
	if acked, _ := r.IsAcked(ctx, pos[2]); !acked {
		t.Fatal("reader: 2 not acknowledged")
	}
	if err := r.AckAll(ctx, pos[1:2]); err != nil {
		t.Fatal(err)
	}
	md, err = r.MarkDelete(ctx)
	mdIs("reader after filling the hole", md, err, pos[2])
	if err := r.AckCumulative(ctx, latest); err != nil {
		t.Fatal(err)
	}
	md, err = r.MarkDelete(ctx)
	mdIs("reader after a cumulative ack past the end", md, err, last)
	if err := r.Reset(ctx, pos[4]); err != nil {
		t.Fatal(err)
	}
	md, err = r.MarkDelete(ctx)
	mdIs("reader after a reset", md, err, pos[4])

	// A cursor opened right before a clean close is named in the record:
	// the next owner has it, at its position; the reader's is gone.
	e, err := tp.OpenCursorAt(ctx, "e", pos[8])
	if err != nil {
		t.Fatal(err)
	}
	_ = e
	if err := tp.Close(ctx); err != nil {
		t.Fatal(err)
	}
	tp2, err := Open(ctx, "tenant/ns/cursors", config(t, srv, "b", topic))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tp2.Close(context.Background()) })
	st, err := tp2.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]mlog.Position{}
	for _, c := range st.Cursors {
		got[c.Name] = c.MarkDelete
	}
	if len(got) != 2 || got["d"] != last || got["e"] != pos[8] {
		t.Fatalf("after the takeover the cursors are %v, want d at %v and e at %v", got, last, pos[8])
	}
}
