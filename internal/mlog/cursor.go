package mlog

import (
	"fmt"
	"iter"
	"slices"
	"time"

	"quire/internal/invariants"
)

// DefaultMaxUnackedRangesToPersist is how many individually acknowledged
// ranges a cursor snapshot holds by default (Pulsar's
// managedLedgerMaxUnackedRangesToPersist). Ranges beyond it live only in
// memory and their messages are redelivered after a crash.
const DefaultMaxUnackedRangesToPersist = 10000

// CursorOptions configure a cursor.
type CursorOptions struct {
	// Ledgers answers which entry follows a position; nil means a log without
	// ledger boundaries (the entry after ledger:e is ledger:e+1).
	Ledgers Ledgers
	// MaxRangesToPersist is the limit that RangesInMemoryOnly and
	// LimitCrossed measure against; 0 means DefaultMaxUnackedRangesToPersist.
	// The shell passes the same value to Snapshot.
	MaxRangesToPersist int
}

// Cursor is one subscription's acknowledgement state on a topic: a
// deterministic state machine with no I/O. The owner persists Snapshot
// output and restores it with Restore.
//
// Positions given to a cursor are trusted: the managed ledger checks that a
// client acknowledges only entries that exist.
type Cursor struct {
	name    string
	ledgers Ledgers
	// markDelete: every position <= markDelete is acknowledged.
	markDelete Position
	// acked holds the individually acknowledged positions above markDelete.
	// Invariant: every range of acked is > markDelete; at least one entry
	// lies between markDelete and the first range (else it would have been
	// folded into markDelete) and between any two neighbouring ranges (else
	// they would have been bridged into one), so Len() counts real holes.
	acked RangeSet

	maxRangesToPersist int
	// overLimit: acked.Len() > maxRangesToPersist after the last change.
	overLimit bool
	// crossed: overLimit went false -> true since LimitCrossed last said so.
	crossed bool

	// checkedMarkDelete is markDelete at the last invariant check (valid
	// once checked is set): kept only for the checks (-tags invariants).
	checkedMarkDelete Position
	checked           bool
}

// NewCursor returns a cursor at markDelete with nothing acknowledged above
// it. A cursor at the start of a topic has markDelete BeforeLedger(first).
// The name must fit in MaxCursorNameLen bytes (it is part of every snapshot).
func NewCursor(name string, markDelete Position, opts CursorOptions) (*Cursor, error) {
	if len(name) > MaxCursorNameLen {
		return nil, fmt.Errorf("new cursor: %w: %d bytes, limit %d", ErrNameTooLong, len(name), MaxCursorNameLen)
	}
	c := &Cursor{name: name, markDelete: markDelete}
	c.setOptions(opts)
	if invariants.Enabled {
		c.checkInvariants()
	}
	return c, nil
}

func (c *Cursor) setOptions(opts CursorOptions) {
	c.ledgers = opts.Ledgers
	if c.ledgers == nil {
		c.ledgers = denseLedgers{}
	}
	c.maxRangesToPersist = opts.MaxRangesToPersist
	if c.maxRangesToPersist <= 0 {
		c.maxRangesToPersist = DefaultMaxUnackedRangesToPersist
	}
}

// Name returns the cursor's (subscription's) name.
func (c *Cursor) Name() string { return c.name }

// MarkDelete returns the mark-delete position: every position at or below it
// is acknowledged. Ledgers wholly at or below the slowest cursor's
// mark-delete position may be deleted.
func (c *Cursor) MarkDelete() Position { return c.markDelete }

// Ack acknowledges p individually. It reports whether the mark-delete
// position moved (the managed ledger may then trim ledgers).
func (c *Cursor) Ack(p Position) (advanced bool) {
	return c.AckRange(p, p)
}

// AckRange acknowledges every position in [lo, hi] individually (an empty
// range, hi < lo, acknowledges nothing). Positions at or below the
// mark-delete position are already acknowledged and ignored. It reports
// whether the mark-delete position moved.
func (c *Cursor) AckRange(lo, hi Position) (advanced bool) {
	if invariants.Enabled {
		defer c.checkInvariants()
	}
	if !c.markDelete.Less(hi) || hi.Less(lo) {
		return false
	}
	if !c.markDelete.Less(lo) {
		lo, _ = successor(c.markDelete) // exists: markDelete < hi
	}
	if c.acked.Len() == 0 && c.noEntriesBetween(c.markDelete, lo) {
		// The common case of a consumer acknowledging in order.
		c.markDelete = hi
		c.updateLimit()
		return true
	}
	c.bridge(c.acked.add(Range{Lo: lo, Hi: hi}))
	advanced = c.settle()
	c.updateLimit()
	return advanced
}

// AckCumulative acknowledges every position <= p, as an Exclusive or
// Failover subscription or a Kafka offset commit does (a Kafka committed
// offset names the next record to read, so the caller passes the one
// before it). It reports whether the mark-delete position moved.
func (c *Cursor) AckCumulative(p Position) (advanced bool) {
	if invariants.Enabled {
		defer c.checkInvariants()
	}
	if !c.markDelete.Less(p) {
		return false
	}
	c.markDelete = p
	c.acked.RemoveThrough(p)
	c.settle()
	c.updateLimit()
	return true
}

// IsAcked reports whether p is acknowledged.
func (c *Cursor) IsAcked(p Position) bool {
	return !c.markDelete.Less(p) || c.acked.Contains(p)
}

// Holes returns the number of unacknowledged gaps above the mark-delete
// position that are followed by an acknowledged range; each such gap ends
// where one acknowledged range begins, so it equals the number of ranges.
// The open tail after the last acknowledged range is not a hole.
func (c *Cursor) Holes() int { return c.acked.Len() }

// NextUnacked returns the first entry at or after from that is not
// acknowledged, for dispatch and redelivery; false when there is none yet.
func (c *Cursor) NextUnacked(from Position) (Position, bool) {
	start, ok := predecessor(from)
	if !ok || start.Less(c.markDelete) {
		start = c.markDelete
	}
	// Each round skips a whole acknowledged range; since the ranges are
	// disjoint the loop ends within Len()+1 rounds.
	for range c.acked.Len() + 1 {
		p, ok := c.ledgers.Next(start)
		if !ok {
			return Position{}, false
		}
		r, ok := c.acked.Containing(p)
		if !ok {
			return p, true
		}
		start = r.Hi
	}
	return Position{}, false
}

// AckedRanges iterates over the individually acknowledged ranges above the
// mark-delete position, lowest first. The cursor must not change during the
// iteration.
func (c *Cursor) AckedRanges() iter.Seq[Range] { return c.acked.All() }

// AckedCount returns how many positions above the mark-delete position are
// acknowledged, for the backlog (entries after markDelete minus this); false
// when some range spans ledgers and the caller must count it with the ledger
// sizes (AckedRanges).
func (c *Cursor) AckedCount() (int64, bool) { return c.acked.Count() }

// MaxRangesToPersist returns the configured limit on persisted ranges.
func (c *Cursor) MaxRangesToPersist() int { return c.maxRangesToPersist }

// RangesInMemoryOnly returns how many acknowledged ranges exceed the limit:
// a snapshot taken now would leave them out and a crash would redeliver
// their messages. Exported as a gauge per cursor.
func (c *Cursor) RangesInMemoryOnly() int {
	return max(0, c.acked.Len()-c.maxRangesToPersist)
}

// LimitCrossed reports whether the number of ranges went above the limit
// since the previous call that returned true, counting only crossings that
// followed a time below the limit. The shell logs a warning when it returns
// true, so each cursor logs once per crossing, not once per ack.
func (c *Cursor) LimitCrossed() (crossedNow bool) {
	crossedNow, c.crossed = c.crossed, false
	return crossedNow
}

// settle folds acknowledged ranges into the mark-delete position while the
// first range begins at the first entry after it, possibly in a later ledger.
// It reports whether the mark-delete position moved.
func (c *Cursor) settle() (advanced bool) {
	for {
		first, ok := c.acked.First()
		if !ok || !c.noEntriesBetween(c.markDelete, first.Lo) {
			return advanced
		}
		c.markDelete = first.Hi
		c.acked.removeFirst()
		advanced = true
	}
}

// bridge joins a just-added range with its neighbours when only a ledger
// boundary with no entries in it separates them (e.g. [3:5, 3:9] and
// [7:0, 7:4] when 3:9 is the last entry of ledger 3 and ledger 7 follows it).
// The set itself merges neighbours within a ledger; only the cursor can ask
// the ledger list. The bridge range adds positions that hold no entries,
// which is harmless: no one acknowledges or reads them.
//
// Only the edges the add created need a look: every other pair of
// neighbouring ranges was looked at when the later of its edges was made,
// and the answer cannot change since, because a topic only appends entries.
func (c *Cursor) bridge(r Range, e edges) {
	if e.hasBefore && c.noEntriesBetween(e.before.Hi, r.Lo) {
		r, _ = c.acked.Add(Range{Lo: e.before.Hi, Hi: r.Lo})
	}
	if e.hasAfter && c.noEntriesBetween(r.Hi, e.after.Lo) {
		c.acked.Add(Range{Lo: r.Hi, Hi: e.after.Lo})
	}
}

// noEntriesBetween reports whether no entry lies strictly between a and b
// (a < b). Within a ledger that means b is a's next entry; across ledgers the
// ledger list decides.
func (c *Cursor) noEntriesBetween(a, b Position) bool {
	if a.LedgerID == b.LedgerID {
		return adjacentInLedger(a, b)
	}
	next, ok := c.ledgers.Next(a)
	return ok && !next.Less(b)
}

func (c *Cursor) updateLimit() {
	over := c.acked.Len() > c.maxRangesToPersist
	if over && !c.overLimit {
		c.crossed = true
	}
	c.overLimit = over
}

// checkInvariants panics, naming the invariant and its values, if the cursor
// breaks what must hold after every acknowledgement: the mark-delete
// position never moves back, and the acknowledged ranges satisfy the
// RangeSet invariant and lie above it, not touching it within its ledger.
// Whether entries lie between ranges in different ledgers only the ledger
// list can say: ManagedLedger checks that. It runs at the end of every input
// under -tags invariants; O(ranges).
func (c *Cursor) checkInvariants() {
	if c.checked && c.markDelete.Less(c.checkedMarkDelete) {
		c.violated("the mark-delete position never moves back: %v after %v", c.markDelete, c.checkedMarkDelete)
	}
	c.checkedMarkDelete, c.checked = c.markDelete, true
	c.acked.checkInvariants()
	if first, ok := c.acked.First(); ok && (!c.markDelete.Less(first.Lo) || adjacentInLedger(c.markDelete, first.Lo)) {
		c.violated("every range is above markDelete with an entry between: markDelete %v, first range %v", c.markDelete, first)
	}
	if over := c.acked.Len() > c.maxRangesToPersist; over != c.overLimit {
		c.violated("overLimit = ranges > maxRangesToPersist: overLimit %v, %d ranges, limit %d", c.overLimit, c.acked.Len(), c.maxRangesToPersist)
	}
}

// violated reports a broken invariant of the cursor.
func (c *Cursor) violated(format string, args ...any) {
	panic(fmt.Sprintf("cursor %q: invariant violated: ", c.name) + fmt.Sprintf(format, args...))
}

// Reset moves the mark-delete position to md, back as well as forward, and
// forgets every individual acknowledgement: a seek (Pulsar's reset cursor).
// It is the one way the mark-delete position moves back, so the invariant
// check starts afresh from it.
func (c *Cursor) Reset(md Position) {
	c.markDelete = md
	c.acked = RangeSet{}
	c.checked = false
	c.updateLimit()
	if invariants.Enabled {
		c.checkInvariants()
	}
}

// --- cursor operations of the managed ledger beyond acknowledgement ---

// ClampMarkDelete returns md held within the topic: not before its start
// (the mark-delete position of a cursor that acknowledged nothing) and not
// after its last entry. A cursor's mark-delete position is always in that
// range (checkCursors).
func (t *ManagedLedger) ClampMarkDelete(md Position) Position {
	if start := t.list.start(); md.Less(start) {
		return start
	}
	if last := t.list.last(); last.Less(md) {
		return last
	}
	return md
}

// ResetCursor moves the named cursor's mark-delete position to md (held
// within the topic by ClampMarkDelete), back as well as forward, and drops
// its individual acknowledgements: a seek. The entries after md are
// delivered again (those of ledgers already trimmed are gone). The cursor
// is written at the next persist, as after an acknowledgement.
func (t *ManagedLedger) ResetCursor(name string, md Position, now time.Time) error {
	if invariants.Enabled {
		defer t.checkInvariants()
	}
	t.now = now
	cs, ok := t.cursors[name]
	if !ok {
		return fmt.Errorf("reset %s to %s: %w", name, md, ErrNoSuchCursor)
	}
	if t.phase != phaseOpen {
		return fmt.Errorf("reset %s: topic %s", name, t.phase)
	}
	cs.c.Reset(t.ClampMarkDelete(md))
	cs.dirty, cs.mdMovedAt = true, now
	return nil
}

// OpenCursorAt creates the named cursor with its mark-delete position at
// md (held within the topic by ClampMarkDelete); an existing cursor keeps
// its own. Unlike OpenCursor it writes the topic record naming the new
// cursor at once when no other record write is in flight (else the next
// Tick does), so that a Close right after it — which waits for a record
// write in flight but starts none — keeps the subscription, and with it
// the entries it has not acknowledged: a cursor missing from the record
// holds nothing back from trimming.
func (t *ManagedLedger) OpenCursorAt(name string, md Position, now time.Time) error {
	if invariants.Enabled {
		defer t.checkInvariants()
	}
	if _, ok := t.cursors[name]; ok {
		return nil
	}
	if err := t.OpenCursor(name, true, now); err != nil {
		return err
	}
	if err := t.ResetCursor(name, md, now); err != nil {
		return err
	}
	if t.phase == phaseOpen && t.recordDirty && !t.recordBusy && !t.roll.active {
		t.casRecord(pendingMeta{purpose: metaRecordSync}, slices.Clone(t.list.infos))
	}
	return nil
}

// HasEntry reports whether p holds an entry of the topic.
func (t *ManagedLedger) HasEntry(p Position) bool { return t.list.exists(p) }

// CursorLedgers is the topic's ledger list as the Ledgers a Cursor asks,
// for cursors the shell keeps in memory only (a reader's non-durable
// cursor). Its answers follow the topic, so it must only be used on the
// goroutine that owns the topic.
func (t *ManagedLedger) CursorLedgers() Ledgers { return &t.list }
