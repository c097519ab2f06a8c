package perf

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// A short run of every phase: the figures mean nothing at this length, but each phase must
// complete, measure something, and print its line.
func TestBenchBookieRuns(t *testing.T) {
	if testing.Short() {
		t.Skip("writes a few hundred MB")
	}
	old := slog.Default()
	slog.SetDefault(slog.New(slog.DiscardHandler))
	t.Cleanup(func() { slog.SetDefault(old) })
	var out bytes.Buffer
	res, err := BenchBookie(t.Context(), BookieBenchConfig{
		Dir: t.TempDir(), InFlight: 32, Duration: 300 * time.Millisecond, WarmUp: 100 * time.Millisecond,
		DoubleWrite: true, Out: &out,
	})
	if err != nil {
		t.Fatal(err)
	}
	for name, p := range map[string]Phase{"baseline": res.Baseline, "double-write": res.DoubleWrite, "bookie": res.Bookie} {
		if p.Entries == 0 || p.MBPerSec <= 0 || p.P99 < p.P50 || p.Batches == 0 {
			t.Errorf("%s: implausible figures %+v", name, p)
		}
	}
	if b := res.Bookie; b.Mean <= 0 || b.EngineMean <= 0 || b.EngineMean > b.Mean || b.JournalIdle < 0 {
		t.Errorf("bookie latency split implausible: mean %v, engine %v, journal idle %v", b.Mean, b.EngineMean, b.JournalIdle)
	}
	if res.Ratio <= 0 {
		t.Errorf("ratio %v", res.Ratio)
	}
	for _, want := range []string{"baseline ", "double ", "bookie ", "bookie   mean add latency "} {
		if !strings.Contains(out.String(), "\n"+want) {
			t.Errorf("output lacks a %q line:\n%s", want, out.String())
		}
	}
}
