package isr

import (
	"bytes"
	"fmt"

	"quire/internal/invariants"
)

// MemLog is an in-memory Log for the simulator and tests that keeps the page
// cache and the disk apart: every record is appended to memory, Flush moves
// the flushed offset up to the LEO, and Crash throws away what was never
// flushed, as a power loss or kernel crash would (a process crash alone keeps
// the page cache; the simulator decides which one it models).
//
// The leader-epoch cache is rebuilt after a crash from the records that
// survived, as Kafka's log recovery truncates its epoch cache to the
// recovered log end.
type MemLog struct {
	records []memRecord
	// Invariant: epochs are strictly increasing in Epoch and non-decreasing
	// in StartOffset, and every StartOffset ≤ len(records).
	epochs []epochEntry
	// Invariant: 0 ≤ flushed ≤ len(records).
	flushed      int64
	hwCheckpoint int64
}

type memRecord struct {
	value     []byte
	epoch     int32 // the batch's leader epoch
	batchBase int64 // the batch's base offset: a batch is a run of equal batchBase
}

type epochEntry struct {
	epoch int32
	start int64
}

var _ Log = (*MemLog)(nil)

// NewMemLog returns an empty log.
func NewMemLog() *MemLog { return &MemLog{} }

func (l *MemLog) EndOffset() int64 { return int64(len(l.records)) }

func (l *MemLog) Append(b Batch) error {
	if invariants.Enabled {
		defer l.checkInvariants()
	}
	if b.BaseOffset != l.EndOffset() {
		return fmt.Errorf("isr: append at %d to a log ending at %d", b.BaseOffset, l.EndOffset())
	}
	if len(b.Records) == 0 {
		return fmt.Errorf("isr: append of an empty batch at %d", b.BaseOffset)
	}
	if b.LeaderEpoch < 0 {
		return fmt.Errorf("isr: append of a batch without a leader epoch at %d", b.BaseOffset)
	}
	l.AssignEpochStart(b.LeaderEpoch, b.BaseOffset)
	for _, r := range b.Records {
		l.records = append(l.records, memRecord{value: r, epoch: b.LeaderEpoch, batchBase: b.BaseOffset})
	}
	return nil
}

func (l *MemLog) Read(from int64, maxBatches int) []Batch {
	if from < 0 || from >= l.EndOffset() || maxBatches <= 0 {
		return nil
	}
	var out []Batch
	for o := from; o < l.EndOffset() && len(out) < maxBatches; {
		r := l.records[o]
		b := Batch{BaseOffset: o, LeaderEpoch: r.epoch}
		for o < l.EndOffset() && l.records[o].batchBase == r.batchBase {
			b.Records = append(b.Records, l.records[o].value)
			o++
		}
		out = append(out, b)
	}
	return out
}

func (l *MemLog) TruncateTo(offset int64) {
	if invariants.Enabled {
		defer l.checkInvariants()
	}
	if offset < 0 {
		offset = 0
	}
	if offset < l.EndOffset() {
		clear(l.records[offset:])
		l.records = l.records[:offset]
	}
	l.flushed = min(l.flushed, l.EndOffset())
	l.truncateEpochs()
}

// truncateEpochs drops the epoch cache entries that start at or after the
// LEO (Kafka's truncateFromEnd).
func (l *MemLog) truncateEpochs() {
	end := l.EndOffset()
	n := len(l.epochs)
	for n > 0 && l.epochs[n-1].start >= end {
		n--
	}
	l.epochs = l.epochs[:n]
}

func (l *MemLog) Flush() {
	l.flushed = l.EndOffset()
}

func (l *MemLog) FlushedOffset() int64 { return l.flushed }

func (l *MemLog) LatestEpoch() int32 {
	if len(l.epochs) == 0 {
		return NoEpoch
	}
	return l.epochs[len(l.epochs)-1].epoch
}

func (l *MemLog) AssignEpochStart(epoch int32, offset int64) {
	if epoch <= l.LatestEpoch() {
		return
	}
	l.epochs = append(l.epochs, epochEntry{epoch: epoch, start: offset})
}

func (l *MemLog) EndOffsetForEpoch(epoch int32) EpochEndOffset {
	for i := len(l.epochs) - 1; i >= 0; i-- {
		if l.epochs[i].epoch > epoch {
			continue
		}
		end := l.EndOffset()
		if i+1 < len(l.epochs) {
			end = l.epochs[i+1].start
		}
		return EpochEndOffset{Epoch: l.epochs[i].epoch, EndOffset: end}
	}
	if len(l.epochs) > 0 && epoch != NoEpoch {
		// Older than every epoch the log knows: Kafka answers the epoch
		// asked for, ending where the first known epoch starts, so a
		// follower of an older history truncates to there.
		return EpochEndOffset{Epoch: epoch, EndOffset: l.epochs[0].start}
	}
	return EpochEndOffset{Epoch: NoEpoch, EndOffset: -1}
}

func (l *MemLog) HighWatermarkCheckpoint() int64 { return l.hwCheckpoint }

func (l *MemLog) CheckpointHighWatermark(hw int64) { l.hwCheckpoint = hw }

// Crash models losing the page cache: records past the flushed offset are
// gone, and so are epoch cache entries that start past the new end. The HW
// checkpoint survives (it is written durably), but a replica reads it back
// capped at the LEO.
func (l *MemLog) Crash() {
	l.TruncateTo(l.flushed)
}

// Unflushed is the number of records a crash would lose now.
func (l *MemLog) Unflushed() int64 { return l.EndOffset() - l.flushed }

// Record returns the record at offset and the epoch of its batch.
func (l *MemLog) Record(offset int64) (value []byte, epoch int32, ok bool) {
	if offset < 0 || offset >= l.EndOffset() {
		return nil, NoEpoch, false
	}
	r := l.records[offset]
	return r.value, r.epoch, true
}

// Epochs returns the epoch cache as (epoch, start offset) pairs.
func (l *MemLog) Epochs() []EpochEndOffset {
	out := make([]EpochEndOffset, len(l.epochs))
	for i, e := range l.epochs {
		out[i] = EpochEndOffset{Epoch: e.epoch, EndOffset: e.start}
	}
	return out
}

// CommonPrefix returns the length of the longest prefix (by record value and
// epoch) that l and o share, looking no further than limit.
func (l *MemLog) CommonPrefix(o *MemLog, limit int64) int64 {
	n := min(l.EndOffset(), o.EndOffset(), limit)
	for i := int64(0); i < n; i++ {
		a, b := l.records[i], o.records[i]
		if a.epoch != b.epoch || !bytes.Equal(a.value, b.value) {
			return i
		}
	}
	return n
}

func (l *MemLog) checkInvariants() {
	end := l.EndOffset()
	if l.flushed < 0 || l.flushed > end {
		invariantViolated("0 <= flushed <= LEO: flushed(%d) LEO(%d)", l.flushed, end)
	}
	for i, e := range l.epochs {
		if e.start > end {
			invariantViolated("epoch starts <= LEO: epoch %d starts at %d, LEO(%d)", e.epoch, e.start, end)
		}
		if i > 0 && (e.epoch <= l.epochs[i-1].epoch || e.start < l.epochs[i-1].start) {
			invariantViolated("epoch cache increasing: epoch %d@%d follows %d@%d", e.epoch, e.start, l.epochs[i-1].epoch, l.epochs[i-1].start)
		}
	}
	if end > 0 && len(l.epochs) == 0 {
		invariantViolated("a non-empty log has an epoch: LEO(%d) and no epoch entry", end)
	}
}
