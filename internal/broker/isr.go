package broker

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"maps"
	"math"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"quire/internal/catalog"
	"quire/internal/isr"
	"quire/internal/isr/isrctl"
	"quire/internal/isr/isrnode"
	"quire/internal/kafka"
	"quire/internal/meta"
	"quire/internal/ownership"
)

// ISR mode on a broker: the topics of a namespace whose replication policy
// is "isr" (catalog.Replication) are stored on the brokers themselves, a
// leader and its followers, as Kafka stores them, beside the ledger-mode
// topics behind the same Kafka listener. A topic's mode is fixed in its
// catalogue record when it is created, and requests are routed by it.
//
// Each broker process runs an isrnode.Manager (its replicas, on disk under
// ISRConfig.Dir; replication between brokers with Kafka's Fetch on the
// brokers' own listeners) and an isrctl.Service, a candidate for ISR mode's
// controller: one of them at a time is active. Leaders' ISR proposals and
// new partitions reach the active controller wherever it runs through the
// metadata store (isrctl.Client). The broker watches the partition records
// to answer Metadata with each partition's real leader, replicas, ISR and
// leader epoch, and to route a produce or fetch to the replica here (it
// must lead the partition; NOT_LEADER_OR_FOLLOWER otherwise, so the client
// refreshes its metadata — but a follower serves a consumer's Fetch v11+
// up to its HW, and a leader may send a consumer to a follower in its
// rack: KIP-392, isr_readreplica.go).
//
// What it decides is only where things go: which brokers a new partition's
// replicas are on (rack-aware, by Zone). Leadership, the ISR and the HW
// are the cores'.

// ISRConfig configures ISR mode on a broker; a zero Dir leaves it off
// (the broker then serves no ISR topic: their partitions answer
// NOT_LEADER_OR_FOLLOWER here).
type ISRConfig struct {
	// Dir holds this broker's partition replicas (one directory each).
	Dir string
	// MinISR is min.insync.replicas for the replicas here and the
	// controller's elections when the namespace's policy does not say
	// (default 1). UncleanElection likewise for the controller.
	MinISR          int
	UncleanElection bool
	// UncleanRecovery is the controller's unclean.recovery.strategy
	// (KIP-966; zero: Balanced, Kafka's default): what becomes of a
	// partition whose ISR and ELR emptied because their members came back
	// from unclean shutdowns.
	UncleanRecovery isr.RecoveryStrategy
	// LagTimeMax is replica.lag.time.max.ms (default 30 s).
	LagTimeMax time.Duration
	// SessionTTL bounds how long a dead broker stays in the ISR's view of
	// live brokers and a dead controller keeps its role (default the
	// broker's SessionTTL).
	SessionTTL time.Duration
	// NoController: this process never becomes ISR mode's controller.
	NoController bool
	// FetchTLS, when set, is how this broker's followers dial the leaders'
	// Kafka listeners (tlsconf.Client: the CA of the listeners'
	// certificates, and this broker's own certificate for listeners that
	// require mutual TLS; its principal must be a super user when the
	// leaders run --kafka-authorizer). nil: plaintext.
	FetchTLS *tls.Config
	// ReplicaSelector is replica.selector.class (KIP-392,
	// isr_readreplica.go): which replica the leaders here send a consumer
	// to read from; zero: the leader itself (Kafka's default).
	ReplicaSelector ReplicaSelector
	// ThrottleWindow samples the replication throttle's rates: Kafka's
	// replication.quota.window.num × replication.quota.window.size.seconds
	// (zero: 11 × 1 s; isr_throttle.go).
	ThrottleWindow isrnode.ThrottleWindow
}

// isrSide is a broker's ISR mode.
type isrSide struct {
	b       *Broker
	mgr     *isrnode.Manager
	ctl     *isrctl.Service // nil with NoController
	client  isrctl.Client
	metrics *isrCollector // nil when not registered (isr_metrics.go)

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	// lagTimeMax is replica.lag.time.max.ms as the replicas here apply it.
	lagTimeMax time.Duration
	// reads counts follower fetching (isr_readreplica.go) for the metrics.
	reads readReplicaCounters

	mu      sync.Mutex
	records map[string]isr.PartitionState // every partition record, by isr partition name
	// ensuring holds the topics whose missing partition records are being
	// asked for (ensurePartitions).
	ensuring map[string]bool
}

// startISR starts ISR mode when it is configured: the controller
// candidate, the replica manager, and the watch of the partition records.
func (b *Broker) startISR(ctx context.Context) error {
	c := b.cfg.ISR
	if c.Dir == "" {
		return nil
	}
	if c.SessionTTL <= 0 {
		c.SessionTTL = b.cfg.SessionTTL
	}
	pol, err := b.admin.GetPolicies(ctx, b.cfg.Namespace)
	if err != nil {
		return fmt.Errorf("isr: %w", err)
	}
	minISR, unclean := c.MinISR, c.UncleanElection
	if r := pol.Replication.WithDefaults(); r.IsISR() {
		minISR, unclean = int(r.MinInSyncReplicas), r.UncleanLeaderElection
	}
	s := &isrSide{b: b, client: isrctl.Client{Store: b.cfg.Store}, records: map[string]isr.PartitionState{}, ensuring: map[string]bool{},
		lagTimeMax: cmp.Or(c.LagTimeMax, defaultLagTimeMax)}
	s.ctx, s.cancel = context.WithCancel(b.ctx)
	if !c.NoController {
		s.ctl = isrctl.Start(isrctl.Config{Store: b.cfg.Store, Name: strconv.Itoa(int(b.ID())), SessionTTL: c.SessionTTL,
			Controller: isr.ControllerConfig{MinISR: minISR, UncleanElection: unclean, UncleanRecovery: c.UncleanRecovery}, Logger: b.cfg.Logger})
	}
	s.mgr, err = isrnode.Start(isrnode.Config{
		Broker: isr.BrokerID(b.ID()), Store: b.cfg.Store, Controller: s.client, Resolve: b.kafkaAddrOf,
		Dir: filepath.Clean(c.Dir), Replica: isr.ReplicaConfig{MinISR: minISR, LagTimeMax: c.LagTimeMax},
		SessionTTL: c.SessionTTL, FetchTLS: c.FetchTLS, ThrottleWindow: c.ThrottleWindow, Logger: b.cfg.Logger,
	})
	if err != nil {
		if s.ctl != nil {
			s.ctl.Close()
		}
		s.cancel()
		return fmt.Errorf("isr: %w", err)
	}
	b.isr = s
	if reg := b.cfg.Registerer; reg != nil {
		s.metrics = newISRCollector(s)
		if err := reg.Register(s.metrics); err != nil {
			b.log.Warn("isr metrics not registered", "err", err)
			s.metrics = nil
		}
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		s.watchRecords()
	}()
	s.startThrottle() // isr_throttle.go
	b.log.Info("isr mode on", "dir", c.Dir, "minISR", minISR, "controllerCandidate", s.ctl != nil)
	return nil
}

// closeISR stops ISR mode: the replicas flush and close and the broker's
// registration ends (the controller moves leadership away), then the
// controller candidate resigns.
func (b *Broker) closeISR() {
	s := b.isr
	if s == nil {
		return
	}
	if s.metrics != nil {
		b.cfg.Registerer.Unregister(s.metrics)
	}
	if err := s.mgr.Close(); err != nil {
		b.log.Warn("isr: close the replicas", "err", err)
	}
	if s.ctl != nil {
		s.ctl.Close()
	}
	s.cancel()
	s.wg.Wait()
}

// kafkaAddrOf resolves a broker id to its Kafka listener (isrnode's
// Resolve): the followers fetch there.
func (b *Broker) kafkaAddrOf(id isr.BrokerID) (string, error) {
	for _, m := range b.cluster.Brokers() {
		if m.ID == int32(id) {
			return m.KafkaAddr, nil
		}
	}
	return "", fmt.Errorf("broker %d is not live", id)
}

// watchRecords keeps every partition record (a listing, then the watch
// from its revision; again after a watch error).
func (s *isrSide) watchRecords() {
	store := s.b.cfg.Store
	for s.ctx.Err() == nil {
		kvs, rev, err := meta.ListAll(s.ctx, store, isr.PartitionPrefix)
		if err != nil {
			select {
			case <-s.ctx.Done():
			case <-time.After(time.Second):
			}
			continue
		}
		fresh := map[string]isr.PartitionState{}
		for _, kv := range kvs {
			if st, err := isr.UnmarshalState(kv.Value); err == nil {
				fresh[st.Partition] = st
			}
		}
		s.mu.Lock()
		s.records = fresh
		s.mu.Unlock()
		for resp := range store.Watch(s.ctx, isr.PartitionPrefix, rev+1) {
			if resp.Err != nil {
				break
			}
			s.mu.Lock()
			for _, ev := range resp.Events {
				name := ev.Key[len(isr.PartitionPrefix):]
				switch ev.Type {
				case meta.EventPut:
					if st, err := isr.UnmarshalState(ev.Value); err == nil {
						s.records[st.Partition] = st
					}
				case meta.EventDelete:
					delete(s.records, name)
				}
			}
			s.mu.Unlock()
		}
	}
}

func (s *isrSide) record(name string) (isr.PartitionState, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st, ok := s.records[name]
	return st, ok
}

// isrTopicInfo answers Metadata for an ISR topic from the partition
// records: each partition's leader, leader epoch, replicas, ISR, and the
// replicas whose broker is not live. A partition without a record yet (the
// controller has not written it) has no leader: clients retry; its record
// is asked for again (ensurePartitions).
func (b *Broker) isrTopicInfo(rec catalog.Topic) kafka.TopicInfo {
	ti := kafka.TopicInfo{Name: rec.Name, ID: rec.ID}
	live := map[int32]bool{}
	for _, m := range b.cluster.Brokers() {
		live[m.ID] = true
	}
	missing := false
	for i := range rec.Partitions {
		pi := kafka.PartitionInfo{Partition: i, Leader: -1, LeaderEpoch: -1}
		st, ok := isr.PartitionState{}, false
		if b.isr != nil {
			st, ok = b.isr.record(isrnode.PartitionName(rec.Name, i))
		}
		if !ok {
			missing = true
			ti.Partitions = append(ti.Partitions, pi)
			continue
		}
		pi.Leader, pi.LeaderEpoch = int32(st.Leader), st.LeaderEpoch
		for _, r := range st.Replicas {
			pi.Replicas = append(pi.Replicas, int32(r))
			if !live[int32(r)] {
				pi.OfflineReplicas = append(pi.OfflineReplicas, int32(r))
			}
		}
		for _, m := range st.ISR {
			pi.ISR = append(pi.ISR, int32(m.ID))
		}
		ti.Partitions = append(ti.Partitions, pi)
	}
	if missing && b.isr != nil && time.Since(rec.Created) > b.cfg.SessionTTL {
		b.isr.ensurePartitions(rec, 0)
	}
	return ti
}

// SeeOneAnother reports whether every one of brokers sees all of them
// registered. A broker learns of the others through its store watch, after
// they have started, and CreateTopics checks an ISR topic's replication
// factor against the brokers it knows (INVALID_REPLICATION_FACTOR): brokers
// started together are ready for such topics once this holds.
func SeeOneAnother(brokers []*Broker) bool {
	for _, b := range brokers {
		if len(b.cluster.Brokers()) < len(brokers) {
			return false
		}
	}
	return true
}

// isrPartition routes a produce or a consumer's fetch of an ISR topic's
// partition: handled is false when it is not one (as far as the records
// here know; a ledger-mode load refuses a topic whose record says ISR).
func (b *Broker) isrPartition(topic string, idx int32) (p kafka.Partition, handled bool, err error) {
	return b.isrReplica(topic, idx, false)
}

// isrReplica is isrPartition that, with followerReads (a consumer's Fetch
// v11+, KIP-392), also answers with the replica here when it follows a
// leader. A partition without a leader (every eligible replica down, K4)
// refuses consumers on its followers too, as on its former leader: the
// issue's "refuses produce and fetch until one returns".
func (b *Broker) isrReplica(topic string, idx int32, followerReads bool) (p kafka.Partition, handled bool, err error) {
	s := b.isr
	if s == nil {
		return nil, false, nil
	}
	name := isrnode.PartitionName(topic, idx)
	rec, ok := s.record(name)
	if !ok {
		return nil, false, nil
	}
	st, err := s.mgr.Status(name)
	switch {
	case err == nil && st.Role == isr.RoleLeader:
		return &isrPartition{m: s.mgr, s: s, name: name}, true, nil
	case err == nil && st.Role == isr.RoleFollower && followerReads && rec.Leader != isr.NoLeader:
		return &isrPartition{m: s.mgr, s: s, name: name, follower: true}, true, nil
	}
	return nil, true, kerr.NotLeaderForPartition
}

// createTopic creates a topic in the namespace's mode: ISR topics get their
// partition records from the controller, with rf replicas each (the
// request's replication factor, or the policy's when -1).
func (b *Broker) createTopic(ctx context.Context, name string, partitions int32, configs map[string]string, validateOnly bool) error {
	pol, err := b.admin.GetPolicies(ctx, b.cfg.Namespace)
	if err != nil {
		return topicErr(err)
	}
	repl := pol.Replication.WithDefaults()
	if !repl.IsISR() {
		if err := validateConfigs(configs); err != nil {
			return err
		}
		if validateOnly {
			return b.existsErr(ctx, name)
		}
		_, err = b.admin.CreateTopic(ctx, b.cfg.Namespace, name, partitions, configs)
		return topicErr(err)
	}
	if b.isr == nil {
		return fmt.Errorf("%w: namespace %s is in ISR mode and this broker runs no ISR replicas", kerr.InvalidRequest, b.cfg.Namespace)
	}
	if err := validateISRConfigs(configs); err != nil {
		return err
	}
	rf := repl.Factor
	if f, ok := kafka.ReplicationFactorFrom(ctx); ok && f > 0 {
		rf = int32(f)
	}
	if n := len(b.cluster.Brokers()); int(rf) > n {
		return fmt.Errorf("%w: replication factor %d with %d live brokers", kerr.InvalidReplicationFactor, rf, n)
	}
	if validateOnly {
		return b.existsErr(ctx, name)
	}
	rec, err := b.admin.CreateTopicMode(ctx, b.cfg.Namespace, name, partitions, configs, catalog.ModeISR, rf)
	if err != nil {
		return topicErr(err)
	}
	if err := b.isr.deleteStaleRecords(ctx, rec); err != nil {
		return err
	}
	return b.isr.createPartitions(ctx, rec, 0)
}

// deleteStaleRecords deletes the partition records a deleted topic of the
// same name left behind (its delete did not reach the controller), and
// waits until they are gone, so the new topic starts empty.
func (s *isrSide) deleteStaleRecords(ctx context.Context, rec catalog.Topic) error {
	for i := range rec.Partitions {
		name := isrnode.PartitionName(rec.Name, i)
		if _, ok := s.record(name); !ok {
			continue
		}
		if err := s.client.DeletePartition(ctx, name); err != nil && !errors.Is(err, isr.ErrUnknownPartition) {
			return fmt.Errorf("%w: partition %s of a deleted topic: %w", kerr.RequestTimedOut, name, err)
		}
		for {
			if _, ok := s.record(name); !ok {
				break
			}
			select {
			case <-ctx.Done():
				return kerr.RequestTimedOut
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
	return nil
}

func (b *Broker) existsErr(ctx context.Context, name string) error {
	if _, err := b.admin.GetTopic(ctx, b.cfg.Namespace, name); err == nil {
		return kerr.TopicAlreadyExists
	}
	return nil
}

// isrFlushConfigs are Kafka's flush policy configs, which only ISR-mode
// topics have (a ledger's entries are fsynced by the bookies' journals):
// each replica flushes its log after this many records, or when its oldest
// unflushed record is this old. Kafka's default for both, Long.MAX_VALUE,
// forces no flush.
var isrFlushConfigs = map[string]string{
	"flush.messages": "ISR mode: every replica flushes (fsyncs) its log once this many records are unflushed (fixed when the topic is created)",
	"flush.ms":       "ISR mode: every replica flushes (fsyncs) its log once its oldest unflushed record is this old, in ms (fixed when the topic is created)",
}

// validateISRConfigs checks an ISR topic's configs: Kafka's replication
// and flush configs are its own here; compaction is not supported in ISR
// mode yet.
func validateISRConfigs(cfgs map[string]string) error {
	rest := map[string]string{}
	for k, v := range cfgs {
		switch k {
		case "flush.messages", "flush.ms":
			if n, err := strconv.ParseInt(v, 10, 64); err != nil || n < 1 {
				return fmt.Errorf("%w: %s %q", kerr.InvalidConfig, k, v)
			}
		case "min.insync.replicas":
			if n, err := strconv.Atoi(v); err != nil || n < 1 {
				return fmt.Errorf("%w: min.insync.replicas %q", kerr.InvalidConfig, v)
			}
		case "unclean.leader.election.enable":
			if _, err := strconv.ParseBool(v); err != nil {
				return fmt.Errorf("%w: unclean.leader.election.enable %q", kerr.InvalidConfig, v)
			}
		case leaderThrottledReplicas, followerThrottledReplica: // isr_throttle.go
			if err := validateThrottledReplicas(k, v); err != nil {
				return err
			}
		case "cleanup.policy":
			if v != "delete" {
				return fmt.Errorf("%w: cleanup.policy %q: ISR-mode topics are not compacted yet", kerr.InvalidConfig, v)
			}
		default:
			rest[k] = v
		}
	}
	return validateConfigs(rest)
}

// isrDescribeConfigs is DescribeConfigs of an ISR topic: the ledger-mode
// list, but min.insync.replicas and unclean.leader.election.enable are the
// topic's own (set at creation, else the namespace policy's) and mean what
// they mean in Kafka.
func isrDescribeConfigs(rec catalog.Topic, pol catalog.Policies) []kafka.ConfigEntry {
	repl := pol.Replication.WithDefaults()
	defaults := map[string]string{
		"min.insync.replicas":            strconv.Itoa(int(max(repl.MinInSyncReplicas, 1))),
		"unclean.leader.election.enable": strconv.FormatBool(repl.UncleanLeaderElection),
	}
	docs := map[string]string{
		"min.insync.replicas":            "ISR mode: in-sync replicas an acks=all produce needs (fixed when the topic is created)",
		"unclean.leader.election.enable": "ISR mode: elect an out-of-sync replica when no in-sync one is left (fixed when the topic is created)",
	}
	out := describeConfigs(rec.Configs, pol)
	for _, k := range slices.Sorted(maps.Keys(isrFlushConfigs)) {
		e := kafka.ConfigEntry{Name: k, Type: kmsg.ConfigTypeLong, Doc: ptr(isrFlushConfigs[k])}
		if v, ok := rec.Configs[k]; ok {
			e.Value, e.Source = ptr(v), kmsg.ConfigSourceDynamicTopicConfig
		} else {
			e.Value, e.Default, e.Source = ptr(strconv.FormatInt(math.MaxInt64, 10)), true, kmsg.ConfigSourceDefaultConfig
		}
		out = append(out, e)
	}
	for _, k := range slices.Sorted(maps.Keys(throttledReplicasConfigs)) { // isr_throttle.go
		e := kafka.ConfigEntry{Name: k, Type: kmsg.ConfigTypeList, Doc: ptr(throttledReplicasConfigs[k])}
		if v, ok := rec.Configs[k]; ok {
			e.Value, e.Source = ptr(v), kmsg.ConfigSourceDynamicTopicConfig
		} else {
			e.Value, e.Default, e.Source = ptr(""), true, kmsg.ConfigSourceDefaultConfig
		}
		out = append(out, e)
	}
	slices.SortFunc(out, func(a, b kafka.ConfigEntry) int { return cmp.Compare(a.Name, b.Name) })
	for i := range out {
		e := &out[i]
		def, ok := defaults[e.Name]
		if !ok {
			continue
		}
		e.Doc = ptr(docs[e.Name])
		if !e.Default {
			continue
		}
		e.Value, e.Source = ptr(def), kmsg.ConfigSourceDefaultConfig
	}
	return out
}

// isrAlterValidator checks an ISR topic's configs after an
// AlterConfigs: min.insync.replicas, unclean.leader.election.enable and
// the flush policy are in its partition records since its creation and
// cannot change (yet); the rest as at creation.
func isrAlterValidator(rec catalog.Topic) func(map[string]string) error {
	return func(cfgs map[string]string) error {
		for _, k := range []string{"min.insync.replicas", "unclean.leader.election.enable", "flush.messages", "flush.ms"} {
			old, had := rec.Configs[k]
			v, has := cfgs[k]
			if had != has || old != v {
				return fmt.Errorf("%w: %s of an ISR-mode topic is fixed when it is created", kerr.InvalidConfig, k)
			}
		}
		return validateISRConfigs(cfgs)
	}
}

// createPartitions asks the controller for the records of rec's
// partitions from index from on, each on its replicas (assignReplicas).
// Records already there are left as they are.
func (s *isrSide) createPartitions(ctx context.Context, rec catalog.Topic, from int32) error {
	rf := int(rec.ReplicationFactor)
	cfg, err := s.b.isrPartitionConfig(ctx, rec)
	if err != nil {
		return topicErr(err)
	}
	members := s.b.cluster.Brokers()
	rf = max(1, min(rf, len(members)))
	var errs []error
	for i := from; i < rec.Partitions; i++ {
		name := isrnode.PartitionName(rec.Name, i)
		if _, ok := s.record(name); ok {
			continue
		}
		replicas := assignReplicas(members, rec.Name, i, rf)
		if err := s.client.CreatePartition(ctx, name, replicas, cfg); err != nil && !errors.Is(err, isr.ErrInvalidRequest) {
			errs = append(errs, fmt.Errorf("partition %s: %w", name, err))
		}
	}
	if len(errs) > 0 {
		s.b.log.Warn("isr: create partition records", "topic", rec.Name, "err", errors.Join(errs...))
		return fmt.Errorf("%w: %w", kerr.RequestTimedOut, errors.Join(errs...))
	}
	return nil
}

// deleteISRTopic asks the controller to delete the partition records of a
// deleted ISR topic; every broker then drops its replicas and their logs.
// A record left behind (the controller unreachable) is deleted when a
// topic of the same name is created again.
func (b *Broker) deleteISRTopic(ctx context.Context, rec catalog.Topic) error {
	if b.isr == nil {
		return nil
	}
	var errs []error
	for i := range rec.Partitions {
		name := isrnode.PartitionName(rec.Name, i)
		if err := b.isr.client.DeletePartition(ctx, name); err != nil && !errors.Is(err, isr.ErrUnknownPartition) {
			errs = append(errs, fmt.Errorf("partition %s: %w", name, err))
		}
	}
	if len(errs) > 0 {
		b.log.Warn("isr: delete partition records", "topic", rec.Name, "err", errors.Join(errs...))
	}
	return nil
}

// isrPartitionConfig is what an ISR topic's partition records carry of
// its settings: min.insync.replicas and unclean election from the topic's
// configs, else the namespace's policy; flush.messages and flush.ms from
// the topic's configs (validateISRConfigs checked them), else none.
func (b *Broker) isrPartitionConfig(ctx context.Context, rec catalog.Topic) (isr.PartitionConfig, error) {
	pol, err := b.admin.GetPolicies(ctx, rec.Namespace)
	if err != nil {
		return isr.PartitionConfig{}, err
	}
	repl := pol.Replication.WithDefaults()
	unclean := repl.UncleanLeaderElection
	cfg := isr.PartitionConfig{MinISR: int(repl.MinInSyncReplicas), UncleanElection: &unclean}
	if v, ok := rec.Configs["min.insync.replicas"]; ok {
		cfg.MinISR, _ = strconv.Atoi(v)
	}
	if v, ok := rec.Configs["unclean.leader.election.enable"]; ok {
		*cfg.UncleanElection, _ = strconv.ParseBool(v)
	}
	if v, ok := rec.Configs["flush.messages"]; ok {
		cfg.FlushMessages, _ = strconv.ParseInt(v, 10, 64)
	}
	if v, ok := rec.Configs["flush.ms"]; ok {
		cfg.FlushMs, _ = strconv.ParseInt(v, 10, 64)
	}
	return cfg, nil
}

// ensurePartitions asks again, in the background, for the records of an
// ISR topic's partitions that have none (a create interrupted, partitions
// added); one attempt per topic at a time.
func (s *isrSide) ensurePartitions(rec catalog.Topic, from int32) {
	s.mu.Lock()
	if s.ensuring[rec.Name] || s.ctx.Err() != nil {
		s.mu.Unlock()
		return
	}
	s.ensuring[rec.Name] = true
	s.wg.Add(1)
	s.mu.Unlock()
	go func() {
		defer s.wg.Done()
		ctx, cancel := context.WithTimeout(s.ctx, 10*time.Second)
		defer cancel()
		_ = s.createPartitions(ctx, rec, from)
		s.mu.Lock()
		delete(s.ensuring, rec.Name)
		s.mu.Unlock()
	}()
}

// assignReplicas places a partition's rf replicas on live brokers, spread
// over zones as Kafka's rack-aware assignment does: the brokers in an
// order that alternates between zones (each zone's by id), and partition
// idx's replicas the rf consecutive ones from a start that moves with idx
// (and with the topic, so topics do not all start on the same broker).
// The first is the preferred leader.
func assignReplicas(members []ownership.Member, topic string, idx int32, rf int) []isr.BrokerID {
	byZone := map[string][]ownership.Member{}
	var zones []string
	for _, m := range members {
		if _, ok := byZone[m.Zone]; !ok {
			zones = append(zones, m.Zone)
		}
		byZone[m.Zone] = append(byZone[m.Zone], m)
	}
	slices.Sort(zones)
	for _, z := range zones {
		slices.SortFunc(byZone[z], func(a, b ownership.Member) int { return cmp.Compare(a.ID, b.ID) })
	}
	var order []isr.BrokerID
	for i := 0; len(order) < len(members); i++ {
		for _, z := range zones {
			if i < len(byZone[z]) {
				order = append(order, isr.BrokerID(byZone[z][i].ID))
			}
		}
	}
	if len(order) == 0 {
		return nil
	}
	var h uint32
	for _, c := range []byte(topic) {
		h = h*31 + uint32(c)
	}
	start := (int(h%uint32(len(order))) + int(idx)) % len(order)
	out := make([]isr.BrokerID, 0, rf)
	for j := range min(rf, len(order)) {
		out = append(out, order[(start+j)%len(order)])
	}
	return out
}

// HandleReplicaFetch implements kafka.ReplicaFetchBackend: followers'
// fetches go to the replica manager; without ISR mode every partition
// answers NOT_LEADER_OR_FOLLOWER.
func (b *Broker) HandleReplicaFetch(ctx context.Context, req *kmsg.FetchRequest) *kmsg.FetchResponse {
	if b.isr != nil {
		return b.isr.mgr.HandleReplicaFetch(ctx, req)
	}
	resp := req.ResponseKind().(*kmsg.FetchResponse)
	for _, t := range req.Topics {
		rt := kmsg.NewFetchResponseTopic()
		rt.Topic, rt.TopicID = t.Topic, t.TopicID
		for _, p := range t.Partitions {
			rp := kmsg.NewFetchResponseTopicPartition()
			rp.Partition, rp.ErrorCode = p.Partition, kerr.NotLeaderForPartition.Code
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp
}

var _ kafka.ReplicaFetchBackend = (*Broker)(nil)
