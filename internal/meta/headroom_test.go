package meta

import (
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"quire/internal/testutil"
)

// TestBallastReleasedAndRestored: the ballast is written at start when
// there is room, released as soon as free space drops below its size, and
// written again once free space is back to three times its size.
func TestBallastReleasedAndRestored(t *testing.T) {
	var free atomic.Uint64
	free.Store(1 << 30)
	old := diskSpaceOf
	diskSpaceOf = func(string) (uint64, uint64, error) { return free.Load(), 2 << 30, nil }
	defer func() { diskSpaceOf = old }()

	dir := filepath.Join(t.TempDir(), "meta")
	const size = 1 << 20
	h := newHeadroom(Headroom{BallastBytes: size, CheckInterval: time.Millisecond}, dir, slog.New(slog.DiscardHandler))
	defer h.stop()
	fileSize := func() int64 {
		fi, err := os.Stat(dir + ".ballast")
		if err != nil {
			return 0
		}
		return fi.Size()
	}
	testutil.WaitFor(t, "the ballast to be written", func() bool { return fileSize() == size && h.released() == 0 })
	free.Store(size - 1)
	testutil.WaitFor(t, "the ballast to be released", func() bool { return fileSize() == 0 && h.released() == size })
	if b, _, _ := h.state(); b != 0 {
		t.Fatalf("state reports a %d-byte ballast after the release", b)
	}
	free.Store(ballastRestoreFactor*size - 1)
	if fileSize() != 0 {
		t.Fatal("ballast restored below the restore threshold")
	}
	free.Store(ballastRestoreFactor * size)
	testutil.WaitFor(t, "the ballast to be restored", func() bool { return fileSize() == size && h.released() == 0 })
}

// TestBallastAtMostASixteenth: a small file system gets a smaller ballast.
func TestBallastAtMostASixteenth(t *testing.T) {
	old := diskSpaceOf
	diskSpaceOf = func(string) (uint64, uint64, error) { return 900 << 10, 1 << 20, nil }
	defer func() { diskSpaceOf = old }()
	dir := filepath.Join(t.TempDir(), "meta")
	h := newHeadroom(Headroom{BallastBytes: 1 << 20, CheckInterval: time.Millisecond}, dir, slog.New(slog.DiscardHandler))
	defer h.stop()
	testutil.WaitFor(t, "a 64 KiB ballast", func() bool {
		fi, err := os.Stat(dir + ".ballast")
		return err == nil && fi.Size() == 64<<10
	})
}

// TestBallastReleasedBeforeStart: on a full disk the ballast goes before
// etcd starts, and none is written.
func TestBallastReleasedBeforeStart(t *testing.T) {
	old := diskSpaceOf
	diskSpaceOf = func(string) (uint64, uint64, error) { return 100, 2 << 30, nil }
	defer func() { diskSpaceOf = old }()
	dir := filepath.Join(t.TempDir(), "meta")
	if err := os.WriteFile(dir+".ballast", make([]byte, 4096), 0o600); err != nil {
		t.Fatal(err)
	}
	h := newHeadroom(Headroom{BallastBytes: 4096, CheckInterval: time.Hour}, dir, slog.New(slog.DiscardHandler))
	defer h.stop()
	if _, err := os.Stat(dir + ".ballast"); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("ballast still there on a full disk: %v", err)
	}
	if h.released() != 4096 {
		t.Fatalf("released %d", h.released())
	}
}

// TestFatalLogEndsOnlyItsGoroutine: etcd's Fatal (zap's os.Exit) through
// the member's logger marks the member failed and ends the goroutine that
// logged it, not the process.
func TestFatalLogEndsOnlyItsGoroutine(t *testing.T) {
	m := &Embedded{log: slog.New(slog.DiscardHandler), failed: make(chan struct{}), errc: make(chan error, 1)}
	lg := zap.New(zapcore.NewNopCore(), zap.WithFatalHook(goexitHook{m}), zap.WithPanicHook(goexitHook{m}))
	var wg sync.WaitGroup
	wg.Add(1)
	after := false
	go func() {
		defer wg.Done()
		lg.Fatal("failed to save Raft hard state and entries", zap.Error(errors.New("no space left on device")))
		after = true
	}()
	wg.Wait()
	runtime.Gosched()
	if after {
		t.Fatal("the goroutine went on after Fatal")
	}
	select {
	case <-m.Failed():
	default:
		t.Fatal("member not failed")
	}
	if err := <-m.Err(); err == nil || err.Error() != "etcd: failed to save Raft hard state and entries: no space left on device" {
		t.Fatalf("failure: %v", err)
	}
}
