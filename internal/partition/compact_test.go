package partition

import (
	"context"
	"errors"
	"hash/crc32"
	"sync/atomic"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// mkKeyedBatch builds an uncompressed v2 batch of records with these keys
// (a nil key: none) and values (a nil value: a tombstone).
func mkKeyedBatch(keys, values [][]byte) []byte {
	n := len(keys)
	rb := kmsg.RecordBatch{PartitionLeaderEpoch: -1, Magic: 2, LastOffsetDelta: int32(n - 1),
		ProducerID: -1, ProducerEpoch: -1, FirstSequence: -1, NumRecords: int32(n)}
	var recs []byte
	for i := range n {
		r := kmsg.Record{OffsetDelta: int32(i), Key: keys[i], Value: values[i]}
		r.Length = int32(len(r.AppendTo(nil)) - 1)
		recs = r.AppendTo(recs)
	}
	rb.Records = recs
	raw := rb.AppendTo(nil)
	putU32(raw[offBatchLength:], uint32(len(raw)-12))
	putU32(raw[offCRC:], crc32.Checksum(raw[offAttributes:], castagnoli))
	return raw
}

func TestRewriteBatch(t *testing.T) {
	raw := mkKeyedBatch([][]byte{[]byte("a"), []byte("b"), []byte("a"), []byte("c")},
		[][]byte{[]byte("1"), []byte("2"), []byte("3"), nil})
	b, err := ParseBatch(raw)
	if err != nil {
		t.Fatal(err)
	}
	recs, err := BatchRecords(b, raw)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 4 || recs[0].Key != recs[2].Key || recs[0].Key == recs[1].Key || !recs[3].Tombstone || recs[2].Tombstone {
		t.Fatalf("records %+v", recs)
	}
	for _, tc := range []struct {
		keep  []bool
		delta []int32
	}{
		{[]bool{false, true, true, false}, []int32{1, 2}},
		{[]bool{false, false, false, false}, nil},
		{[]bool{true, true, true, true}, []int32{0, 1, 2, 3}},
	} {
		out := RewriteBatch(raw, recs, tc.keep)
		if err := CheckCRC(out); err != nil {
			t.Fatalf("keep %v: %v", tc.keep, err)
		}
		ob, err := ParseBatch(out)
		if err != nil {
			t.Fatal(err)
		}
		// Offsets never change: the batch still covers what it covered.
		if ob.BaseOffset != b.BaseOffset || ob.LastOffsetDelta != b.LastOffsetDelta || int(ob.Records) != len(tc.delta) {
			t.Fatalf("keep %v: batch %+v from %+v", tc.keep, ob, b)
		}
		got, err := BatchRecords(ob, out)
		if err != nil {
			t.Fatal(err)
		}
		for i, r := range got {
			if r.OffsetDelta != tc.delta[i] {
				t.Fatalf("keep %v: offset deltas %+v", tc.keep, got)
			}
		}
	}
}

// rewritingLog is a memLog that counts rewrites (partition.Rewriter).
type rewritingLog struct {
	*memLog
	rewrites atomic.Uint64
}

func (l *rewritingLog) Rewrites() uint64 { return l.rewrites.Load() }

// TestCompactedPartition: keyless records are refused; after the log drops
// batches (a compaction, renumbering the entries of the segments it
// rewrote), a read of a removed offset returns the next survivor and the
// log start stays.
func TestCompactedPartition(t *testing.T) {
	l := &rewritingLog{memLog: newMemLog()}
	compacted := true
	p := openTest(t, l, nil, func(c *Config) { c.Compacted = func() bool { return compacted } })
	if r := <-p.Append(context.Background(), mkBatch(-1, -1, -1, 1, 0)); !errors.Is(r.Err, kerr.InvalidRecord) {
		t.Fatalf("a keyless record on a compacted partition: %v", r.Err)
	}
	key := [][]byte{[]byte("k")}
	for i := range 6 {
		appendOK(t, p, mkKeyedBatch(key, [][]byte{{byte('0' + i)}}))
		if i%2 == 1 {
			l.roll()
		}
	}
	// Sequential reads leave hints and index entries at old positions.
	if got := readAll(t, p, 0, 1<<20); len(got) != 6 {
		t.Fatalf("before compaction: %v", got)
	}
	// Compaction: the first two segments become one holding offsets 0
	// (kept, as the run's first batch) and 3; the renumbered positions
	// are announced by the rewrite count.
	l.mu.Lock()
	first := l.segs[0].entries[0]
	l.segs[0].entries, l.segs[0].compacted = [][]byte{first, l.segs[1].entries[1]}, true
	l.segs = append(l.segs[:1], l.segs[2:]...)
	l.mu.Unlock()
	l.rewrites.Add(1)
	for _, from := range []int64{2, 1} { // 2's old position is in a replaced segment
		if got := readAll(t, p, from, 1<<20); len(got) != 3 || got[0] != 3 || got[1] != 4 {
			t.Fatalf("read from removed offset %d: %v, want [3 4 5]", from, got)
		}
	}
	if got := readAll(t, p, 0, 1<<20); len(got) != 4 || got[0] != 0 || got[1] != 3 {
		t.Fatalf("read from the start: %v, want [0 3 4 5]", got)
	}
	if err := p.RefreshStart(context.Background()); err != nil || p.LogStartOffset() != 0 {
		t.Fatalf("log start %d (%v), want 0", p.LogStartOffset(), err)
	}
	// Back to cleanup.policy=delete: the gaps stay, and reads across them
	// still answer with the next batch.
	compacted = false
	if got := readAll(t, p, 1, 1<<20); len(got) != 3 || got[0] != 3 {
		t.Fatalf("read from a removed offset, no longer compacted: %v, want [3 4 5]", got)
	}
}
