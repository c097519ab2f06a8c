package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"quire/internal/bookie/node"
	"quire/internal/chaos"
	"quire/internal/sim"
)

type chaosOptions struct {
	mode         string
	duration     time.Duration
	seed         int64
	runs         int
	nemesis      string
	targets      []string
	bookies      int
	brokers      int
	partitions   int32
	producers    int
	rate         int
	acks         string
	keep         bool
	noIdem       bool
	ledgerMutant string
	bookieMutant string
	cleanupOnly  bool
}

func newChaosCommand() *cobra.Command {
	var o chaosOptions
	cmd := &cobra.Command{
		Use:   "chaos",
		Short: "Faults on real processes: a cluster in network namespaces, a nemesis, Kafka clients and a checker",
		Long: `Run a cluster of real quire processes (3 etcd members, bookies in three zones,
brokers; with --mode isr 3 etcd members and 3 brokers holding the replicas of
a namespace in ISR mode, RF 3, min.insync.replicas 2, unclean leader election
off), each in its own network namespace joined by a bridge, while a nemesis
injects faults on a schedule drawn from --seed: SIGKILL and restart (kill),
SIGSTOP/SIGCONT (pause), one node cut off (partition), a minority side cut off
from the majority (split), one node cut off from the etcd members only, so a
broker loses its session while it still reaches bookies and clients (cut-meta),
every bookie and broker SIGKILLed at once (power), a bookie's disk (a broker's
in ISR mode) filled, then freed (disk-full: with this kind each such data dir
is a small file system, ext4 on a loop device or tmpfs), the other brokers
paused for 2s and then a broker killed, so a leader dies while its followers
lag (lag-kill, the seed's K3), one node cut off while another is killed
(partition-kill), a node's packets dropped in one direction only, its own to
everyone or everyone's to it (one-way). Idempotent acks=all Kafka producers (franz-go)
write unique values to several partitions (--acks 1: leader-only
acknowledgements, without idempotence, whose loss and duplicates are measured
and reported, not failures); every operation and its outcome go to a history
file; a consumer group commits offsets meanwhile and an observer fetches
them. After the run every fault is healed, every partition is read
back from the start, and the history is checked: acknowledged records lost,
records duplicated, per-producer order, offsets reused, each partition's
linearizability (porcupine), committed offsets that went back, and records
consumed during the run that the log no longer holds where they were read.

Needs root and ip netns. Everything it creates (processes, namespaces named
qchaos-<pid>-*, temporary directories and the mounts in them) is removed at
the end, on SIGINT or SIGTERM, and by the next run's sweep if the harness
itself was killed.

The last line is: chaos runs=N faults=F acked=A lost=L duplicated=D unavailable_s=U
Not here: clock jumps (the wall clock is the whole machine's, and a time
namespace only offsets the monotonic clocks of a process it starts), unclean
leader election and mutants in ISR mode.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runChaos(cmd, o) },
	}
	f := cmd.Flags()
	f.StringVar(&o.mode, "mode", "ledger", "storage architecture under test: ledger (bookies) or isr (replicas on 3 brokers, RF 3, min.insync.replicas 2, unclean election off)")
	f.DurationVar(&o.duration, "duration", 2*time.Minute, "how long the workload runs under faults, per run")
	f.Int64Var(&o.seed, "seed", 0, "seed of the fault schedule (0: from the clock); run i uses seed+i")
	f.IntVar(&o.runs, "runs", 1, "runs, each on a fresh cluster")
	f.StringVar(&o.nemesis, "nemesis", "kill,pause,partition", "fault kinds: kill, pause, partition, split (a minority side with at most one etcd member), cut-meta (a node cut off from the etcd members only, both ways, 6-10s), power (every bookie and broker killed at once), disk-full (a bookie's small file system filled, then freed; a broker's in isr mode), lag-kill (the other brokers paused 2s, then the target killed: a leader dies with lagging followers, the seed's K3), partition-kill (one node cut off while another is killed, healed together), one-way (a node's packets to everyone dropped, or everyone's to it)")
	f.StringSliceVar(&o.targets, "targets", nil, "roles the nemesis picks victims from: meta, bookie, broker (default: every role the mode runs)")
	f.IntVar(&o.bookies, "bookies", 0, "bookies (4-6, zones a, b, c in turn; 0: 5 in ledger mode, none in isr mode)")
	f.IntVar(&o.brokers, "brokers", 0, "brokers (2-3; 0: 2 in ledger mode, 3 in isr mode, which needs 3)")
	f.StringVar(&o.acks, "acks", "all", "producers' acks: all (idempotent) or 1 (the leader only; no idempotence, as Kafka requires; loss and duplicates are measured, not failures)")
	f.Int32Var(&o.partitions, "partitions", 4, "partitions of the workload's topic")
	f.IntVar(&o.producers, "producers", 3, "idempotent producers, each its own client")
	f.IntVar(&o.rate, "rate", 50, "records per second per producer")
	f.StringVar(&o.ledgerMutant, "ledger-mutant", "", "brokers run a deliberately broken ledger protocol (the names of quire sim ledger --mutant), which the checker must catch")
	f.StringVar(&o.bookieMutant, "bookie-mutant", "", "bookies run deliberately broken (ack-before-write: acknowledge adds 2s before writing them), which the checker must catch")
	f.BoolVar(&o.noIdem, "no-idempotence", false, "a broken client on purpose: producers without idempotence, whose retries write duplicates the checker must catch")
	f.BoolVar(&o.keep, "keep", false, "keep each run's directory (history, logs, data) even when it found nothing")
	f.BoolVar(&o.cleanupOnly, "cleanup-only", false, "remove leftovers of earlier harnesses (namespaces qchaos-*, their processes, temporary directories) and exit")
	return cmd
}

func runChaos(cmd *cobra.Command, o chaosOptions) error {
	out := cmd.OutOrStdout()
	if o.cleanupOnly {
		removed, err := chaos.Sweep(true)
		for _, r := range removed {
			fmt.Fprintln(out, "removed", r)
		}
		return err
	}
	kinds, err := chaos.ParseNemesis(o.nemesis)
	if err != nil {
		return err
	}
	if o.seed == 0 {
		o.seed = time.Now().UnixNano() % 1_000_000
	}
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("chaos: find own binary: %w", err)
	}
	ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	var targets []chaos.Role
	for _, t := range o.targets {
		targets = append(targets, chaos.Role(t))
	}
	var acks int
	switch o.acks {
	case "all", "-1":
		acks = -1
	case "1":
		acks = 1
	default:
		return fmt.Errorf("--acks %q: want all or 1", o.acks)
	}
	cfg := chaos.Config{Targets: targets, Binary: self, Mode: o.mode, Duration: o.duration, Seed: o.seed, Runs: o.runs, Nemesis: kinds, Acks: acks,
		Bookies: o.bookies, Brokers: o.brokers, Partitions: o.partitions, Producers: o.producers, Rate: o.rate,
		NoIdempotence: o.noIdem, LedgerMutant: o.ledgerMutant, BookieMutant: o.bookieMutant, Keep: o.keep, Out: out}
	if _, err := sim.ParseMutant(o.ledgerMutant); err != nil {
		return err
	}
	if _, err := node.ParseMutant(o.bookieMutant); err != nil {
		return err
	}
	if err := cfg.Validate(); err != nil {
		return err
	}
	fmt.Fprintf(out, "%s --runs %d\n", cfg.Replay(cfg.Seed), cfg.Runs)
	summary, err := chaos.Run(ctx, cfg)
	if err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("chaos: interrupted (everything it started is removed)")
		}
		return err
	}
	if !summary.OK() {
		return fmt.Errorf("chaos: a run failed (its replay command line is in its verdict above)")
	}
	return nil
}
