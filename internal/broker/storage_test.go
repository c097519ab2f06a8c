package broker

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"quire/internal/kafka"
)

// stuckPartition is a partition whose appends are never answered (a ledger
// writer with no bookie to write to), unless answer is called.
type stuckPartition struct {
	kafka.Partition
	appends chan chan kafka.AppendResult
}

func (p stuckPartition) Append(context.Context, []byte) <-chan kafka.AppendResult {
	ch := make(chan kafka.AppendResult, 1)
	p.appends <- ch
	return ch
}

func result(t *testing.T, ch <-chan kafka.AppendResult, within time.Duration) (kafka.AppendResult, bool) {
	t.Helper()
	select {
	case r := <-ch:
		return r, true
	case <-time.After(within):
		return kafka.AppendResult{}, false
	}
}

// TestStorageGate: produces are refused at once while fewer bookies are
// writable than the ack quorum, the ones already waiting are answered the
// moment the gate closes, and nothing changes while enough are writable or
// the registry was never read.
func TestStorageGate(t *testing.T) {
	g := newStorageGate()
	refused := 0
	inner := stuckPartition{appends: make(chan chan kafka.AppendResult, 10)}
	stuck := &atomic.Bool{}
	p := gatedPartition{Partition: inner, gate: g, ackQuorum: 2, stuck: stuck, refused: func() { refused++ }}
	ctx := context.Background()

	// Unknown registry: appends go through.
	waiting := p.Append(ctx, nil)
	first := <-inner.appends
	g.set(3, 3)
	first <- kafka.AppendResult{BaseOffset: 7}
	if r, ok := result(t, waiting, 10*time.Second); !ok || r.Err != nil || r.BaseOffset != 7 {
		t.Fatalf("answer passed through: %+v %v", r, ok)
	}

	// One bookie read-only of three: Qa=2 still reachable, no refusal.
	g.set(2, 3)
	waiting = p.Append(ctx, nil)
	<-inner.appends
	if _, ok := result(t, waiting, 20*time.Millisecond); ok {
		t.Fatal("an append answered while two bookies are writable")
	}
	// The second one turns read-only: the waiting append is answered now.
	g.set(1, 3)
	r, ok := result(t, waiting, 10*time.Second)
	if !ok || !errors.Is(r.Err, kerr.NotEnoughReplicas) {
		t.Fatalf("waiting append after the gate closed: %+v %v", r, ok)
	}
	// New appends are refused without reaching the partition.
	r, ok = result(t, p.Append(ctx, nil), 10*time.Second)
	if !ok || !errors.Is(r.Err, kerr.NotEnoughReplicas) || len(inner.appends) != 0 {
		t.Fatalf("append while closed: %+v %v, %d reached the partition", r, ok, len(inner.appends))
	}
	if !stuck.Load() {
		t.Fatal("the partition whose append was answered while waiting is not marked stuck")
	}
	if refused != 2 {
		t.Fatalf("refused %d, want 2", refused)
	}
	if why, _ := g.refusal(2); why == nil || why.Error() != "1 of 3 registered bookies writable, an entry needs 2" {
		t.Fatalf("refusal: %v", why)
	}
	// Space is back.
	g.set(3, 3)
	waiting = p.Append(ctx, nil)
	(<-inner.appends) <- kafka.AppendResult{BaseOffset: 9}
	if r, ok := result(t, waiting, 10*time.Second); !ok || r.Err != nil || r.BaseOffset != 9 {
		t.Fatalf("after reopening: %+v %v", r, ok)
	}
}
