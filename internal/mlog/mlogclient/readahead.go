package mlogclient

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/semaphore"

	"quire/internal/ledger"
	"quire/internal/mlog"
)

// Read-ahead: a reader behind the tail (a consumer replaying a backlog, a
// new subscription from the earliest message) reads entries that are in
// no cache, so each of its reads would wait for the bookies. Once a read
// shows such a reader, the managed ledger fetches the entries after it in
// the background into a read-ahead buffer, so the reader's next reads are
// served from memory while the ones after them load.
//
// The buffer is apart from the tail cache: catch-up traffic never evicts
// the recent entries that tailing readers are served from. It is bounded
// per managed ledger (Config.ReadAheadBytes) and, over every managed ledger
// of a process, by a ReadAheadBudget; at either bound the read-ahead waits
// (it fetches less, or nothing) — readers then read from the bookies as
// without it, never an error. An entry leaves the buffer when every reader
// followed has passed it, when newer read-ahead needs the room, or when
// another reader needs the budget and its own reader stopped: one not read
// in readAheadIdleReads reads of its topic, or a topic not read for
// readAheadIdle (entries held for nobody would otherwise hold the budget
// until their reader came back).

// ReadAheadBudget bounds the bytes held by the read-ahead buffers of every
// managed ledger that shares it (one per broker).
type ReadAheadBudget struct {
	size int64
	sem  *semaphore.Weighted
	used atomic.Int64

	mu      sync.Mutex
	members map[*readAhead]struct{} // the buffers that share it, to reclaim from idle ones
	// lastScan is when reclaimIdle last looked at them (unix nanoseconds):
	// at most once per reclaimInterval, however many reads find the
	// budget spent.
	lastScan atomic.Int64
}

// NewReadAheadBudget returns a budget of size bytes.
func NewReadAheadBudget(size int64) *ReadAheadBudget {
	return &ReadAheadBudget{size: size, sem: semaphore.NewWeighted(size), members: map[*readAhead]struct{}{}}
}

func (b *ReadAheadBudget) join(r *readAhead) {
	b.mu.Lock()
	b.members[r] = struct{}{}
	b.mu.Unlock()
}

func (b *ReadAheadBudget) leave(r *readAhead) {
	b.mu.Lock()
	delete(b.members, r)
	b.mu.Unlock()
}

// reclaimIdle empties the buffers of the other managed ledgers that no
// read has used in the readAheadIdle before now (unix nanoseconds): what
// they hold was fetched for readers that stopped, and would otherwise hold
// the budget until one came back. A buffer being used at the moment (its lock taken)
// is left alone, so two ledgers reclaiming at once never wait for each
// other. It reports whether it gave any budget back.
func (b *ReadAheadBudget) reclaimIdle(except *readAhead, now int64) bool {
	last := b.lastScan.Load()
	if now-last < int64(reclaimInterval) || !b.lastScan.CompareAndSwap(last, now) {
		return false
	}
	idleSince := now - int64(readAheadIdle)
	b.mu.Lock()
	var idle []*readAhead
	for r := range b.members {
		if r != except && r.lastRead.Load() < idleSince {
			idle = append(idle, r)
		}
	}
	b.mu.Unlock()
	freed := false
	for _, r := range idle {
		if !r.mu.TryLock() {
			continue
		}
		busy := false
		for _, s := range r.streams {
			busy = busy || s.busy
		}
		if r.bytes > 0 && !busy {
			// Its readers are forgotten too: one that comes back is
			// read ahead of again from where it is.
			r.clearLocked()
			r.streams = nil
			freed = true
		}
		r.mu.Unlock()
	}
	return freed
}

// InUse is the bytes held now.
func (b *ReadAheadBudget) InUse() int64 { return b.used.Load() }

// Size is the budget's bound.
func (b *ReadAheadBudget) Size() int64 { return b.size }

func (b *ReadAheadBudget) tryTake(n int64) bool {
	if n <= 0 {
		return true
	}
	if !b.sem.TryAcquire(n) {
		return false
	}
	b.used.Add(n)
	return true
}

func (b *ReadAheadBudget) give(n int64) {
	if n <= 0 {
		return
	}
	b.used.Add(-n)
	b.sem.Release(n)
}

// Defaults of the read-ahead.
const (
	DefaultReadAheadBytes = 32 << 20
	// readAheadStreams is how many sequential readers of one managed
	// ledger are followed at once (consumer groups reading one partition).
	readAheadStreams = 4
	// readAheadMinEntries and readAheadMaxEntries bound one fetch.
	readAheadMinEntries = 8
	readAheadMaxEntries = 2048
	// readAheadFirstChunk is how many entries a fetch reads before it knows
	// how large they are.
	readAheadFirstChunk = 8
	// readAheadIdleReads: a stream not read in this many reads of its
	// managed ledger, while another is, holds its entries for nobody. A
	// consumer reads each of its partitions once a fetch, so a stream
	// this far behind in reads is one that stopped (or fetches thirty
	// times less often than the others, and is read ahead of again from
	// its next two reads).
	readAheadIdleReads = 32
	// readAheadIdle: a managed ledger not read for this long holds its
	// read-ahead for nobody, once another one needs the budget.
	readAheadIdle = 10 * time.Second
	// reclaimInterval bounds how often the idle buffers are looked for.
	reclaimInterval = 100 * time.Millisecond
)

// readAhead is one managed ledger's read-ahead buffer and the sequential
// readers it follows. Safe for concurrent use.
type readAhead struct {
	max    int64 // bytes this managed ledger may hold
	budget *ReadAheadBudget

	mu      sync.Mutex
	entries map[mlog.Position][]byte
	order   []mlog.Position // oldest first from head; taken entries stay until popped
	head    int
	bytes   int64
	streams []*readStream
	// avgEntry is a running average of entry sizes, to turn the byte bound
	// into a number of entries to fetch.
	avgEntry int64
	closed   bool // dropped: fetches that end later give their budget back
	// gen counts resets (compaction swaps renumber positions): a fetch
	// located under an older one lands nothing.
	gen uint64

	hits, fetched, skipped atomic.Int64
	lastRead               atomic.Int64 // when a read last used it, unix nanoseconds
}

// readStream is a sequential reader: where its next read starts, and how
// far the read-ahead has fetched (or is fetching) for it.
type readStream struct {
	next     mlog.Position // the reader's next position
	from     mlog.Position // where its last read started
	fetchEnd mlog.Position // last position fetched or being fetched
	busy     bool          // a fetch is in flight
	lastUsed uint64
	// While busy: the fetch still has count entries to bring from
	// fetchFrom on, and progress closes (and is replaced) each time some
	// of them land in the buffer, and when the fetch ends.
	fetchFrom  mlog.Position
	fetchCount int
	progress   chan struct{}
}

func newReadAhead(max int64, budget *ReadAheadBudget) *readAhead {
	r := &readAhead{max: max, budget: budget, entries: map[mlog.Position][]byte{}, avgEntry: 16 << 10}
	budget.join(r)
	return r
}

// get returns the entry at p, if the read-ahead holds it. The entry stays:
// a reader may ask for more entries than it uses (a Kafka fetch stops at
// its byte limit) and read the rest again next time. It goes once every
// reader followed has started a read past it (dropPassedLocked), or when
// newer read-ahead needs the room.
func (r *readAhead) get(p mlog.Position) ([]byte, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	b, ok := r.entries[p]
	if ok {
		r.hits.Add(1)
	}
	return b, ok
}

// dropPassedLocked drops the oldest entries that are before where every
// reader followed started its last read.
func (r *readAhead) dropPassedLocked() {
	if len(r.streams) == 0 {
		return
	}
	low := r.streams[0].from
	for _, s := range r.streams[1:] {
		if s.from.Less(low) {
			low = s.from
		}
	}
	for r.head < len(r.order) {
		p := r.order[r.head]
		b, ok := r.entries[p]
		if ok && !p.Less(low) {
			break
		}
		if ok {
			delete(r.entries, p)
			r.bytes -= int64(len(b))
			r.budget.give(int64(len(b)))
		}
		r.head++
	}
	r.compactLocked()
}

// put stores fetched entries, which the caller has already taken budget
// for (reserved bytes); what does not fit the managed ledger's own bound
// after evicting the oldest entries is dropped, and unused budget is
// given back.
func (r *readAhead) put(entries []Entry, reserved int64, gen uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed || gen != r.gen {
		r.budget.give(reserved)
		return
	}
	for _, e := range entries {
		n := int64(len(e.Payload))
		r.avgEntry = (r.avgEntry*7 + max(n, 1)) / 8
		if _, dup := r.entries[e.Pos]; dup {
			continue
		}
		if n > reserved && !r.budget.tryTake(n-reserved) {
			r.skipped.Add(1)
			continue
		}
		reserved = max(reserved-n, 0)
		for r.bytes+n > r.max && r.evictOldestLocked() {
		}
		if r.bytes+n > r.max {
			r.budget.give(n)
			continue
		}
		r.entries[e.Pos] = e.Payload
		r.order = append(r.order, e.Pos)
		r.bytes += n
		r.fetched.Add(1)
	}
	r.budget.give(reserved)
}

// evictOldestLocked drops the oldest entry still held; false when empty.
func (r *readAhead) evictOldestLocked() bool {
	for r.head < len(r.order) {
		p := r.order[r.head]
		r.head++
		if b, ok := r.entries[p]; ok {
			delete(r.entries, p)
			r.bytes -= int64(len(b))
			r.budget.give(int64(len(b)))
			r.compactLocked()
			return true
		}
	}
	r.compactLocked()
	return false
}

func (r *readAhead) compactLocked() {
	if r.head > 1024 && r.head > len(r.order)/2 {
		r.order = append([]mlog.Position(nil), r.order[r.head:]...)
		r.head = 0
	}
}

// reset empties the buffer and forgets the readers' streams: a compaction
// swap renumbered the positions they name. Fetches under way land nothing.
func (r *readAhead) reset() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.clearLocked()
	r.streams = nil
	r.gen++
}

// clearLocked drops every entry held and gives their budget back.
func (r *readAhead) clearLocked() {
	for p, b := range r.entries {
		r.budget.give(int64(len(b)))
		delete(r.entries, p)
	}
	r.order, r.head, r.bytes = nil, 0, 0
}

// ForgetReaders drops the read-ahead buffer and the readers it follows, for
// a caller that read sequentially behind the tail and will not read on (a
// partition's scan of its tail when it is loaded): their entries would
// otherwise stay, holding the broker's read-ahead budget, until a reader
// passed them. Fetches under way land nothing.
func (t *ManagedLedger) ForgetReaders() {
	if t.readAhead != nil {
		t.readAhead.reset()
	}
}

// generation is the count of resets.
func (r *readAhead) generation() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.gen
}

// drop empties the buffer (the managed ledger closed).
func (r *readAhead) drop() {
	r.budget.leave(r)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.clearLocked()
	r.closed = true
}

// fetchPlan is what one background fetch should read: count entries after
// from, for stream s.
type fetchPlan struct {
	s       *readStream
	from    mlog.Position
	count   int
	reserve int64
}

// observe records a read that returned entries up to last (inclusive)
// starting at from, and whether any of them came from the bookies or the
// buffer (a reader behind the tail cache). It returns the fetch to start,
// if the reader's stream needs one.
func (r *readAhead) observe(from, last mlog.Position, behind bool, tick uint64, now int64) (fetchPlan, bool) {
	r.lastRead.Store(now)
	r.mu.Lock()
	defer r.mu.Unlock()
	next := mlog.Position{LedgerID: last.LedgerID, EntryID: last.EntryID + 1}
	var s *readStream
	for _, c := range r.streams {
		// The reader of a stream reads on from where it stopped, or
		// reads again some of what it read last: a Kafka fetch whose
		// answer had no room for this partition's batch asks for the
		// same offset next time. Either way it is that stream (a new
		// one would fetch again what this one holds).
		if c.next == from || (!c.next.Less(from) && !last.Less(c.next)) ||
			(c.from.LedgerID == from.LedgerID && !from.Less(c.from) && from.Less(c.next)) {
			s = c
			break
		}
	}
	if s == nil {
		if !behind {
			return fetchPlan{}, false // a tailing reader: the tail cache serves it
		}
		if len(r.streams) == readAheadStreams {
			oldest := 0
			for i, c := range r.streams {
				if c.lastUsed < r.streams[oldest].lastUsed {
					oldest = i
				}
			}
			r.streams = append(r.streams[:oldest], r.streams[oldest+1:]...)
		}
		// A stream is read ahead of from its second read, which shows it
		// sequential: one read somewhere in the log (a binary search's
		// probe locating an offset, a seek, a lookup by timestamp) is not
		// worth a window of fetches, and the probes of one search would
		// each start one.
		r.streams = append(r.streams, &readStream{next: next, from: from, fetchEnd: last, lastUsed: tick})
		r.dropPassedLocked()
		return fetchPlan{}, false
	}
	s.next, s.from, s.lastUsed = next, from, tick
	r.dropPassedLocked()
	if s.busy {
		return fetchPlan{}, false
	}
	full := int(min(max(r.max/max(r.avgEntry, 1), readAheadMinEntries), readAheadMaxEntries))
	if s.fetchEnd.Less(last) {
		s.fetchEnd = last
	}
	// Fetch again once the reader has used half of what was fetched ahead
	// of it (counted in entries within one ledger; across a ledger
	// boundary, whenever the reader reaches the fetched ledger).
	if s.fetchEnd.LedgerID == next.LedgerID && s.fetchEnd.EntryID-next.EntryID >= int64(full/2) {
		return fetchPlan{}, false
	}
	if next.LedgerID < s.fetchEnd.LedgerID {
		return fetchPlan{}, false
	}
	// Fill the room left by the entries still ahead of this reader: a
	// fetch of a whole window on top of them would evict them, oldest
	// first, just before the reader gets to them. (Entries held for other
	// readers, or for none any more, are evicted before them: they were
	// fetched earlier.)
	room := r.max - r.aheadBytesLocked(s)
	if room < r.max/4 {
		r.skipped.Add(1)
		return fetchPlan{}, false
	}
	window := int(min(max(room/max(r.avgEntry, 1), readAheadMinEntries), readAheadMaxEntries))
	reserve := room
	taken := r.budget.tryTake(reserve)
	if !taken && r.evictIdleLocked(tick) {
		taken = r.budget.tryTake(reserve)
	}
	if !taken && r.budget.reclaimIdle(r, now) {
		taken = r.budget.tryTake(reserve)
	}
	for !taken && reserve > 0 {
		reserve /= 2
		window /= 2
		taken = r.budget.tryTake(reserve)
	}
	if window < 1 || reserve <= 0 {
		// What is left of the budget holds no entry of this size: give
		// back what was taken on the way down to it.
		r.budget.give(reserve)
		r.skipped.Add(1)
		return fetchPlan{}, false
	}
	start := mlog.Position{LedgerID: s.fetchEnd.LedgerID, EntryID: s.fetchEnd.EntryID + 1}
	s.busy, s.fetchFrom, s.fetchCount, s.progress = true, start, window, make(chan struct{})
	return fetchPlan{s: s, from: start, count: window, reserve: reserve}, true
}

// evictIdleLocked drops the entries that no stream read in the last
// readAheadIdleReads reads of this managed ledger holds (between where it
// started its last read and what was fetched for it): fetched for a
// reader that stopped, or for one no longer followed. It reports whether
// it dropped any.
func (r *readAhead) evictIdleLocked(tick uint64) bool {
	var live []*readStream
	for _, s := range r.streams {
		if tick-s.lastUsed <= readAheadIdleReads || s.busy {
			live = append(live, s)
		}
	}
	r.streams = live // the others are forgotten with their entries
	held := func(p mlog.Position) bool {
		for _, s := range live {
			if !p.Less(s.from) && !s.fetchEnd.Less(p) {
				return true
			}
		}
		return false
	}
	kept := r.order[:0]
	dropped := false
	for _, p := range r.order[r.head:] {
		b, ok := r.entries[p]
		if !ok {
			continue
		}
		if held(p) {
			kept = append(kept, p)
			continue
		}
		delete(r.entries, p)
		r.bytes -= int64(len(b))
		r.budget.give(int64(len(b)))
		dropped = true
	}
	r.order, r.head = kept, 0
	return dropped
}

// aheadBytesLocked is the bytes held for s's reader from its next
// position to what was fetched for it.
func (r *readAhead) aheadBytesLocked(s *readStream) int64 {
	var n int64
	if s.fetchEnd.LedgerID != s.next.LedgerID {
		return 0
	}
	for e := s.next.EntryID; e <= s.fetchEnd.EntryID; e++ {
		n += int64(len(r.entries[mlog.Position{LedgerID: s.next.LedgerID, EntryID: e}]))
	}
	return n
}

// inFlight returns a channel that closes when the fetch that is reading p
// has brought more entries (or ended), if one is: a reader that has
// overtaken its read-ahead waits for it rather than reading the same
// entries from the bookies too.
func (r *readAhead) inFlight(p mlog.Position) (<-chan struct{}, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, s := range r.streams {
		if s.busy && p.LedgerID == s.fetchFrom.LedgerID && p.EntryID >= s.fetchFrom.EntryID &&
			p.EntryID < s.fetchFrom.EntryID+int64(s.fetchCount) {
			return s.progress, true
		}
	}
	return nil, false
}

// land puts entries a fetch for s brought (consecutive, in order; reserved
// bytes of budget taken for them, see put) and wakes the readers waiting
// for them.
func (r *readAhead) land(s *readStream, entries []Entry, reserved int64, gen uint64) {
	r.put(entries, reserved, gen)
	if len(entries) == 0 {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	last := entries[len(entries)-1].Pos
	if s.fetchFrom.LedgerID == last.LedgerID {
		s.fetchCount -= int(last.EntryID + 1 - s.fetchFrom.EntryID)
	}
	s.fetchFrom = mlog.Position{LedgerID: last.LedgerID, EntryID: last.EntryID + 1}
	if s.fetchEnd.Less(last) {
		s.fetchEnd = last
	}
	close(s.progress)
	s.progress = make(chan struct{})
}

// fetchDone ends a fetch for s that reached last (or failed: ok false).
func (r *readAhead) fetchDone(s *readStream, last mlog.Position, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s.busy = false
	close(s.progress)
	if ok && s.fetchEnd.Less(last) {
		s.fetchEnd = last
	}
}

// awaitFetched is what a read does when entries it wants (misses, into
// out) are in no cache: while a read-ahead fetch is bringing the first of
// them, it waits for that fetch's progress and takes what landed. It
// returns the runs still missing, for the caller to read from the bookies.
func (t *ManagedLedger) awaitFetched(ctx context.Context, out []Entry, misses []readMiss, aheadHits *int) ([]readMiss, error) {
	for len(misses) > 0 {
		progress, ok := t.readAhead.inFlight(out[misses[0].index].Pos)
		if !ok {
			break
		}
		select {
		case <-progress:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		misses = t.takeFetched(out, nil, misses, aheadHits)
	}
	return misses, nil
}

// metadataCache holds ledgers' records for the reads behind the tail.
// Closed ledgers' records do not change (except when autorecovery moves a
// fragment: a read that fails on a cached record drops it and reads the
// record again). An open ledger's record gains a fragment when a bookie
// fails; it is kept for openMetadataTTL: reading it again for every span
// (the current ledger is where a consumer that fell a little behind reads)
// was a linearizable read of the metadata store per span, about 330 a
// second for one catch-up consumer of 16 partitions. A stale one only
// points entries written after a fragment began at the replica they
// replaced: the read falls over to the others, and a read that fails drops
// the record as above. Bounded FIFO.
type metadataCache struct {
	mu    sync.Mutex
	m     map[int64]cachedMetadata
	order []int64
	max   int
}

type cachedMetadata struct {
	md ledger.Metadata
	at time.Time // when an open ledger's record was read
}

// openMetadataTTL is how long an open ledger's record is used.
const openMetadataTTL = time.Second

func newMetadataCache(max int) *metadataCache {
	return &metadataCache{m: map[int64]cachedMetadata{}, max: max}
}

func (c *metadataCache) get(id int64, now time.Time) (ledger.Metadata, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[id]
	if ok && e.md.State != ledger.StateClosed && now.Sub(e.at) >= openMetadataTTL {
		return ledger.Metadata{}, false
	}
	return e.md, ok
}

// put caches md, read at now; a closed ledger's record is never replaced
// by an open one.
func (c *metadataCache) put(md ledger.Metadata, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.m[md.ID]; ok {
		if e.md.State != ledger.StateClosed {
			c.m[md.ID] = cachedMetadata{md: md, at: now}
		}
		return
	}
	c.m[md.ID] = cachedMetadata{md: md, at: now}
	c.order = append(c.order, md.ID)
	for len(c.order) > c.max {
		delete(c.m, c.order[0])
		c.order = c.order[1:]
	}
}

func (c *metadataCache) forget(id int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.m, id)
}

// readSpan reads one span's entries from the bookies, with the ledger's
// record from the cache (see metadataCache). On an error it returns the
// entries read before it.
func (t *ManagedLedger) readSpan(ctx context.Context, span mlog.ReadSpan) ([][]byte, error) {
	out := make([][]byte, 0, span.Last-span.First+1)
	err := t.readSpanStream(ctx, span, func(p [][]byte) { out = append(out, p...) })
	return out, err
}

// readSpanStream is readSpan handing the entries over in order as they
// arrive (see ledgerclient.Client.ReadStream).
func (t *ManagedLedger) readSpanStream(ctx context.Context, span mlog.ReadSpan, delivered func([][]byte)) error {
	next := span.First
	stored := span.Stored
	if stored == 0 {
		stored = span.Ledger
	}
	for attempt := 0; ; attempt++ {
		md, cached := t.metadata.get(stored, time.Now())
		if !cached {
			var err error
			if md, _, err = t.cfg.Ledgers.ReadMetadata(ctx, stored); err != nil {
				return err
			}
			t.metadata.put(md, time.Now())
		}
		_, err := t.cfg.Ledgers.ReadStream(ctx, md, next, span.Last, func(p [][]byte) {
			next += int64(len(p))
			delivered(p)
		})
		if err != nil && cached && attempt == 0 && ctx.Err() == nil {
			t.metadata.forget(stored) // perhaps re-replicated elsewhere
			continue
		}
		return err
	}
}

// prefetch carries out a fetch plan in the background.
func (t *ManagedLedger) prefetch(plan fetchPlan) {
	t.prefetchMu.Lock()
	if t.prefetchStopped {
		t.prefetchMu.Unlock()
		t.readAhead.budget.give(plan.reserve)
		t.readAhead.fetchDone(plan.s, plan.from, false)
		return
	}
	t.prefetches.Add(1)
	t.prefetchMu.Unlock()
	go func() {
		defer t.prefetches.Done()
		last, ok := plan.from, false
		defer func() { t.readAhead.fetchDone(plan.s, last, ok) }()
		var spans []mlog.ReadSpan
		var gen uint64
		if err := t.call(t.ctx, func() {
			spans, gen = t.core.Locate(plan.from, plan.count), t.readAhead.generation()
		}); err != nil || len(spans) == 0 {
			t.readAhead.budget.give(plan.reserve)
			return
		}
		// The plan's entry count comes from an average entry size that may
		// be far off (a topic's first fetch, or entries that grew): read a
		// first chunk, size the rest by the bytes read so far, and stop at
		// the reserved bytes, so that a fetch never holds much more than it
		// reserved. Entries land in the buffer as they arrive, so a reader
		// waiting for the first of them need not wait for the last.
		ctx, cancel := context.WithCancel(t.ctx)
		defer cancel()
		reserve := plan.reserve // budget taken and not yet used by landed entries
		defer func() { t.readAhead.budget.give(reserve) }()
		var bytes, count int64
		full := false
		chunk := int64(readAheadFirstChunk)
	spans:
		for _, span := range spans {
			for first := span.First; first <= span.Last; {
				next := first
				err := t.readSpanStream(ctx, mlog.ReadSpan{Ledger: span.Ledger, First: first, Last: min(span.Last, first+chunk-1), Stored: span.Stored}, func(p [][]byte) {
					if full {
						return
					}
					entries := make([]Entry, len(p))
					var n int64
					for i, payload := range p {
						entries[i] = Entry{Pos: mlog.Position{LedgerID: span.Ledger, EntryID: next + int64(i)}, Payload: payload}
						n += int64(len(payload))
					}
					next += int64(len(p))
					used := min(n, reserve)
					reserve -= used
					bytes, count = bytes+n, count+int64(len(p))
					t.readAhead.land(plan.s, entries, used, gen)
					last, ok = entries[len(entries)-1].Pos, true
					if bytes >= plan.reserve {
						full = true
						cancel()
					}
				})
				if err != nil || full || next == first {
					break spans
				}
				chunk = min(max((plan.reserve-bytes)/max(bytes/count, 1), 1), readAheadMaxEntries)
				first = next
			}
		}
	}()
}

// readMiss is a run of entries a read found in no cache: span, and where
// its entries go in the read's result.
type readMiss struct {
	span  mlog.ReadSpan
	index int
}

// takeFetched fills out from the read-ahead for the entries of misses it
// now holds, and returns the runs still missing (appended to rest).
func (t *ManagedLedger) takeFetched(out []Entry, rest, misses []readMiss, aheadHits *int) []readMiss {
	for _, m := range misses {
		for e := m.span.First; e <= m.span.Last; e++ {
			i := m.index + int(e-m.span.First)
			if payload, ok := t.readAhead.get(out[i].Pos); ok {
				out[i].Payload = payload
				*aheadHits++
				continue
			}
			if n := len(rest); n > 0 && rest[n-1].span.Ledger == m.span.Ledger && rest[n-1].span.Last == e-1 {
				rest[n-1].span.Last = e
			} else {
				rest = append(rest, readMiss{mlog.ReadSpan{Ledger: m.span.Ledger, First: e, Last: e, Stored: m.span.Stored}, i})
			}
		}
	}
	return rest
}
