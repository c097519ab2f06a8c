package disklog

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"quire/internal/isr"
)

// TestISRLogMatchesMemLog checks ISRLog against isr.MemLog, the in-memory
// model of the same interface, as a quick-check against a dumb oracle:
// seeded random appends (newer and older epochs, batches of 1-4 records),
// epoch starts assigned at the LEO, truncations anywhere (inside batches
// too), flushes, HW checkpoints and crashes go to both, and after every
// step every observable answer must be the same: LEO, flushed offset,
// latest epoch, the epoch cache, EndOffsetForEpoch for every epoch, Read
// from every offset with several batch limits, the HW checkpoint.
//
// A crash is MemLog.Crash on one side and a CrashClone (synced data only)
// reopened on the other. The disk log may keep more than the flushed prefix
// (a truncation syncs the segment it cuts), never less; the extra is
// truncated away so both continue from the same state.
func TestISRLogMatchesMemLog(t *testing.T) {
	for seed := uint64(1); seed <= 100; seed++ {
		if !runOracleSeed(t, seed, 150) {
			return
		}
	}
}

func runOracleSeed(t *testing.T, seed uint64, ops int) bool {
	rng := rand.New(rand.NewPCG(seed, 99))
	fs := vfs.NewCrashableMem()
	clock := newFakeClock()
	cfg := Config{FS: fs, Dir: "/p", SegmentBytes: int64([]int{256, 1024, 1 << 20}[rng.IntN(3)]), IndexIntervalBytes: 64}
	open := func() *ISRLog {
		l, err := Open(cfg)
		if err != nil {
			t.Fatalf("seed %d: open: %v", seed, err)
		}
		return NewISRLog(l, clock.Now)
	}
	disk, mem := open(), isr.NewMemLog()
	defer func() { _ = disk.Log().Close() }()
	epoch := int32(0)
	var step string
	fail := func(format string, args ...any) bool {
		t.Errorf("seed %d after %s: %s", seed, step, fmt.Sprintf(format, args...))
		return false
	}
	for op := range ops {
		clock.now = clock.now.Add(3e6)
		switch x := rng.IntN(100); {
		case x < 45:
			e := epoch
			if rng.IntN(10) == 0 {
				e = max(0, epoch-1-int32(rng.IntN(2))) // a follower copying an older epoch's batch
			}
			b := isr.Batch{BaseOffset: mem.EndOffset(), LeaderEpoch: e}
			for i := range 1 + rng.IntN(4) {
				b.Records = append(b.Records, []byte(fmt.Sprintf("s%d-o%d-%d-%d", seed, op, i, rng.IntN(1000))))
			}
			step = fmt.Sprintf("op %d: append %d+%d epoch %d", op, b.BaseOffset, len(b.Records), e)
			errMem, errDisk := mem.Append(b), disk.Append(b)
			if (errMem == nil) != (errDisk == nil) {
				return fail("append: mem %v, disk %v", errMem, errDisk)
			}
		case x < 55:
			epoch += 1 + int32(rng.IntN(2))
			step = fmt.Sprintf("op %d: assign epoch %d at %d", op, epoch, mem.EndOffset())
			mem.AssignEpochStart(epoch, mem.EndOffset())
			disk.AssignEpochStart(epoch, disk.EndOffset())
		case x < 70:
			to := rng.Int64N(mem.EndOffset()+3) - 1
			step = fmt.Sprintf("op %d: truncate to %d", op, to)
			mem.TruncateTo(to)
			disk.TruncateTo(to)
		case x < 82:
			step = fmt.Sprintf("op %d: flush", op)
			mem.Flush()
			disk.Flush()
		case x < 87:
			hw := rng.Int64N(mem.EndOffset() + 1)
			step = fmt.Sprintf("op %d: checkpoint HW %d", op, hw)
			mem.CheckpointHighWatermark(hw)
			disk.CheckpointHighWatermark(hw)
		default:
			step = fmt.Sprintf("op %d: crash", op)
			mem.Crash()
			clone := fs.CrashClone(vfs.CrashCloneCfg{})
			_ = disk.Log().Close()
			fs = clone
			cfg.FS = clone
			disk = open()
			if disk.EndOffset() < mem.EndOffset() {
				return fail("the disk log recovered to %d, below the flushed %d", disk.EndOffset(), mem.EndOffset())
			}
			disk.TruncateTo(mem.EndOffset())
		}
		if disk.Err() != nil {
			return fail("disk log error: %v", disk.Err())
		}
		if !sameLog(mem, disk, fail) {
			return false
		}
	}
	return true
}

// sameLog compares every observable answer of the two logs.
func sameLog(mem *isr.MemLog, disk *ISRLog, fail func(string, ...any) bool) bool {
	if mem.EndOffset() != disk.EndOffset() || mem.FlushedOffset() != disk.FlushedOffset() ||
		mem.LatestEpoch() != disk.LatestEpoch() || mem.HighWatermarkCheckpoint() != disk.HighWatermarkCheckpoint() {
		return fail("LEO %d/%d flushed %d/%d latest epoch %d/%d HW %d/%d (mem/disk)",
			mem.EndOffset(), disk.EndOffset(), mem.FlushedOffset(), disk.FlushedOffset(),
			mem.LatestEpoch(), disk.LatestEpoch(), mem.HighWatermarkCheckpoint(), disk.HighWatermarkCheckpoint())
	}
	var diskEpochs []isr.EpochEndOffset
	for _, e := range disk.Log().Epochs() {
		diskEpochs = append(diskEpochs, isr.EpochEndOffset{Epoch: e.Epoch, EndOffset: e.StartOffset})
	}
	if memEpochs := mem.Epochs(); !(len(memEpochs) == 0 && len(diskEpochs) == 0) && !reflect.DeepEqual(memEpochs, diskEpochs) {
		return fail("epoch cache %v (mem) vs %v (disk)", memEpochs, diskEpochs)
	}
	for e := isr.NoEpoch; e <= mem.LatestEpoch()+1; e++ {
		if a, b := mem.EndOffsetForEpoch(e), disk.EndOffsetForEpoch(e); a != b {
			return fail("EndOffsetForEpoch(%d) = %+v (mem) vs %+v (disk)", e, a, b)
		}
	}
	for from := int64(-1); from <= mem.EndOffset()+1; from++ {
		for _, n := range []int{1, 3, 1000} {
			a, b := mem.Read(from, n), disk.Read(from, n)
			if !(len(a) == 0 && len(b) == 0) && !reflect.DeepEqual(a, b) {
				return fail("Read(%d, %d) = %v (mem) vs %v (disk)", from, n, a, b)
			}
		}
	}
	return true
}
