package meta

import (
	"context"
	"errors"
	"testing"
	"time"

	"quire/internal/clock"
)

func TestMemConformance(t *testing.T) {
	srv := NewMemServer(MemConfig{})
	runConformance(t, harness{
		newClient: func(t *testing.T) Store { return srv.NewClient() },
		killOwner: func(t *testing.T, key string, ttl time.Duration) {
			owner := srv.NewClient()
			sess, err := owner.NewSession(context.Background(), ttl)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := sess.CreateEphemeral(context.Background(), key, []byte("owner")); err != nil {
				t.Fatal(err)
			}
			owner.Crash()
		},
		expire:  func(t *testing.T, s Session) { srv.ExpireSession(s.ID()) },
		compact: func(t *testing.T, rev int64) { srv.Compact(rev) },
		disrupt: func(t *testing.T) { srv.DisconnectWatches() },
		// The server's state is the store; a "restart" is new clients.
		restart: func(t *testing.T) {},
	})
}

// TestMemVirtualClock drives sessions and injected latency on a virtual
// clock: the simulator's way of using the store.
func TestMemVirtualClock(t *testing.T) {
	vc := clock.NewVirtual(time.Unix(0, 0))
	srv := NewMemServer(MemConfig{Clock: vc})
	c := srv.NewClient()
	ctx := context.Background()
	sess, err := c.NewSession(ctx, 3*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sess.CreateEphemeral(ctx, "/eph", nil); err != nil {
		t.Fatal(err)
	}
	// Kept alive for a long time while connected.
	vc.Advance(time.Minute)
	if sess.Err() != nil {
		t.Fatalf("session lost while connected: %v", sess.Err())
	}
	// Partitioned: keep-alives stop; the lease expires exactly one TTL after
	// the last successful beat (beats every TTL/3 = 1 s).
	c.Disconnect()
	if _, err := c.Get(ctx, "/eph"); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("get while partitioned: %v", err)
	}
	vc.Advance(2999 * time.Millisecond)
	if sess.Err() != nil {
		t.Fatalf("session expired before its TTL: %v", sess.Err())
	}
	vc.Advance(time.Millisecond)
	if !errors.Is(sess.Err(), ErrSessionExpired) {
		t.Fatalf("session err after TTL = %v", sess.Err())
	}
	c.Reconnect()
	if _, err := c.Get(ctx, "/eph"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("ephemeral after expiry: %v", err)
	}

	// Injected latency completes only when virtual time passes.
	srv.SetLatency(func(op Op, key string) time.Duration {
		if op == OpCreate {
			return 50 * time.Millisecond
		}
		return 0
	})
	done := make(chan error, 1)
	go func() {
		_, err := c.Create(ctx, "/slow", nil)
		done <- err
	}()
	// Wait until the create has scheduled its delay on the virtual clock.
	for {
		if _, ok := vc.NextDeadline(); ok {
			if d, _ := vc.NextDeadline(); d.Sub(vc.Now()) <= 50*time.Millisecond {
				break
			}
		}
		select {
		case err := <-done:
			t.Fatalf("create finished before its latency elapsed: %v", err)
		case <-time.After(time.Millisecond):
		}
	}
	vc.Advance(50 * time.Millisecond)
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	// Injected failures.
	srv.SetLatency(nil)
	srv.SetFault(func(op Op, key string) error {
		if op == OpPut {
			return ErrUnavailable
		}
		return nil
	})
	kv, _ := c.Get(ctx, "/slow")
	if _, err := c.Put(ctx, "/slow", nil, kv.Version); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("faulted put: %v", err)
	}
	srv.SetFault(nil)
	if _, err := c.Put(ctx, "/slow", nil, kv.Version); err != nil {
		t.Fatal(err)
	}
}
