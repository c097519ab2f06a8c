package ownership

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"time"

	"quire/internal/catalog"
	"quire/internal/meta"
)

// ownerValue is the value of an ownership key.
type ownerValue struct {
	BrokerID  int32  `json:"brokerID"`
	KafkaAddr string `json:"kafkaAddr"`
	HTTPAddr  string `json:"httpAddr"`
}

type ownerEntry struct {
	owner   ownerValue
	version meta.Version
}

// maxAcquireAttempts bounds Lookup's retries when the ownership key flips
// between present and absent under it.
const maxAcquireAttempts = 8

// --- the ownership cache ---

func (c *Cluster) resetOwners(kvs []meta.KV, rev int64) {
	c.mu.Lock()
	c.owners = map[catalog.Bundle]ownerEntry{}
	for _, kv := range kvs {
		c.putOwnerLocked(kv.Key, kv.Value, kv.Version)
	}
	// A bundle we acquired at or before the listing's revision must appear
	// in it with our version; otherwise our key was deleted while we were
	// not watching.
	for b, v := range c.owned {
		if int64(v) > rev {
			continue // acquired after the listing
		}
		if e, ok := c.owners[b]; !ok || e.version != v {
			c.loseLocked(b, "ownership key gone (seen on relist)")
		}
	}
	for b, v := range c.unloading {
		if e, ok := c.owners[b]; int64(v) <= rev && (!ok || e.version != v) {
			delete(c.unloading, b)
		}
	}
	c.notifyOwnersLocked()
	c.mu.Unlock()
	c.kick()
}

func (c *Cluster) applyOwners(events []meta.Event) {
	c.mu.Lock()
	for _, ev := range events {
		b, ok := parseOwnershipKey(ev.Key)
		if !ok {
			continue
		}
		if ev.Type == meta.EventPut {
			c.putOwnerLocked(ev.Key, ev.Value, meta.Version(ev.Revision))
		} else {
			delete(c.owners, b)
		}
		// Any change after our own create means our claim is gone (we never
		// rewrite an ownership key; an Unload removes the bundle from owned
		// before deleting it).
		if v, mine := c.owned[b]; mine && meta.Version(ev.Revision) > v {
			c.loseLocked(b, "ownership key "+ev.Type.String()+" by someone else")
		}
		if v, ok := c.unloading[b]; ok && meta.Version(ev.Revision) > v {
			delete(c.unloading, b) // the unloaded key is gone
		}
	}
	c.notifyOwnersLocked()
	c.mu.Unlock()
	c.kick()
}

func (c *Cluster) putOwnerLocked(key string, value []byte, version meta.Version) {
	b, ok := parseOwnershipKey(key)
	if !ok {
		return
	}
	var o ownerValue
	if err := json.Unmarshal(value, &o); err != nil {
		c.logger.Warn("broker: malformed ownership key, treating as owned by nobody known", "key", key, "err", err)
		o = ownerValue{BrokerID: -1}
	}
	c.owners[b] = ownerEntry{owner: o, version: version}
}

// loseLocked drops an owned bundle without deleting its key and tells the
// topic layer.
func (c *Cluster) loseLocked(b catalog.Bundle, why string) {
	delete(c.owned, b)
	c.events.push(event{bundle: b})
	c.logger.Warn("broker: lost bundle", "bundle", b, "why", why)
}

func (c *Cluster) notifyOwnersLocked() {
	close(c.ownersChanged)
	c.ownersChanged = make(chan struct{})
}

func (c *Cluster) kick() {
	select {
	case c.kickCh <- struct{}{}:
	default:
	}
}

// ownerInfoLocked turns an ownership value into a BrokerInfo, completed from
// the broker cache when the owner is registered.
func (c *Cluster) ownerInfoLocked(o ownerValue) Member {
	if info, ok := c.brokers[o.BrokerID]; ok && info.KafkaAddr == o.KafkaAddr {
		return info
	}
	return Member{ID: o.BrokerID, KafkaAddr: o.KafkaAddr, HTTPAddr: o.HTTPAddr}
}

// Ownership is a bundle's current owner as the cache last saw it.
type Ownership struct {
	Bundle catalog.Bundle
	Owner  Member
	// Version is the version of the ownership key (a store revision). It
	// grows with every change of owner, so it can serve as Kafka's leader
	// epoch (truncated to int32, which wraps only after 2³¹ store writes).
	Version meta.Version
}

// OwnerOf returns the current owner of a topic name's bundle from the cache,
// without assigning one (false when unowned or the namespace is unknown).
// Kafka Metadata uses this: an unowned partition has leader -1.
func (c *Cluster) OwnerOf(name string) (Ownership, bool) {
	b, err := c.BundleOf(name)
	if err != nil {
		return Ownership{}, false
	}
	return c.BundleOwner(b)
}

// BundleOwner returns the cached owner of bundle b (false when unowned).
func (c *Cluster) BundleOwner(b catalog.Bundle) (Ownership, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if v, mine := c.owned[b]; mine {
		return Ownership{Bundle: b, Owner: c.self, Version: v}, true
	}
	e, ok := c.owners[b]
	if !ok {
		return Ownership{}, false
	}
	return Ownership{Bundle: b, Owner: c.ownerInfoLocked(e.owner), Version: e.version}, true
}

// --- placement ---

// rendezvousChoice returns the broker with the highest rendezvous
// (highest-random-weight) score for bundle b, -1 for no brokers. Every broker
// computes the same choice from the same live set; when a broker leaves,
// only its own bundles move.
func rendezvousChoice(b catalog.Bundle, brokers []int32) int32 {
	h := fnv.New64a()
	h.Write([]byte(b.String()))
	seed := h.Sum64()
	best, bestScore := int32(-1), uint64(0)
	for _, id := range brokers {
		var buf [8]byte
		binary.LittleEndian.PutUint64(buf[:], uint64(uint32(id)))
		score := mix64(seed ^ mix64(binary.LittleEndian.Uint64(buf[:])+0x9e3779b97f4a7c15))
		if best == -1 || score > bestScore || (score == bestScore && id < best) {
			best, bestScore = id, score
		}
	}
	return best
}

// mix64 is the splitmix64 finalizer: FNV alone mixes too little for scores
// that differ only in the broker id.
func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

func (c *Cluster) liveIDsLocked() []int32 {
	ids := make([]int32, 0, len(c.brokers))
	for id := range c.brokers {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// reconcileLoop runs the reconciler after every cache change and when the
// earliest grace period ends.
func (c *Cluster) reconcileLoop(ctx context.Context) {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		next := c.reconcile(ctx)
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
		if next > 0 {
			timer.Reset(next)
		}
		select {
		case <-ctx.Done():
			return
		case <-c.kickCh:
		case <-timer.C:
		}
	}
}

// reconcile acquires the unowned bundles this broker should take, releases
// owned bundles that no longer exist (namespace deleted or bundle split) and,
// with HandoffAfter set, hands owned bundles to their rendezvous choice. It
// returns how long until it should run again without a change (0: never).
func (c *Cluster) reconcile(ctx context.Context) time.Duration {
	c.mu.Lock()
	if c.lost || c.closing {
		c.mu.Unlock()
		return 0
	}
	now := time.Now()
	_, selfLive := c.brokers[c.self.ID]
	live := c.liveIDsLocked()
	exists := map[catalog.Bundle]bool{}
	var acquire []catalog.Bundle
	var next time.Duration
	for ns, bounds := range c.namespaces {
		for _, b := range catalog.BundlesOf(ns, bounds) {
			exists[b] = true
			e, owned := c.owners[b]
			_, mine := c.owned[b]
			if owned || mine {
				delete(c.unownedSince, b)
				if owned && !mine && selfLive {
					c.adoptLocked(b, e)
				}
				continue
			}
			since, seen := c.unownedSince[b]
			if !seen {
				since = now
				c.unownedSince[b] = now
			}
			if !selfLive {
				continue
			}
			wait := since.Add(c.cfg.AcquireGrace).Sub(now)
			if rendezvousChoice(b, live) == c.self.ID || wait <= 0 {
				acquire = append(acquire, b)
			} else {
				next = soonest(next, wait)
			}
		}
	}
	for b := range c.unownedSince {
		if !exists[b] {
			delete(c.unownedSince, b)
		}
	}
	var release, handoff []catalog.Bundle
	for b := range c.owned {
		if !exists[b] {
			release = append(release, b)
		}
	}
	if c.cfg.HandoffAfter > 0 && selfLive {
		// Hand bundles to their rendezvous choice once it has been live for
		// HandoffAfter (so a flapping broker does not pull bundles back and
		// forth), a few per pass so a joining broker is not flooded.
		for b := range c.owned {
			choice := rendezvousChoice(b, live)
			if choice == c.self.ID || choice < 0 || !exists[b] {
				continue
			}
			if wait := c.brokerSeen[choice].Add(c.cfg.HandoffAfter).Sub(now); wait > 0 {
				next = soonest(next, wait)
				continue
			}
			handoff = append(handoff, b)
		}
		sortBundles(handoff)
		if len(handoff) > maxHandoffsPerPass {
			handoff = handoff[:maxHandoffsPerPass]
			next = soonest(next, handoffPause)
		}
	}
	c.mu.Unlock()

	sortBundles(acquire)
	for _, b := range acquire {
		actx, cancel := context.WithTimeout(ctx, c.cfg.RequestTimeout)
		_, _, err := c.tryAcquire(actx, b)
		cancel()
		if err != nil && ctx.Err() == nil {
			c.logger.Warn("broker: acquire bundle", "bundle", b, "err", err)
			// Retry soon rather than waiting for the next change.
			next = soonest(next, time.Second)
		}
	}
	for _, b := range release {
		rctx, cancel := context.WithTimeout(ctx, c.cfg.RequestTimeout)
		if err := c.Unload(rctx, b); err != nil && !errors.Is(err, ErrNotOwner) {
			c.logger.Warn("broker: release bundle that no longer exists", "bundle", b, "err", err)
		}
		cancel()
	}
	for _, b := range handoff {
		rctx, cancel := context.WithTimeout(ctx, c.cfg.RequestTimeout)
		if err := c.Unload(rctx, b); err != nil && !errors.Is(err, ErrNotOwner) {
			c.logger.Warn("broker: hand bundle to its rendezvous choice", "bundle", b, "err", err)
		}
		cancel()
	}
	return next
}

const (
	// maxHandoffsPerPass and handoffPause pace handoffs: at most this many
	// bundles are released per pass, with this pause between passes.
	maxHandoffsPerPass = 8
	handoffPause       = 100 * time.Millisecond
)

// soonest returns the smaller positive duration (0 means "none").
func soonest(next, d time.Duration) time.Duration {
	if next == 0 || d < next {
		return d
	}
	return next
}

// errRaced: the ownership key vanished between our create and our read.
var errRaced = errors.New("ownership changed during acquire")

// tryAcquire creates b's ownership key in our session. It returns the owner
// (this broker when acquired is true, else whoever holds the key).
func (c *Cluster) tryAcquire(ctx context.Context, b catalog.Bundle) (owner Member, acquired bool, err error) {
	c.mu.Lock()
	if err := c.claimableLocked(); err != nil {
		c.mu.Unlock()
		return Member{}, false, fmt.Errorf("acquire %s: %w", b, err)
	}
	if _, mine := c.owned[b]; mine {
		c.mu.Unlock()
		return c.Self(), false, nil
	}
	self := c.self
	c.mu.Unlock()
	value, err := json.Marshal(ownerValue{BrokerID: self.ID, KafkaAddr: self.KafkaAddr, HTTPAddr: self.HTTPAddr})
	if err != nil {
		return Member{}, false, fmt.Errorf("acquire %s: %w", b, err)
	}
	key := ownershipKey(b)
	v, err := c.cfg.Session.CreateEphemeral(ctx, key, value)
	if err == nil {
		c.mu.Lock()
		if cerr := c.claimableLocked(); cerr != nil {
			c.mu.Unlock()
			// Closing: give it back now. Lost: the key dies with the session.
			if errors.Is(cerr, ErrClosed) {
				dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.cfg.RequestTimeout)
				defer cancel()
				if derr := c.cfg.Store.Delete(dctx, key, v); derr != nil {
					c.logger.Warn("broker: give back bundle acquired during close", "bundle", b, "err", derr)
				}
			}
			return Member{}, false, fmt.Errorf("acquire %s: %w", b, cerr)
		}
		if _, adopted := c.owned[b]; !adopted { // the watch may have been faster
			c.owned[b] = v
			delete(c.unownedSince, b)
			c.events.push(event{acquired: true, bundle: b})
			c.notifyOwnersLocked()
		}
		c.mu.Unlock()
		c.logger.Info("broker: acquired bundle", "bundle", b, "id", self.ID)
		return self, true, nil
	}
	if !errors.Is(err, meta.ErrExists) {
		return Member{}, false, fmt.Errorf("acquire %s: %w", b, err)
	}
	var o ownerValue
	held, err := meta.GetJSON(ctx, c.cfg.Store, key, &o)
	if err != nil {
		if errors.Is(err, meta.ErrNotFound) {
			return Member{}, false, fmt.Errorf("acquire %s: %w", b, errRaced)
		}
		return Member{}, false, fmt.Errorf("acquire %s: read owner: %w", b, err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.adoptLocked(b, ownerEntry{owner: o, version: held}) {
		return c.self, false, nil
	}
	return c.ownerInfoLocked(o), false, nil
}

// adoptLocked takes as owned a bundle whose key names this broker but which
// it does not count as owned: left behind by an Unload whose delete failed,
// or created by a concurrent acquire of ours that the watch reported first.
// Broker ids are unique among live brokers and a previous session's keys
// expire before the broker can register again, so such a key is this
// session's. It reports whether b is (now) owned.
func (c *Cluster) adoptLocked(b catalog.Bundle, e ownerEntry) bool {
	if _, mine := c.owned[b]; mine {
		return true
	}
	if _, unloading := c.unloading[b]; unloading || e.owner.BrokerID != c.self.ID || c.claimableLocked() != nil {
		return false
	}
	c.owned[b] = e.version
	delete(c.unownedSince, b)
	c.events.push(event{acquired: true, bundle: b})
	c.notifyOwnersLocked()
	c.logger.Info("broker: adopted own ownership key", "bundle", b)
	return true
}

func (c *Cluster) claimableLocked() error {
	switch {
	case c.lost:
		return ErrSessionLost
	case c.closing || !c.started:
		return ErrClosed
	}
	return nil
}

// Lookup returns the broker that owns the bundle of a persistent:// topic
// name (e.g. PartitionName(ns, topic, i)), assigning an owner when there is
// none: the rendezvous choice among live brokers. If that is this broker it
// acquires the bundle now; otherwise it waits up to LookupWait for the choice
// to take it, and then takes it itself. Fails with ErrNamespaceNotFound,
// ErrInvalidTopicName, ErrSessionLost, ErrClosed, or a store error.
//
// The answer comes from the watch-fed cache when the bundle is owned, so it
// may name an owner whose session just ended; clients retry the lookup when
// that owner refuses them.
func (c *Cluster) Lookup(ctx context.Context, name string) (Member, error) {
	b, err := c.bundleOfWait(ctx, name)
	if err != nil {
		return Member{}, fmt.Errorf("lookup: %w", err)
	}
	deadline := time.Now().Add(c.cfg.LookupWait)
	timer := time.NewTimer(c.cfg.LookupWait)
	defer timer.Stop()
	attempts := 0
	for {
		c.mu.Lock()
		if err := c.claimableLocked(); err != nil {
			c.mu.Unlock()
			return Member{}, fmt.Errorf("lookup %s: %w", name, err)
		}
		if _, mine := c.owned[b]; mine {
			self := c.self
			c.mu.Unlock()
			return self, nil
		}
		if e, ok := c.owners[b]; ok {
			if c.adoptLocked(b, e) {
				c.mu.Unlock()
				return c.self, nil
			}
			if e.owner.BrokerID != c.self.ID {
				info := c.ownerInfoLocked(e.owner)
				c.mu.Unlock()
				return info, nil
			}
			// Our own key, which we no longer count as owned: we are
			// unloading the bundle and the cache has not yet seen the
			// delete. Answering "this broker" would send a client to a
			// broker that refuses the topic; what the store shows next
			// (the delete, then the next owner) answers.
			changed := c.ownersChanged
			c.mu.Unlock()
			select {
			case <-changed:
				continue
			case <-ctx.Done():
				return Member{}, fmt.Errorf("lookup %s: waiting for this broker's unload of %s to show: %w", name, b, ctx.Err())
			}
		}
		choice := rendezvousChoice(b, c.liveIDsLocked())
		self := c.self.ID
		changed := c.ownersChanged
		c.mu.Unlock()

		if choice == self || !time.Now().Before(deadline) {
			owner, _, err := c.tryAcquire(ctx, b)
			if err == nil {
				return owner, nil
			}
			attempts++
			if !errors.Is(err, errRaced) || attempts >= maxAcquireAttempts {
				return Member{}, fmt.Errorf("lookup %s: %w", name, err)
			}
			continue
		}
		select {
		case <-changed:
		case <-timer.C:
		case <-ctx.Done():
			return Member{}, fmt.Errorf("lookup %s: waiting for broker %d to take %s: %w", name, choice, b, ctx.Err())
		}
	}
}

// Unload releases an owned bundle voluntarily: OnRelease is delivered (and
// returns) first, then the ownership key is deleted so another broker can
// take it at once. ErrNotOwner when this broker does not own b. While the
// Cluster runs, the bundle is placed again by rendezvous, which may pick this
// broker (a reload); moving a bundle to a chosen broker is a load manager's
// job, not built (HandoffAfter only restores the rendezvous placement).
// Close unloads everything.
func (c *Cluster) Unload(ctx context.Context, b catalog.Bundle) error {
	c.mu.Lock()
	v, ok := c.owned[b]
	if !ok {
		c.mu.Unlock()
		return fmt.Errorf("unload %s: %w", b, ErrNotOwner)
	}
	delete(c.owned, b)
	c.unloading[b] = v
	delivered := make(chan struct{})
	c.events.push(event{bundle: b, delivered: delivered})
	c.notifyOwnersLocked()
	c.mu.Unlock()
	var waitErr error
	select {
	case <-delivered:
	case <-ctx.Done():
		// Delete the key anyway: a key of ours that we no longer count as
		// owned would keep the bundle from everyone until our session ends.
		// A topic still open here is fenced by its next owner's recovery.
		waitErr = fmt.Errorf("unload %s: waiting for the topic layer to release it: %w", b, ctx.Err())
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), c.cfg.RequestTimeout)
		defer cancel()
	}
	if err := c.cfg.Store.Delete(ctx, ownershipKey(b), v); err != nil && !errors.Is(err, meta.ErrNotFound) && !errors.Is(err, meta.ErrBadVersion) {
		// The key stays; the reconciler adopts it again (the bundle must
		// not stay ownerless while our session lives).
		c.mu.Lock()
		if c.unloading[b] == v {
			delete(c.unloading, b)
		}
		c.mu.Unlock()
		c.kick()
		return errors.Join(waitErr, fmt.Errorf("unload %s: delete ownership key: %w", b, err))
	}
	if waitErr != nil {
		return waitErr
	}
	c.logger.Info("broker: released bundle", "bundle", b)
	return nil
}
