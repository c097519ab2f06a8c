// Package loop runs the one goroutine that drives a deterministic core (a
// ledger writer, recovery or reader, a managed ledger) in the production
// shells: everything that touches the core runs on it, so the core needs no
// locks, and work reaches it by three paths with different rules.
//
// It owns the goroutine, its ticker and its queues. It never decides
// anything about the core: the owner's functions and hooks do. It must
// never make a completion wait, nor let its own goroutine wait for room in
// its own queue (see Loop for the deadlocks this rules out).
package loop

import (
	"context"
	"errors"
	"sync"
	"time"
)

// ErrStopped: the loop stopped (or is stopping) and accepts no more work.
var ErrStopped = errors.New("loop: stopped")

// DefaultQueueBound is Config.QueueBound's default.
const DefaultQueueBound = 1024

// Config configures a Loop. Every hook runs on the loop goroutine.
type Config struct {
	// QueueBound bounds the functions given to Post and not yet taken by
	// the loop (default DefaultQueueBound): Post waits while it is reached.
	QueueBound int
	// Tick is how often OnTick runs (0: never).
	Tick   time.Duration
	OnTick func(now time.Time)
	// Ready runs when the loop starts, after every batch of work and after
	// every tick: it carries out what the core's Ready asks for.
	Ready func()
	// Stopped runs once after the last batch, before Done is closed: the
	// owner answers whatever the core left unanswered.
	Stopped func()
}

// Loop runs functions one at a time on one goroutine (the one that calls
// Run). Work reaches it by three paths:
//
//   - Defer, from the loop goroutine itself (a function it runs, or a hook):
//     appended to a slice only the loop goroutine touches; never blocks.
//   - Complete, from any goroutine, for the answer to work the loop itself
//     started (a bookie response, a metadata result, a writer's ack) or to
//     work admitted by a bound of the owner's own (see mlogclient.Permit):
//     never blocks, and has no bound of its own.
//   - Post, from any goroutine but the loop's, for new work from callers:
//     waits while QueueBound functions are queued — that is the backpressure
//     on callers — until there is room, its context ends or the loop stops.
//
// Complete and Post share one queue, so the functions one goroutine gives
// through either run in the order it gave them. Every function accepted
// (Post returned nil, Complete returned true, or Defer was called) runs
// exactly once, on the loop goroutine, before Done is closed — also after
// Stop, which only stops accepting more. After each batch the loop runs the
// Ready hook.
//
// The deadlocks this rules out, and the rules that rule them out:
//
//  1. The loop posting to itself through the bounded queue (a self-post:
//     a result it delivers to its own core, a callback a client ran inline):
//     with the queue full it would wait for itself forever. Rule: the loop
//     goroutine uses Defer (or Complete), never Post.
//  2. A completion blocked against a loop that is blocked on the very I/O
//     client the completion comes from. The loop calls the bookie client's
//     AddAsync, which waits while the connection's in-flight window is full;
//     the window frees only as the connection's reader goroutine delivers
//     responses; if delivering one meant waiting for room in the loop's
//     queue, neither would ever move. Sizing the queue from the in-flight
//     bound would not close this: completions come from several sources (a
//     write quorum of responses per entry, metadata results, a writer's
//     acks, closes during a rollover) and the loop's own callers share the
//     queue. Rule: completions go through Complete, which never blocks.
//     Its queue stays bounded all the same: each completion answers an
//     operation the loop started, and the loop's core bounds those (a
//     writer's MaxInFlight, a managed ledger's admission permits).
//  3. One loop blocked posting to a second one while the second waits for
//     the first. Rule: a loop may Post to another loop (a managed ledger's
//     loop handing an append to its ledger writer's loop), but answers
//     always come back through Complete, so the second loop never waits
//     for the first and the wait ends.
//
// What runs on the loop must never block on something only the loop can
// make happen: a synchronous call into its own owner (a ManagedLedger's
// Append from an ack callback), or Post to itself.
type Loop struct {
	cfg Config
	// slots holds one token per function given to Post and not yet taken
	// by the loop. Invariant: len(slots) >= the posted entries in queue.
	slots    chan struct{}
	wake     chan struct{} // capacity 1: the queue is not empty
	stopping chan struct{} // closed by Stop
	stopOnce sync.Once
	done     chan struct{}

	mu      sync.Mutex
	queue   []entry // Post and Complete, in arrival order
	stopped bool    // set by Stop: nothing more is accepted

	// Owned by the loop goroutine.
	deferred []func()
}

type entry struct {
	f      func()
	posted bool // holds a slot
}

// New returns a loop; call Run to start it.
func New(cfg Config) *Loop {
	if cfg.QueueBound <= 0 {
		cfg.QueueBound = DefaultQueueBound
	}
	return &Loop{
		cfg:      cfg,
		slots:    make(chan struct{}, cfg.QueueBound),
		wake:     make(chan struct{}, 1),
		stopping: make(chan struct{}),
		done:     make(chan struct{}),
	}
}

// Post queues f for the loop goroutine, waiting while the queue is full.
// It returns ctx's error or ErrStopped, and then f never runs. Never call it
// from the loop goroutine (use Defer): it could wait for itself.
func (l *Loop) Post(ctx context.Context, f func()) error {
	select {
	case l.slots <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	case <-l.stopping:
		return ErrStopped
	}
	if !l.enqueue(entry{f: f, posted: true}) {
		<-l.slots
		return ErrStopped
	}
	return nil
}

// Complete queues f for the loop goroutine without waiting; false (and f
// never runs) once the loop stopped. Only for answers to work the loop
// started, or for work bounded by the owner (see Loop).
func (l *Loop) Complete(f func()) bool {
	return l.enqueue(entry{f: f})
}

func (l *Loop) enqueue(e entry) bool {
	l.mu.Lock()
	if l.stopped {
		l.mu.Unlock()
		return false
	}
	l.queue = append(l.queue, e)
	l.mu.Unlock()
	select {
	case l.wake <- struct{}{}:
	default:
	}
	return true
}

// Queued is how many functions wait for the loop goroutine (posted and
// completed, not yet taken into a batch).
func (l *Loop) Queued() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.queue)
}

// Defer runs f on the loop goroutine after the function (or hook) running
// now. Only the loop goroutine may call it; it never blocks.
func (l *Loop) Defer(f func()) {
	l.deferred = append(l.deferred, f)
}

// Stop makes the loop accept no more work and end once what it accepted
// has run. Any goroutine may call it, the loop's own included, any number
// of times; it does not wait (see Done).
func (l *Loop) Stop() {
	l.mu.Lock()
	l.stopped = true
	l.mu.Unlock()
	l.stopOnce.Do(func() { close(l.stopping) })
}

// Done is closed once the loop has ended: after Stop, the last batch and
// the Stopped hook.
func (l *Loop) Done() <-chan struct{} { return l.done }

// Run runs the loop on the calling goroutine until it stopped.
func (l *Loop) Run() {
	defer close(l.done)
	var tick <-chan time.Time
	if l.cfg.Tick > 0 {
		ticker := time.NewTicker(l.cfg.Tick)
		defer ticker.Stop()
		tick = ticker.C
	}
	l.runBatch()
	for {
		select {
		case <-l.wake:
		case now := <-tick:
			if l.cfg.OnTick != nil {
				l.cfg.OnTick(now)
			}
		case <-l.stopping:
			// stopped was set before stopping closed: nothing joins the
			// queue any more, so this drains it for good.
			for l.runBatch() {
			}
			if l.cfg.Stopped != nil {
				l.cfg.Stopped()
			}
			return
		}
		l.runBatch()
	}
}

// runBatch runs what was deferred, then what is queued, then the Ready
// hook, and again while that deferred more. It takes the queue once, so a
// stream of posts cannot starve ticks or Stop (whatever joins the queue
// meanwhile signalled wake). It reports whether the queue holds more.
func (l *Loop) runBatch() bool {
	l.mu.Lock()
	batch := l.queue
	l.queue = nil
	l.mu.Unlock()
	for _, e := range batch {
		if e.posted {
			<-l.slots
		}
	}
	l.runDeferred()
	for _, e := range batch {
		e.f()
	}
	for {
		if l.cfg.Ready != nil {
			l.cfg.Ready()
		}
		if len(l.deferred) == 0 {
			break
		}
		l.runDeferred()
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.queue) > 0
}

func (l *Loop) runDeferred() {
	for len(l.deferred) > 0 {
		deferred := l.deferred
		l.deferred = nil
		for _, f := range deferred {
			f()
		}
	}
}
