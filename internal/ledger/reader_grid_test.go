package ledger

import "testing"

// TestReadersAgreeOnReplicas: two readers of the same closed ledger, one
// from its first entry and one from the middle of a range, cut the same
// ranges on the stride's grid and ask the same bookie for every entry past
// the second reader's first range — a backlog read again is read where its
// pages are cached — while consecutive ranges still go round the replicas.
func TestReadersAgreeOnReplicas(t *testing.T) {
	const last = 63
	md := Metadata{ID: 7, EnsembleSize: 3, WriteQuorum: 3, AckQuorum: 2, State: StateClosed,
		Fragments: []Fragment{{FirstEntry: 0, Ensemble: []BookieID{"b0", "b1", "b2"}}}, LastEntryID: last}
	cfg := ReaderConfig{Metadata: md, MaxRangeEntries: 6, MaxRangesInFlight: 2} // a grid of 4
	askedOf := func(first int64) map[int64]BookieID {
		r := NewReader(cfg, first, last)
		asked := map[int64]BookieID{}
		for range 1000 {
			if r.Done() {
				return asked
			}
			reqs, _ := r.Ready()
			for _, q := range reqs {
				var entries [][]byte
				for e := q.EntryID; e < q.EntryID+int64(q.MaxEntries) && e <= last; e++ {
					if _, dup := asked[e]; dup {
						t.Fatalf("reader from %d asked for entry %d twice", first, e)
					}
					asked[e] = q.To
					entries = append(entries, EncodeEntry(md.ID, e, e+1, []byte("x")))
				}
				r.Step(Response{ID: q.ID, From: q.To, Status: StatusOK, Entries: entries})
			}
		}
		t.Fatalf("reader from %d did not finish", first)
		return nil
	}
	a, b := askedOf(0), askedOf(5)
	used := map[BookieID]bool{}
	for e := int64(8); e <= last; e++ {
		if a[e] != b[e] {
			t.Errorf("entry %d: asked of %s from entry 0, of %s from entry 5", e, a[e], b[e])
		}
		used[a[e]] = true
	}
	if len(used) != 3 {
		t.Fatalf("ranges went to %d of 3 replicas", len(used))
	}
	for e := int64(0); e+4 <= last; e += 4 {
		if a[e] == a[e+4] {
			t.Fatalf("ranges at %d and %d both went to %s, want them round the replicas", e, e+4, a[e])
		}
	}
}
