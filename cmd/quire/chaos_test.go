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

// TestChaosRefusesWhatIsNotYet: --mode isr and the fault kinds not built
// yet are refused with a clear error before anything starts.
func TestChaosRefusesWhatIsNotYet(t *testing.T) {
	for _, args := range [][]string{
		{"chaos", "--mode", "isr", "--duration", "1m"},
		{"chaos", "--nemesis", "kill,disk-full"},
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
