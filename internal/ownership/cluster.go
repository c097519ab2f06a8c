package ownership

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"quire/internal/catalog"
	"quire/internal/meta"
)

// Config configures a Cluster.
type Config struct {
	// Store is the metadata store client; Session a live session on it that
	// the Cluster binds its broker key and ownership keys to. The caller owns
	// both: the Cluster never closes them.
	Store   meta.Store
	Session meta.Session
	// Self describes this broker. ID 0 allocates one from the "broker"
	// sequence (see Cluster.Self for the result); Started 0 means now.
	Self   Member
	Logger *slog.Logger

	// OnAcquire and OnRelease tell the topic layer that this broker now owns,
	// or no longer owns, a bundle (load its topics: list the namespace's
	// topics and keep the partitions whose BundleOf is the bundle; or close
	// them). They are called from one goroutine, in order, never
	// concurrently; a bundle's release always follows its acquire. They must
	// not call Unload or Close (those wait for event delivery); every other
	// method is fine. Nil means no-op.
	OnAcquire func(catalog.Bundle)
	OnRelease func(catalog.Bundle)

	// AcquireGrace is how long a broker other than the rendezvous choice
	// waits before taking an unowned bundle itself. Default 2 × session TTL.
	AcquireGrace time.Duration
	// LookupWait bounds how long Lookup waits for the rendezvous choice to
	// take an unowned bundle before taking it itself. Default 2 × session TTL.
	LookupWait time.Duration
	// HandoffAfter, when positive, makes each broker hand the bundles it owns
	// to their rendezvous choice once that broker has been seen live for
	// HandoffAfter: a joining broker then gets its share (and only bundles
	// that move to it move), instead of everything staying with the brokers
	// that started first. Each move unloads and reloads the bundle's topics.
	// 0 (the default) disables it: bundles move only when their owner goes.
	HandoffAfter time.Duration
	// RequestTimeout bounds each metadata request of the background loops
	// and of Close. Default 5s.
	RequestTimeout time.Duration
}

// Cluster is one broker's view of, and part in, the cluster: its
// registration, watch-fed caches of live brokers, namespace bundles and
// bundle owners, and the loop that keeps every bundle of every namespace
// owned by some live broker.
//
// Placement: an unowned bundle goes to the live broker with the highest
// rendezvous weight for the bundle's name, so all brokers agree on the choice
// without talking. That broker acquires it at once (create-if-absent of the
// ownership key, bound to its session); the others take it only after
// AcquireGrace if it is still unowned (the choice may be stalled or about to
// be found dead). When an owner's session ends, its ownership keys vanish and
// the next choice takes its bundles over within one watch round trip.
//
// A Cluster lives as long as its session: when the session is lost every
// owned bundle is released (OnRelease), Done closes, and it claims nothing
// more. Build a new Cluster with a new session to rejoin.
type Cluster struct {
	cfg    Config
	admin  *catalog.Catalog
	logger *slog.Logger
	events *eventQueue

	cancel context.CancelFunc
	wg     sync.WaitGroup
	kickCh chan struct{} // capacity 1: "run the reconciler"
	done   chan struct{}
	// closeOnce guards Close; doneOnce guards close(done).
	closeOnce, doneOnce sync.Once

	mu           sync.Mutex
	self         Member
	registration meta.Version // of our broker key
	started      bool
	lost         bool // the session ended
	closing      bool // Close began
	brokers      map[int32]Member
	// brokerSeen is when this broker first saw each live broker.
	brokerSeen map[int32]time.Time
	// brokersChanged and ownersChanged are closed (and replaced) on changes.
	brokersChanged chan struct{}
	ownersChanged  chan struct{}
	// namespaces maps "tenant/ns" to its bundle boundaries.
	namespaces        map[string][]uint32
	namespacesChanged chan struct{}
	// owners is the ownership keys as last seen through the watch.
	owners map[catalog.Bundle]ownerEntry
	// owned holds the bundles this broker acquired and still owns, with the
	// version of the ownership key it created.
	// Invariant: every bundle in owned had exactly one acquire event pushed
	// and no release event yet.
	owned map[catalog.Bundle]meta.Version
	// unloading holds the bundles an Unload released, with the version of
	// the key it deletes, until the watch reports that key gone (or the
	// delete failed): until then our own key in the cache is not an orphan
	// to adopt.
	unloading map[catalog.Bundle]meta.Version
	// unownedSince is when the reconciler first saw each bundle unowned.
	unownedSince map[catalog.Bundle]time.Time
}

// New checks cfg and returns a Cluster; Start joins the cluster.
func New(cfg Config) (*Cluster, error) {
	if cfg.Store == nil || cfg.Session == nil {
		return nil, errors.New("ownership: new cluster: Store and Session are required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	ttl := cfg.Session.TTL()
	if cfg.AcquireGrace <= 0 {
		cfg.AcquireGrace = 2 * ttl
	}
	if cfg.LookupWait <= 0 {
		cfg.LookupWait = 2 * ttl
	}
	if cfg.RequestTimeout <= 0 {
		cfg.RequestTimeout = 5 * time.Second
	}
	return &Cluster{
		cfg:               cfg,
		admin:             catalog.New(cfg.Store),
		logger:            cfg.Logger,
		events:            newEventQueue(cfg.OnAcquire, cfg.OnRelease),
		kickCh:            make(chan struct{}, 1),
		done:              make(chan struct{}),
		self:              cfg.Self,
		brokers:           map[int32]Member{},
		brokerSeen:        map[int32]time.Time{},
		brokersChanged:    make(chan struct{}),
		ownersChanged:     make(chan struct{}),
		namespaces:        map[string][]uint32{},
		namespacesChanged: make(chan struct{}),
		owners:            map[catalog.Bundle]ownerEntry{},
		owned:             map[catalog.Bundle]meta.Version{},
		unownedSince:      map[catalog.Bundle]time.Time{},
		unloading:         map[catalog.Bundle]meta.Version{},
	}, nil
}

// Start registers the broker (waiting, bounded by ctx, for a registration
// left by its own previous session to expire), loads the caches, and starts
// the watches and the ownership loop. On error nothing keeps running.
func (c *Cluster) Start(ctx context.Context) error {
	c.mu.Lock()
	if c.started || c.closing {
		c.mu.Unlock()
		return fmt.Errorf("start cluster: already started or closed: %w", ErrClosed)
	}
	c.started = true
	c.mu.Unlock()
	if err := c.register(ctx); err != nil {
		return fmt.Errorf("start cluster: %w", err)
	}
	mirrors := []*mirror{
		{store: c.cfg.Store, prefix: BrokersPrefix, logger: c.logger, reset: c.resetBrokers, apply: c.applyBrokers},
		{store: c.cfg.Store, prefix: catalog.NamespacesPrefix, logger: c.logger, reset: c.resetNamespaces, apply: c.applyNamespaces},
		{store: c.cfg.Store, prefix: OwnershipPrefix, logger: c.logger, reset: c.resetOwners, apply: c.applyOwners},
	}
	revs := make([]int64, len(mirrors))
	for i, m := range mirrors {
		rev, err := m.load(ctx)
		if err != nil {
			c.deregister()
			return fmt.Errorf("start cluster: load %s: %w", m.prefix, err)
		}
		revs[i] = rev
	}
	bg, cancel := context.WithCancel(context.Background())
	c.cancel = cancel
	go c.events.run()
	for i, m := range mirrors {
		c.wg.Add(1)
		go func() {
			defer c.wg.Done()
			m.run(bg, revs[i])
		}()
	}
	c.wg.Add(2)
	go func() {
		defer c.wg.Done()
		c.watchSession(bg)
	}()
	go func() {
		defer c.wg.Done()
		c.reconcileLoop(bg)
	}()
	c.logger.Info("broker: joined the cluster", "id", c.self.ID, "kafka", c.self.KafkaAddr, "session", c.cfg.Session.ID())
	return nil
}

// Close releases every owned bundle (OnRelease for each, then its key is
// deleted, so another broker takes it at once), deletes the broker's
// registration, and stops every goroutine. It does not close the session or
// the store. Safe to call more than once.
func (c *Cluster) Close() error {
	c.closeOnce.Do(func() {
		c.mu.Lock()
		started := c.started && c.cancel != nil
		c.closing = true
		owned := c.ownedLocked()
		c.notifyOwnersLocked() // wake waiting Lookups: they now fail with ErrClosed
		c.mu.Unlock()
		if started {
			// Deregister first: the other brokers then leave this one out of
			// the rendezvous choice by the time they see its bundles free.
			c.deregister()
			for _, b := range owned {
				ctx, cancel := context.WithTimeout(context.Background(), c.cfg.RequestTimeout)
				if err := c.Unload(ctx, b); err != nil && !errors.Is(err, ErrNotOwner) {
					c.logger.Warn("broker: release on close", "bundle", b, "err", err)
				}
				cancel()
			}
			c.cancel()
			c.wg.Wait()
			c.events.stop()
		}
		c.doneOnce.Do(func() { close(c.done) })
	})
	return nil
}

// deregister deletes the broker's registration (best effort: it also goes
// with the session).
func (c *Cluster) deregister() {
	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.RequestTimeout)
	defer cancel()
	c.mu.Lock()
	key, v, lost := brokerKey(c.self.ID), c.registration, c.lost
	c.mu.Unlock()
	if lost || v == 0 {
		return
	}
	if err := c.cfg.Store.Delete(ctx, key, v); err != nil && !errors.Is(err, meta.ErrNotFound) && !errors.Is(err, meta.ErrBadVersion) {
		c.logger.Warn("broker: deregister", "id", c.self.ID, "err", err)
	}
}

// Done is closed once the Cluster stopped claiming bundles: its session was
// lost, or Close was called.
func (c *Cluster) Done() <-chan struct{} { return c.done }

// Self is this broker's registration (with its allocated id after Start).
func (c *Cluster) Self() Member {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.self
}

// Catalog returns an Catalog on the Cluster's store.
func (c *Cluster) Catalog() *catalog.Catalog { return c.admin }

// watchSession releases everything when the session ends.
func (c *Cluster) watchSession(ctx context.Context) {
	select {
	case <-c.cfg.Session.Done():
	case <-ctx.Done():
		return
	}
	c.mu.Lock()
	c.lost = true
	owned := c.ownedLocked()
	for _, b := range owned {
		delete(c.owned, b)
		c.events.push(event{bundle: b})
	}
	c.notifyOwnersLocked()
	c.mu.Unlock()
	c.logger.Warn("broker: metadata session lost; released every bundle", "id", c.self.ID, "bundles", len(owned), "err", c.cfg.Session.Err())
	c.doneOnce.Do(func() { close(c.done) })
}

func (c *Cluster) ownedLocked() []catalog.Bundle {
	out := make([]catalog.Bundle, 0, len(c.owned))
	for b := range c.owned {
		out = append(out, b)
	}
	sortBundles(out)
	return out
}

func sortBundles(bs []catalog.Bundle) {
	slices.SortFunc(bs, func(a, b catalog.Bundle) int {
		switch {
		case a.Namespace != b.Namespace:
			if a.Namespace < b.Namespace {
				return -1
			}
			return 1
		case a.Lower != b.Lower:
			if a.Lower < b.Lower {
				return -1
			}
			return 1
		}
		return 0
	})
}

// --- namespaces cache ---

func (c *Cluster) resetNamespaces(kvs []meta.KV, _ int64) {
	c.mu.Lock()
	c.namespaces = map[string][]uint32{}
	for _, kv := range kvs {
		c.putNamespaceLocked(kv.Key, kv.Value)
	}
	c.notifyNamespacesLocked()
	c.mu.Unlock()
	c.kick()
}

func (c *Cluster) applyNamespaces(events []meta.Event) {
	c.mu.Lock()
	for _, ev := range events {
		if ev.Type == meta.EventPut {
			c.putNamespaceLocked(ev.Key, ev.Value)
		} else if ns, ok := catalog.ParseNamespaceKey(ev.Key); ok {
			delete(c.namespaces, ns)
		}
	}
	c.notifyNamespacesLocked()
	c.mu.Unlock()
	c.kick()
}

func (c *Cluster) putNamespaceLocked(key string, value []byte) {
	ns, ok := catalog.ParseNamespaceKey(key)
	if !ok {
		return
	}
	var p catalog.Policies
	if err := json.Unmarshal(value, &p); err != nil {
		c.logger.Warn("broker: ignoring malformed namespace policies", "key", key, "err", err)
		return
	}
	if err := catalog.ValidateBoundaries(p.Bundles.Boundaries); err != nil {
		c.logger.Warn("broker: ignoring namespace with bad bundles", "key", key, "err", err)
		return
	}
	c.namespaces[ns] = p.Bundles.Boundaries
}

func (c *Cluster) notifyNamespacesLocked() {
	close(c.namespacesChanged)
	c.namespacesChanged = make(chan struct{})
}

// BundleOf returns the bundle of a persistent:// topic name (e.g. a
// PartitionName) from the cached namespace policies; ErrNamespaceNotFound
// when the namespace is not (yet) in the cache.
func (c *Cluster) BundleOf(name string) (catalog.Bundle, error) {
	ns, err := catalog.NamespaceOf(name)
	if err != nil {
		return catalog.Bundle{}, fmt.Errorf("bundle of %s: %w", name, err)
	}
	c.mu.Lock()
	bounds, ok := c.namespaces[ns]
	c.mu.Unlock()
	if !ok {
		return catalog.Bundle{}, fmt.Errorf("bundle of %s: %w", name, catalog.ErrNamespaceNotFound)
	}
	return catalog.BundleFor(ns, bounds, name), nil
}

// bundleOfWait is BundleOf, but when the namespace is missing from the cache
// and exists in the store (just created), it waits for the cache to catch up
// (bounded by ctx and LookupWait).
func (c *Cluster) bundleOfWait(ctx context.Context, name string) (catalog.Bundle, error) {
	b, err := c.BundleOf(name)
	if !errors.Is(err, catalog.ErrNamespaceNotFound) {
		return b, err
	}
	ns, _ := catalog.NamespaceOf(name)
	if _, err := c.admin.GetPolicies(ctx, ns); err != nil {
		return catalog.Bundle{}, fmt.Errorf("bundle of %s: %w", name, err)
	}
	timer := time.NewTimer(c.cfg.LookupWait)
	defer timer.Stop()
	for {
		c.mu.Lock()
		bounds, ok := c.namespaces[ns]
		changed := c.namespacesChanged
		c.mu.Unlock()
		if ok {
			return catalog.BundleFor(ns, bounds, name), nil
		}
		select {
		case <-changed:
		case <-timer.C:
			return catalog.Bundle{}, fmt.Errorf("bundle of %s: namespace not yet seen by the watch after %v: %w", name, c.cfg.LookupWait, meta.ErrUnavailable)
		case <-ctx.Done():
			return catalog.Bundle{}, fmt.Errorf("bundle of %s: %w", name, ctx.Err())
		}
	}
}

// Owns reports, from the local state, whether this broker owns the bundle of
// the persistent:// topic name. Fast; no store access.
func (c *Cluster) Owns(name string) bool {
	b, err := c.BundleOf(name)
	if err != nil {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.owned[b]
	return ok
}

// OwnsBundle reports whether this broker owns bundle b.
func (c *Cluster) OwnsBundle(b catalog.Bundle) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.owned[b]
	return ok
}

// OwnedBundles lists the bundles this broker owns, sorted.
func (c *Cluster) OwnedBundles() []catalog.Bundle {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ownedLocked()
}
