package mlogclient

import (
	"context"
	"errors"
	"fmt"
	"time"

	"quire/internal/ledger/ledgerclient"
	"quire/internal/mlog"
)

// Compaction is a compacted ledger being written for a topic by its
// compactor (package broker): created and named in the topic record as
// garbage before its first entry (so a crash leaves nothing a new owner
// does not delete), written entry by entry, then swapped into the ledger
// list in place of the ledgers it replaces (mlog's EndCompaction), or
// abandoned. The decisions — which ledgers, what survives — are the
// compactor's; the ordering rules are the core's.
type Compaction struct {
	t *ManagedLedger
	w *ledgerclient.Writer
	// inflight bounds the appends sent and not yet acknowledged.
	inflight chan struct{}
	errs     chan error
	entries  int64
	size     int64
}

// compactionWindow is how many appends a compaction keeps in flight.
const compactionWindow = 128

// BeginCompaction creates the compacted ledger and registers it.
func (t *ManagedLedger) BeginCompaction(ctx context.Context) (*Compaction, error) {
	w, err := t.cfg.Ledgers.Create(ctx, t.cfg.Ensemble, t.cfg.WriteQuorum, t.cfg.AckQuorum)
	if err != nil {
		return nil, fmt.Errorf("create compacted ledger: %w", err)
	}
	if err := t.compactionStep(ctx, func(token uint64) { t.core.RegisterCompaction(token, w.ID(), time.Now()) }); err != nil {
		// Not named anywhere: nobody else would delete it.
		cctx, cancel := context.WithTimeout(context.Background(), t.cfg.OpTimeout)
		defer cancel()
		_ = w.Close(cctx)
		_ = t.cfg.Ledgers.Delete(cctx, w.ID())
		return nil, fmt.Errorf("register compacted ledger %d: %w", w.ID(), err)
	}
	return &Compaction{t: t, w: w, inflight: make(chan struct{}, compactionWindow), errs: make(chan error, 1)}, nil
}

// Ledger is the compacted ledger's id.
func (c *Compaction) Ledger() int64 { return c.w.ID() }

// Append adds one entry; it waits only while compactionWindow appends are
// in flight. A failed append is reported by a later Append or by Swap.
func (c *Compaction) Append(ctx context.Context, payload []byte) error {
	select {
	case err := <-c.errs:
		return err
	default:
	}
	select {
	case c.inflight <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	c.entries++
	c.size += int64(len(payload))
	c.w.AppendAsync(payload, func(_ int64, err error) {
		if err != nil {
			select {
			case c.errs <- fmt.Errorf("append to compacted ledger %d: %w", c.w.ID(), err):
			default:
			}
		}
		<-c.inflight
	})
	return nil
}

// Swap closes the compacted ledger and swaps it in for replace (a run of
// closed ledgers on the list, oldest first). On an error the compaction is
// over all the same: the core deleted the ledger, or a new owner will.
func (c *Compaction) Swap(ctx context.Context, replace []int64) error {
	if err := c.w.Close(ctx); err != nil {
		_ = c.Abandon(ctx)
		return fmt.Errorf("close compacted ledger %d: %w", c.w.ID(), err)
	}
	select {
	case err := <-c.errs:
		_ = c.Abandon(ctx)
		return err
	default:
	}
	md := c.w.Metadata()
	if md.LastEntryID+1 != c.entries {
		_ = c.Abandon(ctx)
		return fmt.Errorf("compacted ledger %d holds %d entries, %d written", c.w.ID(), md.LastEntryID+1, c.entries)
	}
	s := mlog.CompactSwap{Replace: replace, Data: c.w.ID(), Entries: c.entries, Size: md.Length}
	return c.t.compactionStep(ctx, func(token uint64) { c.t.core.EndCompaction(token, s, time.Now()) })
}

// Abandon ends the compaction without a swap: the ledger is deleted.
func (c *Compaction) Abandon(ctx context.Context) error {
	_ = c.w.Close(ctx)
	err := c.t.compactionStep(ctx, func(token uint64) {
		c.t.core.EndCompaction(token, mlog.CompactSwap{Data: c.w.ID()}, time.Now())
	})
	if errors.Is(err, mlog.ErrCompactionStale) {
		return nil // swapped or abandoned already
	}
	return err
}

// compactionStep gives the core a compaction input and waits for its
// answer.
func (t *ManagedLedger) compactionStep(ctx context.Context, step func(token uint64)) error {
	done := make(chan error, 1)
	if err := t.call(ctx, func() {
		t.token++
		t.compactions[t.token] = done
		step(t.token)
	}); err != nil {
		return err
	}
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	case <-t.loop.Done():
		select {
		case err := <-done:
			return err
		default:
			return mlog.ErrClosed
		}
	}
}

// noticeSwaps runs right after the core's metadata input, the only one
// that swaps (a swap's CAS result), before anything else on the loop: a
// swap renumbers the entries of the ledgers it replaced, so cached entries
// are dropped and the count that readers compare goes up before any read
// locates in the new list.
func (t *ManagedLedger) noticeSwaps() {
	n := t.core.Compactions()
	if n == t.swapsSeen {
		return
	}
	t.swapsSeen = n
	t.rewrites.Add(1)
	t.cache.drop()
	if t.readAhead != nil {
		t.readAhead.reset()
	}
}

// Rewrites counts the compaction swaps this owner made: positions read
// while it has one value name the same entries until it changes (a swap
// renumbers the entries of the ledgers it replaces).
func (t *ManagedLedger) Rewrites() uint64 { return t.rewrites.Load() }
