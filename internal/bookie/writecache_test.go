package bookie

import (
	"maps"
	"math/rand/v2"
	"slices"
	"testing"
)

// The run-plus-map write-cache half against a map: mostly in-order adds per ledger, with
// re-adds, adds before the run, gaps that the run later grows into, and empty payloads.
func TestWriteCacheHalfMatchesMap(t *testing.T) {
	for seed := range uint64(50) {
		rng := rand.New(rand.NewPCG(seed, 3))
		h := newWriteCacheHalf()
		var arena bodyArena
		oracle := make(map[cacheKey]cachedEntry)
		next := map[int64]int64{}
		for i := range 2000 {
			ledgerID := rng.Int64N(3)
			k := cacheKey{ledgerID: ledgerID}
			switch r := rng.IntN(10); {
			case r < 6:
				k.entryID = next[ledgerID]
				next[ledgerID]++
			case r < 8:
				k.entryID = next[ledgerID] + rng.Int64N(5) // ahead: a gap the run may grow into
			default:
				k.entryID = rng.Int64N(next[ledgerID] + 1) // a re-add, or before the run
			}
			v := cachedEntry{lastAddConfirmed: int64(i), payload: arena.clone(make([]byte, rng.IntN(3)))}
			h.put(k, v)
			oracle[k] = v
			if got, ok := h.get(k); !ok || got.lastAddConfirmed != v.lastAddConfirmed {
				t.Fatalf("seed %d: get(%v) right after put = %v %v", seed, k, got, ok)
			}
		}
		wantBytes := 0
		for _, v := range oracle {
			wantBytes += len(v.payload) + entryOverhead
		}
		if h.count != len(oracle) || h.bytes != wantBytes {
			t.Fatalf("seed %d: count %d bytes %d, want %d and %d", seed, h.count, h.bytes, len(oracle), wantBytes)
		}
		keys, values := h.sorted()
		if want := slices.SortedFunc(maps.Keys(oracle), cacheKey.compare); !slices.Equal(keys, want) {
			t.Fatalf("seed %d: sorted keys\n%v\nwant\n%v", seed, keys, want)
		}
		for i, k := range keys {
			if values[i].lastAddConfirmed != oracle[k].lastAddConfirmed {
				t.Fatalf("seed %d: %v holds add %d, want %d", seed, k, values[i].lastAddConfirmed, oracle[k].lastAddConfirmed)
			}
			if got, ok := h.get(k); !ok || got.lastAddConfirmed != oracle[k].lastAddConfirmed {
				t.Fatalf("seed %d: get(%v) = %v %v", seed, k, got, ok)
			}
		}
		if _, ok := h.get(cacheKey{ledgerID: 7, entryID: 1}); ok {
			t.Fatal("found an entry never added")
		}
	}
}

func TestBodyArena(t *testing.T) {
	var a bodyArena
	x := a.concat([]byte("head"), []byte("tail"))
	y := a.clone([]byte("next"))
	if string(x) != "headtail" || string(y) != "next" || cap(x) != len(x) {
		t.Fatalf("got %q (cap %d) and %q", x, cap(x), y)
	}
	_ = append(x, '!') // a full-capacity slice: appending copies, never overwrites y
	if string(y) != "next" {
		t.Fatalf("append to one body overwrote the next: %q", y)
	}
	big := a.clone(make([]byte, arenaChunkBytes))
	if len(big) != arenaChunkBytes {
		t.Fatal("big body truncated")
	}
}
