package isr

import (
	"errors"
	"fmt"
	"time"

	"quire/internal/invariants"
)

// maybeFetch sends a follower's next fetch: from its LEO, with the epoch of
// its last batch, to the leader of its record, when none is in flight and
// the backoff after an empty answer has passed.
func (r *Replica) maybeFetch() {
	if r.role != RoleFollower || r.state.Leader == NoLeader || r.fetchInFlight != 0 || r.now.Before(r.nextFetchAt) {
		return
	}
	lastEpoch := r.log.LatestEpoch()
	if r.cfg.Mutants.TruncateToHighWatermark {
		lastEpoch = NoEpoch // before KIP-101 a fetch carried no epoch
	}
	req := FetchRequest{
		ID: r.nextID(), Partition: r.cfg.Partition, ReplicaID: r.cfg.Broker, To: r.state.Leader,
		BrokerEpoch: r.cfg.BrokerEpoch, CurrentLeaderEpoch: r.state.LeaderEpoch,
		FetchOffset: r.log.EndOffset(), LastFetchedEpoch: lastEpoch, MaxBatches: r.cfg.FetchMaxBatches,
	}
	r.fetchInFlight, r.fetchSentAt = req.ID, r.now
	r.ready.Fetches = append(r.ready.Fetches, req)
}

// StepFetchResponse feeds the leader's answer to this follower's fetch:
// truncate where the logs diverge, append what was fetched, take the
// leader's HW. An answer to another fetch, from another broker or of
// another leader epoch is dropped (KIP-320), except under the
// no-epoch-fencing mutant.
func (r *Replica) StepFetchResponse(resp FetchResponse, now time.Time) {
	r.input(now)
	if invariants.Enabled {
		defer r.checkInvariants()
	}
	defer r.maybeFetch()
	if r.role != RoleFollower || resp.Partition != r.cfg.Partition {
		return
	}
	if r.cfg.Mutants.NoEpochFencing {
		if resp.ID == r.fetchInFlight {
			r.fetchInFlight = 0
		}
	} else {
		if resp.ID != r.fetchInFlight || resp.From != r.state.Leader ||
			(resp.Err == nil && resp.LeaderEpoch != r.state.LeaderEpoch) {
			return
		}
		r.fetchInFlight = 0
	}
	r.nextFetchAt = r.now.Add(r.cfg.FetchBackoff)
	switch {
	case resp.Err == nil && resp.Diverging != nil:
		r.truncateDiverging(*resp.Diverging)
		r.nextFetchAt = r.now
	case resp.Err == nil:
		if r.appendFetched(resp.Batches) {
			r.nextFetchAt = r.now
		}
		// A follower's HW is the leader's, capped at its own LEO (Kafka's
		// updateHighWatermark: it may go down, after a new leader whose HW
		// lags the previous one's).
		r.hw = max(0, min(resp.HighWatermark, r.log.EndOffset()))
		r.leaderHW = resp.HighWatermark
	case errors.Is(resp.Err, ErrOffsetOutOfRange) && resp.LogEndOffset >= 0 && resp.LogEndOffset < r.log.EndOffset():
		// Ahead of the leader's log without an epoch to compare (only a
		// fetch without LastFetchedEpoch gets here): cut to its end, as
		// Kafka did before KIP-101.
		r.truncateTo(resp.LogEndOffset)
		r.nextFetchAt = r.now
	default:
		// Fenced, unknown epoch, not the leader: wait for a newer record
		// or for the leader to learn of its own, and fetch again later.
	}
}

// truncateDiverging cuts the log at the end of the last epoch it shares
// with the leader (Kafka's getOffsetTruncationState, KIP-279). If the
// follower does not have the leader's epoch it cuts at the end of its own
// largest epoch below it, and the next fetch, carrying that epoch, checks
// again. Never to its own HW.
func (r *Replica) truncateDiverging(leader EpochEndOffset) {
	leo := r.log.EndOffset()
	own := r.log.EndOffsetForEpoch(leader.Epoch)
	var to int64
	switch {
	case own.EndOffset < 0:
		to = min(leader.EndOffset, leo)
	case own.Epoch != leader.Epoch:
		to = min(own.EndOffset, leo)
	default:
		to = min(leader.EndOffset, own.EndOffset)
	}
	r.truncateTo(max(to, 0))
}

// appendFetched appends the fetched batches that continue the log; it
// reports whether anything was appended.
func (r *Replica) appendFetched(batches []Batch) bool {
	appended := false
	for _, b := range batches {
		if r.cfg.Mutants.NoEpochFencing && b.BaseOffset < r.log.EndOffset() && b.BaseOffset >= 0 {
			// Whoever answered is trusted: its batches replace what the
			// log holds at their offsets (a late answer of a deposed
			// leader overwrites what the current one replicated).
			r.truncateTo(b.BaseOffset)
		}
		if b.BaseOffset != r.log.EndOffset() {
			break // not for this log's end: an answer to an older fetch
		}
		if b.LeaderEpoch > r.state.LeaderEpoch && !r.cfg.Mutants.NoEpochFencing {
			break // from a leader newer than this follower's record: wait for the record
		}
		if err := r.log.Append(b); err != nil {
			if !errors.Is(err, ErrLogWrite) {
				panic(fmt.Sprintf("isr: partition %s: follower append at %d: %v", r.cfg.Partition, b.BaseOffset, err))
			}
			break // out of space: nothing appended; the next fetch asks for it again
		}
		appended = true
		r.maybeFlushByCount()
	}
	return appended
}
