package bookie

import (
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2"
)

// Read returns one entry. entryID == -1 returns the ledger's LAC in
// Entry.LastAddConfirmed, without payload. Reads are served from the write
// cache, the read cache, then the entry logs — never from the journal.
func (e *Engine) Read(ledgerID, entryID int64) (Entry, error) {
	start := time.Now()
	ent, err := e.read(ledgerID, entryID)
	e.metrics.readLatency.Observe(time.Since(start).Seconds())
	return ent, err
}

func (e *Engine) read(ledgerID, entryID int64) (Entry, error) {
	ent, err := e.readEntry(ledgerID, entryID)
	if err != nil {
		e.counters.readsFailed.Add(1)
	} else {
		e.counters.reads.Add(1)
	}
	return ent, err
}

func (e *Engine) readEntry(ledgerID, entryID int64) (Entry, error) {
	k := cacheKey{ledgerID: ledgerID, entryID: entryID}
	e.mu.RLock()
	if e.closed {
		e.mu.RUnlock()
		return Entry{}, ErrClosed
	}
	ls := e.ledgers[ledgerID]
	if ls == nil || ls.deleted {
		e.mu.RUnlock()
		return Entry{}, fmt.Errorf("read ledger %d entry %d: %w", ledgerID, entryID, ErrNoSuchLedger)
	}
	if entryID == -1 {
		lac := ls.lastAddConfirmed
		e.mu.RUnlock()
		return Entry{LedgerID: ledgerID, EntryID: -1, LastAddConfirmed: lac}, nil
	}
	if entryID < 0 {
		e.mu.RUnlock()
		return Entry{}, fmt.Errorf("read ledger %d entry %d: %w", ledgerID, entryID, ErrInvalidRequest)
	}
	v, ok := e.wc.get(k)
	e.mu.RUnlock()
	if ok {
		e.counters.writeCacheHits.Add(1)
		return makeEntry(k, v), nil
	}
	if v, ok := e.rc.get(k); ok {
		e.counters.readCacheHits.Add(1)
		e.metrics.readCacheHits.Inc()
		return makeEntry(k, v), nil
	}
	e.counters.readCacheMisses.Add(1)
	e.metrics.readCacheMisses.Inc()
	v, err := e.readFromLogs(k)
	if err != nil {
		return Entry{}, err
	}
	return makeEntry(k, v), nil
}

func makeEntry(k cacheKey, v cachedEntry) Entry {
	return Entry{LedgerID: k.ledgerID, EntryID: k.entryID, LastAddConfirmed: v.lastAddConfirmed, Payload: v.payload}
}

// readFromLogs looks the entry up in the index, reads it and fills the read
// cache with it and up to ReadAheadEntries following entries of the ledger.
//
// Concurrent misses on neighbouring entries (a reader with many single-entry
// reads in flight) must not each read the same entries ahead: a miss whose
// entry a read-ahead in progress covers waits for that read-ahead and takes
// the entry from the read cache; only a miss outside every read-ahead in
// progress starts one, which ends before the next read-ahead in progress
// and before the first entry already cached. Measured with 64 concurrent
// misses per 64 entries: each entry read once from the entry logs, where
// every miss reading ahead on its own read it 17 times.
func (e *Engine) readFromLogs(k cacheKey) (cachedEntry, error) {
	readAhead := e.rc.enabled() && e.cfg.ReadAheadEntries > 0
	var aheadLast int64 // the last entry this read reads ahead
	if readAhead {
		mine, inProgress := e.aheads.claim(k, e.cfg.ReadAheadEntries)
		if inProgress != nil {
			<-inProgress.done
			e.counters.readAheadJoins.Add(1)
			if v, ok := e.rc.get(k); ok {
				return v, nil
			}
			readAhead = false // evicted or not read: read this entry alone
		} else {
			aheadLast = mine.last
			defer e.aheads.release(mine)
			// A read-ahead that finished between our cache miss and the
			// claim may have brought the entry (it fills the cache before
			// it releases its claim).
			if v, ok := e.rc.get(k); ok {
				return v, nil
			}
		}
	}
	// Taken before the index lookup: a checkpoint that flushes a newer
	// version after our lookup changes the generation and the fill is
	// dropped.
	generation := e.rc.currentGeneration()
	e.gcMu.RLock()
	defer e.gcMu.RUnlock()
	if e.dbClosed.Load() {
		return cachedEntry{}, ErrClosed
	}
	loc, ok, err := e.lookup(k)
	if err != nil {
		return cachedEntry{}, ioError("read index", err)
	}
	if !ok {
		return cachedEntry{}, fmt.Errorf("read ledger %d entry %d: %w", k.ledgerID, k.entryID, ErrNoSuchEntry)
	}
	e.counters.entryLogReads.Add(1)
	e.counters.entryLogReadBytes.Add(uint64(loc.size))
	e.metrics.entryLogReadBytes.Add(float64(loc.size))
	v, err := e.logs.read(loc, k)
	if err != nil {
		return cachedEntry{}, ioError("read entry log", err)
	}
	if !e.rc.enabled() {
		return v, nil
	}
	keys := []cacheKey{k}
	values := []cachedEntry{v}
	if readAhead {
		keys, values = e.readAhead(k, aheadLast, keys, values)
	}
	e.rc.fill(generation, keys, values)
	return v, nil
}

// lookup returns the entry's location in the index.
func (e *Engine) lookup(k cacheKey) (location, bool, error) { return lookupLocation(e.db, k) }

func lookupLocation(db *pebble.DB, k cacheKey) (location, bool, error) {
	val, ok, err := getValue(db, blockKey(k.ledgerID, k.entryID>>blockShift))
	if err != nil || !ok {
		return location{}, false, err
	}
	b, err := decodeBlock(val)
	if err != nil {
		return location{}, false, err
	}
	loc, ok := b.get(int(k.entryID & (blockEntries - 1)))
	return loc, ok, nil
}

// readAhead appends the entries k.entryID+1..last that the index locates,
// reading adjacent records of one log with a single ReadAt. Errors end the
// read-ahead quietly: it is an optimisation.
func (e *Engine) readAhead(k cacheKey, last int64, keys []cacheKey, values []cachedEntry) ([]cacheKey, []cachedEntry) {
	first := k.entryID + 1
	if last < first {
		return keys, values
	}
	it, err := e.db.NewIter(&pebble.IterOptions{
		LowerBound: blockKey(k.ledgerID, first>>blockShift),
		UpperBound: blockKey(k.ledgerID, last>>blockShift+1),
	})
	if err != nil {
		return keys, values
	}
	var aheadKeys []cacheKey
	var aheadLocs []location
	// Up to the first entry already in the read cache: a read-ahead that
	// finished before this one started has it, and likely the next ones.
	cached := false
	for it.First(); it.Valid() && !cached; it.Next() {
		ledgerID, block, ok := decodeBlockKey(it.Key())
		if !ok {
			break
		}
		b, err := decodeBlock(it.Value())
		if err != nil {
			break
		}
		for slot := range blockEntries {
			entryID := block<<blockShift | int64(slot)
			if entryID < first || entryID > last {
				continue
			}
			key := cacheKey{ledgerID: ledgerID, entryID: entryID}
			if cached = e.rc.has(key); cached {
				break
			}
			if loc, ok := b.get(slot); ok {
				aheadKeys = append(aheadKeys, key)
				aheadLocs = append(aheadLocs, loc)
			}
		}
	}
	_ = it.Close()
	for i := 0; i < len(aheadLocs); {
		// Extend a span over records that follow each other in one log.
		j := i + 1
		end := aheadLocs[i].offset + int64(aheadLocs[i].size)
		for j < len(aheadLocs) && aheadLocs[j].logID == aheadLocs[i].logID && aheadLocs[j].offset == end {
			end += int64(aheadLocs[j].size)
			j++
		}
		e.counters.entryLogReads.Add(1)
		e.counters.entryLogReadBytes.Add(uint64(end - aheadLocs[i].offset))
		e.metrics.entryLogReadBytes.Add(float64(end - aheadLocs[i].offset))
		span, err := e.logs.readSpan(aheadLocs[i].logID, aheadLocs[i].offset, end-aheadLocs[i].offset)
		if err != nil {
			return keys, values
		}
		for n := i; n < j; n++ {
			got, v, size, err := parseEntryRecord(span)
			if err != nil || got != aheadKeys[n] {
				return keys, values
			}
			keys = append(keys, got)
			values = append(values, v)
			span = span[size:]
		}
		i = j
	}
	return keys, values
}

// readAheads tracks the read-aheads in progress, so that a miss on an entry
// one of them is reading waits for it instead of reading the same entries
// again.
type readAheads struct {
	mu       sync.Mutex
	inFlight map[int64][]*aheadRead // by ledger; a handful each at most
}

// aheadRead is a read-ahead in progress of entries first..last of a ledger.
type aheadRead struct {
	ledgerID, first, last int64
	done                  chan struct{} // closed when its entries are in the read cache (or it gave up)
}

// claim returns the read-ahead in progress that covers k, or registers a new
// one (mine), which the caller must release: from k over the next entries,
// up to the first read-ahead in progress further on, so that concurrent
// read-aheads never read an entry twice whatever order the misses come in.
func (r *readAheads) claim(k cacheKey, entries int) (mine, inProgress *aheadRead) {
	r.mu.Lock()
	defer r.mu.Unlock()
	last := k.entryID + int64(entries)
	if last < k.entryID {
		last = math.MaxInt64 // overflow
	}
	for _, a := range r.inFlight[k.ledgerID] {
		if a.first <= k.entryID && k.entryID <= a.last {
			return nil, a
		}
		if a.first > k.entryID && a.first <= last {
			last = a.first - 1
		}
	}
	mine = &aheadRead{ledgerID: k.ledgerID, first: k.entryID, last: last, done: make(chan struct{})}
	if r.inFlight == nil {
		r.inFlight = make(map[int64][]*aheadRead)
	}
	r.inFlight[k.ledgerID] = append(r.inFlight[k.ledgerID], mine)
	return mine, nil
}

// release ends a read-ahead claimed by claim and wakes the reads waiting
// for it.
func (r *readAheads) release(a *aheadRead) {
	r.mu.Lock()
	list := r.inFlight[a.ledgerID]
	for i, x := range list {
		if x == a {
			list = append(list[:i], list[i+1:]...)
			break
		}
	}
	if len(list) == 0 {
		delete(r.inFlight, a.ledgerID)
	} else {
		r.inFlight[a.ledgerID] = list
	}
	r.mu.Unlock()
	close(a.done)
}
