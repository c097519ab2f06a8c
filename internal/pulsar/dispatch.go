package pulsar

// Dispatch: how a subscription's entries reach its consumers.
//
// A subscription with consumers has one dispatcher goroutine. It alone
// reads entries and advances lastRead; the connections' readers change the
// rest (consumers, permits, acks, redeliveries) under the subscription's
// lock and wake it. One round: under the lock, decide what to read (the
// entries waiting for redelivery first, in position order, else the next
// entries after lastRead); outside it, read them from the Topic; under the
// lock again, hand each entry to a consumer with permits, or put it back
// when none has any; outside it, push the MESSAGE frames onto the
// consumers' connections (a full outbound queue waits: backpressure).
//
// Consumers: Exclusive has one; Failover sends to one active consumer (the
// lowest priority level, then name), tells every consumer whether it is the
// active one (ACTIVE_CONSUMER_CHANGE) and, when the active one changes,
// puts back what the others hold so the new one gets it; Shared sends round
// robin among the consumers with permits. A consumer's permits drop by the
// messages in an entry (a batch counts all its messages, and may take them
// below zero, as in Pulsar).
//
// A consumer whose connection's outbound queue is full holds up its
// subscription's dispatcher until the queue drains (its permits bound how
// much can be in that queue); a later slice can skip it instead.
//
// Redelivery (a nack, a consumer leaving, REDELIVER_UNACKNOWLEDGED) puts
// an entry back, counted in its redelivery count, which MESSAGE carries.
// Entries put back go out before any new one. Counts are kept for every
// subscription type (Pulsar keeps them only for Shared and Key_Shared) and
// only in memory (Pulsar's too). Exclusive and Failover redeliver just the
// entries put back, where Pulsar rewinds to the mark-delete position and
// sends everything after it again.

import (
	"context"
	"slices"
	"sort"
	"sync"

	"google.golang.org/protobuf/proto"

	pb "quire/internal/pulsar/pulsarpb"
)

// consumer is one consumer attached to a subscription through a connection.
type consumer struct {
	id       uint64
	name     string
	priority int32
	conn     *conn
	sub      *subscription
	// permits and unacked are guarded by sub.mu. unacked counts the
	// messages of the entries pending on this consumer; at
	// Server.maxUnackedPerConsumer the consumer gets nothing more until it
	// acknowledges (Pulsar's maxUnackedMessagesPerConsumer).
	permits int64
	unacked int64
	// toldActive is what ACTIVE_CONSUMER_CHANGE last told this Failover
	// consumer (nil: nothing yet); guarded by sub.mu.
	toldActive *bool
}

// sent is an entry delivered and not yet acknowledged.
type sent struct {
	c        *consumer
	messages int32
}

// subscription is the delivery state of one subscription of a topic.
type subscription struct {
	s       *Server
	ts      *topicState
	name    string
	durable bool
	cursor  Cursor

	// wake has room for one signal: whoever changes what the dispatcher
	// could do signals it without waiting.
	wake chan struct{}

	mu      sync.Mutex
	subType pb.CommandSubscribe_SubType
	// consumers in the order they joined.
	consumers []*consumer
	next      int // round-robin position for Shared
	// lastRead is the last position the dispatcher read past.
	// Invariant: every entry after lastRead is neither pending nor waiting
	// for redelivery.
	lastRead MessageID
	// pending maps each entry sent and not acknowledged to its consumer.
	pending map[MessageID]sent
	// replay holds the entries waiting for redelivery.
	replay map[MessageID]struct{}
	// redeliveries counts, per entry not yet acknowledged, how often it
	// was redelivered.
	redeliveries map[MessageID]uint32
	// generation changes on every seek, so that a round that read before
	// the seek drops what it read.
	generation uint64
	// stop ends the dispatcher; nil while none runs.
	stop context.CancelFunc
}

func newSubscription(s *Server, ts *topicState, name string, durable bool, subType pb.CommandSubscribe_SubType, cursor Cursor) *subscription {
	return &subscription{
		s:            s,
		ts:           ts,
		name:         name,
		durable:      durable,
		cursor:       cursor,
		wake:         make(chan struct{}, 1),
		subType:      subType,
		lastRead:     cursor.MarkDelete(),
		pending:      make(map[MessageID]sent),
		replay:       make(map[MessageID]struct{}),
		redeliveries: make(map[MessageID]uint32),
	}
}

func (sub *subscription) signal() {
	select {
	case sub.wake <- struct{}{}:
	default:
	}
}

// addConsumer attaches c, starting the dispatcher for the first consumer.
func (sub *subscription) addConsumer(c *consumer, subType pb.CommandSubscribe_SubType) error {
	sub.mu.Lock()
	defer sub.mu.Unlock()
	if len(sub.consumers) > 0 {
		if subType != sub.subType {
			return errorf(ErrConsumerBusy, "subscription %s is of type %s", sub.name, sub.subType)
		}
		if subType == pb.CommandSubscribe_Exclusive {
			return errorf(ErrConsumerBusy, "exclusive subscription %s has a consumer", sub.name)
		}
	}
	sub.subType = subType
	sub.consumers = append(sub.consumers, c)
	if sub.stop == nil {
		ctx, cancel := context.WithCancel(sub.s.ctx)
		if !sub.s.goDispatch(func() { sub.run(ctx) }) {
			cancel()
			sub.consumers = sub.consumers[:len(sub.consumers)-1]
			return errorf(ErrServiceNotReady, "broker closing")
		}
		sub.stop = cancel
	}
	return nil
}

// activeChanges returns the ACTIVE_CONSUMER_CHANGE frames a Failover
// subscription owes its consumers, and moves the entries pending on
// consumers that are not active back for redelivery to the active one.
func (sub *subscription) activeChangesLocked() []delivery {
	if sub.subType != pb.CommandSubscribe_Failover || len(sub.consumers) == 0 {
		return nil
	}
	active := sub.activeLocked()
	var out []delivery
	changed := false
	for _, c := range sub.consumers {
		isActive := c == active
		if c.toldActive != nil && *c.toldActive == isActive {
			continue
		}
		changed = changed || isActive
		c.toldActive = &isActive
		out = append(out, delivery{c: c, frame: AppendCommand(nil, &pb.BaseCommand{
			Type: pb.BaseCommand_ACTIVE_CONSUMER_CHANGE.Enum(),
			ActiveConsumerChange: &pb.CommandActiveConsumerChange{
				ConsumerId: proto.Uint64(c.id),
				IsActive:   proto.Bool(isActive),
			},
		})})
	}
	if changed {
		for id, p := range sub.pending {
			if p.c != active {
				sub.putBackLocked(id)
			}
		}
	}
	return out
}

// notifyActive sends what activeChangesLocked owes.
func (sub *subscription) notifyActive() {
	sub.mu.Lock()
	frames := sub.activeChangesLocked()
	sub.mu.Unlock()
	if len(frames) > 0 {
		sub.signal()
	}
	for _, d := range frames {
		_ = d.c.conn.sendFrame(d.frame) // a closed connection has nobody to tell
	}
}

// removeConsumer detaches c; its unacknowledged entries wait for
// redelivery. The last consumer leaving stops the dispatcher, and drops a
// non-durable subscription altogether.
func (sub *subscription) removeConsumer(c *consumer) {
	sub.mu.Lock()
	i := slices.Index(sub.consumers, c)
	if i < 0 {
		sub.mu.Unlock()
		return
	}
	sub.consumers = slices.Delete(sub.consumers, i, i+1)
	for id, p := range sub.pending {
		if p.c == c {
			sub.putBackLocked(id)
		}
	}
	last := len(sub.consumers) == 0
	if last && sub.stop != nil {
		sub.stop()
		sub.stop = nil
	}
	sub.mu.Unlock()
	sub.signal()
	sub.notifyActive()
	if last && !sub.durable {
		sub.ts.dropSubscription(sub)
		if err := sub.ts.topic.DeleteSubscription(context.Background(), sub.name); err != nil {
			sub.s.log.Debug("dropping a non-durable subscription", "topic", sub.ts.name, "subscription", sub.name, "err", err)
		}
	}
}

// putBackLocked moves a pending entry to the redelivery set.
func (sub *subscription) putBackLocked(id MessageID) {
	sub.unpendLocked(id)
	sub.replay[id] = struct{}{}
	sub.redeliveries[id]++
}

// ackedLocked forgets an acknowledged entry.
func (sub *subscription) ackedLocked(id MessageID) {
	sub.unpendLocked(id)
	delete(sub.replay, id)
	delete(sub.redeliveries, id)
}

// unpendLocked forgets that an entry is pending on its consumer.
func (sub *subscription) unpendLocked(id MessageID) {
	if p, ok := sub.pending[id]; ok {
		p.c.unacked -= int64(p.messages)
		delete(sub.pending, id)
	}
}

// clearPendingLocked forgets every pending entry (a seek).
func (sub *subscription) clearPendingLocked() {
	for _, c := range sub.consumers {
		c.unacked = 0
	}
	clear(sub.pending)
}

// eligibleLocked returns the consumers that may receive now, in the order
// to try them.
func (sub *subscription) eligibleLocked() []*consumer {
	if len(sub.consumers) == 0 {
		return nil
	}
	switch sub.subType {
	case pb.CommandSubscribe_Shared:
		out := make([]*consumer, 0, len(sub.consumers))
		for i := range sub.consumers {
			out = append(out, sub.consumers[(sub.next+i)%len(sub.consumers)])
		}
		return out
	case pb.CommandSubscribe_Failover:
		return []*consumer{sub.activeLocked()}
	default:
		return sub.consumers[:1]
	}
}

// activeLocked is Failover's active consumer: the lowest priority level,
// then the lowest name.
func (sub *subscription) activeLocked() *consumer {
	best := sub.consumers[0]
	for _, c := range sub.consumers[1:] {
		if c.priority < best.priority || (c.priority == best.priority && c.name < best.name) {
			best = c
		}
	}
	return best
}

func (sub *subscription) hasPermitsLocked() bool {
	for _, c := range sub.eligibleLocked() {
		if sub.canReceiveLocked(c) {
			return true
		}
	}
	return false
}

func (sub *subscription) canReceiveLocked(c *consumer) bool {
	return c.permits > 0 && c.unacked < int64(sub.s.maxUnackedPerConsumer)
}

// pickLocked chooses the consumer for the next entry, nil when none has
// permits.
func (sub *subscription) pickLocked() *consumer {
	for i, c := range sub.eligibleLocked() {
		if sub.canReceiveLocked(c) {
			if sub.subType == pb.CommandSubscribe_Shared {
				sub.next = (sub.next + i + 1) % len(sub.consumers)
			}
			return c
		}
	}
	return nil
}

type delivery struct {
	c     *consumer
	frame []byte
}

// run is the dispatcher goroutine.
func (sub *subscription) run(ctx context.Context) {
	batch := DefaultDispatchBatch
	for ctx.Err() == nil {
		select {
		case <-sub.ts.topic.Done():
			// No longer served here: watchTopic closes the consumers, and
			// the last one leaving stops this dispatcher. Reads would only
			// fail until then.
			select {
			case <-sub.wake:
			case <-ctx.Done():
			}
			continue
		default:
		}
		sub.mu.Lock()
		if !sub.hasPermitsLocked() {
			sub.mu.Unlock()
			select {
			case <-sub.wake:
			case <-ctx.Done():
			}
			continue
		}
		generation := sub.generation
		var replayIDs []MessageID
		for id := range sub.replay {
			replayIDs = append(replayIDs, id)
		}
		from := sub.lastRead
		sub.mu.Unlock()

		var entries []Entry
		var err error
		replaying := len(replayIDs) > 0
		if replaying {
			sort.Slice(replayIDs, func(i, j int) bool { return replayIDs[i].Less(replayIDs[j]) })
			entries, err = sub.readEach(ctx, replayIDs[:min(len(replayIDs), batch)])
		} else {
			entries, err = sub.ts.topic.Read(ctx, MessageID{LedgerID: from.LedgerID, EntryID: from.EntryID + 1}, batch)
			if err == nil && len(entries) == 0 {
				// Nothing to read yet: wait for an entry, or for a change
				// (a seek, a redelivery) that gives other work.
				select {
				case <-sub.ts.topic.Wait(from):
				case <-sub.wake:
				case <-ctx.Done():
				}
				continue
			}
		}
		if err != nil {
			if ctx.Err() == nil {
				sub.s.log.Warn("dispatcher read failed", "topic", sub.ts.name, "subscription", sub.name, "err", err)
				select { // a failing read is retried when something changes
				case <-sub.wake:
				case <-sub.ts.topic.Wait(from):
				case <-ctx.Done():
				}
			}
			continue
		}
		deliveries := sub.assign(entries, replaying, generation)
		for _, d := range deliveries {
			if d.c.conn.sendFrame(d.frame) != nil {
				// The connection closed: its cleanup puts the consumer's
				// pending entries back.
				continue
			}
		}
	}
}

// readEach reads the listed entries (redeliveries), leaving out those no
// longer in the topic.
func (sub *subscription) readEach(ctx context.Context, ids []MessageID) ([]Entry, error) {
	out := make([]Entry, 0, len(ids))
	for _, id := range ids {
		es, err := sub.ts.topic.Read(ctx, id, 1)
		if err != nil {
			return nil, err
		}
		if len(es) == 1 && es[0].ID == id {
			out = append(out, es[0])
		} else {
			// Trimmed (or never there): nothing to redeliver.
			sub.mu.Lock()
			sub.ackedLocked(id)
			sub.mu.Unlock()
		}
	}
	return out, nil
}

// assign hands entries to consumers under the lock and returns the
// frames to push.
func (sub *subscription) assign(entries []Entry, replaying bool, generation uint64) []delivery {
	sub.mu.Lock()
	defer sub.mu.Unlock()
	if sub.generation != generation {
		return nil // a seek happened while reading
	}
	if !replaying && len(sub.replay) > 0 {
		// Entries came back for redelivery while this round read new ones
		// (a consumer left, a nack): they go first, so that an Exclusive or
		// Failover consumer sees the topic in order. The new entries are
		// read again later.
		return nil
	}
	var out []delivery
	for _, e := range entries {
		if replaying {
			if _, ok := sub.replay[e.ID]; !ok {
				continue // acknowledged meanwhile
			}
		} else if !sub.lastRead.Less(e.ID) {
			continue
		}
		if sub.cursor.IsAcked(e.ID) {
			sub.ackedLocked(e.ID)
			if !replaying {
				sub.lastRead = e.ID
			}
			continue
		}
		c := sub.pickLocked()
		if c == nil {
			break // the rest stays for the next round
		}
		n := messagesIn(e.Data)
		c.permits -= int64(n)
		c.unacked += int64(n)
		if replaying {
			delete(sub.replay, e.ID)
		} else {
			sub.lastRead = e.ID
		}
		sub.pending[e.ID] = sent{c: c, messages: n}
		out = append(out, delivery{c: c, frame: AppendPayloadCommand(nil, &pb.BaseCommand{
			Type: pb.BaseCommand_MESSAGE.Enum(),
			Message: &pb.CommandMessage{
				ConsumerId:      proto.Uint64(c.id),
				MessageId:       messageIDData(e.ID),
				RedeliveryCount: proto.Uint32(sub.redeliveries[e.ID]),
			},
		}, e.Data)})
	}
	return out
}

// messagesIn is the number of messages an entry holds (1 when its
// metadata does not decode: the consumer sees it as corrupt and says so).
func messagesIn(data []byte) int32 {
	f := &Frame{}
	// The CRC was checked when the entry was sent; dispatch only needs the
	// count.
	if err := f.parsePayload(data); err != nil || f.Metadata.NumMessagesInBatch == nil {
		return 1
	}
	return max(f.Metadata.GetNumMessagesInBatch(), 1)
}

func messageIDData(id MessageID) *pb.MessageIdData {
	return &pb.MessageIdData{LedgerId: proto.Uint64(uint64(id.LedgerID)), EntryId: proto.Uint64(uint64(id.EntryID))}
}

func messageIDOf(d *pb.MessageIdData) MessageID {
	return MessageID{LedgerID: int64(d.GetLedgerId()), EntryID: int64(d.GetEntryId())}
}
