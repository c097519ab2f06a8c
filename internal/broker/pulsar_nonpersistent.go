package broker

// Non-persistent Pulsar topics (non-persistent://tenant/ns/topic): messages
// held in memory only, for the subscriptions present when they arrive.
//
// As in Pulsar, nothing is stored: an append is acknowledged at once, a
// message published while the topic has no subscription is dropped, and a
// subscription sees only what arrives after it was created. Pulsar hands
// each message straight to the connected consumers and drops it for those
// without permits; here a message waits in the topic's memory for the
// subscriptions that have not acknowledged it, within memTopicMaxEntries and
// memTopicMaxBytes: past either bound the oldest messages are dropped, also
// for subscriptions that have not read them. So a slow or absent consumer
// loses messages (as in Pulsar), and the memory a topic holds is bounded.
//
// Deviations from Pulsar:
//   - ownership: a non-persistent topic belongs to the bundle of its
//     persistent namesake (persistent://tenant/ns/topic), since bundles hash
//     persistent names; Pulsar hashes the full name. Any consistent choice
//     serves: the owner is still found by LOOKUP.
//   - no partitioned non-persistent topics, no deduplication, no admin API
//     (stats, listing) and no metrics for them; GET_TOPICS_OF_NAMESPACE
//     lists none. SEEK by publish time is refused (NotAllowed); seeking to a
//     message id moves within what is still in memory.
//   - message ids are (0, n), n counting the topic's messages since it was
//     opened on this broker: a takeover starts again from (0, 0), with
//     nothing carried over (there is nothing stored to carry).

import (
	"context"
	"fmt"
	"math"
	"strings"
	"sync"

	"quire/internal/catalog"
	"quire/internal/pulsar"
)

const (
	nonPersistentScheme = "non-persistent://"
	// memTopicMaxEntries and memTopicMaxBytes bound what one non-persistent
	// topic holds for its subscriptions.
	memTopicMaxEntries = 10_000
	memTopicMaxBytes   = 16 << 20
)

// persistentNamesake maps non-persistent://x to persistent://x; it reports
// whether topic was non-persistent. Other names are returned unchanged.
func persistentNamesake(topic string) (string, bool) {
	if rest, ok := strings.CutPrefix(topic, nonPersistentScheme); ok {
		return "persistent://" + rest, true
	}
	return topic, false
}

// memTopic returns the non-persistent topic name, opened on first use when
// this broker owns its bundle and create is set (auto-creation allowing).
func (pb *pulsarBackend) memTopic(ctx context.Context, name string, create bool) (*pulsarMemTopic, error) {
	b := pb.b
	namesake, _ := persistentNamesake(name)
	ns, _, err := parsePulsarTopic(namesake)
	if err != nil {
		return nil, err
	}
	if !b.cluster.Owns(namesake) {
		owner, err := pb.owner(ctx, namesake)
		if err != nil {
			return nil, err
		}
		if owner.ID != b.ID() {
			return nil, fmt.Errorf("%w: %s is served by broker %d: look it up again", pulsar.ErrServiceNotReady, name, owner.ID)
		}
	}
	pb.mu.Lock()
	t := pb.memTopics[name]
	pb.mu.Unlock()
	if t != nil {
		return t, nil
	}
	if !create || !b.cfg.AutoCreateTopics {
		return nil, fmt.Errorf("%w: %s", pulsar.ErrTopicNotFound, name)
	}
	if _, err := b.admin.GetPolicies(ctx, ns); err != nil {
		return nil, pulsarErr(err, pulsar.ErrMetadata)
	}
	bundle, err := b.cluster.BundleOf(namesake)
	if err != nil {
		return nil, pulsarErr(err, pulsar.ErrServiceNotReady)
	}
	pb.mu.Lock()
	defer pb.mu.Unlock()
	if t := pb.memTopics[name]; t != nil {
		return t, nil
	}
	if b.ctx.Err() != nil {
		return nil, fmt.Errorf("%w: broker closing", pulsar.ErrServiceNotReady)
	}
	t = &pulsarMemTopic{name: name, bundle: bundle, done: make(chan struct{}), grew: make(chan struct{}),
		subs: map[string]*memCursor{}}
	pb.memTopics[name] = t
	b.log.Info("non-persistent pulsar topic opened", "topic", name)
	return t, nil
}

// dropMemTopicsWhere closes the non-persistent topics match picks: their
// messages are gone, their clients are closed and look the topic up again.
func (pb *pulsarBackend) dropMemTopicsWhere(match func(*pulsarMemTopic) bool) {
	pb.mu.Lock()
	var drop []*pulsarMemTopic
	for name, t := range pb.memTopics {
		if match(t) {
			delete(pb.memTopics, name)
			drop = append(drop, t)
		}
	}
	pb.mu.Unlock()
	for _, t := range drop {
		t.close()
	}
}

// pulsarMemTopic is one non-persistent topic served here.
type pulsarMemTopic struct {
	name      string
	bundle    catalog.Bundle
	done      chan struct{}
	closeOnce sync.Once

	mu sync.Mutex
	// next is the entry id the next message gets.
	next int64
	// entries are the messages some subscription may still read, in id
	// order, without gaps: entries[i] has id first+i.
	// Invariant: first + len(entries) == next.
	entries []pulsar.Entry
	first   int64
	bytes   int
	grew    chan struct{} // closed and replaced on each append
	subs    map[string]*memCursor
}

var _ pulsar.Topic = (*pulsarMemTopic)(nil)

func memID(entryID int64) pulsar.MessageID { return pulsar.MessageID{LedgerID: 0, EntryID: entryID} }

func (t *pulsarMemTopic) close() { t.closeOnce.Do(func() { close(t.done) }) }

// Append implements pulsar.Topic: acknowledged at once, kept only when a
// subscription is there to read it.
func (t *pulsarMemTopic) Append(ctx context.Context, data []byte, info pulsar.AppendInfo, done func(pulsar.AppendResult)) error {
	select {
	case <-t.done:
		done(pulsar.AppendResult{Err: fmt.Errorf("%w: %s is no longer served here", pulsar.ErrServiceNotReady, t.name)})
		return nil
	default:
	}
	t.mu.Lock()
	id := memID(t.next)
	t.next++
	if len(t.subs) > 0 {
		t.entries = append(t.entries, pulsar.Entry{ID: id, Data: data})
		t.bytes += len(data)
	} else {
		t.first = t.next // dropped: nobody to read it
	}
	t.trimLocked()
	close(t.grew)
	t.grew = make(chan struct{})
	t.mu.Unlock()
	done(pulsar.AppendResult{ID: id})
	return nil
}

// trimLocked drops the messages every subscription has acknowledged, then
// the oldest ones past the bounds; a subscription that had not acknowledged
// a dropped message skips it.
func (t *pulsarMemTopic) trimLocked() {
	floor := t.next // the first entry some subscription still needs
	for _, c := range t.subs {
		floor = min(floor, c.markDelete+1)
	}
	drop := int(min(max(floor-t.first, 0), int64(len(t.entries))))
	for _, e := range t.entries[:drop] {
		t.bytes -= len(e.Data)
	}
	for len(t.entries)-drop > memTopicMaxEntries || (drop < len(t.entries) && t.bytes > memTopicMaxBytes) {
		t.bytes -= len(t.entries[drop].Data)
		drop++
	}
	if drop == 0 {
		return
	}
	t.entries = append(t.entries[:0:0], t.entries[drop:]...)
	t.first += int64(drop)
	for _, c := range t.subs {
		c.skipToLocked(t.first - 1)
	}
}

// Deduplication implements pulsar.Topic: never, as in Pulsar.
func (t *pulsarMemTopic) Deduplication() bool { return false }

// LastSequenceID implements pulsar.Topic.
func (t *pulsarMemTopic) LastSequenceID(string) int64 { return -1 }

// LastMessageID implements pulsar.Topic.
func (t *pulsarMemTopic) LastMessageID() pulsar.MessageID {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.next == 0 {
		return pulsar.Earliest
	}
	return memID(t.next - 1)
}

// FindByPublishTime implements pulsar.Topic: refused, as Pulsar refuses
// seeking non-persistent topics.
func (t *pulsarMemTopic) FindByPublishTime(context.Context, uint64) (pulsar.MessageID, error) {
	return pulsar.MessageID{}, fmt.Errorf("%w: %s: seek by time on a non-persistent topic", pulsar.ErrNotAllowed, t.name)
}

// Read implements pulsar.Topic: what is still in memory from `from` on.
func (t *pulsarMemTopic) Read(ctx context.Context, from pulsar.MessageID, maxEntries int) ([]pulsar.Entry, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if from.LedgerID > 0 {
		return nil, nil // Latest, or an id of another life of the topic
	}
	i := max(from.EntryID-t.first, 0)
	if from.LedgerID < 0 {
		i = 0
	}
	if i >= int64(len(t.entries)) {
		return nil, nil
	}
	n := min(int64(maxEntries), int64(len(t.entries))-i)
	return append([]pulsar.Entry(nil), t.entries[i:i+n]...), nil
}

// Wait implements pulsar.Topic.
func (t *pulsarMemTopic) Wait(after pulsar.MessageID) <-chan struct{} {
	select {
	case <-t.done:
		return closedChan
	default:
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.next > 0 && after.Less(memID(t.next-1)) {
		return closedChan
	}
	return t.grew
}

// Done implements pulsar.Topic.
func (t *pulsarMemTopic) Done() <-chan struct{} { return t.done }

// Subscription implements pulsar.Topic. Durable or not, a non-persistent
// subscription lives as long as the topic does here. Earliest means the
// oldest message still in memory.
func (t *pulsarMemTopic) Subscription(ctx context.Context, name string, durable bool, start pulsar.MessageID) (pulsar.Cursor, error) {
	if name == "" {
		return nil, fmt.Errorf("%w: empty subscription name", pulsar.ErrNotAllowed)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if c := t.subs[name]; c != nil {
		return c, nil
	}
	c := &memCursor{t: t, acked: map[int64]bool{}}
	switch {
	case start == pulsar.Earliest:
		c.markDelete = t.first - 1
	case start.LedgerID == 0:
		c.markDelete = min(max(start.EntryID, t.first-1), t.next-1)
	default: // Latest, or an id from another life of the topic
		c.markDelete = t.next - 1
	}
	t.subs[name] = c
	return c, nil
}

// DeleteSubscription implements pulsar.Topic.
func (t *pulsarMemTopic) DeleteSubscription(ctx context.Context, name string) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.subs[name] == nil {
		return fmt.Errorf("%w: %s on %s", pulsar.ErrSubscriptionNotFound, name, t.name)
	}
	delete(t.subs, name)
	t.trimLocked()
	return nil
}

// memCursor is a non-persistent subscription's acknowledgement state, under
// its topic's mutex.
type memCursor struct {
	t *pulsarMemTopic
	// markDelete: every entry id at or below it is acknowledged (or was
	// dropped). acked holds the ids above it acknowledged individually.
	markDelete int64
	acked      map[int64]bool
}

var _ pulsar.Cursor = (*memCursor)(nil)

// skipToLocked moves the mark-delete position to at least id.
func (c *memCursor) skipToLocked(id int64) {
	if id > c.markDelete {
		c.markDelete = id
	}
	for c.acked[c.markDelete+1] {
		c.markDelete++
	}
	for a := range c.acked {
		if a <= c.markDelete {
			delete(c.acked, a)
		}
	}
}

// MarkDelete implements pulsar.Cursor.
func (c *memCursor) MarkDelete() pulsar.MessageID {
	c.t.mu.Lock()
	defer c.t.mu.Unlock()
	if c.markDelete < 0 {
		return pulsar.Earliest
	}
	return memID(c.markDelete)
}

// Ack implements pulsar.Cursor.
func (c *memCursor) Ack(ctx context.Context, ids []pulsar.MessageID) error {
	c.t.mu.Lock()
	defer c.t.mu.Unlock()
	for _, id := range ids {
		if id.LedgerID == 0 && id.EntryID > c.markDelete && id.EntryID < c.t.next {
			c.acked[id.EntryID] = true
		}
	}
	c.skipToLocked(c.markDelete)
	c.t.trimLocked()
	return nil
}

// AckCumulative implements pulsar.Cursor.
func (c *memCursor) AckCumulative(ctx context.Context, id pulsar.MessageID) error {
	c.t.mu.Lock()
	defer c.t.mu.Unlock()
	if id.LedgerID < 0 {
		return nil
	}
	to := c.t.next - 1
	if id.LedgerID == 0 {
		to = min(id.EntryID, to)
	}
	c.skipToLocked(to)
	c.t.trimLocked()
	return nil
}

// IsAcked implements pulsar.Cursor.
func (c *memCursor) IsAcked(id pulsar.MessageID) bool {
	c.t.mu.Lock()
	defer c.t.mu.Unlock()
	return id.LedgerID < 0 || (id.LedgerID == 0 && (id.EntryID <= c.markDelete || c.acked[id.EntryID]))
}

// Reset implements pulsar.Cursor: within what is still in memory.
func (c *memCursor) Reset(ctx context.Context, to pulsar.MessageID) error {
	c.t.mu.Lock()
	defer c.t.mu.Unlock()
	md := c.t.next - 1 // Latest, or an id of another life of the topic
	switch {
	case to.LedgerID < 0:
		md = c.t.first - 1
	case to.LedgerID == 0 && to.EntryID < math.MaxInt64:
		md = min(max(to.EntryID-1, c.t.first-1), c.t.next-1)
	}
	c.markDelete = md
	clear(c.acked)
	return nil
}
