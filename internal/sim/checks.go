package sim

import (
	"bytes"
	"fmt"
	"sort"

	"quire/internal/ledger"
)

// checkerName is the checkers' own identity towards the models: its
// metadata reads see through outages and partitions.
const checkerName = "CHECK"

// violate records a safety violation. The trace is frozen at the first one,
// so it ends with the events that led to it.
func (s *ledgerSim) violate(kind, format string, args ...any) {
	msg := kind + ": " + fmt.Sprintf(format, args...)
	s.e.tracef("CHECK", "VIOLATION %s", msg)
	if len(s.violations) < maxViolations {
		s.violations = append(s.violations, msg)
	}
	if s.firstTrace == nil {
		s.firstTrace = s.e.trace.snapshot()
	}
}

// checkZones is checker (e): every write quorum of every fragment spans
// distinct zones (the cluster always has at least Qw zones).
func (s *ledgerSim) checkZones(md ledger.Metadata) {
	if err := ledger.ZoneRuleHolds(&md, s.zoneOf); err != nil {
		s.violate(kindZoneRule, "%v", err)
	}
}

// onMetadataWritten runs on every successful metadata CAS. Checkers (c) and
// (e): the state only moves forward (OPEN → IN_RECOVERY → CLOSED, or OPEN →
// CLOSED), a CLOSED record never changes, and placement honours zones. It
// also notes the first close by a recoverer, from which on the old writer
// may not get anything past the recovered end acknowledged.
func (s *ledgerSim) onMetadataWritten(actor string, prev ledger.Metadata, hadPrev bool, next ledger.Metadata) {
	if err := next.Validate(); err != nil {
		s.violate(kindBadMetadata, "%s wrote invalid metadata: %v", actor, err)
	}
	s.checkZones(next)
	if hadPrev {
		switch {
		case prev.State == ledger.StateClosed:
			s.violate(kindReopened, "%s rewrote the CLOSED ledger (%s) as %s", actor, describeMetadata(prev), describeMetadata(next))
		case stateRank(next.State) < stateRank(prev.State):
			s.violate(kindReopened, "%s moved the ledger back from %s to %s: %s", actor, prev.State, next.State, describeMetadata(next))
		}
	}
	if next.State == ledger.StateClosed && actor != "writer" && s.closedByRecovery == "" {
		s.closedByRecovery, s.closedLast = actor, next.LastEntryID
		s.e.tracef("CHECK", "%s closed the ledger at entry %d; writer's last in-order ack so far: %d", actor, next.LastEntryID, s.writer.lastOK)
		// The writer's acknowledgements so far must all be inside the closed ledger.
		if s.writer.lastOK > next.LastEntryID {
			s.violate(kindAckedLost, "%s closed the ledger at entry %d but the writer already had entry %d acknowledged", actor, next.LastEntryID, s.writer.lastOK)
		}
	}
}

func stateRank(st ledger.State) int {
	switch st {
	case ledger.StateOpen:
		return 0
	case ledger.StateInRecovery:
		return 1
	}
	return 2
}

// checkFenceCoverage is checker (f), run when a recovery leaves its fence
// phase: every write quorum of the last fragment must hold at least
// Qw−Qa+1 bookies whose fence is durable, so fewer than Qa could still take
// the old writer's adds and it can never again complete one. (The recovery's
// fencing reads would catch an incomplete fence later; this checks the
// protocol's own claim at the moment it makes it.)
func (s *ledgerSim) checkFenceCoverage(actor string, md ledger.Metadata) {
	if len(md.Fragments) == 0 {
		return
	}
	need := md.WriteQuorum - md.AckQuorum + 1
	ensemble := md.Fragments[len(md.Fragments)-1].Ensemble
	for start := 0; start < md.EnsembleSize; start++ {
		var fenced, open []ledger.BookieID
		for _, idx := range ledger.WriteSet(int64(start), md.EnsembleSize, md.WriteQuorum) {
			b := ensemble[idx]
			if bk := s.byID[b]; bk != nil && bk.fencedDurably(md.ID) {
				fenced = append(fenced, b)
			} else {
				open = append(open, b)
			}
		}
		if len(fenced) < need {
			s.violate(kindFenceIncomplete, "%s finished fencing but the write quorum %v has only %d durably fenced (%v), needs %d: %v could still acknowledge the old writer",
				actor, append(append([]ledger.BookieID(nil), fenced...), open...), len(fenced), fenced, need, open)
			return
		}
	}
}

// checkBookieLAC is checker (g), run whenever a bookie takes a LAC (on an
// add, a recovery add or an explicit update): a bookie's LAC promises
// readers, tailing ones and recovery alike, that every entry up to it was
// acknowledged to the writer, so it may never pass the writer's last
// acknowledged entry. (The writer's own LAC only moves with its acks; what
// this catches is a LAC sent ahead of them.)
func (s *ledgerSim) checkBookieLAC(b *bookie, ledgerID, lac int64, how string) {
	if lac > s.writer.lastOK {
		s.violate(kindLACAhead, "%s took LAC %d of ledger %d (%s) but the writer's last acknowledged entry is %d",
			b.name(), lac, ledgerID, how, s.writer.lastOK)
	}
}

// checkEntryRead is checker (b) for one entry read: it must be exactly what
// the writer added as that entry.
func (s *ledgerSim) checkEntryRead(reader string, id int64, payload []byte) {
	if id < 0 || id >= int64(len(s.payloads)) {
		s.violate(kindWrongBytes, "%s read entry %d, which the writer never added (it added %d)", reader, id, len(s.payloads))
		return
	}
	if !bytes.Equal(payload, s.payloads[id]) {
		s.violate(kindWrongBytes, "%s read entry %d as %q, the writer added %q", reader, id, payload, s.payloads[id])
	}
}

// finalChecks run once every recovery and reader finished. It returns a
// liveness note when an entry stayed unreadable although it is stored.
func (s *ledgerSim) finalChecks() (liveness string) {
	md, err := s.metaSvc.read(checkerName, s.ledgerID)
	if err != nil {
		s.violate(kindBadMetadata, "final metadata unreadable: %v", err)
		return ""
	}
	if md.State != ledger.StateClosed {
		s.violate(kindReopened, "the ledger ends %s, not CLOSED: %s", md.State, describeMetadata(md))
		return ""
	}
	last := md.LastEntryID
	s.stats.LastEntryID = last

	// (b) every recovery ended on this record's last entry.
	for _, r := range s.recoverers {
		if r.err != nil {
			continue
		}
		if r.result.State != ledger.StateClosed || r.result.LastEntryID != last {
			s.violate(kindReadersDisagree, "%s ended with %s but the ledger is %s", r.name(), describeMetadata(r.result), describeMetadata(md))
		}
	}
	// (b) readers opened the same ledger and read the same bytes.
	for _, r := range s.readers {
		if r.md.State == ledger.StateClosed && r.md.LastEntryID != last {
			s.violate(kindReadersDisagree, "%s opened the ledger with last entry %d, it ends at %d", r.name(), r.md.LastEntryID, last)
		}
	}
	// Every entry of the closed ledger is served by some reader, or durably
	// held by its write quorum (then only the reads were unlucky: liveness).
	for id := int64(0); id <= last; id++ {
		var first []byte
		seen := false
		for _, r := range s.readers {
			p, ok := r.got[id]
			if !ok {
				continue
			}
			if seen && !bytes.Equal(first, p) {
				s.violate(kindReadersDisagree, "readers disagree on entry %d", id)
			}
			first, seen = p, true
		}
		covered := false // some reader opened a ledger that reaches id
		for _, r := range s.readers {
			covered = covered || r.md.State == ledger.StateClosed && r.md.LastEntryID >= id
		}
		switch {
		case seen:
		case !s.durablyHeld(md, id):
			s.violate(kindEntryLost, "entry %d of the CLOSED ledger (last %d) has no durable copy on its write quorum %v", id, last, md.WriteQuorumBookies(id))
		case covered && liveness == "":
			liveness = fmt.Sprintf("entry %d is stored but no reader could read it in %d attempts", id, readerMaxAttempts)
		}
	}
	// (a) every acknowledged entry is in the ledger, with its bytes.
	acked := make([]int64, 0, len(s.writer.okAcks))
	for id := range s.writer.okAcks {
		acked = append(acked, id)
	}
	sort.Slice(acked, func(i, j int) bool { return acked[i] < acked[j] })
	for _, id := range acked {
		if id > last {
			s.violate(kindAckedLost, "entry %d was acknowledged to the writer but the CLOSED ledger ends at %d", id, last)
			break
		}
	}
	return liveness
}

// durablyHeld reports whether some bookie of entry id's write quorum holds
// it durably with the writer's bytes.
func (s *ledgerSim) durablyHeld(md ledger.Metadata, id int64) bool {
	for _, b := range md.WriteQuorumBookies(id) {
		bk := s.byID[b]
		if bk == nil {
			continue
		}
		data, ok := bk.durable(md.ID, id)
		if !ok {
			continue
		}
		payload, _, err := ledger.DecodeEntry(md.ID, id, data)
		if err == nil && id < int64(len(s.payloads)) && bytes.Equal(payload, s.payloads[id]) {
			return true
		}
	}
	return false
}
