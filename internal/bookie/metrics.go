package bookie

import (
	"errors"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the Prometheus collectors of one engine. Several engines in
// one process (standalone mode) need distinct registerers, e.g.
// prometheus.WrapRegistererWith(prometheus.Labels{"bookie": id}, reg).
type metrics struct {
	addLatency      prometheus.Histogram
	readLatency     prometheus.Histogram
	fsyncLatency    prometheus.Histogram
	queueDepth      prometheus.Gauge
	readCacheHits   prometheus.Counter
	readCacheMisses prometheus.Counter
	ledgerDiskBytes prometheus.Gauge
	serverStatus    prometheus.Gauge

	diskUsage          prometheus.Gauge
	diskFreeBytes      prometheus.Gauge
	diskPredictedUsage prometheus.Gauge
	diskPredictedFree  prometheus.Gauge
	diskWarn           prometheus.Gauge
	readOnly           *prometheus.GaugeVec
	noSpaceErrors      prometheus.Counter
	gcReclaimedBytes   prometheus.Counter
	entryLogReadBytes  prometheus.Counter
	rangeReads         prometheus.Counter
	rangeEntries       prometheus.Counter
	writeCacheWaits    prometheus.Counter
	readGateWaits      prometheus.Counter

	registerer prometheus.Registerer
	registered []prometheus.Collector
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	latencyBuckets := prometheus.ExponentialBuckets(25e-6, 2, 18) // 25µs … 3.3s
	m := &metrics{
		addLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "bookie_add_entry_latency_seconds", Help: "Time from Add to its acknowledgement (journal fsync).",
			Buckets: latencyBuckets,
		}),
		readLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "bookie_read_entry_latency_seconds", Help: "Time to serve one entry read.",
			Buckets: latencyBuckets,
		}),
		fsyncLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "bookie_journal_fsync_latency_seconds", Help: "Latency of the journal's group-commit fsync.",
			Buckets: latencyBuckets,
		}),
		queueDepth: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "bookie_journal_queue_depth", Help: "Adds queued for the journal and not yet written.",
		}),
		readCacheHits: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "bookie_read_cache_hits_total", Help: "Reads served from the read cache.",
		}),
		readCacheMisses: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "bookie_read_cache_misses_total", Help: "Reads that went to the entry logs.",
		}),
		ledgerDiskBytes: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "bookie_ledger_disk_bytes", Help: "Bytes in entry log files.",
		}),
		serverStatus: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "bookie_SERVER_STATUS", Help: "1 when the bookie is writable, 0 when read-only.",
		}),
		diskUsage: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "bookie_disk_usage_ratio", Help: "Used fraction of the ledger directory's file system at the last statfs.",
		}),
		diskFreeBytes: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "bookie_disk_free_bytes", Help: "Free bytes of the ledger directory's file system at the last statfs.",
		}),
		diskPredictedUsage: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "bookie_disk_predicted_usage_ratio", Help: "Used fraction once the write cache (and the next journal file) are written: what the thresholds compare.",
		}),
		diskPredictedFree: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "bookie_disk_predicted_free_bytes", Help: "Free bytes once the write cache (and the next journal file) are written.",
		}),
		diskWarn: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "bookie_disk_usage_warn", Help: "1 while the predicted disk usage is above the warn threshold.",
		}),
		readOnly: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "bookie_read_only", Help: "1 for the reason the bookie is read-only (disk_usage: past the threshold; no_space: a write ran out of space), 0 otherwise.",
		}, []string{"reason"}),
		noSpaceErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "bookie_no_space_errors_total", Help: "Writes that failed, or were not started, for lack of disk space.",
		}),
		gcReclaimedBytes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "bookie_gc_reclaimed_bytes_total", Help: "Entry-log bytes removed by garbage collection.",
		}),
		entryLogReadBytes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "bookie_entry_log_read_bytes_total", Help: "Bytes read from the entry logs (cache misses of entry and range reads).",
		}),
		rangeReads: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "bookie_range_reads_total", Help: "Ranged reads (several entries of a ledger in one request) served.",
		}),
		writeCacheWaits: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "bookie_write_cache_waits_total", Help: "Adds that waited for a checkpoint to free room in the write cache (both halves full: backpressure).",
		}),
		readGateWaits: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "bookie_range_read_gate_waits_total", Help: "Ranged reads that waited at the read gate because adds were arriving (adds have priority for the CPUs).",
		}),
		rangeEntries: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "bookie_range_read_entries_total", Help: "Entries returned by ranged reads.",
		}),
	}
	m.serverStatus.Set(1)
	m.readOnly.WithLabelValues(reasonDiskUsage).Set(0)
	m.readOnly.WithLabelValues(reasonNoSpace).Set(0)
	if reg == nil {
		return m, nil
	}
	m.registerer = reg
	for _, c := range []prometheus.Collector{m.addLatency, m.readLatency, m.fsyncLatency, m.queueDepth,
		m.readCacheHits, m.readCacheMisses, m.ledgerDiskBytes, m.serverStatus,
		m.diskUsage, m.diskFreeBytes, m.diskPredictedUsage, m.diskPredictedFree, m.diskWarn, m.readOnly,
		m.noSpaceErrors, m.gcReclaimedBytes, m.entryLogReadBytes, m.rangeReads, m.rangeEntries, m.writeCacheWaits, m.readGateWaits} {
		if err := reg.Register(c); err != nil {
			m.unregister()
			return nil, errors.Join(errors.New("bookie: register metrics"), err)
		}
		m.registered = append(m.registered, c)
	}
	return m, nil
}

// unregister removes the collectors, so that an engine reopened in the same
// process (tests, restarts of a node) can register again.
func (m *metrics) unregister() {
	for _, c := range m.registered {
		m.registerer.Unregister(c)
	}
	m.registered = nil
}

// counters back Stats. Updated lock-free on hot paths.
type counters struct {
	adds, addsFailed                             atomic.Uint64
	reads, readsFailed                           atomic.Uint64
	writeCacheHits, writeCacheWaits              atomic.Uint64
	readCacheHits, readCacheMisses               atomic.Uint64
	readAheadJoins                               atomic.Uint64
	rangeReads, rangeEntries                     atomic.Uint64
	readGateWaits                                atomic.Uint64
	entryLogReads, entryLogReadBytes             atomic.Uint64
	journalBatches, journalSyncs, journalRecords atomic.Uint64
	journalSyncNanos                             atomic.Int64
	journalIdleNanos                             atomic.Int64 // the journal waiting for a first add
	addNanos                                     atomic.Int64 // summed latency of acknowledged adds
	journalBytes, journalFilesRecycled           atomic.Uint64
	journalQueueDepth                            atomic.Int64
	checkpoints                                  atomic.Uint64
	gcPasses, gcReclaimedBytes, gcRelocated      atomic.Uint64
	replayedRecords                              atomic.Uint64
	noSpaceErrors                                atomic.Uint64
	recoveryAddsHeld                             atomic.Uint64
}

// Stats is a snapshot of the engine's counters.
type Stats struct {
	Adds, AddsFailed   uint64        // Add calls acknowledged with nil / with an error
	AddTime            time.Duration // summed latency (Add call to acknowledgement) of the Adds
	Reads, ReadsFailed uint64        // entry reads served / failed (ErrNoSuchEntry included)
	WriteCacheHits     uint64
	WriteCacheWaits    uint64 // adds that waited for a checkpoint to free write-cache room
	ReadCacheHits      uint64
	ReadCacheMisses    uint64 // reads that went to the entry logs
	// ReadAheadJoins counts single-entry misses that waited for a
	// read-ahead in progress over their entry instead of reading it.
	ReadAheadJoins uint64
	// RangeReads counts ReadRange calls that returned entries, RangeEntries
	// the entries they returned.
	RangeReads, RangeEntries uint64
	// ReadGateWaits counts range reads that waited at the ReadGate.
	ReadGateWaits uint64
	// EntryLogReads counts reads of entry-log files (one per span of
	// adjacent records), EntryLogReadBytes the bytes they read.
	EntryLogReads, EntryLogReadBytes uint64
	JournalQueueDepth                int64
	JournalBatches                   uint64 // group commits written
	JournalSyncs                     uint64
	JournalSyncTime                  time.Duration // total time spent in journal fsyncs
	JournalIdleTime                  time.Duration // total time the journal waited with nothing queued
	JournalRecords                   uint64
	JournalBytes                     uint64
	JournalFilesRecycled             uint64 // journal files reused under a new id
	ReplayedRecords                  uint64 // journal records replayed by Open
	Checkpoints                      uint64
	WriteCacheBytes                  int
	EntryLogBytes                    int64 // bytes on disk in entry logs
	EntryLogFiles                    int
	GCPasses                         uint64
	GCReclaimedBytes                 uint64
	GCRelocatedEntries               uint64
	Ledgers                          int
	ReadOnly                         bool
	ReadOnlyReason                   string // "", "disk_usage" or "no_space"
	// NoSpaceErrors counts writes that failed, or were not started, for
	// lack of space (each turned the bookie read-only).
	NoSpaceErrors uint64
	// RecoveryAddsHeld counts recovery adds that a bookie out of space
	// acknowledged without writing, because it already held the entry
	// durably (see Engine.Add).
	RecoveryAddsHeld uint64
}
