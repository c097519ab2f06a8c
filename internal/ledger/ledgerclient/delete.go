package ledgerclient

import (
	"context"
	"errors"
	"fmt"

	"quire/internal/bookie/client"
	"quire/internal/ledger"
	"quire/internal/meta"
)

// Delete removes a ledger: its entries from every bookie of every fragment,
// then its metadata record. It is idempotent: a ledger already gone (record
// or bookie copy) is not an error. The caller must have taken the ledger off
// every list that names it first (a topic's ledger list), since readers find
// ledgers there.
func (c *Client) Delete(ctx context.Context, id int64) error {
	var err error
	// A writer still closing the ledger changes its record under us: the
	// bookie copies are gone by then, so deleting again finishes the job.
	for range 5 {
		if err = c.deleteOnce(ctx, id); !errors.Is(err, meta.ErrBadVersion) {
			return err
		}
	}
	return err
}

func (c *Client) deleteOnce(ctx context.Context, id int64) error {
	kv, err := c.cfg.Store.Get(ctx, ledger.Key(id))
	if errors.Is(err, meta.ErrNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("delete ledger %d: %w", id, err)
	}
	md, err := ledger.UnmarshalMetadata(kv.Value)
	if err != nil {
		return fmt.Errorf("delete ledger %d: %w", id, err)
	}
	if _, err := c.RefreshCluster(ctx); err != nil {
		return fmt.Errorf("delete ledger %d: %w", id, err)
	}
	seen := map[ledger.BookieID]bool{}
	for _, f := range md.Fragments {
		for _, b := range f.Ensemble {
			if seen[b] {
				continue
			}
			seen[b] = true
			err := c.cfg.Bookies.DeleteLedger(ctx, c.addr(b), id)
			if err != nil && !errors.Is(err, client.ErrNoSuchLedger) {
				// Keep the record so a later attempt finds the bookies again.
				return fmt.Errorf("delete ledger %d: %w", id, err)
			}
		}
	}
	if err := c.cfg.Store.Delete(ctx, ledger.Key(id), kv.Version); err != nil && !errors.Is(err, meta.ErrNotFound) {
		return fmt.Errorf("delete ledger %d: metadata: %w", id, err)
	}
	return nil
}
