package client

import (
	"bufio"
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"slices"
	"sync"
	"time"

	"quire/internal/bookie/wire"
)

// ioBufferBytes sizes each connection's read buffer.
const ioBufferBytes = 64 << 10

// retainWriteBytes is the largest write buffer a connection keeps between writes.
const retainWriteBytes = 1 << 20

// bookieConn is one connection slot to a bookie: the live connection if there is one, the
// dial in progress if any, and the backoff after failed dials.
type bookieConn struct {
	c    *Client
	addr string

	mu      sync.Mutex
	closed  bool
	cur     *conn        // nil, or the newest connection (possibly failed since)
	dialing *dialAttempt // nil unless a dial is in progress
	lastErr error        // last dial failure
	retryAt time.Time    // no dial before this, after a failed one
	backoff time.Duration
}

type dialAttempt struct {
	done chan struct{} // closed when conn or err is set
	conn *conn
	err  error
}

// connected returns the live connection, or nil.
func (bc *bookieConn) connected() *conn {
	bc.mu.Lock()
	defer bc.mu.Unlock()
	if bc.cur != nil && !bc.cur.isFailed() {
		return bc.cur
	}
	return nil
}

// get returns the live connection, dialling if there is none. During the backoff after a
// failed dial it fails at once with ErrConnection, so a ledger writer learns quickly that
// this bookie is out.
func (bc *bookieConn) get(ctx context.Context) (*conn, error) {
	bc.mu.Lock()
	if bc.closed {
		bc.mu.Unlock()
		return nil, ErrClosed
	}
	if bc.cur != nil && !bc.cur.isFailed() {
		cn := bc.cur
		bc.mu.Unlock()
		return cn, nil
	}
	att := bc.dialing
	if att == nil {
		if wait := time.Until(bc.retryAt); wait > 0 {
			err := bc.lastErr
			bc.mu.Unlock()
			return nil, fmt.Errorf("%w: bookie %s: not redialling for %v after: %w", ErrConnection, bc.addr, wait.Round(time.Millisecond), err)
		}
		att = &dialAttempt{done: make(chan struct{})}
		bc.dialing = att
		bc.c.wg.Add(1)
		go bc.dial(att)
	}
	bc.mu.Unlock()
	select {
	case <-att.done:
		return att.conn, att.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// dial makes one connection attempt and publishes its outcome to everyone waiting on it.
func (bc *bookieConn) dial(att *dialAttempt) {
	defer bc.c.wg.Done()
	cfg := &bc.c.cfg
	ctx, cancel := context.WithTimeout(bc.c.ctx, cfg.DialTimeout)
	nc, err := cfg.Dial(ctx, bc.addr)
	cancel()

	bc.mu.Lock()
	bc.dialing = nil
	switch {
	case bc.closed:
		if nc != nil {
			closeNow(nc)
		}
		att.err = ErrClosed
	case err != nil:
		bc.backoff = min(max(2*bc.backoff, cfg.RedialBackoffMin), cfg.RedialBackoffMax)
		// ±20% jitter keeps many clients from redialling a recovering bookie in step.
		jittered := time.Duration(float64(bc.backoff) * (0.8 + 0.4*rand.Float64()))
		bc.retryAt = time.Now().Add(jittered)
		bc.lastErr = err
		att.err = fmt.Errorf("%w: bookie %s: dial: %w", ErrConnection, bc.addr, err)
		bc.c.log.Warn("cannot connect to bookie", "addr", bc.addr, "err", err, "retry_in", jittered)
	default:
		bc.backoff, bc.retryAt, bc.lastErr = 0, time.Time{}, nil
		att.conn = newConn(bc, nc)
		bc.cur = att.conn
	}
	bc.mu.Unlock()
	close(att.done)
}

// lost forgets cn if it is still the current connection, so the next request redials.
func (bc *bookieConn) lost(cn *conn) {
	bc.mu.Lock()
	defer bc.mu.Unlock()
	if bc.cur == cn {
		bc.cur = nil
	}
}

func (bc *bookieConn) close() {
	bc.mu.Lock()
	bc.closed = true
	cur := bc.cur
	bc.mu.Unlock()
	if cur != nil {
		cur.fail(ErrClosed)
	}
}

// call is a request waiting for its response. Exactly one of done and addDone is set, and
// is called exactly once.
type call struct {
	// deadline fails the call when it passes; zero when the caller watches its own context.
	deadline time.Time
	// done gets the response, or the reason there is none.
	done func(*wire.Response, error)
	// addDone gets the outcome of an add sent by AddAsync, whose response must echo
	// ledgerID and entryID. Such calls are answered without building a wire.Response.
	addDone           func(error)
	ledgerID, entryID int64
}

// fail completes the call without a response.
func (cl *call) fail(addr string, err error) {
	if cl.addDone != nil {
		cl.addDone(addError(addr, cl.ledgerID, cl.entryID, err))
		return
	}
	cl.done(nil, err)
}

// answer completes the call with a response decoded by protobuf.
func (cl *call) answer(addr string, resp *wire.Response) {
	if cl.addDone == nil {
		cl.done(resp, nil)
		return
	}
	add := &wire.AddResponseFrame{RequestID: resp.GetRequestId(), Status: resp.GetStatus()}
	if a := resp.GetAdd(); a != nil {
		add.HasAdd, add.LedgerID, add.EntryID = true, a.GetLedgerId(), a.GetEntryId()
	}
	cl.answerAdd(addr, add, resp.GetErrorMessage())
}

// answerAdd completes the call with a response decoded by the add fast path.
func (cl *call) answerAdd(addr string, add *wire.AddResponseFrame, errorMessage string) {
	if cl.addDone == nil {
		// Not an add, or not sent by AddAsync: the caller checks the response itself.
		resp := &wire.Response{RequestId: add.RequestID, Status: add.Status, ErrorMessage: errorMessage}
		if add.HasAdd {
			resp.Body = &wire.Response_Add{Add: &wire.AddResponse{LedgerId: add.LedgerID, EntryId: add.EntryID}}
		}
		cl.done(resp, nil)
		return
	}
	var err error
	switch {
	case add.Status != wire.Status_OK:
		err = wire.ErrorOf(add.Status, errorMessage)
	case !add.HasAdd:
		err = fmt.Errorf("%w: OK without an add body", ErrMalformed)
	case add.LedgerID != cl.ledgerID || add.EntryID != cl.entryID:
		err = fmt.Errorf("%w: answered for ledger %d entry %d", ErrMalformed, add.LedgerID, add.EntryID)
	}
	if err != nil {
		err = addError(addr, cl.ledgerID, cl.entryID, err)
	}
	cl.addDone(err)
}

// conn is one TCP connection: a reader goroutine matching responses to calls, a writer
// goroutine sending what callers encoded, and a sweeper failing calls past their deadline.
type conn struct {
	bc  *bookieConn
	nc  net.Conn
	log *slog.Logger

	// slots is the in-flight window: a send takes a slot, whoever removes the call from
	// pending gives it back. Invariant: len(slots) ≥ len(pending).
	slots chan struct{}
	kick  chan struct{} // cap 1: frames are waiting in out
	done  chan struct{} // closed by fail

	mu      sync.Mutex
	failed  error // non-nil once the connection is dead
	pending map[uint64]call
	out     []byte // encoded frames not yet taken by the writer
}

// newConn starts a connection's goroutines. Called by a counted dial goroutine.
func newConn(bc *bookieConn, nc net.Conn) *conn {
	cn := &conn{
		bc:      bc,
		nc:      nc,
		log:     bc.c.log.With("addr", bc.addr),
		slots:   make(chan struct{}, bc.c.cfg.MaxInFlightPerConn),
		kick:    make(chan struct{}, 1),
		done:    make(chan struct{}),
		pending: make(map[uint64]call),
	}
	bc.c.wg.Add(3)
	go func() {
		defer bc.c.wg.Done()
		cn.readLoop()
	}()
	go func() {
		defer bc.c.wg.Done()
		cn.writeLoop()
	}()
	go func() {
		defer bc.c.wg.Done()
		cn.sweepLoop()
	}()
	return cn
}

func (cn *conn) isFailed() bool {
	cn.mu.Lock()
	defer cn.mu.Unlock()
	return cn.failed != nil
}

// tryAcquire takes a window slot if one is free.
func (cn *conn) tryAcquire() bool {
	select {
	case cn.slots <- struct{}{}:
		return true
	default:
		return false
	}
}

// acquire waits for a window slot.
func (cn *conn) acquire(ctx context.Context) error {
	select {
	case cn.slots <- struct{}{}:
		return nil
	case <-cn.done:
		cn.mu.Lock()
		defer cn.mu.Unlock()
		return cn.failed
	case <-ctx.Done():
		return fmt.Errorf("bookie %s: waiting for room among %d requests in flight: %w", cn.bc.addr, cap(cn.slots), ctx.Err())
	}
}

func (cn *conn) release() { <-cn.slots }

// send registers cl and queues req's frame for the writer. The caller holds a slot.
func (cn *conn) send(req *wire.Request, cl call) error {
	return cn.queue(req.GetRequestId(), cl, func(out []byte) ([]byte, error) { return wire.AppendFrame(out, req) })
}

// sendAdd registers cl and queues the frame of an add for the writer, encoded without
// building a message. The caller holds a slot.
func (cn *conn) sendAdd(id uint64, add *wire.AddFields, cl call) error {
	cn.mu.Lock()
	if cn.failed != nil {
		err := cn.failed
		cn.mu.Unlock()
		return err
	}
	before := len(cn.out)
	out, err := wire.AppendAddRequestFrame(cn.out, id, add)
	return cn.queued(id, cl, before, out, err)
}

func (cn *conn) queue(id uint64, cl call, encode func([]byte) ([]byte, error)) error {
	cn.mu.Lock()
	if cn.failed != nil {
		err := cn.failed
		cn.mu.Unlock()
		return err
	}
	before := len(cn.out)
	out, err := encode(cn.out)
	return cn.queued(id, cl, before, out, err)
}

// queued finishes a send whose frame was appended to out from offset before. Called with
// mu held; releases it.
func (cn *conn) queued(id uint64, cl call, before int, out []byte, err error) error {
	maxBody := cn.bc.c.cfg.MaxFrameBytes - wire.FrameOverheadBytes
	if err == nil && len(out)-before-wire.FrameHeaderBytes > maxBody {
		err = fmt.Errorf("%w: request is %d bytes, max %d", wire.ErrFrameTooLarge, len(out)-before-wire.FrameHeaderBytes, maxBody)
	}
	if err != nil {
		cn.out = out[:before]
		cn.mu.Unlock()
		return err
	}
	cn.out = out
	cn.pending[id] = cl
	cn.mu.Unlock()
	select {
	case cn.kick <- struct{}{}:
	default:
	}
	return nil
}

// take removes and returns the call with this id; ok is false if it is gone (answered,
// abandoned, timed out, or the connection failed).
func (cn *conn) take(id uint64) (cl call, ok bool) {
	cn.mu.Lock()
	defer cn.mu.Unlock()
	cl, ok = cn.pending[id]
	if ok {
		delete(cn.pending, id)
	}
	return cl, ok
}

// forget abandons a call; it reports whether the call was still pending.
func (cn *conn) forget(id uint64) bool {
	_, ok := cn.take(id)
	return ok
}

// fail kills the connection and fails every pending call with err, in request order.
func (cn *conn) fail(err error) {
	cn.mu.Lock()
	if cn.failed != nil {
		cn.mu.Unlock()
		return
	}
	cn.failed = err
	pending := cn.pending
	cn.pending, cn.out = nil, nil
	cn.mu.Unlock()
	close(cn.done)
	closeNow(cn.nc)
	cn.bc.lost(cn)
	if !errors.Is(err, ErrClosed) {
		cn.log.Info("bookie connection lost", "err", err, "pending", len(pending))
	}
	ids := make([]uint64, 0, len(pending))
	for id := range pending {
		ids = append(ids, id)
	}
	slices.SortFunc(ids, cmp.Compare)
	for _, id := range ids {
		cl := pending[id]
		cl.fail(cn.bc.addr, err)
	}
}

// closeNow closes nc without waiting on the peer: a TLS connection's
// underlying connection is closed directly, as tls.Conn.Close would first
// write a close_notify alert, which waits up to 5 s for a bookie that stopped
// reading (a paused or overloaded one: often why the connection is failed).
// The requests in flight must fail at once, not after that.
func closeNow(nc net.Conn) {
	if tc, ok := nc.(*tls.Conn); ok {
		tc.NetConn().Close()
		return
	}
	nc.Close()
}

func (cn *conn) readLoop() {
	fr := wire.NewFrameReader(bufio.NewReaderSize(cn.nc, ioBufferBytes), cn.bc.c.cfg.MaxFrameBytes)
	var add wire.AddResponseFrame
	for {
		resp, isAdd, err := fr.ReadResponseOrAdd(&add)
		if err != nil {
			cn.fail(fmt.Errorf("%w: bookie %s: read: %w", ErrConnection, cn.bc.addr, err))
			return
		}
		id := add.RequestID
		if !isAdd {
			id = resp.GetRequestId()
		}
		cl, ok := cn.take(id)
		if !ok {
			// Its caller gave up (context or timeout) before the bookie answered.
			cn.log.Debug("response for a request no longer pending", "request_id", id)
			continue
		}
		cn.release()
		if isAdd {
			cl.answerAdd(cn.bc.addr, &add, "")
		} else {
			cl.answer(cn.bc.addr, resp)
		}
	}
}

// writeLoop sends whatever frames callers queued, all of them in one write: under load many
// requests go out per syscall, with no timer.
func (cn *conn) writeLoop() {
	var spare []byte
	for {
		select {
		case <-cn.kick:
		case <-cn.done:
			return
		}
		for {
			// Double buffering: callers append to out while the writer sends buf. Invariant:
			// spare never shares an array with out.
			cn.mu.Lock()
			buf := cn.out
			if len(buf) == 0 || cn.failed != nil {
				cn.mu.Unlock()
				break
			}
			cn.out = spare[:0]
			cn.mu.Unlock()
			if timeout := cn.bc.c.cfg.WriteTimeout; timeout > 0 {
				cn.nc.SetWriteDeadline(time.Now().Add(timeout))
			}
			if _, err := cn.nc.Write(buf); err != nil {
				cn.fail(fmt.Errorf("%w: bookie %s: write: %w", ErrConnection, cn.bc.addr, err))
				return
			}
			if cap(buf) > retainWriteBytes {
				buf = nil
			}
			spare = buf
		}
	}
}

// sweepLoop fails calls whose deadline passed (AddAsync's; synchronous calls watch their
// own context). A late response to such a call is ignored.
func (cn *conn) sweepLoop() {
	interval := min(max(cn.bc.c.cfg.AsyncTimeout/8, 10*time.Millisecond), time.Second)
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	for {
		select {
		case <-cn.done:
			return
		case now := <-ticker.C:
			cn.mu.Lock()
			var expired []call
			for id, cl := range cn.pending {
				if !cl.deadline.IsZero() && now.After(cl.deadline) {
					delete(cn.pending, id)
					expired = append(expired, cl)
				}
			}
			cn.mu.Unlock()
			for _, cl := range expired {
				cn.release()
				cl.fail(cn.bc.addr, fmt.Errorf("bookie %s: no response within %v: %w", cn.bc.addr, cn.bc.c.cfg.AsyncTimeout, context.DeadlineExceeded))
			}
		}
	}
}
