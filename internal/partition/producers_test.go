package partition

import (
	"testing"
	"time"
)

// TestProducersExpire: producers idle past the expiry are forgotten (and
// then accepted as new), a producer with a batch still in flight is kept,
// and the table's map is rebuilt once it has shrunk, so memory follows the
// producers that still write.
func TestProducersExpire(t *testing.T) {
	ps := newProducers()
	start := time.Unix(1_000_000, 0)
	const n = 1000
	for pid := range int64(n) {
		b, err := ParseBatch(mkBatch(pid, 0, 0, 1, 0))
		if err != nil {
			t.Fatal(err)
		}
		ps.record(b, doneRecord(), start.Add(time.Duration(pid)*time.Second))
	}
	// Producer 999 has a batch in flight: never forgotten while it is.
	inflight := &batchRecord{done: make(chan struct{})}
	b, _ := ParseBatch(mkBatch(n-1, 0, 1, 1, 0))
	ps.record(b, inflight, start)

	cutoff := start.Add(900 * time.Second) // producers 0..899 appended before it
	if got := ps.expire(cutoff); got != 900 {
		t.Fatalf("expired %d producers, want 900", got)
	}
	if len(ps.m) != 100 || ps.m[899] != nil || ps.m[900] == nil {
		t.Fatalf("%d producers left (899 kept: %v, 900 kept: %v)", len(ps.m), ps.m[899] != nil, ps.m[900] != nil)
	}
	if ps.peak != 100 {
		t.Fatalf("the map was not rebuilt after shrinking to a tenth: peak %d", ps.peak)
	}
	// A forgotten producer writing again with a later sequence is new.
	b, _ = ParseBatch(mkBatch(5, 0, 7, 1, 0))
	if dup, err := ps.check(b); dup != nil || err != nil {
		t.Fatalf("forgotten producer's next batch: dup %v, err %v", dup, err)
	}

	if got := ps.expire(start.Add(time.Hour)); got != 99 {
		t.Fatalf("expired %d, want 99 (all but the one in flight)", got)
	}
	if ps.m[n-1] == nil {
		t.Fatal("a producer with a batch in flight was forgotten")
	}
	close(inflight.done)
	if got := ps.expire(start.Add(time.Hour)); got != 1 || len(ps.m) != 0 {
		t.Fatalf("after its batch settled: expired %d, %d left", got, len(ps.m))
	}
}
