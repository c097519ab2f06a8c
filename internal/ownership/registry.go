package ownership

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"quire/internal/catalog"
	"quire/internal/meta"
)

// Member is one live broker's registration, the value of its key
// BrokersPrefix + id, bound to the broker's session.
type Member struct {
	ID        int32  `json:"id"`
	KafkaAddr string `json:"kafkaAddr"`
	// KafkaListeners are the broker's advertised Kafka endpoints per
	// listener name, when its listeners are named (KafkaAddr is one of
	// them: the one brokers use among themselves).
	KafkaListeners map[string]string `json:"kafkaListeners,omitempty"`
	HTTPAddr       string            `json:"httpAddr"`
	Zone           string            `json:"zone,omitempty"`
	Started        time.Time         `json:"started"`
}

// sameIdentity: the same id at the same addresses (a restart of this broker).
func (b Member) sameIdentity(o Member) bool {
	return b.ID == o.ID && b.KafkaAddr == o.KafkaAddr && b.HTTPAddr == o.HTTPAddr
}

// register allocates an id when self has none, then creates the broker's
// ephemeral key. When the key exists: if it holds the same id and addresses
// it is this broker's registration from a previous (crashed) session, and
// register waits, bounded by ctx, for that session to expire; anything else
// is ErrBrokerIDInUse.
func (c *Cluster) register(ctx context.Context) error {
	self := c.Self()
	if self.ID == 0 {
		id, err := c.cfg.Store.AllocateID(ctx, BrokerIDSequence)
		if err != nil {
			return fmt.Errorf("register broker: allocate id: %w", err)
		}
		if id <= 0 || id > math.MaxInt32 {
			return fmt.Errorf("register broker: allocated id %d does not fit int32", id)
		}
		self.ID = int32(id)
	}
	if self.ID < 0 {
		return fmt.Errorf("register broker: id %d: %w", self.ID, catalog.ErrInvalidName)
	}
	if self.Started.IsZero() {
		self.Started = time.Now().UTC()
	}
	value, err := json.Marshal(self)
	if err != nil {
		return fmt.Errorf("register broker %d: %w", self.ID, err)
	}
	key := brokerKey(self.ID)
	for {
		v, err := c.cfg.Session.CreateEphemeral(ctx, key, value)
		if err == nil {
			c.mu.Lock()
			c.self, c.registration = self, v
			c.mu.Unlock()
			return nil
		}
		if !errors.Is(err, meta.ErrExists) {
			return fmt.Errorf("register broker %d: %w", self.ID, err)
		}
		var existing Member
		held, err := meta.GetJSON(ctx, c.cfg.Store, key, &existing)
		if errors.Is(err, meta.ErrNotFound) {
			continue
		}
		if err != nil {
			return fmt.Errorf("register broker %d: read existing registration: %w", self.ID, err)
		}
		if !existing.sameIdentity(self) {
			return fmt.Errorf("register broker %d: held by kafka=%s http=%s since %s: %w",
				self.ID, existing.KafkaAddr, existing.HTTPAddr, existing.Started.Format(time.RFC3339), ErrBrokerIDInUse)
		}
		c.logger.Info("broker: waiting for the registration of a previous session to expire", "id", self.ID)
		if err := waitGone(ctx, c.cfg.Store, key, held); err != nil {
			return fmt.Errorf("register broker %d: wait for the previous registration to expire: %w", self.ID, err)
		}
	}
}

// waitGone waits until key (last seen at version) is deleted.
func waitGone(ctx context.Context, store meta.Store, key string, version meta.Version) error {
	for {
		wctx, cancel := context.WithCancel(ctx)
		for resp := range store.Watch(wctx, key, int64(version)+1) {
			if resp.Err != nil {
				break
			}
			for _, ev := range resp.Events {
				if ev.Key == key && ev.Type == meta.EventDelete {
					cancel()
					return nil
				}
			}
		}
		cancel()
		if err := ctx.Err(); err != nil {
			return err
		}
		kv, err := store.Get(ctx, key)
		if errors.Is(err, meta.ErrNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		version = kv.Version
	}
}

// Brokers returns the live brokers (this one included), sorted by id, from
// the watch-fed cache.
func (c *Cluster) Brokers() []Member {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]Member, 0, len(c.brokers))
	for _, b := range c.brokers {
		out = append(out, b)
	}
	slices.SortFunc(out, func(a, b Member) int { return int(a.ID) - int(b.ID) })
	return out
}

// BrokersChanged returns a channel closed at the next change of the live
// broker set (or of a broker's registration). Call it again after it fires.
func (c *Cluster) BrokersChanged() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.brokersChanged
}

func (c *Cluster) resetBrokers(kvs []meta.KV, _ int64) {
	c.mu.Lock()
	c.brokers = map[int32]Member{}
	for _, kv := range kvs {
		c.putBrokerLocked(kv.Key, kv.Value)
	}
	for id := range c.brokerSeen {
		if _, ok := c.brokers[id]; !ok {
			delete(c.brokerSeen, id)
		}
	}
	c.notifyBrokersLocked()
	c.mu.Unlock()
	c.kick()
}

func (c *Cluster) applyBrokers(events []meta.Event) {
	c.mu.Lock()
	for _, ev := range events {
		if ev.Type == meta.EventPut {
			c.putBrokerLocked(ev.Key, ev.Value)
			continue
		}
		if id, ok := parseBrokerKey(ev.Key); ok {
			delete(c.brokers, id)
			delete(c.brokerSeen, id)
			if id == c.self.ID && !c.closing && !c.lost {
				c.logger.Warn("broker: own registration deleted while the session lives; not acquiring bundles", "id", id)
			}
		}
	}
	c.notifyBrokersLocked()
	c.mu.Unlock()
	c.kick()
}

func (c *Cluster) putBrokerLocked(key string, value []byte) {
	id, ok := parseBrokerKey(key)
	if !ok {
		return
	}
	var info Member
	if err := json.Unmarshal(value, &info); err != nil || info.ID != id {
		c.logger.Warn("broker: ignoring malformed registration", "key", key, "err", err)
		return
	}
	c.brokers[id] = info
	if _, ok := c.brokerSeen[id]; !ok {
		c.brokerSeen[id] = time.Now()
	}
}

func (c *Cluster) notifyBrokersLocked() {
	close(c.brokersChanged)
	c.brokersChanged = make(chan struct{})
}
