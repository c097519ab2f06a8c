package server

import (
	"bufio"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"quire/internal/bookie/wire"
)

// ioBufferBytes sizes each connection's read and write buffers.
const ioBufferBytes = 64 << 10

// retainFrameBytes is the largest encode buffer a connection keeps between responses.
const retainFrameBytes = 256 << 10

// conn is one client connection: a reader goroutine (serve) that decodes requests and
// dispatches them, a writer goroutine that writes queued responses, and workers for engine
// calls that block (reads, fencing, deletes).
type conn struct {
	s   *Server
	nc  net.Conn
	log *slog.Logger

	kick  chan struct{} // cap 1: a response was queued (wakes the writer)
	space chan struct{} // cap 1: the writer took the queue (wakes a reader waiting for room)
	done  chan struct{} // closed by close

	mu     sync.Mutex
	closed bool
	// queue holds responses for the writer. Invariant: len(queue) ≤ inFlight completions
	// + MaxInFlightPerConn, because the reader stops reading while the queue is that long
	// and only the engine's completions of admitted requests add to it otherwise.
	queue []outgoing
	// inFlight counts admitted requests whose response is not queued yet.
	// Invariant: 0 ≤ inFlight ≤ MaxInFlightPerConn.
	inFlight int
	polls    map[*longPoll]struct{} // long polls waiting for a LAC; aborted on close
	// workers counts goroutines that call the engine or respond for this connection.
	// Invariant: workers.Add happens only under mu with closed false, so serve's Wait
	// (after close) never races an Add.
	workers sync.WaitGroup
}

func newConn(s *Server, nc net.Conn) *conn {
	return &conn{
		s:     s,
		nc:    nc,
		log:   s.log.With("remote", nc.RemoteAddr().String()),
		kick:  make(chan struct{}, 1),
		space: make(chan struct{}, 1),
		done:  make(chan struct{}),
		polls: make(map[*longPoll]struct{}),
	}
}

// handshake completes a TLS connection's handshake within HandshakeTimeout, before any
// request is read, so that a refused client (no certificate, one from another CA, a
// plaintext client) is told why in the log and never reaches the engine. It reports
// whether the connection may be served; a plaintext connection always may.
func (c *conn) handshake() bool {
	tc, ok := c.nc.(*tls.Conn)
	if !ok {
		return true
	}
	_ = tc.SetDeadline(time.Now().Add(c.s.cfg.HandshakeTimeout))
	err := tc.Handshake()
	_ = tc.SetDeadline(time.Time{})
	if err != nil {
		c.s.metrics.handshakesFailed.Inc()
		if !c.isClosed() {
			c.log.Warn("closing connection: TLS handshake failed", "err", err)
		}
		tc.Close()
		return false
	}
	return true
}

// serve runs the connection until it closes, then waits for its goroutines.
func (c *conn) serve() {
	writerDone := make(chan struct{})
	go func() {
		defer close(writerDone)
		c.writeLoop()
	}()
	c.readLoop()
	c.close()
	<-writerDone
	c.workers.Wait()
}

// outgoing is a response waiting for the writer: resp, or with addOK the OK answer to an
// add, which the writer encodes without building a message.
type outgoing struct {
	resp              *wire.Response
	batch             *batchReadAnswer // an OK batch read, written from the engine's buffers
	addOK             bool
	requestID         uint64
	ledgerID, entryID int64
	// For the latency metric, observed when the writer takes the response.
	kind     requestKind
	received time.Time
}

func (c *conn) readLoop() {
	src := &countingReader{r: c.nc}
	fr := wire.NewFrameReader(bufio.NewReaderSize(src, ioBufferBytes), c.s.cfg.MaxFrameBytes)
	var add wire.AddRequestFrame
	// received is when the last socket read returned: the arrival time of
	// every frame completed by it. One clock read per read(2), not per frame.
	var received time.Time
	var readsSeen uint64
	for c.waitForQueueSpace() {
		req, isAdd, err := fr.ReadRequestOrAdd(&add)
		if src.reads != readsSeen {
			received, readsSeen = time.Now(), src.reads
		}
		if err != nil {
			switch {
			case errors.Is(err, io.EOF):
				c.log.Debug("client closed connection")
			case errors.Is(err, wire.ErrMalformed), errors.Is(err, wire.ErrFrameTooLarge):
				// The stream cannot be resynchronised after a bad frame: drop the connection.
				c.s.metrics.badFrames.Inc()
				c.log.Warn("closing connection after bad frame", "err", err)
			default:
				if !c.isClosed() {
					c.log.Info("closing connection after read error", "err", err)
				}
			}
			return
		}
		if isAdd {
			// add.Payload aliases the read buffer; the engine copies it before Add returns.
			c.dispatchAdd(&add, received)
			continue
		}
		c.dispatch(req, received)
	}
}

// countingReader counts the reads that reach the socket.
type countingReader struct {
	r     io.Reader
	reads uint64
}

func (cr *countingReader) Read(p []byte) (int, error) {
	cr.reads++
	return cr.r.Read(p)
}

// waitForQueueSpace blocks while MaxInFlightPerConn responses wait to be written, so a
// client that does not read its responses is stopped by TCP flow control instead of
// growing the queue. It reports false once the connection is closed.
func (c *conn) waitForQueueSpace() bool {
	for {
		c.mu.Lock()
		closed, full := c.closed, len(c.queue) >= c.s.cfg.MaxInFlightPerConn
		c.mu.Unlock()
		if closed {
			return false
		}
		if !full {
			return true
		}
		select {
		case <-c.space:
		case <-c.done:
			return false
		}
	}
}

func (c *conn) isClosed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closed
}

// close stops the connection: no more reads, writes or queued responses. Requests still in
// the engine complete into nothing. Safe to call many times, from any goroutine.
func (c *conn) close() {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	c.closed = true
	polls := c.polls
	c.polls = nil
	c.queue = nil
	c.mu.Unlock()
	close(c.done)
	if tc, ok := c.nc.(*tls.Conn); ok {
		// Not tls.Conn.Close: its close_notify alert may wait up to 5 s for a peer
		// that does not read, and Server.Close closes connections one after another.
		// The peer sees the connection end as it would a plaintext one's.
		tc.NetConn().Close()
	} else {
		c.nc.Close()
	}
	for lp := range polls {
		lp.abort()
	}
}

func kindOf(req *wire.Request) requestKind {
	switch body := req.GetBody().(type) {
	case *wire.Request_Add:
		return kindAdd
	case *wire.Request_Read:
		if body.Read.GetFence() {
			return kindFenceRead
		}
		return kindRead
	case *wire.Request_LongPollRead:
		return kindLongPollRead
	case *wire.Request_BatchRead:
		return kindBatchRead
	case *wire.Request_DeleteLedger:
		return kindDeleteLedger
	case *wire.Request_WriteLac:
		return kindWriteLac
	default: // *wire.Request_Info; FrameReader admits no other body
		return kindInfo
	}
}

// dispatch starts one decoded request. It runs on the reader goroutine, so it must not
// block: engine calls that may wait on disk go to a worker; adds and LAC updates go straight
// to the engine, which keeps them in a connection's arrival order.
func (c *conn) dispatch(req *wire.Request, received time.Time) {
	id, kind := req.GetRequestId(), kindOf(req)
	if r := req.GetAdd(); r != nil {
		// An add that the fast decoder left to protobuf (an unusual but valid encoding).
		c.dispatchAdd(&wire.AddRequestFrame{RequestID: id, AddFields: wire.AddFields{
			LedgerID: r.GetLedgerId(), EntryID: r.GetEntryId(), LastAddConfirmed: r.GetLastAddConfirmed(),
			Recovery: r.GetRecovery(), Payload: r.GetPayload(),
		}}, received)
		return
	}
	if !c.admit() {
		c.respond(kind, received, false, &wire.Response{
			RequestId:    id,
			Status:       wire.Status_TOO_MANY_REQUESTS,
			ErrorMessage: fmt.Sprintf("more than %d requests in flight on this connection", c.s.cfg.MaxInFlightPerConn),
		})
		return
	}
	if msg := invalidReason(req); msg != "" {
		c.respond(kind, received, true, &wire.Response{RequestId: id, Status: wire.Status_BAD_REQUEST, ErrorMessage: msg})
		return
	}
	switch body := req.GetBody().(type) {
	case *wire.Request_Read:
		c.runWorker(kind, received, func() outgoing { return outgoing{resp: c.read(id, body.Read)} })
	case *wire.Request_LongPollRead:
		c.longPollRead(id, body.LongPollRead, received)
	case *wire.Request_BatchRead:
		c.runWorker(kind, received, func() outgoing { return c.batchRead(id, body.BatchRead) })
	case *wire.Request_DeleteLedger:
		c.runWorker(kind, received, func() outgoing {
			err := c.s.engine.DeleteLedger(body.DeleteLedger.GetLedgerId())
			return outgoing{resp: c.answer(&wire.Response{RequestId: id, Body: &wire.Response_DeleteLedger{
				DeleteLedger: &wire.DeleteLedgerResponse{},
			}}, err)}
		})
	case *wire.Request_WriteLac:
		// On the reader goroutine, like adds: the engine sees the update after every add
		// that arrived before it on this connection (the writer sends it behind them).
		r := body.WriteLac
		lac, err := c.s.engine.WriteLAC(r.GetLedgerId(), r.GetLac())
		c.respond(kind, received, true, c.answer(&wire.Response{RequestId: id, Body: &wire.Response_WriteLac{
			WriteLac: &wire.WriteLacResponse{LedgerId: r.GetLedgerId(), LastAddConfirmed: lac},
		}}, err))
	case *wire.Request_Info:
		free, total, readOnly := c.s.engine.Info()
		c.respond(kind, received, true, &wire.Response{RequestId: id, Status: wire.Status_OK, Body: &wire.Response_Info{
			Info: &wire.InfoResponse{FreeBytes: free, TotalBytes: total, ReadOnly: readOnly},
		}})
	}
}

// dispatchAdd starts an add, on the reader goroutine: the engine receives a connection's
// adds in arrival order.
func (c *conn) dispatchAdd(r *wire.AddRequestFrame, received time.Time) {
	if !c.admit() {
		c.respond(kindAdd, received, false, &wire.Response{
			RequestId:    r.RequestID,
			Status:       wire.Status_TOO_MANY_REQUESTS,
			ErrorMessage: fmt.Sprintf("more than %d requests in flight on this connection", c.s.cfg.MaxInFlightPerConn),
		})
		return
	}
	if reason := InvalidAdd(r.LedgerID, r.EntryID, r.LastAddConfirmed); reason != "" {
		c.respond(kindAdd, received, true, &wire.Response{RequestId: r.RequestID, Status: wire.Status_BAD_REQUEST, ErrorMessage: reason})
		return
	}
	ac := &addCompletion{c: c, id: r.RequestID, ledgerID: r.LedgerID, entryID: r.EntryID, received: received}
	c.s.engine.Add(AddRequest{
		LedgerID:         r.LedgerID,
		EntryID:          r.EntryID,
		LastAddConfirmed: r.LastAddConfirmed,
		Recovery:         r.Recovery,
		Payload:          r.Payload,
		Arrived:          received,
	}, ac.done)
}

// InvalidAdd returns why an add with these ids cannot be served (answered
// BAD_REQUEST), or "": the server's check, which a bookie's local transport
// makes too.
func InvalidAdd(ledgerID, entryID, lastAddConfirmed int64) string {
	if ledgerID < 0 || entryID < 0 || lastAddConfirmed < -1 {
		return fmt.Sprintf("add: invalid ids: ledger %d, entry %d, LAC %d", ledgerID, entryID, lastAddConfirmed)
	}
	return ""
}

// invalidReason returns why a well-formed request (other than an add) cannot be served,
// or "".
func invalidReason(req *wire.Request) string {
	switch body := req.GetBody().(type) {
	case *wire.Request_Read:
		r := body.Read
		if r.GetLedgerId() < 0 || r.GetEntryId() < -1 {
			return fmt.Sprintf("read: invalid ids: ledger %d, entry %d", r.GetLedgerId(), r.GetEntryId())
		}
	case *wire.Request_LongPollRead:
		r := body.LongPollRead
		if r.GetLedgerId() < 0 || r.GetPreviousLac() < -1 {
			return fmt.Sprintf("long poll: invalid ids: ledger %d, previous LAC %d", r.GetLedgerId(), r.GetPreviousLac())
		}
	case *wire.Request_BatchRead:
		r := body.BatchRead
		if r.GetLedgerId() < 0 || r.GetFirstEntryId() < 0 {
			return fmt.Sprintf("batch read: invalid ids: ledger %d, first entry %d", r.GetLedgerId(), r.GetFirstEntryId())
		}
	case *wire.Request_DeleteLedger:
		if id := body.DeleteLedger.GetLedgerId(); id < 0 {
			return fmt.Sprintf("delete: invalid ledger id %d", id)
		}
	case *wire.Request_WriteLac:
		r := body.WriteLac
		if r.GetLedgerId() < 0 || r.GetLac() < -1 {
			return fmt.Sprintf("write LAC: invalid ids: ledger %d, LAC %d", r.GetLedgerId(), r.GetLac())
		}
	}
	return ""
}

// admit counts a request in flight unless the connection's limit is reached.
func (c *conn) admit() bool {
	c.mu.Lock()
	if c.inFlight >= c.s.cfg.MaxInFlightPerConn {
		c.mu.Unlock()
		return false
	}
	c.inFlight++
	c.mu.Unlock()
	c.s.metrics.inFlight.Inc()
	return true
}

// respond queues resp for the writer. Every admitted request calls it (or respondAddOK)
// exactly once (with admitted true), even when the connection is closed and resp is dropped.
func (c *conn) respond(kind requestKind, received time.Time, admitted bool, resp *wire.Response) {
	c.queueResponse(kind, received, admitted, outgoing{resp: resp}, resp.GetStatus())
}

// respondAddOK queues the OK answer to an admitted add.
func (c *conn) respondAddOK(received time.Time, requestID uint64, ledgerID, entryID int64) {
	c.queueResponse(kindAdd, received, true, outgoing{addOK: true, requestID: requestID, ledgerID: ledgerID, entryID: entryID}, wire.Status_OK)
}

func (c *conn) queueResponse(kind requestKind, received time.Time, admitted bool, out outgoing, status wire.Status) {
	c.mu.Lock()
	if admitted {
		c.inFlight--
	}
	closed := c.closed
	if !closed {
		out.kind, out.received = kind, received
		c.queue = append(c.queue, out)
	}
	c.mu.Unlock()
	if admitted {
		c.s.metrics.inFlight.Dec()
	}
	if closed {
		return
	}
	c.s.metrics.countRequest(kind, status)
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// runWorker runs fn, which calls the engine and may block, on its own goroutine and
// responds with its result. The number of workers is bounded by MaxInFlightPerConn.
func (c *conn) runWorker(kind requestKind, received time.Time, fn func() outgoing) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		c.respond(kind, received, true, nil)
		return
	}
	c.workers.Add(1)
	c.mu.Unlock()
	go func() {
		defer c.workers.Done()
		out := fn()
		status := out.resp.GetStatus()
		if out.batch != nil {
			status = wire.Status_OK
		}
		c.queueResponse(kind, received, true, out, status)
	}()
}

// statusOf maps an engine error to a status. A failure is never reported as OK, whatever
// the configured mapping says: an OK add promises durability.
func (c *conn) statusOf(err error) wire.Status {
	if err == nil {
		return wire.Status_OK
	}
	s := c.s.cfg.StatusOf(err)
	if s == wire.Status_OK || s == wire.Status_STATUS_UNSPECIFIED {
		return wire.Status_UNKNOWN_ERROR
	}
	return s
}

// answer completes resp: OK as built when err is nil, else err's status and message
// without a body.
func (c *conn) answer(resp *wire.Response, err error) *wire.Response {
	resp.Status = c.statusOf(err)
	if err != nil {
		resp.ErrorMessage = wire.ErrorMessage(err)
		resp.Body = nil
	}
	return resp
}

// addCompletion carries an add's identity to the engine's done callback.
type addCompletion struct {
	c                 *conn
	id                uint64
	ledgerID, entryID int64
	received          time.Time
	completed         atomic.Bool
}

func (ac *addCompletion) done(err error) {
	if !ac.completed.CompareAndSwap(false, true) {
		// An engine bug; answering twice would confuse the client's request matching.
		ac.c.log.Error("engine completed an add twice; ignoring the second completion",
			"ledger", ac.ledgerID, "entry", ac.entryID, "err", err)
		return
	}
	if err == nil {
		ac.c.respondAddOK(ac.received, ac.id, ac.ledgerID, ac.entryID)
		return
	}
	ac.c.respond(kindAdd, ac.received, true, ac.c.answer(&wire.Response{
		RequestId: ac.id,
		Body:      &wire.Response_Add{Add: &wire.AddResponse{LedgerId: ac.ledgerID, EntryId: ac.entryID}},
	}, err))
}

// read serves a read, fencing first when asked. A fencing read of entry -1 answers with the
// LAC that Fence returned: it is what the ledger had when the fence took effect.
func (c *conn) read(id uint64, r *wire.ReadRequest) *wire.Response {
	ledgerID, entryID := r.GetLedgerId(), r.GetEntryId()
	if r.GetFence() {
		lac, err := c.s.engine.Fence(ledgerID)
		if err != nil || entryID == -1 {
			return c.answer(&wire.Response{RequestId: id, Body: &wire.Response_Read{Read: &wire.ReadResponse{
				LedgerId: ledgerID, EntryId: -1, LastAddConfirmed: lac,
			}}}, err)
		}
	}
	e, err := c.s.engine.Read(ledgerID, entryID)
	if entryID == -1 {
		// A LAC read answers for entry -1, whatever the engine put in EntryID.
		e.LedgerID, e.EntryID, e.Payload = ledgerID, -1, nil
	}
	return c.answer(&wire.Response{RequestId: id, Body: &wire.Response_Read{Read: &wire.ReadResponse{
		LedgerId: e.LedgerID, EntryId: e.EntryID, LastAddConfirmed: e.LastAddConfirmed, Payload: e.Payload,
	}}}, err)
}

// responseOverheadBytes bounds what a Response adds around its body: request id, status,
// the body's tag and length.
const responseOverheadBytes = 32

func (c *conn) batchRead(id uint64, r *wire.BatchReadRequest) outgoing {
	maxFrame := c.s.cfg.MaxFrameBytes
	maxEntries := int(r.GetMaxEntries())
	if maxEntries <= 0 || maxEntries > c.s.cfg.MaxBatchReadEntries {
		maxEntries = c.s.cfg.MaxBatchReadEntries
	}
	maxBytes := int(r.GetMaxBytes())
	if maxBytes <= 0 || maxBytes > maxFrame {
		maxBytes = maxFrame
	}
	select {
	case c.s.rangeReads <- struct{}{}:
	case <-c.s.done:
		return outgoing{resp: c.answer(&wire.Response{RequestId: id}, ErrServerClosed)}
	}
	entries, release, err := c.s.engine.ReadRange(r.GetLedgerId(), r.GetFirstEntryId(), maxEntries, maxBytes)
	<-c.s.rangeReads
	if err != nil {
		if release != nil {
			release()
		}
		return outgoing{resp: c.answer(&wire.Response{RequestId: id}, err)}
	}
	// The engine counts payload bytes; the frame counts encodings. Keep the entries that
	// fit in one frame, in order.
	n, size := 0, responseOverheadBytes
	for _, e := range entries[:min(len(entries), maxEntries)] {
		if size += entryFieldSize(e); size > maxFrame {
			break
		}
		n++
	}
	if n == 0 && len(entries) > 0 {
		if release != nil {
			release()
		}
		return outgoing{resp: &wire.Response{RequestId: id, Status: wire.Status_IO_ERROR, ErrorMessage: fmt.Sprintf(
			"entry %d of ledger %d does not fit in a %d-byte frame", entries[0].EntryID, entries[0].LedgerID, maxFrame)}}
	}
	return outgoing{batch: &batchReadAnswer{requestID: id, entries: entries[:n], release: release}}
}

// writeLoop writes queued responses through a buffer and flushes whenever the queue is
// empty, so one flush (one syscall) carries every response that completed meanwhile.
func (c *conn) writeLoop() {
	bw := bufio.NewWriterSize(c.nc, ioBufferBytes)
	var spare []outgoing
	var frame []byte
	var cuts []int // where batch reads' payloads go in frame
	for {
		c.mu.Lock()
		batch, closed := c.queue, c.closed
		c.queue = spare[:0]
		c.mu.Unlock()
		if closed {
			return
		}
		if len(batch) == 0 {
			spare = batch
			if bw.Buffered() > 0 {
				c.setWriteDeadline(time.Now())
				if err := bw.Flush(); err != nil {
					c.writeFailed(err)
					return
				}
			}
			select {
			case <-c.kick:
			case <-c.done:
				return
			}
			continue
		}
		select {
		case c.space <- struct{}{}:
		default:
		}
		now := time.Now() // one clock read for the batch's deadline and latencies
		c.setWriteDeadline(now)
		for i, out := range batch {
			c.s.metrics.latency[out.kind].Observe(now.Sub(out.received).Seconds())
			switch {
			case out.addOK:
				frame = wire.AppendAddOKResponseFrame(frame[:0], out.requestID, out.ledgerID, out.entryID)
			case out.batch != nil:
				var err error
				if frame, cuts, err = writeBatchRead(bw, c.nc, frame, cuts, out.batch); err != nil {
					c.writeFailed(err)
					return
				}
				batch[i] = outgoing{}
				continue
			case out.resp == nil:
				continue // respond(nil) is only used once the connection is closed
			default:
				var err error
				if frame, err = c.encode(frame[:0], out.resp); err != nil {
					c.log.Error("cannot encode a response; closing connection", "err", err)
					c.close()
					return
				}
			}
			if _, err := bw.Write(frame); err != nil {
				c.writeFailed(err)
				return
			}
			batch[i] = outgoing{}
		}
		if cap(frame) > retainFrameBytes {
			frame = nil
		}
		if cap(cuts) > retainFrameBytes/64 {
			cuts = nil
		}
		spare = batch
	}
}

func (c *conn) setWriteDeadline(now time.Time) {
	if c.s.cfg.WriteTimeout > 0 {
		c.nc.SetWriteDeadline(now.Add(c.s.cfg.WriteTimeout))
	}
}

func (c *conn) writeFailed(err error) {
	if !c.isClosed() {
		c.log.Info("closing connection after write error", "err", err)
	}
	c.close()
}

// encode appends resp as a frame. A response that cannot be sent as is (too large for a
// frame, which a correct engine never produces) is replaced by an error response, so the
// client still gets an answer for its request id.
func (c *conn) encode(dst []byte, resp *wire.Response) ([]byte, error) {
	out, err := wire.AppendFrame(dst, resp)
	if err == nil && len(out)-len(dst)-wire.FrameHeaderBytes <= c.s.cfg.MaxFrameBytes {
		return out, nil
	}
	if err == nil {
		err = fmt.Errorf("%w: response is %d bytes, max %d", wire.ErrFrameTooLarge, len(out)-len(dst)-wire.FrameHeaderBytes, c.s.cfg.MaxFrameBytes)
	}
	c.log.Error("cannot send response; answering IO_ERROR instead", "request_id", resp.GetRequestId(), "err", err)
	return wire.AppendFrame(dst, &wire.Response{
		RequestId: resp.GetRequestId(), Status: wire.Status_IO_ERROR, ErrorMessage: wire.ErrorMessage(err),
	})
}
