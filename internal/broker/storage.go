package broker

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"quire/internal/kafka"
)

// Produce when the bookies cannot take writes.
//
// A ledger writer whose bookies refuse adds (read-only: their disk is full)
// replaces them by an ensemble change; when no writable bookie is left to
// replace them with, it keeps the entries and retries, and a produce waited
// for its whole timeout to be told REQUEST_TIMED_OUT. The storage gate
// answers at once instead: while the bookie registry shows fewer writable
// bookies than an entry needs acknowledgements from (the namespace's ack
// quorum), a produce is refused with NOT_ENOUGH_REPLICAS — retriable, as
// Kafka answers when fewer in-sync replicas than min.insync.replicas are
// left — without appending anything, and the produces already waiting are
// answered the same the moment the gate closes (their batches stay with the
// writer, which may still write them once bookies are writable again: the
// same may-or-may-not of a timeout, which an idempotent producer's retry
// resolves). Transient trouble (a slow or restarting bookie, while enough
// others take writes) keeps the writer's retries and the produce timeout.

// DefaultStorageCheckInterval is how often the gate reads the registry.
const DefaultStorageCheckInterval = 250 * time.Millisecond

// storageGate follows how many registered bookies are writable. Every
// produced batch reads it: the state is an immutable value behind an atomic
// pointer, so reading takes no lock.
type storageGate struct {
	mu    sync.Mutex // serializes set
	state atomic.Pointer[gateState]
}

type gateState struct {
	// known: the registry was read at least once; until then, and while
	// the store cannot be read, the gate keeps what it last knew.
	known                bool
	writable, registered int
	// changed is closed when a new state replaces this one with another
	// count of writable bookies.
	changed chan struct{}
}

func newStorageGate() *storageGate {
	g := &storageGate{}
	g.state.Store(&gateState{changed: make(chan struct{})})
	return g
}

// set records a reading of the registry.
func (g *storageGate) set(writable, registered int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	old := g.state.Load()
	if old.known && old.writable == writable {
		if old.registered != registered {
			g.state.Store(&gateState{known: true, writable: writable, registered: registered, changed: old.changed})
		}
		return
	}
	g.state.Store(&gateState{known: true, writable: writable, registered: registered, changed: make(chan struct{})})
	close(old.changed)
}

// writable is the count of writable bookies last read.
func (g *storageGate) writable() int { return g.state.Load().writable }

// refusal is why a write needing ackQuorum acknowledgements cannot be taken
// now (nil when it can), and a channel closed at the next change.
func (g *storageGate) refusal(ackQuorum int) (error, <-chan struct{}) {
	st := g.state.Load()
	if !st.known || st.writable >= ackQuorum {
		return nil, st.changed
	}
	return fmt.Errorf("%d of %d registered bookies writable, an entry needs %d", st.writable, st.registered, ackQuorum), st.changed
}

// watchStorage reads the bookie registry every interval until the broker
// stops.
func (b *Broker) watchStorage(interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	var refused bool
	for {
		ctx, cancel := context.WithTimeout(b.ctx, 2*time.Second)
		cluster, err := b.cfg.Ledgers.RefreshCluster(ctx)
		cancel()
		if err == nil {
			writable := 0
			for _, bk := range cluster {
				if bk.Writable {
					writable++
				}
			}
			b.storage.set(writable, len(cluster))
			why := b.StorageRefusal()
			if (why != nil) != refused {
				refused = why != nil
				if refused {
					b.log.Warn("bookies cannot take writes: produces are refused with NOT_ENOUGH_REPLICAS until they can", "why", why)
				} else {
					b.log.Info("bookies writable again: produces accepted", "writable", writable, "registered", len(cluster))
					b.reloadStuck()
				}
			}
		}
		select {
		case <-b.ctx.Done():
			return
		case <-t.C:
		}
	}
}

// reloadStuck drops the partitions that had appends waiting when the gate
// closed, so that the next request loads them again. Their ledger writers
// may never finish those appends: every bookie of the ensemble refused
// them and none was left to replace it with, and a writer does not go back
// to a bookie it replaced. A reload recovers the ledger (the appends it
// holds were answered NOT_ENOUGH_REPLICAS, so their producers retry) and
// writes on a new ledger placed on the bookies writable now.
func (b *Broker) reloadStuck() {
	b.mu.Lock()
	var stuck []*loaded
	for _, l := range b.parts {
		if l.partition() != nil && l.stuck.Load() {
			stuck = append(stuck, l)
		}
	}
	b.mu.Unlock()
	for _, l := range stuck {
		b.log.Info("reloading a partition whose appends waited for full bookies", "partition", l.name)
		go b.drop(l)
	}
}

// minAckQuorum is the smallest ack quorum of the partitions loaded here (2
// when none is: the default policy's), for health and logs.
func (b *Broker) minAckQuorum() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	qa := 0
	for _, l := range b.parts {
		if l.partition() != nil && l.ackQuorum > 0 && (qa == 0 || l.ackQuorum < qa) {
			qa = l.ackQuorum
		}
	}
	if qa == 0 {
		qa = 2
	}
	return qa
}

// StorageRefusal says why produces are refused now (the bookies cannot take
// writes), nil while they are accepted: the broker is degraded, not down,
// as it still serves reads.
func (b *Broker) StorageRefusal() error {
	why, _ := b.storage.refusal(b.minAckQuorum())
	return why
}

// gatedPartition is a served partition whose produces go through the gate.
type gatedPartition struct {
	kafka.Partition
	gate      *storageGate
	ackQuorum int
	refused   func()
	// stuck is set when an append was answered while still waiting in the
	// partition (see reloadStuck).
	stuck *atomic.Bool
}

// LastStableOffset, AbortedTransactions and AppendMarker pass the wrapped
// partition's transactions through (kafka.TransactionalPartition,
// kafka.MarkerPartition): a marker is the coordinator's, written even while
// the gate refuses produces, so that a decided transaction can end.
func (g gatedPartition) LastStableOffset() int64 {
	if tp, ok := g.Partition.(kafka.TransactionalPartition); ok {
		return tp.LastStableOffset()
	}
	return g.Partition.HighWatermark()
}

func (g gatedPartition) AbortedTransactions(from, to int64) []kafka.AbortedTransaction {
	if tp, ok := g.Partition.(kafka.TransactionalPartition); ok {
		return tp.AbortedTransactions(from, to)
	}
	return nil
}

func (g gatedPartition) AppendMarker(ctx context.Context, pid int64, epoch int16, commit bool, coordinatorEpoch int32) <-chan kafka.AppendResult {
	if mp, ok := g.Partition.(kafka.MarkerPartition); ok {
		return mp.AppendMarker(ctx, pid, epoch, commit, coordinatorEpoch)
	}
	out := make(chan kafka.AppendResult, 1)
	out <- kafka.AppendResult{Err: kerr.UnsupportedForMessageFormat}
	return out
}

// Append refuses at once while the bookies cannot take the write, and
// answers a waiting append the moment they stop being able to.
func (g gatedPartition) Append(ctx context.Context, batch []byte) <-chan kafka.AppendResult {
	if why, _ := g.gate.refusal(g.ackQuorum); why != nil {
		g.refused()
		out := make(chan kafka.AppendResult, 1)
		out <- kafka.AppendResult{Err: kerr.NotEnoughReplicas}
		return out
	}
	inner := g.Partition.Append(ctx, batch)
	out := make(chan kafka.AppendResult, 1)
	go func() {
		for {
			why, changed := g.gate.refusal(g.ackQuorum)
			if why != nil {
				// inner is buffered: the partition never blocks on it.
				g.stuck.Store(true)
				g.refused()
				out <- kafka.AppendResult{Err: kerr.NotEnoughReplicas}
				return
			}
			select {
			case r := <-inner:
				out <- r
				return
			case <-changed:
			}
		}
	}()
	return out
}
