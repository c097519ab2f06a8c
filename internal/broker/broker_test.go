package broker

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"quire/internal/bookie"
	"quire/internal/bookie/client"
	"quire/internal/bookie/node"
	"quire/internal/ledger/ledgerclient"
	"quire/internal/meta"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// testCluster is an in-process ledger-mode cluster: a metadata store, three
// bookies and brokers started on demand.
type testCluster struct {
	t   *testing.T
	srv *meta.MemServer
}

func newTestCluster(t *testing.T) *testCluster {
	t.Helper()
	srv := meta.NewMemServer(meta.MemConfig{})
	for i := range 3 {
		ecfg := bookie.DefaultConfig("", "")
		ecfg.JournalFileBytes = 4 << 20
		ecfg.WriteCacheBytes = 8 << 20
		n, err := node.Start(context.Background(), node.Config{
			ID: fmt.Sprintf("b%d", i+1), DataDir: t.TempDir(), ListenAddr: "127.0.0.1:0", Zone: "z",
			Store: srv.NewClient(), Engine: &ecfg, Logger: quiet,
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { n.Close() })
	}
	return &testCluster{t: t, srv: srv}
}

// startBroker starts a broker on its own store client (its own session).
func (c *testCluster) startBroker(mod func(*Config)) (*Broker, meta.Store) {
	c.t.Helper()
	return c.startBrokerWith(nil, mod)
}

// startBrokerWith is startBroker with the ledger client's settings changed
// by lcMod too.
func (c *testCluster) startBrokerWith(lcMod func(*ledgerclient.Config), mod func(*Config)) (*Broker, meta.Store) {
	c.t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		c.t.Fatal(err)
	}
	store := c.srv.NewClient()
	bc := client.New(client.Config{Logger: quiet, RedialBackoffMin: 10 * time.Millisecond, RedialBackoffMax: 50 * time.Millisecond})
	c.t.Cleanup(bc.Close)
	lcfg := ledgerclient.Config{Store: store, Bookies: bc, Tick: 10 * time.Millisecond, RequestTimeoutTicks: 200, Name: "broker", Logger: quiet}
	if lcMod != nil {
		lcMod(&lcfg)
	}
	lc := ledgerclient.New(lcfg)
	cfg := DefaultConfig()
	cfg.Store, cfg.Ledgers, cfg.KafkaListener, cfg.Logger = store, lc, ln, quiet
	cfg.SessionTTL = 2 * time.Second
	if mod != nil {
		mod(&cfg)
	}
	b, err := Start(context.Background(), cfg)
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(func() { b.Close() })
	return b, store
}

func newClient(t *testing.T, addr string, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(addr), kgo.WithLogger(nil)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

func TestProduceConsumeWithFranzGo(t *testing.T) {
	c := newTestCluster(t)
	reg := prometheus.NewRegistry()
	b, _ := c.startBroker(func(cfg *Config) { cfg.Registerer = reg })
	addr := b.cfg.KafkaAdvertised
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	adm := kadm.NewClient(newClient(t, addr))
	if _, err := adm.CreateTopic(ctx, 4, 1, nil, "orders"); err != nil {
		t.Fatal(err)
	}
	prod := newClient(t, addr, kgo.DefaultProduceTopic("orders"), kgo.RequiredAcks(kgo.AllISRAcks()))
	const n = 2000
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		prod.Produce(ctx, &kgo.Record{Key: fmt.Appendf(nil, "k%d", i%37), Value: fmt.Appendf(nil, "v%d", i)}, func(r *kgo.Record, err error) {
			defer wg.Done()
			if err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}

	cons := newClient(t, addr, kgo.ConsumeTopics("orders"), kgo.ConsumerGroup("g1"), kgo.DisableAutoCommit(),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	seen := map[string]bool{}
	lastOffset := map[int32]int64{}
	for len(seen) < n {
		fs := cons.PollFetches(ctx)
		if err := fs.Err0(); err != nil {
			t.Fatalf("poll after %d records: %v", len(seen), err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			if last, ok := lastOffset[r.Partition]; ok && r.Offset != last+1 {
				t.Fatalf("partition %d: offset %d after %d", r.Partition, r.Offset, last)
			}
			lastOffset[r.Partition] = r.Offset
			seen[string(r.Value)] = true
		})
	}
	if err := cons.CommitUncommittedOffsets(ctx); err != nil {
		t.Fatal(err)
	}
	// DescribeGroups names the member's client id and host, as Kafka does.
	dg, err := adm.DescribeGroups(ctx, "g1")
	if err != nil {
		t.Fatal(err)
	}
	g := dg["g1"]
	if g.State != "Stable" || len(g.Members) != 1 || g.Members[0].ClientID != "kgo" || g.Members[0].ClientHost != "/127.0.0.1" {
		t.Fatalf("described group: %+v", g)
	}
	offs, err := adm.FetchOffsets(ctx, "g1")
	if err != nil {
		t.Fatal(err)
	}
	var total int64
	offs.Each(func(o kadm.OffsetResponse) { total += o.At })
	if total != n {
		t.Fatalf("committed offsets sum to %d, want %d", total, n)
	}

	// The partitions' state is exported, under the seed's metric names.
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	sums := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			sums[mf.GetName()] += m.GetGauge().GetValue()
		}
	}
	if sums["quire_kafka_partition_high_watermark"] != n {
		t.Errorf("high watermarks sum to %v, want %d", sums["quire_kafka_partition_high_watermark"], n)
	}
	if sums["pulsar_storage_size"] <= 0 || sums["quire_broker_owned_bundles"] != 4 {
		t.Errorf("pulsar_storage_size %v, owned bundles %v", sums["pulsar_storage_size"], sums["quire_broker_owned_bundles"])
	}
}

// A produce to a broker that does not own the partition's bundle gets
// NOT_LEADER_OR_FOLLOWER; Metadata from either broker names the owner.
func TestWrongBrokerGetsNotLeader(t *testing.T) {
	c := newTestCluster(t)
	b1, _ := c.startBroker(func(cfg *Config) { cfg.ID = 1 })
	b2, _ := c.startBroker(func(cfg *Config) { cfg.ID = 2 })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl := newClient(t, b1.cfg.KafkaAdvertised)
	adm := kadm.NewClient(cl)
	if _, err := adm.CreateTopic(ctx, 8, 1, nil, "spread"); err != nil {
		t.Fatal(err)
	}
	leaders := map[int32]int32{}
	var topicID [16]byte
	for _, addr := range []string{b1.cfg.KafkaAdvertised, b2.cfg.KafkaAdvertised} {
		md, err := kadm.NewClient(newClient(t, addr)).Metadata(ctx, "spread")
		if err != nil {
			t.Fatal(err)
		}
		topicID = md.Topics["spread"].ID
		for _, p := range md.Topics["spread"].Partitions {
			if l, ok := leaders[p.Partition]; ok && l != p.Leader {
				t.Fatalf("partition %d: brokers disagree on the leader (%d vs %d)", p.Partition, l, p.Leader)
			}
			leaders[p.Partition] = p.Leader
		}
	}
	for p, leader := range leaders {
		other := int32(3) - leader
		if leader != 1 && leader != 2 {
			t.Fatalf("partition %d has leader %d", p, leader)
		}
		req := kmsg.NewPtrProduceRequest()
		req.Acks, req.TimeoutMillis = -1, 5000
		rt := kmsg.NewProduceRequestTopic()
		rt.Topic, rt.TopicID = "spread", topicID
		rp := kmsg.NewProduceRequestTopicPartition()
		rp.Partition = p
		rp.Records = testBatch()
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		resp, err := req.RequestWith(ctx, cl.Broker(int(other)))
		if err != nil {
			t.Fatal(err)
		}
		if code := resp.Topics[0].Partitions[0].ErrorCode; code != kerr.NotLeaderForPartition.Code {
			t.Fatalf("partition %d (leader %d) produced to broker %d: error %d, want NOT_LEADER_OR_FOLLOWER", p, leader, other, code)
		}
		resp, err = req.RequestWith(ctx, cl.Broker(int(leader)))
		if err != nil {
			t.Fatal(err)
		}
		if code := resp.Topics[0].Partitions[0].ErrorCode; code != 0 {
			t.Fatalf("partition %d produced to its leader %d: error %d", p, leader, code)
		}
	}
}

// testBatch is one uncompressed v2 batch of one record, built with kmsg.
func testBatch() []byte {
	r := kmsg.Record{Value: []byte("x")}
	r.Length = int32(len(r.AppendTo(nil)) - 1)
	rb := kmsg.RecordBatch{Magic: 2, PartitionLeaderEpoch: -1, ProducerID: -1, ProducerEpoch: -1, FirstSequence: -1,
		NumRecords: 1, Records: r.AppendTo(nil), FirstTimestamp: time.Now().UnixMilli(), MaxTimestamp: time.Now().UnixMilli()}
	raw := rb.AppendTo(nil)
	binary.BigEndian.PutUint32(raw[8:], uint32(len(raw)-12))
	binary.BigEndian.PutUint32(raw[17:], crc32.Checksum(raw[21:], crc32.MakeTable(crc32.Castagnoli)))
	return raw
}

// Deleting a topic and creating it again starts from offset 0 with no
// old records; configs round-trip through DescribeConfigs.
func TestDeleteRecreateAndConfigs(t *testing.T) {
	c := newTestCluster(t)
	b, _ := c.startBroker(nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl := newClient(t, b.cfg.KafkaAdvertised, kgo.DefaultProduceTopic("again"))
	adm := kadm.NewClient(cl)
	if _, err := adm.CreateTopic(ctx, 1, 1, map[string]*string{"retention.ms": kadm.StringPtr("3600000")}, "again"); err != nil {
		t.Fatal(err)
	}
	// Every partition is a managed ledger: a topic's partitions are bounded.
	if resp, _ := adm.CreateTopic(ctx, MaxPartitionsPerTopic+1, 1, nil, "huge"); !errors.Is(resp.Err, kerr.InvalidPartitions) {
		t.Fatalf("a topic of %d partitions: %v", MaxPartitionsPerTopic+1, resp.Err)
	}
	rcs, err := adm.DescribeTopicConfigs(ctx, "again")
	if err != nil {
		t.Fatal(err)
	}
	rc, err := rcs.On("again", nil)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, c := range rc.Configs {
		if c.Key == "retention.ms" {
			found = c.MaybeValue() == "3600000"
		}
	}
	if !found {
		t.Fatalf("retention.ms not described as set: %+v", rc.Configs)
	}
	if _, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Op: kadm.SetConfig, Name: "cleanup.policy", Value: kadm.StringPtr("shred")}}, "again"); err == nil {
		resp, _ := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Op: kadm.SetConfig, Name: "cleanup.policy", Value: kadm.StringPtr("shred")}}, "again")
		if resp[0].Err == nil {
			t.Fatal("cleanup.policy=shred accepted")
		}
	}
	for i := range 10 {
		if err := cl.ProduceSync(ctx, &kgo.Record{Value: fmt.Appendf(nil, "old-%d", i)}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := adm.DeleteTopics(ctx, "again"); err != nil {
		t.Fatal(err)
	}
	if _, err := adm.CreateTopic(ctx, 1, 1, nil, "again"); err != nil {
		t.Fatal(err)
	}
	// franz-go keeps a topic's id; a re-created topic (new id) must be
	// purged from the client first, as with Apache Kafka.
	cl.PurgeTopicsFromClient("again")
	res := cl.ProduceSync(ctx, &kgo.Record{Value: []byte("new")})
	if err := res.FirstErr(); err != nil {
		t.Fatal(err)
	}
	if off := res[0].Record.Offset; off != 0 {
		t.Fatalf("first record of the re-created topic at offset %d", off)
	}
	ends, err := adm.ListEndOffsets(ctx, "again")
	if err != nil {
		t.Fatal(err)
	}
	if o, _ := ends.Lookup("again", 0); o.Offset != 1 {
		t.Fatalf("end offset %d, want 1", o.Offset)
	}
}

// retention.ms on a Kafka topic deletes whole closed ledgers; the log start
// offset moves up and a fetch below it gets OFFSET_OUT_OF_RANGE.
func TestRetentionMovesTheLogStart(t *testing.T) {
	c := newTestCluster(t)
	b, _ := c.startBroker(func(cfg *Config) { cfg.MaintainInterval = 50 * time.Millisecond })
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cl := newClient(t, b.cfg.KafkaAdvertised, kgo.DefaultProduceTopic("short"))
	adm := kadm.NewClient(cl)
	// Ledgers roll over after 200 ms and are deleted 200 ms after closing.
	if _, err := adm.CreateTopic(ctx, 1, 1, map[string]*string{
		"segment.ms": kadm.StringPtr("200"), "retention.ms": kadm.StringPtr("200"),
	}, "short"); err != nil {
		t.Fatal(err)
	}
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	var start int64
	for produced := 0; start == 0; produced++ {
		if err := cl.ProduceSync(ctx, &kgo.Record{Value: fmt.Appendf(nil, "r%d", produced)}).FirstErr(); err != nil {
			t.Fatal(err)
		}
		starts, err := adm.ListStartOffsets(ctx, "short")
		if err != nil {
			t.Fatal(err)
		}
		o, _ := starts.Lookup("short", 0)
		start = o.Offset
		select {
		case <-tick.C:
		case <-ctx.Done():
			t.Fatalf("the log start never moved (produced %d records)", produced)
		}
	}
	req := kmsg.NewPtrFetchRequest()
	req.MaxWaitMillis, req.MaxBytes = 10, 1<<20
	md, err := adm.Metadata(ctx, "short")
	if err != nil {
		t.Fatal(err)
	}
	ft := kmsg.NewFetchRequestTopic()
	ft.Topic, ft.TopicID = "short", md.Topics["short"].ID
	fp := kmsg.NewFetchRequestTopicPartition()
	fp.Partition, fp.FetchOffset, fp.PartitionMaxBytes = 0, 0, 1<<20
	ft.Partitions = append(ft.Partitions, fp)
	req.Topics = append(req.Topics, ft)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	if code := resp.Topics[0].Partitions[0].ErrorCode; code != kerr.OffsetOutOfRange.Code {
		t.Fatalf("fetch at 0 with the log starting at %d: error %d, want OFFSET_OUT_OF_RANGE", start, code)
	}
}

// A broker that joins gets its share of the bundles (handoff to the
// rendezvous choice); records produced before and after the move are all
// there exactly once.
func TestJoiningBrokerTakesItsShare(t *testing.T) {
	c := newTestCluster(t)
	handoff := func(cfg *Config) { cfg.HandoffAfter = 300 * time.Millisecond }
	b1, _ := c.startBroker(func(cfg *Config) { handoff(cfg); cfg.ID = 1 })
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cl := newClient(t, b1.cfg.KafkaAdvertised, kgo.DefaultProduceTopic("share"), kgo.RecordPartitioner(kgo.RoundRobinPartitioner()))
	adm := kadm.NewClient(cl)
	if _, err := adm.CreateTopic(ctx, 8, 1, nil, "share"); err != nil {
		t.Fatal(err)
	}
	produce := func(from, n int) {
		t.Helper()
		for i := from; i < from+n; i++ {
			if err := cl.ProduceSync(ctx, &kgo.Record{Value: fmt.Appendf(nil, "r%d", i)}).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
	}
	produce(0, 100)
	c.startBroker(func(cfg *Config) { handoff(cfg); cfg.ID = 2 })
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		md, err := adm.Metadata(ctx, "share")
		if err != nil {
			t.Fatal(err)
		}
		leaders := map[int32]bool{}
		for _, p := range md.Topics["share"].Partitions {
			leaders[p.Leader] = true
		}
		if leaders[1] && leaders[2] {
			break
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			t.Fatalf("broker 2 never got a bundle: leaders %v", leaders)
		}
	}
	produce(100, 100)
	cons := newClient(t, b1.cfg.KafkaAdvertised, kgo.ConsumeTopics("share"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	seen := map[string]int{}
	for n := 0; n < 200; {
		fs := cons.PollFetches(ctx)
		if err := fs.Err0(); err != nil {
			t.Fatalf("consume after %d: %v", n, err)
		}
		fs.EachRecord(func(r *kgo.Record) { seen[string(r.Value)]++; n++ })
	}
	for i := range 200 {
		if v := fmt.Sprintf("r%d", i); seen[v] != 1 {
			t.Fatalf("%s seen %d times", v, seen[v])
		}
	}
}
