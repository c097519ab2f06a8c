package isr

import (
	"fmt"
	"slices"
)

// checkImbalance is Kafka's checkAndTriggerAutoLeaderRebalance: per
// preferred broker, the share of its partitions led by someone else.
func (c *Controller) checkImbalance() {
	preferredOf := map[BrokerID][]*partition{}
	var ids []BrokerID
	for _, name := range c.names {
		p := c.parts[name]
		if !p.exists {
			continue
		}
		pref := p.state.Replicas[0]
		if _, ok := preferredOf[pref]; !ok {
			ids = append(ids, pref)
		}
		preferredOf[pref] = append(preferredOf[pref], p)
	}
	slices.Sort(ids)
	for _, id := range ids {
		ps := preferredOf[id]
		notLed := 0
		for _, p := range ps {
			if p.state.Leader != id {
				notLed++
			}
		}
		if notLed*100 <= c.cfg.ImbalancePercent*len(ps) || !c.alive(id) {
			continue
		}
		for _, p := range ps {
			if p.state.Leader != id && p.state.InISR(id) {
				p.wantPreferred = true
				c.reconcile(p)
			}
		}
	}
}

// targetELR is KIP-966's ELR for an ISR change from cur to target: empty
// once the ISR reaches min.insync.replicas; otherwise the members leaving
// the ISR join it, minus those that lost data in an unclean shutdown since
// they were admitted (Kafka's maybePopulateTargetElr).
func (c *Controller) targetELR(cur PartitionState, target []Member) []Member {
	if c.cfg.DisableELR || len(target) >= cur.Config.MinISROr(c.cfg.MinISR) {
		return nil
	}
	var elr []Member
	for _, m := range append(slices.Clone(cur.ELR), cur.ISR...) {
		if memberIndex(target, m.ID) >= 0 || memberIndex(elr, m.ID) >= 0 || c.lostSince(m.ID, m.BrokerEpoch) {
			continue
		}
		elr = append(elr, m)
	}
	return sortMembers(elr, cur.Replicas)
}

func (c *Controller) reconcileAll() {
	for _, name := range c.names {
		c.reconcile(c.parts[name])
	}
}

// reconcile brings a settled record in line with broker liveness: fenced or
// re-registered brokers leave the ISR, ELR members that lost data leave the
// ELR, a partition whose leader is gone gets one (ISR, then ELR, then —
// only if enabled — any live replica), and a wanted preferred-leader
// election happens. At most one write is started.
func (c *Controller) reconcile(p *partition) {
	if c.deposed || !p.exists || p.inflight != nil || p.readOp != 0 || !p.retryAt.IsZero() {
		return
	}
	if p.deleting {
		c.deleteRecord(p)
		return
	}
	s := p.state.Clone()
	cur := p.state
	var events []Event
	// Members of the ISR whose broker is fenced or registered again since
	// they were admitted leave it. Without ELR the last member stays: it
	// is the only candidate for a clean election when it returns.
	isr := make([]Member, 0, len(s.ISR))
	for _, m := range s.ISR {
		if b := c.brokers[m.ID]; b != nil && !b.fenced && b.epoch == m.BrokerEpoch {
			isr = append(isr, m)
		}
	}
	if len(isr) == 0 && len(s.ISR) > 0 && c.cfg.DisableELR {
		isr = s.ISR[:1:1]
		if len(s.ISR) > 1 {
			// Keep the leader if there is one, else the first.
			if i := memberIndex(s.ISR, s.Leader); i >= 0 {
				isr = []Member{s.ISR[i]}
			}
		}
	}
	if !slices.Equal(isr, s.ISR) {
		s.ELR = c.targetELR(cur, isr)
		s.ISR = isr
	}
	elr := s.ELR[:0:0]
	for _, m := range s.ELR {
		if !c.lostSince(m.ID, m.BrokerEpoch) {
			elr = append(elr, m)
		}
	}
	s.ELR = elr
	if len(s.ELR) == 0 {
		s.ELR = nil
	}
	s.LastKnownELR = c.targetLastKnownELR(cur, s)

	// A reassignment asked for, then its completion if its adding
	// replicas are all in the ISR (reassign.go). Either may take the
	// leader out of the ISR: the election below replaces it.
	var reassigning *ReassignRequest
	if req := p.reassign; req != nil {
		next, err := c.reassigned(s, *req)
		switch {
		case err != nil:
			// The record moved on since Reassign accepted it.
			p.reassign = nil
			c.event(Event{Kind: EventReassignment, Partition: s.Partition, Detail: fmt.Sprintf("%s dropped: %v", req, err)})
		default:
			s, reassigning = next, req
			what := "started"
			if req.Target == nil {
				what = "cancelled"
			}
			events = append(events, Event{Kind: EventReassignment, Partition: s.Partition,
				Detail: fmt.Sprintf("%s replicas=%v adding=%v removing=%v", what, s.Replicas, s.AddingReplicas, s.RemovingReplicas)})
		}
	}
	if c.completeReassignment(&s) {
		events = append(events, Event{Kind: EventReassignment, Partition: s.Partition, Detail: fmt.Sprintf("completed replicas=%v", s.Replicas)})
	}

	leaderOK := s.Leader != NoLeader && c.alive(s.Leader) && c.brokers[s.Leader].epoch == s.LeaderBrokerEpoch && s.InISR(s.Leader)
	switch {
	case !leaderOK:
		wasLeader, epoch := s.Leader, s.LeaderEpoch
		elected := c.elect(&s, p.wantUnclean)
		if s.Leader == NoLeader && wasLeader == NoLeader {
			// Still nobody to elect: no leader change, no new epoch.
			s.LeaderEpoch, elected = epoch, nil
		}
		events = append(events, elected...)
	case p.wantPreferred:
		pref := s.Replicas[0]
		if s.Leader != pref && c.alive(pref) && s.InISR(pref) {
			s.Leader, s.LeaderBrokerEpoch = pref, c.brokers[pref].epoch
			s.LeaderEpoch++
			events = append(events, Event{Kind: EventRebalance, Partition: s.Partition, Broker: pref, Epoch: s.LeaderEpoch})
		}
	}
	p.wantPreferred, p.wantUnclean = false, false
	removed := slices.ContainsFunc(cur.Replicas, func(id BrokerID) bool { return !slices.Contains(s.Replicas, id) })
	if removed && s.Leader != NoLeader && s.LeaderEpoch == cur.LeaderEpoch {
		// Replicas removed (a reassignment completed, replaced or
		// cancelled) under the same leader: a new leader epoch all the
		// same, as Kafka's PartitionChangeBuilder bumps it when the
		// replicas are no longer a superset. A removed replica's fetches
		// still in flight carry the old epoch and are fenced; without it
		// such a fetch, reaching the leader after the broker was added
		// back with an empty log, would count as the new replica's
		// progress and could put it in the ISR.
		s.LeaderEpoch++
		events = append(events, Event{Kind: EventElected, Partition: s.Partition, Broker: s.Leader, Epoch: s.LeaderEpoch,
			Detail: "kept: replicas removed, a new leader epoch fences them"})
	}
	if s.Leader != NoLeader {
		// A leader holds every committed record: nobody else is needed to
		// recover them.
		s.LastKnownELR = nil
	}
	if s.SameContent(p.state) {
		if reassigning != nil {
			p.reassign = nil // nothing to change: the record is the target already
		}
		return
	}
	if s.Leader != NoLeader {
		if i := memberIndex(s.ISR, s.Leader); i >= 0 {
			s.ISR[i].BrokerEpoch = s.LeaderBrokerEpoch // the leader's current registration
		}
	}
	s.PartitionEpoch++
	if err := s.Validate(); err != nil {
		panic(fmt.Sprintf("isr: controller built an invalid record %s: %v", s, err))
	}
	c.write(p, s, nil, events)
	p.inflight.reassign = reassigning
}

// targetLastKnownELR is the LastKnownELR once cur's ISR and ELR became
// next's: members that left them because they came back from an unclean
// shutdown join it while the ISR is below min.insync.replicas (they were,
// with the ELR, the replicas known to hold every committed record); it is
// cleared once the ISR reaches min.insync.replicas, and whenever the
// partition has a leader (reconcile).
func (c *Controller) targetLastKnownELR(cur, next PartitionState) []BrokerID {
	if c.cfg.DisableELR || len(next.ISR) >= cur.Config.MinISROr(c.cfg.MinISR) {
		return nil
	}
	known := slices.Clone(cur.LastKnownELR)
	for _, m := range append(slices.Clone(cur.ISR), cur.ELR...) {
		if next.InISR(m.ID) || next.InELR(m.ID) || slices.Contains(known, m.ID) || !c.lostSince(m.ID, m.BrokerEpoch) {
			continue
		}
		known = append(known, m.ID)
	}
	if len(known) == 0 {
		return nil
	}
	slices.SortFunc(known, func(a, b BrokerID) int { return slices.Index(cur.Replicas, a) - slices.Index(cur.Replicas, b) })
	return known
}

// recoveryCandidate is KIP-966's unclean recovery for a partition whose
// ISR and ELR are empty: the member of its LastKnownELR with the longest
// log (Registration.LogEnds; ties go to the earlier replica in the
// assignment), once every member is registered (Balanced) or among those
// registered now (Aggressive). NoLeader when there is none yet; the string
// says why, or what was chosen.
func (c *Controller) recoveryCandidate(s PartitionState) (BrokerID, string) {
	strategy := c.cfg.UncleanRecovery
	if c.cfg.DisableELR || strategy == RecoveryNone || len(s.ISR) > 0 || len(s.ELR) > 0 || len(s.LastKnownELR) == 0 {
		return NoLeader, ""
	}
	best, bestEnd := NoLeader, ReplicaLogEnd{}
	for _, id := range s.LastKnownELR {
		if !c.alive(id) {
			if strategy == RecoveryBalanced {
				return NoLeader, fmt.Sprintf("unclean recovery (balanced) waits for replica %d of the last known ELR %v", id, s.LastKnownELR)
			}
			continue
		}
		end, ok := c.brokers[id].logEnds[s.Partition]
		if !ok {
			// It registered no log for the partition: an empty one.
			end = ReplicaLogEnd{Partition: s.Partition, LastEpoch: NoEpoch}
		}
		if best == NoLeader || end.Longer(bestEnd) {
			best, bestEnd = id, end
		}
	}
	if best == NoLeader {
		return NoLeader, ""
	}
	return best, fmt.Sprintf("unclean recovery (%s): the longest log of the last known ELR %v (last epoch %d, end offset %d)",
		strategy, s.LastKnownELR, bestEnd.LastEpoch, bestEnd.EndOffset)
}

// elect chooses a leader for s in place and returns what to report;
// forceUnclean allows an unclean election whatever the partition's
// setting (an operator's ElectLeaders).
func (c *Controller) elect(s *PartitionState, forceUnclean bool) []Event {
	s.LeaderEpoch++
	s.Leader, s.LeaderBrokerEpoch = NoLeader, 0
	pick := func(ok func(BrokerID) bool) BrokerID {
		for _, id := range s.Replicas {
			if c.alive(id) && ok(id) {
				return id
			}
		}
		return NoLeader
	}
	var how string
	var id BrokerID
	if c.cfg.Mutants.ElectOutOfSync {
		id, how = pick(func(BrokerID) bool { return true }), "isr"
	} else {
		id, how = pick(s.InISR), "isr"
	}
	if id == NoLeader && !c.cfg.DisableELR {
		id, how = pick(func(r BrokerID) bool {
			i := memberIndex(s.ELR, r)
			return i >= 0 && !c.lostSince(r, s.ELR[i].BrokerEpoch)
		}), "elr"
	}
	var recovery string
	if id == NoLeader {
		// Before unclean election, as Kafka's electAnyLeader tries its last
		// known leader first: the longest log of the last known ELR loses
		// less than the first live replica.
		id, recovery = c.recoveryCandidate(*s)
		how = "recovery"
	}
	if id == NoLeader && (forceUnclean || s.Config.UncleanElectionOr(c.cfg.UncleanElection)) {
		// Even uncleanly, never a reassignment's adding replica that has
		// not joined the ISR: it holds less than any original replica.
		id, how = pick(func(r BrokerID) bool { return !s.Adding(r) }), "unclean"
	}
	if id == NoLeader {
		detail := "no eligible replica: offline"
		if recovery != "" {
			detail += "; " + recovery
		}
		return []Event{{Kind: EventElected, Partition: s.Partition, Broker: NoLeader, Epoch: s.LeaderEpoch, Detail: detail}}
	}
	s.Leader, s.LeaderBrokerEpoch = id, c.brokers[id].epoch
	me := Member{ID: id, BrokerEpoch: s.LeaderBrokerEpoch}
	s.LastKnownELR = nil
	switch {
	case how == "recovery":
		s.ISR, s.ELR, s.Unclean = []Member{me}, nil, true
		return []Event{{Kind: EventUncleanElection, Partition: s.Partition, Broker: id, Epoch: s.LeaderEpoch, Detail: recovery}}
	case how == "elr":
		// The ELR member becomes the ISR (KIP-966); the ELR keeps the rest
		// while the ISR stays below min.insync.replicas.
		s.ISR = []Member{me}
		s.ELR = withoutMember(s.ELR, id)
		if len(s.ISR) >= s.Config.MinISROr(c.cfg.MinISR) || len(s.ELR) == 0 {
			s.ELR = nil
		}
	case how == "unclean":
		s.ISR, s.ELR, s.Unclean = []Member{me}, nil, true
		return []Event{{Kind: EventUncleanElection, Partition: s.Partition, Broker: id, Epoch: s.LeaderEpoch, Detail: "data loss possible"}}
	case !s.InISR(id):
		// Only the elect-out-of-sync mutant elects outside the ISR "cleanly".
		s.ISR = sortMembers(append(s.ISR, me), s.Replicas)
		s.ELR = withoutMember(s.ELR, id)
	}
	s.Unclean = false
	return []Event{{Kind: EventElected, Partition: s.Partition, Broker: id, Epoch: s.LeaderEpoch, Detail: how}}
}
