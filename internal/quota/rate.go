package quota

// The rate core: Kafka's metrics Rate over a SampledStat, as its quota
// managers configure it (quota.window.num samples of
// quota.window.size.seconds each), and the throttle time of a violation.
// Deterministic: every call takes the time; no clock, goroutine or lock
// here (the caller serializes calls).
//
// As Kafka's SampledStat: a value is added to the current sample; a sample
// is complete once its window has passed, and the next record starts a new
// one aligned to the window grid (KAFKA-15045); samples older than
// samples × window are reset before a measurement. The rate is the sum of
// the live samples over the elapsed time since the oldest sample started,
// never less than samples−1 whole windows (so a first burst is not divided
// by a few milliseconds). A record that brings the rate above the limit is
// a violation, and the throttle is Kafka's (observed − limit) / limit ×
// that elapsed time: the delay after which the rate would be back at the
// limit if nothing more came.

import (
	"math"
	"time"
)

// Defaults of Kafka's quota.window.num and quota.window.size.seconds.
const (
	DefaultSamples = 11
	DefaultWindow  = time.Second
)

// RateConfig is the sampling of every rate.
type RateConfig struct {
	Samples int           // quota.window.num (default 11)
	Window  time.Duration // quota.window.size.seconds (default 1s)
}

func (c RateConfig) withDefaults() RateConfig {
	if c.Samples < 2 {
		c.Samples = DefaultSamples
	}
	if c.Window <= 0 {
		c.Window = DefaultWindow
	}
	return c
}

type sample struct {
	start  time.Time
	sum    float64
	events int64
}

// Sampled is Kafka's SampledStat of sums: the base of a Rate (sum over
// time) and an Avg (sum over events).
type Sampled struct {
	samples []sample
	current int
}

func (s *Sampled) cur(now time.Time) *sample {
	if len(s.samples) == 0 {
		s.samples = append(s.samples, sample{start: now})
		s.current = 0
	}
	return &s.samples[s.current]
}

// Record adds value at now.
func (s *Sampled) Record(cfg RateConfig, value float64, now time.Time) {
	cfg = cfg.withDefaults()
	smp := s.cur(now)
	if now.Sub(smp.start) >= cfg.Window {
		prevEnd := smp.start.Add(cfg.Window)
		start := now.Add(-(now.Sub(prevEnd) % cfg.Window)) // aligned to the grid
		s.current = (s.current + 1) % cfg.Samples
		if s.current >= len(s.samples) {
			s.samples = append(s.samples, sample{})
		}
		s.samples[s.current] = sample{start: start}
		smp = &s.samples[s.current]
	}
	smp.sum += value
	smp.events++
}

// purge resets samples too old to count.
func (s *Sampled) purge(cfg RateConfig, now time.Time) {
	expire := time.Duration(cfg.Samples) * cfg.Window
	for i := range s.samples {
		if now.Sub(s.samples[i].start) >= expire {
			s.samples[i] = sample{start: now}
		}
	}
}

func (s *Sampled) totals() (sum float64, events int64) {
	for _, smp := range s.samples {
		sum += smp.sum
		events += smp.events
	}
	return sum, events
}

// Elapsed is Kafka's Rate.windowSize: the time since the oldest live
// sample started, at least samples−1 whole windows, at least 1ms.
func (s *Sampled) Elapsed(cfg RateConfig, now time.Time) time.Duration {
	cfg = cfg.withDefaults()
	s.purge(cfg, now)
	oldest := now
	for _, smp := range s.samples {
		if smp.start.Before(oldest) {
			oldest = smp.start
		}
	}
	elapsed := now.Sub(oldest)
	// Kafka counts whole elapsed windows in milliseconds.
	elapsed = elapsed.Truncate(time.Millisecond)
	full := int(elapsed / cfg.Window)
	if minFull := cfg.Samples - 1; full < minFull {
		elapsed += time.Duration(minFull-full) * cfg.Window
	}
	return max(elapsed, time.Millisecond)
}

// Rate is the sum of the live samples per second at now.
func (s *Sampled) Rate(cfg RateConfig, now time.Time) float64 {
	cfg = cfg.withDefaults()
	elapsed := s.Elapsed(cfg, now)
	sum, _ := s.totals()
	return sum / elapsed.Seconds()
}

// Avg is the mean of the live samples' values at now (0 without any).
func (s *Sampled) Avg(cfg RateConfig, now time.Time) float64 {
	cfg = cfg.withDefaults()
	s.purge(cfg, now)
	sum, events := s.totals()
	if events == 0 {
		return 0
	}
	return sum / float64(events)
}

// LastStart is when the current sample started (zero before any record).
func (s *Sampled) LastStart() time.Time {
	if len(s.samples) == 0 {
		return time.Time{}
	}
	return s.samples[s.current].start
}

// Throttle is Kafka's throttle time for a rate observed above limit over
// the elapsed window: (observed − limit) / limit × elapsed, rounded to the
// millisecond, capped at maxThrottle (when positive); 0 within the limit.
func Throttle(observed, limit float64, elapsed, maxThrottle time.Duration) time.Duration {
	if observed <= limit || limit <= 0 {
		return 0
	}
	ms := math.Round((observed - limit) / limit * float64(elapsed.Milliseconds()))
	if maxThrottle > 0 && ms > float64(maxThrottle.Milliseconds()) {
		return maxThrottle
	}
	if ms > float64(math.MaxInt32) {
		ms = float64(math.MaxInt32)
	}
	return time.Duration(ms) * time.Millisecond
}

// Usage is what one bucket of one quota measured: the rate checked against
// the quota and the throttle times it gave (Kafka's byte-rate or
// request-time, and throttle-time).
type Usage struct {
	rate, throttle Sampled
	last           time.Time
}

// Kind is the quota a Tracker enforces.
type Kind uint8

const (
	KindProduce Kind = iota
	KindFetch
	KindRequest
	KindConnection
	kinds
)

// Key is the quota key each kind is limited by.
func (k Kind) Key() string {
	switch k {
	case KindProduce:
		return ProducerByteRate
	case KindFetch:
		return ConsumerByteRate
	case KindRequest:
		return RequestPercentage
	default:
		return ConnectionCreationRate
	}
}

// String is Kafka's quota type name (the JMX type of its metrics).
func (k Kind) String() string {
	switch k {
	case KindProduce:
		return "Produce"
	case KindFetch:
		return "Fetch"
	case KindRequest:
		return "Request"
	default:
		return "ConnectionCreation"
	}
}

// UsageKey names a Usage: a kind, the bucket (user, client id) and, for
// connections, the IP.
type UsageKey struct {
	Kind   Kind
	Bucket Bucket
	IP     string
}

// Tracker is the usage of every bucket with a quota. Buckets idle for
// Idle are forgotten (Kafka's quota sensors expire after an hour), and at
// most MaxBuckets are kept: a new one past the bound replaces the one idle
// longest, so memory and metric labels stay bounded whatever clients do.
type Tracker struct {
	Config     RateConfig
	Idle       time.Duration // default 1h
	MaxBuckets int           // default 10,000
	usage      map[UsageKey]*Usage
}

// Defaults of Tracker's bounds.
const (
	DefaultIdle       = time.Hour
	DefaultMaxBuckets = 10_000
)

func (t *Tracker) usageOf(k UsageKey, now time.Time) *Usage {
	if t.usage == nil {
		t.usage = make(map[UsageKey]*Usage)
	}
	u := t.usage[k]
	if u == nil {
		maxBuckets := t.MaxBuckets
		if maxBuckets <= 0 {
			maxBuckets = DefaultMaxBuckets
		}
		if len(t.usage) >= maxBuckets {
			t.Expire(now)
		}
		if len(t.usage) >= maxBuckets {
			var oldest UsageKey
			var oldestAt time.Time
			first := true
			for key, v := range t.usage {
				if first || v.last.Before(oldestAt) {
					oldest, oldestAt, first = key, v.last, false
				}
			}
			delete(t.usage, oldest)
		}
		u = &Usage{}
		t.usage[k] = u
	}
	u.last = now
	return u
}

// Record adds value to k's usage at now and returns the throttle time if
// the rate is now above limit, capped at maxThrottle (0: uncapped). The
// throttle time is recorded too (for ThrottleAvg).
func (t *Tracker) Record(k UsageKey, limit, value float64, now time.Time, maxThrottle time.Duration) time.Duration {
	cfg := t.Config.withDefaults()
	u := t.usageOf(k, now)
	u.rate.Record(cfg, value, now)
	rate := u.rate.Rate(cfg, now)
	d := Throttle(rate, limit, u.rate.Elapsed(cfg, now), maxThrottle)
	if d > 0 {
		u.throttle.Record(cfg, float64(d.Milliseconds()), now)
	}
	return d
}

// Unrecord takes value back from k's usage (a fetch answered empty
// because it was throttled: Kafka's unrecordQuotaSensor).
func (t *Tracker) Unrecord(k UsageKey, value float64, now time.Time) {
	if u := t.usage[k]; u != nil {
		u.rate.Record(t.Config.withDefaults(), -value, now)
	}
}

// Expire forgets the buckets idle for Idle at now.
func (t *Tracker) Expire(now time.Time) {
	idle := t.Idle
	if idle <= 0 {
		idle = DefaultIdle
	}
	for k, u := range t.usage {
		if now.Sub(u.last) >= idle {
			delete(t.usage, k)
		}
	}
}

// Forget drops the buckets keep says no to (their quota was removed).
func (t *Tracker) Forget(keep func(UsageKey) bool) {
	for k := range t.usage {
		if !keep(k) {
			delete(t.usage, k)
		}
	}
}

// Stat is one bucket's measurements at a time.
type Stat struct {
	Key         UsageKey
	Rate        float64 // per second (bytes, or percent for requests)
	ThrottleAvg float64 // milliseconds
}

// Stats measures every bucket at now.
func (t *Tracker) Stats(now time.Time) []Stat {
	cfg := t.Config.withDefaults()
	out := make([]Stat, 0, len(t.usage))
	for k, u := range t.usage {
		out = append(out, Stat{Key: k, Rate: u.rate.Rate(cfg, now), ThrottleAvg: u.throttle.Avg(cfg, now)})
	}
	return out
}

// Len is how many buckets are tracked.
func (t *Tracker) Len() int { return len(t.usage) }
