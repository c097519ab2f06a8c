// Package kafka is Quire's Kafka wire-protocol front end: it reads
// size-prefixed request frames, decodes them with franz-go's kmsg, serves
// them from a Backend (backend.go) and writes the responses back in request
// order. It owns bytes, versions and dispatch; it must never own data: every
// topic, partition, producer id and group lives behind Backend.
//
// Each connection has a reader and a writer goroutine. The reader decodes a
// request and runs its synchronous "submit" phase (Produce hands every batch
// to Partition.Append here, so appends keep the order requests arrived in),
// which returns a "finish" function. The writer runs the finish functions one
// after another, in request order, and writes their responses; a slow
// finish (an acks=all produce, a long-polling fetch) therefore delays the
// responses behind it, as Kafka's one-request-at-a-time order requires, but
// not the decoding and submitting of the requests behind it. At most
// MaxInFlightPerConn requests are between the two at once.
//
// Memory for requests is bounded by bytes too (Kafka's
// queued.max.request.bytes): a request holds its frame's size from the
// moment its size prefix is read until its response is written, against a
// budget per connection and one for the whole server. A reader that finds
// no room waits before reading the frame — the socket is simply not read,
// so TCP pushes back on the client — and that wait is a normal state,
// counted in a metric, never an error.
//
// Client quotas (quota_enforce.go) are measured as requests are read and
// answered; a client over its quota gets throttle_time_ms in the response,
// and its connection's reader stops (the socket is not read, as for a full
// budget) until the throttle time is over.
//
// Who may talk is a listener's business: Serve on a *Listener applies its
// Security (sasl.go: SASL before anything else, re-authentication); the
// connection's reader keeps the authentication state and stamps each
// request with its principal.
package kafka

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"runtime/debug"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kbin"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
	"golang.org/x/sync/semaphore"

	"quire/internal/auth"
	"quire/internal/lowprio"
	"quire/internal/quota"
)

// Defaults for the zero values of Config's limits.
const (
	DefaultMaxFrameBytes      = 100 << 20 // Kafka's socket.request.max.bytes
	DefaultMaxConnections     = 10_000
	DefaultMaxInFlightPerConn = 32
	DefaultIdleTimeout        = 10 * time.Minute
	// DefaultMaxQueuedRequestBytes bounds the bytes of every request read
	// and not yet answered, over all connections.
	DefaultMaxQueuedRequestBytes = 256 << 20
	// DefaultMaxConnRequestBytes bounds them per connection, so that one
	// connection cannot take the whole budget.
	DefaultMaxConnRequestBytes = 32 << 20
)

// ErrServerClosed is returned by Serve after Close.
var ErrServerClosed = errors.New("kafka: server closed")

// Config configures a Server.
type Config struct {
	Backend Backend
	// Bulk, if set, writes responses of bulkResponseBytes or more on its
	// low-priority threads.
	Bulk *lowprio.Pool
	// Addr is where ListenAndServe listens (host:port).
	Addr   string
	Logger *slog.Logger // nil: slog.Default()
	// MaxFrameBytes bounds one request frame; a larger (or negative) size
	// prefix closes the connection.
	MaxFrameBytes int32
	// MaxConnections bounds open connections; more are closed at accept.
	MaxConnections int
	// MaxInFlightPerConn bounds requests read but not yet answered on one
	// connection; the reader stops reading at the bound.
	MaxInFlightPerConn int
	// IdleTimeout closes a connection that sends nothing for this long
	// while none of its requests is in flight (Kafka's
	// connections.max.idle.ms); it also bounds a stalled frame.
	IdleTimeout time.Duration
	// MaxQueuedRequestBytes bounds the frame bytes of requests read but
	// not yet answered, over all connections (queued.max.request.bytes);
	// MaxConnRequestBytes bounds them per connection. At a bound the
	// connection stops reading until responses free room. A frame larger
	// than a bound is read once nothing else holds that budget.
	MaxQueuedRequestBytes int64
	MaxConnRequestBytes   int64
	// Registerer receives the front end's metrics (nil: not registered).
	Registerer prometheus.Registerer
	// Quotas, when set, are the client quotas enforced on every listener
	// and served by DescribeClientQuotas / AlterClientQuotas (quotas.go,
	// quota_enforce.go); nil: no quotas, and those APIs are not served.
	Quotas *quota.Store
	// QuotaWindow is the sampling of quota rates (Kafka's quota.window.num
	// and quota.window.size.seconds; zero: 11 × 1s).
	QuotaWindow quota.RateConfig
	// MaxConnectionsPerIP refuses a connection from an IP that has this
	// many open (Kafka's max.connections.per.ip); 0: unlimited.
	MaxConnectionsPerIP int
}

// Server serves the Kafka protocol from a Backend.
type Server struct {
	backend Backend
	bulk    *lowprio.Pool // Config.Bulk
	log     *slog.Logger
	metrics *metrics
	// versions is what a listener without Security advertises; a
	// *Listener's table is made in Serve.
	versions   [kmsg.MaxKey + 1]versionRange
	withGroups bool
	withTxns   bool // the Backend has a TransactionCoordinator
	topicIDs   topicIDCache
	// topicLimits caches each topic's max.message.bytes for Produce.
	topicLimits topicLimits
	// quotas enforces client quotas (quota_enforce.go); nil: none.
	quotas     *quotas
	quotaStore *quota.Store

	maxFrameBytes  int32
	maxConnections int
	maxInFlight    int
	idleTimeout    time.Duration
	addr           string
	// requestBytes is the server-wide budget of request bytes; each
	// connection has its own of maxConnBytes.
	requestBytes   *semaphore.Weighted
	maxServerBytes int64
	maxConnBytes   int64

	ctx    context.Context // canceled by Close; parent of every connection's
	cancel context.CancelFunc

	mu        sync.Mutex
	closed    bool
	listeners map[net.Listener]struct{}
	conns     map[*conn]struct{}
	wg        sync.WaitGroup // Serve loops and connections
}

// New returns a server for cfg; it registers its metrics if cfg.Registerer
// is set.
func New(cfg Config) (*Server, error) {
	if cfg.Backend == nil {
		return nil, errors.New("kafka: Config.Backend is nil")
	}
	s := &Server{
		backend:        cfg.Backend,
		bulk:           cfg.Bulk,
		log:            cfg.Logger,
		maxFrameBytes:  cfg.MaxFrameBytes,
		maxConnections: cfg.MaxConnections,
		maxInFlight:    cfg.MaxInFlightPerConn,
		idleTimeout:    cfg.IdleTimeout,
		addr:           cfg.Addr,
		listeners:      make(map[net.Listener]struct{}),
		conns:          make(map[*conn]struct{}),
	}
	if s.log == nil {
		s.log = slog.Default()
	}
	s.log = s.log.With("component", "kafka")
	if s.maxFrameBytes <= 0 {
		s.maxFrameBytes = DefaultMaxFrameBytes
	}
	if s.maxConnections <= 0 {
		s.maxConnections = DefaultMaxConnections
	}
	if s.maxInFlight <= 0 {
		s.maxInFlight = DefaultMaxInFlightPerConn
	}
	if s.idleTimeout <= 0 {
		s.idleTimeout = DefaultIdleTimeout
	}
	s.maxServerBytes, s.maxConnBytes = cfg.MaxQueuedRequestBytes, cfg.MaxConnRequestBytes
	if s.maxServerBytes <= 0 {
		s.maxServerBytes = DefaultMaxQueuedRequestBytes
	}
	if s.maxConnBytes <= 0 {
		s.maxConnBytes = DefaultMaxConnRequestBytes
	}
	s.maxConnBytes = min(s.maxConnBytes, s.maxServerBytes)
	s.requestBytes = semaphore.NewWeighted(s.maxServerBytes)
	s.withGroups = cfg.Backend.Groups() != nil
	s.withTxns = s.transactions() != nil
	s.quotaStore = cfg.Quotas
	s.quotas = newQuotas(cfg.Quotas, cfg.QuotaWindow, cfg.MaxConnectionsPerIP, nil)
	s.versions = s.versionTable(nil)
	s.metrics = newMetrics()
	if cfg.Registerer != nil {
		if err := s.metrics.register(cfg.Registerer); err != nil {
			return nil, fmt.Errorf("kafka: register metrics: %w", err)
		}
		if s.quotas != nil {
			if err := cfg.Registerer.Register(newQuotaCollector(s.quotas)); err != nil {
				return nil, fmt.Errorf("kafka: register quota metrics: %w", err)
			}
		}
	}
	s.topicIDs.backend = cfg.Backend
	s.ctx, s.cancel = context.WithCancel(context.Background())
	return s, nil
}

// ListenAndServe listens on Config.Addr and serves until Close.
func (s *Server) ListenAndServe() error {
	ln, err := net.Listen("tcp", s.addr)
	if err != nil {
		return fmt.Errorf("kafka: listen %s: %w", s.addr, err)
	}
	return s.Serve(ln)
}

// Serve accepts connections on ln until Close (then it returns
// ErrServerClosed) or until ln fails. It closes ln. A *Listener's
// connections get its Security (sasl.go).
func (s *Server) Serve(ln net.Listener) error {
	var sec *Security
	var name string
	versions := &s.versions
	if l, ok := ln.(*Listener); ok {
		sec, name = &l.Security, l.Name
		if err := sec.Validate(); err != nil {
			ln.Close()
			return err
		}
		table := s.versionTable(sec)
		versions = &table
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		ln.Close()
		return ErrServerClosed
	}
	s.listeners[ln] = struct{}{}
	s.wg.Add(1)
	s.mu.Unlock()
	defer s.wg.Done()
	defer func() {
		s.mu.Lock()
		delete(s.listeners, ln)
		s.mu.Unlock()
		ln.Close()
	}()

	var backoff time.Duration
	for {
		nc, err := ln.Accept()
		if err != nil {
			if s.isClosed() {
				return ErrServerClosed
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				// Temporary accept failures (EMFILE and friends): back off
				// rather than spin, as net/http does.
				backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
				s.log.Warn("accept failed; retrying", "err", err, "backoff", backoff)
				time.Sleep(backoff)
				continue
			}
			return fmt.Errorf("kafka: accept: %w", err)
		}
		backoff = 0
		s.startConn(nc, sec, name, versions)
	}
}

func (s *Server) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

func (s *Server) startConn(nc net.Conn, sec *Security, listener string, versions *[kmsg.MaxKey + 1]versionRange) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		nc.Close()
		return
	}
	if len(s.conns) >= s.maxConnections {
		s.mu.Unlock()
		s.log.Warn("too many connections; closing new one", "remote", nc.RemoteAddr(), "max", s.maxConnections)
		s.metrics.connectionsRejected.Inc()
		nc.Close()
		return
	}
	s.mu.Unlock()
	ip := remoteIP(nc)
	switch reason, delay := s.quotas.admit(ip); reason {
	case "ip_count":
		s.log.Info("connection refused: max connections per IP", "remote", nc.RemoteAddr(), "max", s.quotas.maxPerIP)
		s.metrics.quotaConnectionRefused(reason)
		nc.Close()
		return
	case "ip_rate":
		s.log.Debug("connection over its IP's connection_creation_rate; closing after the throttle", "remote", nc.RemoteAddr(), "throttle", delay)
		s.metrics.quotaConnectionRefused(reason)
		s.quotas.closeLater(nc, delay)
		return
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		s.quotas.release(ip)
		nc.Close()
		return
	}
	c := newConn(s, nc, sec, listener, versions)
	s.conns[c] = struct{}{}
	s.wg.Add(1)
	s.mu.Unlock()
	s.metrics.connections.Inc()
	go func() {
		defer s.wg.Done()
		c.serve()
		s.quotas.release(ip)
		s.mu.Lock()
		delete(s.conns, c)
		s.mu.Unlock()
		s.metrics.connections.Dec()
	}()
}

// Close stops accepting, closes every connection (requests being finished
// see their context canceled) and waits for all goroutines to end.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		s.wg.Wait()
		return nil
	}
	s.closed = true
	for ln := range s.listeners {
		ln.Close()
	}
	conns := make([]*conn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	// Sockets close before contexts are cancelled: a cancelled long poll
	// answers, and that answer must not reach a client of a closed server.
	for _, c := range conns {
		c.abort()
	}
	s.cancel()
	s.quotas.close()
	s.wg.Wait()
	return nil
}

// versionTable is what a listener with sec (nil: none) advertises: the
// quota APIs only when there is a quota store.
func (s *Server) versionTable(sec *Security) [kmsg.MaxKey + 1]versionRange {
	vs := supportedVersions(s.withGroups, s.withTxns, sec)
	if s.quotaStore == nil {
		vs[kmsg.DescribeClientQuotas] = versionRange{min: 0, max: -1}
		vs[kmsg.AlterClientQuotas] = versionRange{min: 0, max: -1}
	}
	return vs
}

// remoteIP is the IP a connection comes from.
func remoteIP(nc net.Conn) string {
	host, _, err := net.SplitHostPort(nc.RemoteAddr().String())
	if err != nil {
		return nc.RemoteAddr().String()
	}
	return host
}

// A finishFunc completes a request (in request order, on the writer) and
// returns its response, or nil for none (acks=0 produce).
type finishFunc func(ctx context.Context) kmsg.Response

// A handler decodes nothing (the server did) and runs a request's submit
// phase; it may do all its work here and return a finish that just returns
// the response.
type handler func(s *Server, ctx context.Context, rq *request) finishFunc

// request is one decoded request as handlers see it.
type request struct {
	key           int16
	version       int16
	correlationID int32
	clientID      *string
	kreq          kmsg.Request
	// errCode is the first non-zero error code the handler put in the
	// response (for the requests metric). Written by the submit phase,
	// then by the finish phase; the queue between them orders the writes.
	errCode int16
	// closeAfter closes the connection once the request is finished
	// (an acks=0 produce that failed).
	closeAfter bool
	// conn is the connection: its listener's Security and versions, which
	// never change (its authentication state is the reader's alone).
	conn *connState
	// principal is who the connection was authenticated as when the
	// request was read; the finish phase may read it, unlike conn.sasl.
	principal auth.Principal
}

// listener is the name of the listener the request came in through ("":
// unnamed, or a request made without a connection).
func (rq *request) listener() string {
	if rq.conn == nil {
		return ""
	}
	return rq.conn.listener
}

func (rq *request) note(code int16) int16 {
	if rq.errCode == 0 {
		rq.errCode = code
	}
	return code
}

// inflight is a request between the reader and the writer.
type inflight struct {
	rq       *request
	received time.Time
	finish   finishFunc
	// held is what the request holds of the byte budgets until answered.
	held int64
	// flexibleHeader: the response header is v1 (ends in tagged fields);
	// ApiVersions responses always use header v0 so any client can read them.
	flexibleHeader bool
	// last: the reader stops after this request; the connection closes
	// once its response is written (a failed authentication).
	last bool
	// isRaw: the response is raw, a size prefix and these bytes without a
	// header (a SASL v0 token); finish is not called.
	isRaw bool
	raw   []byte
	// Client quotas (only when some are configured): submitTook is the
	// decoding and submit phase's time; throttle the longest throttle time
	// the request earned, for the response's throttle_time_ms; muteAfter
	// the part of it only known at completion (fetch bytes, request time),
	// for which the writer mutes the connection.
	submitTook time.Duration
	throttle   time.Duration
	muteAfter  time.Duration
}

// connState is what a connection's reader knows of it and hands to each
// request: its listener's Security and API versions, and where its
// authentication stands. Only the reader changes it.
type connState struct {
	remote string
	sec    *Security // nil: a plain net.Listener
	// listener is the name of the Listener the connection came in
	// through ("": unnamed): which of the brokers' endpoints it is told.
	listener string
	versions *[kmsg.MaxKey + 1]versionRange
	sasl     *saslConn // nil: no SASL on this listener
	// tlsChecked: the client's certificate has been looked at (once the
	// TLS handshake is done); tlsPrincipal is who it names, if anyone.
	tlsChecked   bool
	tlsPrincipal *auth.Principal
}

// principal is who the connection is authenticated as.
func (cs *connState) principal() auth.Principal {
	if cs.sasl != nil && cs.sasl.phase == phaseComplete || cs.sasl != nil && cs.sasl.reauthenticating {
		return cs.sasl.principal
	}
	if cs.tlsPrincipal != nil {
		return *cs.tlsPrincipal
	}
	return auth.Anonymous
}

// checkTLSClient takes the principal of a listener without SASL from the
// client's verified certificate (Kafka's SSL principal: the subject's DN
// through ssl.principal.mapping.rules). It runs once, after the first
// bytes were read, so the handshake is done. A certificate whose subject
// no rule maps leaves the connection anonymous (and logged).
func (c *conn) checkTLSClient() {
	cs := &c.state
	if cs.tlsChecked {
		return
	}
	cs.tlsChecked = true
	tc, ok := c.nc.(*tls.Conn)
	if !ok || cs.sasl != nil {
		return
	}
	certs := tc.ConnectionState().VerifiedChains
	if len(certs) == 0 || len(certs[0]) == 0 {
		return
	}
	mapper := defaultSSLMapping
	if cs.sec != nil && cs.sec.SSLPrincipalMapping != nil {
		mapper = cs.sec.SSLPrincipalMapping
	}
	p, err := mapper.CertificatePrincipal(certs[0][0])
	if err != nil {
		c.s.log.Warn("client certificate maps to no principal; the connection stays anonymous", "remote", c.remote, "err", err)
		return
	}
	cs.tlsPrincipal = &p
}

var defaultSSLMapping, _ = auth.ParseSSLPrincipalMappingRules("DEFAULT")

func (cs *connState) versionRange(key int16) versionRange {
	if key < 0 || int(key) >= len(cs.versions) {
		return versionRange{min: 0, max: -1}
	}
	return cs.versions[key]
}

// errCloseAfter asks the writer to close the connection after a request.
var errCloseAfter = errors.New("request asks to close the connection")

// protocolError marks frames after which the connection must close.
type protocolError struct{ msg string }

func (e *protocolError) Error() string { return e.msg }

func protocolErrorf(format string, args ...any) error {
	return &protocolError{msg: fmt.Sprintf(format, args...)}
}

// closeConn closes the connection on purpose (a SASL rule), not because a
// client sent something broken; reason labels the closed metric.
type closeConn struct{ reason, msg string }

func (e *closeConn) Error() string { return e.msg }

func closeConnf(reason, format string, args ...any) error {
	return &closeConn{reason: reason, msg: fmt.Sprintf(format, args...)}
}

// submit parses one frame's header and body and runs the request's submit
// phase. An error means the connection must close.
func (s *Server) submit(ctx context.Context, cs *connState, frame []byte) (item *inflight, err error) {
	defer func() {
		if r := recover(); r != nil {
			s.log.Error("panic decoding or submitting a request", "panic", r, "stack", string(debug.Stack()))
			item, err = nil, protocolErrorf("panic in submit: %v", r)
		}
	}()
	received := time.Now()
	if cs.sasl != nil && cs.sasl.phase == phaseRawTokens {
		return s.saslRawToken(ctx, cs, frame, received)
	}
	r := kbin.Reader{Src: frame}
	key, version, correlationID := r.Int16(), r.Int16(), r.Int32()
	if !r.Ok() {
		return nil, protocolErrorf("frame of %d bytes too short for a request header", len(frame))
	}
	rq := &request{key: key, version: version, correlationID: correlationID, conn: cs, principal: cs.principal()}
	// Every request header we accept is v1 or v2: a nullable (never
	// compact, even in v2) client id. Only ControlledShutdown v0 used v0,
	// and we do not serve it.
	rq.clientID = r.NullableString()
	supported := cs.versionRange(key)
	if key == int16(kmsg.ApiVersions) && (version < supported.min || version > supported.max) {
		if cs.sasl != nil && !cs.sasl.allowsApiVersions() {
			return nil, closeConnf("sasl_state", "unexpected ApiVersions request during SASL authentication")
		}
		// KIP-511: an ApiVersions version we do not know gets a v0
		// response with UNSUPPORTED_VERSION and our versions, so the
		// client can retry with one we do. Its body (and any header tags
		// of a newer header) is not read.
		return &inflight{rq: rq, received: received, finish: func(context.Context) kmsg.Response {
			rq.note(kerr.UnsupportedVersion.Code)
			return s.apiVersionsResponse(cs.versions, 0, kerr.UnsupportedVersion.Code)
		}}, nil
	}
	if supported.max < 0 || version < supported.min || version > supported.max {
		s.metrics.unsupported.Inc()
		return nil, protocolErrorf("unsupported request %s (key %d) version %d", apiName(key), key, version)
	}
	kreq := kmsg.RequestForKey(key)
	kreq.SetVersion(version)
	if kreq.IsFlexible() {
		kmsg.SkipTags(&r)
	}
	if err := r.Complete(); err != nil {
		return nil, protocolErrorf("%s v%d: truncated request header", apiName(key), version)
	}
	if cs.sasl != nil {
		if item, handled, err := s.saslGate(ctx, cs, rq, r.Src, received); handled {
			return item, err
		}
	}
	if err := kreq.ReadFrom(r.Src); err != nil {
		return nil, protocolErrorf("%s v%d: decode body of %d bytes: %v", apiName(key), version, len(r.Src), err)
	}
	rq.kreq = kreq
	if s.quotas != nil && key == int16(kmsg.Fetch) {
		s.quotas.boundFetch(rq)
	}
	h := handlers[key]
	if h == nil {
		// versionRange advertised a key without a handler: a bug here.
		return nil, protocolErrorf("no handler for %s", apiName(key))
	}
	item = &inflight{
		rq:             rq,
		received:       received,
		finish:         s.handle(h, ctx, rq),
		flexibleHeader: kreq.IsFlexible() && key != int16(kmsg.ApiVersions),
	}
	if key == int16(kmsg.ApiVersions) {
		cs.sasl.apiVersionsAnswered()
	}
	return item, nil
}

// complete runs a request's finish phase and appends its response frame to
// dst; it returns dst unchanged when there is no response. A Fetch answer
// comes back as pieces too (pieces != nil): the frame is then pieces, in
// order — dst from its start cut around the record batches, which stay
// where the backend holds them — and is written with one writev.
func (s *Server) complete(ctx context.Context, item *inflight, dst []byte) (out []byte, pieces [][]byte, err error) {
	defer func() {
		if r := recover(); r != nil {
			s.log.Error("panic finishing a request", "api", apiName(item.rq.key), "panic", r, "stack", string(debug.Stack()))
			out, pieces, err = dst, nil, protocolErrorf("panic in finish: %v", r)
		}
	}()
	if item.isRaw {
		s.metrics.request(apiName(item.rq.key), 0, time.Since(item.received))
		dst = binary.BigEndian.AppendUint32(dst, uint32(len(item.raw)))
		return append(dst, item.raw...), nil, nil
	}
	finishStart := time.Now()
	resp := item.finish(ctx)
	if s.quotas != nil && item.rq.kreq != nil && s.quotas.clientActive() {
		resp = s.applyQuotas(item, resp, time.Since(finishStart))
	}
	s.metrics.request(apiName(item.rq.key), item.rq.errCode, time.Since(item.received))
	if item.rq.closeAfter {
		return dst, nil, errCloseAfter
	}
	if resp == nil {
		return dst, nil, nil
	}
	start := len(dst)
	dst = append(dst, 0, 0, 0, 0)
	dst = binary.BigEndian.AppendUint32(dst, uint32(item.rq.correlationID))
	if item.flexibleHeader {
		dst = append(dst, 0) // no header tags
	}
	if fa, ok := resp.(*fetchAnswer); ok {
		if vectorable(fa.FetchResponse) {
			var pieces [][]byte
			dst, pieces = appendFetchVectored(dst, fa)
			n := 0
			for _, p := range pieces {
				n += len(p)
			}
			binary.BigEndian.PutUint32(dst[start:], uint32(n-start-4))
			return dst, pieces, nil
		}
		fr := fa.flatten()
		// The records are most of a fetch response: room for them at once,
		// so that encoding copies each batch once instead of growing dst.
		dst = slices.Grow(dst, fetchResponseSize(fr))
		resp = fr
	}
	dst = resp.AppendTo(dst)
	binary.BigEndian.PutUint32(dst[start:], uint32(len(dst)-start-4))
	return dst, nil, nil
}

// applyQuotas records what the client quotas measure at a request's
// completion (consumer fetch bytes, request time) and sets the response's
// throttle_time_ms to the longest throttle the request earned; a fetch over
// its byte rate is answered empty (Kafka's throttled fetch). The writer
// mutes the connection for item.muteAfter once it has the response.
func (s *Server) applyQuotas(item *inflight, resp kmsg.Response, finishTook time.Duration) kmsg.Response {
	rq := item.rq
	user, clientID := quotaUser(rq), quotaClientID(rq)
	if resp != nil && rq.key == int16(kmsg.Fetch) && !isReplicaFetch(rq) {
		size := fetchAnswerSize(resp)
		if d := s.quotas.recordFetch(user, clientID, size); d > 0 {
			s.metrics.quotaThrottled("fetch")
			s.quotas.unrecordFetch(user, clientID, size)
			item.muteAfter = max(item.muteAfter, d)
			empty := kmsg.NewPtrFetchResponse()
			empty.Version = rq.version
			resp = empty
		}
	}
	if !quotaExempt(rq) {
		took := item.submitTook
		if !finishWaits(rq.key) {
			took += finishTook
		}
		percent := took.Seconds() * 100
		if d := s.quotas.record(quota.KindRequest, user, clientID, percent); d > 0 {
			s.metrics.quotaThrottled("request")
			item.muteAfter = max(item.muteAfter, d)
		}
	}
	item.throttle = max(item.throttle, item.muteAfter)
	if item.throttle > 0 && resp != nil {
		if tr, ok := resp.(kmsg.ThrottleResponse); ok {
			ms := int32(min(item.throttle.Milliseconds(), int64(1<<31-1)))
			if cur, _ := tr.Throttle(); ms > cur {
				resp.(kmsg.SetThrottleResponse).SetThrottle(ms)
			}
		}
	}
	return resp
}

// fetchAnswerSize is a fetch response's size as the quota counts it: its
// records and a bound of its other fields.
func fetchAnswerSize(resp kmsg.Response) int {
	switch r := resp.(type) {
	case *fetchAnswer:
		n := fetchResponseSize(r.FetchResponse)
		for _, batches := range r.records {
			for _, b := range batches {
				n += len(b)
			}
		}
		return n
	case *kmsg.FetchResponse:
		return fetchResponseSize(r)
	}
	return 0
}

// quotaOnSubmit records what the client quotas measure when a request is
// read (a Produce's size) and mutes the reader for the throttle it earns.
func (c *conn) quotaOnSubmit(item *inflight, frameSize int) {
	rq := item.rq
	item.submitTook = time.Since(item.received)
	if rq.key != int16(kmsg.Produce) {
		return
	}
	if d := c.s.quotas.record(quota.KindProduce, quotaUser(rq), quotaClientID(rq), float64(frameSize)); d > 0 {
		c.s.metrics.quotaThrottled("produce")
		item.throttle = d
		c.mute(d)
	}
}

// mute stops the reader for d from now (KIP-219: a throttled client's
// connection is not read until its throttle time is over).
func (c *conn) mute(d time.Duration) {
	until := time.Now().Add(d).UnixNano()
	for {
		cur := c.mutedUntil.Load()
		if cur >= until || c.mutedUntil.CompareAndSwap(cur, until) {
			return
		}
	}
}

// waitMuted waits while the connection is muted; false once it is closing.
func (c *conn) waitMuted() bool {
	for {
		until := c.mutedUntil.Load()
		if until == 0 {
			return true
		}
		d := time.Until(time.Unix(0, until))
		if d <= 0 {
			return true
		}
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-c.ctx.Done():
			t.Stop()
			return false
		}
	}
}

// conn is one client connection.
type conn struct {
	s      *Server
	nc     net.Conn
	remote string
	ctx    context.Context
	cancel context.CancelFunc
	queue  chan *inflight
	// slots bounds requests between reading and answering.
	slots chan struct{}
	// requestBytes is this connection's budget of request bytes.
	requestBytes *semaphore.Weighted
	abortOnce    sync.Once
	// state is the reader's: security, versions, authentication.
	state connState
	// mutedUntil (unix nanoseconds; 0: never muted) is when a quota
	// throttle ends: the reader reads and submits nothing before.
	mutedUntil atomic.Int64
}

func newConn(s *Server, nc net.Conn, sec *Security, listener string, versions *[kmsg.MaxKey + 1]versionRange) *conn {
	ctx, cancel := context.WithCancel(s.ctx)
	host, _, err := net.SplitHostPort(nc.RemoteAddr().String())
	if err != nil {
		host = nc.RemoteAddr().String()
	}
	ctx = withClient(ctx, ClientInfo{Host: "/" + host}) // Kafka shows hosts as "/1.2.3.4"
	state := connState{remote: nc.RemoteAddr().String(), sec: sec, listener: listener, versions: versions}
	if sec.SASL() {
		state.sasl = &saslConn{sec: sec}
	}
	return &conn{
		state:  state,
		s:      s,
		nc:     nc,
		remote: nc.RemoteAddr().String(),
		ctx:    ctx,
		cancel: cancel,
		queue:  make(chan *inflight, s.maxInFlight),
		slots:  make(chan struct{}, s.maxInFlight),

		requestBytes: semaphore.NewWeighted(s.maxConnBytes),
	}
}

// reserve takes n bytes of the connection's and the server's budgets,
// waiting while either is full; it returns what it took (a frame larger
// than a budget takes the whole budget, so it waits for the rest to drain
// but never forever), or an error once the connection is closing.
func (c *conn) reserve(n int64) (int64, error) {
	connPart := min(n, c.s.maxConnBytes)
	if !c.requestBytes.TryAcquire(connPart) {
		c.s.metrics.readPaused("connection")
		if err := c.requestBytes.Acquire(c.ctx, connPart); err != nil {
			return 0, err
		}
	}
	serverPart := min(n, c.s.maxServerBytes)
	if !c.s.requestBytes.TryAcquire(serverPart) {
		c.s.metrics.readPaused("server")
		if err := c.s.requestBytes.Acquire(c.ctx, serverPart); err != nil {
			c.requestBytes.Release(connPart)
			return 0, err
		}
	}
	c.s.metrics.queuedBytes.Add(float64(n))
	return n, nil
}

// release gives back what reserve took for n bytes.
func (c *conn) release(n int64) {
	if n == 0 {
		return
	}
	c.requestBytes.Release(min(n, c.s.maxConnBytes))
	c.s.requestBytes.Release(min(n, c.s.maxServerBytes))
	c.s.metrics.queuedBytes.Sub(float64(n))
}

// abort closes the connection at once: unread requests are dropped, the
// ones in flight see their context canceled.
func (c *conn) abort() {
	c.abortOnce.Do(func() {
		c.nc.Close() // first: see Server.Close
		c.cancel()
	})
}

func (c *conn) serve() {
	writerDone := make(chan struct{})
	go func() {
		defer close(writerDone)
		c.writeLoop()
	}()
	c.readLoop()
	<-writerDone
	c.abort()
}

func (c *conn) readLoop() {
	defer close(c.queue)
	br := bufio.NewReaderSize(c.nc, 64<<10)
	var sizeBuf [4]byte
	for {
		select {
		case c.slots <- struct{}{}:
		case <-c.ctx.Done():
			return
		}
		if !c.waitMuted() {
			return
		}
		if err := c.readFull(br, sizeBuf[:]); err != nil {
			if !errors.Is(err, io.EOF) && c.ctx.Err() == nil {
				c.s.log.Debug("connection read failed", "remote", c.remote, "err", err)
			}
			if errors.Is(err, io.EOF) {
				return // the client closed; the writer answers what it sent
			}
			c.abort()
			return
		}
		c.checkTLSClient()
		size := int32(binary.BigEndian.Uint32(sizeBuf[:]))
		if maxFrame := c.state.sasl.maxFrame(c.s.maxFrameBytes); size < 0 || size > maxFrame {
			c.s.log.Warn("request frame size out of bounds; closing connection", "remote", c.remote, "size", size, "max", maxFrame)
			c.s.metrics.closed("frame_size")
			c.abort()
			return
		}
		held, err := c.reserve(int64(size))
		if err != nil {
			return // closing
		}
		frame, err := c.readFrame(br, int(size))
		if err != nil {
			c.release(held)
			c.s.log.Debug("connection closed mid-frame", "remote", c.remote, "err", err)
			c.abort()
			return
		}
		// A throttle earned meanwhile (a response completed while the
		// frame was read) holds this request back too.
		if !c.waitMuted() {
			c.release(held)
			return
		}
		item, err := c.s.submit(c.ctx, &c.state, frame)
		if err != nil {
			c.release(held)
			var closing *closeConn
			if errors.As(err, &closing) {
				c.s.log.Info("closing connection", "remote", c.remote, "why", err)
				c.s.metrics.closed(closing.reason)
			} else {
				c.s.log.Warn("bad request; closing connection", "remote", c.remote, "err", err)
				c.s.metrics.closed("bad_request")
			}
			c.abort()
			return
		}
		item.held = held
		if c.s.quotas != nil && item.rq != nil && item.rq.kreq != nil && c.s.quotas.clientActive() {
			c.quotaOnSubmit(item, len(frame))
		}
		// The queue has as many slots as c.slots, so this never blocks.
		c.queue <- item
		if item.last {
			return // the writer answers it, then the connection closes
		}
	}
}

// readFrame reads size bytes, growing the buffer as data arrives so a
// client that announces a large frame and sends little holds little memory.
func (c *conn) readFrame(r io.Reader, size int) ([]byte, error) {
	const chunk = 1 << 20
	frame := make([]byte, 0, min(size, chunk))
	for len(frame) < size {
		n := min(size-len(frame), chunk)
		frame = slices.Grow(frame, n)
		if err := c.readFull(r, frame[len(frame):len(frame)+n]); err != nil {
			return nil, err
		}
		frame = frame[:len(frame)+n]
	}
	return frame, nil
}

// readFull fills buf. A read that sees no byte for the idle timeout fails,
// unless requests of this connection are in flight: a client waiting for a
// long-poll or a rebalance is not idle.
func (c *conn) readFull(r io.Reader, buf []byte) error {
	for n := 0; n < len(buf); {
		_ = c.nc.SetReadDeadline(time.Now().Add(c.s.idleTimeout))
		m, err := r.Read(buf[n:])
		n += m
		if err == nil {
			continue
		}
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() && len(c.slots) > 1 && c.ctx.Err() == nil {
			continue // our own slot is one; others are in flight
		}
		if errors.Is(err, io.EOF) && n > 0 {
			err = io.ErrUnexpectedEOF
		}
		return err
	}
	return nil
}

func (c *conn) writeLoop() {
	bw := bufio.NewWriterSize(c.nc, 64<<10)
	var buf []byte
	for item := range c.queue {
		if c.ctx.Err() != nil {
			c.release(item.held)
			<-c.slots
			continue // aborted: drain so the reader never blocks
		}
		var err error
		var pieces [][]byte
		buf, pieces, err = c.s.complete(c.ctx, item, buf[:0])
		c.release(item.held)
		<-c.slots
		if item.muteAfter > 0 {
			c.mute(item.muteAfter)
		}
		if err != nil {
			if err == errCloseAfter {
				c.s.metrics.closed("acks0_error")
			} else {
				c.s.metrics.closed("handler_panic")
			}
			c.abort()
			continue
		}
		if pieces != nil {
			// bw is empty: it is flushed after every response.
			if err := c.writePieces(pieces); err != nil {
				c.abort()
			}
			if cap(buf) > 1<<20 {
				buf = nil
			}
			continue
		}
		if len(buf) == 0 {
			continue
		}
		if _, err := bw.Write(buf); err != nil {
			c.abort()
			continue
		}
		if len(buf) > 1<<20 {
			buf = nil // do not keep a large fetch's buffer for the connection's life
		}
		// Flush after every response: the next request's finish may block
		// (a long-poll, a rebalance), and this response must not wait
		// behind it in the buffer.
		if err := bw.Flush(); err != nil {
			c.abort()
		}
	}
	if c.ctx.Err() == nil {
		_ = bw.Flush()
	}
}

// bulkResponseBytes is the size from which a response's write is bulk
// work (Config.Bulk): a catch-up reader's fetches.
const bulkResponseBytes = 1 << 20

// bulkWriteWait bounds how long a response's write holds a bulk thread:
// a client that reads slower (or not at all: a stopped process) gets the
// rest written from its connection's own goroutine, so that it never keeps
// the pool from other readers' work. 16 MiB, a catch-up fetch of 16
// partitions, takes about 100 ms at 160 MB/s.
const bulkWriteWait = 100 * time.Millisecond

// writePieces writes a response given as pieces, a large one on the bulk
// pool's threads (plain TCP only: a TLS connection's write that timed out
// cannot go on).
func (c *conn) writePieces(pieces [][]byte) error {
	bufs := net.Buffers(pieces)
	if c.s.bulk == nil {
		_, err := bufs.WriteTo(c.nc)
		return err
	}
	var n int
	for _, p := range pieces {
		n += len(p)
	}
	if _, isTLS := c.nc.(*tls.Conn); isTLS || n < bulkResponseBytes {
		_, err := bufs.WriteTo(c.nc)
		return err
	}
	var err error
	c.s.bulk.Do(func() {
		if err = c.nc.SetWriteDeadline(time.Now().Add(bulkWriteWait)); err == nil {
			_, err = bufs.WriteTo(c.nc) // consumes what it wrote
		}
	})
	if errors.Is(err, os.ErrDeadlineExceeded) {
		err = nil
	}
	if dErr := c.nc.SetWriteDeadline(time.Time{}); err == nil {
		err = dErr
	}
	if err == nil && len(bufs) > 0 {
		_, err = bufs.WriteTo(c.nc)
	}
	return err
}

// errorCode maps a Backend error to a wire code, logging what is not a
// *kerr.Error (those become UNKNOWN_SERVER_ERROR).
func (s *Server) errorCode(err error, what string, args ...any) int16 {
	if err == nil {
		return 0
	}
	var ke *kerr.Error
	if errors.As(err, &ke) {
		return ke.Code
	}
	if errors.Is(err, context.Canceled) {
		return kerr.RequestTimedOut.Code
	}
	s.log.Error("backend error", append([]any{"op", what, "err", err}, args...)...)
	return kerr.UnknownServerError.Code
}

func errorMessage(code int16) *string {
	if code == 0 {
		return nil
	}
	msg := kerr.ErrorForCode(code).Error()
	return &msg
}

func apiName(key int16) string {
	if name := kmsg.NameForKey(key); name != "" {
		return name
	}
	return fmt.Sprintf("Unknown(%d)", key)
}
