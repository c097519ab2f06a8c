package pulsar

// PRODUCER, SEND, CLOSE_PRODUCER.
//
// Deviations from Apache Pulsar:
//   - Access modes: Shared (the default), Exclusive, and WaitForExclusive and
//     ExclusiveWithFencing treated as Exclusive: a second producer is refused
//     with ProducerFenced while another holds the topic exclusively (or an
//     exclusive one asks while others are attached) — nobody waits or fences.
//   - Schemas are accepted and not stored (schema_version is left empty).
//   - Deduplication (when Topic.Deduplication): a SEND whose highest sequence
//     id is at or below the producer's highest one already appended is a
//     duplicate and answered with a receipt for message id -1:-1, as Pulsar
//     does, in its place among the producer's receipts. A batch that only
//     partly overlaps is appended whole.
//   - Chunked messages, transactions, encryption checks and publish rate
//     limits are not implemented; the entry is stored as sent.

import (
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
	if _, busy := ts.producers[p.name]; busy {
		return fmt.Errorf("%w: producer %q is already connected to %s", ErrProducerBusy, p.name, ts.name)
	}
	for _, other := range ts.producers {
		if other.exclusive || p.exclusive {
			return fmt.Errorf("%w: %s has producer %q attached and one of them asks for exclusive access", ErrProducerFenced, ts.name, other.name)
		}
	}
	ts.producers[p.name] = p
	return nil
}

func (ts *topicState) removeProducer(p *producer) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if ts.producers[p.name] == p {
		delete(ts.producers, p.name)
	}
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
	ts, err := c.s.topicState(c.ctx, cmd.GetTopic(), true)
	if err != nil {
		return c.sendError(reqID, err, "")
	}
	name := cmd.GetProducerName()
	if name == "" {
		name = fmt.Sprintf("%s-%d", c.s.producerPrefix, c.s.producerNames.Add(1))
	}
	p := &producer{
		id:         cmd.GetProducerId(),
		name:       name,
		conn:       c,
		ts:         ts,
		lastPushed: -1,
	}
	switch cmd.GetProducerAccessMode() {
	case pb.ProducerAccessMode_Exclusive, pb.ProducerAccessMode_WaitForExclusive, pb.ProducerAccessMode_ExclusiveWithFencing:
		p.exclusive = true
	}
	if ts.topic.Deduplication() {
		p.lastPushed = ts.topic.LastSequenceID(name)
	}
	if err := ts.addProducer(p); err != nil {
		return c.sendError(reqID, err, "")
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
	case len(f.HeadersAndPayload) > c.s.maxMessageSize:
		verdict = errorFrame(fmt.Errorf("%w: message of %d bytes, limit %d", ErrNotAllowed, len(f.HeadersAndPayload), c.s.maxMessageSize))
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
