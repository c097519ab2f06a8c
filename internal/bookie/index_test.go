package bookie

import (
	"errors"
	"log/slog"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// The block index against a dumb oracle: random checkpoint-like batches of locations
// (sorted, overwriting earlier ones, across block boundaries), ledger deletions, flushes
// and compactions on a real Pebble, compared after every step with a map holding the
// newest location per entry — what one Set per entry would give.
func TestLocationBlocksMatchOracle(t *testing.T) {
	for seed := range uint64(10) {
		rng := rand.New(rand.NewPCG(seed, 7))
		db, err := pebble.Open("index", &pebble.Options{FS: vfs.NewMem(), Merger: locationMergerOptions, Logger: pebbleLogger{log: slog.New(slog.DiscardHandler)}})
		if err != nil {
			t.Fatal(err)
		}
		oracle := make(map[cacheKey]location)
		logID := uint64(1)
		for step := range 40 {
			switch op := rng.IntN(10); {
			case op < 7: // a checkpoint
				batchKeys := make(map[cacheKey]location)
				for range rng.IntN(300) {
					k := cacheKey{ledgerID: rng.Int64N(4), entryID: rng.Int64N(400)}
					if rng.IntN(50) == 0 {
						k.entryID = 1<<62 + rng.Int64N(3) // far from the others
					}
					batchKeys[k] = location{logID: logID, offset: rng.Int64N(1 << 40), size: rng.Uint32()}
				}
				logID++
				keys := slices.SortedFunc(maps.Keys(batchKeys), cacheKey.compare)
				locs := make([]location, len(keys))
				for i, k := range keys {
					locs[i] = batchKeys[k]
				}
				skipLedger := rng.Int64N(8) // sometimes a ledger deleted meanwhile
				b := db.NewBatch()
				if err := appendBlockOperands(b, keys, locs, func(k cacheKey) bool { return k.ledgerID == skipLedger }); err != nil {
					t.Fatal(err)
				}
				if err := b.Commit(pebble.NoSync); err != nil {
					t.Fatal(err)
				}
				for i, k := range keys {
					if k.ledgerID != skipLedger {
						oracle[k] = locs[i]
					}
				}
			case op < 8:
				ledgerID := rng.Int64N(4)
				lower, upper := ledgerEntriesBounds(ledgerID)
				if err := db.DeleteRange(lower, upper, pebble.NoSync); err != nil {
					t.Fatal(err)
				}
				for k := range oracle {
					if k.ledgerID == ledgerID {
						delete(oracle, k)
					}
				}
			case op < 9:
				if err := db.Flush(); err != nil {
					t.Fatal(err)
				}
			default:
				if err := db.Compact(t.Context(), []byte{keyPrefixBlock}, []byte{keyPrefixBlock + 1}, true); err != nil {
					t.Fatal(err)
				}
			}
			got := make(map[cacheKey]location)
			var previous *cacheKey
			if err := scanLocations(db, func(k cacheKey, l location) {
				if previous != nil && previous.compare(k) >= 0 {
					t.Fatalf("seed %d step %d: scan out of order: %v after %v", seed, step, k, *previous)
				}
				previous = &k
				got[k] = l
			}); err != nil {
				t.Fatal(err)
			}
			if !maps.Equal(got, oracle) {
				t.Fatalf("seed %d step %d: scan has %d locations, oracle %d", seed, step, len(got), len(oracle))
			}
			checked := 0
			for k, want := range oracle { // map order: a different sample each step
				if checked++; checked > 50 && step < 39 {
					break
				}
				l, ok, err := lookupLocation(db, k)
				if err != nil || !ok || l != want {
					t.Fatalf("seed %d step %d: lookup %v = %v %v %v, want %v", seed, step, k, l, ok, err, want)
				}
			}
			if _, ok, err := lookupLocation(db, cacheKey{ledgerID: 9, entryID: 5}); ok || err != nil {
				t.Fatalf("lookup of an absent entry: ok=%v err=%v", ok, err)
			}
		}
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// Within one operand a later record for a slot wins; across operands the newer one does,
// whichever direction Pebble feeds them.
func TestLocationMergerOrder(t *testing.T) {
	loc := func(n uint64) location { return location{logID: n, offset: int64(n), size: uint32(n)} }
	op := func(recs ...any) []byte {
		var v []byte
		for i := 0; i < len(recs); i += 2 {
			v = appendLocationRecord(v, recs[i].(int), loc(recs[i+1].(uint64)))
		}
		return v
	}
	oldest, middle, newest := op(1, uint64(1), 2, uint64(1), 1, uint64(2)), op(2, uint64(3), 3, uint64(3)), op(3, uint64(4))
	want := map[int]location{1: loc(2), 2: loc(3), 3: loc(4)}
	check := func(name string, m pebble.ValueMerger) {
		t.Helper()
		v, _, err := m.Finish(true)
		if err != nil {
			t.Fatal(err)
		}
		b, err := decodeBlock(v)
		if err != nil {
			t.Fatal(err)
		}
		for slot := range blockEntries {
			l, ok := b.get(slot)
			if w, want := want[slot]; ok != want || l != w {
				t.Fatalf("%s: slot %d = %v %v, want %v %v", name, slot, l, ok, w, want)
			}
		}
	}
	m, err := locationMergerOptions.Merge(nil, oldest)
	if err != nil {
		t.Fatal(err)
	}
	if m.MergeNewer(middle) != nil || m.MergeNewer(newest) != nil {
		t.Fatal("MergeNewer failed")
	}
	check("newer", m)
	m, _ = locationMergerOptions.Merge(nil, newest)
	if m.MergeOlder(middle) != nil || m.MergeOlder(oldest) != nil {
		t.Fatal("MergeOlder failed")
	}
	check("older", m)
}

func TestLocationBlockRejectsCorruption(t *testing.T) {
	good := appendLocationRecord(nil, 5, location{logID: 1, offset: 2, size: 3})
	for name, v := range map[string][]byte{
		"slot out of range": appendLocationRecord(nil, blockEntries, location{logID: 1}),
		"truncated":         good[:len(good)-1],
		"offset too large":  append([]byte{1, 1}, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01, 1),
	} {
		if _, err := decodeBlock(v); !errors.Is(err, errCorruptBlock) {
			t.Errorf("%s: err = %v, want errCorruptBlock", name, err)
		}
		if _, err := locationMergerOptions.Merge(nil, v); err == nil {
			t.Errorf("%s: merger accepted it", name)
		}
	}
}
