// Package pulsar is Quire's Pulsar binary-protocol front end: it reads
// frames (frame.go), answers commands, and dispatches each subscription's
// messages to its consumers; the topics themselves (entries, cursors,
// ownership) live behind Backend (backend.go). It must never own durable
// state: what a producer sent and what a subscription acknowledged is the
// Backend's; what is here (who was sent what, permits, redelivery counts)
// is rebuilt when clients reconnect.
//
// Each connection has a reader and a writer goroutine. The reader decodes
// a frame and handles its command in order; anything it answers goes on the
// connection's outbound queue, bounded in frames, and a full queue stops
// the reader (so TCP pushes back on the client). SEND hands the entry to
// Topic.Append and takes one of the connection's pending-send slots, given
// back when the receipt is written: at the bound the reader stops reading.
// Receipts are answered in each producer's send order. Each subscription
// with consumers has a dispatcher goroutine (dispatch.go) that reads
// entries and pushes MESSAGE frames onto its consumers' queues within their
// permits. The writer also keeps the connection alive: it pings a quiet
// client and closes one that does not answer within a keep-alive interval.
// Each open topic has a watcher goroutine: when the Backend stops serving
// the topic (an unload, a takeover) it forgets the topic and closes its
// producers and consumers with CLOSE_PRODUCER / CLOSE_CONSUMER, so the
// clients look it up again (watchTopic).
//
// Commands and their deviations from Apache Pulsar are listed in the header
// of the file that serves them (conn.go, producer.go, consumer.go);
// authentication and authorization, when configured, are in auth.go.
package pulsar

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/proto"

	pb "quire/internal/pulsar/pulsarpb"
)

// Defaults for the zero values of Config's limits.
const (
	DefaultMaxConnections    = 10_000
	DefaultOutboundFrames    = 256
	DefaultMaxPendingSends   = 1_000
	DefaultKeepAliveInterval = 30 * time.Second
	// DefaultMaxUnackedPerConsumer is Pulsar's
	// maxUnackedMessagesPerConsumer default.
	DefaultMaxUnackedPerConsumer = 50_000
	// DefaultDispatchBatch is how many entries a dispatcher reads at once.
	DefaultDispatchBatch = 100
	// ServerVersion is what CONNECTED names this broker.
	ServerVersion = "quire"
	// maxProtocolVersion is the highest protocol version this front end
	// speaks (v20, the last in PulsarApi.proto of pulsar-client-go v0.21.0).
	maxProtocolVersion = 20
)

// ErrServerClosed is returned by Serve after Close.
var ErrServerClosed = errors.New("pulsar: server closed")

// Config configures a Server.
type Config struct {
	Backend Backend
	// Addr is where ListenAndServe listens (host:port).
	Addr string
	// AdvertisedURL is this broker's service URL in LOOKUP answers
	// (pulsar://host:port); empty: pulsar:// and the listener's address.
	AdvertisedURL string
	// AdvertisedTLSURL is this broker's pulsar+ssl:// URL in LOOKUP
	// answers (brokerServiceUrlTls) when it serves a TLS listener too;
	// empty: none is advertised.
	AdvertisedTLSURL string
	// Authenticator, when set, makes CONNECT authenticate clients (auth.go);
	// nil: every client is accepted and may do everything.
	Authenticator Authenticator
	// AnonymousRole is the role of a client that brings no credentials a
	// provider serves (Pulsar's anonymousUserRole); empty: such clients are
	// refused. Only with an Authenticator.
	AnonymousRole string
	// Authorizer, when set, decides what each role may do; it needs an
	// Authenticator. nil: an authenticated client may do everything.
	Authorizer Authorizer
	Logger     *slog.Logger // nil: slog.Default()
	// MaxMessageSize bounds a message's (a batch's) payload; advertised in
	// CONNECTED. An entry (its MessageMetadata and payload) and a frame may
	// be up to 10 KiB larger (as in Pulsar: clients size chunks so that
	// metadata plus payload reach the limit); a larger size prefix closes
	// the connection.
	MaxMessageSize int
	// MaxConnections bounds open connections; more are closed at accept.
	MaxConnections int
	// OutboundFrames bounds the frames queued for one connection's writer:
	// the reader and dispatchers wait at the bound. Memory per connection is
	// at most OutboundFrames × the frame limit.
	OutboundFrames int
	// MaxPendingSends bounds the SENDs of one connection appended but not
	// yet answered; the reader stops reading at the bound.
	MaxPendingSends int
	// KeepAliveInterval: the broker pings a client that was quiet this
	// long and closes the connection when the next interval passes without
	// a frame from it.
	KeepAliveInterval time.Duration
	// ProducerNamePrefix starts the names given to producers that bring
	// none: "<prefix>-<n>" (default "quire"). Deduplication keys on the
	// name, so a broker must make it unique across brokers and restarts
	// (Pulsar draws it from a cluster-wide id generator): else a new
	// producer could inherit an old one's sequence ids and see its first
	// messages dropped as duplicates.
	ProducerNamePrefix string
	// MaxUnackedPerConsumer bounds the messages delivered to one consumer
	// and not yet acknowledged: at the bound it gets nothing more until it
	// acknowledges. It also bounds the delivery state kept per consumer.
	MaxUnackedPerConsumer int
	// KeySharedAutoSplitHalves is Pulsar's
	// subscriptionKeySharedUseConsistentHashing=false: AUTO_SPLIT Key_Shared
	// consumers split the hash range in halves as they join (keyshared.go);
	// false (the default, as Pulsar 4's): a consistent-hashing ring.
	KeySharedAutoSplitHalves bool
}

// Server serves the Pulsar protocol from a Backend.
type Server struct {
	backend         Backend
	log             *slog.Logger
	maxMessageSize  int
	maxFrameBytes   int
	maxConnections  int
	outboundFrames  int
	maxPendingSends int
	keepAlive       time.Duration
	// maxUnackedPerConsumer: see Config.MaxUnackedPerConsumer.
	maxUnackedPerConsumer int
	// keySharedHalves: see Config.KeySharedAutoSplitHalves.
	keySharedHalves bool

	addr          string
	advertisedURL atomic.Value // string
	tlsURL        string       // Config.AdvertisedTLSURL

	// authenticator, anonymousRole, authorizer: Config's (auth.go).
	authenticator Authenticator
	anonymousRole string
	authorizer    Authorizer

	ctx    context.Context // canceled by Close
	cancel context.CancelFunc

	// producerNames numbers the names generated for producers that bring
	// none; producerPrefix starts them.
	producerNames  atomic.Uint64
	producerPrefix string

	mu        sync.Mutex
	closed    bool
	listeners map[net.Listener]struct{}
	conns     map[*conn]struct{}
	wg        sync.WaitGroup // Serve loops, connections, dispatchers

	// topicsMu guards topics; a topic's own state has its own lock, taken
	// after topicsMu when both are held.
	topicsMu sync.Mutex
	topics   map[string]*topicState
}

// New returns a server for cfg.
func New(cfg Config) (*Server, error) {
	if cfg.Backend == nil {
		return nil, errors.New("pulsar: Config.Backend is nil")
	}
	if cfg.Authenticator == nil && (cfg.Authorizer != nil || cfg.AnonymousRole != "") {
		return nil, errors.New("pulsar: Config.Authorizer and AnonymousRole need an Authenticator")
	}
	s := &Server{
		backend:         cfg.Backend,
		log:             cfg.Logger,
		maxMessageSize:  cfg.MaxMessageSize,
		maxConnections:  cfg.MaxConnections,
		outboundFrames:  cfg.OutboundFrames,
		maxPendingSends: cfg.MaxPendingSends,
		keepAlive:       cfg.KeepAliveInterval,
		addr:            cfg.Addr,
		tlsURL:          cfg.AdvertisedTLSURL,
		authenticator:   cfg.Authenticator,
		anonymousRole:   cfg.AnonymousRole,
		authorizer:      cfg.Authorizer,
		listeners:       make(map[net.Listener]struct{}),
		conns:           make(map[*conn]struct{}),
		topics:          make(map[string]*topicState),
	}
	if s.log == nil {
		s.log = slog.Default()
	}
	s.log = s.log.With("component", "pulsar")
	if s.maxMessageSize <= 0 {
		s.maxMessageSize = DefaultMaxMessageSize
	}
	s.maxFrameBytes = s.maxMessageSize + framePadding
	if s.maxConnections <= 0 {
		s.maxConnections = DefaultMaxConnections
	}
	if s.outboundFrames <= 0 {
		s.outboundFrames = DefaultOutboundFrames
	}
	if s.maxPendingSends <= 0 {
		s.maxPendingSends = DefaultMaxPendingSends
	}
	if s.keepAlive <= 0 {
		s.keepAlive = DefaultKeepAliveInterval
	}
	s.maxUnackedPerConsumer = cfg.MaxUnackedPerConsumer
	s.keySharedHalves = cfg.KeySharedAutoSplitHalves
	if s.maxUnackedPerConsumer <= 0 {
		s.maxUnackedPerConsumer = DefaultMaxUnackedPerConsumer
	}
	s.producerPrefix = cfg.ProducerNamePrefix
	if s.producerPrefix == "" {
		s.producerPrefix = "quire"
	}
	s.advertisedURL.Store(cfg.AdvertisedURL)
	s.ctx, s.cancel = context.WithCancel(context.Background())
	return s, nil
}

// URL is the service URL this broker answers LOOKUPs with.
func (s *Server) URL() string { return s.advertisedURL.Load().(string) }

// TLSURL is the pulsar+ssl:// URL LOOKUP answers carry, "" when none.
func (s *Server) TLSURL() string { return s.tlsURL }

// ListenAndServe listens on Config.Addr and serves until Close.
func (s *Server) ListenAndServe() error {
	ln, err := net.Listen("tcp", s.addr)
	if err != nil {
		return fmt.Errorf("pulsar: listen %s: %w", s.addr, err)
	}
	return s.Serve(ln)
}

// Serve accepts connections on ln until Close (then it returns
// ErrServerClosed) or until ln fails. It closes ln.
func (s *Server) Serve(ln net.Listener) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		ln.Close()
		return ErrServerClosed
	}
	s.listeners[ln] = struct{}{}
	s.wg.Add(1)
	if s.URL() == "" {
		s.advertisedURL.Store("pulsar://" + ln.Addr().String())
	}
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
				select {
				case <-time.After(backoff):
				case <-s.ctx.Done():
				}
				continue
			}
			return fmt.Errorf("pulsar: accept: %w", err)
		}
		backoff = 0
		s.startConn(nc)
	}
}

func (s *Server) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

func (s *Server) startConn(nc net.Conn) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		nc.Close()
		return
	}
	if len(s.conns) >= s.maxConnections {
		s.mu.Unlock()
		s.log.Warn("too many connections; closing new one", "remote", nc.RemoteAddr(), "max", s.maxConnections)
		nc.Close()
		return
	}
	c := newConn(s, nc)
	s.conns[c] = struct{}{}
	s.wg.Add(1)
	s.mu.Unlock()
	go func() {
		defer s.wg.Done()
		c.serve()
		s.mu.Lock()
		delete(s.conns, c)
		s.mu.Unlock()
	}()
}

// Close stops accepting, closes every connection and waits for every
// goroutine to end.
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
	s.cancel()
	for _, c := range conns {
		c.abort()
	}
	s.wg.Wait()
	return nil
}

// goDispatch runs f on a goroutine Close waits for, unless closing.
func (s *Server) goDispatch(f func()) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		f()
	}()
	return true
}

// topicState is what the front end keeps of one topic: its producers and
// the delivery state of its subscriptions.
type topicState struct {
	name  string
	topic Topic
	// partition is the partition index its name carries ("…-partition-N"),
	// -1 for a topic that is not a partition: Failover's active consumer
	// depends on it.
	partition int

	mu        sync.Mutex
	producers map[string]*producer // by producer name
	// waiting are the WaitForExclusive producers queued for the topic, in
	// arrival order (producer.go).
	waiting []waitingProducer
	subs    map[string]*subscription
	// terminating is set by TerminateTopic before it closes the producers,
	// so that none joins after (terminate.go).
	terminating bool

	// opened is when the topic was opened here; msgIn and bytesIn count
	// the messages and bytes appended (answered with a message id) since,
	// for stats.
	opened         time.Time
	msgIn, bytesIn atomic.Int64
	// delivered counts, per subscription name, what dispatch handed to
	// consumers (countDelivered); guarded by countersMu.
	countersMu sync.Mutex
	delivered  map[string]*deliveryCounters
}

// topicState returns the state of a topic, opening it through the Backend
// the first time. The map keeps a topic until the Backend stops serving it
// (Topic.Done: see watchTopic).
func (s *Server) topicState(ctx context.Context, name string, create bool) (*topicState, error) {
	s.topicsMu.Lock()
	ts := s.topics[name]
	s.topicsMu.Unlock()
	if ts != nil {
		return ts, nil
	}
	t, err := s.backend.Topic(ctx, name, create)
	if err != nil {
		return nil, err
	}
	s.topicsMu.Lock()
	defer s.topicsMu.Unlock()
	if ts := s.topics[name]; ts != nil {
		return ts, nil
	}
	ts = &topicState{
		name:      name,
		topic:     t,
		partition: partitionIndexOf(name),
		producers: make(map[string]*producer),
		subs:      make(map[string]*subscription),
		opened:    time.Now(),
	}
	if !s.goDispatch(func() { s.watchTopic(ts) }) {
		return nil, errorf(ErrServiceNotReady, "broker closing")
	}
	s.topics[name] = ts
	return ts, nil
}

// watchTopic waits until the Backend stops serving ts (or the server
// closes), then forgets the topic and closes its producers and consumers,
// telling their clients (CLOSE_PRODUCER, CLOSE_CONSUMER) so that they look
// the topic up again and reconnect — to this broker, which opens the topic
// afresh, or to its new owner. Their sends and acknowledgements in flight
// fail on the closed topic and are retried by the clients.
func (s *Server) watchTopic(ts *topicState) {
	select {
	case <-ts.topic.Done():
	case <-s.ctx.Done():
		return // Close closes every connection
	}
	s.topicsMu.Lock()
	if s.topics[ts.name] == ts {
		delete(s.topics, ts.name)
	}
	s.topicsMu.Unlock()
	ts.mu.Lock()
	producers := make([]*producer, 0, len(ts.producers))
	for _, p := range ts.producers {
		producers = append(producers, p)
	}
	subs := make([]*subscription, 0, len(ts.subs))
	for _, sub := range ts.subs {
		subs = append(subs, sub)
	}
	ts.mu.Unlock()
	s.log.Info("topic no longer served here; closing its producers and consumers", "topic", ts.name,
		"producers", len(producers), "subscriptions", len(subs))
	for _, p := range producers {
		ts.removeProducer(p)
		if !p.conn.detachProducer(p) {
			continue
		}
		_ = p.conn.send(&pb.BaseCommand{Type: pb.BaseCommand_CLOSE_PRODUCER.Enum(), CloseProducer: &pb.CommandCloseProducer{
			ProducerId: proto.Uint64(p.id),
			RequestId:  proto.Uint64(0),
		}}) // a closed connection has nobody to tell
	}
	for _, sub := range subs {
		sub.mu.Lock()
		consumers := append([]*consumer(nil), sub.consumers...)
		sub.mu.Unlock()
		for _, k := range consumers {
			if !k.conn.detach(k) {
				continue
			}
			sub.removeConsumer(k)
			_ = k.conn.send(&pb.BaseCommand{Type: pb.BaseCommand_CLOSE_CONSUMER.Enum(), CloseConsumer: &pb.CommandCloseConsumer{
				ConsumerId: proto.Uint64(k.id),
				RequestId:  proto.Uint64(0),
			}})
		}
	}
}

// --- Stats and admin operations (the broker's admin REST API and metrics) ---

// deliveryCounters count what one subscription's dispatcher delivered.
type deliveryCounters struct {
	messages, bytes int64
}

// countDelivered records one entry handed to a consumer: its messages and
// its bytes. Dispatch calls it for every MESSAGE it assigns (assign). A
// redelivery counts like any delivery here; the redelivery rate counts the
// messages put back (DispatchStats.RedeliveredMessages), as Pulsar's
// msgRateRedeliver does.
func (sub *subscription) countDelivered(messages int32, bytes int, redelivery bool) {
	ts := sub.ts
	ts.countersMu.Lock()
	defer ts.countersMu.Unlock()
	if ts.delivered == nil {
		ts.delivered = make(map[string]*deliveryCounters)
	}
	d := ts.delivered[sub.name]
	if d == nil {
		d = &deliveryCounters{}
		ts.delivered[sub.name] = d
	}
	d.messages += int64(messages)
	d.bytes += int64(bytes)
}

// TopicStats is what the front end knows of a topic it serves: the
// producers attached, the subscriptions' delivery state, and counters
// since the topic was opened here (they restart at zero after an unload
// or a takeover).
type TopicStats struct {
	// Opened is when the topic was opened here (the counters' start).
	Opened         time.Time
	MsgIn, BytesIn int64
	Producers      []ProducerStats
	Subscriptions  map[string]SubscriptionStats
}

// ProducerStats describes one attached producer.
type ProducerStats struct {
	Name           string
	ID             uint64
	Address        string
	Exclusive      bool
	MsgIn, BytesIn int64
	// ClientVersion is the client's CONNECT client_version.
	ClientVersion string
	// Metadata is the producer's properties (shared: not to be changed).
	Metadata map[string]string
}

// SubscriptionStats is one subscription's delivery state.
type SubscriptionStats struct {
	// Type is the subscription type's name in Pulsar's spelling
	// ("Exclusive", "Shared", "Failover", "Key_Shared").
	Type      string
	Durable   bool
	Consumers []ConsumerStats
	// Unacked counts the messages delivered and not yet acknowledged.
	Unacked int64
	// Blocked: the subscription is at its bound of unacknowledged messages
	// (DispatchStats.BlockedOnUnackedMessages).
	Blocked bool
	// PendingRedelivery counts the entries waiting to be sent again (or,
	// on Key_Shared, held back for their key).
	PendingRedelivery int
	// MsgOut and BytesOut count deliveries (countDelivered); Redelivered
	// the messages put back for redelivery.
	MsgOut, BytesOut, Redelivered int64
	// ReadPosition is the next entry the dispatcher reads.
	ReadPosition MessageID
	// ActiveConsumer is DispatchStats.ActiveConsumer.
	ActiveConsumer string
}

// ConsumerStats describes one consumer.
type ConsumerStats struct {
	Name    string
	ID      uint64
	Address string
	Permits int64
	Unacked int64
	// Blocked: at the bound of unacknowledged messages.
	Blocked bool
	// Metadata is the consumer's properties from its SUBSCRIBE (shared:
	// not to be changed).
	Metadata map[string]string
}

// Topics returns the names of the topics the front end has open.
func (s *Server) Topics() []string {
	s.topicsMu.Lock()
	defer s.topicsMu.Unlock()
	out := make([]string, 0, len(s.topics))
	for name := range s.topics {
		out = append(out, name)
	}
	return out
}

func (s *Server) openTopic(name string) *topicState {
	s.topicsMu.Lock()
	defer s.topicsMu.Unlock()
	return s.topics[name]
}

// TopicStats returns the front end's state of a topic; false when it does
// not have the topic open.
func (s *Server) TopicStats(name string) (TopicStats, bool) {
	ts := s.openTopic(name)
	if ts == nil {
		return TopicStats{}, false
	}
	st := TopicStats{Opened: ts.opened, MsgIn: ts.msgIn.Load(), BytesIn: ts.bytesIn.Load(), Subscriptions: map[string]SubscriptionStats{}}
	ts.mu.Lock()
	producers := make([]*producer, 0, len(ts.producers))
	for _, p := range ts.producers {
		producers = append(producers, p)
	}
	subs := make([]*subscription, 0, len(ts.subs))
	for _, sub := range ts.subs {
		subs = append(subs, sub)
	}
	ts.mu.Unlock()
	for _, p := range producers {
		st.Producers = append(st.Producers, ProducerStats{Name: p.name, ID: p.id, Address: p.conn.remote,
			Exclusive: p.exclusive, MsgIn: p.msgIn.Load(), BytesIn: p.bytesIn.Load(), ClientVersion: p.conn.clientVersion,
			Metadata: p.metadata})
	}
	ts.countersMu.Lock()
	delivered := make(map[string]deliveryCounters, len(ts.delivered))
	for name, d := range ts.delivered {
		delivered[name] = *d
	}
	ts.countersMu.Unlock()
	for _, sub := range subs {
		d := delivered[sub.name]
		ds := sub.stats()
		ss := SubscriptionStats{Type: ds.Type, Durable: sub.durable, Unacked: ds.UnackedMessages,
			Blocked: ds.BlockedOnUnackedMessages, PendingRedelivery: ds.WaitingForDelivery,
			MsgOut: d.messages, BytesOut: d.bytes, Redelivered: int64(ds.RedeliveredMessages), ActiveConsumer: ds.ActiveConsumer}
		sub.mu.Lock()
		ss.ReadPosition = MessageID{LedgerID: sub.lastRead.LedgerID, EntryID: sub.lastRead.EntryID + 1}
		addresses := make(map[uint64]string, len(sub.consumers))
		metadata := make(map[uint64]map[string]string, len(sub.consumers))
		for _, c := range sub.consumers {
			addresses[c.id] = c.conn.remote
			metadata[c.id] = c.metadata
		}
		sub.mu.Unlock()
		for _, c := range ds.Consumers {
			ss.Consumers = append(ss.Consumers, ConsumerStats{Name: c.Name, ID: c.ID, Address: addresses[c.ID],
				Permits: c.AvailablePermits, Unacked: c.UnackedMessages, Blocked: c.BlockedOnUnackedMessages,
				Metadata: metadata[c.ID]})
		}
		st.Subscriptions[sub.name] = ss
	}
	return st, true
}

// openSubscription returns the front end's subscription, nil when the
// topic or the subscription is not open here.
func (s *Server) openSubscription(topic, name string) *subscription {
	ts := s.openTopic(topic)
	if ts == nil {
		return nil
	}
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return ts.subs[name]
}

// SeekSubscription resets an open subscription as SEEK does (admin
// resetcursor): the cursor moves so that the next entry delivered is the
// first at or after to, what was pending is forgotten, and every consumer
// is closed (CLOSE_CONSUMER) to reconnect from there. It reports false,
// doing nothing, when the subscription is not open here: the caller then
// resets the cursor itself.
func (s *Server) SeekSubscription(ctx context.Context, topic, name string, to MessageID) (bool, error) {
	sub := s.openSubscription(topic, name)
	if sub == nil {
		return false, nil
	}
	if err := sub.cursor.Reset(ctx, to); err != nil {
		return true, err
	}
	sub.mu.Lock()
	sub.generation++
	sub.clearPendingLocked() // every pending, held and delayed entry, as SEEK
	sub.lastRead = sub.cursor.MarkDelete()
	consumers := append([]*consumer(nil), sub.consumers...)
	sub.mu.Unlock()
	sub.signal()
	s.closeConsumers(sub, consumers, true)
	return true, nil
}

// closeConsumers detaches consumers from sub and tells their clients;
// seeking keeps a reader's subscription for their return (detachConsumer).
func (s *Server) closeConsumers(sub *subscription, consumers []*consumer, seeking bool) {
	for _, k := range consumers {
		if !k.conn.detach(k) {
			continue
		}
		sub.detachConsumer(k, seeking)
		_ = k.conn.send(&pb.BaseCommand{Type: pb.BaseCommand_CLOSE_CONSUMER.Enum(), CloseConsumer: &pb.CommandCloseConsumer{
			ConsumerId: proto.Uint64(k.id),
			RequestId:  proto.Uint64(0),
		}}) // a closed connection has nobody to tell
	}
}

// AckSubscription acknowledges entries of an open subscription on the
// admin's behalf (skip) and forgets their delivery state, so they are not
// redelivered. False, doing nothing, when it is not open here.
func (s *Server) AckSubscription(ctx context.Context, topic, name string, ids []MessageID) (bool, error) {
	sub := s.openSubscription(topic, name)
	if sub == nil {
		return false, nil
	}
	if err := sub.cursor.Ack(ctx, ids); err != nil {
		return true, err
	}
	sub.mu.Lock()
	for _, id := range ids {
		sub.ackedLocked(id)
	}
	sub.mu.Unlock()
	sub.signal()
	return true, nil
}

// AckSubscriptionThrough acknowledges every entry up to and including
// upTo on an open subscription (expireMessages), as AckSubscription.
func (s *Server) AckSubscriptionThrough(ctx context.Context, topic, name string, upTo MessageID) (bool, error) {
	sub := s.openSubscription(topic, name)
	if sub == nil {
		return false, nil
	}
	if err := sub.cursor.AckCumulative(ctx, upTo); err != nil {
		return true, err
	}
	sub.mu.Lock()
	for id := range sub.pending {
		if !upTo.Less(id) {
			sub.ackedLocked(id)
		}
	}
	for id := range sub.replay {
		if !upTo.Less(id) {
			sub.ackedLocked(id)
		}
	}
	sub.mu.Unlock()
	sub.signal()
	return true, nil
}

// CloseSubscription forgets an open subscription before the admin deletes
// its cursor. With consumers attached it does nothing and returns their
// number, unless force: then they are closed (CLOSE_CONSUMER) first.
func (s *Server) CloseSubscription(topic, name string, force bool) int {
	sub := s.openSubscription(topic, name)
	if sub == nil {
		return 0
	}
	sub.mu.Lock()
	consumers := append([]*consumer(nil), sub.consumers...)
	sub.mu.Unlock()
	if len(consumers) > 0 && !force {
		return len(consumers)
	}
	s.closeConsumers(sub, consumers, false)
	sub.ts.dropSubscription(sub)
	return 0
}

// partitionIndexOf is the N of a partition's name "<topic>-partition-N", -1
// for other names (as Pulsar's TopicName.getPartitionIndex).
func partitionIndexOf(name string) int {
	i := strings.LastIndex(name, "-partition-")
	if i < 0 {
		return -1
	}
	n, err := strconv.Atoi(name[i+len("-partition-"):])
	if err != nil || n < 0 {
		return -1
	}
	return n
}

// CanonicalTopic completes a topic name the way Pulsar's broker reads one
// (TopicName): a bare "topic" is persistent://public/default/topic,
// "tenant/ns/topic" is persistent://tenant/ns/topic, and a name with its
// domain (persistent://, non-persistent://) stays as it is. Anything else
// is returned unchanged for the Backend to refuse. Clients send short names
// too: pulsar-client-go's producer does for the partitions it adds when a
// partitioned topic grows.
func CanonicalTopic(name string) string {
	switch {
	case strings.Contains(name, "://"):
		return name
	case !strings.Contains(name, "/"):
		return "persistent://public/default/" + name
	case strings.Count(name, "/") == 2:
		return "persistent://" + name
	}
	return name
}
