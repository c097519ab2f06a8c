package catalog

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"strings"
	"time"

	"quire/internal/meta"
)

// MaxPartitions bounds a topic's partition count.
const MaxPartitions = 1 << 20

// TopicID is a topic's random UUID (Kafka's topic id), never all-zero.
// JSON and String use the canonical 8-4-4-4-12 hex form.
type TopicID [16]byte

func (id TopicID) String() string {
	var b [36]byte
	hex.Encode(b[0:8], id[0:4])
	b[8] = '-'
	hex.Encode(b[9:13], id[4:6])
	b[13] = '-'
	hex.Encode(b[14:18], id[6:8])
	b[18] = '-'
	hex.Encode(b[19:23], id[8:10])
	b[23] = '-'
	hex.Encode(b[24:], id[10:])
	return string(b[:])
}

func (id TopicID) MarshalText() ([]byte, error) { return []byte(id.String()), nil }

func (id *TopicID) UnmarshalText(text []byte) error {
	s := strings.ReplaceAll(string(text), "-", "")
	if len(s) != 32 {
		return fmt.Errorf("topic id %q: want a UUID", text)
	}
	if _, err := hex.Decode(id[:], []byte(s)); err != nil {
		return fmt.Errorf("topic id %q: %w", text, err)
	}
	return nil
}

// newTopicID returns a random (version 4) UUID.
func newTopicID() TopicID {
	var id TopicID
	for id == (TopicID{}) {
		rand.Read(id[:]) // never fails (crypto/rand panics instead)
		id[6] = id[6]&0x0f | 0x40
		id[8] = id[8]&0x3f | 0x80
	}
	return id
}

// Topic is a Kafka topic: a partitioned topic of a namespace whose
// partition i is the managed ledger PartitionName(Namespace, Name, i).
type Topic struct {
	// Namespace and Name come from the key; they are not stored in the value.
	Namespace  string            `json:"-"`
	Name       string            `json:"-"`
	Partitions int32             `json:"partitions"`
	ID         TopicID           `json:"id"`
	Configs    map[string]string `json:"configs,omitempty"`
	Created    time.Time         `json:"created"`
	// Mode is the topic's replication architecture, fixed at creation
	// ("" is ModeLedger: records from before the policy existed), and
	// ReplicationFactor an ISR topic's replicas per partition (partitions
	// added later get as many).
	Mode              Mode  `json:"mode,omitempty"`
	ReplicationFactor int32 `json:"replicationFactor,omitempty"`
	// Version is the record's metadata version, for SetConfigs' CAS.
	Version meta.Version `json:"-"`
}

func (a *Catalog) checkTopic(ns, name string) error {
	if _, _, err := ParseNamespace(ns); err != nil {
		return err
	}
	return ValidateTopicName(name)
}

// CreateTopic records a new topic with a fresh id. Fails with
// ErrInvalidTopicName, ErrInvalidPartitions (not 1..MaxPartitions),
// ErrNamespaceNotFound or ErrTopicExists.
func (a *Catalog) CreateTopic(ctx context.Context, ns, name string, partitions int32, configs map[string]string) (Topic, error) {
	return a.CreateTopicMode(ctx, ns, name, partitions, configs, ModeLedger, 0)
}

// IsISR reports whether the topic is an ISR-mode topic.
func (t Topic) IsISR() bool { return t.Mode == ModeISR }

// CreateTopicMode is CreateTopic for a topic of the given mode (and, in
// ISR mode, replication factor).
func (a *Catalog) CreateTopicMode(ctx context.Context, ns, name string, partitions int32, configs map[string]string, mode Mode, replicationFactor int32) (Topic, error) {
	if mode == ModeLedger {
		mode = "" // as records have always said it
	}
	if err := a.checkTopic(ns, name); err != nil {
		return Topic{}, fmt.Errorf("create topic: %w", err)
	}
	if partitions < 1 || partitions > MaxPartitions {
		return Topic{}, fmt.Errorf("create topic %s/%s with %d partitions (want 1..%d): %w", ns, name, partitions, MaxPartitions, ErrInvalidPartitions)
	}
	if _, err := a.store.Get(ctx, namespaceKey(ns)); err != nil {
		if errors.Is(err, meta.ErrNotFound) {
			return Topic{}, fmt.Errorf("create topic %s/%s: %w", ns, name, ErrNamespaceNotFound)
		}
		return Topic{}, fmt.Errorf("create topic %s/%s: %w", ns, name, err)
	}
	rec := Topic{
		Namespace:  ns,
		Name:       name,
		Partitions: partitions,
		ID:         newTopicID(),
		Configs:    maps.Clone(configs),
		Created:    time.Now().UTC(),
		Mode:       mode,
	}
	if mode == ModeISR {
		rec.ReplicationFactor = replicationFactor
	}
	value, err := json.Marshal(rec)
	if err != nil {
		return Topic{}, fmt.Errorf("create topic %s/%s: %w", ns, name, err)
	}
	v, err := a.store.Create(ctx, topicKey(ns, name), value)
	if err != nil {
		if errors.Is(err, meta.ErrExists) {
			return Topic{}, fmt.Errorf("create topic %s/%s: %w", ns, name, ErrTopicExists)
		}
		return Topic{}, fmt.Errorf("create topic %s/%s: %w", ns, name, err)
	}
	rec.Version = v
	return rec, nil
}

// GetTopic returns a topic record (ErrTopicNotFound).
func (a *Catalog) GetTopic(ctx context.Context, ns, name string) (Topic, error) {
	if err := a.checkTopic(ns, name); err != nil {
		return Topic{}, fmt.Errorf("get topic: %w", err)
	}
	var rec Topic
	v, err := meta.GetJSON(ctx, a.store, topicKey(ns, name), &rec)
	if err != nil {
		if errors.Is(err, meta.ErrNotFound) {
			return Topic{}, fmt.Errorf("get topic %s/%s: %w", ns, name, ErrTopicNotFound)
		}
		return Topic{}, fmt.Errorf("get topic %s/%s: %w", ns, name, err)
	}
	rec.Namespace, rec.Name, rec.Version = ns, name, v
	return rec, nil
}

// ListTopics returns every topic record of namespace ns, sorted by name.
func (a *Catalog) ListTopics(ctx context.Context, ns string) ([]Topic, error) {
	if _, _, err := ParseNamespace(ns); err != nil {
		return nil, fmt.Errorf("list topics: %w", err)
	}
	prefix := NamespaceTopicsPrefix(ns)
	kvs, _, err := meta.ListAll(ctx, a.store, prefix)
	if err != nil {
		return nil, fmt.Errorf("list topics of %s: %w", ns, err)
	}
	out := make([]Topic, 0, len(kvs))
	for _, kv := range kvs {
		var rec Topic
		if err := json.Unmarshal(kv.Value, &rec); err != nil {
			return nil, fmt.Errorf("list topics of %s: decode %s: %w", ns, kv.Key, err)
		}
		rec.Namespace, rec.Name, rec.Version = ns, strings.TrimPrefix(kv.Key, prefix), kv.Version
		out = append(out, rec)
	}
	return out, nil
}

// DeleteTopic removes a topic record (ErrTopicNotFound). The topic's ledgers
// and cursors belong to the topic layer, which must delete them itself.
func (a *Catalog) DeleteTopic(ctx context.Context, ns, name string) error {
	rec, err := a.GetTopic(ctx, ns, name)
	if err != nil {
		return fmt.Errorf("delete topic: %w", err)
	}
	if err := a.store.Delete(ctx, topicKey(ns, name), rec.Version); err != nil {
		if errors.Is(err, meta.ErrBadVersion) {
			// Changed (configs, partitions) since we read it; it is still
			// the same topic only if its id is unchanged, so re-check once.
			return a.deleteTopicAgain(ctx, rec)
		}
		return fmt.Errorf("delete topic %s/%s: %w", ns, name, casErr(err, ErrTopicNotFound))
	}
	return nil
}

func (a *Catalog) deleteTopicAgain(ctx context.Context, prev Topic) error {
	rec, err := a.GetTopic(ctx, prev.Namespace, prev.Name)
	if err != nil {
		return fmt.Errorf("delete topic: %w", err)
	}
	if rec.ID != prev.ID {
		// Deleted and created again meanwhile: the topic we were asked to
		// delete is gone; the new one is not ours to delete.
		return fmt.Errorf("delete topic %s/%s: recreated with id %s meanwhile: %w", prev.Namespace, prev.Name, rec.ID, ErrTopicNotFound)
	}
	if err := a.store.Delete(ctx, topicKey(rec.Namespace, rec.Name), rec.Version); err != nil {
		return fmt.Errorf("delete topic %s/%s: %w", rec.Namespace, rec.Name, casErr(err, ErrTopicNotFound))
	}
	return nil
}

// updateTopic is the CAS loop under SetPartitions and UpdateConfigs.
func (a *Catalog) updateTopic(ctx context.Context, ns, name string, change func(*Topic) error) (Topic, error) {
	for {
		rec, err := a.GetTopic(ctx, ns, name)
		if err != nil {
			return Topic{}, err
		}
		next := rec
		next.Configs = maps.Clone(rec.Configs)
		if err := change(&next); err != nil {
			return Topic{}, err
		}
		value, err := json.Marshal(next)
		if err != nil {
			return Topic{}, err
		}
		v, err := a.store.Put(ctx, topicKey(ns, name), value, rec.Version)
		switch {
		case err == nil:
			next.Version = v
			return next, nil
		case errors.Is(err, meta.ErrBadVersion):
			continue
		default:
			return Topic{}, casErr(err, ErrTopicNotFound)
		}
	}
}

// SetPartitions grows a topic to count partitions. Shrinking, keeping the
// count, or exceeding MaxPartitions fails with ErrInvalidPartitions.
func (a *Catalog) SetPartitions(ctx context.Context, ns, name string, count int32) (Topic, error) {
	rec, err := a.updateTopic(ctx, ns, name, func(r *Topic) error {
		if count <= r.Partitions || count > MaxPartitions {
			return fmt.Errorf("from %d to %d partitions (only growth up to %d): %w", r.Partitions, count, MaxPartitions, ErrInvalidPartitions)
		}
		r.Partitions = count
		return nil
	})
	if err != nil {
		return Topic{}, fmt.Errorf("set partitions of %s/%s: %w", ns, name, err)
	}
	return rec, nil
}

// SetConfigs replaces a topic's configs if its record is still at version
// expected (from GetTopic); ErrConflict when it changed meanwhile.
func (a *Catalog) SetConfigs(ctx context.Context, ns, name string, configs map[string]string, expected meta.Version) (Topic, error) {
	rec, err := a.GetTopic(ctx, ns, name)
	if err != nil {
		return Topic{}, fmt.Errorf("set configs: %w", err)
	}
	if rec.Version != expected {
		return Topic{}, fmt.Errorf("set configs of %s/%s: version %d, expected %d: %w", ns, name, rec.Version, expected, ErrConflict)
	}
	rec.Configs = maps.Clone(configs)
	value, err := json.Marshal(rec)
	if err != nil {
		return Topic{}, fmt.Errorf("set configs of %s/%s: %w", ns, name, err)
	}
	v, err := a.store.Put(ctx, topicKey(ns, name), value, expected)
	if err != nil {
		return Topic{}, fmt.Errorf("set configs of %s/%s: %w", ns, name, casErr(err, ErrTopicNotFound))
	}
	rec.Version = v
	return rec, nil
}

// UpdateConfigs applies change to a copy of the topic's configs (never nil)
// and writes it with compare-and-swap, retrying on concurrent updates (change
// may run more than once). An error from change aborts without writing.
func (a *Catalog) UpdateConfigs(ctx context.Context, ns, name string, change func(configs map[string]string) error) (Topic, error) {
	rec, err := a.updateTopic(ctx, ns, name, func(r *Topic) error {
		if r.Configs == nil {
			r.Configs = map[string]string{}
		}
		return change(r.Configs)
	})
	if err != nil {
		return Topic{}, fmt.Errorf("update configs of %s/%s: %w", ns, name, err)
	}
	return rec, nil
}
