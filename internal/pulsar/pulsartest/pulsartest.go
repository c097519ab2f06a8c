// Package pulsartest is an in-memory pulsar.Backend for tests of the Pulsar
// front end and what is built on it: topics are slices of entries, cursors
// a mark-delete position and a set of individually acknowledged entries.
// Nothing is durable; it is never used outside tests.
package pulsartest

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	"quire/internal/pulsar"
)

// Backend is an in-memory pulsar.Backend. Set its fields before serving.
type Backend struct {
	// Partitions answers PARTITIONED_METADATA (absent: 0).
	Partitions map[string]int
	// Owner, when set, names the owner's URL for a topic ("" = this broker).
	Owner func(topic string) string
	// NoAutoCreate refuses topics not created with CreateTopic.
	NoAutoCreate bool
	// Deduplication turns producer deduplication on for every topic.
	Deduplication bool
	// EntriesPerLedger rolls a topic over to a new ledger id after this
	// many entries (0: never), so positions span ledgers as in a managed
	// ledger.
	EntriesPerLedger int

	mu     sync.Mutex
	topics map[string]*Topic
	// ledgerIDs hands out ledger ids across topics, as a cluster does, so
	// a topic opened again after Unload never reuses a position.
	ledgerIDs atomic.Int64
}

var _ pulsar.Backend = (*Backend)(nil)

// Lookup implements pulsar.Backend.
func (b *Backend) Lookup(_ context.Context, topic string) (pulsar.LookupResult, error) {
	if b.Owner != nil {
		return pulsar.LookupResult{OwnerURL: b.Owner(topic)}, nil
	}
	return pulsar.LookupResult{}, nil
}

// PartitionedMetadata implements pulsar.Backend.
func (b *Backend) PartitionedMetadata(_ context.Context, topic string) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.Partitions[topic], nil
}

// TopicsOfNamespace implements pulsar.Backend: the topics created so far
// under persistent://namespace/.
func (b *Backend) TopicsOfNamespace(_ context.Context, namespace string) ([]string, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	prefix := "persistent://" + namespace + "/"
	var out []string
	for name := range b.topics {
		if strings.HasPrefix(name, prefix) {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out, nil
}

// Topic implements pulsar.Backend.
func (b *Backend) Topic(_ context.Context, name string, create bool) (pulsar.Topic, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if t := b.topics[name]; t != nil {
		return t, nil
	}
	if !create || b.NoAutoCreate {
		return nil, fmt.Errorf("%w: %s", pulsar.ErrTopicNotFound, name)
	}
	return b.createLocked(name), nil
}

// CreateTopic creates a topic (or returns the existing one).
func (b *Backend) CreateTopic(name string) *Topic {
	b.mu.Lock()
	defer b.mu.Unlock()
	if t := b.topics[name]; t != nil {
		return t
	}
	return b.createLocked(name)
}

func (b *Backend) createLocked(name string) *Topic {
	if b.topics == nil {
		b.topics = make(map[string]*Topic)
	}
	t := &Topic{
		name:             name,
		dedup:            b.Deduplication,
		entriesPerLedger: b.EntriesPerLedger,
		ledgerIDs:        &b.ledgerIDs,
		ledger:           b.ledgerIDs.Add(1),
		lastSequence:     make(map[string]int64),
		cursors:          make(map[string]*Cursor),
		grew:             make(chan struct{}),
		done:             make(chan struct{}),
	}
	b.topics[name] = t
	return t
}

// Unload stops serving a topic, as a broker does when its bundle moves:
// the topic's Done closes and the next Topic call creates it anew, empty
// (nothing here is durable). It reports whether the topic existed.
func (b *Backend) Unload(name string) bool {
	b.mu.Lock()
	t := b.topics[name]
	delete(b.topics, name)
	b.mu.Unlock()
	if t == nil {
		return false
	}
	t.mu.Lock()
	close(t.done)
	t.mu.Unlock()
	return true
}

// Topic is one in-memory topic.
type Topic struct {
	name             string
	dedup            bool
	entriesPerLedger int

	mu           sync.Mutex
	entries      []pulsar.Entry // in position order
	ledgerIDs    *atomic.Int64
	ledger       int64
	inLedger     int
	lastSequence map[string]int64
	cursors      map[string]*Cursor
	// grew is closed (and replaced) on every append.
	grew chan struct{}
	// done is closed by Backend.Unload.
	done chan struct{}
	// terminated: Terminate was called; Append refuses from then on.
	terminated bool
}

var _ pulsar.Terminator = (*Topic)(nil)

// Terminated implements pulsar.Terminator.
func (t *Topic) Terminated() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.terminated
}

// Terminate implements pulsar.Terminator: appends are synchronous, so none
// is in flight.
func (t *Topic) Terminate(context.Context) (pulsar.MessageID, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.terminated = true
	return t.lastLocked(), nil
}

// Done implements pulsar.Topic.
func (t *Topic) Done() <-chan struct{} { return t.done }

var _ pulsar.Topic = (*Topic)(nil)

// Append implements pulsar.Topic: the entry is "durable" at once and done
// runs before Append returns.
func (t *Topic) Append(ctx context.Context, data []byte, info pulsar.AppendInfo, done func(pulsar.AppendResult)) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	t.mu.Lock()
	select {
	case <-t.done:
		// Unloaded: as a closed managed ledger, take nothing more.
		t.mu.Unlock()
		done(pulsar.AppendResult{Err: fmt.Errorf("%w: topic %s unloaded", pulsar.ErrServiceNotReady, t.name)})
		return nil
	default:
	}
	if t.terminated {
		t.mu.Unlock()
		done(pulsar.AppendResult{Err: fmt.Errorf("%w: topic %s", pulsar.ErrTopicTerminated, t.name)})
		return nil
	}
	if t.entriesPerLedger > 0 && t.inLedger == t.entriesPerLedger {
		t.ledger = t.ledgerIDs.Add(1)
		t.inLedger = 0
	}
	id := pulsar.MessageID{LedgerID: t.ledger, EntryID: int64(t.inLedger)}
	t.inLedger++
	t.entries = append(t.entries, pulsar.Entry{ID: id, Data: append([]byte(nil), data...)})
	if int64(info.HighestSequenceID) > t.lastSequenceLocked(info.ProducerName) {
		t.lastSequence[info.ProducerName] = int64(info.HighestSequenceID)
	}
	close(t.grew)
	t.grew = make(chan struct{})
	t.mu.Unlock()
	done(pulsar.AppendResult{ID: id})
	return nil
}

func (t *Topic) lastSequenceLocked(producer string) int64 {
	if s, ok := t.lastSequence[producer]; ok {
		return s
	}
	return -1
}

// Deduplication implements pulsar.Topic.
func (t *Topic) Deduplication() bool { return t.dedup }

// LastSequenceID implements pulsar.Topic.
func (t *Topic) LastSequenceID(producer string) int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.lastSequenceLocked(producer)
}

// LastMessageID implements pulsar.Topic.
func (t *Topic) LastMessageID() pulsar.MessageID {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.lastLocked()
}

func (t *Topic) lastLocked() pulsar.MessageID {
	if len(t.entries) == 0 {
		return pulsar.Earliest
	}
	return t.entries[len(t.entries)-1].ID
}

// Entries returns a copy of the topic's entries.
func (t *Topic) Entries() []pulsar.Entry {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]pulsar.Entry(nil), t.entries...)
}

// firstAtOrAfter is the index of the first entry at or after id.
func (t *Topic) firstAtOrAfter(id pulsar.MessageID) int {
	return sort.Search(len(t.entries), func(i int) bool { return !t.entries[i].ID.Less(id) })
}

// FindByPublishTime implements pulsar.Topic, by scanning the entries'
// metadata.
func (t *Topic) FindByPublishTime(_ context.Context, publishTimeMs uint64) (pulsar.MessageID, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, e := range t.entries {
		meta, _, err := pulsar.ParseEntry(e.Data)
		if err != nil {
			return pulsar.MessageID{}, fmt.Errorf("%w: entry %v: %v", pulsar.ErrPersistence, e.ID, err)
		}
		if meta.GetPublishTime() >= publishTimeMs {
			return e.ID, nil
		}
	}
	return pulsar.Latest, nil
}

// Read implements pulsar.Topic.
func (t *Topic) Read(ctx context.Context, from pulsar.MessageID, maxEntries int) ([]pulsar.Entry, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	i := t.firstAtOrAfter(from)
	j := min(len(t.entries), i+max(maxEntries, 0))
	return append([]pulsar.Entry(nil), t.entries[i:j]...), nil
}

// Wait implements pulsar.Topic.
func (t *Topic) Wait(after pulsar.MessageID) <-chan struct{} {
	t.mu.Lock()
	defer t.mu.Unlock()
	if after.Less(t.lastLocked()) {
		done := make(chan struct{})
		close(done)
		return done
	}
	select {
	case <-t.done:
		return t.done
	default:
	}
	return t.grew
}

// Subscription implements pulsar.Topic.
func (t *Topic) Subscription(_ context.Context, name string, durable bool, start pulsar.MessageID) (pulsar.Cursor, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if c := t.cursors[name]; c != nil {
		return c, nil
	}
	c := &Cursor{t: t, durable: durable, acked: make(map[pulsar.MessageID]bool)}
	switch {
	case start == pulsar.Latest, t.lastLocked().Less(start):
		c.markDelete = t.lastLocked()
	default:
		c.markDelete = start
	}
	t.cursors[name] = c
	return c, nil
}

// DeleteSubscription implements pulsar.Topic.
func (t *Topic) DeleteSubscription(_ context.Context, name string) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.cursors[name] == nil {
		return fmt.Errorf("%w: %s on %s", pulsar.ErrSubscriptionNotFound, name, t.name)
	}
	delete(t.cursors, name)
	return nil
}

// Cursor returns the named cursor, nil when none.
func (t *Topic) Cursor(name string) *Cursor {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.cursors[name]
}

// Cursor is one in-memory subscription cursor; it shares its topic's lock.
type Cursor struct {
	t          *Topic
	durable    bool
	markDelete pulsar.MessageID
	// acked holds the entries acknowledged individually after markDelete.
	acked map[pulsar.MessageID]bool
}

var _ pulsar.Cursor = (*Cursor)(nil)

// MarkDelete implements pulsar.Cursor.
func (c *Cursor) MarkDelete() pulsar.MessageID {
	c.t.mu.Lock()
	defer c.t.mu.Unlock()
	return c.markDelete
}

// AckedCount is how many entries are acknowledged individually beyond the
// mark-delete position (the ack holes' other side).
func (c *Cursor) AckedCount() int {
	c.t.mu.Lock()
	defer c.t.mu.Unlock()
	return len(c.acked)
}

// Ack implements pulsar.Cursor.
func (c *Cursor) Ack(_ context.Context, ids []pulsar.MessageID) error {
	c.t.mu.Lock()
	defer c.t.mu.Unlock()
	for _, id := range ids {
		if c.markDelete.Less(id) {
			c.acked[id] = true
		}
	}
	c.advanceLocked()
	return nil
}

// advanceLocked moves markDelete over the acknowledged entries after it.
func (c *Cursor) advanceLocked() {
	es := c.t.entries
	for i := c.t.firstAtOrAfter(pulsar.MessageID{LedgerID: c.markDelete.LedgerID, EntryID: c.markDelete.EntryID + 1}); i < len(es) && c.acked[es[i].ID]; i++ {
		c.markDelete = es[i].ID
		delete(c.acked, es[i].ID)
	}
	for id := range c.acked {
		if !c.markDelete.Less(id) {
			delete(c.acked, id)
		}
	}
}

// AckCumulative implements pulsar.Cursor.
func (c *Cursor) AckCumulative(_ context.Context, id pulsar.MessageID) error {
	c.t.mu.Lock()
	defer c.t.mu.Unlock()
	if c.markDelete.Less(id) {
		if last := c.t.lastLocked(); last.Less(id) {
			id = last
		}
		c.markDelete = id
	}
	c.advanceLocked()
	return nil
}

// IsAcked implements pulsar.Cursor.
func (c *Cursor) IsAcked(id pulsar.MessageID) bool {
	c.t.mu.Lock()
	defer c.t.mu.Unlock()
	return !c.markDelete.Less(id) || c.acked[id]
}

// Reset implements pulsar.Cursor.
func (c *Cursor) Reset(_ context.Context, to pulsar.MessageID) error {
	c.t.mu.Lock()
	defer c.t.mu.Unlock()
	clear(c.acked)
	i := c.t.firstAtOrAfter(to)
	if i == 0 {
		c.markDelete = pulsar.Earliest
	} else {
		c.markDelete = c.t.entries[i-1].ID
	}
	return nil
}
