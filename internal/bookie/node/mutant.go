package node

import (
	"fmt"
	"sync"
	"time"

	"quire/internal/bookie/server"
)

// Mutant names a deliberately broken bookie. `quire bookie --bookie-mutant
// NAME` (a hidden flag) runs one so that `quire chaos` can be seen catching
// what it breaks, as `quire sim --mutant` does for the protocol cores. Never
// set outside that harness and its tests.
type Mutant string

// MutantAckBeforeWrite acknowledges an add as soon as it arrives and hands
// it to the engine ackBeforeWriteDelay later, in arrival order: the
// acknowledgement promises durability the bookie does not have yet. A
// SIGKILL within the delay loses the entry on that bookie — a SIGKILL keeps
// the page cache, so a mutant that acknowledged between write(2) and fsync
// would lose nothing there; this one has not even written. Until the entry
// reaches the engine it cannot be read either. Recovery adds and adds to a
// ledger this process saw fenced go to the engine as usual, so fencing
// still holds and the one broken promise is durability.
const MutantAckBeforeWrite Mutant = "ack-before-write"

// Mutants are the names ParseMutant accepts.
var Mutants = []Mutant{MutantAckBeforeWrite}

// Bounds of the ack-before-write mutant: how long an acknowledged entry
// stays only in memory, and how many may (beyond that, adds block: the
// connection's backpressure).
const (
	ackBeforeWriteDelay = 2 * time.Second
	ackBeforeWriteQueue = 100_000
)

// ParseMutant checks a --bookie-mutant name ("" is none).
func ParseMutant(name string) (Mutant, error) {
	if name == "" {
		return "", nil
	}
	for _, m := range Mutants {
		if string(m) == name {
			return m, nil
		}
	}
	return "", fmt.Errorf("bookie mutant %q: want one of %v", name, Mutants)
}

// withMutant wraps engine as m breaks it, returning the engine the server
// uses and what stops the mutant before the real engine closes.
func withMutant(m Mutant, engine server.Engine) (server.Engine, func()) {
	if m != MutantAckBeforeWrite {
		return engine, func() {}
	}
	return newAckBeforeWrite(engine, ackBeforeWriteDelay)
}

func newAckBeforeWrite(engine server.Engine, delay time.Duration) (*ackBeforeWrite, func()) {
	a := &ackBeforeWrite{Engine: engine, delay: delay, fenced: map[int64]bool{},
		queue: make(chan delayedAdd, ackBeforeWriteQueue), stop: make(chan struct{}), stopped: make(chan struct{})}
	go a.writeLater()
	var once sync.Once
	return a, func() {
		once.Do(func() {
			close(a.stop)
			<-a.stopped
		})
	}
}

type delayedAdd struct {
	req server.AddRequest
	due time.Time
}

type ackBeforeWrite struct {
	server.Engine
	delay   time.Duration
	mu      sync.Mutex
	fenced  map[int64]bool
	queue   chan delayedAdd
	stop    chan struct{}
	stopped chan struct{}
}

func (a *ackBeforeWrite) Add(req server.AddRequest, done func(error)) {
	a.mu.Lock()
	fenced := a.fenced[req.LedgerID]
	a.mu.Unlock()
	if fenced || req.Recovery {
		a.Engine.Add(req, done)
		return
	}
	req.Payload = append([]byte(nil), req.Payload...) // valid only until Add returns
	select {
	case a.queue <- delayedAdd{req: req, due: time.Now().Add(a.delay)}:
		done(nil) // the broken promise
	case <-a.stop:
		done(fmt.Errorf("bookie closing"))
	}
}

func (a *ackBeforeWrite) Fence(ledgerID int64) (int64, error) {
	a.mu.Lock()
	a.fenced[ledgerID] = true
	a.mu.Unlock()
	return a.Engine.Fence(ledgerID)
}

// writeLater hands each queued add to the engine once it is due; what the
// engine says (fenced, say) goes nowhere: the add was acknowledged already.
func (a *ackBeforeWrite) writeLater() {
	defer close(a.stopped)
	for {
		select {
		case <-a.stop:
			return
		case d := <-a.queue:
			if wait := time.Until(d.due); wait > 0 {
				select {
				case <-a.stop:
					return
				case <-time.After(wait):
				}
			}
			a.Engine.Add(d.req, func(error) {})
		}
	}
}
