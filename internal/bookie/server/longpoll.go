package server

import (
	"fmt"
	"sync"
	"time"

	"quire/internal/bookie/wire"
)

// longPoll is one LongPollReadRequest waiting for the ledger's LAC to pass previousLAC.
// Three things can end it: the engine's notify, the timer, or the connection closing
// (abort). Whichever sets finished first answers; the others do nothing.
type longPoll struct {
	c           *conn
	id          uint64
	ledgerID    int64
	previousLAC int64
	timeout     time.Duration
	received    time.Time

	mu       sync.Mutex
	finished bool
	notified bool        // finished by notify: the engine has dropped the watch itself
	cancel   func()      // set once WatchLAC returns
	timer    *time.Timer // set once WatchLAC returns, unless already finished
}

func (c *conn) longPollRead(id uint64, r *wire.LongPollReadRequest, received time.Time) {
	lp := &longPoll{
		c:           c,
		id:          id,
		ledgerID:    r.GetLedgerId(),
		previousLAC: r.GetPreviousLac(),
		timeout:     min(time.Duration(r.GetTimeoutMs())*time.Millisecond, c.s.cfg.MaxLongPollTimeout),
		received:    received,
	}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		c.respond(kindLongPollRead, received, true, nil)
		return
	}
	c.polls[lp] = struct{}{}
	c.mu.Unlock()

	// notify may run before WatchLAC returns, on this goroutine or the engine's.
	cancel, err := c.s.engine.WatchLAC(lp.ledgerID, lp.previousLAC, lp.notify)

	lp.mu.Lock()
	switch {
	case err != nil:
		// No watch exists, so only abort can have finished the poll (and answered).
		if lp.finished {
			lp.mu.Unlock()
			return
		}
		lp.finished = true
		lp.mu.Unlock()
		c.untrackPoll(lp)
		c.respond(kindLongPollRead, received, true, c.answer(&wire.Response{RequestId: id}, err))
	case lp.finished:
		// notify already answered, or abort ran before the watch existed: drop it now.
		aborted := !lp.notified
		lp.mu.Unlock()
		if aborted && cancel != nil {
			cancel()
		}
	default:
		lp.cancel = cancel
		lp.timer = time.AfterFunc(lp.timeout, lp.expire)
		lp.mu.Unlock()
	}
}

func (c *conn) untrackPoll(lp *longPoll) {
	c.mu.Lock()
	delete(c.polls, lp) // polls is nil once closed; deleting from nil is a no-op
	c.mu.Unlock()
}

// notify is the engine's callback: the LAC passed previousLAC. It runs on an engine
// goroutine, so the entry is read on a worker.
func (lp *longPoll) notify(lac int64) {
	lp.mu.Lock()
	if lp.finished {
		lp.mu.Unlock()
		return
	}
	lp.finished, lp.notified = true, true
	timer := lp.timer
	lp.mu.Unlock()
	if timer != nil {
		timer.Stop()
	}
	lp.c.untrackPoll(lp)
	lp.c.runWorker(kindLongPollRead, lp.received, func() outgoing { return outgoing{resp: lp.readAfter(lac)} })
}

// readAfter answers with lac and entry previousLAC+1 when this bookie has it. Without the
// entry (striping puts it on other bookies) the answer is still OK: the LAC moved.
func (lp *longPoll) readAfter(lac int64) *wire.Response {
	c := lp.c
	body := &wire.LongPollReadResponse{LastAddConfirmed: lac}
	e, err := c.s.engine.Read(lp.ledgerID, lp.previousLAC+1)
	switch {
	case err == nil:
		body.HasEntry = true
		body.Entry = &wire.Entry{LedgerId: e.LedgerID, EntryId: e.EntryID, LastAddConfirmed: e.LastAddConfirmed, Payload: e.Payload}
	case c.statusOf(err) == wire.Status_NO_SUCH_ENTRY:
	default:
		return c.answer(&wire.Response{RequestId: lp.id}, err)
	}
	return &wire.Response{RequestId: lp.id, Status: wire.Status_OK, Body: &wire.Response_LongPollRead{LongPollRead: body}}
}

// expire runs on the timer's goroutine when no LAC change came in time.
func (lp *longPoll) expire() {
	c := lp.c
	// Count this goroutine as a worker so Close waits for it; once closed, abort answers.
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	c.workers.Add(1)
	c.mu.Unlock()
	defer c.workers.Done()

	lp.mu.Lock()
	if lp.finished {
		lp.mu.Unlock()
		return
	}
	lp.finished = true
	cancel := lp.cancel
	lp.mu.Unlock()
	if cancel != nil {
		cancel()
	}
	c.untrackPoll(lp)
	c.respond(kindLongPollRead, lp.received, true, &wire.Response{
		RequestId:    lp.id,
		Status:       wire.Status_TIMEOUT,
		ErrorMessage: fmt.Sprintf("LAC of ledger %d did not pass %d within %v", lp.ledgerID, lp.previousLAC, lp.timeout),
	})
}

// abort ends the poll because its connection closed.
func (lp *longPoll) abort() {
	lp.mu.Lock()
	if lp.finished {
		lp.mu.Unlock()
		return
	}
	lp.finished = true
	cancel, timer := lp.cancel, lp.timer
	lp.mu.Unlock()
	if timer != nil {
		timer.Stop()
	}
	if cancel != nil {
		cancel()
	}
	lp.c.respond(kindLongPollRead, lp.received, true, nil) // dropped: the connection is closed
}
