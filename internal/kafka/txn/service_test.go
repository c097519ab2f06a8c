package txn

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"quire/internal/meta"
	"quire/internal/testutil"
)

// markerLog is a MarkerWriter that records the markers it wrote and fails
// the partitions it is told to.
type markerLog struct {
	mu      sync.Mutex
	written map[Partition][]marker
	failing map[Partition]bool
}

func newMarkerLog() *markerLog {
	return &markerLog{written: map[Partition][]marker{}, failing: map[Partition]bool{}}
}

func (m *markerLog) WriteMarkers(ctx context.Context, op MarkerOp) MarkerResult {
	m.mu.Lock()
	defer m.mu.Unlock()
	var res MarkerResult
	for _, p := range op.Partitions {
		if m.failing[p] || ctx.Err() != nil {
			res.FailedPartitions = append(res.FailedPartitions, p)
			continue
		}
		m.written[p] = append(m.written[p], marker{pid: op.ProducerID, epoch: op.ProducerEpoch, commit: op.Commit})
	}
	return res
}

func (m *markerLog) of(p Partition) []marker {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]marker(nil), m.written[p]...)
}

func (m *markerLog) setFailing(p Partition, fail bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.failing[p] = fail
}

func newService(t *testing.T, store meta.Store, markers MarkerWriter) *Service {
	t.Helper()
	s := NewService(ServiceConfig{Store: store, Markers: markers, Tick: 10 * time.Millisecond, ScanInterval: 50 * time.Millisecond,
		Core: Config{MarkerRetry: 10 * time.Millisecond, MetaRetry: 10 * time.Millisecond}})
	t.Cleanup(s.Close)
	return s
}

// The service over the metadata store: a transaction committed end to end,
// the record stored; a second service (another broker, or this one after
// a restart) takes the id over from the store and fences the first
// instance's epoch; records are listed.
func TestServiceCommit(t *testing.T) {
	srv := meta.NewMemServer(meta.MemConfig{})
	store := srv.NewClient()
	defer store.Close()
	markers := newMarkerLog()
	s := newService(t, store, markers)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	r := s.InitProducerID(ctx, InitProducerIDRequest{TransactionalID: "app", TimeoutMs: 60000, ProducerID: -1, ProducerEpoch: -1})
	if r.Err != nil || r.ProducerID < 1 || r.ProducerEpoch != 0 {
		t.Fatalf("init: %+v", r)
	}
	pid := r.ProducerID
	if r := s.AddPartitions(ctx, AddPartitionsRequest{TransactionalID: "app", ProducerID: pid, ProducerEpoch: 0, Partitions: []Partition{p0, p1}}); r.Err != nil {
		t.Fatalf("add: %v", r.Err)
	}
	if r := s.AddOffsets(ctx, AddOffsetsRequest{TransactionalID: "app", ProducerID: pid, ProducerEpoch: 0, Group: "g"}); r.Err != nil {
		t.Fatalf("add offsets: %v", r.Err)
	}
	if r := s.EndTxn(ctx, EndTxnRequest{TransactionalID: "app", ProducerID: pid, ProducerEpoch: 0, Commit: true}); r.Err != nil {
		t.Fatalf("commit: %v", r.Err)
	}
	testutil.WaitForWithin(t, 5*time.Second, "the record to reach CompleteCommit", func() bool {
		rec, ok, err := s.Describe(ctx, "app")
		return err == nil && ok && rec.State == CompleteCommit
	})
	for _, p := range []Partition{p0, p1} {
		if m := markers.of(p); len(m) != 1 || !m[0].commit || m[0].pid != pid {
			t.Fatalf("markers of %v: %+v", p, m)
		}
	}

	// Another broker's service: it reads the id from the store.
	s2 := newService(t, store, markers)
	r2 := s2.InitProducerID(ctx, InitProducerIDRequest{TransactionalID: "app", TimeoutMs: 60000, ProducerID: -1, ProducerEpoch: -1})
	if r2.Err != nil || r2.ProducerID != pid || r2.ProducerEpoch != 1 {
		t.Fatalf("init on another broker: %+v, want pid %d epoch 1", r2, pid)
	}
	// The first service's cache is stale: its write fails the compare, it
	// answers NOT_COORDINATOR, and the retry (reading the store) fences.
	r = s.AddPartitions(ctx, AddPartitionsRequest{TransactionalID: "app", ProducerID: pid, ProducerEpoch: 0, Partitions: []Partition{p0}})
	if !errors.Is(r.Err, kerr.NotCoordinator) {
		t.Fatalf("stale coordinator: %v, want NOT_COORDINATOR", r.Err)
	}
	r = s.AddPartitions(ctx, AddPartitionsRequest{TransactionalID: "app", ProducerID: pid, ProducerEpoch: 0, Partitions: []Partition{p0}})
	if !errors.Is(r.Err, kerr.ProducerFenced) {
		t.Fatalf("the old epoch after a reload: %v, want PRODUCER_FENCED", r.Err)
	}
	recs, err := s.List(ctx)
	if err != nil || len(recs) != 1 || recs[0].ProducerEpoch != 1 {
		t.Fatalf("list: %+v, %v", recs, err)
	}
}

// A coordinator that dies with a decided transaction whose markers failed,
// and one that dies with a transaction open: a surviving service's scan
// adopts both, finishes the first and times the second out.
func TestServiceAdoptsOrphans(t *testing.T) {
	srv := meta.NewMemServer(meta.MemConfig{})
	store := srv.NewClient()
	defer store.Close()
	markers := newMarkerLog()
	s := newService(t, store, markers)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	a := s.InitProducerID(ctx, InitProducerIDRequest{TransactionalID: "decided", TimeoutMs: 60000, ProducerID: -1, ProducerEpoch: -1})
	b := s.InitProducerID(ctx, InitProducerIDRequest{TransactionalID: "open", TimeoutMs: 300, ProducerID: -1, ProducerEpoch: -1})
	if a.Err != nil || b.Err != nil {
		t.Fatalf("init: %v %v", a.Err, b.Err)
	}
	s.AddPartitions(ctx, AddPartitionsRequest{TransactionalID: "decided", ProducerID: a.ProducerID, ProducerEpoch: 0, Partitions: []Partition{p0}})
	s.AddPartitions(ctx, AddPartitionsRequest{TransactionalID: "open", ProducerID: b.ProducerID, ProducerEpoch: 0, Partitions: []Partition{p1}})
	markers.setFailing(p0, true)
	if r := s.EndTxn(ctx, EndTxnRequest{TransactionalID: "decided", ProducerID: a.ProducerID, ProducerEpoch: 0, Commit: true}); r.Err != nil {
		t.Fatalf("commit: %v", r.Err)
	}
	s.Close() // the coordinator dies

	markers.setFailing(p0, false)
	newService(t, store, markers)
	// (A marker written twice — by the dead coordinator's last retry and
	// by the new one — is harmless: the second finds nothing open.)
	testutil.WaitForWithin(t, 10*time.Second, "the decided transaction's marker and the open one's abort", func() bool {
		m0, m1 := markers.of(p0), markers.of(p1)
		return len(m0) >= 1 && len(m1) >= 1
	})
	for _, m := range markers.of(p0) {
		if !m.commit {
			t.Fatalf("markers of the committed transaction: %+v", markers.of(p0))
		}
	}
	for _, m := range markers.of(p1) {
		if m.commit || m.epoch != 1 {
			t.Fatalf("markers of the timed-out transaction: %+v, want aborts under epoch 1", markers.of(p1))
		}
	}
	testutil.WaitForWithin(t, 10*time.Second, "both records complete", func() bool {
		r1, _, _ := s.Describe(ctx, "decided")
		r2, _, _ := s.Describe(ctx, "open")
		return r1.State == CompleteCommit && r2.State == CompleteAbort
	})
}
