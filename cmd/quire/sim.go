package main

import (
	"errors"
	"fmt"
	"io"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/spf13/cobra"

	"quire/internal/sim"
)

// newSimCommand is `quire sim`: the deterministic simulator. Without a
// subcommand it lists them.
func newSimCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "sim",
		Short: "Run the deterministic simulator",
		Long: `Run Quire's protocol cores under a virtual clock with random delays, message loss,
partitions, crashes, metadata outages and paused (zombie) processes, all drawn from one
seed, with safety checkers after every step. A failing seed replays exactly with --seed.`,
	}
	cmd.AddCommand(newSimLedgerCommand())
	cmd.AddCommand(newSimTopicCommand())
	cmd.AddCommand(newSimISRCommand())
	cmd.AddCommand(newSimScenarioCommand())
	cmd.AddCommand(newSimTxnCommand())
	return cmd
}

type simLedgerOptions struct {
	seeds   string
	seed    int64
	mutant  string
	workers int
}

func newSimLedgerCommand() *cobra.Command {
	var o simLedgerOptions
	cmd := &cobra.Command{
		Use:   "ledger",
		Short: "Simulate a ledger: writer, zombie pause, recoveries and readers against faulty bookies",
		Long: `Each seed runs one ledger: a writer adding entries, usually freezing part-way (a GC
pause) and resuming as a zombie, one or two recoveries fencing and closing the ledger,
and readers reading it back, over modelled bookies (journal fsync, crashes, fencing) and
a network with delay, loss and partitions. Checkers: acknowledged entries survive
recovery, readers and recoveries agree, no acknowledgement reaches the old writer past
the recovered end, acknowledgements in entry order, zone-aware write quorums, and a
complete fence before recovery reads on.

Prints one line per seed with a safety violation and the trace of the first one; the
last line is "sim ledger seeds=N violations=V". Exits non-zero when V > 0.
Mutants (deliberately broken protocols the checkers must catch): ` + strings.Join(sim.Mutants, ", ") + `.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runSimLedger(cmd.OutOrStdout(), o, cmd.Flags().Changed("seed"))
		},
	}
	o.register(cmd, sim.Mutants)
	return cmd
}

// register adds the flags every simulation shares.
func (o *simLedgerOptions) register(cmd *cobra.Command, mutants []string) {
	f := cmd.Flags()
	f.StringVar(&o.seeds, "seeds", "1-100", "range of seeds to run, A-B (or one seed A)")
	f.Int64Var(&o.seed, "seed", 0, "replay one seed exactly and print its whole trace")
	f.StringVar(&o.mutant, "mutant", "", "run a deliberately broken protocol: "+strings.Join(mutants, ", "))
	f.IntVar(&o.workers, "workers", runtime.GOMAXPROCS(0), "seeds run in parallel (each seed is deterministic on its own)")
}

// errSafetyViolations makes the command exit non-zero after its report.
var errSafetyViolations = errors.New("safety violations found")

func runSimLedger(out io.Writer, o simLedgerOptions, single bool) error {
	if _, err := sim.ParseMutant(o.mutant); err != nil {
		return err
	}
	if single {
		return replaySeed(out, o)
	}
	first, last, err := parseSeedRange(o.seeds)
	if err != nil {
		return err
	}
	if o.workers < 1 {
		o.workers = 1
	}
	opts := sim.LedgerOptions{Mutant: o.mutant}
	results := runSeedRange(first, last, o.workers, func(seed int64) seedResult {
		r := sim.RunLedger(seed, opts)
		return seedResult{Seed: r.Seed, Scenario: r.Scenario, Violations: r.Violations, Liveness: r.Liveness, Trace: r.Trace}
	})
	return reportSeedRange(out, "ledger", o.mutant, results, "every seed finished within the time bound")
}

// seedResult is what a range report needs from any simulation's result.
type seedResult struct {
	Seed       int64
	Scenario   string
	Violations []string
	Liveness   string
	Trace      []string
}

// reportSeedRange prints one line per violating seed, the trace of the
// first, the liveness summary and the contract's last line
// "sim NAME seeds=N violations=V"; it fails when V > 0.
func reportSeedRange(out io.Writer, name, mutant string, results []seedResult, allLive string) error {
	var violating, liveness []seedResult
	kinds := map[string]int{}
	for _, r := range results {
		if r.Liveness != "" {
			liveness = append(liveness, r)
		}
		if len(r.Violations) == 0 {
			continue
		}
		violating = append(violating, r)
		seen := map[string]bool{}
		for _, v := range r.Violations {
			kind, _, _ := strings.Cut(v, ":")
			if !seen[kind] {
				seen[kind] = true
				kinds[kind]++
			}
		}
		fmt.Fprintf(out, "seed %d: %s\n", r.Seed, r.Violations[0])
	}
	if len(violating) > 0 {
		r := violating[0]
		fmt.Fprintf(out, "\ntrace of seed %d (replay: quire sim %s --seed %d%s)\nscenario: %s\n", r.Seed, name, r.Seed, mutantFlag(mutant), r.Scenario)
		for _, line := range r.Trace {
			fmt.Fprintln(out, "  "+line)
		}
		for _, v := range r.Violations {
			fmt.Fprintln(out, "violation: "+v)
		}
		fmt.Fprintf(out, "\nseeds with a violation, by checker: %s\n", formatCounts(kinds))
	}
	if len(liveness) > 0 {
		var seeds []string
		for _, r := range liveness {
			seeds = append(seeds, strconv.FormatInt(r.Seed, 10))
		}
		fmt.Fprintf(out, "liveness: %d seeds did not finish within the time bound (not counted as violations): %s\n", len(liveness), strings.Join(seeds, ", "))
		fmt.Fprintf(out, "liveness: seed %d: %s\n", liveness[0].Seed, liveness[0].Liveness)
	} else {
		fmt.Fprintln(out, "liveness: "+allLive)
	}
	fmt.Fprintf(out, "sim %s seeds=%d violations=%d\n", name, len(results), len(violating))
	if len(violating) > 0 {
		return fmt.Errorf("sim %s: %d of %d seeds: %w", name, len(violating), len(results), errSafetyViolations)
	}
	return nil
}

// runSeedRange runs seeds first..last on workers goroutines and returns the
// results in seed order. Traces are kept only for the lowest violating seed
// seen so far, to bound memory on long runs.
func runSeedRange(first, last int64, workers int, run func(seed int64) seedResult) []seedResult {
	results := make([]seedResult, last-first+1)
	next := make(chan int64)
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		lowest = last + 1 // lowest violating seed so far
	)
	for range max(workers, 1) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for seed := range next {
				r := run(seed)
				mu.Lock()
				if len(r.Violations) > 0 && seed < lowest {
					if lowest <= last {
						results[lowest-first].Trace = nil
					}
					lowest = seed
				} else {
					r.Trace = nil
				}
				results[seed-first] = r
				mu.Unlock()
			}
		}()
	}
	for seed := first; seed <= last; seed++ {
		next <- seed
	}
	close(next)
	wg.Wait()
	return results
}

// replaySeed runs one seed and prints everything about it.
func replaySeed(out io.Writer, o simLedgerOptions) error {
	r := sim.RunLedger(o.seed, sim.LedgerOptions{Mutant: o.mutant, Verbose: true})
	if r.Err != nil {
		return r.Err
	}
	fmt.Fprintf(out, "seed %d%s\nscenario: %s\n", r.Seed, mutantFlag(o.mutant), r.Scenario)
	for _, line := range r.Trace {
		fmt.Fprintln(out, "  "+line)
	}
	st := r.Stats
	fmt.Fprintf(out, "stats: events=%d messages=%d dropped=%d entries=%d acked=%d last-entry=%d crashes=%d partitions=%d outages=%d writer-paused=%v writer-end=%s virtual-time=%v\n",
		st.Events, st.Messages, st.Dropped, st.EntriesAdded, st.Acked, st.LastEntryID, st.Crashes, st.Partitions, st.Outages, st.WriterPaused, st.WriterEnd, st.VirtualTime)
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
	fmt.Fprintf(out, "sim ledger seeds=1 violations=%d\n", violations)
	if violations > 0 {
		return fmt.Errorf("sim ledger: seed %d: %w", r.Seed, errSafetyViolations)
	}
	return nil
}

// parseSeedRange parses "A-B" or "A" (A ≤ B, both ≥ 0).
func parseSeedRange(s string) (first, last int64, err error) {
	a, b, isRange := strings.Cut(strings.TrimSpace(s), "-")
	first, err = strconv.ParseInt(a, 10, 64)
	if err != nil || first < 0 {
		return 0, 0, fmt.Errorf("--seeds %q: want A-B with 0 ≤ A ≤ B", s)
	}
	last = first
	if isRange {
		last, err = strconv.ParseInt(b, 10, 64)
		if err != nil || last < first {
			return 0, 0, fmt.Errorf("--seeds %q: want A-B with 0 ≤ A ≤ B", s)
		}
	}
	return first, last, nil
}

func mutantFlag(m string) string {
	if m == "" {
		return ""
	}
	return " --mutant " + m
}

func formatCounts(counts map[string]int) string {
	keys := make([]string, 0, len(counts))
	for k := range counts {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s=%d", k, counts[k])
	}
	return strings.Join(parts, " ")
}

func newSimTopicCommand() *cobra.Command {
	var o simLedgerOptions
	cmd := &cobra.Command{
		Use:   "topic",
		Short: "Simulate a topic: producers, consumers and owners that crash, freeze and take over",
		Long: `Each seed runs one topic (the managed ledger, mlog.Topic) over a modelled ledger
service (delayed results, failed adds, recover-and-close fencing that may keep written but
unacknowledged entries, deletion) and the in-memory metadata store (delays, outages, writes
whose answer is lost). Producers append through the current owner; consumers on 1-3 cursors
acknowledge out of order (with holes, sometimes cumulatively) under a random persisted-range
limit; retention and trimming run; two or three brokers take the topic over in turn after
the owner crashes or freezes (a zombie). Checkers: acknowledged messages stay readable from
the listed ledgers until consumed and legitimately trimmed; after a takeover persisted acks
are not redelivered and unacknowledged messages are; a ledger is deleted only once every
cursor consumed it and retention lets it go; the record changes only by CAS and a fenced
owner's append never succeeds after the new owner opened.

Prints one line per seed with a safety violation and the trace of the first one; the
last line is "sim topic seeds=N violations=V". Exits non-zero when V > 0.
Mutants: ` + strings.Join(sim.TopicMutants, ", ") + `.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runSimTopic(cmd.OutOrStdout(), o, cmd.Flags().Changed("seed"))
		},
	}
	o.register(cmd, sim.TopicMutants)
	return cmd
}

func runSimTopic(out io.Writer, o simLedgerOptions, single bool) error {
	if _, err := sim.ParseTopicMutant(o.mutant); err != nil {
		return err
	}
	if single {
		return replayTopicSeed(out, o)
	}
	first, last, err := parseSeedRange(o.seeds)
	if err != nil {
		return err
	}
	opts := sim.TopicOptions{Mutant: o.mutant}
	results := runSeedRange(first, last, o.workers, func(seed int64) seedResult {
		r := sim.RunTopic(seed, opts)
		return seedResult{Seed: r.Seed, Scenario: r.Scenario, Violations: r.Violations, Liveness: r.Liveness, Trace: r.Trace}
	})
	return reportSeedRange(out, "topic", o.mutant, results, "every seed produced all its messages and ended with an open owner")
}

// replayTopicSeed runs one topic seed and prints everything about it.
func replayTopicSeed(out io.Writer, o simLedgerOptions) error {
	r := sim.RunTopic(o.seed, sim.TopicOptions{Mutant: o.mutant, Verbose: true})
	if r.Err != nil {
		return r.Err
	}
	return printReplay(out, "topic", o.mutant, seedResult{Seed: r.Seed, Scenario: r.Scenario, Violations: r.Violations,
		Liveness: r.Liveness, Trace: r.Trace}, r.Stats)
}

// printReplay prints everything about one replayed seed, its last line
// "sim NAME seeds=1 violations=V", and fails when V > 0.
func printReplay(out io.Writer, name, mutant string, r seedResult, stats any) error {
	fmt.Fprintf(out, "seed %d%s\nscenario: %s\n", r.Seed, mutantFlag(mutant), r.Scenario)
	for _, line := range r.Trace {
		fmt.Fprintln(out, "  "+line)
	}
	fmt.Fprintf(out, "stats: %+v\n", stats)
	if r.Liveness != "" {
		fmt.Fprintln(out, "liveness: "+r.Liveness)
	}
	for _, v := range r.Violations {
		fmt.Fprintln(out, "violation: "+v)
	}
	violations := min(len(r.Violations), 1)
	fmt.Fprintf(out, "sim %s seeds=1 violations=%d\n", name, violations)
	if violations > 0 {
		return fmt.Errorf("sim %s: seed %d: %w", name, r.Seed, errSafetyViolations)
	}
	return nil
}

func newSimTxnCommand() *cobra.Command {
	var o simLedgerOptions
	cmd := &cobra.Command{
		Use:   "txn",
		Short: "Simulate Kafka transactions: the coordinator core under store, marker and coordinator failures",
		Long: `Each seed runs the transaction coordinator core (internal/kafka/txn) over a modelled
metadata store (delays, failed writes, writes that apply but whose answer is lost),
modelled partitions that take transactional records and markers (delayed up to 5 or 50 ms,
failing; a producer's markers applied only in increasing decision order, as
internal/partition does), three transactional ids used by two producer instances each
that fence each other, clock jumps past transaction timeouts, and coordinator failovers
(a new core loaded from the store; the old one's answers lost, its markers still landing).
Checkers: a marker leaves only under the durable decision it carries; once the faults heal,
every record of a transaction whose EndTxn was answered ended on its partition with the
answered outcome; once InitProducerID answered epoch e, no request of an older epoch succeeds.

Prints one line per seed with a safety violation and the trace of the first one; the
last line is "sim txn seeds=N violations=V". Exits non-zero when V > 0.
Mutants: ` + strings.Join(sim.TxnMutants, ", ") + `.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runSimTxn(cmd.OutOrStdout(), o, cmd.Flags().Changed("seed"))
		},
	}
	o.register(cmd, sim.TxnMutants)
	return cmd
}

func runSimTxn(out io.Writer, o simLedgerOptions, single bool) error {
	if single {
		r := sim.RunTxn(o.seed, sim.TxnOptions{Mutant: o.mutant, Verbose: true})
		if r.Err != nil {
			return r.Err
		}
		return printReplay(out, "txn", o.mutant, seedResult{Seed: r.Seed, Scenario: r.Scenario, Violations: r.Violations,
			Liveness: r.Liveness, Trace: r.Trace}, r.Stats)
	}
	first, last, err := parseSeedRange(o.seeds)
	if err != nil {
		return err
	}
	if r := sim.RunTxn(first, sim.TxnOptions{Mutant: o.mutant}); r.Err != nil {
		return r.Err
	}
	results := runSeedRange(first, last, o.workers, func(seed int64) seedResult {
		r := sim.RunTxn(seed, sim.TxnOptions{Mutant: o.mutant})
		return seedResult{Seed: r.Seed, Scenario: r.Scenario, Violations: r.Violations, Liveness: r.Liveness, Trace: r.Trace}
	})
	return reportSeedRange(out, "txn", o.mutant, results, "every seed settled: no decision left undone once the faults healed")
}
