package mlogclient

import (
	"context"
	"errors"
	"fmt"
	"time"

	"quire/internal/mlog"
)

// Append writes payload and returns its position once the ledger's ack
// quorum has it (and the ledger is on the topic's persisted list). It waits
// for admission first (see Admit), so it never fails with mlog.ErrBusy.
func (t *ManagedLedger) Append(ctx context.Context, payload []byte) (mlog.Position, error) {
	p, err := t.Admit(ctx)
	if err != nil {
		return mlog.Position{}, err
	}
	ch := make(chan mlog.AppendAck, 1)
	p.AppendAsync(payload, func(a mlog.AppendAck) { ch <- a })
	select {
	case a := <-ch:
		return a.Pos, a.Err
	case <-ctx.Done():
		return mlog.Position{}, ctx.Err()
	}
}

// AppendAsync submits payload without admission; done gets the ack (or
// error) exactly once, on the loop goroutine or, when the managed ledger
// has already ended, on the caller's: it must not block. It waits while the
// loop's inbox is full (Config.InboxBound). Without admission the append
// may be refused with mlog.ErrBusy when the core's queue is full — nothing
// failed then, and it was not written; Admit avoids that. Appends submitted
// one after another from one goroutine are written, and acknowledged, in
// that order — which a Kafka partition relies on to hand out offsets before
// the write is durable.
func (t *ManagedLedger) AppendAsync(payload []byte, done func(mlog.AppendAck)) {
	if err := t.loop.Post(context.Background(), func() { t.submit(payload, done) }); err != nil {
		done(mlog.AppendAck{Err: mlog.ErrClosed})
	}
}

// submit hands an append to the core. On the loop goroutine.
func (t *ManagedLedger) submit(payload []byte, done func(mlog.AppendAck)) {
	t.token++
	t.waiters[t.token] = done
	t.core.Append(t.token, payload, time.Now())
}

// Admit waits until the managed ledger has room for one more append, or
// ctx ends (its error), or the managed ledger ended (mlog.ErrClosed). The
// Permit it returns must be used exactly once: Permit.AppendAsync, or
// Permit.Release to give the room back unused. The room is given back when
// that append is answered.
//
// Admission is separate from submission so that a caller can wait for room
// without holding its own locks, then submit under them without waiting:
// Permit.AppendAsync never blocks. Core.MaxQueuedAppends permits exist, and
// every admitted append still unanswered is in the core's queue, in flight
// or held (quota), so an admitted append always finds room in the queue
// and is never refused with mlog.ErrBusy — as long as every append goes
// through Admit (appends without a permit take queue room uncounted).
func (t *ManagedLedger) Admit(ctx context.Context) (*Permit, error) {
	select {
	case <-t.loop.Done():
		return nil, mlog.ErrClosed
	default:
	}
	select {
	case t.permits <- struct{}{}:
		return &Permit{t: t}, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-t.loop.Done():
		return nil, mlog.ErrClosed
	}
}

// Permit is room for one append, taken by Admit. Use it exactly once.
type Permit struct {
	t    *ManagedLedger
	used bool
}

// AppendAsync submits payload with the permit's room and returns at once
// (it never waits). done gets the ack (or error) exactly once, as with
// ManagedLedger.AppendAsync, after the room is given back; it must not
// block. The order rule of ManagedLedger.AppendAsync holds across both.
func (p *Permit) AppendAsync(payload []byte, done func(mlog.AppendAck)) {
	p.spend()
	t := p.t
	answer := func(a mlog.AppendAck) {
		<-t.permits
		done(a)
	}
	// The completion path never blocks and needs no bound of its own:
	// the permits bound what goes through it this way.
	if !t.loop.Complete(func() { t.submit(payload, answer) }) {
		answer(mlog.AppendAck{Err: mlog.ErrClosed})
	}
}

// Release gives the permit's room back without appending.
func (p *Permit) Release() {
	p.spend()
	<-p.t.permits
}

func (p *Permit) spend() {
	if p.used {
		panic("mlogclient: a Permit used twice")
	}
	p.used = true
}

// Read returns up to maxEntries entries from the first one at or after
// from, across ledgers, within what producers have been acknowledged.
// Recent entries come from the cache, entries fetched ahead for a reader
// behind the tail from the read-ahead buffer (readahead.go), the rest from
// the bookies — and such a read starts the read-ahead for what follows.
func (t *ManagedLedger) Read(ctx context.Context, from mlog.Position, maxEntries int) ([]Entry, error) {
	var out []Entry
	var misses []readMiss
	var aheadHits int
	err := t.call(ctx, func() {
		for _, span := range t.core.Locate(from, maxEntries) {
			for e := span.First; e <= span.Last; e++ {
				p := mlog.Position{LedgerID: span.Ledger, EntryID: e}
				payload, ok := t.cache.get(p)
				if !ok && t.readAhead != nil {
					if payload, ok = t.readAhead.get(p); ok {
						aheadHits++
					}
				}
				if ok {
					out = append(out, Entry{Pos: p, Payload: payload})
					continue
				}
				// A run of misses is read from the bookies in one request.
				if n := len(misses); n > 0 && misses[n-1].span.Ledger == span.Ledger && misses[n-1].span.Stored == span.Stored && misses[n-1].span.Last == e-1 {
					misses[n-1].span.Last = e
				} else {
					misses = append(misses, readMiss{mlog.ReadSpan{Ledger: span.Ledger, First: e, Last: e, Stored: span.Stored}, len(out)})
				}
				out = append(out, Entry{Pos: p})
			}
		}
	})
	if err != nil {
		return nil, err
	}
	var missed int64
	if t.readAhead != nil && len(misses) > 0 {
		// The reader has overtaken its read-ahead: take what the fetch
		// reading its first miss brings, as it lands.
		if misses, err = t.awaitFetched(ctx, out, misses, &aheadHits); err != nil {
			return nil, err
		}
	}
	for _, m := range misses {
		payloads, err := t.readSpan(ctx, m.span)
		if err != nil {
			return nil, fmt.Errorf("read ledger %d entries %d..%d: %w", m.span.Ledger, m.span.First, m.span.Last, err)
		}
		for i, p := range payloads {
			out[m.index+i].Payload = p
		}
		missed += int64(len(payloads))
	}
	if t.readAhead != nil && len(out) > 0 {
		if plan, ok := t.readAhead.observe(out[0].Pos, out[len(out)-1].Pos, missed > 0 || aheadHits > 0, t.reads.Add(1), time.Now().UnixNano()); ok {
			t.prefetch(plan)
		}
	}
	t.statsMu.Lock()
	t.hits += int64(len(out)) - missed - int64(aheadHits)
	t.misses += missed
	t.statsMu.Unlock()
	return out, nil
}

// Stats returns the core's stats with the cache counters.
func (t *ManagedLedger) Stats(ctx context.Context) (mlog.Stats, error) {
	var s mlog.Stats
	err := t.call(ctx, func() { s = t.core.Stats() })
	t.statsMu.Lock()
	s.CacheHits, s.CacheMisses = t.hits, t.misses
	t.statsMu.Unlock()
	if r := t.readAhead; r != nil {
		s.ReadAheadHits, s.ReadAheadFetched, s.ReadAheadSkipped = r.hits.Load(), r.fetched.Load(), r.skipped.Load()
		r.mu.Lock()
		s.ReadAheadBytes = r.bytes
		r.mu.Unlock()
	}
	return s, err
}

// Ledgers returns the topic's ledger list.
func (t *ManagedLedger) Ledgers(ctx context.Context) ([]mlog.LedgerInfo, error) {
	var ls []mlog.LedgerInfo
	err := t.call(ctx, func() { ls = t.core.Ledgers() })
	return ls, err
}

// Close persists the cursors, closes the current ledger and stops. It
// returns the topic's error when it had already stopped (mlog.ErrFenced).
func (t *ManagedLedger) Close(ctx context.Context) error {
	ch := make(chan error, 1)
	err := t.call(ctx, func() {
		if done, err := t.core.Done(); done {
			ch <- err
			return
		}
		t.closing = append(t.closing, ch)
		t.core.Close(time.Now())
	})
	if err == nil {
		select {
		case err = <-ch:
		case <-ctx.Done():
			err = ctx.Err()
		}
	}
	t.stop()
	return err
}

// Cursor is a subscription on the topic.
type Cursor struct {
	t    *ManagedLedger
	name string
}

// OpenCursor opens (or creates) the named cursor; a new one starts at the
// beginning of the topic when fromStart, else at its end.
func (t *ManagedLedger) OpenCursor(ctx context.Context, name string, fromStart bool) (*Cursor, error) {
	var err error
	if cerr := t.call(ctx, func() { err = t.core.OpenCursor(name, fromStart, time.Now()) }); cerr != nil {
		return nil, cerr
	}
	if err != nil {
		return nil, err
	}
	return &Cursor{t: t, name: name}, nil
}

// Ack acknowledges p individually.
func (c *Cursor) Ack(ctx context.Context, p mlog.Position) error {
	var err error
	if cerr := c.t.call(ctx, func() { err = c.t.core.Ack(c.name, p, time.Now()) }); cerr != nil {
		return cerr
	}
	return err
}

// AckCumulative acknowledges every position <= p.
func (c *Cursor) AckCumulative(ctx context.Context, p mlog.Position) error {
	var err error
	if cerr := c.t.call(ctx, func() { err = c.t.core.AckCumulative(c.name, p, time.Now()) }); cerr != nil {
		return cerr
	}
	return err
}

// MarkDelete returns the cursor's mark-delete position.
func (c *Cursor) MarkDelete(ctx context.Context) (mlog.Position, error) {
	var md mlog.Position
	err := c.t.call(ctx, func() {
		if cur, ok := c.t.core.Cursor(c.name); ok {
			md = cur.MarkDelete()
		}
	})
	return md, err
}

// Unacked returns up to maxEntries unacknowledged positions from the first
// one at or after from: what a dispatcher would (re)deliver.
func (c *Cursor) Unacked(ctx context.Context, from mlog.Position, maxEntries int) ([]mlog.Position, error) {
	var out []mlog.Position
	err := c.t.call(ctx, func() {
		cur, ok := c.t.core.Cursor(c.name)
		if !ok {
			return
		}
		for len(out) < maxEntries {
			p, ok := cur.NextUnacked(from)
			if !ok {
				return
			}
			out = append(out, p)
			from = mlog.Position{LedgerID: p.LedgerID, EntryID: p.EntryID + 1}
		}
	})
	return out, err
}

// OpenCursorAt opens the named cursor, creating it when absent with its
// mark-delete position at markDelete (held within the topic: before its
// first entry at the most, after its last at the least — so mlog.Position
// {-1, -1} starts at the beginning and one past the end at the end). An
// existing cursor keeps its position.
func (t *ManagedLedger) OpenCursorAt(ctx context.Context, name string, markDelete mlog.Position) (*Cursor, error) {
	var err error
	if cerr := t.call(ctx, func() { err = t.core.OpenCursorAt(name, markDelete, time.Now()) }); cerr != nil {
		return nil, cerr
	}
	if err != nil {
		return nil, err
	}
	return &Cursor{t: t, name: name}, nil
}

// DeleteCursor removes the named cursor (mlog.ErrNoSuchCursor when there is
// none): its acknowledgements no longer hold back trimming.
func (t *ManagedLedger) DeleteCursor(ctx context.Context, name string) error {
	var err error
	if cerr := t.call(ctx, func() { err = t.core.DeleteCursor(name, time.Now()) }); cerr != nil {
		return cerr
	}
	return err
}

// Name is the cursor's (subscription's) name.
func (c *Cursor) Name() string { return c.name }

// AckAll acknowledges every position of ps individually, in one trip to the
// topic's goroutine. Positions that hold no entry (mlog.ErrNoSuchEntry:
// trimmed, or never written) are skipped; the first other error is returned
// after the rest were applied.
func (c *Cursor) AckAll(ctx context.Context, ps []mlog.Position) error {
	var first error
	if cerr := c.t.call(ctx, func() {
		now := time.Now()
		for _, p := range ps {
			if err := c.t.core.Ack(c.name, p, now); err != nil && !errors.Is(err, mlog.ErrNoSuchEntry) && first == nil {
				first = err
			}
		}
	}); cerr != nil {
		return cerr
	}
	return first
}

// IsAcked reports whether p is acknowledged (false when the cursor is gone).
func (c *Cursor) IsAcked(ctx context.Context, p mlog.Position) (bool, error) {
	var acked bool
	err := c.t.call(ctx, func() {
		if cur, ok := c.t.core.Cursor(c.name); ok {
			acked = cur.IsAcked(p)
		}
	})
	return acked, err
}

// Reset moves the cursor's mark-delete position to markDelete, back or
// forward (held within the topic), and drops its individual
// acknowledgements: a seek.
func (c *Cursor) Reset(ctx context.Context, markDelete mlog.Position) error {
	var err error
	if cerr := c.t.call(ctx, func() { err = c.t.core.ResetCursor(c.name, markDelete, time.Now()) }); cerr != nil {
		return cerr
	}
	return err
}

// entryCache keeps the most recent entries for tailing readers, first in
// first out: a map plus a ring of positions in insertion order. Bounded by
// count and by bytes (a Kafka batch can be a megabyte, so a count alone
// would let 10,000 of them take 10 GB) and, with a budget, by the bytes
// every cache sharing it holds (a broker's caches, however many partitions
// it serves). Owned by the loop goroutine.
type entryCache struct {
	entries  map[mlog.Position][]byte
	order    []mlog.Position // oldest first, from head
	head     int
	bytes    int64
	maxCount int
	maxBytes int64
	budget   *ReadAheadBudget // nil: none
}

func newEntryCache(maxCount int, maxBytes int64, budget *ReadAheadBudget) entryCache {
	return entryCache{entries: make(map[mlog.Position][]byte), maxCount: maxCount, maxBytes: maxBytes, budget: budget}
}

func (c *entryCache) put(p mlog.Position, payload []byte) {
	n := int64(len(payload))
	if _, ok := c.entries[p]; ok || n > c.maxBytes {
		return
	}
	if c.budget != nil {
		// Room from the shared budget, making it from this cache's own
		// oldest entries if need be; without it the entry stays out.
		for !c.budget.tryTake(n) {
			if !c.evictOldest() {
				return
			}
		}
	}
	c.entries[p] = payload
	c.order = append(c.order, p)
	c.bytes += n
	for len(c.entries) > c.maxCount || c.bytes > c.maxBytes {
		c.evictOldest()
	}
}

// evictOldest drops the oldest entry; false when the cache is empty.
func (c *entryCache) evictOldest() bool {
	if len(c.entries) == 0 {
		return false
	}
	for {
		old := c.order[c.head]
		c.head++
		if b, ok := c.entries[old]; ok {
			c.bytes -= int64(len(b))
			delete(c.entries, old)
			if c.budget != nil {
				c.budget.give(int64(len(b)))
			}
			break
		}
	}
	if c.head > len(c.order)/2 && c.head > 1024 {
		c.order = append([]mlog.Position(nil), c.order[c.head:]...)
		c.head = 0
	}
	return true
}

// drop empties the cache, giving its budget back.
func (c *entryCache) drop() {
	for c.evictOldest() {
	}
	c.order, c.head = nil, 0
}

func (c *entryCache) get(p mlog.Position) ([]byte, bool) {
	b, ok := c.entries[p]
	return b, ok
}

// Done is closed once the topic's loop has ended (closed, or fenced by a
// new owner). An AppendAsync still unanswered then never will be.
func (t *ManagedLedger) Done() <-chan struct{} { return t.loop.Done() }
