package isrnode

import (
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"quire/internal/isr"
	"quire/internal/quota"
)

// The replication throttle: Kafka's replication quotas, which
// kafka-reassign-partitions --throttle sets so that moving a partition's
// data does not crowd out the traffic that keeps replicas in sync.
//
// A broker has two rates, leader.replication.throttled.rate (what its
// leaders send to followers) and follower.replication.throttled.rate (what
// its followers fetch), and each topic names the replicas they hold back:
// leader.replication.throttled.replicas and
// follower.replication.throttled.replicas, lists of partition:broker (or
// "*"); the broker applies the entries that name itself (Throttle, from
// the broker: isr_throttle.go). As Kafka's ReplicationQuotaManager:
//
//   - the bytes of every throttled partition's replication traffic are
//     recorded against the rate (Kafka's quota.record), in sampled windows
//     (replication.quota.window.num × replication.quota.window.size.seconds,
//     internal/quota's Rate);
//   - a throttled partition's traffic is held back while the rate is above
//     the bound, but only a replica out of the ISR's: in-sync traffic is
//     never held (the follower is out of sync, Kafka's
//     shouldFollowerThrottle / shouldLeaderThrottle);
//   - the follower's fetcher leaves such a partition out of its Fetch
//     until the rate is back under the bound (fetcher.go); the leader
//     answers it with no records (serve.go). Either way nothing is
//     dropped: the partition is fetched from the same offset later, so
//     the throttle is backpressure, never loss.
//
// Deviation: a throttled out-of-sync partition's share of one Fetch is
// capped at a quarter of a window's worth of the rate (at least one batch
// goes, as KIP-74), so a single answer cannot overshoot the bound by
// replica.fetch.max.bytes at a low rate; Kafka sends up to that.

// Throttle is the replication throttle configuration as it applies to
// this broker.
type Throttle struct {
	// LeaderRate and FollowerRate are leader.replication.throttled.rate
	// and follower.replication.throttled.rate in bytes/s; 0 (or below):
	// unlimited, Kafka's default Long.MAX_VALUE.
	LeaderRate, FollowerRate int64
	// Leader and Follower are the partitions throttled here as leader
	// and as follower.
	Leader, Follower ThrottledReplicas
}

// ThrottledReplicas is which partitions a topic config's
// partition:broker list throttles on this broker.
type ThrottledReplicas struct {
	// Topics throttle every partition of theirs ("*").
	Topics map[string]bool
	// Partitions are the partitions listed with this broker's id
	// (PartitionName).
	Partitions map[string]bool
}

// Has reports whether the partition named partition of topic is throttled.
func (t ThrottledReplicas) Has(topic, partition string) bool {
	return t.Topics[topic] || t.Partitions[partition]
}

// ThrottleWindow is the sampling of the replication rates: Kafka's
// replication.quota.window.num (default 11) windows of
// replication.quota.window.size.seconds (default 1 s).
type ThrottleWindow struct {
	Samples int
	Size    time.Duration
}

// replicationQuota is one of the two rates: bytes recorded, and whether a
// bound is exceeded, safe for the fetchers' and the serving goroutines.
type replicationQuota struct {
	mu      sync.Mutex
	cfg     quota.RateConfig
	bytes   quota.Sampled
	bounded bool
	rate    int64 // bytes/s; meaningful when bounded
}

func newReplicationQuota(w ThrottleWindow) *replicationQuota {
	return &replicationQuota{cfg: quota.RateConfig{Samples: w.Samples, Window: w.Size}}
}

// setRate sets the bound (≤ 0: none).
func (q *replicationQuota) setRate(rate int64) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.bounded, q.rate = rate > 0, rate
}

// record counts bytes of throttled replication traffic at now.
func (q *replicationQuota) record(bytes int, now time.Time) {
	if bytes <= 0 {
		return
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	q.bytes.Record(q.cfg, float64(bytes), now)
}

// exceeded reports whether the measured rate is above the bound at now,
// and if so how long until it would be back at the bound with nothing
// more recorded (Kafka's throttle time), at least a millisecond and at
// most a window.
func (q *replicationQuota) exceeded(now time.Time) (bool, time.Duration) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if !q.bounded {
		return false, 0
	}
	observed := q.bytes.Rate(q.cfg, now)
	if observed <= float64(q.rate) {
		return false, 0
	}
	window := q.window()
	wait := quota.Throttle(observed, float64(q.rate), q.bytes.Elapsed(q.cfg, now), window)
	return true, min(max(wait, time.Millisecond), window)
}

// share is how many bytes of one throttled partition one Fetch may carry:
// a quarter of a window's worth of the rate, never above limit (no bound:
// limit).
func (q *replicationQuota) share(limit int32) int32 {
	q.mu.Lock()
	defer q.mu.Unlock()
	if !q.bounded {
		return limit
	}
	n := float64(q.rate) * q.window().Seconds() / 4
	return int32(math.Max(1, math.Min(n, float64(limit))))
}

func (q *replicationQuota) window() time.Duration {
	if q.cfg.Window > 0 {
		return q.cfg.Window
	}
	return quota.DefaultWindow
}

// throttles is a manager's throttle state: the configuration and the two
// rates.
type throttles struct {
	mu       sync.Mutex
	cfg      Throttle
	leader   *replicationQuota
	follower *replicationQuota
	// leaderBytes and followerBytes count what was recorded.
	leaderBytes, followerBytes atomic.Int64
}

func newThrottles(w ThrottleWindow) *throttles {
	return &throttles{leader: newReplicationQuota(w), follower: newReplicationQuota(w)}
}

func (t *throttles) set(cfg Throttle) {
	t.mu.Lock()
	t.cfg = cfg
	t.mu.Unlock()
	t.leader.setRate(cfg.LeaderRate)
	t.follower.setRate(cfg.FollowerRate)
}

// leaderThrottled and followerThrottled report whether a replica's
// replication traffic is throttled here (counted against the rate).
func (t *throttles) leaderThrottled(r *replica) bool { return t.of(r.topic, r.name).Leader }

func (t *throttles) followerThrottled(r *replica) bool { return t.of(r.topic, r.name).Follower }

func (t *throttles) of(topic, partition string) Throttled {
	t.mu.Lock()
	defer t.mu.Unlock()
	return Throttled{
		Leader:   t.cfg.LeaderRate > 0 && t.cfg.Leader.Has(topic, partition),
		Follower: t.cfg.FollowerRate > 0 && t.cfg.Follower.Has(topic, partition),
	}
}

// recordLeader and recordFollower count throttled replication bytes.
func (t *throttles) recordLeader(bytes int, now time.Time) {
	t.leader.record(bytes, now)
	t.leaderBytes.Add(int64(max(bytes, 0)))
}

func (t *throttles) recordFollower(bytes int, now time.Time) {
	t.follower.record(bytes, now)
	t.followerBytes.Add(int64(max(bytes, 0)))
}

// SetThrottle sets the replication throttle (the broker calls it whenever
// the broker or topic configs change); the zero Throttle throttles
// nothing.
func (m *Manager) SetThrottle(cfg Throttle) { m.throttle.set(cfg) }

// Throttled says whether a partition's replication is throttled here, as
// leader and as follower (a rate set, and the partition listed).
type Throttled struct{ Leader, Follower bool }

// ThrottleOf is whether the throttle applies to partition idx of topic
// here.
func (m *Manager) ThrottleOf(topic string, idx int32) Throttled {
	return m.throttle.of(topic, PartitionName(topic, idx))
}

// ThrottledBytes is the replication traffic counted against the leader and
// follower rates since the manager started (for tests and metrics).
func (m *Manager) ThrottledBytes() (leader, follower int64) {
	return m.throttle.leaderBytes.Load(), m.throttle.followerBytes.Load()
}

// inSync reports whether the record the replica applied has broker id in
// its ISR.
func inSync(r *replica, id isr.BrokerID) bool { return slices.Contains(r.Status().ISR, id) }
