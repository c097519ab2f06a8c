package bookie

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// AddRequest is one entry to store.
type AddRequest struct {
	LedgerID, EntryID int64
	LastAddConfirmed  int64 // the writer's LAC piggybacked on this add; -1 if none
	Recovery          bool  // recovery adds are accepted on fenced ledgers
	Payload           []byte
	// Arrived, if set, is when the request arrived (read from the network):
	// the add's latency is measured from it. Zero: from the call to Add.
	Arrived time.Time
}

// Entry is an entry read back. Payload is shared with the engine's caches:
// callers must not modify it.
type Entry struct {
	LedgerID, EntryID, LastAddConfirmed int64
	Payload                             []byte
}

// ledgerState is what the engine knows about a ledger. Guarded by Engine.mu.
type ledgerState struct {
	lastAddConfirmed int64
	fenced           bool
	fenceDurable     bool // the fence bit is synced to the index
	deleted          bool // tombstone: the ledger never comes back
	watchers         map[*lacWatcher]struct{}
}

func (ls *ledgerState) meta() ledgerMeta {
	m := ledgerMeta{lac: ls.lastAddConfirmed}
	if ls.fenced {
		m.flags |= ledgerFlagFenced
	}
	if ls.deleted {
		m.flags |= ledgerFlagDeleted
	}
	return m
}

type lacWatcher struct {
	previous int64
	notify   func(lac int64)
}

// Engine is a bookie's storage engine. All methods are safe for concurrent
// use.
//
// Lock order: flushMu → gcMu → indexMu → mu. The journal's own mutex may be
// taken under mu; the journal never takes engine locks.
type Engine struct {
	cfg      Config
	fs       vfs.FS
	log      *slog.Logger
	db       *pebble.DB
	journal  *journal
	logs     *entryLogs
	rc       *readCache
	aheads   readAheads  // read-aheads in progress (single-entry misses)
	spans    spanBuffers // recycled buffers of range reads
	readGate *ReadGate   // admits range reads (adds first)
	metrics  *metrics
	counters counters

	mu        sync.RWMutex
	ledgers   map[int64]*ledgerState
	wc        writeCache
	arena     bodyArena     // the bodies of adds (journal records, cached payloads)
	flushDone chan struct{} // closed when a checkpoint empties the flushing half
	closed    bool
	failErr   error // entry-log or index I/O failure (not ENOSPC): adds are refused for good
	// readOnly: adds are refused (recovery adds too, unless the reason
	// is only the disk-usage threshold); derived from disk by
	// refreshReadOnlyLocked, reason one of reasonDiskUsage, reasonNoSpace.
	readOnly       bool
	readOnlyReason string
	disk           diskState

	// addedSinceStat counts add bytes since the last statfs; past
	// DiskCheckBytes an add wakes the disk loop.
	addedSinceStat atomic.Int64
	// ballastMissing: the index ballast is not on disk (released on an
	// index ENOSPC, or never made for lack of room).
	ballastMissing atomic.Bool
	// indexOutOfSpace: the index hit ENOSPC (set by onIndexDiskFull,
	// consumed by checkDisk).
	indexOutOfSpace atomic.Bool
	// gcStarved: the last GC pass left logs uncompacted for lack of space.
	gcStarved   atomic.Bool
	diskWake    chan struct{} // statfs now (capacity 1)
	modeChanged chan struct{} // readOnly changed: publish it (capacity 1)
	// publishMu serializes OnReadOnlyChange calls; publishedReadOnly is
	// the last state they carried.
	publishMu         sync.Mutex
	publishedReadOnly bool

	// flushMu serializes the writers of entry logs: checkpoints and GC.
	flushMu        sync.Mutex
	lastCheckpoint journalPosition // guarded by flushMu
	// retryCheckpoint is the journal position of a checkpoint that ran out
	// of space after swapping the write-cache halves: its frozen half is
	// still in wc.flushing and the next checkpoint writes it first.
	// Guarded by flushMu.
	retryCheckpoint *journalPosition
	// indexReadOnly: the index was opened read-only (no room to open it
	// read-write); a checkpoint reopens it first. Guarded by flushMu,
	// changed only with gcMu and indexMu held too.
	indexReadOnly bool
	indexOptions  *pebble.Options
	// indexMu serializes index batches that must observe ledger deletion:
	// a checkpoint or GC batch never re-adds locations of a ledger whose
	// DeleteRange committed before it.
	indexMu sync.Mutex
	// gcMu: readers hold it shared from index lookup to entry-log read; GC
	// and Close hold it exclusively to remove logs or close the index.
	gcMu     sync.RWMutex
	dbClosed atomic.Bool

	checkpointTrigger chan struct{}
	gcTrigger         chan struct{} // a full GC pass now (disk pressure)
	reclaimTrigger    chan struct{} // a ledger was deleted: sweep dead entry logs within ReclaimDelay
	stop              chan struct{}
	wg                sync.WaitGroup
}

// Open opens (or creates) the engine's directories and replays the journal
// from the last checkpoint into the write cache.
func Open(cfg Config) (*Engine, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if !cfg.JournalSyncData {
		cfg.Logger.Warn("bookie: JournalSyncData=false: adds are acknowledged before fsync; acknowledged entries are lost on power loss")
	}
	fs := cfg.FS
	for _, dir := range []string{cfg.JournalDir, cfg.LedgerDir} {
		if err := mkdirAllSynced(fs, dir); err != nil {
			return nil, ioError("create "+dir, err)
		}
	}
	m, err := newMetrics(cfg.Registerer)
	if err != nil {
		return nil, err
	}
	if cfg.ReadGate == nil {
		cfg.ReadGate = NewReadGate(0, 0)
	}
	e := &Engine{
		cfg:               cfg,
		fs:                fs,
		log:               cfg.Logger,
		rc:                newReadCache(cfg.ReadCacheBytes),
		readGate:          cfg.ReadGate,
		metrics:           m,
		ledgers:           make(map[int64]*ledgerState),
		wc:                writeCache{active: newWriteCacheHalf(), flushing: newWriteCacheHalf(), halfBytes: max(1, cfg.WriteCacheBytes/2)},
		flushDone:         make(chan struct{}),
		checkpointTrigger: make(chan struct{}, 1),
		gcTrigger:         make(chan struct{}, 1),
		reclaimTrigger:    make(chan struct{}, 1),
		diskWake:          make(chan struct{}, 1),
		modeChanged:       make(chan struct{}, 1),
		stop:              make(chan struct{}),
	}
	if _, err := fs.Stat(e.ballastPath()); err != nil {
		e.ballastMissing.Store(true)
	}
	e.indexOptions = &pebble.Options{
		// A Pebble write that hits ENOSPC releases the ballast and is
		// retried once: Pebble panics on a failed WAL or MANIFEST write.
		FS:     vfs.OnDiskFull(fs, e.onIndexDiskFull),
		Logger: pebbleLogger{log: cfg.Logger},
		Merger: locationMergerOptions,
	}
	// Uncompressed: location records are short varints that compress
	// little, and snappy in every flush and compaction is CPU the adds'
	// pipeline shares.
	e.indexOptions.ApplyCompressionSettings(func() pebble.DBCompressionSettings { return pebble.DBCompressionNone })
	// Pebble panics when a WAL or MANIFEST write fails, and opening it
	// read-write writes both (and flushes the replayed WAL). On a full
	// disk, the ballast is spent here, what it exists for; with less than
	// half the reserve free even then, the index is opened read-only.
	indexRoom := e.checkRoom("open index", 0)
	if indexRoom != nil && !e.ballastMissing.Load() {
		if err := fs.Remove(e.ballastPath()); err == nil {
			e.ballastMissing.Store(true)
			e.log.Warn("bookie: disk full at startup; index ballast released", "err", indexRoom)
		}
		indexRoom = e.checkRoom("open index", 0)
	}
	if indexRoom != nil {
		err = indexRoom
	} else {
		e.db, err = e.openIndex(false)
	}
	if isNoSpace(err) {
		// No room to open it read-write: serve reads from a read-only
		// index; the first checkpoint after space returns reopens it.
		e.log.Warn("bookie: index cannot be opened read-write (disk full); opening it read-only", "err", err)
		e.indexReadOnly = true
		rwErr := err
		if e.db, err = e.openIndex(true); err == nil {
			e.setNoSpace(ioError("open index read-write", rwErr))
		}
	}
	if err != nil {
		m.unregister()
		return nil, ioError("open index", err)
	}
	if err := e.recover(); err != nil {
		m.unregister()
		_ = e.db.Close()
		if e.logs != nil {
			_ = e.logs.close()
		}
		return nil, err
	}
	e.sampleDisk()
	if err := e.ensureBallast(); err != nil {
		e.log.Warn("bookie: index ballast not created", "err", err)
	}
	e.sampleDisk()
	e.updateDiskGauge()
	e.publishReadOnly()
	e.wg.Add(2)
	go e.backgroundLoop()
	go e.diskLoop()
	return e, nil
}

// openIndex opens the Pebble index, read-only if asked.
func (e *Engine) openIndex(readOnly bool) (*pebble.DB, error) {
	opts := *e.indexOptions
	opts.ReadOnly = readOnly
	return pebble.Open(e.fs.PathJoin(e.cfg.LedgerDir, "index"), &opts)
}

// reopenIndex reopens a read-only index read-write. The caller holds
// flushMu; readers and index writers are held off while the handle changes.
func (e *Engine) reopenIndex() error {
	e.gcMu.Lock()
	defer e.gcMu.Unlock()
	e.indexMu.Lock()
	defer e.indexMu.Unlock()
	if e.dbClosed.Load() {
		return ErrClosed
	}
	if err := e.db.Close(); err != nil {
		e.log.Warn("bookie: close read-only index", "err", err)
	}
	db, err := e.openIndex(false)
	if err != nil {
		// Keep serving reads from a read-only index.
		var roErr error
		if e.db, roErr = e.openIndex(true); roErr != nil {
			e.dbClosed.Store(true)
			return e.fail(ioError("reopen index read-only", roErr))
		}
		return ioError("reopen index", err)
	}
	e.db, e.indexReadOnly = db, false
	e.log.Info("bookie: index reopened read-write")
	return nil
}

// recover loads ledger metadata and the checkpoint from the index, replays
// the journal and starts it on a fresh file.
func (e *Engine) recover() error {
	it, err := e.db.NewIter(&pebble.IterOptions{LowerBound: []byte{keyPrefixLedger}, UpperBound: []byte{keyPrefixLedger + 1}})
	if err != nil {
		return ioError("scan ledgers", err)
	}
	for it.First(); it.Valid(); it.Next() {
		k := it.Key()
		meta, err := decodeLedgerMeta(it.Value())
		if err != nil || len(k) != 9 {
			_ = it.Close()
			return fmt.Errorf("bookie: index ledger key %x: %w", k, err)
		}
		id := int64(binary.BigEndian.Uint64(k[1:]))
		e.ledgers[id] = &ledgerState{
			lastAddConfirmed: meta.lac,
			fenced:           meta.flags&ledgerFlagFenced != 0,
			fenceDurable:     meta.flags&ledgerFlagFenced != 0,
			deleted:          meta.flags&ledgerFlagDeleted != 0,
		}
	}
	if err := it.Close(); err != nil {
		return ioError("scan ledgers", err)
	}
	var cp journalPosition
	if v, ok, err := getValue(e.db, []byte{keyCheckpoint}); err != nil {
		return ioError("read checkpoint", err)
	} else if ok {
		if cp, err = decodeJournalPosition(v); err != nil {
			return err
		}
	}
	e.lastCheckpoint = cp

	e.logs, err = openEntryLogs(e.fs, e.cfg.LedgerDir, e.cfg.EntryLogMaxBytes, e.cfg.hooks.skipEntryLogSync, !e.cfg.EntryLogBufferedIO)
	if err != nil {
		return ioError("open entry logs", err)
	}
	e.logs.pace = func() {
		if e.journal == nil {
			return
		}
		// One step per journal fsync, unless the adds are catching up:
		// once the active half is half full, the flushing half must be
		// written out before the active one fills, or adds stall on a full
		// write cache (a fsync-paced flush of 256 KiB per 1.8 ms batch is
		// 144 MB/s, well below what 1,024 adds in flight bring).
		e.mu.RLock()
		behind := e.wc.active.bytes >= e.wc.halfBytes/2
		e.mu.RUnlock()
		if !behind {
			e.journal.waitSync(entryLogPaceMax)
		}
	}

	ids, records, err := replayJournal(e.fs, e.cfg.JournalDir, cp, func(kind byte, body []byte) {
		if kind != recordKindAdd {
			return
		}
		k, v, ok := decodeAddBody(body)
		if !ok {
			return
		}
		ls := e.ledgers[k.ledgerID]
		if ls == nil {
			ls = &ledgerState{lastAddConfirmed: -1}
			e.ledgers[k.ledgerID] = ls
		}
		if ls.deleted {
			return // deletion is durable in the index; never resurrect
		}
		ls.lastAddConfirmed = max(ls.lastAddConfirmed, v.lastAddConfirmed)
		v.payload = e.arena.clone(v.payload)
		v.replayed = true
		e.wc.active.put(k, v)
	})
	if err != nil {
		return err
	}
	e.counters.replayedRecords.Add(uint64(records))

	j := &journal{
		fs: e.fs, dir: e.cfg.JournalDir,
		fileBytes: e.cfg.JournalFileBytes, maxBytes: e.cfg.JournalMaxBytes, maxWait: e.cfg.JournalMaxWait,
		flushWhenEmpty: e.cfg.JournalFlushWhenQueueEmpty, syncData: e.cfg.JournalSyncData,
		skipSync: e.cfg.hooks.skipJournalSync, beforeSync: e.cfg.hooks.beforeJournalSync, ackNoSpace: e.cfg.hooks.ackDespiteNoSpace,
		onNoSpace: e.setNoSpace,
		mayGrow: func(bytes int64) error {
			return e.checkRoomIn(e.cfg.JournalDir, "new journal file", bytes)
		},
		log: e.log, metrics: e.metrics, counters: &e.counters,
	}
	// Above every existing file and above the checkpoint's file: a new file
	// must never take an id that replay would read from an offset.
	nextID := cp.fileID + 1
	for _, id := range ids {
		nextID = max(nextID, id+1)
		switch {
		case id >= cp.fileID:
			j.live = append(j.live, id)
		case len(j.pool) < maxPooledJournalFiles:
			j.pool = append(j.pool, id)
		default:
			if err := e.fs.Remove(j.path(id)); err != nil {
				return ioError("remove old journal file", err)
			}
		}
	}
	// Never append to a file written before a crash: a fresh id makes any
	// bytes beyond its torn end unreachable.
	if err := j.start(nextID); err != nil {
		return err
	}
	e.journal = j
	if e.wc.active.bytes >= e.wc.halfBytes {
		e.triggerCheckpoint()
	}
	if records > 0 {
		e.log.Info("bookie: journal replayed", "records", records, "from_file", cp.fileID, "from_offset", cp.offset)
	}
	return nil
}

// Add stores an entry. It copies req.Payload before it returns: the caller
// may reuse it at once. done is called exactly once: after the journal fsync
// covering the entry (after write(2) when JournalSyncData is false), or with
// an error. done may run on the journal's completion goroutine, or before Add
// returns when the add is rejected; it must not block, nor call Add (Add may
// wait up to writeCacheWaitMax for a full write cache to drain, which needs
// the journal's goroutines).
func (e *Engine) Add(req AddRequest, done func(err error)) {
	e.readGate.noteAdd()
	start := req.Arrived
	if start.IsZero() {
		start = time.Now()
	}
	if req.LedgerID < 0 || req.EntryID < 0 || len(req.Payload) > maxPayloadBytes {
		e.counters.addsFailed.Add(1)
		done(fmt.Errorf("add ledger %d entry %d (%d bytes): %w", req.LedgerID, req.EntryID, len(req.Payload), ErrInvalidRequest))
		return
	}
	var header [addBodyHeaderBytes]byte
	putAddBodyHeader(&header, req)
	k := cacheKey{ledgerID: req.LedgerID, entryID: req.EntryID}
	size := len(req.Payload) + entryOverhead
	var deadline time.Time

	e.mu.Lock()
	for {
		if err := e.addAllowedLocked(req); err != nil {
			held, cached := false, false
			if req.Recovery && errors.Is(err, ErrReadOnly) {
				held, cached = e.heldInWriteCacheLocked(k, req.Payload)
			}
			e.mu.Unlock()
			if req.Recovery && errors.Is(err, ErrReadOnly) && !cached {
				held = e.heldInEntryLogs(k, req.Payload)
			}
			if held {
				e.counters.recoveryAddsHeld.Add(1)
				done(nil)
				return
			}
			e.counters.addsFailed.Add(1)
			done(err)
			return
		}
		wc := &e.wc
		if wc.active.bytes+wc.flushing.bytes+size <= 2*wc.halfBytes || wc.active.count == 0 {
			break
		}
		// Both halves are full: wait for the checkpoint to drain one.
		if deadline.IsZero() {
			deadline = start.Add(writeCacheWaitMax)
			e.counters.writeCacheWaits.Add(1)
			e.metrics.writeCacheWaits.Inc()
		}
		flushed := e.flushDone
		e.mu.Unlock()
		e.triggerCheckpoint()
		timer := time.NewTimer(time.Until(deadline))
		select {
		case <-flushed:
			timer.Stop()
		case <-timer.C:
			e.counters.addsFailed.Add(1)
			done(fmt.Errorf("add ledger %d entry %d: write cache full for %v: %w", req.LedgerID, req.EntryID, writeCacheWaitMax, ErrTooManyRequests))
			return
		}
		e.mu.Lock()
	}
	ls := e.ledgerLocked(req.LedgerID)
	body := e.arena.concat(header[:], req.Payload)
	e.wc.active.put(k, cachedEntry{lastAddConfirmed: req.LastAddConfirmed, payload: body[addBodyHeaderBytes:]})
	notify := ls.raiseLACLocked(req.LastAddConfirmed)
	e.journal.enqueue(body, start, done)
	halfFull := e.wc.active.bytes >= e.wc.halfBytes
	// The headroom check on the add path: the prediction includes this
	// entry, so the add that crosses the threshold is the last accepted.
	e.evaluateDiskLocked()
	e.mu.Unlock()
	if halfFull {
		e.triggerCheckpoint()
	}
	if e.addedSinceStat.Add(int64(size)) >= e.cfg.DiskCheckBytes {
		e.addedSinceStat.Store(0)
		e.wakeDiskLoop()
	}
	for _, w := range notify {
		w.notify(req.LastAddConfirmed)
	}
}

func (e *Engine) addAllowedLocked(req AddRequest) error {
	switch {
	case e.closed:
		return ErrClosed
	case e.failErr != nil:
		return e.failErr
	case e.readOnly && !e.recoveryAddAllowedLocked(req):
		return ErrReadOnly
	}
	if err := e.journal.err(); err != nil {
		return err
	}
	if ls := e.ledgers[req.LedgerID]; ls != nil {
		if ls.deleted {
			return fmt.Errorf("add to ledger %d: %w", req.LedgerID, ErrNoSuchLedger)
		}
		if ls.fenced && !req.Recovery {
			return fmt.Errorf("add to ledger %d: %w", req.LedgerID, ErrFenced)
		}
	}
	return nil
}

// recoveryAddAllowedLocked: a read-only bookie still takes recovery adds
// (as BookKeeper's does), so that ledgers it holds can be recovered, while
// the reason is only the usage threshold and the predicted free space is
// above half the reserve. Out of space, it takes none.
func (e *Engine) recoveryAddAllowedLocked(req AddRequest) bool {
	return req.Recovery && e.readOnlyReason == reasonDiskUsage && e.disk.free >= e.cfg.DiskReserveBytes/2
}

// A read-only bookie that cannot take a recovery add (out of space) still
// acknowledges one for an entry it already holds durably with the same
// payload: checkpointed to an entry log, or replayed from the journal at
// Open. Rewriting it would change nothing on disk, and without these
// acknowledgements the recovery of a ledger whose bookies are all full —
// every open ledger after a restart on a full disk — could never reach its
// ack quorum: the ledger could not be closed, and no topic on it taken over
// to serve its reads. An add of this run still in the write cache does not
// count (nor does an older version under it in the entry logs): its fsync
// may be pending, or may have failed (its entry stays cached while its add
// is refused), so a recovery counting it could close the ledger over an
// entry a restart loses.

// heldInWriteCacheLocked reports whether the write cache has k (cached)
// and, if so, whether it was replayed from the journal with this payload
// (held). The caller holds mu.
func (e *Engine) heldInWriteCacheLocked(k cacheKey, payload []byte) (held, cached bool) {
	if ls := e.ledgers[k.ledgerID]; ls == nil || ls.deleted {
		return false, true // nothing to look for elsewhere
	}
	v, ok := e.wc.get(k)
	if !ok {
		return false, false
	}
	return v.replayed && bytes.Equal(v.payload, payload), true
}

// heldInEntryLogs reports whether an entry log holds k with this payload.
func (e *Engine) heldInEntryLogs(k cacheKey, payload []byte) bool {
	e.gcMu.RLock()
	defer e.gcMu.RUnlock()
	if e.dbClosed.Load() {
		return false
	}
	loc, ok, err := e.lookup(k)
	if err != nil || !ok {
		return false
	}
	v, err := e.logs.read(loc, k)
	return err == nil && bytes.Equal(v.payload, payload)
}

func (e *Engine) ledgerLocked(id int64) *ledgerState {
	ls := e.ledgers[id]
	if ls == nil {
		ls = &ledgerState{lastAddConfirmed: -1}
		e.ledgers[id] = ls
	}
	return ls
}

// raiseLACLocked records a LAC and returns the watchers to notify (outside
// the lock).
func (ls *ledgerState) raiseLACLocked(lac int64) []*lacWatcher {
	if lac <= ls.lastAddConfirmed {
		return nil
	}
	ls.lastAddConfirmed = lac
	var fire []*lacWatcher
	for w := range ls.watchers {
		if lac > w.previous {
			fire = append(fire, w)
			delete(ls.watchers, w)
		}
	}
	return fire
}

// triggerGC asks for a full GC pass now (disk pressure).
func (e *Engine) triggerGC() {
	select {
	case e.gcTrigger <- struct{}{}:
	default:
	}
}

func (e *Engine) triggerCheckpoint() {
	select {
	case e.checkpointTrigger <- struct{}{}:
	default:
	}
}

// Fence sets the ledger's durable fence bit and returns its LAC. Later
// non-recovery adds fail with ErrFenced. Fencing an unknown ledger creates it.
func (e *Engine) Fence(ledgerID int64) (lastAddConfirmed int64, err error) {
	if ledgerID < 0 {
		return 0, fmt.Errorf("fence ledger %d: %w", ledgerID, ErrInvalidRequest)
	}
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return 0, ErrClosed
	}
	ls := e.ledgerLocked(ledgerID)
	if ls.deleted {
		e.mu.Unlock()
		return 0, fmt.Errorf("fence ledger %d: %w", ledgerID, ErrNoSuchLedger)
	}
	// Set in memory first: from here on adds are refused, and an add
	// accepted earlier is already in the write cache where a recovery read
	// after this fence finds it.
	ls.fenced = true
	durable := ls.fenceDurable
	e.mu.Unlock()
	if !durable {
		if err := e.writeLedgerMeta(ledgerID, nil); err != nil {
			return 0, fmt.Errorf("fence ledger %d: %w", ledgerID, err)
		}
		e.mu.Lock()
		ls.fenceDurable = true
		e.mu.Unlock()
	}
	e.mu.RLock()
	defer e.mu.RUnlock()
	return ls.lastAddConfirmed, nil
}

// DeleteLedger durably deletes a ledger. Afterwards reads and adds answer
// ErrNoSuchLedger. Entry logs left with nothing live are removed within
// ReclaimDelay; partly dead ones are compacted when the dead bytes pass
// GCDeadFraction, under disk pressure, or every GCInterval.
func (e *Engine) DeleteLedger(ledgerID int64) error {
	if ledgerID < 0 {
		return fmt.Errorf("delete ledger %d: %w", ledgerID, ErrInvalidRequest)
	}
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return ErrClosed
	}
	ls := e.ledgerLocked(ledgerID)
	ls.deleted = true
	ls.watchers = nil
	e.mu.Unlock()
	lower, upper := ledgerEntriesBounds(ledgerID)
	err := e.writeLedgerMeta(ledgerID, func(b *pebble.Batch) error {
		return b.DeleteRange(lower, upper, nil)
	})
	if err != nil {
		return fmt.Errorf("delete ledger %d: %w", ledgerID, err)
	}
	select {
	case e.reclaimTrigger <- struct{}{}:
	default:
	}
	return nil
}

// writeLedgerMeta commits, synced, the ledger's current metadata plus
// whatever extra adds to the batch.
func (e *Engine) writeLedgerMeta(ledgerID int64, extra func(*pebble.Batch) error) error {
	e.indexMu.Lock()
	defer e.indexMu.Unlock()
	if e.dbClosed.Load() {
		return ErrClosed
	}
	b := e.db.NewBatch()
	defer b.Close()
	if extra != nil {
		if err := extra(b); err != nil {
			return ioError("index batch", err)
		}
	}
	e.mu.RLock()
	meta := e.ledgers[ledgerID].meta()
	e.mu.RUnlock()
	if err := b.Set(ledgerKey(ledgerID), meta.encode(), nil); err != nil {
		return ioError("index batch", err)
	}
	opts := pebble.Sync
	if e.cfg.hooks.skipLedgerMetaSync {
		opts = pebble.NoSync
	}
	return ioError("commit index batch", b.Commit(opts))
}

// WriteLAC raises the ledger's LAC to lac (an idle writer's explicit LAC:
// its last entry is confirmed but no later add will say so), never lowers
// it, and wakes the long polls it satisfies. It returns the ledger's LAC
// afterwards. A fenced ledger answers ErrFenced (its writer was taken over,
// as for a non-recovery add); a ledger the bookie holds nothing of, or
// deleted, answers ErrNoSuchLedger. It is in memory only and never blocks,
// so the server calls it on the connection's reader goroutine, behind the
// ledger's adds.
//
// Durability: the LAC is not journaled. A writer only ever sends its own
// LAC, the end of the entries it has acknowledged, and those are durable on
// an ack quorum whatever this bookie keeps; so the LAC is a hint about the
// ledger, not data of this bookie. Losing it in a crash leaves the bookie
// reporting the older LAC its journaled adds carried (replay takes their
// maximum), and a reader then trails by one entry until the writer's next
// add or update: late, never wrong. (A checkpoint or fence that writes the
// ledger's metadata afterwards may persist it anyway, which is as safe.)
// Recovery, which starts from the highest LAC the fencing reads report,
// is not weakened either: it reads forward from that LAC whichever of the
// two it gets, and every entry up to either is acknowledged.
func (e *Engine) WriteLAC(ledgerID, lac int64) (lastAddConfirmed int64, err error) {
	if ledgerID < 0 || lac < -1 {
		return 0, fmt.Errorf("write LAC %d of ledger %d: %w", lac, ledgerID, ErrInvalidRequest)
	}
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return 0, ErrClosed
	}
	ls := e.ledgers[ledgerID]
	switch {
	case ls == nil || ls.deleted:
		e.mu.Unlock()
		return 0, fmt.Errorf("write LAC %d of ledger %d: %w", lac, ledgerID, ErrNoSuchLedger)
	case ls.fenced:
		e.mu.Unlock()
		return 0, fmt.Errorf("write LAC %d of ledger %d: %w", lac, ledgerID, ErrFenced)
	}
	notify := ls.raiseLACLocked(lac)
	lastAddConfirmed = ls.lastAddConfirmed
	e.mu.Unlock()
	for _, w := range notify {
		w.notify(lastAddConfirmed)
	}
	return lastAddConfirmed, nil
}

// LastAddConfirmed returns the highest LAC carried by the ledger's adds or
// written by WriteLAC.
func (e *Engine) LastAddConfirmed(ledgerID int64) (int64, error) {
	e.mu.RLock()
	defer e.mu.RUnlock()
	if e.closed {
		return 0, ErrClosed
	}
	ls := e.ledgers[ledgerID]
	if ls == nil || ls.deleted {
		return 0, fmt.Errorf("ledger %d: %w", ledgerID, ErrNoSuchLedger)
	}
	return ls.lastAddConfirmed, nil
}

// WatchLAC calls notify once, when the ledger's LAC exceeds previousLAC
// (immediately, on this goroutine, if it already does). cancel stops the
// watch; it is safe to call after notify.
func (e *Engine) WatchLAC(ledgerID, previousLAC int64, notify func(lac int64)) (cancel func(), err error) {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return nil, ErrClosed
	}
	ls := e.ledgers[ledgerID]
	if ls == nil || ls.deleted {
		e.mu.Unlock()
		return nil, fmt.Errorf("watch ledger %d: %w", ledgerID, ErrNoSuchLedger)
	}
	if lac := ls.lastAddConfirmed; lac > previousLAC {
		e.mu.Unlock()
		notify(lac)
		return func() {}, nil
	}
	w := &lacWatcher{previous: previousLAC, notify: notify}
	if ls.watchers == nil {
		ls.watchers = make(map[*lacWatcher]struct{})
	}
	ls.watchers[w] = struct{}{}
	e.mu.Unlock()
	return func() {
		e.mu.Lock()
		delete(ls.watchers, w)
		e.mu.Unlock()
	}, nil
}

// Info returns the last sampled free and total bytes of LedgerDir's file
// system and the read-only state (ReadOnlyReason says why).
func (e *Engine) Info() (free, total uint64, readOnly bool) {
	e.mu.RLock()
	defer e.mu.RUnlock()
	return e.disk.ledger.FreeBytes, e.disk.ledger.TotalBytes, e.readOnly
}

// Stats returns a snapshot of the counters.
func (e *Engine) Stats() Stats {
	c := &e.counters
	s := Stats{
		Adds: c.adds.Load(), AddsFailed: c.addsFailed.Load(), AddTime: time.Duration(c.addNanos.Load()),
		Reads: c.reads.Load(), ReadsFailed: c.readsFailed.Load(),
		WriteCacheHits: c.writeCacheHits.Load(), WriteCacheWaits: c.writeCacheWaits.Load(),
		ReadCacheHits: c.readCacheHits.Load(), ReadCacheMisses: c.readCacheMisses.Load(),
		ReadAheadJoins: c.readAheadJoins.Load(),
		RangeReads:     c.rangeReads.Load(), RangeEntries: c.rangeEntries.Load(),
		ReadGateWaits: c.readGateWaits.Load(),
		EntryLogReads: c.entryLogReads.Load(), EntryLogReadBytes: c.entryLogReadBytes.Load(),
		JournalQueueDepth: c.journalQueueDepth.Load(),
		JournalBatches:    c.journalBatches.Load(), JournalSyncs: c.journalSyncs.Load(),
		JournalSyncTime: time.Duration(c.journalSyncNanos.Load()),
		JournalIdleTime: time.Duration(c.journalIdleNanos.Load()),
		JournalRecords:  c.journalRecords.Load(), JournalBytes: c.journalBytes.Load(),
		JournalFilesRecycled: c.journalFilesRecycled.Load(),
		ReplayedRecords:      c.replayedRecords.Load(),
		Checkpoints:          c.checkpoints.Load(),
		GCPasses:             c.gcPasses.Load(), GCReclaimedBytes: c.gcReclaimedBytes.Load(),
		GCRelocatedEntries: c.gcRelocated.Load(),
		NoSpaceErrors:      c.noSpaceErrors.Load(),
		RecoveryAddsHeld:   c.recoveryAddsHeld.Load(),
	}
	s.EntryLogBytes, s.EntryLogFiles = e.logs.totalBytes()
	e.mu.RLock()
	s.WriteCacheBytes = e.wc.active.bytes + e.wc.flushing.bytes
	s.Ledgers = len(e.ledgers)
	s.ReadOnly, s.ReadOnlyReason = e.readOnly, e.readOnlyReason
	e.mu.RUnlock()
	return s
}

// Close checkpoints (flushes the write cache), completes every queued add
// and stops the engine's goroutines.
func (e *Engine) Close() error { return e.close(true) }

// close with checkpoint=false stops without flushing the write cache, as a
// crash would (queued adds are still completed): the next Open replays.
func (e *Engine) close(checkpoint bool) error {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return ErrClosed
	}
	e.closed = true
	e.mu.Unlock()
	close(e.stop)
	e.wg.Wait()

	var errs []error
	e.flushMu.Lock()
	defer e.flushMu.Unlock()
	if checkpoint && e.failErr == nil {
		if err := e.checkpointLocked(); err != nil {
			if !isNoSpace(err) {
				errs = append(errs, err)
			} else {
				// Nothing is lost: the journal still holds it, and the
				// next Open replays it.
				e.log.Warn("bookie: close without checkpoint: out of space; the journal will be replayed", "err", err)
			}
		}
	}
	e.journal.close()
	e.gcMu.Lock()
	e.indexMu.Lock()
	e.dbClosed.Store(true)
	errs = append(errs, e.logs.close(), e.db.Close())
	e.indexMu.Unlock()
	e.gcMu.Unlock()
	e.metrics.unregister()
	return errors.Join(errs...)
}

// fail records an entry-log or index I/O error other than running out of
// space (see storageError, setNoSpace): the engine stops accepting adds for
// good (reads go on).
func (e *Engine) fail(err error) error {
	e.mu.Lock()
	if e.failErr == nil {
		e.failErr = err
	}
	e.mu.Unlock()
	e.log.Error("bookie: storage failed; adds are refused from now on", "err", err)
	return err
}

func (e *Engine) backgroundLoop() {
	defer e.wg.Done()
	checkpoints := time.NewTicker(e.cfg.CheckpointInterval)
	defer checkpoints.Stop()
	gc := time.NewTicker(e.cfg.GCInterval)
	defer gc.Stop()
	var reclaim <-chan time.Time // armed by a deletion, for one sweep
	for {
		var err error
		select {
		case <-e.stop:
			return
		case <-checkpoints.C:
			err = e.Checkpoint()
		case <-e.checkpointTrigger:
			err = e.Checkpoint()
		case <-gc.C:
			err = e.CompactEntryLogs()
		case <-e.gcTrigger:
			err = e.CompactEntryLogs()
		case <-e.reclaimTrigger:
			if reclaim == nil {
				reclaim = time.After(e.cfg.ReclaimDelay)
			}
		case <-reclaim:
			reclaim = nil
			// Under disk pressure a deletion's dead bytes are taken back
			// whatever their fraction: a disk past the warn threshold, or
			// read-only, waits for exactly this (a sweep would leave the
			// partly dead logs until the next GCInterval).
			mode := gcSweep
			if e.underDiskPressure() {
				mode = gcFull
			}
			err = e.collectGarbage(mode)
		}
		switch {
		case err == nil || errors.Is(err, ErrClosed):
		case isNoSpace(err):
			// Already logged once when the engine turned read-only;
			// retried until there is room.
			e.log.Debug("bookie: background task out of space", "err", err)
		default:
			e.log.Warn("bookie: background task failed", "err", err)
		}
	}
}
