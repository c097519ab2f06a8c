package pulsar

import (
	"context"
	"fmt"
	"math"
)

// This file is the contract between the Pulsar front end (this package:
// frames, commands, connections, and the dispatch of a subscription's
// messages to its consumers) and what stores the data (the broker: topic
// ownership, managed ledgers and their cursors). It is shaped after the
// managed ledger's client API (internal/mlog/mlogclient): an entry is one
// producer batch, exactly as the producer framed it; a position is a
// (ledger id, entry id) pair; a subscription is a cursor with a mark-delete
// position and a set of individually acknowledged entries.
//
// Errors a Backend returns are mapped once to Pulsar's ServerError codes
// (errors.go): return (or wrap) ErrTopicNotFound, ErrSubscriptionNotFound,
// ErrServiceNotReady, ErrPersistence, ErrNotAllowed, ErrTooManyRequests,
// ErrInvalidTopicName, ErrTopicTerminated; anything else is UnknownError.

// MessageID is the position of one entry (one producer batch) in a topic:
// Pulsar's (ledgerId, entryId). Positions order by ledger, then entry.
type MessageID struct {
	LedgerID int64
	EntryID  int64
}

// Earliest is before every entry: a cursor there has acknowledged nothing.
// Latest is after every entry, present and future. They are what the Go and
// Java clients send as the "earliest" and "latest" message ids.
var (
	Earliest = MessageID{LedgerID: -1, EntryID: -1}
	Latest   = MessageID{LedgerID: math.MaxInt64, EntryID: math.MaxInt64}
)

// Less orders positions.
func (m MessageID) Less(o MessageID) bool {
	if m.LedgerID != o.LedgerID {
		return m.LedgerID < o.LedgerID
	}
	return m.EntryID < o.EntryID
}

func (m MessageID) String() string { return fmt.Sprintf("%d:%d", m.LedgerID, m.EntryID) }

// Entry is one stored entry: the bytes a producer sent after its SEND
// command (magic 0x0e01, CRC32C, metadata size, MessageMetadata, payload),
// unchanged, so that a MESSAGE frame forwards them without re-encoding.
type Entry struct {
	ID   MessageID
	Data []byte
}

// AppendInfo describes an entry being appended, for deduplication: the
// backend keeps, per producer name, the highest sequence id it has made
// durable (Pulsar keeps it in the cursor's snapshot; a managed ledger can
// also rebuild it from the log's tail after a takeover).
type AppendInfo struct {
	ProducerName      string
	SequenceID        uint64 // the first message's
	HighestSequenceID uint64 // the last message's; == SequenceID unbatched
	NumMessages       int32
}

// AppendResult answers one Append.
type AppendResult struct {
	ID  MessageID
	Err error
}

// LookupResult answers a topic lookup.
type LookupResult struct {
	// OwnerURL is the pulsar:// service URL of the broker that owns the
	// topic; empty means this broker.
	OwnerURL string
	// OwnerTLSURL is the owner's pulsar+ssl:// URL, "" when it has no TLS
	// listener (or is this broker).
	OwnerTLSURL string
}

// Backend is what the front end serves topics from.
type Backend interface {
	// Lookup says which broker owns topic (its bundle). The front end
	// answers LOOKUP authoritatively: with its own URL when OwnerURL is
	// empty, else a redirect to OwnerURL.
	Lookup(ctx context.Context, topic string) (LookupResult, error)
	// PartitionedMetadata returns the partition count of a partitioned
	// topic, 0 for a non-partitioned (or not yet created) one.
	PartitionedMetadata(ctx context.Context, topic string) (int, error)
	// TopicsOfNamespace lists a namespace's persistent topics (the
	// partitions of partitioned ones by their partition names), sorted: what
	// pattern (regex) consumers subscribe from.
	TopicsOfNamespace(ctx context.Context, namespace string) ([]string, error)
	// Topic returns a topic this broker serves, creating it when create is
	// set and policy allows: ErrTopicNotFound otherwise, ErrServiceNotReady
	// when another broker owns it.
	Topic(ctx context.Context, name string, create bool) (Topic, error)
}

// Topic is one topic (a managed ledger) this broker serves.
type Topic interface {
	// Append submits one entry and returns once it is submitted; done gets
	// the result exactly once, when the entry is durable or failed, and must
	// not block. Entries submitted one after another (from one goroutine)
	// are written, and answered, in that order. At the bound of appends in
	// flight Append waits for room (backpressure) until ctx ends, and then
	// returns ctx's error without submitting (done is not called).
	Append(ctx context.Context, data []byte, info AppendInfo, done func(AppendResult)) error
	// Deduplication reports whether the topic's policy deduplicates
	// messages by producer name and sequence id.
	Deduplication() bool
	// LastSequenceID is the highest sequence id made durable for the
	// producer name, -1 when none.
	LastSequenceID(producerName string) int64
	// LastMessageID is the position of the last durable entry, Earliest
	// when the topic has none.
	LastMessageID() MessageID
	// FindByPublishTime returns the first entry whose publish time (the
	// producer's, in milliseconds since the epoch) is at or after
	// publishTimeMs, or Latest when there is none (SEEK by time).
	FindByPublishTime(ctx context.Context, publishTimeMs uint64) (MessageID, error)
	// Read returns up to maxEntries durable entries from the first one at or
	// after from (fewer, or none, at the end of the topic).
	Read(ctx context.Context, from MessageID, maxEntries int) ([]Entry, error)
	// Wait returns a channel closed once an entry after `after` is durable
	// or the topic stops being served here.
	Wait(after MessageID) <-chan struct{}
	// Subscription opens (creating when absent) the named cursor. A new
	// durable cursor starts at start: Earliest, Latest, or after the given
	// position. A non-durable cursor (a reader's) is never persisted and is
	// forgotten by DeleteSubscription once its last consumer leaves.
	Subscription(ctx context.Context, name string, durable bool, start MessageID) (Cursor, error)
	// DeleteSubscription removes a cursor (UNSUBSCRIBE):
	// ErrSubscriptionNotFound when there is none.
	DeleteSubscription(ctx context.Context, name string) error
	// Done is closed once the topic stops being served here (its bundle
	// was unloaded or taken over, or its log failed). The front end then
	// forgets it and closes its producers and consumers (CLOSE_PRODUCER,
	// CLOSE_CONSUMER), which look the topic up again and reconnect; the
	// next Backend.Topic for the name opens it afresh.
	Done() <-chan struct{}
}

// Cursor is one subscription's acknowledgement state: a mark-delete position
// (everything at or before it is acknowledged) and the entries acknowledged
// individually after it. The front end owns delivery (who was sent what);
// the cursor only records what is done.
type Cursor interface {
	// MarkDelete is the mark-delete position (Earliest when nothing is
	// acknowledged; never after the topic's last entry).
	MarkDelete() MessageID
	// Ack acknowledges entries individually; the mark-delete position moves
	// over every run of acknowledged entries that follows it.
	Ack(ctx context.Context, ids []MessageID) error
	// AckCumulative acknowledges every entry up to and including id.
	AckCumulative(ctx context.Context, id MessageID) error
	// IsAcked reports whether the entry is acknowledged.
	IsAcked(id MessageID) bool
	// Reset moves the cursor so that the next entry to deliver is the first
	// at or after to (SEEK): everything before it counts as acknowledged,
	// nothing after it does.
	Reset(ctx context.Context, to MessageID) error
}

// QuotaBlocker is what a Topic implements when its backlog quota can refuse
// producers (Pulsar's producer_exception policy): ProducerBlocked returns
// ErrProducerBlockedQuota while the backlog is over the quota, and PRODUCER
// is then refused with ProducerBlockedQuotaExceededException (the client
// retries with backoff, as against Pulsar).
type QuotaBlocker interface {
	ProducerBlocked(ctx context.Context) error
}
