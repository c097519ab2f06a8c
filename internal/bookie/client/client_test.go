package client_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protowire"

	"quire/internal/bookie/client"
	"quire/internal/bookie/server"
	"quire/internal/bookie/server/memengine"
	"quire/internal/bookie/wire"
)

// testDeadline bounds every wait in these tests; a hang fails instead of stalling CI.
const testDeadline = 10 * time.Second

func testContext(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), testDeadline)
	t.Cleanup(cancel)
	return ctx
}

func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// recordingListener remembers accepted connections so a test can drop them server-side.
type recordingListener struct {
	net.Listener
	mu    sync.Mutex
	conns []net.Conn
}

func (l *recordingListener) Accept() (net.Conn, error) {
	nc, err := l.Listener.Accept()
	if err == nil {
		l.mu.Lock()
		l.conns = append(l.conns, nc)
		l.mu.Unlock()
	}
	return nc, err
}

// dropAll closes every accepted connection, as a bookie crash or a network reset would.
func (l *recordingListener) dropAll() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, nc := range l.conns {
		nc.Close()
	}
	n := len(l.conns)
	l.conns = nil
	return n
}

type bookie struct {
	addr string
	eng  *memengine.Engine
	ln   *recordingListener
}

func startBookie(t testing.TB, cfg server.Config) *bookie {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	rl := &recordingListener{Listener: ln}
	if cfg.Logger == nil {
		cfg.Logger = testLogger(t)
	}
	eng := memengine.New()
	srv := server.New(cfg, eng)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(rl) }()
	t.Cleanup(func() {
		srv.Close()
		if err := <-served; !errors.Is(err, server.ErrServerClosed) {
			t.Errorf("Serve: %v", err)
		}
	})
	return &bookie{addr: ln.Addr().String(), eng: eng, ln: rl}
}

func newClient(t testing.TB, cfg client.Config) *client.Client {
	if cfg.Logger == nil {
		cfg.Logger = testLogger(t)
	}
	c := client.New(cfg)
	t.Cleanup(c.Close)
	return c
}

func payloadOf(ledger, entry int64) []byte {
	return fmt.Appendf(nil, "ledger %d entry %d", ledger, entry)
}

// asyncResults collects AddAsync outcomes.
type asyncResults struct {
	wg   sync.WaitGroup
	mu   sync.Mutex
	errs []error
}

func (r *asyncResults) add(c *client.Client, addr string, req client.AddRequest) {
	r.wg.Add(1)
	c.AddAsync(addr, req, func(err error) {
		r.mu.Lock()
		r.errs = append(r.errs, err)
		r.mu.Unlock()
		r.wg.Done()
	})
}

// wait returns every outcome once all have arrived, failing the test after testDeadline.
func (r *asyncResults) wait(t testing.TB) []error {
	t.Helper()
	done := make(chan struct{})
	go func() {
		r.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(testDeadline):
		t.Fatal("async adds did not complete")
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.errs
}

// TestPipelinedAdds keeps thousands of adds in flight at once, completes them in reverse
// order, and then reads every entry back concurrently: every response reached its own
// request.
func TestPipelinedAdds(t *testing.T) {
	const n = 5000
	b := startBookie(t, server.Config{})
	c := newClient(t, client.Config{MaxInFlightPerConn: n})
	ctx := testContext(t)

	b.eng.Hold()
	var results asyncResults
	for i := range int64(n) {
		results.add(c, b.addr, client.AddRequest{LedgerID: 1, EntryID: i, LastAddConfirmed: i - 1, Payload: payloadOf(1, i)})
	}
	if err := b.eng.WaitHeld(ctx, n); err != nil {
		t.Fatal(err) // all n are in the bookie at the same time
	}
	b.eng.Release(true)
	for _, err := range results.wait(t) {
		if err != nil {
			t.Fatal(err)
		}
	}

	// Unheld now: more adds on other ledgers race with reads of the first.
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for ledger := int64(2); ledger < 6; ledger++ {
		wg.Go(func() {
			var more asyncResults
			for i := range int64(1000) {
				more.add(c, b.addr, client.AddRequest{LedgerID: ledger, EntryID: i, LastAddConfirmed: i - 1, Payload: payloadOf(ledger, i)})
			}
			more.wg.Wait() // bounded by AsyncTimeout
			for _, err := range more.errs {
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	for reader := range int64(8) {
		wg.Go(func() {
			for i := reader; i < n; i += 8 {
				e, err := c.Read(ctx, b.addr, 1, i, false)
				if err != nil {
					errs <- err
					return
				}
				if e.EntryID != i || !bytes.Equal(e.Payload, payloadOf(1, i)) {
					errs <- fmt.Errorf("read of entry %d got entry %d payload %q", i, e.EntryID, e.Payload)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for ledger := int64(2); ledger < 6; ledger++ {
		if got := b.eng.EntryCount(ledger); got != 1000 {
			t.Errorf("ledger %d has %d entries, want 1000", ledger, got)
		}
	}
}

func TestReadFenceAndStatusErrors(t *testing.T) {
	b := startBookie(t, server.Config{})
	c := newClient(t, client.Config{})
	ctx := testContext(t)

	for i := range int64(3) {
		if err := c.Add(ctx, b.addr, client.AddRequest{LedgerID: 9, EntryID: i, LastAddConfirmed: i - 1, Payload: payloadOf(9, i)}); err != nil {
			t.Fatal(err)
		}
	}
	e, err := c.Read(ctx, b.addr, 9, 2, false)
	if err != nil || !bytes.Equal(e.Payload, payloadOf(9, 2)) || e.LastAddConfirmed != 1 {
		t.Fatalf("read: %+v, %v", e, err)
	}
	lac, err := c.Read(ctx, b.addr, 9, -1, true)
	if err != nil || lac.LastAddConfirmed != 1 || lac.EntryID != -1 {
		t.Fatalf("fencing LAC read: %+v, %v", lac, err)
	}
	if !b.eng.Fenced(9) {
		t.Fatal("ledger not fenced")
	}

	tests := []struct {
		name string
		err  error
		want error
	}{
		{"add after fence", c.Add(ctx, b.addr, client.AddRequest{LedgerID: 9, EntryID: 3, LastAddConfirmed: 2}), client.ErrFenced},
		{"recovery add after fence", c.Add(ctx, b.addr, client.AddRequest{LedgerID: 9, EntryID: 3, LastAddConfirmed: 2, Recovery: true}), nil},
		{"missing entry", readErr(c.Read(ctx, b.addr, 9, 100, false)), client.ErrNoSuchEntry},
		{"missing ledger", readErr(c.Read(ctx, b.addr, 10, 0, false)), client.ErrNoSuchLedger},
		{"bad request", readErr(c.Read(ctx, b.addr, -4, 0, false)), client.ErrBadRequest},
		{"negative batch bound", batchErr(c.ReadRange(ctx, b.addr, 9, 0, -1, 0)), client.ErrBadRequest},
	}
	for _, tc := range tests {
		if !errors.Is(tc.err, tc.want) || (tc.want == nil && tc.err != nil) {
			t.Errorf("%s: got %v, want %v", tc.name, tc.err, tc.want)
		}
	}
	var se *wire.StatusError
	if err := tests[0].err; !errors.As(err, &se) || se.Status != wire.Status_FENCED || se.Message == "" {
		t.Errorf("fenced add: want a StatusError with the bookie's message, got %v", err)
	}

	b.eng.SetInfo(1, 2, true)
	if err := c.Add(ctx, b.addr, client.AddRequest{LedgerID: 11, EntryID: 0, LastAddConfirmed: -1}); !errors.Is(err, client.ErrReadOnly) {
		t.Errorf("add to a read-only bookie: %v", err)
	}
}

func readErr(_ client.Entry, err error) error               { return err }
func batchErr(_ []client.Entry, err error) error            { return err }
func longPollErr(_ int64, _ *client.Entry, err error) error { return err }

func TestLongPollRead(t *testing.T) {
	b := startBookie(t, server.Config{})
	c := newClient(t, client.Config{})
	ctx := testContext(t)
	for i := range int64(2) {
		if err := c.Add(ctx, b.addr, client.AddRequest{LedgerID: 3, EntryID: i, LastAddConfirmed: i - 1, Payload: payloadOf(3, i)}); err != nil {
			t.Fatal(err)
		}
	}
	// LAC is 0; waiting for more than 0 returns when entry 2's add carries LAC 1.
	type pollResult struct {
		lac   int64
		entry *client.Entry
		err   error
	}
	polled := make(chan pollResult, 1)
	go func() {
		lac, entry, err := c.LongPollRead(ctx, b.addr, 3, 0, time.Minute)
		polled <- pollResult{lac, entry, err}
	}()
	if err := b.eng.WaitWatchers(ctx, 3, 1); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-polled:
		t.Fatalf("long poll returned before the LAC moved: %+v", r)
	default:
	}
	if err := c.Add(ctx, b.addr, client.AddRequest{LedgerID: 3, EntryID: 2, LastAddConfirmed: 1, Payload: payloadOf(3, 2)}); err != nil {
		t.Fatal(err)
	}
	r := <-polled
	if r.err != nil || r.lac != 1 || r.entry == nil || r.entry.EntryID != 1 || !bytes.Equal(r.entry.Payload, payloadOf(3, 1)) {
		t.Fatalf("long poll: %+v", r)
	}

	start := time.Now()
	err := longPollErr(c.LongPollRead(ctx, b.addr, 3, 1, 30*time.Millisecond))
	if !errors.Is(err, client.ErrTimeout) {
		t.Fatalf("idle long poll: %v, want ErrTimeout", err)
	}
	if waited := time.Since(start); waited < 30*time.Millisecond {
		t.Fatalf("TIMEOUT after %v, before the 30ms timeout", waited)
	}
}

// writeLac sends an explicit LAC and waits for its outcome.
func writeLac(t *testing.T, c *client.Client, addr string, ledgerID, lac int64) error {
	t.Helper()
	done := make(chan error, 1)
	c.WriteLacAsync(addr, ledgerID, lac, func(err error) { done <- err })
	select {
	case err := <-done:
		return err
	case <-time.After(testDeadline):
		t.Fatalf("write LAC %d of ledger %d: no outcome within %v", lac, ledgerID, testDeadline)
		return nil
	}
}

// TestWriteLacAsync: an explicit LAC follows the ledger's adds on their connection, raises
// the bookie's LAC, wakes a long poll that no add would, and maps the bookie's refusals.
func TestWriteLacAsync(t *testing.T) {
	b := startBookie(t, server.Config{})
	c := newClient(t, client.Config{})
	ctx := testContext(t)
	if err := writeLac(t, c, b.addr, 3, 0); !errors.Is(err, client.ErrNoSuchLedger) {
		t.Fatalf("write LAC of a ledger the bookie does not hold: %v, want ErrNoSuchLedger", err)
	}

	// Sent right behind two adds, without waiting for them: it reaches the bookie after
	// them (otherwise the ledger would not exist there yet), and raises the LAC to 1.
	var adds asyncResults
	for i := range int64(2) {
		adds.add(c, b.addr, client.AddRequest{LedgerID: 3, EntryID: i, LastAddConfirmed: i - 1, Payload: payloadOf(3, i)})
	}
	if err := writeLac(t, c, b.addr, 3, 1); err != nil {
		t.Fatalf("write LAC behind the adds: %v", err)
	}
	for _, err := range adds.wait(t) {
		if err != nil {
			t.Fatal(err)
		}
	}
	if e, err := c.Read(ctx, b.addr, 3, -1, false); err != nil || e.LastAddConfirmed != 1 {
		t.Fatalf("LAC after the update: %+v, %v; want 1", e, err)
	}

	// A poll waiting at LAC 1 is not woken by the add of entry 2 (it carries LAC 1), only by
	// the update that confirms entry 2; the poll's answer carries entry 2.
	type pollResult struct {
		lac   int64
		entry *client.Entry
		err   error
	}
	polled := make(chan pollResult, 1)
	go func() {
		lac, entry, err := c.LongPollRead(ctx, b.addr, 3, 1, time.Minute)
		polled <- pollResult{lac, entry, err}
	}()
	if err := b.eng.WaitWatchers(ctx, 3, 1); err != nil {
		t.Fatal(err)
	}
	if err := c.Add(ctx, b.addr, client.AddRequest{LedgerID: 3, EntryID: 2, LastAddConfirmed: 1, Payload: payloadOf(3, 2)}); err != nil {
		t.Fatal(err)
	}
	if err := writeLac(t, c, b.addr, 3, 2); err != nil {
		t.Fatal(err)
	}
	r := <-polled
	if r.err != nil || r.lac != 2 || r.entry == nil || r.entry.EntryID != 2 || !bytes.Equal(r.entry.Payload, payloadOf(3, 2)) {
		t.Fatalf("long poll woken by the explicit LAC: %+v", r)
	}
	// An older LAC never lowers the bookie's.
	if err := writeLac(t, c, b.addr, 3, 0); err != nil {
		t.Fatal(err)
	}
	if lac := b.eng.LAC(3); lac != 2 {
		t.Fatalf("LAC %d after a lower update, want 2 kept", lac)
	}

	if _, err := c.Read(ctx, b.addr, 3, -1, true); err != nil {
		t.Fatal(err)
	}
	if err := writeLac(t, c, b.addr, 3, 2); !errors.Is(err, client.ErrFenced) {
		t.Fatalf("write LAC of a fenced ledger: %v, want ErrFenced", err)
	}
	if err := writeLac(t, c, b.addr, 3, -2); !errors.Is(err, client.ErrBadRequest) {
		t.Fatalf("write LAC -2: %v, want ErrBadRequest", err)
	}
}

// TestReadRange: a range read answers what the bookie holds from the first
// entry on, bounded by the request and by one frame; a caller continues
// after the last entry it got and so reads everything, each entry once.
func TestReadRange(t *testing.T) {
	const maxFrame = 4096
	b := startBookie(t, server.Config{MaxFrameBytes: maxFrame})
	c := newClient(t, client.Config{})
	ctx := testContext(t)
	big := func(entry int64) []byte { return bytes.Repeat(payloadOf(9, entry), 60) } // ~1 KiB
	const n = 20
	for i := range int64(n) {
		if err := c.Add(ctx, b.addr, client.AddRequest{LedgerID: 9, EntryID: i, LastAddConfirmed: i - 1, Payload: big(i)}); err != nil {
			t.Fatal(err)
		}
	}
	if entries, err := c.ReadRange(ctx, b.addr, 9, 18, 10, 0); err != nil || len(entries) != 2 {
		t.Fatalf("range past the end: %d entries, %v; want the 2 held", len(entries), err)
	}
	if _, err := c.ReadRange(ctx, b.addr, 9, n, 10, 0); !errors.Is(err, client.ErrNoSuchEntry) {
		t.Fatalf("range from past the end: %v, want ErrNoSuchEntry", err)
	}
	if _, err := c.ReadRange(ctx, b.addr, 10, 0, 10, 0); !errors.Is(err, client.ErrNoSuchLedger) {
		t.Fatalf("range of an unknown ledger: %v, want ErrNoSuchLedger", err)
	}
	// Unbounded by the request, bounded by the 4 KiB frame: a few entries
	// per answer.
	next, answers := int64(0), 0
	for next < n {
		entries, err := c.ReadRange(ctx, b.addr, 9, next, 0, 0)
		if err != nil {
			t.Fatalf("range from %d: %v", next, err)
		}
		if len(entries) >= n {
			t.Fatalf("range from %d: %d entries in a %d-byte frame", next, len(entries), maxFrame)
		}
		for _, e := range entries {
			if e.EntryID != next || !bytes.Equal(e.Payload, big(next)) {
				t.Fatalf("entry %d: id %d, %d bytes", next, e.EntryID, len(e.Payload))
			}
			next++
		}
		answers++
	}
	t.Logf("%d entries of ~1 KiB in %d frame-bounded answers", n, answers)
}

func TestBatchReadDeleteInfo(t *testing.T) {
	b := startBookie(t, server.Config{})
	c := newClient(t, client.Config{})
	ctx := testContext(t)
	for i := range int64(20) {
		if err := c.Add(ctx, b.addr, client.AddRequest{LedgerID: 4, EntryID: i, LastAddConfirmed: i - 1, Payload: payloadOf(4, i)}); err != nil {
			t.Fatal(err)
		}
	}
	entries, err := c.ReadRange(ctx, b.addr, 4, 5, 10, 0)
	if err != nil || len(entries) != 10 {
		t.Fatalf("batch read: %d entries, %v", len(entries), err)
	}
	for i, e := range entries {
		if want := int64(5 + i); e.EntryID != want || !bytes.Equal(e.Payload, payloadOf(4, want)) {
			t.Fatalf("entry %d: %+v", i, e)
		}
	}
	if entries, err := c.ReadRange(ctx, b.addr, 4, 15, 0, 1); err != nil || len(entries) != 1 {
		t.Fatalf("batch read bounded by bytes: %d entries, %v", len(entries), err)
	}
	free, total, readOnly, err := c.Info(ctx, b.addr)
	if err != nil || free != 1<<30 || total != 2<<30 || readOnly {
		t.Fatalf("info: %d %d %v %v", free, total, readOnly, err)
	}
	if err := c.DeleteLedger(ctx, b.addr, 4); err != nil {
		t.Fatal(err)
	}
	if err := c.DeleteLedger(ctx, b.addr, 4); !errors.Is(err, client.ErrNoSuchLedger) {
		t.Fatalf("second delete: %v", err)
	}
}

// TestServerWindowFull: a client allowed more in flight than the bookie gets
// TOO_MANY_REQUESTS for the excess, and carries on once the window drains.
func TestServerWindowFull(t *testing.T) {
	b := startBookie(t, server.Config{MaxInFlightPerConn: 2})
	c := newClient(t, client.Config{MaxInFlightPerConn: 10})
	ctx := testContext(t)
	b.eng.Hold()
	var held asyncResults
	for i := range int64(2) {
		held.add(c, b.addr, client.AddRequest{LedgerID: 1, EntryID: i, LastAddConfirmed: -1})
	}
	if err := b.eng.WaitHeld(ctx, 2); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Read(ctx, b.addr, 1, 0, false); !errors.Is(err, client.ErrTooManyRequests) {
		t.Fatalf("third request: %v, want ErrTooManyRequests", err)
	}
	b.eng.Release(false)
	for _, err := range held.wait(t) {
		if err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.Read(ctx, b.addr, 1, 0, false); err != nil {
		t.Fatal(err)
	}
}

// TestClientWindowFull: with its own window full, a call waits for room until its context
// ends, and the window opens again as responses arrive.
func TestClientWindowFull(t *testing.T) {
	b := startBookie(t, server.Config{})
	c := newClient(t, client.Config{MaxInFlightPerConn: 2})
	ctx := testContext(t)
	b.eng.Hold()
	var held asyncResults
	for i := range int64(2) {
		held.add(c, b.addr, client.AddRequest{LedgerID: 1, EntryID: i, LastAddConfirmed: -1})
	}
	if err := b.eng.WaitHeld(ctx, 2); err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if _, err := c.Read(short, b.addr, 1, 0, false); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("call with the window full: %v, want DeadlineExceeded", err)
	}
	b.eng.Release(false)
	held.wait(t)
	if _, err := c.Read(ctx, b.addr, 1, 0, false); err != nil {
		t.Fatal(err)
	}
}

// TestDroppedConnection: the bookie drops the connection with adds in flight; every one
// fails with ErrConnection, and the next request redials and succeeds.
func TestDroppedConnection(t *testing.T) {
	b := startBookie(t, server.Config{})
	var dials atomic.Int32
	c := newClient(t, client.Config{Dial: func(ctx context.Context, addr string) (net.Conn, error) {
		dials.Add(1)
		var d net.Dialer
		return d.DialContext(ctx, "tcp", addr)
	}})
	ctx := testContext(t)
	b.eng.Hold()
	var pending asyncResults
	for i := range int64(10) {
		pending.add(c, b.addr, client.AddRequest{LedgerID: 1, EntryID: i, LastAddConfirmed: -1})
	}
	if err := b.eng.WaitHeld(ctx, 10); err != nil {
		t.Fatal(err)
	}
	if n := b.ln.dropAll(); n != 1 {
		t.Fatalf("dropped %d connections, want 1", n)
	}
	errs := pending.wait(t)
	for _, err := range errs {
		if !errors.Is(err, client.ErrConnection) {
			t.Fatalf("pending add: %v, want ErrConnection", err)
		}
	}
	if len(errs) != 10 {
		t.Fatalf("%d outcomes, want 10", len(errs))
	}
	b.eng.Release(false) // late completions go nowhere

	if err := c.Add(ctx, b.addr, client.AddRequest{LedgerID: 1, EntryID: 10, LastAddConfirmed: -1}); err != nil {
		t.Fatalf("add after redial: %v", err)
	}
	if got := dials.Load(); got != 2 {
		t.Fatalf("%d dials, want 2", got)
	}
}

// TestDialFailureBackoff: after a failed dial, requests fail fast without dialling again
// until the backoff passes.
func TestDialFailureBackoff(t *testing.T) {
	var dials atomic.Int32
	refused := errors.New("connection refused")
	c := newClient(t, client.Config{
		RedialBackoffMin: time.Hour,
		Dial: func(context.Context, string) (net.Conn, error) {
			dials.Add(1)
			return nil, refused
		},
	})
	ctx := testContext(t)
	_, _, _, err := c.Info(ctx, "bookie-1:3181")
	if !errors.Is(err, client.ErrConnection) || !errors.Is(err, refused) {
		t.Fatalf("first call: %v", err)
	}
	_, _, _, err = c.Info(ctx, "bookie-1:3181")
	if !errors.Is(err, client.ErrConnection) || dials.Load() != 1 {
		t.Fatalf("call during backoff: %v after %d dials, want ErrConnection after 1", err, dials.Load())
	}
	var results asyncResults
	results.add(c, "bookie-1:3181", client.AddRequest{LedgerID: 1})
	if errs := results.wait(t); !errors.Is(errs[0], client.ErrConnection) {
		t.Fatalf("async add during backoff: %v", errs[0])
	}
}

// TestAsyncTimeout: an add that the bookie never answers fails after AsyncTimeout, and
// its late answer is ignored.
func TestAsyncTimeout(t *testing.T) {
	b := startBookie(t, server.Config{})
	c := newClient(t, client.Config{AsyncTimeout: 30 * time.Millisecond})
	b.eng.Hold()
	var results asyncResults
	start := time.Now()
	results.add(c, b.addr, client.AddRequest{LedgerID: 1, EntryID: 0, LastAddConfirmed: -1})
	errs := results.wait(t)
	if !errors.Is(errs[0], context.DeadlineExceeded) {
		t.Fatalf("unanswered add: %v", errs[0])
	}
	if waited := time.Since(start); waited < 30*time.Millisecond {
		t.Fatalf("failed after %v, before AsyncTimeout", waited)
	}
	b.eng.Release(false)
	if err := c.Add(testContext(t), b.addr, client.AddRequest{LedgerID: 1, EntryID: 1, LastAddConfirmed: -1}); err != nil {
		t.Fatal(err)
	}
}

func TestOversizedRequestIsNotSent(t *testing.T) {
	const maxFrame = 4096
	b := startBookie(t, server.Config{MaxFrameBytes: maxFrame})
	c := newClient(t, client.Config{MaxFrameBytes: maxFrame})
	ctx := testContext(t)
	err := c.Add(ctx, b.addr, client.AddRequest{LedgerID: 1, EntryID: 0, LastAddConfirmed: -1, Payload: make([]byte, maxFrame)})
	if !errors.Is(err, client.ErrFrameTooLarge) {
		t.Fatalf("oversized add: %v", err)
	}
	// The largest add the client sends can be read back: its read response fits a frame.
	big := bytes.Repeat([]byte("p"), maxFrame-wire.FrameOverheadBytes-32)
	if err := c.Add(ctx, b.addr, client.AddRequest{LedgerID: 1, EntryID: 0, LastAddConfirmed: -1, Payload: big}); err != nil {
		t.Fatal(err)
	}
	if e, err := c.Read(ctx, b.addr, 1, 0, false); err != nil || !bytes.Equal(e.Payload, big) {
		t.Fatalf("read back: %v", err)
	}
}

func TestCloseFailsPending(t *testing.T) {
	b := startBookie(t, server.Config{})
	c := client.New(client.Config{Logger: testLogger(t)})
	b.eng.Hold()
	var pending asyncResults
	for i := range int64(5) {
		pending.add(c, b.addr, client.AddRequest{LedgerID: 1, EntryID: i, LastAddConfirmed: -1})
	}
	if err := b.eng.WaitHeld(testContext(t), 5); err != nil {
		t.Fatal(err)
	}
	c.Close()
	for _, err := range pending.wait(t) {
		if !errors.Is(err, client.ErrClosed) {
			t.Fatalf("pending add at Close: %v", err)
		}
	}
	if err := c.Add(testContext(t), b.addr, client.AddRequest{LedgerID: 1, EntryID: 9}); !errors.Is(err, client.ErrClosed) {
		t.Fatalf("add after Close: %v", err)
	}
	b.eng.Release(false)
}

// TestMalformedResponseStream: a "bookie" that answers with garbage fails the pending
// request with ErrConnection wrapping ErrMalformed.
func TestMalformedResponseStream(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		nc, err := ln.Accept()
		if err != nil {
			return
		}
		defer nc.Close()
		buf := make([]byte, 1)
		nc.Read(buf) // wait for the request, then answer nonsense
		nc.Write([]byte{0, 0, 0, 3, 0xFF, 0xFF, 0xFF})
		nc.Read(buf) // until the client hangs up
	}()
	c := newClient(t, client.Config{})
	_, _, _, err = c.Info(testContext(t), ln.Addr().String())
	if !errors.Is(err, client.ErrConnection) || !errors.Is(err, client.ErrMalformed) {
		t.Fatalf("got %v, want ErrConnection wrapping ErrMalformed", err)
	}
}

func TestCanceledContext(t *testing.T) {
	b := startBookie(t, server.Config{})
	c := newClient(t, client.Config{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := c.Add(ctx, b.addr, client.AddRequest{LedgerID: 1}); !errors.Is(err, context.Canceled) {
		t.Fatalf("add with canceled context: %v", err)
	}
}

// TestAddAnswers: each way a bookie may answer an add, through the fast decoder or protobuf,
// gives AddAsync the right outcome. A scripted "bookie" answers add entry i in the way
// answers[i] says.
func TestAddAnswers(t *testing.T) {
	okFrame := func(id uint64, ledger, entry int64) []byte {
		return wire.AppendAddOKResponseFrame(nil, id, ledger, entry)
	}
	protoFrame := func(resp *wire.Response) []byte {
		b, err := wire.AppendFrame(nil, resp)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	answers := []struct {
		name   string
		frame  func(id uint64) []byte
		wantIs error // nil: success
	}{
		{"ok", func(id uint64) []byte { return okFrame(id, 1, 1) }, nil},
		{"ok for another entry", func(id uint64) []byte { return okFrame(id, 1, 99) }, client.ErrMalformed},
		{"ok without body", func(id uint64) []byte { return protoFrame(&wire.Response{RequestId: id, Status: wire.Status_OK}) }, client.ErrMalformed},
		{"fenced without message", func(id uint64) []byte {
			return protoFrame(&wire.Response{RequestId: id, Status: wire.Status_FENCED})
		}, client.ErrFenced},
		{"fenced with message", func(id uint64) []byte {
			return protoFrame(&wire.Response{RequestId: id, Status: wire.Status_FENCED, ErrorMessage: "fenced by recovery"})
		}, client.ErrFenced},
		{"ok with an unknown field", func(id uint64) []byte {
			b := okFrame(id, 1, 6)[wire.FrameHeaderBytes:]
			b = protowire.AppendVarint(protowire.AppendTag(b, 99, protowire.VarintType), 1)
			return append(binary.BigEndian.AppendUint32(nil, uint32(len(b))), b...)
		}, nil},
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		nc, err := ln.Accept()
		if err != nil {
			return
		}
		defer nc.Close()
		fr := wire.NewFrameReader(bufio.NewReader(nc), 0)
		for {
			req, err := fr.ReadRequest()
			if err != nil {
				return
			}
			entry := req.GetAdd().GetEntryId()
			if entry == 0 { // the first add only opens the connection
				nc.Write(okFrame(req.GetRequestId(), 1, 0))
				continue
			}
			nc.Write(answers[entry-1].frame(req.GetRequestId()))
		}
	}()
	c := newClient(t, client.Config{})
	addr := ln.Addr().String()
	if err := c.Add(testContext(t), addr, client.AddRequest{LedgerID: 1, EntryID: 0}); err != nil {
		t.Fatal(err)
	}
	for i, a := range answers {
		done := make(chan error, 1)
		c.AddAsync(addr, client.AddRequest{LedgerID: 1, EntryID: int64(i + 1), Payload: []byte("p")}, func(err error) { done <- err })
		err := <-done
		switch {
		case a.wantIs == nil && err != nil:
			t.Errorf("%s: %v", a.name, err)
		case a.wantIs != nil && !errors.Is(err, a.wantIs):
			t.Errorf("%s: got %v, want %v", a.name, err, a.wantIs)
		}
	}
}

// TestRangeReadsHaveTheirOwnConnection: ranged reads go to a bookie on a
// connection apart from adds (ReadConnsPerBookie), so a catch-up reader's
// answers of megabytes never queue ahead of add acknowledgements on one
// TCP stream.
func TestRangeReadsHaveTheirOwnConnection(t *testing.T) {
	b := startBookie(t, server.Config{})
	var dials atomic.Int32
	c := newClient(t, client.Config{Dial: func(ctx context.Context, addr string) (net.Conn, error) {
		dials.Add(1)
		var d net.Dialer
		return d.DialContext(ctx, "tcp", addr)
	}})
	ctx := testContext(t)
	for i := range int64(4) {
		if err := c.Add(ctx, b.addr, client.AddRequest{LedgerID: 3, EntryID: i, LastAddConfirmed: i - 1, Payload: payloadOf(3, i)}); err != nil {
			t.Fatal(err)
		}
	}
	if n := dials.Load(); n != 1 {
		t.Fatalf("%d connections for adds, want 1", n)
	}
	for range 2 {
		if es, err := c.ReadRange(ctx, b.addr, 3, 0, 4, 0); err != nil || len(es) != 4 {
			t.Fatalf("range read: %d entries, %v", len(es), err)
		}
		if _, err := c.Read(ctx, b.addr, 3, 1, false); err != nil {
			t.Fatal(err)
		}
	}
	if n := dials.Load(); n != 2 {
		t.Fatalf("%d connections after adds, entry reads and range reads, want 2 (one for range reads)", n)
	}
}
