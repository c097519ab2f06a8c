package isrnode

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"quire/internal/isr"
)

// What a Kafka partition over a replica needs beyond Append and Read (the
// broker's kafka.Partition, internal/broker/isrpartition.go): appends
// submitted in order and answered later, a consumer's long-poll on the HW,
// and ListOffsets by time.

// SubmitBatch is AppendBatch without the wait: the batch is handed to the
// leader's core before it returns (so batches submitted one after another
// are appended in that order), and its answer arrives on the channel.
func (m *Manager) SubmitBatch(ctx context.Context, partition string, batch []byte, acks int8) (<-chan Appended, error) {
	count, err := checkBatch(batch)
	if err != nil {
		return nil, fmt.Errorf("append to %s: %w: %w", partition, isr.ErrInvalidRequest, err)
	}
	r, err := m.replica(partition)
	if err != nil {
		return nil, err
	}
	return r.submit(ctx, batch, count, acks)
}

// WaitHighWatermark returns a channel closed once partition's HW here is
// past offset, or its role or leader epoch changed, or it stopped (or is
// not here): the consumer's long-poll, which then reads again.
func (m *Manager) WaitHighWatermark(partition string, offset int64) <-chan struct{} {
	r, err := m.replica(partition)
	if err != nil {
		return closedChan
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.status.HighWatermark > offset || r.stopping {
		return closedChan
	}
	return r.hwChanged
}

var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// OffsetForTimestamp is ListOffsets by time on partition's replica here:
// the first offset whose batch has a max timestamp ≥ ts, and that
// timestamp, below the HW; (-1, -1) when none.
func (m *Manager) OffsetForTimestamp(ctx context.Context, partition string, ts int64) (int64, int64, error) {
	r, err := m.replica(partition)
	if err != nil {
		return -1, -1, err
	}
	offset, timestamp := int64(-1), int64(-1)
	var rerr error
	err = r.run(ctx, func() {
		hw := r.core.HighWatermark()
		at, ok, err := r.disk.OffsetForTimestamp(ts)
		if err != nil || !ok || at >= hw {
			rerr = err
			return
		}
		batches, err := r.disk.ReadRaw(at, 1)
		if err != nil || len(batches) == 0 {
			rerr = err
			return
		}
		offset, timestamp = at, batches[0].MaxTimestamp
	})
	if err == nil {
		err = rerr
	}
	if err != nil {
		return -1, -1, fmt.Errorf("offset for timestamp %d in %s: %w", ts, partition, err)
	}
	return offset, timestamp, nil
}

// LastBatchTimestamp is ListOffsets' max timestamp as far as this replica
// answers it: the last offset below the HW and its batch's max timestamp
// ((-1, -1) when nothing is below the HW). Kafka tracks the largest
// timestamp of the log instead; with producers' clocks moving forward the
// two agree.
func (m *Manager) LastBatchTimestamp(ctx context.Context, partition string) (int64, int64, error) {
	r, err := m.replica(partition)
	if err != nil {
		return -1, -1, err
	}
	offset, timestamp := int64(-1), int64(-1)
	var rerr error
	err = r.run(ctx, func() {
		hw := r.core.HighWatermark()
		if hw <= r.disk.LogStartOffset() {
			return
		}
		batches, err := r.disk.ReadRaw(hw-1, 1)
		if err != nil || len(batches) == 0 {
			rerr = err
			return
		}
		offset, timestamp = hw-1, batches[0].MaxTimestamp
	})
	if err == nil {
		err = rerr
	}
	if err != nil {
		return -1, -1, fmt.Errorf("max timestamp of %s: %w", partition, err)
	}
	return offset, timestamp, nil
}

// EndOffsetForEpoch answers a consumer's OffsetForLeaderEpoch (KIP-320)
// from partition's leader here: the largest epoch ≤ epoch in the log's
// leader-epoch cache and where it ends (the LEO for the latest), with the
// replica's leader epoch; {NoEpoch, -1} for NoEpoch, an empty cache or an
// epoch newer than the cache's latest (Kafka's
// LeaderEpochFileCache.endOffsetFor). isr.ErrNotLeaderOrFollower unless
// the replica leads, as Kafka serves it only from the leader.
func (m *Manager) EndOffsetForEpoch(ctx context.Context, partition string, epoch int32) (isr.EpochEndOffset, int32, error) {
	r, err := m.replica(partition)
	if err != nil {
		return isr.EpochEndOffset{}, isr.NoEpoch, err
	}
	end, leaderEpoch := isr.EpochEndOffset{Epoch: isr.NoEpoch, EndOffset: -1}, isr.NoEpoch
	var rerr error
	err = r.run(ctx, func() {
		if r.core.Role() != isr.RoleLeader {
			rerr = isr.ErrNotLeaderOrFollower
			return
		}
		leaderEpoch = r.core.LeaderEpoch()
		if epoch == isr.NoEpoch || epoch > r.log.LatestEpoch() {
			return
		}
		end = r.log.EndOffsetForEpoch(epoch)
	})
	if err == nil {
		err = rerr
	}
	if err != nil {
		return isr.EpochEndOffset{}, isr.NoEpoch, fmt.Errorf("end offset for epoch %d of %s: %w", epoch, partition, err)
	}
	return end, leaderEpoch, nil
}

// EpochForOffset is the leader epoch of the batch holding offset in
// partition's log here, from its leader-epoch cache (disklog's
// EpochForOffset: the latest epoch started at or before offset, so for the
// log end or the HW the latest epoch started by then); isr.NoEpoch when
// none. ListOffsets answers it with the offset it found.
func (m *Manager) EpochForOffset(ctx context.Context, partition string, offset int64) (int32, error) {
	r, err := m.replica(partition)
	if err != nil {
		return isr.NoEpoch, err
	}
	epoch := isr.NoEpoch
	if err := r.run(ctx, func() { epoch = r.disk.EpochForOffset(offset) }); err != nil {
		return isr.NoEpoch, fmt.Errorf("epoch of offset %d in %s: %w", offset, partition, err)
	}
	return epoch, nil
}

// FollowerState is what a partition's leader knows of one follower (KIP-392's
// replica selector chooses among them where a consumer reads).
type FollowerState struct {
	ID    isr.BrokerID
	InISR bool
	// LogEndOffset is the follower's LEO as of its last fetch (-1: it has
	// not fetched in this leader epoch).
	LogEndOffset int64
	// LastCaughtUp is when the leader last knew it caught up (zero: never
	// in this leader epoch).
	LastCaughtUp time.Time
}

// LeaderView is what a partition's leader knows at one moment: its own
// LEO and each follower's state (the replica-lag metrics compare them).
type LeaderView struct {
	LogEndOffset int64
	// Followers are in the record's replica order.
	Followers []FollowerState
}

// Followers returns what partition's leader here knows of each of its
// followers, in the record's replica order, read off the core on its loop.
// isr.ErrNotLeaderOrFollower unless the replica leads.
func (m *Manager) Followers(ctx context.Context, partition string) ([]FollowerState, error) {
	v, err := m.Leading(ctx, partition)
	return v.Followers, err
}

// Leading returns partition's leader's view here (its LEO and its
// followers), read off the core on its loop in one go, so that the LEO and
// the followers' offsets belong together. isr.ErrNotLeaderOrFollower
// unless the replica leads.
func (m *Manager) Leading(ctx context.Context, partition string) (LeaderView, error) {
	r, err := m.replica(partition)
	if err != nil {
		return LeaderView{}, err
	}
	var out LeaderView
	var rerr error
	err = r.run(ctx, func() {
		if r.core.Role() != isr.RoleLeader {
			rerr = isr.ErrNotLeaderOrFollower
			return
		}
		st := r.core.State()
		out.LogEndOffset = r.core.LogEndOffset()
		for _, id := range st.Replicas {
			if id == m.cfg.Broker {
				continue
			}
			out.Followers = append(out.Followers, FollowerState{ID: id, InISR: st.InISR(id),
				LogEndOffset: r.core.FollowerLogEndOffset(id), LastCaughtUp: r.core.FollowerLastCaughtUp(id)})
		}
	})
	if err == nil {
		err = rerr
	}
	if err != nil {
		return LeaderView{}, fmt.Errorf("followers of %s: %w", partition, err)
	}
	return out, nil
}

// ReplicaLog is one replica's log as DescribeLogDirs shows it.
type ReplicaLog struct {
	Partition string
	// Size is the bytes of its segments.
	Size int64
	// Lag is how far its LEO is behind the leader's HW as it knows it
	// (Status.LeaderHighWatermark); 0 on the leader, and when not known.
	Lag int64
}

// Dir is the directory that holds the replicas' logs (Config.Dir).
func (m *Manager) Dir() string { return m.cfg.Dir }

// ReplicaLogs returns every replica's log here, by partition name.
func (m *Manager) ReplicaLogs() []ReplicaLog {
	m.mu.Lock()
	reps := m.replicaList()
	m.mu.Unlock()
	out := make([]ReplicaLog, 0, len(reps))
	for _, r := range reps {
		st := r.Status()
		rl := ReplicaLog{Partition: r.name, Size: r.disk.Size()}
		if st.LeaderHighWatermark >= 0 {
			rl.Lag = max(st.LeaderHighWatermark-st.LogEndOffset, 0)
		}
		out = append(out, rl)
	}
	slices.SortFunc(out, func(a, b ReplicaLog) int { return strings.Compare(a.Partition, b.Partition) })
	return out
}
