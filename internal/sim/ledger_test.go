package sim

import (
	"slices"
	"strings"
	"testing"
)

// TestLedgerDeterministic: the same seed gives the same run, trace included,
// byte for byte — for a clean run and for one that finds a violation.
func TestLedgerDeterministic(t *testing.T) {
	for _, tc := range []struct {
		seed   int64
		mutant string
	}{{1, ""}, {42, ""}, {7, "unordered-ack"}, {10, "ensemble-change-ignores-recovery"}} {
		a := RunLedger(tc.seed, LedgerOptions{Mutant: tc.mutant, Verbose: true})
		b := RunLedger(tc.seed, LedgerOptions{Mutant: tc.mutant, Verbose: true})
		if a.Err != nil {
			t.Fatal(a.Err)
		}
		if len(a.Trace) < 50 {
			t.Fatalf("seed %d: trace of %d events is too short to mean anything", tc.seed, len(a.Trace))
		}
		ta, tb := strings.Join(a.Trace, "\n"), strings.Join(b.Trace, "\n")
		if ta != tb {
			t.Fatalf("seed %d mutant %q: traces differ (%d vs %d bytes)", tc.seed, tc.mutant, len(ta), len(tb))
		}
		if !slices.Equal(a.Violations, b.Violations) || a.Stats != b.Stats || a.Scenario != b.Scenario || a.Liveness != b.Liveness {
			t.Fatalf("seed %d mutant %q: results differ:\n%+v\n%+v", tc.seed, tc.mutant, a, b)
		}
	}
}

// TestLedgerNoViolations runs the real protocol over a range of seeds: no
// safety violation, and the scenario generator reaches the situations the
// checkers are about.
func TestLedgerNoViolations(t *testing.T) {
	const seeds = 500
	reached := map[string]int{}
	liveness := 0
	for seed := int64(1); seed <= seeds; seed++ {
		r := RunLedger(seed, LedgerOptions{})
		if r.Err != nil {
			t.Fatal(r.Err)
		}
		if len(r.Violations) > 0 {
			t.Fatalf("seed %d: %s\nscenario: %s\ntrace:\n%s", seed, r.Violations[0], r.Scenario, strings.Join(r.Trace, "\n"))
		}
		if r.Liveness != "" {
			liveness++
			t.Logf("seed %d liveness: %s", seed, r.Liveness)
		}
		st := r.Stats
		for name, hit := range map[string]bool{
			"writer paused":                                st.WriterPaused,
			"zombie fenced":                                st.WriterEnd == "fenced",
			"fenced bookie refused":                        st.FencedRejects > 0,
			"ensemble change":                              st.EnsembleChanges > 0,
			"CAS conflict":                                 st.CASConflicts > 0,
			"ambiguous metadata":                           st.AmbiguousMeta > 0,
			"crash lost unsynced":                          st.LostUnsynced > 0,
			"bookie crash":                                 st.Crashes > 0,
			"partition":                                    st.Partitions > 0,
			"metadata outage":                              st.Outages > 0,
			"reader retried":                               st.ReaderRetries > 0,
			"messages dropped":                             st.Dropped > 0,
			"entries past first ack":                       st.LastEntryID > 0,
			"writer closed it itself":                      st.WriterEnd == "closed",
			"explicit LAC applied":                         st.ExplicitLacs > 0,
			"reader range failed over":                     st.ReaderFailovers > 0,
			"reader short answer":                          st.ReaderShortAnswers > 0,
			"reader across fragments":                      st.ReaderFragments > 0,
			"fault while reading":                          st.ReaderPhaseFaults > 0,
			"read across fragments, failed over":           st.ReaderFragments > 0 && st.ReaderFailovers > 0,
			"disk full":                                    st.DisksFull > 0,
			"recovery ended before an unconfirmable entry": st.RecoveryAbandoned > 0,
		} {
			if hit {
				reached[name]++
			}
		}
	}
	for _, name := range []string{"writer paused", "zombie fenced", "fenced bookie refused", "ensemble change", "CAS conflict",
		"ambiguous metadata", "crash lost unsynced", "bookie crash", "partition", "metadata outage", "reader retried",
		"messages dropped", "entries past first ack", "writer closed it itself", "explicit LAC applied",
		"reader range failed over", "reader short answer", "reader across fragments", "fault while reading",
		"read across fragments, failed over", "disk full", "recovery ended before an unconfirmable entry"} {
		if reached[name] == 0 {
			t.Errorf("no run of seeds 1-%d reached %q: the scenario generator lost a fault", seeds, name)
		}
	}
	t.Logf("seeds 1-%d: 0 violations, %d liveness timeouts; situations reached: %v", seeds, liveness, reached)
}

// TestLedgerMutantsCaught: every deliberately broken protocol is caught by
// the checker aimed at it, within a small range of seeds. The ranges have
// margin over the first catching seed (see the package's report) so that a
// change to the cores that shifts the runs does not break the test.
func TestLedgerMutantsCaught(t *testing.T) {
	for _, tc := range []struct {
		mutant string
		seeds  int64
		kinds  []string // each must show up in some seed of the range
	}{
		// weak-fence: only the fence-coverage checker can see it. Recovery's
		// fencing reads still fence Qw−Qa+1 bookies of the entry where it
		// stops, so the zombie cannot get an entry past the end acknowledged.
		{"weak-fence", 40, []string{kindFenceIncomplete}},
		// no-fence-recovery-read: the zombie keeps getting acks after close.
		{"no-fence-recovery-read", 60, []string{kindFenceIncomplete, kindZombieAck}},
		// unordered-ack: out-of-order acks, and acknowledged entries that
		// recovery (correctly) does not keep because an earlier one is missing.
		{"unordered-ack", 60, []string{kindAckOrder, kindAckedLost}},
		// ensemble-change-ignores-recovery: the zombie reopens the recovered
		// ledger on fresh bookies and gets entries past the end acknowledged.
		{"ensemble-change-ignores-recovery", 150, []string{kindReopened, kindZombieAck}},
		// explicit-lac-ahead: only the bookie LAC checker sees it (the
		// writer's invariant check stands aside for the mutant): an idle
		// writer's update reaches a bookie with entries still unacknowledged.
		{"explicit-lac-ahead", 60, []string{kindLACAhead}},
	} {
		t.Run(tc.mutant, func(t *testing.T) {
			found := map[string]int64{}
			violating := 0
			for seed := int64(1); seed <= tc.seeds; seed++ {
				r := RunLedger(seed, LedgerOptions{Mutant: tc.mutant})
				if r.Err != nil {
					t.Fatal(r.Err)
				}
				if len(r.Violations) > 0 {
					violating++
				}
				for _, v := range r.Violations {
					kind, _, _ := strings.Cut(v, ":")
					if _, ok := found[kind]; !ok {
						found[kind] = seed
					}
				}
			}
			for _, k := range tc.kinds {
				if _, ok := found[k]; !ok {
					t.Errorf("mutant %s: no %s violation in seeds 1-%d (found %v)", tc.mutant, k, tc.seeds, found)
				}
			}
			t.Logf("mutant %s: %d of %d seeds violate; first seed per kind: %v", tc.mutant, violating, tc.seeds, found)
		})
	}
}

func TestLedgerUnknownMutant(t *testing.T) {
	if r := RunLedger(1, LedgerOptions{Mutant: "no-such-mutant"}); r.Err == nil {
		t.Fatal("unknown mutant accepted")
	}
	for _, name := range Mutants {
		if _, err := ParseMutant(name); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}
