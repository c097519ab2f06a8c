// Package clock abstracts time so that protocol shells and the in-memory
// metadata store can run on the wall clock in production and on a virtual,
// deterministic clock in tests and the simulator.
//
// It owns no goroutines of its own: Real delegates to the time package, and
// Virtual runs due timers only inside Advance, on the caller's goroutine.
package clock

import (
	"container/heap"
	"sync"
	"time"
)

// Clock tells the time and schedules callbacks.
type Clock interface {
	Now() time.Time
	// AfterFunc calls f once, d from now. Stop cancels it if it has not run.
	AfterFunc(d time.Duration, f func()) Timer
}

// Timer is a scheduled callback.
type Timer interface {
	// Stop cancels the timer; it reports whether the call stopped it before it ran.
	Stop() bool
}

// Real is the wall clock.
type Real struct{}

func (Real) Now() time.Time { return time.Now() }

func (Real) AfterFunc(d time.Duration, f func()) Timer { return time.AfterFunc(d, f) }

// Virtual is a manual clock: time moves only when Advance is called, and due
// timers run in deadline order (ties in scheduling order) on the caller's
// goroutine. It is safe for concurrent use; callbacks run without its lock
// held, so they may schedule further timers.
type Virtual struct {
	mu     sync.Mutex
	now    time.Time
	seq    uint64
	timers timerHeap
}

// NewVirtual returns a virtual clock starting at start.
func NewVirtual(start time.Time) *Virtual { return &Virtual{now: start} }

func (v *Virtual) Now() time.Time {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.now
}

func (v *Virtual) AfterFunc(d time.Duration, f func()) Timer {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.seq++
	t := &virtualTimer{clock: v, at: v.now.Add(d), seq: v.seq, f: f, index: -1}
	heap.Push(&v.timers, t)
	return t
}

// Advance moves time forward by d, running every timer that falls due, each
// at its own deadline (Now() inside a callback returns that deadline).
func (v *Virtual) Advance(d time.Duration) {
	v.mu.Lock()
	end := v.now.Add(d)
	v.mu.Unlock()
	v.AdvanceTo(end)
}

// AdvanceTo moves time to end (never backwards), running due timers.
func (v *Virtual) AdvanceTo(end time.Time) {
	for {
		v.mu.Lock()
		if len(v.timers) == 0 || v.timers[0].at.After(end) {
			if end.After(v.now) {
				v.now = end
			}
			v.mu.Unlock()
			return
		}
		t := heap.Pop(&v.timers).(*virtualTimer)
		if t.at.After(v.now) {
			v.now = t.at
		}
		v.mu.Unlock()
		t.f()
	}
}

// NextDeadline reports the earliest pending timer's deadline.
func (v *Virtual) NextDeadline() (time.Time, bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if len(v.timers) == 0 {
		return time.Time{}, false
	}
	return v.timers[0].at, true
}

type virtualTimer struct {
	clock *Virtual
	at    time.Time
	seq   uint64
	f     func()
	index int // position in the heap; -1 when not scheduled
}

func (t *virtualTimer) Stop() bool {
	t.clock.mu.Lock()
	defer t.clock.mu.Unlock()
	if t.index < 0 {
		return false
	}
	heap.Remove(&t.clock.timers, t.index)
	return true
}

type timerHeap []*virtualTimer

func (h timerHeap) Len() int { return len(h) }
func (h timerHeap) Less(i, j int) bool {
	if h[i].at.Equal(h[j].at) {
		return h[i].seq < h[j].seq
	}
	return h[i].at.Before(h[j].at)
}
func (h timerHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index = i
	h[j].index = j
}
func (h *timerHeap) Push(x any) {
	t := x.(*virtualTimer)
	t.index = len(*h)
	*h = append(*h, t)
}
func (h *timerHeap) Pop() any {
	old := *h
	t := old[len(old)-1]
	old[len(old)-1] = nil
	t.index = -1
	*h = old[:len(old)-1]
	return t
}
