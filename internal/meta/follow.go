package meta

import (
	"context"
	"errors"
	"log/slog"
	"time"
)

// Bounds of Follow's wait between a failed listing or watch and the next.
const (
	followBackoffMin = 50 * time.Millisecond
	followBackoffMax = 2 * time.Second
)

// Follow keeps an in-memory copy of the keys under prefix current: from
// revision rev (0: list first) it watches the prefix and hands each batch
// of events to apply, in order; whenever the watch ends (compaction, a lost
// connection) it lists again with load, which must replace the copy whole
// and return the revision it read at. Failures back off from 50 ms to 2 s,
// so a store that keeps failing is not spun on. It returns when ctx ends.
// what names the copy in log lines ("ACLs", "client quotas").
func Follow(ctx context.Context, store Store, prefix string, rev int64, what string, log *slog.Logger,
	load func(context.Context) (int64, error), apply func([]Event)) {
	backoff := followBackoffMin
	wait := func() bool {
		t := time.NewTimer(backoff)
		defer t.Stop()
		backoff = min(2*backoff, followBackoffMax)
		select {
		case <-t.C:
			return true
		case <-ctx.Done():
			return false
		}
	}
	for ctx.Err() == nil {
		if rev == 0 {
			r, err := load(ctx)
			if err != nil {
				if ctx.Err() != nil {
					return
				}
				log.Warn("listing "+what+" failed; retrying", "err", err, "backoff", backoff)
				if !wait() {
					return
				}
				continue
			}
			rev = r
		}
		delivered := false
		wctx, cancel := context.WithCancel(ctx)
		for resp := range store.Watch(wctx, prefix, rev+1) {
			if resp.Err != nil {
				if !errors.Is(resp.Err, ErrCompacted) && ctx.Err() == nil {
					log.Warn(what+" watch ended; listing again", "err", resp.Err)
				}
				break
			}
			if len(resp.Events) > 0 {
				apply(resp.Events)
				rev = resp.Events[len(resp.Events)-1].Revision
				delivered = true
			}
		}
		cancel()
		if ctx.Err() != nil {
			return
		}
		// A watch that fails at once must not become a tight loop.
		if !delivered {
			if !wait() {
				return
			}
		} else {
			backoff = followBackoffMin
		}
		rev = 0 // whatever ended the watch, a fresh listing is correct
	}
}
