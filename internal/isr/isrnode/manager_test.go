package isrnode

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"quire/internal/isr"
	"quire/internal/meta"
	"quire/internal/testutil"
)

// noController refuses every ISR proposal (no partition is replicated in
// the test that uses it).
type noController struct{}

func (noController) AlterPartition(context.Context, isr.AlterPartitionRequest) (isr.AlterPartitionResponse, error) {
	return isr.AlterPartitionResponse{}, isr.ErrNotController
}

// TestRegistrationReportsUncleanShutdown: a broker whose directory holds
// logs but no clean-shutdown mark registers with UncleanShutdown set; after
// a clean Close it registers clean, carrying the epoch of that first
// registration as LossEpoch; a fresh directory is clean.
func TestRegistrationReportsUncleanShutdown(t *testing.T) {
	ctx := context.Background()
	srv := meta.NewMemServer(meta.MemConfig{})
	view := srv.NewClient()
	dir := t.TempDir()
	registration := func() isr.Registration {
		t.Helper()
		kv, err := view.Get(ctx, isr.BrokerKey(7))
		if err != nil {
			t.Fatal(err)
		}
		reg, err := isr.UnmarshalRegistration(kv.Value, int64(kv.Version))
		if err != nil {
			t.Fatal(err)
		}
		return reg
	}
	start := func() *Manager {
		t.Helper()
		m, err := Start(Config{Broker: 7, Store: srv.NewClient(), Controller: noController{}, Dir: dir, Logger: quiet(),
			Resolve: func(isr.BrokerID) (string, error) { return "", errors.New("no brokers") }})
		if err != nil {
			t.Fatal(err)
		}
		return m
	}

	m := start()
	if reg := registration(); reg.UncleanShutdown || reg.LossEpoch != 0 {
		t.Fatalf("a fresh directory registered %+v", reg)
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	// A crash: logs on disk, no mark.
	if err := os.Mkdir(filepath.Join(dir, "t-0"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(dir, cleanShutdownFile)); err != nil {
		t.Fatal(err)
	}
	m = start()
	lost := registration()
	if !lost.UncleanShutdown || lost.LastLoss() != lost.Epoch {
		t.Fatalf("after an unclean shutdown registered %+v", lost)
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	m = start()
	defer m.Close()
	if reg := registration(); reg.UncleanShutdown || reg.LossEpoch != lost.Epoch || reg.Epoch <= lost.Epoch {
		t.Fatalf("after a clean restart registered %+v, want the loss epoch %d", reg, lost.Epoch)
	}
}

// TestRegisterWaitsForPreviousSession: a broker restarted (after a kill)
// before its previous session expired finds its old registration still
// there; Start waits for that session to end instead of failing, and then
// registers under a newer broker epoch.
func TestRegisterWaitsForPreviousSession(t *testing.T) {
	ctx := context.Background()
	srv := meta.NewMemServer(meta.MemConfig{})
	previous := srv.NewClient()
	sess, err := previous.NewSession(ctx, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	old, err := sess.CreateEphemeral(ctx, isr.BrokerKey(7), isr.Registration{ID: 7}.Marshal())
	if err != nil {
		t.Fatal(err)
	}
	started := make(chan error, 1)
	var m *Manager
	go func() {
		var err error
		m, err = Start(Config{Broker: 7, Store: srv.NewClient(), Controller: noController{}, Dir: t.TempDir(), Logger: quiet(),
			Resolve: func(isr.BrokerID) (string, error) { return "", errors.New("no brokers") }})
		started <- err
	}()
	select {
	case err := <-started:
		t.Fatalf("Start returned (%v) while the previous registration lives", err)
	case <-time.After(100 * time.Millisecond): // a negative: it must still be waiting
	}
	sess.Close() // the previous incarnation's session ends
	select {
	case err := <-started:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(testutil.WaitTimeout):
		t.Fatal("Start still waiting after the previous session ended")
	}
	defer m.Close()
	kv, err := previous.Get(ctx, isr.BrokerKey(7))
	if err != nil || kv.Version <= old {
		t.Fatalf("registration %+v (%v), want one newer than %d", kv, err, old)
	}
}
