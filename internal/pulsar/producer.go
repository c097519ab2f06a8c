package pulsar

// PRODUCER, SEND, CLOSE_PRODUCER.
//
// Deviations from Apache Pulsar:
//   - Access modes: Shared (the default), Exclusive, WaitForExclusive, and
//     ExclusiveWithFencing treated as Exclusive: an exclusive producer is
//     refused with ProducerFenced while others are attached, a shared one
//     with ProducerBusy while an exclusive one is; a WaitForExclusive one is
//     answered PRODUCER_SUCCESS with producer_ready false and queued, and
//     gets the topic (a second PRODUCER_SUCCESS, ready) when the others have
//     left (a waiting producer closed by its client, or whose connection
//     closed, is passed over). Nobody is fenced.
//   - Schemas: see schema.go; PRODUCER_SUCCESS carries the version of the
//     producer's schema.
//   - Deduplication (when Topic.Deduplication): a SEND whose highest sequence
//     id is at or below the producer's highest one already appended is a
//     duplicate and answered with a receipt for message id -1:-1, as Pulsar
//     does, in its place among the producer's receipts. A batch that only
//     partly overlaps is appended whole.
//   - Backlog quota with producer_exception: a SEND over the quota fails
//     with ProducerBlockedQuotaExceededException (the Go client then
//     reconnects) and a PRODUCER is refused with it while the backlog is
//     over the quota (Topic's QuotaBlocker); Pulsar also closes the
//     attached producers when its periodic check finds the quota exceeded.
//   - initial_subscription_name (what a dead-letter producer asks for)
//     creates that durable subscription at the topic's start when it does
//     not exist, as Pulsar does (there is no allowAutoSubscriptionCreation
//     setting to refuse it).
//   - Chunked messages, transactions, encryption checks and publish rate
//     limits are not implemented; the entry is stored as sent.

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"google.golang.org/protobuf/proto"

	pb "quire/internal/pulsar/pulsarpb"
)

// producer is one producer attached to a topic through a connection.
type producer struct {
	id        uint64
	name      string
	conn      *conn
	ts        *topicState
	exclusive bool
	// abandoned: a WaitForExclusive producer closed by its client while it
	// was still queued; it is never granted.
	abandoned atomic.Bool
	// schemaVersion is the version of the producer's schema (schema.go), nil
	// without one.
	schemaVersion []byte
	// metadata is the producer's properties from its PRODUCER (stats);
	// never changed.
	metadata map[string]string
	// msgIn and bytesIn count what this producer appended, for stats.
	msgIn, bytesIn atomic.Int64

	mu sync.Mutex
	// lastPushed is the highest sequence id handed to Topic.Append (for
	// deduplication); -1 when none.
	lastPushed int64
	// pending holds this producer's SENDs in send order until their
	// receipts can go out: a receipt is queued only once every earlier one
	// was, so the client sees them in order even when a duplicate is
	// answered before the appends ahead of it complete.
	pending []*pendingSend
}

type pendingSend struct {
	frame []byte // the receipt or error; nil until answered
}

// complete records the answer of one pending send and queues every
// answered receipt at the head of the line.
func (p *producer) complete(ps *pendingSend, frame []byte) {
	p.mu.Lock()
	ps.frame = frame
	n := 0
	for n < len(p.pending) && p.pending[n].frame != nil {
		p.conn.queueReceipt(p.pending[n].frame)
		n++
	}
	p.pending = p.pending[n:]
	p.mu.Unlock()
}

// addProducer attaches p to the topic, applying the access mode and
// name rules.
func (ts *topicState) addProducer(p *producer) error {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return ts.addProducerLocked(p)
}

// waitingProducer is a WaitForExclusive producer queued for a topic that
// another producer holds: reqID is its PRODUCER's, answered again (ready)
// when it is granted.
type waitingProducer struct {
	p     *producer
	reqID uint64
}

// addOrWait is addProducer, except that a WaitForExclusive producer that
// would be fenced is queued instead (waiting true): it gets the topic when
// the producers attached now have left (removeProducer).
func (ts *topicState) addOrWait(p *producer, reqID uint64, wait bool) (waiting bool, err error) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	err = ts.addProducerLocked(p)
	if err != nil && wait && errors.Is(err, ErrProducerFenced) {
		ts.waiting = append(ts.waiting, waitingProducer{p: p, reqID: reqID})
		return true, nil
	}
	return false, err
}

func (ts *topicState) addProducerLocked(p *producer) error {
	if ts.terminating {
		return errorf(ErrTopicTerminated, "topic %s was terminated", ts.name)
	}
	if term, ok := ts.topic.(Terminator); ok && term.Terminated() {
		return errorf(ErrTopicTerminated, "topic %s was terminated", ts.name)
	}
	if _, busy := ts.producers[p.name]; busy {
		return fmt.Errorf("%w: producer %q is already connected to %s", ErrProducerBusy, p.name, ts.name)
	}
	for _, other := range ts.producers {
		// As Pulsar: an exclusive producer that finds others attached is
		// fenced; a shared one that finds an exclusive one is busy.
		switch {
		case p.exclusive:
			return fmt.Errorf("%w: %s has producer %q attached: no exclusive access", ErrProducerFenced, ts.name, other.name)
		case other.exclusive:
			return fmt.Errorf("%w: %s has exclusive producer %q", ErrProducerBusy, ts.name, other.name)
		}
	}
	ts.producers[p.name] = p
	return nil
}

func (ts *topicState) removeProducer(p *producer) {
	ts.mu.Lock()
	if ts.producers[p.name] == p {
		delete(ts.producers, p.name)
	}
	// The first waiting WaitForExclusive producer whose connection is still
	// open gets the topic once nobody else holds it.
	var granted *waitingProducer
	for len(ts.producers) == 0 && len(ts.waiting) > 0 && granted == nil {
		w := ts.waiting[0]
		ts.waiting = ts.waiting[1:]
		if w.p.conn.ctx.Err() == nil && !w.p.abandoned.Load() && ts.addProducerLocked(w.p) == nil {
			granted = &w
		}
	}
	ts.mu.Unlock()
	if granted != nil {
		granted.p.conn.grantProducer(*granted)
	}
}

// grantProducer completes a WaitForExclusive producer's PRODUCER: attached
// to the topic now, it is answered PRODUCER_SUCCESS with producer_ready.
func (c *conn) grantProducer(w waitingProducer) {
	c.mu.Lock()
	delete(c.waiting, w.p.id)
	c.producers[w.p.id] = w.p
	c.mu.Unlock()
	if topicDone(w.p.ts) {
		w.p.ts.removeProducer(w.p)
		c.detachProducer(w.p)
		_ = c.sendError(w.reqID, errorf(ErrServiceNotReady, "topic %s is no longer served here", w.p.ts.name), "")
		return
	}
	_ = c.sendProducerSuccess(w.reqID, w.p) // a closed connection has nobody to tell
}

func (c *conn) handleProducer(cmd *pb.CommandProducer) error {
	reqID := cmd.GetRequestId()
	c.mu.Lock()
	existing := c.producers[cmd.GetProducerId()]
	c.mu.Unlock()
	if existing != nil {
		// A client that timed out its first attempt asks again: answer as
		// Pulsar does, with the producer it already has.
		return c.sendProducerSuccess(reqID, existing)
	}
	if err := c.authorizeTopic(cmd.GetTopic(), ActionProduce); err != nil {
		return c.sendError(reqID, err, "")
	}
	ts, err := c.s.topicState(c.ctx, CanonicalTopic(cmd.GetTopic()), true)
	if err != nil {
		return c.sendError(reqID, err, "")
	}
	if qb, ok := ts.topic.(QuotaBlocker); ok {
		if err := qb.ProducerBlocked(c.ctx); err != nil {
			return c.sendError(reqID, err, "")
		}
	}
	if sub := cmd.GetInitialSubscriptionName(); sub != "" {
		// Opened through the Backend only: the cursor exists from now on,
		// the front end's state for it comes with its first consumer.
		if _, err := ts.topic.Subscription(c.ctx, sub, true, Earliest); err != nil {
			return c.sendError(reqID, err, "")
		}
	}
	schemaVersion, err := c.attachSchema(ts.name, cmd.GetSchema())
	if err != nil {
		return c.sendError(reqID, err, "")
	}
	name := cmd.GetProducerName()
	if name == "" {
		name = fmt.Sprintf("%s-%d", c.s.producerPrefix, c.s.producerNames.Add(1))
	}
	p := &producer{
		id:            cmd.GetProducerId(),
		name:          name,
		conn:          c,
		ts:            ts,
		lastPushed:    -1,
		schemaVersion: schemaVersion,
	}
	if kvs := cmd.GetMetadata(); len(kvs) > 0 {
		p.metadata = make(map[string]string, len(kvs))
		for _, kv := range kvs {
			p.metadata[kv.GetKey()] = kv.GetValue()
		}
	}
	switch cmd.GetProducerAccessMode() {
	case pb.ProducerAccessMode_Exclusive, pb.ProducerAccessMode_WaitForExclusive, pb.ProducerAccessMode_ExclusiveWithFencing:
		p.exclusive = true
	}
	if ts.topic.Deduplication() {
		p.lastPushed = ts.topic.LastSequenceID(name)
	}
	waiting, err := ts.addOrWait(p, reqID, cmd.GetProducerAccessMode() == pb.ProducerAccessMode_WaitForExclusive)
	if err != nil {
		return c.sendError(reqID, err, "")
	}
	if waiting {
		c.mu.Lock()
		c.waiting[p.id] = p
		c.mu.Unlock()
		// Not ready: the client waits (without a timeout) for the
		// PRODUCER_SUCCESS that grantProducer sends.
		return c.send(&pb.BaseCommand{Type: pb.BaseCommand_PRODUCER_SUCCESS.Enum(), ProducerSuccess: &pb.CommandProducerSuccess{
			RequestId: proto.Uint64(reqID), ProducerName: proto.String(p.name), ProducerReady: proto.Bool(false),
		}})
	}
	c.mu.Lock()
	c.producers[p.id] = p
	c.mu.Unlock()
	if topicDone(ts) {
		// The topic stopped being served after we found it, and watchTopic
		// may have closed its producers before this one joined.
		ts.removeProducer(p)
		c.detachProducer(p)
		return c.sendError(reqID, errorf(ErrServiceNotReady, "topic %s is no longer served here", ts.name), "")
	}
	return c.sendProducerSuccess(reqID, p)
}

func (c *conn) sendProducerSuccess(reqID uint64, p *producer) error {
	p.mu.Lock()
	last := p.lastPushed
	p.mu.Unlock()
	return c.send(&pb.BaseCommand{Type: pb.BaseCommand_PRODUCER_SUCCESS.Enum(), ProducerSuccess: &pb.CommandProducerSuccess{
		RequestId:      proto.Uint64(reqID),
		ProducerName:   proto.String(p.name),
		LastSequenceId: proto.Int64(last),
		SchemaVersion:  p.schemaVersion,
		ProducerReady:  proto.Bool(true),
	}})
}

// topicDone reports whether the Backend stopped serving the topic.
func topicDone(ts *topicState) bool {
	select {
	case <-ts.topic.Done():
		return true
	default:
		return false
	}
}

// detachProducer removes a producer from this connection's table; it
// reports whether it was there.
func (c *conn) detachProducer(p *producer) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.producers[p.id] != p {
		return false
	}
	delete(c.producers, p.id)
	return true
}

func (c *conn) handleCloseProducer(cmd *pb.CommandCloseProducer) error {
	c.mu.Lock()
	p := c.producers[cmd.GetProducerId()]
	delete(c.producers, cmd.GetProducerId())
	if w := c.waiting[cmd.GetProducerId()]; w != nil {
		w.abandoned.Store(true)
		delete(c.waiting, cmd.GetProducerId())
	}
	c.mu.Unlock()
	if p != nil {
		p.ts.removeProducer(p)
	}
	return c.sendSuccess(cmd.GetRequestId())
}

// handleSend appends one entry. The reader takes a send slot first (the
// bound of SENDs in flight per connection) and then submits, so entries
// from one producer are appended in the order they arrived.
func (c *conn) handleSend(cmd *pb.CommandSend, f *Frame) error {
	c.mu.Lock()
	p := c.producers[cmd.GetProducerId()]
	c.mu.Unlock()
	seq := cmd.GetSequenceId()
	highest := max(cmd.GetHighestSequenceId(), seq)
	if p == nil {
		// Pulsar closes the connection here: a SEND for a producer that
		// does not exist means client and broker disagree on state.
		return fmt.Errorf("SEND for unknown producer %d", cmd.GetProducerId())
	}
	select {
	case c.sendSlots <- struct{}{}:
	case <-c.ctx.Done():
		return c.ctx.Err()
	}
	errorFrame := func(err error) []byte {
		return AppendCommand(nil, &pb.BaseCommand{Type: pb.BaseCommand_SEND_ERROR.Enum(), SendError: &pb.CommandSendError{
			ProducerId: proto.Uint64(p.id),
			SequenceId: proto.Uint64(seq),
			Error:      c.errorCode(err, "send", "producer", p.name).Enum(),
			Message:    proto.String(err.Error()),
		}})
	}
	receipt := func(id MessageID) []byte {
		return AppendCommand(nil, &pb.BaseCommand{Type: pb.BaseCommand_SEND_RECEIPT.Enum(), SendReceipt: &pb.CommandSendReceipt{
			ProducerId:        proto.Uint64(p.id),
			SequenceId:        proto.Uint64(seq),
			HighestSequenceId: proto.Uint64(highest),
			MessageId:         &pb.MessageIdData{LedgerId: proto.Uint64(uint64(id.LedgerID)), EntryId: proto.Uint64(uint64(id.EntryID))},
		}})
	}
	ps := &pendingSend{}
	p.mu.Lock()
	p.pending = append(p.pending, ps)
	var verdict []byte
	switch {
	case f.HeadersAndPayload == nil:
		verdict = errorFrame(fmt.Errorf("%w: SEND without a payload", ErrNotAllowed))
	case !f.ChecksumOK:
		verdict = errorFrame(ErrChecksum)
	case len(f.HeadersAndPayload) > c.s.maxMessageSize+framePadding:
		// The metadata rides in the padding: a chunking client fills
		// metadata plus payload up to the advertised size.
		verdict = errorFrame(fmt.Errorf("%w: message of %d bytes, limit %d", ErrNotAllowed, len(f.HeadersAndPayload), c.s.maxMessageSize+framePadding))
	case p.ts.topic.Deduplication() && int64(highest) <= p.lastPushed:
		verdict = receipt(MessageID{LedgerID: -1, EntryID: -1})
	default:
		p.lastPushed = max(p.lastPushed, int64(highest))
	}
	p.mu.Unlock()
	if verdict != nil {
		p.complete(ps, verdict)
		return nil
	}
	info := AppendInfo{
		ProducerName:      p.name,
		SequenceID:        seq,
		HighestSequenceID: highest,
		NumMessages:       max(cmd.GetNumMessages(), 1),
	}
	done := func(r AppendResult) {
		if r.Err != nil {
			// What was not written may be sent again: dedup must not
			// call it a duplicate.
			p.mu.Lock()
			if p.ts.topic.Deduplication() {
				p.lastPushed = p.ts.topic.LastSequenceID(p.name)
			}
			p.mu.Unlock()
			p.complete(ps, errorFrame(r.Err))
			return
		}
		p.countAppended(int64(info.NumMessages), int64(len(f.HeadersAndPayload)))
		p.complete(ps, receipt(r.ID))
	}
	if err := p.ts.topic.Append(c.ctx, f.HeadersAndPayload, info, done); err != nil {
		done(AppendResult{Err: err})
	}
	return nil
}

// countAppended counts an appended entry for the producer's and the
// topic's stats.
func (p *producer) countAppended(messages, bytes int64) {
	p.msgIn.Add(messages)
	p.bytesIn.Add(bytes)
	p.ts.msgIn.Add(messages)
	p.ts.bytesIn.Add(bytes)
}
