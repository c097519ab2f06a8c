package disklog

import (
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/cockroachdb/pebble/v2/vfs"

	"quire/internal/invariants"
	"quire/internal/isr"
)

// Config configures a Log. Zero values take the defaults named.
type Config struct {
	// FS is where the files go: vfs.Default in production,
	// vfs.NewCrashableMem() in the crash tests.
	FS vfs.FS
	// Dir is the replica's directory (created if missing).
	Dir string
	// SegmentBytes rolls a new segment when a batch would take the active
	// one past it (Kafka's segment.bytes). Default 1 GiB; at most 2 GiB, as
	// index positions are 32 bits.
	SegmentBytes int64
	// SegmentMs rolls a new segment when a batch's max timestamp is this
	// many milliseconds past the active segment's first batch's (Kafka's
	// segment.ms, on record time). ≤ 0: never.
	SegmentMs int64
	// RetentionMs and RetentionBytes bound what EnforceRetention keeps
	// (retention.ms: a segment whose max timestamp is older; retention.bytes:
	// the log's total size). ≤ 0: unbounded.
	RetentionMs    int64
	RetentionBytes int64
	// IndexIntervalBytes is the distance between offset index entries
	// (index.interval.bytes). Default 4 KiB.
	IndexIntervalBytes int64
	// MaxBatchBytes bounds a batch's payload (message.max.bytes), and so
	// what a corrupt header can make recovery read. Default 16 MiB.
	MaxBatchBytes int64
	// ReserveBytes is free space the log leaves on its file system: an
	// append that would leave less is refused with ErrNoSpace before
	// anything is written, where Kafka would hit ENOSPC and take the whole
	// log directory offline. Free space is sampled (FS.GetDiskUsage) every
	// diskSampleBytes appended and on every append while short, so appends
	// are taken again by themselves once space is freed. Default 64 MiB;
	// < 0: no check. A file system that cannot tell its free space is not
	// checked.
	ReserveBytes int64

	hooks testHooks
}

// diskSampleBytes is how much is appended between two samples of the file
// system's free space while there is room.
const diskSampleBytes = 4 << 20

// testHooks break the log on purpose so that the crash checker can be seen
// failing (TestCrashCheckerCatchesMutants). Never set outside tests.
type testHooks struct {
	skipRecoveryCRC bool // recovery accepts batches without checking their CRC
	skipSegmentSync bool // Flush does not sync segment files
	skipDirSync     bool // no directory is ever synced
	// keepEpochsPastEnd: recovery does not truncate the epoch cache to the
	// recovered LEO.
	keepEpochsPastEnd bool
	// logStartAfterDeletes: advancing the log start deletes the segments
	// before checkpointing the new start (a crash between leaves a start
	// that is neither).
	logStartAfterDeletes bool
}

func (c Config) withDefaults() (Config, error) {
	if c.FS == nil || c.Dir == "" {
		return c, errors.New("disklog: Config needs FS and Dir")
	}
	if c.SegmentBytes <= 0 {
		c.SegmentBytes = 1 << 30
	}
	if c.SegmentBytes > math.MaxInt32 {
		return c, fmt.Errorf("disklog: SegmentBytes %d above 2 GiB", c.SegmentBytes)
	}
	if c.IndexIntervalBytes <= 0 {
		c.IndexIntervalBytes = 4 << 10
	}
	if c.MaxBatchBytes <= 0 {
		c.MaxBatchBytes = 16 << 20
	}
	if c.ReserveBytes == 0 {
		c.ReserveBytes = 64 << 20
	}
	return c, nil
}

var (
	// ErrFailed: a write or sync failed and the log cannot trust what is on
	// disk until it is opened again (which recovers it).
	ErrFailed = errors.New("disklog: log failed; close and open it again")
	// ErrClosed: the log was closed.
	ErrClosed = errors.New("disklog: log closed")
	// ErrInvalidAppend: an append at the wrong offset or of a malformed
	// batch.
	ErrInvalidAppend = errors.New("disklog: invalid append")
	// ErrNoSpace: the append would leave less than ReserveBytes free. The
	// log is unchanged and takes appends again once there is room.
	ErrNoSpace = errors.New("disklog: not enough free space")
)

// RawBatch is a stored batch as ReadRaw returns it.
type RawBatch struct {
	BaseOffset   int64
	Count        int32
	LeaderEpoch  int32
	MaxTimestamp int64
	Payload      []byte
}

// NextOffset is the offset after the batch's last record.
func (b RawBatch) NextOffset() int64 { return b.BaseOffset + int64(b.Count) }

// Stats counts what recovery and the log did, so that tests can tell a run
// that exercised a path from one that did not.
type Stats struct {
	RecoveredSegments int64 // segments scanned by recovery
	RecoveredBatches  int64 // batches recovery validated
	TruncatedBytes    int64 // torn or corrupt bytes recovery cut
	DeletedSegments   int64 // segments recovery deleted past a bad one
	RebuiltIndexes    int64 // rolled segments whose index files recovery rebuilt
	NoSpaceRefusals   int64 // appends refused with ErrNoSpace
	Rolls             int64
}

// SegmentInfo describes one segment, for tests and tools.
type SegmentInfo struct {
	BaseOffset, NextOffset, Bytes int64
}

// Log is one replica's partition log on disk. It is safe for concurrent use
// (one mutex; the replica core calls it from one goroutine, fetch reads may
// come from others).
type Log struct {
	mu  sync.Mutex
	cfg Config
	// Invariant: segments are contiguous (each one's base is the previous
	// one's next), never empty as a list; the last is the active segment.
	segments []*segment
	// Invariant: first segment's base ≤ logStart ≤ LEO.
	logStart int64
	// Invariant: flushed ≤ LEO.
	flushed       int64
	recoveryPoint int64 // as last checkpointed
	hw            int64 // as last checkpointed
	epochs        epochCache
	dirDirty      bool // a segment was created since the directory was last synced
	failed        error
	closed        bool
	stats         Stats
	// free is the file system's free space at the last sample (-1:
	// unknown), appended what was appended since.
	free, appended int64
}

// Open opens (creating if needed) the log in cfg.Dir and recovers it.
func Open(cfg Config) (*Log, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	l := &Log{cfg: cfg, free: -1}
	if err := l.recover(); err != nil {
		l.closeFiles()
		return nil, fmt.Errorf("open log %s: %w", cfg.Dir, err)
	}
	if invariants.Enabled {
		l.checkInvariants()
	}
	return l, nil
}

func (l *Log) path(name string) string { return l.cfg.FS.PathJoin(l.cfg.Dir, name) }

func (l *Log) active() *segment { return l.segments[len(l.segments)-1] }

func (l *Log) leo() int64 { return l.active().next }

// writable reports why the log refuses mutations, if it does.
func (l *Log) writable() error {
	if l.closed {
		return ErrClosed
	}
	if l.failed != nil {
		return fmt.Errorf("%w: %w", ErrFailed, l.failed)
	}
	return nil
}

// fail puts the log in the failed state for err.
func (l *Log) fail(err error) error {
	if l.failed == nil {
		l.failed = err
	}
	return fmt.Errorf("%w: %w", ErrFailed, err)
}

// EndOffset is the LEO.
func (l *Log) EndOffset() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.leo()
}

// LogStartOffset is the first offset the log serves.
func (l *Log) LogStartOffset() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.logStart
}

// FlushedOffset is the offset below which records survive a crash.
func (l *Log) FlushedOffset() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.flushed
}

// Err is why the log failed, nil while it has not.
func (l *Log) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.failed
}

// Stats returns the counters.
func (l *Log) Stats() Stats {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.stats
}

// Segments describes the segments in offset order.
func (l *Log) Segments() []SegmentInfo {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]SegmentInfo, len(l.segments))
	for i, s := range l.segments {
		out[i] = SegmentInfo{BaseOffset: s.base, NextOffset: s.next, Bytes: s.size}
	}
	return out
}

// Size is the bytes held in segments.
func (l *Log) Size() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	var n int64
	for _, s := range l.segments {
		n += s.size
	}
	return n
}

// AppendRaw appends one batch of count records at baseOffset (which must be
// the LEO) under epoch, storing payload as given. A batch of an epoch newer
// than the cache's latest starts that epoch; the epoch checkpoint is written
// before the batch. Nothing is synced (see Flush).
//
// A failed write of the batch leaves the log as it was and usable.
func (l *Log) AppendRaw(baseOffset int64, count, epoch int32, maxTimestamp int64, payload []byte) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.writable(); err != nil {
		return err
	}
	if invariants.Enabled {
		defer l.checkInvariants()
	}
	switch leo := l.leo(); {
	case baseOffset != leo:
		return fmt.Errorf("%w: at %d to a log ending at %d", ErrInvalidAppend, baseOffset, leo)
	case count < 1 || baseOffset+int64(count) < baseOffset:
		return fmt.Errorf("%w: %d records at %d", ErrInvalidAppend, count, baseOffset)
	case epoch < 0:
		return fmt.Errorf("%w: no leader epoch at %d", ErrInvalidAppend, baseOffset)
	case int64(len(payload)) > l.cfg.MaxBatchBytes:
		return fmt.Errorf("%w: payload of %d bytes (limit %d)", ErrInvalidAppend, len(payload), l.cfg.MaxBatchBytes)
	}
	h := batchHeader{baseOffset: baseOffset, count: count, epoch: epoch, maxTimestamp: maxTimestamp, payloadLen: uint32(len(payload))}
	stored := encodeBatch(h, payload)
	if err := l.checkRoom(int64(len(stored))); err != nil {
		return fmt.Errorf("append at %d: %w", baseOffset, err)
	}
	if l.shouldRoll(h) {
		if err := l.roll(); err != nil {
			return err
		}
	}
	if epoch > l.epochs.latest() {
		if err := l.assignEpoch(epoch, baseOffset); err != nil {
			return err
		}
	}
	s := l.active()
	if _, err := s.file.WriteAt(stored, s.size); err != nil {
		// The torn bytes lie past the logical end: the next append
		// overwrites them, recovery cuts them, and a roll cuts them before
		// the segment stops being scanned by recovery.
		s.tornTail = true
		return fmt.Errorf("append at %d to segment %d: %w", baseOffset, s.base, err)
	}
	s.noteBatch(h, s.size, l.cfg.IndexIntervalBytes)
	s.dirty = true
	return nil
}

// checkRoom refuses an append of n bytes that would leave less than
// ReserveBytes free, sampling the file system's free space when the last
// sample is old or says there is no room.
func (l *Log) checkRoom(n int64) error {
	reserve := l.cfg.ReserveBytes
	if reserve < 0 {
		return nil
	}
	if l.free < 0 || l.appended+n > diskSampleBytes || l.free-l.appended-n < reserve {
		l.free, l.appended = -1, 0
		if du, err := l.cfg.FS.GetDiskUsage(l.cfg.Dir); err == nil {
			l.free = int64(min(du.AvailBytes, math.MaxInt64))
		}
	}
	if l.free >= 0 && l.free-l.appended-n < reserve {
		l.stats.NoSpaceRefusals++
		return fmt.Errorf("%w: %d bytes free, %d to append, keeping %d", ErrNoSpace, l.free-l.appended, n, reserve)
	}
	l.appended += n
	return nil
}

func (l *Log) shouldRoll(h batchHeader) bool {
	s := l.active()
	if s.size == 0 {
		return false
	}
	switch {
	case s.size+h.size() > l.cfg.SegmentBytes:
		return true
	case h.nextOffset()-s.base > math.MaxUint32:
		return true // relative offsets are 32 bits
	case l.cfg.SegmentMs > 0 && s.firstTimestamp >= 0 && h.maxTimestamp-s.firstTimestamp >= l.cfg.SegmentMs:
		return true
	}
	return false
}

// roll starts a new active segment at the LEO. A failure to create the file
// leaves the log as it was.
func (l *Log) roll() error {
	base := l.leo()
	if old := l.active(); old.tornTail {
		// A rolled segment is trusted by recovery once flushed: its file
		// must end where its batches do.
		if err := l.cutSegmentFile(old, old.size, nil); err != nil {
			return l.fail(fmt.Errorf("cut the torn tail of segment %d: %w", old.base, err))
		}
		old.tornTail = false
	}
	f, err := l.cfg.FS.Create(l.path(segmentName(base, logSuffix)), vfs.WriteCategoryUnspecified)
	if err != nil {
		return fmt.Errorf("roll segment %d: %w", base, err)
	}
	// The final time index entry holds the segment's max timestamp, which
	// Open reads back for segments it does not scan.
	l.active().maybeTimeEntry()
	l.segments = append(l.segments, newSegment(base, f))
	l.dirDirty = true
	l.stats.Rolls++
	return nil
}

// assignEpoch records that epoch starts at offset, checkpointing the cache
// first: it is never behind the batches on disk.
func (l *Log) assignEpoch(epoch int32, offset int64) error {
	next := epochCache{entries: append([]EpochEntry(nil), l.epochs.entries...)}
	if !next.assign(epoch, offset) {
		return nil
	}
	if err := l.writeFileAtomic(epochCheckpointFile, next.encode()); err != nil {
		return l.fail(fmt.Errorf("checkpoint epoch %d at %d: %w", epoch, offset, err))
	}
	l.epochs = next
	return nil
}

// writeEpochs checkpoints the cache after it changed in memory.
func (l *Log) writeEpochs() error {
	if err := l.writeFileAtomic(epochCheckpointFile, l.epochs.encode()); err != nil {
		return l.fail(fmt.Errorf("checkpoint epochs: %w", err))
	}
	return nil
}

// ReadRaw returns the stored batches from the one holding offset from on
// (which may start before from, as in Kafka), up to maxBytes of payload but
// at least one batch. Nothing at the LEO; isr.ErrOffsetOutOfRange outside
// [log start, LEO].
func (l *Log) ReadRaw(from int64, maxBytes int) ([]RawBatch, error) {
	return l.read(from, math.MaxInt, maxBytes)
}

func (l *Log) read(from int64, maxBatches, maxBytes int) ([]RawBatch, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil, ErrClosed
	}
	leo := l.leo()
	if from < l.logStart || from > leo {
		return nil, fmt.Errorf("%w: %d not in [%d, %d]", isr.ErrOffsetOutOfRange, from, l.logStart, leo)
	}
	if from == leo || maxBatches <= 0 {
		return nil, nil
	}
	i := sort.Search(len(l.segments), func(i int) bool { return l.segments[i].base > from }) - 1
	s := l.segments[i]
	pos, h, err := s.findBatch(from, l.cfg.MaxBatchBytes)
	if err != nil {
		return nil, fmt.Errorf("read at %d: %w", from, err)
	}
	var out []RawBatch
	bytes := 0
	for {
		b, err := s.readBatch(pos, h)
		if err != nil {
			return out, fmt.Errorf("read at %d: %w", h.baseOffset, err)
		}
		out = append(out, RawBatch{BaseOffset: h.baseOffset, Count: h.count, LeaderEpoch: h.epoch, MaxTimestamp: h.maxTimestamp, Payload: b[batchHeaderLen:]})
		bytes += int(h.payloadLen)
		pos += h.size()
		if len(out) >= maxBatches || bytes >= maxBytes {
			return out, nil
		}
		for pos >= s.size {
			if i+1 >= len(l.segments) {
				return out, nil
			}
			i++
			s, pos = l.segments[i], 0
		}
		if h, err = s.readHeader(pos, l.cfg.MaxBatchBytes); err != nil {
			return out, fmt.Errorf("read segment %d at %d: %w", s.base, pos, err)
		}
	}
}

// Flush makes everything appended so far durable: the segments written
// since the last Flush, the index files of rolled segments, the directory;
// and, once a rolled segment is durable, the recovery point. A failure
// fails the log.
func (l *Log) Flush() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.writable(); err != nil {
		return err
	}
	return l.flushLocked()
}

func (l *Log) flushLocked() error {
	last := len(l.segments) - 1
	for i, s := range l.segments {
		if s.tornTail {
			// A failed append's bytes past the end: cut them (and sync),
			// so that they cannot come back as a batch after a restart.
			if err := l.cutSegmentFile(s, s.size, nil); err != nil {
				return l.fail(fmt.Errorf("cut the torn tail of segment %d: %w", s.base, err))
			}
			s.tornTail = false
		}
		if s.dirty && !l.cfg.hooks.skipSegmentSync {
			if err := s.file.SyncData(); err != nil {
				return l.fail(fmt.Errorf("sync segment %d: %w", s.base, err))
			}
		}
		s.dirty = false
		if i < last && s.indexInMemory {
			if err := l.writeIndexes(s); err != nil {
				return l.fail(err)
			}
		}
	}
	if l.dirDirty {
		if err := l.syncDir(); err != nil {
			return l.fail(err)
		}
		l.dirDirty = false
	}
	l.flushed = l.leo()
	if l.active().base > l.recoveryPoint {
		if err := l.writeFileAtomic(recoveryPointFile, offsetCheckpoint(l.flushed)); err != nil {
			return l.fail(fmt.Errorf("checkpoint recovery point: %w", err))
		}
		l.recoveryPoint = l.flushed
	}
	return nil
}

// writeIndexes writes and syncs a rolled segment's index files from memory
// and drops the in-memory entries.
func (l *Log) writeIndexes(s *segment) error {
	index, timeIndex := s.encodeIndexes()
	write := func(suffix string, data []byte) (vfs.File, error) {
		name := l.path(segmentName(s.base, suffix))
		f, err := l.cfg.FS.Create(name, vfs.WriteCategoryUnspecified)
		if err != nil {
			return nil, fmt.Errorf("create %s: %w", name, err)
		}
		if _, err := f.Write(data); err != nil {
			_ = f.Close()
			return nil, fmt.Errorf("write %s: %w", name, err)
		}
		if err := f.Sync(); err != nil {
			_ = f.Close()
			return nil, fmt.Errorf("sync %s: %w", name, err)
		}
		return f, nil
	}
	idx, err := write(indexSuffix, index)
	if err != nil {
		return err
	}
	tidx, err := write(timeIndexSuffix, timeIndex)
	if err != nil {
		_ = idx.Close()
		return err
	}
	s.indexInMemory = false
	s.indexFile, s.timeIndexFile = idx, tidx
	s.indexCount, s.timeIndexCount = int64(len(s.index)), int64(len(s.timeIndex))
	s.index, s.timeIndex = nil, nil
	l.dirDirty = true
	return nil
}

// LatestEpoch is the epoch of the cache's last entry, isr.NoEpoch when empty.
func (l *Log) LatestEpoch() int32 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.epochs.latest()
}

// AssignEpochStart records, durably, that epoch starts at offset, if epoch
// is newer than the latest.
func (l *Log) AssignEpochStart(epoch int32, offset int64) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.writable(); err != nil {
		return err
	}
	return l.assignEpoch(epoch, offset)
}

// EndOffsetForEpoch answers OffsetsForLeaderEpoch (see isr.Log).
func (l *Log) EndOffsetForEpoch(epoch int32) isr.EpochEndOffset {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.epochs.endOffsetFor(epoch, l.leo())
}

// EpochForOffset is the leader epoch of the batch holding offset, from
// the epoch cache (Kafka's LeaderEpochFileCache.epochForOffset, which
// ListOffsets answers with): the latest epoch starting at or before
// offset; isr.NoEpoch when none does.
func (l *Log) EpochForOffset(offset int64) int32 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.epochs.epochFor(offset)
}

// Epochs returns the epoch cache.
func (l *Log) Epochs() []EpochEntry {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]EpochEntry(nil), l.epochs.entries...)
}

// HighWatermarkCheckpoint is the HW last checkpointed.
func (l *Log) HighWatermarkCheckpoint() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.hw
}

// CheckpointHighWatermark durably records hw. A failure keeps the previous
// checkpoint and does not fail the log: either file is a valid HW after a
// crash.
func (l *Log) CheckpointHighWatermark(hw int64) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.writable(); err != nil {
		return err
	}
	if err := l.writeFileAtomic(hwCheckpointFile, offsetCheckpoint(hw)); err != nil {
		return fmt.Errorf("checkpoint high watermark %d: %w", hw, err)
	}
	l.hw = hw
	return nil
}

// Close flushes (unless the log failed) and closes the files.
func (l *Log) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil
	}
	var err error
	if l.failed == nil {
		err = l.flushLocked()
	}
	l.closeFiles()
	l.closed = true
	return err
}

func (l *Log) closeFiles() {
	for _, s := range l.segments {
		_ = s.close()
	}
}

// parseSegmentName returns the base offset of a segment file name.
func parseSegmentName(name, suffix string) (int64, bool) {
	if len(name) != 20+len(suffix) || !strings.HasSuffix(name, suffix) {
		return 0, false
	}
	base, err := strconv.ParseInt(name[:20], 10, 64)
	return base, err == nil && base >= 0
}

func (l *Log) checkInvariants() {
	for i, s := range l.segments {
		if s.base > s.next || s.size < 0 || (s.size == 0) != (s.next == s.base) {
			panic(fmt.Sprintf("disklog: invariant violated: segment %d next %d size %d", s.base, s.next, s.size))
		}
		if i > 0 && s.base != l.segments[i-1].next {
			panic(fmt.Sprintf("disklog: invariant violated: segment %d follows one ending at %d", s.base, l.segments[i-1].next))
		}
	}
	if leo := l.leo(); l.flushed > leo || l.logStart > leo || l.logStart < l.segments[0].base {
		panic(fmt.Sprintf("disklog: invariant violated: log start %d flushed %d first base %d LEO %d", l.logStart, l.flushed, l.segments[0].base, leo))
	}
	for i, e := range l.epochs.entries {
		if i > 0 && (e.Epoch <= l.epochs.entries[i-1].Epoch || e.StartOffset < l.epochs.entries[i-1].StartOffset) {
			panic(fmt.Sprintf("disklog: invariant violated: epoch cache %v", l.epochs.entries))
		}
	}
}
