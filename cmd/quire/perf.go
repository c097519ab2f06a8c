package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"quire/internal/perf"
)

func newPerfCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "perf",
		Short: "Generate load and measure throughput and latency against a baseline measured in the same run",
	}
	cmd.AddCommand(newPerfBookieCommand())
	cmd.AddCommand(newPerfProduceCommand(), newPerfConsumeCommand())
	return cmd
}

func newPerfBookieCommand() *cobra.Command {
	var (
		dir                string
		entryBytes, flight int
		duration, warmUp   time.Duration
		doubleWrite        bool
		cpuProfile         string
		engine             engineFlags
	)
	cmd := &cobra.Command{
		Use:   "bookie",
		Short: "Benchmark a bookie against a minimal fdatasync group-commit loop on the same disk",
		Long: `Measures, in one run and on the disk holding --dir:
  (a) baseline: the same entries written by a minimal group-commit loop
      (preallocated file, write everything queued, fdatasync, release);
  (b) a bookie (journal, write cache, entry logs, index) over loopback TCP.
Both with the same entry size and number of entries in flight, each measured for
--duration after --warm-up of the same load. With --double-write, a third phase
runs the baseline loop while a second writer copies its bytes to growing files,
as a bookie's entry logs receive its journal's: the disk's bound for (b).
The last line is
  bookie-bench ratio=R baseline_mb_s=X bookie_mb_s=Y p99_ms=Z
where R = Y/X and Z is the bookie's p99 add latency.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if dir == "" {
				return fmt.Errorf("perf bookie: --dir is required")
			}
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			out := cmd.OutOrStdout()
			bc := perf.BookieBenchConfig{
				Dir: dir, EntryBytes: entryBytes, InFlight: flight, Duration: duration, WarmUp: warmUp,
				DoubleWrite: doubleWrite, Engine: engine.config(), Out: out,
			}
			if cpuProfile != "" {
				pf, err := os.Create(cpuProfile)
				if err != nil {
					return err
				}
				defer pf.Close()
				bc.CPUProfile = pf
			}
			res, err := perf.BenchBookie(ctx, bc)
			if err != nil {
				return err
			}
			fmt.Fprintf(out, "bookie p99 add latency / baseline p99 batch time = %.2f\n",
				float64(res.Bookie.P99)/float64(max(res.Baseline.P99, 1)))
			fmt.Fprintf(out, "bookie-bench ratio=%.3f baseline_mb_s=%.1f bookie_mb_s=%.1f p99_ms=%.3f\n",
				res.Ratio, res.Baseline.MBPerSec, res.Bookie.MBPerSec, float64(res.Bookie.P99)/float64(time.Millisecond))
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&dir, "dir", "", "directory on the disk to measure (required)")
	f.IntVar(&entryBytes, "entry-bytes", 1024, "entry size in bytes")
	f.IntVar(&flight, "in-flight", 256, "entries in flight")
	f.DurationVar(&duration, "duration", 10*time.Second, "measured duration of each phase")
	f.DurationVar(&warmUp, "warm-up", 2*time.Second, "unmeasured load before each phase's measurement (negative: none)")
	f.BoolVar(&doubleWrite, "double-write", false, "also measure the baseline loop with a second copy of its bytes (the disk's bound for a bookie)")
	f.StringVar(&cpuProfile, "cpu-profile", "", "write a CPU profile of the bookie phase's measured part to this file")
	engine.register(cmd)
	return cmd
}
