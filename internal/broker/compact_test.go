package broker

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"quire/internal/catalog"
	"quire/internal/mlog"
	"quire/internal/testutil"
)

func TestPlanCompaction(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	closed := func(id, size int64, data int64, ago time.Duration) mlog.LedgerInfo {
		return mlog.LedgerInfo{ID: id, Size: size, Data: data, Entries: 1, Created: now.Add(-ago - time.Minute), Closed: now.Add(-ago)}
	}
	open := mlog.LedgerInfo{ID: 99, Entries: 5, Created: now}
	cfg := func(kv ...string) map[string]string {
		m := map[string]string{"cleanup.policy": "compact"}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	for _, tc := range []struct {
		name    string
		ls      []mlog.LedgerInfo
		cfgs    map[string]string
		run     int
		due     bool
		dirtyAt int
	}{
		{"only the head", []mlog.LedgerInfo{open}, cfg(), 0, false, -1},
		{"all dirty", []mlog.LedgerInfo{closed(1, 100, 0, time.Hour), closed(2, 100, 0, time.Hour), open}, cfg(), 2, true, 0},
		{"below the dirty ratio", []mlog.LedgerInfo{closed(1, 900, 50, time.Hour), closed(2, 100, 0, time.Hour), open}, cfg(), 2, false, 1},
		{"the ratio reached", []mlog.LedgerInfo{closed(1, 900, 50, time.Hour), closed(2, 100, 0, time.Hour), open}, cfg("min.cleanable.dirty.ratio", "0.1"), 2, true, 1},
		{"max lag forces it", []mlog.LedgerInfo{closed(1, 900, 50, time.Hour), closed(2, 100, 0, time.Hour), open}, cfg("max.compaction.lag.ms", "60000"), 2, true, 1},
		{"min lag keeps the young out", []mlog.LedgerInfo{closed(1, 100, 0, time.Hour), closed(2, 100, 0, time.Second), open}, cfg("min.compaction.lag.ms", "60000"), 1, true, 0},
		{"nothing dirty", []mlog.LedgerInfo{closed(1, 100, 50, time.Hour), open}, cfg(), 1, false, -1},
		{"the largest min lag", []mlog.LedgerInfo{closed(1, 100, 0, time.Hour), open}, cfg("min.compaction.lag.ms", "9223372036854775807"), 0, false, -1},
	} {
		plan, _, due := planCompaction(tc.ls, tc.cfgs, now, false)
		if len(plan.run) != tc.run || due != tc.due || plan.dirtyFrom != tc.dirtyAt {
			t.Errorf("%s: run %d due %v dirty from %d, want %d %v %d", tc.name, len(plan.run), due, plan.dirtyFrom, tc.run, tc.due, tc.dirtyAt)
		}
	}
}

// TestCompactedTopic: a compacted topic through the Kafka protocol (the
// franz-go client): keys updated many times, some deleted; after
// compaction a consumer from the start sees each live key once with its
// latest value at the offset it was produced at, a fetch from a removed
// offset gets the next survivor, and the log start does not move.
func TestCompactedTopic(t *testing.T) {
	c := newTestCluster(t)
	reg := prometheus.NewRegistry()
	b, _ := c.startBroker(func(cfg *Config) { cfg.CompactInterval, cfg.Registerer = -1, reg })
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	const topic = "kv"
	cl := newClient(t, b.cfg.KafkaAdvertised, kgo.DefaultProduceTopic(topic), kgo.ProducerLinger(0))
	adm := kadm.NewClient(cl)
	if _, err := adm.CreateTopic(ctx, 1, 1, map[string]*string{
		"cleanup.policy": kadm.StringPtr("compact"), "segment.ms": kadm.StringPtr("150"),
		"delete.retention.ms": kadm.StringPtr("3600000"),
	}, topic); err != nil {
		t.Fatal(err)
	}
	// A record without a key is refused, as Kafka does.
	if err := cl.ProduceSync(ctx, &kgo.Record{Value: []byte("no key")}).FirstErr(); !errors.Is(err, kerr.InvalidRecord) {
		t.Fatalf("a keyless record on a compacted topic: %v, want INVALID_RECORD", err)
	}

	// 20 keys, 8 rounds of updates; keys 0..4 deleted (a tombstone) after
	// the last round. Half the rounds go as one batch of many records
	// (compressed by franz-go: snappy), half a record per batch.
	type version struct {
		value  string
		offset int64
		tomb   bool
	}
	latest := map[string]version{}
	produced := 0
	for round := range 8 {
		var recs []*kgo.Record
		for k := range 20 {
			recs = append(recs, &kgo.Record{Key: fmt.Appendf(nil, "k%02d", k), Value: fmt.Appendf(nil, "v%d-%d", k, round)})
		}
		if round%2 == 0 {
			res := cl.ProduceSync(ctx, recs...)
			if err := res.FirstErr(); err != nil {
				t.Fatal(err)
			}
		} else {
			for _, r := range recs {
				if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
					t.Fatal(err)
				}
			}
		}
		for _, r := range recs {
			latest[string(r.Key)] = version{string(r.Value), r.Offset, false}
			produced++
		}
		if round%3 == 2 { // spread the rounds over ledgers
			waitHeadRolled(t, ctx, loadedPartition(t, b, topic))
		}
	}
	for k := range 5 {
		r := &kgo.Record{Key: fmt.Appendf(nil, "k%02d", k)}
		if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatal(err)
		}
		latest[string(r.Key)] = version{"", r.Offset, true}
		produced++
	}
	end := int64(produced)

	l := loadedPartition(t, b, topic)
	// Wait for the head to roll: the ledger holding the last record closes
	// (segment.ms), so every record is in a closed ledger.
	waitHeadRolled(t, ctx, l)
	before, _ := l.ml.Ledgers(ctx)

	b.compactRound(ctx, true)
	after, err := l.ml.Ledgers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if after[0].Data == 0 || len(after) != 2 {
		t.Fatalf("ledgers after compaction %+v (before %d ledgers)", after, len(before))
	}
	if runs, failures, _ := l.compaction.snapshot(); runs != 1 || failures != 0 {
		t.Fatalf("compaction runs %d, failures %d (%s)", runs, failures, l.compaction.lastErr)
	}

	check := func(wantTombstones bool) {
		t.Helper()
		got := consumeAll(t, ctx, b.cfg.KafkaAdvertised, topic, 0, end)
		seen := map[string]bool{}
		for _, r := range got {
			k := string(r.Key)
			if seen[k] {
				t.Fatalf("key %s read twice after compaction", k)
			}
			seen[k] = true
			want := latest[k]
			if r.Offset != want.offset || string(r.Value) != want.value || (r.Value == nil) != want.tomb {
				t.Fatalf("key %s: offset %d value %q, want the latest, offset %d value %q (tombstone %v)", k, r.Offset, r.Value, want.offset, want.value, want.tomb)
			}
		}
		for k, v := range latest {
			if !seen[k] && (!v.tomb || wantTombstones) {
				t.Fatalf("key %s (latest at offset %d, tombstone %v) lost", k, v.offset, v.tomb)
			}
		}
		if len(got) != len(latest) {
			t.Fatalf("%d records after compaction, want %d", len(got), len(latest))
		}
	}
	check(true)
	if s, err := l.ml.Stats(ctx); err != nil || s.Compactions != 1 || s.CompactedBytes <= 0 {
		t.Fatalf("stats after compaction: %+v, %v", s, err)
	}
	// The metrics say so.
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	metrics := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			metrics[mf.GetName()] += m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}
	if metrics["quire_topic_compaction_runs_total"] != 1 || metrics["quire_topic_compaction_reclaimed_bytes_total"] <= 0 || metrics["quire_topic_compaction_failures_total"] != 0 {
		t.Fatalf("compaction metrics: runs %v, reclaimed %v, failures %v", metrics["quire_topic_compaction_runs_total"],
			metrics["quire_topic_compaction_reclaimed_bytes_total"], metrics["quire_topic_compaction_failures_total"])
	}
	// The replaced ledgers are deleted, and the record forgets them.
	testutil.WaitFor(t, "the replaced ledgers to be deleted", func() bool {
		s, err := l.ml.Stats(ctx)
		return err == nil && s.Garbage == 0
	})

	// A fetch from an offset compaction removed returns the next survivor.
	got := consumeAll(t, ctx, b.cfg.KafkaAdvertised, topic, 1, end)
	if len(got) == 0 || got[0].Offset <= 1 {
		t.Fatalf("fetch from offset 1: first record %+v", got)
	}
	// The log start did not move; the end neither.
	starts, err := adm.ListStartOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	if o, _ := starts.Lookup(topic, 0); o.Offset != 0 {
		t.Fatalf("log start %d after compaction, want 0", o.Offset)
	}
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	if o, _ := ends.Lookup(topic, 0); o.Offset != end {
		t.Fatalf("end offset %d, want %d", o.Offset, end)
	}

	// Tombstones go once delete.retention.ms has passed since their ledger
	// closed; the compactor reads the config before each round.
	if _, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Op: kadm.SetConfig, Name: "delete.retention.ms", Value: kadm.StringPtr("0")}}, topic); err != nil {
		t.Fatal(err)
	}
	// More updates, so that there is something dirty to compact.
	for k := 10; k < 15; k++ {
		r := &kgo.Record{Key: fmt.Appendf(nil, "k%02d", k), Value: []byte("final")}
		if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatal(err)
		}
		latest[string(r.Key)] = version{"final", r.Offset, false}
		end = r.Offset + 1
	}
	waitHeadRolled(t, ctx, l)
	b.compactRound(ctx, true)
	for k, v := range latest {
		if v.tomb {
			delete(latest, k)
		}
	}
	check(false)
	if n := len(consumeAll(t, ctx, b.cfg.KafkaAdvertised, topic, 0, end)); n != 15 {
		t.Fatalf("%d records after the tombstones went, want 15", n)
	}
}

// TestCompactionConfigs: the compaction configs through CreateTopics,
// IncrementalAlterConfigs and DescribeConfigs.
func TestCompactionConfigs(t *testing.T) {
	c := newTestCluster(t)
	b, _ := c.startBroker(func(cfg *Config) { cfg.CompactInterval = -1 })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	adm := kadm.NewClient(newClient(t, b.cfg.KafkaAdvertised))
	if resp, _ := adm.CreateTopic(ctx, 1, 1, map[string]*string{"cleanup.policy": kadm.StringPtr("compact,shred")}, "bad"); !errors.Is(resp.Err, kerr.InvalidConfig) {
		t.Fatalf("cleanup.policy=compact,shred: %v", resp.Err)
	}
	if resp, _ := adm.CreateTopic(ctx, 1, 1, map[string]*string{"min.cleanable.dirty.ratio": kadm.StringPtr("1.5")}, "bad"); !errors.Is(resp.Err, kerr.InvalidConfig) {
		t.Fatalf("min.cleanable.dirty.ratio=1.5: %v", resp.Err)
	}
	if _, err := adm.CreateTopic(ctx, 1, 1, map[string]*string{
		"cleanup.policy": kadm.StringPtr("compact,delete"), "min.compaction.lag.ms": kadm.StringPtr("1000"),
	}, "both"); err != nil {
		t.Fatal(err)
	}
	if r, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Op: kadm.SetConfig, Name: "min.cleanable.dirty.ratio", Value: kadm.StringPtr("0.2")},
		{Op: kadm.SetConfig, Name: "max.compaction.lag.ms", Value: kadm.StringPtr("60000")}}, "both"); err != nil || r[0].Err != nil {
		t.Fatalf("incremental alter: %v %v", err, r)
	}
	// (The legacy AlterConfigs is not served: see internal/kafka/api_versions.go.)
	if r, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Op: kadm.SetConfig, Name: "cleanup.policy", Value: kadm.StringPtr("compact")},
		{Op: kadm.SetConfig, Name: "delete.retention.ms", Value: kadm.StringPtr("5000")}, {Op: kadm.DeleteConfig, Name: "max.compaction.lag.ms"}}, "both"); err != nil || r[0].Err != nil {
		t.Fatalf("incremental alter: %v %v", err, r)
	}
	rcs, err := adm.DescribeTopicConfigs(ctx, "both")
	if err != nil {
		t.Fatal(err)
	}
	rc, err := rcs.On("both", nil)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"cleanup.policy": "compact", "delete.retention.ms": "5000", "min.cleanable.dirty.ratio": "0.2",
		"max.compaction.lag.ms": "9223372036854775807", "min.compaction.lag.ms": "1000"}
	for _, cfg := range rc.Configs {
		if v, ok := want[cfg.Key]; ok {
			if cfg.MaybeValue() != v {
				t.Errorf("%s = %q, want %q", cfg.Key, cfg.MaybeValue(), v)
			}
			delete(want, cfg.Key)
		}
	}
	if len(want) > 0 {
		t.Fatalf("not described: %v", want)
	}

	// cleanup.policy is a list: APPEND and SUBTRACT (kafka-configs
	// --add-config / --delete-config on a list) work on it, and only on it.
	policy := func() string {
		rcs, err := adm.DescribeTopicConfigs(ctx, "both")
		if err != nil {
			t.Fatal(err)
		}
		rc, _ := rcs.On("both", nil)
		for _, cfg := range rc.Configs {
			if cfg.Key == "cleanup.policy" {
				return cfg.MaybeValue()
			}
		}
		return ""
	}
	for _, step := range []struct {
		op   kadm.IncrementalOp
		val  string
		want string
	}{{kadm.AppendConfig, "delete", "compact,delete"}, {kadm.AppendConfig, "compact", "compact,delete"}, {kadm.SubtractConfig, "compact", "delete"}} {
		if r, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Op: step.op, Name: "cleanup.policy", Value: kadm.StringPtr(step.val)}}, "both"); err != nil || r[0].Err != nil {
			t.Fatalf("%v cleanup.policy %s: %v %v", step.op, step.val, err, r)
		}
		if got := policy(); got != step.want {
			t.Fatalf("after %v %s: cleanup.policy = %q, want %q", step.op, step.val, got, step.want)
		}
	}
	if r, _ := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Op: kadm.AppendConfig, Name: "retention.ms", Value: kadm.StringPtr("5")}}, "both"); !errors.Is(r[0].Err, kerr.InvalidConfig) {
		t.Fatalf("APPEND to retention.ms: %v, want INVALID_CONFIG", r[0].Err)
	}
}

// waitHeadRolled waits until the ledger holding the last record closed
// (segment.ms) and the head is empty: every record is in a closed ledger.
func waitHeadRolled(t *testing.T, ctx context.Context, l *loaded) {
	t.Helper()
	testutil.WaitForWithin(t, 20*time.Second, "the head ledger to roll over", func() bool {
		ls, err := l.ml.Ledgers(ctx)
		return err == nil && len(ls) > 1 && ls[len(ls)-1].Entries == 0
	})
}

// loadedPartition is partition 0 of topic as the broker serves it.
func loadedPartition(t *testing.T, b *Broker, topic string) *loaded {
	t.Helper()
	name := catalog.PartitionName(b.cfg.Namespace, topic, 0)
	b.mu.Lock()
	l := b.parts[name]
	b.mu.Unlock()
	if l == nil || l.partition() == nil {
		t.Fatalf("partition %s not loaded", name)
	}
	return l
}

// consumeAll reads partition 0 of topic from offset from until end with a
// fresh client.
func consumeAll(t *testing.T, ctx context.Context, addr, topic string, from, end int64) []*kgo.Record {
	t.Helper()
	cl := newClient(t, addr, kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {0: kgo.NewOffset().At(from)}}),
		kgo.FetchMaxWait(100*time.Millisecond))
	defer cl.Close()
	var out []*kgo.Record
	for {
		// Stop once the last offset is known read: compaction leaves gaps,
		// so a record at end-1 may not exist; a fetch that returns nothing
		// new within the wait ends it.
		fctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		fs := cl.PollFetches(fctx)
		cancel()
		if err := fs.Err0(); err != nil && !errors.Is(err, context.DeadlineExceeded) {
			t.Fatal(err)
		}
		n := 0
		fs.EachRecord(func(r *kgo.Record) {
			out = append(out, r)
			n++
		})
		if n == 0 || out[len(out)-1].Offset >= end-1 {
			return out
		}
	}
}

// TestCompactionFailover: the owner stops with a compaction half-written
// (registered, some entries in, not swapped); the next owner serves the
// log as it was, deletes the half-written ledger, and compacts on its own.
func TestCompactionFailover(t *testing.T) {
	c := newTestCluster(t)
	b1, _ := c.startBroker(func(cfg *Config) { cfg.CompactInterval, cfg.ID = -1, 1 })
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	const topic = "kv2"
	cl := newClient(t, b1.cfg.KafkaAdvertised, kgo.DefaultProduceTopic(topic), kgo.ProducerLinger(0))
	adm := kadm.NewClient(cl)
	if _, err := adm.CreateTopic(ctx, 1, 1, map[string]*string{
		"cleanup.policy": kadm.StringPtr("compact"), "segment.ms": kadm.StringPtr("150"),
	}, topic); err != nil {
		t.Fatal(err)
	}
	latest := map[string]int64{}
	for i := range 60 {
		r := &kgo.Record{Key: fmt.Appendf(nil, "k%d", i%6), Value: fmt.Appendf(nil, "v%d", i)}
		if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatal(err)
		}
		latest[string(r.Key)] = r.Offset
		if i%20 == 19 {
			waitHeadRolled(t, ctx, loadedPartition(t, b1, topic))
		}
	}
	l := loadedPartition(t, b1, topic)
	half, err := l.ml.BeginCompaction(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := half.Append(ctx, []byte("half-written")); err != nil {
		t.Fatal(err)
	}
	orphan := half.Ledger()
	b1.Close() // the owner stops before the swap

	b2, _ := c.startBroker(func(cfg *Config) { cfg.CompactInterval, cfg.ID = -1, 2 })
	cl2 := newClient(t, b2.cfg.KafkaAdvertised)
	if got := consumeAll(t, ctx, b2.cfg.KafkaAdvertised, topic, 0, 60); len(got) != 60 {
		t.Fatalf("after the failover %d records, want all 60 (nothing compacted)", len(got))
	}
	_ = cl2
	l2 := loadedPartition(t, b2, topic)
	testutil.WaitFor(t, "the half-written ledger to be deleted", func() bool {
		s, err := l2.ml.Stats(ctx)
		_, _, mdErr := b2.cfg.Ledgers.ReadMetadata(ctx, orphan)
		return err == nil && s.Garbage == 0 && mdErr != nil
	})
	b2.compactRound(ctx, true)
	got := consumeAll(t, ctx, b2.cfg.KafkaAdvertised, topic, 0, 60)
	if len(got) != 6 {
		t.Fatalf("after compaction on the new owner: %d records, want 6", len(got))
	}
	for _, r := range got {
		if latest[string(r.Key)] != r.Offset {
			t.Fatalf("key %s at offset %d, its latest is at %d", r.Key, r.Offset, latest[string(r.Key)])
		}
	}
}

// TestCompactionKeepsTheEnd: compaction removes every record of the log
// (a key and its tombstone, past delete.retention.ms); a new owner still
// continues the offsets where they were, and the log start stays.
func TestCompactionKeepsTheEnd(t *testing.T) {
	c := newTestCluster(t)
	b1, _ := c.startBroker(func(cfg *Config) { cfg.CompactInterval, cfg.ID = -1, 1 })
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const topic = "gone"
	cl := newClient(t, b1.cfg.KafkaAdvertised, kgo.DefaultProduceTopic(topic), kgo.ProducerLinger(0))
	if _, err := kadm.NewClient(cl).CreateTopic(ctx, 1, 1, map[string]*string{
		"cleanup.policy": kadm.StringPtr("compact"), "segment.ms": kadm.StringPtr("150"), "delete.retention.ms": kadm.StringPtr("0"),
	}, topic); err != nil {
		t.Fatal(err)
	}
	for _, v := range [][]byte{[]byte("a"), []byte("b"), nil} {
		if err := cl.ProduceSync(ctx, &kgo.Record{Key: []byte("k"), Value: v}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	waitHeadRolled(t, ctx, loadedPartition(t, b1, topic))
	b1.compactRound(ctx, true)
	if got := consumeAll(t, ctx, b1.cfg.KafkaAdvertised, topic, 0, 3); len(got) != 0 {
		t.Fatalf("after compaction %d records, want none", len(got))
	}
	b1.Close()
	b2, _ := c.startBroker(func(cfg *Config) { cfg.CompactInterval, cfg.ID = -1, 2 })
	cl2 := newClient(t, b2.cfg.KafkaAdvertised, kgo.DefaultProduceTopic(topic))
	r := &kgo.Record{Key: []byte("k"), Value: []byte("c")}
	if err := cl2.ProduceSync(ctx, r).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if r.Offset != 3 {
		t.Fatalf("the next record after a reload got offset %d, want 3", r.Offset)
	}
	starts, err := kadm.NewClient(cl2).ListStartOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	if o, _ := starts.Lookup(topic, 0); o.Offset != 0 {
		t.Fatalf("log start %d, want 0", o.Offset)
	}
}

// TestCompactorRunsByItself: with the compactor's loop on, a compacted
// topic whose dirty ratio passes min.cleanable.dirty.ratio is compacted
// without being asked.
func TestCompactorRunsByItself(t *testing.T) {
	c := newTestCluster(t)
	b, _ := c.startBroker(func(cfg *Config) { cfg.CompactInterval = 100 * time.Millisecond })
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const topic = "auto"
	cl := newClient(t, b.cfg.KafkaAdvertised, kgo.DefaultProduceTopic(topic), kgo.ProducerLinger(0))
	if _, err := kadm.NewClient(cl).CreateTopic(ctx, 1, 1, map[string]*string{
		"cleanup.policy": kadm.StringPtr("compact"), "segment.ms": kadm.StringPtr("150"),
		"min.cleanable.dirty.ratio": kadm.StringPtr("0.1"),
	}, topic); err != nil {
		t.Fatal(err)
	}
	for i := range 40 {
		if err := cl.ProduceSync(ctx, &kgo.Record{Key: fmt.Appendf(nil, "k%d", i%4), Value: fmt.Appendf(nil, "v%d", i)}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	l := loadedPartition(t, b, topic)
	testutil.WaitForWithin(t, 20*time.Second, "a compaction", func() bool {
		runs, _, _ := l.compaction.snapshot()
		return runs > 0
	})
	if runs, failures, _ := l.compaction.snapshot(); failures != 0 {
		t.Fatalf("%d of %d compactions failed: %s", failures, runs, l.compaction.lastErr)
	}
	if got := consumeAll(t, ctx, b.cfg.KafkaAdvertised, topic, 0, 40); len(got) >= 40 {
		t.Fatalf("%d records after compaction", len(got))
	}
}
