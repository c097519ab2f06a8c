package mlogclient

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"quire/internal/ledger/ledgerclient"
	"quire/internal/meta"
	"quire/internal/mlog"
)

// Delete removes a topic that nobody owns any more: its cursor records and
// their ledgers, then its record, then its data ledgers. The record goes
// before the ledgers, so a crash part-way leaves only unreferenced ledgers
// (garbage, never a record naming a deleted ledger). A topic that does not
// exist is already deleted.
func Delete(ctx context.Context, store meta.Store, ledgers *ledgerclient.Client, name string) error {
	kv, err := store.Get(ctx, mlog.Key(name))
	if errors.Is(err, meta.ErrNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("delete topic %s: %w", name, err)
	}
	var rec mlog.Record
	if err := json.Unmarshal(kv.Value, &rec); err != nil {
		return fmt.Errorf("delete topic %s: %w", name, err)
	}
	// Cursor records: those the record names and any a crash left behind.
	var doomed []int64
	cursors, err := store.List(ctx, mlog.CursorKey(name, ""), meta.ListOptions{Limit: 10_000})
	if err != nil {
		return fmt.Errorf("delete topic %s: list cursors: %w", name, err)
	}
	for _, ckv := range cursors.KVs {
		var p mlog.CursorPointer
		if json.Unmarshal(ckv.Value, &p) == nil && p.Ledger > 0 {
			doomed = append(doomed, p.Ledger)
		}
		if err := store.Delete(ctx, ckv.Key, ckv.Version); err != nil && !errors.Is(err, meta.ErrNotFound) {
			return fmt.Errorf("delete topic %s cursor %s: %w", name, ckv.Key, err)
		}
	}
	if err := store.Delete(ctx, kv.Key, kv.Version); err != nil {
		return fmt.Errorf("delete topic %s record: %w", name, err)
	}
	for _, l := range rec.Ledgers {
		doomed = append(doomed, l.ID)
	}
	var errs []error
	for _, id := range doomed {
		if err := ledgers.Delete(ctx, id); err != nil {
			errs = append(errs, fmt.Errorf("ledger %d: %w", id, err))
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("delete topic %s: record gone, some ledgers left for garbage collection: %w", name, errors.Join(errs...))
	}
	return nil
}
