package sim

import (
	"slices"
	"strings"
	"testing"
)

// TestSimTopicDeterministic: the same seed gives the same run, trace included.
func TestSimTopicDeterministic(t *testing.T) {
	for _, tc := range []struct {
		seed   int64
		mutant string
	}{{1, ""}, {17, ""}, {3, "early-trim"}} {
		a := RunTopic(tc.seed, TopicOptions{Mutant: tc.mutant, Verbose: true})
		b := RunTopic(tc.seed, TopicOptions{Mutant: tc.mutant, Verbose: true})
		if a.Err != nil {
			t.Fatal(a.Err)
		}
		if len(a.Trace) < 100 {
			t.Fatalf("seed %d: trace of %d events is too short to mean anything", tc.seed, len(a.Trace))
		}
		if ta, tb := strings.Join(a.Trace, "\n"), strings.Join(b.Trace, "\n"); ta != tb {
			t.Fatalf("seed %d mutant %q: traces differ (%d vs %d bytes)", tc.seed, tc.mutant, len(ta), len(tb))
		}
		if !slices.Equal(a.Violations, b.Violations) || a.Stats != b.Stats || a.Scenario != b.Scenario {
			t.Fatalf("seed %d mutant %q: results differ:\n%+v\n%+v", tc.seed, tc.mutant, a.Stats, b.Stats)
		}
	}
}

// TestSimTopicNoViolations runs the real core over a range of seeds: no safety
// violation, and the scenario generator reaches what the checkers are about.
func TestSimTopicNoViolations(t *testing.T) {
	const seeds = 200
	reached := map[string]int{}
	for seed := int64(1); seed <= seeds; seed++ {
		r := RunTopic(seed, TopicOptions{})
		if r.Err != nil {
			t.Fatal(r.Err)
		}
		if len(r.Violations) > 0 {
			t.Fatalf("seed %d: %s\nscenario: %s\ntrace:\n%s", seed, r.Violations[0], r.Scenario, strings.Join(r.Trace, "\n"))
		}
		st := r.Stats
		if st.GarbageLeft > 0 {
			t.Errorf("seed %d: the final record still names %d garbage ledgers not deleted", seed, st.GarbageLeft)
		}
		for name, hit := range map[string]bool{
			"crash":                 st.Crashes > 0,
			"zombie pause":          st.Pauses > 0,
			"owner fenced":          st.FencedOwners > 0,
			"zombie write rejected": st.ZombieWritesRejected > 0,
			"rollover":              st.Rollovers > 0,
			"trim":                  st.TrimmedLedgers > 0,
			"over range limit":      st.OverLimit > 0,
			"redelivery":            st.Redelivered > 0,
			"recovery kept unacked": st.RecoveredUnacked > 0,
			"cumulative ack":        st.CumulativeAcks > 0,
			"metadata outage":       st.Outages > 0,
			"ambiguous metadata":    st.AmbiguousMeta > 0,
			"append error":          st.AppendErrors > 0,
			"ttl expired":           st.TTLExpirations > 0,
			"backlog quota":         st.QuotaRejected > 0,
			"compaction":            st.Compactions > 0,
			"compaction crash":      st.CompactionsInterrupted > 0,
		} {
			if hit {
				reached[name]++
			}
		}
	}
	for _, name := range []string{"crash", "zombie pause", "owner fenced", "zombie write rejected", "rollover", "trim",
		"over range limit", "redelivery", "recovery kept unacked", "cumulative ack", "metadata outage", "ambiguous metadata", "append error", "ttl expired", "backlog quota", "compaction", "compaction crash"} {
		if reached[name] == 0 {
			t.Errorf("no run of seeds 1-%d reached %q", seeds, name)
		}
	}
}

// TestSimTopicEarlyTrimCaught: the early-trim mutant (a ledger counts as
// consumed one entry too early) is caught by checker 3 on a small range.
func TestSimTopicEarlyTrimCaught(t *testing.T) {
	caught := 0
	for seed := int64(1); seed <= 10; seed++ {
		r := RunTopic(seed, TopicOptions{Mutant: "early-trim"})
		if r.Err != nil {
			t.Fatal(r.Err)
		}
		if len(r.Violations) > 0 {
			if !strings.HasPrefix(r.Violations[0], kindTopicEarlyDelete+":") {
				t.Fatalf("seed %d: first violation is not %s: %s", seed, kindTopicEarlyDelete, r.Violations[0])
			}
			caught++
		}
	}
	if caught == 0 {
		t.Fatal("early-trim not caught in seeds 1-10")
	}
	if r := RunTopic(1, TopicOptions{Mutant: "bogus"}); r.Err == nil {
		t.Fatal("unknown mutant accepted")
	}
}

// TestSimTopicCompactDropLiveCaught: the compact-drop-live mutant (the
// compactor leaves out one key's surviving entry) is caught by the
// compaction checker, and only by it.
func TestSimTopicCompactDropLiveCaught(t *testing.T) {
	caught := 0
	for seed := int64(1); seed <= 20; seed++ {
		r := RunTopic(seed, TopicOptions{Mutant: compactDropLive})
		if r.Err != nil {
			t.Fatal(r.Err)
		}
		if len(r.Violations) > 0 {
			if !strings.HasPrefix(r.Violations[0], kindTopicCompactionLost+":") {
				t.Fatalf("seed %d: first violation is not %s: %s", seed, kindTopicCompactionLost, r.Violations[0])
			}
			caught++
		}
	}
	if caught == 0 {
		t.Fatal("compact-drop-live not caught in seeds 1-20")
	}
	t.Logf("caught in %d of 20 seeds", caught)
}
