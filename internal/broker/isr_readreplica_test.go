package broker

import (
	"context"
	"encoding/binary"
	"fmt"
	"maps"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"

	"quire/internal/catalog"
	"quire/internal/isr/isrnode"
	"quire/internal/testutil"
)

// TestSelectReadReplica: the rack-aware selector on its own, as Kafka's
// RackAwareReplicaSelector chooses among what the leader offers it.
func TestSelectReadReplica(t *testing.T) {
	now := time.Unix(1_000, 0)
	lag := 30 * time.Second
	ago := func(d time.Duration) time.Time { return now.Add(-d) }
	leader := readReplica{id: 1, rack: "a", live: true, inISR: true, logEndOffset: 100, lastCaughtUp: now}
	// f is an in-sync follower at LEO 100, caught up a second ago.
	f := func(id int32, rack string, mod ...func(*readReplica)) readReplica {
		r := readReplica{id: id, rack: rack, live: true, inISR: true, logEndOffset: 100, lastCaughtUp: ago(time.Second)}
		for _, m := range mod {
			m(&r)
		}
		return r
	}
	leo := func(o int64) func(*readReplica) { return func(r *readReplica) { r.logEndOffset = o } }
	caughtUp := func(at time.Time) func(*readReplica) { return func(r *readReplica) { r.lastCaughtUp = at } }
	outOfISR := func(r *readReplica) { r.inISR = false }
	dead := func(r *readReplica) { r.live = false }

	for _, tc := range []struct {
		name      string
		followers []readReplica
		rack      string
		offset    int64
		want      int32
	}{
		{"empty rack id: the leader", []readReplica{f(2, "b"), f(3, "c")}, "", 50, 1},
		{"the leader in the client's rack", []readReplica{f(2, "a"), f(3, "b")}, "a", 50, 1},
		{"one follower in the rack", []readReplica{f(2, "b"), f(3, "c")}, "b", 50, 2},
		{"two in the rack: the larger LEO", []readReplica{f(2, "b", leo(90)), f(3, "b", leo(95))}, "b", 50, 3},
		{"two in the rack, same LEO: the latest caught up", []readReplica{f(2, "b", caughtUp(ago(time.Second))), f(3, "b", caughtUp(ago(5*time.Second)))}, "b", 50, 2},
		{"two in the rack, all equal: the lower id", []readReplica{f(3, "b"), f(2, "b")}, "b", 50, 2},
		{"the follower in the rack out of the ISR", []readReplica{f(2, "b", outOfISR), f(3, "c")}, "b", 50, 1},
		{"out of the ISR, another in the rack", []readReplica{f(2, "b", outOfISR, leo(100)), f(3, "b", leo(60))}, "b", 50, 3},
		{"the follower in the rack not live", []readReplica{f(2, "b", dead)}, "b", 50, 1},
		{"the follower's LEO below the fetch offset", []readReplica{f(2, "b", leo(40))}, "b", 50, 1},
		{"the follower's LEO at the fetch offset", []readReplica{f(2, "b", leo(50))}, "b", 50, 2},
		{"the follower's LEO unknown", []readReplica{f(2, "b", leo(-1))}, "b", 0, 1},
		{"the follower not caught up within the lag time", []readReplica{f(2, "b", caughtUp(ago(lag+time.Millisecond)))}, "b", 50, 1},
		{"the follower caught up exactly the lag time ago", []readReplica{f(2, "b", caughtUp(ago(lag)))}, "b", 50, 2},
		{"the follower never caught up", []readReplica{f(2, "b", caughtUp(time.Time{}))}, "b", 50, 1},
		{"no replica in the rack", []readReplica{f(2, "b"), f(3, "c")}, "d", 50, 1},
		{"no followers", nil, "b", 50, 1},
	} {
		if got := selectReadReplica(leader, tc.followers, tc.rack, tc.offset, now, lag); got != tc.want {
			t.Errorf("%s: chose %d, want %d", tc.name, got, tc.want)
		}
	}
}

func TestParseReplicaSelector(t *testing.T) {
	for _, tc := range []struct {
		name string
		want ReplicaSelector
		ok   bool
	}{{"", SelectLeader, true}, {"leader", SelectLeader, true}, {"rack-aware", SelectRackAware, true}, {"RackAwareReplicaSelector", 0, false}} {
		got, err := ParseReplicaSelector(tc.name)
		if (err == nil) != tc.ok || (tc.ok && got != tc.want) {
			t.Errorf("ParseReplicaSelector(%q) = %v, %v; want %v (ok %v)", tc.name, got, err, tc.want, tc.ok)
		}
		if tc.ok && tc.name != "" && got.String() != tc.name {
			t.Errorf("%v prints as %q, want %q", got, got.String(), tc.name)
		}
	}
}

// batchesFrom counts the record batches a client read, by the broker that
// served each (kgo's HookFetchBatchRead).
type batchesFrom struct {
	mu     sync.Mutex
	byNode map[int32]int
}

func (h *batchesFrom) OnFetchBatchRead(meta kgo.BrokerMetadata, _ string, _ int32, _ kgo.FetchBatchMetrics) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.byNode[meta.NodeID]++
}

func (h *batchesFrom) counts() map[int32]int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return maps.Clone(h.byNode)
}

// metricValue is the value of the metric name on b (0 when absent).
func metricValue(t *testing.T, b *Broker, name string) float64 {
	t.Helper()
	mfs, err := b.cfg.Registerer.(*prometheus.Registry).Gather()
	if err != nil {
		t.Fatal(err)
	}
	v := 0.0
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				v += m.GetGauge().GetValue() + m.GetCounter().GetValue()
			}
		}
	}
	return v
}

// isrTopic sets the namespace to ISR mode, creates topic (one partition,
// three replicas, configs) and waits until all three are in sync; it
// returns the partition as Metadata shows it.
func isrTopic(ctx context.Context, t *testing.T, brokers []*Broker, adm *kadm.Client, topic string, configs map[string]*string) kadm.PartitionDetail {
	t.Helper()
	if _, err := brokers[0].admin.SetReplication(ctx, "public/default",
		catalog.Replication{Mode: catalog.ModeISR, Factor: 3, MinInSyncReplicas: 2}); err != nil {
		t.Fatal(err)
	}
	if created, err := adm.CreateTopic(ctx, 1, 3, configs, topic); err != nil || created.Err != nil {
		t.Fatalf("create %s: %v %v", topic, err, created.Err)
	}
	var p kadm.PartitionDetail
	testutil.WaitFor(t, topic+" led, every replica in sync", func() bool {
		md, err := adm.Metadata(ctx, topic)
		if err != nil || len(md.Topics[topic].Partitions) != 1 {
			return false
		}
		p = md.Topics[topic].Partitions[0]
		return p.Err == nil && p.Leader >= 0 && len(p.ISR) == 3
	})
	return p
}

// TestISRFollowerFetching: three brokers in three zones, a consumer whose
// client.rack is a follower's zone. With the rack-aware selector the
// leader sends it to that follower, every batch it reads comes from there
// and the follower's metrics count them; with the default selector every
// batch comes from the leader. Either way it reads every produced record
// once, in order.
func TestISRFollowerFetching(t *testing.T) {
	for _, selector := range []ReplicaSelector{SelectRackAware, SelectLeader} {
		t.Run(selector.String(), func(t *testing.T) {
			c := newTestCluster(t)
			brokers := c.startISRBrokers(3, func(cfg *Config) { cfg.ISR.ReplicaSelector = selector })
			ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
			defer cancel()
			var seeds []string
			byID := map[int32]*Broker{}
			for _, b := range brokers {
				seeds = append(seeds, b.cfg.KafkaAdvertised)
				byID[b.ID()] = b
			}
			adm := kadm.NewClient(newClient(t, seeds[0], kgo.SeedBrokers(seeds...)))
			p := isrTopic(ctx, t, brokers, adm, "nearby", nil)
			leader := byID[p.Leader]
			var follower *Broker
			for _, r := range p.Replicas {
				if r != p.Leader {
					follower = byID[r]
					break
				}
			}

			const n = 600
			prod := newClient(t, seeds[0], kgo.SeedBrokers(seeds...), kgo.RequiredAcks(kgo.AllISRAcks()), kgo.DefaultProduceTopic("nearby"))
			for i := 0; i < n; i += 100 { // several produce requests: several batches
				var recs []*kgo.Record
				for j := i; j < i+100; j++ {
					recs = append(recs, &kgo.Record{Value: fmt.Appendf(nil, "v-%d", j)})
				}
				if err := prod.ProduceSync(ctx, recs...).FirstErr(); err != nil {
					t.Fatal(err)
				}
			}

			hook := &batchesFrom{byNode: map[int32]int{}}
			cons := newClient(t, seeds[0], kgo.SeedBrokers(seeds...), kgo.ConsumeTopics("nearby"),
				kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.Rack(follower.cfg.Zone), kgo.WithHooks(hook))
			next := int64(0)
			for next < n {
				fs := cons.PollFetches(ctx)
				if err := fs.Err0(); err != nil {
					t.Fatalf("poll after %d records: %v", next, err)
				}
				fs.EachRecord(func(r *kgo.Record) {
					if r.Offset != next || string(r.Value) != fmt.Sprintf("v-%d", next) {
						t.Fatalf("record %q at offset %d, want v-%d at %d", r.Value, r.Offset, next, next)
					}
					next++
				})
			}

			from, want := hook.counts(), leader
			if selector == SelectRackAware {
				want = follower
			}
			t.Logf("selector %s, leader %d, client in %s: batches by broker %v", selector, leader.ID(), follower.cfg.Zone, from)
			if len(from) != 1 || from[want.ID()] == 0 {
				t.Fatalf("batches by broker %v: want all from broker %d", from, want.ID())
			}
			served, redirects := metricValue(t, follower, "quire_isr_follower_fetch_records_total"), metricValue(t, leader, "quire_isr_preferred_read_replica_total")
			if selector == SelectRackAware && (served < n || redirects < 1) {
				t.Fatalf("metrics: the follower served %v records (want ≥ %d), the leader redirected %v times (want ≥ 1)", served, n, redirects)
			}
			if selector == SelectLeader && (served != 0 || redirects != 0) {
				t.Fatalf("metrics without a selector: the follower served %v records, the leader redirected %v times; want none", served, redirects)
			}
		})
	}
}

// TestISRFollowerReadsStopAtItsHighWatermark: a follower whose log holds
// records past its HW (acks=1 writes while the HW cannot advance: the ISR
// is below the topic's min.insync.replicas) hands a consumer's Fetch v11+
// records only below its HW; an offset between its HW and its LEO is
// answered empty, after the long-poll; past its LEO OFFSET_OUT_OF_RANGE;
// a newer leader epoch UNKNOWN_LEADER_EPOCH (KIP-320, against the epoch
// the follower knows). Fetch v10 and ListOffsets stay the leader's:
// NOT_LEADER_OR_FOLLOWER there.
func TestISRFollowerReadsStopAtItsHighWatermark(t *testing.T) {
	c := newTestCluster(t)
	brokers := c.startISRBrokers(3)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	var seeds []string
	byID := map[int32]*Broker{}
	for _, b := range brokers {
		seeds = append(seeds, b.cfg.KafkaAdvertised)
		byID[b.ID()] = b
	}
	adm := kadm.NewClient(newClient(t, seeds[0], kgo.SeedBrokers(seeds...)))
	three := "3"
	p := isrTopic(ctx, t, brokers, adm, "strict", map[string]*string{"min.insync.replicas": &three})
	leader := byID[p.Leader]
	var follower, other *Broker
	for _, r := range p.Replicas {
		switch {
		case r == p.Leader:
		case follower == nil:
			follower = byID[r]
		default:
			other = byID[r]
		}
	}
	const name = "strict-0"
	const committed, extra = 10, 5
	produce := func(acks kgo.Acks, n int, opts ...kgo.Opt) {
		t.Helper()
		cl := newClient(t, leader.cfg.KafkaAdvertised, append([]kgo.Opt{kgo.RequiredAcks(acks), kgo.DefaultProduceTopic("strict")}, opts...)...)
		var recs []*kgo.Record
		for i := range n {
			recs = append(recs, &kgo.Record{Value: fmt.Appendf(nil, "r-%d", i)})
		}
		if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	produce(kgo.AllISRAcks(), committed)
	if err := other.Close(); err != nil {
		t.Logf("close broker %d: %v", other.ID(), err)
	}
	testutil.WaitFor(t, "the ISR without the closed broker", func() bool {
		rec, ok := leader.isr.record(name)
		return ok && len(rec.ISR) == 2
	})
	produce(kgo.LeaderAck(), extra, kgo.DisableIdempotentWrite())
	var st isrnode.Status
	testutil.WaitFor(t, "the follower holding the acks=1 records", func() bool {
		var err error
		st, err = follower.isr.mgr.Status(name)
		return err == nil && st.LogEndOffset == committed+extra
	})
	if lst, err := leader.isr.mgr.Status(name); err != nil || lst.HighWatermark != committed || st.HighWatermark != committed {
		t.Fatalf("the leader's HW %d (%v), the follower's %d: want both %d (the ISR is below min.insync.replicas)", lst.HighWatermark, err, st.HighWatermark, committed)
	}

	fetchAt := func(version int16, offset int64, epoch int32) kmsg.FetchResponseTopicPartition {
		t.Helper()
		vs := kversion.Stable()
		vs.SetMaxKeyVersion(kmsg.Fetch.Int16(), version)
		cl := newClient(t, follower.cfg.KafkaAdvertised, kgo.MaxVersions(vs))
		req := kmsg.NewPtrFetchRequest()
		req.ReplicaID, req.MaxWaitMillis, req.MinBytes, req.MaxBytes = -1, 200, 1, 1<<20
		rt := kmsg.NewFetchRequestTopic()
		rt.Topic = "strict"
		rp := kmsg.NewFetchRequestTopicPartition()
		rp.FetchOffset, rp.CurrentLeaderEpoch, rp.PartitionMaxBytes, rp.LogStartOffset = offset, epoch, 1<<20, -1
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		resp, err := req.RequestWith(ctx, cl.Broker(int(follower.ID())))
		if err != nil {
			t.Fatal(err)
		}
		if resp.Version != version {
			t.Fatalf("fetch v%d went out as v%d", version, resp.Version)
		}
		return resp.Topics[0].Partitions[0]
	}
	// lastOffset is the last offset of the batches (-1: none).
	lastOffset := func(raw []byte) int64 {
		t.Helper()
		last := int64(-1)
		for len(raw) > 0 {
			var rb kmsg.RecordBatch
			if len(raw) < 12 {
				t.Fatalf("%d bytes of a batch", len(raw))
			}
			size := 12 + int(binary.BigEndian.Uint32(raw[8:]))
			if err := rb.ReadFrom(raw[:size]); err != nil {
				t.Fatal(err)
			}
			last, raw = rb.FirstOffset+int64(rb.LastOffsetDelta), raw[size:]
		}
		return last
	}

	servedBefore := metricValue(t, follower, "quire_isr_follower_fetch_records_total")
	got := fetchAt(12, 0, p.LeaderEpoch)
	if got.ErrorCode != 0 || got.HighWatermark != committed || lastOffset(got.RecordBatches) != committed-1 {
		t.Fatalf("fetch from 0: %v, HW %d, records up to %d; want records up to %d, HW %d",
			kerr.ErrorForCode(got.ErrorCode), got.HighWatermark, lastOffset(got.RecordBatches), committed-1, committed)
	}
	if served := metricValue(t, follower, "quire_isr_follower_fetch_records_total") - servedBefore; served != committed {
		t.Fatalf("the follower's metric counted %v records served, want %d", served, committed)
	}
	for _, tc := range []struct {
		name    string
		version int16
		offset  int64
		epoch   int32
		want    *kerr.Error
	}{
		{"at its HW", 12, committed, p.LeaderEpoch, nil},
		{"between its HW and its LEO", 11, committed + 2, -1, nil},
		{"at its LEO", 12, committed + extra, p.LeaderEpoch, nil},
		{"past its LEO", 12, committed + extra + 1, p.LeaderEpoch, kerr.OffsetOutOfRange},
		{"a newer leader epoch", 12, 0, p.LeaderEpoch + 1, kerr.UnknownLeaderEpoch},
		{"Fetch v10", 10, 0, -1, kerr.NotLeaderForPartition},
	} {
		got := fetchAt(tc.version, tc.offset, tc.epoch)
		if kerr.ErrorForCode(got.ErrorCode) != errOrNil(tc.want) || len(got.RecordBatches) != 0 || got.PreferredReadReplica != -1 {
			t.Errorf("%s (v%d at %d): %v, %d bytes of records, preferred replica %d; want %v and none",
				tc.name, tc.version, tc.offset, kerr.ErrorForCode(got.ErrorCode), len(got.RecordBatches), got.PreferredReadReplica, tc.want)
		}
	}

	list := kmsg.NewPtrListOffsetsRequest()
	list.ReplicaID = -1
	lt := kmsg.NewListOffsetsRequestTopic()
	lt.Topic = "strict"
	lp := kmsg.NewListOffsetsRequestTopicPartition()
	lp.Timestamp = -1
	lt.Partitions = append(lt.Partitions, lp)
	list.Topics = append(list.Topics, lt)
	lr, err := list.RequestWith(ctx, newClient(t, follower.cfg.KafkaAdvertised).Broker(int(follower.ID())))
	if err != nil {
		t.Fatal(err)
	}
	if code := lr.Topics[0].Partitions[0].ErrorCode; code != kerr.NotLeaderForPartition.Code {
		t.Fatalf("ListOffsets of a follower: %v, want NOT_LEADER_OR_FOLLOWER", kerr.ErrorForCode(code))
	}
}
