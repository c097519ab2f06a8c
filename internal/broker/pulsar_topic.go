package broker

// One Pulsar topic served here: a managed ledger as a pulsar.Topic.
//
// Entries are the producers' batches exactly as the Pulsar client framed
// them (magic, CRC32C, MessageMetadata, payload), one ledger entry each, so
// a MESSAGE frame forwards them unchanged. A message id is the entry's
// (ledger id, entry id).
//
// Subscriptions: a durable one is a managed-ledger cursor (mark-delete
// position plus individually acknowledged ranges, persisted by the managed
// ledger and restored by the next owner); a non-durable one (a reader's) is
// the same cursor state machine kept in memory only
// (mlogclient.NonDurableCursor), gone when the topic is unloaded. SEEK
// resets either: the mark-delete position moves back or forward and the
// individual acknowledgements are dropped.
//
// Deduplication (when the namespace enables it): the highest sequence id
// made durable per producer name is kept in memory, updated as appends are
// acknowledged, and rebuilt when the topic is loaded by reading the last
// DefaultPulsarScanBack entries of the log (their MessageMetadata carries
// the producer name and sequence ids) — the same choice as Kafka
// partitions' producer table, rather than Pulsar's snapshot in a cursor's
// properties, which the managed-ledger cursor does not keep. What follows:
//   - a producer whose last entry lies further back than the scan at a
//     takeover is not known to the new owner: its next PRODUCER is answered
//     with last sequence id -1, so a resend of an entry that old is not
//     recognised as a duplicate (a producer's unacknowledged sends are its
//     most recent ones, so this takes more than the scan's worth of other
//     producers' entries written after them);
//   - for a batch read back from the log the highest sequence id is the
//     metadata's highest_sequence_id, else sequence_id + messages - 1: a
//     lower bound when the client numbered its messages with gaps, so a
//     rebuilt entry never makes a new message look like a duplicate.
//
// New entries wake dispatchers through Wait: a channel closed (and
// replaced) whenever an append is acknowledged, so they never poll.

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"quire/internal/catalog"
	"quire/internal/mlog"
	"quire/internal/mlog/mlogclient"
	"quire/internal/pulsar"
)

// pulsarTopic is a Pulsar topic being loaded or served by this broker.
type pulsarTopic struct {
	pb      *pulsarBackend
	name    string
	storage string
	bundle  catalog.Bundle
	ready   chan struct{} // closed when the load finished (ml or err set)
	err     error
	ml      *mlogclient.ManagedLedger
	// dedup, ackQuorum and quota are the namespace policy's when loaded.
	dedup     bool
	ackQuorum int
	quota     mlog.BacklogQuota

	mu sync.Mutex
	// last is the last durable entry; hasLast is false while there is none.
	last    mlog.Position
	hasLast bool
	// grew is closed and replaced when an append is acknowledged.
	grew chan struct{}
	// sequences: the highest durable sequence id per producer name
	// (deduplication only).
	sequences map[string]int64
	// nonDurable holds the readers' cursors by subscription name.
	nonDurable map[string]*mlogclient.NonDurableCursor
	// Termination (pulsar_terminate.go): terminating refuses appends;
	// terminated is set once recorded, terminatedAt is then the last
	// entry's id. appending counts the appends in flight; drained, when
	// set, is closed when appending drops to 0.
	terminating, terminated bool
	terminatedAt            pulsar.MessageID
	appending               int
	drained                 chan struct{}
	// added counts the entries appended since the topic was loaded here
	// (internalStats' entriesAddedCounter).
	added atomic.Int64
}

var _ pulsar.Topic = (*pulsarTopic)(nil)

func toPosition(id pulsar.MessageID) mlog.Position {
	return mlog.Position{LedgerID: id.LedgerID, EntryID: id.EntryID}
}

func toMessageID(p mlog.Position) pulsar.MessageID {
	return pulsar.MessageID{LedgerID: p.LedgerID, EntryID: p.EntryID}
}

// init takes over what the loaded managed ledger knows: its last entry
// and, with deduplication, the producers' sequence ids from its tail.
func (t *pulsarTopic) init(ctx context.Context, ml *mlogclient.ManagedLedger, pol catalog.Policies) error {
	t.ml, t.dedup, t.ackQuorum = ml, pol.Deduplication, pol.Persistence.AckQuorum
	t.quota = pulsarSettings(pol).Quota
	t.grew = make(chan struct{})
	t.sequences = map[string]int64{}
	t.nonDurable = map[string]*mlogclient.NonDurableCursor{}
	if err := t.loadTermination(ctx); err != nil {
		return err
	}
	ls, err := ml.Ledgers(ctx)
	if err != nil {
		return err
	}
	for i := len(ls) - 1; i >= 0; i-- {
		if ls[i].Entries > 0 {
			t.last, t.hasLast = mlog.Position{LedgerID: ls[i].ID, EntryID: ls[i].Entries - 1}, true
			break
		}
	}
	if !t.dedup {
		return nil
	}
	from, ok := tailFrom(ls, DefaultPulsarScanBack)
	for ok {
		es, err := ml.Read(ctx, from, 256)
		if err != nil {
			return fmt.Errorf("scan the tail for sequence ids: %w", err)
		}
		if len(es) == 0 {
			break
		}
		for _, e := range es {
			md, _, err := pulsar.ParseEntry(e.Payload)
			if err != nil {
				t.pb.b.log.Warn("skipping an entry that is not a Pulsar batch", "topic", t.name, "pos", e.Pos, "err", err)
				continue
			}
			highest := md.GetSequenceId() + uint64(max(md.GetNumMessagesInBatch(), 1)) - 1
			highest = max(highest, md.GetHighestSequenceId())
			if name := md.GetProducerName(); name != "" && highest <= math.MaxInt64 {
				t.sequences[name] = max(t.sequences[name], int64(highest))
			}
		}
		last := es[len(es)-1].Pos
		from = mlog.Position{LedgerID: last.LedgerID, EntryID: last.EntryID + 1}
	}
	return nil
}

// tailFrom is the position n entries before the end of the ledgers.
func tailFrom(ls []mlog.LedgerInfo, n int64) (mlog.Position, bool) {
	for i := len(ls) - 1; i >= 0; i-- {
		if ls[i].Entries >= n || i == 0 {
			return mlog.Position{LedgerID: ls[i].ID, EntryID: max(0, ls[i].Entries-n)}, true
		}
		n -= ls[i].Entries
	}
	return mlog.Position{}, false
}

// Append implements pulsar.Topic.
func (t *pulsarTopic) Append(ctx context.Context, data []byte, info pulsar.AppendInfo, done func(pulsar.AppendResult)) error {
	b := t.pb.b
	if why, _ := b.storage.refusal(t.ackQuorum); why != nil {
		// The bookies cannot take the write (storage.go): refuse at once
		// rather than at the client's send timeout.
		b.produceRefused.Add(1)
		done(pulsar.AppendResult{Err: fmt.Errorf("%w: %v", pulsar.ErrPersistence, why)})
		return nil
	}
	if err := t.admitAppend(); err != nil {
		done(pulsar.AppendResult{Err: err})
		return nil
	}
	permit, err := t.ml.Admit(ctx)
	if err != nil {
		t.appendDone()
		return pulsarErr(err, pulsar.ErrPersistence)
	}
	permit.AppendAsync(data, func(a mlog.AppendAck) {
		if a.Err != nil {
			t.appendDone()
			done(pulsar.AppendResult{Err: pulsarErr(a.Err, pulsar.ErrPersistence)})
			return
		}
		t.appended(a.Pos, info)
		t.appendDone()
		done(pulsar.AppendResult{ID: toMessageID(a.Pos)})
	})
	return nil
}

// appended records a durable entry and wakes whoever waits for one. On the
// managed ledger's goroutine: it must not block.
func (t *pulsarTopic) appended(p mlog.Position, info pulsar.AppendInfo) {
	t.added.Add(1)
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.hasLast || t.last.Less(p) {
		t.last, t.hasLast = p, true
	}
	if t.dedup && info.ProducerName != "" && info.HighestSequenceID <= math.MaxInt64 {
		if s, ok := t.sequences[info.ProducerName]; !ok || s < int64(info.HighestSequenceID) {
			t.sequences[info.ProducerName] = int64(info.HighestSequenceID)
		}
	}
	close(t.grew)
	t.grew = make(chan struct{})
}

// Deduplication implements pulsar.Topic.
func (t *pulsarTopic) Deduplication() bool { return t.dedup }

// LastSequenceID implements pulsar.Topic.
func (t *pulsarTopic) LastSequenceID(producerName string) int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	if s, ok := t.sequences[producerName]; ok {
		return s
	}
	return -1
}

// LastMessageID implements pulsar.Topic.
func (t *pulsarTopic) LastMessageID() pulsar.MessageID {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.hasLast {
		return pulsar.Earliest
	}
	return toMessageID(t.last)
}

// FindByPublishTime implements pulsar.Topic: a binary search over the
// entries by their producers' publish time, reading one entry per step (as
// Pulsar's message finder does, it takes publish times to grow along the
// log).
func (t *pulsarTopic) FindByPublishTime(ctx context.Context, publishTimeMs uint64) (pulsar.MessageID, error) {
	ls, err := t.ml.Ledgers(ctx)
	if err != nil {
		return pulsar.MessageID{}, pulsarErr(err, pulsar.ErrPersistence)
	}
	var total int64
	for _, l := range ls {
		total += l.Entries
	}
	at := func(i int64) mlog.Position {
		for _, l := range ls {
			if i < l.Entries {
				return mlog.Position{LedgerID: l.ID, EntryID: i}
			}
			i -= l.Entries
		}
		return mlog.Position{LedgerID: math.MaxInt64, EntryID: math.MaxInt64}
	}
	lo, hi := int64(0), total
	for lo < hi {
		mid := lo + (hi-lo)/2
		p := at(mid)
		es, err := t.ml.Read(ctx, p, 1)
		if err != nil {
			return pulsar.MessageID{}, pulsarErr(err, pulsar.ErrPersistence)
		}
		if len(es) == 0 || es[0].Pos != p {
			hi = mid // trimmed meanwhile: search before it
			continue
		}
		md, _, err := pulsar.ParseEntry(es[0].Payload)
		if err != nil {
			return pulsar.MessageID{}, fmt.Errorf("%w: entry %s: %v", pulsar.ErrPersistence, p, err)
		}
		if md.GetPublishTime() >= publishTimeMs {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	if lo == total {
		return pulsar.Latest, nil
	}
	return toMessageID(at(lo)), nil
}

// Read implements pulsar.Topic.
func (t *pulsarTopic) Read(ctx context.Context, from pulsar.MessageID, maxEntries int) ([]pulsar.Entry, error) {
	es, err := t.ml.Read(ctx, toPosition(from), maxEntries)
	if err != nil {
		return nil, pulsarErr(err, pulsar.ErrPersistence)
	}
	out := make([]pulsar.Entry, len(es))
	for i, e := range es {
		out[i] = pulsar.Entry{ID: toMessageID(e.Pos), Data: e.Payload}
	}
	return out, nil
}

// closedChan is always closed.
var closedChan = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()

// Wait implements pulsar.Topic.
func (t *pulsarTopic) Wait(after pulsar.MessageID) <-chan struct{} {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.hasLast && toPosition(after).Less(t.last) {
		return closedChan
	}
	select {
	case <-t.ml.Done():
		return closedChan
	default:
	}
	return t.grew
}

// Done implements pulsar.Topic: closed once the managed ledger stopped
// (closed on release or shutdown, or fenced by a new owner).
func (t *pulsarTopic) Done() <-chan struct{} { return t.ml.Done() }

// Subscription implements pulsar.Topic. Earliest and Latest map to
// mark-delete positions held within the topic (before its first entry,
// at its last).
func (t *pulsarTopic) Subscription(ctx context.Context, name string, durable bool, start pulsar.MessageID) (pulsar.Cursor, error) {
	if name == "" || strings.Contains(name, "/") || len(name) > mlog.MaxCursorNameLen {
		return nil, fmt.Errorf("%w: subscription name %q: want 1..%d bytes without '/'", pulsar.ErrNotAllowed, name, mlog.MaxCursorNameLen)
	}
	md := toPosition(start)
	if !durable {
		t.mu.Lock()
		c := t.nonDurable[name]
		t.mu.Unlock()
		if c != nil {
			return &pulsarCursor{t: t, c: c}, nil
		}
		c, err := t.ml.OpenNonDurableCursor(ctx, name, md)
		if err != nil {
			return nil, pulsarErr(err, pulsar.ErrPersistence)
		}
		t.mu.Lock()
		defer t.mu.Unlock()
		if prev := t.nonDurable[name]; prev != nil {
			return &pulsarCursor{t: t, c: prev}, nil
		}
		t.nonDurable[name] = c
		return &pulsarCursor{t: t, c: c}, nil
	}
	c, err := t.ml.OpenCursorAt(ctx, name, md)
	if err != nil {
		return nil, pulsarErr(err, pulsar.ErrPersistence)
	}
	return &pulsarCursor{t: t, c: c}, nil
}

// DeleteSubscription implements pulsar.Topic.
func (t *pulsarTopic) DeleteSubscription(ctx context.Context, name string) error {
	t.mu.Lock()
	_, nonDurable := t.nonDurable[name]
	delete(t.nonDurable, name)
	t.mu.Unlock()
	if nonDurable {
		return nil
	}
	if err := t.ml.DeleteCursor(ctx, name); err != nil {
		return pulsarErr(err, pulsar.ErrPersistence)
	}
	return nil
}

// cursor is what a durable (mlogclient.Cursor) and a non-durable
// (mlogclient.NonDurableCursor) cursor have in common.
type cursor interface {
	MarkDelete(ctx context.Context) (mlog.Position, error)
	AckAll(ctx context.Context, ps []mlog.Position) error
	AckCumulative(ctx context.Context, p mlog.Position) error
	IsAcked(ctx context.Context, p mlog.Position) (bool, error)
	Reset(ctx context.Context, markDelete mlog.Position) error
}

// pulsarCursor is a subscription's cursor as a pulsar.Cursor.
type pulsarCursor struct {
	t *pulsarTopic
	c cursor
}

// cursorQueryTimeout bounds the cursor questions of the pulsar.Cursor
// contract that carry no context: each is one short step of the topic's
// goroutine.
const cursorQueryTimeout = 10 * time.Second

func (c *pulsarCursor) queryContext() (context.Context, context.CancelFunc) {
	return context.WithTimeout(c.t.pb.b.ctx, cursorQueryTimeout)
}

// MarkDelete implements pulsar.Cursor (Earliest when the topic is gone).
func (c *pulsarCursor) MarkDelete() pulsar.MessageID {
	ctx, cancel := c.queryContext()
	defer cancel()
	md, err := c.c.MarkDelete(ctx)
	if err != nil {
		return pulsar.Earliest
	}
	return toMessageID(md)
}

// Ack implements pulsar.Cursor.
func (c *pulsarCursor) Ack(ctx context.Context, ids []pulsar.MessageID) error {
	ps := make([]mlog.Position, len(ids))
	for i, id := range ids {
		ps[i] = toPosition(id)
	}
	return pulsarErr(c.c.AckAll(ctx, ps), pulsar.ErrPersistence)
}

// AckCumulative implements pulsar.Cursor: an id past the last entry
// acknowledges everything there is.
func (c *pulsarCursor) AckCumulative(ctx context.Context, id pulsar.MessageID) error {
	p := toPosition(id)
	c.t.mu.Lock()
	if !c.t.hasLast {
		c.t.mu.Unlock()
		return nil
	}
	if c.t.last.Less(p) {
		p = c.t.last
	}
	c.t.mu.Unlock()
	err := c.c.AckCumulative(ctx, p)
	if errors.Is(err, mlog.ErrNoSuchEntry) {
		return nil // trimmed: acknowledged already
	}
	return pulsarErr(err, pulsar.ErrPersistence)
}

// IsAcked implements pulsar.Cursor.
func (c *pulsarCursor) IsAcked(id pulsar.MessageID) bool {
	ctx, cancel := c.queryContext()
	defer cancel()
	acked, err := c.c.IsAcked(ctx, toPosition(id))
	return err == nil && acked
}

// Reset implements pulsar.Cursor: the next entry to deliver is the first
// at or after to, so the mark-delete position goes just before it.
func (c *pulsarCursor) Reset(ctx context.Context, to pulsar.MessageID) error {
	md := toPosition(to)
	if md.EntryID > math.MinInt64 {
		md.EntryID--
	}
	return pulsarErr(c.c.Reset(ctx, md), pulsar.ErrPersistence)
}

var _ pulsar.QuotaBlocker = (*pulsarTopic)(nil)

// ProducerBlocked implements pulsar.QuotaBlocker: with the producer_exception
// policy, a subscription's backlog over the size quota refuses producers
// (the managed ledger refuses their writes meanwhile).
func (t *pulsarTopic) ProducerBlocked(ctx context.Context) error {
	if t.quota.Policy != mlog.ProducerException || t.quota.LimitSize <= 0 {
		return nil
	}
	st, err := t.ml.Stats(ctx)
	if err != nil {
		return nil // the write path decides
	}
	for _, cs := range st.Cursors {
		if cs.BacklogBytes > t.quota.LimitSize {
			return fmt.Errorf("%w: %s: subscription %s has %d bytes of backlog, quota %d", pulsar.ErrProducerBlockedQuota,
				t.name, cs.Name, cs.BacklogBytes, t.quota.LimitSize)
		}
	}
	return nil
}
