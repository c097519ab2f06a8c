package broker

import (
	"context"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"quire/internal/isr"
	"quire/internal/isr/isrnode"
)

// isrCollector exports ISR mode's state under Kafka's metric names (as
// Prometheus' JMX exporter spells Kafka's MBeans): the replica manager's
// partition, leader and under-replicated counts and its ISR shrinks and
// expands, and, from the active controller only (as in Kafka), the offline
// partitions and the active-controller count; and follower fetching
// (KIP-392, which Kafka has no metric of its own for) under Quire's names:
// what followers here served to consumers, and how often the leaders here
// sent a consumer to another replica.
//
// Replica lag, on both sides. A follower's, as Kafka's fetcher reports it
// (FetcherLagMetrics ConsumerLag per partition, ReplicaFetcherManager
// MaxLag): the leader's HW from the last fetch answer minus the
// follower's LEO (a Fetch answer carries the leader's HW, not its LEO; so
// does Kafka's, which measures against the same). A leader's view of each
// follower, which Kafka has no standard metric for, under Quire's names:
// records (its LEO minus the follower's as of the follower's last fetch)
// and seconds since the follower was last caught up (what
// replica.lag.time.max.ms is compared with to shrink the ISR), read off
// each led partition's core at the scrape and timed here, by the scrape's
// clock, never inside the core. Series exist only for the partitions
// replicated here and the followers of those led here, so the labels stay
// bounded by what this broker holds.
type isrCollector struct {
	s *isrSide

	partitions, leaders, underReplicated *prometheus.Desc
	reassigning                          *prometheus.Desc
	shrinks, expands                     *prometheus.Desc
	activeController, offline            *prometheus.Desc
	followerBytes, followerRecords       *prometheus.Desc
	redirects                            *prometheus.Desc
	consumerLag, maxLag                  *prometheus.Desc
	replicaLagRecords, replicaLagSeconds *prometheus.Desc
}

// leaderViewTimeout bounds how long a scrape waits for the led
// partitions' cores to show what they know of their followers; a
// partition not read by then is left out of that scrape.
const leaderViewTimeout = 2 * time.Second

func newISRCollector(s *isrSide) *isrCollector {
	return &isrCollector{s: s,
		partitions:      prometheus.NewDesc("kafka_server_replicamanager_partitioncount", "ISR-mode partition replicas on this broker.", nil, nil),
		leaders:         prometheus.NewDesc("kafka_server_replicamanager_leadercount", "ISR-mode partitions this broker leads.", nil, nil),
		underReplicated: prometheus.NewDesc("kafka_server_replicamanager_underreplicatedpartitions", "Partitions led here whose ISR is smaller than their replica set.", nil, nil),
		reassigning: prometheus.NewDesc("kafka_server_replicamanager_reassigningpartitions",
			"Partitions led here with a reassignment in progress (KIP-455: replicas being added or removed).", nil, nil),
		shrinks:          prometheus.NewDesc("kafka_server_replicamanager_isrshrinks_total", "ISR shrinks proposed by this broker's leaders and applied by the controller.", nil, nil),
		expands:          prometheus.NewDesc("kafka_server_replicamanager_isrexpands_total", "ISR expansions proposed by this broker's leaders and applied by the controller.", nil, nil),
		activeController: prometheus.NewDesc("kafka_controller_kafkacontroller_activecontrollercount", "1 on the broker whose process is ISR mode's active controller.", nil, nil),
		offline:          prometheus.NewDesc("kafka_controller_kafkacontroller_offlinepartitionscount", "Partitions without a leader (reported by the active controller).", nil, nil),
		followerBytes:    prometheus.NewDesc("quire_isr_follower_fetch_bytes_total", "Record-batch bytes follower replicas on this broker served to consumers (KIP-392 follower fetching).", nil, nil),
		followerRecords:  prometheus.NewDesc("quire_isr_follower_fetch_records_total", "Records follower replicas on this broker served to consumers (KIP-392 follower fetching).", nil, nil),
		redirects:        prometheus.NewDesc("quire_isr_preferred_read_replica_total", "Fetched partitions this broker's leaders answered with another replica to read from (--kafka-replica-selector rack-aware).", nil, nil),
		consumerLag: prometheus.NewDesc("kafka_server_fetcherlagmetrics_consumerlag",
			"Records a follower replica here is behind its leader: the leader's high watermark as the last fetch answer gave it "+
				"(answers carry the leader's HW, not its log end offset) minus this replica's log end offset, at least 0 "+
				"(Kafka's FetcherLagMetrics ConsumerLag); absent until the first answer in the leader epoch.",
			[]string{"topic", "partition"}, nil),
		maxLag: prometheus.NewDesc("kafka_server_replicafetchermanager_maxlag",
			"The largest kafka_server_fetcherlagmetrics_consumerlag of the follower replicas here, 0 with none (Kafka's ReplicaFetcherManager MaxLag).",
			nil, prometheus.Labels{"clientId": "Replica"}),
		replicaLagRecords: prometheus.NewDesc("quire_isr_replica_lag_records",
			"Records a follower is behind a partition this broker leads: the leader's log end offset minus the follower's as of its last fetch; "+
				"absent until the follower fetched in the leader epoch.",
			[]string{"topic", "partition", "replica"}, nil),
		replicaLagSeconds: prometheus.NewDesc("quire_isr_replica_lag_seconds",
			"Seconds since the leader here last knew a follower caught up with its log end offset (Kafka's lastCaughtUpTimeMs, which "+
				"replica.lag.time.max.ms bounds for the ISR; an ISR member counts as caught up when the leader took over); 0 while the "+
				"follower is at the leader's log end offset; absent when it never was in the leader epoch.",
			[]string{"topic", "partition", "replica"}, nil),
	}
}

func (c *isrCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.partitions, c.leaders, c.underReplicated, c.reassigning, c.shrinks, c.expands, c.activeController, c.offline,
		c.followerBytes, c.followerRecords, c.redirects, c.consumerLag, c.maxLag, c.replicaLagRecords, c.replicaLagSeconds} {
		ch <- d
	}
}

func (c *isrCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.s.mgr.Stats()
	leaders, under, reassigning := 0, 0, 0
	for _, r := range st.Replicas {
		if r.Role != isr.RoleLeader {
			continue
		}
		leaders++
		rec, ok := c.s.record(r.Partition)
		if ok && len(r.ISR) < len(rec.Replicas) {
			under++
		}
		if ok && rec.Reassigning() {
			reassigning++
		}
	}
	gauge := func(d *prometheus.Desc, v int) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, float64(v))
	}
	gauge(c.partitions, len(st.Replicas))
	gauge(c.leaders, leaders)
	gauge(c.underReplicated, under)
	gauge(c.reassigning, reassigning)
	ch <- prometheus.MustNewConstMetric(c.shrinks, prometheus.CounterValue, float64(st.ISRShrinks))
	ch <- prometheus.MustNewConstMetric(c.expands, prometheus.CounterValue, float64(st.ISRExpands))
	ch <- prometheus.MustNewConstMetric(c.followerBytes, prometheus.CounterValue, float64(c.s.reads.bytes.Load()))
	ch <- prometheus.MustNewConstMetric(c.followerRecords, prometheus.CounterValue, float64(c.s.reads.records.Load()))
	ch <- prometheus.MustNewConstMetric(c.redirects, prometheus.CounterValue, float64(c.s.reads.redirects.Load()))
	active := false
	if c.s.ctl != nil {
		active, _ = c.s.ctl.Active()
	}
	offline := 0
	if active {
		c.s.mu.Lock()
		for _, rec := range c.s.records {
			if rec.Leader == isr.NoLeader {
				offline++
			}
		}
		c.s.mu.Unlock()
		gauge(c.activeController, 1)
	} else {
		gauge(c.activeController, 0)
	}
	gauge(c.offline, offline)
	c.collectLag(ch, st.Replicas)
}

// collectLag exports the replica-lag metrics (see the type) of replicas.
func (c *isrCollector) collectLag(ch chan<- prometheus.Metric, replicas []isrnode.Status) {
	ctx, cancel := context.WithTimeout(c.s.ctx, leaderViewTimeout)
	defer cancel()
	maxLag := int64(0)
	for _, st := range replicas {
		topic, index, ok := isrnode.SplitPartitionName(st.Partition)
		if !ok {
			continue
		}
		partition := strconv.Itoa(int(index))
		switch st.Role {
		case isr.RoleFollower:
			if lag, ok := followerLag(st); ok {
				maxLag = max(maxLag, lag)
				ch <- prometheus.MustNewConstMetric(c.consumerLag, prometheus.GaugeValue, float64(lag), topic, partition)
			}
		case isr.RoleLeader:
			view, err := c.s.mgr.Leading(ctx, st.Partition)
			if err != nil {
				continue // no longer leading, or the scrape's time is up
			}
			now := time.Now() // after the read: no catch-up the core saw is later
			for _, f := range view.Followers {
				replica := strconv.Itoa(int(f.ID))
				lag := leaderLag(view.LogEndOffset, f, now)
				if lag.records >= 0 {
					ch <- prometheus.MustNewConstMetric(c.replicaLagRecords, prometheus.GaugeValue, float64(lag.records), topic, partition, replica)
				}
				if lag.seconds >= 0 {
					ch <- prometheus.MustNewConstMetric(c.replicaLagSeconds, prometheus.GaugeValue, lag.seconds, topic, partition, replica)
				}
			}
		}
	}
	ch <- prometheus.MustNewConstMetric(c.maxLag, prometheus.GaugeValue, float64(maxLag))
}

// followerLag is a follower replica's ConsumerLag: the leader's HW as the
// last fetch answer gave it minus the replica's LEO, at least 0 (a
// follower may hold records past the leader's HW); false before the first
// answer in the leader epoch.
func followerLag(st isrnode.Status) (int64, bool) {
	if st.Role != isr.RoleFollower || st.LeaderHighWatermark < 0 {
		return 0, false
	}
	return max(st.LeaderHighWatermark-st.LogEndOffset, 0), true
}

// replicaLag is how far one follower is behind its leader, as the leader
// knows it; −1 where it does not know.
type replicaLag struct {
	records int64   // the leader's LEO minus the follower's
	seconds float64 // since the follower was last caught up
}

// leaderLag is follower f's lag behind a leader whose LEO is leo, at now:
// records unknown (−1) until the follower fetched in this leader epoch;
// seconds 0 while it is at the leader's LEO (caught up, as Kafka's
// isCaughtUp says), otherwise since it last was, unknown (−1) when it
// never was in this leader epoch.
func leaderLag(leo int64, f isrnode.FollowerState, now time.Time) replicaLag {
	lag := replicaLag{records: -1, seconds: -1}
	if f.LogEndOffset >= 0 {
		lag.records = max(leo-f.LogEndOffset, 0)
	}
	switch {
	case f.LogEndOffset >= leo:
		lag.seconds = 0
	case !f.LastCaughtUp.IsZero():
		lag.seconds = max(now.Sub(f.LastCaughtUp).Seconds(), 0)
	}
	return lag
}
