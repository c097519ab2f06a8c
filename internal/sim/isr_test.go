package sim

import (
	"slices"
	"strings"
	"testing"

	"quire/internal/isr"
)

// TestISRDeterministic: the same seed gives the same run, trace included.
func TestISRDeterministic(t *testing.T) {
	for _, tc := range []struct {
		seed   int64
		mutant string
	}{{1, ""}, {7, ""}, {4, "hw-ignores-min-isr"}} {
		a := RunISR(tc.seed, ISROptions{Mutant: tc.mutant, Verbose: true})
		b := RunISR(tc.seed, ISROptions{Mutant: tc.mutant, Verbose: true})
		if a.Err != nil {
			t.Fatal(a.Err)
		}
		if len(a.Trace) < 100 {
			t.Fatalf("seed %d: trace of %d lines is too short to mean anything", tc.seed, len(a.Trace))
		}
		if strings.Join(a.Trace, "\n") != strings.Join(b.Trace, "\n") || !slices.Equal(a.Violations, b.Violations) ||
			a.Scenario != b.Scenario || a.Liveness != b.Liveness {
			t.Fatalf("seed %d mutant %q: runs differ", tc.seed, tc.mutant)
		}
	}
}

// isrSituations are protocol situations a clean range must reach besides
// the fault shapes (ISRShapes), so that it cannot pass because nothing
// happened.
var isrSituations = []string{
	"election", "ELR election", "unclean election", "ISR shrink", "ISR expand", "truncation", "acks=all acknowledged",
	"NOT_ENOUGH_REPLICAS", "NOT_ENOUGH_REPLICAS_AFTER_APPEND", "session expired", "broker fenced", "controller failover",
	"diverging epoch", "fenced leader epoch", "permitted loss", "acks=1 loss", "lossy failures >= min.insync.replicas",
	"unclean recovery",
	// Reassignments (isr_reassign.go), drawn by about a third of the seeds.
	"reassignment started", "reassignment completed", "reassignment cancelled", "replica opened by a reassignment",
	"replica deleted by a reassignment",
	// Not reached yet (see the report): "controller deposed" and "CAS
	// conflict" need a deposed controller to receive a proposal; brokers
	// learn of the new controller within a heartbeat.
}

// TestISRNoViolations runs the real protocol over a range of seeds: no
// safety violation, and every fault shape and situation reached.
func TestISRNoViolations(t *testing.T) {
	seeds := int64(400)
	if testing.Short() {
		seeds = 150
	}
	shapes, situations := map[string]int{}, map[string]int{}
	liveness := 0
	for seed := int64(1); seed <= seeds; seed++ {
		r := RunISR(seed, ISROptions{})
		if r.Err != nil {
			t.Fatal(r.Err)
		}
		if len(r.Violations) > 0 {
			t.Fatalf("seed %d: %s\nscenario: %s\ntrace:\n%s", seed, r.Violations[0], r.Scenario, strings.Join(r.Trace, "\n"))
		}
		if r.Liveness != "" {
			liveness++
		}
		for k, v := range r.Stats.Shapes {
			if v > 0 {
				shapes[k]++
			}
		}
		for k, v := range r.Stats.Situations {
			if v > 0 {
				situations[k]++
			}
		}
	}
	for _, sh := range ISRShapes {
		if shapes[sh] == 0 {
			t.Errorf("no seed of 1-%d reached fault shape %q", seeds, sh)
		}
	}
	for _, s := range isrSituations {
		if situations[s] == 0 {
			t.Errorf("no seed of 1-%d reached %q", seeds, s)
		}
	}
	t.Logf("seeds 1-%d: 0 violations, %d ended without a leader; shapes %v; situations %v", seeds, liveness, shapes, situations)
}

// TestISRMutantsCaught: each of isr's mutants is caught within a small
// range of seeds (the first catching seed of each, with margin: see the
// package doc).
func TestISRMutantsCaught(t *testing.T) {
	for _, tc := range []struct {
		mutant string
		seeds  int64
	}{
		// First catching seeds when written: 7, 4, 4, 6, 6 (each mutant
		// is caught by 5-14 of seeds 1-100): `quire sim isr --seeds 1-7`
		// catches all five. The test stops at the first catch.
		{"truncate-to-hw", 100},
		{"hw-ignores-min-isr", 100},
		{"elect-out-of-sync", 100},
		{"no-epoch-fencing", 100},
		{"isr-change-without-cas", 100},
	} {
		t.Run(tc.mutant, func(t *testing.T) {
			for seed := int64(1); seed <= tc.seeds; seed++ {
				r := RunISR(seed, ISROptions{Mutant: tc.mutant})
				if r.Err != nil {
					t.Fatal(r.Err)
				}
				if len(r.Violations) > 0 {
					t.Logf("seed %d: %s", seed, r.Violations[0])
					return
				}
			}
			t.Errorf("mutant %s not caught in seeds 1-%d", tc.mutant, tc.seeds)
		})
	}
	if len(isr.MutantNames) != 5 {
		t.Errorf("isr has %d mutants; this test knows 5", len(isr.MutantNames))
	}
}

func TestISRUnknownMutant(t *testing.T) {
	if r := RunISR(1, ISROptions{Mutant: "no-such"}); r.Err == nil {
		t.Fatal("unknown mutant accepted")
	}
}

// TestISRScenarios: every K scenario comes out as the seed says, and under
// the durable configuration loses nothing.
func TestISRScenarios(t *testing.T) {
	want := map[string]int{"K3": 123, "K4": 15286, "K7": 14238}
	for _, info := range Scenarios() {
		if info.ModelledBy != "" {
			continue
		}
		t.Run(info.Name, func(t *testing.T) {
			r, err := RunScenario(info.Name, false)
			if err != nil {
				t.Fatal(err)
			}
			if !r.AsSeed {
				t.Errorf("%s differs from the seed:\n%s", info.Name, strings.Join(r.Lines, "\n"))
			}
			if n, ok := want[info.Name]; ok && r.Lost != n {
				t.Errorf("%s lost %d, the seed %d", info.Name, r.Lost, n)
			}
			d, err := RunScenario(info.Name, true)
			if err != nil {
				t.Fatal(err)
			}
			if !d.AsSeed || d.Lost != 0 {
				t.Errorf("%s --durable: as-seed=%v lost=%d:\n%s", info.Name, d.AsSeed, d.Lost, strings.Join(d.Lines, "\n"))
			}
		})
	}
	if _, err := RunScenario("K99", false); err == nil {
		t.Error("unknown scenario accepted")
	}
}
