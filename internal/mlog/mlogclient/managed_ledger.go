// Package mlogclient is the production shell around the managed-ledger core
// (mlog.ManagedLedger): it carries out the core's ledger operations with
// ledgerclient, its metadata operations with a meta.Store, feeds it ticks
// from a ticker, and answers producers and readers. One goroutine (a
// loop.Loop) owns each topic's core, so the core needs no locks: callers'
// requests reach it through the loop's bounded queue, results of the
// operations it started through the loop's non-blocking completion path,
// and admitted appends (Admit) through that path too, their number bounded
// by the admission permits.
//
// It owns goroutines, timers, I/O and the entry cache; it never decides
// anything the managed ledger decides (rollover, trimming, quotas, fencing)
// — that lives in package mlog, where tests drive the same code.
package mlogclient

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"quire/internal/ledger"
	"quire/internal/ledger/ledgerclient"
	"quire/internal/loop"
	"quire/internal/meta"
	"quire/internal/mlog"
)

// Config configures a topic's shell.
type Config struct {
	Ledgers *ledgerclient.Client
	Store   meta.Store
	// Core configures the core; its Name is set by Open, and its
	// MaxWriterInFlight is held to Ledgers.MaxInFlight() (its default), so
	// the ledger writer never refuses an append for being over its bound.
	// Core.MaxQueuedAppends is also how many appends Admit lets in.
	Core mlog.Config
	// InboxBound bounds requests (AppendAsync without a permit, reads,
	// acks, stats) waiting for the topic's goroutine; callers wait while
	// it is reached. Default loop.DefaultQueueBound.
	InboxBound int
	// Ensemble, WriteQuorum, AckQuorum of new ledgers (default 3, 3, 2).
	Ensemble, WriteQuorum, AckQuorum int
	// Tick is how often the core gets Tick (default 100ms).
	Tick time.Duration
	// CacheEntries and CacheBytes bound the cache of recent entries
	// (default 10,000 entries and 32 MiB, whichever is reached first).
	CacheEntries int
	CacheBytes   int64
	// CacheBudget, when set, bounds the caches of every managed ledger
	// sharing it (one per broker): a cache that cannot take budget for an
	// entry evicts its own oldest first, and keeps the entry out if that
	// is not enough (tailing readers then read it from the bookies).
	CacheBudget *ReadAheadBudget
	// ReadAheadBytes bounds the entries fetched ahead for readers behind
	// the tail (default DefaultReadAheadBytes; negative: no read-ahead);
	// ReadAheadBudget bounds them over every managed ledger sharing it
	// (nil: this one's own ReadAheadBytes). See readahead.go.
	ReadAheadBytes  int64
	ReadAheadBudget *ReadAheadBudget
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

	loop *loop.Loop
	// ctx bounds the operations the loop starts: cancelled by stop.
	ctx    context.Context
	cancel context.CancelFunc
	// permits: one token per append admitted (Admit) and not yet answered.
	// Capacity Core.MaxQueuedAppends, so admitted appends always fit in
	// the core's queue and never get mlog.ErrBusy.
	permits chan struct{}

	// Owned by the loop goroutine.
	core     *mlog.ManagedLedger
	writers  map[int64]*ledgerclient.Writer
	payloads map[mlog.OpID][]byte // appends in flight, for the cache
	waiters  map[uint64]func(mlog.AppendAck)
	// compactions: callers waiting for a compaction answer, by token.
	compactions map[uint64]chan error
	token       uint64
	cache       entryCache
	opened      chan error // answered once Open settles
	closing     []chan error

	statsMu sync.Mutex
	hits    int64
	misses  int64

	// rewrites counts compaction swaps (see Rewrites); swapsSeen is the
	// core's count as noticeSwaps last saw it (loop goroutine).
	rewrites  atomic.Uint64
	swapsSeen int64
	readAhead *readAhead // nil: disabled
	metadata  *metadataCache
	reads     atomic.Uint64 // reads so far: the read-ahead's clock
	// prefetches counts read-ahead fetches running; stop waits for them,
	// and starts no more once prefetchStopped (under prefetchMu).
	prefetches      sync.WaitGroup
	prefetchMu      sync.Mutex
	prefetchStopped bool
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
	if cfg.Core.MaxQueuedAppends <= 0 {
		cfg.Core.MaxQueuedAppends = mlog.DefaultMaxQueuedAppends
	}
	if limit := cfg.Ledgers.MaxInFlight(); cfg.Core.MaxWriterInFlight <= 0 || cfg.Core.MaxWriterInFlight > limit {
		cfg.Core.MaxWriterInFlight = limit
	}
	opsCtx, cancel := context.WithCancel(context.Background())
	t := &ManagedLedger{
		cfg: cfg, name: name, log: cfg.Logger.With("component", "mlog", "topic", name),
		ctx: opsCtx, cancel: cancel, permits: make(chan struct{}, cfg.Core.MaxQueuedAppends),
		core: mlog.New(cfg.Core), writers: map[int64]*ledgerclient.Writer{},
		payloads: map[mlog.OpID][]byte{}, waiters: map[uint64]func(mlog.AppendAck){}, compactions: map[uint64]chan error{},
		cache: newEntryCache(cfg.CacheEntries, cfg.CacheBytes, cfg.CacheBudget), metadata: newMetadataCache(1024),
	}
	if cfg.ReadAheadBytes == 0 {
		cfg.ReadAheadBytes = DefaultReadAheadBytes
	}
	if cfg.ReadAheadBytes > 0 {
		budget := cfg.ReadAheadBudget
		if budget == nil {
			budget = NewReadAheadBudget(cfg.ReadAheadBytes)
		}
		t.readAhead = newReadAhead(cfg.ReadAheadBytes, budget)
	}
	t.loop = loop.New(loop.Config{QueueBound: cfg.InboxBound, Tick: cfg.Tick,
		OnTick: func(now time.Time) { t.core.Tick(now) },
		Ready:  t.process,
		Stopped: func() {
			t.failWaiters(mlog.ErrClosed)
			t.cache.drop() // its budget back to the broker
			if t.readAhead != nil {
				t.readAhead.drop()
			}
		}})
	opened := make(chan error, 1)
	t.opened = opened // the loop owns the field from here; Open keeps its own copy
	t.core.Open(time.Now())
	go t.loop.Run() // its first Ready carries the takeover's first operation out
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
	if err := t.loop.Post(ctx, func() {
		mu.Lock()
		if state == abandoned {
			mu.Unlock()
			return
		}
		state = started
		mu.Unlock()
		f()
		close(ran)
	}); err != nil {
		if errors.Is(err, loop.ErrStopped) {
			return mlog.ErrClosed
		}
		return err
	}
	var err error
	select {
	case <-ran:
		return nil
	case <-ctx.Done():
		err = ctx.Err()
	case <-t.loop.Done():
		// The loop runs all it accepted before Done closes, so f has run
		// (state is started): the check below returns nil.
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

// stop ends the loop: what it accepted still runs, then every append
// still unanswered fails with mlog.ErrClosed.
func (t *ManagedLedger) stop() {
	t.cancel()
	t.loop.Stop()
	<-t.loop.Done()
	t.prefetchMu.Lock()
	t.prefetchStopped = true
	t.prefetchMu.Unlock()
	t.prefetches.Wait() // their reads end with t.ctx; then they give back their budget
}

// process carries out the core's Ready until it is empty (the loop's Ready
// hook). Once stopping it starts no more operations; their appends are
// answered by failWaiters.
func (t *ManagedLedger) process() {
	for rd := t.core.Ready(); !rd.Empty(); rd = t.core.Ready() {
		for _, ev := range rd.Events {
			t.onEvent(ev)
		}
		for _, op := range rd.MetaOps {
			if t.ctx.Err() != nil {
				break
			}
			go func() {
				res := t.runMeta(op)
				t.loop.Complete(func() {
					t.core.StepMeta(res, time.Now())
					t.noticeSwaps()
				})
			}()
		}
		for _, op := range rd.LedgerOps {
			if t.ctx.Err() != nil {
				break
			}
			t.runLedger(op)
		}
		for _, a := range rd.Acks {
			if done, ok := t.waiters[a.Token]; ok {
				delete(t.waiters, a.Token)
				done(a)
			}
		}
		for _, c := range rd.Compactions {
			if done, ok := t.compactions[c.Token]; ok {
				delete(t.compactions, c.Token)
				done <- c.Err
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
		if ev.Err != nil {
			t.log.Warn("topic opened read-only: appends are refused until a ledger can be created", "err", ev.Err)
		} else {
			t.log.Info("topic opened", "detail", ev.Detail)
		}
	case mlog.EventFenced, mlog.EventFailed, mlog.EventRolloverFailed:
		t.settleOpen(ev.Err)
		t.log.Warn("topic event", "kind", ev.Kind, "err", ev.Err)
	case mlog.EventCompacted:
		t.log.Info("compacted", "detail", ev.Detail)
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
	for tok, done := range t.compactions {
		done <- err
		delete(t.compactions, tok)
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
// right here, on the loop goroutine, so they reach it in the core's order
// (the core keeps them within the writer's MaxInFlight, so the writer's
// queue has room for them). Results come back through the loop's
// completion path, which never blocks, whoever delivers them: another
// goroutine, the writer's loop, or this one when a writer answers inline.
func (t *ManagedLedger) runLedger(op mlog.LedgerOp) {
	deliver := func(res mlog.LedgerResult) {
		res.ID = op.ID
		t.loop.Complete(func() { t.core.StepLedger(res, time.Now()) })
	}
	lc := t.cfg.Ledgers
	switch op.Kind {
	case mlog.LedgerAppend:
		w := t.writers[op.Ledger]
		if w == nil {
			// On the loop goroutine: a self-post, which must not wait.
			t.loop.Defer(func() {
				t.core.StepLedger(mlog.LedgerResult{ID: op.ID,
					Err: fmt.Errorf("ledger %d: no writer: %w", op.Ledger, ledger.ErrClosed)}, time.Now())
			})
			return
		}
		t.payloads[op.ID] = op.Payload
		w.AppendAsync(op.Payload, func(entryID int64, err error) {
			t.loop.Complete(func() {
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
			if !t.loop.Complete(func() {
				t.writers[w.ID()] = w
				t.core.StepLedger(mlog.LedgerResult{ID: op.ID, Ledger: w.ID()}, time.Now())
			}) {
				_ = w.Close(ctx) // the loop ended meanwhile: nobody will write it
			}
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
