package ledgerclient

import (
	"context"
	"errors"
	"fmt"
	"time"

	"quire/internal/bookie/client"
	"quire/internal/ledger"
)

// ErrNoNewEntries: a long poll timed out without the LAC moving.
var ErrNoNewEntries = errors.New("ledger: no new entries before the timeout")

// ErrEntryTooLarge: the payload does not fit in one bookie frame. The
// writer refuses it before giving it an entry id, so the ledger is unharmed.
var ErrEntryTooLarge = errors.New("ledger: entry larger than a bookie frame")

// WaitLAC is the tailing reader's long poll: it asks every bookie of the
// ledger's last fragment to answer once its LAC exceeds previous, and returns
// the first (highest seen) answer. Entries up to the returned LAC are
// acknowledged and readable with Read, even while the ledger is open. A
// writer carries its LAC on its next add, so the LAC trails the newest
// acknowledged entry by one until the writer adds again, closes, or (after
// Config.ExplicitLacTicks of quiet) sends its LAC on its own.
func (c *Client) WaitLAC(ctx context.Context, md ledger.Metadata, previous int64, timeout time.Duration) (int64, error) {
	ensemble := md.Fragments[len(md.Fragments)-1].Ensemble
	if !c.knows(ensemble) {
		if _, err := c.RefreshCluster(ctx); err != nil {
			return previous, err
		}
	}
	ctx, cancel := context.WithTimeout(ctx, timeout+5*time.Second)
	defer cancel()
	type answer struct {
		lac int64
		err error
	}
	answers := make(chan answer, len(ensemble))
	for _, b := range ensemble {
		go func(addr string) {
			deadline := time.Now().Add(timeout)
			for {
				lac, _, err := c.cfg.Bookies.LongPollRead(ctx, addr, md.ID, previous, time.Until(deadline))
				// A bookie that has no entry of the ledger yet answers at
				// once; ask again (paced) until the poll's deadline.
				if errors.Is(err, client.ErrNoSuchLedger) && time.Until(deadline) > 0 {
					select {
					case <-time.After(min(20*time.Millisecond, time.Until(deadline))):
						continue
					case <-ctx.Done():
					}
				}
				if errors.Is(err, client.ErrNoSuchLedger) {
					err = client.ErrTimeout
				}
				answers <- answer{lac, err}
				return
			}
		}(c.addr(b))
	}
	var firstErr error
	for range ensemble {
		a := <-answers
		if a.err == nil && a.lac > previous {
			return a.lac, nil
		}
		if a.err != nil && firstErr == nil && !errors.Is(a.err, client.ErrTimeout) {
			firstErr = a.err
		}
	}
	if firstErr != nil {
		return previous, fmt.Errorf("ledger %d: long poll after LAC %d: %w", md.ID, previous, firstErr)
	}
	return previous, fmt.Errorf("ledger %d: long poll after LAC %d: %w", md.ID, previous, ErrNoNewEntries)
}

// knows reports whether every bookie's address is cached.
func (c *Client) knows(ids []ledger.BookieID) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, id := range ids {
		if _, ok := c.addrs[id]; !ok {
			return false
		}
	}
	return true
}
