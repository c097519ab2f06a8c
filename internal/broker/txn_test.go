package broker

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"quire/internal/testutil"
)

// consumeIsolated reads a topic from the start with the isolation level
// given until until holds for the values read (or a deadline passes).
func consumeIsolated(t *testing.T, ctx context.Context, addr, topic string, committed bool, until func([]string) bool) []string {
	t.Helper()
	level := kgo.ReadUncommitted()
	if committed {
		level = kgo.ReadCommitted()
	}
	cl := newClient(t, addr, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(level), kgo.FetchMaxWait(200*time.Millisecond))
	var values []string
	pctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	for !until(values) && pctx.Err() == nil {
		cl.PollRecords(pctx, 1000).EachRecord(func(r *kgo.Record) { values = append(values, string(r.Value)) })
	}
	return values
}

// Transactions through a broker: franz-go's transactional producer writes
// to partitions on two brokers (markers written locally and through
// WriteTxnMarkers), a read_committed consumer sees the committed
// transaction's records and not the aborted one's, a read_uncommitted one
// sees both.
func TestTransactionsAcrossBrokers(t *testing.T) {
	c := newTestCluster(t)
	handoff := func(id int32) func(*Config) {
		return func(cfg *Config) { cfg.ID, cfg.HandoffAfter = id, 100*time.Millisecond }
	}
	b1, _ := c.startBroker(handoff(1))
	b2, _ := c.startBroker(handoff(2))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	addr := b1.cfg.KafkaAdvertised
	adm := kadm.NewClient(newClient(t, addr))
	if _, err := adm.CreateTopic(ctx, 8, 1, nil, "tx"); err != nil {
		t.Fatal(err)
	}
	// Both brokers serve some of the partitions: markers go to both.
	testutil.WaitForWithin(t, 20*time.Second, "partitions on both brokers", func() bool {
		md, err := adm.Metadata(ctx, "tx")
		if err != nil {
			return false
		}
		leaders := map[int32]bool{}
		for _, p := range md.Topics["tx"].Partitions {
			leaders[p.Leader] = true
		}
		return leaders[b1.cfg.ID] && leaders[b2.cfg.ID]
	})

	p := newClient(t, addr, kgo.TransactionalID("tx-app"), kgo.DefaultProduceTopic("tx"),
		kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.TransactionTimeout(30*time.Second))
	run := func(label string, commit bool) {
		if err := p.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		for part := int32(0); part < 8; part++ {
			if err := p.ProduceSync(ctx, &kgo.Record{Partition: part, Value: []byte(label + "-" + strconv.Itoa(int(part)))}).FirstErr(); err != nil {
				t.Fatalf("%s: produce to %d: %v", label, part, err)
			}
		}
		if err := p.EndTransaction(ctx, kgo.TransactionEndTry(commit)); err != nil {
			t.Fatalf("%s: end: %v", label, err)
		}
	}
	run("aborted", false)
	run("committed", true)

	count := func(values []string, prefix string) int {
		n := 0
		for _, v := range values {
			if len(v) > len(prefix) && v[:len(prefix)] == prefix {
				n++
			}
		}
		return n
	}
	// Each partition holds its aborted record before its committed one:
	// once the 8 committed ones are read, every aborted one was passed.
	rc := consumeIsolated(t, ctx, addr, "tx", true, func(v []string) bool { return count(v, "committed-") == 8 })
	if count(rc, "committed-") != 8 || count(rc, "aborted-") != 0 {
		t.Fatalf("read_committed read %v: want the 8 committed records and none aborted", rc)
	}
	ru := consumeIsolated(t, ctx, addr, "tx", false, func(v []string) bool { return len(v) == 16 })
	if count(ru, "committed-") != 8 || count(ru, "aborted-") != 8 {
		t.Fatalf("read_uncommitted read %v: want all 16", ru)
	}
}

// A transaction whose partitions' broker goes away before it commits: the
// surviving broker takes the partitions over (their open transaction
// rebuilt from the log's tail) and the coordinator — this broker's, or the
// survivor reading the id's record from etcd if the coordinator was the one
// that left — writes the markers there: read_committed sees every committed
// record and nothing of the aborted transaction before it.
func TestTransactionSurvivesBrokerLoss(t *testing.T) {
	c := newTestCluster(t)
	handoff := func(id int32) func(*Config) {
		return func(cfg *Config) { cfg.ID, cfg.HandoffAfter = id, 100*time.Millisecond }
	}
	b1, _ := c.startBroker(handoff(1))
	b2, _ := c.startBroker(handoff(2))
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	addr := b1.cfg.KafkaAdvertised
	adm := kadm.NewClient(newClient(t, addr))
	if _, err := adm.CreateTopic(ctx, 8, 1, nil, "tx"); err != nil {
		t.Fatal(err)
	}
	testutil.WaitForWithin(t, 20*time.Second, "partitions on both brokers", func() bool {
		md, err := adm.Metadata(ctx, "tx")
		if err != nil {
			return false
		}
		leaders := map[int32]bool{}
		for _, p := range md.Topics["tx"].Partitions {
			leaders[p.Leader] = true
		}
		return leaders[1] && leaders[2]
	})
	p := newClient(t, addr, kgo.TransactionalID("tx-loss"), kgo.DefaultProduceTopic("tx"),
		kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.TransactionTimeout(60*time.Second))
	produce := func(label string) {
		t.Helper()
		for part := int32(0); part < 8; part++ {
			if err := p.ProduceSync(ctx, &kgo.Record{Partition: part, Value: []byte(label + "-" + strconv.Itoa(int(part)))}).FirstErr(); err != nil {
				t.Fatalf("%s: produce to %d: %v", label, part, err)
			}
		}
	}
	if err := p.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	produce("aborted")
	if err := p.EndTransaction(ctx, kgo.TryAbort); err != nil {
		t.Fatal(err)
	}
	if err := p.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	produce("committed")
	// Broker 2 leaves with its partitions' transaction open; broker 1
	// takes its bundles over.
	if err := b2.Close(); err != nil {
		t.Logf("close broker 2: %v", err)
	}
	if err := p.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatalf("commit after broker 2 left: %v", err)
	}
	count := func(values []string, prefix string) int {
		n := 0
		for _, v := range values {
			if len(v) > len(prefix) && v[:len(prefix)] == prefix {
				n++
			}
		}
		return n
	}
	rc := consumeIsolated(t, ctx, addr, "tx", true, func(v []string) bool { return count(v, "committed-") == 8 })
	if count(rc, "committed-") != 8 || count(rc, "aborted-") != 0 {
		t.Fatalf("read_committed after broker 2 left read %v: want the 8 committed records and none aborted", rc)
	}
}
