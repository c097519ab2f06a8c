package main

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"quire/internal/isr"
	"quire/internal/sim"
)

func newSimISRCommand() *cobra.Command {
	var o simLedgerOptions
	cmd := &cobra.Command{
		Use:   "isr",
		Short: "Simulate ISR mode: brokers, a controller and clients under crashes, pauses and partitions",
		Long: `Each seed runs Kafka's ISR-mode replication (internal/isr): 3-5 brokers, each with a
replica per partition (1-2 partitions) over a log that keeps page cache and flushed data
apart, a controller whose records and broker sessions live in the modelled metadata store,
a producer per partition (acks 0, 1, all or mixed) and a consumer reading below the HW,
over a network with delay and loss. Configurations drawn per seed: RF, min.insync.replicas,
acks, unclean election, ELR, flush policy, replica.lag.time.max.ms. Faults drawn per seed:
crashes (keeping or losing the page cache, sometimes all replicas at once), pauses (a
zombie leader), slow followers, and the seed's network partitions NP1-NP8; about a third
of the seeds also reassign a partition to other brokers among them (sometimes cancelled).

Checkers: (a) no acks=all record is lost unless the configuration permits it (an unclean
election, or at least min.insync.replicas brokers losing their page cache at once);
(b) a follower's log below its HW is a prefix of its leader's; (c) a record a consumer
read never disappears; (d) one leader per leader epoch, no acks=all acknowledgement from
a deposed leader of a record the new leader lacks, and no records from a deposed leader
getting into a follower's log; (e) a leader's HW never goes back within its epoch. Loss
the configuration permits (acks=1 failovers, unclean elections, at least
min.insync.replicas brokers losing their page cache at once, or with ELR off any power
loss) is counted and reported, not a violation. A partition left offline because unclean
election is off and its replicas lost their page cache is the durable choice (reported as
a situation), not a liveness failure.

The last line is "sim isr seeds=N violations=V"; exits non-zero when V > 0.
Mutants: ` + strings.Join(isr.MutantNames, ", ") + `.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runSimISR(cmd.OutOrStdout(), o, cmd.Flags().Changed("seed"))
		},
	}
	o.register(cmd, isr.MutantNames)
	return cmd
}

func runSimISR(out io.Writer, o simLedgerOptions, single bool) error {
	if _, err := isr.ParseMutant(o.mutant); err != nil {
		return err
	}
	if single {
		return replayISRSeed(out, o)
	}
	first, last, err := parseSeedRange(o.seeds)
	if err != nil {
		return err
	}
	start := time.Now()
	opts := sim.ISROptions{Mutant: o.mutant}
	stats := make([]sim.ISRStats, last-first+1)
	results := runSeedRange(first, last, o.workers, func(seed int64) seedResult {
		r := sim.RunISR(seed, opts)
		if r.Err != nil {
			return seedResult{Seed: seed, Violations: []string{"sim-error: " + r.Err.Error()}}
		}
		stats[seed-first] = r.Stats
		return seedResult{Seed: r.Seed, Scenario: r.Scenario, Violations: r.Violations, Liveness: r.Liveness, Trace: r.Trace}
	})
	elapsed := time.Since(start)
	printISRSummary(out, stats)
	fmt.Fprintf(out, "speed: %d seeds in %v (%.1f seeds/s, %d workers)\n", len(results), elapsed.Round(time.Millisecond),
		float64(len(results))/elapsed.Seconds(), o.workers)
	return reportSeedRange(out, "isr", o.mutant, results, "every partition ended with a running leader")
}

// printISRSummary prints which fault shapes and situations the range
// reached, and the loss the configurations permitted.
func printISRSummary(out io.Writer, stats []sim.ISRStats) {
	shapes, situations := map[string]int{}, map[string]int{}
	var total sim.ISRStats
	for _, st := range stats {
		for k, v := range st.Shapes {
			if v > 0 {
				shapes[k]++
			}
		}
		for k, v := range st.Situations {
			if v > 0 {
				situations[k]++
			}
		}
		total.AckedAll += st.AckedAll
		total.AckedLeader += st.AckedLeader
		total.SentNoAck += st.SentNoAck
		total.Consumed += st.Consumed
		total.LostAcks1 += st.LostAcks1
		total.LostAcksAll += st.LostAcksAll
		total.LostConsumed += st.LostConsumed
		total.LostUnflushed += st.LostUnflushed
	}
	fmt.Fprintln(out, "fault shapes reached (seeds):")
	var missing []string
	for _, sh := range sim.ISRShapes {
		fmt.Fprintf(out, "  %-40s %d\n", sh, shapes[sh])
		if shapes[sh] == 0 {
			missing = append(missing, sh)
		}
	}
	if len(missing) > 0 {
		fmt.Fprintf(out, "fault shapes NOT reached: %s\n", strings.Join(missing, "; "))
	}
	keys := make([]string, 0, len(situations))
	for k := range situations {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	fmt.Fprintln(out, "situations reached (seeds):")
	for _, k := range keys {
		fmt.Fprintf(out, "  %-40s %d\n", k, situations[k])
	}
	fmt.Fprintf(out, "records: acks=all acknowledged %d, acks=1 acknowledged %d, acks=0 sent %d, consumed %d\n",
		total.AckedAll, total.AckedLeader, total.SentNoAck, total.Consumed)
	fmt.Fprintf(out, "permitted loss (counted, not violations): acks=1 %d, acks=all %d (unclean election or >= min.insync.replicas lossy crashes), consumed %d; unflushed records lost by crashes %d\n",
		total.LostAcks1, total.LostAcksAll, total.LostConsumed, total.LostUnflushed)
}

func replayISRSeed(out io.Writer, o simLedgerOptions) error {
	r := sim.RunISR(o.seed, sim.ISROptions{Mutant: o.mutant, Verbose: true})
	if r.Err != nil {
		return r.Err
	}
	fmt.Fprintf(out, "seed %d%s\nscenario: %s\n", r.Seed, mutantFlag(o.mutant), r.Scenario)
	for _, line := range r.Trace {
		fmt.Fprintln(out, "  "+line)
	}
	printISRSummary(out, []sim.ISRStats{r.Stats})
	st := r.Stats
	fmt.Fprintf(out, "stats: events=%d messages=%d dropped=%d virtual-time=%v\n", st.Events, st.Messages, st.Dropped, st.VirtualTime)
	for _, v := range r.Violations {
		fmt.Fprintln(out, "violation: "+v)
	}
	if r.Liveness != "" {
		fmt.Fprintln(out, "liveness: "+r.Liveness)
	}
	violations := 0
	if len(r.Violations) > 0 {
		violations = 1
	}
	fmt.Fprintf(out, "sim isr seeds=1 violations=%d\n", violations)
	if violations > 0 {
		return fmt.Errorf("sim isr: seed %d: %w", r.Seed, errSafetyViolations)
	}
	return nil
}
