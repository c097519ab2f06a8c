// Package memengine is an in-memory server.Engine for tests of the bookie server, the
// bookie client and what is built on them: ledgers in maps, with fencing and LAC watches,
// and no durability. Tests can hold add completions to keep requests in flight, and wait on
// the engine's state without sleeping.
//
// Semantics follow a bookie's: a ledger appears with its first add or fence; its LAC is the
// highest LAC carried by an add or written by WriteLAC; once fenced it rejects non-recovery
// adds and LAC updates.
package memengine

import (
	"context"
	"fmt"
	"slices"
	"sync"

	"quire/internal/bookie/server"
	"quire/internal/bookie/wire"
)

// Engine implements server.Engine. Its zero value is not usable; call New.
type Engine struct {
	mu      sync.Mutex
	ledgers map[int64]*ledger
	// changed is closed and replaced on every state change, waking the Wait* helpers.
	changed  chan struct{}
	holding  bool
	held     []heldAdd
	free     uint64
	total    uint64
	readOnly bool
}

type ledger struct {
	entries map[int64]server.Entry
	lac     int64
	fenced  bool
	watches map[*watch]struct{}
}

type watch struct {
	previousLAC int64
	notify      func(int64)
}

type heldAdd struct {
	done func(error)
	err  error
}

var _ server.Engine = (*Engine)(nil)

// New returns an empty engine reporting 1 GiB free of 2 GiB.
func New() *Engine {
	return &Engine{
		ledgers: make(map[int64]*ledger),
		changed: make(chan struct{}),
		free:    1 << 30,
		total:   2 << 30,
	}
}

// changedLocked wakes waiters. Callers hold mu.
func (e *Engine) changedLocked() {
	close(e.changed)
	e.changed = make(chan struct{})
}

func (e *Engine) ledgerLocked(id int64, create bool) *ledger {
	l := e.ledgers[id]
	if l == nil && create {
		l = &ledger{entries: make(map[int64]server.Entry), lac: -1, watches: make(map[*watch]struct{})}
		e.ledgers[id] = l
	}
	return l
}

// Add stores the entry at once and completes it at once, or when released if Hold is on.
func (e *Engine) Add(req server.AddRequest, done func(error)) {
	e.mu.Lock()
	err := e.addLocked(req)
	var notify []func()
	if err == nil {
		notify = e.advanceLocked(req.LedgerID, req.LastAddConfirmed)
	}
	if e.holding {
		e.held = append(e.held, heldAdd{done: done, err: err})
		done = nil
	}
	e.changedLocked()
	e.mu.Unlock()
	for _, n := range notify {
		n()
	}
	if done != nil {
		done(err)
	}
}

func (e *Engine) addLocked(req server.AddRequest) error {
	if e.readOnly {
		return fmt.Errorf("add ledger %d entry %d: %w", req.LedgerID, req.EntryID, wire.ErrReadOnly)
	}
	l := e.ledgerLocked(req.LedgerID, true)
	if l.fenced && !req.Recovery {
		return fmt.Errorf("add ledger %d entry %d: %w", req.LedgerID, req.EntryID, wire.ErrFenced)
	}
	// The server's Payload is only lent for the call.
	l.entries[req.EntryID] = server.Entry{
		LedgerID: req.LedgerID, EntryID: req.EntryID, LastAddConfirmed: req.LastAddConfirmed, Payload: slices.Clone(req.Payload),
	}
	return nil
}

// advanceLocked raises the ledger's LAC and returns the notifications to deliver once mu
// is released.
func (e *Engine) advanceLocked(ledgerID, lac int64) []func() {
	l := e.ledgers[ledgerID]
	if lac <= l.lac {
		return nil
	}
	l.lac = lac
	var out []func()
	for w := range l.watches {
		if lac > w.previousLAC {
			delete(l.watches, w)
			out = append(out, func() { w.notify(lac) })
		}
	}
	return out
}

func (e *Engine) Read(ledgerID, entryID int64) (server.Entry, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	l := e.ledgerLocked(ledgerID, false)
	if l == nil {
		return server.Entry{}, fmt.Errorf("read ledger %d: %w", ledgerID, wire.ErrNoSuchLedger)
	}
	if entryID == -1 {
		return server.Entry{LedgerID: ledgerID, EntryID: -1, LastAddConfirmed: l.lac}, nil
	}
	ent, ok := l.entries[entryID]
	if !ok {
		return server.Entry{}, fmt.Errorf("read ledger %d entry %d: %w", ledgerID, entryID, wire.ErrNoSuchEntry)
	}
	return ent, nil
}

// ReadRange returns consecutive entries; the first one even when it alone exceeds maxBytes.
func (e *Engine) ReadRange(ledgerID, firstEntryID int64, maxEntries, maxBytes int) ([]server.Entry, func(), error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	l := e.ledgerLocked(ledgerID, false)
	if l == nil {
		return nil, nil, fmt.Errorf("read ledger %d: %w", ledgerID, wire.ErrNoSuchLedger)
	}
	var out []server.Entry
	size := 0
	for id := firstEntryID; len(out) < maxEntries; id++ {
		ent, ok := l.entries[id]
		if !ok || (len(out) > 0 && size+len(ent.Payload) > maxBytes) {
			break
		}
		size += len(ent.Payload)
		out = append(out, ent)
	}
	if len(out) == 0 {
		return nil, nil, fmt.Errorf("read ledger %d entry %d: %w", ledgerID, firstEntryID, wire.ErrNoSuchEntry)
	}
	return out, nil, nil
}

// Fence fences the ledger, creating it if this bookie never saw it (as a bookie must: a
// zombie writer's first add to it must fail too).
func (e *Engine) Fence(ledgerID int64) (int64, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	l := e.ledgerLocked(ledgerID, true)
	l.fenced = true
	e.changedLocked()
	return l.lac, nil
}

func (e *Engine) WatchLAC(ledgerID, previousLAC int64, notify func(int64)) (func(), error) {
	e.mu.Lock()
	l := e.ledgerLocked(ledgerID, false)
	if l == nil {
		e.mu.Unlock()
		return nil, fmt.Errorf("watch ledger %d: %w", ledgerID, wire.ErrNoSuchLedger)
	}
	if l.lac > previousLAC {
		lac := l.lac
		e.mu.Unlock()
		notify(lac) // before WatchLAC returns, as the contract allows
		return func() {}, nil
	}
	w := &watch{previousLAC: previousLAC, notify: notify}
	l.watches[w] = struct{}{}
	e.changedLocked()
	e.mu.Unlock()
	return func() {
		e.mu.Lock()
		defer e.mu.Unlock()
		delete(l.watches, w)
		e.changedLocked()
	}, nil
}

// WriteLAC raises the ledger's LAC (never lowers it) and wakes the watches it satisfies.
func (e *Engine) WriteLAC(ledgerID, lac int64) (int64, error) {
	e.mu.Lock()
	l := e.ledgerLocked(ledgerID, false)
	switch {
	case l == nil:
		e.mu.Unlock()
		return 0, fmt.Errorf("write LAC of ledger %d: %w", ledgerID, wire.ErrNoSuchLedger)
	case l.fenced:
		e.mu.Unlock()
		return 0, fmt.Errorf("write LAC of ledger %d: %w", ledgerID, wire.ErrFenced)
	}
	notify := e.advanceLocked(ledgerID, lac)
	after := l.lac
	e.changedLocked()
	e.mu.Unlock()
	for _, n := range notify {
		n()
	}
	return after, nil
}

// LAC reports the ledger's LAC, or -1 when the engine has no such ledger.
func (e *Engine) LAC(ledgerID int64) int64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	if l := e.ledgers[ledgerID]; l != nil {
		return l.lac
	}
	return -1
}

func (e *Engine) DeleteLedger(ledgerID int64) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.ledgers[ledgerID] == nil {
		return fmt.Errorf("delete ledger %d: %w", ledgerID, wire.ErrNoSuchLedger)
	}
	delete(e.ledgers, ledgerID)
	e.changedLocked()
	return nil
}

func (e *Engine) Info() (free, total uint64, readOnly bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.free, e.total, e.readOnly
}

// SetInfo sets what Info reports; read-only also makes adds fail with wire.ErrReadOnly.
func (e *Engine) SetInfo(free, total uint64, readOnly bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.free, e.total, e.readOnly = free, total, readOnly
}

// Hold makes later adds wait for Release before completing (they are stored at once).
func (e *Engine) Hold() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.holding = true
}

// Release stops holding and completes every held add, in arrival order or reversed, on
// the caller's goroutine. It returns how many it completed.
func (e *Engine) Release(reverse bool) int {
	e.mu.Lock()
	held := e.held
	e.held, e.holding = nil, false
	e.changedLocked()
	e.mu.Unlock()
	if reverse {
		slices.Reverse(held)
	}
	for _, h := range held {
		h.done(h.err)
	}
	return len(held)
}

// WaitHeld waits until at least n adds are held.
func (e *Engine) WaitHeld(ctx context.Context, n int) error {
	return e.waitFor(ctx, func() bool { return len(e.held) >= n })
}

// WaitWatchers waits until the ledger has exactly n LAC watches.
func (e *Engine) WaitWatchers(ctx context.Context, ledgerID int64, n int) error {
	return e.waitFor(ctx, func() bool {
		l := e.ledgers[ledgerID]
		return (l == nil && n == 0) || (l != nil && len(l.watches) == n)
	})
}

// Fenced reports whether the ledger exists and is fenced.
func (e *Engine) Fenced(ledgerID int64) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	l := e.ledgers[ledgerID]
	return l != nil && l.fenced
}

// EntryCount reports how many entries the ledger holds.
func (e *Engine) EntryCount(ledgerID int64) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	if l := e.ledgers[ledgerID]; l != nil {
		return len(l.entries)
	}
	return 0
}

// waitFor waits until cond, evaluated under mu, holds.
func (e *Engine) waitFor(ctx context.Context, cond func() bool) error {
	for {
		e.mu.Lock()
		ok, changed := cond(), e.changed
		e.mu.Unlock()
		if ok {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return fmt.Errorf("memengine: condition not reached: %w", ctx.Err())
		}
	}
}
