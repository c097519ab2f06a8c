package broker

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"slices"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"quire/internal/catalog"
	"quire/internal/kafka"
	"quire/internal/meta"
	"quire/internal/mlog/mlogclient"
	"quire/internal/ownership"
)

var _ kafka.Backend = (*Broker)(nil)

// MaxPartitionsPerTopic bounds CreateTopics and CreatePartitions: each
// partition is a managed ledger that its owner loads, so a topic of a
// million partitions would take a broker down. (Pulsar's
// maxNumPartitionsPerPartitionedTopic; Kafka has no per-topic bound.)
const MaxPartitionsPerTopic = 10_000

func toKafka(bi ownership.Member) kafka.Node {
	host, port, _ := splitHostPort(bi.KafkaAddr)
	kb := kafka.Node{ID: bi.ID, Host: host, Port: port}
	for name, addr := range bi.KafkaListeners {
		h, p, err := splitHostPort(addr)
		if err != nil {
			continue
		}
		if kb.Listeners == nil {
			kb.Listeners = map[string]kafka.Endpoint{}
		}
		kb.Listeners[name] = kafka.Endpoint{Host: h, Port: p}
	}
	if bi.Zone != "" {
		kb.Rack = ptr(bi.Zone)
	}
	return kb
}

// Self implements kafka.Backend.
func (b *Broker) Self() kafka.Node { return toKafka(b.cluster.Self()) }

// Brokers implements kafka.Backend.
func (b *Broker) Brokers(context.Context) ([]kafka.Node, error) {
	var out []kafka.Node
	for _, bi := range b.cluster.Brokers() {
		out = append(out, toKafka(bi))
	}
	return out, nil
}

// ClusterID implements kafka.Backend.
func (b *Broker) ClusterID() string { return b.cfg.ClusterID }

// ControllerID implements kafka.Backend: the lowest live broker id (any
// broker can serve admin requests in ledger mode).
func (b *Broker) ControllerID() int32 {
	bs := b.cluster.Brokers()
	if len(bs) == 0 {
		return b.cluster.Self().ID
	}
	return bs[0].ID
}

// MaxMessageBytes implements kafka.Backend.
func (b *Broker) MaxMessageBytes() int32 { return b.cfg.MaxMessageBytes }

// Topics implements kafka.Backend.
func (b *Broker) Topics(ctx context.Context, names []string, autoCreate bool) ([]kafka.TopicInfo, error) {
	var recs []catalog.Topic
	if names == nil {
		all, err := b.admin.ListTopics(ctx, b.cfg.Namespace)
		if err != nil {
			return nil, err
		}
		for _, rec := range all {
			if !isPulsarTopic(rec) { // a Pulsar partitioned topic's record
				recs = append(recs, rec)
			}
		}
	} else {
		for _, n := range names {
			rec, err := b.admin.GetTopic(ctx, b.cfg.Namespace, n)
			if errors.Is(err, catalog.ErrTopicNotFound) && autoCreate && b.cfg.AutoCreateTopics {
				err = b.createTopic(ctx, n, b.cfg.DefaultPartitions, nil, false)
				if err == nil || errors.Is(err, kerr.TopicAlreadyExists) {
					rec, err = b.admin.GetTopic(ctx, b.cfg.Namespace, n)
				}
				if err == nil {
					b.log.Info("topic auto-created", "topic", n, "partitions", rec.Partitions)
				}
			}
			if errors.Is(err, catalog.ErrTopicNotFound) || errors.Is(err, catalog.ErrInvalidTopicName) || errors.Is(err, catalog.ErrInvalidName) ||
				err == nil && isPulsarTopic(rec) {
				continue
			}
			if err != nil {
				return nil, err
			}
			recs = append(recs, rec)
		}
	}
	out := make([]kafka.TopicInfo, 0, len(recs))
	// One answer per bundle, and one bounded wait for the whole request:
	// right after a broker died, every partition of its bundles is unowned
	// until its session expires, and clients must not wait for each.
	lctx, cancel := context.WithTimeout(ctx, b.cfg.Timeouts.MetadataOwners)
	defer cancel()
	leaders := map[catalog.Bundle]int32{}
	for _, rec := range recs {
		if rec.IsISR() {
			out = append(out, b.isrTopicInfo(rec))
			continue
		}
		ti := kafka.TopicInfo{Name: rec.Name, ID: rec.ID}
		for i := range rec.Partitions {
			leader := b.leaderOf(lctx, catalog.PartitionName(b.cfg.Namespace, rec.Name, i), leaders)
			pi := kafka.PartitionInfo{Partition: i, Leader: leader, LeaderEpoch: -1}
			if leader >= 0 {
				pi.Replicas, pi.ISR = []int32{leader}, []int32{leader}
			}
			ti.Partitions = append(ti.Partitions, pi)
		}
		out = append(out, ti)
	}
	return out, nil
}

// leaderOf names the owner of a partition's bundle, assigning one if the
// bundle is unowned (bounded by ctx: -1 and the client retries). known
// memoizes the answers of one request by bundle.
func (b *Broker) leaderOf(ctx context.Context, name string, known map[catalog.Bundle]int32) int32 {
	bundle, err := b.cluster.BundleOf(name)
	if err != nil {
		return -1
	}
	if id, ok := known[bundle]; ok {
		return id
	}
	id := int32(-1)
	if o, ok := b.cluster.BundleOwner(bundle); ok {
		id = o.Owner.ID
	} else if ctx.Err() == nil {
		if o, err := b.cluster.Lookup(ctx, name); err == nil {
			id = o.ID
		}
	}
	known[bundle] = id
	return id
}

func topicErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, catalog.ErrTopicExists):
		return kerr.TopicAlreadyExists
	case errors.Is(err, catalog.ErrTopicNotFound):
		return kerr.UnknownTopicOrPartition
	case errors.Is(err, catalog.ErrInvalidTopicName), errors.Is(err, catalog.ErrInvalidName):
		return kerr.InvalidTopicException
	case errors.Is(err, catalog.ErrInvalidPartitions):
		return kerr.InvalidPartitions
	case errors.Is(err, meta.ErrUnavailable):
		return kerr.RequestTimedOut
	}
	var ke *kerr.Error
	if errors.As(err, &ke) {
		return ke
	}
	return err
}

func derefConfigs(in map[string]*string) (map[string]string, error) {
	out := map[string]string{}
	for k, v := range in {
		if v == nil {
			return nil, fmt.Errorf("%w: config %q has no value", kerr.InvalidConfig, k)
		}
		out[k] = *v
	}
	return out, nil
}

// CreateTopic implements kafka.Backend.
func (b *Broker) CreateTopic(ctx context.Context, name string, numPartitions int32, configs map[string]*string, validateOnly bool) error {
	if numPartitions == -1 {
		numPartitions = b.cfg.DefaultPartitions
	}
	if numPartitions < 1 || numPartitions > MaxPartitionsPerTopic {
		return kerr.InvalidPartitions
	}
	if err := catalog.ValidateTopicName(name); err != nil {
		return kerr.InvalidTopicException
	}
	cfgs, err := derefConfigs(configs)
	if err != nil {
		return err
	}
	return b.createTopic(ctx, name, numPartitions, cfgs, validateOnly) // in the namespace's mode (isr.go)
}

// DeleteTopic implements kafka.Backend: the record goes first (the topic
// is gone for clients at once); partitions loaded anywhere stop when their
// owners see the record's delete; the ledgers are deleted in the background.
func (b *Broker) DeleteTopic(ctx context.Context, name string) error {
	rec, err := b.admin.GetTopic(ctx, b.cfg.Namespace, name)
	if err != nil {
		return topicErr(err)
	}
	if err := b.admin.DeleteTopic(ctx, b.cfg.Namespace, name); err != nil {
		return topicErr(err)
	}
	if rec.IsISR() {
		return b.deleteISRTopic(ctx, rec) // its partition records, then the replicas (isr.go)
	}
	b.dropTopicAnyPartition(name)
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		// Let owners elsewhere notice the delete and close first.
		select {
		case <-time.After(b.cfg.Timeouts.DeleteGrace):
		case <-b.ctx.Done():
			return
		}
		ctx, cancel := context.WithTimeout(b.ctx, b.cfg.Timeouts.DeleteStorage)
		defer cancel()
		for i := range rec.Partitions {
			storage := storageName(catalog.PartitionName(b.cfg.Namespace, name, i), rec.ID)
			if err := mlogclient.Delete(ctx, b.cfg.Store, b.cfg.Ledgers, storage); err != nil {
				b.log.Warn("delete partition storage", "partition", storage, "err", err)
				continue
			}
			if kv, err := b.cfg.Store.Get(ctx, floorKey(storage)); err == nil {
				_ = b.cfg.Store.Delete(ctx, kv.Key, kv.Version)
			}
		}
	}()
	return nil
}

// watchTopics drops loaded partitions of topics deleted through any broker.
func (b *Broker) watchTopics() {
	prefix := catalog.NamespaceTopicsPrefix(b.cfg.Namespace)
	for b.ctx.Err() == nil {
		for resp := range b.cfg.Store.Watch(b.ctx, prefix, 0) {
			for _, ev := range resp.Events {
				if ev.Type != meta.EventDelete {
					continue
				}
				name := strings.TrimPrefix(ev.Key, prefix)
				b.dropTopicAnyPartition(name)
			}
		}
		select {
		case <-b.ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

// dropTopicAnyPartition closes every loaded partition of a topic.
func (b *Broker) dropTopicAnyPartition(topicName string) {
	b.dropWhere(func(l *loaded) bool {
		_, t, _, err := catalog.ParsePartitionName(l.name)
		return err == nil && t == topicName
	})
}

// CreatePartitions implements kafka.Backend.
func (b *Broker) CreatePartitions(ctx context.Context, name string, count int32, validateOnly bool) error {
	rec, err := b.admin.GetTopic(ctx, b.cfg.Namespace, name)
	if err != nil {
		return topicErr(err)
	}
	if count <= rec.Partitions || count > MaxPartitionsPerTopic {
		return kerr.InvalidPartitions
	}
	if validateOnly {
		return nil
	}
	rec, err = b.admin.SetPartitions(ctx, b.cfg.Namespace, name, count)
	if err == nil && rec.IsISR() && b.isr != nil {
		return b.isr.createPartitions(ctx, rec, 0)
	}
	return topicErr(err)
}

// TopicConfigs implements kafka.Backend.
func (b *Broker) TopicConfigs(ctx context.Context, name string) ([]kafka.ConfigEntry, error) {
	rec, err := b.admin.GetTopic(ctx, b.cfg.Namespace, name)
	if err != nil {
		return nil, topicErr(err)
	}
	pol, err := b.admin.GetPolicies(ctx, b.cfg.Namespace)
	if err != nil {
		return nil, err
	}
	if rec.IsISR() {
		return isrDescribeConfigs(rec, pol), nil // isr.go
	}
	return describeConfigs(rec.Configs, pol), nil
}

// AlterTopicConfigs implements kafka.Backend. Changes apply when a
// partition is next loaded.
func (b *Broker) AlterTopicConfigs(ctx context.Context, name string, ops []kafka.ConfigOp, validateOnly bool) error {
	validate := validateConfigs
	if rec, err := b.admin.GetTopic(ctx, b.cfg.Namespace, name); err == nil && rec.IsISR() {
		validate = isrAlterValidator(rec) // isr.go
	}
	apply := func(cfgs map[string]string) error {
		for _, op := range ops {
			switch op.Op {
			case kmsg.IncrementalAlterConfigOpSet:
				if op.Value == nil {
					return kerr.InvalidConfig
				}
				cfgs[op.Name] = *op.Value
			case kmsg.IncrementalAlterConfigOpDelete:
				if _, ok := topicConfigs[op.Name]; !ok && throttledReplicasConfigs[op.Name] == "" {
					return fmt.Errorf("%w: unknown topic config %q", kerr.InvalidConfig, op.Name)
				}
				delete(cfgs, op.Name)
			case kmsg.IncrementalAlterConfigOpAppend, kmsg.IncrementalAlterConfigOpSubtract:
				// List configs only: cleanup.policy is the one a topic has.
				if op.Name != "cleanup.policy" || op.Value == nil {
					return fmt.Errorf("%w: operation %v on %q (not a list config)", kerr.InvalidConfig, op.Op, op.Name)
				}
				cfgs[op.Name] = alterList(cfgs[op.Name], "delete", *op.Value, op.Op == kmsg.IncrementalAlterConfigOpAppend)
			default:
				return fmt.Errorf("%w: operation %v on %q", kerr.InvalidConfig, op.Op, op.Name)
			}
		}
		return validate(cfgs)
	}
	if validateOnly {
		rec, err := b.admin.GetTopic(ctx, b.cfg.Namespace, name)
		if err != nil {
			return topicErr(err)
		}
		cfgs := maps.Clone(rec.Configs)
		if cfgs == nil {
			cfgs = map[string]string{}
		}
		return apply(cfgs)
	}
	_, err := b.admin.UpdateConfigs(ctx, b.cfg.Namespace, name, apply)
	return topicErr(err)
}

// BrokerConfigs implements kafka.Backend.
func (b *Broker) BrokerConfigs(ctx context.Context) ([]kafka.ConfigEntry, error) {
	pol, err := b.admin.GetPolicies(ctx, b.cfg.Namespace)
	if err != nil {
		return nil, err
	}
	cs := brokerConfigs(b.cfg.AutoCreateTopics, b.cfg.DefaultPartitions, b.cfg.MaxMessageBytes, pol)
	if b.isr != nil {
		cs = append(cs, b.throttleEntries(ctx)...) // isr_throttle.go: the dynamic ones
	}
	sort.Slice(cs, func(i, j int) bool { return cs[i].Name < cs[j].Name })
	return cs, nil
}

// Partition implements kafka.Backend.
func (b *Broker) Partition(ctx context.Context, topicName string, partition int32) (kafka.Partition, error) {
	if p, isISR, err := b.isrPartition(topicName, partition); isISR {
		return p, err
	}
	p, err := b.partition(ctx, topicName, partition)
	if err != nil {
		return nil, err
	}
	qa, stuck := 0, &atomic.Bool{}
	b.mu.Lock()
	if l := b.parts[catalog.PartitionName(b.cfg.Namespace, topicName, partition)]; l != nil && l.partition() == p {
		qa, stuck = l.ackQuorum, &l.stuck
	}
	b.mu.Unlock()
	if qa == 0 {
		qa = 2 // the default policy's, should the partition have moved meanwhile
	}
	return gatedPartition{Partition: p, gate: b.storage, ackQuorum: qa, stuck: stuck, refused: func() { b.produceRefused.Add(1) }}, nil
}

// InitProducerID implements kafka.Backend: ids come from a cluster-wide
// sequence in the metadata store, so they never repeat.
func (b *Broker) InitProducerID(ctx context.Context) (int64, int16, error) {
	id, err := b.cfg.Store.AllocateID(ctx, "kafka-producer-id")
	if err != nil {
		return 0, 0, kerr.CoordinatorNotAvailable
	}
	return id, 0, nil
}

// groupKey is the name whose bundle decides a group's coordinator.
func (b *Broker) groupKey(group string) string {
	return "persistent://" + b.cfg.Namespace + "/__group-" + url.PathEscape(group)
}

// Coordinator implements kafka.Backend.
func (b *Broker) Coordinator(ctx context.Context, group string) (kafka.Node, error) {
	lctx, cancel := context.WithTimeout(ctx, b.cfg.Timeouts.Coordinator)
	defer cancel()
	o, err := b.cluster.Lookup(lctx, b.groupKey(group))
	if err != nil {
		return kafka.Node{}, kerr.CoordinatorNotAvailable
	}
	return toKafka(o), nil
}

// Groups implements kafka.Backend.
func (b *Broker) Groups() kafka.GroupCoordinator { return b.groups }

// alterList appends the comma-separated items of value to the list config
// cur (def when unset), skipping those present, or subtracts them from it.
func alterList(cur, def, value string, add bool) string {
	if cur == "" {
		cur = def
	}
	var out []string
	for _, it := range strings.Split(cur, ",") {
		if it = strings.TrimSpace(it); it != "" {
			out = append(out, it)
		}
	}
	for _, it := range strings.Split(value, ",") {
		it = strings.TrimSpace(it)
		switch i := slices.Index(out, it); {
		case it == "":
		case add && i < 0:
			out = append(out, it)
		case !add && i >= 0:
			out = slices.Delete(out, i, i+1)
		}
	}
	return strings.Join(out, ",")
}
