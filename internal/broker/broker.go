// Package broker is the broker process of ledger mode: it joins the
// cluster (registration, bundle ownership through internal/ownership), loads
// the partitions of the bundles it owns as partition.Partitions over managed
// ledgers, and serves them through the Kafka front end (internal/kafka),
// with consumer groups from internal/kafka/group. It implements
// kafka.Backend. ISR-mode topics, stored on the brokers themselves, are
// served beside them (isr.go).
package broker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"quire/internal/catalog"
	"quire/internal/kafka"
	"quire/internal/ledger/ledgerclient"
	"quire/internal/lowprio"
	"quire/internal/meta"
	"quire/internal/mlog/mlogclient"
	"quire/internal/ownership"
	"quire/internal/quota"
)

// Config configures a broker.
type Config struct {
	Store   meta.Store
	Ledgers *ledgerclient.Client
	// Bulk, if set, runs catch-up readers' large fetch responses' writes on
	// its low-priority threads.
	Bulk *lowprio.Pool
	// ID is the broker id (0: allocate one). KafkaAdvertised is the
	// host:port clients are told (default: the listener's address).
	ID              int32
	KafkaListener   net.Listener
	KafkaAdvertised string
	// KafkaExtraListeners are more Kafka listeners beside KafkaListener,
	// each a *kafka.Listener with a Name and its own Security (Kafka's
	// listeners and advertised.listeners: e.g. plaintext inside, SASL_SSL
	// outside). When there are any, KafkaListener must be named too;
	// clients are told the endpoints of the listener they came in on.
	// Brokers fetch from each other (ISR mode) on KafkaListener.
	KafkaExtraListeners []ExtraKafkaListener
	// PulsarListener, when set, serves the Pulsar protocol (pulsar.go);
	// PulsarAdvertised is the host:port in its service URL (default: the
	// listener's address). The broker closes the listener.
	PulsarListener   net.Listener
	PulsarAdvertised string
	// PulsarTLSListener, when set beside PulsarListener, serves the Pulsar
	// protocol over TLS too (pulsar+ssl://; the listener does the TLS);
	// PulsarTLSAdvertised is the host:port in that URL (default: the
	// listener's address). The broker closes the listener.
	PulsarTLSListener   net.Listener
	PulsarTLSAdvertised string
	// PulsarSecurity is the authentication and authorization of Pulsar
	// clients and of the admin REST API (pulsar_auth.go); zero: none.
	PulsarSecurity PulsarSecurity
	HTTPAddr       string
	Zone           string
	// Namespace holds Kafka topics (default public/default).
	Namespace string
	// AutoCreateTopics creates unknown topics on metadata and produce
	// requests (default true via DefaultConfig); DefaultPartitions is
	// their partition count (num.partitions, default 1).
	AutoCreateTopics  bool
	DefaultPartitions int32
	MaxMessageBytes   int32
	// SessionTTL is the metadata session's TTL: how long after a crash the
	// broker's bundles stay unowned before another broker takes them.
	SessionTTL time.Duration
	ClusterID  string
	// HandoffAfter: once another broker has been live this long, the
	// bundles whose rendezvous choice it is move to it, so brokers that
	// join share the load (0: bundles move only when their owner dies).
	HandoffAfter time.Duration
	// MaintainInterval is how often loaded partitions re-read where their
	// log starts (after retention deleted ledgers) and forget expired
	// producers; default 10s.
	MaintainInterval time.Duration
	// CompactInterval is how often the compactor looks at the compacted
	// partitions served here (default 15s; negative: never), and
	// CompactionMaxKeys bounds the keys of one compaction's key map
	// (default DefaultCompactionMaxKeys; see compact.go).
	CompactInterval   time.Duration
	CompactionMaxKeys int
	// KafkaMaxQueuedRequestBytes and KafkaMaxConnRequestBytes bound the
	// bytes of Kafka requests read and not yet answered, over the broker
	// and per connection (queued.max.request.bytes); at a bound the front
	// end stops reading. Zero: kafka.DefaultMaxQueuedRequestBytes and
	// kafka.DefaultMaxConnRequestBytes.
	// ReadAheadBytes bounds what each partition fetches ahead for a
	// consumer behind the tail (default mlogclient.DefaultReadAheadBytes,
	// negative: none); ReadAheadBudgetBytes bounds it over the broker
	// (default 256 MiB).
	ReadAheadBytes       int64
	ReadAheadBudgetBytes int64
	// TailCacheBudgetBytes bounds the caches of recent entries (tailing
	// readers are served from them; 32 MiB each at most) over every
	// partition and Pulsar topic of the broker (default 512 MiB).
	TailCacheBudgetBytes int64
	// MaxQueuedAppends bounds each partition's appends waiting for its
	// ledger writer (which takes ledgerclient's MaxInFlight at a time);
	// produces beyond it wait for room (default mlog.DefaultMaxQueuedAppends).
	MaxQueuedAppends int
	// ProducerIDExpiration is how long an idempotent producer that writes
	// nothing is remembered per partition (producer.id.expiration.ms;
	// default 24h).
	ProducerIDExpiration       time.Duration
	KafkaMaxQueuedRequestBytes int64
	KafkaMaxConnRequestBytes   int64
	// KafkaMaxConnectionsPerIP refuses a Kafka connection from an IP that
	// has this many open (max.connections.per.ip); 0: unlimited. Client
	// quotas (internal/quota) are always served and enforced: they are in
	// the metadata store, and none are set at first.
	KafkaMaxConnectionsPerIP int
	// StorageCheckInterval is how often the bookie registry is read to know
	// whether produces can be taken (storage.go); default
	// DefaultStorageCheckInterval.
	StorageCheckInterval time.Duration
	// Timeouts bound the broker's own waits; zero fields take defaults.
	Timeouts   Timeouts
	Registerer prometheus.Registerer
	Logger     *slog.Logger

	// PulsarMaxUnackedPerConsumer is Pulsar's maxUnackedMessagesPerConsumer
	// (0: pulsar.DefaultMaxUnackedPerConsumer).
	PulsarMaxUnackedPerConsumer int
	// Pulsar holds the Pulsar front end's other settings (pulsar.go).
	Pulsar PulsarOptions

	// ISR turns ISR mode on (isr.go); zero: off.
	ISR ISRConfig
}

// ExtraKafkaListener is one of Config.KafkaExtraListeners: Listener (a
// *kafka.Listener, named) and the host:port clients are told for it
// (default: its address).
type ExtraKafkaListener struct {
	Listener   net.Listener
	Advertised string
}

// kafkaListeners checks the names of cfg's Kafka listeners and returns the
// advertised endpoint of each named one (nil when the only listener is
// unnamed).
func (cfg *Config) kafkaListeners() (map[string]string, error) {
	if len(cfg.KafkaExtraListeners) == 0 {
		if l, ok := cfg.KafkaListener.(*kafka.Listener); !ok || l.Name == "" {
			return nil, nil
		}
	}
	out := map[string]string{}
	add := func(ln net.Listener, advertised string) error {
		l, ok := ln.(*kafka.Listener)
		if !ok || l.Name == "" {
			return errors.New("server: with several Kafka listeners each must be a named *kafka.Listener")
		}
		if _, dup := out[l.Name]; dup {
			return fmt.Errorf("server: Kafka listener name %q used twice", l.Name)
		}
		if advertised == "" {
			advertised = ln.Addr().String()
		}
		if _, _, err := splitHostPort(advertised); err != nil {
			return fmt.Errorf("server: advertised address of Kafka listener %s: %w", l.Name, err)
		}
		out[l.Name] = advertised
		return nil
	}
	if err := add(cfg.KafkaListener, cfg.KafkaAdvertised); err != nil {
		return nil, err
	}
	for _, x := range cfg.KafkaExtraListeners {
		if err := add(x.Listener, x.Advertised); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// Timeouts bound what the broker waits for on its own account (a client's
// request carries its own timeout on top).
type Timeouts struct {
	// MetadataOwners bounds one Metadata request's wait for the owners of
	// its partitions (default 2s): right after a broker died its
	// partitions are unowned until its session expires, and clients must
	// not wait for each.
	MetadataOwners time.Duration
	// Coordinator bounds FindCoordinator's wait for a group's owner
	// (default 5s).
	Coordinator time.Duration
	// LoadPartition bounds taking over a partition's log (default 60s).
	LoadPartition time.Duration
	// ClosePartition bounds closing one (default 10s).
	ClosePartition time.Duration
	// ListBundleTopics bounds listing the topics of a newly owned bundle
	// (default 30s).
	ListBundleTopics time.Duration
	// DeleteGrace is how long a deleted topic's storage stays, so owners
	// elsewhere notice the delete and close first (default 2s);
	// DeleteStorage bounds deleting it (default 1m).
	DeleteGrace   time.Duration
	DeleteStorage time.Duration
	// RefreshStart bounds one partition's re-read of where its log starts
	// (default 5s).
	RefreshStart time.Duration
	// Stats bounds reading one partition's stats for /metrics (default
	// 200ms: a scrape must not hang on a busy log).
	Stats time.Duration
}

// DefaultReadAheadBudgetBytes is Config.ReadAheadBudgetBytes' default.
const DefaultReadAheadBudgetBytes = 256 << 20

// DefaultTailCacheBudgetBytes is Config.TailCacheBudgetBytes' default.
const DefaultTailCacheBudgetBytes = 512 << 20

// DefaultTimeouts returns the defaults of every Timeouts field.
func DefaultTimeouts() Timeouts {
	return Timeouts{MetadataOwners: 2 * time.Second, Coordinator: 5 * time.Second,
		LoadPartition: 60 * time.Second, ClosePartition: 10 * time.Second, ListBundleTopics: 30 * time.Second,
		DeleteGrace: 2 * time.Second, DeleteStorage: time.Minute, RefreshStart: 5 * time.Second,
		Stats: 200 * time.Millisecond}
}

// withDefaults fills zero fields from DefaultTimeouts.
func (t Timeouts) withDefaults() Timeouts {
	d := DefaultTimeouts()
	for _, f := range []struct{ v, def *time.Duration }{
		{&t.MetadataOwners, &d.MetadataOwners}, {&t.Coordinator, &d.Coordinator},
		{&t.LoadPartition, &d.LoadPartition}, {&t.ClosePartition, &d.ClosePartition},
		{&t.ListBundleTopics, &d.ListBundleTopics}, {&t.DeleteGrace, &d.DeleteGrace},
		{&t.DeleteStorage, &d.DeleteStorage}, {&t.RefreshStart, &d.RefreshStart}, {&t.Stats, &d.Stats},
	} {
		if *f.v <= 0 {
			*f.v = *f.def
		}
	}
	return t
}

// DefaultConfig returns the defaults for the fields that have them.
func DefaultConfig() Config {
	return Config{Namespace: "public/default", AutoCreateTopics: true, DefaultPartitions: 1,
		MaxMessageBytes: defaultMaxMessageBytes, SessionTTL: 6 * time.Second, ClusterID: "quire",
		HandoffAfter: time.Minute}
}

// Broker is one running broker.
type Broker struct {
	cfg         Config
	log         *slog.Logger
	session     meta.Session
	cluster     *ownership.Cluster
	admin       *catalog.Catalog
	front       *kafka.Server
	quotas      *quota.Store
	groups      kafka.GroupCoordinator
	closeGroups func()
	collector   *collector

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu    sync.Mutex
	parts map[string]*loaded // by partition name

	readAhead *mlogclient.ReadAheadBudget
	tailCache *mlogclient.ReadAheadBudget // every managed ledger's entry cache

	// storage is the gate that refuses produces while the bookies cannot
	// take writes (storage.go); produceRefused counts the refusals.
	storage        *storageGate
	produceRefused atomic.Int64

	// pulsar serves Pulsar topics (pulsar.go); nil without a listener.
	pulsar atomic.Pointer[pulsarBackend]
	// isr is ISR mode (isr.go); nil when off. Set before serving.
	isr *isrSide
	// txn is the transaction coordinator (txn.go). Set before serving.
	txn *txnSide

	// loads counts partitions loaded here; failures those that stopped
	// serving because their log failed or was fenced (not a release).
	loads, failures atomic.Int64
}

// Start joins the cluster and serves Kafka on cfg.KafkaListener.
func Start(ctx context.Context, cfg Config) (*Broker, error) {
	def := DefaultConfig()
	if cfg.Namespace == "" {
		cfg.Namespace = def.Namespace
	}
	if cfg.DefaultPartitions <= 0 {
		cfg.DefaultPartitions = def.DefaultPartitions
	}
	if cfg.DefaultPartitions > MaxPartitionsPerTopic {
		return nil, fmt.Errorf("server: default partitions %d above the limit of %d", cfg.DefaultPartitions, MaxPartitionsPerTopic)
	}
	if cfg.MaxMessageBytes <= 0 {
		cfg.MaxMessageBytes = def.MaxMessageBytes
	}
	if cfg.MaxMessageBytes > maxEntryBatch {
		return nil, fmt.Errorf("server: message max bytes %d is more than one ledger entry holds (%d)", cfg.MaxMessageBytes, maxEntryBatch)
	}
	if cfg.SessionTTL <= 0 {
		cfg.SessionTTL = def.SessionTTL
	}
	if cfg.ClusterID == "" {
		cfg.ClusterID = def.ClusterID
	}
	if cfg.MaintainInterval <= 0 {
		cfg.MaintainInterval = 10 * time.Second
	}
	if cfg.CompactInterval == 0 {
		cfg.CompactInterval = 15 * time.Second
	}
	if cfg.CompactionMaxKeys <= 0 {
		cfg.CompactionMaxKeys = DefaultCompactionMaxKeys
	}
	cfg.Timeouts = cfg.Timeouts.withDefaults()
	if cfg.StorageCheckInterval <= 0 {
		cfg.StorageCheckInterval = DefaultStorageCheckInterval
	}
	if cfg.ReadAheadBudgetBytes <= 0 {
		cfg.ReadAheadBudgetBytes = DefaultReadAheadBudgetBytes
	}
	if cfg.TailCacheBudgetBytes <= 0 {
		cfg.TailCacheBudgetBytes = DefaultTailCacheBudgetBytes
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.KafkaListener == nil {
		return nil, errors.New("server: a Kafka listener is required")
	}
	if cfg.KafkaAdvertised == "" {
		cfg.KafkaAdvertised = cfg.KafkaListener.Addr().String()
	}
	if _, _, err := splitHostPort(cfg.KafkaAdvertised); err != nil {
		return nil, fmt.Errorf("server: advertised Kafka address: %w", err)
	}
	kafkaListeners, err := cfg.kafkaListeners()
	if err != nil {
		return nil, err
	}
	bctx, cancel := context.WithCancel(context.Background())
	b := &Broker{cfg: cfg, log: cfg.Logger.With("component", "broker"), admin: catalog.New(cfg.Store),
		ctx: bctx, cancel: cancel, parts: map[string]*loaded{},
		readAhead: mlogclient.NewReadAheadBudget(cfg.ReadAheadBudgetBytes), tailCache: mlogclient.NewReadAheadBudget(cfg.TailCacheBudgetBytes),
		storage: newStorageGate()}
	if err := b.admin.EnsureDefaults(ctx); err != nil {
		cancel()
		return nil, fmt.Errorf("server: %w", err)
	}
	if ns := cfg.Namespace; ns != "public/default" {
		if _, err := b.admin.GetPolicies(ctx, ns); errors.Is(err, catalog.ErrNamespaceNotFound) {
			if err := b.admin.CreateNamespace(ctx, ns, nil); err != nil && !errors.Is(err, catalog.ErrNamespaceExists) {
				cancel()
				return nil, fmt.Errorf("server: create namespace %s: %w", ns, err)
			}
		}
	}
	sess, err := cfg.Store.NewSession(ctx, cfg.SessionTTL)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("server: metadata session: %w", err)
	}
	b.session = sess
	cl, err := ownership.New(ownership.Config{Store: cfg.Store, Session: sess, Logger: cfg.Logger,
		Self: ownership.Member{ID: cfg.ID, KafkaAddr: cfg.KafkaAdvertised, KafkaListeners: kafkaListeners,
			HTTPAddr: cfg.HTTPAddr, Zone: cfg.Zone},
		OnAcquire: b.onAcquire, OnRelease: b.onRelease, HandoffAfter: cfg.HandoffAfter})
	if err != nil {
		sess.Close()
		cancel()
		return nil, fmt.Errorf("server: %w", err)
	}
	b.cluster = cl
	if err := cl.Start(ctx); err != nil {
		sess.Close()
		cancel()
		return nil, fmt.Errorf("server: join the cluster: %w", err)
	}
	if b.groups, b.closeGroups, err = newGroups(b); err != nil {
		b.Close()
		return nil, fmt.Errorf("server: %w", err)
	}
	b.startTxn() // before the front end, which asks whether there is one
	if b.quotas, err = quota.Open(ctx, cfg.Store, b.log); err != nil {
		b.Close()
		return nil, fmt.Errorf("server: %w", err)
	}
	front, err := kafka.New(kafka.Config{Backend: b, Logger: cfg.Logger, Registerer: cfg.Registerer,
		MaxQueuedRequestBytes: cfg.KafkaMaxQueuedRequestBytes, MaxConnRequestBytes: cfg.KafkaMaxConnRequestBytes,
		Quotas: b.quotas, MaxConnectionsPerIP: cfg.KafkaMaxConnectionsPerIP, Bulk: cfg.Bulk})
	if err != nil {
		b.Close()
		return nil, fmt.Errorf("server: %w", err)
	}
	b.front = front
	if cfg.Registerer != nil {
		b.collector = newCollector(b)
		if err := cfg.Registerer.Register(b.collector); err != nil {
			b.log.Warn("broker metrics not registered", "err", err)
			b.collector = nil
		}
	}
	if err := b.startPulsar(ctx); err != nil {
		b.Close()
		return nil, fmt.Errorf("server: %w", err)
	}
	if err := b.startISR(ctx); err != nil {
		b.Close()
		return nil, fmt.Errorf("server: %w", err)
	}
	b.wg.Add(5)
	go func() {
		defer b.wg.Done()
		b.watchTopics()
	}()
	go func() {
		defer b.wg.Done()
		b.compactLoop()
	}()
	go func() {
		defer b.wg.Done()
		b.watchStorage(cfg.StorageCheckInterval)
	}()
	go func() {
		defer b.wg.Done()
		if err := front.Serve(cfg.KafkaListener); err != nil && b.ctx.Err() == nil {
			b.log.Error("kafka listener stopped", "err", err)
		}
	}()
	for _, x := range cfg.KafkaExtraListeners {
		b.wg.Add(1)
		go func() {
			defer b.wg.Done()
			if err := front.Serve(x.Listener); err != nil && b.ctx.Err() == nil {
				b.log.Error("kafka listener stopped", "listener", x.Listener.(*kafka.Listener).Name, "err", err)
			}
		}()
	}
	go func() {
		defer b.wg.Done()
		b.maintain()
	}()
	b.log.Info("broker started", "id", cl.Self().ID, "kafka", cfg.KafkaAdvertised, "namespace", cfg.Namespace)
	return b, nil
}

// ID is the broker's id.
func (b *Broker) ID() int32 { return b.cluster.Self().ID }

// Lost is closed when the broker lost its metadata session: it owns
// nothing any more and must be restarted to rejoin.
func (b *Broker) Lost() <-chan struct{} { return b.cluster.Done() }

// Healthy reports whether the broker still holds its metadata session.
func (b *Broker) Healthy(context.Context) error {
	select {
	case <-b.Lost():
		return errors.New("metadata session lost")
	default:
		return nil
	}
}

// Close stops serving: the Kafka listener closes, the partitions close
// (their current ledgers are closed cleanly), the bundles are released so
// another broker takes them at once, and the session ends.
func (b *Broker) Close() error {
	b.cancel()
	if b.collector != nil {
		b.cfg.Registerer.Unregister(b.collector)
	}
	if b.front != nil {
		b.front.Close()
	}
	if b.quotas != nil {
		b.quotas.Close()
	}
	b.closePulsar()
	b.closeISR()
	b.closeTxn()
	var err error
	if b.cluster != nil {
		err = b.cluster.Close() // releases bundles: onRelease closes their partitions
	}
	b.closeAll()
	if b.closeGroups != nil {
		b.closeGroups()
	}
	if b.session != nil {
		b.session.Close()
	}
	b.wg.Wait()
	return err
}

// maintain refreshes the loaded partitions' log start (retention) now and
// then, and drops partitions that failed.
func (b *Broker) maintain() {
	t := time.NewTicker(b.cfg.MaintainInterval)
	defer t.Stop()
	for {
		select {
		case <-b.ctx.Done():
			return
		case <-t.C:
		}
		b.mu.Lock()
		var ps []*loaded
		for _, l := range b.parts {
			ps = append(ps, l)
		}
		b.mu.Unlock()
		for _, l := range ps {
			if p := l.partition(); p != nil {
				ctx, cancel := context.WithTimeout(b.ctx, b.cfg.Timeouts.RefreshStart)
				if err := p.RefreshStart(ctx); err != nil {
					b.log.Debug("refresh log start", "partition", l.name, "err", err)
				}
				cancel()
				if n, left := p.ExpireProducers(time.Now()); n > 0 {
					b.log.Debug("expired idempotent producers", "partition", l.name, "expired", n, "remaining", left)
				}
			}
		}
	}
}

func splitHostPort(addr string) (string, int32, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, err
	}
	n, err := strconv.ParseInt(port, 10, 32)
	if err != nil {
		return "", 0, fmt.Errorf("port %q: %w", port, err)
	}
	return host, int32(n), nil
}
