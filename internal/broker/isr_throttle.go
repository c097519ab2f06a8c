package broker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"quire/internal/catalog"
	"quire/internal/isr/isrnode"
	"quire/internal/kafka"
	"quire/internal/meta"
)

// The replication throttle of ISR mode, configured as Kafka users do it
// (kafka-configs, kafka-reassign-partitions --throttle):
//
//   - the broker configs leader.replication.throttled.rate and
//     follower.replication.throttled.rate (bytes/s), dynamic: set with
//     IncrementalAlterConfigs on a BROKER resource, "" for the cluster-wide
//     default or a broker id for that broker's own (which wins), kept in
//     the metadata store under brokerConfigsPrefix and shown by
//     DescribeConfigs (DYNAMIC_BROKER_CONFIG, DYNAMIC_DEFAULT_BROKER_CONFIG,
//     else the default, Long.MAX_VALUE: unlimited);
//   - the topic configs leader.replication.throttled.replicas and
//     follower.replication.throttled.replicas of ISR-mode topics: lists of
//     partition:broker, or "*" for every replica.
//
// Every broker follows both (meta.Follow) and hands what applies to itself
// to its replica manager (isrnode.Manager.SetThrottle), whose fetchers
// (follower side) and Fetch answers (leader side) hold throttled
// out-of-sync replication to the rate (isrnode/throttle.go). Only these two
// broker configs are dynamic, with
// replica.alter.log.dirs.io.max.bytes.per.second, which the tool sets and
// clears too and which has nothing to throttle here; any other broker
// config is static (INVALID_REQUEST, as Kafka answers a config it cannot
// update dynamically).

const (
	leaderThrottleRate       = "leader.replication.throttled.rate"
	followerThrottleRate     = "follower.replication.throttled.rate"
	leaderThrottledReplicas  = "leader.replication.throttled.replicas"
	followerThrottledReplica = "follower.replication.throttled.replicas"
	logDirThrottleRate       = "replica.alter.log.dirs.io.max.bytes.per.second"
	// defaultBrokerConfigs is the key of the cluster-wide default broker
	// configs (the resource named "").
	defaultBrokerConfigs = "default"
)

// dynamicBrokerConfigs are the broker configs IncrementalAlterConfigs may
// set, with their documentation.
var dynamicBrokerConfigs = map[string]string{
	leaderThrottleRate: "ISR mode: the bound, in bytes/s, on what this broker's leaders send to followers out of the ISR for the replicas " +
		"named in each topic's leader.replication.throttled.replicas (reassignments; Long.MAX_VALUE: none)",
	followerThrottleRate: "ISR mode: the bound, in bytes/s, on what this broker's followers out of the ISR fetch for the replicas " +
		"named in each topic's follower.replication.throttled.replicas (reassignments; Long.MAX_VALUE: none)",
	logDirThrottleRate: "accepted, as kafka-reassign-partitions sets and clears it, but without effect: a broker has one " +
		"ISR log directory, and replicas do not move between directories (no AlterReplicaLogDirs)",
}

// throttledReplicasConfigs are the topic configs that name throttled
// replicas, with their documentation.
var throttledReplicasConfigs = map[string]string{
	leaderThrottledReplicas: "ISR mode: the replicas (partition:broker, or *) whose leader-side replication is held to the " +
		"brokers' leader.replication.throttled.rate while their follower is out of the ISR",
	followerThrottledReplica: "ISR mode: the replicas (partition:broker, or *) whose follower-side replication is held to the " +
		"brokers' follower.replication.throttled.rate while they are out of the ISR",
}

// brokerConfigsKey is the metadata key of a BROKER resource's dynamic
// configs.
func brokerConfigsKey(resource string) string {
	if resource == "" {
		resource = defaultBrokerConfigs
	}
	return brokerConfigsPrefix + resource
}

var _ kafka.BrokerConfigAlterer = (*Broker)(nil)

// AlterBrokerConfigs implements kafka.BrokerConfigAlterer: the throttle
// rates, for the cluster ("") or one broker (its id), by CAS on their
// record.
func (b *Broker) AlterBrokerConfigs(ctx context.Context, broker string, ops []kafka.ConfigOp, validateOnly bool) error {
	if broker != "" {
		if id, err := strconv.ParseInt(broker, 10, 32); err != nil || id < 0 {
			return fmt.Errorf("%w: broker resource %q is not a broker id", kerr.InvalidRequest, broker)
		}
	}
	apply := func(cfgs map[string]string) error {
		for _, op := range ops {
			if _, ok := dynamicBrokerConfigs[op.Name]; !ok {
				return fmt.Errorf("%w: cannot update %s dynamically (only %s, %s and %s are dynamic)", kerr.InvalidRequest, op.Name,
					leaderThrottleRate, followerThrottleRate, logDirThrottleRate)
			}
			switch op.Op {
			case kmsg.IncrementalAlterConfigOpSet:
				if op.Value == nil {
					return fmt.Errorf("%w: %s without a value", kerr.InvalidConfig, op.Name)
				}
				if n, err := strconv.ParseInt(strings.TrimSpace(*op.Value), 10, 64); err != nil || n < 0 {
					return fmt.Errorf("%w: %s %q: want bytes/s, at least 0", kerr.InvalidConfig, op.Name, *op.Value)
				}
				cfgs[op.Name] = strings.TrimSpace(*op.Value)
			case kmsg.IncrementalAlterConfigOpDelete:
				delete(cfgs, op.Name)
			default:
				return fmt.Errorf("%w: operation %v on %s (not a list config)", kerr.InvalidConfig, op.Op, op.Name)
			}
		}
		return nil
	}
	store, key := b.cfg.Store, brokerConfigsKey(broker)
	for {
		cfgs, version, err := readBrokerConfigs(ctx, store, key)
		if err != nil {
			return fmt.Errorf("%w: broker configs: %w", kerr.RequestTimedOut, err)
		}
		if err := apply(cfgs); err != nil || validateOnly {
			return err
		}
		switch {
		case len(cfgs) == 0 && version == 0:
			return nil
		case len(cfgs) == 0:
			err = store.Delete(ctx, key, version)
		case version == 0:
			_, err = store.Create(ctx, key, mustJSON(cfgs))
		default:
			_, err = store.Put(ctx, key, mustJSON(cfgs), version)
		}
		switch {
		case err == nil:
			return nil
		case errors.Is(err, meta.ErrBadVersion), errors.Is(err, meta.ErrExists), errors.Is(err, meta.ErrNotFound):
			continue // someone else changed them: apply to theirs
		default:
			return fmt.Errorf("%w: broker configs: %w", kerr.RequestTimedOut, err)
		}
	}
}

// readBrokerConfigs reads a BROKER resource's dynamic configs and their
// version (0: none stored).
func readBrokerConfigs(ctx context.Context, store meta.Store, key string) (map[string]string, meta.Version, error) {
	kv, err := store.Get(ctx, key)
	if errors.Is(err, meta.ErrNotFound) {
		return map[string]string{}, 0, nil
	}
	if err != nil {
		return nil, 0, err
	}
	cfgs := map[string]string{}
	if err := json.Unmarshal(kv.Value, &cfgs); err != nil {
		return nil, 0, fmt.Errorf("decode %s: %w", key, err)
	}
	return cfgs, kv.Version, nil
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("broker: encode %T: %v", v, err)) // plain data: cannot fail
	}
	return b
}

// throttleEntries are the throttle rates as DescribeConfigs of this
// broker shows them: its own dynamic value, else the cluster default's,
// else Kafka's default (unlimited).
func (b *Broker) throttleEntries(ctx context.Context) []kafka.ConfigEntry {
	own, _, _ := readBrokerConfigs(ctx, b.cfg.Store, brokerConfigsKey(strconv.Itoa(int(b.ID()))))
	def, _, _ := readBrokerConfigs(ctx, b.cfg.Store, brokerConfigsKey(""))
	var out []kafka.ConfigEntry
	for _, name := range slices.Sorted(maps.Keys(dynamicBrokerConfigs)) {
		e := kafka.ConfigEntry{Name: name, Type: kmsg.ConfigTypeLong, Doc: ptr(dynamicBrokerConfigs[name])}
		switch {
		case own[name] != "":
			e.Value, e.Source = ptr(own[name]), kmsg.ConfigSourceDynamicBrokerConfig
		case def[name] != "":
			e.Value, e.Source = ptr(def[name]), kmsg.ConfigSourceDynamicDefaultBrokerConfig
		default:
			e.Value, e.Default, e.Source = ptr(strconv.FormatInt(math.MaxInt64, 10)), true, kmsg.ConfigSourceDefaultConfig
		}
		out = append(out, e)
	}
	return out
}

// validateThrottledReplicas checks a throttled-replicas topic config as
// Kafka's ThrottledReplicaListValidator: "*", or partition:broker entries
// separated by commas (empty: none).
func validateThrottledReplicas(name, v string) error {
	if _, _, err := parseThrottledReplicas(v); err != nil {
		return fmt.Errorf("%w: %s %q: %v", kerr.InvalidConfig, name, v, err)
	}
	return nil
}

// parseThrottledReplicas reads a throttled-replicas list: all ("*"), or
// the partitions listed per broker id.
func parseThrottledReplicas(v string) (all bool, byBroker map[int32][]int32, err error) {
	v = strings.TrimSpace(v)
	if v == "*" {
		return true, nil, nil
	}
	byBroker = map[int32][]int32{}
	if v == "" {
		return false, byBroker, nil
	}
	for _, entry := range strings.Split(v, ",") {
		p, br, ok := strings.Cut(strings.TrimSpace(entry), ":")
		pi, perr := strconv.ParseUint(p, 10, 31)
		bi, berr := strconv.ParseUint(br, 10, 31)
		if !ok || perr != nil || berr != nil {
			return false, nil, fmt.Errorf("entry %q is not partition:broker", entry)
		}
		byBroker[int32(bi)] = append(byBroker[int32(bi)], int32(pi))
	}
	return false, byBroker, nil
}

// throttleWatch is what a broker follows of the throttle configuration:
// the dynamic broker configs and, per ISR topic of its namespace, the two
// throttled-replicas configs.
type throttleWatch struct {
	s *isrSide

	mu      sync.Mutex
	brokers map[string]map[string]string // resource ("default" or an id) → configs
	topics  map[string][2]string         // topic → (leader, follower) throttled replicas
}

// startThrottle follows the throttle configuration until the ISR side
// stops, and keeps the replica manager's throttle current.
func (s *isrSide) startThrottle() {
	w := &throttleWatch{s: s, brokers: map[string]map[string]string{}, topics: map[string][2]string{}}
	log := s.b.log
	s.wg.Add(2)
	go func() {
		defer s.wg.Done()
		meta.Follow(s.ctx, s.b.cfg.Store, brokerConfigsPrefix, 0, "broker configs", log, w.loadBrokers, w.applyBrokers)
	}()
	go func() {
		defer s.wg.Done()
		meta.Follow(s.ctx, s.b.cfg.Store, catalog.NamespaceTopicsPrefix(s.b.cfg.Namespace), 0, "topic configs", log, w.loadTopics, w.applyTopics)
	}()
}

func (w *throttleWatch) loadBrokers(ctx context.Context) (int64, error) {
	kvs, rev, err := meta.ListAll(ctx, w.s.b.cfg.Store, brokerConfigsPrefix)
	if err != nil {
		return 0, err
	}
	fresh := map[string]map[string]string{}
	for _, kv := range kvs {
		cfgs := map[string]string{}
		if json.Unmarshal(kv.Value, &cfgs) == nil {
			fresh[strings.TrimPrefix(kv.Key, brokerConfigsPrefix)] = cfgs
		}
	}
	w.mu.Lock()
	w.brokers = fresh
	w.mu.Unlock()
	w.update()
	return rev, nil
}

func (w *throttleWatch) applyBrokers(evs []meta.Event) {
	w.mu.Lock()
	for _, ev := range evs {
		name := strings.TrimPrefix(ev.Key, brokerConfigsPrefix)
		cfgs := map[string]string{}
		if ev.Type == meta.EventDelete || json.Unmarshal(ev.Value, &cfgs) != nil {
			delete(w.brokers, name)
			continue
		}
		w.brokers[name] = cfgs
	}
	w.mu.Unlock()
	w.update()
}

func (w *throttleWatch) loadTopics(ctx context.Context) (int64, error) {
	prefix := catalog.NamespaceTopicsPrefix(w.s.b.cfg.Namespace)
	kvs, rev, err := meta.ListAll(ctx, w.s.b.cfg.Store, prefix)
	if err != nil {
		return 0, err
	}
	fresh := map[string][2]string{}
	for _, kv := range kvs {
		if name, lists, ok := throttledOf(prefix, kv.Key, kv.Value); ok {
			fresh[name] = lists
		}
	}
	w.mu.Lock()
	w.topics = fresh
	w.mu.Unlock()
	w.update()
	return rev, nil
}

func (w *throttleWatch) applyTopics(evs []meta.Event) {
	prefix := catalog.NamespaceTopicsPrefix(w.s.b.cfg.Namespace)
	w.mu.Lock()
	for _, ev := range evs {
		delete(w.topics, strings.TrimPrefix(ev.Key, prefix))
		if ev.Type != meta.EventPut {
			continue
		}
		if name, lists, ok := throttledOf(prefix, ev.Key, ev.Value); ok {
			w.topics[name] = lists
		}
	}
	w.mu.Unlock()
	w.update()
}

// throttledOf reads a catalogue topic record: its name and its two
// throttled-replicas configs, if it is an ISR topic that has either.
func throttledOf(prefix, key string, value []byte) (string, [2]string, bool) {
	var rec catalog.Topic
	if err := json.Unmarshal(value, &rec); err != nil || !rec.IsISR() {
		return "", [2]string{}, false
	}
	l, f := rec.Configs[leaderThrottledReplicas], rec.Configs[followerThrottledReplica]
	if l == "" && f == "" {
		return "", [2]string{}, false
	}
	return strings.TrimPrefix(key, prefix), [2]string{l, f}, true
}

// update hands the throttle as it applies to this broker to the replica
// manager.
func (w *throttleWatch) update() {
	w.mu.Lock()
	self := int32(w.s.b.ID())
	rate := func(name string) int64 {
		for _, res := range []string{strconv.Itoa(int(self)), defaultBrokerConfigs} {
			if v, ok := w.brokers[res][name]; ok {
				n, err := strconv.ParseInt(v, 10, 64)
				switch {
				case err != nil || n == math.MaxInt64:
					return 0 // unlimited
				case n == 0:
					return 1 // Kafka's 0 holds throttled traffic back entirely; 1 byte/s is as good
				}
				return n
			}
		}
		return 0
	}
	t := isrnode.Throttle{LeaderRate: rate(leaderThrottleRate), FollowerRate: rate(followerThrottleRate)}
	replicas := func(topic, list string, into *isrnode.ThrottledReplicas) {
		all, byBroker, err := parseThrottledReplicas(list)
		switch {
		case err != nil:
		case all:
			if into.Topics == nil {
				into.Topics = map[string]bool{}
			}
			into.Topics[topic] = true
		default:
			for _, p := range byBroker[self] {
				if into.Partitions == nil {
					into.Partitions = map[string]bool{}
				}
				into.Partitions[isrnode.PartitionName(topic, p)] = true
			}
		}
	}
	for topic, lists := range w.topics {
		replicas(topic, lists[0], &t.Leader)
		replicas(topic, lists[1], &t.Follower)
	}
	w.mu.Unlock()
	w.s.mgr.SetThrottle(t)
}
