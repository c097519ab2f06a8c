package loop

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// deadline bounds every wait: a deadlock fails the test instead of hanging it.
const deadline = 20 * time.Second

// wait waits for ch to be closed (or to deliver), failing after deadline.
func wait[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(deadline):
		t.Fatalf("%s: still waiting after %v (deadlock?)", what, deadline)
		panic("unreachable")
	}
}

func start(t *testing.T, cfg Config) *Loop {
	t.Helper()
	l := New(cfg)
	go l.Run()
	t.Cleanup(func() {
		l.Stop()
		select {
		case <-l.Done():
		case <-time.After(deadline):
			t.Error("the loop did not end after Stop")
		}
	})
	return l
}

// park blocks the loop goroutine until the returned function is called.
func park(t *testing.T, l *Loop) (release func()) {
	t.Helper()
	parked, unpark := make(chan struct{}), make(chan struct{})
	if err := l.Post(context.Background(), func() { close(parked); <-unpark }); err != nil {
		t.Fatal(err)
	}
	wait(t, parked, "loop parked")
	var once sync.Once
	release = func() { once.Do(func() { close(unpark) }) }
	t.Cleanup(release)
	return release
}

// fill posts until the queue is full (the loop must be parked); it
// returns the posts accepted.
func fill(t *testing.T, l *Loop, f func()) int {
	t.Helper()
	for n := 0; ; n++ {
		select {
		case l.slots <- struct{}{}: // what Post does, without waiting
		default:
			return n
		}
		if !l.enqueue(entry{f: f, posted: true}) {
			t.Fatal("stopped")
		}
	}
}

// Functions given by one goroutine through Post and Complete run in the
// order given, each once, with Ready after them.
func TestOrderAcrossPostAndComplete(t *testing.T) {
	const n = 50
	var got []int
	all := make(chan struct{})
	l := start(t, Config{QueueBound: 4, Ready: func() {
		if len(got) == n {
			got = append(got, -1) // close once
			close(all)
		}
	}})
	for i := range n {
		f := func() { got = append(got, i) }
		if i%2 == 0 {
			if err := l.Post(context.Background(), f); err != nil {
				t.Fatal(err)
			}
		} else if !l.Complete(f) {
			t.Fatal("Complete refused")
		}
	}
	wait(t, all, "Ready after the last function")
	for i, v := range got[:n] {
		if v != i {
			t.Fatalf("ran %v", got)
		}
	}
}

// The loop posting to itself never blocks, even with the queue full and
// posters waiting for room (deadlock class 1).
func TestSelfPostWithQueueFull(t *testing.T) {
	var l *Loop
	ran := make(chan struct{})
	l = start(t, Config{QueueBound: 8})
	release := park(t, l)
	if n := fill(t, l, func() {}); n != 8 {
		t.Fatalf("queue took %d posts, bound 8", n)
	}
	// More posters wait for room; when the loop frees a slot, one of them
	// takes it at once, so the queue is full whenever the loop looks.
	var posted sync.WaitGroup
	for range 32 {
		posted.Add(1)
		go func() {
			defer posted.Done()
			if err := l.Post(context.Background(), func() {}); err != nil {
				t.Error(err)
			}
		}()
	}
	// A completion (also from outside, like a client callback) whose
	// function, once the waiting posters have filled the queue again,
	// self-posts twice more: Defer, and Complete from the loop.
	if !l.Complete(func() {
		for end := time.Now().Add(deadline); len(l.slots) < cap(l.slots); runtime.Gosched() {
			if time.Now().After(end) {
				t.Error("the waiting posters never filled the queue")
				break
			}
		}
		l.Defer(func() {
			if !l.Complete(func() { close(ran) }) {
				t.Error("Complete from the loop refused")
			}
		})
	}) {
		t.Fatal("Complete refused while the queue is full")
	}
	release()
	wait(t, ran, "self-posted function")
	donePosting := make(chan struct{})
	go func() { posted.Wait(); close(donePosting) }()
	wait(t, donePosting, "waiting posters")
}

// window is a model of the bookie client's in-flight window: Send waits
// while limit requests are unanswered; a reader goroutine answers them in
// order by calling each request's callback, and frees the slot first.
type window struct {
	slots    chan struct{}
	requests chan func()
}

func newWindow(t *testing.T, limit int) *window {
	w := &window{slots: make(chan struct{}, limit), requests: make(chan func(), limit)}
	stop := make(chan struct{})
	t.Cleanup(func() { close(stop) })
	go func() { // the connection's reader
		for {
			select {
			case cb := <-w.requests:
				<-w.slots
				cb()
			case <-stop:
				return
			}
		}
	}()
	return w
}

func (w *window) Send(cb func()) {
	w.slots <- struct{}{}
	w.requests <- cb
}

// The loop blocks on an I/O client whose window frees only as its reader
// delivers completions into the loop, while callers keep the loop's queue
// full: completions must still get through (deadlock class 2). Delivered
// with Post, the reader would wait for queue room the blocked loop never
// makes.
func TestCompletionsReachALoopBlockedOnTheirClient(t *testing.T) {
	const requests, limit, bound = 2000, 4, 8
	var answered atomic.Int64
	all := make(chan struct{})
	var l *Loop
	l = start(t, Config{QueueBound: bound})
	w := newWindow(t, limit)
	release := park(t, l)
	// The first function after the park issues every request: the loop
	// spends most of it waiting in Send.
	if err := l.Post(context.Background(), func() {
		for range requests {
			w.Send(func() {
				l.Complete(func() {
					if answered.Add(1) == requests {
						close(all)
					}
				})
			})
		}
	}); err != nil {
		t.Fatal(err)
	}
	fill(t, l, func() {})
	var posted sync.WaitGroup
	for range 100 {
		posted.Add(1)
		go func() {
			defer posted.Done()
			_ = l.Post(context.Background(), func() {})
		}()
	}
	release()
	wait(t, all, "every completion")
	donePosting := make(chan struct{})
	go func() { posted.Wait(); close(donePosting) }()
	wait(t, donePosting, "waiting posters")
}

// Stop refuses new work but runs all it accepted, then Stopped, then
// closes Done; a Post waiting for room returns ErrStopped and its function
// never runs.
func TestStopRunsWhatWasAccepted(t *testing.T) {
	var ran, stoppedHook atomic.Int64
	l := New(Config{QueueBound: 4, Stopped: func() { stoppedHook.Add(1) }})
	go l.Run()
	release := park(t, l)
	accepted := fill(t, l, func() { ran.Add(1) })
	for range 10 {
		if !l.Complete(func() { ran.Add(1) }) {
			t.Fatal("Complete refused")
		}
	}
	accepted += 10
	waiting := make(chan error, 1)
	go func() { waiting <- l.Post(context.Background(), func() { t.Error("a refused Post ran") }) }()
	l.Stop()
	if err := wait(t, waiting, "Post waiting for room"); !errors.Is(err, ErrStopped) {
		t.Fatalf("waiting Post: %v", err)
	}
	if err := l.Post(context.Background(), func() { t.Error("ran after Stop") }); !errors.Is(err, ErrStopped) {
		t.Fatalf("Post after Stop: %v", err)
	}
	if l.Complete(func() { t.Error("ran after Stop") }) {
		t.Fatal("Complete accepted after Stop")
	}
	release()
	wait(t, l.Done(), "Done")
	if ran.Load() != int64(accepted) || stoppedHook.Load() != 1 {
		t.Fatalf("ran %d of %d accepted, Stopped hook ran %d times", ran.Load(), accepted, stoppedHook.Load())
	}
}

// A Post whose context ends while the queue is full returns its error,
// and its function never runs.
func TestPostGivesUpWithItsContext(t *testing.T) {
	l := start(t, Config{QueueBound: 2})
	release := park(t, l)
	fill(t, l, func() {})
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- l.Post(ctx, func() { t.Error("a Post that gave up ran") }) }()
	cancel()
	if err := wait(t, errc, "Post"); !errors.Is(err, context.Canceled) {
		t.Fatalf("Post: %v", err)
	}
	release()
	// Everything queued before has run once this has.
	synced := make(chan struct{})
	if err := l.Post(context.Background(), func() { close(synced) }); err != nil {
		t.Fatal(err)
	}
	wait(t, synced, "a later post")
}

// Ticks run OnTick then Ready on the loop goroutine; a stream of posts does
// not starve them.
func TestTicksAreNotStarved(t *testing.T) {
	var ticks atomic.Int64
	ticked := make(chan struct{})
	var once sync.Once
	l := start(t, Config{QueueBound: 4, Tick: time.Millisecond, OnTick: func(time.Time) {
		if ticks.Add(1) == 3 {
			once.Do(func() { close(ticked) })
		}
	}})
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		for {
			select {
			case <-stop:
				return
			default:
				_ = l.Post(context.Background(), func() {})
			}
		}
	}()
	wait(t, ticked, "three ticks")
}

// Stop from the loop's own goroutine (a core that finished) ends it.
func TestStopFromTheLoop(t *testing.T) {
	var l *Loop
	l = New(Config{Ready: func() { l.Stop() }})
	go l.Run()
	wait(t, l.Done(), "Done")
}
