package mlog

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"quire/internal/invariants"
	"quire/internal/meta"
)

// Tick drives everything time-based: rollover by age and its retries,
// cursor persistence, TTL, backlog quota, trimming and record fix-ups.
func (t *ManagedLedger) Tick(now time.Time) {
	if invariants.Enabled {
		defer t.checkInvariants()
	}
	t.now = now
	if p := t.recordCheck; p != nil && (t.phase == phaseOpen || t.phase == phaseClosing) {
		t.recordCheck = nil
		t.checkRecord(*p.check, p.checkErr)
	}
	if t.phase != phaseOpen {
		t.tryFinishClose()
		return
	}
	t.afterWrite() // rollover by age, or a retry after a failed one
	if t.cfg.MessageTTL > 0 {
		t.expire(now.Add(-t.cfg.MessageTTL), EventTTLExpired)
	}
	t.applyQuota()
	t.persistCursors(false)
	t.trim()
	t.tryCompactCAS()
	t.retryDeletes()
	if t.recordDirty && !t.recordBusy && !t.roll.active {
		t.casRecord(pendingMeta{purpose: metaRecordSync}, slices.Clone(t.list.infos))
	}
}

// --- rollover ---

func (t *ManagedLedger) startRoll() {
	t.roll.active = true
	if t.roll.spare == 0 && !t.roll.creating {
		t.roll.creating = true
		t.sendLedger(pendingLedger{}, LedgerOp{Kind: LedgerCreate})
	}
}

// tryRollCAS writes the list with the current ledger closed and the spare
// one appended, once the current ledger's appends have drained.
func (t *ManagedLedger) tryRollCAS() {
	if t.phase != phaseOpen || !t.roll.active || t.roll.spare == 0 || t.roll.casing || t.inflight > 0 || t.recordBusy {
		return
	}
	proposal := slices.Clone(t.list.infos)
	if t.current != 0 { // else every ledger on the list is closed already
		proposal[len(proposal)-1].Closed = t.now
	}
	proposal = append(proposal, LedgerInfo{ID: t.roll.spare, Created: t.now})
	t.roll.casing = true
	t.casRecord(pendingMeta{purpose: metaRecordRoll, proposal: proposal}, proposal)
}

func (t *ManagedLedger) onRollRecorded(proposal []LedgerInfo, res MetaResult) {
	p := t.roll
	t.roll.casing = false
	if res.Err != nil {
		t.rolloverFailed(fmt.Errorf("record ledger %d: %w", p.spare, res.Err))
		return
	}
	if t.phase != phaseOpen {
		// Closing meanwhile: the recorded spare ledger stays empty and the
		// next owner recovers it like any open ledger.
		return
	}
	old := t.current
	// No append was answered since the CAS was built (the roll drained them
	// and queued the rest), so the proposal is the list.
	t.list.infos = proposal
	t.current, t.noLedger = p.spare, nil
	t.roll = rollState{}
	t.stats.Rollovers++
	if old != 0 {
		t.sendLedger(pendingLedger{}, LedgerOp{Kind: LedgerClose, Ledger: old})
	}
	if old == 0 {
		t.event(EventRolledOver, "", nil, fmt.Sprintf("ledger %d, writable again", t.current))
	} else {
		t.event(EventRolledOver, "", nil, fmt.Sprintf("ledger %d -> %d", old, t.current))
	}
	t.flushQueue()
}

// rolloverFailed keeps writing to the current ledger (the seed's metadata
// store degradation: producing continues, only the rollover waits) and
// retries after RetryInterval.
func (t *ManagedLedger) rolloverFailed(err error) {
	t.stats.RolloverFailures++
	t.stats.LastRolloverError = err.Error()
	t.roll.active = false
	t.roll.retryAt = t.now.Add(t.cfg.RetryInterval)
	if t.current == 0 {
		t.noLedger = fmt.Errorf("%w: %v", ErrNoWritableLedger, err)
	}
	t.event(EventRolloverFailed, "", err, "")
	t.flushQueue()
}

// --- trimming ---

func (t *ManagedLedger) trim() {
	if t.recordBusy || t.roll.active {
		return
	}
	slowest, has := t.slowest()
	ids := TrimCandidates(t.list.infos, slowest, has, t.cfg.Retention, t.now, t.cfg.EarlyTrim)
	if len(ids) == 0 {
		return
	}
	t.casRecord(pendingMeta{purpose: metaRecordTrim, ledgers: ids}, slices.Clone(t.list.infos[len(ids):]))
}

func (t *ManagedLedger) onTrimRecorded(ids []int64, res MetaResult) {
	if res.Err != nil {
		return // retried on a later tick
	}
	removed := t.list.infos[:len(ids)]
	t.list.infos = t.list.infos[len(ids):]
	for _, info := range removed {
		delete(t.times, info.ID)
		t.sendLedger(pendingLedger{}, LedgerOp{Kind: LedgerDelete, Ledger: info.Stored()})
	}
	t.stats.TrimmedLedgers += int64(len(ids))
	t.event(EventTrimmed, "", nil, fmt.Sprint(ids))
}

// slowest returns the smallest mark-delete position over all cursors.
func (t *ManagedLedger) slowest() (Position, bool) {
	var s Position
	found := false
	for _, cs := range t.cursors {
		if md := cs.c.MarkDelete(); !found || md.Less(s) {
			s, found = md, true
		}
	}
	return s, found
}

// --- cursors ---

// OpenCursor creates a cursor (idempotent). A new cursor starts at the end
// of the topic, or at its beginning when fromStart. Its name is added to the
// topic record on a later tick, its snapshot written at the next persist:
// a crash in between loses the new subscription, never acknowledged data.
func (t *ManagedLedger) OpenCursor(name string, fromStart bool, now time.Time) error {
	if invariants.Enabled {
		defer t.checkInvariants()
	}
	t.now = now
	if err := validCursorName(name); err != nil {
		return err
	}
	if t.phase != phaseOpen {
		return fmt.Errorf("open cursor %s: topic %s", name, t.phase)
	}
	if _, ok := t.cursors[name]; ok {
		return nil
	}
	md := t.list.last()
	if fromStart {
		md = t.list.start()
	}
	c, err := NewCursor(name, md, t.cursorOptions())
	if err != nil {
		return err
	}
	delete(t.deleteAfterRecord, name)
	t.cursors[name] = &cursorState{c: c, dirty: true, mdMovedAt: now}
	t.cursorNames = append(slices.Clone(t.cursorNames), name)
	t.recordDirty = true
	return nil
}

// DeleteCursor removes a subscription: its acknowledgements no longer hold
// back trimming (the seed's immediate fix for storage pinned by an abandoned
// subscription). Its record goes once the topic record stops naming it.
func (t *ManagedLedger) DeleteCursor(name string, now time.Time) error {
	if invariants.Enabled {
		defer t.checkInvariants()
	}
	t.now = now
	cs, ok := t.cursors[name]
	if !ok {
		return fmt.Errorf("delete cursor %s: %w", name, ErrNoSuchCursor)
	}
	delete(t.cursors, name)
	t.cursorNames = slices.DeleteFunc(slices.Clone(t.cursorNames), func(n string) bool { return n == name })
	ledgers := []int64{cs.ledger}
	if cs.pointed != cs.ledger {
		ledgers = append(ledgers, cs.pointed)
	}
	if cs.version != 0 {
		t.deleteAfterRecord[name] = cs.version
		if t.deadCursorLedgers == nil {
			t.deadCursorLedgers = map[string][]int64{}
		}
		t.deadCursorLedgers[name] = ledgers
	} else {
		t.deleteCursorLedgers(name, ledgers...)
	}
	t.recordDirty = true
	return nil
}

// Cursor returns the named cursor (read only: acknowledge through Ack).
func (t *ManagedLedger) Cursor(name string) (*Cursor, bool) {
	cs, ok := t.cursors[name]
	if !ok {
		return nil, false
	}
	return cs.c, true
}

// Ack acknowledges p individually on the named cursor.
func (t *ManagedLedger) Ack(cursor string, p Position, now time.Time) error {
	return t.ack(cursor, p, now, (*Cursor).Ack)
}

// AckCumulative acknowledges every position <= p on the named cursor.
func (t *ManagedLedger) AckCumulative(cursor string, p Position, now time.Time) error {
	return t.ack(cursor, p, now, (*Cursor).AckCumulative)
}

func (t *ManagedLedger) ack(cursor string, p Position, now time.Time, op func(*Cursor, Position) bool) error {
	if invariants.Enabled {
		defer t.checkInvariants()
	}
	t.now = now
	cs, ok := t.cursors[cursor]
	if !ok {
		return fmt.Errorf("ack %s on %s: %w", p, cursor, ErrNoSuchCursor)
	}
	if !t.list.exists(p) {
		return fmt.Errorf("ack %s on %s: %w", p, cursor, ErrNoSuchEntry)
	}
	t.applyAck(cs, func(c *Cursor) bool { return op(c, p) })
	return nil
}

func (t *ManagedLedger) applyAck(cs *cursorState, op func(*Cursor) bool) {
	if op(cs.c) {
		cs.mdMovedAt = t.now
	}
	cs.dirty = true
	if cs.c.LimitCrossed() {
		t.event(EventAckRangesOverLimit, cs.c.Name(), nil,
			fmt.Sprintf("%d ack ranges, %d persisted; the rest are redelivered after a crash", cs.c.Holes(), cs.c.MaxRangesToPersist()))
	}
}

// persistCursors writes changed cursors: at most once per
// CursorPersistInterval each, or all of them when force (Close).
func (t *ManagedLedger) persistCursors(force bool) {
	for _, name := range t.cursorNames {
		cs := t.cursors[name]
		if cs == nil || !cs.dirty || cs.persisting || (!force && t.now.Sub(cs.lastPersist) < t.cfg.CursorPersistInterval) {
			continue
		}
		t.persistCursor(name, cs)
	}
}

func (t *ManagedLedger) onCursorPersisted(p pendingMeta, res MetaResult) {
	name, persisted, cledger := p.cursor, p.persisted, p.cledger
	cs := t.cursors[name]
	if cs == nil {
		return
	}
	cs.persisting = false
	cs.lastPersist = t.now
	if isLostRace(res.Err) {
		// Someone else wrote the cursor record — a new owner (then we are
		// fenced) — or an earlier write of ours applied with its answer
		// lost. The pointer's epoch decides which.
		cs.dirty = true
		t.sendMeta(pendingMeta{purpose: metaCheckOwner, cursor: name}, MetaOp{Kind: MetaGet, Key: CursorKey(t.cfg.Name, name)})
		return
	}
	if res.Err != nil {
		cs.dirty = true // retried at the next interval
		return
	}
	cs.version = res.Version
	cs.persisted = persisted
	if cledger != cs.pointed {
		// The pointer moved to a new cursor ledger: the old one (ours
		// after a roll, or the previous owner's) is no longer needed.
		if old := cs.pointed; old != 0 && old != cs.ledger {
			t.sendLedger(pendingLedger{cursor: name}, LedgerOp{Kind: LedgerDelete, Ledger: old})
		}
		cs.pointed = cledger
	}
	if p.claim != nil && cs.ledger == cledger {
		// The pointer names the new cursor ledger: append the snapshot.
		cs.persisting = true
		t.sendCursorAppend(cs, *p.claim)
	}
}

// onOwnerChecked settles a cursor CAS conflict (or a failed cursor ledger
// append) from the cursor record: a pointer of our epoch is our own write
// whose answer was lost, and we take its version (the snapshot it names is
// one we wrote, so nothing is lost); anything else was written by another
// owner, which recovered our cursor ledger first: we lost the topic.
func (t *ManagedLedger) onOwnerChecked(name string, res MetaResult) {
	cs := t.cursors[name]
	if res.Err != nil || cs == nil {
		return // cursor stays dirty: the next persist tries again
	}
	ptr, ok := DecodeCursorPointer(res.Value)
	if !ok || ptr.Epoch > int64(t.epoch) {
		t.fail(fmt.Errorf("topic %s: cursor %s written by another owner: %w", t.cfg.Name, name, ErrFenced))
		return
	}
	if ptr.Epoch < int64(t.epoch) && cs.pointed == 0 {
		// A pointer an earlier owner left for a cursor the record does not
		// name (it crashed between the two writes, or closed before the
		// record named the cursor): the subscription did not exist when we
		// took the topic over, so ours replaces it, and its cursor ledger
		// goes once our pointer has moved off it.
		cs.pointed = ptr.Ledger
	}
	cs.version, cs.lastPersist = res.Version, time.Time{} // rewrite at once
}

// --- backlog quota and TTL ---

// cursorBacklog returns a cursor's unacknowledged entries and (estimated)
// bytes.
func (t *ManagedLedger) cursorBacklog(c *Cursor) (entries, bytes int64) {
	entries, bytes = t.list.backlog(c.MarkDelete())
	if acked, ok := c.AckedCount(); ok {
		entries -= acked
	} else {
		for r := range c.AckedRanges() {
			entries -= t.list.countRange(r)
		}
	}
	return max(entries, 0), bytes
}

// publishedBy returns an upper bound on p's publish time, or zero.
func (t *ManagedLedger) publishedBy(p Position) time.Time {
	if x := t.times[p.LedgerID]; x != nil {
		if at, ok := x.publishedBy(p.EntryID); ok {
			return at
		}
	}
	i := t.list.index(p.LedgerID)
	if i < len(t.list.infos) && t.list.infos[i].ID == p.LedgerID {
		return t.list.infos[i].Closed
	}
	return time.Time{}
}

func (t *ManagedLedger) quotaExceeded() bool {
	q := t.cfg.Quota
	if q.LimitSize <= 0 && q.LimitAge <= 0 {
		return false
	}
	for _, cs := range t.cursors {
		_, bytes := t.cursorBacklog(cs.c)
		var oldest time.Time
		if p, ok := t.list.Next(cs.c.MarkDelete()); ok {
			oldest = t.publishedBy(p)
		}
		if q.Exceeded(bytes, oldest, t.now) {
			return true
		}
	}
	return false
}

func (t *ManagedLedger) applyQuota() {
	exceeded := t.quotaExceeded()
	if exceeded && t.cfg.Quota.Policy == ConsumerBacklogEviction {
		t.evict()
		exceeded = t.quotaExceeded()
	}
	held := t.held
	t.held = nil
	for _, q := range held {
		switch {
		case !exceeded:
			t.enqueue(q)
		case !t.now.Before(q.deadline):
			t.stats.QuotaHoldTimeouts++
			t.ackErr(q.token, ErrBacklogQuotaHoldTimeout)
		default:
			t.held = append(t.held, q)
		}
	}
}

func (t *ManagedLedger) releaseHeld() {
	held := t.held
	t.held = nil
	for _, q := range held {
		t.enqueue(q)
	}
}

// evict advances cursors past their oldest backlog until they are within
// the quota (consumer_backlog_eviction).
func (t *ManagedLedger) evict() {
	q := t.cfg.Quota
	if q.LimitAge > 0 {
		t.expire(t.now.Add(-q.LimitAge), EventBacklogEvicted)
	}
	if q.LimitSize <= 0 {
		return
	}
	for _, name := range t.cursorNames {
		cs := t.cursors[name]
		if cs == nil {
			continue
		}
		_, bytes := t.cursorBacklog(cs.c)
		if bytes <= q.LimitSize {
			continue
		}
		target, ok := t.evictTarget(cs.c.MarkDelete(), bytes-q.LimitSize)
		if ok {
			t.stats.Evictions++
			t.applyAck(cs, func(c *Cursor) bool { return c.AckCumulative(target) })
			t.event(EventBacklogEvicted, name, nil, "through "+target.String())
		}
	}
}

// evictTarget returns the position through which to acknowledge so that at
// least excess bytes of backlog after md are dropped.
func (t *ManagedLedger) evictTarget(md Position, excess int64) (Position, bool) {
	var target Position
	found := false
	for _, info := range t.list.infos[t.list.index(md.LedgerID):] {
		first := int64(0)
		if info.ID == md.LedgerID {
			first = md.EntryID + 1
		}
		n := info.Entries - first
		if n <= 0 {
			continue
		}
		avg := max(info.Size/info.Entries, 1)
		if bytes := n * avg; bytes < excess {
			target, found, excess = Position{info.ID, info.Entries - 1}, true, excess-bytes
			continue
		}
		k := (excess + avg - 1) / avg
		return Position{info.ID, first + k - 1}, true
	}
	return target, found
}

// expire acknowledges, on every cursor, the entries published no later than
// cutoff (message TTL, and age eviction).
func (t *ManagedLedger) expire(cutoff time.Time, kind EventKind) {
	through, ok := t.publishedThrough(cutoff)
	if !ok {
		return
	}
	for _, name := range t.cursorNames {
		cs := t.cursors[name]
		if cs == nil || !cs.c.MarkDelete().Less(through) {
			continue
		}
		t.stats.TTLExpirations++
		t.applyAck(cs, func(c *Cursor) bool { return c.AckCumulative(through) })
		t.event(kind, name, nil, "through "+through.String())
	}
}

// publishedThrough returns the last position known to be published no later
// than cutoff: whole ledgers closed by then, then the time index.
func (t *ManagedLedger) publishedThrough(cutoff time.Time) (Position, bool) {
	var through Position
	found := false
	for _, info := range t.list.infos {
		if !info.Closed.IsZero() && !info.Closed.After(cutoff) {
			if info.Entries > 0 {
				through, found = Position{info.ID, info.Entries - 1}, true
			}
			continue
		}
		if x := t.times[info.ID]; x != nil {
			if e, ok := x.lastPublishedBefore(cutoff); ok && e < info.Entries {
				through, found = Position{info.ID, e}, true
			}
		}
		break
	}
	return through, found
}

// --- compaction ---
//
// Compaction (Kafka's cleanup.policy=compact) rewrites a run of closed
// ledgers into one compacted ledger holding the records that survive, and
// swaps it into the ledger list in their place by one CAS: readers see the
// old ledgers or the compacted one, never a mix. What survives, and the
// reading and writing, are the compactor's (a shell on the owner: package
// broker); the core only keeps the list and its ordering rules:
//
//   - the compacted ledger is named in the record (Record.Garbage) by a CAS
//     before its first entry is written (RegisterCompaction), so a crash
//     at any point leaves nothing the next owner does not delete;
//   - the swap (EndCompaction) replaces a run of closed ledgers still on
//     the list — never the current one — by one segment with the first
//     replaced ledger's id (so the list stays ordered) and the compacted
//     ledger as its Data; the replaced ledgers move to Garbage in the same
//     CAS and are deleted only after it succeeded;
//   - one compaction at a time, and only on a topic without cursors (a
//     Kafka partition): a cursor's positions would name entries the swap
//     renumbers.
//
// Entry ids in the new segment are new (0..n-1): positions read before a
// swap must not be used after it, which is why the shell counts swaps.

// Errors of compaction requests.
var (
	// ErrCompactionBusy: another compaction is registered or in flight.
	ErrCompactionBusy = errors.New("mlog: a compaction is already running")
	// ErrCompactionCursors: the topic has cursors, whose positions a swap
	// would invalidate.
	ErrCompactionCursors = errors.New("mlog: cannot compact a topic with cursors")
	// ErrCompactionStale: the ledgers to replace are no longer a run of
	// closed ledgers on the list (trimmed meanwhile), or the compacted
	// ledger is not the registered one.
	ErrCompactionStale = errors.New("mlog: compaction does not match the ledger list")
)

// CompactSwap is a finished compaction: the ledgers it replaces (a run of
// closed ledgers on the list, oldest first) and the compacted ledger (Data,
// closed, with its entry count and size). No Replace abandons the
// compaction: the compacted ledger is deleted.
type CompactSwap struct {
	Replace []int64
	Data    int64
	Entries int64
	Size    int64
}

// CompactionDone answers RegisterCompaction or EndCompaction (by token).
type CompactionDone struct {
	Token uint64
	Err   error
}

type compactRequest struct {
	token    uint64
	register bool        // RegisterCompaction, else EndCompaction
	swap     CompactSwap // the compacted ledger is swap.Data either way
	sent     bool        // its record CAS is in flight
}

// RegisterCompaction names ledger — created by the compactor, still empty
// — in the topic record as a compacted ledger being written. The answer
// (a CompactionDone with token) comes once the CAS settled; only then may
// the compactor write to it.
func (t *ManagedLedger) RegisterCompaction(token uint64, ledger int64, now time.Time) {
	if invariants.Enabled {
		defer t.checkInvariants()
	}
	t.now = now
	if err := t.compactionRefused(); err != nil {
		t.ready.Compactions = append(t.ready.Compactions, CompactionDone{Token: token, Err: err})
		return
	}
	if t.compactLedger != 0 {
		t.ready.Compactions = append(t.ready.Compactions, CompactionDone{Token: token, Err: ErrCompactionBusy})
		return
	}
	t.compaction = &compactRequest{token: token, register: true, swap: CompactSwap{Data: ledger}}
	t.tryCompactCAS()
}

// EndCompaction swaps the registered compacted ledger in (s.Replace set)
// or abandons it (deleted). Answered by a CompactionDone with token.
func (t *ManagedLedger) EndCompaction(token uint64, s CompactSwap, now time.Time) {
	if invariants.Enabled {
		defer t.checkInvariants()
	}
	t.now = now
	err := t.compactionRefused()
	if err == nil && (s.Data == 0 || s.Data != t.compactLedger) {
		err = fmt.Errorf("%w: ledger %d is not the registered compacted ledger (%d)", ErrCompactionStale, s.Data, t.compactLedger)
	}
	if err != nil {
		t.ready.Compactions = append(t.ready.Compactions, CompactionDone{Token: token, Err: err})
		return
	}
	if len(s.Replace) == 0 {
		t.compactLedger = 0
		t.sendLedger(pendingLedger{}, LedgerOp{Kind: LedgerDelete, Ledger: s.Data})
		t.ready.Compactions = append(t.ready.Compactions, CompactionDone{Token: token})
		return
	}
	t.compaction = &compactRequest{token: token, swap: s}
	t.tryCompactCAS()
}

func (t *ManagedLedger) compactionRefused() error {
	switch {
	case t.phase == phaseFailed:
		return t.err
	case t.phase != phaseOpen:
		return fmt.Errorf("compact topic %s: %w", t.cfg.Name, ErrClosed)
	case t.compaction != nil:
		return ErrCompactionBusy
	case len(t.cursorNames) > 0:
		return ErrCompactionCursors
	}
	return nil
}

// answerCompaction answers the pending compaction request, if any, with err.
func (t *ManagedLedger) answerCompaction(err error) {
	if t.compaction == nil {
		return
	}
	t.ready.Compactions = append(t.ready.Compactions, CompactionDone{Token: t.compaction.token, Err: err})
	t.compaction = nil
}

// compactRun returns where the run of ledgers ids lies on the list: the
// index of the first; false unless they are consecutive, closed and not the
// last ledger.
func (t *ManagedLedger) compactRun(ids []int64) (int, bool) {
	infos := t.list.infos
	i := t.list.index(ids[0])
	if i+len(ids) >= len(infos) { // the last ledger (open or current) stays
		return 0, false
	}
	for k, id := range ids {
		if info := infos[i+k]; info.ID != id || info.Closed.IsZero() {
			return 0, false
		}
	}
	return i, true
}

// tryCompactCAS sends the pending compaction's record CAS once no other
// record write or rollover is under way.
func (t *ManagedLedger) tryCompactCAS() {
	c := t.compaction
	if c == nil || c.sent || t.phase != phaseOpen || t.recordBusy || t.roll.active {
		return
	}
	garbage := slices.Clone(t.garbage)
	if c.register {
		c.sent = true
		garbage = append(garbage, c.swap.Data)
		t.casRecord(pendingMeta{purpose: metaRecordCompact, compaction: c, garbage: garbage}, slices.Clone(t.list.infos))
		return
	}
	i, ok := t.compactRun(c.swap.Replace)
	if !ok {
		// The compacted ledger stays registered: the compactor abandons it.
		t.answerCompaction(fmt.Errorf("%w: ledgers %v", ErrCompactionStale, c.swap.Replace))
		return
	}
	c.sent = true
	proposal := t.swapped(i, c.swap)
	garbage = slices.DeleteFunc(garbage, func(id int64) bool { return id == c.swap.Data })
	for _, info := range t.list.infos[i : i+len(c.swap.Replace)] {
		garbage = append(garbage, info.Stored())
	}
	t.casRecord(pendingMeta{purpose: metaRecordCompact, compaction: c, garbage: garbage}, proposal)
}

// Compactions counts the compaction swaps this core made: the shell
// compares it after each input to learn, before anything else runs, that
// positions were renumbered.
func (t *ManagedLedger) Compactions() int64 { return t.stats.Compactions }

// replacedData reports whether id is the stored ledger of one of the
// ledgers c's swap replaces.
func (t *ManagedLedger) replacedData(c *compactRequest, id int64) bool {
	for _, r := range c.swap.Replace {
		if i := t.list.index(r); i < len(t.list.infos) && t.list.infos[i].ID == r && t.list.infos[i].Stored() == id {
			return true
		}
	}
	return false
}

// swapped is the ledger list with the run at i replaced by s's ledger.
func (t *ManagedLedger) swapped(i int, s CompactSwap) []LedgerInfo {
	infos := t.list.infos
	first, last := infos[i], infos[i+len(s.Replace)-1]
	seg := LedgerInfo{ID: first.ID, Data: s.Data, Entries: s.Entries, Size: s.Size, Created: first.Created, Closed: last.Closed}
	out := make([]LedgerInfo, 0, len(infos)-len(s.Replace)+1)
	out = append(out, infos[:i]...)
	out = append(out, seg)
	return append(out, infos[i+len(s.Replace):]...)
}

// onCompactRecorded acts on the known outcome of a compaction CAS.
func (t *ManagedLedger) onCompactRecorded(p pendingMeta, res MetaResult) {
	c := p.compaction
	if t.compaction == c {
		t.compaction = nil
	}
	if res.Err != nil {
		if !c.register {
			// The swap did not apply: the compacted ledger is garbage.
			t.compactLedger = 0
			t.sendLedger(pendingLedger{}, LedgerOp{Kind: LedgerDelete, Ledger: c.swap.Data})
		}
		t.ready.Compactions = append(t.ready.Compactions, CompactionDone{Token: c.token, Err: fmt.Errorf("compaction record write: %w", res.Err)})
		return
	}
	// The garbage list as written, less what was deleted while the CAS was
	// in flight (the next record write drops those from the record too).
	t.garbage = slices.DeleteFunc(slices.Clone(p.garbage), func(id int64) bool {
		return id != c.swap.Data && !slices.Contains(t.garbage, id) && !slices.Contains(c.swap.Replace, id) && !t.replacedData(c, id)
	})
	if len(t.garbage) != len(p.garbage) {
		t.recordDirty = true
	}
	if c.register {
		t.compactLedger = c.swap.Data
		t.ready.Compactions = append(t.ready.Compactions, CompactionDone{Token: c.token})
		return
	}
	t.compactLedger = 0
	// No other record write ran since the CAS was built (recordBusy), so
	// the run is where it was; only the current ledger's counts moved.
	i, ok := t.compactRun(c.swap.Replace)
	if !ok {
		t.violated("a compaction's run stays on the list until its CAS settles: %v, list %v", c.swap.Replace, ledgerIDsOf(t.list.infos))
	}
	var replacedSize int64
	for _, info := range t.list.infos[i : i+len(c.swap.Replace)] {
		replacedSize += info.Size
		delete(t.times, info.ID)
		t.sendLedger(pendingLedger{}, LedgerOp{Kind: LedgerDelete, Ledger: info.Stored()})
	}
	t.list.infos = t.swapped(i, c.swap)
	t.stats.Compactions++
	t.stats.CompactedBytes += max(replacedSize-c.swap.Size, 0)
	t.event(EventCompacted, "", nil, fmt.Sprintf("ledgers %v -> %d (%d entries)", c.swap.Replace, c.swap.Data, c.swap.Entries))
	t.ready.Compactions = append(t.ready.Compactions, CompactionDone{Token: c.token})
}

// --- close ---

// Close stops accepting appends, persists every cursor, waits for the
// in-flight appends and closes the current ledger. Done reports the end.
func (t *ManagedLedger) Close(now time.Time) {
	if invariants.Enabled {
		defer t.checkInvariants()
	}
	t.now = now
	if t.phase >= phaseClosing {
		return
	}
	if t.phase != phaseOpen {
		t.phase = phaseClosed
		t.err = nil
		t.event(EventClosed, "", nil, "")
		for _, q := range append(t.queue, t.held...) {
			t.ackErr(q.token, ErrClosed)
		}
		t.queue, t.held = nil, nil
		return
	}
	t.persistCursors(true)
	t.phase = phaseClosing
	if t.compaction != nil && !t.compaction.sent {
		t.answerCompaction(ErrClosed)
	}
	for _, q := range append(t.queue, t.held...) {
		t.ackErr(q.token, ErrClosed)
	}
	t.queue, t.held = nil, nil
	t.tryFinishClose()
}

func (t *ManagedLedger) tryFinishClose() {
	if t.phase != phaseClosing {
		return
	}
	if t.inflight == 0 && !t.closing.ledgerClosing {
		t.closing.ledgerClosing = true
		if t.current != 0 {
			t.sendLedger(pendingLedger{}, LedgerOp{Kind: LedgerClose, Ledger: t.current})
		} else {
			t.closing.ledgerClosed = true
		}
	}
	for _, cs := range t.cursors {
		if cs.persisting {
			return
		}
	}
	if t.closing.ledgerClosed && !t.recordBusy {
		if t.recordDirty && !t.closing.recordWritten {
			// A cursor opened or deleted since the record was last written:
			// write it now, or the next owner would not know of the
			// subscription and trim what it has not acknowledged. Once: if
			// the write fails, the close ends all the same.
			t.closing.recordWritten = true
			t.casRecord(pendingMeta{purpose: metaRecordSync}, slices.Clone(t.list.infos))
			return
		}
		t.phase = phaseClosed
		t.event(EventClosed, "", nil, "")
	}
}

// --- stats and reads ---

// Stats returns the topic's state for metrics.
func (t *ManagedLedger) Stats() Stats {
	s := t.stats
	s.Phase = t.phase.String()
	s.CurrentLedger = t.current
	s.Ledgers = len(t.list.infos)
	s.StorageSize = t.list.totalSize()
	s.DeletesPending = len(t.deleteRetries)
	s.Garbage = len(t.garbage)
	for _, info := range t.list.infos {
		s.Entries += info.Entries
	}
	s.AppendsInFlight, s.QueuedAppends, s.HeldAppends = t.inflight, len(t.queue), len(t.held)
	s.Cursors = nil
	for _, name := range t.cursorNames {
		cs := t.cursors[name]
		if cs == nil {
			continue
		}
		entries, bytes := t.cursorBacklog(cs.c)
		st := CursorStats{Name: name, MarkDelete: cs.c.MarkDelete(), BacklogEntries: entries, BacklogBytes: bytes,
			Holes: cs.c.Holes(), HolesPersisted: cs.persisted, HolesInMemoryOnly: cs.c.RangesInMemoryOnly(),
			Unpersisted: cs.dirty || cs.persisting}
		if entries > 0 {
			st.MarkDeleteAge = t.now.Sub(cs.mdMovedAt)
		}
		s.Cursors = append(s.Cursors, st)
	}
	return s
}

// ReadSpan is a run of entries of one ledger to read: positions
// (Ledger, First..Last), stored in ledger Stored on the bookies (differs
// from Ledger for a compacted segment; see LedgerInfo.Data).
type ReadSpan struct {
	Ledger      int64
	First, Last int64
	Stored      int64
}

// Locate returns the spans holding up to maxEntries entries from the first
// entry at or after from, across ledgers, within what has been
// acknowledged to producers.
func (t *ManagedLedger) Locate(from Position, maxEntries int) []ReadSpan {
	var spans []ReadSpan
	start, ok := predecessor(from)
	if !ok {
		return nil
	}
	for left := int64(maxEntries); left > 0; {
		p, ok := t.list.Next(start)
		if !ok {
			break
		}
		info := t.list.infos[t.list.index(p.LedgerID)]
		last := min(info.Entries-1, p.EntryID+left-1)
		spans = append(spans, ReadSpan{Ledger: p.LedgerID, First: p.EntryID, Last: last, Stored: info.Stored()})
		left -= last - p.EntryID + 1
		start = Position{p.LedgerID, last}
	}
	return spans
}

// isLostRace reports whether a metadata error means another owner wrote.
func isLostRace(err error) bool {
	return errors.Is(err, meta.ErrBadVersion) || errors.Is(err, meta.ErrExists)
}
