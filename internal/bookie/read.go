package bookie

import (
	"errors"
	"fmt"
	"math"
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

// ReadRange returns contiguous entries starting at firstEntryID, stopping
// at the first missing entry, after maxEntries, or before exceeding maxBytes
// of payload (maxBytes <= 0: no byte limit). It returns at least one entry
// when firstEntryID exists.
func (e *Engine) ReadRange(ledgerID, firstEntryID int64, maxEntries int, maxBytes int) ([]Entry, error) {
	start := time.Now()
	defer func() { e.metrics.readLatency.Observe(time.Since(start).Seconds()) }()
	if firstEntryID < 0 {
		return nil, fmt.Errorf("read range ledger %d from %d: %w", ledgerID, firstEntryID, ErrInvalidRequest)
	}
	maxEntries = max(maxEntries, 1)
	var out []Entry
	bytes := 0
	for id := firstEntryID; len(out) < maxEntries; id++ {
		ent, err := e.read(ledgerID, id)
		if err != nil {
			if len(out) > 0 && errors.Is(err, ErrNoSuchEntry) {
				break
			}
			if len(out) > 0 {
				return out, nil // serve what we have; the next request reports the error
			}
			return nil, err
		}
		if len(out) > 0 && maxBytes > 0 && bytes+len(ent.Payload) > maxBytes {
			break
		}
		bytes += len(ent.Payload)
		out = append(out, ent)
	}
	return out, nil
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
func (e *Engine) readFromLogs(k cacheKey) (cachedEntry, error) {
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
	v, err := e.logs.read(loc, k)
	if err != nil {
		return cachedEntry{}, ioError("read entry log", err)
	}
	if !e.rc.enabled() {
		return v, nil
	}
	keys := []cacheKey{k}
	values := []cachedEntry{v}
	if e.cfg.ReadAheadEntries > 0 {
		keys, values = e.readAhead(k, keys, values)
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

// readAhead appends the entries following k that the index locates,
// reading adjacent records of one log with a single ReadAt. Errors end the
// read-ahead quietly: it is an optimisation.
func (e *Engine) readAhead(k cacheKey, keys []cacheKey, values []cachedEntry) ([]cacheKey, []cachedEntry) {
	first, last := k.entryID+1, k.entryID+int64(e.cfg.ReadAheadEntries) // inclusive
	if last < first {
		last = math.MaxInt64 // overflow
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
	for it.First(); it.Valid(); it.Next() {
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
			if loc, ok := b.get(slot); ok && entryID >= first && entryID <= last {
				aheadKeys = append(aheadKeys, cacheKey{ledgerID: ledgerID, entryID: entryID})
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
