package isrnode

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"quire/internal/isr"
	"quire/internal/isr/disklog"
	"quire/internal/isr/isrctl"
	"quire/internal/kafka"
	"quire/internal/kafka/kafkatest"
	"quire/internal/meta"
	"quire/internal/testutil"
)

// The tests run three brokers in one process: each a Manager over its own
// directory and metadata client, behind a real Kafka front end
// (internal/kafka over the in-memory test backend, with replica fetches
// routed to the Manager) on a loopback port; one isrctl controller; the
// partition "t-0" with replicas 1, 2, 3 and min.insync.replicas 2.

const partition = "t-0"

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// testBackend is the test front end's backend: the in-memory one, with
// replica fetches going to the broker's Manager, and a switch that cuts
// replication from this broker (its fetches answer an error).
type testBackend struct {
	*kafkatest.Backend
	m       *Manager
	blocked atomic.Bool
	// blockedReplica, when ≥ 0, is a follower whose fetches alone fail.
	blockedReplica atomic.Int32
	inflight       atomic.Int64
	// version and replicaEpoch are the last replica Fetch's version and
	// replica_state epoch.
	version      atomic.Int32
	replicaEpoch atomic.Int64
	// mostPartitions is the most partitions one replica Fetch carried.
	mostPartitions atomic.Int32
}

func (b *testBackend) HandleReplicaFetch(ctx context.Context, req *kmsg.FetchRequest) *kmsg.FetchResponse {
	b.inflight.Add(1)
	defer b.inflight.Add(-1)
	b.version.Store(int32(req.Version))
	b.replicaEpoch.Store(req.ReplicaState.Epoch)
	n := int32(0)
	for _, t := range req.Topics {
		n += int32(len(t.Partitions))
	}
	for {
		most := b.mostPartitions.Load()
		if n <= most || b.mostPartitions.CompareAndSwap(most, n) {
			break
		}
	}
	replica := req.ReplicaID
	if req.Version >= 15 {
		replica = req.ReplicaState.ID
	}
	if b.blocked.Load() || b.blockedReplica.Load() == replica {
		resp := req.ResponseKind().(*kmsg.FetchResponse)
		resp.ErrorCode = kerr.UnknownServerError.Code
		return resp
	}
	return b.m.HandleReplicaFetch(ctx, req)
}

var (
	_ kafka.ReplicaFetchBackend = (*testBackend)(nil)
	_ Controller                = (*isrctl.Service)(nil)
)

type node struct {
	id      isr.BrokerID
	m       *Manager
	store   *meta.MemClient
	backend *testBackend
	server  *kafka.Server
	served  chan error
}

type cluster struct {
	t     *testing.T
	ctx   context.Context
	srv   *meta.MemServer
	ctl   *isrctl.Service
	dir   string
	meta  *meta.MemClient // the test's own view of the store
	tweak func(*Config)

	mu    sync.Mutex
	addrs map[isr.BrokerID]string
	nodes map[isr.BrokerID]*node
}

func newCluster(t *testing.T, ids ...isr.BrokerID) *cluster {
	return newClusterWith(t, nil, ids...)
}

// newClusterWith is newCluster with every manager's Config changed by
// tweak.
func newClusterWith(t *testing.T, tweak func(*Config), ids ...isr.BrokerID) *cluster {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	srv := meta.NewMemServer(meta.MemConfig{})
	c := &cluster{t: t, ctx: ctx, srv: srv, dir: t.TempDir(), meta: srv.NewClient(), tweak: tweak,
		addrs: map[isr.BrokerID]string{}, nodes: map[isr.BrokerID]*node{}}
	c.ctl = isrctl.Start(isrctl.Config{Store: srv.NewClient(), Name: "controller", SessionTTL: 2 * time.Second,
		Tick: 10 * time.Millisecond, Logger: quiet(),
		Controller: isr.ControllerConfig{MinISR: 2, DisableAutoRebalance: true}})
	t.Cleanup(func() {
		for _, id := range c.running() {
			c.stop(id)
		}
		c.ctl.Close()
	})
	testutil.WaitFor(t, "the controller to be elected", func() bool { ok, _ := c.ctl.Active(); return ok })
	for _, id := range ids {
		c.start(id)
	}
	testutil.WaitFor(t, "the controller to see every broker", func() bool {
		// A partition created before the controller saw a registration
		// would leave that broker out of the ISR.
		err := c.ctl.CreatePartition(ctx, partition, ids)
		return err == nil
	})
	testutil.WaitFor(t, "every replica to take its role", func() bool {
		for _, id := range ids {
			st, err := c.node(id).m.Status(partition)
			if err != nil || st.Role == isr.RoleNone || len(st.ISR) != len(ids) {
				return false
			}
		}
		return true
	})
	return c
}

func (c *cluster) resolve(id isr.BrokerID) (string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	addr, ok := c.addrs[id]
	if !ok {
		return "", fmt.Errorf("broker %d: no address", id)
	}
	return addr, nil
}

func (c *cluster) node(id isr.BrokerID) *node {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.nodes[id]
	if n == nil {
		c.t.Fatalf("broker %d is not running", id)
	}
	return n
}

func (c *cluster) running() []isr.BrokerID {
	c.mu.Lock()
	defer c.mu.Unlock()
	var ids []isr.BrokerID
	for id := range c.nodes {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// start runs broker id (again: its directory is kept across restarts) on a
// new loopback port.
func (c *cluster) start(id isr.BrokerID) *node {
	t := c.t
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	host, portStr, _ := net.SplitHostPort(ln.Addr().String())
	port, _ := strconv.Atoi(portStr)
	n := &node{id: id, store: c.srv.NewClient(), served: make(chan error, 1),
		backend: &testBackend{Backend: kafkatest.New(kafka.Node{ID: int32(id), Host: host, Port: int32(port)})}}
	n.backend.blockedReplica.Store(-1)
	cfg := Config{
		Broker: id, Store: n.store, Controller: c.ctl, Resolve: c.resolve,
		Dir: filepath.Join(c.dir, fmt.Sprint(id)), SessionTTL: 2 * time.Second, Tick: 10 * time.Millisecond,
		FetchMaxWait: 200 * time.Millisecond, FetchBackoff: 100 * time.Millisecond,
		// Lag never shrinks the ISR unless a test says so: a broker
		// leaves it when its session ends.
		Replica: isr.ReplicaConfig{MinISR: 2, LagTimeMax: time.Minute},
		Logger:  quiet(),
	}
	if c.tweak != nil {
		c.tweak(&cfg)
	}
	n.m, err = Start(cfg)
	if err != nil {
		ln.Close()
		t.Fatal(err)
	}
	n.backend.m = n.m
	n.server, err = kafka.New(kafka.Config{Backend: n.backend, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	go func() { n.served <- n.server.Serve(ln) }()
	c.mu.Lock()
	c.addrs[id], c.nodes[id] = ln.Addr().String(), n
	c.mu.Unlock()
	return n
}

// stop closes broker id's manager (its session ends: the controller moves
// leadership away and shrinks the ISR) and its listener.
func (c *cluster) stop(id isr.BrokerID) {
	n := c.node(id)
	if err := n.m.Close(); err != nil {
		c.t.Errorf("close broker %d: %v", id, err)
	}
	n.server.Close()
	if err := <-n.served; !errors.Is(err, kafka.ErrServerClosed) {
		c.t.Errorf("broker %d: Serve returned %v", id, err)
	}
	n.store.Close()
	c.mu.Lock()
	delete(c.nodes, id)
	c.mu.Unlock()
}

// record is the partition's record in the store.
func (c *cluster) record() isr.PartitionState {
	kv, err := c.meta.Get(c.ctx, isr.PartitionKey(partition))
	if err != nil {
		c.t.Fatal(err)
	}
	st, err := isr.UnmarshalState(kv.Value)
	if err != nil {
		c.t.Fatal(err)
	}
	return st
}

// waitLeader waits until a running broker leads the partition under the
// store's record, and returns it.
func (c *cluster) waitLeader(what string) *node {
	return c.waitLeaderNot(isr.NoLeader, what)
}

// waitLeaderNot is waitLeader for a leader other than old.
func (c *cluster) waitLeaderNot(old isr.BrokerID, what string) *node {
	var leader *node
	testutil.WaitFor(c.t, what, func() bool {
		rec := c.record()
		if rec.Leader == old {
			return false
		}
		c.mu.Lock()
		n := c.nodes[rec.Leader]
		c.mu.Unlock()
		if n == nil {
			return false
		}
		st, err := n.m.Status(partition)
		if err != nil || st.Role != isr.RoleLeader || st.LeaderEpoch != rec.LeaderEpoch {
			return false
		}
		leader = n
		return true
	})
	return leader
}

func (c *cluster) status(id isr.BrokerID) Status {
	st, err := c.node(id).m.Status(partition)
	if err != nil {
		c.t.Fatal(err)
	}
	return st
}

// readAll reads the replica's records up to its HW.
func (c *cluster) readAll(id isr.BrokerID) []string {
	var out []string
	for from := int64(0); ; {
		batches, st, err := c.node(id).m.Read(c.ctx, partition, from, 100)
		if err != nil {
			c.t.Fatalf("broker %d: %v", id, err)
		}
		for _, b := range batches {
			if b.BaseOffset != from {
				c.t.Fatalf("broker %d: batch at %d, want %d", id, b.BaseOffset, from)
			}
			values, err := batchValues(b)
			if err != nil {
				c.t.Fatalf("broker %d: batch at %d: %v", id, b.BaseOffset, err)
			}
			for _, r := range values {
				out = append(out, string(r))
			}
			from = b.NextOffset()
		}
		if from >= st.HighWatermark || len(batches) == 0 {
			return out
		}
	}
}

// append produces one batch of n records named prefix-i on broker id.
func (c *cluster) append(id isr.BrokerID, acks int8, prefix string, n int) (int64, []string, error) {
	return c.appendTo(partition, id, acks, prefix, n)
}

func (c *cluster) appendTo(name string, id isr.BrokerID, acks int8, prefix string, n int) (int64, []string, error) {
	var records [][]byte
	var names []string
	for i := range n {
		s := fmt.Sprintf("%s-%d", prefix, i)
		records = append(records, []byte(s))
		names = append(names, s)
	}
	ctx, cancel := context.WithTimeout(c.ctx, 10*time.Second)
	defer cancel()
	base, err := c.node(id).m.Append(ctx, name, records, acks)
	return base, names, err
}

// waitInSync waits until every running replica has the leader's log up to
// its end and its HW, and the leader's ISR holds all of them.
func (c *cluster) waitInSync(leader isr.BrokerID) {
	testutil.WaitFor(c.t, "every replica in sync with the leader", func() bool {
		lst := c.status(leader)
		if lst.HighWatermark != lst.LogEndOffset {
			return false
		}
		for _, id := range c.running() {
			st, err := c.node(id).m.Status(partition)
			if err != nil { // a broker just started: not opened yet
				return false
			}
			if !slices.Contains(lst.ISR, id) || st.LogEndOffset != lst.LogEndOffset || st.HighWatermark != lst.HighWatermark {
				return false
			}
		}
		return true
	})
}

func (c *cluster) followers(leader isr.BrokerID) []isr.BrokerID {
	return slices.DeleteFunc(c.running(), func(id isr.BrokerID) bool { return id == leader })
}

// TestAcksAllReplicatedToTheISR: every acks=all append is acknowledged only
// once each ISR member's log holds it, and ends up readable, identically,
// on every replica; with the followers gone the ISR falls below
// min.insync.replicas and acks=all is refused before appending.
func TestAcksAllReplicatedToTheISR(t *testing.T) {
	c := newCluster(t, 1, 2, 3)
	leader := c.waitLeader("a leader").id
	var want []string
	for i := range 20 {
		base, names, err := c.append(leader, isr.AcksAll, fmt.Sprintf("r%d", i), 2)
		if err != nil {
			t.Fatalf("append %d: %v", i, err)
		}
		if base != int64(2*i) {
			t.Fatalf("append %d at %d, want %d", i, base, 2*i)
		}
		want = append(want, names...)
		// Acknowledged: each follower's log already has it (its LEO
		// shows before the fetch that told the leader leaves it).
		for _, id := range c.followers(leader) {
			if st := c.status(id); st.LogEndOffset < base+2 {
				t.Fatalf("append %d acknowledged while broker %d's log ends at %d", i, id, st.LogEndOffset)
			}
		}
	}
	c.waitInSync(leader)
	for _, id := range c.running() {
		if got := c.readAll(id); !slices.Equal(got, want) {
			t.Fatalf("broker %d reads %v, want %v", id, got, want)
		}
	}
	// A second partition led by the same broker: each follower's one
	// fetcher for that leader carries both partitions in one Fetch.
	second := "t-1"
	if err := c.ctl.CreatePartition(c.ctx, second, append([]isr.BrokerID{leader}, c.followers(leader)...)); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, "the second partition's leader", func() bool {
		st, err := c.node(leader).m.Status(second)
		return err == nil && st.Role == isr.RoleLeader
	})
	for i := range 5 {
		if _, _, err := c.appendTo(second, leader, isr.AcksAll, fmt.Sprintf("second%d", i), 1); err != nil {
			t.Fatal(err)
		}
	}
	testutil.WaitFor(t, "a Fetch carrying both partitions", func() bool { return c.node(leader).backend.mostPartitions.Load() >= 2 })
	// The followers fetched with Kafka's newest Fetch, their broker epoch
	// in replica_state (KIP-903).
	if v, epoch := c.node(leader).backend.version.Load(), c.node(leader).backend.replicaEpoch.Load(); v < 15 || epoch <= 0 {
		t.Fatalf("replica fetches at version %d with broker epoch %d: want v15+ with the follower's epoch", v, epoch)
	}

	for _, id := range c.followers(leader) {
		c.stop(id)
	}
	testutil.WaitFor(t, "the ISR to shrink to the leader", func() bool { return len(c.status(leader).ISR) == 1 })
	if _, _, err := c.append(leader, isr.AcksAll, "refused", 1); !errors.Is(err, isr.ErrNotEnoughReplicas) {
		t.Fatalf("acks=all below min.insync.replicas: %v, want NOT_ENOUGH_REPLICAS", err)
	}
	if _, _, err := c.append(leader, isr.AcksLeader, "acks1", 1); err != nil {
		t.Fatalf("acks=1 below min.insync.replicas: %v", err)
	}
}

// TestFollowerRestartCatchesUp: a follower stopped leaves the ISR (its
// session ended), the partition keeps taking acks=all writes on the other
// two, and the follower, started again on its old log, catches up by
// fetching and rejoins the ISR.
func TestFollowerRestartCatchesUp(t *testing.T) {
	c := newCluster(t, 1, 2, 3)
	leader := c.waitLeader("a leader").id
	var want []string
	for i := range 5 {
		_, names, err := c.append(leader, isr.AcksAll, fmt.Sprintf("before%d", i), 3)
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, names...)
	}
	follower := c.followers(leader)[0]
	c.waitInSync(leader)
	c.stop(follower)
	testutil.WaitFor(t, "the stopped follower to leave the ISR", func() bool {
		return !slices.Contains(c.status(leader).ISR, follower)
	})
	for i := range 5 {
		_, names, err := c.append(leader, isr.AcksAll, fmt.Sprintf("while-down%d", i), 3)
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, names...)
	}
	c.start(follower)
	c.waitInSync(leader)
	if got := c.readAll(follower); !slices.Equal(got, want) {
		t.Fatalf("the restarted follower reads %v, want %v", got, want)
	}
	if rec := c.record(); !rec.InISR(follower) {
		t.Fatalf("record %s: the restarted follower is not back in the ISR", rec)
	}
}

// blockReplication makes broker id's Fetch answers fail, and waits until no
// fetch it was holding can still return records.
func (c *cluster) blockReplication(id isr.BrokerID) {
	n := c.node(id)
	n.backend.blocked.Store(true)
	testutil.WaitFor(c.t, "the leader's held fetches to end", func() bool { return n.backend.inflight.Load() == 0 })
}

// TestLeaderKilledNoAcknowledgedLoss: the leader is killed (its manager
// closed) holding a record no follower has; the controller elects a new
// leader from the ISR, which has every acknowledged record and takes new
// ones; the old leader, back, finds by DivergingEpoch that its log diverged,
// truncates, and ends with the new leader's log.
func TestLeaderKilledNoAcknowledgedLoss(t *testing.T) {
	c := newCluster(t, 1, 2, 3)
	old := c.waitLeader("a leader").id
	firstEpoch := c.record().LeaderEpoch
	var acked []string
	for i := range 10 {
		_, names, err := c.append(old, isr.AcksAll, fmt.Sprintf("acked%d", i), 2)
		if err != nil {
			t.Fatal(err)
		}
		acked = append(acked, names...)
	}
	c.waitInSync(old)
	c.blockReplication(old)
	ctx, cancel := context.WithTimeout(c.ctx, 300*time.Millisecond)
	_, err := c.node(old).m.Append(ctx, partition, [][]byte{[]byte("never-acked")}, isr.AcksAll)
	cancel()
	if err == nil {
		t.Fatal("an acks=all append was acknowledged with replication cut")
	}
	if st := c.status(old); st.LogEndOffset != int64(len(acked))+1 {
		t.Fatalf("the old leader's log ends at %d, want %d (the unacknowledged record on it alone)", st.LogEndOffset, len(acked)+1)
	}

	c.stop(old)
	leader := c.waitLeader("a new leader from the ISR").id
	if rec := c.record(); leader == old || rec.LeaderEpoch <= firstEpoch {
		t.Fatalf("after the kill: record %s", rec)
	}
	testutil.WaitFor(t, "the new leader's HW to reach its log end", func() bool {
		st := c.status(leader)
		return st.HighWatermark == st.LogEndOffset
	})
	if got := c.readAll(leader); !slices.Equal(got, acked) {
		t.Fatalf("the new leader reads %v, want every acknowledged record %v", got, acked)
	}
	want := slices.Clone(acked)
	for i := range 3 {
		_, names, err := c.append(leader, isr.AcksAll, fmt.Sprintf("after%d", i), 2)
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, names...)
	}

	c.start(old)
	c.waitInSync(leader)
	if st := c.status(old); st.Truncations == 0 {
		t.Fatalf("the old leader caught up without truncating: %+v", st)
	}
	for _, id := range c.running() {
		if got := c.readAll(id); !slices.Equal(got, want) {
			t.Fatalf("broker %d reads %v, want %v", id, got, want)
		}
	}
}

// TestAcks1LeaderLossLosesTheUnreplicatedSuffix: with acks=1 the leader
// acknowledges on its own append; killed before any follower fetched, it
// takes exactly the records it had not replicated with it: the test
// measures that suffix before the kill and finds exactly it missing after
// the failover, and every earlier record present.
func TestAcks1LeaderLossLosesTheUnreplicatedSuffix(t *testing.T) {
	c := newCluster(t, 1, 2, 3)
	old := c.waitLeader("a leader").id
	var acked []string
	for i := range 4 {
		_, names, err := c.append(old, isr.AcksAll, fmt.Sprintf("all%d", i), 2)
		if err != nil {
			t.Fatal(err)
		}
		acked = append(acked, names...)
	}
	c.waitInSync(old)
	c.blockReplication(old)
	const suffixBatches, perBatch = 5, 3
	ackedOffsets := map[string]int64{}
	for i, name := range acked {
		ackedOffsets[name] = int64(i)
	}
	for i := range suffixBatches {
		base, names, err := c.append(old, isr.AcksLeader, fmt.Sprintf("one%d", i), perBatch)
		if err != nil {
			t.Fatalf("acks=1 append: %v", err)
		}
		for j, name := range names {
			ackedOffsets[name] = base + int64(j)
		}
		acked = append(acked, names...)
	}
	leaderEnd := c.status(old).LogEndOffset
	var replicatedEnd int64
	for _, id := range c.followers(old) {
		replicatedEnd = max(replicatedEnd, c.status(id).LogEndOffset)
	}
	unreplicated := leaderEnd - replicatedEnd
	if unreplicated != suffixBatches*perBatch {
		t.Fatalf("measured %d unreplicated records, want the %d acks=1 records appended with replication cut",
			unreplicated, suffixBatches*perBatch)
	}

	c.stop(old)
	leader := c.waitLeader("a new leader from the ISR").id
	testutil.WaitFor(t, "the new leader's HW to reach its log end", func() bool {
		st := c.status(leader)
		return st.HighWatermark == st.LogEndOffset
	})
	present := map[string]bool{}
	for _, name := range c.readAll(leader) {
		present[name] = true
	}
	var lost int64
	for _, name := range acked {
		if present[name] {
			continue
		}
		lost++
		if ackedOffsets[name] < replicatedEnd {
			t.Fatalf("record %s at %d lost, below what was replicated (%d)", name, ackedOffsets[name], replicatedEnd)
		}
	}
	if lost != unreplicated {
		t.Fatalf("lost %d acknowledged records, measured %d unreplicated before the kill", lost, unreplicated)
	}
	t.Logf("acks=1: %d acknowledged records lost with the leader, exactly its unreplicated suffix", lost)
}

// TestReplicaFetchRequests: the leader's Fetch handler answers a follower
// asking by topic name (v12) and by topic id (v13+, its broker epoch in
// replica_state from v15); a stale leader epoch gets FENCED_LEADER_EPOCH, a
// newer one UNKNOWN_LEADER_EPOCH, an unknown topic id UNKNOWN_TOPIC_ID, and
// a last fetched epoch the leader's log does not have gets the diverging
// epoch from its leader-epoch cache.
func TestReplicaFetchRequests(t *testing.T) {
	c := newCluster(t, 1, 2, 3)
	// A failover first, so that there is an older leader epoch to be stale
	// with (a new partition's first epoch is 0; -1 is "none").
	first := c.waitLeader("a leader").id
	c.stop(first)
	leader := c.waitLeader("a second leader")
	c.start(first)
	if _, _, err := c.append(leader.id, isr.AcksAll, "r", 4); err != nil {
		t.Fatal(err)
	}
	c.waitInSync(leader.id)
	epoch := c.record().LeaderEpoch
	if epoch < 1 {
		t.Fatalf("leader epoch %d after a failover", epoch)
	}
	follower := c.followers(leader.id)[0]
	fetch := func(version int16, mutate func(*kmsg.FetchRequest, *kmsg.FetchRequestTopicPartition)) kmsg.FetchResponseTopicPartition {
		t.Helper()
		req := kmsg.NewPtrFetchRequest()
		req.SetVersion(version)
		req.ReplicaID = int32(follower)
		if version >= 15 {
			req.ReplicaState.ID, req.ReplicaState.Epoch = int32(follower), c.node(follower).m.BrokerEpoch()
		}
		topic := kmsg.NewFetchRequestTopic()
		topic.Topic, topic.TopicID = "t", DefaultTopicID("t")
		p := kmsg.NewFetchRequestTopicPartition()
		p.Partition, p.CurrentLeaderEpoch, p.FetchOffset, p.LastFetchedEpoch = 0, epoch, 4, epoch
		topic.Partitions = append(topic.Partitions, p)
		req.Topics = append(req.Topics, topic)
		mutate(req, &req.Topics[0].Partitions[0])
		resp := leader.m.HandleReplicaFetch(c.ctx, req)
		if resp.GetVersion() != version || len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
			t.Fatalf("v%d: response %+v", version, resp)
		}
		return resp.Topics[0].Partitions[0]
	}
	none := func(*kmsg.FetchRequest, *kmsg.FetchRequestTopicPartition) {}
	for _, v := range []int16{12, 13, 15, 18} {
		if rp := fetch(v, none); rp.ErrorCode != 0 || rp.HighWatermark != 4 || rp.DivergingEpoch.EndOffset != -1 {
			t.Errorf("v%d in-sync fetch: error %d, HW %d, diverging %+v", v, rp.ErrorCode, rp.HighWatermark, rp.DivergingEpoch)
		}
		if rp := fetch(v, func(_ *kmsg.FetchRequest, p *kmsg.FetchRequestTopicPartition) { p.FetchOffset = 1 }); rp.ErrorCode != 0 {
			t.Errorf("v%d fetch from 1: error %d", v, rp.ErrorCode)
		} else if got, err := decodeBatches(rp.RecordBatches); err != nil || len(got) == 0 || got[0].BaseOffset != 0 || got[0].Count != 4 {
			// The whole batch holding offset 1, as Kafka serves it.
			t.Errorf("v%d fetch from 1: %v, %+v", v, err, got)
		}
	}
	for _, tc := range []struct {
		name   string
		mutate func(*kmsg.FetchRequest, *kmsg.FetchRequestTopicPartition)
		code   int16
	}{
		{"stale leader epoch", func(_ *kmsg.FetchRequest, p *kmsg.FetchRequestTopicPartition) { p.CurrentLeaderEpoch = epoch - 1 }, kerr.FencedLeaderEpoch.Code},
		{"newer leader epoch", func(_ *kmsg.FetchRequest, p *kmsg.FetchRequestTopicPartition) { p.CurrentLeaderEpoch = epoch + 1 }, kerr.UnknownLeaderEpoch.Code},
		{"unknown topic id", func(r *kmsg.FetchRequest, _ *kmsg.FetchRequestTopicPartition) {
			r.Topics[0].TopicID = DefaultTopicID("no-such-topic")
		}, kerr.UnknownTopicID.Code},
	} {
		if rp := fetch(18, tc.mutate); rp.ErrorCode != tc.code {
			t.Errorf("%s: error %d, want %d", tc.name, rp.ErrorCode, tc.code)
		}
	}
	// A follower whose last batch has an epoch the leader never had: the
	// leader's latest epoch ≤ it ends at the LEO, 4.
	rp := fetch(18, func(_ *kmsg.FetchRequest, p *kmsg.FetchRequestTopicPartition) {
		p.LastFetchedEpoch, p.FetchOffset = epoch+3, 6
	})
	if rp.ErrorCode != 0 || rp.DivergingEpoch.Epoch != epoch || rp.DivergingEpoch.EndOffset != 4 {
		t.Errorf("diverging fetch: error %d, diverging %+v, want epoch %d ending at 4", rp.ErrorCode, rp.DivergingEpoch, epoch)
	}
}

// TestLaggingFollowerShrunkAndExpanded: a follower that is alive (its
// session holds) but cannot fetch is shrunk out of the ISR by the leader's
// proposal once it lags past replica.lag.time.max.ms, the controller
// writing it by CAS; acks=all goes on with the other two; once it can fetch
// again it catches up and the leader proposes it back.
func TestLaggingFollowerShrunkAndExpanded(t *testing.T) {
	c := newClusterWith(t, func(cfg *Config) { cfg.Replica.LagTimeMax = 300 * time.Millisecond }, 1, 2, 3)
	leader := c.waitLeader("a leader")
	if _, _, err := c.append(leader.id, isr.AcksAll, "before", 3); err != nil {
		t.Fatal(err)
	}
	lagging := c.followers(leader.id)[0]
	before := c.record()
	leader.backend.blockedReplica.Store(int32(lagging))
	// A follower at the leader's log end is caught up however long ago it
	// fetched: it lags once the leader has more.
	if _, _, err := c.append(leader.id, isr.AcksLeader, "while-blocked", 1); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, "the leader to shrink the lagging follower out", func() bool {
		rec := c.record()
		return !rec.InISR(lagging) && len(rec.ISR) == 2
	})
	if rec := c.record(); rec.LeaderEpoch != before.LeaderEpoch || rec.PartitionEpoch <= before.PartitionEpoch {
		t.Fatalf("the shrink wrote %s over %s: want the same leader epoch, a newer partition epoch", rec, before)
	}
	for i := range 3 {
		if _, _, err := c.append(leader.id, isr.AcksAll, fmt.Sprintf("shrunk%d", i), 2); err != nil {
			t.Fatalf("acks=all with an ISR of 2: %v", err)
		}
	}
	leader.backend.blockedReplica.Store(-1)
	c.waitInSync(leader.id)
	if rec := c.record(); !rec.InISR(lagging) {
		t.Fatalf("record %s: the follower did not rejoin", rec)
	}
}

// TestLeaderKilledUnderLoad: a producer appends acks=all batches without
// pause to whichever broker leads, retrying elsewhere when refused; the
// leader is killed and later started again. Every acknowledged record is
// on every replica at the end, at the offset it was acknowledged with.
func TestLeaderKilledUnderLoad(t *testing.T) {
	c := newCluster(t, 1, 2, 3)
	type ack struct {
		offset int64
		record string
	}
	var (
		mu    sync.Mutex
		acked []ack
	)
	stop := make(chan struct{})
	produced := make(chan struct{})
	go func() {
		defer close(produced)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			c.mu.Lock()
			nodes := make([]*node, 0, len(c.nodes))
			for _, n := range c.nodes {
				nodes = append(nodes, n)
			}
			c.mu.Unlock()
			name := fmt.Sprintf("load%d", i)
			for _, n := range nodes {
				ctx, cancel := context.WithTimeout(c.ctx, 2*time.Second)
				base, err := n.m.Append(ctx, partition, [][]byte{[]byte(name)}, isr.AcksAll)
				cancel()
				if err == nil {
					mu.Lock()
					acked = append(acked, ack{base, name})
					mu.Unlock()
					break
				}
			}
		}
	}()
	count := func() int { mu.Lock(); defer mu.Unlock(); return len(acked) }
	testutil.WaitFor(t, "acknowledged records before the kill", func() bool { return count() >= 50 })
	old := c.waitLeader("the leader").id
	c.stop(old)
	atKill := count()
	testutil.WaitFor(t, "acknowledged records after the kill", func() bool { return count() >= atKill+50 })
	c.start(old)
	atRestart := count()
	testutil.WaitFor(t, "acknowledged records after the restart", func() bool { return count() >= atRestart+50 })
	close(stop)
	<-produced
	leader := c.waitLeader("the leader at the end").id
	c.waitInSync(leader)
	mu.Lock()
	defer mu.Unlock()
	for _, id := range c.running() {
		got := c.readAll(id)
		for _, a := range acked {
			if a.offset >= int64(len(got)) || got[a.offset] != a.record {
				t.Fatalf("broker %d: acknowledged %s at %d is not there (%d records)", id, a.record, a.offset, len(got))
			}
		}
	}
	t.Logf("%d acknowledged records, all on every replica", len(acked))
}

// TestZombieLeaderFencedAndTruncated: the leader is cut off from the
// metadata store (a long pause, or a partition) until its session expires.
// The controller elects another ISR member; the old leader, not knowing,
// still takes an acks=1 write, but no acks=all write is acknowledged there
// (the followers fetch from the new leader). Back in touch, it registers
// under a new broker epoch, learns the new record, truncates its divergent
// write by DivergingEpoch and rejoins the ISR; nothing acknowledged with
// acks=all is lost.
func TestZombieLeaderFencedAndTruncated(t *testing.T) {
	c := newCluster(t, 1, 2, 3)
	zombie := c.waitLeader("a leader")
	epochBefore := zombie.m.BrokerEpoch()
	var acked []string
	for i := range 5 {
		_, names, err := c.append(zombie.id, isr.AcksAll, fmt.Sprintf("acked%d", i), 2)
		if err != nil {
			t.Fatal(err)
		}
		acked = append(acked, names...)
	}
	c.waitInSync(zombie.id)

	zombie.store.Disconnect()
	leader := c.waitLeaderNot(zombie.id, "a new leader once the old one's session expired")
	if _, _, err := c.append(zombie.id, isr.AcksLeader, "zombie-write", 1); err != nil {
		t.Logf("the zombie refused acks=1 (it learned of the new leader first): %v", err)
	}
	ctx, cancel := context.WithTimeout(c.ctx, 300*time.Millisecond)
	_, err := zombie.m.Append(ctx, partition, [][]byte{[]byte("zombie-all")}, isr.AcksAll)
	cancel()
	if err == nil {
		t.Fatal("the zombie acknowledged an acks=all write")
	}
	want := slices.Clone(acked)
	for i := range 3 {
		_, names, err := c.append(leader.id, isr.AcksAll, fmt.Sprintf("new%d", i), 2)
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, names...)
	}

	zombie.store.Reconnect()
	c.waitInSync(leader.id)
	if zombie.m.BrokerEpoch() == epochBefore {
		t.Fatalf("the old leader kept broker epoch %d after its session expired", epochBefore)
	}
	if st := c.status(zombie.id); st.Role != isr.RoleFollower || st.Truncations == 0 {
		t.Fatalf("the old leader after reconnecting: %+v, want a follower that truncated", st)
	}
	for _, id := range c.running() {
		if got := c.readAll(id); !slices.Equal(got, want) {
			t.Fatalf("broker %d reads %v, want %v", id, got, want)
		}
	}
}

// TestPreferredLeaderElection: after a failover and the preferred replica's
// return, the controller moves leadership back to it (a new leader epoch);
// the replicas follow the record, the partition keeps taking acks=all
// writes, and every replica ends with the same log.
func TestPreferredLeaderElection(t *testing.T) {
	c := newCluster(t, 1, 2, 3)
	preferred := c.record().Replicas[0]
	if c.waitLeader("a leader").id != preferred {
		t.Fatalf("record %s: the first leader is not the preferred replica", c.record())
	}
	var want []string
	appendAll := func(leader isr.BrokerID, prefix string) {
		for i := range 3 {
			_, names, err := c.append(leader, isr.AcksAll, fmt.Sprintf("%s%d", prefix, i), 2)
			if err != nil {
				t.Fatal(err)
			}
			want = append(want, names...)
		}
	}
	firstEpoch := c.record().LeaderEpoch
	appendAll(preferred, "first")
	c.stop(preferred)
	other := c.waitLeaderNot(preferred, "a failover").id
	failoverEpoch := c.record().LeaderEpoch
	appendAll(other, "failover")
	c.start(preferred)
	c.waitInSync(other)
	epoch := c.record().LeaderEpoch
	if err := c.ctl.ElectPreferred(c.ctx, partition); err != nil {
		t.Fatal(err)
	}
	if got := c.waitLeaderNot(other, "leadership back on the preferred replica").id; got != preferred {
		t.Fatalf("leader %d after the preferred election, want %d", got, preferred)
	}
	if rec := c.record(); rec.LeaderEpoch <= epoch {
		t.Fatalf("record %s: the preferred election kept leader epoch %d", rec, epoch)
	}
	appendAll(preferred, "back")
	c.waitInSync(preferred)
	for _, id := range c.running() {
		if got := c.readAll(id); !slices.Equal(got, want) {
			t.Fatalf("broker %d reads %v, want %v", id, got, want)
		}
	}

	// OffsetForLeaderEpoch from the leader's epoch cache: each epoch ends
	// where the next began (6 records each), the current at the LEO.
	current := c.record().LeaderEpoch
	for _, tc := range []struct {
		epoch int32
		want  isr.EpochEndOffset
	}{
		{firstEpoch, isr.EpochEndOffset{Epoch: firstEpoch, EndOffset: 6}},
		{failoverEpoch, isr.EpochEndOffset{Epoch: failoverEpoch, EndOffset: 12}},
		{current, isr.EpochEndOffset{Epoch: current, EndOffset: 18}},
		{current + 1, isr.EpochEndOffset{Epoch: isr.NoEpoch, EndOffset: -1}},
		{isr.NoEpoch, isr.EpochEndOffset{Epoch: isr.NoEpoch, EndOffset: -1}},
	} {
		end, leaderEpoch, err := c.node(preferred).m.EndOffsetForEpoch(c.ctx, partition, tc.epoch)
		if err != nil || end != tc.want || leaderEpoch != current {
			t.Errorf("end offset for epoch %d: %+v in epoch %d (%v), want %+v in %d", tc.epoch, end, leaderEpoch, err, tc.want, current)
		}
	}
	if _, _, err := c.node(other).m.EndOffsetForEpoch(c.ctx, partition, firstEpoch); !errors.Is(err, isr.ErrNotLeaderOrFollower) {
		t.Errorf("asked of a follower: %v", err)
	}
	// Every replica's log, caught up: its size, no lag.
	for _, id := range c.running() {
		logs := c.node(id).m.ReplicaLogs()
		if len(logs) != 1 || logs[0].Partition != partition || logs[0].Size <= 0 || logs[0].Lag != 0 {
			t.Errorf("broker %d: replica logs %+v", id, logs)
		}
	}
}

// newSyncingCluster starts brokers 1, 2, 3, broker 1 syncing every append
// (flush.messages=1) through inject, and appends one record (acks=all)
// once broker 1 leads.
func newSyncingCluster(t *testing.T, inject func(errorfs.Op) error) *cluster {
	c := newClusterWith(t, func(cfg *Config) {
		if cfg.Broker != 1 {
			return
		}
		cfg.Replica.FlushMessages = 1
		cfg.FS = errorfs.Wrap(vfs.Default, errorfs.InjectorFunc(inject))
	}, 1, 2, 3)
	if leader := c.waitLeader("a leader").id; leader != 1 {
		t.Fatalf("leader %d, want 1 (the preferred replica)", leader)
	}
	if _, _, err := c.append(1, isr.AcksAll, "before", 1); err != nil {
		t.Fatal(err)
	}
	return c
}

// TestAppendsOfOneBatchShareASync: with flush.messages=1 the appends a
// leader's loop takes in one batch of work are synced once, and each is
// answered only after that sync. The leader's first sync is held until
// eight more appends wait in its loop; then those eight cost one sync, where
// a sync per append costs eight.
func TestAppendsOfOneBatchShareASync(t *testing.T) {
	var holding atomic.Bool
	var syncs atomic.Int64
	held, release := make(chan struct{}, 1), make(chan struct{})
	var once sync.Once
	unhold := func() { once.Do(func() { close(release) }) }
	t.Cleanup(unhold)
	c := newSyncingCluster(t, func(op errorfs.Op) error {
		if op.Kind != errorfs.OpFileSyncData || !strings.HasSuffix(op.Path, ".log") {
			return nil
		}
		syncs.Add(1)
		if holding.Load() {
			select {
			case held <- struct{}{}:
			default:
			}
			<-release
		}
		return nil
	})
	holding.Store(true)
	answered := make(chan error, 9)
	appendOne := func(i int) {
		_, _, err := c.append(1, isr.AcksLeader, fmt.Sprintf("a%d", i), 1)
		answered <- err
	}
	go appendOne(0)
	<-held
	holding.Store(false)
	before := syncs.Load()
	for i := 1; i <= 8; i++ {
		go appendOne(i)
	}
	r, err := c.node(1).m.replica(partition)
	if err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, "eight appends to wait in the leader's loop", func() bool { return r.loop.Queued() >= 8 })
	select {
	case err := <-answered:
		t.Fatalf("an append was answered (%v) while its sync was held", err)
	default:
	}
	unhold()
	for range 9 {
		if err := <-answered; err != nil {
			t.Fatal(err)
		}
	}
	if n := syncs.Load() - before; n != 1 {
		t.Fatalf("the eight appends of one batch took %d syncs of the segment, want 1", n)
	}
}

// TestFailedLogRefusesAppends: a leader whose log failed (a sync error; the
// log then refuses every write until reopened) answers appends with
// ErrLogFailed (KAFKA_STORAGE_ERROR) instead of feeding its core, whose
// log must not fail under it.
func TestFailedLogRefusesAppends(t *testing.T) {
	var failing atomic.Bool
	errInjected := errors.New("injected sync failure")
	c := newSyncingCluster(t, func(op errorfs.Op) error {
		if failing.Load() && (op.Kind == errorfs.OpFileSync || op.Kind == errorfs.OpFileSyncData || op.Kind == errorfs.OpFileSyncTo) {
			return errInjected
		}
		return nil
	})
	failing.Store(true)
	// This append is written, then its flush fails: the log fails, and
	// the append is not acknowledged (as Kafka answers a produce whose
	// flush.messages sync threw KAFKA_STORAGE_ERROR).
	_, _, err := c.append(1, isr.AcksLeader, "flush-fails", 1)
	if !errors.Is(err, ErrLogFailed) || errorCode(err) != kerr.KafkaStorageError.Code {
		t.Fatalf("the append whose flush failed: %v, want ErrLogFailed", err)
	}
	_, _, err = c.append(1, isr.AcksLeader, "after", 1)
	if !errors.Is(err, ErrLogFailed) || errorCode(err) != kerr.KafkaStorageError.Code {
		t.Fatalf("an append to the failed log: %v, want ErrLogFailed", err)
	}
	failing.Store(false)
	c.mu.Lock()
	n := c.nodes[1]
	delete(c.nodes, 1)
	c.mu.Unlock()
	// Closing reports the failure, and the shutdown is not marked clean.
	if err := n.m.Close(); !errors.Is(err, disklog.ErrFailed) {
		t.Fatalf("closing the broker with a failed log: %v, want disklog.ErrFailed", err)
	}
	if _, err := os.Stat(filepath.Join(c.dir, "1", cleanShutdownFile)); !os.IsNotExist(err) {
		t.Fatalf("the shutdown with a failed log was marked clean (%v)", err)
	}
	n.server.Close()
	<-n.served
	n.store.Close()
}
