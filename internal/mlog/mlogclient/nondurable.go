package mlogclient

import (
	"context"

	"quire/internal/mlog"
)

// NonDurableCursor is a cursor kept in memory only (a Pulsar reader's
// subscription): the same mlog.Cursor state machine as a durable cursor,
// driven on the topic's goroutine and answering its ledger questions from
// the topic's list, but never persisted, never named in the topic's record,
// and never holding back trimming. It is gone with the ManagedLedger (a
// takeover or restart): its owner opens a new one where it wants to be.
type NonDurableCursor struct {
	t *ManagedLedger
	c *mlog.Cursor // touched only on the loop goroutine
}

// OpenNonDurableCursor returns a new in-memory cursor with its mark-delete
// position at markDelete, held within the topic as OpenCursorAt does.
func (t *ManagedLedger) OpenNonDurableCursor(ctx context.Context, name string, markDelete mlog.Position) (*NonDurableCursor, error) {
	var c *mlog.Cursor
	var err error
	if cerr := t.call(ctx, func() {
		c, err = mlog.NewCursor(name, t.core.ClampMarkDelete(markDelete), mlog.CursorOptions{Ledgers: t.core.CursorLedgers()})
	}); cerr != nil {
		return nil, cerr
	}
	if err != nil {
		return nil, err
	}
	return &NonDurableCursor{t: t, c: c}, nil
}

// Name is the cursor's name.
func (n *NonDurableCursor) Name() string { return n.c.Name() }

// MarkDelete returns the mark-delete position.
func (n *NonDurableCursor) MarkDelete(ctx context.Context) (mlog.Position, error) {
	var md mlog.Position
	err := n.t.call(ctx, func() { md = n.c.MarkDelete() })
	return md, err
}

// AckAll acknowledges the positions of ps that hold entries, individually.
func (n *NonDurableCursor) AckAll(ctx context.Context, ps []mlog.Position) error {
	return n.t.call(ctx, func() {
		for _, p := range ps {
			// The cursor trusts what it is given; the topic knows what exists.
			if n.t.core.HasEntry(p) {
				n.c.Ack(p)
			}
		}
	})
}

// AckCumulative acknowledges every position <= p (p past the end: every
// entry there is).
func (n *NonDurableCursor) AckCumulative(ctx context.Context, p mlog.Position) error {
	return n.t.call(ctx, func() { n.c.AckCumulative(n.t.core.ClampMarkDelete(p)) })
}

// IsAcked reports whether p is acknowledged.
func (n *NonDurableCursor) IsAcked(ctx context.Context, p mlog.Position) (bool, error) {
	var acked bool
	err := n.t.call(ctx, func() { acked = n.c.IsAcked(p) })
	return acked, err
}

// Reset moves the mark-delete position to markDelete (held within the
// topic), back or forward, forgetting every individual acknowledgement.
func (n *NonDurableCursor) Reset(ctx context.Context, markDelete mlog.Position) error {
	return n.t.call(ctx, func() { n.c.Reset(n.t.core.ClampMarkDelete(markDelete)) })
}
