package ownership

import (
	"sync"

	"quire/internal/catalog"
)

// event is one ownership change for the layer above.
type event struct {
	acquired bool
	bundle   catalog.Bundle
	// delivered, when set, is closed after the callback returned.
	delivered chan struct{}
}

// eventQueue hands events to the OnAcquire/OnRelease callbacks from one
// goroutine, in the order they were pushed. It is unbounded (at most two
// events per bundle are ever pending in practice), so the cluster's own
// goroutines never wait on a slow callback.
type eventQueue struct {
	onAcquire, onRelease func(catalog.Bundle)

	mu      sync.Mutex
	items   []event
	stopped bool
	signal  chan struct{} // capacity 1: "items grew or stop"
	exited  chan struct{}
}

func newEventQueue(onAcquire, onRelease func(catalog.Bundle)) *eventQueue {
	if onAcquire == nil {
		onAcquire = func(catalog.Bundle) {}
	}
	if onRelease == nil {
		onRelease = func(catalog.Bundle) {}
	}
	return &eventQueue{onAcquire: onAcquire, onRelease: onRelease, signal: make(chan struct{}, 1), exited: make(chan struct{})}
}

func (q *eventQueue) push(ev event) {
	q.mu.Lock()
	q.items = append(q.items, ev)
	q.mu.Unlock()
	q.wake()
}

func (q *eventQueue) wake() {
	select {
	case q.signal <- struct{}{}:
	default:
	}
}

// run delivers events until stop was called and the queue is empty.
func (q *eventQueue) run() {
	defer close(q.exited)
	for {
		q.mu.Lock()
		items, stopped := q.items, q.stopped
		q.items = nil
		q.mu.Unlock()
		for _, ev := range items {
			if ev.acquired {
				q.onAcquire(ev.bundle)
			} else {
				q.onRelease(ev.bundle)
			}
			if ev.delivered != nil {
				close(ev.delivered)
			}
		}
		if len(items) > 0 {
			continue
		}
		if stopped {
			return
		}
		<-q.signal
	}
}

// stop lets run deliver what is queued, then return; it waits for that.
func (q *eventQueue) stop() {
	q.mu.Lock()
	q.stopped = true
	q.mu.Unlock()
	q.wake()
	<-q.exited
}
