package broker

import (
	"cmp"
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"quire/internal/isr"
	"quire/internal/kafka"
)

// Follower fetching (KIP-392) for ISR-mode topics: a consumer reads a
// partition from a replica in its own zone instead of crossing zones to
// the leader.
//
// The leader decides where a consumer reads, per partition, on a Fetch
// v11+ that names the client's rack (client.rack): with
// --kafka-replica-selector rack-aware (Kafka's replica.selector.class
// RackAwareReplicaSelector) it answers the partition with
// preferred_read_replica when the client's rack is not its own zone and an
// in-sync follower is in it (selectReadReplica); with the default, leader,
// it serves every consumer itself, as Kafka does without a selector. A
// broker's rack is its zone (--zone), the one Metadata shows.
//
// A follower serves a consumer's Fetch v11+ of a partition it replicates
// up to its own HW (the leader's as it last learned it, never past its own
// LEO): isrPartition with follower set. Fetch below v11 keeps answering
// NOT_LEADER_OR_FOLLOWER there, and so do ListOffsets and
// OffsetForLeaderEpoch (Kafka serves them to consumers from the leader
// only; clients go back to the leader for them).
//
// Deviations from Kafka: the leader does not know its followers' log
// start offsets (Kafka skips a follower whose log starts past the fetch
// offset): such a follower answers OFFSET_OUT_OF_RANGE and the client goes
// back to the leader. A follower's answer is the same whichever rack the
// client names.

// ReplicaSelector is replica.selector.class: how a partition's leader
// chooses the replica a consumer reads from.
type ReplicaSelector int

const (
	// SelectLeader: the leader serves every consumer (Kafka's default, no
	// replica.selector.class).
	SelectLeader ReplicaSelector = iota
	// SelectRackAware is Kafka's RackAwareReplicaSelector: a consumer
	// whose rack holds an in-sync follower, and not the leader, reads from
	// that follower.
	SelectRackAware
)

// replicaSelectorNames are the selectors' names, as
// --kafka-replica-selector takes them.
var replicaSelectorNames = []string{"leader", "rack-aware"}

func (s ReplicaSelector) String() string {
	if int(s) < len(replicaSelectorNames) {
		return replicaSelectorNames[s]
	}
	return fmt.Sprintf("ReplicaSelector(%d)", int(s))
}

// ParseReplicaSelector reads a selector by name ("" is leader).
func ParseReplicaSelector(name string) (ReplicaSelector, error) {
	switch name {
	case "", "leader":
		return SelectLeader, nil
	case "rack-aware":
		return SelectRackAware, nil
	}
	return SelectLeader, fmt.Errorf("replica selector %q: want leader or rack-aware", name)
}

// defaultLagTimeMax is replica.lag.time.max.ms when ISRConfig sets none
// (the replicas' cores take the same default).
const defaultLagTimeMax = 30 * time.Second

// readReplica is one replica of a partition as its leader sees it when it
// chooses where a consumer reads.
type readReplica struct {
	id   int32
	rack string
	// live: the broker is registered (clients can reach it).
	live  bool
	inISR bool
	// logEndOffset is its LEO as the leader knows it (-1: not known);
	// lastCaughtUp when the leader last knew it caught up (zero: never).
	logEndOffset int64
	lastCaughtUp time.Time
}

// selectReadReplica is Kafka's RackAwareReplicaSelector over the replicas
// ReplicaManager.findPreferredReadReplica offers it, as a pure function: it
// returns the id of the replica a consumer in clientRack fetching from
// offset reads from. The leader when the client names no rack or shares
// the leader's; otherwise, among the followers in the client's rack that
// are live, in the ISR, hold offset (LEO ≥ offset) and caught up within
// lagTimeMax of now, the one with the largest LEO (ties: the most recently
// caught up, then the lowest id, where Kafka's choice is arbitrary); the
// leader when there is none.
func selectReadReplica(leader readReplica, followers []readReplica, clientRack string, offset int64, now time.Time, lagTimeMax time.Duration) int32 {
	if clientRack == "" || leader.rack == clientRack {
		return leader.id
	}
	var best *readReplica
	for i := range followers {
		f := &followers[i]
		if f.rack != clientRack || !f.live || !f.inISR || f.logEndOffset < offset || f.lastCaughtUp.IsZero() || now.Sub(f.lastCaughtUp) > lagTimeMax {
			continue
		}
		if best == nil || better(f, best) {
			best = f
		}
	}
	if best == nil {
		return leader.id
	}
	return best.id
}

// better orders the candidates as Kafka's ReplicaView.comparator, then by
// id for a deterministic choice.
func better(a, b *readReplica) bool {
	if c := cmp.Compare(a.logEndOffset, b.logEndOffset); c != 0 {
		return c > 0
	}
	if !a.lastCaughtUp.Equal(b.lastCaughtUp) {
		return a.lastCaughtUp.After(b.lastCaughtUp)
	}
	return a.id < b.id
}

// PreferredReadReplica implements kafka.ReadReplicaSelector on the
// leader: the follower a consumer in rack should read from, as the
// broker's selector chooses (selectReadReplica), or -1 for the leader. A
// follower partition never redirects (only leaders choose, as in Kafka).
func (p *isrPartition) PreferredReadReplica(ctx context.Context, rack string, offset int64) int32 {
	if p.follower || p.s == nil || p.s.b.cfg.ISR.ReplicaSelector != SelectRackAware || rack == "" {
		return -1
	}
	b := p.s.b
	zones, live := map[int32]string{}, map[int32]bool{}
	for _, m := range b.cluster.Brokers() {
		zones[m.ID], live[m.ID] = m.Zone, true
	}
	self := b.ID()
	leader := readReplica{id: self, rack: b.cfg.Zone}
	if leader.rack == rack {
		return -1 // no need to ask the replica's loop
	}
	followers, err := p.m.Followers(ctx, p.name)
	if err != nil {
		return -1 // no longer leading: the read answers that
	}
	views := make([]readReplica, 0, len(followers))
	for _, f := range followers {
		id := int32(f.ID)
		views = append(views, readReplica{id: id, rack: zones[id], live: live[id], inISR: f.InISR,
			logEndOffset: f.LogEndOffset, lastCaughtUp: f.LastCaughtUp})
	}
	id := selectReadReplica(leader, views, rack, offset, time.Now(), p.s.lagTimeMax)
	if id == self {
		return -1
	}
	p.s.reads.redirects.Add(1)
	return id
}

// FetchPartition implements kafka.FollowerFetchBackend: a consumer's Fetch
// v11+ of an ISR topic's partition is served by the replica here whether
// it leads or follows; every other partition as Partition serves it.
func (b *Broker) FetchPartition(ctx context.Context, topic string, partition int32) (kafka.Partition, error) {
	if p, isISR, err := b.isrReplica(topic, partition, true); isISR {
		return p, err
	}
	return b.Partition(ctx, topic, partition)
}

var _ kafka.FollowerFetchBackend = (*Broker)(nil)

// readReplicaCounters count follower fetching for the metrics
// (isr_metrics.go).
type readReplicaCounters struct {
	// bytes and records handed to consumers by follower replicas here.
	bytes, records atomic.Int64
	// redirects: partitions the leaders here answered with a preferred
	// read replica.
	redirects atomic.Int64
}

// countFollowerRead counts a batch a follower partition hands to a
// consumer, once per fetch request (its long-poll may read a batch again).
// A batch the front end then leaves out of a full answer is counted
// anyway, as what the follower read; the client fetches it again.
func (p *isrPartition) countFollowerRead(b isr.Batch) {
	if !p.follower || p.s == nil || b.NextOffset() <= p.counted {
		return
	}
	p.counted = b.NextOffset()
	p.s.reads.bytes.Add(int64(len(b.Raw)))
	p.s.reads.records.Add(b.Len())
}
