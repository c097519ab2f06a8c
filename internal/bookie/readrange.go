package bookie

import (
	"fmt"
	"math/bits"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2"
)

// ReadRange returns consecutive entries of a ledger from firstEntryID: at
// most maxEntries of them, and no more than maxBytes of payload (maxBytes <=
// 0: no byte limit) — except that the first entry is returned whatever its
// size. The range ends early before the first entry the bookie does not
// hold; ErrNoSuchEntry when it does not hold firstEntryID.
//
// It is what catch-up reads are made of, so it reads the way an entry log
// is laid out rather than entry by entry: entries still in the write cache
// or in the read cache come from memory; the others are located with one
// index iterator over their 64-entry blocks, and records that follow each
// other in one entry log (one ledger's entries do, after a checkpoint) are
// read with one ReadAt into one buffer, which the entries' payloads share:
// a caller that keeps one entry keeps its span's buffer (at most maxBytes
// plus an entry). Every record's CRC and identity are checked. Entries read
// from the entry logs do not go to the read cache: a range reader does not
// read them again, and filling the cache would evict what single-entry
// readers use.
//
// An error after some entries were read (an I/O error, a corrupt record,
// the ledger deleted meanwhile) ends the range there: the entries read are
// returned and the next request, starting after them, reports the error.
//
// Locks: e.mu is held shared only while entries are looked up in the write
// cache, never across I/O, so adds (which take it exclusively) never wait
// for a disk read; the entry-log reads happen under gcMu shared, which only
// GC's removal of old logs and Close take exclusively.
func (e *Engine) ReadRange(ledgerID, firstEntryID int64, maxEntries, maxBytes int) ([]Entry, error) {
	entries, _, err := e.readRange(ledgerID, firstEntryID, maxEntries, maxBytes, false)
	return entries, err
}

// ReadRangeRecycled is ReadRange for a caller that is done with the entries
// soon (the server, once it has written them to the network): release
// hands the buffers the payloads were read into back for reuse by later
// range reads, which then need no freshly zeroed memory (the runtime zeroes
// every new buffer, only for the read to overwrite it: a tenth of a
// catch-up's CPU). After release the payloads must not be used. Not calling
// release is safe: the buffers are then left to the garbage collector.
func (e *Engine) ReadRangeRecycled(ledgerID, firstEntryID int64, maxEntries, maxBytes int) (entries []Entry, release func(), err error) {
	return e.readRange(ledgerID, firstEntryID, maxEntries, maxBytes, true)
}

// readRange is ReadRange, its spans read into recycled buffers (handed back
// by release) if recycle, or else into buffers of their exact size: the
// caller keeps the payloads, which alias the spans, for as long as it likes
// (the standalone's broker reads its local bookies so, into its read-ahead),
// and a recycled buffer's power-of-two capacity would have doubled what a
// catch-up allocates and keeps alive.
func (e *Engine) readRange(ledgerID, firstEntryID int64, maxEntries, maxBytes int, recycle bool) (entries []Entry, release func(), err error) {
	start := time.Now()
	defer func() { e.metrics.readLatency.Observe(time.Since(start).Seconds()) }()
	if ledgerID < 0 || firstEntryID < 0 {
		return nil, nil, fmt.Errorf("read range ledger %d from %d: %w", ledgerID, firstEntryID, ErrInvalidRequest)
	}
	rr := rangeRead{ledgerID: ledgerID, maxEntries: max(maxEntries, 1), maxBytes: maxBytes, recycle: recycle}
	next := firstEntryID
	for !rr.full {
		var n int64
		if n, err = e.rangeFromMemory(&rr, next); err != nil {
			break
		}
		next += n
		if rr.full {
			break
		}
		if n, err = e.rangeFromLogs(&rr, next); err != nil || n == 0 {
			break // n == 0: the bookie does not hold entry next
		}
		next += n
	}
	release = func() {
		for _, b := range rr.spans {
			e.spans.put(b)
		}
		rr.spans = nil
	}
	switch {
	case len(rr.out) > 0:
		e.counters.rangeReads.Add(1)
		e.metrics.rangeReads.Inc()
		e.metrics.rangeEntries.Add(float64(len(rr.out)))
		e.counters.rangeEntries.Add(uint64(len(rr.out)))
		e.counters.reads.Add(uint64(len(rr.out)))
		return rr.out, release, nil // an error past the first entry is for the next request
	case err == nil:
		err = fmt.Errorf("read ledger %d entry %d: %w", ledgerID, firstEntryID, ErrNoSuchEntry)
	}
	release()
	e.counters.readsFailed.Add(1)
	return nil, nil, err
}

// rangeRead collects the entries of one ReadRange.
type rangeRead struct {
	ledgerID   int64
	maxEntries int
	maxBytes   int // <= 0: no limit
	out        []Entry
	bytes      int
	full       bool     // no further entry may be added
	spans      [][]byte // the recycled buffers of entry-log spans the payloads alias
	recycle    bool     // read spans into recycled buffers (and list them in spans)
}

// add appends the next entry unless it would break the byte limit (the first
// entry always fits); it reports whether it did.
func (rr *rangeRead) add(entryID int64, v cachedEntry) bool {
	if len(rr.out) > 0 && rr.maxBytes > 0 && rr.bytes+len(v.payload) > rr.maxBytes {
		rr.full = true
		return false
	}
	if rr.out == nil {
		rr.out = make([]Entry, 0, min(rr.maxEntries, 256))
	}
	rr.out = append(rr.out, Entry{LedgerID: rr.ledgerID, EntryID: entryID, LastAddConfirmed: v.lastAddConfirmed, Payload: v.payload})
	rr.bytes += len(v.payload)
	if len(rr.out) == rr.maxEntries || (rr.maxBytes > 0 && rr.bytes >= rr.maxBytes) {
		rr.full = true
	}
	return true
}

// rangeFromMemory adds the entries from next on that the write cache or the
// read cache holds, up to the first entry neither holds, and returns how
// many it added.
func (e *Engine) rangeFromMemory(rr *rangeRead, next int64) (int64, error) {
	var n int64
	for !rr.full {
		// The write cache first (it holds the newest version of an entry),
		// under mu: a run of entries per lock, a few nanoseconds each.
		e.mu.RLock()
		if e.closed {
			e.mu.RUnlock()
			return n, ErrClosed
		}
		if ls := e.ledgers[rr.ledgerID]; ls == nil || ls.deleted {
			e.mu.RUnlock()
			return n, fmt.Errorf("read ledger %d entry %d: %w", rr.ledgerID, next+n, ErrNoSuchLedger)
		}
		run := int64(0)
		for !rr.full {
			v, ok := e.wc.get(cacheKey{ledgerID: rr.ledgerID, entryID: next + n})
			if !ok || !rr.add(next+n, v) {
				break
			}
			n++
			run++
		}
		e.mu.RUnlock()
		e.counters.writeCacheHits.Add(uint64(run))
		if rr.full {
			break
		}
		v, ok := e.rc.get(cacheKey{ledgerID: rr.ledgerID, entryID: next + n})
		if !ok {
			break
		}
		if !rr.add(next+n, v) {
			break
		}
		e.counters.readCacheHits.Add(1)
		e.metrics.readCacheHits.Inc()
		n++
	}
	return n, nil
}

// rangeFromLogs adds the entries from next on that the index locates, up to
// the first one it does not (which may still be in the write cache: the
// caller looks there again), and returns how many it added.
func (e *Engine) rangeFromLogs(rr *rangeRead, next int64) (int64, error) {
	e.gcMu.RLock()
	defer e.gcMu.RUnlock()
	if e.dbClosed.Load() {
		return 0, ErrClosed
	}
	locs, err := e.locateRun(rr, next)
	if err != nil {
		return 0, ioError("read index", err)
	}
	if len(locs) == 0 {
		return 0, nil
	}
	e.counters.readCacheMisses.Add(uint64(len(locs)))
	e.metrics.readCacheMisses.Add(float64(len(locs)))
	// The reads and the parsing are what the ReadGate admits. A range that
	// has to wait for it does not have the kernel read its spans ahead
	// meanwhile (FADV_WILLNEED): that queued megabytes of reads in front of
	// the journals' fsyncs, and let the reader outrun what the gate admits.
	leave, ok := e.readGate.tryEnter()
	if !ok {
		e.counters.readGateWaits.Add(1)
		e.metrics.readGateWaits.Inc()
		leave = e.readGate.enter()
	}
	defer leave()
	var n int64
	e.readGate.run(func() { n, err = e.readSpans(rr, next, locs) })
	return n, err
}

// readSpans reads the records at locs, entries next onwards, into rr.
func (e *Engine) readSpans(rr *rangeRead, next int64, locs []location) (int64, error) {
	var n int64
	for i := 0; i < len(locs); {
		j, end := spanEnd(locs, i) // a span: records that follow each other in one log
		e.counters.entryLogReads.Add(1)
		e.counters.entryLogReadBytes.Add(uint64(end - locs[i].offset))
		e.metrics.entryLogReadBytes.Add(float64(end - locs[i].offset))
		var span []byte
		if rr.recycle {
			span = e.spans.get(int(end - locs[i].offset))
			rr.spans = append(rr.spans, span)
		} else {
			span = make([]byte, end-locs[i].offset)
		}
		if err := e.logs.readSpanInto(locs[i].logID, locs[i].offset, span); err != nil {
			return n, ioError("read entry log", err)
		}
		for ; i < j; i++ {
			want := cacheKey{ledgerID: rr.ledgerID, entryID: next + n}
			k, v, size, err := parseEntryRecord(span)
			if err == nil && k != want {
				err = fmt.Errorf("%w: holds ledger %d entry %d", errCorruptEntryRecord, k.ledgerID, k.entryID)
			}
			if err != nil {
				return n, ioError("read entry log", fmt.Errorf("entry log %d offset %d (ledger %d entry %d): %w",
					locs[i].logID, locs[i].offset, want.ledgerID, want.entryID, err))
			}
			if !rr.add(want.entryID, v) {
				return n, nil
			}
			n++
			span = span[size:]
		}
	}
	return n, nil
}

// spanEnd returns the index after the span of records that starts at
// locs[i] (records that follow each other in one log) and the offset where
// the span ends.
func spanEnd(locs []location, i int) (j int, end int64) {
	j = i + 1
	end = locs[i].offset + int64(locs[i].size)
	for j < len(locs) && locs[j].logID == locs[i].logID && locs[j].offset == end {
		end += int64(locs[j].size)
		j++
	}
	return j, end
}

// locateRun returns the locations of the consecutive entries from next that
// the index holds, as many as the range still takes: it stops at the first
// entry without a location, at the range's entry limit, and before a record
// that would cross its remaining byte limit (unless it would be the range's
// first entry, which is returned whatever its size). One Pebble iterator
// over the run's 64-entry blocks.
func (e *Engine) locateRun(rr *rangeRead, next int64) ([]location, error) {
	want := int64(rr.maxEntries - len(rr.out))
	last := next + want - 1
	if last < next {
		last = next // overflow: one block at a time is as correct
	}
	it, err := e.db.NewIter(&pebble.IterOptions{
		LowerBound: blockKey(rr.ledgerID, next>>blockShift),
		UpperBound: blockKey(rr.ledgerID, last>>blockShift+1),
	})
	if err != nil {
		return nil, err
	}
	defer it.Close()
	locs := make([]location, 0, min(want, 256))
	budget := -1 // payload bytes still wanted; -1: no byte limit
	if rr.maxBytes > 0 {
		budget = max(rr.maxBytes-rr.bytes, 0)
	}
	id := next
	for it.First(); it.Valid() && id <= last; it.Next() {
		_, block, ok := decodeBlockKey(it.Key())
		if !ok || block != id>>blockShift {
			break // a block without any entry: the run ends at id
		}
		b, err := decodeBlock(it.Value())
		if err != nil {
			return nil, err
		}
		for ; id <= last && id>>blockShift == block; id++ {
			loc, ok := b.get(int(id & (blockEntries - 1)))
			if !ok {
				return locs, nil
			}
			if budget >= 0 {
				payload := int(loc.size) - entryRecordHeaderBytes
				if payload > budget && (len(locs) > 0 || len(rr.out) > 0) {
					return locs, nil // ReadRange would not return it
				}
				budget -= payload
			}
			locs = append(locs, loc)
		}
	}
	return locs, it.Error()
}

// spanBuffers recycles the buffers range reads read entry-log spans into,
// by power-of-two capacity from 64 KiB to 16 MiB; smaller and larger spans
// get a buffer of their own. It keeps at most spanBuffersMaxBytes of idle
// buffers (a catch-up reader's ranges in flight to this bookie: 4 of 4 MiB
// by default) and drops what does not fit. Not a sync.Pool: a catch-up
// allocates enough elsewhere (frames, payload copies) that the GC emptied
// a pool between one range and the next, and the buffers were zeroed anew.
type spanBuffers struct {
	mu      sync.Mutex
	free    [spanClassMax - spanClassMin + 1][][]byte
	idle    int // bytes in free
	maxIdle int // 0: spanBuffersMaxBytes
}

const (
	spanClassMin        = 16 // 64 KiB
	spanClassMax        = 24 // 16 MiB
	spanBuffersMaxBytes = 16 << 20
)

// get returns a buffer of length n; its bytes are not zeroed.
func (p *spanBuffers) get(n int) []byte {
	class := bits.Len(uint(max(n, 1) - 1))
	if class > spanClassMax || n < 1<<spanClassMin/2 {
		return make([]byte, n)
	}
	class = max(class, spanClassMin)
	p.mu.Lock()
	free := p.free[class-spanClassMin]
	if len(free) > 0 {
		b := free[len(free)-1]
		free[len(free)-1] = nil
		p.free[class-spanClassMin] = free[:len(free)-1]
		p.idle -= cap(b)
		p.mu.Unlock()
		return b[:n]
	}
	p.mu.Unlock()
	return make([]byte, n, 1<<class)
}

// put hands a buffer from get back.
func (p *spanBuffers) put(b []byte) {
	class := bits.Len(uint(cap(b))) - 1
	if cap(b) != 1<<class || class < spanClassMin || class > spanClassMax {
		return
	}
	maxIdle := p.maxIdle
	if maxIdle == 0 {
		maxIdle = spanBuffersMaxBytes
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.idle+cap(b) > maxIdle {
		return
	}
	p.free[class-spanClassMin] = append(p.free[class-spanClassMin], b[:0])
	p.idle += cap(b)
}
