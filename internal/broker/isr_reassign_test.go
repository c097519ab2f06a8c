package broker

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"quire/internal/catalog"
	"quire/internal/isr/isrnode"
	"quire/internal/testutil"
)

// isrReassignCluster starts n ISR brokers with the namespace in ISR mode
// (RF rf, min.insync.replicas 2), creates the ledger-mode topic "ledger"
// before switching, and returns the brokers, their seeds and an admin
// client.
func isrReassignCluster(t *testing.T, ctx context.Context, n int, rf int32, mods ...func(*Config)) ([]*Broker, []string, *kadm.Client) {
	t.Helper()
	c := newTestCluster(t)
	brokers := c.startISRBrokers(n, mods...)
	var seeds []string
	for _, b := range brokers {
		seeds = append(seeds, b.cfg.KafkaAdvertised)
	}
	adm := kadm.NewClient(newClient(t, seeds[0], kgo.SeedBrokers(seeds...)))
	if _, err := adm.CreateTopic(ctx, 1, -1, nil, "ledger"); err != nil {
		t.Fatal(err)
	}
	if _, err := brokers[0].admin.SetReplication(ctx, "public/default",
		catalog.Replication{Mode: catalog.ModeISR, Factor: rf, MinInSyncReplicas: 2}); err != nil {
		t.Fatal(err)
	}
	return brokers, seeds, adm
}

// partitionOf waits until partition 0 of topic is led with every replica
// in sync, and returns it.
func partitionOf(t *testing.T, ctx context.Context, adm *kadm.Client, topic string, rf int) kadm.PartitionDetail {
	t.Helper()
	var p kadm.PartitionDetail
	testutil.WaitFor(t, topic+" led, every replica in sync", func() bool {
		md, err := adm.Metadata(ctx, topic)
		if err != nil || len(md.Topics[topic].Partitions) == 0 {
			return false
		}
		p = md.Topics[topic].Partitions[0]
		return p.Err == nil && p.Leader >= 0 && len(p.Replicas) == rf && len(p.ISR) == rf
	})
	return p
}

// reassign asks for one partition's reassignment (nil: cancel) and returns
// its answer.
func reassign(t *testing.T, ctx context.Context, adm *kadm.Client, topic string, p int32, replicas []int32) kadm.AlterPartitionAssignmentsResponse {
	t.Helper()
	var req kadm.AlterPartitionAssignmentsReq
	req.Assign(topic, p, replicas)
	resps, err := adm.AlterPartitionAssignments(ctx, req)
	if err != nil {
		t.Fatalf("alter partition assignments of %s-%d to %v: %v", topic, p, replicas, err)
	}
	return resps[topic][p]
}

// waitReassigned polls until topic's partition 0 has exactly replicas, all
// in sync, and no reassignment of it is listed.
func waitReassigned(t *testing.T, ctx context.Context, adm *kadm.Client, topic string, replicas []int32) kadm.PartitionDetail {
	t.Helper()
	var p kadm.PartitionDetail
	testutil.WaitForWithin(t, 60*time.Second, fmt.Sprintf("%s-0 reassigned to %v", topic, replicas), func() bool {
		listed, err := adm.ListPartitionReassignments(ctx, kadm.TopicsSet{topic: {0: {}}})
		if err != nil || len(listed[topic]) > 0 {
			return false
		}
		md, err := adm.Metadata(ctx, topic)
		if err != nil || len(md.Topics[topic].Partitions) == 0 {
			return false
		}
		p = md.Topics[topic].Partitions[0]
		return p.Err == nil && p.Leader >= 0 && slices.Equal(p.Replicas, replicas) && len(p.ISR) == len(replicas)
	})
	return p
}

// TestISRReassignUnderLoad moves an ISR partition, leader included, to
// another broker while an idempotent acks=all producer writes to it: the
// reassignment is answered at once, completes by itself (the new replica
// catches up and joins the ISR, the leader moves to the target), the
// removed broker's replica directory is deleted, and every acknowledged
// record is consumed once, in order. The refusals come back with Kafka's
// codes.
func TestISRReassignUnderLoad(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	brokers, seeds, adm := isrReassignCluster(t, ctx, 4, 3)
	if _, err := adm.CreateTopic(ctx, 1, 3, nil, "moving"); err != nil {
		t.Fatal(err)
	}
	p0 := partitionOf(t, ctx, adm, "moving", 3)
	byID := map[int32]*Broker{}
	var spare int32 = -1
	for _, b := range brokers {
		byID[b.ID()] = b
		if !slices.Contains(p0.Replicas, b.ID()) {
			spare = b.ID()
		}
	}
	// The target: the spare broker in place of the leader.
	target := []int32{spare}
	for _, r := range p0.Replicas {
		if r != p0.Leader {
			target = append(target, r)
		}
	}

	// The load: one idempotent producer, values in order, each acked one
	// remembered with its offset.
	prod := newClient(t, seeds[0], kgo.SeedBrokers(seeds...), kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.DefaultProduceTopic("moving"), kgo.ProducerLinger(time.Millisecond))
	var mu sync.Mutex
	acked := map[int]int64{} // value → offset
	var failed []error
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			v := i
			prod.Produce(ctx, &kgo.Record{Value: fmt.Appendf(nil, "%08d", v)}, func(r *kgo.Record, err error) {
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					failed = append(failed, err)
					return
				}
				acked[v] = r.Offset
			})
		}
	}()
	ackedCount := func() int { mu.Lock(); defer mu.Unlock(); return len(acked) }
	testutil.WaitFor(t, "records acknowledged before the move", func() bool { return ackedCount() >= 2000 })

	if r := reassign(t, ctx, adm, "moving", 0, target); r.Err != nil {
		t.Fatalf("reassign to %v: %v (%s)", target, r.Err, r.ErrMessage)
	}
	before := ackedCount()
	moved := waitReassigned(t, ctx, adm, "moving", target)
	if moved.Leader == p0.Leader || !slices.Contains(target, moved.Leader) || moved.LeaderEpoch <= p0.LeaderEpoch {
		t.Fatalf("after the move: leader %d (epoch %d), was %d (epoch %d); want one of %v under a newer epoch",
			moved.Leader, moved.LeaderEpoch, p0.Leader, p0.LeaderEpoch, target)
	}
	testutil.WaitFor(t, "records acknowledged after the move", func() bool { return ackedCount() >= before+2000 })
	close(stop)
	wg.Wait()
	if err := prod.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	t.Logf("moved %v -> %v under load: %d records acknowledged (%d before the request), %d failed", p0.Replicas, target, len(acked), before, len(failed))
	maxOffset, last := int64(-1), -1
	for v, o := range acked {
		maxOffset, last = max(maxOffset, o), max(last, v)
	}
	mu.Unlock()

	// The removed broker's replica and its directory are gone; the new
	// one's is there.
	removed := byID[p0.Leader]
	testutil.WaitFor(t, "the removed replica's directory deleted", func() bool {
		_, err := os.Stat(filepath.Join(removed.cfg.ISR.Dir, isrnode.PartitionName("moving", 0)))
		_, serr := removed.isr.mgr.Status(isrnode.PartitionName("moving", 0))
		return errors.Is(err, os.ErrNotExist) && serr != nil
	})
	if _, err := os.Stat(filepath.Join(byID[spare].cfg.ISR.Dir, isrnode.PartitionName("moving", 0))); err != nil {
		t.Fatalf("the new replica's directory: %v", err)
	}

	// Every acknowledged record, once, in order.
	cons := newClient(t, seeds[0], kgo.SeedBrokers(seeds...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{"moving": {0: kgo.NewOffset().AtStart()}}))
	seen := map[int]int{}
	prev := -1
	for next := int64(0); next <= maxOffset; {
		fs := cons.PollFetches(ctx)
		if err := fs.Err0(); err != nil {
			t.Fatalf("consume after offset %d: %v", next, err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			v, err := strconv.Atoi(string(r.Value))
			if err != nil || r.Offset != next {
				t.Fatalf("record %q at offset %d, want offset %d", r.Value, r.Offset, next)
			}
			if v <= prev {
				t.Fatalf("value %d at offset %d after %d: out of order or twice", v, r.Offset, prev)
			}
			prev, next = v, r.Offset+1
			seen[v]++
		})
	}
	mu.Lock()
	defer mu.Unlock()
	for v, o := range acked {
		if seen[v] != 1 {
			t.Fatalf("acknowledged value %d (offset %d) consumed %d times", v, o, seen[v])
		}
	}

	// Refusals, as Kafka answers them.
	for _, tc := range []struct {
		topic    string
		p        int32
		replicas []int32
		want     error
	}{
		{"moving", 0, []int32{spare, spare}, kerr.InvalidReplicaAssignment},
		{"moving", 0, []int32{}, kerr.InvalidReplicaAssignment},
		{"moving", 0, []int32{spare, 99}, kerr.InvalidReplicaAssignment},
		{"moving", 0, nil, kerr.NoReassignmentInProgress},
		{"moving", 5, target, kerr.UnknownTopicOrPartition},
		{"nope", 0, target, kerr.UnknownTopicOrPartition},
		{"ledger", 0, target, kerr.InvalidRequest},
	} {
		if r := reassign(t, ctx, adm, tc.topic, tc.p, tc.replicas); !errors.Is(r.Err, tc.want) {
			t.Errorf("reassign %s-%d to %v: %v (%s), want %v", tc.topic, tc.p, tc.replicas, r.Err, r.ErrMessage, tc.want)
		}
	}
	// KIP-860: a change of replication factor refused when not allowed.
	var req kadm.AlterPartitionAssignmentsReq
	req.Assign("moving", 0, target[:2])
	resps, err := adm.AlterPartitionAssignments(kadm.ForbidAlterRf(ctx), req)
	if err != nil || !errors.Is(resps["moving"][0].Err, kerr.InvalidReplicationFactor) {
		t.Errorf("RF 3 -> 2 with allow_replication_factor_change=false: %v %+v", err, resps)
	}
	// Nothing in progress is listed, for every topic (null topics).
	lreq := kmsg.NewPtrListPartitionReassignmentsRequest()
	lresp, err := lreq.RequestWith(ctx, newClient(t, seeds[0]))
	if err != nil || lresp.ErrorCode != 0 || len(lresp.Topics) != 0 {
		t.Fatalf("list every reassignment: %v %+v", err, lresp)
	}
}

// TestISRReassignThrottled: a reassignment throttled as
// kafka-reassign-partitions --throttle does it (both rates set on every
// broker through the cluster-wide dynamic broker configs, the topic's
// leader throttled replicas the current ones and its follower throttled
// replica the new one) copies the partition at about the rate: the new
// replica's log grows, between a quarter and three quarters of the
// partition, at no more than 1.5 times the rate (and not slower than a
// fifth of it). While it runs ListPartitionReassignments lists it and
// acks=all writes still succeed (in-sync replication is not held); the
// throttle's bytes were counted on both sides. The configs are shown and
// removed as the tool does.
func TestISRReassignThrottled(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// Short sampling windows (Kafka's replication.quota.window.*), so
	// that the first burst the sampled rate allows, about a sample span's
	// worth, is small beside the partition.
	brokers, seeds, adm := isrReassignCluster(t, ctx, 3, 2, func(cfg *Config) {
		cfg.ISR.ThrottleWindow = isrnode.ThrottleWindow{Samples: 11, Size: 100 * time.Millisecond}
	})
	if _, err := adm.CreateTopic(ctx, 1, 2, nil, "big"); err != nil {
		t.Fatal(err)
	}
	p0 := partitionOf(t, ctx, adm, "big", 2)
	byID := map[int32]*Broker{}
	var spare int32 = -1
	for _, b := range brokers {
		byID[b.ID()] = b
		if !slices.Contains(p0.Replicas, b.ID()) {
			spare = b.ID()
		}
	}
	// 4 MiB of incompressible records, acknowledged by both replicas.
	const size = 4 << 20
	prod := newClient(t, seeds[0], kgo.SeedBrokers(seeds...), kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.DefaultProduceTopic("big"), kgo.ProducerBatchCompression(kgo.NoCompression()),
		// Small batches: a Fetch always carries at least one whole batch
		// (KIP-74), so the batch size is the throttle's granularity.
		kgo.ProducerBatchMaxBytes(16<<10))
	var recs []*kgo.Record
	for range size / 1024 {
		v := make([]byte, 1024)
		rand.Read(v)
		recs = append(recs, &kgo.Record{Value: v})
	}
	if err := prod.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}

	// The throttle, as kafka-reassign-partitions --throttle sets it.
	const rate = 512 << 10 // bytes/s
	rateStr := strconv.Itoa(rate)
	rs, err := adm.AlterBrokerConfigs(ctx, []kadm.AlterConfig{{Name: leaderThrottleRate, Value: &rateStr}, {Name: followerThrottleRate, Value: &rateStr}})
	if err != nil || rs[0].Err != nil {
		t.Fatalf("set the throttle rates: %v %+v", err, rs)
	}
	var leaders string
	for i, r := range p0.Replicas {
		if i > 0 {
			leaders += ","
		}
		leaders += fmt.Sprintf("0:%d", r)
	}
	followers := fmt.Sprintf("0:%d", spare)
	if rs, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Name: leaderThrottledReplicas, Value: &leaders},
		{Name: followerThrottledReplica, Value: &followers}}, "big"); err != nil || rs[0].Err != nil {
		t.Fatalf("set the throttled replicas: %v %+v", err, rs)
	}
	described, err := adm.DescribeBrokerConfigs(ctx, spare)
	if err != nil {
		t.Fatal(err)
	}
	var shown *kadm.Config
	if rc, err := described.On(strconv.Itoa(int(spare)), nil); err == nil {
		for i := range rc.Configs {
			if rc.Configs[i].Key == followerThrottleRate {
				shown = &rc.Configs[i]
			}
		}
	}
	if shown == nil || shown.Value == nil || *shown.Value != rateStr || shown.Source != kmsg.ConfigSourceDynamicDefaultBrokerConfig {
		t.Fatalf("%s of broker %d described as %+v; want %s from the dynamic default", followerThrottleRate, spare, shown, rateStr)
	}
	if rs, err := adm.AlterBrokerConfigs(ctx, []kadm.AlterConfig{{Name: "num.partitions", Value: &rateStr}}); err == nil && !errors.Is(rs[0].Err, kerr.InvalidRequest) {
		t.Fatalf("a static broker config altered: %+v", rs)
	}
	// Every broker took the throttle before the move starts.
	testutil.WaitFor(t, "the throttle on every broker", func() bool {
		return byID[spare].isr.mgr.ThrottleOf("big", 0).Follower && byID[p0.Leader].isr.mgr.ThrottleOf("big", 0).Leader
	})

	target := append([]int32{spare}, p0.Replicas[1:]...) // the first replica (the leader) moves to the spare broker
	if r := reassign(t, ctx, adm, "big", 0, target); r.Err != nil {
		t.Fatalf("reassign: %v (%s)", r.Err, r.ErrMessage)
	}
	listed, err := adm.ListPartitionReassignments(ctx, kadm.TopicsSet{"big": {0: {}}})
	if l := listed["big"][0]; err != nil || !slices.Equal(l.AddingReplicas, []int32{spare}) || !slices.Equal(l.RemovingReplicas, p0.Replicas[:1]) {
		t.Fatalf("listed while throttled: %v %+v", err, listed)
	}
	if n := metricValue(t, byID[p0.Leader], "kafka_server_replicamanager_reassigningpartitions"); n != 1 {
		t.Fatalf("the leader's reassigning partitions during the move: %v, want 1", n)
	}
	// The new replica's log, sampled as it grows.
	type sample struct {
		at   time.Time
		size int64
	}
	var samples []sample
	newSize := func() int64 {
		for _, rl := range byID[spare].isr.mgr.ReplicaLogs() {
			if rl.Partition == isrnode.PartitionName("big", 0) {
				return rl.Size
			}
		}
		return 0
	}
	acks := 0
	testutil.WaitForWithin(t, 90*time.Second, "the throttled copy past three quarters of the partition", func() bool {
		samples = append(samples, sample{time.Now(), newSize()})
		if len(samples)%200 == 0 {
			// In-sync replication goes on: acks=all writes succeed.
			if err := prod.ProduceSync(ctx, &kgo.Record{Value: []byte("during")}).FirstErr(); err != nil {
				t.Fatalf("acks=all write during the throttled move: %v", err)
			}
			acks++
		}
		return samples[len(samples)-1].size >= size*3/4
	})
	var from, to sample
	for _, s := range samples {
		if from.at.IsZero() && s.size >= size/4 {
			from = s
		}
		to = s
	}
	measured := float64(to.size-from.size) / to.at.Sub(from.at).Seconds()
	t.Logf("throttled copy: %.0f bytes/s between %d and %d bytes (%v), rate %d bytes/s (%.2f×); %d acks=all writes meanwhile",
		measured, from.size, to.size, to.at.Sub(from.at), rate, measured/rate, acks)
	if measured > 1.5*rate || measured < 0.2*rate {
		t.Fatalf("throttled copy at %.0f bytes/s, want about %d (within 0.2–1.5×)", measured, rate)
	}
	waitReassigned(t, ctx, adm, "big", target)
	testutil.WaitFor(t, "no reassigning partition on any broker", func() bool {
		for _, b := range brokers {
			if metricValue(t, b, "kafka_server_replicamanager_reassigningpartitions") != 0 {
				return false
			}
		}
		return true
	})
	leaderBytes, _ := byID[p0.Leader].isr.mgr.ThrottledBytes()
	_, followerBytes := byID[spare].isr.mgr.ThrottledBytes()
	if leaderBytes < size/2 || followerBytes < size/2 {
		t.Fatalf("throttled bytes counted: leader %d, follower %d; want most of the %d copied", leaderBytes, followerBytes, size)
	}

	// Removed as kafka-reassign-partitions --verify does: deleted.
	if rs, err := adm.AlterBrokerConfigs(ctx, []kadm.AlterConfig{{Op: kadm.DeleteConfig, Name: leaderThrottleRate},
		{Op: kadm.DeleteConfig, Name: followerThrottleRate}}); err != nil || rs[0].Err != nil {
		t.Fatalf("delete the rates: %v %+v", err, rs)
	}
	if rs, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Op: kadm.DeleteConfig, Name: leaderThrottledReplicas},
		{Op: kadm.DeleteConfig, Name: followerThrottledReplica}}, "big"); err != nil || rs[0].Err != nil {
		t.Fatalf("delete the throttled replicas: %v %+v", err, rs)
	}
	testutil.WaitFor(t, "the throttle lifted", func() bool {
		th := byID[spare].isr.mgr.ThrottleOf("big", 0)
		return !th.Leader && !th.Follower
	})
}

// TestThrottledReplicasConfig: the throttled-replicas topic configs as
// Kafka's ThrottledReplicaListValidator takes them, and what a broker reads
// of them.
func TestThrottledReplicasConfig(t *testing.T) {
	for _, tc := range []struct {
		v  string
		ok bool
	}{{"*", true}, {"", true}, {"0:1,1:2", true}, {" 0:1 , 2:3 ", true}, {"x", false}, {"0:", false}, {"-1:2", false}, {"0:1,*", false}} {
		if err := validateThrottledReplicas(leaderThrottledReplicas, tc.v); (err == nil) != tc.ok || err != nil && !errors.Is(err, kerr.InvalidConfig) {
			t.Errorf("%q: %v, want ok %v", tc.v, err, tc.ok)
		}
	}
	all, byBroker, err := parseThrottledReplicas("0:1, 3:1,2:4")
	if err != nil || all || !slices.Equal(byBroker[1], []int32{0, 3}) || !slices.Equal(byBroker[4], []int32{2}) {
		t.Fatalf("parsed %v %v %v", all, byBroker, err)
	}
	if err := validateISRConfigs(map[string]string{followerThrottledReplica: "0:1"}); err != nil {
		t.Fatalf("an ISR topic refuses %s: %v", followerThrottledReplica, err)
	}
}
