package autorecovery

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are one Service's Prometheus collectors. They exist (and count)
// without a Registerer too, so tests can read them.
type metrics struct {
	underReplicated prometheus.Gauge
	auditor         prometheus.Gauge
	entries         prometheus.Counter
	bytes           prometheus.Counter
	ledgers         prometheus.Counter
	fragments       prometheus.Counter
	failures        prometheus.Counter

	registerer prometheus.Registerer
	registered []prometheus.Collector
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		underReplicated: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "autorecovery_underreplicated_ledgers",
			Help: "Ledgers marked under-replicated, as seen by the auditor (0 on processes that are not the auditor).",
		}),
		auditor: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "autorecovery_auditor", Help: "1 while this process is the elected auditor.",
		}),
		entries: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "autorecovery_rereplicated_entries_total", Help: "Entries copied to replacement bookies by this worker.",
		}),
		bytes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "autorecovery_rereplicated_bytes_total", Help: "Stored entry bytes copied to replacement bookies by this worker.",
		}),
		ledgers: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "autorecovery_ledgers_repaired_total", Help: "Under-replicated ledgers this worker repaired.",
		}),
		fragments: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "autorecovery_fragments_repaired_total", Help: "Ensemble slots this worker rebuilt and swapped into ledger metadata.",
		}),
		failures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "autorecovery_repair_failures_total", Help: "Ledger repairs that failed and will be retried.",
		}),
	}
	if reg == nil {
		return m, nil
	}
	m.registerer = reg
	for _, c := range []prometheus.Collector{m.underReplicated, m.auditor, m.entries, m.bytes, m.ledgers, m.fragments, m.failures} {
		if err := reg.Register(c); err != nil {
			m.unregister()
			return nil, errors.Join(errors.New("autorecovery: register metrics"), err)
		}
		m.registered = append(m.registered, c)
	}
	return m, nil
}

func (m *metrics) unregister() {
	for _, c := range m.registered {
		m.registerer.Unregister(c)
	}
	m.registered = nil
}
