package isr

import (
	"slices"
	"sort"

	"quire/internal/invariants"
)

// checkInvariants panics, naming the invariant and its values, if the
// replica's state breaks what must hold after every input. It runs at the
// end of every input under -tags invariants.
func (r *Replica) checkInvariants() {
	leo := r.log.EndOffset()
	if r.hw < 0 || r.hw > leo {
		r.violated("0 <= HW <= LEO: HW(%d) LEO(%d)", r.hw, leo)
	}
	if r.haveState {
		if err := r.state.Validate(); err != nil {
			r.violated("the applied record is valid: %v", err)
		}
		if old := r.stateChecked; old.Partition != "" && old.Newer(r.state) {
			r.violated("leader and partition epochs never decrease: record le=%d pe=%d after le=%d pe=%d",
				r.state.LeaderEpoch, r.state.PartitionEpoch, old.LeaderEpoch, old.PartitionEpoch)
		}
		r.stateChecked = r.state
	}
	if latest := r.log.LatestEpoch(); r.haveState && latest > r.state.LeaderEpoch && !r.cfg.Mutants.NoEpochFencing {
		r.violated("the log holds no epoch newer than the record's: log epoch %d, leader epoch %d", latest, r.state.LeaderEpoch)
	}
	if r.role != RoleLeader {
		if r.pendingISR != nil || len(r.waiting) > 0 {
			r.violated("only a leader proposes or waits: %s with pending ISR %v and %d waiting", r.role, r.pendingISR != nil, len(r.waiting))
		}
		if r.role == RoleFollower && r.fetchInFlight == 0 && r.state.Leader != NoLeader && !r.now.Before(r.nextFetchAt) {
			r.violated("a follower with a leader fetches: none in flight, next fetch due at %v, now %v", r.nextFetchAt, r.now)
		}
		return
	}
	// Leader.
	me := r.cfg.Broker
	if r.state.Leader != me || !r.state.InISR(me) {
		r.violated("a leader leads its record and is in its ISR: leader %d, ISR %v, me %d", r.state.Leader, r.state.ISRIDs(), me)
	}
	if len(r.state.ISR) < 1 {
		r.violated("|ISR| >= 1 under a leader: ISR %v", r.state.ISRIDs())
	}
	if r.log.LatestEpoch() != r.state.LeaderEpoch {
		r.violated("a leader's log ends in its own epoch: log epoch %d, leader epoch %d", r.log.LatestEpoch(), r.state.LeaderEpoch)
	}
	if r.epochStart > leo || r.log.EndOffsetForEpoch(r.state.LeaderEpoch).EndOffset != leo {
		r.violated("a leader's epoch starts in its log: start %d, LEO(%d)", r.epochStart, leo)
	}
	// The HW never goes backwards within a leader epoch (it may start
	// lower than an earlier leader's: a new leader keeps its own).
	if r.hwCheckEpoch != r.state.LeaderEpoch {
		r.hwCheckEpoch, r.hwCheckMax = r.state.LeaderEpoch, r.hw
	}
	if r.hw < r.hwCheckMax {
		r.violated("the HW never decreases within a leader epoch: HW(%d) after %d in epoch %d", r.hw, r.hwCheckMax, r.state.LeaderEpoch)
	}
	r.hwCheckMax = r.hw
	if len(r.followers) != len(r.state.Replicas)-1 {
		r.violated("a leader tracks every other replica: %d followers, replicas %v", len(r.followers), r.state.Replicas)
	}
	for _, id := range r.state.Replicas {
		f := r.followers[id]
		if id == me || f == nil {
			continue
		}
		if f.logEndOffset > leo {
			r.violated("a follower's known LEO <= the leader's: follower %d at %d, LEO(%d)", id, f.logEndOffset, leo)
		}
	}
	prev := int64(-1)
	for _, w := range r.waiting {
		if w.base < prev || w.next > leo || w.base >= w.next {
			r.violated("waiting acks=all batches are in offset order inside the log: [%d,%d) after %d, LEO(%d)", w.base, w.next, prev, leo)
		}
		if w.next <= r.hw {
			r.violated("an acks=all batch below the HW is answered: [%d,%d), HW(%d)", w.base, w.next, r.hw)
		}
		prev = w.next
	}
	if len(r.waiting) > 0 && len(r.state.ISR) < r.minISR() {
		r.violated("no acks=all request waits while |ISR| < minISR: %d waiting, ISR %v, minISR %d", len(r.waiting), r.state.ISRIDs(), r.minISR())
	}
	if p := r.pendingISR; p != nil && (p.req.PartitionEpoch != r.state.PartitionEpoch || p.req.LeaderEpoch != r.state.LeaderEpoch) {
		r.violated("a proposal in flight is based on the current record: based on pe=%d le=%d, record pe=%d le=%d",
			p.req.PartitionEpoch, p.req.LeaderEpoch, r.state.PartitionEpoch, r.state.LeaderEpoch)
	}
}

func (r *Replica) violated(format string, args ...any) {
	invariantViolated("partition %s replica %d: "+format, append([]any{r.cfg.Partition, r.cfg.Broker}, args...)...)
}

// noteRecord remembers a committed record for the invariant checks.
func (c *Controller) noteRecord(s PartitionState) {
	if !invariants.Enabled {
		return
	}
	if c.cfg.Mutants.ISRChangeWithoutCAS {
		return // the mutant writes old epochs on purpose
	}
	if prev, ok := c.epochs[s.Partition]; ok && (s.LeaderEpoch < prev[0] || s.PartitionEpoch < prev[1]) {
		c.violated("partition and leader epochs never decrease: %s after le=%d pe=%d", s, prev[0], prev[1])
	}
	if prev, ok := c.noted[s.Partition]; ok && !c.cfg.Mutants.Any() {
		c.checkReassignmentStep(prev, s)
	}
	c.noted[s.Partition] = s.Clone()
	c.epochs[s.Partition] = [2]int32{s.LeaderEpoch, s.PartitionEpoch}
	m := c.leaders[s.Partition]
	if m == nil {
		m = map[int32]BrokerID{}
		c.leaders[s.Partition] = m
	}
	if l, ok := m[s.LeaderEpoch]; ok && l != s.Leader {
		c.violated("at most one leader per leader epoch: %s, epoch %d had leader %d", s, s.LeaderEpoch, l)
	}
	m[s.LeaderEpoch] = s.Leader
}

// checkReassignmentStep checks one committed record against the one this
// controller committed (or loaded) before it: records of one controller
// follow each other, so a reassignment's steps are seen one by one.
func (c *Controller) checkReassignmentStep(prev, s PartitionState) {
	// A reassignment completes (its target becomes the replicas) only
	// once every adding replica is in the ISR.
	if prev.Reassigning() && !s.Reassigning() && slices.Equal(s.Replicas, prev.TargetReplicas()) {
		for _, id := range prev.AddingReplicas {
			if !prev.InISR(id) || !s.InISR(id) {
				c.violated("a reassignment completes only once every adding replica is in the ISR: %s after %s (adding %d)", s, prev, id)
			}
		}
		// Nor below min.insync.replicas of in-sync replicas, counting
		// those of the previous ISR still live under their epochs (the
		// completing write drops the others anyway).
		live := 0
		for _, m := range prev.ISR {
			if b := c.brokers[m.ID]; b != nil && !b.fenced && b.epoch == m.BrokerEpoch {
				live++
			}
		}
		if need := c.completionQuorum(prev, live); len(s.ISR) < need {
			c.violated("a reassignment completes with at least min(minISR, |target|, |ISR|) = %d in sync: %s after %s", need, s, prev)
		}
	}
	// No election takes an adding replica that has not joined the ISR:
	// not the ISR's (it is not in it), not the ELR's or recovery's (only
	// former ISR members are there), not an unclean one.
	if s.Leader != NoLeader && s.LeaderEpoch != prev.LeaderEpoch && prev.Adding(s.Leader) &&
		!prev.InISR(s.Leader) && !prev.InELR(s.Leader) && !slices.Contains(prev.LastKnownELR, s.Leader) {
		c.violated("an adding replica is elected only after it joined the ISR: %s after %s", s, prev)
	}
}

// checkInvariants panics if the controller's state breaks what must hold
// after every input (under -tags invariants).
func (c *Controller) checkInvariants() {
	names := make([]string, 0, len(c.parts))
	for name := range c.parts {
		names = append(names, name)
	}
	sort.Strings(names)
	if !slices.Equal(names, c.names) {
		c.violated("names lists every partition in order: %v, partitions %v", c.names, names)
	}
	for _, name := range c.names {
		p := c.parts[name]
		if !p.exists {
			continue
		}
		s := p.state
		if err := s.Validate(); err != nil {
			c.violated("records are valid: %v", err)
		}
		if len(s.ISR) == 0 && c.cfg.DisableELR {
			c.violated("|ISR| >= 1 without ELR: %s", s)
		}
		if s.Leader != NoLeader && !s.InISR(s.Leader) {
			c.violated("the leader is in the ISR: %s", s)
		}
		if len(s.LastKnownELR) > 0 && !c.cfg.Mutants.Any() &&
			(s.Leader != NoLeader || c.cfg.DisableELR || len(s.ISR) >= s.Config.MinISROr(c.cfg.MinISR)) {
			c.violated("a last known ELR only while leaderless with |ISR| < minISR, ELR on: %s", s)
		}
		for _, id := range s.LastKnownELR {
			if s.InISR(id) || s.InELR(id) {
				c.violated("last known ELR members are outside the ISR and ELR: %s", s)
			}
		}
		if s.ControllerEpoch > c.cfg.Epoch {
			c.violated("no record of a newer controller is kept: %s, mine %d", s, c.cfg.Epoch)
		}
		if !c.cfg.Mutants.Any() && !c.deposed && !p.deleting && p.inflight == nil && p.readOp == 0 && p.retryAt.IsZero() && s.Reassigning() {
			if done := s.Clone(); c.completeReassignment(&done) {
				c.violated("a settled reassignment whose adding replicas are all in the ISR is completed: %s", s)
			}
		}
		if p.inflight != nil && p.readOp != 0 {
			c.violated("one store operation per partition: write %d and read %d of %s", p.inflight.op.ID, p.readOp, name)
		}
		if !c.cfg.Mutants.ISRChangeWithoutCAS && !c.cfg.Mutants.ElectOutOfSync && !c.deposed && p.inflight == nil && p.readOp == 0 &&
			s.Leader != NoLeader && !s.Unclean && len(s.ELR) > 0 && len(s.ISR) >= s.Config.MinISROr(c.cfg.MinISR) {
			c.violated("the ELR is empty once |ISR| >= minISR: %s", s)
		}
	}
}

func (c *Controller) violated(format string, args ...any) {
	invariantViolated("controller epoch %d: "+format, append([]any{c.cfg.Epoch}, args...)...)
}
