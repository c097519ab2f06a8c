// Package partition is a Kafka partition as a broker serves it on top of a
// log: dense offsets assigned by the broker, a persistent offset index,
// idempotent-producer deduplication, the high watermark and long-poll
// waits. It is written against the Log interface, the seam between the
// partition and its storage: ledger mode implements it with a managed
// ledger (package broker adapts mlogclient), ISR mode with a broker-local
// replicated log. This package must not import either storage.
package partition

import (
	"context"
	"errors"
	"fmt"
)

// Pos names one entry of a log: entry Entry of segment Segment. In ledger
// mode a segment is a ledger of the managed ledger; a log with one segment
// may use Segment 0 throughout. Positions grow in log order: by Segment,
// then by Entry.
type Pos struct {
	Segment int64
	Entry   int64
}

func (p Pos) String() string { return fmt.Sprintf("%d:%d", p.Segment, p.Entry) }

// Less orders positions in log order.
func (p Pos) Less(q Pos) bool {
	return p.Segment < q.Segment || p.Segment == q.Segment && p.Entry < q.Entry
}

// Segment is one non-empty segment of a log, oldest first.
type Segment struct {
	ID      int64
	Entries int64
	Bytes   int64 // payload bytes of its entries (0: unknown)
	// Compacted: compaction rewrote the segment, so its batches may have
	// gaps between their offsets.
	Compacted bool
}

// Entry is one entry read from a log.
type Entry struct {
	Pos     Pos
	Payload []byte
}

// ErrLogClosed: the log stopped (closed, or fenced by a new owner).
var ErrLogClosed = errors.New("partition: log closed")

// Log is the storage a partition sits on. One writer: its owner.
type Log interface {
	// Admit waits until the log has room for one more append — its bound
	// of appends queued and in flight — or ctx ends (ctx's error), or the
	// log has stopped (ErrLogClosed or the log's own error). Waiting here
	// is backpressure, not a failure. The Permit must be used exactly once.
	Admit(ctx context.Context) (Permit, error)
	// Read returns up to max entries at or after from, only acknowledged
	// ones, across segments.
	Read(ctx context.Context, from Pos, max int) ([]Entry, error)
	// Segments lists the non-empty segments, oldest first.
	Segments(ctx context.Context) ([]Segment, error)
	// Done is closed when the log has stopped; no further acks arrive.
	Done() <-chan struct{}
	Close(ctx context.Context) error
}

// Rewriter is a Log whose segments compaction may rewrite (ledger mode's
// managed ledger). Rewrites counts the rewrites so far: positions read
// while it keeps one value name the same entries; a rewrite renumbers the
// entries of the segments it replaces, so positions read before it must be
// located again.
type Rewriter interface {
	Rewrites() uint64
}

// ReadAheadForgetter is a Log that reads ahead of sequential readers
// (ledger mode's managed ledger). ForgetReaders drops what it fetched
// ahead and the readers it follows: the partition's scan of its tail at
// load reads like a reader behind the tail, and stops.
type ReadAheadForgetter interface {
	ForgetReaders()
}

// Permit is room for one append, taken by Log.Admit. Admission is apart
// from submission so that a partition waits for room without holding its
// lock, then assigns offsets and submits under it without waiting.
type Permit interface {
	// Append submits an entry and returns at once; entries submitted one
	// after another (through any permits of one log) are stored and
	// acknowledged in that order. The ack arrives on the channel; the
	// room is given back when it does.
	Append(payload []byte) <-chan AppendAck
	// Release gives the room back without appending.
	Release()
}

// AppendAck answers one Append: where the entry is stored, or why not.
type AppendAck struct {
	Pos Pos
	Err error
}
