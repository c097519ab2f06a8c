package kafka

import (
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kerr"
)

// metrics are the front end's Prometheus metrics.
type metrics struct {
	requests            *prometheus.CounterVec   // api, error
	latency             *prometheus.HistogramVec // api
	connections         prometheus.Gauge
	connectionsRejected prometheus.Counter
	connectionsClosed   *prometheus.CounterVec // reason
	unsupported         prometheus.Counter
	queuedBytes         prometheus.Gauge
	readsPaused         *prometheus.CounterVec // budget
	authentications     *prometheus.CounterVec // mechanism, outcome
	throttled           *prometheus.CounterVec // quota
	connectionsRefused  *prometheus.CounterVec // reason

	errorNamesMu sync.Mutex
	errorNames   map[int16]string
}

func newMetrics() *metrics {
	return &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "quire", Subsystem: "kafka", Name: "requests_total",
			Help: "Kafka requests answered, by API and by the first error code in the response (NONE when none).",
		}, []string{"api", "error"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "quire", Subsystem: "kafka", Name: "request_duration_seconds",
			Help:    "Time from reading a Kafka request to its response being ready, by API.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 4, 10), // 100µs … 26s
		}, []string{"api"}),
		connections: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "quire", Subsystem: "kafka", Name: "connections",
			Help: "Open Kafka client connections.",
		}),
		connectionsRejected: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "quire", Subsystem: "kafka", Name: "connections_rejected_total",
			Help: "Connections closed at accept because MaxConnections were open.",
		}),
		connectionsClosed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "quire", Subsystem: "kafka", Name: "connections_closed_on_error_total",
			Help: "Connections the server closed because of what the client sent (frame_size, bad_request), SASL (sasl_state, sasl_mechanism, sasl_failed, sasl_session_expired, sasl_unavailable: the credentials could not be read) or a bug (handler_panic).",
		}, []string{"reason"}),
		unsupported: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "quire", Subsystem: "kafka", Name: "unsupported_requests_total",
			Help: "Requests for an API key or version not served (the connection is closed).",
		}),
		queuedBytes: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "quire", Subsystem: "kafka", Name: "queued_request_bytes",
			Help: "Bytes of request frames read (or being read) and not yet answered, over all connections.",
		}),
		readsPaused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "quire", Subsystem: "kafka", Name: "reads_paused_total",
			Help: "Times a connection stopped reading because a request-bytes budget was full (budget: connection or server).",
		}, []string{"budget"}),
		authentications: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "quire", Subsystem: "kafka", Name: "sasl_authentications_total",
			Help: "SASL authentications by mechanism and outcome: authenticated, reauthenticated (KIP-368, on a live connection), failed (bad credentials).",
		}, []string{"mechanism", "outcome"}),
		throttled: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "quire", Subsystem: "kafka", Name: "quota_throttled_requests_total",
			Help: "Requests throttled by a client quota (quota: produce, fetch, request), each answered with throttle_time_ms and its connection muted for it.",
		}, []string{"quota"}),
		connectionsRefused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "quire", Subsystem: "kafka", Name: "quota_connections_refused_total",
			Help: "Connections refused at accept by an IP bound (reason: ip_rate, over its connection_creation_rate, closed after the throttle time; ip_count, over max connections per IP, closed at once).",
		}, []string{"reason"}),
		errorNames: make(map[int16]string),
	}
}

func (m *metrics) register(r prometheus.Registerer) error {
	for _, c := range []prometheus.Collector{m.requests, m.latency, m.connections, m.connectionsRejected, m.connectionsClosed, m.unsupported, m.queuedBytes, m.readsPaused, m.authentications, m.throttled, m.connectionsRefused} {
		if err := r.Register(c); err != nil {
			return err
		}
	}
	return nil
}

func (m *metrics) request(api string, code int16, took time.Duration) {
	m.requests.WithLabelValues(api, m.errorName(code)).Inc()
	if took > 0 {
		m.latency.WithLabelValues(api).Observe(took.Seconds())
	}
}

func (m *metrics) authenticated(mechanism, outcome string) {
	m.authentications.WithLabelValues(mechanism, outcome).Inc()
}

func (m *metrics) quotaThrottled(kind string) { m.throttled.WithLabelValues(kind).Inc() }

func (m *metrics) quotaConnectionRefused(reason string) {
	m.connectionsRefused.WithLabelValues(reason).Inc()
}

func (m *metrics) closed(reason string) { m.connectionsClosed.WithLabelValues(reason).Inc() }

func (m *metrics) readPaused(budget string) { m.readsPaused.WithLabelValues(budget).Inc() }

// errorName is the label for an error code: kerr's name, so unknown codes
// (which could only come from a Backend bug) do not grow the label set
// beyond the int16 range.
func (m *metrics) errorName(code int16) string {
	if code == 0 {
		return "NONE"
	}
	m.errorNamesMu.Lock()
	defer m.errorNamesMu.Unlock()
	if name, ok := m.errorNames[code]; ok {
		return name
	}
	name := strconv.Itoa(int(code))
	if e := kerr.TypedErrorForCode(code); e != nil && e.Code == code {
		name = e.Message
	}
	m.errorNames[code] = name
	return name
}
