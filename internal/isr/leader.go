package isr

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"quire/internal/invariants"
)

// Fetch answers a fetch request, from a follower (ReplicaID ≥ 0) or a
// consumer. A follower's fetch moves what the leader knows of it (its LEO
// and last caught-up time), which may advance the HW and expand the ISR. The
// answer comes out of Ready.
func (r *Replica) Fetch(req FetchRequest, now time.Time) {
	r.input(now)
	if invariants.Enabled {
		defer r.checkInvariants()
	}
	// A follower whose next fetch fell due while time moved through
	// another input sends it now (runs before the invariant check).
	defer r.maybeFetch()
	resp := r.fetch(req)
	resp.ID, resp.Partition, resp.From, resp.ReplicaID, resp.Client = req.ID, r.cfg.Partition, r.cfg.Broker, req.ReplicaID, req.Client
	resp.LeaderEpoch, resp.HighWatermark, resp.LogEndOffset = r.LeaderEpoch(), r.hw, r.log.EndOffset()
	r.ready.FetchResponses = append(r.ready.FetchResponses, resp)
}

func (r *Replica) fetch(req FetchRequest) FetchResponse {
	if req.Partition != r.cfg.Partition {
		return FetchResponse{Err: ErrUnknownPartition}
	}
	if r.role != RoleLeader {
		return FetchResponse{Err: ErrNotLeaderOrFollower}
	}
	// KIP-320: a request of another leader epoch is refused, so a follower
	// or consumer with a stale view cannot be served by, or feed, the wrong
	// leader. NoEpoch (an old client) skips the check.
	if req.CurrentLeaderEpoch != NoEpoch && !r.cfg.Mutants.NoEpochFencing {
		switch {
		case req.CurrentLeaderEpoch < r.state.LeaderEpoch:
			return FetchResponse{Err: ErrFencedLeaderEpoch}
		case req.CurrentLeaderEpoch > r.state.LeaderEpoch:
			return FetchResponse{Err: ErrUnknownLeaderEpoch}
		}
	}
	maxBatches := req.MaxBatches
	if maxBatches <= 0 || maxBatches > r.cfg.FetchMaxBatches {
		maxBatches = r.cfg.FetchMaxBatches
	}
	if req.ReplicaID < 0 {
		return r.consumerFetch(req, maxBatches)
	}
	f := r.followers[req.ReplicaID]
	if f == nil {
		return FetchResponse{Err: ErrNotLeaderOrFollower} // not a follower of this partition
	}
	// Divergence first (Kafka's validateLastFetchedEpoch): the follower's
	// last epoch must end in the leader's log no earlier than its fetch
	// offset. If not, tell it where the epoch ends here, and record nothing:
	// its offset is not a position of the leader's log.
	if req.LastFetchedEpoch != NoEpoch && req.FetchOffset > 0 {
		end := r.log.EndOffsetForEpoch(req.LastFetchedEpoch)
		if end.EndOffset < req.FetchOffset || end.Epoch < req.LastFetchedEpoch {
			return FetchResponse{Diverging: &end}
		}
	}
	leo := r.log.EndOffset()
	if req.FetchOffset < 0 || req.FetchOffset > leo {
		return FetchResponse{Err: ErrOffsetOutOfRange}
	}
	r.updateFollower(req, f, leo)
	return FetchResponse{Batches: r.log.Read(req.FetchOffset, maxBatches)}
}

// trackReplicas brings the followers the leader tracks in line with the
// record's replicas after a change within its leader epoch (a
// reassignment): a new replica is tracked from nothing known, as at
// becomeLeader (not in the ISR: nothing is waited for from it until it
// catches up and joins); a removed one is forgotten.
func (r *Replica) trackReplicas() {
	for id := range r.followers {
		if !slices.Contains(r.state.Replicas, id) {
			delete(r.followers, id)
		}
	}
	for _, id := range r.state.Replicas {
		if id != r.cfg.Broker && r.followers[id] == nil {
			r.followers[id] = &followerState{logEndOffset: -1, lastFetchLeaderLEO: -1}
		}
	}
}

// consumerFetch serves a consumer: only records below the HW.
func (r *Replica) consumerFetch(req FetchRequest, maxBatches int) FetchResponse {
	if req.FetchOffset < 0 || req.FetchOffset > r.log.EndOffset() {
		return FetchResponse{Err: ErrOffsetOutOfRange}
	}
	return FetchResponse{Batches: cutBatches(r.log.Read(req.FetchOffset, maxBatches), r.hw)}
}

// cutBatches drops every record at or past limit; a raw batch that
// crosses limit goes whole (it is never cut; limit, the HW, is a batch
// boundary whenever every batch is raw, as followers fetch whole batches).
func cutBatches(batches []Batch, limit int64) []Batch {
	var out []Batch
	for _, b := range batches {
		if b.BaseOffset >= limit {
			break
		}
		if b.NextOffset() > limit {
			if b.Raw != nil {
				break
			}
			b.Records = b.Records[:limit-b.BaseOffset]
		}
		out = append(out, b)
	}
	return out
}

// updateFollower records a follower's fetch as Kafka's
// Replica.updateFetchStateOrThrow does: caught up now if it fetches from the
// leader's LEO, or caught up as of its previous fetch if it fetches from at
// least the LEO the leader had then.
func (r *Replica) updateFollower(req FetchRequest, f *followerState, leo int64) {
	switch {
	case req.FetchOffset >= leo:
		f.lastCaughtUp = maxTime(f.lastCaughtUp, r.now)
	case f.lastFetchLeaderLEO >= 0 && req.FetchOffset >= f.lastFetchLeaderLEO:
		f.lastCaughtUp = maxTime(f.lastCaughtUp, f.lastFetch)
	}
	f.lastFetchLeaderLEO, f.lastFetch = leo, r.now
	f.logEndOffset, f.brokerEpoch = req.FetchOffset, req.BrokerEpoch
	r.maybeExpandISR(req.ReplicaID, f)
	r.maybeAdvanceHighWatermark()
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// caughtUp is Kafka's Replica.isCaughtUp.
func (r *Replica) caughtUp(f *followerState) bool {
	return f.logEndOffset == r.log.EndOffset() || r.now.Sub(f.lastCaughtUp) <= r.cfg.LagTimeMax
}

// maximalISR is the ISR plus any member a proposal in flight adds: the HW
// waits for a follower from the moment the leader proposes it (Kafka's
// PendingExpandIsr), and keeps waiting for one being shrunk out until the
// controller agreed.
func (r *Replica) maximalISR() []BrokerID {
	ids := r.state.ISRIDs()
	if p := r.pendingISR; p != nil {
		for _, m := range p.req.NewISR {
			if !slices.Contains(ids, m.ID) {
				ids = append(ids, m.ID)
			}
		}
	}
	return ids
}

// maybeAdvanceHighWatermark moves the HW to the smallest LEO over the
// maximal ISR, never backwards, and (strict rule) not while the ISR is
// below min.insync.replicas. Waiting acks=all requests it passes are
// answered.
func (r *Replica) maybeAdvanceHighWatermark() {
	if r.role != RoleLeader {
		return
	}
	if len(r.state.ISR) < r.minISR() && !r.cfg.Mutants.HighWatermarkIgnoresMinISR {
		return
	}
	hw := r.log.EndOffset()
	for _, id := range r.maximalISR() {
		if id == r.cfg.Broker {
			continue
		}
		f := r.followers[id]
		if f == nil {
			return // not a replica: cannot happen for a valid record
		}
		hw = min(hw, f.logEndOffset)
	}
	if hw <= r.hw {
		return
	}
	r.hw = hw
	r.event(Event{Kind: EventHighWatermark, Broker: r.cfg.Broker, Epoch: r.state.LeaderEpoch, Offset: hw})
	n := 0
	for _, w := range r.waiting {
		if w.next > r.hw {
			break
		}
		var err error
		if len(r.state.ISR) < r.minISR() {
			err = ErrNotEnoughReplicasAfterAppend // only the hw-ignores-min-isr mutant gets here
		} else {
			r.event(Event{Kind: EventAckedAll, Broker: r.cfg.Broker, Epoch: r.state.LeaderEpoch, Offset: w.base})
		}
		r.answerProduce(w.req, w.base, err)
		n++
	}
	clear(r.waiting[:n])
	r.waiting = r.waiting[n:]
}

// maybeExpandISR proposes adding a follower that caught up: its LEO reached
// the HW and the start of this leader's epoch (so it holds every record of
// this epoch's history up to the HW).
func (r *Replica) maybeExpandISR(id BrokerID, f *followerState) {
	if r.pendingISR != nil || r.state.InISR(id) {
		return
	}
	// Kafka's isFollowerInSync: no lag test here (a shrink handles that).
	if f.logEndOffset < r.hw || f.logEndOffset < r.epochStart {
		return
	}
	isr := sortMembers(append(slices.Clone(r.state.ISR), Member{ID: id, BrokerEpoch: f.brokerEpoch}), r.state.Replicas)
	r.proposeISR(isr, fmt.Sprintf("expand +%d", id))
}

// maybeShrinkISR proposes removing followers that have not caught up within
// replica.lag.time.max.ms (dead or slow).
func (r *Replica) maybeShrinkISR() {
	if r.pendingISR != nil {
		return
	}
	var out []BrokerID
	isr := make([]Member, 0, len(r.state.ISR))
	for _, m := range r.state.ISR {
		if f := r.followers[m.ID]; m.ID != r.cfg.Broker && f != nil && !r.caughtUp(f) {
			out = append(out, m.ID)
			continue
		}
		isr = append(isr, m)
	}
	if len(out) == 0 {
		return
	}
	r.proposeISR(isr, fmt.Sprintf("shrink -%v", out))
}

func (r *Replica) proposeISR(isr []Member, why string) {
	req := AlterPartitionRequest{
		ID: r.nextID(), Partition: r.cfg.Partition, Broker: r.cfg.Broker, BrokerEpoch: r.cfg.BrokerEpoch,
		LeaderEpoch: r.state.LeaderEpoch, PartitionEpoch: r.state.PartitionEpoch, NewISR: isr,
	}
	r.pendingISR = &isrProposal{req: req, sentAt: r.now}
	r.ready.AlterPartitions = append(r.ready.AlterPartitions, req)
	r.event(Event{Kind: EventISRProposed, Broker: r.cfg.Broker, Epoch: r.state.LeaderEpoch,
		Detail: fmt.Sprintf("%s isr=%s pe=%d", why, formatMembers(isr), req.PartitionEpoch)})
}

// StepAlterPartition feeds the controller's answer to an ISR proposal.
func (r *Replica) StepAlterPartition(resp AlterPartitionResponse, now time.Time) {
	r.input(now)
	if invariants.Enabled {
		defer r.checkInvariants()
	}
	p := r.pendingISR
	if p == nil || resp.ID != p.req.ID {
		// Late or duplicate: a record it carries may still be news.
		if resp.Err == nil || resp.State.Partition != "" {
			r.applyState(resp.State)
		}
		r.maybeFetch()
		return
	}
	r.pendingISR = nil
	if resp.Err != nil {
		r.event(Event{Kind: EventISRRejected, Broker: r.cfg.Broker, Epoch: r.state.LeaderEpoch, Detail: resp.Err.Error()})
	}
	switch {
	case resp.Err == nil:
		r.applyState(resp.State)
	case errors.Is(resp.Err, ErrInvalidUpdateVersion), errors.Is(resp.Err, ErrFencedLeaderEpoch),
		errors.Is(resp.Err, ErrIneligibleReplica), errors.Is(resp.Err, ErrStaleBrokerEpoch):
		// The record moved on. Its newer version, when the answer carries
		// it, tells this replica what it is now: a deposed leader learns
		// here that it must stop taking writes (the seed's NP4/NP6).
		if resp.State.Partition != "" {
			r.applyState(resp.State)
		}
	default:
		// The controller could not write (store unavailable): the next
		// Tick proposes again from the current record.
	}
	r.maybeAdvanceHighWatermark()
	r.maybeFetch()
}
