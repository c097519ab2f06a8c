package broker

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"quire/internal/catalog"
	"quire/internal/testutil"
)

// TestISRKafkaAPIs: the Kafka APIs ISR mode needs, on three brokers. A
// partition's leader goes away and comes back; ElectLeaders (preferred)
// then gives leadership back to it, which Metadata shows under a newer
// leader epoch. Fetch and ListOffsets check the client's leader epoch
// (KIP-320), OffsetForLeaderEpoch answers from the leader's epoch cache
// where each epoch ended, DescribeLogDirs shows each broker's ISR data
// directory with its replicas; each refusal as Kafka answers it, and
// ledger-mode partitions answered as documented (nothing to elect, no log
// directory).
func TestISRKafkaAPIs(t *testing.T) {
	c := newTestCluster(t)
	dirs := map[int32]string{}
	start := func(id int32) *Broker {
		if dirs[id] == "" {
			dirs[id] = t.TempDir()
		}
		b, _ := c.startBroker(func(cfg *Config) {
			cfg.ID, cfg.Zone = id, fmt.Sprintf("zone-%d", id)
			cfg.Registerer = prometheus.NewRegistry()
			cfg.ISR = ISRConfig{Dir: dirs[id], MinISR: 2, LagTimeMax: 3 * time.Second}
		})
		return b
	}
	brokers := map[int32]*Broker{1: start(1), 2: start(2), 3: start(3)}
	c.waitAllRegistered([]*Broker{brokers[1], brokers[2], brokers[3]})
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	seeds := func() []string {
		var out []string
		for _, b := range brokers {
			out = append(out, b.cfg.KafkaAdvertised)
		}
		return out
	}
	client := func() *kgo.Client {
		s := seeds()
		return newClient(t, s[0], kgo.SeedBrokers(s...), kgo.RequiredAcks(kgo.AllISRAcks()))
	}
	cl := client()
	create := func(name string) {
		t.Helper()
		req := kmsg.NewPtrCreateTopicsRequest()
		rt := kmsg.NewCreateTopicsRequestTopic()
		rt.Topic, rt.NumPartitions, rt.ReplicationFactor = name, 1, 3
		req.Topics = append(req.Topics, rt)
		resp, err := req.RequestWith(ctx, cl)
		if err != nil || resp.Topics[0].ErrorCode != 0 {
			t.Fatalf("create %s: %v %+v", name, err, resp)
		}
	}
	create("ledger-topic")
	if _, err := brokers[1].admin.SetReplication(ctx, "public/default",
		catalog.Replication{Mode: catalog.ModeISR, Factor: 3, MinInSyncReplicas: 2}); err != nil {
		t.Fatal(err)
	}
	create("isr-topic")

	// metadata is isr-topic's partition 0 as cl's brokers answer it.
	var topicID [16]byte
	metadata := func(cl *kgo.Client) kmsg.MetadataResponseTopicPartition {
		req := kmsg.NewPtrMetadataRequest()
		rt := kmsg.NewMetadataRequestTopic()
		rt.Topic = kmsg.StringPtr("isr-topic")
		req.Topics = append(req.Topics, rt)
		resp, err := req.RequestWith(ctx, cl)
		if err != nil || len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
			return kmsg.MetadataResponseTopicPartition{Leader: -1}
		}
		topicID = resp.Topics[0].TopicID
		return resp.Topics[0].Partitions[0]
	}
	var p0 kmsg.MetadataResponseTopicPartition
	testutil.WaitFor(t, "isr-topic led by its preferred replica, every replica in sync", func() bool {
		p0 = metadata(cl)
		return p0.ErrorCode == 0 && p0.Leader >= 0 && len(p0.ISR) == 3 && p0.Leader == p0.Replicas[0]
	})
	preferred := p0.Leader
	produce := func(cl *kgo.Client, n int) {
		t.Helper()
		for i := range n {
			if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "isr-topic", Value: fmt.Appendf(nil, "%d", i)}).FirstErr(); err != nil {
				t.Fatalf("produce: %v", err)
			}
		}
	}
	produce(cl, 5) // epoch p0.LeaderEpoch: offsets 0–4

	elect := func(cl *kgo.Client, electionType int8, topics map[string][]int32) map[string]kmsg.ElectLeadersResponseTopicPartition {
		t.Helper()
		req := kmsg.NewPtrElectLeadersRequest()
		req.ElectionType, req.TimeoutMillis = electionType, 20_000
		for name, parts := range topics {
			rt := kmsg.NewElectLeadersRequestTopic()
			rt.Topic, rt.Partitions = name, parts
			req.Topics = append(req.Topics, rt)
		}
		resp, err := req.RequestWith(ctx, cl)
		if err != nil {
			t.Fatalf("elect leaders: %v", err)
		}
		out := map[string]kmsg.ElectLeadersResponseTopicPartition{}
		for _, rt := range resp.Topics {
			for _, p := range rt.Partitions {
				out[fmt.Sprintf("%s-%d", rt.Topic, p.Partition)] = p
			}
		}
		return out
	}
	got := elect(cl, 0, map[string][]int32{"isr-topic": {0, 4}, "ledger-topic": {0}, "nope": {0}})
	for key, want := range map[string]*kerr.Error{
		"isr-topic-0": kerr.ElectionNotNeeded, "isr-topic-4": kerr.UnknownTopicOrPartition,
		"ledger-topic-0": kerr.ElectionNotNeeded, "nope-0": kerr.UnknownTopicOrPartition,
	} {
		if code := got[key].ErrorCode; code != want.Code {
			t.Errorf("preferred election of %s: %v, want %v", key, kerr.ErrorForCode(code), want)
		}
	}
	if msg := got["ledger-topic-0"].ErrorMessage; msg == nil || !strings.Contains(*msg, "bundle") {
		t.Errorf("ledger-mode partition's message: %v", msg)
	}
	if code := elect(cl, 1, map[string][]int32{"isr-topic": {0}})["isr-topic-0"].ErrorCode; code != kerr.ElectionNotNeeded.Code {
		t.Errorf("unclean election of a led partition: %v", kerr.ErrorForCode(code))
	}

	// The preferred leader goes away: another replica leads.
	if err := brokers[preferred].Close(); err != nil {
		t.Logf("close broker %d: %v", preferred, err)
	}
	delete(brokers, preferred)
	cl = client()
	var p1 kmsg.MetadataResponseTopicPartition
	testutil.WaitFor(t, "another leader", func() bool {
		p1 = metadata(cl)
		return p1.ErrorCode == 0 && p1.Leader >= 0 && p1.Leader != preferred && p1.LeaderEpoch > p0.LeaderEpoch
	})
	if code := elect(cl, 0, map[string][]int32{"isr-topic": {0}})["isr-topic-0"].ErrorCode; code != kerr.PreferredLeaderNotAvailable.Code {
		t.Errorf("preferred election with the preferred replica gone: %v", kerr.ErrorForCode(code))
	}
	produce(cl, 3) // epoch p1.LeaderEpoch: offsets 5–7

	// It comes back and catches up; the preferred election moves
	// leadership back to it.
	brokers[preferred] = start(preferred)
	cl = client()
	testutil.WaitFor(t, "the preferred replica back in the ISR", func() bool {
		p := metadata(cl)
		return p.ErrorCode == 0 && len(p.ISR) == 3 && p.Leader == p1.Leader
	})
	if p := elect(cl, 0, map[string][]int32{"isr-topic": {0}})["isr-topic-0"]; p.ErrorCode != 0 {
		t.Fatalf("preferred election: %v (%v)", kerr.ErrorForCode(p.ErrorCode), p.ErrorMessage)
	}
	var p2 kmsg.MetadataResponseTopicPartition
	testutil.WaitFor(t, "Metadata to show the preferred leader", func() bool {
		p2 = metadata(cl)
		return p2.ErrorCode == 0 && p2.Leader == preferred && p2.LeaderEpoch > p1.LeaderEpoch
	})
	t.Logf("leaders %d (epoch %d), %d (epoch %d), %d (epoch %d)", p0.Leader, p0.LeaderEpoch, p1.Leader, p1.LeaderEpoch, p2.Leader, p2.LeaderEpoch)
	leader := cl.Broker(int(preferred))
	testutil.WaitFor(t, "the preferred replica to lead", func() bool {
		st, err := brokers[preferred].isr.mgr.Status("isr-topic-0")
		return err == nil && st.LeaderEpoch == p2.LeaderEpoch && st.Role.String() == "leader"
	})
	produce(cl, 2) // epoch p2.LeaderEpoch: offsets 8–9

	// OffsetForLeaderEpoch: where each epoch ended, and its refusals.
	epochEnd := func(b *kgo.Broker, topic string, current, epoch int32) kmsg.OffsetForLeaderEpochResponseTopicPartition {
		t.Helper()
		req := kmsg.NewPtrOffsetForLeaderEpochRequest()
		req.ReplicaID = -1
		rt := kmsg.NewOffsetForLeaderEpochRequestTopic()
		rt.Topic = topic
		rp := kmsg.NewOffsetForLeaderEpochRequestTopicPartition()
		rp.CurrentLeaderEpoch, rp.LeaderEpoch = current, epoch
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		resp, err := req.RequestWith(ctx, b)
		if err != nil {
			t.Fatalf("offset for leader epoch: %v", err)
		}
		return resp.Topics[0].Partitions[0]
	}
	for _, tc := range []struct {
		name           string
		current, epoch int32
		want           *kerr.Error
		endEpoch       int32
		endOffset      int64
	}{
		{"the first leader's epoch", p2.LeaderEpoch, p0.LeaderEpoch, nil, p0.LeaderEpoch, 5},
		{"the failover's epoch", p2.LeaderEpoch, p1.LeaderEpoch, nil, p1.LeaderEpoch, 8},
		{"the current epoch", -1, p2.LeaderEpoch, nil, p2.LeaderEpoch, 10},
		{"a newer epoch", -1, p2.LeaderEpoch + 5, nil, -1, -1},
		{"fenced", p2.LeaderEpoch - 1, p0.LeaderEpoch, kerr.FencedLeaderEpoch, -1, -1},
		{"unknown epoch", p2.LeaderEpoch + 1, p0.LeaderEpoch, kerr.UnknownLeaderEpoch, -1, -1},
	} {
		p := epochEnd(leader, "isr-topic", tc.current, tc.epoch)
		if kerr.ErrorForCode(p.ErrorCode) != errOrNil(tc.want) || p.LeaderEpoch != tc.endEpoch || p.EndOffset != tc.endOffset {
			t.Errorf("%s: %v epoch %d end %d, want %v epoch %d end %d", tc.name, kerr.ErrorForCode(p.ErrorCode),
				p.LeaderEpoch, p.EndOffset, tc.want, tc.endEpoch, tc.endOffset)
		}
	}
	if code := epochEnd(cl.Broker(int(p1.Leader)), "isr-topic", p2.LeaderEpoch, p0.LeaderEpoch).ErrorCode; code != kerr.NotLeaderForPartition.Code {
		t.Errorf("asked of a follower: %v", kerr.ErrorForCode(code))
	}

	// Fetch and ListOffsets check the leader epoch.
	for _, tc := range []struct {
		epoch int32
		want  *kerr.Error
	}{{p2.LeaderEpoch, nil}, {-1, nil}, {p1.LeaderEpoch, kerr.FencedLeaderEpoch}, {p2.LeaderEpoch + 1, kerr.UnknownLeaderEpoch}} {
		fetch := kmsg.NewPtrFetchRequest()
		fetch.ReplicaID, fetch.MaxBytes, fetch.MaxWaitMillis = -1, 1<<20, 10
		ft := kmsg.NewFetchRequestTopic()
		ft.Topic, ft.TopicID = "isr-topic", topicID
		fp := kmsg.NewFetchRequestTopicPartition()
		fp.CurrentLeaderEpoch, fp.PartitionMaxBytes = tc.epoch, 1<<20
		ft.Partitions = append(ft.Partitions, fp)
		fetch.Topics = append(fetch.Topics, ft)
		fr, err := fetch.RequestWith(ctx, leader)
		if err != nil {
			t.Fatal(err)
		}
		if got := kerr.ErrorForCode(fr.Topics[0].Partitions[0].ErrorCode); got != errOrNil(tc.want) {
			t.Errorf("fetch at leader epoch %d: %v, want %v", tc.epoch, got, tc.want)
		}
		list := kmsg.NewPtrListOffsetsRequest()
		list.ReplicaID = -1
		lt := kmsg.NewListOffsetsRequestTopic()
		lt.Topic = "isr-topic"
		lp := kmsg.NewListOffsetsRequestTopicPartition()
		lp.Timestamp, lp.CurrentLeaderEpoch = -1, tc.epoch
		lt.Partitions = append(lt.Partitions, lp)
		list.Topics = append(list.Topics, lt)
		lr, err := list.RequestWith(ctx, leader)
		if err != nil {
			t.Fatal(err)
		}
		lpr := lr.Topics[0].Partitions[0]
		if got := kerr.ErrorForCode(lpr.ErrorCode); got != errOrNil(tc.want) || tc.want == nil && lpr.Offset != 10 {
			t.Errorf("list offsets at leader epoch %d: %v offset %d, want %v", tc.epoch, got, lpr.Offset, tc.want)
		}
	}

	// DescribeLogDirs: each broker's ISR data directory with its replica
	// of isr-topic (and no ledger-mode topic).
	for id, b := range brokers {
		req := kmsg.NewPtrDescribeLogDirsRequest()
		resp, err := req.RequestWith(ctx, cl.Broker(int(id)))
		if err != nil || resp.ErrorCode != 0 || len(resp.Dirs) != 1 {
			t.Fatalf("broker %d: describe log dirs: %v %+v", id, err, resp)
		}
		d := resp.Dirs[0]
		if d.Dir != b.cfg.ISR.Dir || d.ErrorCode != 0 || d.TotalBytes <= 0 || d.UsableBytes <= 0 || d.UsableBytes > d.TotalBytes {
			t.Errorf("broker %d: dir %+v, want %s with its file system's sizes", id, d, b.cfg.ISR.Dir)
		}
		var topics []string
		for _, rt := range d.Topics {
			topics = append(topics, rt.Topic)
			for _, p := range rt.Partitions {
				if rt.Topic == "isr-topic" && (p.Size <= 0 || p.OffsetLag < 0 || p.IsFuture) {
					t.Errorf("broker %d: replica %+v", id, p)
				}
			}
		}
		if len(topics) != 1 || topics[0] != "isr-topic" {
			t.Errorf("broker %d: topics %v, want only isr-topic", id, topics)
		}
	}
}

func errOrNil(e *kerr.Error) error {
	if e == nil {
		return nil
	}
	return e
}
