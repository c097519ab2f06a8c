package bookie

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"slices"
	"sync"

	"github.com/cockroachdb/pebble/v2/vfs"

	"quire/internal/directio"
)

// Entry log file format (LedgerDir/entrylog-<id as 16 hex digits>.log):
//
//	header: magic "QENTLOG1" (8) | logID (8)
//	record: crc32c (4) | payloadLen (4) | ledger (8) | entry (8) | lac (8) | payload
//
// The CRC covers everything after itself. Integers are big-endian. Records
// are located through the index, never by scanning, so a torn tail after a
// crash is harmless: no index entry points into it (the index batch is
// committed only after the entry log is synced).
const (
	entryLogMagic          = "QENTLOG1"
	entryLogHeaderBytes    = 16
	entryRecordHeaderBytes = 32
	// entryLogWriteChunk is the step in which entry logs are written and
	// handed to the disk (see entryLogs.pace).
	entryLogWriteChunk = 256 << 10
	// entryLogBlockBytes is the unit of every entry-log write: offsets and
	// lengths are multiples of it, as direct I/O requires.
	entryLogBlockBytes = directio.BlockBytes
	// entryLogBufferBytes is the writer's buffer: a chunk plus room for the
	// record that crosses it.
	entryLogBufferBytes = entryLogWriteChunk + 64<<10
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func entryLogName(id uint64) string { return fmt.Sprintf("entrylog-%016x.log", id) }

func parseEntryLogName(name string) (uint64, bool) {
	var id uint64
	if len(name) != len("entrylog-0000000000000000.log") {
		return 0, false
	}
	if _, err := fmt.Sscanf(name, "entrylog-%016x.log", &id); err != nil {
		return 0, false
	}
	return id, entryLogName(id) == name
}

func appendEntryRecord(buf []byte, k cacheKey, v cachedEntry) []byte {
	start := len(buf)
	var h [entryRecordHeaderBytes]byte
	binary.BigEndian.PutUint32(h[4:], uint32(len(v.payload)))
	binary.BigEndian.PutUint64(h[8:], uint64(k.ledgerID))
	binary.BigEndian.PutUint64(h[16:], uint64(k.entryID))
	binary.BigEndian.PutUint64(h[24:], uint64(v.lastAddConfirmed))
	buf = append(buf, h[:]...)
	buf = append(buf, v.payload...)
	binary.BigEndian.PutUint32(buf[start:], crc32.Checksum(buf[start+4:], castagnoli))
	return buf
}

var errCorruptEntryRecord = errors.New("corrupt entry log record")

// parseEntryRecord decodes the record at the start of buf. The payload
// aliases buf.
func parseEntryRecord(buf []byte) (k cacheKey, v cachedEntry, size int, err error) {
	if len(buf) < entryRecordHeaderBytes {
		return k, v, 0, errCorruptEntryRecord
	}
	n := int(binary.BigEndian.Uint32(buf[4:]))
	size = entryRecordHeaderBytes + n
	if n > maxPayloadBytes || size > len(buf) {
		return k, v, 0, errCorruptEntryRecord
	}
	if crc32.Checksum(buf[4:size], castagnoli) != binary.BigEndian.Uint32(buf) {
		return k, v, 0, errCorruptEntryRecord
	}
	k = cacheKey{ledgerID: int64(binary.BigEndian.Uint64(buf[8:])), entryID: int64(binary.BigEndian.Uint64(buf[16:]))}
	v = cachedEntry{lastAddConfirmed: int64(binary.BigEndian.Uint64(buf[24:])), payload: buf[entryRecordHeaderBytes:size]}
	return k, v, size, nil
}

// entryLogs manages the entry log files: one writer (used only under
// Engine.flushMu) and read handles shared by readers.
type entryLogs struct {
	fs       vfs.FS
	dir      string
	maxBytes int64
	skipSync bool // test hook: mutant that never syncs entry logs
	// direct: open new logs for direct I/O where the file system allows it.
	direct bool
	// pace, if set, is called before each entryLogWriteChunk of a log is
	// handed to the disk. The engine makes it wait for the next journal
	// fsync: on a disk shared with the journal, a checkpoint that wrote a
	// whole write-cache half at once made every journal fsync queued behind
	// it wait for all of it (tens of milliseconds); one step per journal
	// fsync delays each by at most one step.
	pace func()

	mu      sync.Mutex
	readers map[uint64]vfs.File
	sizes   map[uint64]int64 // every entry log on disk → bytes written

	// Writer state, owned by whoever holds Engine.flushMu.
	nextID   uint64
	w        *entryLogWriter
	dirDirty bool // a log was created since the last directory sync
}

type entryLogWriter struct {
	id       uint64
	file     vfs.File
	written  int64  // bytes handed to file.Write; a multiple of entryLogBlockBytes
	buf      []byte // bytes not yet written
	skipSync bool
	pace     func()
	// direct: the file was opened for direct I/O (O_DIRECT): writes go from
	// buf to the disk with no page-cache copy, no writeback and no
	// cached pages to drop afterwards. Writes are then whole aligned blocks,
	// as they are in either mode, and buf must be block-aligned in memory.
	direct bool
}

func (w *entryLogWriter) size() int64 { return w.written + int64(len(w.buf)) }

// flushBuf writes the whole blocks of buf, keeping a partial last block for
// the next call. final also writes that block, padded with zeros, and moves
// past it: a block that holds synced records is never written again, so a
// torn write can only hit records that were never synced (and that the
// index therefore never points to).
func (w *entryLogWriter) flushBuf(final bool) error {
	n := len(w.buf)
	if final {
		if pad := -n & (entryLogBlockBytes - 1); pad > 0 {
			w.buf = append(w.buf, make([]byte, pad)...)
			n += pad
		}
	} else {
		n &^= entryLogBlockBytes - 1
	}
	if n == 0 {
		return nil
	}
	if w.pace != nil && !w.skipSync {
		w.pace()
	}
	out := w.buf[:n]
	if w.direct && !directio.Aligned(out) {
		// buf grew past its aligned capacity (a large entry): write from a
		// fresh aligned copy, which becomes the buffer.
		nb := directio.Buffer(max(len(w.buf), entryLogBufferBytes))
		w.buf = nb[:copy(nb, w.buf)]
		out = w.buf[:n]
	}
	// vfs.File.Write may modify its argument; only out is handed over, and
	// it is written already.
	written, err := w.file.Write(out)
	w.written += int64(written)
	rest := copy(w.buf, w.buf[n:])
	w.buf = w.buf[:rest]
	if err != nil || w.skipSync || w.direct {
		return err
	}
	// Start writing it back now (and wait for the previous step's
	// writeback): the final SyncData then finds little left to do. No
	// durability is claimed here; SyncData does that.
	_, err = w.file.SyncTo(w.written)
	return err
}

func openEntryLogs(fs vfs.FS, dir string, maxBytes int64, skipSync, direct bool) (*entryLogs, error) {
	l := &entryLogs{
		fs: fs, dir: dir, maxBytes: maxBytes, skipSync: skipSync, direct: direct,
		readers: make(map[uint64]vfs.File),
		sizes:   make(map[uint64]int64),
		nextID:  1,
	}
	names, err := fs.List(dir)
	if err != nil {
		return nil, err
	}
	for _, name := range names {
		id, ok := parseEntryLogName(name)
		if !ok {
			continue
		}
		st, err := fs.Stat(fs.PathJoin(dir, name))
		if err != nil {
			return nil, err
		}
		l.sizes[id] = st.Size()
		l.nextID = max(l.nextID, id+1)
	}
	return l, nil
}

func (l *entryLogs) path(id uint64) string { return l.fs.PathJoin(l.dir, entryLogName(id)) }

// append adds a record to the current entry log, rolling to a new file past
// maxBytes. The record is durable only after sync.
func (l *entryLogs) append(k cacheKey, v cachedEntry) (location, error) {
	recordSize := int64(entryRecordHeaderBytes + len(v.payload))
	if l.w == nil || (l.w.size() > entryLogHeaderBytes && l.w.size()+recordSize > l.maxBytes) {
		if err := l.roll(); err != nil {
			return location{}, err
		}
	}
	w := l.w
	loc := location{logID: w.id, offset: w.size(), size: uint32(recordSize)}
	w.buf = appendEntryRecord(w.buf, k, v)
	if len(w.buf) >= entryLogWriteChunk {
		if err := w.flushBuf(false); err != nil {
			return location{}, err
		}
	}
	l.mu.Lock()
	l.sizes[w.id] = w.size()
	l.mu.Unlock()
	return loc, nil
}

// roll syncs and closes the current log and starts a new one.
func (l *entryLogs) roll() error {
	if l.w != nil {
		if err := l.syncWriter(); err != nil {
			return err
		}
		if err := l.w.file.Close(); err != nil {
			return err
		}
		l.w = nil
	}
	id := l.nextID
	f, err := l.fs.Create(l.path(id), vfs.WriteCategoryUnspecified)
	if err != nil {
		return err
	}
	l.nextID++
	l.dirDirty = true
	w := &entryLogWriter{id: id, file: f, skipSync: l.skipSync, pace: l.pace}
	w.direct = l.direct && setDirectIO(f)
	if w.direct {
		w.buf = directio.Buffer(entryLogBufferBytes)[:0]
	}
	w.buf = append(w.buf, entryLogMagic...)
	w.buf = binary.BigEndian.AppendUint64(w.buf, id)
	l.w = w
	l.mu.Lock()
	l.sizes[id] = w.size()
	l.mu.Unlock()
	return nil
}

func (l *entryLogs) syncWriter() error {
	if err := l.w.flushBuf(true); err != nil {
		return err
	}
	if l.skipSync {
		return nil
	}
	if err := l.w.file.SyncData(); err != nil {
		return err
	}
	if l.w.direct {
		return nil // nothing was cached
	}
	// Entry logs are written once and read back rarely (reads are served
	// from the write and read caches first). Dropping their synced pages
	// keeps the page cache from growing by every byte added: on these VMs,
	// writing into never-used memory costs several times a write into
	// recycled pages (a third of the engine's CPU went to it).
	dropCachedPages(l.w.file, 0, 0)
	return nil
}

// sync makes every record appended so far durable, including the directory
// entries of new logs.
func (l *entryLogs) sync() error {
	if l.w != nil {
		if err := l.syncWriter(); err != nil {
			return err
		}
	}
	if l.dirDirty && !l.skipSync {
		if err := syncDir(l.fs, l.dir); err != nil {
			return err
		}
		l.dirDirty = false
	}
	return nil
}

// abandon gives up the current log after a failed write or sync (a full
// disk): it is closed without syncing and never written again, so that no
// later record lands after a torn block. The records it synced before stay
// readable and are collected like any other log's; the next append starts
// a new log.
func (l *entryLogs) abandon() {
	if l.w == nil {
		return
	}
	_ = l.w.file.Close()
	l.mu.Lock()
	l.sizes[l.w.id] = l.w.written
	l.mu.Unlock()
	l.w = nil
}

// retire finishes the current log (synced, closed) so that GC may collect
// it; the next append starts a new one. The caller holds Engine.flushMu.
func (l *entryLogs) retire() error {
	if l.w == nil {
		return nil
	}
	if err := l.syncWriter(); err != nil {
		return err
	}
	if err := l.w.file.Close(); err != nil {
		return err
	}
	l.mu.Lock()
	l.sizes[l.w.id] = l.w.size()
	l.mu.Unlock()
	l.w = nil
	return nil
}

// currentID returns the id of the log being written, 0 if none.
func (l *entryLogs) currentID() uint64 {
	if l.w == nil {
		return 0
	}
	return l.w.id
}

func (l *entryLogs) reader(id uint64) (vfs.File, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if f, ok := l.readers[id]; ok {
		return f, nil
	}
	f, err := l.fs.Open(l.path(id))
	if err != nil {
		return nil, err
	}
	adviseNoReadAhead(f)
	l.readers[id] = f
	return f, nil
}

// readSpan reads length bytes at offset of log id.
func (l *entryLogs) readSpan(id uint64, offset, length int64) ([]byte, error) {
	buf := make([]byte, length)
	if err := l.readSpanInto(id, offset, buf); err != nil {
		return nil, err
	}
	return buf, nil
}

// maxReadRequest bounds one read of an entry log. The readers have no
// kernel read-ahead (adviseNoReadAhead), so a read of n bytes that misses
// the page cache goes to the disk as requests of up to n bytes (split at the
// device's max_sectors_kb, often 4 MiB), and a journal fsync queued behind
// one waits for all of it. Measured here (virtio disk, mq-deadline): an
// 8 KiB write+fdatasync had a p99 of 1.2 ms alone, 7.8 ms beside a reader of
// 4 MiB reads and 1.6 ms beside one of 256 KiB reads; the readers ran at
// 1,058 and 905 MB/s.
const maxReadRequest = 256 << 10

// readSpanInto fills buf with the bytes at offset of log id, in reads of at
// most maxReadRequest bytes.
func (l *entryLogs) readSpanInto(id uint64, offset int64, buf []byte) error {
	f, err := l.reader(id)
	if err != nil {
		return err
	}
	for done := 0; done < len(buf); {
		chunk := buf[done:min(done+maxReadRequest, len(buf))]
		n, err := f.ReadAt(chunk, offset+int64(done))
		done += n
		if n == len(chunk) {
			continue
		}
		if err == nil {
			err = errCorruptEntryRecord
		}
		return fmt.Errorf("entry log %d offset %d: short read %d of %d: %w", id, offset, done, len(buf), err)
	}
	return nil
}

// read returns the record at loc, verifying its CRC and that it is the
// expected entry.
func (l *entryLogs) read(loc location, want cacheKey) (cachedEntry, error) {
	buf, err := l.readSpan(loc.logID, loc.offset, int64(loc.size))
	if err != nil {
		return cachedEntry{}, err
	}
	k, v, _, err := parseEntryRecord(buf)
	if err == nil && k != want {
		err = fmt.Errorf("%w: holds ledger %d entry %d", errCorruptEntryRecord, k.ledgerID, k.entryID)
	}
	if err != nil {
		return cachedEntry{}, fmt.Errorf("entry log %d offset %d (ledger %d entry %d): %w",
			loc.logID, loc.offset, want.ledgerID, want.entryID, err)
	}
	return v, nil
}

// remove deletes an entry log that the index no longer references. Callers
// hold Engine.gcMu exclusively so that no reader is using its handle.
func (l *entryLogs) remove(id uint64) error {
	l.mu.Lock()
	if f, ok := l.readers[id]; ok {
		_ = f.Close()
		delete(l.readers, id)
	}
	delete(l.sizes, id)
	l.mu.Unlock()
	return l.fs.Remove(l.path(id))
}

// snapshotSizes returns every log id (sorted) with its size.
func (l *entryLogs) snapshotSizes() (ids []uint64, sizes map[uint64]int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	sizes = make(map[uint64]int64, len(l.sizes))
	for id, s := range l.sizes {
		ids = append(ids, id)
		sizes[id] = s
	}
	slices.Sort(ids)
	return ids, sizes
}

func (l *entryLogs) totalBytes() (bytes int64, files int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, s := range l.sizes {
		bytes += s
	}
	return bytes, len(l.sizes)
}

// close releases every handle. Unsynced appended bytes are written but not
// synced: a clean Close checkpoints first.
func (l *entryLogs) close() error {
	var firstErr error
	if l.w != nil {
		if err := l.w.flushBuf(true); err != nil && firstErr == nil {
			firstErr = err
		}
		if err := l.w.file.Close(); err != nil && firstErr == nil {
			firstErr = err
		}
		l.w = nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for id, f := range l.readers {
		_ = f.Close()
		delete(l.readers, id)
	}
	return firstErr
}
