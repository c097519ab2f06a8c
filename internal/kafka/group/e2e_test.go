package group_test

// End to end: the real franz-go client (kgo, kadm) through the real Kafka
// front end (internal/kafka) with the in-memory kafkatest backend, whose
// groups are served by this package on an in-memory metadata store.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"quire/internal/kafka"
	"quire/internal/kafka/group"
	"quire/internal/kafka/kafkatest"
	"quire/internal/meta"
	"quire/internal/testutil"
)

var _ kafka.GroupCoordinator = (*group.Coordinator)(nil)

// backend is kafkatest's backend with this package's coordinator.
type backend struct {
	*kafkatest.Backend
	groups *group.Coordinator
}

func (b backend) Groups() kafka.GroupCoordinator { return b.groups }

type cluster struct {
	t      *testing.T
	addr   string
	groups *group.Coordinator
}

func newCluster(t *testing.T) *cluster {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	host, portStr, _ := net.SplitHostPort(ln.Addr().String())
	port, _ := strconv.Atoi(portStr)
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	store := meta.NewMemServer(meta.MemConfig{}).NewClient()
	groups, err := group.New(group.Config{Store: store, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	server, err := kafka.New(kafka.Config{
		Backend: backend{kafkatest.New(kafka.Node{ID: 1, Host: host, Port: int32(port)}), groups},
		Logger:  quiet,
	})
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- server.Serve(ln) }()
	t.Cleanup(func() {
		server.Close()
		if err := <-served; !errors.Is(err, kafka.ErrServerClosed) {
			t.Errorf("Serve returned %v", err)
		}
		groups.Close()
		store.Close()
	})
	return &cluster{t: t, addr: ln.Addr().String(), groups: groups}
}

func (c *cluster) client(opts ...kgo.Opt) *kgo.Client {
	c.t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(c.addr), kgo.RetryTimeout(10 * time.Second)}, opts...)...)
	if err != nil {
		c.t.Fatal(err)
	}
	return cl
}

func (c *cluster) createTopic(ctx context.Context, topic string) {
	c.t.Helper()
	adm := kadm.NewClient(c.client())
	defer adm.Close()
	if resp, err := adm.CreateTopic(ctx, 3, 1, nil, topic); err != nil || resp.Err != nil {
		c.t.Fatalf("create topic: %v %v", err, resp.Err)
	}
}

func (c *cluster) produce(ctx context.Context, topic string, n int) {
	c.t.Helper()
	c.createTopic(ctx, topic)
	cl := c.client(kgo.DefaultProduceTopic(topic))
	defer cl.Close()
	for i := 0; i < n; i++ {
		if err := cl.ProduceSync(ctx, &kgo.Record{Key: []byte(strconv.Itoa(i)), Value: []byte(strconv.Itoa(i))}).FirstErr(); err != nil {
			c.t.Fatalf("produce %d: %v", i, err)
		}
	}
}

// seen counts the records consumed by every consumer.
type seen struct {
	mu     sync.Mutex
	counts map[string]int
	grew   chan struct{}
}

func (s *seen) add(value string) {
	s.mu.Lock()
	s.counts[value]++
	s.mu.Unlock()
	select {
	case s.grew <- struct{}{}:
	default:
	}
}

func (s *seen) distinct() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.counts)
}

// consumer polls on a goroutine until stopped.
type consumer struct {
	cl     *kgo.Client
	cancel context.CancelFunc
	done   chan struct{}
}

func (c *cluster) startConsumer(groupID, topic string, s *seen, opts ...kgo.Opt) *consumer {
	cl := c.client(append([]kgo.Opt{
		kgo.ConsumerGroup(groupID),
		kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.HeartbeatInterval(100 * time.Millisecond),
		kgo.FetchMaxWait(100 * time.Millisecond),
	}, opts...)...)
	ctx, cancel := context.WithCancel(context.Background())
	cons := &consumer{cl: cl, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(cons.done)
		for ctx.Err() == nil {
			fetches := cl.PollFetches(ctx)
			fetches.EachRecord(func(r *kgo.Record) { s.add(string(r.Value)) })
		}
	}()
	return cons
}

// stop leaves the group (kgo commits what it polled, then sends LeaveGroup).
func (cons *consumer) stop() {
	cons.cancel()
	<-cons.done
	cons.cl.Close()
}

func describeGroup(ctx context.Context, t *testing.T, adm *kadm.Client, groupID string) kadm.DescribedGroup {
	t.Helper()
	described, err := adm.DescribeGroups(ctx, groupID)
	if err != nil {
		t.Fatal(err)
	}
	return described[groupID]
}

// runGroup has consumers join and leave a group while it consumes a topic;
// every record is consumed at least once and the final commit covers the log.
func runGroup(t *testing.T, balancer kgo.GroupBalancer, protocol string) {
	c := newCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const records = 300
	topic, groupID := "events", "g-"+protocol
	c.produce(ctx, topic, records)
	adm := kadm.NewClient(c.client())
	defer adm.Close()

	s := &seen{counts: map[string]int{}, grew: make(chan struct{}, 1)}
	opts := []kgo.Opt{kgo.Balancers(balancer)}
	first := c.startConsumer(groupID, topic, s, opts...)
	testutil.WaitForWithin(t, 20*time.Second, "first records", func() bool { return s.distinct() > 0 })
	second := c.startConsumer(groupID, topic, s, opts...)
	third := c.startConsumer(groupID, topic, s, opts...)
	// The protocol is checked on the read that found the group Stable:
	// cooperative-sticky rebalances a second time to hand out the revoked
	// partitions, and DescribeGroups names the protocol only while Stable,
	// so a second read could land in that rebalance.
	var stable kadm.DescribedGroup
	testutil.WaitForWithin(t, 30*time.Second, "three members stable", func() bool {
		stable = describeGroup(ctx, t, adm, groupID)
		return stable.State == "Stable" && len(stable.Members) == 3
	})
	if stable.Protocol != protocol || stable.ProtocolType != "consumer" {
		t.Fatalf("described: protocol %q type %q", stable.Protocol, stable.ProtocolType)
	}
	first.stop()
	second.stop()
	testutil.WaitForWithin(t, 30*time.Second, "one member stable", func() bool {
		d := describeGroup(ctx, t, adm, groupID)
		return d.State == "Stable" && len(d.Members) == 1
	})
	testutil.WaitForWithin(t, 30*time.Second, "every record", func() bool { return s.distinct() == records })
	if err := third.cl.CommitUncommittedOffsets(ctx); err != nil {
		t.Fatalf("commit: %v", err)
	}
	third.stop()

	testutil.WaitForWithin(t, 10*time.Second, "group empty", func() bool { return describeGroup(ctx, t, adm, groupID).State == "Empty" })
	committed, err := adm.FetchOffsets(ctx, groupID)
	if err != nil {
		t.Fatal(err)
	}
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	ends.Each(func(end kadm.ListedOffset) {
		o, ok := committed.Lookup(topic, end.Partition)
		if !ok || o.At != end.Offset {
			t.Errorf("partition %d: committed %+v, end %d", end.Partition, o, end.Offset)
		}
	})
	listed, err := adm.ListGroups(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if lg, ok := listed[groupID]; !ok || lg.State != "Empty" {
		t.Fatalf("listed: %+v", listed)
	}
	deleted, err := adm.DeleteGroup(ctx, groupID)
	if err != nil || deleted.Err != nil {
		t.Fatalf("delete: %v %v", err, deleted.Err)
	}
	if described := describeGroup(ctx, t, adm, groupID); described.State != "Dead" {
		t.Fatalf("after delete: %+v", described)
	}
}

func TestKgoEagerGroup(t *testing.T) { runGroup(t, kgo.RangeBalancer(), "range") }

func TestKgoCooperativeGroup(t *testing.T) {
	runGroup(t, kgo.CooperativeStickyBalancer(), "cooperative-sticky")
}

func TestKgoStandaloneCommitAndOffsetDelete(t *testing.T) {
	c := newCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c.createTopic(ctx, "t")
	adm := kadm.NewClient(c.client())
	defer adm.Close()
	offsets := kadm.Offsets{}
	for p := int32(0); p < 3; p++ {
		offsets.Add(kadm.Offset{Topic: "t", Partition: p, At: int64(10 * (p + 1)), LeaderEpoch: -1, Metadata: fmt.Sprintf("m%d", p)})
	}
	resp, err := adm.CommitOffsets(ctx, "standalone", offsets)
	if err != nil || resp.Error() != nil {
		t.Fatalf("commit: %v %v", err, resp.Error())
	}
	fetched, err := adm.FetchOffsets(ctx, "standalone")
	if err != nil {
		t.Fatal(err)
	}
	if o, ok := fetched.Lookup("t", 2); !ok || o.At != 30 || o.Metadata != "m2" {
		t.Fatalf("fetched %+v", o)
	}
	// OffsetDelete of an unsubscribed topic on an empty group.
	deleted, err := adm.DeleteOffsets(ctx, "standalone", kadm.TopicsSet{"t": {0: {}}})
	if err != nil || deleted.Error() != nil {
		t.Fatalf("delete offsets: %v %v", err, deleted.Error())
	}
	fetched, _ = adm.FetchOffsets(ctx, "standalone")
	if _, ok := fetched.Lookup("t", 0); ok {
		t.Fatalf("partition 0 still committed: %+v", fetched)
	}
}
