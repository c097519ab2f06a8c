package perf

import (
	"bytes"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"
)

// The bucket functions tile the range: each bucket starts where the previous
// one ends, and every duration maps to the bucket that contains it.
func TestHistogramBucketsTile(t *testing.T) {
	for i := 1; i < histBuckets; i++ {
		if histLower(i) != histUpper(i-1) {
			t.Fatalf("bucket %d starts at %d, bucket %d ends at %d", i, histLower(i), i-1, histUpper(i-1))
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 100000 {
		d := time.Duration(rng.Int64N(1 << histMaxBits))
		i := histIndex(d)
		if d < histLower(i) || d >= histUpper(i) {
			t.Fatalf("%d in bucket %d = [%d, %d)", d, i, histLower(i), histUpper(i))
		}
		// The relative width of a bucket bounds the error of a percentile.
		if d >= histSubBuckets && float64(histUpper(i)-histLower(i)) > float64(d)/histSubBuckets {
			t.Fatalf("bucket %d too wide for %d", i, d)
		}
	}
	if got := histIndex(-5); got != 0 {
		t.Fatalf("negative duration in bucket %d", got)
	}
	if got := histIndex(100 * time.Hour); got != histBuckets-1 {
		t.Fatalf("huge duration in bucket %d", got)
	}
}

// Quantiles agree with the exact order statistic (the oracle: sort and
// index) within the bucket resolution, and never understate it.
func TestHistogramQuantilesMatchSorted(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, tc := range []struct {
		name string
		gen  func() time.Duration
	}{
		{"uniform 0-100ms", func() time.Duration { return time.Duration(rng.Int64N(int64(100 * time.Millisecond))) }},
		{"log-uniform 1us-10s", func() time.Duration {
			return time.Duration(float64(time.Microsecond) * math.Pow(10, rng.Float64()*7))
		}},
		{"small exact", func() time.Duration { return time.Duration(rng.IntN(histSubBuckets)) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var h Histogram
			var all []time.Duration
			for range 50000 {
				d := tc.gen()
				h.Record(d)
				all = append(all, d)
			}
			slices.Sort(all)
			for _, q := range []float64{0.001, 0.5, 0.9, 0.99, 0.999, 1} {
				rank := int(float64(len(all))*q+0.999999) - 1
				want := all[max(rank, 0)]
				got := h.Quantile(q)
				if got < want || float64(got-want) > float64(want)/histSubBuckets+1 {
					t.Errorf("q=%g: got %s, exact %s", q, got, want)
				}
			}
			if h.Max() != all[len(all)-1] || h.Min() != all[0] || h.Count() != uint64(len(all)) {
				t.Errorf("min/max/count %s/%s/%d, want %s/%s/%d", h.Min(), h.Max(), h.Count(), all[0], all[len(all)-1], len(all))
			}
		})
	}
}

func TestHistogramSmallCases(t *testing.T) {
	var h Histogram
	if h.Quantile(0.5) != 0 || h.Mean() != 0 {
		t.Fatal("empty histogram should report zeros")
	}
	h.Record(3 * time.Millisecond)
	for _, q := range []float64{0, 0.5, 0.99, 1} {
		if got := h.Quantile(q); got != 3*time.Millisecond {
			t.Errorf("one sample, q=%g: %s", q, got)
		}
	}
	var o Histogram
	o.Record(time.Millisecond)
	o.Record(5 * time.Millisecond)
	h.Merge(&o)
	if h.Count() != 3 || h.Min() != time.Millisecond || h.Max() != 5*time.Millisecond || h.Mean() != 3*time.Millisecond {
		t.Errorf("merged: count %d min %s max %s mean %s", h.Count(), h.Min(), h.Max(), h.Mean())
	}
	if got := h.Quantile(0.5); got < 3*time.Millisecond || got > 3*time.Millisecond*33/32 {
		t.Errorf("merged median %s", got)
	}
	h.Reset()
	if h.Count() != 0 {
		t.Error("reset left samples")
	}
}

func TestHistogramWriteBuckets(t *testing.T) {
	var h Histogram
	for range 3 {
		h.Record(1500 * time.Microsecond) // in [1.05 ms, 2.10 ms)
	}
	h.Record(5 * time.Millisecond) // in [4.19 ms, 8.39 ms)
	var buf bytes.Buffer
	h.WriteBuckets(&buf, "")
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	want := []string{
		"[   1.05 ms,    2.10 ms)          3  75.00%  75.000%",
		"[   2.10 ms,    4.19 ms)          0   0.00%  75.000%",
		"[   4.19 ms,    8.39 ms)          1  25.00% 100.000%",
	}
	if !slices.Equal(lines, want) {
		t.Errorf("got\n%s\nwant\n%s", strings.Join(lines, "\n"), strings.Join(want, "\n"))
	}
}
