// Package client is the Go client of the bookie protocol (package wire): it keeps pipelined
// TCP connections to bookies, matches responses to requests by id, bounds requests in
// flight, and turns response statuses into the sentinel errors of package wire.
//
// It owns connections and request bookkeeping only. It must never retry a request on its
// own or interpret ledger semantics: what a failed add means (ensemble change, recovery) is
// the ledger protocol's decision.
//
// Errors: a status from a bookie unwraps to its sentinel (errors.Is(err, ErrFenced)); a
// request that never got an answer fails with ErrConnection (dial failed, connection lost),
// ErrClosed (the client closed), or context.DeadlineExceeded / context.Canceled (the
// caller's context, or Config.AsyncTimeout for AddAsync). Such a request may or may not have
// reached the bookie.
package client

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"quire/internal/bookie/wire"
)

// Sentinel errors. The protocol outcomes are package wire's, so that the server's mapping
// and the client's agree; they are repeated here for callers that import only the client.
var (
	ErrNoSuchLedger    = wire.ErrNoSuchLedger
	ErrNoSuchEntry     = wire.ErrNoSuchEntry
	ErrFenced          = wire.ErrFenced
	ErrReadOnly        = wire.ErrReadOnly
	ErrTooManyRequests = wire.ErrTooManyRequests
	ErrBadRequest      = wire.ErrBadRequest
	ErrIO              = wire.ErrIO
	ErrTimeout         = wire.ErrTimeout
	ErrUnknown         = wire.ErrUnknown
	ErrFrameTooLarge   = wire.ErrFrameTooLarge
	ErrMalformed       = wire.ErrMalformed

	// ErrConnection: the request could not be sent or was in flight when its connection
	// failed (dial error, redial backoff, reset, malformed response stream).
	ErrConnection = errors.New("bookie client: connection failed")
	// ErrClosed: the client was closed.
	ErrClosed = errors.New("bookie client: closed")
)

// Defaults for Config's zero fields.
const (
	DefaultConnsPerBookie     = 1
	DefaultReadConnsPerBookie = 1
	DefaultMaxInFlightPerConn = 1000
	DefaultDialTimeout        = 5 * time.Second
	DefaultRedialBackoffMin   = 100 * time.Millisecond
	DefaultRedialBackoffMax   = 5 * time.Second
	DefaultAsyncTimeout       = 30 * time.Second
	DefaultWriteTimeout       = 30 * time.Second
)

// Config configures a Client. The zero value is usable: every zero field takes its default.
type Config struct {
	Logger *slog.Logger
	// ConnsPerBookie is how many connections to open to each bookie. Requests of one ledger
	// always use the same connection, so a ledger's adds reach the bookie in order.
	ConnsPerBookie int
	// ReadConnsPerBookie is how many more connections to each bookie carry
	// ranged reads (ReadRange), and nothing else: a catch-up reader's
	// answers of megabytes then never queue ahead of add acknowledgements
	// on one TCP stream (head-of-line blocking held produce latency back
	// by hundreds of milliseconds). Default DefaultReadConnsPerBookie.
	ReadConnsPerBookie int
	// Local holds the bookies served by this process, by the address they
	// register: their ranged reads and adds are handed to the engine
	// directly (no connection, no frame, no copy; BookKeeper's local
	// transport) — what catch-up reads and produces cost a standalone's
	// shared CPUs. Everything else (fencing, single reads, LAC reads and
	// writes, deletes) still goes through a connection.
	Local map[string]LocalBookie
	// MaxInFlightPerConn bounds requests sent on a connection and not yet answered. When the
	// window is full, callers wait: the synchronous methods until their context ends,
	// AddAsync until AsyncTimeout.
	MaxInFlightPerConn int
	// MaxFrameBytes bounds frames in both directions (default wire.DefaultMaxFrameBytes). A
	// request larger than MaxFrameBytes-wire.FrameOverheadBytes fails with ErrFrameTooLarge
	// without being sent, so its entry can still be read back in one frame.
	MaxFrameBytes int
	// DialTimeout bounds one connection attempt.
	DialTimeout time.Duration
	// After a failed dial, requests to that bookie fail fast with ErrConnection for a
	// backoff that doubles from RedialBackoffMin to RedialBackoffMax and resets on a
	// successful dial. A connection that was up and then dropped is redialled at once.
	RedialBackoffMin time.Duration
	RedialBackoffMax time.Duration
	// AsyncTimeout bounds an AddAsync from call to completion: waiting for a connection,
	// for room in the window and for the response.
	AsyncTimeout time.Duration
	// WriteTimeout bounds one write to a connection; a bookie that stops reading for that
	// long is treated as failed. Negative disables it.
	WriteTimeout time.Duration
	// Dial opens a connection (default: TCP with DialTimeout, and TLS over it with TLS).
	// Tests and the simulator replace it.
	Dial func(ctx context.Context, addr string) (net.Conn, error)
	// TLS, when set, makes the default Dial speak TLS to every bookie, the handshake
	// inside DialTimeout: the client's configuration decides for all bookies (their
	// registrations do not say), so a cluster turns TLS on for all its bookies and all
	// their clients together. The bookie's certificate is checked against the host of
	// the address dialled unless TLS.ServerName says otherwise; a client certificate
	// (tlsconf.Client) is presented to bookies that require one.
	TLS *tls.Config
}

// MaxEntryBytes is the largest entry an add request may carry: a frame
// less the request's own overhead.
func (c *Client) MaxEntryBytes() int { return c.cfg.MaxFrameBytes - wire.FrameOverheadBytes }

func (cfg Config) withDefaults() Config {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.ConnsPerBookie <= 0 {
		cfg.ConnsPerBookie = DefaultConnsPerBookie
	}
	if cfg.ReadConnsPerBookie <= 0 {
		cfg.ReadConnsPerBookie = DefaultReadConnsPerBookie
	}
	if cfg.MaxInFlightPerConn <= 0 {
		cfg.MaxInFlightPerConn = DefaultMaxInFlightPerConn
	}
	if cfg.MaxFrameBytes <= 0 {
		cfg.MaxFrameBytes = wire.DefaultMaxFrameBytes
	}
	if cfg.DialTimeout <= 0 {
		cfg.DialTimeout = DefaultDialTimeout
	}
	if cfg.RedialBackoffMin <= 0 {
		cfg.RedialBackoffMin = DefaultRedialBackoffMin
	}
	if cfg.RedialBackoffMax < cfg.RedialBackoffMin {
		cfg.RedialBackoffMax = max(DefaultRedialBackoffMax, cfg.RedialBackoffMin)
	}
	if cfg.AsyncTimeout <= 0 {
		cfg.AsyncTimeout = DefaultAsyncTimeout
	}
	if cfg.WriteTimeout == 0 {
		cfg.WriteTimeout = DefaultWriteTimeout
	}
	if cfg.Dial == nil {
		dialer := &net.Dialer{Timeout: cfg.DialTimeout, KeepAlive: 30 * time.Second}
		cfg.Dial = func(ctx context.Context, addr string) (net.Conn, error) {
			return dialer.DialContext(ctx, "tcp", addr)
		}
		if cfg.TLS != nil {
			// tls.Dialer sets ServerName from addr when the config leaves it empty, and
			// returns only once the handshake is done.
			tlsDialer := &tls.Dialer{NetDialer: dialer, Config: cfg.TLS}
			cfg.Dial = func(ctx context.Context, addr string) (net.Conn, error) {
				return tlsDialer.DialContext(ctx, "tcp", addr)
			}
		}
	}
	return cfg
}

// AddRequest is one entry to write to one bookie.
type AddRequest struct {
	LedgerID         int64
	EntryID          int64
	LastAddConfirmed int64
	Recovery         bool
	Payload          []byte
}

// Entry is an entry read from a bookie, or with EntryID -1 only its LAC.
type Entry struct {
	LedgerID         int64
	EntryID          int64
	LastAddConfirmed int64
	Payload          []byte
}

// Client talks to any number of bookies. It is safe for concurrent use.
type Client struct {
	cfg    Config
	log    *slog.Logger
	ctx    context.Context // cancelled by Close: aborts dials and waits of AddAsync
	cancel context.CancelFunc
	nextID atomic.Uint64

	mu      sync.Mutex
	closed  bool
	bookies map[string][]*bookieConn
	// wg counts dial and connection goroutines. Invariant: a dial goroutine is added only
	// under its bookieConn's mu while that is open, and connection goroutines only by a
	// counted dial goroutine, so Close's Wait never races an Add from zero.
	wg sync.WaitGroup
}

// New returns a client; it dials bookies only when a request needs them.
func New(cfg Config) *Client {
	cfg = cfg.withDefaults()
	ctx, cancel := context.WithCancel(context.Background())
	return &Client{
		cfg:     cfg,
		log:     cfg.Logger.With("component", "bookie-client"),
		ctx:     ctx,
		cancel:  cancel,
		bookies: make(map[string][]*bookieConn),
	}
}

// Close fails every pending request with ErrClosed, closes all connections and waits for
// the client's goroutines. Later calls fail with ErrClosed.
func (c *Client) Close() {
	c.mu.Lock()
	already := c.closed
	c.closed = true
	var all []*bookieConn
	for _, conns := range c.bookies {
		all = append(all, conns...)
	}
	c.mu.Unlock()
	if !already {
		c.cancel()
		for _, bc := range all {
			bc.close()
		}
	}
	c.wg.Wait()
}

// bookieConn returns the connection slot for requests about ledgerID (or any id).
func (c *Client) bookieConn(addr string, ledgerID int64) (*bookieConn, error) {
	return c.slot(addr, ledgerID, false)
}

// slot returns the connection slot for requests about ledgerID: one of the
// ConnsPerBookie slots, or for ranged reads one of the ReadConnsPerBookie
// slots after them.
func (c *Client) slot(addr string, ledgerID int64, rangeRead bool) (*bookieConn, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, ErrClosed
	}
	conns := c.bookies[addr]
	if conns == nil {
		conns = make([]*bookieConn, c.cfg.ConnsPerBookie+c.cfg.ReadConnsPerBookie)
		for i := range conns {
			conns[i] = &bookieConn{c: c, addr: addr}
		}
		c.bookies[addr] = conns
	}
	if rangeRead {
		return conns[c.cfg.ConnsPerBookie+int(uint64(ledgerID)%uint64(c.cfg.ReadConnsPerBookie))], nil
	}
	return conns[uint64(ledgerID)%uint64(c.cfg.ConnsPerBookie)], nil
}

// result is a response or the reason there is none.
type result struct {
	resp *wire.Response
	err  error
}

// call sends req and waits for its response or ctx. It fills in req's id.
func (c *Client) call(ctx context.Context, addr string, ledgerID int64, req *wire.Request) (*wire.Response, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	_, rangeRead := req.Body.(*wire.Request_BatchRead)
	bc, err := c.slot(addr, ledgerID, rangeRead)
	if err != nil {
		return nil, err
	}
	cn, err := bc.get(ctx)
	if err != nil {
		return nil, err
	}
	if err := cn.acquire(ctx); err != nil {
		return nil, err
	}
	req.RequestId = c.nextID.Add(1)
	results := make(chan result, 1)
	if err := cn.send(req, call{done: func(resp *wire.Response, err error) {
		results <- result{resp, err}
	}}); err != nil {
		cn.release()
		return nil, err
	}
	select {
	case r := <-results:
		return r.resp, r.err
	case <-ctx.Done():
		// Abandon the request: its slot is free again, a late response is ignored.
		if cn.forget(req.RequestId) {
			cn.release()
		}
		return nil, ctx.Err()
	}
}

// start sends req without waiting; done gets the response or an error, within AsyncTimeout,
// never from within start: an immediate failure is delivered on a new goroutine.
func (c *Client) start(addr string, ledgerID int64, req *wire.Request, done func(*wire.Response, error)) {
	deadline := time.Now().Add(c.cfg.AsyncTimeout)
	fail := func(err error) { go done(nil, err) }
	bc, err := c.bookieConn(addr, ledgerID)
	if err != nil {
		fail(err)
		return
	}
	// The common case (connected, room in the window) creates no context or timer.
	var ctx context.Context
	var cancel context.CancelFunc
	slowContext := func() context.Context {
		if ctx == nil {
			ctx, cancel = context.WithDeadline(c.ctx, deadline)
		}
		return ctx
	}
	defer func() {
		if cancel != nil {
			cancel()
		}
	}()
	cn := bc.connected()
	if cn == nil {
		if cn, err = bc.get(slowContext()); err != nil {
			fail(err)
			return
		}
	}
	if !cn.tryAcquire() {
		if err := cn.acquire(slowContext()); err != nil {
			fail(err)
			return
		}
	}
	req.RequestId = c.nextID.Add(1)
	if err := cn.send(req, call{deadline: deadline, done: done}); err != nil {
		cn.release()
		fail(err)
	}
}

// AddAsync sends an add and returns; done gets its outcome exactly once, never from within
// AddAsync itself (usually on the connection's reader goroutine, or on Close's caller when
// Close fails it), and must not block. AddAsync itself blocks while the
// bookie is being dialled or its connection's window is full, at most AsyncTimeout.
// Adds of one ledger to one bookie are sent in call order.
func (c *Client) AddAsync(addr string, req AddRequest, done func(error)) {
	if lb := c.cfg.Local[addr]; lb != nil {
		c.addLocal(lb, addr, req, done)
		return
	}
	// The common case (connected, room in the window) encodes the frame directly into the
	// connection's buffer and allocates nothing; the response is decoded the same way.
	if bc, err := c.bookieConn(addr, req.LedgerID); err == nil {
		if cn := bc.connected(); cn != nil && cn.tryAcquire() {
			id := c.nextID.Add(1)
			add := wire.AddFields{LedgerID: req.LedgerID, EntryID: req.EntryID,
				LastAddConfirmed: req.LastAddConfirmed, Recovery: req.Recovery, Payload: req.Payload}
			cl := call{deadline: time.Now().Add(c.cfg.AsyncTimeout), addDone: done, ledgerID: req.LedgerID, entryID: req.EntryID}
			if err := cn.sendAdd(id, &add, cl); err != nil {
				cn.release()
				go done(addError(addr, req.LedgerID, req.EntryID, err))
			}
			return
		}
	}
	c.start(addr, req.LedgerID, addRequest(req), func(resp *wire.Response, err error) {
		done(addOutcome(addr, req, resp, err))
	})
}

// Add sends an add and waits for the bookie's acknowledgement.
func (c *Client) Add(ctx context.Context, addr string, req AddRequest) error {
	if lb := c.cfg.Local[addr]; lb != nil {
		done := make(chan error, 1)
		c.addLocal(lb, addr, req, func(err error) { done <- err })
		select {
		case err := <-done:
			return err
		case <-ctx.Done():
			return ctx.Err() // the add may still be made durable, as one sent over a connection may
		}
	}
	resp, err := c.call(ctx, addr, req.LedgerID, addRequest(req))
	return addOutcome(addr, req, resp, err)
}

// addLocal is AddAsync to a bookie in this process: the engine calls back
// from its journal's goroutine once the entry is durable, or at once on a
// refusal, which — since done must never run within AddAsync — is then
// handed to a goroutine of its own.
func (c *Client) addLocal(lb LocalBookie, addr string, req AddRequest, done func(error)) {
	c.mu.Lock()
	closed := c.closed
	c.mu.Unlock()
	if closed {
		go done(addError(addr, req.LedgerID, req.EntryID, ErrClosed))
		return
	}
	var mu sync.Mutex
	returned := false
	lb.Add(req, func(err error) {
		if err != nil {
			err = addError(addr, req.LedgerID, req.EntryID, err)
		}
		mu.Lock()
		early := !returned
		mu.Unlock()
		if early {
			go done(err)
			return
		}
		done(err)
	})
	mu.Lock()
	returned = true
	mu.Unlock()
}

func addRequest(req AddRequest) *wire.Request {
	return &wire.Request{Body: &wire.Request_Add{Add: &wire.AddRequest{
		LedgerId:         req.LedgerID,
		EntryId:          req.EntryID,
		LastAddConfirmed: req.LastAddConfirmed,
		Recovery:         req.Recovery,
		Payload:          req.Payload,
	}}}
}

func addError(addr string, ledgerID, entryID int64, err error) error {
	return fmt.Errorf("bookie %s: add ledger %d entry %d: %w", addr, ledgerID, entryID, err)
}

func addOutcome(addr string, req AddRequest, resp *wire.Response, err error) error {
	if err = outcome(resp, err); err != nil {
		return addError(addr, req.LedgerID, req.EntryID, err)
	}
	if a := resp.GetAdd(); a == nil || a.GetLedgerId() != req.LedgerID || a.GetEntryId() != req.EntryID {
		return fmt.Errorf("bookie %s: add ledger %d entry %d: %w: answered for %v", addr, req.LedgerID, req.EntryID, ErrMalformed, a)
	}
	return nil
}

// outcome turns a transport error or a response status into the call's error.
func outcome(resp *wire.Response, err error) error {
	if err != nil {
		return err
	}
	return wire.ErrorOf(resp.GetStatus(), resp.GetErrorMessage())
}

// WriteLacAsync sends the ledger's LAC to the bookie without an entry (an idle writer's
// explicit LAC) and returns; done gets the outcome exactly once, under the same rules as
// AddAsync's (never from within WriteLacAsync, within AsyncTimeout, must not block). It
// travels on the ledger's connection, so the bookie sees it after every add of the ledger
// sent to it before. A fenced ledger fails with ErrFenced, a ledger the bookie holds
// nothing of with ErrNoSuchLedger.
func (c *Client) WriteLacAsync(addr string, ledgerID, lac int64, done func(error)) {
	req := &wire.Request{Body: &wire.Request_WriteLac{WriteLac: &wire.WriteLacRequest{LedgerId: ledgerID, Lac: lac}}}
	c.start(addr, ledgerID, req, func(resp *wire.Response, err error) {
		if err = outcome(resp, err); err == nil {
			if w := resp.GetWriteLac(); w == nil || w.GetLedgerId() != ledgerID || w.GetLastAddConfirmed() < lac {
				err = fmt.Errorf("%w: answered %v", ErrMalformed, w)
			}
		}
		if err != nil {
			err = fmt.Errorf("bookie %s: write LAC %d of ledger %d: %w", addr, lac, ledgerID, err)
		}
		done(err)
	})
}

// Read reads one entry, or with entryID -1 the bookie's LAC for the ledger (in
// Entry.LastAddConfirmed). With fence, the bookie fences the ledger first.
func (c *Client) Read(ctx context.Context, addr string, ledgerID, entryID int64, fence bool) (Entry, error) {
	resp, err := c.call(ctx, addr, ledgerID, &wire.Request{Body: &wire.Request_Read{Read: &wire.ReadRequest{
		LedgerId: ledgerID, EntryId: entryID, Fence: fence,
	}}})
	if err = outcome(resp, err); err != nil {
		return Entry{}, fmt.Errorf("bookie %s: read ledger %d entry %d (fence %v): %w", addr, ledgerID, entryID, fence, err)
	}
	r := resp.GetRead()
	if r == nil || r.GetLedgerId() != ledgerID || r.GetEntryId() != entryID {
		return Entry{}, fmt.Errorf("bookie %s: read ledger %d entry %d: %w: answered %v", addr, ledgerID, entryID, ErrMalformed, r)
	}
	return Entry{LedgerID: r.GetLedgerId(), EntryID: r.GetEntryId(), LastAddConfirmed: r.GetLastAddConfirmed(), Payload: r.GetPayload()}, nil
}

// LongPollRead waits, on the bookie, until the ledger's LAC exceeds previousLAC, and returns
// that LAC with entry previousLAC+1 when the bookie holds it (nil otherwise). When timeout
// passes first it fails with ErrTimeout. ctx should allow longer than timeout.
func (c *Client) LongPollRead(ctx context.Context, addr string, ledgerID, previousLAC int64, timeout time.Duration) (int64, *Entry, error) {
	timeoutMs := uint32(min(max(timeout.Milliseconds(), 0), math.MaxUint32))
	resp, err := c.call(ctx, addr, ledgerID, &wire.Request{Body: &wire.Request_LongPollRead{LongPollRead: &wire.LongPollReadRequest{
		LedgerId: ledgerID, PreviousLac: previousLAC, TimeoutMs: timeoutMs,
	}}})
	if err = outcome(resp, err); err != nil {
		return 0, nil, fmt.Errorf("bookie %s: long-poll ledger %d after LAC %d: %w", addr, ledgerID, previousLAC, err)
	}
	lp := resp.GetLongPollRead()
	if lp == nil || lp.GetLastAddConfirmed() <= previousLAC || (lp.GetHasEntry() && lp.GetEntry() == nil) {
		return 0, nil, fmt.Errorf("bookie %s: long-poll ledger %d: %w: answered %v", addr, ledgerID, ErrMalformed, lp)
	}
	if !lp.GetHasEntry() {
		return lp.GetLastAddConfirmed(), nil, nil
	}
	e := lp.GetEntry()
	return lp.GetLastAddConfirmed(), &Entry{
		LedgerID: e.GetLedgerId(), EntryID: e.GetEntryId(), LastAddConfirmed: e.GetLastAddConfirmed(), Payload: e.GetPayload(),
	}, nil
}

// LocalBookie is a bookie in this process that ranged reads and adds reach
// without a connection (Config.Local).
type LocalBookie interface {
	// Add hands an add to the bookie's engine and calls done once, with nil
	// when the entry is durable or the refusal as the wire carries it
	// (wire.ErrorOf) — from any goroutine, possibly before Add returns.
	// Adds reach the engine in call order; Add may block while the
	// bookie's journal queue is full. The payload is not used after done.
	Add(req AddRequest, done func(error))
	// ReadRange answers as a BatchReadRequest would: at most maxEntries
	// entries of ledgerID from first and about maxBytes of payload (0: the
	// bookie's limits), never less than the first entry, errors as the wire
	// carries them (wire.ErrorOf). The payloads are the caller's to keep.
	ReadRange(ledgerID, first int64, maxEntries, maxBytes int) ([]Entry, error)
}

// ReadRange reads consecutive entries of a ledger from first, with one BatchReadRequest: at
// most maxEntries and about maxBytes of payload (0: the bookie's own limit). The bookie
// answers with what fits in one frame, never less than the first entry, and stops before
// the first entry it does not hold (ErrNoSuchEntry when that is first): fewer entries than
// asked is a normal answer, and the caller continues after the last one.
func (c *Client) ReadRange(ctx context.Context, addr string, ledgerID, first int64, maxEntries, maxBytes int) ([]Entry, error) {
	if maxEntries < 0 || maxBytes < 0 {
		return nil, fmt.Errorf("bookie %s: read range of ledger %d: %w: maxEntries %d, maxBytes %d", addr, ledgerID, ErrBadRequest, maxEntries, maxBytes)
	}
	if lb := c.cfg.Local[addr]; lb != nil {
		return c.readRangeLocal(ctx, lb, addr, ledgerID, first, maxEntries, maxBytes)
	}
	resp, err := c.call(ctx, addr, ledgerID, &wire.Request{Body: &wire.Request_BatchRead{BatchRead: &wire.BatchReadRequest{
		LedgerId:     ledgerID,
		FirstEntryId: first,
		MaxEntries:   uint32(min(maxEntries, math.MaxUint32)),
		MaxBytes:     uint32(min(maxBytes, math.MaxUint32)),
	}}})
	if err = outcome(resp, err); err != nil {
		return nil, fmt.Errorf("bookie %s: read range of ledger %d from %d: %w", addr, ledgerID, first, err)
	}
	out := make([]Entry, len(resp.GetBatchRead().GetEntries()))
	for i, e := range resp.GetBatchRead().GetEntries() {
		out[i] = Entry{LedgerID: e.GetLedgerId(), EntryID: e.GetEntryId(), LastAddConfirmed: e.GetLastAddConfirmed(), Payload: e.GetPayload()}
	}
	return checkRange(addr, ledgerID, first, maxEntries, out)
}

// checkRange returns a range answer's entries, or ErrMalformed when they
// are none, more than asked for, or not the ledger's consecutive entries
// from first: the same checks whether the answer came over a connection
// or from a bookie in this process.
func checkRange(addr string, ledgerID, first int64, maxEntries int, es []Entry) ([]Entry, error) {
	if len(es) == 0 || (maxEntries > 0 && len(es) > maxEntries) {
		return nil, fmt.Errorf("bookie %s: read range of ledger %d from %d: %w: %d entries", addr, ledgerID, first, ErrMalformed, len(es))
	}
	for i, e := range es {
		if e.LedgerID != ledgerID || e.EntryID != first+int64(i) {
			return nil, fmt.Errorf("bookie %s: read range of ledger %d from %d: %w: entry %d is ledger %d entry %d",
				addr, ledgerID, first, ErrMalformed, i, e.LedgerID, e.EntryID)
		}
	}
	return es, nil
}

// readRangeLocal is ReadRange from a bookie in this process, checked as an
// answer from the network is.
func (c *Client) readRangeLocal(ctx context.Context, lb LocalBookie, addr string, ledgerID, first int64, maxEntries, maxBytes int) ([]Entry, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	c.mu.Lock()
	closed := c.closed
	c.mu.Unlock()
	if closed {
		return nil, ErrClosed
	}
	es, err := lb.ReadRange(ledgerID, first, maxEntries, maxBytes)
	if err != nil {
		return nil, fmt.Errorf("bookie %s: read range of ledger %d from %d: %w", addr, ledgerID, first, err)
	}
	return checkRange(addr, ledgerID, first, maxEntries, es)
}

// DeleteLedger deletes the ledger's entries from the bookie.
func (c *Client) DeleteLedger(ctx context.Context, addr string, ledgerID int64) error {
	resp, err := c.call(ctx, addr, ledgerID, &wire.Request{Body: &wire.Request_DeleteLedger{DeleteLedger: &wire.DeleteLedgerRequest{
		LedgerId: ledgerID,
	}}})
	if err = outcome(resp, err); err != nil {
		return fmt.Errorf("bookie %s: delete ledger %d: %w", addr, ledgerID, err)
	}
	return nil
}

// Info returns the bookie's free and total disk bytes and whether it is read-only.
func (c *Client) Info(ctx context.Context, addr string) (free, total uint64, readOnly bool, err error) {
	resp, err := c.call(ctx, addr, 0, &wire.Request{Body: &wire.Request_Info{Info: &wire.InfoRequest{}}})
	if err = outcome(resp, err); err != nil {
		return 0, 0, false, fmt.Errorf("bookie %s: info: %w", addr, err)
	}
	info := resp.GetInfo()
	if info == nil {
		return 0, 0, false, fmt.Errorf("bookie %s: info: %w: no body", addr, ErrMalformed)
	}
	return info.GetFreeBytes(), info.GetTotalBytes(), info.GetReadOnly(), nil
}
