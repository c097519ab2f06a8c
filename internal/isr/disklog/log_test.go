package disklog

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"quire/internal/isr"
)

func mustNil(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func openLog(t *testing.T, cfg Config) *Log {
	t.Helper()
	l, err := Open(cfg)
	mustNil(t, err)
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// fakeClock is the time ISRLog stamps batches with.
type fakeClock struct{ now time.Time }

func (c *fakeClock) Now() time.Time { return c.now }

func newFakeClock() *fakeClock { return &fakeClock{now: time.UnixMilli(1_000_000)} }

// recs builds records "prefix0", "prefix1", ...
func recs(prefix string, n int) [][]byte {
	out := make([][]byte, n)
	for i := range out {
		out[i] = []byte(fmt.Sprintf("%s%d", prefix, i))
	}
	return out
}

// TestISRLogMemLogExpectations runs internal/isr's TestMemLog expectations
// against the disk log, with a crash (CrashClone of the file system and a
// reopen) where MemLog's test calls Crash.
func TestISRLogMemLogExpectations(t *testing.T) {
	fs := vfs.NewCrashableMem()
	clock := newFakeClock()
	cfg := Config{FS: fs, Dir: "/p"}
	l := NewISRLog(openLog(t, cfg), clock.Now)
	if got := l.EndOffsetForEpoch(3); got != (isr.EpochEndOffset{Epoch: isr.NoEpoch, EndOffset: -1}) {
		t.Fatalf("empty log: %+v", got)
	}
	mustNil(t, l.Append(isr.Batch{BaseOffset: 0, LeaderEpoch: 2, Records: [][]byte{[]byte("a"), []byte("b")}}))
	mustNil(t, l.Append(isr.Batch{BaseOffset: 2, LeaderEpoch: 2, Records: [][]byte{[]byte("c")}}))
	l.AssignEpochStart(4, 3)
	mustNil(t, l.Append(isr.Batch{BaseOffset: 3, LeaderEpoch: 4, Records: [][]byte{[]byte("d"), []byte("e")}}))
	if err := l.Append(isr.Batch{BaseOffset: 9, LeaderEpoch: 4, Records: [][]byte{[]byte("x")}}); err == nil {
		t.Fatal("append with a gap accepted")
	}
	if err := l.Append(isr.Batch{BaseOffset: 5, LeaderEpoch: 4}); err == nil {
		t.Fatal("empty batch accepted")
	}
	if err := l.Append(isr.Batch{BaseOffset: 5, LeaderEpoch: -1, Records: recs("x", 1)}); err == nil {
		t.Fatal("batch without an epoch accepted")
	}
	for _, tc := range []struct {
		epoch int32
		want  isr.EpochEndOffset
	}{
		{1, isr.EpochEndOffset{Epoch: 1, EndOffset: 0}},
		{2, isr.EpochEndOffset{Epoch: 2, EndOffset: 3}},
		{3, isr.EpochEndOffset{Epoch: 2, EndOffset: 3}},
		{4, isr.EpochEndOffset{Epoch: 4, EndOffset: 5}},
		{7, isr.EpochEndOffset{Epoch: 4, EndOffset: 5}},
		{isr.NoEpoch, isr.EpochEndOffset{Epoch: isr.NoEpoch, EndOffset: -1}},
	} {
		if got := l.EndOffsetForEpoch(tc.epoch); got != tc.want {
			t.Errorf("EndOffsetForEpoch(%d) = %+v, want %+v", tc.epoch, got, tc.want)
		}
	}
	got := l.Read(1, 10)
	if len(got) != 3 || got[0].BaseOffset != 1 || len(got[0].Records) != 1 || string(got[0].Records[0]) != "b" ||
		got[1].BaseOffset != 2 || got[2].NextOffset() != 5 || got[2].LeaderEpoch != 4 {
		t.Fatalf("Read(1) = %+v", got)
	}
	if got := l.Read(1, 1); len(got) != 1 {
		t.Fatalf("maxBatches ignored: %+v", got)
	}
	if got := l.Read(5, 10); got != nil {
		t.Fatalf("read at the end: %+v", got)
	}
	// The flushed prefix survives a crash; the epoch cache follows the log.
	l.Flush()
	mustNil(t, l.Append(isr.Batch{BaseOffset: 5, LeaderEpoch: 6, Records: [][]byte{[]byte("f")}}))
	if l.FlushedOffset() != 5 || l.LatestEpoch() != 6 {
		t.Fatalf("flushed %d latest epoch %d", l.FlushedOffset(), l.LatestEpoch())
	}
	crashed := fs.CrashClone(vfs.CrashCloneCfg{})
	l = NewISRLog(openLog(t, Config{FS: crashed, Dir: "/p"}), clock.Now)
	if l.EndOffset() != 5 || l.LatestEpoch() != 4 || l.FlushedOffset() != 5 {
		t.Fatalf("after a crash: LEO %d latest epoch %d flushed %d", l.EndOffset(), l.LatestEpoch(), l.FlushedOffset())
	}
	l.TruncateTo(3)
	if l.LatestEpoch() != 2 || l.FlushedOffset() != 3 || l.EndOffset() != 3 {
		t.Fatalf("after truncation to 3: latest epoch %d flushed %d LEO %d", l.LatestEpoch(), l.FlushedOffset(), l.EndOffset())
	}
	l.AssignEpochStart(5, 3)
	l.TruncateTo(3)
	if l.LatestEpoch() != 2 {
		t.Fatalf("an epoch entry at the LEO survived a truncation there: %v", l.Log().Epochs())
	}
	l.AssignEpochStart(1, 3)
	if l.LatestEpoch() != 2 {
		t.Fatal("an older epoch start was recorded")
	}
	// Truncation inside a batch keeps its head as a batch.
	l.TruncateTo(1)
	got = l.Read(0, 10)
	if l.EndOffset() != 1 || len(got) != 1 || len(got[0].Records) != 1 || string(got[0].Records[0]) != "a" || got[0].LeaderEpoch != 2 {
		t.Fatalf("after truncation inside a batch: LEO %d read %+v", l.EndOffset(), got)
	}
	mustNil(t, l.Err())
	l.CheckpointHighWatermark(1)
	// What TruncateTo did is durable without a Flush.
	crashed2 := crashed.CrashClone(vfs.CrashCloneCfg{})
	l2 := NewISRLog(openLog(t, Config{FS: crashed2, Dir: "/p"}), clock.Now)
	if l2.EndOffset() != 1 || l2.HighWatermarkCheckpoint() != 1 || l2.LatestEpoch() != 2 {
		t.Fatalf("after a crash: LEO %d HW %d epoch %d", l2.EndOffset(), l2.HighWatermarkCheckpoint(), l2.LatestEpoch())
	}
}

func smallConfig(fs vfs.FS) Config {
	return Config{FS: fs, Dir: "/data/topic-0", SegmentBytes: 1 << 10, IndexIntervalBytes: 128}
}

// appendN appends n batches of one record each with growing timestamps.
func appendN(t *testing.T, l *Log, n int, epoch int32, ts int64, size int) {
	t.Helper()
	for range n {
		base := l.EndOffset()
		payload := encodeRecords([][]byte{bytes.Repeat([]byte{byte(base)}, size)})
		mustNil(t, l.AppendRaw(base, 1, epoch, ts+base, payload))
	}
}

func checkRecord(t *testing.T, l *Log, offset int64, size int) {
	t.Helper()
	got, err := l.ReadRaw(offset, 1)
	if err != nil || len(got) != 1 || got[0].BaseOffset != offset {
		t.Fatalf("ReadRaw(%d) = %+v, %v", offset, got, err)
	}
	records, err := decodeRecords(got[0].Payload, got[0].Count)
	if err != nil || !bytes.Equal(records[0], bytes.Repeat([]byte{byte(offset)}, size)) {
		t.Fatalf("record %d: %v %x", offset, err, records)
	}
}

// TestEpochForOffset: the epoch of the batch holding an offset, as
// ListOffsets answers it: the latest epoch started at or before it; an
// empty epoch superseded at the same offset holds no batch; at the log
// end the latest epoch started by then; below every entry (a log emptied
// and started again further on) none.
func TestEpochForOffset(t *testing.T) {
	l := NewISRLog(openLog(t, Config{FS: vfs.NewMem(), Dir: "/p"}), newFakeClock().Now)
	if got := l.Log().EpochForOffset(0); got != isr.NoEpoch {
		t.Fatalf("empty log: epoch %d", got)
	}
	mustNil(t, l.Append(isr.Batch{BaseOffset: 0, LeaderEpoch: 1, Records: recs("a", 3)}))
	l.AssignEpochStart(2, 3) // leads, writes nothing
	l.AssignEpochStart(3, 3)
	mustNil(t, l.Append(isr.Batch{BaseOffset: 3, LeaderEpoch: 3, Records: recs("b", 2)}))
	mustNil(t, l.Append(isr.Batch{BaseOffset: 5, LeaderEpoch: 5, Records: recs("c", 1)}))
	l.AssignEpochStart(6, 6) // the newest leader, nothing written yet
	for _, tc := range []struct {
		offset int64
		want   int32
	}{{0, 1}, {2, 1}, {3, 3}, {4, 3}, {5, 5}, {6, 6}, {100, 6}} {
		if got := l.Log().EpochForOffset(tc.offset); got != tc.want {
			t.Errorf("EpochForOffset(%d) = %d, want %d (epochs %v)", tc.offset, got, tc.want, l.Log().Epochs())
		}
	}
	mustNil(t, l.Log().TruncateFullyAndStartAt(10))
	mustNil(t, l.Append(isr.Batch{BaseOffset: 10, LeaderEpoch: 7, Records: recs("d", 1)}))
	if got := l.Log().EpochForOffset(9); got != isr.NoEpoch {
		t.Errorf("below every entry: epoch %d, want none", got)
	}
	if got := l.Log().EpochForOffset(10); got != 7 {
		t.Errorf("EpochForOffset(10) = %d, want 7", got)
	}
}

// TestAppendReadRollIndexes: appends roll segments by size, every offset
// reads back through the sparse index, a read stops at its byte limit but
// returns at least one batch, and a reopen (with an index file deleted and
// another corrupted) rebuilds what it needs and reads the same.
func TestAppendReadRollIndexes(t *testing.T) {
	fs := vfs.NewMem()
	cfg := smallConfig(fs)
	l := openLog(t, cfg)
	appendN(t, l, 200, 1, 0, 40)
	segs := l.Segments()
	if len(segs) < 5 {
		t.Fatalf("only %d segments after 200 appends of ~80 bytes into 1 KiB segments", len(segs))
	}
	for i, s := range segs {
		if s.Bytes > cfg.SegmentBytes || (i > 0 && s.BaseOffset != segs[i-1].NextOffset) {
			t.Fatalf("segments %+v", segs)
		}
	}
	for o := int64(0); o < 200; o++ {
		checkRecord(t, l, o, 40)
	}
	got, err := l.ReadRaw(10, 200)
	if err != nil || len(got) != 5 || got[0].BaseOffset != 10 { // 41-byte payloads: the fifth reaches 200
		t.Fatalf("ReadRaw(10, 200 bytes) = %d batches, %v", len(got), err)
	}
	if got, err := l.ReadRaw(10, 1); err != nil || len(got) != 1 {
		t.Fatalf("a read under one batch's size returned %d batches, %v", len(got), err)
	}
	if _, err := l.ReadRaw(201, 1); !errors.Is(err, isr.ErrOffsetOutOfRange) {
		t.Fatalf("read past the end: %v", err)
	}
	if got, err := l.ReadRaw(200, 1); err != nil || got != nil {
		t.Fatalf("read at the end: %v %v", got, err)
	}
	mustNil(t, l.Close())
	// Missing and invalid indexes are rebuilt.
	mustNil(t, fs.Remove(fs.PathJoin(cfg.Dir, segmentName(segs[0].BaseOffset, indexSuffix))))
	f, err := fs.OpenReadWrite(fs.PathJoin(cfg.Dir, segmentName(segs[1].BaseOffset, indexSuffix)), vfs.WriteCategoryUnspecified)
	mustNil(t, err)
	_, err = f.WriteAt([]byte{0xff, 0xff, 0xff}, 0)
	mustNil(t, err)
	mustNil(t, f.Close())
	l = openLog(t, cfg)
	if st := l.Stats(); st.RebuiltIndexes != 2 {
		t.Fatalf("rebuilt %d indexes, want 2: %+v", st.RebuiltIndexes, st)
	}
	for o := int64(0); o < 200; o++ {
		checkRecord(t, l, o, 40)
	}
	if !slices.Equal(l.Segments(), segs) {
		t.Fatalf("segments after reopen %+v, before %+v", l.Segments(), segs)
	}
}

// TestRollByTime: a batch whose timestamp is SegmentMs past the active
// segment's first rolls a new segment.
func TestRollByTime(t *testing.T) {
	cfg := smallConfig(vfs.NewMem())
	cfg.SegmentBytes, cfg.SegmentMs = 1<<20, 1000
	l := openLog(t, cfg)
	for i, ts := range []int64{100, 600, 1099, 1100, 1500, 2200} {
		mustNil(t, l.AppendRaw(int64(i), 1, 0, ts, []byte{1}))
	}
	var bases []int64
	for _, s := range l.Segments() {
		bases = append(bases, s.BaseOffset)
	}
	if !slices.Equal(bases, []int64{0, 3, 5}) {
		t.Fatalf("segment bases %v, want [0 3 5]", bases)
	}
}

// TestOffsetForTimestamp looks up by time through the time index, across
// segments and after a reopen (time indexes of rolled segments from disk).
func TestOffsetForTimestamp(t *testing.T) {
	cfg := smallConfig(vfs.NewMem())
	// Index entries every 5 batches of 77 bytes, segments of 13 batches:
	// the last batches of a segment are past its last index entry.
	cfg.IndexIntervalBytes = 350
	l := openLog(t, cfg)
	appendN(t, l, 100, 1, 5000, 40) // batch o has max timestamp 5000+o
	check := func() {
		t.Helper()
		for _, tc := range []struct {
			ts   int64
			want int64
			ok   bool
		}{{0, 0, true}, {5100, 0, false}} {
			got, ok, err := l.OffsetForTimestamp(tc.ts)
			if err != nil || ok != tc.ok || (ok && got != tc.want) {
				t.Fatalf("OffsetForTimestamp(%d) = %d %v %v, want %d %v", tc.ts, got, ok, err, tc.want, tc.ok)
			}
		}
		for o := int64(0); o < 100; o++ {
			if got, ok, err := l.OffsetForTimestamp(5000 + o); err != nil || !ok || got != o {
				t.Fatalf("OffsetForTimestamp(%d) = %d %v %v, want %d", 5000+o, got, ok, err, o)
			}
		}
	}
	check()
	mustNil(t, l.Close())
	l = openLog(t, cfg)
	check()

	// Segments recovery scanned (nothing was flushed before the crash) get
	// time indexes ending at their max timestamp, read back once trusted.
	crashable := vfs.NewCrashableMem()
	cfg.FS = crashable
	unflushed := openLog(t, cfg)
	appendN(t, unflushed, 100, 1, 5000, 40)
	cfg.FS = crashable.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 100, RNG: rand.New(rand.NewPCG(1, 1))})
	l = openLog(t, cfg)
	if st := l.Stats(); st.RecoveredSegments < 5 {
		t.Fatalf("recovery scanned %d segments, want all", st.RecoveredSegments)
	}
	check()
	mustNil(t, l.Close())
	l = openLog(t, cfg)
	check()
}

// TestRetentionAndDeleteRecords: retention deletes whole segments only,
// oldest first, never the active one nor past the HW; DeleteRecordsBefore
// moves the log start (inside a segment too); both survive a reopen.
func TestRetentionAndDeleteRecords(t *testing.T) {
	cfg := smallConfig(vfs.NewMem())
	cfg.RetentionMs = 1000
	l := openLog(t, cfg)
	appendN(t, l, 100, 1, 0, 40) // timestamps 0..99
	segs := l.Segments()
	// Nothing is older than 1000 ms at now=1050 except batches with ts < 50;
	// only segments wholly older go, and none past the HW of 20.
	n, err := l.EnforceRetention(1050, 20)
	mustNil(t, err)
	if l.LogStartOffset() > 20 || n == 0 || l.Segments()[0].BaseOffset != l.LogStartOffset() {
		t.Fatalf("after retention up to HW 20: deleted %d, log start %d, segments %+v", n, l.LogStartOffset(), l.Segments())
	}
	n, err = l.EnforceRetention(1_000_000, 100)
	mustNil(t, err)
	if got := l.Segments(); len(got) != 1 || got[0] != segs[len(segs)-1] {
		t.Fatalf("retention of everything kept %+v (deleted %d); want the active segment only", got, n)
	}
	if _, err := l.ReadRaw(l.LogStartOffset()-1, 10); !errors.Is(err, isr.ErrOffsetOutOfRange) {
		t.Fatalf("read below the log start: %v", err)
	}
	start := l.LogStartOffset()
	mustNil(t, l.DeleteRecordsBefore(start+2))
	if err := l.DeleteRecordsBefore(1000); !errors.Is(err, isr.ErrOffsetOutOfRange) {
		t.Fatalf("delete past the LEO: %v", err)
	}
	mustNil(t, l.Close())
	l = openLog(t, cfg)
	if l.LogStartOffset() != start+2 {
		t.Fatalf("log start %d after reopen, want %d", l.LogStartOffset(), start+2)
	}
	checkRecord(t, l, start+2, 40)

	// By size.
	cfg2 := smallConfig(vfs.NewMem())
	cfg2.RetentionBytes = 3 << 10
	l2 := openLog(t, cfg2)
	appendN(t, l2, 200, 1, 0, 40)
	if _, err := l2.EnforceRetention(0, 200); err != nil {
		t.Fatal(err)
	}
	// Kafka's rule: a segment goes while the rest still holds retention.bytes.
	if size := l2.Size(); size < cfg2.RetentionBytes || size >= cfg2.RetentionBytes+cfg2.SegmentBytes {
		t.Fatalf("size %d after retention to %d bytes", size, cfg2.RetentionBytes)
	}
}

// TestTruncate: truncation inside the active segment, into a rolled one
// (later segments deleted) and at a segment's base; the epoch cache follows;
// everything is durable at return (a crash clone shows it).
func TestTruncate(t *testing.T) {
	fs := vfs.NewCrashableMem()
	cfg := smallConfig(fs)
	l := openLog(t, cfg)
	appendN(t, l, 30, 1, 0, 40)
	mustNil(t, l.AssignEpochStart(3, 30))
	appendN(t, l, 30, 3, 0, 40)
	mustNil(t, l.AssignEpochStart(5, 60))
	appendN(t, l, 30, 5, 0, 40)
	mustNil(t, l.Flush())
	for _, cut := range []int64{85, 61, 60, 45, 30, 12} {
		end, err := l.TruncateTo(cut)
		mustNil(t, err)
		if end != cut || l.EndOffset() != cut || l.FlushedOffset() != cut {
			t.Fatalf("TruncateTo(%d) = %d, LEO %d, flushed %d", cut, end, l.EndOffset(), l.FlushedOffset())
		}
		segs := l.Segments()
		if last := segs[len(segs)-1]; last.NextOffset != cut {
			t.Fatalf("segments after TruncateTo(%d): %+v", cut, segs)
		}
		for _, e := range l.Epochs() {
			if e.StartOffset >= cut {
				t.Fatalf("epoch entry %+v survived truncation to %d", e, cut)
			}
		}
		clone := fs.CrashClone(vfs.CrashCloneCfg{})
		r := openLog(t, Config{FS: clone, Dir: cfg.Dir, SegmentBytes: cfg.SegmentBytes, IndexIntervalBytes: cfg.IndexIntervalBytes})
		if r.EndOffset() != cut || !slices.Equal(r.Epochs(), l.Epochs()) {
			t.Fatalf("after TruncateTo(%d) and a crash: LEO %d epochs %v, want %v", cut, r.EndOffset(), r.Epochs(), l.Epochs())
		}
		for o := int64(0); o < cut; o++ {
			checkRecord(t, r, o, 40)
		}
		// Appending after a truncation into a rolled segment works.
		appendN(t, r, 3, 7, 0, 40)
		for o := cut; o < cut+3; o++ {
			checkRecord(t, r, o, 40)
		}
	}
	if got := l.Epochs(); !slices.Equal(got, []EpochEntry{{Epoch: 1, StartOffset: 0}}) {
		t.Fatalf("epochs %v", got)
	}
}

// TestTruncateFullyAndStartAt empties the log at an offset past its end;
// it survives a crash and takes appends from there.
func TestTruncateFullyAndStartAt(t *testing.T) {
	fs := vfs.NewCrashableMem()
	cfg := smallConfig(fs)
	l := openLog(t, cfg)
	appendN(t, l, 50, 1, 0, 40)
	mustNil(t, l.Flush())
	mustNil(t, l.TruncateFullyAndStartAt(1000))
	if l.EndOffset() != 1000 || l.LogStartOffset() != 1000 || len(l.Epochs()) != 0 || len(l.Segments()) != 1 {
		t.Fatalf("LEO %d start %d epochs %v segments %v", l.EndOffset(), l.LogStartOffset(), l.Epochs(), l.Segments())
	}
	r := openLog(t, Config{FS: fs.CrashClone(vfs.CrashCloneCfg{}), Dir: cfg.Dir})
	if r.EndOffset() != 1000 || r.LogStartOffset() != 1000 || len(r.Segments()) != 1 {
		t.Fatalf("after a crash: LEO %d start %d segments %v", r.EndOffset(), r.LogStartOffset(), r.Segments())
	}
	appendN(t, r, 5, 2, 0, 40)
	checkRecord(t, r, 1002, 40)
}

// TestCheckpointFiles: the checkpoint files' text formats (Kafka's for the
// epoch cache) and what a reopen reads back.
func TestCheckpointFiles(t *testing.T) {
	fs := vfs.NewMem()
	cfg := smallConfig(fs)
	l := openLog(t, cfg)
	appendN(t, l, 3, 2, 0, 10)
	mustNil(t, l.AssignEpochStart(4, 3))
	appendN(t, l, 2, 4, 0, 10)
	mustNil(t, l.CheckpointHighWatermark(4))
	mustNil(t, l.DeleteRecordsBefore(1))
	mustNil(t, l.Close())
	for name, want := range map[string]string{
		epochCheckpointFile:    "0\n2\n2 1\n4 3\n",
		hwCheckpointFile:       "0\n4\n",
		logStartCheckpointFile: "0\n1\n",
	} {
		data, ok, err := readFile(fs, fs.PathJoin(cfg.Dir, name))
		if err != nil || !ok || string(data) != want {
			t.Errorf("%s = %q (%v %v), want %q", name, data, ok, err, want)
		}
	}
	l = openLog(t, cfg)
	if l.HighWatermarkCheckpoint() != 4 || l.LogStartOffset() != 1 || l.LatestEpoch() != 4 || l.EndOffset() != 5 {
		t.Fatalf("reopened: HW %d start %d epoch %d LEO %d", l.HighWatermarkCheckpoint(), l.LogStartOffset(), l.LatestEpoch(), l.EndOffset())
	}
	for _, bad := range []string{"", "1\n0\n", "0\n1\n3 0\n2 5\n", "0\n2\n3 5\n4 1\n", "0\n1\nx y\n"} {
		if _, err := parseEpochCheckpoint([]byte(bad)); err == nil {
			t.Errorf("epoch checkpoint %q accepted", bad)
		}
	}
}

// TestRealDisk runs appends, a roll, a truncation (ftruncate on a real
// file, not the copy MemFS needs) and a reopen on the operating system's
// file system.
func TestRealDisk(t *testing.T) {
	cfg := Config{FS: vfs.Default, Dir: t.TempDir() + "/topic-0", SegmentBytes: 1 << 10, IndexIntervalBytes: 128}
	l := openLog(t, cfg)
	appendN(t, l, 60, 1, 0, 40)
	mustNil(t, l.Flush())
	if _, err := l.TruncateTo(45); err != nil {
		t.Fatal(err)
	}
	appendN(t, l, 5, 2, 0, 40)
	mustNil(t, l.Close())
	l = openLog(t, cfg)
	if l.EndOffset() != 50 || l.LatestEpoch() != 2 {
		t.Fatalf("LEO %d epoch %d", l.EndOffset(), l.LatestEpoch())
	}
	for o := int64(0); o < 50; o++ {
		checkRecord(t, l, o, 40)
	}
	if _, err := os.Stat(cfg.Dir + "/" + segmentName(0, logSuffix)); err != nil {
		t.Fatal(err)
	}
}

// TestFailedLogRefusesWrites: after a failed sync the log refuses
// mutations until reopened; a failed append write does not fail it.
func TestFailedLogRefusesWrites(t *testing.T) {
	mem := vfs.NewCrashableMem()
	ffs := newFaultFS(mem, 1)
	cfg := smallConfig(ffs)
	l := openLog(t, cfg)
	appendN(t, l, 5, 1, 0, 40)
	ffs.failAll.Store(true)
	if err := l.AppendRaw(5, 1, 1, 0, []byte{1}); err == nil || l.Err() != nil {
		t.Fatalf("append with the disk full: %v (log err %v)", err, l.Err())
	}
	if err := l.Flush(); err == nil || !errors.Is(l.Flush(), ErrFailed) {
		t.Fatalf("flush with the disk full: %v", err)
	}
	ffs.failAll.Store(false)
	if err := l.AppendRaw(5, 1, 1, 0, []byte{1}); !errors.Is(err, ErrFailed) {
		t.Fatalf("append to a failed log: %v", err)
	}
	_ = l.Close()
	l = openLog(t, cfg)
	appendN(t, l, 5, 1, 0, 40)
	mustNil(t, l.Flush())
	for o := int64(0); o < 10; o++ {
		checkRecord(t, l, o, 40)
	}
}

// TestNoSyncUntilFlush: appends and rolls sync nothing by themselves (the
// replica core decides when to flush): a crash before Flush keeps nothing,
// one after keeps everything.
func TestNoSyncUntilFlush(t *testing.T) {
	fs := vfs.NewCrashableMem()
	cfg := smallConfig(fs)
	l := openLog(t, cfg)
	appendN(t, l, 50, 1, 0, 40)
	if len(l.Segments()) < 3 || l.FlushedOffset() != 0 {
		t.Fatalf("segments %v flushed %d", l.Segments(), l.FlushedOffset())
	}
	if r := openLog(t, Config{FS: fs.CrashClone(vfs.CrashCloneCfg{}), Dir: cfg.Dir}); r.EndOffset() != 0 {
		t.Fatalf("unflushed appends survived a crash: LEO %d", r.EndOffset())
	}
	mustNil(t, l.Flush())
	if r := openLog(t, Config{FS: fs.CrashClone(vfs.CrashCloneCfg{}), Dir: cfg.Dir}); r.EndOffset() != 50 {
		t.Fatalf("flushed appends lost in a crash: LEO %d", r.EndOffset())
	}
}

// The log keeps ReserveBytes free: an append that would leave less is
// refused with ErrNoSpace before anything is written (the log unchanged and
// usable), and appends are taken again as soon as space is freed. Through
// ISRLog the refusal wraps isr.ErrLogWrite, which the replica answers with
// KAFKA_STORAGE_ERROR instead of stopping.
func TestAppendKeepsReserve(t *testing.T) {
	fs := vfs.NewMem()
	cfg := smallConfig(fs)
	cfg.SegmentBytes = 1 << 20
	cfg.ReserveBytes = 1 << 20
	// MemFS reports what it is told: the free space shrinks by what the
	// log holds, as a real file system's would.
	var l *Log
	avail := func() {
		fs.TestingSetDiskUsage(vfs.DiskUsage{AvailBytes: uint64(1<<20 + 64<<10 - l.Size()), TotalBytes: 8 << 20})
	}
	fs.TestingSetDiskUsage(vfs.DiskUsage{AvailBytes: 1<<20 + 64<<10, TotalBytes: 8 << 20})
	l = openLog(t, cfg)
	var refused error
	for i := 0; i < 1000 && refused == nil; i++ {
		avail()
		base := l.EndOffset()
		refused = l.AppendRaw(base, 1, 0, base, encodeRecords([][]byte{bytes.Repeat([]byte{1}, 1000)}))
	}
	if !errors.Is(refused, ErrNoSpace) {
		t.Fatalf("appends past the reserve: %v, want ErrNoSpace", refused)
	}
	end := l.EndOffset()
	if end == 0 || end > 64 {
		t.Fatalf("%d batches of ~1 KB taken with 64 KiB above the reserve", end)
	}
	if err := l.Err(); err != nil {
		t.Fatalf("log failed by a refusal: %v", err)
	}
	if got := l.Stats().NoSpaceRefusals; got != 1 {
		t.Fatalf("NoSpaceRefusals = %d, want 1", got)
	}
	a := NewISRLog(l, newFakeClock().Now)
	if err := a.Append(isr.Batch{BaseOffset: end, LeaderEpoch: 0, Records: [][]byte{bytes.Repeat([]byte{2}, 1000)}}); !errors.Is(err, isr.ErrLogWrite) || !errors.Is(err, ErrNoSpace) {
		t.Fatalf("ISRLog append on a full disk = %v, want isr.ErrLogWrite wrapping ErrNoSpace", err)
	}
	fs.TestingSetDiskUsage(vfs.DiskUsage{AvailBytes: 100 << 20, TotalBytes: 200 << 20})
	mustNil(t, l.AppendRaw(end, 1, 0, end, encodeRecords([][]byte{[]byte("after")})))
	mustNil(t, l.Flush())
	if l.EndOffset() != end+1 {
		t.Fatalf("LEO %d after space returned, want %d", l.EndOffset(), end+1)
	}
}
