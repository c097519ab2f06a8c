package txn

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"quire/internal/kafka"
	"quire/internal/kafka/kafkatest"
	"quire/internal/meta"
	"quire/internal/testutil"
)

// txnBackend is the in-memory test backend with this package's
// coordinator: the front end then serves the transaction APIs.
type txnBackend struct {
	*kafkatest.Backend
	tc kafka.TransactionCoordinator
}

func (b txnBackend) Transactions() kafka.TransactionCoordinator { return b.tc }

// franz-go's transactional producer against the front end over the
// coordinator: InitProducerID with a transactional id, AddPartitionsToTxn,
// EndTxn commit and abort reach the coordinator, which writes a marker per
// partition; a second producer with the same id fences the first;
// DescribeTransactions and ListTransactions show the id.
func TestTransactionalProducer(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	host, portStr, _ := net.SplitHostPort(ln.Addr().String())
	port, _ := strconv.Atoi(portStr)
	self := kafka.Node{ID: 1, Host: host, Port: int32(port)}
	srv := meta.NewMemServer(meta.MemConfig{})
	store := srv.NewClient()
	defer store.Close()
	markers := newMarkerLog()
	svc := NewService(ServiceConfig{Store: store, Markers: markers, Tick: 10 * time.Millisecond})
	defer svc.Close()
	backend := txnBackend{Backend: kafkatest.New(self), tc: svc.KafkaCoordinator(func(context.Context, string) (kafka.Node, error) { return self, nil })}
	server, err := kafka.New(kafka.Config{Backend: backend, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	go server.Serve(ln)
	defer server.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	adm := kadm.NewClient(mustClient(t, kgo.SeedBrokers(ln.Addr().String())))
	if _, err := adm.CreateTopic(ctx, 2, 1, nil, "t"); err != nil {
		t.Fatal(err)
	}
	newProducer := func() *kgo.Client {
		return mustClient(t, kgo.SeedBrokers(ln.Addr().String()), kgo.TransactionalID("app"), kgo.DefaultProduceTopic("t"),
			kgo.RecordPartitioner(kgo.ManualPartitioner()))
	}
	p := newProducer()
	for i, commit := range []bool{true, false} {
		if err := p.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		for part := int32(0); part < 2; part++ {
			if err := p.ProduceSync(ctx, &kgo.Record{Partition: part, Value: []byte("v" + strconv.Itoa(i))}).FirstErr(); err != nil {
				t.Fatalf("transactional produce: %v", err)
			}
		}
		if err := p.EndTransaction(ctx, kgo.TransactionEndTry(commit)); err != nil {
			t.Fatalf("end transaction (commit=%v): %v", commit, err)
		}
	}
	testutil.WaitForWithin(t, 5*time.Second, "a commit then an abort marker on both partitions", func() bool {
		for part := int32(0); part < 2; part++ {
			m := markers.of(Partition{Topic: "t", Partition: part})
			if len(m) != 2 || !m[0].commit || m[1].commit {
				return false
			}
		}
		return true
	})

	ds, err := adm.DescribeTransactions(ctx, "app")
	if err != nil {
		t.Fatal(err)
	}
	d, err := ds.On("app", nil)
	if err != nil || d.State != "CompleteAbort" {
		t.Fatalf("describe: %+v, %v; want CompleteAbort", d, err)
	}
	ls, err := adm.ListTransactions(ctx, nil, nil)
	if err != nil || len(ls.TransactionalIDs()) != 1 {
		t.Fatalf("list: %v, %v", ls.TransactionalIDs(), err)
	}

	// A second instance fences the first.
	if err := p.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := p.ProduceSync(ctx, &kgo.Record{Partition: 0, Value: []byte("zombie")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	p2 := newProducer()
	if err := p2.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := p2.ProduceSync(ctx, &kgo.Record{Partition: 0, Value: []byte("new")}).FirstErr(); err != nil {
		t.Fatalf("second instance: %v", err)
	}
	err = p.EndTransaction(ctx, kgo.TryCommit)
	if !errors.Is(err, kerr.ProducerFenced) && !errors.Is(err, kerr.InvalidProducerEpoch) {
		t.Fatalf("the fenced instance commits: %v, want PRODUCER_FENCED", err)
	}
	if err := p2.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatalf("the new instance commits: %v", err)
	}
}

func mustClient(t *testing.T, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}
