package meta

import (
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"sync"
	"time"
)

// Headroom is the disk space kept for the embedded etcd member.
//
// The member shares its file system with whatever else writes there (in
// `quire standalone`, the bookies). When that file system fills, etcd can
// no longer append to its WAL, preallocate the next WAL segment (64 MB) or
// grow its database, and it stops; a process that then restarts on the
// same directory finds no room either. A ballast file keeps the room: it is
// written when the member starts (and whenever space returns) and deleted
// the moment free space drops below its size, which gives that space back
// to etcd, and only to etcd while the other writers count it as taken
// (Embedded.ReleasedBallastBytes). It is released before etcd starts, too,
// so that a member restarted on a full disk comes up.
//
// A file of real (not sparse, not compressible) blocks, beside the data
// directory rather than in it (DataDir + ".ballast"), so that etcd never
// sees a file it does not know.
type Headroom struct {
	// BallastBytes is the size of the ballast file, at most a sixteenth
	// of the file system (a small disk cannot spare a whole WAL segment);
	// 0 disables it.
	BallastBytes int64
	// CheckInterval is how often free space is sampled; default 250ms.
	CheckInterval time.Duration
}

// DefaultBallastBytes is one WAL segment: what etcd must be able to
// preallocate to go on writing.
const DefaultBallastBytes = 64 << 20

// ballastMaxFraction: the ballast takes at most 1/16 of its file system.
const ballastMaxFraction = 16

// diskSpaceOf is diskSpace, replaced in tests.
var diskSpaceOf = diskSpace

// ballastRestoreFactor: the ballast comes back once free space is this many
// times its size, so that writing it leaves at least twice its size free
// and it is not released again at once.
const ballastRestoreFactor = 3

type headroom struct {
	cfg  Headroom
	path string
	log  *slog.Logger

	mu       sync.Mutex
	present  bool // the ballast file is on disk, whole
	writing  bool // it is being written: not released, only not there yet
	free     uint64
	total    uint64
	stopOnce sync.Once
	stopc    chan struct{}
	done     chan struct{}
}

// newHeadroom samples the file system of dataDir, releases the ballast if
// space is short or writes it if it is missing and there is room, and keeps
// doing so in the background until stop.
func newHeadroom(cfg Headroom, dataDir string, log *slog.Logger) *headroom {
	if cfg.CheckInterval <= 0 {
		cfg.CheckInterval = 250 * time.Millisecond
	}
	h := &headroom{cfg: cfg, path: dataDir + ".ballast", log: log, stopc: make(chan struct{}), done: make(chan struct{})}
	if cfg.BallastBytes <= 0 {
		close(h.done)
		return h
	}
	if _, total, err := diskSpaceOf(h.path); err == nil && total > 0 {
		cfg.BallastBytes = min(cfg.BallastBytes, int64(total/ballastMaxFraction))
		h.cfg = cfg
	}
	os.Remove(h.path + ".tmp") // a ballast being written when the process stopped
	if fi, err := os.Stat(h.path); err == nil && fi.Size() == cfg.BallastBytes {
		h.present = true
	} else if err == nil {
		os.Remove(h.path) // a partial ballast (a crash while writing it)
	}
	// Release now if space is short; write a missing ballast in the
	// background (it takes a while, and etcd needs no ballast to start).
	h.check(false)
	if _, free, _ := h.state(); !h.present && free >= ballastRestoreFactor*uint64(cfg.BallastBytes) {
		h.writing = true
	}
	go h.run()
	return h
}

func (h *headroom) run() {
	defer close(h.done)
	h.check(true)
	if _, free, _ := h.state(); h.released() > 0 && free > 0 {
		h.log.Warn("meta: no ballast: too little free space to reserve headroom for etcd", "free", free, "ballast", h.cfg.BallastBytes)
	}
	t := time.NewTicker(h.cfg.CheckInterval)
	defer t.Stop()
	for {
		select {
		case <-h.stopc:
			return
		case <-t.C:
			h.check(true)
		}
	}
}

// check releases or (with restore) restores the ballast as free space
// requires.
func (h *headroom) check(restore bool) {
	free, total, err := diskSpaceOf(h.path)
	h.mu.Lock()
	present := h.present
	if err == nil {
		h.free, h.total = free, total
	}
	h.mu.Unlock()
	if err != nil || total == 0 {
		return
	}
	size := uint64(h.cfg.BallastBytes)
	switch {
	case present && free < size:
		// Released at once: the next bookie disk check already counts it
		// as taken (ReleasedBallastBytes).
		if err := os.Remove(h.path); err != nil && !errors.Is(err, os.ErrNotExist) {
			h.log.Error("meta: release ballast", "err", err)
			return
		}
		h.setPresent(false)
		h.log.Warn("meta: disk nearly full: ballast released to keep etcd writing", "free", free, "released", size, "path", h.path)
	case restore && !present && free >= ballastRestoreFactor*size:
		h.mu.Lock()
		h.writing = true
		h.mu.Unlock()
		err := writeBallast(h.path, h.cfg.BallastBytes)
		h.mu.Lock()
		h.writing = false
		h.mu.Unlock()
		if err != nil {
			h.log.Warn("meta: restore ballast", "err", err)
			return
		}
		h.setPresent(true)
		h.log.Info("meta: free space is back: ballast restored", "free", free, "ballast", size, "path", h.path)
	}
}

func (h *headroom) setPresent(p bool) {
	h.mu.Lock()
	h.present = p
	h.mu.Unlock()
}

func (h *headroom) state() (ballast int64, free, total uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.present {
		ballast = h.cfg.BallastBytes
	}
	return ballast, h.free, h.total
}

func (h *headroom) released() int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.present || h.writing || h.cfg.BallastBytes <= 0 {
		return 0
	}
	return h.cfg.BallastBytes
}

func (h *headroom) stop() {
	h.stopOnce.Do(func() { close(h.stopc) })
	<-h.done
}

// writeBallast writes size bytes of incompressible data to path and syncs
// it, through a temporary name so that a crash never leaves a short ballast
// under the real one. On any error nothing is left behind.
func writeBallast(path string, size int64) (err error) {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("ballast %s: %w", tmp, err)
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(tmp)
		}
	}()
	// Random bytes: a file system that compresses or deduplicates would
	// otherwise reserve nothing.
	buf := make([]byte, 1<<20)
	rng := rand.NewChaCha8([32]byte{'q', 'u', 'i', 'r', 'e'})
	for written := int64(0); written < size; {
		rng.Read(buf)
		n := min(int64(len(buf)), size-written)
		if _, err := f.Write(buf[:n]); err != nil {
			return fmt.Errorf("ballast %s: %w", tmp, err)
		}
		written += n
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("ballast %s: %w", tmp, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("ballast %s: %w", tmp, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("ballast %s: %w", path, err)
	}
	return nil
}
