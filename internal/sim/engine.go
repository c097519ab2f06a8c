package sim

import (
	"container/heap"
	"fmt"
	"math/rand/v2"
	"time"
)

// engine is the discrete-event core shared by every model in a run: virtual
// time, an event queue ordered by (time, sequence) and the run's only source
// of randomness. Events run one at a time on the caller's goroutine, so the
// models need no locks and a run is a pure function of its seed.
type engine struct {
	now    time.Duration
	seq    uint64
	queue  eventQueue
	rng    *rand.Rand
	trace  *tracer
	events int // events executed so far
}

func newEngine(seed int64, traceLimit int) *engine {
	// The second PCG word is fixed so that seed alone picks the stream.
	return &engine{
		rng:   rand.New(rand.NewPCG(uint64(seed), 0x9e3779b97f4a7c15)),
		trace: &tracer{limit: traceLimit},
	}
}

type event struct {
	at  time.Duration
	seq uint64 // tie-break: events due at the same time run in scheduling order
	fn  func()
}

type eventQueue []event

func (q eventQueue) Len() int { return len(q) }
func (q eventQueue) Less(i, j int) bool {
	if q[i].at != q[j].at {
		return q[i].at < q[j].at
	}
	return q[i].seq < q[j].seq
}
func (q eventQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *eventQueue) Push(x any)   { *q = append(*q, x.(event)) }
func (q *eventQueue) Pop() any {
	old := *q
	n := len(old)
	e := old[n-1]
	old[n-1] = event{}
	*q = old[:n-1]
	return e
}

// at schedules fn at virtual time t (never in the past).
func (e *engine) at(t time.Duration, fn func()) {
	if t < e.now {
		t = e.now
	}
	e.seq++
	heap.Push(&e.queue, event{at: t, seq: e.seq, fn: fn})
}

// after schedules fn d from now.
func (e *engine) after(d time.Duration, fn func()) { e.at(e.now+d, fn) }

// step runs the next event unless the queue is empty or the next event is
// due after limit; it reports whether it ran one.
func (e *engine) step(limit time.Duration) bool {
	if len(e.queue) == 0 || e.queue[0].at > limit {
		return false
	}
	ev := heap.Pop(&e.queue).(event)
	e.now = ev.at
	e.events++
	ev.fn()
	return true
}

// chance returns true with probability p.
func (e *engine) chance(p float64) bool { return p > 0 && e.rng.Float64() < p }

// between returns a uniformly random duration in [lo, hi].
func (e *engine) between(lo, hi time.Duration) time.Duration {
	if hi <= lo {
		return lo
	}
	return lo + time.Duration(e.rng.Int64N(int64(hi-lo)+1))
}

// intn returns a uniformly random int in [lo, hi].
func (e *engine) intn(lo, hi int) int {
	if hi <= lo {
		return lo
	}
	return lo + e.rng.IntN(hi-lo+1)
}

// tracef records one event of the run.
func (e *engine) tracef(actor, format string, args ...any) {
	e.trace.add(e.now, actor, format, args...)
}

// tracer keeps the run's event log: every line when limit is 0, else a ring
// buffer of the last limit lines (a bounded memory cost per run).
type tracer struct {
	limit int
	lines []string
	next  int // when the ring is full: the oldest line's position
	total int // lines ever added
}

func (t *tracer) add(now time.Duration, actor, format string, args ...any) {
	line := formatTime(now) + " " + padRight(actor, 8) + " " + fmt.Sprintf(format, args...)
	t.total++
	if t.limit == 0 || len(t.lines) < t.limit {
		t.lines = append(t.lines, line)
		return
	}
	t.lines[t.next] = line
	t.next = (t.next + 1) % t.limit
}

// snapshot returns the kept lines oldest first, preceded by a note when older
// lines were dropped.
func (t *tracer) snapshot() []string {
	out := make([]string, 0, len(t.lines)+1)
	if dropped := t.total - len(t.lines); dropped > 0 {
		out = append(out, fmt.Sprintf("... %d earlier events not kept ...", dropped))
	}
	out = append(out, t.lines[t.next:]...)
	out = append(out, t.lines[:t.next]...)
	return out
}

// formatTime renders virtual time as seconds with microseconds, using
// integers only so the text never depends on float formatting.
func formatTime(d time.Duration) string {
	sec := d / time.Second
	us := (d % time.Second) / time.Microsecond
	return fmt.Sprintf("%3d.%06ds", sec, us)
}

func padRight(s string, n int) string {
	for len(s) < n {
		s += " "
	}
	return s
}
