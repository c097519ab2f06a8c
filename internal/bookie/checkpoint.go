package bookie

import (
	"fmt"
	"time"

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
func (e *Engine) checkpointLocked() error {
	e.mu.Lock()
	if e.failErr != nil {
		e.mu.Unlock()
		return e.failErr
	}
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
	pos := res.pos
	frozen := e.wc.flushing // immutable until we replace it below
	keys, values := frozen.sorted()

	// Entries of deleted ledgers are dropped here; a deletion racing with
	// this checkpoint is caught again under indexMu below.
	touched := make(map[int64]bool)
	e.mu.RLock()
	kept, keptValues := keys[:0], values[:0]
	for i, k := range keys {
		deleted, seen := touched[k.ledgerID]
		if !seen {
			deleted = e.ledgers[k.ledgerID].deleted
			touched[k.ledgerID] = deleted
		}
		if !deleted {
			kept, keptValues = append(kept, k), append(keptValues, values[i])
		}
	}
	e.mu.RUnlock()
	keys, values = kept, keptValues

	locs := make([]location, len(keys))
	for i, k := range keys {
		loc, err := e.logs.append(k, values[i])
		if err != nil {
			return e.fail(ioError("checkpoint: write entry log", err))
		}
		locs[i] = loc
	}
	if err := e.logs.sync(); err != nil {
		return e.fail(ioError("checkpoint: sync entry log", err))
	}

	if len(keys) > 0 || e.lastCheckpoint.less(pos) {
		if err := e.commitCheckpoint(keys, locs, touched, pos); err != nil {
			return e.fail(err)
		}
	}
	e.rc.invalidate(keys)

	e.mu.Lock()
	e.wc.flushing = newWriteCacheHalf()
	close(e.flushDone)
	e.flushDone = make(chan struct{})
	e.mu.Unlock()

	e.lastCheckpoint = pos
	e.journal.release(pos)
	e.counters.checkpoints.Add(1)
	e.updateDiskGauge()
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

// CompactEntryLogs runs one garbage-collection pass: entry logs whose live
// fraction (bytes the index still points at) is below GCThreshold have
// their live entries copied to the current log, the index updated (synced)
// and then the old files removed. Logs with nothing live are removed.
func (e *Engine) CompactEntryLogs() error {
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
	e.counters.gcPasses.Add(1)

	liveBytes := make(map[uint64]int64)
	if err := e.scanLocations(func(_ cacheKey, loc location) {
		liveBytes[loc.logID] += int64(loc.size)
	}); err != nil {
		return err
	}
	current := e.logs.currentID()
	ids, sizes := e.logs.snapshotSizes()
	compact := make(map[uint64]bool)
	relocate := false
	for _, id := range ids {
		if id == current {
			continue
		}
		used := sizes[id] - entryLogHeaderBytes
		live := liveBytes[id]
		if live == 0 || used <= 0 || float64(live)/float64(used) < e.cfg.GCThreshold {
			compact[id] = true
			relocate = relocate || live > 0
		}
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
				return e.fail(ioError("gc: write entry log", err))
			}
		}
		if err := e.logs.sync(); err != nil {
			return e.fail(ioError("gc: sync entry log", err))
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
	e.counters.gcReclaimedBytes.Add(uint64(reclaimed))
	e.updateDiskGauge()
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

// diskLoop samples disk usage and flips read-only mode with hysteresis.
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
		}
	}
}

func (e *Engine) checkDisk() {
	var used, total uint64
	var err error
	if e.cfg.DiskUsage != nil {
		used, total, err = e.cfg.DiskUsage()
	} else {
		var u vfsDiskUsage
		u, err = e.fs.GetDiskUsage(e.cfg.LedgerDir)
		used, total = u.UsedBytes, u.TotalBytes
	}
	if err != nil || total == 0 {
		return // unknown usage (e.g. an in-memory FS): keep the current mode
	}
	fraction := float64(used) / float64(total)
	e.mu.Lock()
	e.diskUsed, e.diskTotal = used, total
	changed := false
	switch {
	case !e.readOnly && fraction > e.cfg.DiskUsageHigh:
		e.readOnly, changed = true, true
	case e.readOnly && fraction < e.cfg.DiskUsageLow:
		e.readOnly, changed = false, true
	}
	readOnly := e.readOnly
	e.mu.Unlock()
	if !changed {
		return
	}
	if readOnly {
		e.metrics.serverStatus.Set(0)
		e.log.Warn("bookie: disk usage above high threshold; read-only", "used", used, "total", total, "high", e.cfg.DiskUsageHigh)
	} else {
		e.metrics.serverStatus.Set(1)
		e.log.Info("bookie: disk usage below low threshold; writable", "used", used, "total", total, "low", e.cfg.DiskUsageLow)
	}
	if e.cfg.OnReadOnlyChange != nil {
		e.cfg.OnReadOnlyChange(readOnly)
	}
}
