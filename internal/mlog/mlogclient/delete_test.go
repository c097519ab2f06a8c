package mlogclient

import (
	"context"
	"errors"
	"testing"
	"time"

	"quire/internal/meta"
	"quire/internal/mlog"
)

func TestDeleteRemovesRecordCursorsAndLedgers(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	srv := startCluster(t)
	cfg := config(t, srv, "owner-a", mlog.Config{})
	tp, err := Open(ctx, "tenant/ns/doomed", cfg)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		if _, err := tp.Append(ctx, payload(i)); err != nil {
			t.Fatal(err)
		}
	}
	c, err := tp.OpenCursor(ctx, "sub", true)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.AckCumulative(ctx, mlog.Position{LedgerID: 1, EntryID: 0}); err != nil {
		t.Fatal(err)
	}
	ledgers, err := tp.Ledgers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := tp.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := Delete(ctx, cfg.Store, cfg.Ledgers, "tenant/ns/doomed"); err != nil {
		t.Fatal(err)
	}
	if _, err := cfg.Store.Get(ctx, mlog.Key("tenant/ns/doomed")); !errors.Is(err, meta.ErrNotFound) {
		t.Fatalf("topic record after delete: %v", err)
	}
	if _, err := cfg.Store.Get(ctx, mlog.CursorKey("tenant/ns/doomed", "sub")); !errors.Is(err, meta.ErrNotFound) {
		t.Fatalf("cursor record after delete: %v", err)
	}
	for _, l := range ledgers {
		if _, _, err := cfg.Ledgers.ReadMetadata(ctx, l.ID); err == nil {
			t.Fatalf("ledger %d still has metadata", l.ID)
		}
	}
	// Deleting again is a no-op; the name can be used afresh.
	if err := Delete(ctx, cfg.Store, cfg.Ledgers, "tenant/ns/doomed"); err != nil {
		t.Fatal(err)
	}
	tp2, err := Open(ctx, "tenant/ns/doomed", config(t, srv, "owner-b", mlog.Config{}))
	if err != nil {
		t.Fatal(err)
	}
	defer tp2.Close(ctx)
	if got := readAll(t, ctx, tp2, mlog.Position{}); len(got) != 0 {
		t.Fatalf("a recreated topic holds %d old entries", len(got))
	}
}
