package bookie

import (
	"maps"
	"slices"
)

// writeCache is double-buffered: adds go to active while a checkpoint writes
// flushing to entry logs. Guarded by Engine.mu.
//
// Invariant: flushing is non-empty only while a checkpoint holds flushMu,
// or after a checkpoint that ran out of space (Engine.retryCheckpoint set),
// until the checkpoint that retries it succeeds.
type writeCache struct {
	active, flushing *writeCacheHalf
	halfBytes        int
}

func (w *writeCache) get(k cacheKey) (cachedEntry, bool) {
	if v, ok := w.active.get(k); ok {
		return v, true
	}
	return w.flushing.get(k)
}

// writeCacheHalf holds adds not yet flushed to entry logs, per ledger. A
// ledger's adds nearly always arrive in entry order, so each ledger keeps a
// dense run of consecutive entries (an append, no hashing, and already in
// the order a checkpoint writes them) and a map only for the others.
type writeCacheHalf struct {
	ledgers map[int64]*cachedLedger
	count   int // entries held
	bytes   int // payload bytes plus entryOverhead per entry
	// arena holds the journal bodies (and so the payloads) of this half's
	// adds: one allocation per arenaChunkBytes instead of one per add.
	arena bodyArena
}

// cachedLedger is one ledger's entries in a write-cache half.
//
// Invariant: other has no key in [first, first+len(run)), so each entry is
// held in exactly one place.
type cachedLedger struct {
	first int64         // entry id of run[0]
	run   []cachedEntry // entries first, first+1, … first+len(run)-1
	other map[int64]cachedEntry
}

func newWriteCacheHalf() *writeCacheHalf {
	return &writeCacheHalf{ledgers: make(map[int64]*cachedLedger)}
}

func (h *writeCacheHalf) get(k cacheKey) (cachedEntry, bool) {
	l := h.ledgers[k.ledgerID]
	if l == nil {
		return cachedEntry{}, false
	}
	if i := k.entryID - l.first; i >= 0 && i < int64(len(l.run)) {
		return l.run[i], true
	}
	v, ok := l.other[k.entryID]
	return v, ok
}

func (h *writeCacheHalf) put(k cacheKey, v cachedEntry) {
	l := h.ledgers[k.ledgerID]
	if l == nil {
		l = &cachedLedger{first: k.entryID}
		h.ledgers[k.ledgerID] = l
	}
	size := len(v.payload) + entryOverhead
	switch i := k.entryID - l.first; {
	case i >= 0 && i < int64(len(l.run)):
		h.bytes += size - (len(l.run[i].payload) + entryOverhead)
		l.run[i] = v
		return
	case i == int64(len(l.run)):
		if old, ok := l.other[k.entryID]; ok { // the run grew up to it
			delete(l.other, k.entryID)
			h.bytes -= len(old.payload) + entryOverhead
			h.count--
		}
		l.run = append(l.run, v)
	default:
		if l.other == nil {
			l.other = make(map[int64]cachedEntry)
		}
		if old, ok := l.other[k.entryID]; ok {
			h.bytes -= len(old.payload) + entryOverhead
			h.count--
		}
		l.other[k.entryID] = v
	}
	h.bytes += size
	h.count++
}

// sorted returns the entries ordered by (ledger, entry): the order in which
// a checkpoint writes them, so one ledger's entries are contiguous in an
// entry log and read-ahead reads one span.
func (h *writeCacheHalf) sorted() ([]cacheKey, []cachedEntry) {
	keys := make([]cacheKey, 0, h.count)
	values := make([]cachedEntry, 0, h.count)
	for _, ledgerID := range slices.Sorted(maps.Keys(h.ledgers)) {
		l := h.ledgers[ledgerID]
		others := slices.Sorted(maps.Keys(l.other))
		// Merge the run with the others; by the invariant they never collide.
		for i, id := 0, l.first; i < len(l.run) || len(others) > 0; {
			if i < len(l.run) && (len(others) == 0 || id < others[0]) {
				keys = append(keys, cacheKey{ledgerID: ledgerID, entryID: id})
				values = append(values, l.run[i])
				i, id = i+1, id+1
				continue
			}
			keys = append(keys, cacheKey{ledgerID: ledgerID, entryID: others[0]})
			values = append(values, l.other[others[0]])
			others = others[1:]
		}
	}
	return keys, values
}

// arenaChunkBytes sizes the chunks of a bodyArena; bodies above a quarter of
// it get their own allocation.
const arenaChunkBytes = 1 << 20

// bodyArena hands out copies of journal bodies carved from large chunks. A
// chunk is never reused: it is freed by the garbage collector once no cache
// half, journal batch or reader refers to any body in it, so a payload handed
// to a reader stays valid.
type bodyArena struct {
	chunk []byte // len: bytes handed out
}

// clone returns a copy of b.
func (a *bodyArena) clone(b []byte) []byte {
	return a.concat(b, nil)
}

// concat returns head and tail copied into one contiguous slice.
func (a *bodyArena) concat(head, tail []byte) []byte {
	n := len(head) + len(tail)
	if n > arenaChunkBytes/4 {
		out := make([]byte, 0, n)
		return append(append(out, head...), tail...)
	}
	if cap(a.chunk)-len(a.chunk) < n {
		a.chunk = make([]byte, 0, arenaChunkBytes)
	}
	start := len(a.chunk)
	a.chunk = append(append(a.chunk, head...), tail...)
	return a.chunk[start:len(a.chunk):len(a.chunk)]
}
