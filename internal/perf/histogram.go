package perf

import (
	"fmt"
	"io"
	"math"
	"math/bits"
	"time"
)

// Histogram counts durations in log-spaced buckets, HdrHistogram's way: each
// power of two of nanoseconds is split into histSubBuckets equal sub-buckets,
// so any percentile is reported within 1/histSubBuckets (3.2%) of the true
// value, in fixed memory, with O(1) recording. Durations under
// histSubBuckets ns are exact; those over histMax are counted in the last
// bucket (Max stays exact).
//
// Not safe for concurrent use: callers hold their own lock.
type Histogram struct {
	counts   [histBuckets]uint64
	count    uint64
	sum      time.Duration
	min, max time.Duration // valid when count > 0
}

const (
	histSubBits    = 5
	histSubBuckets = 1 << histSubBits // linear sub-buckets per power of two
	// histMaxBits bounds the tracked range: 2^42 ns is 73 minutes, far past
	// any latency a benchmark cares about.
	histMaxBits = 42
	histBuckets = (histMaxBits - histSubBits + 1) * histSubBuckets
)

// histIndex maps a duration to its bucket. Invariant: histLower(histIndex(d))
// <= d < histUpper(histIndex(d)) for 0 <= d < 2^histMaxBits.
func histIndex(d time.Duration) int {
	if d < 0 {
		d = 0
	}
	v := uint64(d)
	if v < histSubBuckets {
		return int(v)
	}
	exp := bits.Len64(v) - 1 // v in [2^exp, 2^(exp+1))
	if exp >= histMaxBits {
		return histBuckets - 1
	}
	group := exp - histSubBits + 1
	sub := int(v>>(exp-histSubBits)) - histSubBuckets
	return group*histSubBuckets + sub
}

// histLower is the smallest duration counted in bucket i.
func histLower(i int) time.Duration {
	if i < histSubBuckets {
		return time.Duration(i)
	}
	group, sub := i/histSubBuckets, i%histSubBuckets
	return time.Duration(uint64(histSubBuckets+sub) << (group - 1))
}

// histUpper is the smallest duration past bucket i.
func histUpper(i int) time.Duration {
	if i < histSubBuckets {
		return time.Duration(i + 1)
	}
	group := i / histSubBuckets
	return histLower(i) + time.Duration(uint64(1)<<(group-1))
}

// Record counts one duration.
func (h *Histogram) Record(d time.Duration) {
	h.counts[histIndex(d)]++
	if h.count == 0 || d < h.min {
		h.min = d
	}
	if h.count == 0 || d > h.max {
		h.max = d
	}
	h.count++
	h.sum += d
}

// Merge adds every count of o to h.
func (h *Histogram) Merge(o *Histogram) {
	if o.count == 0 {
		return
	}
	for i, c := range o.counts {
		h.counts[i] += c
	}
	if h.count == 0 || o.min < h.min {
		h.min = o.min
	}
	if h.count == 0 || o.max > h.max {
		h.max = o.max
	}
	h.count += o.count
	h.sum += o.sum
}

// Reset empties h.
func (h *Histogram) Reset() { *h = Histogram{} }

// Count is the number of durations recorded.
func (h *Histogram) Count() uint64 { return h.count }

// Max is the largest duration recorded (0 if none).
func (h *Histogram) Max() time.Duration { return h.max }

// Min is the smallest duration recorded (0 if none).
func (h *Histogram) Min() time.Duration { return h.min }

// Mean is the average duration recorded (0 if none).
func (h *Histogram) Mean() time.Duration {
	if h.count == 0 {
		return 0
	}
	return h.sum / time.Duration(h.count)
}

// Quantile returns the duration at or below which a fraction q (0..1) of the
// recorded durations lie: the upper edge of the bucket holding that rank,
// clamped to [Min, Max], so it never understates and is exact at q = 1.
// It returns 0 for an empty histogram.
func (h *Histogram) Quantile(q float64) time.Duration {
	if h.count == 0 {
		return 0
	}
	if q >= 1 {
		return h.max
	}
	rank := uint64(math.Ceil(q * float64(h.count)))
	rank = max(rank, 1)
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			v := histUpper(i) - 1
			return min(max(v, h.min), h.max)
		}
	}
	return h.max
}

// WriteBuckets prints the distribution in power-of-two buckets (each the sum
// of histSubBuckets fine buckets, so the counts are exact), from the first
// non-empty bucket to the last: range, count, share and cumulative share.
func (h *Histogram) WriteBuckets(w io.Writer, indent string) {
	if h.count == 0 {
		fmt.Fprintf(w, "%s(no samples)\n", indent)
		return
	}
	// Coarse bucket k >= 1 covers [2^(k-1), 2^k) ns; k = 0 holds only 0.
	var coarse [histMaxBits + 2]uint64
	for i, c := range h.counts {
		if c == 0 {
			continue
		}
		lower := uint64(histLower(i))
		coarse[bits.Len64(lower)] += c
	}
	first, last := -1, -1
	for k, c := range coarse {
		if c > 0 {
			if first < 0 {
				first = k
			}
			last = k
		}
	}
	var cum uint64
	for k := first; k <= last; k++ {
		lo, hi := time.Duration(0), time.Duration(1)
		if k > 0 {
			lo, hi = time.Duration(uint64(1)<<(k-1)), time.Duration(uint64(1)<<k)
		}
		cum += coarse[k]
		fmt.Fprintf(w, "%s[%10s, %10s) %10d %6.2f%% %7.3f%%\n", indent, fmtMillis(lo), fmtMillis(hi),
			coarse[k], 100*float64(coarse[k])/float64(h.count), 100*float64(cum)/float64(h.count))
	}
}

// fmtMillis renders a duration in milliseconds with three significant
// figures past the point where they matter ("0.00410 ms", "1.05 ms", "537 ms").
func fmtMillis(d time.Duration) string {
	ms := float64(d) / float64(time.Millisecond)
	switch {
	case ms == 0:
		return "0 ms"
	case ms < 0.01:
		return fmt.Sprintf("%.5f ms", ms)
	case ms < 1:
		return fmt.Sprintf("%.3f ms", ms)
	case ms < 100:
		return fmt.Sprintf("%.2f ms", ms)
	}
	return fmt.Sprintf("%.0f ms", ms)
}

// millis is a duration in (fractional) milliseconds, for printing.
func millis(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
