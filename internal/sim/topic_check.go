package sim

import (
	"bytes"
	"fmt"
	"slices"

	"quire/internal/mlog"
)

// onRecordWritten runs on every successful write of the topic record.
// Checker 3: ledgers leave the list only from its front (trimming), and
// only when every cursor's consumer acknowledged all their entries and
// retention no longer keeps them — recomputed here from the consumers'
// acknowledgements and the retention policy, not by the core's
// TrimCandidates. Then checker 1 over the new list.
func (s *topicSim) onRecordWritten(o *topicOwner, prev, next mlog.Record) {
	inNext := map[int64]bool{}
	for _, l := range next.Ledgers {
		inNext[l.ID] = true
		if ml := s.ledgers.byID[l.Stored()]; ml != nil {
			ml.listed = true
		}
	}
	if s.sc.compact {
		// No cursors, no retention: ledgers leave the list only by a
		// compaction swap, which the compaction checker judges.
		s.rec, s.hasRec = next, true
		s.checkCompacted()
		s.compactionLeft(prev, next)
		return
	}
	for i, l := range prev.Ledgers {
		if inNext[l.ID] {
			continue
		}
		if s.trimAllowed(o, prev, i) {
			s.legitTrimmed[l.ID] = true
			s.stats.TrimmedLedgers++
		}
	}
	s.rec, s.hasRec = next, true
	s.checkAckedReadable()
}

// trimAllowed checks that prev.Ledgers[i] may leave the list now.
func (s *topicSim) trimAllowed(o *topicOwner, prev mlog.Record, i int) bool {
	ls := prev.Ledgers
	info := ls[i]
	if i == len(ls)-1 {
		s.violate(kindTopicEarlyDelete, "%s removed the current ledger L%d from the list", o.name, info.ID)
		return false
	}
	if ok, why := s.consumedByAll(prev.Cursors, info); !ok {
		s.violate(kindTopicEarlyDelete, "%s removed L%d from the list but %s", o.name, info.ID, why)
		return false
	}
	// Retention: expired by time, or the acknowledged ledgers kept from
	// this one on exceed the size limit.
	ret := s.sc.retention
	closed := info.Closed
	if closed.IsZero() {
		closed = info.Created
	}
	expired := ret.Time >= 0 && s.now().Sub(closed) >= ret.Time
	var kept int64
	for j := i; j < len(ls)-1; j++ {
		if ok, _ := s.consumedByAll(prev.Cursors, ls[j]); !ok {
			break
		}
		kept += ls[j].Size
	}
	overSize := ret.Size >= 0 && kept > ret.Size
	if !expired && !overSize {
		s.violate(kindTopicEarlyDelete, "%s trimmed L%d, which retention keeps (closed %v ago, retention time %v; %d bytes kept, retention size %d)",
			o.name, info.ID, s.now().Sub(closed), ret.Time, kept, ret.Size)
		return false
	}
	return true
}

// consumedByAll reports whether every cursor's consumer acknowledged every
// entry of the ledger (the entries the ledger service holds, which may be
// more than the record says).
func (s *topicSim) consumedByAll(cursors []string, info mlog.LedgerInfo) (bool, string) {
	n := info.Entries
	if ml := s.ledgers.byID[info.ID]; ml != nil && !ml.gone {
		n = max(n, int64(len(ml.entries)))
	}
	for _, name := range cursors {
		if s.consumerAcks[name] == nil {
			continue
		}
		for e := int64(0); e < n; e++ {
			if p := (mlog.Position{LedgerID: info.ID, EntryID: e}); !s.consumed(name, p) {
				return false, fmt.Sprintf("%s never acknowledged %s", name, p)
			}
		}
	}
	return true, ""
}

// violateOnce is violate for checks that may be asked twice about the same thing.
func (s *topicSim) violateOnce(kind, format string, args ...any) {
	if slices.Contains(s.violations, kind+": "+fmt.Sprintf(format, args...)) {
		return
	}
	s.violate(kind, format, args...)
}

// checkDelete is checker 3 at the ledger service: a ledger that was ever on
// the list is deleted only after a legitimate trim removed it; one that was
// never listed must hold no acknowledged message.
func (s *topicSim) checkDelete(o *topicOwner, l *modelLedger) {
	if s.hasRec {
		for _, info := range s.rec.Ledgers {
			if info.Stored() == l.id {
				s.violate(kindTopicEarlyDelete, "%s deletes L%d, which the topic record still lists", o.name, l.id)
				return
			}
		}
	}
	if l.listed && !s.legitTrimmed[l.id] {
		s.violate(kindTopicEarlyDelete, "%s deletes L%d, which left the list without a legitimate trim", o.name, l.id)
		return
	}
	if !l.listed {
		for _, tok := range s.ackOrder {
			if p := s.acked[tok]; p.LedgerID == l.id {
				s.violate(kindTopicAckedLost, "%s deletes L%d, never listed, holding acknowledged m%d at %s", o.name, l.id, tok, p)
				return
			}
		}
	}
}

// checkAckedReadable is checker 1: every append acknowledged to a producer
// is readable from the ledgers the topic record lists (within the recorded
// entry count of a closed ledger), unless a legitimate trim removed it.
func (s *topicSim) checkAckedReadable() {
	if s.sc.compact {
		s.checkCompacted()
		return
	}
	if !s.hasRec {
		return
	}
	idx := map[int64]int{}
	for i, info := range s.rec.Ledgers {
		idx[info.ID] = i
	}
	for _, tok := range s.ackOrder {
		p := s.acked[tok]
		i, listed := idx[p.LedgerID]
		if !listed {
			if !s.legitTrimmed[p.LedgerID] {
				s.violateOnce(kindTopicAckedLost, "m%d acknowledged at %s: ledger L%d is not on the list %s and was not trimmed legitimately",
					tok, p, p.LedgerID, describeInfos(s.rec.Ledgers))
				return
			}
			continue
		}
		info := s.rec.Ledgers[i]
		if i < len(s.rec.Ledgers)-1 && p.EntryID >= info.Entries {
			s.violateOnce(kindTopicAckedLost, "m%d acknowledged at %s but the record closes L%d at %d entries: %s",
				tok, p, info.ID, info.Entries, describeInfos(s.rec.Ledgers))
			return
		}
		if got, ok := s.ledgers.entry(p); !ok || !bytes.Equal(got, s.payloads[tok]) {
			s.violateOnce(kindTopicAckedLost, "m%d acknowledged at %s is not readable from listed L%d (present=%v)", tok, p, info.ID, ok)
			return
		}
	}
}

// checkTakeover is checker 2, when a new owner's Open completed: for each
// cursor, a message no consumer acknowledged is unacked in the new owner
// (it will be redelivered), and one whose acknowledgement was in the cursor
// record the new owner loaded is not redelivered.
func (s *topicSim) checkTakeover(o *topicOwner) {
	infos := o.tp.Ledgers()
	for _, name := range s.cursorName {
		cur, ok := o.tp.Cursor(name)
		if !ok {
			s.violate(kindTopicUnackedLost, "%s opened without cursor %s, persisted at set-up", o.name, name)
			continue
		}
		var persisted *mlog.Cursor
		if data := o.loaded[name]; data != nil {
			c, err := mlog.Restore(data, mlog.CursorOptions{MaxRangesToPersist: 1 << 20})
			if err != nil {
				s.violate(kindSimError, "cursor record %s does not decode: %v", name, err)
				continue
			}
			persisted = c
		}
		lost := 0
		for _, info := range infos {
			for e := int64(0); e < info.Entries; e++ {
				p := mlog.Position{LedgerID: info.ID, EntryID: e}
				byConsumer, byOwner := s.consumed(name, p), cur.IsAcked(p)
				switch {
				case !byConsumer && byOwner:
					s.violateOnce(kindTopicUnackedLost, "%s treats %s as acknowledged on %s, which its consumer never acknowledged", o.name, p, name)
					return
				case byConsumer && !byOwner && persisted != nil && persisted.IsAcked(p):
					s.violateOnce(kindTopicRedelivery, "%s redelivers %s on %s although the cursor record it loaded had it acknowledged", o.name, p, name)
					return
				case byConsumer && !byOwner:
					lost++
				}
			}
		}
		s.stats.Redelivered += lost
		s.e.tracef("CHECK", "takeover by %s: cursor %s at %s, %d holes, %d acknowledged messages redelivered", o.name, name, cur.MarkDelete(), cur.Holes(), lost)
	}
}

// finalChecks run when the run ends.
func (s *topicSim) finalChecks() {
	if rec, ok := s.metaStore.record(); ok {
		s.rec, s.hasRec = rec, true
		// A compacted ledger cut short is garbage the next owner deletes.
		for _, id := range rec.Garbage {
			if l := s.ledgers.byID[id]; l != nil && !l.gone && s.latest.alive && s.latest.tp.Phase() == "open" {
				s.stats.GarbageLeft++
			}
		}
	}
	s.checkAckedReadable()
}

// onCursorWritten is checker 2 at every cursor write: the record holds at
// most MaxRangesToPersist ranges, and every position it marks acknowledged
// (within the listed ledgers) was acknowledged by that cursor's consumer.
func (s *topicSim) onCursorWritten(o *topicOwner, name string, data []byte) {
	c, err := mlog.Restore(data, mlog.CursorOptions{MaxRangesToPersist: 1 << 20})
	if err != nil {
		s.violate(kindSimError, "%s wrote cursor %s that does not decode: %v", o.name, name, err)
		return
	}
	if c.Holes() > s.sc.maxRanges {
		s.violate(kindTopicCursorLimit, "%s persisted %d ranges for %s, the limit is %d", o.name, c.Holes(), name, s.sc.maxRanges)
	}
	if s.consumerAcks[name] == nil || !s.hasRec {
		return
	}
	for _, info := range s.rec.Ledgers {
		n := info.Entries
		if ml := s.ledgers.byID[info.ID]; ml != nil && !ml.gone {
			n = max(n, int64(len(ml.entries)))
		}
		for e := int64(0); e < n; e++ {
			if p := (mlog.Position{LedgerID: info.ID, EntryID: e}); c.IsAcked(p) && !s.consumed(name, p) {
				s.violateOnce(kindTopicUnackedLost, "%s persisted cursor %s with %s acknowledged, which its consumer never acknowledged", o.name, name, p)
				return
			}
		}
	}
	s.e.tracef("CHECK", "cursor %s persisted by %s: mark-delete %s, %d ranges", name, o.name, c.MarkDelete(), c.Holes())
}

// consumed reports whether cursor name may treat p as acknowledged: its
// consumer acknowledged it, or message TTL may have expired it (p was
// written to its ledger at least TTL ago; the core's publish-time bounds
// are never earlier than that).
func (s *topicSim) consumed(name string, p mlog.Position) bool {
	if cm := s.consumerAcks[name]; cm != nil && cm.acked(p) {
		return true
	}
	if s.sc.ttl <= 0 {
		return false
	}
	l := s.ledgers.byID[p.LedgerID]
	if l == nil || p.EntryID < 0 || p.EntryID >= int64(len(l.entries)) {
		return false
	}
	return l.entries[p.EntryID].written <= s.e.now-s.sc.ttl
}
