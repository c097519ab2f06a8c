package broker

// Kafka transactions on a broker: the transaction coordinator
// (internal/kafka/txn's Service over the metadata store) and the markers it
// writes. A transactional id is coordinated by the owner of its bundle (the
// name "__txn-<id>", as groups use "__group-<name>"); any broker may serve
// a request for any id, since the store holds the truth, but only the owner
// scans for transactions a dead coordinator left. A marker goes to the
// broker that serves its partition (this one: appended directly; another:
// WriteTxnMarkers), a group's to the group's coordinator the same way.
// Transactions are for ledger-mode topics: a partition of an ISR-mode topic
// refuses AddPartitionsToTxn.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"quire/internal/kafka"
	"quire/internal/kafka/group"
	"quire/internal/kafka/txn"
)

// txnSide is a broker's transaction coordinator and its connections to the
// other brokers, for markers.
type txnSide struct {
	svc *txn.Service
	kc  kafka.TransactionCoordinator

	mu      sync.Mutex
	clients map[string]*kgo.Client // by broker address
}

// startTxn starts the coordinator; it must run before the Kafka front end
// is made (which asks whether the Backend has one).
func (b *Broker) startTxn() {
	s := &txnSide{clients: map[string]*kgo.Client{}}
	s.svc = txn.NewService(txn.ServiceConfig{
		Store:   b.cfg.Store,
		Markers: txnMarkers{b},
		Owns:    func(id string) bool { return b.cluster.Owns(b.txnKey(id)) },
		Logger:  b.cfg.Logger,
	})
	s.kc = isrRefusing{TransactionCoordinator: s.svc.KafkaCoordinator(b.txnCoordinator), b: b}
	b.txn = s
}

func (b *Broker) closeTxn() {
	s := b.txn
	if s == nil {
		return
	}
	s.svc.Close()
	s.mu.Lock()
	defer s.mu.Unlock()
	for addr, cl := range s.clients {
		cl.Close()
		delete(s.clients, addr)
	}
}

// Transactions implements kafka.TransactionBackend.
func (b *Broker) Transactions() kafka.TransactionCoordinator {
	if b.txn == nil {
		return nil
	}
	return b.txn.kc
}

// txnKey is the name whose bundle decides a transactional id's coordinator.
func (b *Broker) txnKey(id string) string {
	return "persistent://" + b.cfg.Namespace + "/__txn-" + url.PathEscape(id)
}

// txnCoordinator is the broker that coordinates a transactional id.
func (b *Broker) txnCoordinator(ctx context.Context, id string) (kafka.Node, error) {
	lctx, cancel := context.WithTimeout(ctx, b.cfg.Timeouts.Coordinator)
	defer cancel()
	o, err := b.cluster.Lookup(lctx, b.txnKey(id))
	if err != nil {
		return kafka.Node{}, kerr.CoordinatorNotAvailable
	}
	return toKafka(o), nil
}

// isrRefusing refuses partitions of ISR-mode topics in a transaction: they
// store no markers yet.
type isrRefusing struct {
	kafka.TransactionCoordinator
	b *Broker
}

func (r isrRefusing) AddPartitions(ctx context.Context, id string, pid int64, epoch int16, parts []kafka.TransactionPartition) error {
	for _, p := range parts {
		if _, isISR, _ := r.b.isrPartition(p.Topic, p.Partition); isISR {
			return kerr.InvalidTxnState
		}
	}
	return r.TransactionCoordinator.AddPartitions(ctx, id, pid, epoch, parts)
}

// markerTimeout bounds writing one transaction's markers; what is not
// written by then is retried by the coordinator.
const markerTimeout = 10 * time.Second

// txnMarkers writes a coordinator's markers (txn.MarkerWriter).
type txnMarkers struct{ b *Broker }

func (m txnMarkers) WriteMarkers(ctx context.Context, op txn.MarkerOp) txn.MarkerResult {
	ctx, cancel := context.WithTimeout(ctx, markerTimeout)
	defer cancel()
	b := m.b
	var res txn.MarkerResult
	remote := map[int32][]txn.Partition{} // broker id → its partitions
	for _, p := range op.Partitions {
		if err := b.localMarker(ctx, op, p); err == nil {
			continue
		} else if !errors.Is(err, kerr.NotLeaderForPartition) {
			b.log.Debug("transaction marker not written", "partition", p, "err", err)
			res.FailedPartitions = append(res.FailedPartitions, p)
			continue
		}
		owner, err := b.partitionOwner(ctx, p)
		if err != nil {
			res.FailedPartitions = append(res.FailedPartitions, p)
			continue
		}
		remote[owner.ID] = append(remote[owner.ID], p)
	}
	for id, parts := range remote {
		res.FailedPartitions = append(res.FailedPartitions, b.remoteMarkers(ctx, id, op, parts, nil)...)
	}
	for _, g := range op.Groups {
		if gm, ok := b.groups.(*group.Coordinator); ok {
			if err := gm.CompleteTxn(ctx, g, op.ProducerID, op.Commit); err == nil {
				continue
			} else if err != kerr.NotCoordinator {
				res.FailedGroups = append(res.FailedGroups, g)
				continue
			}
		}
		node, err := b.Coordinator(ctx, g)
		if err != nil {
			res.FailedGroups = append(res.FailedGroups, g)
			continue
		}
		if failed := b.remoteMarkers(ctx, node.ID, op, nil, []string{g}); len(failed) > 0 {
			res.FailedGroups = append(res.FailedGroups, g)
		}
	}
	return res
}

// localMarker appends a marker to a partition this broker serves;
// kerr.NotLeaderForPartition when it serves it not.
func (b *Broker) localMarker(ctx context.Context, op txn.MarkerOp, p txn.Partition) error {
	part, err := b.Partition(ctx, p.Topic, p.Partition)
	if err != nil {
		return err
	}
	mp, ok := part.(kafka.MarkerPartition)
	if !ok {
		return kerr.UnsupportedForMessageFormat
	}
	select {
	case r := <-mp.AppendMarker(ctx, op.ProducerID, op.ProducerEpoch, op.Commit, op.Decision):
		return r.Err
	case <-ctx.Done():
		return kerr.RequestTimedOut
	}
}

// partitionOwner is the broker serving a partition.
func (b *Broker) partitionOwner(ctx context.Context, p txn.Partition) (kafka.Node, error) {
	infos, err := b.Topics(ctx, []string{p.Topic}, false)
	leader := int32(-1)
	if err == nil && len(infos) == 1 {
		for _, pi := range infos[0].Partitions {
			if pi.Partition == p.Partition {
				leader = pi.Leader
			}
		}
	}
	if leader < 0 {
		return kafka.Node{}, fmt.Errorf("no owner of %s-%d known", p.Topic, p.Partition)
	}
	nodes, _ := b.Brokers(ctx)
	for _, n := range nodes {
		if n.ID == leader {
			return n, nil
		}
	}
	return kafka.Node{}, fmt.Errorf("broker %d of %s-%d not live", leader, p.Topic, p.Partition)
}

// remoteMarkers sends a WriteTxnMarkers to broker id for parts and groups,
// returning the partitions (or, for groups, a placeholder per group) that
// failed.
func (b *Broker) remoteMarkers(ctx context.Context, id int32, op txn.MarkerOp, parts []txn.Partition, groups []string) []txn.Partition {
	failAll := func() []txn.Partition {
		out := append([]txn.Partition(nil), parts...)
		for _, g := range groups {
			out = append(out, txn.Partition{Topic: kafka.GroupMarkerTopic + g})
		}
		return out
	}
	cl, err := b.txnClient(ctx, id)
	if err != nil {
		return failAll()
	}
	req := kmsg.NewPtrWriteTxnMarkersRequest()
	m := kmsg.NewWriteTxnMarkersRequestMarker()
	m.ProducerID, m.ProducerEpoch, m.Committed, m.CoordinatorEpoch = op.ProducerID, op.ProducerEpoch, op.Commit, op.Decision
	byTopic := map[string][]int32{}
	var order []string
	for _, p := range parts {
		if _, ok := byTopic[p.Topic]; !ok {
			order = append(order, p.Topic)
		}
		byTopic[p.Topic] = append(byTopic[p.Topic], p.Partition)
	}
	for _, g := range groups {
		order = append(order, kafka.GroupMarkerTopic+g)
		byTopic[kafka.GroupMarkerTopic+g] = []int32{0}
	}
	for _, t := range order {
		mt := kmsg.NewWriteTxnMarkersRequestMarkerTopic()
		mt.Topic, mt.Partitions = t, byTopic[t]
		m.Topics = append(m.Topics, mt)
	}
	req.Markers = append(req.Markers, m)
	seeds := cl.SeedBrokers()
	if len(seeds) == 0 {
		return failAll()
	}
	raw, err := seeds[0].Request(ctx, req) // to that broker, not any other the client knows
	resp, ok := raw.(*kmsg.WriteTxnMarkersResponse)
	if err != nil || !ok || len(resp.Markers) != 1 {
		return failAll()
	}
	var failed []txn.Partition
	for _, rt := range resp.Markers[0].Topics {
		for _, rp := range rt.Partitions {
			if rp.ErrorCode != 0 {
				failed = append(failed, txn.Partition{Topic: rt.Topic, Partition: rp.Partition})
			}
		}
	}
	return failed
}

// txnClient is a client of broker id's Kafka listener.
func (b *Broker) txnClient(ctx context.Context, id int32) (*kgo.Client, error) {
	nodes, _ := b.Brokers(ctx)
	addr := ""
	for _, n := range nodes {
		if n.ID == id {
			addr = net.JoinHostPort(n.Host, strconv.Itoa(int(n.Port)))
		}
	}
	if addr == "" {
		return nil, fmt.Errorf("broker %d not live", id)
	}
	s := b.txn
	s.mu.Lock()
	defer s.mu.Unlock()
	if cl := s.clients[addr]; cl != nil {
		return cl, nil
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr))
	if err != nil {
		return nil, err
	}
	s.clients[addr] = cl
	return cl, nil
}
