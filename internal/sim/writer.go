package sim

import (
	"errors"
	"fmt"
	"time"

	"quire/internal/ledger"
)

// tickInterval is how often every actor's shell ticks its core.
const tickInterval = 10 * time.Millisecond

// actor is a simulated process driving one protocol core.
type actor interface {
	onResponse(gen int, r ledger.Response)
	onMetaResult(r ledger.MetaResult)
}

// backlogOrder says in what order a writer that wakes from a pause handles
// what queued up meanwhile (the runtime gives no guarantee).
type backlogOrder int

const (
	backlogAsArrived     backlogOrder = iota // timers and messages interleaved as they came
	backlogTimersFirst                       // late timers fire before the messages are read
	backlogMessagesFirst                     // the messages are read before the timers fire
)

func (o backlogOrder) String() string {
	return [...]string{"as-arrived", "timers-first", "messages-first"}[o]
}

// writerActor is the ledger's owner: it creates the ledger, adds entries at
// random times, ticks, and closes the ledger after its last entry. It may
// freeze for a long time (a GC pause, a stopped VM) and then resume as a
// zombie: whatever arrived meanwhile is handled at once. In most runs its
// shell's ticks catch up with the time that passed (a shell that measures
// request timeouts in wall-clock time), so every add still unanswered times
// out at that moment; in the others one late tick fires, as a Go ticker
// that dropped the ticks of a frozen receiver would.
type writerActor struct {
	s    *ledgerSim
	core *ledger.Writer

	paused   bool
	resumeAt time.Duration
	backlog  []backlogItem

	added       int // entries accepted by Add
	stopAdding  bool
	closeCalled bool
	finished    bool // Closed() reports true: ticks stop
	// quietFrom: when the writer last woke up or stopped adding, whichever
	// is later (0 while it still adds).
	quietFrom time.Duration

	// Checker state. Invariant: okAcks holds 0..lastOK unless a mutant broke ordering.
	okAcks  map[int64]bool
	lastOK  int64
	lastLAC int64
}

type backlogItem struct {
	tick bool
	fn   func()
}

func (w *writerActor) name() string { return "writer" }

// input runs fn against the core now, or queues it while the writer is frozen.
func (w *writerActor) input(fn func()) {
	if w.paused {
		w.backlog = append(w.backlog, backlogItem{fn: fn})
		return
	}
	fn()
	w.drain()
}

func (w *writerActor) onResponse(gen int, r ledger.Response) {
	w.input(func() { w.core.Step(r) })
}

func (w *writerActor) onMetaResult(r ledger.MetaResult) {
	w.input(func() {
		w.s.e.tracef(w.name(), "meta result #%d: %s", r.ID, describeMetaResult(r))
		w.core.StepMeta(r)
	})
}

func (w *writerActor) tickLoop() {
	if w.finished {
		return
	}
	if w.paused {
		// The ticker fires into a frozen process: with catch-up the shell
		// later notices all the time that passed, else only one tick.
		if w.s.sc.tickCatchUp || !w.hasQueuedTick() {
			w.backlog = append(w.backlog, backlogItem{tick: true})
		}
	} else {
		w.core.Tick()
		w.drain()
	}
	w.s.e.after(tickInterval, w.tickLoop)
}

func (w *writerActor) hasQueuedTick() bool {
	for _, it := range w.backlog {
		if it.tick {
			return true
		}
	}
	return false
}

// addLoop adds the next entry and schedules the one after.
func (w *writerActor) addLoop() {
	e := w.s.e
	if w.stopAdding || w.closeCalled {
		return
	}
	if w.paused {
		e.at(w.resumeAt+e.between(0, 2*time.Millisecond), w.addLoop) // the caller is frozen too
		return
	}
	payload := w.s.payloadFor(int64(w.added))
	id, err := w.core.Add(payload)
	switch {
	case err == nil:
		if id != int64(w.added) {
			w.s.violate(kindAckOrder, "writer assigned entry id %d to the add expected to be entry %d", id, w.added)
		}
		w.s.payloads = append(w.s.payloads, payload)
		w.added++
		w.s.stats.EntriesAdded++
		e.tracef(w.name(), "add e%d (%d bytes)", id, len(payload))
	case errors.Is(err, ledger.ErrTooManyInFlight):
		e.after(tickInterval, w.addLoop)
		return
	default:
		e.tracef(w.name(), "add refused: %v", err)
		w.stopAdding = true
		w.quietFrom = max(w.quietFrom, e.now)
		return
	}
	w.drain()
	sc := w.s.sc
	if sc.pause && w.added == sc.pauseAfterEntry {
		w.pause()
	}
	if w.added >= sc.entries {
		e.after(e.between(0, 50*time.Millisecond), func() {
			w.input(func() {
				w.closeCalled = true
				w.quietFrom = max(w.quietFrom, e.now)
				e.tracef(w.name(), "close requested")
				w.core.Close()
			})
		})
		return
	}
	gap := e.between(0, sc.addGapMax)
	if idle, ok := sc.idleAfter[w.added]; ok {
		e.tracef(w.name(), "IDLE for %v", idle)
		gap = idle
	}
	e.after(gap, w.addLoop)
}

// pause freezes the writer (and, in a blackout, cuts it off every bookie for
// as long, so what it had in flight is lost and must time out).
func (w *writerActor) pause() {
	e, sc := w.s.e, w.s.sc
	w.paused = true
	w.resumeAt = e.now + sc.pauseFor
	w.s.stats.WriterPaused = true
	e.tracef(w.name(), "PAUSE for %v (pending=%d, blackout=%v)", sc.pauseFor, w.core.Pending(), sc.blackout)
	if sc.blackout {
		for _, b := range w.s.bookies {
			w.s.net.cut(w.name(), b.name(), sc.pauseFor)
			w.s.net.cut(b.name(), w.name(), sc.pauseFor)
		}
	}
	for _, at := range sc.recoverersAfterPause {
		r := w.s.recoverers[at.index]
		e.after(at.delay, r.start)
	}
	for _, f := range sc.faults {
		if f.at < 0 { // the disks fill as the writer freezes
			e.after(e.between(0, 5*time.Millisecond), func() { w.s.inject(f) })
		}
	}
	e.at(w.resumeAt, w.resume)
}

func (w *writerActor) resume() {
	items := w.backlog
	w.backlog = nil
	w.paused = false
	if w.quietFrom > 0 {
		w.quietFrom = w.s.e.now
	}
	ticks := 0
	for _, it := range items {
		if it.tick {
			ticks++
		}
	}
	order := w.s.sc.backlog
	w.s.e.tracef(w.name(), "RESUME: %d ticks and %d other inputs queued, handled %s", ticks, len(items)-ticks, order)
	var ordered []backlogItem
	switch order {
	case backlogTimersFirst:
		ordered = append(filterBacklog(items, true), filterBacklog(items, false)...)
	case backlogMessagesFirst:
		ordered = append(filterBacklog(items, false), filterBacklog(items, true)...)
	default:
		ordered = items
	}
	for _, it := range ordered {
		if w.finished {
			break
		}
		if it.tick {
			w.core.Tick()
		} else {
			it.fn()
		}
		w.drain()
	}
}

func filterBacklog(items []backlogItem, ticks bool) []backlogItem {
	var out []backlogItem
	for _, it := range items {
		if it.tick == ticks {
			out = append(out, it)
		}
	}
	return out
}

// drain sends the core's outputs and checks its acknowledgements.
func (w *writerActor) drain() {
	s := w.s
	rd := w.core.Ready()
	// Acks first: a request of this batch may carry a LAC that an ack of
	// the same batch announces.
	for _, a := range rd.Acks {
		w.checkAck(a)
	}
	for _, req := range rd.Requests {
		if req.Kind == ledger.RequestAdd && req.LastAddConfirmed > w.lastOK {
			s.violate(kindAckOrder, "add of e%d carries LAC %d above the last entry acknowledged in order (%d)", req.EntryID, req.LastAddConfirmed, w.lastOK)
		}
		s.sendRequest(w.name(), 1, req)
	}
	for _, op := range rd.MetaOps {
		s.metaSvc.submit(w.name(), op)
	}
	if lac := w.core.LastAddConfirmed(); lac < w.lastLAC {
		s.violate(kindAckOrder, "writer LAC went back from %d to %d", w.lastLAC, lac)
	} else {
		w.lastLAC = lac
	}
	if done, err := w.core.Closed(); done && !w.finished {
		w.finished = true
		md, _ := w.core.Metadata()
		s.e.tracef(w.name(), "writer ended: %v (%s)", errString(err), describeMetadata(md))
	}
}

func (w *writerActor) checkAck(a ledger.Ack) {
	s := w.s
	if a.Err != nil {
		s.e.tracef(w.name(), "ACK e%d failed: %v", a.EntryID, a.Err)
		return
	}
	s.stats.Acked++
	s.e.tracef(w.name(), "ACK e%d", a.EntryID)
	switch {
	case w.okAcks[a.EntryID]:
		s.violate(kindAckOrder, "entry %d acknowledged twice", a.EntryID)
	case a.EntryID != w.lastOK+1:
		s.violate(kindAckOrder, "entry %d acknowledged after entry %d: acknowledgements out of entry order", a.EntryID, w.lastOK)
	}
	w.okAcks[a.EntryID] = true
	if a.EntryID > w.lastOK {
		w.lastOK = a.EntryID
	}
	if s.closedByRecovery != "" && a.EntryID > s.closedLast {
		s.violate(kindZombieAck, "writer got entry %d acknowledged after %s closed the ledger at entry %d", a.EntryID, s.closedByRecovery, s.closedLast)
	}
}

func errString(err error) string {
	if err == nil {
		return "closed"
	}
	return fmt.Sprint(err)
}
