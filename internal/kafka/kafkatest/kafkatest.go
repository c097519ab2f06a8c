// Package kafkatest is an in-memory kafka.Backend for tests of the Kafka front
// end and of anything built on it. It owns nothing durable: topics,
// partitions and committed offsets live in memory, every partition is led by
// this one broker, and an append is "durable" as soon as it is stored. It must
// never be used outside tests.
//
// Partitions store record batches as the producer sent them, with the base
// offset (the batch's first 8 bytes) rewritten to the assigned offset, the way
// a real log does. Idempotent-producer sequences are not checked.
package kafkatest

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"slices"
	"sort"
	"sync"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"quire/internal/kafka"
)

// Backend is an in-memory kafka.Backend. The zero value is not usable; use New.
type Backend struct {
	self kafka.Node

	mu sync.Mutex
	// AutoCreate lets Topics create missing topics when asked to.
	autoCreate        bool
	defaultPartitions int32
	maxMessageBytes   int32
	topics            map[string]*topic
	nextProducerID    int64
	groups            *Groups
}

type topic struct {
	name       string
	id         [16]byte
	partitions []*Partition
	configs    map[string]string
}

// New returns a backend whose only broker is self, creating missing topics
// on demand with 3 partitions.
func New(self kafka.Node) *Backend {
	return &Backend{
		self:              self,
		autoCreate:        true,
		defaultPartitions: 3,
		maxMessageBytes:   1 << 20,
		topics:            make(map[string]*topic),
		nextProducerID:    1000,
		groups:            NewGroups(),
	}
}

// SetAutoCreate turns topic auto-creation on or off.
func (b *Backend) SetAutoCreate(on bool) { b.mu.Lock(); b.autoCreate = on; b.mu.Unlock() }

// SetMaxMessageBytes sets the largest batch a produce may carry.
func (b *Backend) SetMaxMessageBytes(n int32) { b.mu.Lock(); b.maxMessageBytes = n; b.mu.Unlock() }

// SetSelf changes the broker this backend calls itself (tests that learn
// their listen port after New).
func (b *Backend) SetSelf(self kafka.Node) { b.mu.Lock(); b.self = self; b.mu.Unlock() }

// PartitionFor returns the stored partition (nil if none), for tests that
// want to inject errors or inspect the log.
func (b *Backend) PartitionFor(name string, partition int32) *Partition {
	b.mu.Lock()
	defer b.mu.Unlock()
	t := b.topics[name]
	if t == nil || partition < 0 || int(partition) >= len(t.partitions) {
		return nil
	}
	return t.partitions[partition]
}

func (b *Backend) Self() kafka.Node {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.self
}

func (b *Backend) Brokers(context.Context) ([]kafka.Node, error) {
	return []kafka.Node{b.Self()}, nil
}

func (b *Backend) ClusterID() string { return "kafkatest-cluster" }

func (b *Backend) ControllerID() int32 { return b.Self().ID }

func (b *Backend) Topics(_ context.Context, names []string, autoCreate bool) ([]kafka.TopicInfo, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if names == nil {
		for name := range b.topics {
			names = append(names, name)
		}
		sort.Strings(names)
	}
	var out []kafka.TopicInfo
	for _, name := range names {
		t := b.topics[name]
		if t == nil && autoCreate && b.autoCreate && validTopicName(name) == nil {
			t = b.createLocked(name, b.defaultPartitions, nil)
		}
		if t == nil {
			continue
		}
		info := kafka.TopicInfo{Name: t.name, ID: t.id}
		for i := range t.partitions {
			leader := b.self.ID
			if t.partitions[i].notLeader() {
				leader = b.self.ID + 1
			}
			info.Partitions = append(info.Partitions, kafka.PartitionInfo{
				Partition: int32(i), Leader: leader, LeaderEpoch: 0,
				Replicas: []int32{leader}, ISR: []int32{leader},
			})
		}
		out = append(out, info)
	}
	return out, nil
}

func validTopicName(name string) error {
	if name == "" || name == "." || name == ".." || len(name) > 249 {
		return kerr.InvalidTopicException
	}
	for _, c := range name {
		ok := c == '.' || c == '_' || c == '-' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')
		if !ok {
			return kerr.InvalidTopicException
		}
	}
	return nil
}

func (b *Backend) createLocked(name string, partitions int32, configs map[string]string) *topic {
	t := &topic{name: name, configs: configs}
	_, _ = rand.Read(t.id[:])
	if t.configs == nil {
		t.configs = make(map[string]string)
	}
	for range partitions {
		t.partitions = append(t.partitions, newPartition())
	}
	b.topics[name] = t
	return t
}

// knownConfigs are the topic configs this backend accepts, with defaults.
var knownConfigs = map[string]string{
	"cleanup.policy":    "delete",
	"retention.ms":      "604800000",
	"max.message.bytes": "1048588",
	"segment.bytes":     "1073741824",
}

// MaxPartitions bounds a topic's partitions, as every backend must: the
// fuzzer found that a CreateTopics asking for 2^31 partitions exhausted
// memory.
const MaxPartitions = 10_000

func (b *Backend) CreateTopic(_ context.Context, name string, numPartitions int32, configs map[string]*string, validateOnly bool) error {
	if err := validTopicName(name); err != nil {
		return err
	}
	if numPartitions == -1 {
		numPartitions = b.defaultPartitions
	}
	if numPartitions <= 0 || numPartitions > MaxPartitions {
		return kerr.InvalidPartitions
	}
	set := make(map[string]string)
	for k, v := range configs {
		if _, ok := knownConfigs[k]; !ok || v == nil {
			return kerr.InvalidConfig
		}
		set[k] = *v
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.topics[name] != nil {
		return kerr.TopicAlreadyExists
	}
	if !validateOnly {
		b.createLocked(name, numPartitions, set)
	}
	return nil
}

func (b *Backend) DeleteTopic(_ context.Context, name string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	t := b.topics[name]
	if t == nil {
		return kerr.UnknownTopicOrPartition
	}
	for _, p := range t.partitions {
		p.stop()
	}
	delete(b.topics, name)
	return nil
}

func (b *Backend) CreatePartitions(_ context.Context, name string, count int32, validateOnly bool) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	t := b.topics[name]
	if t == nil {
		return kerr.UnknownTopicOrPartition
	}
	if int(count) <= len(t.partitions) || count > MaxPartitions {
		return kerr.InvalidPartitions
	}
	if !validateOnly {
		for len(t.partitions) < int(count) {
			t.partitions = append(t.partitions, newPartition())
		}
	}
	return nil
}

func (b *Backend) TopicConfigs(_ context.Context, name string) ([]kafka.ConfigEntry, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	t := b.topics[name]
	if t == nil {
		return nil, kerr.UnknownTopicOrPartition
	}
	var out []kafka.ConfigEntry
	for _, k := range sortedKeys(knownConfigs) {
		v, set := t.configs[k]
		e := kafka.ConfigEntry{Name: k, Type: kmsg.ConfigTypeString, Doc: ptr("test config " + k)}
		if set {
			e.Value, e.Source = ptr(v), kmsg.ConfigSourceDynamicTopicConfig
		} else {
			e.Value, e.Default, e.Source = ptr(knownConfigs[k]), true, kmsg.ConfigSourceDefaultConfig
		}
		out = append(out, e)
	}
	return out, nil
}

func (b *Backend) AlterTopicConfigs(_ context.Context, name string, ops []kafka.ConfigOp, validateOnly bool) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	t := b.topics[name]
	if t == nil {
		return kerr.UnknownTopicOrPartition
	}
	next := make(map[string]string)
	for k, v := range t.configs {
		next[k] = v
	}
	for _, op := range ops {
		if _, ok := knownConfigs[op.Name]; !ok {
			return kerr.InvalidConfig
		}
		switch op.Op {
		case kmsg.IncrementalAlterConfigOpSet:
			if op.Value == nil {
				return kerr.InvalidConfig
			}
			next[op.Name] = *op.Value
		case kmsg.IncrementalAlterConfigOpDelete:
			delete(next, op.Name)
		default:
			return kerr.InvalidRequest
		}
	}
	if !validateOnly {
		t.configs = next
	}
	return nil
}

func (b *Backend) BrokerConfigs(context.Context) ([]kafka.ConfigEntry, error) {
	return []kafka.ConfigEntry{
		{Name: "num.partitions", Value: ptr("3"), ReadOnly: true, Default: true, Source: kmsg.ConfigSourceDefaultConfig, Type: kmsg.ConfigTypeInt},
		{Name: "message.max.bytes", Value: ptr(fmt.Sprint(b.MaxMessageBytes())), ReadOnly: true, Source: kmsg.ConfigSourceStaticBrokerConfig, Type: kmsg.ConfigTypeInt},
	}, nil
}

func (b *Backend) Partition(_ context.Context, name string, partition int32) (kafka.Partition, error) {
	p := b.PartitionFor(name, partition)
	if p == nil {
		return nil, kerr.UnknownTopicOrPartition
	}
	if p.notLeader() {
		return nil, kerr.NotLeaderForPartition
	}
	return p, nil
}

func (b *Backend) InitProducerID(context.Context) (int64, int16, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.nextProducerID++
	return b.nextProducerID, 0, nil
}

func (b *Backend) Coordinator(context.Context, string) (kafka.Node, error) { return b.Self(), nil }

func (b *Backend) Groups() kafka.GroupCoordinator { return b.groups }

func (b *Backend) MaxMessageBytes() int32 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.maxMessageBytes
}

func ptr[T any](v T) *T { return &v }

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// Record batch v2 header positions used here.
const (
	batchHeaderLen        = 61
	lastOffsetDeltaOffset = 23
	maxTimestampOffset    = 35
)

type storedBatch struct {
	baseOffset   int64
	lastOffset   int64
	maxTimestamp int64
	bytes        []byte
}

// Partition is an in-memory partition. Its high watermark is the next
// offset to assign: an append is durable at once.
type Partition struct {
	mu sync.Mutex
	// Invariant: batches are contiguous: batches[i+1].baseOffset == batches[i].lastOffset+1.
	batches        []storedBatch
	logStartOffset int64
	highWatermark  int64
	// grown is closed (and replaced) whenever highWatermark grows or the
	// partition stops, waking Fetch long-polls.
	grown       chan struct{}
	stopped     bool
	isNotLeader bool
	appendErr   error
	// held, when set, delays every append's result until it is closed
	// (tests of pipelining and produce timeouts).
	held chan struct{}
	// waits counts Wait calls that had to wait (for tests that need a
	// long-poll to be in place).
	waits int
}

// Waits returns how many Wait calls found nothing new and had to wait.
func (p *Partition) Waits() int { p.mu.Lock(); defer p.mu.Unlock(); return p.waits }

// HoldAppends delays the results of appends from now on until the
// returned release function is called. Appends are still stored at once.
func (p *Partition) HoldAppends() (release func()) {
	held := make(chan struct{})
	p.mu.Lock()
	p.held = held
	p.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			p.mu.Lock()
			if p.held == held {
				p.held = nil
			}
			p.mu.Unlock()
			close(held)
		})
	}
}

func newPartition() *Partition { return &Partition{grown: make(chan struct{})} }

// SetNotLeader makes the partition answer NOT_LEADER_OR_FOLLOWER.
func (p *Partition) SetNotLeader(on bool) { p.mu.Lock(); p.isNotLeader = on; p.mu.Unlock() }

// FailAppends makes every later append fail with err (nil to stop).
func (p *Partition) FailAppends(err error) { p.mu.Lock(); p.appendErr = err; p.mu.Unlock() }

// Batches returns copies of the stored batches.
func (p *Partition) Batches() [][]byte {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([][]byte, len(p.batches))
	for i, b := range p.batches {
		out[i] = slices.Clone(b.bytes)
	}
	return out
}

func (p *Partition) notLeader() bool { p.mu.Lock(); defer p.mu.Unlock(); return p.isNotLeader }

func (p *Partition) stop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.stopped {
		p.stopped = true
		close(p.grown)
	}
}

func (p *Partition) Append(_ context.Context, batch []byte) <-chan kafka.AppendResult {
	result := make(chan kafka.AppendResult, 1)
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.appendErr != nil || p.stopped {
		err := p.appendErr
		if err == nil {
			err = kerr.NotLeaderForPartition
		}
		result <- kafka.AppendResult{BaseOffset: -1, LogAppendTime: -1, LogStartOffset: -1, Err: err}
		return result
	}
	if len(batch) < batchHeaderLen {
		result <- kafka.AppendResult{BaseOffset: -1, LogAppendTime: -1, LogStartOffset: -1, Err: kerr.CorruptMessage}
		return result
	}
	stored := slices.Clone(batch)
	base := p.highWatermark
	binary.BigEndian.PutUint64(stored[0:8], uint64(base))
	lastDelta := int64(int32(binary.BigEndian.Uint32(stored[lastOffsetDeltaOffset:])))
	p.batches = append(p.batches, storedBatch{
		baseOffset:   base,
		lastOffset:   base + lastDelta,
		maxTimestamp: int64(binary.BigEndian.Uint64(stored[maxTimestampOffset:])),
		bytes:        stored,
	})
	p.highWatermark = base + lastDelta + 1
	close(p.grown)
	p.grown = make(chan struct{})
	res := kafka.AppendResult{BaseOffset: base, LogAppendTime: -1, LogStartOffset: p.logStartOffset}
	if held := p.held; held != nil {
		go func() { <-held; result <- res }()
		return result
	}
	result <- res
	return result
}

func (p *Partition) Read(_ context.Context, offset int64, maxBytes int32) (kafka.ReadResult, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	res := kafka.ReadResult{HighWatermark: p.highWatermark, LastStableOffset: p.highWatermark, LogStartOffset: p.logStartOffset}
	if offset < p.logStartOffset || offset > p.highWatermark {
		return res, kerr.OffsetOutOfRange
	}
	i := sort.Search(len(p.batches), func(i int) bool { return p.batches[i].lastOffset >= offset })
	for ; i < len(p.batches); i++ {
		b := p.batches[i].bytes
		if len(res.Records) > 0 && len(res.Records)+len(b) > int(maxBytes) {
			break
		}
		res.Records = append(res.Records, b...)
	}
	return res, nil
}

func (p *Partition) HighWatermark() int64 { p.mu.Lock(); defer p.mu.Unlock(); return p.highWatermark }

func (p *Partition) LogStartOffset() int64 { p.mu.Lock(); defer p.mu.Unlock(); return p.logStartOffset }

func (p *Partition) Wait(offset int64) <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.highWatermark > offset || p.stopped {
		done := make(chan struct{})
		close(done)
		return done
	}
	p.waits++
	return p.grown
}

func (p *Partition) OffsetForTimestamp(_ context.Context, ts int64) (int64, int64, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, b := range p.batches {
		if b.maxTimestamp >= ts {
			return b.baseOffset, b.maxTimestamp, nil
		}
	}
	return -1, -1, nil
}

func (p *Partition) MaxTimestamp(context.Context) (int64, int64, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	offset, ts := int64(-1), int64(-1)
	for _, b := range p.batches {
		if b.maxTimestamp > ts {
			offset, ts = b.lastOffset, b.maxTimestamp
		}
	}
	return offset, ts, nil
}
