package broker

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"
)

// collector exports the loaded partitions' state at scrape time, under the
// seed's Pulsar metric names where one exists (pulsar_storage_size), and
// the loaded Pulsar topics' (pulsar_metrics.go).
type collector struct {
	b *Broker

	storage, ledgers, hw, logStart, owned *prometheus.Desc
	rollovers, rollFailures, trimmed      *prometheus.Desc
	cacheHits, cacheMisses                *prometheus.Desc
	loads, failures                       *prometheus.Desc
	refused, writableBookies              *prometheus.Desc
	inFlight, queuedTotal, busy           *prometheus.Desc
	aheadHits, aheadFetched, aheadBytes   *prometheus.Desc
	aheadSkipped                          *prometheus.Desc
	aheadBudget, tailCache                *prometheus.Desc
	compactRuns, compactFailures          *prometheus.Desc
	compactReclaimed, dirtyRatio          *prometheus.Desc
	pulsar                                pulsarDescs // pulsar_metrics.go
}

func newCollector(b *Broker) *collector {
	l := []string{"topic"}
	return &collector{b: b, pulsar: newPulsarDescs(),
		storage:          prometheus.NewDesc("pulsar_storage_size", "Bytes in every ledger of the topic (partition).", l, nil),
		ledgers:          prometheus.NewDesc("quire_topic_ledgers", "Ledgers in the topic's ledger list.", l, nil),
		rollovers:        prometheus.NewDesc("quire_topic_rollovers_total", "Ledger rollovers since the topic was loaded here.", l, nil),
		rollFailures:     prometheus.NewDesc("quire_topic_rollover_failures_total", "Failed ledger rollovers (metadata store trouble); the topic keeps writing to its current ledger.", l, nil),
		trimmed:          prometheus.NewDesc("quire_topic_trimmed_ledgers_total", "Ledgers deleted by retention since the topic was loaded here.", l, nil),
		cacheHits:        prometheus.NewDesc("quire_topic_cache_hits_total", "Entries read from the broker's entry cache.", l, nil),
		cacheMisses:      prometheus.NewDesc("quire_topic_cache_misses_total", "Entries read from the bookies.", l, nil),
		hw:               prometheus.NewDesc("quire_kafka_partition_high_watermark", "Kafka high watermark (next offset) of a partition served here.", l, nil),
		logStart:         prometheus.NewDesc("quire_kafka_partition_log_start_offset", "First offset still stored.", l, nil),
		owned:            prometheus.NewDesc("quire_broker_owned_bundles", "Namespace bundles this broker owns.", nil, nil),
		inFlight:         prometheus.NewDesc("quire_topic_appends_in_flight", "Appends sent to the current ledger and not yet acknowledged.", l, nil),
		queuedTotal:      prometheus.NewDesc("quire_topic_appends_queued_total", "Appends that waited in the topic's queue (for a writable ledger, or for room in the ledger writer) before being sent.", l, nil),
		busy:             prometheus.NewDesc("quire_topic_appends_busy_total", "Appends refused because the topic's queue was full (never written; admitted appends never are).", l, nil),
		aheadHits:        prometheus.NewDesc("quire_topic_read_ahead_hits_total", "Entries served to a reader behind the tail from the read-ahead (fetched from the bookies before the reader asked).", l, nil),
		aheadFetched:     prometheus.NewDesc("quire_topic_read_ahead_fetched_total", "Entries fetched ahead for readers behind the tail.", l, nil),
		aheadSkipped:     prometheus.NewDesc("quire_topic_read_ahead_skipped_total", "Read-ahead fetches (or fetched entries) not done for want of room: the topic's read-ahead bound or the broker's budget was reached.", l, nil),
		aheadBytes:       prometheus.NewDesc("quire_topic_read_ahead_bytes", "Bytes the topic's read-ahead holds.", l, nil),
		aheadBudget:      prometheus.NewDesc("quire_broker_read_ahead_bytes", "Bytes held by the read-ahead of every partition served here (bounded by the broker's read-ahead budget).", nil, nil),
		tailCache:        prometheus.NewDesc("quire_broker_tail_cache_bytes", "Bytes held by the caches of recent entries of every partition and Pulsar topic served here (bounded by the broker's tail-cache budget).", nil, nil),
		compactRuns:      prometheus.NewDesc("quire_topic_compaction_runs_total", "Compactions of a compacted partition run here (failed ones too).", l, nil),
		compactFailures:  prometheus.NewDesc("quire_topic_compaction_failures_total", "Compactions that failed (their compacted ledger is deleted; the log is unchanged).", l, nil),
		compactReclaimed: prometheus.NewDesc("quire_topic_compaction_reclaimed_bytes_total", "Bytes compaction removed from the ledger list (replaced ledgers less the compacted ones) since the partition was loaded here.", l, nil),
		dirtyRatio:       prometheus.NewDesc("quire_topic_compaction_dirty_ratio", "Share of the cleanable closed ledgers' bytes not compacted yet, as the compactor last saw it.", l, nil),
		loads:            prometheus.NewDesc("quire_broker_partition_loads_total", "Partitions loaded (taken over) by this broker.", nil, nil),
		refused:          prometheus.NewDesc("quire_broker_produce_refused_total", "Produced batches answered NOT_ENOUGH_REPLICAS because too few bookies were writable (disks full).", nil, nil),
		writableBookies:  prometheus.NewDesc("quire_broker_writable_bookies", "Registered bookies that take writes, as the broker last read the registry.", nil, nil),
		failures:         prometheus.NewDesc("quire_broker_partition_failures_total", "Partitions that stopped serving here because their log failed or was fenced by a new owner.", nil, nil),
	}
}

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.storage, c.ledgers, c.rollovers, c.rollFailures, c.trimmed, c.cacheHits, c.cacheMisses, c.hw, c.logStart, c.owned, c.loads, c.failures, c.inFlight, c.queuedTotal, c.busy, c.aheadHits, c.aheadFetched, c.aheadSkipped, c.aheadBytes, c.aheadBudget, c.tailCache, c.refused, c.writableBookies, c.compactRuns, c.compactFailures, c.compactReclaimed, c.dirtyRatio} {
		ch <- d
	}
	c.pulsar.describe(ch)
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(c.owned, prometheus.GaugeValue, float64(len(c.b.cluster.OwnedBundles())))
	ch <- prometheus.MustNewConstMetric(c.aheadBudget, prometheus.GaugeValue, float64(c.b.readAhead.InUse()))
	ch <- prometheus.MustNewConstMetric(c.tailCache, prometheus.GaugeValue, float64(c.b.tailCache.InUse()))
	ch <- prometheus.MustNewConstMetric(c.loads, prometheus.CounterValue, float64(c.b.loads.Load()))
	ch <- prometheus.MustNewConstMetric(c.failures, prometheus.CounterValue, float64(c.b.failures.Load()))
	ch <- prometheus.MustNewConstMetric(c.refused, prometheus.CounterValue, float64(c.b.produceRefused.Load()))
	ch <- prometheus.MustNewConstMetric(c.writableBookies, prometheus.GaugeValue, float64(c.b.storage.writable()))
	c.collectPulsar(ch)
	c.b.mu.Lock()
	var ls []*loaded
	for _, l := range c.b.parts {
		ls = append(ls, l)
	}
	c.b.mu.Unlock()
	for _, l := range ls {
		p := l.partition()
		if p == nil || p.Failed() != nil {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), c.b.cfg.Timeouts.Stats)
		s, err := l.ml.Stats(ctx)
		cancel()
		gauge := func(d *prometheus.Desc, v float64) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, l.name)
		}
		counter := func(d *prometheus.Desc, v float64) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, l.name)
		}
		gauge(c.hw, float64(p.HighWatermark()))
		gauge(c.logStart, float64(p.LogStartOffset()))
		if err != nil {
			continue
		}
		gauge(c.storage, float64(s.StorageSize))
		gauge(c.ledgers, float64(s.Ledgers))
		counter(c.rollovers, float64(s.Rollovers))
		counter(c.rollFailures, float64(s.RolloverFailures))
		counter(c.trimmed, float64(s.TrimmedLedgers))
		counter(c.cacheHits, float64(s.CacheHits))
		counter(c.cacheMisses, float64(s.CacheMisses))
		gauge(c.inFlight, float64(s.AppendsInFlight))
		counter(c.queuedTotal, float64(s.AppendsQueuedTotal))
		counter(c.busy, float64(s.BusyRejected))
		counter(c.aheadHits, float64(s.ReadAheadHits))
		counter(c.aheadFetched, float64(s.ReadAheadFetched))
		counter(c.aheadSkipped, float64(s.ReadAheadSkipped))
		gauge(c.aheadBytes, float64(s.ReadAheadBytes))
		if l.compacted.Load() {
			runs, failures, dirty := l.compaction.snapshot()
			counter(c.compactRuns, float64(runs))
			counter(c.compactFailures, float64(failures))
			counter(c.compactReclaimed, float64(s.CompactedBytes))
			gauge(c.dirtyRatio, dirty)
		}
	}
}
