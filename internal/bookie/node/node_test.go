package node

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"quire/internal/bookie"
	"quire/internal/bookie/client"
	"quire/internal/testutil"
)

// The whole add path of a real bookie, fast paths included: pipelined adds with distinct
// payloads from the client, through the server into the engine's journal, write cache and —
// after a checkpoint — entry logs and index, read back byte for byte. The server lends the
// engine each payload only for the call, straight from its read buffer, so a missing copy
// would show here as one entry holding another's bytes.
func TestPipelinedAddsReadBack(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	quiet := slog.New(slog.DiscardHandler)
	engine := DefaultEngineConfig()
	engine.WriteCacheBytes = 256 << 10 // small: checkpoints run while adds arrive
	n, err := Start(ctx, Config{DataDir: t.TempDir(), ListenAddr: "127.0.0.1:0", Engine: &engine, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	c := client.New(client.Config{Logger: quiet, MaxInFlightPerConn: 64})
	defer c.Close()

	const ledgers, perLedger = 3, 400
	payload := func(ledger, entry int64) []byte {
		return bytes.Repeat([]byte{byte(ledger*31 + entry)}, 1+int(entry%7)*300)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	for e := range int64(perLedger) {
		for l := int64(1); l <= ledgers; l++ {
			wg.Add(1)
			c.AddAsync(n.Addr(), client.AddRequest{LedgerID: l, EntryID: e, LastAddConfirmed: e - 1, Payload: payload(l, e)}, func(err error) {
				if err != nil {
					mu.Lock()
					firstErr = errors.Join(firstErr, err)
					mu.Unlock()
				}
				wg.Done()
			})
		}
	}
	wg.Wait()
	if firstErr != nil {
		t.Fatal(firstErr)
	}
	check := func(when string) {
		t.Helper()
		for l := int64(1); l <= ledgers; l++ {
			for e := range int64(perLedger) {
				got, err := c.Read(ctx, n.Addr(), l, e, false)
				if err != nil {
					t.Fatalf("%s: read ledger %d entry %d: %v", when, l, e, err)
				}
				if !bytes.Equal(got.Payload, payload(l, e)) {
					t.Fatalf("%s: ledger %d entry %d holds %d bytes of %x, want %d of %x", when, l, e,
						len(got.Payload), got.Payload[:1], len(payload(l, e)), payload(l, e)[:1])
				}
			}
		}
	}
	check("before checkpoint")
	if err := n.Engine().Checkpoint(); err != nil {
		t.Fatal(err)
	}
	if s := n.Engine().Stats(); s.Checkpoints < 2 || s.WriteCacheBytes != 0 {
		t.Fatalf("want the entries flushed by several checkpoints, got %+v", s)
	}
	check("from entry logs")
}

// A bookie on a full disk starts read-only, says why, answers adds with
// the read-only status (which the ledger client takes as "replace this
// bookie"), keeps serving reads, and becomes writable by itself when space
// returns.
func TestReadOnlyReasonOnFullDisk(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	quiet := slog.New(slog.DiscardHandler)
	var freeBytes atomic.Uint64
	freeBytes.Store(1 << 30)
	engine := DefaultEngineConfig()
	engine.StatFS = func(string) (bookie.DiskSpace, error) {
		return bookie.DiskSpace{TotalBytes: 2 << 30, FreeBytes: freeBytes.Load()}, nil
	}
	engine.DiskCheckInterval = time.Millisecond
	n, err := Start(ctx, Config{DataDir: t.TempDir(), ListenAddr: "127.0.0.1:0", Engine: &engine, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	c := client.New(client.Config{Logger: quiet})
	defer c.Close()
	if ro, reason := n.ReadOnlyReason(); ro {
		t.Fatalf("read-only with half the disk free: %s", reason)
	}
	if err := c.Add(ctx, n.Addr(), client.AddRequest{LedgerID: 1, EntryID: 0, LastAddConfirmed: -1, Payload: []byte("kept")}); err != nil {
		t.Fatal(err)
	}

	freeBytes.Store(10 << 20) // past 95%
	testutil.WaitFor(t, "read-only", func() bool { ro, _ := n.ReadOnlyReason(); return ro })
	_, reason := n.ReadOnlyReason()
	t.Logf("read-only: %s", reason)
	if err := c.Add(ctx, n.Addr(), client.AddRequest{LedgerID: 1, EntryID: 1, LastAddConfirmed: 0, Payload: []byte("refused")}); !errors.Is(err, client.ErrReadOnly) {
		t.Fatalf("add on a full bookie = %v, want ErrReadOnly", err)
	}
	if got, err := c.Read(ctx, n.Addr(), 1, 0, false); err != nil || string(got.Payload) != "kept" {
		t.Fatalf("read on a full bookie = %q, %v", got.Payload, err)
	}

	freeBytes.Store(1 << 30)
	testutil.WaitFor(t, "writable again", func() bool { ro, _ := n.ReadOnlyReason(); return !ro })
	if err := c.Add(ctx, n.Addr(), client.AddRequest{LedgerID: 1, EntryID: 1, LastAddConfirmed: 0, Payload: []byte("accepted")}); err != nil {
		t.Fatal(err)
	}
}

// localAndRemote starts a node and two clients of it: remote over the
// network, local through Config.Local, which counts its dials in dials
// (and fails them). The clients and the node close with the test.
func localAndRemote(t *testing.T, ctx context.Context) (n *Node, remote, local *client.Client, dials *atomic.Int32) {
	t.Helper()
	quiet := slog.New(slog.DiscardHandler)
	n, err := Start(ctx, Config{DataDir: t.TempDir(), ListenAddr: "127.0.0.1:0", Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	remote = client.New(client.Config{Logger: quiet})
	dials = new(atomic.Int32)
	local = client.New(client.Config{Logger: quiet, Local: map[string]client.LocalBookie{n.Addr(): n.Local()},
		Dial: func(context.Context, string) (net.Conn, error) {
			dials.Add(1)
			return nil, errors.New("no dialling")
		}})
	t.Cleanup(func() { local.Close(); remote.Close() }) // before the node's close: cleanups run last first
	return n, remote, local, dials
}

// TestLocalRangeReadsAnswerAsTheServer: a client whose Config.Local names
// this node reads ranges from the engine directly, and gets what a client
// reading over the network gets: the same entries from the entry logs and
// the write cache, the same errors for a missing entry or ledger, limits
// applied; and it dials nobody for them.
func TestLocalRangeReadsAnswerAsTheServer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n, remote, local, dials := localAndRemote(t, ctx)
	const entries = 300
	payload := func(e int64) []byte { return bytes.Repeat([]byte{byte(e), byte(e >> 8)}, 1+int(e%11)*100) }
	for e := range int64(entries) {
		if err := remote.Add(ctx, n.Addr(), client.AddRequest{LedgerID: 7, EntryID: e, LastAddConfirmed: e - 1, Payload: payload(e)}); err != nil {
			t.Fatal(err)
		}
		if e == entries/2 {
			if err := n.Engine().Checkpoint(); err != nil { // half in the entry logs
				t.Fatal(err)
			}
		}
	}
	for _, r := range []struct {
		first            int64
		maxEntries, maxB int
	}{{0, 0, 0}, {0, 10, 0}, {140, 20, 0}, {5, 100, 3000}, {299, 5, 0}} {
		want, werr := remote.ReadRange(ctx, n.Addr(), 7, r.first, r.maxEntries, r.maxB)
		got, gerr := local.ReadRange(ctx, n.Addr(), 7, r.first, r.maxEntries, r.maxB)
		if werr != nil || gerr != nil {
			t.Fatalf("range %+v: network %v, local %v", r, werr, gerr)
		}
		if len(got) != len(want) {
			t.Fatalf("range %+v: %d entries locally, %d over the network", r, len(got), len(want))
		}
		for i := range got {
			if got[i].EntryID != want[i].EntryID || got[i].LastAddConfirmed != want[i].LastAddConfirmed || !bytes.Equal(got[i].Payload, want[i].Payload) {
				t.Fatalf("range %+v entry %d differs", r, i)
			}
		}
	}
	if _, err := local.ReadRange(ctx, n.Addr(), 7, entries, 10, 0); !errors.Is(err, client.ErrNoSuchEntry) {
		t.Fatalf("past the end: %v, want ErrNoSuchEntry", err)
	}
	if _, err := local.ReadRange(ctx, n.Addr(), 8, 0, 10, 0); !errors.Is(err, client.ErrNoSuchLedger) {
		t.Fatalf("unknown ledger: %v, want ErrNoSuchLedger", err)
	}
	if d := dials.Load(); d != 0 {
		t.Fatalf("%d dials for local range reads", d)
	}
	local.Close()
	if _, err := local.ReadRange(ctx, n.Addr(), 7, 0, 10, 0); !errors.Is(err, client.ErrClosed) {
		t.Fatalf("after Close: %v, want ErrClosed", err)
	}
}

// TestLocalAddsAnswerAsTheServer: a client whose Config.Local names this
// node hands its adds to the engine directly, dialling nobody, and gets
// what the server would answer: durable entries that a client over the
// network reads back, ErrFenced for a non-recovery add once the ledger is
// fenced (a recovery add still lands), ErrBadRequest for invalid ids — and,
// as AddAsync promises, never a callback from within AddAsync, even for a
// refusal the engine makes at once.
func TestLocalAddsAnswerAsTheServer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n, remote, local, dials := localAndRemote(t, ctx)
	const entries = 200
	payload := func(e int64) []byte { return bytes.Repeat([]byte{byte(e)}, 10+int(e)) }
	results := make(chan error, entries)
	for e := range int64(entries - 1) {
		local.AddAsync(n.Addr(), client.AddRequest{LedgerID: 3, EntryID: e, LastAddConfirmed: e - 1, Payload: payload(e)},
			func(err error) { results <- err })
	}
	if err := local.Add(ctx, n.Addr(), client.AddRequest{LedgerID: 3, EntryID: entries - 1, LastAddConfirmed: entries - 2, Payload: payload(entries - 1)}); err != nil {
		t.Fatal(err)
	}
	for range entries - 1 {
		if err := <-results; err != nil {
			t.Fatal(err)
		}
	}
	for e := range int64(entries) {
		got, err := remote.Read(ctx, n.Addr(), 3, e, false)
		if err != nil || !bytes.Equal(got.Payload, payload(e)) || got.LastAddConfirmed != e-1 {
			t.Fatalf("entry %d read over the network: %v, LAC %d", e, err, got.LastAddConfirmed)
		}
	}

	if _, err := remote.Read(ctx, n.Addr(), 3, entries-1, true); err != nil { // fences ledger 3
		t.Fatal(err)
	}
	if err := local.Add(ctx, n.Addr(), client.AddRequest{LedgerID: 3, EntryID: entries, LastAddConfirmed: entries - 1, Payload: []byte("late")}); !errors.Is(err, client.ErrFenced) {
		t.Fatalf("an add to a fenced ledger: %v, want ErrFenced", err)
	}
	if err := local.Add(ctx, n.Addr(), client.AddRequest{LedgerID: 3, EntryID: entries, LastAddConfirmed: entries - 1, Recovery: true, Payload: []byte("recovered")}); err != nil {
		t.Fatalf("a recovery add to a fenced ledger: %v", err)
	}

	// A refusal made at once still reaches done after AddAsync returned:
	// done waits for that, so a callback from within AddAsync would never
	// let it return.
	returned, refused := make(chan struct{}), make(chan error, 1)
	go func() {
		local.AddAsync(n.Addr(), client.AddRequest{LedgerID: -1, EntryID: 0, LastAddConfirmed: -1}, func(err error) {
			<-returned
			refused <- err
		})
		close(returned)
	}()
	select {
	case <-returned:
	case <-ctx.Done():
		t.Fatal("AddAsync called done before returning")
	}
	if err := <-refused; !errors.Is(err, client.ErrBadRequest) {
		t.Fatalf("an add with invalid ids: %v, want ErrBadRequest", err)
	}
	if d := dials.Load(); d != 0 {
		t.Fatalf("%d dials for local adds", d)
	}
	local.Close()
	if err := local.Add(ctx, n.Addr(), client.AddRequest{LedgerID: 4, EntryID: 0, LastAddConfirmed: -1}); !errors.Is(err, client.ErrClosed) {
		t.Fatalf("after Close: %v, want ErrClosed", err)
	}
}
