package bookie

import (
	"sync/atomic"
	"time"

	"quire/internal/lowprio"
)

// ReadGate gives adds priority over range reads for the CPUs.
//
// A catch-up reader's range reads are CPU work in bursts: copies out of the
// page cache, CRCs, parsing. On a machine with few cores, several of them
// runnable at once queue the journal's goroutines (and, in a standalone,
// the broker's write path) behind them for whole scheduler time slices: a
// producer's p99 at 20k records/s went from 4 ms alone to 80–90 ms beside a
// 350 MB/s catch-up reader, with the disk idle. Go's scheduler has no
// priorities; what a process can do is keep the reads from being runnable
// many at once. So while adds arrive (one within the gate's quiet period),
// range reads' entry-log reads and parsing pass one at a time (WhileWriting
// at once), on the bulk pool's low-priority threads if one is set, and
// read the disk synchronously, 256 KiB at a time: the reader goes only as
// fast as one read in flight takes it, and a journal fsync never queues
// behind more than one of its requests. Otherwise the gate does not hold
// reads back at all, and a catch-up reader alone reads at full speed.
//
// The disk reads were once started ahead for the reads waiting at the gate
// (FADV_WILLNEED, up to a range's 4 MiB). Beside a producer of 20k 1 KiB
// records/s and a tailing consumer, a catch-up reader then read 300–376
// MB/s and the producer's p99 went from 3.5–3.7 ms alone to 15–30 ms;
// without it, 113–145 MB/s and 8.3–8.7 ms. With the data in the page cache
// the reader was faster still and the p99 worse (165–211 MB/s, 10–16 ms):
// what the producer loses is mostly CPU, and what bounds it is how fast
// the reader goes.
//
// One gate may be shared by several engines: the standalone's bookies share
// its CPUs, so an add to any of them slows the range reads of all. The zero
// value is not usable; a nil *ReadGate admits everything.
type ReadGate struct {
	writing chan struct{} // a token per range read admitted while adds arrive
	quiet   int64         // nanoseconds after an add during which reads are gated
	lastAdd atomic.Int64  // unix nanoseconds of the last add noted
	now     func() time.Time
	bulk    *lowprio.Pool // where gated reads run, if set
}

// SetBulk makes range reads admitted while adds arrive run on the pool's
// low-priority threads.
func (g *ReadGate) SetBulk(p *lowprio.Pool) { g.bulk = p }

// run runs a range read's reads and parsing: on the bulk pool while adds
// arrive, else on the caller's goroutine.
func (g *ReadGate) run(fn func()) {
	if g == nil || g.bulk == nil || !g.gated() {
		fn()
		return
	}
	g.bulk.Do(fn)
}

// Default read-gate settings (NewReadGate with zeroes).
const (
	DefaultReadsWhileWriting = 1
	DefaultReadGateQuiet     = time.Second
)

// NewReadGate returns a gate admitting whileWriting range reads at once
// while adds arrive, and any number once none has for quiet (zeroes: the
// defaults).
func NewReadGate(whileWriting int, quiet time.Duration) *ReadGate {
	if whileWriting <= 0 {
		whileWriting = DefaultReadsWhileWriting
	}
	if quiet <= 0 {
		quiet = DefaultReadGateQuiet
	}
	return &ReadGate{writing: make(chan struct{}, whileWriting), quiet: int64(quiet), now: time.Now}
}

// noteAdd records that an add arrived.
func (g *ReadGate) noteAdd() {
	if g != nil {
		g.lastAdd.Store(g.now().UnixNano())
	}
}

// gated reports whether adds arrived recently enough to gate reads.
func (g *ReadGate) gated() bool {
	last := g.lastAdd.Load()
	return last != 0 && g.now().UnixNano()-last < g.quiet
}

// tryEnter admits a range read if it need not wait (ok); the read calls
// leave when done. A read admitted while no add arrived is not held back
// when adds start: it is bounded (one range read), and the next reads are.
func (g *ReadGate) tryEnter() (leave func(), ok bool) {
	if g == nil || !g.gated() {
		return func() {}, true
	}
	select {
	case g.writing <- struct{}{}:
		return g.leaveWriting, true
	default:
		return nil, false
	}
}

// enter admits a range read that tryEnter refused, once one of those
// admitted while adds arrive leaves.
func (g *ReadGate) enter() (leave func()) {
	g.writing <- struct{}{}
	return g.leaveWriting
}

func (g *ReadGate) leaveWriting() { <-g.writing }
