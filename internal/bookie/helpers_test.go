package bookie

import (
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// testConfig is a configuration with small files and no background timers,
// so tests decide when checkpoints and GC run.
func testConfig(fs vfs.FS) Config {
	cfg := DefaultConfig("/bookie/journal", "/bookie/ledgers")
	cfg.FS = fs
	cfg.JournalFileBytes = 64 << 10
	cfg.EntryLogMaxBytes = 32 << 10
	cfg.WriteCacheBytes = 1 << 20
	cfg.ReadCacheBytes = 256 << 10
	cfg.CheckpointInterval = time.Hour
	cfg.GCInterval = time.Hour
	cfg.DiskCheckInterval = time.Hour
	cfg.IndexBallastBytes = 64 << 10 // in memory, and copied by every crash clone
	cfg.Logger = slog.New(slog.DiscardHandler)
	return cfg
}

func openTest(t testing.TB, cfg Config) *Engine {
	t.Helper()
	e, err := Open(cfg)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(func() {
		if err := e.Close(); err != nil && !errors.Is(err, ErrClosed) {
			t.Errorf("close: %v", err)
		}
	})
	return e
}

// addWait adds and waits (with a deadline) for the acknowledgement.
func addWait(t testing.TB, e *Engine, req AddRequest) error {
	t.Helper()
	ch := make(chan error, 1)
	e.Add(req, func(err error) { ch <- err })
	select {
	case err := <-ch:
		return err
	case <-time.After(10 * time.Second):
		t.Fatalf("add ledger %d entry %d: no acknowledgement within 10s", req.LedgerID, req.EntryID)
		return nil
	}
}

func mustAdd(t testing.TB, e *Engine, req AddRequest) {
	t.Helper()
	if err := addWait(t, e, req); err != nil {
		t.Fatalf("add ledger %d entry %d: %v", req.LedgerID, req.EntryID, err)
	}
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.NewTimer(10 * time.Second)
	defer deadline.Stop()
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-deadline.C:
			t.Fatalf("timed out waiting for %s", what)
		case <-tick.C:
		}
	}
}

// fencedForTest reports the in-memory fence bit (restored from the index on
// Open).
func (e *Engine) fencedForTest(ledgerID int64) bool {
	e.mu.RLock()
	defer e.mu.RUnlock()
	ls := e.ledgers[ledgerID]
	return ls != nil && ls.fenced
}

func payloadFor(ledgerID, entryID int64, size int) []byte {
	p := make([]byte, size)
	for i := range p {
		p[i] = byte(int64(i)*31 + ledgerID*7 + entryID*13)
	}
	return p
}

// recvWithin receives from ch or fails after a deadline.
func recvWithin[T any](t testing.TB, ch <-chan T) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(10 * time.Second):
		t.Fatalf("nothing received within 10s")
		var zero T
		return zero
	}
}

// crashableFS is the file system an engine under a concurrent CrashClone
// runs on. pebble's MemFS.ReuseForWrite read-locks the clone mutex and then,
// inside Rename, read-locks it again; a CrashClone that starts waiting
// between the two blocks the second read lock (sync.RWMutex lets no new
// reader in once a writer waits), and the test hangs for good. Rename and
// then open is the same operation with one lock at a time.
type crashableFS struct{ *vfs.MemFS }

func (fs crashableFS) ReuseForWrite(oldname, newname string, category vfs.DiskWriteCategory) (vfs.File, error) {
	if err := fs.Rename(oldname, newname); err != nil {
		return nil, err
	}
	return fs.OpenReadWrite(newname, category)
}
