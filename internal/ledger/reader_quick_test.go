package ledger

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"
)

// TestReaderQuick drives the range Reader against randomly built ledgers
// (ensembles, striping, fragments) on model bookies that lose entries,
// corrupt them, fail, never answer or answer late and out of order, under
// random range configurations, and checks it against the obvious oracle:
// every entry first..last is delivered exactly once, in order, with the
// bytes the writer stored; and when every entry has a replica that holds it
// intact and answers in time, none is delivered as an error.
func TestReaderQuick(t *testing.T) {
	for seed := uint64(1); seed <= 2000; seed++ {
		runReaderQuick(t, seed)
	}
}

type quickBookie struct {
	entries map[int64][]byte
	corrupt map[int64]bool
	mode    string // "ok", "down", "slow", "flaky"
}

func runReaderQuick(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 42))
	ensembleSize := 1 + rng.IntN(5)
	md := Metadata{ID: 9, EnsembleSize: ensembleSize, WriteQuorum: 1 + rng.IntN(ensembleSize), AckQuorum: 1, State: StateClosed}
	pool := make([]BookieID, ensembleSize+3)
	for i := range pool {
		pool[i] = BookieID(fmt.Sprintf("b%d", i))
	}
	entries := int64(1 + rng.IntN(300))
	md.LastEntryID = entries - 1
	for f, first := 0, int64(0); f < 1+rng.IntN(3) && first < entries; f++ {
		perm := rng.Perm(len(pool))[:ensembleSize]
		ens := make([]BookieID, ensembleSize)
		for i, p := range perm {
			ens[i] = pool[p]
		}
		md.Fragments = append(md.Fragments, Fragment{FirstEntry: first, Ensemble: ens})
		first += 1 + rng.Int64N(entries)
	}
	modes := []string{"ok", "ok", "ok", "down", "slow", "flaky"}
	bookies := map[BookieID]*quickBookie{}
	for _, b := range pool {
		bookies[b] = &quickBookie{entries: map[int64][]byte{}, corrupt: map[int64]bool{}, mode: modes[rng.IntN(len(modes))]}
	}
	want := map[int64][]byte{}
	healthy := true // every entry has an intact copy on a bookie that answers in time
	for e := range entries {
		want[e] = fmt.Appendf(nil, "entry %d %s", e, bytes.Repeat([]byte{'x'}, rng.IntN(40)))
		good := false
		for _, b := range md.WriteQuorumBookies(e) {
			qb := bookies[b]
			switch r := rng.IntN(20); {
			case r == 0:
				continue // lost
			case r == 1:
				qb.corrupt[e] = true
			}
			qb.entries[e] = EncodeEntry(md.ID, e, 0, want[e])
			if qb.mode == "ok" && !qb.corrupt[e] {
				good = true
			}
		}
		healthy = healthy && good
	}
	cfg := ReaderConfig{Metadata: md,
		MaxRangesInFlight: []int{0, 1, 2, 4}[rng.IntN(4)],
		MaxRangeEntries:   []int{0, 1, 2, 3, 7, 64}[rng.IntN(6)],
		MaxRangeBytes:     []int{0, 1, 60, 200}[rng.IntN(4)],
	}
	first := rng.Int64N(entries)
	last := first + rng.Int64N(entries-first)
	rd := NewReader(cfg, first, last)

	type pending struct {
		req Request
		due int
	}
	var net []pending
	next := first
	describe := func() string {
		return fmt.Sprintf("seed %d: %+v fragments %v, %d entries, read %d..%d, healthy %v", seed, cfg, md.Fragments, entries, first, last, healthy)
	}
	for tick := 0; next <= last; tick++ {
		if tick > 5000 {
			t.Fatalf("%s: not done after %d ticks (next %d)", describe(), tick, next)
		}
		for {
			reqs, results := rd.Ready()
			for _, res := range results {
				if res.EntryID != next {
					t.Fatalf("%s: result for entry %d, want %d", describe(), res.EntryID, next)
				}
				next++
				if res.Err != nil {
					if healthy {
						t.Fatalf("%s: entry %d: %v", describe(), res.EntryID, res.Err)
					}
					continue
				}
				if !bytes.Equal(res.Payload, want[res.EntryID]) {
					t.Fatalf("%s: entry %d read as %q", describe(), res.EntryID, res.Payload)
				}
			}
			for _, req := range reqs {
				if req.Kind != RequestReadRange || req.MaxEntries < 1 {
					t.Fatalf("%s: request %+v", describe(), req)
				}
				delay := rng.IntN(4) // within the timeout
				switch bookies[req.To].mode {
				case "slow":
					continue // never answered
				case "flaky":
					delay = rng.IntN(16)
				}
				net = append(net, pending{req: req, due: tick + delay})
			}
			// Deliver one due request, picked at random: answers overtake
			// each other.
			var due []int
			for i, p := range net {
				if p.due <= tick {
					due = append(due, i)
				}
			}
			if len(due) == 0 {
				break
			}
			i := due[rng.IntN(len(due))]
			p := net[i]
			net = append(net[:i], net[i+1:]...)
			rd.Step(answerQuick(bookies[p.req.To], p.req, rng))
		}
		rd.Tick()
	}
	if !rd.Done() {
		t.Fatalf("%s: every entry delivered, the reader not done", describe())
	}
}

// answerQuick is a bookie's answer to a range read.
func answerQuick(b *quickBookie, req Request, rng *rand.Rand) Response {
	resp := Response{ID: req.ID, From: req.To}
	switch {
	case b.mode == "down", b.mode == "flaky" && rng.IntN(3) == 0:
		resp.Status = StatusFailed
		return resp
	}
	size := 0
	for e := req.EntryID; len(resp.Entries) < req.MaxEntries; e++ {
		data, ok := b.entries[e]
		if !ok || len(resp.Entries) > 0 && size+len(data) > req.MaxBytes {
			break
		}
		if b.corrupt[e] {
			data = append([]byte(nil), data...)
			data[len(data)-1] ^= 0xff
		}
		size += len(data)
		resp.Entries = append(resp.Entries, data)
	}
	resp.Status = StatusOK
	if len(resp.Entries) == 0 {
		resp.Status = StatusNoSuchEntry
	}
	return resp
}
