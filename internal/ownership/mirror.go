package ownership

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"quire/internal/meta"
)

// mirror keeps a local copy of one key prefix: a full listing, then the
// watch from the listing's revision. After a broken or compacted watch it
// lists again and hands the new snapshot to reset, so the copy converges on
// the store whatever was missed.
type mirror struct {
	store  meta.Store
	prefix string
	logger *slog.Logger
	// reset replaces the copy with a listing read at revision rev.
	reset func(kvs []meta.KV, rev int64)
	// apply applies one batch of events, in revision order.
	apply func(events []meta.Event)
}

// load lists the prefix and resets the copy; it returns the revision to
// watch from (exclusive).
func (m *mirror) load(ctx context.Context) (int64, error) {
	kvs, rev, err := meta.ListAll(ctx, m.store, m.prefix)
	if err != nil {
		return 0, err
	}
	m.reset(kvs, rev)
	return rev, nil
}

const (
	mirrorBackoffMin = 50 * time.Millisecond
	mirrorBackoffMax = 2 * time.Second
)

// run follows the prefix from rev (as returned by load) until ctx ends.
func (m *mirror) run(ctx context.Context, rev int64) {
	backoff := mirrorBackoffMin
	for ctx.Err() == nil {
		if rev == 0 {
			r, err := m.load(ctx)
			if err != nil {
				if ctx.Err() != nil {
					return
				}
				m.logger.Warn("broker: relist failed, retrying", "prefix", m.prefix, "err", err, "backoff", backoff)
				if !sleepCtx(ctx, backoff) {
					return
				}
				backoff = min(2*backoff, mirrorBackoffMax)
				continue
			}
			rev, backoff = r, mirrorBackoffMin
		}
		wctx, cancel := context.WithCancel(ctx)
		var werr error
		delivered := false
		for resp := range m.store.Watch(wctx, m.prefix, rev+1) {
			if resp.Err != nil {
				werr = resp.Err
				break
			}
			if len(resp.Events) > 0 {
				m.apply(resp.Events)
				rev = resp.Events[len(resp.Events)-1].Revision
				delivered = true
			}
		}
		cancel()
		if ctx.Err() != nil {
			return
		}
		if werr != nil && !errors.Is(werr, meta.ErrCompacted) {
			m.logger.Warn("broker: watch ended, relisting", "prefix", m.prefix, "err", werr)
		}
		// A watch that fails before delivering anything would otherwise
		// turn into a tight list/watch loop.
		if !delivered {
			if !sleepCtx(ctx, backoff) {
				return
			}
			backoff = min(2*backoff, mirrorBackoffMax)
		} else {
			backoff = mirrorBackoffMin
		}
		// Whatever ended the watch, a fresh listing is always correct.
		rev = 0
	}
}

// sleepCtx waits d or until ctx ends; false when ctx ended.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
