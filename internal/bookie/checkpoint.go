package bookie

import (
	"cmp"
	"errors"
	"fmt"
	"slices"

	"github.com/cockroachdb/pebble/v2"
)

// Checkpoint flushes the write cache to entry logs and the index, records
// the journal position it covers and releases older journal files.
//
// Order, and what a crash at each step leaves:
//
//  1. swap the write-cache halves and queue a journal marker, under mu, so
//     that every add queued before the marker is in the frozen half (or was
//     flushed by an earlier checkpoint);
//  2. append the frozen half, sorted, to entry logs; sync them and their
//     directory — a crash here leaves unindexed bytes that GC reclaims; the
//     journal still holds every entry;
//  3. commit, synced, one index batch: the locations, the ledgers' metadata
//     and the marker's journal position — atomic, so the checkpoint never
//     covers entries that the index cannot locate in synced logs;
//  4. empty the frozen half, then let the journal recycle files before the
//     position — a crash after 3 replays from the new position.
func (e *Engine) Checkpoint() error {
	e.flushMu.Lock()
	defer e.flushMu.Unlock()
	if e.isClosed() {
		return ErrClosed
	}
	return e.checkpointLocked()
}

func (e *Engine) isClosed() bool {
	e.mu.RLock()
	defer e.mu.RUnlock()
	return e.closed
}

// checkpointLocked runs a checkpoint; the caller holds flushMu.
//
// Out of space (see disk.go), it stops before writing what would not fit,
// or after a write that failed, without losing anything: the frozen half
// stays in wc.flushing (reads still find it there) with its journal
// position in retryCheckpoint, no journal file is released, and the next
// checkpoint writes that half first, to new entry-log space.
func (e *Engine) checkpointLocked() error {
	e.mu.Lock()
	if e.failErr != nil {
		e.mu.Unlock()
		return e.failErr
	}
	recovering := e.disk.noSpace != nil
	e.mu.Unlock()
	if recovering || e.indexReadOnly {
		if err := e.prepareAfterNoSpace(); err != nil {
			return err
		}
	}

	var pos journalPosition
	e.mu.Lock()
	if e.retryCheckpoint != nil {
		pos = *e.retryCheckpoint
		e.mu.Unlock()
	} else {
		if e.wc.flushing.count != 0 {
			e.mu.Unlock()
			panic("bookie: invariant violated: flushing half not empty at checkpoint start")
		}
		e.wc.active, e.wc.flushing = e.wc.flushing, e.wc.active
		marker := e.journal.enqueueMarker()
		e.mu.Unlock()
		res := <-marker
		if res.err != nil {
			return e.fail(fmt.Errorf("checkpoint: %w", res.err))
		}
		pos = res.pos
		e.retryCheckpoint = &pos
	}
	frozen := e.wc.flushing // immutable until we replace it below
	keys, values := frozen.sorted()

	// Entries of deleted ledgers are dropped here; a deletion racing with
	// this checkpoint is caught again under indexMu below.
	touched := make(map[int64]bool)
	e.mu.RLock()
	kept, keptValues := keys[:0], values[:0]
	var growth int64
	for i, k := range keys {
		deleted, seen := touched[k.ledgerID]
		if !seen {
			deleted = e.ledgers[k.ledgerID].deleted
			touched[k.ledgerID] = deleted
		}
		if !deleted {
			kept, keptValues = append(kept, k), append(keptValues, values[i])
			growth += int64(entryRecordHeaderBytes+len(values[i].payload)) + indexBytesPerEntry
		}
	}
	e.mu.RUnlock()
	keys, values = kept, keptValues

	if len(keys) > 0 {
		// The last look before writing: what does not fit is not started.
		if err := e.checkRoom("checkpoint", growth+entryLogBlockBytes); err != nil {
			e.setNoSpace(err)
			return err
		}
	}
	locs := make([]location, len(keys))
	for i, k := range keys {
		loc, err := e.logs.append(k, values[i])
		if err != nil {
			return e.storageError("checkpoint: write entry log", err)
		}
		locs[i] = loc
	}
	if err := e.logs.sync(); err != nil {
		return e.storageError("checkpoint: sync entry log", err)
	}

	if len(keys) > 0 || e.lastCheckpoint.less(pos) {
		if err := e.commitCheckpoint(keys, locs, touched, pos); err != nil {
			if isNoSpace(err) || errors.Is(err, pebble.ErrReadOnly) {
				e.setNoSpace(err)
				return err
			}
			return e.fail(err)
		}
	}
	e.rc.invalidate(keys)
	// statfs before the half is emptied: the prediction then counts these
	// bytes twice for a moment, never zero times.
	space, spaceErr := e.statFS(e.cfg.LedgerDir)

	e.mu.Lock()
	e.wc.flushing = newWriteCacheHalf()
	e.retryCheckpoint = nil
	close(e.flushDone)
	e.flushDone = make(chan struct{})
	if spaceErr == nil && space.TotalBytes > 0 {
		e.disk.ledger = space
		if e.disk.sameFS {
			e.disk.journal = space
		}
	}
	e.mu.Unlock()

	e.lastCheckpoint = pos
	e.journal.release(pos)
	e.counters.checkpoints.Add(1)
	if recovering {
		e.clearNoSpace()
	}
	e.updateDiskGauge()
	e.wakeDiskLoop()
	return nil
}

// prepareAfterNoSpace readies the index for a checkpoint after running out
// of space: reopened read-write if it was opened read-only, its ballast
// recreated. The caller holds flushMu.
func (e *Engine) prepareAfterNoSpace() error {
	if e.indexReadOnly {
		if err := e.checkRoom("reopen index", e.cfg.DiskReserveBytes/2); err != nil {
			return err
		}
		if err := e.reopenIndex(); err != nil {
			return err
		}
	}
	if err := e.ensureBallast(); err != nil {
		if !isNoSpace(err) {
			e.log.Warn("bookie: recreate index ballast", "err", err)
		}
		return err
	}
	return nil
}

// commitCheckpoint writes the locations, ledger metadata and the
// checkpoint position in one synced batch.
func (e *Engine) commitCheckpoint(keys []cacheKey, locs []location, touched map[int64]bool, pos journalPosition) error {
	e.indexMu.Lock()
	defer e.indexMu.Unlock()
	if e.dbClosed.Load() {
		return ErrClosed
	}
	metas := make(map[int64]ledgerMeta, len(touched))
	e.mu.RLock()
	for id := range touched {
		if ls := e.ledgers[id]; !ls.deleted {
			metas[id] = ls.meta()
		}
	}
	e.mu.RUnlock()
	b := e.db.NewBatch()
	defer b.Close()
	deleted := func(k cacheKey) bool { _, live := metas[k.ledgerID]; return !live }
	if err := appendBlockOperands(b, keys, locs, deleted); err != nil {
		return ioError("checkpoint: index batch", err)
	}
	for id, meta := range metas {
		if err := b.Set(ledgerKey(id), meta.encode(), nil); err != nil {
			return ioError("checkpoint: index batch", err)
		}
	}
	if err := b.Set([]byte{keyCheckpoint}, pos.encode(), nil); err != nil {
		return ioError("checkpoint: index batch", err)
	}
	return ioError("checkpoint: commit index", b.Commit(pebble.Sync))
}

// gcMode says how much a garbage-collection pass does.
type gcMode int

const (
	// gcSweep removes entry logs with nothing live, and compacts partly
	// dead ones only when the dead bytes exceed GCDeadFraction of all
	// entry-log bytes. Runs ReclaimDelay after a deletion.
	gcSweep gcMode = iota
	// gcFull also compacts every log whose live fraction is below
	// GCThreshold. Runs every GCInterval and when usage crosses
	// DiskUsageWarn.
	gcFull
)

// CompactEntryLogs runs one full garbage-collection pass: entry logs whose
// live fraction (bytes the index still points at) is below GCThreshold have
// their live entries copied to the current log, the index updated (synced)
// and then the old files removed. Logs with nothing live are removed. One
// pass copies at most gcMaxRelocateBytes, and only what fits in the free
// space (the least live logs first).
func (e *Engine) CompactEntryLogs() error { return e.collectGarbage(gcFull) }

func (e *Engine) collectGarbage(mode gcMode) error {
	e.flushMu.Lock()
	defer e.flushMu.Unlock()
	if e.isClosed() {
		return ErrClosed
	}
	e.mu.RLock()
	failErr := e.failErr
	e.mu.RUnlock()
	if failErr != nil {
		return failErr
	}
	if e.indexReadOnly {
		return nil // nothing can be relocated or un-indexed yet
	}
	e.counters.gcPasses.Add(1)

	liveBytes := make(map[uint64]int64)
	if err := e.scanLocations(func(_ cacheKey, loc location) {
		liveBytes[loc.logID] += int64(loc.size)
	}); err != nil {
		return err
	}
	current := e.logs.currentID()
	ids, sizes := e.logs.snapshotSizes()
	if used, live := sizes[current]-entryLogHeaderBytes, liveBytes[current]; current != 0 && used > 0 &&
		(live == 0 || used >= entryLogWriteChunk && float64(live)/float64(used) < e.cfg.GCThreshold) {
		// The log being written is dead (or mostly): retire it so that it
		// can be collected now. Entry logs are large (EntryLogMaxBytes)
		// and a small disk may never fill one: all its data would sit in
		// the one log GC never touches. (At most one retirement per pass,
		// of a log past its first write chunk: no churn of tiny logs.)
		if err := e.logs.retire(); err != nil {
			return e.storageError("gc: retire current entry log", err)
		}
		current = 0
		ids, sizes = e.logs.snapshotSizes()
	}
	type candidate struct {
		id         uint64
		live, used int64
	}
	compact := make(map[uint64]bool)
	var partial []candidate
	var deadBytes, totalBytes int64
	for _, id := range ids {
		used := sizes[id] - entryLogHeaderBytes
		live := liveBytes[id]
		totalBytes += max(0, used)
		deadBytes += max(0, used-live)
		switch {
		case id == current:
		case live == 0 || used <= 0:
			compact[id] = true
		case float64(live)/float64(used) < e.cfg.GCThreshold:
			partial = append(partial, candidate{id: id, live: live, used: used})
		}
	}
	if mode == gcSweep && float64(deadBytes) < e.cfg.GCDeadFraction*float64(totalBytes) {
		partial = nil
	}
	// The least live first: the most space back per byte copied.
	slices.SortFunc(partial, func(a, b candidate) int {
		return cmp.Compare(float64(a.live)/float64(a.used), float64(b.live)/float64(b.used))
	})
	// Compaction may dig deeper into the reserve than anything else (a
	// sixteenth of it left, not half): on a full disk it is the way out,
	// writing a little to free a lot, and the index keeps its ballast. If
	// it still hits ENOSPC, nothing is lost (storageError).
	budget := int64(gcMaxRelocateBytes)
	if room := e.roomFor(e.cfg.DiskReserveBytes / 16); room >= 0 {
		budget = min(budget, room*9/10)
	}
	if len(partial) > 0 && budget < gcMaxRelocateBytes && e.spendBallastForGC(partial[0].live+partial[0].live/entryRecordHeaderBytes-budget) {
		if room := e.roomFor(e.cfg.DiskReserveBytes / 16); room >= 0 {
			budget = min(int64(gcMaxRelocateBytes), room*9/10)
		}
	}
	relocate := false
	var skipped, skippedLive int64
	for _, c := range partial {
		if need := c.live + c.live/entryRecordHeaderBytes; need <= budget {
			budget -= need
			compact[c.id] = true
			relocate = true
		} else {
			skipped, skippedLive = skipped+1, skippedLive+c.live
		}
	}
	// Starved for space: the disk loop asks again while under pressure,
	// since another deletion may never come to trigger a sweep.
	e.gcStarved.Store(skipped > 0)
	if skipped > 0 {
		e.log.Warn("bookie: entry logs left uncompacted: not enough free space to copy their live entries, or the pass's bound reached",
			"logs", skipped, "live_bytes", skippedLive, "bound", gcMaxRelocateBytes)
	}
	if len(compact) == 0 {
		return nil
	}

	if relocate {
		var keys []cacheKey
		var locs []location
		if err := e.scanLocations(func(k cacheKey, loc location) {
			if compact[loc.logID] {
				keys = append(keys, k)
				locs = append(locs, loc)
			}
		}); err != nil {
			return err
		}
		for i, k := range keys {
			v, err := e.logs.read(locs[i], k)
			if err != nil {
				return e.fail(ioError("gc: read", err))
			}
			if locs[i], err = e.logs.append(k, v); err != nil {
				return e.storageError("gc: write entry log", err)
			}
		}
		if err := e.logs.sync(); err != nil {
			return e.storageError("gc: sync entry log", err)
		}
		if err := e.commitRelocations(keys, locs); err != nil {
			return e.fail(err)
		}
		e.counters.gcRelocated.Add(uint64(len(keys)))
	}

	// Readers hold gcMu shared from index lookup to entry-log read, so once
	// we hold it no reader uses an old location.
	e.gcMu.Lock()
	var reclaimed int64
	var removeErr error
	for id := range compact {
		if err := e.logs.remove(id); err != nil && removeErr == nil {
			removeErr = ioError(fmt.Sprintf("gc: remove entry log %d", id), err)
		}
		reclaimed += sizes[id]
	}
	e.gcMu.Unlock()
	e.log.Info("bookie: entry logs collected", "removed", len(compact), "reclaimed_bytes", reclaimed,
		"dead_bytes", deadBytes, "total_bytes", totalBytes, "full", mode == gcFull)
	e.counters.gcReclaimedBytes.Add(uint64(reclaimed))
	e.metrics.gcReclaimedBytes.Add(float64(reclaimed))
	e.updateDiskGauge()
	e.wakeDiskLoop()
	return removeErr
}

func (e *Engine) commitRelocations(keys []cacheKey, locs []location) error {
	e.indexMu.Lock()
	defer e.indexMu.Unlock()
	if e.dbClosed.Load() {
		return ErrClosed
	}
	b := e.db.NewBatch()
	defer b.Close()
	e.mu.RLock()
	err := appendBlockOperands(b, keys, locs, func(k cacheKey) bool {
		ls := e.ledgers[k.ledgerID]
		return ls != nil && ls.deleted // its DeleteRange committed; do not re-add
	})
	e.mu.RUnlock()
	if err != nil {
		return ioError("gc: index batch", err)
	}
	return ioError("gc: commit index", b.Commit(pebble.Sync))
}

// scanLocations visits every entry location in the index, in (ledger,
// entry) order.
func (e *Engine) scanLocations(visit func(cacheKey, location)) error {
	return scanLocations(e.db, visit)
}

func scanLocations(db *pebble.DB, visit func(cacheKey, location)) error {
	it, err := db.NewIter(&pebble.IterOptions{LowerBound: []byte{keyPrefixBlock}, UpperBound: []byte{keyPrefixBlock + 1}})
	if err != nil {
		return ioError("gc: scan index", err)
	}
	for it.First(); it.Valid(); it.Next() {
		ledgerID, block, ok := decodeBlockKey(it.Key())
		var locs *blockLocations
		if ok {
			locs, err = decodeBlock(it.Value())
		}
		if !ok || err != nil {
			_ = it.Close()
			return fmt.Errorf("bookie: corrupt index key %x: %v", it.Key(), err)
		}
		for slot := range blockEntries {
			if loc, ok := locs.get(slot); ok {
				visit(cacheKey{ledgerID: ledgerID, entryID: block<<blockShift | int64(slot)}, loc)
			}
		}
	}
	return ioError("gc: scan index", it.Close())
}

func (e *Engine) updateDiskGauge() {
	bytes, _ := e.logs.totalBytes()
	e.metrics.ledgerDiskBytes.Set(float64(bytes))
}
