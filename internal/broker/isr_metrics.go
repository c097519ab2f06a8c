package broker

import (
	"github.com/prometheus/client_golang/prometheus"

	"quire/internal/isr"
)

// isrCollector exports ISR mode's state under Kafka's metric names (as
// Prometheus' JMX exporter spells Kafka's MBeans): the replica manager's
// partition, leader and under-replicated counts and its ISR shrinks and
// expands, and, from the active controller only (as in Kafka), the offline
// partitions and the active-controller count; and follower fetching
// (KIP-392, which Kafka has no metric of its own for) under Quire's names:
// what followers here served to consumers, and how often the leaders here
// sent a consumer to another replica.
type isrCollector struct {
	s *isrSide

	partitions, leaders, underReplicated *prometheus.Desc
	shrinks, expands                     *prometheus.Desc
	activeController, offline            *prometheus.Desc
	followerBytes, followerRecords       *prometheus.Desc
	redirects                            *prometheus.Desc
}

func newISRCollector(s *isrSide) *isrCollector {
	return &isrCollector{s: s,
		partitions:       prometheus.NewDesc("kafka_server_replicamanager_partitioncount", "ISR-mode partition replicas on this broker.", nil, nil),
		leaders:          prometheus.NewDesc("kafka_server_replicamanager_leadercount", "ISR-mode partitions this broker leads.", nil, nil),
		underReplicated:  prometheus.NewDesc("kafka_server_replicamanager_underreplicatedpartitions", "Partitions led here whose ISR is smaller than their replica set.", nil, nil),
		shrinks:          prometheus.NewDesc("kafka_server_replicamanager_isrshrinks_total", "ISR shrinks proposed by this broker's leaders and applied by the controller.", nil, nil),
		expands:          prometheus.NewDesc("kafka_server_replicamanager_isrexpands_total", "ISR expansions proposed by this broker's leaders and applied by the controller.", nil, nil),
		activeController: prometheus.NewDesc("kafka_controller_kafkacontroller_activecontrollercount", "1 on the broker whose process is ISR mode's active controller.", nil, nil),
		offline:          prometheus.NewDesc("kafka_controller_kafkacontroller_offlinepartitionscount", "Partitions without a leader (reported by the active controller).", nil, nil),
		followerBytes:    prometheus.NewDesc("quire_isr_follower_fetch_bytes_total", "Record-batch bytes follower replicas on this broker served to consumers (KIP-392 follower fetching).", nil, nil),
		followerRecords:  prometheus.NewDesc("quire_isr_follower_fetch_records_total", "Records follower replicas on this broker served to consumers (KIP-392 follower fetching).", nil, nil),
		redirects:        prometheus.NewDesc("quire_isr_preferred_read_replica_total", "Fetched partitions this broker's leaders answered with another replica to read from (--kafka-replica-selector rack-aware).", nil, nil),
	}
}

func (c *isrCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.partitions, c.leaders, c.underReplicated, c.shrinks, c.expands, c.activeController, c.offline,
		c.followerBytes, c.followerRecords, c.redirects} {
		ch <- d
	}
}

func (c *isrCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.s.mgr.Stats()
	leaders, under := 0, 0
	for _, r := range st.Replicas {
		if r.Role != isr.RoleLeader {
			continue
		}
		leaders++
		if rec, ok := c.s.record(r.Partition); ok && len(r.ISR) < len(rec.Replicas) {
			under++
		}
	}
	gauge := func(d *prometheus.Desc, v int) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, float64(v))
	}
	gauge(c.partitions, len(st.Replicas))
	gauge(c.leaders, leaders)
	gauge(c.underReplicated, under)
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
}
