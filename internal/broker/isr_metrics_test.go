package broker

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"quire/internal/isr"
	"quire/internal/isr/isrnode"
	"quire/internal/testutil"
)

// TestReplicaLagArithmetic: the two sides' lag from what each replica
// knows, on their own.
func TestReplicaLagArithmetic(t *testing.T) {
	follower := func(leaderHW, leo int64) isrnode.Status {
		return isrnode.Status{Role: isr.RoleFollower, LeaderHighWatermark: leaderHW, LogEndOffset: leo}
	}
	for _, tc := range []struct {
		name string
		st   isrnode.Status
		want int64
		ok   bool
	}{
		{"caught up", follower(40, 40), 0, true},
		{"behind", follower(40, 25), 15, true},
		{"past the leader's HW (acks=1 records not yet committed)", follower(40, 45), 0, true},
		{"no answer yet in this leader epoch", follower(-1, 25), 0, false},
		{"a leader has no fetcher lag", isrnode.Status{Role: isr.RoleLeader, LeaderHighWatermark: 40, LogEndOffset: 30}, 0, false},
	} {
		if got, ok := followerLag(tc.st); got != tc.want || ok != tc.ok {
			t.Errorf("follower %s: lag %d (%v), want %d (%v)", tc.name, got, ok, tc.want, tc.ok)
		}
	}

	now := time.Unix(1_000, 0)
	ago := func(d time.Duration) time.Time { return now.Add(-d) }
	for _, tc := range []struct {
		name string
		f    isrnode.FollowerState
		want replicaLag
	}{
		{"at the leader's LEO", isrnode.FollowerState{LogEndOffset: 100, LastCaughtUp: ago(3 * time.Second)}, replicaLag{0, 0}},
		{"behind since 7 s", isrnode.FollowerState{LogEndOffset: 60, LastCaughtUp: ago(7 * time.Second)}, replicaLag{40, 7}},
		{"behind, never caught up in this epoch", isrnode.FollowerState{LogEndOffset: 60}, replicaLag{40, -1}},
		{"not fetched yet, in the ISR at the takeover", isrnode.FollowerState{LogEndOffset: -1, LastCaughtUp: ago(2 * time.Second)}, replicaLag{-1, 2}},
		{"not fetched, never caught up", isrnode.FollowerState{LogEndOffset: -1}, replicaLag{-1, -1}},
		{"a catch-up after the scrape's clock", isrnode.FollowerState{LogEndOffset: 90, LastCaughtUp: now.Add(time.Millisecond)}, replicaLag{10, 0}},
	} {
		if got := leaderLag(100, tc.f, now); got != tc.want {
			t.Errorf("leader view, %s: %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

// series is the value of metric name on b in the series whose labels
// include labels; false when there is none.
func series(t *testing.T, b *Broker, name string, labels map[string]string) (float64, bool) {
	t.Helper()
	mfs, err := b.cfg.Registerer.(*prometheus.Registry).Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metrics:
		for _, m := range mf.GetMetric() {
			have := map[string]string{}
			for _, lp := range m.GetLabel() {
				have[lp.GetName()] = lp.GetValue()
			}
			for k, v := range labels {
				if have[k] != v {
					continue metrics
				}
			}
			return m.GetGauge().GetValue(), true
		}
	}
	return 0, false
}

// TestISRReplicaLagMetrics: the replica-lag metrics on both sides of one
// partition (RF 3). Caught up, every follower's consumer lag and the
// brokers' max lag are 0, and the leader sees both followers 0 records
// and 0 seconds behind. One follower's broker closes while acks=1 records
// go in: the leader's records lag of it is exactly what it missed and its
// seconds lag grows from one scrape to the next. The broker comes back
// while the leader holds its replication (the leader replication throttle
// at 1 byte/s, which holds only out-of-sync followers): the follower
// learns the leader's HW and reports it is behind. Once the throttle goes
// it catches up, and every lag is 0 again.
func TestISRReplicaLagMetrics(t *testing.T) {
	c := newTestCluster(t)
	brokers := c.startISRBrokers(3)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var seeds []string
	byID := map[int32]*Broker{}
	for _, b := range brokers {
		seeds = append(seeds, b.cfg.KafkaAdvertised)
		byID[b.ID()] = b
	}
	adm := kadm.NewClient(newClient(t, seeds[0], kgo.SeedBrokers(seeds...)))
	p := isrTopic(ctx, t, brokers, adm, "lagging", nil)
	leader := byID[p.Leader]
	var followers []*Broker
	for _, r := range p.Replicas {
		if r != p.Leader {
			followers = append(followers, byID[r])
		}
	}
	stopped := followers[0]
	const name = "lagging-0"
	partition := map[string]string{"topic": "lagging", "partition": "0"}
	of := func(b *Broker) map[string]string {
		return map[string]string{"topic": "lagging", "partition": "0", "replica": strconv.Itoa(int(b.ID()))}
	}
	// produce sends n records, one produce request (one batch) each.
	produce := func(acks kgo.Acks, n int, opts ...kgo.Opt) {
		t.Helper()
		cl := newClient(t, seeds[0], append([]kgo.Opt{kgo.SeedBrokers(seeds...), kgo.RequiredAcks(acks), kgo.DefaultProduceTopic("lagging")}, opts...)...)
		for i := range n {
			if err := cl.ProduceSync(ctx, &kgo.Record{Value: fmt.Appendf(nil, "r-%d", i)}).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
	}
	// caughtUp: no lag anywhere, as the metrics show it.
	caughtUp := func(fs ...*Broker) bool {
		for _, f := range fs {
			records, okR := series(t, leader, "quire_isr_replica_lag_records", of(f))
			seconds, okS := series(t, leader, "quire_isr_replica_lag_seconds", of(f))
			lag, okL := series(t, f, "kafka_server_fetcherlagmetrics_consumerlag", partition)
			maxLag, okM := series(t, f, "kafka_server_replicafetchermanager_maxlag", map[string]string{"clientId": "Replica"})
			if !okR || !okS || !okL || !okM || records != 0 || seconds != 0 || lag != 0 || maxLag != 0 {
				return false
			}
		}
		return true
	}

	const committed, missed = 10, 20
	produce(kgo.AllISRAcks(), committed)
	testutil.WaitFor(t, "every replica caught up: no lag on either side", func() bool { return caughtUp(followers...) })
	if _, ok := series(t, leader, "kafka_server_fetcherlagmetrics_consumerlag", partition); ok {
		t.Fatal("the leader reports a fetcher lag of the partition it leads")
	}

	// The leader will hold its out-of-sync followers (only those).
	one := "1"
	if rs, err := adm.AlterBrokerConfigs(ctx, []kadm.AlterConfig{{Name: leaderThrottleRate, Value: &one}}, leader.ID()); err != nil || rs[0].Err != nil {
		t.Fatalf("set the leader throttle rate: %v %+v", err, rs)
	}
	all := "*"
	if rs, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Name: leaderThrottledReplicas, Value: &all}}, "lagging"); err != nil || rs[0].Err != nil {
		t.Fatalf("set the throttled replicas: %v %+v", err, rs)
	}
	testutil.WaitFor(t, "the leader throttle on", func() bool { return leader.isr.mgr.ThrottleOf("lagging", 0).Leader })

	if err := stopped.Close(); err != nil {
		t.Logf("close broker %d: %v", stopped.ID(), err)
	}
	testutil.WaitFor(t, "the ISR without the closed broker", func() bool {
		rec, ok := leader.isr.record(name)
		return ok && len(rec.ISR) == 2
	})
	produce(kgo.LeaderAck(), missed, kgo.DisableIdempotentWrite())

	var firstSeconds float64
	testutil.WaitFor(t, "the leader's lag of the closed follower", func() bool {
		records, okR := series(t, leader, "quire_isr_replica_lag_records", of(stopped))
		seconds, okS := series(t, leader, "quire_isr_replica_lag_seconds", of(stopped))
		firstSeconds = seconds
		// Its last fetch was from the LEO before the acks=1 records.
		return okR && okS && records == missed && seconds > 0
	})
	var laterSeconds float64
	testutil.WaitFor(t, "the seconds lag growing between scrapes", func() bool {
		var ok bool
		laterSeconds, ok = series(t, leader, "quire_isr_replica_lag_seconds", of(stopped))
		return ok && laterSeconds > firstSeconds
	})
	t.Logf("the leader's lag of closed broker %d: %d records, %.6f s then %.6f s", stopped.ID(), missed, firstSeconds, laterSeconds)
	if records, _ := series(t, leader, "quire_isr_replica_lag_records", of(stopped)); records != missed {
		t.Fatalf("the records lag moved to %v with nothing produced, want %d", records, missed)
	}
	testutil.WaitFor(t, "the other follower still caught up", func() bool { return caughtUp(followers[1]) })

	back, _ := c.startBroker(func(cfg *Config) {
		cfg.Registerer = prometheus.NewRegistry()
		cfg.ID, cfg.Zone, cfg.ISR = stopped.ID(), stopped.cfg.Zone, stopped.cfg.ISR
	})
	testutil.WaitFor(t, "the returned follower, held by the leader, reporting its lag", func() bool {
		lag, ok := series(t, back, "kafka_server_fetcherlagmetrics_consumerlag", partition)
		maxLag, _ := series(t, back, "kafka_server_replicafetchermanager_maxlag", nil)
		return ok && lag > 0 && maxLag > 0
	})
	records, ok := series(t, leader, "quire_isr_replica_lag_records", of(back))
	if !ok || records <= 0 {
		t.Fatalf("the leader's records lag of the held follower: %v (%v), want > 0", records, ok)
	}
	lag, _ := series(t, back, "kafka_server_fetcherlagmetrics_consumerlag", partition)
	t.Logf("held on its return: consumer lag %v, the leader's records lag %v", lag, records)

	if rs, err := adm.AlterBrokerConfigs(ctx, []kadm.AlterConfig{{Op: kadm.DeleteConfig, Name: leaderThrottleRate}}, leader.ID()); err != nil || rs[0].Err != nil {
		t.Fatalf("delete the leader throttle rate: %v %+v", err, rs)
	}
	testutil.WaitFor(t, "the returned follower caught up: no lag on either side", func() bool { return caughtUp(back, followers[1]) })
	if st, err := back.isr.mgr.Status(name); err != nil || st.LogEndOffset != committed+missed {
		t.Fatalf("the returned follower: %+v %v; want its LEO at %d", st, err, committed+missed)
	}
}
