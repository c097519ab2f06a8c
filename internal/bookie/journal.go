package bookie

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// Journal file format (JournalDir/journal-<id as 16 hex digits>.log). Files
// are preallocated (zero-filled, so fdatasync never commits a size change)
// and recycled: a file released by a checkpoint is renamed to a new id and
// overwritten from offset 0. Records:
//
//	crc32c (4) | bodyLen (4) | fileID (8) | kind (1) | body
//	add body: ledger (8) | entry (8) | lac (8) | flags (1) | payload
//
// The CRC (Castagnoli) covers everything after itself, fileID included, so
// neither zeros nor a stale record from the file's previous life (another
// id) is taken for a record. Replay of a file stops at its first invalid
// record. Ids start at 1 and only grow.
const (
	journalRecordHeaderBytes = 17
	addBodyHeaderBytes       = 25
	recordKindAdd            = 1
	addFlagRecovery          = 1 << 0
	zeroFillChunk            = 1 << 20
)

func journalName(id uint64) string { return fmt.Sprintf("journal-%016x.log", id) }

func parseJournalName(name string) (uint64, bool) {
	var id uint64
	if len(name) != len("journal-0000000000000000.log") {
		return 0, false
	}
	if _, err := fmt.Sscanf(name, "journal-%016x.log", &id); err != nil {
		return 0, false
	}
	return id, journalName(id) == name && id > 0
}

// encodeAddBody copies the request into a fresh body.
func encodeAddBody(req AddRequest) []byte {
	var header [addBodyHeaderBytes]byte
	putAddBodyHeader(&header, req)
	return append(header[:], req.Payload...)
}

// putAddBodyHeader writes the part of an add body before the payload.
func putAddBodyHeader(h *[addBodyHeaderBytes]byte, req AddRequest) {
	binary.BigEndian.PutUint64(h[0:], uint64(req.LedgerID))
	binary.BigEndian.PutUint64(h[8:], uint64(req.EntryID))
	binary.BigEndian.PutUint64(h[16:], uint64(req.LastAddConfirmed))
	if req.Recovery {
		h[24] = addFlagRecovery
	}
}

func decodeAddBody(body []byte) (k cacheKey, v cachedEntry, ok bool) {
	if len(body) < addBodyHeaderBytes {
		return k, v, false
	}
	k = cacheKey{ledgerID: int64(binary.BigEndian.Uint64(body[0:])), entryID: int64(binary.BigEndian.Uint64(body[8:]))}
	v = cachedEntry{lastAddConfirmed: int64(binary.BigEndian.Uint64(body[16:])), payload: body[addBodyHeaderBytes:]}
	return k, v, k.ledgerID >= 0 && k.entryID >= 0
}

func appendJournalRecord(buf []byte, fileID uint64, kind byte, body []byte) []byte {
	start := len(buf)
	var h [journalRecordHeaderBytes]byte
	binary.BigEndian.PutUint32(h[4:], uint32(len(body)))
	binary.BigEndian.PutUint64(h[8:], fileID)
	h[16] = kind
	buf = append(buf, h[:]...)
	buf = append(buf, body...)
	binary.BigEndian.PutUint32(buf[start:], crc32.Checksum(buf[start+4:], castagnoli))
	return buf
}

// parseJournalRecord decodes the record at the start of buf, which must
// belong to file fileID. ok=false marks the end of the file's valid records.
func parseJournalRecord(buf []byte, fileID uint64) (kind byte, body []byte, size int, ok bool) {
	if len(buf) < journalRecordHeaderBytes {
		return 0, nil, 0, false
	}
	n := int(binary.BigEndian.Uint32(buf[4:]))
	size = journalRecordHeaderBytes + n
	if n > maxPayloadBytes+addBodyHeaderBytes || size > len(buf) {
		return 0, nil, 0, false
	}
	if binary.BigEndian.Uint64(buf[8:]) != fileID {
		return 0, nil, 0, false
	}
	if crc32.Checksum(buf[4:size], castagnoli) != binary.BigEndian.Uint32(buf) {
		return 0, nil, 0, false
	}
	return buf[16], buf[journalRecordHeaderBytes:size], size, true
}

// journalItem is one queued add, or a checkpoint marker (marker != nil)
// that resolves to the journal position after every item queued before it.
type journalItem struct {
	body   []byte
	done   func(error)
	marker chan markerResult
	// enqueued is when the add began (Engine.Add): the start of its latency.
	enqueued time.Time
}

type markerResult struct {
	pos journalPosition
	err error
}

// finishedBatch is a batch whose fate is known: synced (err nil) or failed.
// positions (nil after a failure before writing) gives each marker its
// journal position. After running out of space the adds fail (err) but the
// markers still resolve (markerErr nil): a position needs no space.
type finishedBatch struct {
	items     []journalItem
	positions []journalPosition
	err       error
	markerErr error
}

// maxUnacknowledgedBatches bounds journal batches synced but not yet
// acknowledged.
const maxUnacknowledgedBatches = 4

type preparedFile struct {
	id   uint64
	file vfs.File
	err  error
}

// journal is the write-ahead log with group commit. One goroutine (run)
// owns the open file: it writes everything queued, fsyncs, and hands the
// batch to a second goroutine (completeLoop) that acknowledges its adds,
// while it goes on with the next batch — so the disk is not idle while a
// batch's callbacks run. Engine code only enqueues and releases.
type journal struct {
	fs             vfs.FS
	dir            string
	fileBytes      int64
	maxBytes       int
	maxWait        time.Duration
	flushWhenEmpty bool
	syncData       bool
	skipSync       bool // test hook: mutant that never fsyncs
	ackNoSpace     bool // test hook: mutant that acknowledges adds that ran out of space
	beforeSync     func()
	// onNoSpace is called (on the journal goroutine, without journal
	// locks) when a write, sync or new file fails for lack of space.
	onNoSpace func(error)
	// mayGrow, if set, is asked before a new file is created (not for a
	// recycled one): an error (out of space) fails the creation instead
	// of letting the zero-fill take the index's last free bytes.
	mayGrow  func(bytes int64) error
	log      *slog.Logger
	metrics  *metrics
	counters *counters

	mu         sync.Mutex
	queue      []journalItem
	queueBytes int
	closing    bool
	failed     error
	live       []uint64 // files at or after the checkpoint (may hold records to replay), sorted
	pool       []uint64 // files before the checkpoint, free for recycling
	// poolEmpty mirrors len(pool) == 0 for readers on the add path
	// (needsNewFile) that should not take mu.
	poolEmpty atomic.Bool
	synced    chan struct{} // closed and replaced at the end of every fsync

	wake    chan struct{}
	stopped chan struct{} // closed when both goroutines have returned
	// completions carries finished batches from run to completeLoop, in
	// order. Its capacity bounds the batches written but not yet
	// acknowledged; run waits when it is full.
	completions chan finishedBatch

	// Owned by the run goroutine. file is nil after running out of space
	// (the file was abandoned, or no new one could be made): the next add
	// opens file fileID+1, which is always the next id.
	file      vfs.File
	fileID    uint64
	offset    int64
	spare     chan preparedFile // the next file, prepared in the background
	preparing bool
	buf       []byte
	batch     []journalItem
}

func (j *journal) path(id uint64) string { return j.fs.PathJoin(j.dir, journalName(id)) }

// start opens file firstID and starts the group-commit goroutine.
func (j *journal) start(firstID uint64) error {
	j.wake = make(chan struct{}, 1)
	j.stopped = make(chan struct{})
	j.synced = make(chan struct{})
	j.completions = make(chan finishedBatch, maxUnacknowledgedBatches)
	j.spare = make(chan preparedFile, 1)
	j.poolEmpty.Store(len(j.pool) == 0)
	pf := j.prepare(firstID)
	switch {
	case pf.err == nil:
		j.file, j.fileID, j.offset = pf.file, pf.id, 0
		j.mu.Lock()
		j.live = append(j.live, pf.id)
		j.mu.Unlock()
	case isNoSpace(pf.err):
		// A full disk at startup: no file yet; adds are refused (the
		// engine is read-only) and the first add after space returns
		// makes it.
		j.fileID = firstID - 1
		if j.onNoSpace != nil {
			j.onNoSpace(pf.err)
		}
	default:
		return pf.err
	}
	completerDone := make(chan struct{})
	go func() {
		defer close(completerDone)
		j.completeLoop()
	}()
	go func() {
		defer close(j.stopped)
		j.run()
		close(j.completions)
		<-completerDone
	}()
	return nil
}

// prepare makes file id ready to receive records: a recycled file renamed
// to id, or a new zero-filled one; then the directory is synced, so that a
// record written and synced into it is never lost with its directory entry.
func (j *journal) prepare(id uint64) preparedFile {
	j.mu.Lock()
	var reuse uint64
	if len(j.pool) > 0 {
		reuse = j.pool[0]
		j.pool = j.pool[1:]
	}
	j.poolEmpty.Store(len(j.pool) == 0)
	j.mu.Unlock()
	var f vfs.File
	var err error
	if reuse != 0 {
		f, err = j.fs.ReuseForWrite(j.path(reuse), j.path(id), vfs.WriteCategoryUnspecified)
		j.counters.journalFilesRecycled.Add(1)
	} else if j.mayGrow != nil {
		if err = j.mayGrow(j.fileBytes); err == nil {
			f, err = j.createZeroFilled(id)
		}
	} else {
		f, err = j.createZeroFilled(id)
	}
	if err == nil {
		err = syncDir(j.fs, j.dir)
	}
	if err != nil {
		if f != nil {
			_ = f.Close()
		}
		return preparedFile{err: ioError(fmt.Sprintf("prepare journal file %d", id), err)}
	}
	return preparedFile{id: id, file: f}
}

func (j *journal) createZeroFilled(id uint64) (vfs.File, error) {
	f, err := j.fs.Create(j.path(id), vfs.WriteCategoryUnspecified)
	if err != nil {
		return nil, err
	}
	// A file that could not be filled (a full disk) is removed: half a
	// journal file is space taken for nothing.
	failed := func(err error) (vfs.File, error) {
		_ = f.Close()
		_ = j.fs.Remove(j.path(id))
		return nil, err
	}
	// Preallocate reserves blocks; writing zeros also makes them "written"
	// extents, so a later fdatasync has no metadata to commit. A failed
	// preallocation that says the disk is full stops here; others (not
	// supported) are left to the writes.
	if err := f.Preallocate(0, j.fileBytes); err != nil && isNoSpace(err) {
		return failed(err)
	}
	zeros := make([]byte, min(int64(zeroFillChunk), j.fileBytes))
	for off := int64(0); off < j.fileBytes; off += int64(len(zeros)) {
		chunk := zeros[:min(int64(len(zeros)), j.fileBytes-off)]
		clear(chunk) // Write may modify its argument
		if _, err := f.Write(chunk); err != nil {
			return failed(err)
		}
	}
	if err := f.Sync(); err != nil {
		return failed(err)
	}
	return f, nil
}

// enqueue queues an add that began at start; done is called after the
// covering fsync, once the add is counted (Stats, latency metric).
func (j *journal) enqueue(body []byte, start time.Time, done func(error)) {
	j.push(journalItem{body: body, done: done, enqueued: start})
}

// enqueueMarker returns a channel that receives the journal position after
// every item queued so far.
func (j *journal) enqueueMarker() chan markerResult {
	ch := make(chan markerResult, 1)
	j.push(journalItem{marker: ch, enqueued: time.Now()})
	return ch
}

func (j *journal) push(it journalItem) {
	j.mu.Lock()
	if j.closing {
		j.mu.Unlock()
		j.complete(it, journalPosition{}, ErrClosed, time.Now())
		return
	}
	j.queue = append(j.queue, it)
	j.queueBytes += journalRecordHeaderBytes + len(it.body)
	j.counters.journalQueueDepth.Store(int64(len(j.queue)))
	j.mu.Unlock()
	j.metrics.queueDepth.Inc()
	select {
	case j.wake <- struct{}{}:
	default:
	}
}

// complete resolves an item; now is the time of the covering fsync's end.
func (j *journal) complete(it journalItem, pos journalPosition, err error, now time.Time) {
	if it.marker != nil {
		it.marker <- markerResult{pos: pos, err: err}
		return
	}
	if err != nil && isNoSpace(err) && !errors.Is(err, ErrReadOnly) {
		// The client should take its writes elsewhere, as from a
		// read-only bookie.
		err = fmt.Errorf("%w: %w", ErrReadOnly, err)
	}
	if err != nil {
		j.counters.addsFailed.Add(1)
	} else {
		took := now.Sub(it.enqueued)
		j.counters.adds.Add(1)
		j.counters.addNanos.Add(int64(took))
		j.metrics.addLatency.Observe(took.Seconds())
	}
	it.done(err)
}

func (j *journal) run() {
	for j.next() {
		j.process()
	}
	if j.preparing {
		if pf := <-j.spare; pf.file != nil {
			_ = pf.file.Close()
		}
	}
	if j.file != nil {
		if !j.skipSync {
			_ = j.file.SyncData()
		}
		_ = j.file.Close()
		j.file = nil
	}
}

// next waits for work and moves up to maxBytes of queued items into
// j.batch. It returns false once closing and drained.
func (j *journal) next() bool {
	j.mu.Lock()
	var idleSince time.Time // the journal has nothing to write: the disk idles
	if len(j.queue) == 0 {
		idleSince = time.Now()
	}
	for len(j.queue) == 0 {
		if j.closing {
			j.mu.Unlock()
			return false
		}
		j.mu.Unlock()
		<-j.wake
		j.mu.Lock()
	}
	if !idleSince.IsZero() {
		j.counters.journalIdleNanos.Add(int64(time.Since(idleSince)))
	}
	if !j.flushWhenEmpty && !j.closing && j.queueBytes < j.maxBytes {
		// Collect more, up to maxWait after the oldest item.
		timer := time.NewTimer(time.Until(j.queue[0].enqueued.Add(j.maxWait)))
		j.mu.Unlock()
	wait:
		for {
			select {
			case <-timer.C:
				break wait
			case <-j.wake:
				j.mu.Lock()
				full := j.queueBytes >= j.maxBytes || j.closing
				j.mu.Unlock()
				if full {
					break wait
				}
			}
		}
		timer.Stop()
		j.mu.Lock()
	}
	n, bytes := 0, 0
	for n < len(j.queue) {
		b := journalRecordHeaderBytes + len(j.queue[n].body)
		if n > 0 && bytes+b > j.maxBytes {
			break
		}
		bytes += b
		n++
	}
	// A fresh slice: the previous batch may still be being acknowledged.
	j.batch = append(make([]journalItem, 0, n), j.queue[:n]...)
	rest := copy(j.queue, j.queue[n:])
	clear(j.queue[rest:])
	j.queue = j.queue[:rest]
	j.queueBytes -= bytes
	j.counters.journalQueueDepth.Store(int64(len(j.queue)))
	failed := j.failed
	j.mu.Unlock()
	j.metrics.queueDepth.Sub(float64(n))
	if failed != nil {
		j.finish(nil, failed)
	}
	return true
}

// process writes j.batch, fsyncs and completes its items.
func (j *journal) process() {
	if len(j.batch) == 0 {
		return
	}
	buf := j.buf[:0]
	positions := make([]journalPosition, len(j.batch))
	records := 0
	var err error
	for i, it := range j.batch {
		if it.marker != nil {
			positions[i] = j.position(len(buf))
			continue
		}
		if j.file == nil { // after running out of space; nothing is buffered
			if err = j.open(); err != nil {
				break
			}
		}
		size := int64(journalRecordHeaderBytes + len(it.body))
		if end := j.offset + int64(len(buf)); end > 0 && end+size > j.fileBytes {
			if err = j.write(buf); err != nil {
				break
			}
			buf = buf[:0]
			if err = j.roll(); err != nil {
				break
			}
		}
		buf = appendJournalRecord(buf, j.fileID, recordKindAdd, it.body)
		records++
	}
	if err == nil {
		err = j.write(buf)
	}
	j.buf = buf[:0]
	j.counters.journalBatches.Add(1)
	j.counters.journalRecords.Add(uint64(records))
	if err != nil {
		j.failBatch(positions, err)
		return
	}
	if j.file == nil { // only markers, with no file since running out of space
		j.finish(positions, nil)
		return
	}
	if j.beforeSync != nil {
		j.beforeSync()
	}
	if j.skipSync {
		j.finish(positions, nil)
		return
	}
	if !j.syncData {
		// The documented trade-off: acknowledge after write(2); the fsync
		// follows but does not gate the acknowledgement.
		j.finish(positions, nil)
		if err := j.sync(); err != nil {
			if isNoSpace(err) {
				j.abandon(err)
			} else {
				j.fail(err)
			}
		}
		return
	}
	if err = j.sync(); err != nil {
		j.failBatch(positions, err)
		return
	}
	j.finish(positions, nil)
}

// position is where the next record goes, buffered bytes after the last
// written one; with no open file, the start of the next one.
func (j *journal) position(buffered int) journalPosition {
	if j.file == nil {
		return journalPosition{fileID: j.fileID + 1}
	}
	return journalPosition{fileID: j.fileID, offset: j.offset + int64(buffered)}
}

// failBatch completes j.batch after err. Out of space, the file is
// abandoned and the journal goes on with a new one once there is room:
// the batch's adds fail, unacknowledged (some of their records may be
// whole in the abandoned file and replay after a crash, in the order the
// write cache holds them, which is allowed for a failed add), and its
// markers still resolve: a marker after the failure gets the start of the
// next file, which is where the next record will go. Any other error is
// permanent: the file's state is unknown.
func (j *journal) failBatch(positions []journalPosition, err error) {
	if !isNoSpace(err) {
		j.fail(err)
		j.finish(positions, err)
		return
	}
	j.abandon(err)
	for i, it := range j.batch {
		if it.marker != nil && positions[i] == (journalPosition{}) {
			positions[i] = j.position(0)
		}
	}
	if j.ackNoSpace {
		err = nil
	}
	j.completions <- finishedBatch{items: j.batch, positions: positions, err: err}
	j.batch = nil
}

// abandon closes the current file without syncing it and never writes it
// again: after a failed write or fsync its unsynced state is unknown
// ("fsyncgate"), and records appended after a torn one could replay out
// of order. What it synced before stays valid for replay; it is released
// by the next checkpoint like any other file.
func (j *journal) abandon(err error) {
	if j.file != nil {
		_ = j.file.Close()
		j.file = nil
	}
	j.offset = 0
	j.log.Warn("bookie: journal out of space; adds are refused until there is room", "file", j.fileID, "err", err)
	if j.onNoSpace != nil {
		j.onNoSpace(err)
	}
}

// open starts the next file after the current one was abandoned (or none
// could be made at startup).
func (j *journal) open() error {
	var pf preparedFile
	if j.preparing {
		pf = <-j.spare
		j.preparing = false
		if isNoSpace(pf.err) {
			// Prepared in the background while the disk was full, maybe
			// long ago: try again now.
			pf = j.prepare(j.fileID + 1)
		}
	} else {
		pf = j.prepare(j.fileID + 1)
	}
	if pf.err != nil {
		return pf.err
	}
	j.file, j.fileID, j.offset = pf.file, pf.id, 0
	j.mu.Lock()
	j.live = append(j.live, pf.id)
	j.mu.Unlock()
	return nil
}

// needsNewFile reports whether the next file must be created (none is
// pooled for recycling): the space a journal roll will take.
func (j *journal) needsNewFile() bool { return j.poolEmpty.Load() }

// finish hands j.batch, synced or failed, to completeLoop.
func (j *journal) finish(positions []journalPosition, err error) {
	j.completions <- finishedBatch{items: j.batch, positions: positions, err: err, markerErr: err}
	j.batch = nil
}

// completeLoop acknowledges finished batches in order.
func (j *journal) completeLoop() {
	for b := range j.completions {
		now := time.Now()
		for i, it := range b.items {
			var pos journalPosition
			if b.positions != nil {
				pos = b.positions[i]
			}
			err := b.err
			if it.marker != nil {
				err = b.markerErr
			}
			j.complete(it, pos, err, now)
		}
	}
}

func (j *journal) write(buf []byte) error {
	if len(buf) == 0 {
		return nil
	}
	n := len(buf)
	// WriteAt: a recycled file is overwritten in place, never appended to.
	if _, err := j.file.WriteAt(buf, j.offset); err != nil {
		return ioError(fmt.Sprintf("write journal file %d", j.fileID), err)
	}
	j.offset += int64(n)
	j.counters.journalBytes.Add(uint64(n))
	return nil
}

func (j *journal) sync() error {
	start := time.Now()
	err := j.file.SyncData()
	took := time.Since(start)
	j.metrics.fsyncLatency.Observe(took.Seconds())
	j.counters.journalSyncs.Add(1)
	j.counters.journalSyncNanos.Add(int64(took))
	j.mu.Lock()
	close(j.synced)
	j.synced = make(chan struct{})
	j.mu.Unlock()
	return ioError(fmt.Sprintf("sync journal file %d", j.fileID), err)
}

// roll syncs the full file (its records are acknowledged with the batch,
// whose final fsync covers only the new file) and moves to the next one.
func (j *journal) roll() error {
	if !j.skipSync {
		if err := j.sync(); err != nil {
			return err
		}
	}
	if err := j.file.Close(); err != nil {
		return ioError("close journal file", err)
	}
	j.file = nil
	if err := j.open(); err != nil {
		return err
	}
	pf := preparedFile{id: j.fileID}
	// Prepare the following file while this one fills, so that a roll
	// costs a rename, not a zero-fill, on the add path.
	j.preparing = true
	go func(id uint64) { j.spare <- j.prepare(id) }(pf.id + 1)
	return nil
}

// waitSync waits for the end of the next fsync, at most limit.
func (j *journal) waitSync(limit time.Duration) {
	j.mu.Lock()
	synced := j.synced
	j.mu.Unlock()
	t := time.NewTimer(limit)
	defer t.Stop()
	select {
	case <-synced:
	case <-t.C:
	}
}

func (j *journal) fail(err error) {
	j.mu.Lock()
	if j.failed == nil {
		j.failed = err
	}
	j.mu.Unlock()
	j.log.Error("bookie journal failed; adds are refused from now on", "err", err)
}

func (j *journal) err() error {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.failed
}

// release is called after a checkpoint at position cp is durable: files
// before cp.fileID hold nothing that replay needs. Some are kept for
// recycling, the rest removed.
func (j *journal) release(cp journalPosition) {
	var remove []uint64
	j.mu.Lock()
	keep := j.live[:0]
	for _, id := range j.live {
		switch {
		case id >= cp.fileID:
			keep = append(keep, id)
		case len(j.pool) < maxPooledJournalFiles:
			j.pool = append(j.pool, id)
		default:
			remove = append(remove, id)
		}
	}
	j.poolEmpty.Store(len(j.pool) == 0)
	j.live = keep
	j.mu.Unlock()
	for _, id := range remove {
		if err := j.fs.Remove(j.path(id)); err != nil {
			j.log.Warn("bookie: remove journal file", "file", id, "err", err)
		}
	}
}

// trimPool removes pooled files beyond keep (disk pressure: a pooled file
// is JournalFileBytes of preallocated zeros) and returns how many it
// removed.
func (j *journal) trimPool(keep int) int {
	j.mu.Lock()
	var remove []uint64
	if len(j.pool) > keep {
		remove = slices.Clone(j.pool[keep:])
		j.pool = j.pool[:keep]
	}
	j.poolEmpty.Store(len(j.pool) == 0)
	j.mu.Unlock()
	for _, id := range remove {
		if err := j.fs.Remove(j.path(id)); err != nil {
			j.log.Warn("bookie: remove pooled journal file", "file", id, "err", err)
		}
	}
	return len(remove)
}

// close drains the queue (every queued add is written, synced and
// completed) and stops the goroutine.
func (j *journal) close() {
	j.mu.Lock()
	j.closing = true
	j.mu.Unlock()
	select {
	case j.wake <- struct{}{}:
	default:
	}
	<-j.stopped
}

// replayJournal reads the records at or after from, in file order, and
// calls apply for each. It returns the ids of every journal file found and
// the highest one.
func replayJournal(fs vfs.FS, dir string, from journalPosition, apply func(kind byte, body []byte)) (ids []uint64, records int, err error) {
	names, err := fs.List(dir)
	if err != nil {
		return nil, 0, err
	}
	for _, name := range names {
		if id, ok := parseJournalName(name); ok {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	for _, id := range ids {
		if id < from.fileID {
			continue
		}
		data, err := readWholeFile(fs, fs.PathJoin(dir, journalName(id)))
		if err != nil {
			return nil, 0, ioError(fmt.Sprintf("read journal file %d", id), err)
		}
		off := 0
		if id == from.fileID {
			off = int(min(from.offset, int64(len(data))))
		}
		for {
			kind, body, size, ok := parseJournalRecord(data[off:], id)
			if !ok {
				break
			}
			apply(kind, body)
			records++
			off += size
		}
	}
	return ids, records, nil
}

func readWholeFile(fs vfs.FS, path string) ([]byte, error) {
	f, err := fs.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	data := make([]byte, st.Size())
	n, err := f.ReadAt(data, 0)
	if n == len(data) {
		return data, nil
	}
	return nil, fmt.Errorf("short read %d of %d: %w", n, len(data), err)
}
