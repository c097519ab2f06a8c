package server

import (
	"github.com/prometheus/client_golang/prometheus"

	"quire/internal/bookie/wire"
)

// requestKind labels requests in metrics and logs.
type requestKind int

const (
	kindAdd requestKind = iota
	kindRead
	kindFenceRead
	kindLongPollRead
	kindBatchRead
	kindDeleteLedger
	kindInfo
	kindWriteLac
	numKinds
)

var kindNames = [numKinds]string{
	kindAdd:          "add",
	kindRead:         "read",
	kindFenceRead:    "fence_read",
	kindLongPollRead: "long_poll_read",
	kindBatchRead:    "batch_read",
	kindDeleteLedger: "delete_ledger",
	kindInfo:         "info",
	kindWriteLac:     "write_lac",
}

func (k requestKind) String() string { return kindNames[k] }

// numStatuses covers every status this build knows; a StatusOf hook returning anything
// else is counted as UNKNOWN_ERROR.
const numStatuses = int(wire.Status_UNKNOWN_ERROR) + 1

type metrics struct {
	// Children are resolved once here, so the per-request path does no label lookups.
	requests            [numKinds][numStatuses]prometheus.Counter
	latency             [numKinds]prometheus.Observer
	inFlight            prometheus.Gauge
	connections         prometheus.Gauge
	connectionsRejected prometheus.Counter
	handshakesFailed    prometheus.Counter
	badFrames           prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) *metrics {
	requests := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "quire_bookie_requests_total",
		Help: "Requests answered by the bookie server, by request type and response status.",
	}, []string{"type", "status"})
	latency := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "quire_bookie_request_duration_seconds",
		Help: "Time from reading a request to the writer taking its response, by request type.",
		// 50µs to ~9s: a loopback add with group commit sits in the low buckets, a long
		// poll near its timeout in the high ones.
		Buckets: prometheus.ExponentialBuckets(50e-6, 3, 12),
	}, []string{"type"})
	m := &metrics{
		inFlight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "quire_bookie_requests_in_flight",
			Help: "Requests received and not yet completed by the engine, over all connections.",
		}),
		connections: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "quire_bookie_connections",
			Help: "Open client connections.",
		}),
		connectionsRejected: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "quire_bookie_connections_rejected_total",
			Help: "Connections closed on accept because the connection limit was reached.",
		}),
		handshakesFailed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "quire_bookie_tls_handshakes_failed_total",
			Help: "Connections closed because their TLS handshake failed (a plaintext client, no client certificate, one of another CA) or timed out.",
		}),
		badFrames: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "quire_bookie_bad_frames_total",
			Help: "Connections closed because they sent a malformed or oversized frame.",
		}),
	}
	for k := range numKinds {
		m.latency[k] = latency.WithLabelValues(k.String())
		for s := range numStatuses {
			m.requests[k][s] = requests.WithLabelValues(k.String(), wire.Status(s).String())
		}
	}
	if reg != nil {
		reg.MustRegister(requests, latency, m.inFlight, m.connections, m.connectionsRejected, m.handshakesFailed, m.badFrames)
	}
	return m
}

func (m *metrics) countRequest(k requestKind, s wire.Status) {
	i := int(s)
	if i < 0 || i >= numStatuses {
		i = int(wire.Status_UNKNOWN_ERROR)
	}
	m.requests[k][i].Inc()
}
