package disklog

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// The crash checker. A seeded workload of appends (random sizes and
// epochs, new epochs assigned ahead of appends), flushes, truncations (at
// batch boundaries and, as ISRLog does, inside batches), DeleteRecordsBefore,
// retention, TruncateFullyAndStartAt and HW checkpoints runs on
// vfs.NewCrashableMem with small segments, so it rolls often. Between
// operations it takes crash points: fs.CrashClone keeps the synced data plus
// 0, 30 or 100% of the unsynced 4 KiB blocks (so torn tails and holes of
// zeros), and in seeds with corruption the active segment's unflushed part
// is also cut short, has a byte flipped or garbage appended. A second Log
// opens the clone and must hold:
//
//   - the log start as it was, and an LEO at least the flushed offset: every
//     flushed record is there, byte-identical with its epoch and batch;
//   - nothing else: the records up to the LEO are a prefix of the log's
//     (plus, past its end, the batch of an append whose write failed: it may
//     have reached the disk whole), offsets dense from the log start;
//   - an epoch cache consistent with the log (increasing, every entry
//     starting inside the log on a batch of its epoch, or an older one
//     after a failed append; no batch of an epoch newer than the cache's at
//     its offset), equal to the model's truncated to the recovered LEO when
//     no operation failed;
//   - the HW checkpoint last written; and the recovered log takes an append
//     and a flush.
//
// Crash points are also taken inside operations: midOpFS clones the file
// system just before a random create, rename, remove, write or sync of the
// next operation, and the clone must show the state before or after that
// operation (any prefix of the old log that holds the new one, for
// truncations), with nothing flushed lost. This is what tests the order of
// the steps inside TruncateTo, retention, checkpoints and Flush.
//
// Out-of-space seeds inject ENOSPC into writes, syncs and creations. A
// failed append leaves the log usable; any other failure fails it, and the
// run reopens it on the same file system (a restart, not a crash): what
// recovery finds must be the state before or after the failed operation,
// with nothing flushed lost; every seed ends writing and flushing with room
// again.
//
// TestCrashCheckerCatchesMutants runs the checker against broken logs.
//
// Environment: QUIRE_CRASH_SEEDS=n runs n seeds (default 120, 60 with
// ENOSPC); QUIRE_CRASH_SEED=s replays one; QUIRE_CRASH_TRACE=1 prints every
// operation. The workload is a function of the seed, but pebble's
// CrashClone walks directory entries in map order while drawing from the
// RNG, so a replay usually but not always reproduces a failure (-count=20
// helps).

type rec struct {
	value     []byte
	epoch     int32
	batchBase int64
}

// modelState is what the log should hold.
type modelState struct {
	start   int64
	records []rec // from start
	epochs  epochCache
	flushed int64
	hw      int64
}

func (m modelState) leo() int64 { return m.start + int64(len(m.records)) }

func (m modelState) clone() modelState {
	m.records = slices.Clone(m.records)
	m.epochs.entries = slices.Clone(m.epochs.entries)
	return m
}

// candidate is one state a recovered log may show.
type candidate struct {
	state modelState
	// ghosts may follow the LEO, one of them: the batches of appends that
	// failed at the LEO since the last write that overwrote or cut what
	// lies there (each failed write may have reached the disk whole, and a
	// later one that wrote less leaves it valid).
	ghosts      [][]rec
	ghost       []rec // the one match checks against (matchAny tries each)
	epochsExact bool
	hws         []int64
}

type crashResult struct {
	points, midOpPoints, reopens, recordsChecked     int
	ghostsSurvived                                   int
	tornRecoveries, corrupted, failures, appendFails int
	enospc                                           int64
	violations                                       []string
}

func (a *crashResult) add(b crashResult) {
	a.points += b.points
	a.midOpPoints += b.midOpPoints
	a.reopens += b.reopens
	a.recordsChecked += b.recordsChecked
	a.ghostsSurvived += b.ghostsSurvived
	a.tornRecoveries += b.tornRecoveries
	a.corrupted += b.corrupted
	a.failures += b.failures
	a.appendFails += b.appendFails
	a.enospc += b.enospc
}

type crashRun struct {
	seed    int64
	rng     *rand.Rand
	mem     *vfs.MemFS
	faults  *faultFS
	cfg     Config
	log     *Log
	model   modelState
	ghosts  [][]rec
	hwAlt   []int64 // HW checkpoints that failed: they may have landed
	epoch   int32
	corrupt bool
	nowMs   int64
	res     crashResult
	midOp   *midOpFS
}

func runCrashSeed(seed int64, hooks testHooks, ops int, enospc, corrupt bool, percents []int) (res crashResult) {
	rng := rand.New(rand.NewPCG(uint64(seed), 0x51444c31))
	mem := vfs.NewCrashableMem()
	r := &crashRun{seed: seed, rng: rng, mem: mem, epoch: 1, corrupt: corrupt, nowMs: 1_000_000}
	// Under -tags invariants a log that recovered a broken state (a
	// mutant's) panics in its invariant checks: a violation to report for
	// the seed, like the checker's own, not a crash of the whole test.
	defer func() {
		if p := recover(); p != nil {
			r.violate("seed %d point %d: panic: %v", seed, r.res.points, p)
			res = r.res
		}
	}()
	var fs vfs.FS = mem
	if enospc {
		r.faults = newFaultFS(mem, uint64(seed))
		fs = r.faults
	}
	r.midOp = &midOpFS{FS: fs, mem: mem, rng: rng, percents: percents}
	fs = r.midOp
	r.cfg = Config{
		FS: fs, Dir: "/data/topic-" + strconv.FormatInt(seed, 10),
		SegmentBytes:       int64([]int{2 << 10, 8 << 10, 32 << 10}[rng.IntN(3)]),
		SegmentMs:          int64([]int{0, 50}[rng.IntN(2)]),
		IndexIntervalBytes: int64([]int{64, 512, 4096}[rng.IntN(3)]),
		RetentionBytes:     int64([]int{0, 16 << 10}[rng.IntN(2)]),
		RetentionMs:        int64([]int{0, 200}[rng.IntN(2)]),
		hooks:              hooks,
	}
	l, err := Open(r.cfg)
	if err != nil {
		r.violate("open: %v", err)
		return r.res
	}
	r.log = l
	for op := 0; op < ops && len(r.res.violations) == 0; op++ {
		r.nowMs += int64(rng.IntN(5))
		if r.faults != nil && rng.IntN(15) == 0 {
			r.faults.injectOneIn.Store([]int64{0, 0, 3, 10}[rng.IntN(4)])
			continue
		}
		if rng.IntN(6) == 0 {
			// Crash before one of the next few file operations.
			r.midOp.arm(1 + rng.IntN(8))
		}
		switch x := rng.IntN(100); {
		case x < 50:
			r.append()
		case x < 56:
			r.epoch += 1 + int32(rng.IntN(2))
			if rng.IntN(2) == 0 {
				r.assignEpoch()
			}
		case x < 68:
			r.flush()
		case x < 74:
			r.truncate()
		case x < 76:
			r.deleteRecords()
		case x < 79:
			r.retention()
		case x < 80:
			r.truncateFully()
		case x < 83:
			r.checkpointHW()
		default:
			r.crashPoint(percents[rng.IntN(len(percents))])
		}
	}
	if r.faults != nil && len(r.res.violations) == 0 {
		// Room again: the log (reopened if it had failed) writes and
		// flushes.
		r.faults.injectOneIn.Store(0)
		for range 5 {
			r.append()
		}
		r.flush()
		if r.log.Err() != nil || r.model.flushed != r.log.EndOffset() {
			r.violate("with room again the log does not flush: %v", r.log.Err())
		}
		r.res.enospc = r.faults.enospc.Load()
	}
	r.crashPoint(0)
	_ = r.log.Close()
	return r.res
}

var traceCrash = os.Getenv("QUIRE_CRASH_TRACE") != ""

func (r *crashRun) trace(format string, args ...any) {
	if traceCrash {
		fmt.Fprintf(os.Stderr, "seed %d: %s\n", r.seed, fmt.Sprintf(format, args...))
	}
}

func (r *crashRun) violate(format string, args ...any) {
	r.res.violations = append(r.res.violations, fmt.Sprintf(format, args...))
}

func (r *crashRun) current() candidate {
	return candidate{state: r.model.clone(), ghosts: slices.Clone(r.ghosts), epochsExact: true, hws: append([]int64{r.model.hw}, r.hwAlt...)}
}

// failed handles an operation's error: a failed log is reopened on the same
// file system and must show one of the candidate states.
// settle ends an operation: a crash clone taken in the middle of it (by
// midOpFS) must show the state before or after it, with nothing flushed
// lost; a failed log is reopened (failed).
func (r *crashRun) settle(before, after candidate) {
	clone := r.midOp.take()
	if clone == nil {
		r.failed(before, after)
		return
	}
	r.res.midOpPoints++
	cfg := r.cfg
	cfg.FS = clone
	l, err := Open(cfg)
	if err != nil {
		r.violate("seed %d: open after a crash inside an operation: %v", r.seed, err)
	} else {
		b, a := before, after
		b.epochsExact, a.epochsExact = false, false
		if why := r.matchAny(l, []candidate{b, a}); why != "" {
			r.violate("seed %d: crash inside an operation (before %s): %s", r.seed, r.midOp.what, why)
		}
		_ = l.Close()
	}
	r.failed(before, after)
}

func (r *crashRun) failed(before candidate, after candidate) {
	if r.log.Err() == nil {
		return
	}
	r.res.failures++
	r.trace("failed: %v", r.log.Err())
	if r.faults != nil {
		r.faults.injectOneIn.Store(0)
	}
	_ = r.log.Close()
	l, err := Open(r.cfg)
	if err != nil {
		r.violate("reopen after a failure: %v", err)
		return
	}
	r.res.reopens++
	before.epochsExact, after.epochsExact = false, false
	if why := r.matchAny(l, []candidate{before, after}); why != "" {
		r.violate("seed %d: reopen after failure (%v): %s", r.seed, r.log.Err(), why)
	}
	r.log = l
	r.model = r.stateOf(l)
	r.ghosts, r.hwAlt = nil, nil
}

// stateOf reads a log back as a model.
func (r *crashRun) stateOf(l *Log) modelState {
	m := modelState{start: l.LogStartOffset(), flushed: l.FlushedOffset(), hw: l.HighWatermarkCheckpoint()}
	m.epochs.entries = l.Epochs()
	batches, _ := l.ReadRaw(m.start, math.MaxInt)
	for _, b := range batches {
		records, _ := decodeRecords(b.Payload, b.Count)
		for i, v := range records {
			if o := b.BaseOffset + int64(i); o >= m.start {
				m.records = append(m.records, rec{value: v, epoch: b.LeaderEpoch, batchBase: b.BaseOffset})
			}
		}
	}
	return m
}

func (r *crashRun) value(offset int64) []byte {
	size := 1 + r.rng.IntN(200)
	if r.rng.IntN(20) == 0 {
		size = 500 + r.rng.IntN(2000)
	}
	v := make([]byte, size)
	for i := range v {
		v[i] = byte(r.rng.Uint32())
	}
	var h [16]byte
	binary.BigEndian.PutUint64(h[:], uint64(offset))
	binary.BigEndian.PutUint64(h[8:], r.rng.Uint64())
	copy(v, h[:])
	return v
}

func (r *crashRun) append() {
	base := r.log.EndOffset()
	n := 1 + r.rng.IntN(5)
	values := make([][]byte, n)
	batch := make([]rec, n)
	for i := range values {
		values[i] = r.value(base + int64(i))
		batch[i] = rec{value: values[i], epoch: r.epoch, batchBase: base}
	}
	before := r.current()
	// Crashed mid-append, the batch may be on disk whole.
	before.ghosts = append(before.ghosts, batch)
	err := r.log.AppendRaw(base, int32(n), r.epoch, r.nowMs, encodeRecords(values))
	r.trace("append %d+%d epoch %d: %v segs %v", base, n, r.epoch, err, r.log.Segments())
	if err == nil {
		r.model.records = append(r.model.records, batch...)
		r.model.epochs.assign(r.epoch, base)
		r.ghosts = nil
		r.settle(before, r.current())
		return
	}
	r.res.appendFails++
	if r.log.LatestEpoch() == r.epoch {
		r.model.epochs.assign(r.epoch, base) // its checkpoint landed before the write failed
	}
	r.ghosts = append(r.ghosts, batch)
	before.ghosts = slices.Clone(r.ghosts)
	r.settle(before, r.current())
}

func (r *crashRun) assignEpoch() {
	before := r.current()
	if err := r.log.AssignEpochStart(r.epoch, r.log.EndOffset()); err == nil {
		r.model.epochs.assign(r.epoch, r.model.leo())
		r.settle(before, r.current())
		return
	}
	after := r.current()
	after.state.epochs.assign(r.epoch, r.model.leo())
	r.settle(before, after)
}

func (r *crashRun) flush() {
	before := r.current()
	err := r.log.Flush()
	r.trace("flush: %v", err)
	if err == nil {
		r.model.flushed = r.model.leo()
		r.ghosts = nil // Flush cut any torn tail
		r.settle(before, r.current())
		return
	}
	r.settle(before, before)
}

// truncate cuts near the end: at a batch boundary (Log.TruncateTo, which
// cuts to the batch start) or exactly, inside a batch (as ISRLog does).
func (r *crashRun) truncate() {
	leo := r.model.leo()
	offset := max(r.model.start, leo-int64(r.rng.IntN(30)))
	exact := r.rng.IntN(2) == 0
	after := r.current()
	newEnd := offset
	if offset < leo {
		if rb := r.model.records[offset-r.model.start].batchBase; !exact && rb < offset {
			newEnd = max(rb, r.model.start)
		}
		if newEnd < r.model.start {
			newEnd = r.model.start
		}
		// Cut exactly, the head of a cut batch stays a batch with the same
		// base.
		after.state.records = after.state.records[:newEnd-r.model.start]
	} else {
		newEnd = leo
	}
	after.state.epochs.truncateFromEnd(newEnd)
	after.state.flushed = min(after.state.flushed, newEnd)
	if offset < leo {
		after.ghosts = nil
	}
	before := r.current()
	// A failed truncation may leave any prefix of the old log that holds
	// the new one: later segments deleted, the cut segment not yet cut.
	before.state.flushed = min(before.state.flushed, newEnd)
	var err error
	if exact {
		r.log.mu.Lock()
		_, err = r.log.truncateLocked(offset, headRecords)
		r.log.mu.Unlock()
	} else {
		_, err = r.log.TruncateTo(offset)
	}
	r.trace("truncate %d exact %v: %v segs %v", offset, exact, err, r.log.Segments())
	if err == nil {
		if got := r.log.EndOffset(); got != newEnd {
			r.violate("TruncateTo(%d) exact=%v: LEO %d, want %d", offset, exact, got, newEnd)
		}
		r.model = after.state
		if offset < leo {
			r.ghosts = nil // the cut removed whatever lay past the end
		}
		r.settle(before, after)
		return
	}
	r.settle(before, after)
}

func (r *crashRun) deleteRecords() {
	offset := r.model.start + r.rng.Int64N(r.model.leo()-r.model.start+1)
	before, after := r.current(), r.current()
	if offset > r.model.start {
		after.state.records = after.state.records[offset-r.model.start:]
		after.state.start = offset
		after.state.epochs.truncateFromStart(offset)
	}
	err := r.log.DeleteRecordsBefore(offset)
	r.trace("delete before %d: %v", offset, err)
	if err == nil {
		r.model = after.state
	}
	r.settle(before, after)
}

func (r *crashRun) retention() {
	before := r.current()
	_, err := r.log.EnforceRetention(r.nowMs, r.model.leo())
	r.trace("retention: %v segs %v", err, r.log.Segments())
	start := r.log.LogStartOffset()
	if start < r.model.start || start > r.model.leo() {
		r.violate("retention moved the log start from %d to %d (LEO %d)", r.model.start, start, r.model.leo())
		return
	}
	after := r.current()
	after.state.records = after.state.records[start-r.model.start:]
	after.state.start = start
	after.state.epochs.truncateFromStart(start)
	if err == nil {
		r.model = after.state
	}
	r.settle(before, after)
}

func (r *crashRun) truncateFully() {
	offset := r.model.leo() + int64(r.rng.IntN(50))
	before := r.current()
	// A failed TruncateFullyAndStartAt may leave any prefix of the old log
	// (segments are deleted last first before the new start is written).
	before.state.flushed = before.state.start
	after := candidate{state: modelState{start: offset, flushed: offset, hw: r.model.hw}, hws: before.hws}
	if err := r.log.TruncateFullyAndStartAt(offset); err == nil {
		r.model, r.ghosts = after.state, nil
	}
	r.settle(before, after)
}

func (r *crashRun) checkpointHW() {
	hw := r.model.start + r.rng.Int64N(r.model.leo()-r.model.start+1)
	before := r.current()
	before.hws = append(before.hws, hw)
	if err := r.log.CheckpointHighWatermark(hw); err == nil {
		r.model.hw, r.hwAlt = hw, nil
		r.settle(before, r.current())
		return
	}
	r.hwAlt = append(r.hwAlt, hw)
	r.settle(r.current(), r.current())
}

// crashPoint opens a crash clone of the file system and checks it.
func (r *crashRun) crashPoint(percent int) {
	r.res.points++
	r.trace("crash point %d", r.res.points)
	// Where the active segment's unflushed bytes begin, for corruption.
	corruptFrom := int64(-1)
	var activeName string
	if r.corrupt && r.rng.IntN(2) == 0 {
		r.log.mu.Lock()
		s := r.log.active()
		activeName = segmentName(s.base, logSuffix)
		switch {
		case r.log.flushed <= s.base:
			corruptFrom = 0
		case r.log.flushed < s.next:
			if pos, _, err := s.findBatch(r.log.flushed, r.log.cfg.MaxBatchBytes); err == nil {
				corruptFrom = pos
			}
		}
		r.log.mu.Unlock()
	}
	clone := r.mem.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: percent, RNG: r.rng})
	if corruptFrom >= 0 && r.corruptFile(clone, clone.PathJoin(r.cfg.Dir, activeName), corruptFrom) {
		r.res.corrupted++
	}
	cfg := r.cfg
	cfg.FS = clone
	l, err := Open(cfg)
	if err != nil {
		r.violate("seed %d point %d (unsynced %d%%): open after crash: %v", r.seed, r.res.points, percent, err)
		return
	}
	defer l.Close()
	if st := l.Stats(); st.TruncatedBytes > 0 {
		r.res.tornRecoveries++
	}
	if why := r.matchAny(l, []candidate{r.current()}); why != "" {
		r.violate("seed %d point %d (unsynced %d%%): %s", r.seed, r.res.points, percent, why)
		return
	}
	// The recovered log is usable.
	end := l.EndOffset()
	if err := l.AppendRaw(end, 1, max(l.LatestEpoch(), 0), r.nowMs, encodeRecords([][]byte{[]byte("after")})); err != nil {
		r.violate("seed %d point %d: append after recovery: %v", r.seed, r.res.points, err)
	}
	if err := l.Flush(); err != nil {
		r.violate("seed %d point %d: flush after recovery: %v", r.seed, r.res.points, err)
	}
}

// corruptFile damages a file from position from on: cut short, a byte
// flipped or garbage appended. It reports whether it changed anything.
func (r *crashRun) corruptFile(fs *vfs.MemFS, path string, from int64) bool {
	f, err := fs.Open(path)
	if err != nil {
		return false
	}
	data, err := io.ReadAll(f)
	_ = f.Close()
	if err != nil {
		return false
	}
	size := int64(len(data))
	switch k := r.rng.IntN(3); {
	case k == 0 && size > from:
		data = data[:from+r.rng.Int64N(size-from)]
	case k == 1 && size > from:
		data[from+r.rng.Int64N(size-from)] ^= byte(1 + r.rng.IntN(255))
	case k == 2:
		garbage := make([]byte, 1+r.rng.IntN(100))
		for i := range garbage {
			garbage[i] = byte(r.rng.Uint32())
		}
		data = append(data, garbage...)
	default:
		return false
	}
	g, err := fs.Create(path, vfs.WriteCategoryUnspecified)
	if err != nil {
		return false
	}
	_, _ = g.Write(data)
	_ = g.Sync()
	_ = g.Close()
	return true
}

// matchAny returns "" when l shows one of the candidate states, otherwise
// why not (for each).
func (r *crashRun) matchAny(l *Log, cands []candidate) string {
	var whys []string
	for i, c := range cands {
		for _, ghost := range append([][]rec{nil}, c.ghosts...) {
			c.ghost = ghost
			n, why := r.match(l, c)
			if why == "" {
				r.res.recordsChecked += n
				return ""
			}
			whys = append(whys, fmt.Sprintf("candidate %d (%d records past the end): %s", i, len(ghost), why))
		}
	}
	return strings.Join(whys, "; ")
}

// match checks l against one candidate, returning the records verified.
func (r *crashRun) match(l *Log, c candidate) (int, string) {
	m := c.state
	start, end := l.LogStartOffset(), l.EndOffset()
	if start != m.start {
		return 0, fmt.Sprintf("log start %d, want %d", start, m.start)
	}
	if end < m.flushed {
		return 0, fmt.Sprintf("LEO %d below the flushed offset %d: flushed records lost", end, m.flushed)
	}
	if end > m.leo()+int64(len(c.ghost)) {
		return 0, fmt.Sprintf("LEO %d past anything written (%d + %d)", end, m.leo(), len(c.ghost))
	}
	if !slices.Contains(c.hws, l.HighWatermarkCheckpoint()) {
		return 0, fmt.Sprintf("HW checkpoint %d, want one of %v", l.HighWatermarkCheckpoint(), c.hws)
	}
	batches, err := l.ReadRaw(start, math.MaxInt)
	if err != nil {
		return 0, fmt.Sprintf("read from %d: %v", start, err)
	}
	expect := func(o int64) rec {
		if o < m.leo() {
			return m.records[o-m.start]
		}
		return c.ghost[o-m.leo()]
	}
	next, checked := start, 0
	var epochAt = map[int64]int32{} // batch base → epoch
	for i, b := range batches {
		if (i == 0 && (b.BaseOffset > start || b.NextOffset() <= start)) || (i > 0 && b.BaseOffset != next) {
			return checked, fmt.Sprintf("batch at %d where %d was next: offsets not dense", b.BaseOffset, next)
		}
		records, err := decodeRecords(b.Payload, b.Count)
		if err != nil {
			return checked, fmt.Sprintf("batch %d: %v", b.BaseOffset, err)
		}
		for j, v := range records {
			o := b.BaseOffset + int64(j)
			if o < start {
				continue
			}
			want := expect(o)
			if !bytes.Equal(v, want.value) || b.LeaderEpoch != want.epoch || want.batchBase != b.BaseOffset {
				return checked, fmt.Sprintf("offset %d: %d bytes epoch %d batch %d, want %d bytes epoch %d batch %d",
					o, len(v), b.LeaderEpoch, b.BaseOffset, len(want.value), want.epoch, want.batchBase)
			}
			if o >= m.leo() {
				r.res.ghostsSurvived++
			}
			checked++
		}
		epochAt[b.BaseOffset] = b.LeaderEpoch
		next = b.NextOffset()
	}
	if next != end && !(len(batches) == 0 && end == start) {
		return checked, fmt.Sprintf("batches end at %d, LEO %d", next, end)
	}
	// The epoch cache: increasing, inside the log, each entry on a batch
	// of its epoch or older.
	epochs := l.Epochs()
	for i, e := range epochs {
		if i > 0 && (e.Epoch <= epochs[i-1].Epoch || e.StartOffset < epochs[i-1].StartOffset) {
			return checked, fmt.Sprintf("epoch cache not increasing: %v", epochs)
		}
		if e.StartOffset < start || e.StartOffset >= end {
			return checked, fmt.Sprintf("epoch entry %+v outside the log [%d, %d)", e, start, end)
		}
		if i+1 < len(epochs) && epochs[i+1].StartOffset == e.StartOffset {
			continue // an epoch that ended before appending anything (as MemLog keeps it)
		}
		var holder int32 = -1
		for _, b := range batches {
			if b.BaseOffset <= e.StartOffset && e.StartOffset < b.NextOffset() {
				holder = b.LeaderEpoch
			}
		}
		// The batch there is of that epoch, or older: a batch of an older
		// epoch may follow an epoch start (a failed append that reached the
		// disk, as isr.Log allows appends of older epochs).
		if holder > e.Epoch || holder < 0 {
			return checked, fmt.Sprintf("epoch entry %+v on a batch of epoch %d", e, holder)
		}
	}
	// No batch is of an epoch newer than the cache's at its offset: the
	// cache misses no epoch the log holds.
	for _, b := range batches {
		at := int32(-1)
		for _, e := range epochs {
			if e.StartOffset <= max(b.BaseOffset, start) {
				at = e.Epoch
			}
		}
		if b.LeaderEpoch > at {
			return checked, fmt.Sprintf("batch %d of epoch %d where the cache %v says %d", b.BaseOffset, b.LeaderEpoch, epochs, at)
		}
	}
	if end > start && (len(epochs) == 0 || epochs[0].StartOffset != start) {
		return checked, fmt.Sprintf("epoch cache %v does not cover the log from %d", epochs, start)
	}
	if c.epochsExact && end <= m.leo() {
		want := epochCache{entries: slices.Clone(m.epochs.entries)}
		want.truncateFromEnd(end)
		if !slices.Equal(want.entries, epochs) {
			return checked, fmt.Sprintf("epoch cache %v, want %v", epochs, want.entries)
		}
	}
	return checked, ""
}

func crashSeeds(t *testing.T, n int) []int64 {
	if s := os.Getenv("QUIRE_CRASH_SEED"); s != "" {
		seed, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			t.Fatalf("QUIRE_CRASH_SEED: %v", err)
		}
		return []int64{seed}
	}
	if s := os.Getenv("QUIRE_CRASH_SEEDS"); s != "" {
		var err error
		if n, err = strconv.Atoi(s); err != nil {
			t.Fatalf("QUIRE_CRASH_SEEDS: %v", err)
		}
	}
	seeds := make([]int64, n)
	for i := range seeds {
		seeds[i] = int64(i + 1)
	}
	return seeds
}

// runSeeds runs seeds on GOMAXPROCS workers.
func runSeeds(seeds []int64, run func(seed int64) crashResult) map[int64]crashResult {
	results := make(map[int64]crashResult, len(seeds))
	var mu sync.Mutex
	work := make(chan int64)
	var wg sync.WaitGroup
	for range runtime.GOMAXPROCS(0) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for seed := range work {
				res := run(seed)
				mu.Lock()
				results[seed] = res
				mu.Unlock()
			}
		}()
	}
	for _, s := range seeds {
		work <- s
	}
	close(work)
	wg.Wait()
	return results
}

func runCrashTest(t *testing.T, name string, seeds []int64, enospc bool) crashResult {
	start := time.Now()
	results := runSeeds(seeds, func(seed int64) crashResult {
		// One seed in two corrupts the active segment's unflushed tail.
		return runCrashSeed(seed, testHooks{}, 400, enospc, seed%2 == 0, []int{0, 30, 100})
	})
	var total crashResult
	for _, seed := range seeds {
		res := results[seed]
		total.add(res)
		if len(res.violations) > 0 {
			t.Errorf("seed %d: %d violations (replay: QUIRE_CRASH_SEED=%d go test ./internal/isr/disklog/ -run %s):\n  %s",
				seed, len(res.violations), seed, name, strings.Join(res.violations[:min(5, len(res.violations))], "\n  "))
		}
	}
	t.Logf("%d seeds, %d crash points between operations and %d inside them, %d reopens after failures in %v",
		len(seeds), total.points, total.midOpPoints, total.reopens, time.Since(start).Round(time.Millisecond))
	t.Logf("verified %d records; %d recoveries cut a torn or corrupt tail; %d files corrupted; %d records of failed appends survived; %d appends failed, %d operations failed the log, %d ENOSPC injected",
		total.recordsChecked, total.tornRecoveries, total.corrupted, total.ghostsSurvived, total.appendFails, total.failures, total.enospc)
	return total
}

func TestCrashSafety(t *testing.T) {
	seeds := crashSeeds(t, 120)
	total := runCrashTest(t, "TestCrashSafety", seeds, false)
	if len(seeds) > 1 && (total.recordsChecked == 0 || total.tornRecoveries == 0 || total.corrupted == 0 || total.midOpPoints == 0) {
		t.Errorf("the workload did not exercise every path: %+v", total)
	}
	if len(seeds) > 1 && total.points < 2000 {
		t.Errorf("only %d crash points; want at least 2000", total.points)
	}
}

// TestCrashSafetyOutOfSpace: ENOSPC at random writes, syncs and creations;
// a failed log reopens to the state before or after the failed operation,
// nothing flushed is lost, and with room again the log writes and flushes.
func TestCrashSafetyOutOfSpace(t *testing.T) {
	seeds := crashSeeds(t, 60)
	total := runCrashTest(t, "TestCrashSafetyOutOfSpace", seeds, true)
	if len(seeds) > 1 && (total.enospc == 0 || total.failures == 0 || total.appendFails == 0 || total.reopens == 0) {
		t.Errorf("the workload did not run out of space: %+v", total)
	}
}

// TestCrashCheckerCatchesMutants proves the checker is not vacuous: against
// a deliberately broken log it must report violations.
func TestCrashCheckerCatchesMutants(t *testing.T) {
	for _, mutant := range []struct {
		name  string
		hooks testHooks
	}{
		{"recovery without CRC", testHooks{skipRecoveryCRC: true}},
		{"flush without segment sync", testHooks{skipSegmentSync: true}},
		{"no directory sync", testHooks{skipDirSync: true}},
		{"epoch cache not truncated to the recovered LEO", testHooks{keepEpochsPastEnd: true}},
		{"log start checkpointed after the deletion (caught inside operations)", testHooks{logStartAfterDeletes: true}},
	} {
		t.Run(mutant.name, func(t *testing.T) {
			seeds := crashSeeds(t, 16)
			results := runSeeds(seeds, func(seed int64) crashResult {
				return runCrashSeed(seed, mutant.hooks, 400, false, true, []int{0, 30})
			})
			caught := 0
			var example string
			for _, seed := range seeds {
				if v := results[seed].violations; len(v) > 0 {
					caught++
					example = v[0]
				}
			}
			if caught == 0 {
				t.Fatalf("the crash checker did not catch %q in %d seeds", mutant.name, len(seeds))
			}
			t.Logf("caught in %d of %d seeds, e.g. %s", caught, len(seeds), example)
		})
	}
}

// midOpFS takes a crash clone of the file system just before the n-th file
// operation (create, rename, remove, write, sync) after arm(n): a crash in
// the middle of an operation, between the steps whose order makes it crash
// safe. Only the seed's goroutine uses it.
type midOpFS struct {
	vfs.FS
	mem       *vfs.MemFS
	rng       *rand.Rand
	percents  []int
	countdown int // 0: disarmed
	clone     *vfs.MemFS
	what      string
}

func (m *midOpFS) arm(n int) { m.countdown, m.clone = n, nil }

// take returns the clone taken since arm, if any, and disarms.
func (m *midOpFS) take() *vfs.MemFS {
	c := m.clone
	m.countdown, m.clone = 0, nil
	return c
}

func (m *midOpFS) tick(op, path string) {
	if m.countdown == 0 {
		return
	}
	if m.countdown--; m.countdown == 0 {
		percent := m.percents[m.rng.IntN(len(m.percents))]
		m.clone = m.mem.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: percent, RNG: m.rng})
		m.what = fmt.Sprintf("%s %s, unsynced %d%%", op, path, percent)
	}
}

func (m *midOpFS) wrap(f vfs.File, path string, err error) (vfs.File, error) {
	if err != nil {
		return nil, err
	}
	return &midOpFile{File: f, fs: m, path: path}, nil
}

func (m *midOpFS) Create(name string, category vfs.DiskWriteCategory) (vfs.File, error) {
	m.tick("create", name)
	f, err := m.FS.Create(name, category)
	return m.wrap(f, name, err)
}

func (m *midOpFS) OpenReadWrite(name string, category vfs.DiskWriteCategory, opts ...vfs.OpenOption) (vfs.File, error) {
	f, err := m.FS.OpenReadWrite(name, category, opts...)
	return m.wrap(f, name, err)
}

func (m *midOpFS) OpenDir(name string) (vfs.File, error) {
	f, err := m.FS.OpenDir(name)
	return m.wrap(f, name, err)
}

func (m *midOpFS) Rename(oldname, newname string) error {
	m.tick("rename", newname)
	return m.FS.Rename(oldname, newname)
}

func (m *midOpFS) Remove(name string) error {
	m.tick("remove", name)
	return m.FS.Remove(name)
}

type midOpFile struct {
	vfs.File
	fs   *midOpFS
	path string
}

func (f *midOpFile) Write(p []byte) (int, error) {
	f.fs.tick("write", f.path)
	return f.File.Write(p)
}

func (f *midOpFile) WriteAt(p []byte, off int64) (int, error) {
	f.fs.tick("write", f.path)
	return f.File.WriteAt(p, off)
}

func (f *midOpFile) Sync() error {
	f.fs.tick("sync", f.path)
	return f.File.Sync()
}

func (f *midOpFile) SyncData() error {
	f.fs.tick("sync", f.path)
	return f.File.SyncData()
}
