// Package ledgerclient is the production shell around the ledger protocol
// cores (package ledger): it feeds them bookie responses from the bookie
// client, metadata results from the metadata store and ticks from a ticker,
// and carries out what their Ready says. One goroutine owns each state
// machine (a loop.Loop), so the cores need no locks: callers' requests reach
// it through the loop's bounded queue, bookie responses and metadata results
// through its non-blocking completion path, so a bookie connection's reader
// never waits for a writer that is itself waiting for that connection.
//
// It owns goroutines, timers and I/O for ledgers; it never decides anything
// the protocol decides — that lives in package ledger, where the simulator
// runs the same code.
package ledgerclient

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"quire/internal/bookie/client"
	"quire/internal/bookie/registry"
	"quire/internal/ledger"
	"quire/internal/loop"
	"quire/internal/meta"
)

// Config configures a Client.
type Config struct {
	Store   meta.Store
	Bookies *client.Client
	// Tick is the cores' logical tick; default 100ms.
	Tick time.Duration
	// RequestTimeoutTicks and RetryTicks are passed to the cores (defaults 30 and 5).
	RequestTimeoutTicks int
	RetryTicks          int
	// ExplicitLacTicks is the writers' ledger.WriterConfig.ExplicitLacTicks:
	// after this many ticks without an add, a writer sends its LAC to its
	// bookies so that tailing readers (WaitLAC) see its last entry. Default
	// DefaultExplicitLacTicks; negative turns it off.
	ExplicitLacTicks int
	// ReadRangesInFlight, ReadRangeEntries and ReadRangeBytes are the
	// readers' range settings (ledger.ReaderConfig's MaxRangesInFlight,
	// MaxRangeEntries, MaxRangeBytes); zero takes the core's default.
	ReadRangesInFlight int
	ReadRangeEntries   int
	ReadRangeBytes     int
	// MaxInFlight bounds each writer's entries added and not yet
	// acknowledged (default DefaultMaxInFlight); an Add beyond it fails
	// with ledger.ErrTooManyInFlight. See Client.MaxInFlight.
	MaxInFlight int
	Name        string
	Logger      *slog.Logger
	// Mutants break the protocol on purpose (tests only).
	Mutants ledger.Mutants
}

// DefaultMaxInFlight is Config.MaxInFlight's default.
const DefaultMaxInFlight = 1000

// DefaultExplicitLacTicks is Config.ExplicitLacTicks's default: 1 s at the
// default 100 ms tick (BookKeeper's explicitLacInterval is off by default;
// a managed ledger's tail consumers need it, so here it is on).
const DefaultExplicitLacTicks = 10

// Client creates, writes, recovers and reads ledgers.
type Client struct {
	cfg Config
	log *slog.Logger

	mu      sync.Mutex
	addrs   map[ledger.BookieID]string
	cluster []ledger.BookieInfo
}

// New returns a client.
func New(cfg Config) *Client {
	if cfg.Tick == 0 {
		cfg.Tick = 100 * time.Millisecond
	}
	if cfg.RequestTimeoutTicks == 0 {
		cfg.RequestTimeoutTicks = 30
	}
	if cfg.RetryTicks == 0 {
		cfg.RetryTicks = 5
	}
	if cfg.MaxInFlight <= 0 {
		cfg.MaxInFlight = DefaultMaxInFlight
	}
	switch {
	case cfg.ExplicitLacTicks == 0:
		cfg.ExplicitLacTicks = DefaultExplicitLacTicks
	case cfg.ExplicitLacTicks < 0:
		cfg.ExplicitLacTicks = 0 // the core's "off"
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Client{cfg: cfg, log: cfg.Logger.With("component", "ledger-client"), addrs: map[ledger.BookieID]string{}}
}

// MaxInFlight is how many entries a writer accepts before they are
// acknowledged: a caller that never has more unanswered appends on one
// writer than this never sees ledger.ErrTooManyInFlight.
func (c *Client) MaxInFlight() int { return c.cfg.MaxInFlight }

// RefreshCluster reads the bookie registry: addresses, zones, writability.
func (c *Client) RefreshCluster(ctx context.Context) ([]ledger.BookieInfo, error) {
	infos, err := registry.List(ctx, c.cfg.Store)
	if err != nil {
		return nil, err
	}
	cluster := make([]ledger.BookieInfo, 0, len(infos))
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, i := range infos {
		id := ledger.BookieID(i.ID)
		c.addrs[id] = i.Addr
		cluster = append(cluster, ledger.BookieInfo{ID: id, Zone: i.Zone, Writable: !i.ReadOnly})
	}
	c.cluster = cluster
	return cluster, nil
}

// addr resolves a bookie id; unregistered bookies (dead ones still named in
// old fragments) fall back to their id, which defaults to their address.
func (c *Client) addr(id ledger.BookieID) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if a, ok := c.addrs[id]; ok {
		return a
	}
	return string(id)
}

// ReadMetadata reads a ledger's record.
func (c *Client) ReadMetadata(ctx context.Context, id int64) (ledger.Metadata, meta.Version, error) {
	kv, err := c.cfg.Store.Get(ctx, ledger.Key(id))
	if err != nil {
		return ledger.Metadata{}, 0, fmt.Errorf("ledger %d: %w", id, err)
	}
	md, err := ledger.UnmarshalMetadata(kv.Value)
	return md, kv.Version, err
}

// Create makes a new ledger (id from the store's sequence, ensemble from
// zone-aware placement) and returns its writer.
func (c *Client) Create(ctx context.Context, ensembleSize, writeQuorum, ackQuorum int) (*Writer, error) {
	if err := ledger.ValidateQuorum(ensembleSize, writeQuorum, ackQuorum); err != nil {
		return nil, err
	}
	cluster, err := c.RefreshCluster(ctx)
	if err != nil {
		return nil, err
	}
	id, err := c.cfg.Store.AllocateID(ctx, ledger.IDSequence)
	if err != nil {
		return nil, err
	}
	ensemble, err := ledger.PickEnsemble(cluster, ensembleSize, writeQuorum, nil, id)
	if err != nil {
		return nil, fmt.Errorf("create ledger %d: %w", id, err)
	}
	md := ledger.Metadata{ID: id, EnsembleSize: ensembleSize, WriteQuorum: writeQuorum, AckQuorum: ackQuorum,
		State: ledger.StateOpen, Fragments: []ledger.Fragment{{FirstEntry: 0, Ensemble: ensemble}}, LastEntryID: -1, CreatedBy: c.cfg.Name}
	v, err := c.cfg.Store.Create(ctx, ledger.Key(id), md.Marshal())
	if err != nil {
		return nil, fmt.Errorf("create ledger %d: %w", id, err)
	}
	core, err := ledger.NewWriter(ledger.WriterConfig{Metadata: md, Version: v, Cluster: cluster, MaxInFlight: c.cfg.MaxInFlight,
		RequestTimeoutTicks: c.cfg.RequestTimeoutTicks, RetryTicks: c.cfg.RetryTicks, ExplicitLacTicks: c.cfg.ExplicitLacTicks,
		Mutants: c.cfg.Mutants})
	if err != nil {
		return nil, err
	}
	w := &Writer{c: c, core: core, id: id, callbacks: map[int64]func(int64, error){}}
	// The queue holds callers' adds (and the odd Close or Metadata): sized
	// to the in-flight bound, a caller that keeps within it (a managed
	// ledger does) never waits on a full queue.
	w.loop = loop.New(loop.Config{QueueBound: c.cfg.MaxInFlight, Tick: c.cfg.Tick,
		OnTick: func(time.Time) { w.core.Tick() }, Ready: w.process, Stopped: w.finish})
	go w.loop.Run()
	return w, nil
}

// runMeta performs one metadata operation for a core.
func (c *Client) runMeta(op ledger.MetaOp) ledger.MetaResult {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res := ledger.MetaResult{ID: op.ID}
	switch op.Kind {
	case ledger.MetaRead:
		res.Metadata, res.Version, res.Err = c.ReadMetadata(ctx, op.LedgerID)
	case ledger.MetaWrite:
		res.Metadata = op.Metadata
		res.Version, res.Err = c.cfg.Store.Put(ctx, ledger.Key(op.LedgerID), op.Metadata.Marshal(), op.Expected)
	}
	return res
}

// send carries out one bookie request; deliver gets the response.
func (c *Client) send(req ledger.Request, deliver func(ledger.Response)) {
	addr := c.addr(req.To)
	switch req.Kind {
	case ledger.RequestAdd:
		c.cfg.Bookies.AddAsync(addr, client.AddRequest{LedgerID: req.LedgerID, EntryID: req.EntryID,
			LastAddConfirmed: req.LastAddConfirmed, Recovery: req.Recovery, Payload: req.Payload}, func(err error) {
			if err != nil {
				c.log.Debug("add failed", "bookie", req.To, "entry", req.EntryID, "err", err)
			}
			deliver(ledger.Response{ID: req.ID, From: req.To, Status: statusOf(err)})
		})
	case ledger.RequestWriteLac:
		// On the ledger's connection, so it reaches the bookie after the
		// ledger's adds sent before it.
		c.cfg.Bookies.WriteLacAsync(addr, req.LedgerID, req.LastAddConfirmed, func(err error) {
			if err != nil {
				c.log.Debug("explicit LAC failed", "bookie", req.To, "lac", req.LastAddConfirmed, "err", err)
			}
			deliver(ledger.Response{ID: req.ID, From: req.To, Status: statusOf(err)})
		})
	case ledger.RequestRead:
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Duration(c.cfg.RequestTimeoutTicks)*c.cfg.Tick)
			defer cancel()
			e, err := c.cfg.Bookies.Read(ctx, addr, req.LedgerID, req.EntryID, req.Fence)
			deliver(ledger.Response{ID: req.ID, From: req.To, Status: statusOf(err), LastAddConfirmed: e.LastAddConfirmed, Payload: e.Payload})
		}()
	case ledger.RequestReadRange:
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Duration(c.cfg.RequestTimeoutTicks)*c.cfg.Tick)
			defer cancel()
			es, err := c.cfg.Bookies.ReadRange(ctx, addr, req.LedgerID, req.EntryID, req.MaxEntries, req.MaxBytes)
			if err != nil {
				c.log.Debug("range read failed", "bookie", req.To, "ledger", req.LedgerID, "from", req.EntryID, "err", err)
			}
			resp := ledger.Response{ID: req.ID, From: req.To, Status: statusOf(err), LastAddConfirmed: -1}
			if err == nil {
				resp.Entries = make([][]byte, len(es))
				for i, e := range es {
					resp.Entries[i] = e.Payload
				}
			}
			deliver(resp)
		}()
	}
}

// statusOf maps bookie client errors to what the cores distinguish.
func statusOf(err error) ledger.Status {
	switch {
	case err == nil:
		return ledger.StatusOK
	case errors.Is(err, client.ErrNoSuchEntry):
		return ledger.StatusNoSuchEntry
	case errors.Is(err, client.ErrNoSuchLedger):
		return ledger.StatusNoSuchLedger
	case errors.Is(err, client.ErrFenced):
		return ledger.StatusFenced
	}
	return ledger.StatusFailed
}

// Writer is a ledger being written by this process.
type Writer struct {
	c    *Client
	core *ledger.Writer
	id   int64
	loop *loop.Loop // its loop stops once the core ended and every add is answered

	// Set by the loop goroutine when the core ended, before the loop stops
	// accepting work; read by callers the loop refused.
	mu            sync.Mutex
	endErr        error           // the finished core's outcome
	finalMetadata ledger.Metadata // the core's record when it ended

	// Owned by the loop goroutine.
	callbacks map[int64]func(int64, error)
	closeWait []chan error
}

// ID is the ledger id.
func (w *Writer) ID() int64 { return w.id }

// process carries out the core's Ready (the loop's Ready hook) and stops
// the loop once the core ended with nothing left to answer.
func (w *Writer) process() {
	for {
		rd := w.core.Ready()
		if rd.Empty() {
			break
		}
		for _, req := range rd.Requests {
			w.c.send(req, func(resp ledger.Response) { w.loop.Complete(func() { w.core.Step(resp) }) })
		}
		for _, op := range rd.MetaOps {
			go func(op ledger.MetaOp) {
				res := w.c.runMeta(op)
				w.loop.Complete(func() { w.core.StepMeta(res) })
			}(op)
		}
		for _, a := range rd.Acks {
			if cb := w.callbacks[a.EntryID]; cb != nil {
				delete(w.callbacks, a.EntryID)
				cb(a.EntryID, a.Err)
			}
		}
	}
	if closed, err := w.core.Closed(); closed && w.core.Pending() == 0 && len(w.callbacks) == 0 {
		w.mu.Lock()
		w.endErr = err
		w.finalMetadata, _ = w.core.Metadata()
		w.mu.Unlock()
		// Work accepted before this still runs and sees the finished core
		// (adds fail with its error, closes wait for finish).
		w.loop.Stop()
	}
}

// finish answers the closes (the loop's Stopped hook).
func (w *Writer) finish() {
	err := w.closedErr()
	for _, ch := range w.closeWait {
		ch <- err
	}
	w.closeWait = nil
}

// post runs f on the writer's goroutine, waiting while its queue is full;
// false once the writer ended (f never runs then).
func (w *Writer) post(f func()) bool {
	return w.loop.Post(context.Background(), f) == nil
}

// AppendAsync adds payload; cb gets the entry id once it is acknowledged (in
// entry order) or the error. cb runs on the writer's goroutine, or on the
// caller's when the writer already ended or refuses payload outright: it
// must not block. AppendAsync waits while the writer's queue is full
// (Config.MaxInFlight requests not yet taken by the writer's goroutine):
// that is backpressure on callers, and it ends as the writer works, since
// nothing the writer waits for waits for its queue.
func (w *Writer) AppendAsync(payload []byte, cb func(entryID int64, err error)) {
	if limit := w.c.cfg.Bookies.MaxEntryBytes() - ledger.EntryOverhead; len(payload) > limit {
		// A bookie would refuse it on every ensemble: never let it in.
		cb(-1, fmt.Errorf("%w: %d bytes, at most %d", ErrEntryTooLarge, len(payload), limit))
		return
	}
	add := func() {
		id, err := w.core.Add(payload)
		if err != nil {
			cb(-1, err)
			return
		}
		w.callbacks[id] = cb
	}
	if !w.post(add) {
		err := w.closedErr()
		if err == nil {
			err = ledger.ErrClosed
		}
		cb(-1, err)
	}
}

// Append adds payload and waits for its acknowledgement.
func (w *Writer) Append(ctx context.Context, payload []byte) (int64, error) {
	type result struct {
		id  int64
		err error
	}
	ch := make(chan result, 1)
	w.AppendAsync(payload, func(id int64, err error) { ch <- result{id, err} })
	select {
	case r := <-ch:
		return r.id, r.err
	case <-ctx.Done():
		return -1, ctx.Err()
	}
}

// Close closes the ledger once every pending entry is resolved; it returns
// ledger.ErrFenced when a new owner took the ledger over meanwhile.
func (w *Writer) Close(ctx context.Context) error {
	ch := make(chan error, 1)
	if !w.post(func() { w.closeWait = append(w.closeWait, ch); w.core.Close() }) {
		return w.closedErr()
	}
	select {
	case err := <-ch:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// closedErr is the finished writer's outcome: nil when closed cleanly.
func (w *Writer) closedErr() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.endErr
}

// Metadata returns the writer's view of the ledger's record.
func (w *Writer) Metadata() ledger.Metadata {
	ch := make(chan ledger.Metadata, 1)
	if w.post(func() { md, _ := w.core.Metadata(); ch <- md }) {
		return <-ch
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.finalMetadata
}

// Recover fences and closes a ledger (or just reads it, when already
// CLOSED), returning the closed metadata.
func (c *Client) Recover(ctx context.Context, id int64) (ledger.Metadata, error) {
	core := ledger.NewRecovery(ledger.RecoveryConfig{LedgerID: id, RequestTimeoutTicks: c.cfg.RequestTimeoutTicks,
		RetryTicks: c.cfg.RetryTicks, Mutants: c.cfg.Mutants})
	if _, err := c.RefreshCluster(ctx); err != nil {
		return ledger.Metadata{}, err
	}
	var (
		l        *loop.Loop
		finished bool
		md       ledger.Metadata
		err      error
	)
	l = loop.New(loop.Config{Tick: c.cfg.Tick, OnTick: func(time.Time) { core.Tick() }, Ready: func() {
		if finished || ctx.Err() != nil {
			return // stopping: start nothing more
		}
		for rd := core.Ready(); !rd.Empty(); rd = core.Ready() {
			for _, req := range rd.Requests {
				c.send(req, func(resp ledger.Response) { l.Complete(func() { core.Step(resp) }) })
			}
			for _, op := range rd.MetaOps {
				go func(op ledger.MetaOp) {
					res := c.runMeta(op)
					l.Complete(func() { core.StepMeta(res) })
				}(op)
			}
		}
		if finished, md, err = core.Done(); finished {
			l.Stop()
		}
	}})
	core.Start()
	defer context.AfterFunc(ctx, l.Stop)()
	l.Run()
	if !finished {
		return ledger.Metadata{}, fmt.Errorf("recover ledger %d: %w (phase %s)", id, ctx.Err(), core.Phase())
	}
	return md, err
}

// Read returns entries first..last of a CLOSED ledger (or of an open one up
// to its LAC), in order. The ledger core reads them in ranges of consecutive
// entries from one replica each (ledger.Reader).
//
// Bookie addresses come from the client's cache of the registry, read again
// only when the ledger names a bookie the cache does not know, or once when
// a read fails (a bookie may have come back on another address).
func (c *Client) Read(ctx context.Context, md ledger.Metadata, first, last int64) ([][]byte, error) {
	return c.ReadStream(ctx, md, first, last, nil)
}

// ReadStream is Read that also hands the payloads over as they arrive: each
// call of delivered (if not nil) gets the next ones in entry order, the
// first of them entry first+(how many earlier calls got), while the ranges
// after them are still being read. It returns every payload read, as Read.
func (c *Client) ReadStream(ctx context.Context, md ledger.Metadata, first, last int64, delivered func([][]byte)) ([][]byte, error) {
	if first > last {
		return nil, nil
	}
	if !c.knows(md.BookiesOf(first, last)) {
		if _, err := c.RefreshCluster(ctx); err != nil {
			return nil, err
		}
	}
	out, err := c.read(ctx, md, first, last, make([][]byte, 0, last-first+1), delivered)
	if err != nil && ctx.Err() == nil {
		next := first + int64(len(out))
		if _, rerr := c.RefreshCluster(ctx); rerr == nil {
			out, err = c.read(ctx, md, next, last, out, delivered)
		}
	}
	return out, err
}

// read runs one reader core over first..last, appending the payloads to out
// (and handing each run of them to delivered) until the first entry it
// cannot read.
func (c *Client) read(ctx context.Context, md ledger.Metadata, first, last int64, out [][]byte, delivered func([][]byte)) ([][]byte, error) {
	core := ledger.NewReader(ledger.ReaderConfig{Metadata: md, TimeoutTicks: c.cfg.RequestTimeoutTicks,
		MaxRangesInFlight: c.cfg.ReadRangesInFlight, MaxRangeEntries: c.cfg.ReadRangeEntries, MaxRangeBytes: c.cfg.ReadRangeBytes}, first, last)
	var (
		l        *loop.Loop
		finished bool
		err      error
	)
	l = loop.New(loop.Config{Tick: c.cfg.Tick, OnTick: func(time.Time) { core.Tick() }, Ready: func() {
		if finished || ctx.Err() != nil {
			return // stopping: start nothing more
		}
		reqs, results := core.Ready()
		for _, req := range reqs {
			c.send(req, func(resp ledger.Response) { l.Complete(func() { core.Step(resp) }) })
		}
		had := len(out)
		for _, r := range results {
			if r.Err != nil {
				finished, err = true, r.Err
				break
			}
			out = append(out, r.Payload)
		}
		if delivered != nil && len(out) > had {
			delivered(out[had:len(out):len(out)])
		}
		if finished {
			l.Stop()
			return
		}
		if core.Done() {
			finished = true
			l.Stop()
		}
	}})
	defer context.AfterFunc(ctx, l.Stop)()
	l.Run()
	if !finished {
		return out, ctx.Err()
	}
	return out, err
}
