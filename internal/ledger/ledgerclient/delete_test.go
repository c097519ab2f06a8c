package ledgerclient

import (
	"context"
	"errors"
	"testing"
	"time"

	"quire/internal/bookie/client"
	"quire/internal/meta"
)

func TestDeleteLedger(t *testing.T) {
	c := startCluster(t, "a", "b", "c")
	lc := c.client(t, "w")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	w, err := lc.Create(ctx, 3, 3, 2)
	if err != nil {
		t.Fatal(err)
	}
	if acked, err := appendN(t, w, 0, 10); acked != 10 || err != nil {
		t.Fatalf("acked %d: %v", acked, err)
	}
	if err := w.Close(ctx); err != nil {
		t.Fatal(err)
	}
	md, _, err := lc.ReadMetadata(ctx, w.ID())
	if err != nil {
		t.Fatal(err)
	}
	if err := lc.Delete(ctx, w.ID()); err != nil {
		t.Fatal(err)
	}
	if _, _, err := lc.ReadMetadata(ctx, w.ID()); !errors.Is(err, meta.ErrNotFound) {
		t.Fatalf("metadata after delete: %v", err)
	}
	for _, b := range md.Fragments[0].Ensemble {
		_, err := lc.cfg.Bookies.Read(ctx, lc.addr(b), w.ID(), 0, false)
		if !errors.Is(err, client.ErrNoSuchLedger) && !errors.Is(err, client.ErrNoSuchEntry) {
			t.Fatalf("bookie %s still serves the ledger: %v", b, err)
		}
	}
	// Idempotent.
	if err := lc.Delete(ctx, w.ID()); err != nil {
		t.Fatalf("second delete: %v", err)
	}
}
