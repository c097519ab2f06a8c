package perf

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"quire/internal/directio"
)

// Sizes of the group-commit loop's file and batches.
const (
	groupCommitFileBytes = 256 << 20
	groupCommitMaxBatch  = 512 << 10
)

// Shape of the second copy written by the double-write phase: what a
// bookie's checkpoint does with the same bytes (entry-log files that grow to
// 256 MiB, written with direct I/O in 256 KiB steps and fdatasync'd once per
// 32 MiB, the half of the default write cache).
const (
	secondCopyFileBytes = 256 << 20
	secondCopyWrite     = 256 << 10
	secondCopySync      = 32 << 20
)

// benchBaseline is the minimal correct group commit: submitters queue
// entries; one loop writes everything queued, fdatasyncs, then releases
// those submitters. The file is preallocated and reused, as the journal's are.
func benchBaseline(ctx context.Context, cfg BookieBenchConfig) (Phase, error) {
	return benchGroupCommit(ctx, cfg, false)
}

// benchDoubleWrite is benchBaseline plus a second copy of every byte, written
// to growing files by another goroutine, as a bookie's entry logs receive
// what its journal received. It does none of a bookie's other work (network,
// protocol, caches, index), so its throughput bounds what a bookie with
// journal and entry logs on this one disk can reach.
func benchDoubleWrite(ctx context.Context, cfg BookieBenchConfig) (Phase, error) {
	return benchGroupCommit(ctx, cfg, true)
}

func benchGroupCommit(ctx context.Context, cfg BookieBenchConfig, secondCopy bool) (Phase, error) {
	path := filepath.Join(cfg.Dir, "baseline.journal")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR|os.O_TRUNC, 0o644)
	if err != nil {
		return Phase{}, err
	}
	defer os.Remove(path)
	defer f.Close()
	if err := preallocate(f, groupCommitFileBytes); err != nil {
		return Phase{}, err
	}
	var copies chan []byte
	copyErr := make(chan error, 1)
	if secondCopy {
		// Bounded: when the second writer falls behind, the loop waits, as a
		// bookie's adds wait when both write-cache halves are full.
		copies = make(chan []byte, 2*secondCopySync/groupCommitMaxBatch)
		go func() { copyErr <- writeSecondCopy(cfg.Dir, copies) }()
	}
	type req struct {
		data []byte
		done chan struct{}
	}
	queue := make(chan req, cfg.InFlight)
	stop := make(chan struct{})
	// measuring is false during the warm-up: the loop records nothing.
	var measuring atomic.Bool
	var entries, batches atomic.Int64
	var batchTimes []time.Duration
	var syncTime time.Duration
	loopErr := make(chan error, 1)
	go func() {
		buf := make([]byte, 0, groupCommitMaxBatch+cfg.EntryBytes)
		var offset int64
		var waiting []chan struct{}
		for {
			var first req
			select {
			case first = <-queue:
			case <-stop:
				loopErr <- nil
				return
			}
			buf, waiting = append(buf[:0], first.data...), append(waiting[:0], first.done)
		drain:
			for len(buf) < groupCommitMaxBatch {
				select {
				case r := <-queue:
					buf = append(buf, r.data...)
					waiting = append(waiting, r.done)
				default:
					break drain
				}
			}
			start := time.Now()
			if offset+int64(len(buf)) > groupCommitFileBytes {
				offset = 0
			}
			if _, err := f.WriteAt(buf, offset); err != nil {
				loopErr <- err
				return
			}
			synced := time.Now()
			if err := unix.Fdatasync(int(f.Fd())); err != nil {
				loopErr <- err
				return
			}
			end := time.Now()
			if measuring.Load() {
				syncTime += end.Sub(synced)
				batchTimes = append(batchTimes, end.Sub(start))
				batches.Add(1)
				entries.Add(int64(len(waiting)))
			}
			offset += int64(len(buf))
			for _, d := range waiting {
				close(d)
			}
			if copies != nil {
				copies <- append([]byte(nil), buf...)
			}
		}
	}()
	payload := randomBytes(cfg.EntryBytes)
	// run keeps InFlight submitters busy for d and waits for them.
	run := func(d time.Duration) time.Duration {
		deadline := time.Now().Add(d)
		start := time.Now()
		var wg sync.WaitGroup
		for i := 0; i < cfg.InFlight; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for time.Now().Before(deadline) && ctx.Err() == nil {
					done := make(chan struct{})
					queue <- req{data: payload, done: done}
					<-done
				}
			}()
		}
		wg.Wait()
		return time.Since(start)
	}
	if cfg.WarmUp > 0 {
		run(cfg.WarmUp)
	}
	// Every warm-up batch was recorded or skipped before its submitters were
	// released, so the loop sees the flag change between batches.
	measuring.Store(true)
	usageBefore := takeUsage()
	elapsed := run(cfg.Duration)
	usageAfter := takeUsage()
	close(stop)
	err = <-loopErr
	if copies != nil {
		close(copies)
		if cerr := <-copyErr; err == nil && cerr != nil {
			err = fmt.Errorf("second copy: %w", cerr)
		}
	}
	if err != nil {
		return Phase{}, err
	}
	sort.Slice(batchTimes, func(i, j int) bool { return batchTimes[i] < batchTimes[j] })
	n := entries.Load()
	return Phase{
		Entries: n, Elapsed: elapsed, Batches: batches.Load(), SyncTime: syncTime,
		MBPerSec: float64(n) * float64(cfg.EntryBytes) / elapsed.Seconds() / 1e6,
		P50:      percentile(batchTimes, 0.50), P99: percentile(batchTimes, 0.99),
		Usage: usageBetween(usageBefore, usageAfter, n),
	}, nil
}

// writeSecondCopy appends every buffer it receives to entry-log-like files in
// dir and removes them at the end. As a bookie's entry logs, they are
// written with direct I/O where the file system allows it, else through the
// page cache with synced pages dropped.
func writeSecondCopy(dir string, copies <-chan []byte) (err error) {
	var (
		f              *os.File
		direct         bool
		paths          []string
		size, unsynced int64
	)
	// pending is aligned in memory for direct I/O; only whole 4 KiB blocks
	// are written until the final flush of a file.
	pending := directio.Buffer(secondCopyWrite + groupCommitMaxBatch + directio.BlockBytes)[:0]
	defer func() {
		for range copies { // unblock the loop after a failure
		}
		if f != nil {
			f.Close()
		}
		for _, p := range paths {
			os.Remove(p)
		}
	}()
	flush := func(final bool) error {
		n := len(pending)
		if final {
			n = (n + directio.BlockBytes - 1) &^ (directio.BlockBytes - 1)
			pending = pending[:n] // pending's capacity is a multiple of directio.BlockBytes
		} else {
			n &^= directio.BlockBytes - 1
		}
		if n > 0 {
			if _, err := f.Write(pending[:n]); err != nil {
				return err
			}
			size += int64(n)
			unsynced += int64(n)
			pending = pending[:copy(pending, pending[n:])]
		}
		if !final && unsynced < secondCopySync || unsynced == 0 {
			return nil
		}
		unsynced = 0
		if err := unix.Fdatasync(int(f.Fd())); err != nil {
			return err
		}
		if direct {
			return nil
		}
		return unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED)
	}
	for b := range copies {
		if f == nil || size >= secondCopyFileBytes {
			if f != nil {
				if err := flush(true); err != nil {
					return err
				}
				f.Close()
			}
			path := filepath.Join(dir, fmt.Sprintf("second-copy-%d.log", len(paths)))
			if f, err = os.Create(path); err != nil {
				return err
			}
			paths, size = append(paths, path), 0
			direct = directio.Enable(f.Fd())
		}
		for len(b) > 0 {
			room := min(len(b), secondCopyWrite-len(pending)%secondCopyWrite)
			pending, b = append(pending, b[:room]...), b[room:]
			if len(pending) >= secondCopyWrite {
				if err := flush(false); err != nil {
					return err
				}
			}
		}
	}
	if f != nil {
		return flush(true)
	}
	return nil
}

// preallocate writes zeros for real (not just fallocate, which leaves
// unwritten extents whose first write is a metadata change) and syncs, so
// later writes are pure overwrites and fdatasync has no metadata to commit.
func preallocate(f *os.File, size int64) error {
	zeros := make([]byte, 1<<20)
	for off := int64(0); off < size; off += int64(len(zeros)) {
		if _, err := f.WriteAt(zeros, off); err != nil {
			return err
		}
	}
	return f.Sync()
}
