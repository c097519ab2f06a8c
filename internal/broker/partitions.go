package broker

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"quire/internal/bookie/wire"
	"quire/internal/catalog"
	"quire/internal/mlog/mlogclient"
	"quire/internal/partition"
)

// loaded is a partition being loaded or served by this broker.
type loaded struct {
	name   string // partition name (persistent://…-partition-N)
	bundle catalog.Bundle
	ready  chan struct{} // closed when load finished (p or err set)
	p      *partition.Partition
	ml     *mlogclient.ManagedLedger
	err    error
	// ackQuorum is the namespace policy's Qa when the partition was loaded:
	// what the storage gate compares the writable bookies with.
	ackQuorum int
	// stuck: appends were answered while still waiting for full bookies;
	// the partition is reloaded once they are writable (reloadStuck).
	stuck atomic.Bool
	// topic is the Kafka topic; compacted mirrors its cleanup.policy
	// (set at load, refreshed before each compaction round), and compaction
	// is its compactor's state (compact.go).
	topic      string
	compacted  atomic.Bool
	compaction compactionState
}

func (l *loaded) partition() *partition.Partition {
	select {
	case <-l.ready:
		return l.p
	default:
		return nil
	}
}

// storageName is the managed ledger of a partition: the partition name
// qualified by the topic's id, so a topic deleted and created again never
// finds the old one's ledgers.
func storageName(partitionName string, id catalog.TopicID) string {
	return partitionName + "@" + hex.EncodeToString(id[:8])
}

// maxEntryBatch is the largest record batch one ledger entry holds: a
// bookie frame less the frame's and the entry's overhead.
const maxEntryBatch = wire.DefaultMaxFrameBytes - wire.FrameOverheadBytes - 64

// partition returns the served partition p of topic, loading it when this
// broker owns its bundle.
func (b *Broker) partition(ctx context.Context, topicName string, idx int32) (*partition.Partition, error) {
	name := catalog.PartitionName(b.cfg.Namespace, topicName, idx)
	for attempt := 0; ; attempt++ {
		b.mu.Lock()
		l := b.parts[name]
		b.mu.Unlock()
		if l == nil {
			var err error
			if l, err = b.startLoad(ctx, topicName, idx, name); err != nil {
				return nil, err
			}
		}
		select {
		case <-l.ready:
		case <-ctx.Done():
			return nil, kerr.RequestTimedOut
		}
		if l.err != nil {
			return nil, l.err
		}
		if l.p.Failed() == nil {
			return l.p, nil
		}
		// It stopped (fenced by a new owner, or its log failed): drop it and
		// load again if we still own it.
		b.drop(l)
		if attempt > 0 {
			return nil, kerr.NotLeaderForPartition
		}
	}
}

// startLoad registers a load of the partition and runs it in the
// background (so a client that gives up does not abort it).
func (b *Broker) startLoad(ctx context.Context, topicName string, idx int32, name string) (*loaded, error) {
	if !b.cluster.Owns(name) {
		owner, err := b.cluster.Lookup(ctx, name)
		if err != nil {
			b.log.Warn("lookup failed", "partition", name, "err", err)
			return nil, kerr.NotLeaderForPartition
		}
		if owner.ID != b.cluster.Self().ID {
			return nil, kerr.NotLeaderForPartition
		}
	}
	bundle, err := b.cluster.BundleOf(name)
	if err != nil {
		return nil, kerr.NotLeaderForPartition
	}
	rec, err := b.admin.GetTopic(ctx, b.cfg.Namespace, topicName)
	if errors.Is(err, catalog.ErrTopicNotFound) {
		return nil, kerr.UnknownTopicOrPartition
	}
	if err != nil {
		return nil, fmt.Errorf("partition %s: %w", name, err)
	}
	if idx < 0 || idx >= rec.Partitions || isPulsarTopic(rec) {
		return nil, kerr.UnknownTopicOrPartition
	}
	if rec.IsISR() {
		return nil, kerr.NotLeaderForPartition // its records are not here yet (isr.go)
	}
	b.mu.Lock()
	if l := b.parts[name]; l != nil {
		b.mu.Unlock()
		return l, nil
	}
	if b.ctx.Err() != nil {
		b.mu.Unlock()
		return nil, kerr.NotLeaderForPartition
	}
	l := &loaded{name: name, bundle: bundle, ready: make(chan struct{}), topic: topicName}
	l.compacted.Store(isCompacted(rec.Configs))
	b.parts[name] = l
	b.mu.Unlock()
	go b.load(l, rec)
	return l, nil
}

func (b *Broker) load(l *loaded, rec catalog.Topic) {
	defer close(l.ready)
	ctx, cancel := context.WithTimeout(b.ctx, b.cfg.Timeouts.LoadPartition)
	defer cancel()
	start := time.Now()
	pol, err := b.admin.GetPolicies(ctx, b.cfg.Namespace)
	if err != nil {
		l.err = fmt.Errorf("load %s: %w", l.name, err)
		b.forget(l)
		return
	}
	storage := storageName(l.name, rec.ID)
	mcfg := mlogclient.Config{
		Ledgers: b.cfg.Ledgers, Store: b.cfg.Store, Core: topicSettings(rec.Configs),
		Ensemble: pol.Persistence.Ensemble, WriteQuorum: pol.Persistence.WriteQuorum, AckQuorum: pol.Persistence.AckQuorum,
		ReadAheadBytes: b.cfg.ReadAheadBytes, ReadAheadBudget: b.readAhead, CacheBudget: b.tailCache, Logger: b.cfg.Logger,
	}
	mcfg.Core.Owner = fmt.Sprintf("broker-%d", b.cluster.Self().ID)
	mcfg.Core.MaxQueuedAppends = b.cfg.MaxQueuedAppends
	t, err := mlogclient.Open(ctx, storage, mcfg)
	if err != nil {
		b.log.Warn("load partition", "partition", l.name, "err", err)
		l.err = kerr.NotLeaderForPartition
		b.forget(l)
		return
	}
	p, err := partition.Open(ctx, partition.Config{
		Name: l.name, Log: ledgerLog{ml: t}, Store: b.cfg.Store, FloorKey: floorKey(storage), MaxBatchBytes: maxEntryBatch,
		ProducerExpiry: b.cfg.ProducerIDExpiration, Logger: b.cfg.Logger, Compacted: l.compacted.Load, Transactions: true,
		OnFail: func(err error) {
			b.failures.Add(1)
			b.log.Warn("partition failed; it is loaded again on the next request", "partition", l.name, "err", err)
			b.drop(l)
		},
	})
	if err != nil {
		b.log.Warn("load partition", "partition", l.name, "err", err)
		cctx, ccancel := context.WithTimeout(context.Background(), b.cfg.Timeouts.ClosePartition)
		t.Close(cctx)
		ccancel()
		l.err = kerr.NotLeaderForPartition
		b.forget(l)
		return
	}
	l.p, l.ml, l.ackQuorum = p, t, pol.Persistence.AckQuorum
	b.loads.Add(1)
	b.log.Info("partition loaded", "partition", l.name, "hw", p.HighWatermark(), "took", time.Since(start).Round(time.Millisecond))
	// Released while loading? Then close it now.
	if !b.cluster.Owns(l.name) {
		go b.drop(l)
	}
}

// forget removes a failed load so the next request tries again.
func (b *Broker) forget(l *loaded) {
	b.mu.Lock()
	if b.parts[l.name] == l {
		delete(b.parts, l.name)
	}
	b.mu.Unlock()
}

// drop stops serving a partition and closes it.
func (b *Broker) drop(l *loaded) {
	b.forget(l)
	<-l.ready
	if l.p != nil {
		ctx, cancel := context.WithTimeout(context.Background(), b.cfg.Timeouts.ClosePartition)
		defer cancel()
		if err := l.p.Close(ctx); err != nil {
			b.log.Debug("close partition", "partition", l.name, "err", err)
		}
	}
}

// onAcquire loads the partitions of a newly owned bundle eagerly, so that
// after a failover producers find them recovered.
func (b *Broker) onAcquire(bundle catalog.Bundle) {
	if bundle.Namespace != b.cfg.Namespace {
		return
	}
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		ctx, cancel := context.WithTimeout(b.ctx, b.cfg.Timeouts.ListBundleTopics)
		defer cancel()
		topics, err := b.admin.ListTopics(ctx, b.cfg.Namespace)
		if err != nil {
			b.log.Warn("list topics of an acquired bundle", "bundle", bundle, "err", err)
			return
		}
		sem := make(chan struct{}, 8)
		var wg sync.WaitGroup
		for _, t := range topics {
			if isPulsarTopic(t) {
				continue // loaded on use by the Pulsar front end
			}
			for i := range t.Partitions {
				name := catalog.PartitionName(b.cfg.Namespace, t.Name, i)
				if bb, err := b.cluster.BundleOf(name); err != nil || bb != bundle {
					continue
				}
				sem <- struct{}{}
				wg.Add(1)
				go func() {
					defer wg.Done()
					defer func() { <-sem }()
					if _, err := b.partition(ctx, t.Name, i); err != nil {
						b.log.Debug("eager load", "partition", name, "err", err)
					}
				}()
			}
		}
		wg.Wait()
	}()
}

// onRelease closes the partitions of a bundle this broker no longer owns.
func (b *Broker) onRelease(bundle catalog.Bundle) {
	b.releasePulsar(bundle)
	b.dropWhere(func(l *loaded) bool { return l.bundle == bundle })
}

// closeAll closes every partition (shutdown).
func (b *Broker) closeAll() {
	b.dropWhere(func(*loaded) bool { return true })
}

// dropWhere closes, in parallel, every loaded partition that match picks.
func (b *Broker) dropWhere(match func(*loaded) bool) {
	dropMatching(&b.mu, b.parts, match, b.drop)
}

// dropMatching picks, under mu, the values of m that match chooses, then
// drops them in parallel (unlocked) and waits: the partitions or Pulsar
// topics of a released bundle, or all of them at shutdown.
func dropMatching[V any](mu sync.Locker, m map[string]V, match func(V) bool, drop func(V)) {
	mu.Lock()
	var doomed []V
	for _, v := range m {
		if match(v) {
			doomed = append(doomed, v)
		}
	}
	mu.Unlock()
	var wg sync.WaitGroup
	for _, v := range doomed {
		wg.Go(func() { drop(v) })
	}
	wg.Wait()
}
