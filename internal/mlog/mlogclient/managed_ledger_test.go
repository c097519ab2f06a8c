package mlogclient

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"quire/internal/bookie"
	"quire/internal/bookie/client"
	"quire/internal/bookie/node"
	"quire/internal/ledger/ledgerclient"
	"quire/internal/meta"
	"quire/internal/mlog"
)

// keepAll keeps consumed ledgers: without cursors a topic would otherwise
// delete every closed ledger at once.
var keepAll = mlog.RetentionPolicy{Time: -1, Size: -1}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// startCluster runs three in-process bookies registered in a MemServer.
func startCluster(t testing.TB) *meta.MemServer {
	t.Helper()
	srv := meta.NewMemServer(meta.MemConfig{})
	for i := range 3 {
		ecfg := bookie.DefaultConfig("", "")
		ecfg.JournalFileBytes = 4 << 20
		ecfg.WriteCacheBytes = 8 << 20
		n, err := node.Start(context.Background(), node.Config{
			ID: fmt.Sprintf("b%d", i+1), DataDir: t.TempDir(), ListenAddr: "127.0.0.1:0", Zone: "z",
			Store: srv.NewClient(), Engine: &ecfg, Logger: quiet,
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { n.Close() })
	}
	return srv
}

// config returns a shell config on srv's bookies; opts adjust the ledger
// client's.
func config(t testing.TB, srv *meta.MemServer, name string, topic mlog.Config, opts ...func(*ledgerclient.Config)) Config {
	t.Helper()
	bc := client.New(client.Config{Logger: quiet, RedialBackoffMin: 10 * time.Millisecond, RedialBackoffMax: 50 * time.Millisecond})
	t.Cleanup(bc.Close)
	store := srv.NewClient()
	lcfg := ledgerclient.Config{Store: store, Bookies: bc, Tick: 10 * time.Millisecond,
		RequestTimeoutTicks: 100, Name: name, Logger: quiet}
	for _, o := range opts {
		o(&lcfg)
	}
	lc := ledgerclient.New(lcfg)
	topic.Owner = name
	return Config{Ledgers: lc, Store: store, Core: topic, Tick: 10 * time.Millisecond, Logger: quiet}
}

func payload(i int) []byte { return []byte(fmt.Sprintf("message-%05d", i)) }

func openTopic(t *testing.T, ctx context.Context, srv *meta.MemServer, owner string, topic mlog.Config) *ManagedLedger {
	t.Helper()
	tp, err := Open(ctx, "tenant/ns/topic", config(t, srv, owner, topic))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = tp.Close(cctx)
	})
	return tp
}

func readAll(t *testing.T, ctx context.Context, tp *ManagedLedger, from mlog.Position) []Entry {
	t.Helper()
	var out []Entry
	for {
		got, err := tp.Read(ctx, from, 7)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) == 0 {
			return out
		}
		out = append(out, got...)
		last := got[len(got)-1].Pos
		from = mlog.Position{LedgerID: last.LedgerID, EntryID: last.EntryID + 1}
	}
}

func TestAppendAcrossRolloversAndRead(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	srv := startCluster(t)
	tp := openTopic(t, ctx, srv, "a", mlog.Config{Rollover: mlog.RolloverPolicy{MaxEntries: 10}, Retention: keepAll})
	var positions []mlog.Position
	for i := range 45 {
		p, err := tp.Append(ctx, payload(i))
		if err != nil {
			t.Fatalf("append %d: %v", i, err)
		}
		positions = append(positions, p)
	}
	ls, err := tp.Ledgers(ctx)
	if err != nil || len(ls) < 5 {
		t.Fatalf("ledgers %+v %v", ls, err)
	}
	// Read everything back, first from the cache, then cold from the bookies.
	got := readAll(t, ctx, tp, mlog.Position{})
	if len(got) != 45 {
		t.Fatalf("read %d entries", len(got))
	}
	for i, e := range got {
		if e.Pos != positions[i] || !bytes.Equal(e.Payload, payload(i)) {
			t.Fatalf("entry %d: %v %q, want %v", i, e.Pos, e.Payload, positions[i])
		}
	}
	if err := tp.call(ctx, func() { tp.cache = newEntryCache(1, 1<<20, nil) }); err != nil {
		t.Fatal(err)
	}
	cold := readAll(t, ctx, tp, mlog.Position{})
	for i, e := range cold {
		if !bytes.Equal(e.Payload, payload(i)) {
			t.Fatalf("cold entry %d: %q", i, e.Payload)
		}
	}
	st, _ := tp.Stats(ctx)
	// The cold read is served by the bookies and, once it shows a reader
	// behind the tail, by the read-ahead.
	if st.CacheMisses+st.ReadAheadHits < 40 || st.CacheHits < 45 {
		t.Fatalf("cache hits %d misses %d, read-ahead hits %d", st.CacheHits, st.CacheMisses, st.ReadAheadHits)
	}
}

func TestTakeoverFencesTheFirstOwner(t *testing.T) {
	// limit 0 persists every range; limit 3 keeps 4 of the 7 ranges in
	// memory only, and their messages are redelivered (P9).
	for _, limit := range []int{0, 3} {
		t.Run(fmt.Sprintf("limit=%d", limit), func(t *testing.T) { testTakeover(t, limit) })
	}
}

func testTakeover(t *testing.T, limit int) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	srv := startCluster(t)
	cfg := mlog.Config{Rollover: mlog.RolloverPolicy{MaxEntries: 8}, CursorPersistInterval: 10 * time.Millisecond,
		MaxRangesToPersist: limit}
	a := openTopic(t, ctx, srv, "a", cfg)
	sub, err := a.OpenCursor(ctx, "sub", true)
	if err != nil {
		t.Fatal(err)
	}
	var acked []mlog.Position
	for i := range 20 {
		p, err := a.Append(ctx, payload(i))
		if err != nil {
			t.Fatal(err)
		}
		acked = append(acked, p)
	}
	// Acknowledge the first 5 cumulatively and every odd one after.
	if err := sub.AckCumulative(ctx, acked[4]); err != nil {
		t.Fatal(err)
	}
	for i := 5; i < 20; i += 2 {
		if err := sub.Ack(ctx, acked[i]); err != nil {
			t.Fatal(err)
		}
	}
	// Wait for the cursor to be persisted (the stats say so).
	poll := time.NewTicker(5 * time.Millisecond)
	defer poll.Stop()
	for {
		st, err := a.Stats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if c := st.Cursors[0]; !c.Unpersisted && c.Holes == 7 {
			if limit > 0 && (c.HolesPersisted != limit || c.HolesInMemoryOnly != 7-limit) {
				t.Fatalf("cursor stats %+v", c)
			}
			break
		}
		select {
		case <-poll.C:
		case <-ctx.Done():
			t.Fatal("cursor never persisted")
		}
	}

	b := openTopic(t, ctx, srv, "b", cfg)
	if _, err := a.Append(ctx, payload(99)); !errors.Is(err, mlog.ErrFenced) {
		t.Fatalf("append on the fenced owner: %v", err)
	}
	// Every acknowledged append is readable through the new owner.
	got := readAll(t, ctx, b, mlog.Position{})
	if len(got) != len(acked) {
		t.Fatalf("new owner reads %d entries, want %d", len(got), len(acked))
	}
	for i, e := range got {
		if e.Pos != acked[i] || !bytes.Equal(e.Payload, payload(i)) {
			t.Fatalf("entry %d: %v %q", i, e.Pos, e.Payload)
		}
	}
	// Acks survived; the unacked messages are redelivered.
	bsub, err := b.OpenCursor(ctx, "sub", true)
	if err != nil {
		t.Fatal(err)
	}
	if md, _ := bsub.MarkDelete(ctx); md != acked[5] {
		t.Fatalf("mark-delete after takeover %v, want %v", md, acked[5])
	}
	unacked, err := bsub.Unacked(ctx, mlog.Position{}, 100)
	if err != nil {
		t.Fatal(err)
	}
	var want []mlog.Position
	for i := 6; i < 20; i++ {
		// Even ones were never acknowledged; odd ones beyond the persisted
		// ranges (7, 9, 11 with limit 3) are redelivered.
		if i%2 == 0 || limit > 0 && i > 5+2*limit {
			want = append(want, acked[i])
		}
	}
	if fmt.Sprint(unacked) != fmt.Sprint(want) {
		t.Fatalf("redelivery %v, want %v", unacked, want)
	}
	p, err := b.Append(ctx, payload(20))
	if err != nil || p.LedgerID <= acked[19].LedgerID {
		t.Fatalf("append on the new owner: %v %v", p, err)
	}
}

func TestTailingReaderServedFromCache(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	srv := startCluster(t)
	tp := openTopic(t, ctx, srv, "a", mlog.Config{Rollover: mlog.RolloverPolicy{MaxEntries: 25}, Retention: keepAll})
	next := mlog.Position{}
	for i := range 100 {
		if _, err := tp.Append(ctx, payload(i)); err != nil {
			t.Fatal(err)
		}
		got, err := tp.Read(ctx, next, 10)
		if err != nil || len(got) != 1 || !bytes.Equal(got[0].Payload, payload(i)) {
			t.Fatalf("tail read %d: %v %v", i, got, err)
		}
		next = mlog.Position{LedgerID: got[0].Pos.LedgerID, EntryID: got[0].Pos.EntryID + 1}
	}
	st, _ := tp.Stats(ctx)
	if st.CacheHits != 100 || st.CacheMisses != 0 {
		t.Fatalf("cache hits %d misses %d", st.CacheHits, st.CacheMisses)
	}
}

// P7: with the metadata store down, appends keep going to the current
// ledger past the rollover point; the rollover succeeds once it is back.
func TestMetadataOutageKeepsWriting(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	srv := startCluster(t)
	tp := openTopic(t, ctx, srv, "a", mlog.Config{Rollover: mlog.RolloverPolicy{MaxEntries: 5},
		Retention: keepAll, RetryInterval: 20 * time.Millisecond})
	first, err := tp.Append(ctx, payload(0))
	if err != nil {
		t.Fatal(err)
	}
	srv.SetFault(func(meta.Op, string) error { return meta.ErrUnavailable })
	for i := 1; i < 20; i++ {
		p, err := tp.Append(ctx, payload(i))
		if err != nil || p.LedgerID != first.LedgerID {
			t.Fatalf("append %d during the outage: %v %v", i, p, err)
		}
	}
	st, _ := tp.Stats(ctx)
	if st.RolloverFailures == 0 || st.LastRolloverError == "" {
		t.Fatalf("stats %+v", st)
	}
	srv.SetFault(nil)
	poll := time.NewTicker(5 * time.Millisecond)
	defer poll.Stop()
	for {
		if ls, err := tp.Ledgers(ctx); err == nil && len(ls) >= 2 {
			break
		}
		select {
		case <-poll.C:
		case <-ctx.Done():
			t.Fatal("no rollover after the outage")
		}
	}
	p, err := tp.Append(ctx, payload(20))
	if err != nil || p.LedgerID == first.LedgerID {
		t.Fatalf("append after the outage: %v %v", p, err)
	}
	if got := readAll(t, ctx, tp, mlog.Position{}); len(got) != 21 {
		t.Fatalf("read %d entries", len(got))
	}
}

func TestTrimDeletesConsumedLedgers(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	srv := startCluster(t)
	cfg := config(t, srv, "a", mlog.Config{Rollover: mlog.RolloverPolicy{MaxEntries: 5}})
	tp, err := Open(ctx, "trim", cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer tp.Close(ctx)
	sub, err := tp.OpenCursor(ctx, "sub", true)
	if err != nil {
		t.Fatal(err)
	}
	var last mlog.Position
	for i := range 16 {
		if last, err = tp.Append(ctx, payload(i)); err != nil {
			t.Fatal(err)
		}
	}
	before, _ := tp.Ledgers(ctx)
	if err := sub.AckCumulative(ctx, last); err != nil {
		t.Fatal(err)
	}
	poll := time.NewTicker(5 * time.Millisecond)
	defer poll.Stop()
	for {
		ls, _ := tp.Ledgers(ctx)
		if len(ls) == 1 && ls[0].ID == last.LedgerID {
			break
		}
		select {
		case <-poll.C:
		case <-ctx.Done():
			t.Fatalf("not trimmed: %+v", ls)
		}
	}
	for _, l := range before[:len(before)-1] {
		for {
			_, _, err := cfg.Ledgers.ReadMetadata(ctx, l.ID)
			if errors.Is(err, meta.ErrNotFound) {
				break
			}
			select {
			case <-poll.C:
			case <-ctx.Done():
				t.Fatalf("ledger %d not deleted: %v", l.ID, err)
			}
		}
	}
}
