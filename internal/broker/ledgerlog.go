package broker

import (
	"context"

	"quire/internal/mlog"
	"quire/internal/mlog/mlogclient"
	"quire/internal/partition"
)

// ledgerLog is a partition.Log on a managed ledger (ledger mode): a segment
// is a ledger, an entry a ledger entry.
type ledgerLog struct {
	ml *mlogclient.ManagedLedger
}

var (
	_ partition.Log                = ledgerLog{}
	_ partition.ReadAheadForgetter = ledgerLog{}
)

func toPos(p mlog.Position) partition.Pos {
	return partition.Pos{Segment: p.LedgerID, Entry: p.EntryID}
}

func (l ledgerLog) Admit(ctx context.Context) (partition.Permit, error) {
	p, err := l.ml.Admit(ctx)
	if err != nil {
		return nil, err
	}
	return ledgerPermit{p}, nil
}

// ledgerPermit is room for one append in a managed ledger.
type ledgerPermit struct{ p *mlogclient.Permit }

func (p ledgerPermit) Append(payload []byte) <-chan partition.AppendAck {
	ch := make(chan partition.AppendAck, 1)
	p.p.AppendAsync(payload, func(a mlog.AppendAck) {
		ch <- partition.AppendAck{Pos: toPos(a.Pos), Err: a.Err}
	})
	return ch
}

func (p ledgerPermit) Release() { p.p.Release() }

// ForgetReaders implements partition.ReadAheadForgetter.
func (l ledgerLog) ForgetReaders() { l.ml.ForgetReaders() }

func (l ledgerLog) Read(ctx context.Context, from partition.Pos, max int) ([]partition.Entry, error) {
	es, err := l.ml.Read(ctx, mlog.Position{LedgerID: from.Segment, EntryID: from.Entry}, max)
	if err != nil {
		return nil, err
	}
	out := make([]partition.Entry, len(es))
	for i, e := range es {
		out[i] = partition.Entry{Pos: toPos(e.Pos), Payload: e.Payload}
	}
	return out, nil
}

func (l ledgerLog) Segments(ctx context.Context) ([]partition.Segment, error) {
	ls, err := l.ml.Ledgers(ctx)
	if err != nil {
		return nil, err
	}
	var out []partition.Segment
	for _, li := range ls {
		if li.Entries > 0 {
			out = append(out, partition.Segment{ID: li.ID, Entries: li.Entries, Bytes: li.Size, Compacted: li.Data != 0})
		}
	}
	return out, nil
}

func (l ledgerLog) Done() <-chan struct{} { return l.ml.Done() }

// Rewrites implements partition.Rewriter: compaction swaps so far.
func (l ledgerLog) Rewrites() uint64 { return l.ml.Rewrites() }

func (l ledgerLog) Close(ctx context.Context) error { return l.ml.Close(ctx) }
