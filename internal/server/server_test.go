package server

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

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
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		c.t.Fatal(err)
	}
	store := c.srv.NewClient()
	bc := client.New(client.Config{Logger: quiet, RedialBackoffMin: 10 * time.Millisecond, RedialBackoffMax: 50 * time.Millisecond})
	c.t.Cleanup(bc.Close)
	lc := ledgerclient.New(ledgerclient.Config{Store: store, Bookies: bc, Tick: 10 * time.Millisecond, RequestTimeoutTicks: 200, Name: "broker", Logger: quiet})
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
