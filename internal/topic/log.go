// Package topic is what a broker serves on top of a partition's log: a
// Kafka partition with dense offsets assigned by the broker, a persistent
// offset index, idempotent-producer deduplication, high watermark and
// long-poll waits. It is written against the Log interface, which ledger
// mode implements with a managed ledger (LedgerLog) and ISR mode will
// implement with a broker-local replicated log.
package topic

import (
	"context"
	"errors"

	"quire/internal/mlog"
	"quire/internal/mlog/mlogclient"
)

// Pos names one entry of a log: entry Entry of segment Segment (in ledger
// mode, a ledger of the managed ledger).
type Pos = mlog.Position

// Segment is one non-empty segment of a log, oldest first.
type Segment struct {
	ID      int64
	Entries int64
}

// Entry is one entry read from a log.
type Entry struct {
	Pos     Pos
	Payload []byte
}

// ErrLogClosed: the log stopped (closed, or fenced by a new owner).
var ErrLogClosed = errors.New("topic: log closed")

// Log is the storage a partition sits on. One writer: its owner.
type Log interface {
	// Append submits an entry; entries submitted one after another are
	// stored and acknowledged in that order. The ack arrives on the channel.
	Append(payload []byte) <-chan AppendAck
	// Read returns up to max entries at or after from, only acknowledged
	// ones, across segments.
	Read(ctx context.Context, from Pos, max int) ([]Entry, error)
	// Segments lists the non-empty segments, oldest first.
	Segments(ctx context.Context) ([]Segment, error)
	// Done is closed when the log has stopped; no further acks arrive.
	Done() <-chan struct{}
	Close(ctx context.Context) error
}

// AppendAck answers one Append (Pos, or Err).
type AppendAck = mlog.AppendAck

// LedgerLog is a Log on a managed ledger (ledger mode).
type LedgerLog struct {
	T *mlogclient.ManagedLedger
}

var _ Log = LedgerLog{}

func (l LedgerLog) Append(payload []byte) <-chan AppendAck { return l.T.AppendAsync(payload) }

func (l LedgerLog) Read(ctx context.Context, from Pos, max int) ([]Entry, error) {
	es, err := l.T.Read(ctx, from, max)
	if err != nil {
		return nil, err
	}
	out := make([]Entry, len(es))
	for i, e := range es {
		out[i] = Entry{Pos: e.Pos, Payload: e.Payload}
	}
	return out, nil
}

func (l LedgerLog) Segments(ctx context.Context) ([]Segment, error) {
	ls, err := l.T.Ledgers(ctx)
	if err != nil {
		return nil, err
	}
	var out []Segment
	for _, li := range ls {
		if li.Entries > 0 {
			out = append(out, Segment{ID: li.ID, Entries: li.Entries})
		}
	}
	return out, nil
}

func (l LedgerLog) Done() <-chan struct{} { return l.T.Done() }

func (l LedgerLog) Close(ctx context.Context) error { return l.T.Close(ctx) }
