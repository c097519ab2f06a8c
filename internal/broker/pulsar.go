package broker

// Pulsar topics on this broker: the pulsar.Backend that the Pulsar front end
// (internal/pulsar) serves from.
//
// A Pulsar topic persistent://tenant/ns/topic is a managed ledger named
// pulsarStorageName(topic) = "persistent://tenant/ns/topic@pulsar". A Kafka
// partition's managed ledger is named "<partition name>@<16 hex digits of
// the topic id>" (storageName), and a Pulsar topic name never holds '@'
// (names are checked with the Kafka alphabet, [a-zA-Z0-9._-]), so the two
// can never name the same ledger.
//
// Ownership is the Kafka topics': a topic belongs to the bundle its name
// hashes to (a partition's own name, "…-partition-N", for a partitioned
// topic), LOOKUP asks internal/ownership for the owner (taking the bundle
// when it is unowned and this broker is the choice), and a broker serves
// only the topics of bundles it owns: others get ServiceNotReady and the
// client looks up again. Each broker with a Pulsar listener writes its
// service URL (and its pulsar+ssl:// URL when it has a TLS listener) in an
// ephemeral key (pulsarBrokerKey) so that a LOOKUP answered elsewhere can
// redirect to it. Authentication and authorization are in pulsar_auth.go.
//
// Partitioned topics: their partition count is a catalogue topic record
// (like a Kafka topic's), marked with the config quire.protocol=pulsar;
// partition i is the topic "<name>-partition-<i>". A catalogue record
// without the mark is a Kafka topic: Pulsar clients are refused on it with
// NotAllowed (reading Kafka topics over Pulsar is not supported: their
// entries are Kafka record batches). Non-partitioned topics have no
// catalogue record: they exist when their managed ledger's record does,
// and are created on PRODUCER or SUBSCRIBE when Config.AutoCreateTopics is
// set (Pulsar's allowAutoTopicCreation; there is no per-namespace setting
// yet: catalog.Policies has no field for it).
//
// Namespace policies apply as for Kafka topics, read when the topic is
// loaded: persistence (E, Qw, Qa of new ledgers), retention, backlog quota,
// message TTL (pulsarSettings) and deduplication. A change applies at the
// next load (a takeover, unload or restart).

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"quire/internal/catalog"
	"quire/internal/meta"
	"quire/internal/mlog"
	"quire/internal/mlog/mlogclient"
	"quire/internal/ownership"
	"quire/internal/pulsar"
)

const (
	// pulsarBrokersPrefix holds one ephemeral key per broker with a Pulsar
	// listener: its service URL (pulsar://host:port), and on a second line
	// its TLS one (pulsar+ssl://host:port) when it has one
	// (joinServiceURLs).
	pulsarBrokersPrefix = "/quire/pulsar/brokers/"
	// pulsarProtocolConfig marks a catalogue topic record as a Pulsar
	// partitioned topic (value "pulsar").
	pulsarProtocolConfig = "quire.protocol"
	pulsarStorageSuffix  = "@pulsar"
	// DefaultPulsarScanBack is how many entries at a topic's tail are read
	// when it is loaded with deduplication on, to rebuild each producer's
	// last sequence id (as Kafka partitions rebuild their producer table).
	DefaultPulsarScanBack = 2000
)

func pulsarBrokerKey(id int32) string {
	return pulsarBrokersPrefix + strconv.FormatInt(int64(id), 10)
}

// pulsarStorageName is the managed ledger of a Pulsar topic.
func pulsarStorageName(topic string) string { return topic + pulsarStorageSuffix }

// isPulsarTopic reports whether a catalogue topic record is a Pulsar
// partitioned topic rather than a Kafka topic.
func isPulsarTopic(rec catalog.Topic) bool { return rec.Configs[pulsarProtocolConfig] == "pulsar" }

// pulsarBackend is the broker's pulsar.Backend.
type pulsarBackend struct {
	b      *Broker
	server *pulsar.Server
	url    string
	tlsURL string // "" without a TLS listener

	mu     sync.Mutex
	topics map[string]*pulsarTopic // by topic name, loading or loaded
	// memTopics are the non-persistent topics (pulsar_nonpersistent.go).
	memTopics map[string]*pulsarMemTopic

	// rates samples the front end's counters for the admin API's rates
	// (pulsar_metrics.go).
	rates *rateSampler
}

var _ pulsar.Backend = (*pulsarBackend)(nil)

// PulsarOptions are the Pulsar front end's settings; zero fields take
// Apache Pulsar's defaults.
type PulsarOptions struct {
	// MaxMessageSize is Pulsar's maxMessageSize: the largest message (or
	// batch) a producer may send, advertised in CONNECTED so that clients
	// chunk or refuse before sending (0: pulsar.DefaultMaxMessageSize,
	// 5 MiB). At most one ledger entry less the frame padding.
	MaxMessageSize int
	// KeySharedAutoSplitHalves is Pulsar's
	// subscriptionKeySharedUseConsistentHashing=false: AUTO_SPLIT Key_Shared
	// consumers split the hash range in halves as they join, instead of
	// taking points on a consistent-hashing ring (the default).
	KeySharedAutoSplitHalves bool
}

// maxPulsarMessageSize is the largest MaxMessageSize an entry holds: an
// entry may exceed MaxMessageSize by the frame padding (10 KiB).
const maxPulsarMessageSize = maxEntryBatch - 16<<10

// startPulsar serves the Pulsar protocol on Config.PulsarListener (nothing
// when it is nil) and registers the service URL under the broker's session.
func (b *Broker) startPulsar(ctx context.Context) error {
	ln := b.cfg.PulsarListener
	if ln == nil {
		return nil
	}
	adv := b.cfg.PulsarAdvertised
	if adv == "" {
		adv = ln.Addr().String()
	}
	if _, _, err := net.SplitHostPort(adv); err != nil {
		return fmt.Errorf("advertised Pulsar address: %w", err)
	}
	if b.cfg.Pulsar.MaxMessageSize < 0 || b.cfg.Pulsar.MaxMessageSize > maxPulsarMessageSize {
		return fmt.Errorf("Pulsar max message size %d: not in [0, %d] (0: the default; at most one ledger entry less the frame padding)", b.cfg.Pulsar.MaxMessageSize, maxPulsarMessageSize)
	}
	pb := &pulsarBackend{b: b, url: "pulsar://" + adv, topics: map[string]*pulsarTopic{},
		memTopics: map[string]*pulsarMemTopic{}, rates: newRateSampler()}
	tlsLn := b.cfg.PulsarTLSListener
	if tlsLn != nil {
		tlsAdv := cmp.Or(b.cfg.PulsarTLSAdvertised, tlsLn.Addr().String())
		if _, _, err := net.SplitHostPort(tlsAdv); err != nil {
			return fmt.Errorf("advertised Pulsar TLS address: %w", err)
		}
		pb.tlsURL = "pulsar+ssl://" + tlsAdv
	}
	sec := b.cfg.PulsarSecurity
	if err := sec.validate(); err != nil {
		return err
	}
	var authorizer pulsar.Authorizer
	if sec.Authorization {
		authorizer = &pulsarAuthorizer{b: b}
	}
	srv, err := pulsar.New(pulsar.Config{Backend: pb, AdvertisedURL: pb.url, AdvertisedTLSURL: pb.tlsURL, Logger: b.cfg.Logger,
		Authenticator: sec.Authenticator, AnonymousRole: sec.AnonymousRole, Authorizer: authorizer,
		MaxMessageSize:        min(cmp.Or(b.cfg.Pulsar.MaxMessageSize, pulsar.DefaultMaxMessageSize), maxPulsarMessageSize),
		MaxUnackedPerConsumer: b.cfg.PulsarMaxUnackedPerConsumer, KeySharedAutoSplitHalves: b.cfg.Pulsar.KeySharedAutoSplitHalves,
		// Unique across brokers and restarts: the session (lease) id never
		// repeats, and deduplication keys on producer names.
		ProducerNamePrefix: fmt.Sprintf("%s-%d-%x", b.cfg.ClusterID, b.ID(), b.session.ID())})
	if err != nil {
		return err
	}
	pb.server = srv
	if _, err := b.session.CreateEphemeral(ctx, pulsarBrokerKey(b.ID()), []byte(joinServiceURLs(pb.url, pb.tlsURL))); err != nil {
		return fmt.Errorf("register the Pulsar service URL: %w", err)
	}
	b.pulsar.Store(pb)
	if tlsLn != nil {
		b.wg.Add(1)
		go func() {
			defer b.wg.Done()
			if err := srv.Serve(tlsLn); err != nil && !errors.Is(err, pulsar.ErrServerClosed) && b.ctx.Err() == nil {
				b.log.Error("pulsar TLS listener stopped", "err", err)
			}
		}()
	}
	b.wg.Add(2)
	go func() {
		defer b.wg.Done()
		pb.sampleRates(b.ctx)
	}()
	go func() {
		defer b.wg.Done()
		if err := srv.Serve(ln); err != nil && !errors.Is(err, pulsar.ErrServerClosed) && b.ctx.Err() == nil {
			b.log.Error("pulsar listener stopped", "err", err)
		}
	}()
	b.log.Info("serving the Pulsar protocol", "url", pb.url, "tls_url", pb.tlsURL,
		"authentication", sec.Authenticator != nil, "authorization", sec.Authorization)
	return nil
}

// joinServiceURLs is the value of a broker's pulsarBrokerKey: its
// pulsar:// URL, then its pulsar+ssl:// URL on a second line when it has
// one (a broker of an older version wrote the first line only).
func joinServiceURLs(url, tlsURL string) string {
	if tlsURL == "" {
		return url
	}
	return url + "\n" + tlsURL
}

// splitServiceURLs undoes joinServiceURLs.
func splitServiceURLs(value string) (url, tlsURL string) {
	url, tlsURL, _ = strings.Cut(value, "\n")
	return url, tlsURL
}

// closePulsar stops the Pulsar front end and closes its topics (their
// ledgers closed cleanly, so the next owner need not recover them).
func (b *Broker) closePulsar() {
	pb := b.pulsar.Load()
	if pb == nil {
		for _, ln := range []net.Listener{b.cfg.PulsarListener, b.cfg.PulsarTLSListener} {
			if ln != nil {
				ln.Close()
			}
		}
		return
	}
	pb.server.Close()
	if ln := b.cfg.PulsarTLSListener; ln != nil {
		ln.Close() // Close closed it if Serve had begun; not otherwise
	}
	pb.dropWhere(func(*pulsarTopic) bool { return true })
	pb.dropMemTopicsWhere(func(*pulsarMemTopic) bool { return true })
}

// releasePulsar closes the Pulsar topics of a bundle this broker no longer
// owns; their clients are told (CLOSE_PRODUCER / CLOSE_CONSUMER) and look
// the topics up again.
func (b *Broker) releasePulsar(bundle catalog.Bundle) {
	if pb := b.pulsar.Load(); pb != nil {
		pb.dropWhere(func(t *pulsarTopic) bool { return t.bundle == bundle })
		pb.dropMemTopicsWhere(func(t *pulsarMemTopic) bool { return t.bundle == bundle })
	}
}

// PulsarURL is the broker's Pulsar service URL, "" without a Pulsar
// listener.
func (b *Broker) PulsarURL() string {
	if pb := b.pulsar.Load(); pb != nil {
		return pb.url
	}
	return ""
}

// CreatePartitionedTopic records a Pulsar partitioned topic of n
// partitions (persistent://tenant/ns/name); its partitions are created
// when first used.
func (b *Broker) CreatePartitionedTopic(ctx context.Context, topic string, partitions int) error {
	ns, local, err := parsePulsarTopic(topic)
	if err != nil {
		return err
	}
	if partitions < 1 || partitions > MaxPartitionsPerTopic {
		return fmt.Errorf("%w: %d partitions (want 1..%d)", pulsar.ErrNotAllowed, partitions, MaxPartitionsPerTopic)
	}
	if _, err := b.admin.CreateTopic(ctx, ns, local, int32(partitions), map[string]string{pulsarProtocolConfig: "pulsar"}); err != nil {
		return pulsarErr(fmt.Errorf("create partitioned topic %s: %w", topic, err), pulsar.ErrMetadata)
	}
	return nil
}

// parsePulsarTopic splits persistent://tenant/ns/local and checks it.
// Non-persistent topics (served only through the binary protocol:
// pulsar_nonpersistent.go) are refused.
func parsePulsarTopic(topic string) (ns, local string, err error) {
	if strings.HasPrefix(topic, nonPersistentScheme) {
		return "", "", fmt.Errorf("%w: %s: non-persistent topics are served only over the binary protocol", pulsar.ErrNotAllowed, topic)
	}
	ns, err = catalog.NamespaceOf(topic)
	if err != nil {
		return "", "", fmt.Errorf("%w: %v", pulsar.ErrInvalidTopicName, err)
	}
	local = strings.TrimPrefix(topic, "persistent://"+ns+"/")
	if err := catalog.ValidateTopicName(local); err != nil {
		return "", "", fmt.Errorf("%w: %v", pulsar.ErrInvalidTopicName, err)
	}
	return ns, local, nil
}

// pulsarErr maps what the catalogue, ownership and the managed ledger
// return to the front end's sentinels; fallback wraps anything else.
func pulsarErr(err error, fallback error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return err
	case errors.Is(err, catalog.ErrNamespaceNotFound), errors.Is(err, catalog.ErrTopicNotFound):
		return fmt.Errorf("%w: %v", pulsar.ErrTopicNotFound, err)
	case errors.Is(err, catalog.ErrInvalidTopicName), errors.Is(err, catalog.ErrInvalidName):
		return fmt.Errorf("%w: %v", pulsar.ErrInvalidTopicName, err)
	case errors.Is(err, catalog.ErrTopicExists), errors.Is(err, catalog.ErrInvalidPartitions):
		return fmt.Errorf("%w: %v", pulsar.ErrNotAllowed, err)
	case errors.Is(err, mlog.ErrClosed), errors.Is(err, mlog.ErrFenced), errors.Is(err, ownership.ErrSessionLost),
		errors.Is(err, ownership.ErrClosed), errors.Is(err, ownership.ErrNotOwner):
		return fmt.Errorf("%w: %v", pulsar.ErrServiceNotReady, err)
	case errors.Is(err, mlog.ErrNoSuchCursor):
		return fmt.Errorf("%w: %v", pulsar.ErrSubscriptionNotFound, err)
	case errors.Is(err, mlog.ErrBacklogQuotaExceeded):
		return fmt.Errorf("%w: %v", pulsar.ErrProducerBlockedQuota, err)
	case errors.Is(err, mlog.ErrBacklogQuotaHoldTimeout):
		return fmt.Errorf("%w: %v", pulsar.ErrNotAllowed, err)
	}
	for _, known := range []error{pulsar.ErrTopicNotFound, pulsar.ErrNotAllowed, pulsar.ErrServiceNotReady, pulsar.ErrProducerBlockedQuota,
		pulsar.ErrInvalidTopicName, pulsar.ErrPersistence, pulsar.ErrMetadata, pulsar.ErrSubscriptionNotFound} {
		if errors.Is(err, known) {
			return err
		}
	}
	return fmt.Errorf("%w: %v", fallback, err)
}

// Lookup implements pulsar.Backend: the owner of the topic's bundle,
// assigned now when it has none.
func (pb *pulsarBackend) Lookup(ctx context.Context, topic string) (pulsar.LookupResult, error) {
	topic, _ = persistentNamesake(topic) // the bundle that owns it
	if _, _, err := parsePulsarTopic(topic); err != nil {
		return pulsar.LookupResult{}, err
	}
	b := pb.b
	owner, err := pb.owner(ctx, topic)
	if err != nil {
		return pulsar.LookupResult{}, err
	}
	if owner.ID == b.ID() {
		return pulsar.LookupResult{}, nil
	}
	kv, err := b.cfg.Store.Get(ctx, pulsarBrokerKey(owner.ID))
	if err != nil {
		if errors.Is(err, meta.ErrNotFound) {
			return pulsar.LookupResult{}, fmt.Errorf("%w: %s is owned by broker %d, which serves no Pulsar listener", pulsar.ErrServiceNotReady, topic, owner.ID)
		}
		return pulsar.LookupResult{}, pulsarErr(err, pulsar.ErrMetadata)
	}
	url, tlsURL := splitServiceURLs(string(kv.Value))
	return pulsar.LookupResult{OwnerURL: url, OwnerTLSURL: tlsURL}, nil
}

// owner asks ownership for the broker owning topic's bundle, assigning
// one when there is none, within Timeouts.Coordinator: the front end's
// requests carry no deadline of their own, and right after a broker died
// its bundles stay unowned until its session expires (the client retries).
func (pb *pulsarBackend) owner(ctx context.Context, topic string) (ownership.Member, error) {
	ctx, cancel := context.WithTimeout(ctx, pb.b.cfg.Timeouts.Coordinator)
	defer cancel()
	owner, err := pb.b.cluster.Lookup(ctx, topic)
	if err != nil {
		return ownership.Member{}, pulsarErr(err, pulsar.ErrServiceNotReady)
	}
	return owner, nil
}

// PartitionedMetadata implements pulsar.Backend.
func (pb *pulsarBackend) PartitionedMetadata(ctx context.Context, topic string) (int, error) {
	if namesake, nonPersistent := persistentNamesake(topic); nonPersistent {
		_, _, err := parsePulsarTopic(namesake)
		return 0, err // never partitioned
	}
	ns, local, err := parsePulsarTopic(topic)
	if err != nil {
		return 0, err
	}
	rec, err := pb.b.admin.GetTopic(ctx, ns, local)
	switch {
	case errors.Is(err, catalog.ErrTopicNotFound):
		return 0, nil // non-partitioned, or not created yet
	case err != nil:
		return 0, pulsarErr(err, pulsar.ErrMetadata)
	case !isPulsarTopic(rec):
		return 0, kafkaTopicErr(topic)
	}
	return int(rec.Partitions), nil
}

func kafkaTopicErr(topic string) error {
	return fmt.Errorf("%w: %s is a Kafka topic: its entries are Kafka record batches, which Pulsar clients cannot read", pulsar.ErrNotAllowed, topic)
}

// Topic implements pulsar.Backend: the topic, loaded (taken over) the
// first time, when this broker owns its bundle.
func (pb *pulsarBackend) Topic(ctx context.Context, name string, create bool) (pulsar.Topic, error) {
	if _, nonPersistent := persistentNamesake(name); nonPersistent {
		t, err := pb.memTopic(ctx, name, create)
		if err != nil {
			return nil, err
		}
		return t, nil
	}
	t, err := pb.topic(ctx, name, create, false)
	if err != nil {
		return nil, err // not a typed nil
	}
	return t, nil
}

// topic is Topic; adminCreate creates the topic whatever
// Config.AutoCreateTopics says (the admin API's create).
func (pb *pulsarBackend) topic(ctx context.Context, name string, create, adminCreate bool) (*pulsarTopic, error) {
	b := pb.b
	ns, local, err := parsePulsarTopic(name)
	if err != nil {
		return nil, err
	}
	for attempt := 0; ; attempt++ {
		if !b.cluster.Owns(name) {
			owner, err := pb.owner(ctx, name)
			if err != nil {
				return nil, err
			}
			if owner.ID != b.ID() {
				return nil, fmt.Errorf("%w: %s is served by broker %d: look it up again", pulsar.ErrServiceNotReady, name, owner.ID)
			}
		}
		pb.mu.Lock()
		t := pb.topics[name]
		pb.mu.Unlock()
		if t == nil {
			if err := pb.mayServe(ctx, ns, local, name, create, adminCreate); err != nil {
				return nil, err
			}
			if t, err = pb.startLoad(name); err != nil {
				return nil, err
			}
		}
		select {
		case <-t.ready:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		if t.err != nil {
			return nil, t.err
		}
		select {
		case <-t.ml.Done():
			// It stopped (fenced by a new owner, or its log failed): drop it
			// and load it again if we still own it.
			pb.drop(t)
			if attempt > 0 {
				return nil, fmt.Errorf("%w: %s stopped as it was loaded", pulsar.ErrServiceNotReady, name)
			}
			continue
		default:
		}
		return t, nil
	}
}

// mayServe checks that name is a Pulsar topic that exists, or may be
// created now.
func (pb *pulsarBackend) mayServe(ctx context.Context, ns, local, name string, create, adminCreate bool) error {
	admin := pb.b.admin
	rec, err := admin.GetTopic(ctx, ns, local)
	switch {
	case err == nil && !isPulsarTopic(rec):
		return kafkaTopicErr(name)
	case err == nil:
		return fmt.Errorf("%w: %s is a partitioned topic of %d partitions: use its partitions", pulsar.ErrNotAllowed, name, rec.Partitions)
	case !errors.Is(err, catalog.ErrTopicNotFound):
		return pulsarErr(err, pulsar.ErrMetadata)
	}
	if _, base, idx, err := catalog.ParsePartitionName(name); err == nil {
		rec, err := admin.GetTopic(ctx, ns, base)
		switch {
		case err == nil && !isPulsarTopic(rec):
			return kafkaTopicErr(name)
		case err == nil && idx < rec.Partitions:
			return nil // a partition of a partitioned topic: created on use
		case err == nil:
			return fmt.Errorf("%w: %s: partitioned topic %s has %d partitions", pulsar.ErrTopicNotFound, name, base, rec.Partitions)
		case !errors.Is(err, catalog.ErrTopicNotFound):
			return pulsarErr(err, pulsar.ErrMetadata)
		}
		// No such partitioned topic: a non-partitioned topic whose name
		// ends like a partition's.
	}
	if _, err := pb.b.cfg.Store.Get(ctx, mlog.Key(pulsarStorageName(name))); err == nil {
		return nil
	} else if !errors.Is(err, meta.ErrNotFound) {
		return pulsarErr(err, pulsar.ErrMetadata)
	}
	if !adminCreate && (!create || !pb.b.cfg.AutoCreateTopics) {
		return fmt.Errorf("%w: %s", pulsar.ErrTopicNotFound, name)
	}
	if _, err := admin.GetPolicies(ctx, ns); err != nil {
		return pulsarErr(err, pulsar.ErrMetadata)
	}
	return nil
}

// startLoad registers a load of the topic and runs it in the background,
// so that a client giving up does not abort it.
func (pb *pulsarBackend) startLoad(name string) (*pulsarTopic, error) {
	b := pb.b
	bundle, err := b.cluster.BundleOf(name)
	if err != nil {
		return nil, pulsarErr(err, pulsar.ErrServiceNotReady)
	}
	pb.mu.Lock()
	defer pb.mu.Unlock()
	if t := pb.topics[name]; t != nil {
		return t, nil
	}
	if b.ctx.Err() != nil {
		return nil, fmt.Errorf("%w: broker closing", pulsar.ErrServiceNotReady)
	}
	t := &pulsarTopic{pb: pb, name: name, storage: pulsarStorageName(name), bundle: bundle, ready: make(chan struct{})}
	pb.topics[name] = t
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		pb.load(t)
	}()
	return t, nil
}

func (pb *pulsarBackend) load(t *pulsarTopic) {
	b := pb.b
	defer close(t.ready)
	ctx, cancel := context.WithTimeout(b.ctx, b.cfg.Timeouts.LoadPartition)
	defer cancel()
	start := time.Now()
	fail := func(err error) {
		b.log.Warn("load pulsar topic", "topic", t.name, "err", err)
		t.err = pulsarErr(err, pulsar.ErrServiceNotReady)
		pb.forget(t)
	}
	ns, _, _ := parsePulsarTopic(t.name)
	pol, err := b.admin.GetPolicies(ctx, ns)
	if err != nil {
		fail(err)
		return
	}
	mcfg := mlogclient.Config{
		Ledgers: b.cfg.Ledgers, Store: b.cfg.Store, Core: pulsarSettings(pol),
		Ensemble: pol.Persistence.Ensemble, WriteQuorum: pol.Persistence.WriteQuorum, AckQuorum: pol.Persistence.AckQuorum,
		ReadAheadBytes: b.cfg.ReadAheadBytes, ReadAheadBudget: b.readAhead, CacheBudget: b.tailCache, Logger: b.cfg.Logger,
	}
	mcfg.Core.Owner = fmt.Sprintf("broker-%d", b.ID())
	mcfg.Core.MaxQueuedAppends = b.cfg.MaxQueuedAppends
	ml, err := mlogclient.Open(ctx, t.storage, mcfg)
	if err != nil {
		fail(err)
		return
	}
	if err := t.init(ctx, ml, pol); err != nil {
		cctx, ccancel := context.WithTimeout(context.Background(), b.cfg.Timeouts.ClosePartition)
		ml.Close(cctx)
		ccancel()
		fail(err)
		return
	}
	b.log.Info("pulsar topic loaded", "topic", t.name, "last", t.LastMessageID(), "deduplication", t.dedup,
		"took", time.Since(start).Round(time.Millisecond))
	// Released while loading? Then close it now.
	if !b.cluster.Owns(t.name) {
		go pb.drop(t)
	}
}

// pulsarSettings turns namespace policies into managed-ledger settings:
// retention, backlog quota and message TTL, as Pulsar applies them (the
// rollover keeps the managed ledger's defaults).
func pulsarSettings(pol catalog.Policies) mlog.Config {
	ret := mlog.RetentionPolicy{Time: -1, Size: -1}
	if m := pol.Retention.TimeMinutes; m >= 0 {
		ret.Time = time.Duration(m) * time.Minute
	}
	if mb := pol.Retention.SizeMB; mb >= 0 {
		ret.Size = mb << 20
	}
	var quota mlog.BacklogQuota
	if n := pol.BacklogQuota.LimitBytes; n > 0 {
		quota.LimitSize = n
	}
	if s := pol.BacklogQuota.LimitTimeSeconds; s > 0 {
		quota.LimitAge = time.Duration(s) * time.Second
	}
	quota.Policy = mlog.BacklogQuotaPolicy(pol.BacklogQuota.Policy)
	return mlog.Config{Retention: ret, Quota: quota, MessageTTL: time.Duration(pol.MessageTTLSeconds) * time.Second}
}

// forget removes a topic from the table (a failed load, or a drop), so the
// next request loads it again.
func (pb *pulsarBackend) forget(t *pulsarTopic) {
	pb.mu.Lock()
	if pb.topics[t.name] == t {
		delete(pb.topics, t.name)
	}
	pb.mu.Unlock()
}

// drop stops serving a topic and closes its managed ledger; the front end
// sees Topic.Done and closes the topic's producers and consumers.
func (pb *pulsarBackend) drop(t *pulsarTopic) {
	pb.forget(t)
	<-t.ready
	if t.ml != nil {
		ctx, cancel := context.WithTimeout(context.Background(), pb.b.cfg.Timeouts.ClosePartition)
		defer cancel()
		if err := t.ml.Close(ctx); err != nil {
			pb.b.log.Debug("close pulsar topic", "topic", t.name, "err", err)
		}
	}
}

// dropWhere closes, in parallel, every topic that match picks.
func (pb *pulsarBackend) dropWhere(match func(*pulsarTopic) bool) {
	dropMatching(&pb.mu, pb.topics, match, pb.drop)
}
