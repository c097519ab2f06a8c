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
// Consumers: Exclusive has one; Failover sends to one active consumer
// (Pulsar's choice: the consumers ordered by priority level, then name; of
// those at the best level, the one at the topic's partition index modulo
// their number, so a partitioned topic's partitions spread over them; the
// first for a topic that is not a partition), tells every consumer whether
// it is the active one (ACTIVE_CONSUMER_CHANGE) and, when the active one
// changes, puts back what the others hold so the new one gets it; Shared
// sends round robin among the consumers with permits at the best priority
// level that has any (a lower level gets entries only while every consumer
// above it is out of permits, as in Pulsar); Key_Shared sends each entry to
// the consumer its sticky key belongs to (keyshared.go: the key, its hash
// slot, the AUTO_SPLIT ring and STICKY ranges). A consumer's permits drop
// by the messages in an entry (a batch counts all its messages, and may
// take them below zero, as in Pulsar).
//
// Key_Shared keeps each key's order. An entry whose key's consumer cannot
// take it now (no permits, at its bound of unacked messages, no consumer
// owns the slot) is held back in the redelivery set, and so is every later
// entry of that key, while entries of other keys go on; held entries count
// against a look-ahead bound (keySharedLookAhead) past which nothing new is
// read. When a consumer joins, the slots it takes over may still have
// messages pending on their previous owner: the slot "drains" there, and
// its new owner gets nothing of it until those are acknowledged (or put
// back). That is Pulsar 4's rule (PIP-379, draining hashes), which replaced
// the rule of Pulsar 2 and 3 ("recently joined consumers": a new consumer
// got nothing read after it joined until the mark-delete position passed
// that point, so one message never acknowledged stalled it for good); both
// keep a key's messages in order across the change of owner, this one per
// key. allowOutOfOrderDelivery in KeySharedMeta turns draining off.
//
// Delayed delivery: on Shared and Key_Shared an entry whose
// deliver_at_time (MessageMetadata) is in the future waits in an in-memory
// tracker, bounded by maxDelayedEntries (at the bound nothing new is read:
// backpressure), and is delivered once due, ahead of newer entries;
// Exclusive and Failover deliver at once, as in Pulsar. A batch's time is
// its MessageMetadata's. Time is the broker's clock against the producer's
// stamp; an entry is due once the millisecond its deliver_at_time names has
// passed (the stamp is the instant the producer asked for, truncated to
// milliseconds, so delivery is never before that instant).
//
// Bounds of unacknowledged messages: a consumer at Config's
// MaxUnackedPerConsumer gets nothing until it acknowledges; a subscription
// at maxUnackedPerSubscription (4 times the per-consumer bound, Pulsar's
// defaults' ratio, 200,000 by default) is blocked, for every consumer,
// until acknowledgements bring it to half, as in Pulsar
// (blockedSubscriptionOnUnackedMsgs). DispatchStats exposes both.
//
// A consumer whose connection's outbound queue is full holds up its
// subscription's dispatcher until the queue drains (its permits bound how
// much can be in that queue); a later slice can skip it instead.
//
// Redelivery (a nack, a consumer leaving, REDELIVER_UNACKNOWLEDGED) puts
// an entry back, counted in its redelivery count, which MESSAGE carries
// (what the clients' dead-letter and retry topics need: producing to
// "<topic>-<subscription>-DLQ" and "-RETRY", with deliver_at_time on the
// latter, is the client's). Entries put back go out before any new one.
// Counts are kept for every subscription type (Pulsar keeps them only for
// Shared and Key_Shared) and only in memory (Pulsar's too). Exclusive and
// Failover redeliver just the entries put back, where Pulsar rewinds to the
// mark-delete position and sends everything after it again.

import (
	"cmp"
	"container/heap"
	"context"
	"slices"
	"sort"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"

	pb "quire/internal/pulsar/pulsarpb"
)

const (
	// keySharedLookAhead bounds the entries a Key_Shared subscription holds
	// back (waiting for their key's consumer) before it stops reading new
	// ones: how far the other consumers may run ahead of a slow one
	// (Pulsar's keySharedLookAheadMsgInReplayThresholdPerSubscription is
	// 20,000 messages).
	keySharedLookAhead = 10_000
	// maxDelayedEntries bounds the entries a subscription holds for their
	// deliver_at_time; at the bound it reads nothing new until some are due.
	maxDelayedEntries = 100_000
)

// consumer is one consumer attached to a subscription through a connection.
type consumer struct {
	id       uint64
	name     string
	priority int32
	conn     *conn
	sub      *subscription
	// metadata is what the client attached to its SUBSCRIBE (the consumer's
	// properties), shown in the admin stats; never changed.
	metadata map[string]string
	// permits and unacked are guarded by sub.mu. unacked counts the
	// messages of the entries pending on this consumer; at
	// Server.maxUnackedPerConsumer the consumer gets nothing more until it
	// acknowledges (Pulsar's maxUnackedMessagesPerConsumer).
	permits int64
	unacked int64
	// toldActive is what ACTIVE_CONSUMER_CHANGE last told this Failover
	// consumer (nil: nothing yet); guarded by sub.mu.
	toldActive *bool
	// Key_Shared, set by keySelector.add under sub.mu: the slots a STICKY
	// consumer declared, and an AUTO_SPLIT consumer's index among those
	// with its name.
	hashRanges []hashRange
	nameIndex  int
	// toldEnd: REACHED_END_OF_TOPIC was sent (terminate.go); guarded by
	// sub.mu.
	toldEnd bool
}

// sent is an entry delivered and not yet acknowledged.
type sent struct {
	c        *consumer
	messages int32
	hash     keyHash // Key_Shared's slot of the entry; 0 otherwise
}

// slotHolder is the consumer holding a Key_Shared slot's pending entries.
type slotHolder struct {
	c       *consumer
	entries int
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
	// keys maps a Key_Shared subscription's slots to its consumers; nil for
	// other types and while no consumer is attached.
	keys *keySelector
	// lastRead is the last position the dispatcher read past.
	// Invariant: every entry after lastRead is neither pending, nor
	// waiting for redelivery, nor delayed.
	lastRead MessageID
	// pending maps each entry sent and not acknowledged to its consumer.
	pending map[MessageID]sent
	// replay holds the entries waiting for redelivery, and on Key_Shared
	// those held back for their key, each with its slot (0 when not known
	// yet: the slot is learnt when the entry is read).
	replay map[MessageID]keyHash
	// replayHashes counts the entries in replay per known slot: a new entry
	// of a slot found there waits behind them.
	replayHashes map[keyHash]int
	// pendingHashes is, per Key_Shared slot, the consumer its pending
	// entries are on; kept unless allowOutOfOrderDelivery.
	// Invariant: without allowOutOfOrderDelivery every pending entry of a
	// slot is on one consumer (a slot is delivered only to its holder, or
	// to anyone once nothing of it is pending).
	pendingHashes map[keyHash]slotHolder
	// delayed holds the entries waiting for their deliver_at_time.
	delayed delayedTracker
	// redeliveries counts, per entry not yet acknowledged, how often it
	// was redelivered.
	redeliveries map[MessageID]uint32
	// batchAcks holds, per batch entry acknowledged in part (an ACK whose
	// message id carries an ack_set), the bits of the messages still
	// unacknowledged (1: not acknowledged, Pulsar's ack_set); a MESSAGE
	// carrying the entry again carries them, and the client skips the
	// others. In memory only: lost when the topic moves or its front-end
	// subscription is dropped (a reader's, without consumers).
	batchAcks map[MessageID][]int64
	// unacked counts the messages pending on every consumer;
	// blockedOnUnacked is set at Server.maxUnackedPerSubscription and
	// cleared at half of it.
	unacked          int64
	blockedOnUnacked bool
	// redelivered counts the messages put back for redelivery (stats).
	redelivered uint64
	// generation changes on every seek, so that a round that read before
	// the seek drops what it read.
	generation uint64
	// stop ends the dispatcher; nil while none runs.
	stop context.CancelFunc
}

func newSubscription(s *Server, ts *topicState, name string, durable bool, subType pb.CommandSubscribe_SubType, cursor Cursor) *subscription {
	return &subscription{
		s:             s,
		ts:            ts,
		name:          name,
		durable:       durable,
		cursor:        cursor,
		wake:          make(chan struct{}, 1),
		subType:       subType,
		lastRead:      cursor.MarkDelete(),
		pending:       make(map[MessageID]sent),
		replay:        make(map[MessageID]keyHash),
		replayHashes:  make(map[keyHash]int),
		pendingHashes: make(map[keyHash]slotHolder),
		delayed:       newDelayedTracker(),
		redeliveries:  make(map[MessageID]uint32),
		batchAcks:     make(map[MessageID][]int64),
	}
}

// maxUnackedPerSubscription bounds the messages delivered on one
// subscription and not yet acknowledged: Pulsar's
// maxUnackedMessagesPerSubscription, whose default (200,000) is 4 times
// the per-consumer one. Config has no field of its own for it yet.
func (s *Server) maxUnackedPerSubscription() int64 {
	return 4 * int64(s.maxUnackedPerConsumer)
}

func (sub *subscription) signal() {
	select {
	case sub.wake <- struct{}{}:
	default:
	}
}

// addConsumer attaches c, starting the dispatcher for the first consumer.
// keyShared is the consumer's KeySharedMeta (nil: AUTO_SPLIT, ordered).
func (sub *subscription) addConsumer(c *consumer, subType pb.CommandSubscribe_SubType, keyShared *pb.KeySharedMeta) error {
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
	if subType == pb.CommandSubscribe_Key_Shared {
		if sub.keys == nil {
			sub.keys = newKeySelector(keySharedPolicyOf(keyShared))
			sub.keys.halves = sub.s.keySharedHalves
		}
		if err := sub.keys.add(c, keyShared); err != nil {
			if len(sub.consumers) == 0 {
				sub.keys = nil
			}
			return err
		}
	}
	sub.subType = subType
	sub.consumers = append(sub.consumers, c)
	if sub.stop == nil {
		ctx, cancel := context.WithCancel(sub.s.ctx)
		if !sub.s.goDispatch(func() { sub.run(ctx) }) {
			cancel()
			sub.consumers = sub.consumers[:len(sub.consumers)-1]
			if sub.keys != nil {
				sub.keys.remove(c)
				if len(sub.consumers) == 0 {
					sub.keys = nil
				}
			}
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
func (sub *subscription) removeConsumer(c *consumer) { sub.detachConsumer(c, false) }

// detachConsumer removes c; a reader's (non-durable) subscription left
// without consumers is dropped unless seeking: a SEEK closes the consumers
// so that they reconnect, and, as in Pulsar, their subscription (its reset
// cursor) must still be there when they do, rather than be created afresh
// at the start id the reconnecting reader names.
func (sub *subscription) detachConsumer(c *consumer, seeking bool) {
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
	if sub.keys != nil {
		sub.keys.remove(c)
		if last {
			sub.keys = nil
		}
	}
	if last && sub.stop != nil {
		sub.stop()
		sub.stop = nil
	}
	sub.mu.Unlock()
	sub.signal()
	sub.notifyActive()
	if last && !sub.durable && !seeking {
		sub.ts.dropSubscription(sub)
		if err := sub.ts.topic.DeleteSubscription(context.Background(), sub.name); err != nil {
			sub.s.log.Debug("dropping a non-durable subscription", "topic", sub.ts.name, "subscription", sub.name, "err", err)
		}
	}
}

// putBackLocked moves a pending entry to the redelivery set.
func (sub *subscription) putBackLocked(id MessageID) {
	p := sub.pending[id]
	sub.unpendLocked(id)
	sub.addReplayLocked(id, p.hash)
	sub.redeliveries[id]++
	sub.redelivered += uint64(max(p.messages, 1))
}

// ackedLocked forgets an acknowledged entry.
func (sub *subscription) ackedLocked(id MessageID) {
	sub.unpendLocked(id)
	sub.removeReplayLocked(id)
	sub.delayed.remove(id)
	delete(sub.redeliveries, id)
	delete(sub.batchAcks, id)
}

// ackBatchIndexesLocked records an ack_set for a batch entry: the messages
// whose bits are clear are acknowledged. It reports whether none is left
// (the whole entry is acknowledged).
func (sub *subscription) ackBatchIndexesLocked(id MessageID, ackSet []int64) bool {
	remaining := slices.Clone(ackSet)
	if old, ok := sub.batchAcks[id]; ok {
		for i := range remaining {
			if i < len(old) {
				remaining[i] &= old[i]
			}
		}
	}
	for _, w := range remaining {
		if w != 0 {
			sub.batchAcks[id] = remaining
			return false
		}
	}
	delete(sub.batchAcks, id)
	return true
}

// addReplayLocked puts an entry in the redelivery set (or records the slot
// of one there).
func (sub *subscription) addReplayLocked(id MessageID, h keyHash) {
	if old, ok := sub.replay[id]; ok {
		if old == h || h == 0 {
			return
		}
		sub.forgetReplayHashLocked(old)
	}
	sub.replay[id] = h
	if h != 0 {
		sub.replayHashes[h]++
	}
}

func (sub *subscription) removeReplayLocked(id MessageID) {
	if h, ok := sub.replay[id]; ok {
		delete(sub.replay, id)
		sub.forgetReplayHashLocked(h)
	}
}

func (sub *subscription) forgetReplayHashLocked(h keyHash) {
	if h == 0 {
		return
	}
	if n := sub.replayHashes[h] - 1; n > 0 {
		sub.replayHashes[h] = n
	} else {
		delete(sub.replayHashes, h)
	}
}

// unpendLocked forgets that an entry is pending on its consumer.
func (sub *subscription) unpendLocked(id MessageID) {
	p, ok := sub.pending[id]
	if !ok {
		return
	}
	p.c.unacked -= int64(p.messages)
	sub.unacked -= int64(p.messages)
	sub.updateBlockedLocked()
	delete(sub.pending, id)
	if h, ok := sub.pendingHashes[p.hash]; ok && h.c == p.c {
		if h.entries--; h.entries > 0 {
			sub.pendingHashes[p.hash] = h
		} else {
			delete(sub.pendingHashes, p.hash)
		}
	}
}

// updateBlockedLocked blocks the subscription at its bound of unacked
// messages and unblocks it at half, as Pulsar does.
func (sub *subscription) updateBlockedLocked() {
	limit := sub.s.maxUnackedPerSubscription()
	switch {
	case sub.unacked >= limit:
		sub.blockedOnUnacked = true
	case sub.unacked <= limit/2:
		sub.blockedOnUnacked = false
	}
}

// clearPendingLocked is resetDeliveryLocked under the name server.go's
// SeekSubscription calls: a seek forgets every pending, held and delayed
// entry, not only the pending ones.
func (sub *subscription) clearPendingLocked() { sub.resetDeliveryLocked() }

// resetDeliveryLocked forgets every pending, held and delayed entry and
// every redelivery count (a seek).
func (sub *subscription) resetDeliveryLocked() {
	for _, c := range sub.consumers {
		c.unacked = 0
	}
	clear(sub.pending)
	clear(sub.pendingHashes)
	clear(sub.replay)
	clear(sub.replayHashes)
	clear(sub.redeliveries)
	clear(sub.batchAcks)
	sub.delayed.reset()
	sub.unacked = 0
	sub.updateBlockedLocked()
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
		// Round robin within a priority level, best level first.
		slices.SortStableFunc(out, func(a, b *consumer) int { return cmp.Compare(a.priority, b.priority) })
		return out
	case pb.CommandSubscribe_Key_Shared:
		return sub.consumers
	case pb.CommandSubscribe_Failover:
		return []*consumer{sub.activeLocked()}
	default:
		return sub.consumers[:1]
	}
}

// activeLocked is Failover's active consumer: of the consumers ordered by
// priority level then name (then joining order), those at the best level,
// the one at the partition index modulo their number.
func (sub *subscription) activeLocked() *consumer {
	ordered := slices.Clone(sub.consumers)
	slices.SortStableFunc(ordered, func(a, b *consumer) int {
		return cmp.Or(cmp.Compare(a.priority, b.priority), cmp.Compare(a.name, b.name))
	})
	best := 1
	for best < len(ordered) && ordered[best].priority == ordered[0].priority {
		best++
	}
	if p := sub.ts.partition; p > 0 {
		return ordered[p%best]
	}
	return ordered[0]
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
	return c.permits > 0 && c.unacked < int64(sub.s.maxUnackedPerConsumer) && !sub.blockedOnUnacked
}

// pickLocked chooses the consumer for the next entry, nil when none has
// permits (every type but Key_Shared).
func (sub *subscription) pickLocked() *consumer {
	for _, c := range sub.eligibleLocked() {
		if sub.canReceiveLocked(c) {
			if sub.subType == pb.CommandSubscribe_Shared {
				sub.next = (slices.Index(sub.consumers, c) + 1) % len(sub.consumers)
			}
			return c
		}
	}
	return nil
}

// replayToReadLocked lists the entries of the redelivery set to read in
// this round, in position order: the first max of them, or on Key_Shared
// the first max that may go out now (a slot's entries are taken in order,
// up to its first that must wait).
func (sub *subscription) replayToReadLocked(maxEntries int) []MessageID {
	if len(sub.replay) == 0 {
		return nil
	}
	ids := make([]MessageID, 0, len(sub.replay))
	for id := range sub.replay {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i].Less(ids[j]) })
	if sub.keys == nil {
		return ids[:min(len(ids), maxEntries)]
	}
	return sub.keySharedReplayLocked(ids, maxEntries)
}

// mayReadNewLocked reports whether the dispatcher may read entries after
// lastRead: not at the bound of delayed entries, nor on Key_Shared at the
// bound of held ones.
func (sub *subscription) mayReadNewLocked() bool {
	if sub.delayed.len() >= maxDelayedEntries {
		return false
	}
	return sub.keys == nil || len(sub.replay) < keySharedLookAhead
}

// releaseDueLocked moves the delayed entries due at nowMs to the
// redelivery set.
func (sub *subscription) releaseDueLocked(nowMs int64) {
	for _, d := range sub.delayed.popDue(nowMs) {
		sub.addReplayLocked(d.id, d.hash)
	}
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
		sub.notifyEndOfTopic()
		sub.mu.Lock()
		sub.releaseDueLocked(time.Now().UnixMilli())
		dueMs := sub.delayed.next()
		if !sub.hasPermitsLocked() {
			sub.mu.Unlock()
			sub.idle(ctx, nil, dueMs)
			continue
		}
		generation := sub.generation
		replayIDs := sub.replayToReadLocked(batch)
		readNew := len(replayIDs) == 0 && sub.mayReadNewLocked()
		from := sub.lastRead
		sub.mu.Unlock()

		var entries []Entry
		var err error
		replaying := len(replayIDs) > 0
		switch {
		case replaying:
			entries, err = sub.readEach(ctx, replayIDs)
		case readNew:
			entries, err = sub.ts.topic.Read(ctx, MessageID{LedgerID: from.LedgerID, EntryID: from.EntryID + 1}, batch)
			if err == nil && len(entries) == 0 {
				// Nothing to read yet: wait for an entry, or for a change
				// (a seek, a redelivery) that gives other work.
				sub.idle(ctx, sub.ts.topic.Wait(from), dueMs)
				continue
			}
		default:
			// Everything waiting is held back (Key_Shared keys whose
			// consumer cannot take them, at the bound of held or delayed
			// entries): wait for an ack, permits, a consumer or a due time.
			sub.idle(ctx, nil, dueMs)
			continue
		}
		if err != nil {
			if ctx.Err() == nil {
				sub.s.log.Warn("dispatcher read failed", "topic", sub.ts.name, "subscription", sub.name, "err", err)
				// A failing read is retried when something changes.
				sub.idle(ctx, sub.ts.topic.Wait(from), dueMs)
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

// idle waits for a signal, for grew to close (nil: not that), for the
// delayed entry due at dueMs (0: none) or for ctx.
func (sub *subscription) idle(ctx context.Context, grew <-chan struct{}, dueMs int64) {
	var due <-chan time.Time
	if dueMs > 0 {
		t := time.NewTimer(time.Until(time.UnixMilli(dueMs)))
		defer t.Stop()
		due = t.C
	}
	select {
	case <-sub.wake:
	case <-grew:
	case <-due:
	case <-ctx.Done():
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
	if !replaying && sub.keys == nil && len(sub.replay) > 0 {
		// Entries came back for redelivery while this round read new ones
		// (a consumer left, a nack): they go first, so that an Exclusive or
		// Failover consumer sees the topic in order. The new entries are
		// read again later. (Key_Shared holds back just the new entries of
		// the keys waiting there.)
		return nil
	}
	nowMs := time.Now().UnixMilli()
	delayable := sub.subType == pb.CommandSubscribe_Shared || sub.subType == pb.CommandSubscribe_Key_Shared
	var held map[keyHash]bool
	if sub.keys != nil {
		held = map[keyHash]bool{}
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
		meta := parseEntryMeta(e.Data, sub.keys != nil)
		// Due once the millisecond deliver_at_time names has passed: the
		// producer truncated the instant it asked for to that millisecond.
		if dueMs := meta.deliverAt + 1; !replaying && delayable && dueMs > nowMs {
			if sub.delayed.len() >= maxDelayedEntries {
				break // the rest is read again once some are due
			}
			sub.delayed.add(e.ID, dueMs, meta.hash)
			sub.lastRead = e.ID
			continue
		}
		var c *consumer
		if sub.keys != nil {
			c = sub.keyConsumerLocked(meta.hash, !replaying, held)
			if c == nil {
				// Held back, and every later entry of its key with it.
				if !replaying && len(sub.replay) >= keySharedLookAhead {
					break // the rest is read again later
				}
				held[meta.hash] = true
				sub.addReplayLocked(e.ID, meta.hash)
				if !replaying {
					sub.lastRead = e.ID
				}
				continue
			}
		} else if c = sub.pickLocked(); c == nil {
			break // the rest stays for the next round
		}
		n := meta.messages
		c.permits -= int64(n)
		c.unacked += int64(n)
		sub.unacked += int64(n)
		sub.updateBlockedLocked()
		if replaying {
			sub.removeReplayLocked(e.ID)
		} else {
			sub.lastRead = e.ID
		}
		sub.pending[e.ID] = sent{c: c, messages: n, hash: meta.hash}
		sub.countDelivered(n, len(e.Data), sub.redeliveries[e.ID] > 0)
		if sub.keys != nil && !sub.keys.policy.allowOutOfOrder {
			holder := sub.pendingHashes[meta.hash]
			holder.c = c
			holder.entries++
			sub.pendingHashes[meta.hash] = holder
		}
		out = append(out, delivery{c: c, frame: AppendPayloadCommand(nil, &pb.BaseCommand{
			Type: pb.BaseCommand_MESSAGE.Enum(),
			Message: &pb.CommandMessage{
				ConsumerId:      proto.Uint64(c.id),
				MessageId:       messageIDData(e.ID),
				RedeliveryCount: proto.Uint32(sub.redeliveries[e.ID]),
				AckSet:          sub.batchAcks[e.ID],
			},
		}, e.Data)})
	}
	return out
}

// messagesIn is the number of messages an entry holds (1 when its
// metadata does not decode: the consumer sees it as corrupt and says so).
func messagesIn(data []byte) int32 {
	return parseEntryMeta(data, false).messages
}

func messageIDData(id MessageID) *pb.MessageIdData {
	return &pb.MessageIdData{LedgerId: proto.Uint64(uint64(id.LedgerID)), EntryId: proto.Uint64(uint64(id.EntryID))}
}

func messageIDOf(d *pb.MessageIdData) MessageID {
	return MessageID{LedgerID: int64(d.GetLedgerId()), EntryID: int64(d.GetEntryId())}
}

// delayedTracker holds entries until their deliver_at_time: a min-heap of
// due times with lazy deletion (an entry removed early stays in the heap
// until it reaches the top), and the set of entries it holds.
type delayedTracker struct {
	entries map[MessageID]delayedEntry
	due     delayedHeap
}

type delayedEntry struct {
	id   MessageID
	atMs int64
	hash keyHash
}

func newDelayedTracker() delayedTracker {
	return delayedTracker{entries: make(map[MessageID]delayedEntry)}
}

func (d *delayedTracker) len() int { return len(d.entries) }

func (d *delayedTracker) add(id MessageID, atMs int64, h keyHash) {
	e := delayedEntry{id: id, atMs: atMs, hash: h}
	d.entries[id] = e
	heap.Push(&d.due, e)
}

func (d *delayedTracker) remove(id MessageID) { delete(d.entries, id) }

func (d *delayedTracker) reset() {
	clear(d.entries)
	d.due = d.due[:0]
}

// dropStale pops the heap's top while it is no longer held.
func (d *delayedTracker) dropStale() {
	for len(d.due) > 0 {
		if e, ok := d.entries[d.due[0].id]; ok && e.atMs == d.due[0].atMs {
			return
		}
		heap.Pop(&d.due)
	}
}

// next is the earliest due time held (milliseconds), 0 when none.
func (d *delayedTracker) next() int64 {
	d.dropStale()
	if len(d.due) == 0 {
		return 0
	}
	return d.due[0].atMs
}

// popDue removes and returns the entries due at nowMs.
func (d *delayedTracker) popDue(nowMs int64) []delayedEntry {
	var out []delayedEntry
	for d.dropStale(); len(d.due) > 0 && d.due[0].atMs <= nowMs; d.dropStale() {
		e := heap.Pop(&d.due).(delayedEntry)
		delete(d.entries, e.id)
		out = append(out, e)
	}
	return out
}

type delayedHeap []delayedEntry

func (h delayedHeap) Len() int { return len(h) }
func (h delayedHeap) Less(i, j int) bool {
	if h[i].atMs != h[j].atMs {
		return h[i].atMs < h[j].atMs
	}
	return h[i].id.Less(h[j].id)
}
func (h delayedHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *delayedHeap) Push(x any)   { *h = append(*h, x.(delayedEntry)) }
func (h *delayedHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	return e
}

// DispatchStats is a snapshot of one subscription's dispatch state, for
// the broker's stats and metrics (Pulsar's names in parentheses).
type DispatchStats struct {
	// Type is the subscription type: Exclusive, Shared, Failover or
	// Key_Shared (type).
	Type string
	// KeySharedMode is AUTO_SPLIT or STICKY on Key_Shared, else empty
	// (keySharedMode); AllowOutOfOrderDelivery likewise
	// (allowOutOfOrderDelivery).
	KeySharedMode           string
	AllowOutOfOrderDelivery bool
	// UnackedMessages counts the messages delivered and not acknowledged
	// (unackedMessages).
	UnackedMessages int64
	// BlockedOnUnackedMessages: the subscription reached
	// MaxUnackedMessages and delivers nothing until acknowledgements bring
	// it to half (blockedSubscriptionOnUnackedMsgs).
	BlockedOnUnackedMessages bool
	MaxUnackedMessages       int64
	// WaitingForDelivery counts the entries put back for redelivery and, on
	// Key_Shared, those held back for their key.
	WaitingForDelivery int
	// DelayedEntries counts the entries held until their deliver_at_time
	// (msgDelayed counts messages; this counts entries).
	DelayedEntries int
	// RedeliveredMessages counts the messages put back for redelivery
	// since the subscription was opened here (msgRateRedeliver's counter).
	RedeliveredMessages uint64
	// ActiveConsumer names the consumer that receives on Exclusive and
	// Failover (activeConsumerName), empty on the other types.
	ActiveConsumer string
	Consumers      []ConsumerDispatchStats
}

// ConsumerDispatchStats is one consumer's part of DispatchStats.
type ConsumerDispatchStats struct {
	ID   uint64
	Name string // consumerName
	// AvailablePermits (availablePermits) may be negative: a batch takes
	// all its messages' permits.
	AvailablePermits int64
	UnackedMessages  int64 // unackedMessages
	// BlockedOnUnackedMessages: at Config.MaxUnackedPerConsumer
	// (blockedConsumerOnUnackedMsgs).
	BlockedOnUnackedMessages bool
	// KeyHashRanges are the Key_Shared slots the consumer owns, inclusive
	// [start, end] pairs in slot order (keyHashRanges).
	KeyHashRanges [][2]int32
}

// DispatchStats returns the dispatch state of a subscription of a topic
// served here (the topic named as its clients name it); false when the
// topic or subscription is not open here.
func (s *Server) DispatchStats(topic, subscription string) (DispatchStats, bool) {
	s.topicsMu.Lock()
	ts := s.topics[topic]
	s.topicsMu.Unlock()
	if ts == nil {
		return DispatchStats{}, false
	}
	ts.mu.Lock()
	sub := ts.subs[subscription]
	ts.mu.Unlock()
	if sub == nil {
		return DispatchStats{}, false
	}
	return sub.stats(), true
}

func (sub *subscription) stats() DispatchStats {
	sub.mu.Lock()
	defer sub.mu.Unlock()
	return sub.dispatchStatsLocked()
}

// dispatchStatsLocked is DispatchStats for a caller holding sub.mu (such
// as TopicStats, which could take the blocked state, the delayed entries
// and the key hash ranges from it).
func (sub *subscription) dispatchStatsLocked() DispatchStats {
	st := DispatchStats{
		Type:                     sub.subType.String(),
		UnackedMessages:          sub.unacked,
		BlockedOnUnackedMessages: sub.blockedOnUnacked,
		MaxUnackedMessages:       sub.s.maxUnackedPerSubscription(),
		WaitingForDelivery:       len(sub.replay),
		DelayedEntries:           sub.delayed.len(),
		RedeliveredMessages:      sub.redelivered,
	}
	if len(sub.consumers) > 0 {
		switch sub.subType {
		case pb.CommandSubscribe_Failover:
			st.ActiveConsumer = sub.activeLocked().name
		case pb.CommandSubscribe_Exclusive:
			st.ActiveConsumer = sub.consumers[0].name
		}
	}
	if sub.keys != nil {
		st.KeySharedMode = sub.keys.policy.mode.String()
		st.AllowOutOfOrderDelivery = sub.keys.policy.allowOutOfOrder
	}
	for _, c := range sub.consumers {
		cs := ConsumerDispatchStats{
			ID:                       c.id,
			Name:                     c.name,
			AvailablePermits:         c.permits,
			UnackedMessages:          c.unacked,
			BlockedOnUnackedMessages: c.unacked >= int64(sub.s.maxUnackedPerConsumer),
		}
		if sub.keys != nil {
			for _, r := range sub.keys.rangesOf(c) {
				cs.KeyHashRanges = append(cs.KeyHashRanges, [2]int32{int32(r.start), int32(r.end)})
			}
		}
		st.Consumers = append(st.Consumers, cs)
	}
	return st
}
