package mlog

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/cockroachdb/datadriven"
)

// What the interaction scripts print about the state of things (state,
// store, acks, redelivery, trim's reason) and the guarantees they check
// after every command.

func (e *scriptEnv) clock(t time.Time) string { return "+" + t.Sub(e.start).String() }

func (e *scriptEnv) printState(o *scriptOwner) {
	head := fmt.Sprintf("%s: phase=%s current=L%d", o.name, o.ml.Phase(), o.ml.Current())
	if o.crashed {
		head += " (crashed)"
	}
	if err := o.ml.Err(); err != nil {
		head += " err=" + errName(err)
	}
	e.out.line("%s", head)
	e.out.depth++
	defer func() { e.out.depth-- }()
	for _, l := range o.ml.Ledgers() {
		s := fmt.Sprintf("L%d open entries=%d size=%dB created=%s", l.ID, l.Entries, l.Size, e.clock(l.Created))
		if !l.Closed.IsZero() {
			s = fmt.Sprintf("L%d closed entries=%d size=%dB created=%s closed=%s", l.ID, l.Entries, l.Size, e.clock(l.Created), e.clock(l.Closed))
		}
		e.out.line("%s", s)
	}
	st := o.ml.Stats()
	for _, c := range st.Cursors {
		unpersisted := "no"
		if c.Unpersisted {
			unpersisted = "yes"
		}
		e.out.line("cursor %s: md=%s ranges=%d persisted=%d memory-only=%d backlog=%d md-age=%s unpersisted=%s",
			c.Name, c.MarkDelete, c.Holes, c.HolesPersisted, c.HolesInMemoryOnly, c.BacklogEntries, c.MarkDeleteAge, unpersisted)
	}
	e.out.line("storage=%dB entries=%d rollovers=%d rollover-failures=%d trimmed=%d delete-failures=%d deletes-pending=%d queued=%d held=%d",
		st.StorageSize, st.Entries, st.Rollovers, st.RolloverFailures, st.TrimmedLedgers, st.DeleteFailures, st.DeletesPending, st.QueuedAppends, st.HeldAppends)
	if st.LastRolloverError != "" {
		e.out.line("last rollover error: %s", st.LastRolloverError)
	}
}

func (e *scriptEnv) printStore() {
	keys := make([]string, 0, len(e.fake.store))
	for k := range e.fake.store {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	if len(keys) == 0 {
		e.out.line("metadata: empty")
	}
	for _, k := range keys {
		kv := e.fake.store[k]
		e.out.line("%s v=%d: %s", keyName(k), kv.version, fmtValue(k, kv.value))
	}
	// What the store names: a ledger on bookies that nothing names is
	// garbage nobody will delete (or a spare a rollover is about to name).
	named := map[int64]bool{}
	for _, k := range keys {
		if k == Key("t") {
			if rec, err := unmarshalRecord(e.fake.store[k].value); err == nil {
				for _, l := range rec.Ledgers {
					named[l.ID] = true
				}
			}
		} else if p, ok := DecodeCursorPointer(e.fake.store[k].value); ok {
			named[p.Ledger] = true
		}
	}
	e.out.line("bookies:")
	e.out.depth++
	defer func() { e.out.depth-- }()
	for _, id := range e.madeOrder {
		m := e.made[id]
		what := fmt.Sprintf("L%d by %s", id, m.by)
		if m.cursor != "" {
			what += " for cursor " + m.cursor
		}
		l := e.fake.ledgers[id]
		if l == nil {
			e.out.line("%s: deleted", what)
			continue
		}
		state := "open"
		if l.closed {
			state = "closed"
		}
		if l.fenced {
			state += ", fenced"
		}
		orphan := ""
		if !named[id] {
			orphan = ", named by no record"
		}
		e.out.line("%s: %s, entries=%d%s", what, state, len(l.entries), orphan)
	}
}

func (e *scriptEnv) printAcks(o *scriptOwner) {
	for _, tok := range o.sent {
		a, ok := o.acks[tok]
		if !ok {
			e.out.line("%s: %s not answered", o.name, tokenName(tok))
			continue
		}
		e.out.ack(o.name, a)
	}
}

// whyKept says why the first ledger of o's list is not trimmed.
func (e *scriptEnv) whyKept(o *scriptOwner) string {
	ls := o.ml.Ledgers()
	if len(ls) == 0 {
		return "no ledgers"
	}
	first := ls[0]
	if len(ls) == 1 {
		return fmt.Sprintf("L%d is the current ledger", first.ID)
	}
	for _, c := range o.ml.Stats().Cursors {
		md := c.MarkDelete
		if !(first.ID < md.LedgerID || first.ID == md.LedgerID && first.LastEntry() <= md.EntryID) {
			end := fmt.Sprintf("its last entry %d:%d", first.ID, first.LastEntry())
			if first.Entries == 0 {
				end = "it (empty)"
			}
			return fmt.Sprintf("L%d kept: cursor %s has md=%s, not past %s", first.ID, c.Name, md, end)
		}
	}
	closed := first.Closed
	if closed.IsZero() {
		closed = first.Created
	}
	return fmt.Sprintf("L%d kept by retention (time %s, size %d): closed %s ago",
		first.ID, o.cfg.Retention.Time, o.cfg.Retention.Size, e.fake.now.Sub(closed))
}

// cmdRedelivery compares a cursor as a new owner restored it with the cursor
// the previous owner had in memory: which entries the previous owner's
// consumers had acknowledged and the new owner will deliver again, and
// whether the new owner counts anything as acknowledged that was not.
func (e *scriptEnv) cmdRedelivery(d *datadriven.TestData) {
	name := e.argString(d, "cursor", "")
	from := e.owners[e.argString(d, "from", "")]
	to := e.owners[e.argString(d, "to", "")]
	if from == nil || to == nil {
		e.scriptFail("redelivery wants from= and to= owners")
	}
	cf, ct := e.mustCursor(from, name), e.mustCursor(to, name)
	ranges := slices.Collect(cf.AckedRanges())
	limit := cf.MaxRangesToPersist()
	var beyond RangeSet
	for _, r := range ranges[min(limit, len(ranges)):] {
		beyond.Add(r)
	}
	var redelivered, redeliveredRuns, beyondEntries, extra int
	exact, inRun := true, false
	for _, p := range entriesOf(from.ml.Ledgers()) {
		a, b := cf.IsAcked(p), ct.IsAcked(p)
		if b && !a {
			extra++
			e.violate("%s on %s: %s acknowledged after the takeover, never by %s", name, to.name, p, from.name)
		}
		again := a && !b
		if again {
			redelivered++
			if !inRun {
				redeliveredRuns++
			}
		}
		inRun = again
		if beyond.Contains(p) {
			beyondEntries++
		}
		if again != beyond.Contains(p) {
			exact = false
		}
	}
	e.out.line("%s on %s: md=%s, %d ranges (%d beyond the %d persisted, holding %d entries)",
		name, from.name, cf.MarkDelete(), len(ranges), max(0, len(ranges)-limit), limit, beyondEntries)
	e.out.line("%s on %s: md=%s, %d ranges", name, to.name, ct.MarkDelete(), ct.Holes())
	e.out.line("%s redelivers %d entries %s had acknowledged, in %d runs", to.name, redelivered, from.name, redeliveredRuns)
	if exact {
		e.out.line("exactly the entries of the ranges beyond the persisted limit: yes")
	} else {
		e.out.line("exactly the entries of the ranges beyond the persisted limit: no")
	}
	e.out.line("acknowledged on %s but not on %s: %d", to.name, from.name, extra)
}

// checkDelete checks a ledger delete before it happens: a topic ledger must
// be off the stored list and wholly acknowledged on every cursor of the
// owner deleting it; no ledger may be one a cursor pointer names.
func (e *scriptEnv) checkDelete(op scriptOp) {
	id := op.ledger.Ledger
	if kv, ok := e.fake.store[Key("t")]; ok {
		if rec, err := unmarshalRecord(kv.value); err == nil && slices.Contains(ledgerIDs(rec.Ledgers), id) {
			e.violate("%s deletes L%d, still on the stored ledger list", op.owner.name, id)
		}
	}
	for k, kv := range e.fake.store {
		if p, ok := DecodeCursorPointer(kv.value); ok && p.Ledger == id && strings.HasPrefix(k, CursorKey("t", "")) {
			e.violate("%s deletes L%d, which %s names", op.owner.name, id, keyName(k))
		}
	}
	l := e.fake.ledgers[id]
	if op.cursor != "" || l == nil || len(l.entries) == 0 {
		return
	}
	last := Position{id, int64(len(l.entries) - 1)}
	for _, c := range op.owner.ml.Stats().Cursors {
		cur, _ := op.owner.ml.Cursor(c.Name)
		if !cur.IsAcked(last) {
			e.violate("%s deletes L%d with %s unacknowledged on %s (md=%s)", op.owner.name, id, last, c.Name, c.MarkDelete)
		}
	}
}

// checkInvariants checks, after every command, what the core promises.
func (e *scriptEnv) checkInvariants() {
	var rec Record
	if kv, ok := e.fake.store[Key("t")]; ok {
		var err error
		if rec, err = unmarshalRecord(kv.value); err != nil {
			e.violate("stored record: %v", err)
		}
		for i, l := range rec.Ledgers {
			if i < len(rec.Ledgers)-1 && l.Closed.IsZero() {
				e.violate("stored record: L%d is not the last ledger but is open", l.ID)
			}
		}
	}
	recorded := map[int64]LedgerInfo{}
	for _, l := range rec.Ledgers {
		recorded[l.ID] = l
	}
	for _, o := range e.order {
		if !increasing(ledgerIDs(o.ml.Ledgers())) {
			e.violate("%s: ledger ids not increasing: %v", o.name, ledgerIDs(o.ml.Ledgers()))
		}
		var prev Position
		havePrev := false
		for _, tok := range o.sent {
			a, ok := o.acks[tok]
			if !ok || a.Err != nil {
				continue
			}
			if havePrev && !prev.Less(a.Pos) {
				e.violate("%s: %s acknowledged at %s, not after %s", o.name, tokenName(tok), a.Pos, prev)
			}
			prev, havePrev = a.Pos, true
			if l := e.fake.ledgers[a.Pos.LedgerID]; l != nil {
				if a.Pos.EntryID >= int64(len(l.entries)) || string(l.entries[a.Pos.EntryID]) != tokenName(tok) {
					e.violate("%s: acknowledged %s is not at %s", o.name, tokenName(tok), a.Pos)
				}
			}
			if info, ok := recorded[a.Pos.LedgerID]; ok && !info.Closed.IsZero() && a.Pos.EntryID >= info.Entries {
				e.violate("%s: acknowledged %s at %s lies past L%d's recorded end (%d entries)", o.name, tokenName(tok), a.Pos, info.ID, info.Entries)
			}
		}
		if o.crashed {
			continue
		}
		for _, c := range o.ml.Stats().Cursors {
			if before, ok := o.lastMarkDelete[c.Name]; ok && c.MarkDelete.Less(before) {
				e.violate("%s: cursor %s mark-delete moved back from %s to %s", o.name, c.Name, before, c.MarkDelete)
			}
			o.lastMarkDelete[c.Name] = c.MarkDelete
		}
		for _, v := range coreInvariants(o.ml) {
			e.violate("%s: core: %s", o.name, v)
		}
		for _, c := range o.ml.Stats().Cursors {
			cur, _ := o.ml.Cursor(c.Name)
			for _, v := range coreInvariants(cur) {
				e.violate("%s: cursor %s: %s", o.name, c.Name, v)
			}
		}
	}
}

func increasing(ids []int64) bool {
	for i := 1; i < len(ids); i++ {
		if ids[i] <= ids[i-1] {
			return false
		}
	}
	return true
}

// coreInvariants runs a state machine's own invariant check (ManagedLedger,
// Cursor), whichever form it has: a panic or a returned error names the
// broken invariant; no such method, nothing to run.
func coreInvariants(sm any) (broken []string) {
	switch c := sm.(type) {
	case interface{ checkInvariants() error }:
		if err := c.checkInvariants(); err != nil {
			broken = append(broken, err.Error())
		}
	case interface{ checkInvariants() []string }:
		broken = c.checkInvariants()
	case interface{ checkInvariants() []error }:
		for _, err := range c.checkInvariants() {
			broken = append(broken, err.Error())
		}
	case interface{ checkInvariants() }:
		defer func() {
			if r := recover(); r != nil {
				broken = append(broken, fmt.Sprint(r))
			}
		}()
		c.checkInvariants()
	}
	return broken
}
