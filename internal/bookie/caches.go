package bookie

import (
	"cmp"
	"sync"
)

// cacheKey names an entry.
type cacheKey struct{ ledgerID, entryID int64 }

func (k cacheKey) compare(o cacheKey) int {
	if c := cmp.Compare(k.ledgerID, o.ledgerID); c != 0 {
		return c
	}
	return cmp.Compare(k.entryID, o.entryID)
}

// cachedEntry is an entry's value. payload is shared and never modified.
type cachedEntry struct {
	lastAddConfirmed int64
	payload          []byte
	// replayed marks a write-cache entry that Open replayed from the
	// journal: durable on this bookie before any checkpoint, unlike an add
	// of this run whose fsync may still be pending or may have failed.
	replayed bool
}

// entryOverhead approximates per-entry memory beyond the payload (map slot,
// key, slice header) so that many tiny entries still count against limits.
const entryOverhead = 64

// readCache holds entries read from entry logs, including read-ahead. Two
// generations: when the current one exceeds half the capacity it becomes the
// previous one and the old previous is dropped; a hit in the previous
// generation promotes the entry. Close to LRU at the cost of two map lookups.
type readCache struct {
	mu            sync.Mutex
	capacityBytes int
	current       map[cacheKey]cachedEntry
	previous      map[cacheKey]cachedEntry
	currentBytes  int
	// generation changes whenever entries may have become stale (a
	// checkpoint flushed newer versions). A fill computed from an index
	// lookup made under an older generation is dropped.
	generation uint64
}

func newReadCache(capacityBytes int) *readCache {
	return &readCache{
		capacityBytes: capacityBytes,
		current:       make(map[cacheKey]cachedEntry),
		previous:      make(map[cacheKey]cachedEntry),
	}
}

func (c *readCache) enabled() bool { return c.capacityBytes > 0 }

func (c *readCache) get(k cacheKey) (cachedEntry, bool) {
	if !c.enabled() {
		return cachedEntry{}, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if v, ok := c.current[k]; ok {
		return v, true
	}
	if v, ok := c.previous[k]; ok {
		delete(c.previous, k)
		c.putLocked(k, v)
		return v, true
	}
	return cachedEntry{}, false
}

// has reports whether the cache holds k, without promoting it.
func (c *readCache) has(k cacheKey) bool {
	if !c.enabled() {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	_, inCurrent := c.current[k]
	_, inPrevious := c.previous[k]
	return inCurrent || inPrevious
}

func (c *readCache) currentGeneration() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.generation
}

// fill stores entries read under generation gen, unless entries were
// invalidated since.
func (c *readCache) fill(gen uint64, keys []cacheKey, values []cachedEntry) {
	if !c.enabled() {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if gen != c.generation {
		return
	}
	for i, k := range keys {
		c.putLocked(k, values[i])
	}
}

func (c *readCache) putLocked(k cacheKey, v cachedEntry) {
	size := len(v.payload) + entryOverhead
	if size > c.capacityBytes/2 {
		return
	}
	if old, ok := c.current[k]; ok {
		c.currentBytes -= len(old.payload) + entryOverhead
	}
	if c.currentBytes+size > c.capacityBytes/2 {
		c.previous = c.current
		c.current = make(map[cacheKey]cachedEntry, len(c.previous))
		c.currentBytes = 0
	}
	c.current[k] = v
	c.currentBytes += size
}

// invalidate drops the keys and moves to a new generation.
func (c *readCache) invalidate(keys []cacheKey) {
	if !c.enabled() {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.generation++
	for _, k := range keys {
		if old, ok := c.current[k]; ok {
			c.currentBytes -= len(old.payload) + entryOverhead
			delete(c.current, k)
		}
		delete(c.previous, k)
	}
}
