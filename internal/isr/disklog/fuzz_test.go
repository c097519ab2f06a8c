package disklog

import (
	"bytes"
	"math"
	"slices"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// FuzzRecoverSegment opens a log whose only segment holds arbitrary bytes.
// Invariants: recovery never panics nor fails (bad bytes are cut, not an
// error); what it keeps is a prefix of the file made of whole batches, each
// passing its CRC, offsets dense from the segment's base; every batch reads
// back as stored; the kept prefix survives a reopen unchanged.
func FuzzRecoverSegment(f *testing.F) {
	valid := encodeBatch(batchHeader{baseOffset: 0, count: 2, epoch: 1, maxTimestamp: 5}, encodeRecords([][]byte{[]byte("a"), []byte("bc")}))
	second := encodeBatch(batchHeader{baseOffset: 2, count: 1, epoch: 3, maxTimestamp: 9}, []byte("xyz"))
	f.Add([]byte{})
	f.Add(valid)
	f.Add(append(slices.Concat(valid, second), 0, 0, 0))
	f.Add(slices.Concat(valid, second[:20]))
	flipped := slices.Concat(valid, second)
	flipped[len(flipped)-1] ^= 1
	f.Add(flipped)
	f.Fuzz(func(t *testing.T, data []byte) {
		fs := vfs.NewMem()
		mustNil(t, fs.MkdirAll("/p", 0o755))
		w, err := fs.Create("/p/"+segmentName(0, logSuffix), vfs.WriteCategoryUnspecified)
		mustNil(t, err)
		_, err = w.Write(slices.Clone(data)) // MemFS scrambles what it wrote under -tags invariants
		mustNil(t, err)
		mustNil(t, w.Close())
		cfg := Config{FS: fs, Dir: "/p", MaxBatchBytes: 1 << 16, IndexIntervalBytes: 64}
		l, err := Open(cfg)
		if err != nil {
			t.Fatalf("recovery failed: %v", err)
		}
		batches, err := l.ReadRaw(0, math.MaxInt)
		if err != nil {
			t.Fatalf("read after recovery: %v", err)
		}
		var kept []byte
		next := int64(0)
		for _, b := range batches {
			if b.BaseOffset != next {
				t.Fatalf("batch at %d where %d was next", b.BaseOffset, next)
			}
			stored := encodeBatch(batchHeader{baseOffset: b.BaseOffset, count: b.Count, epoch: b.LeaderEpoch, maxTimestamp: b.MaxTimestamp}, b.Payload)
			if !checkCRC(stored) {
				t.Fatal("a batch with a bad CRC")
			}
			kept = append(kept, stored...)
			next = b.NextOffset()
		}
		if !bytes.HasPrefix(data, kept) || next != l.EndOffset() {
			t.Fatalf("kept %d bytes that are not a prefix of the file, or LEO %d after batches ending at %d", len(kept), l.EndOffset(), next)
		}
		mustNil(t, l.Close())
		l, err = Open(cfg)
		mustNil(t, err)
		defer l.Close()
		if l.EndOffset() != next || l.Size() != int64(len(kept)) {
			t.Fatalf("reopened: LEO %d size %d, want %d and %d", l.EndOffset(), l.Size(), next, len(kept))
		}
	})
}
