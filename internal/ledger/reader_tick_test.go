package ledger

import "testing"

// TestReaderTickDeliversSeveral: when an entry times out on its last
// replica during Tick, the failover delivers it and the later entries that
// were already read (flush removes them all). Tick must skip those instead
// of looking them up again. Found by internal/sim (a nil dereference), with
// a read per entry; here ranges of one entry.
func TestReaderTickDeliversSeveral(t *testing.T) {
	md := Metadata{ID: 7, EnsembleSize: 1, WriteQuorum: 1, AckQuorum: 1, State: StateClosed,
		Fragments: []Fragment{{FirstEntry: 0, Ensemble: []BookieID{"b0"}}}, LastEntryID: 1}
	r := NewReader(ReaderConfig{Metadata: md, MaxRangeEntries: 1}, 0, 1)
	reqs, _ := r.Ready()
	if len(reqs) != 2 {
		t.Fatalf("want one read per entry, got %d", len(reqs))
	}
	// Entry 1 answers; entry 0 never does.
	r.Step(Response{ID: reqs[1].ID, From: "b0", Status: StatusOK, Entries: [][]byte{EncodeEntry(md.ID, 1, 1, []byte("x"))}})
	var results []ReadResult
	for i := 0; i < 20 && !r.Done(); i++ {
		r.Tick()
		_, res := r.Ready()
		results = append(results, res...)
	}
	if !r.Done() || len(results) != 2 {
		t.Fatalf("done=%v results=%+v", r.Done(), results)
	}
	if results[0].EntryID != 0 || results[0].Err == nil || results[1].EntryID != 1 || string(results[1].Payload) != "x" {
		t.Fatalf("results %+v", results)
	}
}
