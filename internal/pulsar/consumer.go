package pulsar

// SUBSCRIBE, FLOW, ACK, REDELIVER_UNACKNOWLEDGED_MESSAGES,
// GET_LAST_MESSAGE_ID, SEEK, UNSUBSCRIBE, CLOSE_CONSUMER.
//
// Deviations from Apache Pulsar:
//   - Subscription types: Exclusive, Shared, Failover (the active
//     consumer chosen per partition as Pulsar does: dispatch.go) and
//     Key_Shared (AUTO_SPLIT and STICKY, with
//     allowOutOfOrderDelivery; dispatch.go and keyshared.go say how and
//     where it differs). STICKY ranges that are invalid or overlap are
//     refused with ConsumerAssignError; a Key_Shared consumer whose mode or
//     allowOutOfOrderDelivery differs from the attached ones' with
//     ConsumerBusy.
//   - Batch-index acknowledgements (an ACK whose message id carries an
//     ack_set, the messages of a batch still unacknowledged): kept in the
//     front end's memory only (subscription.batchAcks), so a redelivery or a
//     new consumer gets the entry with its ack_set and skips what was
//     acknowledged, but a takeover or unload forgets them (Pulsar keeps them
//     in the cursor when acknowledgmentAtBatchIndexLevelEnabled); the
//     whole entry is acknowledged once no bit is left. A cumulative ACK with
//     an ack_set acknowledges the entries before it and those messages of
//     it.
//   - SEEK by message id or by publish time (the first entry the producer
//     stamped at or after it). As in Pulsar, the seek resets the cursor and
//     closes every consumer of the subscription (CLOSE_CONSUMER), which
//     reconnect and resume from the new position; the batch index of the id
//     is not kept (the client drops the batch's earlier messages itself).
//   - maxUnackedMessagesPerConsumer (Config.MaxUnackedPerConsumer) blocks a
//     consumer at the bound and unblocks it as soon as it is below (Pulsar
//     waits until half). maxUnackedMessagesPerSubscription is 4 times it
//     (Pulsar's defaults' ratio; no Config field of its own yet), with
//     Pulsar's hysteresis. Delayed delivery (deliver_at_time) on Shared and
//     Key_Shared is held in memory only and bounded (dispatch.go).
//     replicate_subscription_state and read_compacted are accepted and
//     ignored.

import (
	"errors"

	"google.golang.org/protobuf/proto"

	pb "quire/internal/pulsar/pulsarpb"
)

// subscription returns the topic's named subscription, opening its cursor
// through the Backend the first time.
func (ts *topicState) subscription(c *conn, name string, durable bool, subType pb.CommandSubscribe_SubType, start MessageID) (*subscription, error) {
	ts.mu.Lock()
	sub := ts.subs[name]
	ts.mu.Unlock()
	if sub != nil {
		return sub, nil
	}
	cursor, err := ts.topic.Subscription(c.ctx, name, durable, start)
	if err != nil {
		return nil, err
	}
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if sub := ts.subs[name]; sub != nil {
		return sub, nil
	}
	sub = newSubscription(c.s, ts, name, durable, subType, cursor)
	ts.subs[name] = sub
	return sub, nil
}

func (ts *topicState) dropSubscription(sub *subscription) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if ts.subs[sub.name] == sub {
		delete(ts.subs, sub.name)
	}
}

func (c *conn) consumer(id uint64) *consumer {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.consumers[id]
}

// detach removes a consumer from this connection's table; it reports
// whether it was there.
func (c *conn) detach(cons *consumer) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.consumers[cons.id] != cons {
		return false
	}
	delete(c.consumers, cons.id)
	return true
}

func (c *conn) handleSubscribe(cmd *pb.CommandSubscribe) error {
	reqID := cmd.GetRequestId()
	if c.consumer(cmd.GetConsumerId()) != nil {
		// A retried SUBSCRIBE for a consumer already attached.
		return c.sendSuccess(reqID)
	}
	subType := cmd.GetSubType()
	if cmd.GetSubscription() == "" {
		return c.sendError(reqID, ErrNotAllowed, "empty subscription name")
	}
	if err := c.authorizeTopic(cmd.GetTopic(), ActionConsume); err != nil {
		return c.sendError(reqID, err, "")
	}
	ts, err := c.s.topicState(c.ctx, CanonicalTopic(cmd.GetTopic()), cmd.GetForceTopicCreation())
	if err != nil {
		return c.sendError(reqID, err, "")
	}
	if _, err := c.attachSchema(ts.name, cmd.GetSchema()); err != nil {
		return c.sendError(reqID, err, "")
	}
	durable := cmd.GetDurable()
	start := Latest
	if cmd.GetInitialPosition() == pb.CommandSubscribe_Earliest {
		start = Earliest
	}
	if !durable && cmd.StartMessageId != nil {
		// A reader names where it stands; the cursor starts one entry
		// before it, so that entry comes again and the client drops what
		// it does not want (the messages of a batch already read, or the
		// entry itself unless the reader is inclusive). Pulsar's broker
		// does the same for every start id it is given.
		start = messageIDOf(cmd.StartMessageId)
		if start.LedgerID >= 0 && start.EntryID >= 0 {
			start.EntryID--
		}
	}
	sub, err := ts.subscription(c, cmd.GetSubscription(), durable, subType, start)
	if err != nil {
		return c.sendError(reqID, err, "")
	}
	cons := &consumer{
		id:       cmd.GetConsumerId(),
		name:     cmd.GetConsumerName(),
		priority: cmd.GetPriorityLevel(),
		conn:     c,
		sub:      sub,
	}
	if kvs := cmd.GetMetadata(); len(kvs) > 0 {
		cons.metadata = make(map[string]string, len(kvs))
		for _, kv := range kvs {
			cons.metadata[kv.GetKey()] = kv.GetValue()
		}
	}
	if err := sub.addConsumer(cons, subType, cmd.GetKeySharedMeta()); err != nil {
		return c.sendError(reqID, err, "")
	}
	c.mu.Lock()
	c.consumers[cons.id] = cons
	c.mu.Unlock()
	if topicDone(ts) {
		// As for producers: watchTopic may have missed this consumer.
		if c.detach(cons) {
			sub.removeConsumer(cons)
		}
		return c.sendError(reqID, errorf(ErrServiceNotReady, "topic %s is no longer served here", ts.name), "")
	}
	if err := c.sendSuccess(reqID); err != nil {
		return err
	}
	sub.notifyActive()
	return nil
}

func (c *conn) handleFlow(cmd *pb.CommandFlow) error {
	cons := c.consumer(cmd.GetConsumerId())
	if cons == nil {
		return nil // a FLOW racing the consumer's close
	}
	cons.sub.mu.Lock()
	cons.permits += int64(cmd.GetMessagePermits())
	cons.sub.mu.Unlock()
	cons.sub.signal()
	return nil
}

func (c *conn) handleAck(cmd *pb.CommandAck) error {
	answer := func(err error) error {
		if cmd.RequestId == nil {
			return nil
		}
		resp := &pb.CommandAckResponse{ConsumerId: proto.Uint64(cmd.GetConsumerId()), RequestId: proto.Uint64(cmd.GetRequestId())}
		if err != nil {
			resp.Error = c.errorCode(err, "ack").Enum()
			resp.Message = proto.String(err.Error())
		}
		return c.send(&pb.BaseCommand{Type: pb.BaseCommand_ACK_RESPONSE.Enum(), AckResponse: resp})
	}
	cons := c.consumer(cmd.GetConsumerId())
	if cons == nil {
		return answer(errorf(ErrConsumerNotFound, "consumer %d", cmd.GetConsumerId()))
	}
	sub := cons.sub
	var ids []MessageID
	cumulative := cmd.GetAckType() == pb.CommandAck_Cumulative
	for _, md := range cmd.GetMessageId() {
		id := messageIDOf(md)
		if len(md.GetAckSet()) == 0 {
			ids = append(ids, id)
			continue
		}
		// Part of a batch: see the header.
		sub.mu.Lock()
		whole := sub.ackBatchIndexesLocked(id, md.GetAckSet())
		sub.mu.Unlock()
		switch {
		case whole:
			ids = append(ids, id)
		case cumulative && id.EntryID > 0:
			ids = append(ids, MessageID{LedgerID: id.LedgerID, EntryID: id.EntryID - 1})
		}
	}
	if len(ids) == 0 {
		return answer(nil)
	}
	if cumulative {
		upTo := ids[0]
		for _, id := range ids[1:] {
			if upTo.Less(id) {
				upTo = id
			}
		}
		if err := sub.cursor.AckCumulative(c.ctx, upTo); err != nil {
			return answer(err)
		}
		sub.mu.Lock()
		for id := range sub.pending {
			if !upTo.Less(id) {
				sub.ackedLocked(id)
			}
		}
		for id := range sub.replay {
			if !upTo.Less(id) {
				sub.ackedLocked(id)
			}
		}
		sub.mu.Unlock()
	} else {
		if err := sub.cursor.Ack(c.ctx, ids); err != nil {
			return answer(err)
		}
		sub.mu.Lock()
		for _, id := range ids {
			sub.ackedLocked(id)
		}
		sub.mu.Unlock()
	}
	// A consumer at its bound of unacknowledged messages may receive again.
	sub.signal()
	return answer(nil)
}

func (c *conn) handleRedeliver(cmd *pb.CommandRedeliverUnacknowledgedMessages) error {
	cons := c.consumer(cmd.GetConsumerId())
	if cons == nil {
		return nil
	}
	sub := cons.sub
	sub.mu.Lock()
	if ids := cmd.GetMessageIds(); len(ids) > 0 {
		for _, md := range ids {
			if id := messageIDOf(md); sub.pending[id].c == cons {
				sub.putBackLocked(id)
			}
		}
	} else {
		for id, p := range sub.pending {
			if p.c == cons {
				sub.putBackLocked(id)
			}
		}
	}
	sub.mu.Unlock()
	sub.signal()
	return nil
}

func (c *conn) handleGetLastMessageID(cmd *pb.CommandGetLastMessageId) error {
	reqID := cmd.GetRequestId()
	cons := c.consumer(cmd.GetConsumerId())
	if cons == nil {
		return c.sendError(reqID, errorf(ErrConsumerNotFound, "consumer %d", cmd.GetConsumerId()), "")
	}
	topic := cons.sub.ts.topic
	last := topic.LastMessageID()
	lastData := messageIDData(last)
	lastData.BatchIndex = proto.Int32(-1)
	if last != Earliest {
		// Readers compare batch indexes too: name the last message of a
		// batch, as Pulsar does.
		entries, err := topic.Read(c.ctx, last, 1)
		if err != nil {
			return c.sendError(reqID, err, "")
		}
		if len(entries) == 1 {
			if meta, _, err := ParseEntry(entries[0].Data); err == nil && meta.NumMessagesInBatch != nil {
				lastData.BatchIndex = proto.Int32(meta.GetNumMessagesInBatch() - 1)
			}
		}
	}
	return c.send(&pb.BaseCommand{Type: pb.BaseCommand_GET_LAST_MESSAGE_ID_RESPONSE.Enum(), GetLastMessageIdResponse: &pb.CommandGetLastMessageIdResponse{
		LastMessageId:              lastData,
		RequestId:                  proto.Uint64(reqID),
		ConsumerMarkDeletePosition: messageIDData(cons.sub.cursor.MarkDelete()),
	}})
}

func (c *conn) handleSeek(cmd *pb.CommandSeek) error {
	reqID := cmd.GetRequestId()
	cons := c.consumer(cmd.GetConsumerId())
	if cons == nil {
		return c.sendError(reqID, errorf(ErrConsumerNotFound, "consumer %d", cmd.GetConsumerId()), "")
	}
	sub := cons.sub
	var to MessageID
	switch {
	case cmd.MessageId != nil:
		to = messageIDOf(cmd.MessageId)
	case cmd.MessagePublishTime != nil:
		var err error
		if to, err = sub.ts.topic.FindByPublishTime(c.ctx, cmd.GetMessagePublishTime()); err != nil {
			return c.sendError(reqID, err, "")
		}
	default:
		return c.sendError(reqID, ErrNotAllowed, "SEEK names neither a message id nor a publish time")
	}
	if err := sub.cursor.Reset(c.ctx, to); err != nil {
		return c.sendError(reqID, err, "")
	}
	sub.mu.Lock()
	sub.generation++
	sub.resetDeliveryLocked()
	sub.lastRead = sub.cursor.MarkDelete()
	consumers := append([]*consumer(nil), sub.consumers...)
	sub.mu.Unlock()
	sub.signal()
	// Every consumer reconnects and resumes from the new position.
	for _, k := range consumers {
		if !k.conn.detach(k) {
			continue
		}
		sub.detachConsumer(k, true)
		err := k.conn.send(&pb.BaseCommand{Type: pb.BaseCommand_CLOSE_CONSUMER.Enum(), CloseConsumer: &pb.CommandCloseConsumer{
			ConsumerId: proto.Uint64(k.id),
			RequestId:  proto.Uint64(0),
		}})
		if err != nil && k.conn == c {
			return err
		}
	}
	return c.sendSuccess(reqID)
}

func (c *conn) handleUnsubscribe(cmd *pb.CommandUnsubscribe) error {
	reqID := cmd.GetRequestId()
	cons := c.consumer(cmd.GetConsumerId())
	if cons == nil {
		return c.sendError(reqID, errorf(ErrConsumerNotFound, "consumer %d", cmd.GetConsumerId()), "")
	}
	sub := cons.sub
	sub.mu.Lock()
	others := len(sub.consumers) > 1
	sub.mu.Unlock()
	if others {
		return c.sendError(reqID, errorf(ErrConsumerBusy, "subscription %s has other consumers", sub.name), "")
	}
	c.detach(cons)
	sub.removeConsumer(cons)
	sub.ts.dropSubscription(sub)
	if sub.durable {
		if err := sub.ts.topic.DeleteSubscription(c.ctx, sub.name); err != nil && !errors.Is(err, ErrSubscriptionNotFound) {
			return c.sendError(reqID, err, "")
		}
	}
	return c.sendSuccess(reqID)
}

func (c *conn) handleCloseConsumer(cmd *pb.CommandCloseConsumer) error {
	if cons := c.consumer(cmd.GetConsumerId()); cons != nil && c.detach(cons) {
		cons.sub.removeConsumer(cons)
	}
	return c.sendSuccess(cmd.GetRequestId())
}
