package isrctl

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"testing"
	"time"

	"quire/internal/isr"
	"quire/internal/meta"
	"quire/internal/testutil"
)

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// register puts broker id's registration under a session of its own.
func register(t *testing.T, ctx context.Context, store meta.Store, id isr.BrokerID) meta.Session {
	t.Helper()
	sess, err := store.NewSession(ctx, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sess.CreateEphemeral(ctx, isr.BrokerKey(id), isr.Registration{ID: id}.Marshal()); err != nil {
		t.Fatal(err)
	}
	return sess
}

// record reads a partition's record from the store.
func record(t *testing.T, ctx context.Context, store meta.Store, name string) (isr.PartitionState, bool) {
	t.Helper()
	kv, err := store.Get(ctx, isr.PartitionKey(name))
	if err != nil {
		return isr.PartitionState{}, false
	}
	st, err := isr.UnmarshalState(kv.Value)
	if err != nil {
		t.Fatal(err)
	}
	return st, true
}

// TestLeaderMovesWhenItsBrokerSessionEnds: the controller creates a
// partition on three registered brokers (the first the leader, all in the
// ISR) and, when the leader's session ends (its registration is deleted),
// elects another ISR member under a new leader epoch and drops the dead
// broker from the ISR — every change a CAS on the record in the store.
func TestLeaderMovesWhenItsBrokerSessionEnds(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	srv := meta.NewMemServer(meta.MemConfig{})
	brokers := srv.NewClient()
	sessions := map[isr.BrokerID]meta.Session{}
	for _, id := range []isr.BrokerID{1, 2, 3} {
		sessions[id] = register(t, ctx, brokers, id)
	}
	s := Start(Config{Store: srv.NewClient(), Name: "c1", SessionTTL: time.Second, Tick: 10 * time.Millisecond, Logger: quiet(),
		Controller: isr.ControllerConfig{MinISR: 2, DisableAutoRebalance: true}})
	defer s.Close()
	testutil.WaitFor(t, "the only controller to be elected", func() bool { ok, _ := s.Active(); return ok })
	if err := s.CreatePartition(ctx, "t-0", []isr.BrokerID{1, 2, 3}); err != nil {
		t.Fatal(err)
	}
	var first isr.PartitionState
	testutil.WaitFor(t, "the partition's record", func() bool {
		var ok bool
		first, ok = record(t, ctx, brokers, "t-0")
		return ok
	})
	if first.Leader != 1 || len(first.ISR) != 3 {
		t.Fatalf("created record %s: want leader 1 and an ISR of 3", first)
	}
	if err := sessions[1].Close(); err != nil { // broker 1 goes away
		t.Fatal(err)
	}
	var moved isr.PartitionState
	testutil.WaitFor(t, "a new leader once broker 1's session ended", func() bool {
		moved, _ = record(t, ctx, brokers, "t-0")
		return moved.Leader != 1 && moved.Leader != isr.NoLeader
	})
	if moved.LeaderEpoch <= first.LeaderEpoch || moved.InISR(1) || !moved.InISR(moved.Leader) {
		t.Fatalf("record after broker 1 left: %s (before: %s)", moved, first)
	}
	st, ok, err := s.Partition(ctx, "t-0")
	if err != nil || !ok || st.LeaderEpoch != moved.LeaderEpoch {
		t.Fatalf("the controller's view %s (%v, %v) differs from the store's %s", st, ok, err, moved)
	}
}

// TestControllerFailover: two processes campaign; exactly one is active.
// When its session ends (the process is gone), the other takes over under
// a higher epoch and writes every record again under it, so the old
// controller's next compare-and-swap would fail; the partition keeps
// being managed (a broker that leaves still loses its leadership).
func TestControllerFailover(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	srv := meta.NewMemServer(meta.MemConfig{})
	brokers := srv.NewClient()
	sessions := map[isr.BrokerID]meta.Session{}
	for _, id := range []isr.BrokerID{1, 2, 3} {
		sessions[id] = register(t, ctx, brokers, id)
	}
	cfg := func(name string, store meta.Store) Config {
		return Config{Store: store, Name: name, SessionTTL: 500 * time.Millisecond, Tick: 10 * time.Millisecond, Logger: quiet(),
			Controller: isr.ControllerConfig{MinISR: 2, DisableAutoRebalance: true}}
	}
	ca, cb := srv.NewClient(), srv.NewClient()
	a, b := Start(cfg("a", ca)), Start(cfg("b", cb))
	defer a.Close()
	defer b.Close()
	var active, standby *Service
	testutil.WaitFor(t, "one controller to be elected", func() bool {
		okA, _ := a.Active()
		okB, _ := b.Active()
		switch {
		case okA && !okB:
			active, standby = a, b
		case okB && !okA:
			active, standby = b, a
		default:
			return false
		}
		return true
	})
	_, epoch1 := active.Active()
	if err := active.CreatePartition(ctx, "t-0", []isr.BrokerID{1, 2, 3}); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, "the partition's record", func() bool { _, ok := record(t, ctx, brokers, "t-0"); return ok })
	if _, _, err := standby.Partition(ctx, "t-0"); err != ErrNotController {
		t.Fatalf("the standby answered %v, want ErrNotController", err)
	}

	// The active controller's process dies: its client stops keeping its
	// session alive, which expires after the TTL.
	if active == a {
		ca.Crash()
	} else {
		cb.Crash()
	}
	testutil.WaitFor(t, "the standby to take over", func() bool { ok, _ := standby.Active(); return ok })
	_, epoch2 := standby.Active()
	if epoch2 <= epoch1 {
		t.Fatalf("the new controller's epoch %d is not above the old one's %d", epoch2, epoch1)
	}
	kv, err := brokers.Get(ctx, isr.ControllerKey)
	if err != nil {
		t.Fatal(err)
	}
	var rec isr.ControllerRecord
	if err := json.Unmarshal(kv.Value, &rec); err != nil || rec.Epoch != epoch2 {
		t.Fatalf("controller key %s (%v): want epoch %d", kv.Value, err, epoch2)
	}
	testutil.WaitFor(t, "the record written again under the new epoch", func() bool {
		st, _ := record(t, ctx, brokers, "t-0")
		return st.ControllerEpoch == epoch2
	})

	// The new controller manages the partition.
	if err := sessions[1].Close(); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, "a new leader elected by the new controller", func() bool {
		st, _ := record(t, ctx, brokers, "t-0")
		return st.Leader != 1 && st.Leader != isr.NoLeader && st.ControllerEpoch == epoch2
	})
}
