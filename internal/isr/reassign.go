package isr

import (
	"fmt"
	"slices"
	"time"

	"quire/internal/invariants"
)

// Partition reassignment (KIP-455), the controller's side.
//
// A reassignment moves a partition from its original replicas O to a
// target T in three steps, each one CAS-written record:
//
//  1. start: Replicas = T followed by O−T, AddingReplicas = T−O,
//     RemovingReplicas = O−T; the ISR, ELR and leader are unchanged. The
//     adding replicas open the partition and fetch from the leader, which
//     tracks them like any follower; they are not in the ISR, and no
//     election takes them (elect) until the leader has proposed them into
//     it, as Kafka's leader does for any follower that caught up.
//  2. catch-up: the leader's AlterPartition proposals add them to the ISR.
//  3. complete, in the reconcile after the last adding replica joined (and
//     with enough of T in sync: completeReassignment): Replicas = T, the
//     removing replicas leave the ISR, ELR and LastKnownELR, both lists
//     empty; a leader outside T is replaced by an election among T's
//     members of the ISR, and a leader kept gets a new leader epoch all
//     the same (it fences the removed replicas' fetches still in flight).
//     A reassignment that adds nothing completes in the start's own write.
//
// The removed brokers learn from the record that they are no longer
// replicas (their replica stops; the broker deletes its log), and the
// record is pushed to them too (Controller.push).
//
// A reassignment asked for while another is in progress is computed from
// the original replicas O (Replicas−AddingReplicas), as KIP-455 keeps the
// original set: an adding replica the new target leaves out is dropped.
// Cancelling (a nil target) restores O: the adding replicas leave the
// replicas, ISR and ELR, and a leader among them is replaced by an
// election (Kafka's PartitionReassignmentRevert). Either is refused with
// ErrInvalidReplicaAssignment when it would leave the ISR empty (Kafka
// allows that with unclean election on; here the operator elects
// uncleanly first if they must).

// ReassignRequest asks for a partition's reassignment (Kafka's
// AlterPartitionReassignments, one partition).
type ReassignRequest struct {
	Partition string `json:"partition"`
	// Target is the new replica list, Target[0] the preferred leader; nil
	// cancels the reassignment in progress (JSON null; an empty list is a
	// target, refused).
	Target []BrokerID `json:"target"`
	// KeepReplicationFactor refuses a target whose size differs from the
	// replica set the partition is headed for (KIP-860's
	// allow_replication_factor_change = false):
	// ErrInvalidReplicationFactor.
	KeepReplicationFactor bool `json:"keepReplicationFactor,omitempty"`
}

func (r ReassignRequest) String() string {
	if r.Target == nil {
		return "cancel"
	}
	return fmt.Sprintf("target=%v", r.Target)
}

// Reassign starts, replaces or cancels a partition's reassignment. It
// checks the request against the committed record and returns
// ErrUnknownPartition, ErrInvalidReplicaAssignment (an empty target, a
// broker twice, a broker the controller has never seen registered and
// that is not a replica, or a change that would empty the ISR),
// ErrInvalidReplicationFactor (KeepReplicationFactor) or
// ErrNoReassignmentInProgress (a cancel of nothing); otherwise the change
// is the next reconcile's write (the record shows it once committed). A
// later request for the same partition replaces one not yet written.
func (c *Controller) Reassign(req ReassignRequest, now time.Time) error {
	c.input(now)
	if invariants.Enabled {
		defer c.checkInvariants()
	}
	if c.deposed {
		return ErrNotController
	}
	p := c.parts[req.Partition]
	if p == nil || !p.exists || p.deleting {
		return fmt.Errorf("reassign %s: %w", req.Partition, ErrUnknownPartition)
	}
	if req.Target == nil && p.reassign != nil && p.reassign.Target != nil && !p.state.Reassigning() {
		// A start not written yet: cancelling it leaves nothing to undo.
		p.reassign = nil
		return nil
	}
	if _, err := c.reassigned(p.state, req); err != nil {
		return fmt.Errorf("reassign %s (%s): %w", req.Partition, req, err)
	}
	r := req
	r.Target = slices.Clone(req.Target)
	p.reassign = &r
	c.reconcile(p)
	return nil
}

// reassigned returns s with req applied (the start, replacement or cancel
// of a reassignment), or why it cannot be. It elects nobody: a leader
// that is no longer in the ISR is the reconcile's to replace.
func (c *Controller) reassigned(s PartitionState, req ReassignRequest) (PartitionState, error) {
	s = s.Clone()
	original := s.OriginalReplicas()
	var replicas []BrokerID
	if req.Target == nil {
		if !s.Reassigning() {
			return s, ErrNoReassignmentInProgress
		}
		replicas = original
		s.AddingReplicas, s.RemovingReplicas = nil, nil
	} else {
		if len(req.Target) == 0 {
			return s, fmt.Errorf("%w: no replicas", ErrInvalidReplicaAssignment)
		}
		for i, id := range req.Target {
			if slices.Contains(req.Target[:i], id) {
				return s, fmt.Errorf("%w: broker %d twice", ErrInvalidReplicaAssignment, id)
			}
			if _, known := c.brokers[id]; !known && !slices.Contains(s.Replicas, id) {
				return s, fmt.Errorf("%w: broker %d is not registered", ErrInvalidReplicaAssignment, id)
			}
		}
		if rf := len(s.TargetReplicas()); req.KeepReplicationFactor && len(req.Target) != rf {
			return s, fmt.Errorf("%w: the replication factor would change from %d to %d", ErrInvalidReplicationFactor, rf, len(req.Target))
		}
		s.AddingReplicas = without(req.Target, original)
		s.RemovingReplicas = without(original, req.Target)
		replicas = append(slices.Clone(req.Target), s.RemovingReplicas...)
		if len(s.AddingReplicas) == 0 {
			s.AddingReplicas = nil
		}
		if len(s.RemovingReplicas) == 0 {
			s.RemovingReplicas = nil
		}
	}
	// Replicas of the record that the new set drops (an earlier
	// reassignment's adding replicas) leave every set they are in.
	dropped := without(s.Replicas, replicas)
	isr := keepMembers(s.ISR, replicas)
	if len(isr) == 0 && len(s.ISR) > 0 {
		return s, fmt.Errorf("%w: every in-sync replica %v would be dropped", ErrInvalidReplicaAssignment, s.ISRIDs())
	}
	s.Replicas = replicas
	s.ISR = sortMembers(isr, replicas)
	s.ELR = nilIfEmpty(sortMembers(keepMembers(s.ELR, replicas), replicas))
	s.LastKnownELR = nilIfEmpty(without(s.LastKnownELR, dropped))
	slices.SortFunc(s.LastKnownELR, func(a, b BrokerID) int { return slices.Index(replicas, a) - slices.Index(replicas, b) })
	return s, nil
}

// completeReassignment completes s's reassignment in place when every
// adding replica is in the ISR and enough in-sync replicas remain in the
// target, and reports whether it did. A leader outside the target then
// leaves the ISR with the removing replicas: the reconcile elects another.
//
// Kafka's maybeCompleteReassignment asks only for one in-sync replica of
// the target. Here completion also never takes the ISR below
// min.insync.replicas (nor below the target's size, nor below what the ISR
// already was): the removing replicas delete their logs, so a completion
// that left fewer in-sync copies than acks=all promised would leave
// acknowledged records on fewer brokers than the producer was told. Such a
// reassignment waits for more of its target to be in sync.
func (c *Controller) completeReassignment(s *PartitionState) bool {
	if !s.Reassigning() {
		return false
	}
	for _, id := range s.AddingReplicas {
		if !s.InISR(id) {
			return false
		}
	}
	target := s.TargetReplicas()
	isr := keepMembers(s.ISR, target)
	if len(isr) == 0 || len(isr) < c.completionQuorum(*s, len(s.ISR)) {
		return false
	}
	s.Replicas, s.ISR = target, isr
	s.ELR = nilIfEmpty(keepMembers(s.ELR, target))
	s.LastKnownELR = nilIfEmpty(without(s.LastKnownELR, s.RemovingReplicas))
	s.AddingReplicas, s.RemovingReplicas = nil, nil
	return true
}

// completionQuorum is how many in-sync replicas of its target a
// reassignment of s needs to complete when isr replicas are in sync now:
// min.insync.replicas, but no more than the target has or the ISR already
// holds.
func (c *Controller) completionQuorum(s PartitionState, isr int) int {
	return min(s.Config.MinISROr(c.cfg.MinISR), len(s.TargetReplicas()), isr)
}

// keepMembers returns the members whose broker is in ids.
func keepMembers(ms []Member, ids []BrokerID) []Member {
	out := make([]Member, 0, len(ms))
	for _, m := range ms {
		if slices.Contains(ids, m.ID) {
			out = append(out, m)
		}
	}
	return out
}

func nilIfEmpty[T any](s []T) []T {
	if len(s) == 0 {
		return nil
	}
	return s
}
