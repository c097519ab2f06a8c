package kafka

// Client quotas enforced (Kafka's ClientQuotaManager,
// ClientRequestQuotaManager and ConnectionQuotas): internal/quota's rate
// core fed by what the connections measure, under one lock, and the
// throttle times it gives applied as Kafka does since KIP-219: the response
// goes out at once with throttle_time_ms set, and the connection is muted
// (its reader reads and submits nothing) until the throttle time is over.
//
// What is measured, per quota bucket (quota.Snapshot.Client: the entity in
// Kafka's precedence order that has the quota decides who shares it):
//   - producer_byte_rate: the size of each Produce request frame, recorded
//     when it is read (Kafka's request.sizeInBytes).
//   - consumer_byte_rate: the size of each consumer Fetch response (never a
//     follower's), recorded when it is complete. A fetch over the quota is
//     answered empty with the throttle time and not counted, as Kafka
//     (getThrottledResponse, unrecordQuotaSensor).
//   - request_percentage: the time the front end spends on a request
//     (decoding and the submit phase, then the finish phase; for Produce,
//     Fetch, JoinGroup and SyncGroup only decoding and submit, as their
//     finish phase waits for acks, data or a rebalance, which Kafka's
//     purgatory does not count either; response encoding is not counted)
//     as a percentage of one thread over the window. ApiVersions, SASL, follower fetches and
//     WriteTxnMarkers are exempt, as Kafka's cluster actions are; an acks=0
//     Produce is not checked against it, as in Kafka.
//
// Throttle times: Kafka's (observed − limit) / limit × the measured window,
// capped at one window (quota.window.size) for request_percentage and
// connection_creation_rate as Kafka caps them; Kafka leaves the byte rates'
// uncapped, Quire caps them at the whole quota window (samples × size, 11 s
// by default) so one huge request cannot mute a connection for minutes.
//
// Connections: connection_creation_rate per IP (KIP-612) is recorded at
// accept; a connection over it is closed once the throttle time has passed
// without being read (Kafka's delayed close, so a client does not reconnect
// in a tight loop); MaxConnectionsPerIP (max.connections.per.ip) refuses a
// connection above the count at once.
//
// With no quota configured a request costs one atomic load and a map-size
// check here; nothing is tracked and no metric label is created. Buckets are
// forgotten an hour after their last use, at once when their quota goes,
// and at most quota.DefaultMaxBuckets are kept.

import (
	"net"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kmsg"

	"quire/internal/quota"
)

// maxDelayedCloses bounds connections held open to be closed after their
// IP's throttle time; past it they are closed at once.
const maxDelayedCloses = 1000

// quotas is the server's quota enforcement; nil when neither quotas nor a
// per-IP connection bound are configured.
type quotas struct {
	store    *quota.Store // nil: only the per-IP connection bound
	cfg      quota.RateConfig
	maxPerIP int
	now      func() time.Time

	mu         sync.Mutex
	tracker    quota.Tracker
	lastExpire time.Time
	perIP      map[string]int // open connections by IP, when maxPerIP > 0
	delayed    map[net.Conn]*time.Timer
	closed     bool
}

func newQuotas(store *quota.Store, cfg quota.RateConfig, maxPerIP int, now func() time.Time) *quotas {
	if store == nil && maxPerIP <= 0 {
		return nil
	}
	if cfg.Samples < 2 {
		cfg.Samples = quota.DefaultSamples
	}
	if cfg.Window <= 0 {
		cfg.Window = quota.DefaultWindow
	}
	if now == nil {
		now = time.Now
	}
	q := &quotas{store: store, cfg: cfg, maxPerIP: maxPerIP, now: now,
		perIP: make(map[string]int), delayed: make(map[net.Conn]*time.Timer)}
	q.tracker.Config = cfg
	if store != nil {
		store.OnChange(q.forgetUnquoted)
	}
	return q
}

// snapshot is the quotas now (nil-safe: nil without a store).
func (q *quotas) snapshot() *quota.Snapshot {
	if q == nil || q.store == nil {
		return nil
	}
	return q.store.Snapshot()
}

// clientActive says whether any user or client-id quota exists.
func (q *quotas) clientActive() bool { return !q.snapshot().Empty() }

// maxThrottle is the cap of a kind's throttle time.
func (q *quotas) maxThrottle(kind quota.Kind) time.Duration {
	switch kind {
	case quota.KindProduce, quota.KindFetch:
		return time.Duration(q.cfg.Samples) * q.cfg.Window
	default:
		return q.cfg.Window
	}
}

// record records value for a request of user with clientID against kind's
// quota and returns the throttle time (0 when no quota governs it).
func (q *quotas) record(kind quota.Kind, user, clientID string, value float64) time.Duration {
	snap := q.snapshot()
	if snap.Empty() {
		return 0
	}
	b, limit, ok := snap.Client(user, clientID, kind.Key())
	if !ok {
		return 0
	}
	now := q.now()
	q.mu.Lock()
	defer q.mu.Unlock()
	q.expireLocked(now)
	return q.tracker.Record(quota.UsageKey{Kind: kind, Bucket: b}, limit, value, now, q.maxThrottle(kind))
}

// recordFetch records a consumer fetch's response size.
func (q *quotas) recordFetch(user, clientID string, size int) time.Duration {
	return q.record(quota.KindFetch, user, clientID, float64(size))
}

// boundFetch caps a consumer fetch's max_bytes at what its
// consumer_byte_rate allows over the quota window but one sample (Kafka's
// getMaxValueInQuotaWindow), so that a fetch is never so large that it is
// throttled, answered empty and taken back every time.
func (q *quotas) boundFetch(rq *request) {
	req, ok := rq.kreq.(*kmsg.FetchRequest)
	if !ok || req.ReplicaID >= 0 || req.ReplicaState.ID >= 0 {
		return
	}
	snap := q.snapshot()
	if snap.Empty() {
		return
	}
	_, limit, ok := snap.Client(quotaUser(rq), quotaClientID(rq), quota.ConsumerByteRate)
	if !ok {
		return
	}
	bound := limit * float64(q.cfg.Samples-1) * q.cfg.Window.Seconds()
	if bound < float64(req.MaxBytes) {
		req.MaxBytes = int32(max(bound, 1))
	}
}

// unrecordFetch takes back a throttled fetch's bytes (Kafka's
// unrecordQuotaSensor: the answer sent is empty).
func (q *quotas) unrecordFetch(user, clientID string, size int) {
	snap := q.snapshot()
	b, _, ok := snap.Client(user, clientID, quota.ConsumerByteRate)
	if !ok {
		return
	}
	now := q.now()
	q.mu.Lock()
	defer q.mu.Unlock()
	q.tracker.Unrecord(quota.UsageKey{Kind: quota.KindFetch, Bucket: b}, float64(size), now)
}

func (q *quotas) expireLocked(now time.Time) {
	if now.Sub(q.lastExpire) < time.Minute {
		return
	}
	q.lastExpire = now
	q.tracker.Expire(now)
}

// forgetUnquoted drops the buckets whose quota is gone, so their metrics go
// too.
func (q *quotas) forgetUnquoted(snap *quota.Snapshot) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.tracker.Forget(func(k quota.UsageKey) bool {
		if k.Kind == quota.KindConnection {
			_, ok := snap.IP(k.IP)
			return ok
		}
		b, _, ok := snap.Client(k.Bucket.User, k.Bucket.ClientID, k.Kind.Key())
		return ok && b == k.Bucket
	})
}

// admit decides a new connection from ip: refused at once (over
// MaxConnectionsPerIP: "ip_count"), closed after a delay (over its
// connection_creation_rate: "ip_rate", delay > 0) or admitted (reason "";
// release must then be called when it closes).
func (q *quotas) admit(ip string) (reason string, delay time.Duration) {
	if q == nil {
		return "", 0
	}
	now := q.now()
	snap := q.snapshot()
	q.mu.Lock()
	defer q.mu.Unlock()
	if limit, ok := snap.IP(ip); ok {
		k := quota.UsageKey{Kind: quota.KindConnection, IP: quota.CanonicalIP(ip)}
		if d := q.tracker.Record(k, limit, 1, now, q.maxThrottle(quota.KindConnection)); d > 0 {
			return "ip_rate", d
		}
	}
	if q.maxPerIP > 0 {
		if q.perIP[ip] >= q.maxPerIP {
			return "ip_count", 0
		}
		q.perIP[ip]++
	}
	return "", 0
}

// release forgets an admitted connection from ip.
func (q *quotas) release(ip string) {
	if q == nil || q.maxPerIP <= 0 {
		return
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.perIP[ip]--; q.perIP[ip] <= 0 {
		delete(q.perIP, ip)
	}
}

// closeLater closes nc after d without reading it; at the bound of held
// connections, or once the server closed, at once.
func (q *quotas) closeLater(nc net.Conn, d time.Duration) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed || len(q.delayed) >= maxDelayedCloses {
		nc.Close()
		return
	}
	q.delayed[nc] = time.AfterFunc(d, func() {
		q.mu.Lock()
		delete(q.delayed, nc)
		q.mu.Unlock()
		nc.Close()
	})
}

// close closes the connections waiting for their delayed close.
func (q *quotas) close() {
	if q == nil {
		return
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	q.closed = true
	for nc, t := range q.delayed {
		t.Stop()
		nc.Close()
	}
	clear(q.delayed)
}

// quotaExempt says whether a request is left out of request_percentage.
func quotaExempt(rq *request) bool {
	switch kmsg.Key(rq.key) {
	case kmsg.ApiVersions, kmsg.SASLHandshake, kmsg.SASLAuthenticate, kmsg.WriteTxnMarkers:
		return true
	case kmsg.Fetch:
		return isReplicaFetch(rq)
	case kmsg.Produce:
		req, ok := rq.kreq.(*kmsg.ProduceRequest)
		return ok && req.Acks == 0
	}
	return rq.kreq == nil
}

// isReplicaFetch says whether rq is a follower's fetch.
func isReplicaFetch(rq *request) bool {
	req, ok := rq.kreq.(*kmsg.FetchRequest)
	return ok && (req.ReplicaID >= 0 || req.ReplicaState.ID >= 0)
}

// finishWaits says whether an API's finish phase is mostly waiting (not
// counted as request time).
func finishWaits(key int16) bool {
	switch kmsg.Key(key) {
	case kmsg.Produce, kmsg.Fetch, kmsg.JoinGroup, kmsg.SyncGroup:
		return true
	}
	return false
}

// quotaUser is the quota user of a request: the principal's name (Kafka's
// sanitized user; ANONYMOUS without authentication).
func quotaUser(rq *request) string { return rq.principal.Name }

func quotaClientID(rq *request) string {
	if rq.clientID == nil {
		return ""
	}
	return *rq.clientID
}

// quotaCollector exports each tracked bucket's rate and throttle time
// under Kafka's metric names (kafka.server:type=Produce|Fetch|Request,
// user=…,client-id=…: byte-rate / request-time, throttle-time); only
// buckets that have a quota exist.
type quotaCollector struct {
	q                   *quotas
	byteRate, throttle  map[quota.Kind]*prometheus.Desc
	requestTime, ipRate *prometheus.Desc
	connectionThrottle  *prometheus.Desc
}

func newQuotaCollector(q *quotas) *quotaCollector {
	labels := []string{"user", "client_id"}
	c := &quotaCollector{q: q, byteRate: map[quota.Kind]*prometheus.Desc{}, throttle: map[quota.Kind]*prometheus.Desc{}}
	c.byteRate[quota.KindProduce] = prometheus.NewDesc("kafka_server_produce_byte_rate", "Bytes produced per second by a quota entity (user, client id), over the quota window.", labels, nil)
	c.byteRate[quota.KindFetch] = prometheus.NewDesc("kafka_server_fetch_byte_rate", "Bytes fetched per second by a quota entity (consumer fetches only), over the quota window.", labels, nil)
	c.requestTime = prometheus.NewDesc("kafka_server_request_request_time", "Request handling time of a quota entity as a percentage of one thread, over the quota window.", labels, nil)
	c.throttle[quota.KindProduce] = prometheus.NewDesc("kafka_server_produce_throttle_time", "Average throttle time (ms) of a quota entity's throttled produce requests, over the quota window.", labels, nil)
	c.throttle[quota.KindFetch] = prometheus.NewDesc("kafka_server_fetch_throttle_time", "Average throttle time (ms) of a quota entity's throttled fetches, over the quota window.", labels, nil)
	c.throttle[quota.KindRequest] = prometheus.NewDesc("kafka_server_request_throttle_time", "Average throttle time (ms) of a quota entity's requests throttled for request_percentage, over the quota window.", labels, nil)
	c.ipRate = prometheus.NewDesc("kafka_network_connection_creation_rate", "Connections created per second from an IP with a connection_creation_rate quota, over the quota window.", []string{"ip"}, nil)
	c.connectionThrottle = prometheus.NewDesc("kafka_network_ip_connection_accept_throttle_time", "Average delay (ms) before closing connections over an IP's connection_creation_rate, over the quota window.", []string{"ip"}, nil)
	return c
}

// Describe sends nothing: the collector is unchecked, its label values
// come and go with the quotas.
func (c *quotaCollector) Describe(chan<- *prometheus.Desc) {}

func (c *quotaCollector) Collect(ch chan<- prometheus.Metric) {
	now := c.q.now()
	c.q.mu.Lock()
	stats := c.q.tracker.Stats(now)
	c.q.mu.Unlock()
	for _, st := range stats {
		k := st.Key
		switch k.Kind {
		case quota.KindConnection:
			ch <- prometheus.MustNewConstMetric(c.ipRate, prometheus.GaugeValue, st.Rate, k.IP)
			ch <- prometheus.MustNewConstMetric(c.connectionThrottle, prometheus.GaugeValue, st.ThrottleAvg, k.IP)
			continue
		case quota.KindRequest:
			ch <- prometheus.MustNewConstMetric(c.requestTime, prometheus.GaugeValue, st.Rate, k.Bucket.User, k.Bucket.ClientID)
		default:
			ch <- prometheus.MustNewConstMetric(c.byteRate[k.Kind], prometheus.GaugeValue, st.Rate, k.Bucket.User, k.Bucket.ClientID)
		}
		ch <- prometheus.MustNewConstMetric(c.throttle[k.Kind], prometheus.GaugeValue, st.ThrottleAvg, k.Bucket.User, k.Bucket.ClientID)
	}
}
