package bookie

import (
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// Disk space: a full disk must never brick a bookie. Three layers:
//
//  1. Headroom, predicted. The engine keeps the last statfs of its
//     directories and adds to it what it has accepted but not yet written:
//     the write cache (entry-log records plus index overhead), the next
//     journal file when none is pooled for recycling, and a released index
//     ballast. Every add re-evaluates the prediction (arithmetic under mu,
//     no syscall); the statfs itself is refreshed every DiskCheckInterval,
//     after every DiskCheckBytes of adds, and at the end of every checkpoint
//     and GC pass. Past DiskUsageHigh, or under DiskReserveBytes predicted
//     free, the bookie turns read-only, so it stops accepting adds while the
//     checkpoint that will write them still fits. A checkpoint (and a GC
//     pass) checks once more against a fresh statfs and does not start
//     writing what would not fit.
//  2. Running out of space is a state, not a failure. An ENOSPC that still
//     happens (another writer on the file system, a misestimate) on the
//     journal or an entry log turns the bookie read-only with reason
//     noSpace: the journal abandons its file and fails the adds it did not
//     sync; the checkpoint keeps its frozen write-cache half and its journal
//     position, abandons the entry log, and is retried (by the disk loop,
//     the checkpoint timer, or Close) until it succeeds, which clears the
//     state. The journal stays the source of truth meanwhile: nothing it
//     covers is released before a checkpoint succeeds.
//  3. The index (Pebble) cannot survive a failed WAL or MANIFEST write (it
//     panics). Its file system is wrapped with vfs.OnDiskFull: on ENOSPC
//     the ballast (IndexBallastBytes) is removed and the write retried once,
//     and the bookie turns read-only until there is room to recreate the
//     ballast. An index that cannot even be opened read-write at startup is
//     opened read-only (reads work) and reopened by the first checkpoint
//     after space returns.
//
// Reads, fencing and recovery reads go on throughout.

// DiskSpace is what statfs says about the file system holding a directory.
type DiskSpace struct {
	TotalBytes uint64
	FreeBytes  uint64 // available to this process
}

// diskState is the engine's view of its disk. Guarded by Engine.mu.
type diskState struct {
	ledger, journal DiskSpace // last statfs; TotalBytes 0: unknown
	sameFS          bool      // journal and ledger directories share a file system (assumed when totals match)
	// full: predicted usage crossed DiskUsageHigh (or the reserve) and has
	// not yet fallen below DiskUsageLow.
	full bool
	warn bool // predicted usage above DiskUsageWarn
	// noSpace: a write failed for lack of space; cleared by the first
	// checkpoint that succeeds after it.
	noSpace error
	usage   float64 // predicted used fraction, at the last evaluation
	free    int64   // predicted free bytes, at the last evaluation
}

// Read-only reasons, as the bookie_read_only metric labels them.
const (
	reasonDiskUsage = "disk_usage"
	reasonNoSpace   = "no_space"
)

// indexBytesPerEntry estimates what one checkpointed entry adds to the
// index (a location in a block value, Pebble's WAL, memtable flush and
// compaction copies).
const indexBytesPerEntry = 48

// gcMaxRelocateBytes bounds the live bytes one GC pass copies: the pass
// holds flushMu, so a longer one would hold checkpoints back and let the
// write cache fill (entry-log writes are also paced by the journal's
// fsyncs, see entryLogs.pace).
const gcMaxRelocateBytes = 64 << 20

// statFS returns the space of the file system holding dir.
func (e *Engine) statFS(dir string) (DiskSpace, error) {
	switch {
	case e.cfg.StatFS != nil:
		return e.cfg.StatFS(dir)
	case e.cfg.DiskUsage != nil:
		used, total, err := e.cfg.DiskUsage()
		if err != nil {
			return DiskSpace{}, err
		}
		return DiskSpace{TotalBytes: total, FreeBytes: total - min(used, total)}, nil
	}
	u, err := e.fs.GetDiskUsage(dir)
	if err != nil {
		return DiskSpace{}, err
	}
	return DiskSpace{TotalBytes: u.TotalBytes, FreeBytes: u.AvailBytes}, nil
}

// sampleDisk runs statfs on the engine's directories and re-evaluates the
// read-only state.
func (e *Engine) sampleDisk() {
	ledger, err := e.statFS(e.cfg.LedgerDir)
	if err != nil {
		ledger = DiskSpace{}
	}
	journal, same := ledger, true
	if e.cfg.JournalDir != e.cfg.LedgerDir && (e.cfg.StatFS != nil || e.cfg.DiskUsage == nil) {
		if journal, err = e.statFS(e.cfg.JournalDir); err != nil {
			journal = DiskSpace{}
		}
		// Equal totals are taken for one file system: both needs are
		// then charged to it, the cautious side.
		same = journal.TotalBytes == ledger.TotalBytes
	}
	e.addedSinceStat.Store(0)
	e.mu.Lock()
	e.disk.ledger, e.disk.journal, e.disk.sameFS = ledger, journal, same
	e.evaluateDiskLocked()
	usage, free := e.disk.usage, e.disk.free
	e.mu.Unlock()
	if ledger.TotalBytes > 0 {
		e.metrics.diskUsage.Set(1 - float64(ledger.FreeBytes)/float64(ledger.TotalBytes))
		e.metrics.diskFreeBytes.Set(float64(ledger.FreeBytes))
		e.metrics.diskPredictedUsage.Set(usage)
		e.metrics.diskPredictedFree.Set(float64(free))
	}
}

// predict returns the used fraction and free bytes of space once need
// more bytes are written.
func predict(space DiskSpace, need int64) (usage float64, free int64) {
	free = int64(space.FreeBytes) - need
	return 1 - float64(free)/float64(space.TotalBytes), free
}

// evaluateDiskLocked applies the thresholds to the last statfs plus what
// the engine will still write. Cheap: Add calls it for every entry. The
// caller holds mu.
func (e *Engine) evaluateDiskLocked() {
	d := &e.disk
	if d.ledger.TotalBytes == 0 { // unknown (an in-memory FS): keep the mode
		e.refreshReadOnlyLocked()
		return
	}
	pending := int64(e.wc.active.bytes+e.wc.flushing.bytes) + indexBytesPerEntry*int64(e.wc.active.count+e.wc.flushing.count)
	if e.cfg.IndexBallastBytes > 0 && e.ballastMissing.Load() {
		pending += e.cfg.IndexBallastBytes
	}
	var journalNeed int64
	if e.journal != nil && e.journal.needsNewFile() {
		journalNeed = e.cfg.JournalFileBytes
	}
	var usage float64
	var free int64
	if d.sameFS || d.journal.TotalBytes == 0 {
		usage, free = predict(d.ledger, pending+journalNeed)
	} else {
		usage, free = predict(d.ledger, pending)
		if u, f := predict(d.journal, journalNeed); u > usage {
			usage, free = u, f
		}
	}
	d.usage, d.free = usage, free
	reserve := e.cfg.DiskReserveBytes
	switch {
	case !d.full && (usage > e.cfg.DiskUsageHigh || free < reserve):
		d.full = true
		e.log.Warn("bookie: disk usage (predicted) past the high threshold or the reserve; read-only",
			"usage", usage, "free", free, "high", e.cfg.DiskUsageHigh, "reserve", reserve)
	case d.full && usage < e.cfg.DiskUsageLow && free >= reserve+reserve/2:
		d.full = false
		e.log.Info("bookie: disk usage (predicted) below the low threshold", "usage", usage, "free", free, "low", e.cfg.DiskUsageLow)
	}
	switch {
	case !d.warn && usage > e.cfg.DiskUsageWarn:
		d.warn = true
		e.metrics.diskWarn.Set(1)
		e.log.Warn("bookie: disk usage (predicted) past the warn threshold; compacting entry logs",
			"usage", usage, "free", free, "warn", e.cfg.DiskUsageWarn)
		e.triggerGC()
	case d.warn && usage < e.cfg.DiskUsageWarn:
		d.warn = false
		e.metrics.diskWarn.Set(0)
	}
	e.refreshReadOnlyLocked()
}

// refreshReadOnlyLocked derives readOnly from the disk state and, on a
// change, updates the metrics and wakes the disk loop to publish it. The
// caller holds mu.
func (e *Engine) refreshReadOnlyLocked() {
	reason := ""
	switch {
	case e.disk.noSpace != nil:
		reason = reasonNoSpace
	case e.disk.full:
		reason = reasonDiskUsage
	}
	if reason == e.readOnlyReason {
		return
	}
	e.readOnlyReason, e.readOnly = reason, reason != ""
	for _, r := range []string{reasonDiskUsage, reasonNoSpace} {
		v := 0.0
		if r == reason {
			v = 1
		}
		e.metrics.readOnly.WithLabelValues(r).Set(v)
	}
	if e.readOnly {
		e.metrics.serverStatus.Set(0)
		// Adds waiting for write-cache room re-check, and are refused.
		close(e.flushDone)
		e.flushDone = make(chan struct{})
	} else {
		e.metrics.serverStatus.Set(1)
	}
	select {
	case e.modeChanged <- struct{}{}:
	default:
	}
}

// ReadOnlyReason reports whether adds are refused and why ("" when
// writable): what a health endpoint shows.
func (e *Engine) ReadOnlyReason() (readOnly bool, reason string) {
	e.mu.RLock()
	defer e.mu.RUnlock()
	d := &e.disk
	switch e.readOnlyReason {
	case reasonNoSpace:
		return true, fmt.Sprintf("out of space, read-only until a checkpoint succeeds: %v", d.noSpace)
	case reasonDiskUsage:
		return true, fmt.Sprintf("disk usage %.1f%% (predicted, %d bytes free) past the %.0f%% threshold or the %d-byte reserve; writable again below %.0f%%",
			100*d.usage, d.free, 100*e.cfg.DiskUsageHigh, e.cfg.DiskReserveBytes, 100*e.cfg.DiskUsageLow)
	}
	return false, ""
}

// setNoSpace records that a write ran out of space: read-only until a
// checkpoint succeeds.
func (e *Engine) setNoSpace(err error) {
	e.metrics.noSpaceErrors.Inc()
	e.counters.noSpaceErrors.Add(1)
	e.mu.Lock()
	first := e.disk.noSpace == nil
	if first {
		e.disk.noSpace = err
	}
	e.refreshReadOnlyLocked()
	e.mu.Unlock()
	if first {
		e.log.Warn("bookie: out of space; read-only until there is room and a checkpoint succeeds", "err", err)
	}
	e.wakeDiskLoop()
}

// clearNoSpace ends the noSpace state after a successful checkpoint.
func (e *Engine) clearNoSpace() {
	e.mu.Lock()
	cleared := e.disk.noSpace != nil
	e.disk.noSpace = nil
	e.evaluateDiskLocked()
	e.mu.Unlock()
	if cleared {
		e.log.Info("bookie: space recovered; checkpoint done")
	}
}

// storageError handles a failed write of a checkpoint or GC pass (the
// caller holds flushMu): out of space, the current entry log is abandoned
// and the engine turns read-only; any other error is permanent (fail).
func (e *Engine) storageError(op string, err error) error {
	err = ioError(op, err)
	if isNoSpace(err) {
		e.logs.abandon()
		e.setNoSpace(err)
		return err
	}
	return e.fail(err)
}

// checkRoom returns an errOutOfSpace error when growth bytes would leave
// less than half the reserve free in LedgerDir (nil when the space is
// unknown).
func (e *Engine) checkRoom(what string, growth int64) error {
	return e.checkRoomIn(e.cfg.LedgerDir, what, growth)
}

// checkRoomIn is checkRoom for the file system holding dir.
func (e *Engine) checkRoomIn(dir, what string, growth int64) error {
	space, err := e.statFS(dir)
	if err != nil || space.TotalBytes == 0 {
		return nil
	}
	if free := int64(space.FreeBytes); free-growth < e.cfg.DiskReserveBytes/2 {
		return fmt.Errorf("%s needs %d bytes, %d free, keeping %d: %w", what, growth, free, e.cfg.DiskReserveBytes/2, errOutOfSpace)
	}
	return nil
}

// roomFor returns how many bytes may be written in LedgerDir keeping keep
// bytes free (-1: unknown).
func (e *Engine) roomFor(keep int64) int64 {
	space, err := e.statFS(e.cfg.LedgerDir)
	if err != nil || space.TotalBytes == 0 {
		return -1
	}
	return max(0, int64(space.FreeBytes)-keep)
}

// spendBallastForGC releases the index ballast when a compaction that
// would give space back lacks short bytes to copy its live entries: on a
// disk filled by others the ballast is the only room left, and compaction
// is what wins it back. The bookie is then out of space (read-only) until
// the ballast is recreated. The caller holds flushMu.
func (e *Engine) spendBallastForGC(short int64) bool {
	if short <= 0 || e.cfg.IndexBallastBytes < short || e.ballastMissing.Load() {
		return false
	}
	if err := e.fs.Remove(e.ballastPath()); err != nil {
		e.log.Warn("bookie: remove index ballast", "err", err)
		return false
	}
	e.ballastMissing.Store(true)
	e.setNoSpace(fmt.Errorf("index ballast spent to compact entry logs: %w", errOutOfSpace))
	return true
}

// ballastPath is the index ballast; outside Pebble's directory.
func (e *Engine) ballastPath() string { return e.fs.PathJoin(e.cfg.LedgerDir, "index.ballast") }

// onIndexDiskFull runs inside a Pebble write that hit ENOSPC, with every
// other index write blocked: it frees the ballast so that the retried write
// succeeds, and leaves the rest to the disk loop. It takes no engine lock.
func (e *Engine) onIndexDiskFull() {
	if e.cfg.IndexBallastBytes > 0 && !e.ballastMissing.Load() {
		if err := e.fs.Remove(e.ballastPath()); err != nil && !errors.Is(err, os.ErrNotExist) {
			e.log.Error("bookie: remove index ballast", "err", err)
		}
		e.ballastMissing.Store(true)
	}
	e.indexOutOfSpace.Store(true)
	e.wakeDiskLoop()
}

// ensureBallast creates the index ballast when it is missing and there is
// room for it (the caller holds flushMu, or is Open).
func (e *Engine) ensureBallast() error {
	if e.cfg.IndexBallastBytes <= 0 || !e.ballastMissing.Load() {
		return nil
	}
	if err := e.checkRoom("index ballast", e.cfg.IndexBallastBytes); err != nil {
		return err
	}
	path := e.ballastPath()
	f, err := e.fs.Create(path, vfs.WriteCategoryUnspecified)
	if err == nil {
		zeros := make([]byte, min(e.cfg.IndexBallastBytes, zeroFillChunk))
		for off := int64(0); off < e.cfg.IndexBallastBytes && err == nil; off += int64(len(zeros)) {
			chunk := zeros[:min(int64(len(zeros)), e.cfg.IndexBallastBytes-off)]
			clear(chunk)
			_, err = f.Write(chunk)
		}
		if err == nil {
			err = f.Sync()
		}
		_ = f.Close()
	}
	if err == nil {
		err = syncDir(e.fs, e.cfg.LedgerDir)
	}
	if err != nil {
		_ = e.fs.Remove(path)
		return ioError("create index ballast", err)
	}
	e.ballastMissing.Store(false)
	return nil
}

// underDiskPressure: predicted usage is past the warn threshold, or the
// bookie is read-only for space.
func (e *Engine) underDiskPressure() bool {
	e.mu.RLock()
	defer e.mu.RUnlock()
	return e.disk.warn || e.disk.full || e.disk.noSpace != nil
}

// wakeDiskLoop asks the disk loop for a statfs and a re-evaluation.
func (e *Engine) wakeDiskLoop() {
	select {
	case e.diskWake <- struct{}{}:
	default:
	}
}

// diskLoop samples disk usage, retries after running out of space, and
// publishes read-only changes (OnReadOnlyChange), in order.
func (e *Engine) diskLoop() {
	defer e.wg.Done()
	t := time.NewTicker(e.cfg.DiskCheckInterval)
	defer t.Stop()
	for {
		select {
		case <-e.stop:
			return
		case <-t.C:
			e.checkDisk()
		case <-e.diskWake:
			e.checkDisk()
		case <-e.modeChanged:
			e.publishReadOnly()
		}
	}
}

// checkDisk samples disk usage, applies the thresholds and, when the
// engine ran out of space and there seems to be room again, retries the
// checkpoint that clears that state.
func (e *Engine) checkDisk() {
	if e.indexOutOfSpace.Swap(false) {
		e.setNoSpace(fmt.Errorf("index write: ballast released: %w", errOutOfSpace))
	}
	e.sampleDisk()
	e.mu.RLock()
	pressure, full := e.disk.warn || e.disk.full, e.disk.full
	e.mu.RUnlock()
	keep := 1
	if full {
		keep = 0
	}
	if pressure && e.journal.trimPool(keep) > 0 {
		// Pooled journal files are preallocated space: past the warn
		// threshold only the next one is kept, read-only none (the
		// prediction then counts the next file as needed).
		e.sampleDisk()
	}
	if pressure && e.gcStarved.Load() {
		e.triggerGC()
	}
	e.mu.RLock()
	retry := e.disk.noSpace != nil && !e.disk.full && !e.closed
	e.mu.RUnlock()
	if retry {
		if err := e.Checkpoint(); err != nil && !errors.Is(err, ErrClosed) {
			e.log.Debug("bookie: checkpoint after running out of space", "err", err)
		}
	}
	e.publishReadOnly()
}

// publishReadOnly calls OnReadOnlyChange when the state differs from the
// last one published. Serialized, so the last call carries the current
// state.
func (e *Engine) publishReadOnly() {
	e.publishMu.Lock()
	defer e.publishMu.Unlock()
	readOnly, reason := e.ReadOnlyReason()
	if readOnly == e.publishedReadOnly {
		return
	}
	e.publishedReadOnly = readOnly
	if readOnly {
		e.log.Warn("bookie: read-only", "reason", reason)
	} else {
		e.log.Info("bookie: writable again")
	}
	if e.cfg.OnReadOnlyChange != nil {
		e.cfg.OnReadOnlyChange(readOnly)
	}
}
