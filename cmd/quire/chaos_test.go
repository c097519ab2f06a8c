package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"quire/internal/chaos"
)

// TestChaosLedger runs `quire chaos` for 60 seconds against ledger mode:
// 3 etcd members, 5 bookies in three zones and 2 brokers as processes (the
// test binary re-executed), each in its own network namespace, while the
// nemesis kills, pauses and partitions them. Idempotent acks=all producers
// must lose nothing and duplicate nothing, and faults of every kind must
// have been injected, so a clean verdict cannot come from nothing
// happening.
func TestChaosLedger(t *testing.T) {
	if testing.Short() {
		t.Skip("a 60-second chaos run of 10 processes")
	}
	if err := chaos.Available(); err != nil {
		t.Skipf("skipped: %v (the harness needs root and ip netns)", err)
	}
	self, err := filepath.Abs(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	// Seed 2's 60-second schedule has a kill, a pause and two partitions.
	summary, err := chaos.Run(ctx, chaos.Config{Binary: self, Env: []string{runMainEnv + "=1"},
		Mode: "ledger", Duration: 60 * time.Second, Seed: 2, Out: &out})
	t.Logf("quire chaos output:\n%s", out.String())
	if err != nil {
		t.Fatal(err)
	}
	runs, faults, acked, lost, duplicated, _ := summary.Totals()
	if runs != 1 || faults == 0 || acked == 0 {
		t.Fatalf("runs=%d faults=%d acked=%d: the run did not exercise anything", runs, faults, acked)
	}
	kinds := map[chaos.FaultKind]bool{}
	for _, f := range summary.Runs[0].Faults {
		switch {
		case f.Skipped:
			t.Logf("fault %v skipped: %s", f.Fault, f.Err)
		case f.Err != "":
			t.Errorf("fault %v: %s", f.Fault, f.Err)
		default:
			kinds[f.Kind] = true
		}
	}
	if len(kinds) != len(chaos.DefaultFaultKinds) {
		t.Errorf("fault kinds injected: %v, want all of %v", kinds, chaos.DefaultFaultKinds)
	}
	if lost != 0 || duplicated != 0 || !summary.OK() {
		t.Fatalf("lost=%d duplicated=%d ok=%v", lost, duplicated, summary.OK())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if last := lines[len(lines)-1]; last != summary.LastLine() || !strings.HasPrefix(last, "chaos runs=1 faults=") {
		t.Fatalf("last line %q, want %q", last, summary.LastLine())
	}
}

// isrTestSeed: seed 1's 60-second ISR schedule (targets meta1-3,
// broker1-3) kills broker3, partitions broker2 and pauses broker2.
const isrTestSeed = 1

// TestChaosISR runs `quire chaos --mode isr` for 60 seconds: 3 etcd
// members and 3 brokers holding the replicas of a namespace in ISR mode
// (RF 3, min.insync.replicas 2, unclean election off), while the nemesis
// kills, pauses and partitions etcd members and brokers (the ISR
// controller runs inside the brokers, so its failover is exercised too).
// Idempotent acks=all producers must lose and duplicate nothing, and
// every default fault kind must have been injected.
func TestChaosISR(t *testing.T) {
	if testing.Short() {
		t.Skip("a 60-second chaos run of 6 processes")
	}
	if err := chaos.Available(); err != nil {
		t.Skipf("skipped: %v (the harness needs root and ip netns)", err)
	}
	self, err := filepath.Abs(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	summary, err := chaos.Run(ctx, chaos.Config{Binary: self, Env: []string{runMainEnv + "=1"},
		Mode: "isr", Duration: 60 * time.Second, Seed: isrTestSeed, Out: &out})
	t.Logf("quire chaos output:\n%s", out.String())
	if err != nil {
		t.Fatal(err)
	}
	runs, faults, acked, lost, duplicated, _ := summary.Totals()
	if runs != 1 || faults == 0 || acked == 0 {
		t.Fatalf("runs=%d faults=%d acked=%d: the run did not exercise anything", runs, faults, acked)
	}
	kinds := map[chaos.FaultKind]bool{}
	for _, f := range summary.Runs[0].Faults {
		switch {
		case f.Skipped:
			t.Logf("fault %v skipped: %s", f.Fault, f.Err)
		case f.Err != "":
			t.Errorf("fault %v: %s", f.Fault, f.Err)
		default:
			kinds[f.Kind] = true
		}
	}
	if len(kinds) != len(chaos.DefaultFaultKinds) {
		t.Errorf("fault kinds injected: %v, want all of %v", kinds, chaos.DefaultFaultKinds)
	}
	if lost != 0 || duplicated != 0 || !summary.OK() {
		t.Fatalf("lost=%d duplicated=%d ok=%v", lost, duplicated, summary.OK())
	}
}

// TestChaosRefusesWhatIsNotYet: the fault kinds not built yet are refused
// with a clear error before anything starts.
func TestChaosRefusesWhatIsNotYet(t *testing.T) {
	for _, args := range [][]string{
		{"chaos", "--nemesis", "kill,clock"},
	} {
		root := newRootCommand()
		root.SetArgs(args)
		root.SetOut(&bytes.Buffer{})
		err := root.Execute()
		if err == nil || !strings.Contains(err.Error(), "not yet") {
			t.Errorf("%v: %v, want a \"not yet\" error", args, err)
		}
	}
}

// TestChaosCatchesNonIdempotentProducer shows the harness failing end to
// end: producers without idempotence, with brokers SIGKILLed under load,
// retry writes whose acknowledgement died with the broker, and the checker
// must report the duplicates. It depends on a kill landing while a write is
// on the bookies but not yet acknowledged, so it is opt-in
// (QUIRE_CHAOS_MUTANT=1): seed 5 caught 5 duplicates in one run here.
func TestChaosCatchesNonIdempotentProducer(t *testing.T) {
	if os.Getenv("QUIRE_CHAOS_MUTANT") != "1" {
		t.Skip("opt-in: QUIRE_CHAOS_MUTANT=1 (a 60-second run that catches duplicates with high, not certain, probability)")
	}
	if err := chaos.Available(); err != nil {
		t.Skipf("skipped: %v (the harness needs root and ip netns)", err)
	}
	self, err := filepath.Abs(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	summary, err := chaos.Run(ctx, chaos.Config{Binary: self, Env: []string{runMainEnv + "=1"},
		Mode: "ledger", Duration: 60 * time.Second, Seed: 5, Nemesis: []chaos.FaultKind{chaos.FaultKill},
		Targets: []chaos.Role{chaos.RoleBroker}, Rate: 200, NoIdempotence: true, Out: &out})
	t.Logf("quire chaos output:\n%s", out.String())
	for _, r := range summary.Runs {
		if r.Dir != "" {
			t.Cleanup(func() { os.RemoveAll(r.Dir) }) // a failed run keeps its logs; this failure is the point
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	if _, _, _, _, duplicated, _ := summary.Totals(); duplicated == 0 || summary.OK() {
		t.Fatalf("duplicated=%d ok=%v: the checker did not catch the non-idempotent producer", duplicated, summary.OK())
	}
}

// noFenceSeed and noFenceDuration: seed 1's 90-second schedule cuts the
// brokers off from etcd five times (6-9 s each). Whether a zombie
// acknowledges after the takeover's recovery is a race of about a second
// per cut (the zombie notices its lost lease at clientv3's next
// once-a-second check); in runs recorded in docs/reliability.md 4 of 12
// and 4 of 5 cuts lost records.
const (
	noFenceSeed     = 1
	noFenceDuration = 90 * time.Second
)

// TestChaosCatchesMutants shows the harness failing end to end on broken
// builds, each under the schedule that exposes it (the seed fixes it):
//   - a bookie that acknowledges adds before writing them
//     (--bookie-mutant ack-before-write), under a power loss of the storage
//     tier: what it acknowledged in the last two seconds is on no disk;
//   - brokers whose ledger recovery reads without the fence flag
//     (--ledger-mutant no-fence-recovery-read), under brokers cut off from
//     etcd but not from bookies or clients: the cut-off owner keeps
//     acknowledging writes to a ledger its successor recovered and closed
//     without it.
//
// The checker must report acknowledged records lost. Each run is bounded
// (30 and 90 seconds of faults; the whole test about two minutes).
func TestChaosCatchesMutants(t *testing.T) {
	if testing.Short() {
		t.Skip("chaos runs of 10 processes")
	}
	if err := chaos.Available(); err != nil {
		t.Skipf("skipped: %v (the harness needs root and ip netns)", err)
	}
	self, err := filepath.Abs(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		cfg  chaos.Config
	}{
		{"bookie ack-before-write under power loss", chaos.Config{Seed: 1, Duration: 30 * time.Second,
			Nemesis: []chaos.FaultKind{chaos.FaultPower}, BookieMutant: "ack-before-write"}},
		{"ledger no-fence-recovery-read under brokers cut off from etcd", chaos.Config{Seed: noFenceSeed, Duration: noFenceDuration,
			Nemesis: []chaos.FaultKind{chaos.FaultCutMeta}, Targets: []chaos.Role{chaos.RoleBroker}, LedgerMutant: "no-fence-recovery-read"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tc.cfg
			cfg.Binary, cfg.Env, cfg.Mode = self, []string{runMainEnv + "=1"}, "ledger"
			var out bytes.Buffer
			cfg.Out = &out
			ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
			defer cancel()
			summary, err := chaos.Run(ctx, cfg)
			t.Logf("quire chaos output:\n%s", out.String())
			for _, r := range summary.Runs {
				if r.Dir != "" {
					t.Cleanup(func() { os.RemoveAll(r.Dir) }) // a failed run keeps its logs; this failure is the point
				}
			}
			if err != nil {
				t.Fatal(err)
			}
			if _, faults, acked, lost, _, _ := summary.Totals(); faults == 0 || acked == 0 || lost == 0 || summary.OK() {
				t.Fatalf("faults=%d acked=%d lost=%d ok=%v: the checker did not catch the mutant (replay: %s)",
					faults, acked, lost, summary.OK(), cfg.Replay(cfg.Seed))
			}
		})
	}
}

// TestChaosDiskFull fills bookies' disks (each bookie's data dir is a
// small file system the harness mounts: ext4 on a loop device, or tmpfs)
// and frees them, one at a time: a bookie turns read-only, writers move
// to others, and nothing acknowledged is lost. The mounts are gone after
// the run.
func TestChaosDiskFull(t *testing.T) {
	if testing.Short() {
		t.Skip("a 40-second chaos run of 10 processes")
	}
	if err := chaos.Available(); err != nil {
		t.Skipf("skipped: %v (the harness needs root and ip netns)", err)
	}
	self, err := filepath.Abs(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	// Seed 1's 40-second schedule fills bookie4 and bookie3.
	summary, err := chaos.Run(ctx, chaos.Config{Binary: self, Env: []string{runMainEnv + "=1"}, Mode: "ledger",
		Duration: 40 * time.Second, Seed: 1, Nemesis: []chaos.FaultKind{chaos.FaultDiskFull},
		Targets: []chaos.Role{chaos.RoleBookie}, Out: &out})
	t.Logf("quire chaos output:\n%s", out.String())
	if err != nil {
		t.Fatal(err)
	}
	_, faults, acked, lost, duplicated, _ := summary.Totals()
	if faults == 0 || acked == 0 || lost != 0 || duplicated != 0 || !summary.OK() {
		t.Fatalf("faults=%d acked=%d lost=%d duplicated=%d ok=%v", faults, acked, lost, duplicated, summary.OK())
	}
	mounts, err := os.ReadFile("/proc/self/mounts")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(mounts), filepath.Join(os.TempDir(), "qchaos-")) {
		t.Fatalf("the run left mounts behind:\n%s", mounts)
	}
}
