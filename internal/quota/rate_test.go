package quota

import (
	"testing"
	"time"
)

var t0 = time.Unix(1_700_000_000, 0)

func at(ms int64) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }

// TestQuotaThrottleFormula: Kafka's (observed − limit) / limit × window,
// rounded, capped, and zero within the limit.
func TestQuotaThrottleFormula(t *testing.T) {
	for _, tc := range []struct {
		observed, limit float64
		window, max     time.Duration
		want            time.Duration
	}{
		{100, 50, 3 * time.Millisecond, 0, 3 * time.Millisecond},
		{100, 50, 10 * time.Second, 0, 10 * time.Second},
		{150, 100, 11 * time.Second, 0, 5500 * time.Millisecond},
		{18.2, 18.2, 10 * time.Second, 0, 0},
		{16.5, 22.4, 10 * time.Second, 0, 0},
		{1000, 100, 10 * time.Second, time.Second, time.Second},
		{1000, 100, 10 * time.Second, 0, 90 * time.Second},
		{101, 100, 10 * time.Second, 0, 100 * time.Millisecond},
	} {
		if got := Throttle(tc.observed, tc.limit, tc.window, tc.max); got != tc.want {
			t.Errorf("Throttle(%v, %v, %v, max %v) = %v, want %v", tc.observed, tc.limit, tc.window, tc.max, got, tc.want)
		}
	}
}

// TestQuotaRateWindows: the rate divides by at least samples−1 windows at
// first, then by the time since the oldest live sample; samples older than
// samples × window stop counting; new samples are aligned to the grid.
func TestQuotaRateWindows(t *testing.T) {
	cfg := RateConfig{Samples: 11, Window: time.Second}
	var s Sampled
	s.Record(cfg, 1000, at(0))
	// Fresh: 1000 bytes over the minimum of 10 whole windows.
	if got := s.Rate(cfg, at(0)); got != 100 {
		t.Fatalf("rate at start = %v, want 100", got)
	}
	if got := s.Elapsed(cfg, at(500)); got != 10500*time.Millisecond {
		t.Fatalf("elapsed = %v, want 10.5s", got)
	}
	// One record per second for 20 seconds: the window fills and slides.
	for i := int64(1); i <= 20; i++ {
		s.Record(cfg, 1000, at(i*1000+250))
	}
	// Live samples: the last 11 windows (the current one 0.25s old): 11000
	// bytes over 10.25 s.
	got := s.Rate(cfg, at(20_250))
	if want := 11000 / 10.25; got < want-0.01 || got > want+0.01 {
		t.Fatalf("rate after sliding = %v, want %v", got, want)
	}
	if start := s.LastStart(); !start.Equal(at(20_000)) {
		t.Fatalf("current sample starts at %v, want aligned %v", start.Sub(t0), 20*time.Second)
	}
	// Quiet for longer than the whole window: everything expires.
	if got := s.Rate(cfg, at(40_000)); got != 0 {
		t.Fatalf("rate after a quiet window = %v, want 0", got)
	}
}

// TestQuotaTrackerThrottles: a producer at twice its limit is throttled
// by what brings it back to the limit; one within it never is.
func TestQuotaTrackerThrottles(t *testing.T) {
	tr := Tracker{Config: RateConfig{Samples: 11, Window: time.Second}}
	k := UsageKey{Kind: KindProduce, Bucket: Bucket{User: "alice"}}
	// 1 MB at once against 100 KB/s: 1e6 / 10 s = 100 KB/s: exactly at the
	// limit, not throttled.
	if d := tr.Record(k, 100_000, 1_000_000, at(0), 0); d != 0 {
		t.Fatalf("at the limit: throttled %v", d)
	}
	// 1 MB more: 200 KB/s over 10 s → (200−100)/100 × 10 s = 10 s.
	if d := tr.Record(k, 100_000, 1_000_000, at(0), 0); d != 10*time.Second {
		t.Fatalf("twice the limit: throttle %v, want 10s", d)
	}
	// Capped.
	if d := tr.Record(k, 100_000, 1_000_000, at(0), 2*time.Second); d != 2*time.Second {
		t.Fatalf("capped throttle %v, want 2s", d)
	}
	stats := tr.Stats(at(0))
	if len(stats) != 1 || stats[0].ThrottleAvg != 6000 {
		t.Fatalf("stats %+v, want one bucket with throttle avg 6000 ms", stats)
	}
	// Another bucket under its limit is never throttled.
	other := UsageKey{Kind: KindProduce, Bucket: Bucket{User: "bob"}}
	for i := int64(0); i < 100; i++ {
		if d := tr.Record(other, 100_000, 9_000, at(i*100), 0); d != 0 {
			t.Fatalf("bob at 90 KB/s throttled %v at %dms", d, i*100)
		}
	}
	// Unrecord takes bytes back.
	tr.Unrecord(k, 3_000_000, at(0))
	if d := tr.Record(k, 100_000, 1, at(0), 0); d != 0 {
		t.Fatalf("after unrecord: throttled %v", d)
	}
}

// TestQuotaTrackerBounded: idle buckets expire, and the bound evicts the
// one idle longest.
func TestQuotaTrackerBounded(t *testing.T) {
	tr := Tracker{MaxBuckets: 3, Idle: time.Minute}
	for i, u := range []string{"a", "b", "c", "d"} {
		tr.Record(UsageKey{Kind: KindRequest, Bucket: Bucket{User: u}}, 10, 1, at(int64(i)*1000), 0)
	}
	if tr.Len() != 3 {
		t.Fatalf("%d buckets, want 3", tr.Len())
	}
	for _, st := range tr.Stats(at(4000)) {
		if st.Key.Bucket.User == "a" {
			t.Fatal("the oldest bucket survived the bound")
		}
	}
	tr.Expire(at(10 * 60_000))
	if tr.Len() != 0 {
		t.Fatalf("%d buckets after they idled, want 0", tr.Len())
	}
}
