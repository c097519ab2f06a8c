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
	"runtime/pprof"
	"sort"
	"sync"
	"time"

	"quire/internal/bookie"
	"quire/internal/bookie/client"
	"quire/internal/bookie/node"
)

// BookieBenchConfig configures BenchBookie.
type BookieBenchConfig struct {
	Dir        string        // a directory on the disk under test
	EntryBytes int           // default 1024
	InFlight   int           // default 256
	Duration   time.Duration // measured time per phase; default 10s
	// WarmUp runs each phase's load this long before measuring (default 2s;
	// negative: none), so that both are measured in steady state: a new
	// bookie zero-fills its first journal files and creates its first entry
	// log and index files, which the baseline's preallocated file never needs.
	WarmUp time.Duration
	// DoubleWrite adds a third phase: the baseline loop with a
	// second copy of its bytes written to growing files, the disk traffic of
	// a bookie (journal plus entry logs) without any of its CPU work. Its
	// ratio to the baseline bounds what a bookie can reach on this disk.
	DoubleWrite bool
	Engine      *bookie.Config
	Out         io.Writer
	// CPUProfile, if set, receives a CPU profile of the bookie phase's
	// measured part (client, server and engine share the process).
	CPUProfile io.Writer
}

// BookieBenchResult holds the phases' figures.
type BookieBenchResult struct {
	Baseline, DoubleWrite, Bookie Phase // DoubleWrite only if asked for
	Ratio                         float64
}

// Phase is one measured run.
type Phase struct {
	Entries  int64
	Elapsed  time.Duration
	MBPerSec float64
	// Latency of an add (bookie) or of a whole write+fdatasync batch (baseline).
	P50, P99 time.Duration
	Batches  int64         // group commits (baseline loop, or the bookie's journal)
	SyncTime time.Duration // total time in fdatasync
	// Bookie phase only: the mean add latency seen by the client, the part
	// of it spent in the engine (journal queue, write, fsync), and the time
	// the journal waited with nothing to write.
	Mean, EngineMean, JournalIdle time.Duration
	// Usage is the CPU the whole process spent per entry (the bookie phase's
	// includes its client) and the machine's CPU states during the phase.
	Usage Usage
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
	if cfg.WarmUp == 0 {
		cfg.WarmUp = 2 * time.Second
	}
	if cfg.Out == nil {
		cfg.Out = io.Discard
	}
	var res BookieBenchResult
	var err error
	warmUp := max(cfg.WarmUp, 0)
	fmt.Fprintf(cfg.Out, "baseline: group-commit loop with fdatasync, %d B entries, %d in flight, %v after %v warm-up\n",
		cfg.EntryBytes, cfg.InFlight, cfg.Duration, warmUp)
	if res.Baseline, err = benchBaseline(ctx, cfg); err != nil {
		return res, fmt.Errorf("baseline: %w", err)
	}
	printPhase(cfg.Out, "baseline", res.Baseline, "batch")
	fmt.Fprintf(cfg.Out, "bookie: loopback TCP, %d B entries, %d in flight, %v after %v warm-up\n",
		cfg.EntryBytes, cfg.InFlight, cfg.Duration, warmUp)
	if res.Bookie, err = benchBookie(ctx, cfg); err != nil {
		return res, fmt.Errorf("bookie: %w", err)
	}
	printPhase(cfg.Out, "bookie", res.Bookie, "add")
	b := res.Bookie
	fmt.Fprintf(cfg.Out, "bookie   mean add latency %.3fms = %.3fms in the engine (journal queue, write, fsync) + %.3fms outside it (client, TCP, server); journal idle %.0f%% of the time\n",
		ms(b.Mean), ms(b.EngineMean), ms(b.Mean-b.EngineMean), 100*b.JournalIdle.Seconds()/b.Elapsed.Seconds())
	// Last, so that neither measured phase runs while the file system
	// discards its gigabytes of deleted files.
	if cfg.DoubleWrite {
		fmt.Fprintf(cfg.Out, "double-write: the baseline loop plus a second copy of its bytes in growing files (entry-log pattern)\n")
		if res.DoubleWrite, err = benchDoubleWrite(ctx, cfg); err != nil {
			return res, fmt.Errorf("double write: %w", err)
		}
		printPhase(cfg.Out, "double", res.DoubleWrite, "batch")
		if res.Baseline.MBPerSec > 0 {
			fmt.Fprintf(cfg.Out, "double-write / baseline = %.3f: the disk's bound for a bookie's ratio\n",
				res.DoubleWrite.MBPerSec/res.Baseline.MBPerSec)
		}
	}
	if res.Baseline.MBPerSec > 0 {
		res.Ratio = res.Bookie.MBPerSec / res.Baseline.MBPerSec
	}
	return res, nil
}

func printPhase(w io.Writer, name string, p Phase, what string) {
	fmt.Fprintf(w, "%-8s %10d entries in %6.2fs  %8.1f MB/s  %s latency p50=%.3fms p99=%.3fms",
		name, p.Entries, p.Elapsed.Seconds(), p.MBPerSec, what, ms(p.P50), ms(p.P99))
	if p.Batches > 0 {
		fmt.Fprintf(w, "  (%d batches, %.1f entries/batch, fdatasync mean %.3fms)", p.Batches,
			float64(p.Entries)/float64(p.Batches), ms(p.SyncTime/time.Duration(p.Batches)))
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "%-8s %s\n", name, p.Usage)
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(float64(len(sorted)-1) * p)
	return sorted[i]
}

func randomBytes(n int) []byte {
	b := make([]byte, n)
	rand.Read(b)
	return b
}

// benchBookie runs a bookie node in-process (engine + TCP server, no
// registration) and drives it over loopback with InFlight adds outstanding:
// first for WarmUp, unmeasured, then for Duration.
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
		latencies []time.Duration
		firstErr  error
		entry     int64 // the next add: entry/ledgers of ledger 1+entry%ledgers
	)
	const ledgers = 4 // several ledgers, as several topics would write
	// run keeps InFlight adds outstanding for d, waits for the last, and
	// returns the time it took; latencies collects each add's.
	run := func(d time.Duration) time.Duration {
		slots := make(chan struct{}, cfg.InFlight)
		deadline := time.Now().Add(d)
		start := time.Now()
		var wg sync.WaitGroup
		// The clock is read for each add's latency; the deadline is checked
		// every 64 adds, so the load generator costs the shared CPUs less.
		for i := 0; i%64 != 0 || time.Now().Before(deadline) && ctx.Err() == nil; i, entry = i+1, entry+1 {
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
					<-slots
					wg.Done()
				})
		}
		wg.Wait()
		return time.Since(start)
	}
	if cfg.WarmUp > 0 {
		run(cfg.WarmUp)
	}
	latencies = make([]time.Duration, 0, 1<<20)
	engineBefore := n.Engine().Stats()
	if cfg.CPUProfile != nil {
		if err := pprof.StartCPUProfile(cfg.CPUProfile); err != nil {
			return Phase{}, err
		}
	}
	usageBefore := takeUsage()
	elapsed := run(cfg.Duration)
	usageAfter := takeUsage()
	if cfg.CPUProfile != nil {
		pprof.StopCPUProfile()
	}
	if firstErr != nil {
		return Phase{}, firstErr
	}
	engineAfter := n.Engine().Stats()
	sort.Slice(latencies, func(i, j int) bool { return latencies[i] < latencies[j] })
	m := int64(len(latencies))
	var sum time.Duration
	for _, l := range latencies {
		sum += l
	}
	p := Phase{
		Entries: m, Elapsed: elapsed,
		Batches:  int64(engineAfter.JournalBatches - engineBefore.JournalBatches),
		SyncTime: engineAfter.JournalSyncTime - engineBefore.JournalSyncTime,
		MBPerSec: float64(m) * float64(cfg.EntryBytes) / elapsed.Seconds() / 1e6,
		P50:      percentile(latencies, 0.50), P99: percentile(latencies, 0.99),
		JournalIdle: engineAfter.JournalIdleTime - engineBefore.JournalIdleTime,
		Usage:       usageBetween(usageBefore, usageAfter, m),
	}
	if m > 0 {
		p.Mean = sum / time.Duration(m)
	}
	if adds := engineAfter.Adds - engineBefore.Adds; adds > 0 {
		p.EngineMean = (engineAfter.AddTime - engineBefore.AddTime) / time.Duration(adds)
	}
	return p, nil
}
