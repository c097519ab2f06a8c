// Package mlogclient is the production shell around the managed-ledger core
// (mlog.ManagedLedger): it carries out the core's ledger operations with
// ledgerclient, its metadata operations with a meta.Store, feeds it ticks
// from a ticker, and answers producers and readers. One goroutine owns each
// topic's core, fed through a channel, so the core needs no locks.
//
// It owns goroutines, timers, I/O and the entry cache; it never decides
// anything the managed ledger decides (rollover, trimming, quotas, fencing)
// — that lives in package mlog, where tests drive the same code.
package mlogclient

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"quire/internal/ledger"
	"quire/internal/ledger/ledgerclient"
	"quire/internal/meta"
	"quire/internal/mlog"
)

// Config configures a topic's shell.
type Config struct {
	Ledgers *ledgerclient.Client
	Store   meta.Store
	// Core configures the core; its Name is set by Open.
	Core mlog.Config
	// Ensemble, WriteQuorum, AckQuorum of new ledgers (default 3, 3, 2).
	Ensemble, WriteQuorum, AckQuorum int
	// Tick is how often the core gets Tick (default 100ms).
	Tick time.Duration
	// CacheEntries and CacheBytes bound the cache of recent entries
	// (default 10,000 entries and 32 MiB, whichever is reached first).
	CacheEntries int
	CacheBytes   int64
	// OpTimeout bounds each ledger or metadata operation (default 30s).
	OpTimeout time.Duration
	Logger    *slog.Logger
}

// Entry is one entry read from a topic.
type Entry struct {
	Pos     mlog.Position
	Payload []byte
}

// ManagedLedger is an open topic owned by this process.
type ManagedLedger struct {
	cfg  Config
	name string
	log  *slog.Logger

	inbox  chan func()
	ctx    context.Context // cancelled when the loop ends
	cancel context.CancelFunc
	done   chan struct{}

	// Owned by the loop goroutine.
	core     *mlog.ManagedLedger
	writers  map[int64]*ledgerclient.Writer
	payloads map[mlog.OpID][]byte // appends in flight, for the cache
	waiters  map[uint64]func(mlog.AppendAck)
	token    uint64
	cache    entryCache
	opened   chan error // answered once Open settles
	closing  []chan error

	statsMu sync.Mutex
	hits    int64
	misses  int64
}

// Open takes the topic over and returns once it accepts appends.
func Open(ctx context.Context, name string, cfg Config) (*ManagedLedger, error) {
	if cfg.Ensemble == 0 {
		cfg.Ensemble, cfg.WriteQuorum, cfg.AckQuorum = 3, 3, 2
	}
	if cfg.Tick <= 0 {
		cfg.Tick = 100 * time.Millisecond
	}
	if cfg.CacheEntries <= 0 {
		cfg.CacheEntries = 10_000
	}
	if cfg.CacheBytes <= 0 {
		cfg.CacheBytes = 32 << 20
	}
	if cfg.OpTimeout <= 0 {
		cfg.OpTimeout = 30 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	cfg.Core.Name = name
	loopCtx, cancel := context.WithCancel(context.Background())
	t := &ManagedLedger{
		cfg: cfg, name: name, log: cfg.Logger.With("component", "mlog", "topic", name),
		inbox: make(chan func(), 1024), ctx: loopCtx, cancel: cancel, done: make(chan struct{}),
		core: mlog.New(cfg.Core), writers: map[int64]*ledgerclient.Writer{},
		payloads: map[mlog.OpID][]byte{}, waiters: map[uint64]func(mlog.AppendAck){},
		cache: newEntryCache(cfg.CacheEntries, cfg.CacheBytes),
	}
	opened := make(chan error, 1)
	t.opened = opened // the loop owns the field from here; Open keeps its own copy
	go t.run()
	t.post(func() { t.core.Open(time.Now()) })
	select {
	case err := <-opened:
		if err != nil {
			t.stop()
			return nil, fmt.Errorf("open topic %s: %w", name, err)
		}
		return t, nil
	case <-ctx.Done():
		t.stop()
		return nil, ctx.Err()
	}
}

// post runs f on the loop goroutine; false once the loop has ended.
func (t *ManagedLedger) post(f func()) bool {
	select {
	case t.inbox <- f:
		return true
	case <-t.ctx.Done():
		return false
	}
}

// call runs f on the loop goroutine and waits for it. When it returns an
// error (ctx ended, or the loop stopped) f has not run and never will, so
// callers may read what f writes exactly when call returns nil; if f had
// already started, call waits for it (f is short: it only steps the core).
func (t *ManagedLedger) call(ctx context.Context, f func()) error {
	const (
		pending = iota
		started
		abandoned
	)
	var mu sync.Mutex
	state := pending
	ran := make(chan struct{})
	if !t.post(func() {
		mu.Lock()
		if state == abandoned {
			mu.Unlock()
			return
		}
		state = started
		mu.Unlock()
		f()
		close(ran)
	}) {
		return mlog.ErrClosed
	}
	var err error
	select {
	case <-ran:
		return nil
	case <-ctx.Done():
		err = ctx.Err()
	case <-t.done:
		err = mlog.ErrClosed
	}
	mu.Lock()
	if state == started {
		mu.Unlock()
		<-ran
		return nil
	}
	state = abandoned
	mu.Unlock()
	return err
}

func (t *ManagedLedger) stop() {
	t.cancel()
	<-t.done
}

func (t *ManagedLedger) run() {
	defer close(t.done)
	ticker := time.NewTicker(t.cfg.Tick)
	defer ticker.Stop()
	for {
		select {
		case f := <-t.inbox:
			f()
		case now := <-ticker.C:
			t.core.Tick(now)
		case <-t.ctx.Done():
			t.failWaiters(mlog.ErrClosed)
			return
		}
		t.process()
	}
}

// process carries out the core's Ready until it is empty.
func (t *ManagedLedger) process() {
	for rd := t.core.Ready(); !rd.Empty(); rd = t.core.Ready() {
		for _, ev := range rd.Events {
			t.onEvent(ev)
		}
		for _, op := range rd.MetaOps {
			go func() {
				res := t.runMeta(op)
				t.post(func() { t.core.StepMeta(res, time.Now()) })
			}()
		}
		for _, op := range rd.LedgerOps {
			t.runLedger(op)
		}
		for _, a := range rd.Acks {
			if done, ok := t.waiters[a.Token]; ok {
				delete(t.waiters, a.Token)
				done(a)
			}
		}
	}
	if done, err := t.core.Done(); done {
		t.settleOpen(err)
		for _, ch := range t.closing {
			ch <- err
		}
		t.closing = nil
	}
}

func (t *ManagedLedger) onEvent(ev mlog.Event) {
	switch ev.Kind {
	case mlog.EventOpened:
		t.settleOpen(nil)
		t.log.Info("topic opened", "detail", ev.Detail)
	case mlog.EventFenced, mlog.EventFailed, mlog.EventRolloverFailed:
		t.settleOpen(ev.Err)
		t.log.Warn("topic event", "kind", ev.Kind, "err", ev.Err)
	case mlog.EventAckRangesOverLimit:
		t.log.Warn("cursor ack ranges over the persisted limit", "cursor", ev.Cursor, "detail", ev.Detail)
	default:
		t.log.Debug("topic event", "kind", ev.Kind, "cursor", ev.Cursor, "detail", ev.Detail)
	}
}

func (t *ManagedLedger) settleOpen(err error) {
	if t.opened == nil {
		return
	}
	if err == nil && t.core.Phase() != "open" {
		return
	}
	t.opened <- err
	t.opened = nil
}

// failWaiters answers every append still waiting when the loop ends.
func (t *ManagedLedger) failWaiters(err error) {
	for tok, done := range t.waiters {
		done(mlog.AppendAck{Token: tok, Err: err})
		delete(t.waiters, tok)
	}
	for id, w := range t.writers {
		delete(t.writers, id)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), t.cfg.OpTimeout)
			defer cancel()
			_ = w.Close(ctx) // a fenced writer ends at once
		}()
	}
}

func (t *ManagedLedger) runMeta(op mlog.MetaOp) mlog.MetaResult {
	ctx, cancel := context.WithTimeout(t.ctx, t.cfg.OpTimeout)
	defer cancel()
	res := mlog.MetaResult{ID: op.ID}
	switch op.Kind {
	case mlog.MetaGet:
		kv, err := t.cfg.Store.Get(ctx, op.Key)
		res.Value, res.Version, res.Err = kv.Value, kv.Version, err
	case mlog.MetaCreate:
		res.Version, res.Err = t.cfg.Store.Create(ctx, op.Key, op.Value)
	case mlog.MetaPut:
		res.Version, res.Err = t.cfg.Store.Put(ctx, op.Key, op.Value, op.Version)
	case mlog.MetaDelete:
		res.Err = t.cfg.Store.Delete(ctx, op.Key, op.Version)
	}
	return res
}

// runLedger starts one ledger operation. Appends are handed to the writer
// right here, on the loop goroutine, so they reach it in the core's order.
func (t *ManagedLedger) runLedger(op mlog.LedgerOp) {
	deliver := func(res mlog.LedgerResult) {
		res.ID = op.ID
		t.post(func() {
			t.core.StepLedger(res, time.Now())
		})
	}
	lc := t.cfg.Ledgers
	switch op.Kind {
	case mlog.LedgerAppend:
		w := t.writers[op.Ledger]
		if w == nil {
			deliver(mlog.LedgerResult{Err: fmt.Errorf("ledger %d: no writer: %w", op.Ledger, ledger.ErrClosed)})
			return
		}
		t.payloads[op.ID] = op.Payload
		w.AppendAsync(op.Payload, func(entryID int64, err error) {
			t.post(func() {
				if err == nil {
					t.cache.put(mlog.Position{LedgerID: op.Ledger, EntryID: entryID}, t.payloads[op.ID])
				}
				delete(t.payloads, op.ID)
				t.core.StepLedger(mlog.LedgerResult{ID: op.ID, EntryID: entryID, Err: err}, time.Now())
			})
		})
	case mlog.LedgerCreate:
		go func() {
			ctx, cancel := context.WithTimeout(t.ctx, t.cfg.OpTimeout)
			defer cancel()
			w, err := lc.Create(ctx, t.cfg.Ensemble, t.cfg.WriteQuorum, t.cfg.AckQuorum)
			if err != nil {
				deliver(mlog.LedgerResult{Err: err})
				return
			}
			t.post(func() {
				t.writers[w.ID()] = w
				t.core.StepLedger(mlog.LedgerResult{ID: op.ID, Ledger: w.ID()}, time.Now())
			})
		}()
	case mlog.LedgerClose:
		w := t.writers[op.Ledger]
		delete(t.writers, op.Ledger)
		go func() {
			if w == nil {
				deliver(mlog.LedgerResult{Err: ledger.ErrClosed})
				return
			}
			ctx, cancel := context.WithTimeout(t.ctx, t.cfg.OpTimeout)
			defer cancel()
			err := w.Close(ctx)
			md := w.Metadata()
			deliver(mlog.LedgerResult{Entries: md.LastEntryID + 1, Size: md.Length, Err: err})
		}()
	case mlog.LedgerRecover:
		go func() {
			ctx, cancel := context.WithTimeout(t.ctx, t.cfg.OpTimeout)
			defer cancel()
			md, err := lc.Recover(ctx, op.Ledger)
			deliver(mlog.LedgerResult{Entries: md.LastEntryID + 1, Size: md.Length, Err: err})
		}()
	case mlog.LedgerRead:
		go func() {
			ctx, cancel := context.WithTimeout(t.ctx, t.cfg.OpTimeout)
			defer cancel()
			md, _, err := lc.ReadMetadata(ctx, op.Ledger)
			if err != nil {
				deliver(mlog.LedgerResult{Err: err})
				return
			}
			payloads, err := lc.Read(ctx, md, op.Entry, op.Entry)
			if err == nil && len(payloads) != 1 {
				err = fmt.Errorf("ledger %d: read entry %d: got %d entries", op.Ledger, op.Entry, len(payloads))
			}
			if err != nil {
				deliver(mlog.LedgerResult{Err: err})
				return
			}
			deliver(mlog.LedgerResult{Payload: payloads[0]})
		}()
	case mlog.LedgerDelete:
		w := t.writers[op.Ledger] // a ledger we created and never used
		delete(t.writers, op.Ledger)
		go func() {
			ctx, cancel := context.WithTimeout(t.ctx, t.cfg.OpTimeout)
			defer cancel()
			if w != nil {
				_ = w.Close(ctx)
			}
			deliver(mlog.LedgerResult{Err: lc.Delete(ctx, op.Ledger)})
		}()
	}
}
