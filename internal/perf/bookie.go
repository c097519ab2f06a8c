// Package perf holds Quire's load generators and benchmarks (`quire perf`).
// Every benchmark measures its own baseline in the same run and prints the
// ratio, so a figure means something on whatever machine produced it.
//
// It owns load generation and measurement only; it drives components through
// their public clients and never reaches into their internals.
package perf

import (
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"quire/internal/bookie"
	"quire/internal/bookie/client"
	"quire/internal/bookie/node"
)

// BookieBenchConfig configures BenchBookie.
type BookieBenchConfig struct {
	Dir        string        // a directory on the disk under test
	EntryBytes int           // default 1024
	InFlight   int           // default 256
	Duration   time.Duration // per phase; default 10s
	Engine     *bookie.Config
	Out        io.Writer
}

// BookieBenchResult holds both phases' figures.
type BookieBenchResult struct {
	Baseline, Bookie Phase
	Ratio            float64
}

// Phase is one measured run.
type Phase struct {
	Entries  int64
	Elapsed  time.Duration
	MBPerSec float64
	// Latency of an add (bookie) or of a whole write+fdatasync batch (baseline).
	P50, P99 time.Duration
	Batches  int64
}

// BenchBookie measures (a) a minimal group-commit loop — the same entries,
// InFlight submitters, each batch written to a preallocated file and
// fdatasync'd — and (b) a bookie over loopback TCP with InFlight adds
// outstanding, on the same disk, and reports their ratio.
func BenchBookie(ctx context.Context, cfg BookieBenchConfig) (BookieBenchResult, error) {
	if cfg.EntryBytes == 0 {
		cfg.EntryBytes = 1024
	}
	if cfg.InFlight == 0 {
		cfg.InFlight = 256
	}
	if cfg.Duration == 0 {
		cfg.Duration = 10 * time.Second
	}
	if cfg.Out == nil {
		cfg.Out = io.Discard
	}
	var res BookieBenchResult
	var err error
	fmt.Fprintf(cfg.Out, "baseline: group-commit loop with fdatasync, %d B entries, %d in flight, %v\n", cfg.EntryBytes, cfg.InFlight, cfg.Duration)
	if res.Baseline, err = benchBaseline(ctx, cfg); err != nil {
		return res, fmt.Errorf("baseline: %w", err)
	}
	printPhase(cfg.Out, "baseline", res.Baseline, "batch")
	fmt.Fprintf(cfg.Out, "bookie: loopback TCP, %d B entries, %d in flight, %v\n", cfg.EntryBytes, cfg.InFlight, cfg.Duration)
	if res.Bookie, err = benchBookie(ctx, cfg); err != nil {
		return res, fmt.Errorf("bookie: %w", err)
	}
	printPhase(cfg.Out, "bookie", res.Bookie, "add")
	if res.Baseline.MBPerSec > 0 {
		res.Ratio = res.Bookie.MBPerSec / res.Baseline.MBPerSec
	}
	return res, nil
}

func printPhase(w io.Writer, name string, p Phase, what string) {
	fmt.Fprintf(w, "%-8s %10d entries in %6.2fs  %8.1f MB/s  %s latency p50=%.3fms p99=%.3fms",
		name, p.Entries, p.Elapsed.Seconds(), p.MBPerSec, what, ms(p.P50), ms(p.P99))
	if p.Batches > 0 {
		fmt.Fprintf(w, "  (%d batches, %.1f entries/batch)", p.Batches, float64(p.Entries)/float64(p.Batches))
	}
	fmt.Fprintln(w)
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(float64(len(sorted)-1) * p)
	return sorted[i]
}

// benchBaseline is the minimal correct group commit: submitters queue
// entries; one loop writes everything queued, fdatasyncs, then releases
// those submitters. The file is preallocated and reused, as the journal's are.
func benchBaseline(ctx context.Context, cfg BookieBenchConfig) (Phase, error) {
	const fileBytes = 256 << 20
	const maxBatch = 512 << 10
	path := filepath.Join(cfg.Dir, "baseline.journal")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR|os.O_TRUNC, 0o644)
	if err != nil {
		return Phase{}, err
	}
	defer os.Remove(path)
	defer f.Close()
	if err := preallocate(f, fileBytes); err != nil {
		return Phase{}, err
	}
	type req struct {
		data []byte
		done chan struct{}
	}
	queue := make(chan req, cfg.InFlight)
	stop := make(chan struct{})
	var entries, batches atomic.Int64
	var batchTimes []time.Duration
	loopErr := make(chan error, 1)
	go func() {
		buf := make([]byte, 0, maxBatch+cfg.EntryBytes)
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
			for len(buf) < maxBatch {
				select {
				case r := <-queue:
					buf = append(buf, r.data...)
					waiting = append(waiting, r.done)
				default:
					break drain
				}
			}
			start := time.Now()
			if offset+int64(len(buf)) > fileBytes {
				offset = 0
			}
			if _, err := f.WriteAt(buf, offset); err != nil {
				loopErr <- err
				return
			}
			if err := unix.Fdatasync(int(f.Fd())); err != nil {
				loopErr <- err
				return
			}
			batchTimes = append(batchTimes, time.Since(start))
			offset += int64(len(buf))
			batches.Add(1)
			entries.Add(int64(len(waiting)))
			for _, d := range waiting {
				close(d)
			}
		}
	}()
	payload := randomBytes(cfg.EntryBytes)
	deadline := time.Now().Add(cfg.Duration)
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
	elapsed := time.Since(start)
	close(stop)
	if err := <-loopErr; err != nil {
		return Phase{}, err
	}
	sort.Slice(batchTimes, func(i, j int) bool { return batchTimes[i] < batchTimes[j] })
	n := entries.Load()
	return Phase{
		Entries: n, Elapsed: elapsed, Batches: batches.Load(),
		MBPerSec: float64(n) * float64(cfg.EntryBytes) / elapsed.Seconds() / 1e6,
		P50:      percentile(batchTimes, 0.50), P99: percentile(batchTimes, 0.99),
	}, nil
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

func randomBytes(n int) []byte {
	b := make([]byte, n)
	rand.Read(b)
	return b
}

// benchBookie runs a bookie node in-process (engine + TCP server, no
// registration) and drives it over loopback with InFlight adds outstanding.
func benchBookie(ctx context.Context, cfg BookieBenchConfig) (Phase, error) {
	dir, err := os.MkdirTemp(cfg.Dir, "bookie-bench-")
	if err != nil {
		return Phase{}, err
	}
	defer os.RemoveAll(dir)
	n, err := node.Start(ctx, node.Config{ID: "bench", DataDir: dir, ListenAddr: "127.0.0.1:0", Engine: cfg.Engine})
	if err != nil {
		return Phase{}, err
	}
	defer n.Close()
	c := client.New(client.Config{MaxInFlightPerConn: cfg.InFlight * 2})
	defer c.Close()

	payload := randomBytes(cfg.EntryBytes)
	var (
		mu        sync.Mutex
		latencies = make([]time.Duration, 0, 1<<20)
		firstErr  error
		entries   atomic.Int64
	)
	slots := make(chan struct{}, cfg.InFlight)
	deadline := time.Now().Add(cfg.Duration)
	start := time.Now()
	var wg sync.WaitGroup
	const ledgers = 4 // several ledgers, as several topics would write
	for entry := int64(0); time.Now().Before(deadline) && ctx.Err() == nil; entry++ {
		slots <- struct{}{}
		mu.Lock()
		failed := firstErr
		mu.Unlock()
		if failed != nil {
			break
		}
		wg.Add(1)
		sent := time.Now()
		c.AddAsync(n.Addr(), client.AddRequest{LedgerID: 1 + entry%ledgers, EntryID: entry / ledgers, LastAddConfirmed: entry/ledgers - 1, Payload: payload},
			func(err error) {
				lat := time.Since(sent)
				mu.Lock()
				if err != nil && firstErr == nil {
					firstErr = err
				}
				latencies = append(latencies, lat)
				mu.Unlock()
				entries.Add(1)
				<-slots
				wg.Done()
			})
	}
	wg.Wait()
	elapsed := time.Since(start)
	if firstErr != nil {
		return Phase{}, firstErr
	}
	sort.Slice(latencies, func(i, j int) bool { return latencies[i] < latencies[j] })
	m := entries.Load()
	return Phase{
		Entries: m, Elapsed: elapsed,
		MBPerSec: float64(m) * float64(cfg.EntryBytes) / elapsed.Seconds() / 1e6,
		P50:      percentile(latencies, 0.50), P99: percentile(latencies, 0.99),
	}, nil
}
