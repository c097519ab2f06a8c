// Package chaos is `quire chaos`: a Jepsen-style harness that builds a
// cluster of real `quire` processes (three etcd members, bookies in three
// zones, brokers; for ISR mode three etcd members and three brokers
// holding the replicas), each in its own network namespace joined by a
// bridge in a namespace of its own; runs Kafka clients (franz-go) against it while a
// nemesis kills, pauses and partitions nodes on a schedule drawn from a
// seed; records every operation and its outcome in a history file; and
// checks the history: nothing acknowledged lost, nothing duplicated,
// per-partition order, offsets never reused, linearizable appends
// (porcupine).
//
// It owns the processes, namespaces and temporary directories it creates
// and removes them, also when interrupted; a sweep removes what a harness
// that died left behind. It must never touch the host's own interfaces,
// addresses or routes: every address it uses lives inside namespaces it
// created, and its own clients dial from inside them too.
package chaos

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// Config is one invocation of the harness.
type Config struct {
	// Binary is the quire binary the nodes run, with Env added to the
	// harness's environment (tests re-execute their own binary that way).
	Binary string
	Env    []string

	// Mode is "ledger" (topics on the bookies) or "isr" (a namespace in
	// ISR mode: RF 3, min.insync.replicas 2, unclean election off, the
	// replicas on three brokers; no bookies).
	Mode     string
	Duration time.Duration
	Seed     int64
	Runs     int
	Nemesis  []FaultKind
	// Targets are the roles the nemesis picks its victims from (default:
	// all three).
	Targets []Role

	Bookies, Brokers int
	Partitions       int32
	Producers        int
	Rate             int // records per second per producer
	// Acks is the producers' acks: -1 (all, the default) or 1 (the
	// leader only). acks=1 producers cannot be idempotent (Kafka's rule,
	// which franz-go enforces), and the configuration permits loss and
	// duplicates: the checker measures them instead of failing (Permits).
	Acks int
	// NoIdempotence runs the producers without idempotence: retries after
	// lost responses then write records twice, which the checker must
	// report as duplicates (the harness seen failing end to end).
	NoIdempotence bool
	// LedgerMutant runs the brokers with a deliberately broken ledger
	// protocol (quire broker --ledger-mutant; the names of quire sim ledger
	// --mutant): the harness must catch what it breaks.
	LedgerMutant string
	// BookieMutant runs the bookies deliberately broken (quire bookie
	// --bookie-mutant, e.g. ack-before-write): the harness must catch it.
	BookieMutant string

	// Keep keeps each run's directory (history, node logs, data) even
	// when the run found nothing.
	Keep bool
	// Out receives progress and the summary; the last line it gets is the
	// `chaos runs=...` line.
	Out io.Writer
}

// The ISR namespace's policy in ISR mode: Kafka's durable configuration
// (RF 3, min.insync.replicas 2, unclean.leader.election.enable false).
const (
	isrReplicationFactor = 3
	isrMinInSyncReplicas = 2
)

// Validate fills defaults and rejects what the harness cannot do yet.
func (c *Config) Validate() error {
	switch c.Mode {
	case "", "ledger":
		c.Mode = "ledger"
	case "isr":
		return c.validateISR()
	default:
		return fmt.Errorf("--mode %q: want ledger or isr", c.Mode)
	}
	if err := c.validateCommon(); err != nil {
		return err
	}
	if len(c.Targets) == 0 {
		c.Targets = []Role{RoleMeta, RoleBookie, RoleBroker}
	}
	for _, t := range c.Targets {
		if t != RoleMeta && t != RoleBookie && t != RoleBroker {
			return fmt.Errorf("--targets %q: want some of meta, bookie, broker", t)
		}
	}
	if c.Bookies == 0 {
		c.Bookies = 5
	}
	if c.Bookies < 4 || c.Bookies > 6 {
		return fmt.Errorf("--bookies %d: want 4 to 6 (E3/Qw3/Qa2 in three zones, with room for an ensemble change)", c.Bookies)
	}
	if c.Brokers == 0 {
		c.Brokers = 2
	}
	if c.Brokers < 2 || c.Brokers > 3 {
		return fmt.Errorf("--brokers %d: want 2 or 3", c.Brokers)
	}
	return nil
}

// validateISR is Validate for ISR mode: three brokers (RF 3), no bookies
// (ISR topics keep nothing on them), no ledger or bookie mutants.
func (c *Config) validateISR() error {
	if err := c.validateCommon(); err != nil {
		return err
	}
	if len(c.Targets) == 0 {
		c.Targets = []Role{RoleMeta, RoleBroker}
	}
	for _, t := range c.Targets {
		if t != RoleMeta && t != RoleBroker {
			return fmt.Errorf("--targets %q: with --mode isr want some of meta, broker (there are no bookies)", t)
		}
	}
	if c.Bookies != 0 {
		return fmt.Errorf("--bookies %d: --mode isr runs no bookies (ISR topics keep their replicas on the brokers)", c.Bookies)
	}
	if c.Brokers == 0 {
		c.Brokers = isrReplicationFactor
	}
	if c.Brokers != isrReplicationFactor {
		return fmt.Errorf("--brokers %d: --mode isr runs %d (the replication factor)", c.Brokers, isrReplicationFactor)
	}
	if c.LedgerMutant != "" || c.BookieMutant != "" {
		return fmt.Errorf("--ledger-mutant and --bookie-mutant break ledger mode; --mode isr has no mutants yet")
	}
	return nil
}

// validateCommon fills the defaults both modes share.
func (c *Config) validateCommon() error {
	if c.Duration < 20*time.Second {
		return fmt.Errorf("--duration %v: at least 20s (a warm-up, a fault and a tail)", c.Duration)
	}
	if c.Runs <= 0 {
		c.Runs = 1
	}
	if len(c.Nemesis) == 0 {
		c.Nemesis = DefaultFaultKinds
	}
	switch c.Acks {
	case 0, -1:
		c.Acks = -1
	case 1:
		// Kafka refuses idempotence without acks=all.
		c.NoIdempotence = true
	default:
		return fmt.Errorf("--acks %d: want all (-1) or 1", c.Acks)
	}
	if c.Partitions <= 0 {
		c.Partitions = 4
	}
	if c.Producers <= 0 {
		c.Producers = 3
	}
	if c.Rate <= 0 {
		c.Rate = 50
	}
	if c.Out == nil {
		c.Out = io.Discard
	}
	return nil
}

// RunResult is one run.
type RunResult struct {
	Seed    int64
	Dir     string // kept when the run found an anomaly (or with Keep)
	Faults  []FaultRecord
	Check   Result
	Restart map[string]int // nodes that ended by themselves and were restarted
	// Stalled: records were still in flight long after the workload
	// stopped with every fault healed (a liveness finding; their outcome is
	// unknown). The nodes' logs end with goroutine dumps then.
	Stalled bool
	// UnavailableByKind: seconds without any acknowledgement from each
	// fault's start to recoveryWindow after its heal (or the next fault),
	// summed per kind.
	UnavailableByKind map[FaultKind]time.Duration
	Err               error // the run could not finish (setup, read)
}

// Summary is every run of an invocation.
type Summary struct {
	Runs []RunResult
}

// Totals adds up the runs.
func (s Summary) Totals() (runs, faults, acked, lost, duplicated int, unavailable time.Duration) {
	for _, r := range s.Runs {
		runs++
		for _, f := range r.Faults {
			if !f.Skipped {
				faults++
			}
		}
		acked += r.Check.Acked
		lost += r.Check.Lost
		duplicated += r.Check.Duplicated
		unavailable += r.Check.Unavailable
	}
	return
}

// LastLine is the summary's last line.
func (s Summary) LastLine() string {
	runs, faults, acked, lost, dup, unavailable := s.Totals()
	return fmt.Sprintf("chaos runs=%d faults=%d acked=%d lost=%d duplicated=%d unavailable_s=%d",
		runs, faults, acked, lost, dup, int64(unavailable/time.Second))
}

// OK reports whether every run finished and found nothing.
func (s Summary) OK() bool {
	for _, r := range s.Runs {
		if r.Err != nil || !r.Check.Valid() {
			return false
		}
	}
	return len(s.Runs) > 0
}

// Run runs cfg.Runs runs (seeds Seed, Seed+1, ...), printing each run's
// summary and, last, the totals line. It stops early when ctx ends; every
// run cleans up whatever happens.
func Run(ctx context.Context, cfg Config) (Summary, error) {
	if err := cfg.Validate(); err != nil {
		return Summary{}, err
	}
	if err := Available(); err != nil {
		return Summary{}, err
	}
	if removed, err := Sweep(false); err != nil {
		fmt.Fprintf(cfg.Out, "sweep of leftovers: %v\n", err)
	} else if len(removed) > 0 {
		fmt.Fprintf(cfg.Out, "swept leftovers of dead harnesses: %s\n", strings.Join(removed, ", "))
	}
	var s Summary
	for i := 0; i < cfg.Runs && ctx.Err() == nil; i++ {
		r := runOnce(ctx, cfg, i, cfg.Seed+int64(i))
		s.Runs = append(s.Runs, r)
		printRun(cfg.Out, cfg, r)
	}
	fmt.Fprintln(cfg.Out, s.LastLine())
	return s, ctx.Err()
}

// runOnce builds a cluster, runs the workload under the nemesis, heals,
// reads everything back and checks the history. It removes the cluster
// (processes, namespaces, data) before returning.
func runOnce(ctx context.Context, cfg Config, index int, seed int64) (r RunResult) {
	r.Seed = seed
	start := time.Now()
	logf := func(format string, args ...any) {
		fmt.Fprintf(cfg.Out, "[%6.1fs] %s\n", time.Since(start).Seconds(), fmt.Sprintf(format, args...))
	}
	dir, err := os.MkdirTemp("", fmt.Sprintf("%s%d-%d-", namePrefix, os.Getpid(), index))
	if err != nil {
		r.Err = err
		return r
	}
	r.Dir = dir
	keep := cfg.Keep
	defer func() {
		if !keep && (ctx.Err() != nil || r.Err == nil && !r.Stalled && r.Check.Valid()) {
			// An interrupted run leaves nothing behind either.
			os.RemoveAll(dir)
			r.Dir = ""
		} else {
			// The data dirs are what fills disks; the logs and the history
			// are what a reader of a failed run needs.
			if !keep {
				removeData(dir)
			}
		}
	}()

	nw, err := newNetwork(ctx, index)
	if err != nil {
		r.Err = err
		return r
	}
	defer func() {
		if err := nw.close(); err != nil {
			logf("cleanup: %v", err)
		}
	}()
	cl := newCluster(cfg.Binary, cfg.Env, nw, filepath.Join(dir, "nodes"), clusterShape{bookies: cfg.Bookies, brokers: cfg.Brokers,
		isr: cfg.Mode == "isr", ledgerMutant: cfg.LedgerMutant, bookieMutant: cfg.BookieMutant, smallDisks: containsKind(cfg.Nemesis, FaultDiskFull)}, logf)
	defer func() {
		// Stacks for whoever reads a run that found something.
		cl.stop(ctx.Err() == nil && (keep || r.Stalled || r.Err != nil || !r.Check.Valid()))
	}()
	what := fmt.Sprintf("%d bookies, %d brokers", cfg.Bookies, cfg.Brokers)
	if cfg.Mode == "isr" {
		what = fmt.Sprintf("%d brokers with ISR replicas (namespace %s: RF %d, min.insync.replicas %d, unclean election off)",
			cfg.Brokers, isrNamespace, isrReplicationFactor, isrMinInSyncReplicas)
	}
	logf("run %d, seed %d: starting 3 etcd members, %s in namespaces %s* (logs in %s)", index, seed, what, nw.prefix, dir)
	if err := cl.start(ctx); err != nil {
		r.Err = fmt.Errorf("start cluster: %w", err)
		return r
	}
	logf("cluster healthy")

	history, err := CreateHistory(filepath.Join(dir, "history.jsonl"))
	if err != nil {
		r.Err = err
		return r
	}
	defer history.Close()
	w := &workload{brokers: cl.kafkaAddrs(), dial: nw.DialContext, topic: "chaos", partitions: cfg.Partitions, replicationFactor: 1,
		producers: cfg.Producers, rate: cfg.Rate, acks: cfg.Acks, idempotent: !cfg.NoIdempotence, history: history, logf: logf}
	if cfg.Mode == "isr" {
		w.replicationFactor = isrReplicationFactor
	}
	setupCtx, cancel := context.WithTimeout(ctx, 60*time.Second)
	err = w.createTopic(setupCtx)
	cancel()
	if err != nil {
		r.Err = err
		return r
	}

	var targets []string
	for _, n := range cl.nodes {
		if containsRole(cfg.Targets, n.role) {
			targets = append(targets, n.name)
		}
	}
	schedule := Schedule(seed, cfg.Duration, cfg.Nemesis, targets)
	kind := "idempotent"
	if cfg.NoIdempotence {
		kind = "NON-idempotent"
	}
	acks := "all"
	if cfg.Acks == 1 {
		acks = "1"
	}
	logf("workload: %d %s acks=%s producers, %d records/s each, %d partitions; consumer group %s committing every %v; %d faults scheduled",
		cfg.Producers, kind, acks, cfg.Rate, cfg.Partitions, chaosGroup, commitEvery, len(schedule))

	stop := make(chan struct{})
	produced := make(chan struct{})
	go func() {
		defer close(produced)
		r.Stalled = !w.produce(ctx, stop, deliveryTimeout+10*time.Second)
	}()
	consumed := make(chan struct{})
	go func() {
		defer close(consumed)
		w.consumeGroup(ctx, stop)
	}()
	workStart := time.Now()
	nemCtx, cancelNemesis := context.WithDeadline(ctx, workStart.Add(cfg.Duration))
	m := &nemesis{cluster: cl, history: history, logf: logf}
	r.Faults = m.run(nemCtx, workStart, schedule)
	<-nemCtx.Done()
	cancelNemesis()
	close(stop)
	logf("workload stopped; waiting for the outcome of records in flight")
	<-produced
	<-consumed

	// Everything is healed; let the cluster settle before the final read.
	healCtx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	if err := cl.waitHealthy(healCtx, 2*time.Minute); err != nil {
		logf("after healing: %v (reading anyway)", err)
	}
	logf("reading every partition back")
	if err := w.readAll(healCtx); err != nil {
		r.Err = fmt.Errorf("final read: %w", err)
	}
	if err := w.finalObservation(healCtx); err != nil && r.Err == nil {
		r.Err = err
	}
	r.Restart = cl.selfRestarts()
	r.Check = Check(history.Events())
	r.Check.Permits = cfg.Permits()
	r.UnavailableByKind = unavailableByKind(r.Faults, history.Events())
	if err := history.Close(); err != nil && r.Err == nil {
		r.Err = err
	}
	return r
}

// recoveryWindow is how long after a fault is healed its unavailability
// is still charged to it.
const recoveryWindow = 15 * time.Second

// unavailableByKind charges each whole second without an acknowledgement
// to the fault in whose window it falls.
func unavailableByKind(faults []FaultRecord, events []Event) map[FaultKind]time.Duration {
	acked := map[int64]bool{}
	var last time.Time
	for _, e := range events {
		if e.Kind == KindOK {
			acked[e.Time.Unix()] = true
		}
		if e.Kind == KindInvoke && e.Time.After(last) {
			last = e.Time
		}
	}
	out := map[FaultKind]time.Duration{}
	for i, f := range faults {
		if f.Skipped {
			continue
		}
		end := f.Healed.Add(recoveryWindow)
		if i+1 < len(faults) && faults[i+1].Started.Before(end) {
			end = faults[i+1].Started
		}
		if end.After(last) {
			end = last
		}
		out[f.Kind] += 0
		for sec := f.Started.Unix(); sec < end.Unix(); sec++ {
			if !acked[sec] {
				out[f.Kind] += time.Second
			}
		}
	}
	return out
}

// Replay is the command line that reruns the run with seed.
func (c Config) Replay(seed int64) string {
	var nemesis, targets []string
	for _, k := range c.Nemesis {
		nemesis = append(nemesis, string(k))
	}
	for _, t := range c.Targets {
		targets = append(targets, string(t))
	}
	line := fmt.Sprintf("quire chaos --mode %s --seed %d --duration %v --nemesis %s --targets %s --bookies %d --brokers %d --partitions %d --producers %d --rate %d",
		c.Mode, seed, c.Duration, strings.Join(nemesis, ","), strings.Join(targets, ","), c.Bookies, c.Brokers, c.Partitions, c.Producers, c.Rate)
	if c.Acks == 1 {
		line += " --acks 1" // implies no idempotence
	} else if c.NoIdempotence {
		line += " --no-idempotence"
	}
	if c.LedgerMutant != "" {
		line += " --ledger-mutant " + c.LedgerMutant
	}
	if c.BookieMutant != "" {
		line += " --bookie-mutant " + c.BookieMutant
	}
	return line
}

// Permits is what the configuration allows the checker to find without
// failing: acks=1 acknowledges records only the leader holds, so a leader
// lost before its followers fetched them loses them (Kafka's documented
// trade-off, the seed's K3), and its producers cannot be idempotent, so
// their retries may write twice. --no-idempotence with acks=all permits
// nothing: it is the broken client the checker must catch.
func (c Config) Permits() Permits {
	if c.Acks == 1 {
		return Permits{Loss: true, Duplicates: true, Why: "acks=1"}
	}
	return Permits{}
}

func containsKind(kinds []FaultKind, k FaultKind) bool {
	for _, x := range kinds {
		if x == k {
			return true
		}
	}
	return false
}

// removeData deletes the nodes' data directories and small disks' images,
// keeping logs and history.
func removeData(dir string) {
	entries, _ := os.ReadDir(filepath.Join(dir, "nodes"))
	for _, e := range entries {
		if e.IsDir() || strings.HasSuffix(e.Name(), ".img") {
			os.RemoveAll(filepath.Join(dir, "nodes", e.Name()))
		}
	}
}

// printRun writes one run's summary.
func printRun(out io.Writer, cfg Config, r RunResult) {
	c := r.Check
	fmt.Fprintf(out, "--- run seed %d\n", r.Seed)
	if r.Err != nil {
		fmt.Fprintf(out, "error: %v\n", r.Err)
	}
	byKind := map[FaultKind]int{}
	injected := 0
	for _, f := range r.Faults {
		status := ""
		switch {
		case f.Skipped:
			status = " (skipped: " + f.Err + ")"
		case f.Err != "":
			status = " (" + f.Err + ")"
		}
		if !f.Skipped {
			byKind[f.Kind]++
			injected++
		}
		fmt.Fprintf(out, "  fault at %5.1fs: %s%s\n", f.At.Seconds(), f.Fault, status)
	}
	var kinds []string
	for k, n := range byKind {
		kinds = append(kinds, fmt.Sprintf("%s=%d", k, n))
	}
	sort.Strings(kinds)
	fmt.Fprintf(out, "faults: %d (%s)\n", injected, strings.Join(kinds, " "))
	if r.Stalled {
		fmt.Fprintf(out, "STALLED: records were still in flight %v after the workload stopped with every fault healed; node logs end with goroutine dumps\n",
			deliveryTimeout+10*time.Second)
	}
	if len(r.Restart) > 0 {
		fmt.Fprintf(out, "nodes that stopped by themselves and were restarted: %v\n", r.Restart)
	}
	fmt.Fprintf(out, "produce: invoked=%d acked=%d failed=%d unknown=%d (unknown found in the log: %d)\n",
		c.Invoked, c.Acked, c.Failed, c.Unknown, c.UnknownPresent)
	fmt.Fprintf(out, "read back: %d records\n", c.Read)
	if c.Unread > 0 {
		fmt.Fprintf(out, "not checked: %d acknowledged records on partitions whose read did not finish\n", c.Unread)
	}
	fmt.Fprintf(out, "lost=%d duplicated=%d reordered=%d offset-conflicts=%d failed-but-present=%d phantoms=%d\n",
		c.Lost, c.Duplicated, c.Reordered, c.OffsetConflicts, c.FailedPresent, c.Phantoms)
	var parts []string
	for p, v := range c.Linearizable {
		parts = append(parts, fmt.Sprintf("%d:%s", p, v))
	}
	sort.Strings(parts)
	fmt.Fprintf(out, "linearizable (porcupine, per partition): %s\n", strings.Join(parts, " "))
	fmt.Fprintf(out, "consumer group %s: commits acknowledged=%d, committed offsets observed=%d, went back=%d; records consumed=%d, of them gone from the log later=%d\n",
		chaosGroup, c.CommitsAcked, c.CommitsObserved, c.CommitsBackwards, c.Consumed, c.ConsumedVanished)
	fmt.Fprintf(out, "unavailable: %v (seconds without any acknowledgement)", c.Unavailable)
	var perKind []string
	for _, k := range FaultKinds {
		if d, ok := r.UnavailableByKind[k]; ok {
			perKind = append(perKind, fmt.Sprintf("%s %v", k, d))
		}
	}
	if len(perKind) > 0 {
		fmt.Fprintf(out, "; by fault kind (from the fault to %v after its heal): %s", recoveryWindow, strings.Join(perKind, ", "))
	}
	fmt.Fprintln(out)
	for _, e := range c.Examples {
		fmt.Fprintf(out, "  %s\n", e)
	}
	if p := c.Permits; p.Loss || p.Duplicates {
		fmt.Fprintf(out, "permitted by %s, measured and not failing: lost=%d (%.3f%% of acknowledged) duplicated=%d offset-conflicts=%d (a partition that lost records is not linearizable either)\n",
			p.Why, c.Lost, percent(c.Lost, c.Acked), c.Duplicated, c.OffsetConflicts)
	}
	verdict := "ok"
	switch {
	case r.Err != nil || !c.Valid():
		verdict = "FAILED"
	case r.Stalled && (c.Permits.Loss || c.Permits.Duplicates):
		verdict = "nothing beyond what " + c.Permits.Why + " permits, but STALLED"
	case r.Stalled:
		verdict = "safe (nothing lost or duplicated) but STALLED"
	case c.Permits.Loss || c.Permits.Duplicates:
		verdict = "ok (nothing beyond what " + c.Permits.Why + " permits)"
	}
	if r.Dir != "" {
		fmt.Fprintf(out, "history and logs kept in %s\n", r.Dir)
	}
	fmt.Fprintf(out, "verdict: %s (replay: %s)\n", verdict, cfg.Replay(r.Seed))
}

func percent(part, whole int) float64 {
	if whole == 0 {
		return 0
	}
	return 100 * float64(part) / float64(whole)
}
