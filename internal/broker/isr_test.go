package broker

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"quire/internal/catalog"
	"quire/internal/kafka"
	"quire/internal/testutil"
)

// startISRBrokers starts n brokers with ISR mode on, each in a zone of its
// own and with its own data directory; mods change each one's Config after.
func (c *testCluster) startISRBrokers(n int, mods ...func(*Config)) []*Broker {
	c.t.Helper()
	var out []*Broker
	for i := range n {
		b, _ := c.startBroker(func(cfg *Config) {
			cfg.Registerer = prometheus.NewRegistry()
			cfg.Zone = fmt.Sprintf("zone-%d", i+1)
			cfg.ISR = ISRConfig{Dir: c.t.TempDir(), MinISR: 2, LagTimeMax: 3 * time.Second}
			for _, mod := range mods {
				mod(cfg)
			}
		})
		out = append(out, b)
	}
	c.waitAllRegistered(out)
	return out
}

// waitAllRegistered waits until every one of brokers sees all of them
// registered (SeeOneAnother).
func (c *testCluster) waitAllRegistered(brokers []*Broker) {
	c.t.Helper()
	testutil.WaitFor(c.t, fmt.Sprintf("%d brokers registered, as each sees it", len(brokers)),
		func() bool { return SeeOneAnother(brokers) })
}

// TestISRAndLedgerTopicsSideBySide: three brokers with ISR mode serve a
// ledger-mode topic (created while the namespace was in ledger mode) and an
// ISR-mode topic of replication factor 3 (created after the namespace's
// policy became ISR) through one franz-go client with acks=all, batches
// coming back as produced (compressed, with keys and timestamps); Metadata
// shows the ISR topic's replicas on three zones and all of them in sync.
// When the broker leading an ISR partition closes, another replica leads
// under a newer leader epoch and no acknowledged record is lost; a topic
// created with min.insync.replicas=3 then refuses acks=all
// (NOT_ENOUGH_REPLICAS).
func TestISRAndLedgerTopicsSideBySide(t *testing.T) {
	c := newTestCluster(t)
	brokers := c.startISRBrokers(3)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	var seeds []string
	for _, b := range brokers {
		seeds = append(seeds, b.cfg.KafkaAdvertised)
	}
	adm := kadm.NewClient(newClient(t, seeds[0], kgo.SeedBrokers(seeds...)))
	if _, err := adm.CreateTopic(ctx, 2, -1, nil, "ledger-topic"); err != nil {
		t.Fatal(err)
	}
	if _, err := brokers[0].admin.SetReplication(ctx, "public/default",
		catalog.Replication{Mode: catalog.ModeISR, Factor: 3, MinInSyncReplicas: 2}); err != nil {
		t.Fatal(err)
	}
	created, err := adm.CreateTopic(ctx, 2, 3, nil, "isr-topic")
	if err != nil || created.Err != nil {
		t.Fatalf("create the ISR topic: %v, %v", err, created.Err)
	}
	minISR3 := "3"
	if _, err := adm.CreateTopic(ctx, 1, 3, map[string]*string{"min.insync.replicas": &minISR3}, "strict-topic"); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"ledger-topic", "isr-topic"} {
		rec, err := brokers[0].admin.GetTopic(ctx, "public/default", name)
		if err != nil || rec.IsISR() != (name == "isr-topic") {
			t.Fatalf("%s: %v, mode %q", name, err, rec.Mode)
		}
	}
	rcs, err := adm.DescribeTopicConfigs(ctx, "isr-topic", "strict-topic")
	if err != nil {
		t.Fatal(err)
	}
	for topic, want := range map[string]string{"isr-topic": "2", "strict-topic": "3"} {
		rc, err := rcs.On(topic, nil)
		if err != nil {
			t.Fatal(err)
		}
		got := ""
		for _, c := range rc.Configs {
			if c.Key == "min.insync.replicas" && c.Value != nil {
				got = *c.Value
			}
		}
		if got != want {
			t.Fatalf("%s: min.insync.replicas %q, want %q (the namespace's, or the topic's own)", topic, got, want)
		}
	}
	day, one := "86400000", "1"
	if rs, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Name: "retention.ms", Value: &day}}, "isr-topic"); err != nil || rs[0].Err != nil {
		t.Fatalf("alter retention.ms of an ISR topic: %v %v", err, rs)
	}
	if rs, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Name: "min.insync.replicas", Value: &one}}, "isr-topic"); err != nil || !errors.Is(rs[0].Err, kerr.InvalidConfig) {
		t.Fatalf("alter min.insync.replicas of an ISR topic: %v %v; want INVALID_CONFIG (fixed at creation)", err, rs)
	}
	zoneOf := map[int32]string{}
	for _, b := range brokers {
		zoneOf[b.ID()] = b.cfg.Zone
	}
	var md kadm.Metadata
	testutil.WaitFor(t, "the ISR topic's partitions led, every replica in sync", func() bool {
		md, err = adm.Metadata(ctx, "isr-topic")
		if err != nil {
			return false
		}
		td := md.Topics["isr-topic"]
		if td.Err != nil || len(td.Partitions) != 2 {
			return false
		}
		for _, p := range td.Partitions {
			if p.Err != nil || p.Leader < 0 || len(p.Replicas) != 3 || len(p.ISR) != 3 {
				return false
			}
		}
		return true
	})
	for _, p := range md.Topics["isr-topic"].Partitions {
		zones := map[string]bool{}
		for _, r := range p.Replicas {
			zones[zoneOf[r]] = true
		}
		if len(zones) != 3 || p.Replicas[0] != p.Leader {
			t.Fatalf("partition %d: replicas %v (zones %v), leader %d: want three zones, the first replica leading", p.Partition, p.Replicas, zones, p.Leader)
		}
	}

	prod := newClient(t, seeds[0], kgo.SeedBrokers(seeds...), kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.ProducerBatchCompression(kgo.Lz4Compression()), kgo.RecordPartitioner(kgo.RoundRobinPartitioner()))
	acked := map[string][]string{}
	produce := func(topic, prefix string, n int) {
		t.Helper()
		var recs []*kgo.Record
		for i := range n {
			recs = append(recs, &kgo.Record{Topic: topic, Key: fmt.Appendf(nil, "k%d", i%7), Value: fmt.Appendf(nil, "%s-%d", prefix, i),
				Timestamp: time.UnixMilli(1_700_000_000_000 + int64(i))})
		}
		if err := prod.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Fatalf("produce to %s: %v", topic, err)
		}
		for _, r := range recs {
			acked[topic] = append(acked[topic], string(r.Value))
		}
	}
	produce("isr-topic", "a", 300)
	produce("ledger-topic", "a", 300)

	consumeAll := func(topic string, from []string) {
		t.Helper()
		cons := newClient(t, from[0], kgo.SeedBrokers(from...), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
		got := map[string]int{}
		last := map[int32]int64{}
		for len(got) < len(acked[topic]) {
			fs := cons.PollFetches(ctx)
			if err := fs.Err0(); err != nil {
				t.Fatalf("%s: poll after %d records: %v", topic, len(got), err)
			}
			fs.EachRecord(func(r *kgo.Record) {
				if l, ok := last[r.Partition]; ok && r.Offset != l+1 {
					t.Fatalf("%s/%d: offset %d after %d", topic, r.Partition, r.Offset, l)
				}
				last[r.Partition] = r.Offset
				if r.Timestamp.UnixMilli() < 1_700_000_000_000 || len(r.Key) == 0 {
					t.Fatalf("%s: record %q with timestamp %v, key %q: not as produced", topic, r.Value, r.Timestamp, r.Key)
				}
				got[string(r.Value)]++
			})
		}
		for _, v := range acked[topic] {
			if got[v] == 0 {
				t.Fatalf("%s: acknowledged record %s lost", topic, v)
			}
		}
	}
	consumeAll("isr-topic", seeds)
	consumeAll("ledger-topic", seeds)

	// The leader of partition 0 goes away.
	p0 := md.Topics["isr-topic"].Partitions[0]
	var leader *Broker
	var rest []string
	for _, b := range brokers {
		if b.ID() == p0.Leader {
			leader = b
		} else {
			rest = append(rest, b.cfg.KafkaAdvertised)
		}
	}
	if err := leader.Close(); err != nil {
		t.Logf("close broker %d: %v", leader.ID(), err)
	}
	adm2 := kadm.NewClient(newClient(t, rest[0], kgo.SeedBrokers(rest...)))
	var moved kadm.PartitionDetail
	testutil.WaitFor(t, "a new leader of partition 0", func() bool {
		md, err := adm2.Metadata(ctx, "isr-topic")
		if err != nil {
			return false
		}
		moved = md.Topics["isr-topic"].Partitions[0]
		return moved.Err == nil && moved.Leader >= 0 && moved.Leader != p0.Leader && moved.LeaderEpoch > p0.LeaderEpoch &&
			!slices.Contains(moved.ISR, p0.Leader)
	})
	t.Logf("partition 0: leader %d (epoch %d, ISR %v) closed; now leader %d, epoch %d, ISR %v, offline %v",
		p0.Leader, p0.LeaderEpoch, p0.ISR, moved.Leader, moved.LeaderEpoch, moved.ISR, moved.OfflineReplicas)
	prod2 := newClient(t, rest[0], kgo.SeedBrokers(rest...), kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.RecordPartitioner(kgo.RoundRobinPartitioner()))
	prod = prod2
	produce("isr-topic", "b", 100)
	consumeAll("isr-topic", rest)

	// The topic that asked for min.insync.replicas=3 refuses acks=all
	// with two brokers left, as Kafka does.
	strict := newClient(t, rest[0], kgo.SeedBrokers(rest...))
	var strictID [16]byte
	testutil.WaitFor(t, "the strict topic's ISR without the closed broker", func() bool {
		md, err := adm2.Metadata(ctx, "strict-topic")
		if err != nil {
			return false
		}
		strictID = md.Topics["strict-topic"].ID
		p := md.Topics["strict-topic"].Partitions[0]
		return p.Err == nil && p.Leader >= 0 && len(p.ISR) == 2
	})
	req := kmsg.NewPtrProduceRequest()
	req.Acks, req.TimeoutMillis = -1, 5000
	rt := kmsg.NewProduceRequestTopic()
	rt.Topic, rt.TopicID = "strict-topic", strictID
	rp := kmsg.NewProduceRequestTopicPartition()
	rp.Records = testBatch()
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	var strictLeader int32
	md2, err := adm2.Metadata(ctx, "strict-topic")
	if err != nil {
		t.Fatal(err)
	}
	strictLeader = md2.Topics["strict-topic"].Partitions[0].Leader
	resp, err := strict.Broker(int(strictLeader)).Request(ctx, req) // to the partition's leader
	if err != nil {
		t.Fatal(err)
	}
	code := resp.(*kmsg.ProduceResponse).Topics[0].Partitions[0].ErrorCode
	if code != kerr.NotEnoughReplicas.Code {
		for _, b := range brokers {
			if b != leader {
				st, err := b.isr.mgr.Status("strict-topic-0")
				r, _ := b.isr.record("strict-topic-0")
				t.Logf("broker %d: %+v %v; record %s", b.ID(), st, err, r)
			}
		}
		t.Fatalf("acks=all to a topic with min.insync.replicas=3 and an ISR of 2: %v, want NOT_ENOUGH_REPLICAS", kerr.ErrorForCode(code))
	}

	// The survivors' metrics, under Kafka's names: three partitions (two
	// of isr-topic, strict-topic's one) led, each with two of its three
	// replicas in sync, and one active controller.
	sums := map[string]float64{}
	testutil.WaitFor(t, "the survivors' ISR metrics", func() bool {
		clear(sums)
		for _, b := range brokers {
			if b == leader {
				continue
			}
			mfs, err := b.cfg.Registerer.(*prometheus.Registry).Gather()
			if err != nil {
				t.Fatal(err)
			}
			for _, mf := range mfs {
				for _, m := range mf.GetMetric() {
					sums[mf.GetName()] += m.GetGauge().GetValue() + m.GetCounter().GetValue()
				}
			}
		}
		return sums["kafka_server_replicamanager_leadercount"] == 3 && sums["kafka_server_replicamanager_underreplicatedpartitions"] == 3 &&
			sums["kafka_controller_kafkacontroller_activecontrollercount"] == 1 && sums["kafka_server_replicamanager_partitioncount"] == 6
	})
	if sums["kafka_controller_kafkacontroller_offlinepartitionscount"] != 0 {
		t.Fatalf("metrics %v: offline partitions", sums)
	}

}

// TestISRTopicDeleteAndRecreate: deleting an ISR topic deletes its
// partition records and every broker's replica and log; a topic of the same
// name created afterwards starts empty, at offset 0.
func TestISRTopicDeleteAndRecreate(t *testing.T) {
	c := newTestCluster(t)
	brokers := c.startISRBrokers(3)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := brokers[0].admin.SetReplication(ctx, "public/default", catalog.Replication{Mode: catalog.ModeISR}); err != nil {
		t.Fatal(err)
	}
	var seeds []string
	for _, b := range brokers {
		seeds = append(seeds, b.cfg.KafkaAdvertised)
	}
	cl := newClient(t, seeds[0], kgo.SeedBrokers(seeds...), kgo.RequiredAcks(kgo.AllISRAcks()))
	adm := kadm.NewClient(cl)
	produceOne := func(v string) {
		t.Helper()
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "again", Value: []byte(v)}).FirstErr(); err != nil {
			t.Fatalf("produce %s: %v", v, err)
		}
	}
	if _, err := adm.CreateTopic(ctx, 1, 3, nil, "again"); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		produceOne(fmt.Sprintf("old-%d", i))
	}
	if _, err := adm.DeleteTopics(ctx, "again"); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, "every broker's replica of the deleted topic gone", func() bool {
		for _, b := range brokers {
			if _, err := b.isr.mgr.Status("again-0"); err == nil {
				return false
			}
			if _, ok := b.isr.record("again-0"); ok {
				return false
			}
		}
		return true
	})
	if _, err := adm.CreateTopic(ctx, 1, 3, nil, "again"); err != nil {
		t.Fatal(err)
	}
	// A new client: the first one went on producing under the deleted
	// topic's id, answered UNKNOWN_TOPIC_ID until its delivery timeout.
	cl = newClient(t, seeds[0], kgo.SeedBrokers(seeds...), kgo.RequiredAcks(kgo.AllISRAcks()))
	produceOne("new")
	cons := newClient(t, seeds[0], kgo.SeedBrokers(seeds...), kgo.ConsumeTopics("again"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	fs := cons.PollFetches(ctx)
	if err := fs.Err0(); err != nil {
		t.Fatal(err)
	}
	recs := fs.Records()
	if len(recs) != 1 || string(recs[0].Value) != "new" || recs[0].Offset != 0 {
		t.Fatalf("the topic created again holds %d records (first %q at %d); want only \"new\" at 0", len(recs), recs[0].Value, recs[0].Offset)
	}
}

// TestISRFlushConfigs: an ISR topic takes Kafka's flush.messages and
// flush.ms (positive counts), lists them in DescribeConfigs (Kafka's
// Long.MAX_VALUE default when not set) and keeps them fixed after
// creation, as its partition records carry them.
func TestISRFlushConfigs(t *testing.T) {
	for _, tc := range []struct {
		cfgs map[string]string
		ok   bool
	}{
		{map[string]string{"flush.messages": "1"}, true},
		{map[string]string{"flush.messages": "10000", "flush.ms": "1000"}, true},
		{map[string]string{"flush.messages": "0"}, false},
		{map[string]string{"flush.ms": "-1"}, false},
		{map[string]string{"flush.messages": "often"}, false},
	} {
		if err := validateISRConfigs(tc.cfgs); (err == nil) != tc.ok || (err != nil && !errors.Is(err, kerr.InvalidConfig)) {
			t.Errorf("validateISRConfigs(%v) = %v, want ok %v", tc.cfgs, err, tc.ok)
		}
	}
	rec := catalog.Topic{Name: "t", Configs: map[string]string{"flush.messages": "1"}}
	byName := map[string]kafka.ConfigEntry{}
	for _, e := range isrDescribeConfigs(rec, catalog.Policies{}) {
		byName[e.Name] = e
	}
	if e := byName["flush.messages"]; e.Value == nil || *e.Value != "1" || e.Default {
		t.Errorf("flush.messages described as %+v", e)
	}
	if e := byName["flush.ms"]; e.Value == nil || *e.Value != "9223372036854775807" || !e.Default {
		t.Errorf("flush.ms described as %+v", e)
	}
	alter := isrAlterValidator(rec)
	if err := alter(map[string]string{"flush.messages": "1", "retention.ms": "1000"}); err != nil {
		t.Errorf("altering another config refused: %v", err)
	}
	for _, changed := range []map[string]string{{"flush.messages": "2"}, {}, {"flush.messages": "1", "flush.ms": "10"}} {
		if err := alter(changed); !errors.Is(err, kerr.InvalidConfig) {
			t.Errorf("alter to %v: %v, want INVALID_CONFIG (fixed at creation)", changed, err)
		}
	}
}

// TestISRListOffsetsLeaderEpoch: ListOffsets answers an ISR partition's
// offsets with the leader epoch of their batches (KIP-320's truncation
// detection starts from it): before a leader change every offset is in the
// first epoch; after the leader closed and records went in under the new
// leader, latest, max timestamp and the new records' time answer the new
// epoch, earliest and the old records' time the first.
func TestISRListOffsetsLeaderEpoch(t *testing.T) {
	c := newTestCluster(t)
	brokers := c.startISRBrokers(3)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	var seeds []string
	for _, b := range brokers {
		seeds = append(seeds, b.cfg.KafkaAdvertised)
	}
	adm := kadm.NewClient(newClient(t, seeds[0], kgo.SeedBrokers(seeds...)))
	p := isrTopic(ctx, t, brokers, adm, "epochs", nil)
	firstTime := time.UnixMilli(1_700_000_000_000)
	secondTime := firstTime.Add(time.Second)
	produce := func(seeds []string, at time.Time, n int) {
		t.Helper()
		cl := newClient(t, seeds[0], kgo.SeedBrokers(seeds...), kgo.RequiredAcks(kgo.AllISRAcks()), kgo.DefaultProduceTopic("epochs"))
		var recs []*kgo.Record
		for i := range n {
			recs = append(recs, &kgo.Record{Value: fmt.Appendf(nil, "v-%d", i), Timestamp: at})
		}
		if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	const earliest, latest, maxTimestamp = -2, -1, -3
	// listed is partition 0's ListOffsets answer for timestamp (a time, or
	// one of the three above), asked again while the client's metadata
	// still names a leader that is gone.
	listed := func(adm *kadm.Client, timestamp int64) kadm.ListedOffset {
		t.Helper()
		var o kadm.ListedOffset
		testutil.WaitFor(t, fmt.Sprintf("ListOffsets(%d) answered", timestamp), func() bool {
			var offsets kadm.ListedOffsets
			var err error
			switch timestamp {
			case earliest:
				offsets, err = adm.ListStartOffsets(ctx, "epochs")
			case latest:
				offsets, err = adm.ListEndOffsets(ctx, "epochs")
			case maxTimestamp:
				offsets, err = adm.ListMaxTimestampOffsets(ctx, "epochs")
			default:
				offsets, err = adm.ListOffsetsAfterMilli(ctx, timestamp, "epochs")
			}
			var ok bool
			o, ok = offsets.Lookup("epochs", 0)
			return err == nil && ok && o.Err == nil
		})
		return o
	}
	type want struct {
		timestamp int64
		offset    int64
		epoch     int32
	}
	check := func(adm *kadm.Client, stage string, wants ...want) {
		t.Helper()
		for _, w := range wants {
			if o := listed(adm, w.timestamp); o.Offset != w.offset || o.LeaderEpoch != w.epoch {
				t.Errorf("%s: ListOffsets(%d) at offset %d, epoch %d; want %d, epoch %d", stage, w.timestamp, o.Offset, o.LeaderEpoch, w.offset, w.epoch)
			}
		}
	}
	produce(seeds, firstTime, 5)
	check(adm, "one leader epoch",
		want{earliest, 0, p.LeaderEpoch}, want{latest, 5, p.LeaderEpoch}, want{maxTimestamp, 4, p.LeaderEpoch}, want{firstTime.UnixMilli(), 0, p.LeaderEpoch})

	var leader *Broker
	var rest []string
	for _, b := range brokers {
		if b.ID() == p.Leader {
			leader = b
		} else {
			rest = append(rest, b.cfg.KafkaAdvertised)
		}
	}
	if err := leader.Close(); err != nil {
		t.Logf("close broker %d: %v", leader.ID(), err)
	}
	adm2 := kadm.NewClient(newClient(t, rest[0], kgo.SeedBrokers(rest...)))
	var moved kadm.PartitionDetail
	testutil.WaitFor(t, "a new leader", func() bool {
		md, err := adm2.Metadata(ctx, "epochs")
		if err != nil {
			return false
		}
		moved = md.Topics["epochs"].Partitions[0]
		return moved.Err == nil && moved.Leader >= 0 && moved.Leader != p.Leader && moved.LeaderEpoch > p.LeaderEpoch
	})
	produce(rest, secondTime, 3)
	check(adm2, fmt.Sprintf("after the leader change to broker %d (epoch %d → %d)", moved.Leader, p.LeaderEpoch, moved.LeaderEpoch),
		want{earliest, 0, p.LeaderEpoch}, want{latest, 8, moved.LeaderEpoch}, want{maxTimestamp, 7, moved.LeaderEpoch},
		want{firstTime.UnixMilli(), 0, p.LeaderEpoch}, want{secondTime.UnixMilli(), 5, moved.LeaderEpoch})
}
