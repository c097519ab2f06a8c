package sim

import (
	"strings"
	"testing"
)

// The transaction simulator's seeds pass, and exercise what they should;
// the early-markers mutant is caught.
func TestTxnSeeds(t *testing.T) {
	var st TxnStats
	liveness := 0
	for seed := int64(1); seed <= 300; seed++ {
		r := RunTxn(seed, TxnOptions{})
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
		st.Commits += r.Stats.Commits
		st.Aborts += r.Stats.Aborts
		st.Failovers += r.Stats.Failovers
		st.StoreFailures += r.Stats.StoreFailures
		st.MarkerFailures += r.Stats.MarkerFailures
		st.TimedOut += r.Stats.TimedOut
	}
	t.Logf("seeds 1-300: %+v, %d liveness reports", st, liveness)
	if st.Commits == 0 || st.Aborts == 0 || st.Failovers == 0 || st.StoreFailures == 0 || st.MarkerFailures == 0 || st.TimedOut == 0 {
		t.Fatalf("a situation was never reached: %+v", st)
	}
}

func TestTxnMutantsCaught(t *testing.T) {
	for _, c := range []struct {
		mutant string
		seeds  int64
	}{{"early-markers", 100}, {"no-marker-fence", 2000}} {
		caught := 0
		for seed := int64(1); seed <= c.seeds; seed++ {
			if r := RunTxn(seed, TxnOptions{Mutant: c.mutant}); len(r.Violations) > 0 {
				caught++
			}
		}
		if caught == 0 {
			t.Fatalf("the %s mutant was caught by no seed of 1-%d", c.mutant, c.seeds)
		}
		t.Logf("%s caught by %d of %d seeds", c.mutant, caught, c.seeds)
	}
}
