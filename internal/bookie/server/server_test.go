package server_test

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
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/encoding/protowire"

	"quire/internal/bookie/server"
	"quire/internal/bookie/server/memengine"
	"quire/internal/bookie/wire"
	"quire/internal/testutil"
)

// testDeadline bounds every wait in these tests; a hang fails instead of stalling CI.
const testDeadline = 10 * time.Second

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), testDeadline)
	t.Cleanup(cancel)
	return ctx
}

func startServer(t *testing.T, cfg server.Config, eng server.Engine) (string, *server.Server) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	srv := server.New(cfg, eng)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	t.Cleanup(func() {
		srv.Close()
		if err := <-served; !errors.Is(err, server.ErrServerClosed) {
			t.Errorf("Serve returned %v, want ErrServerClosed", err)
		}
	})
	return ln.Addr().String(), srv
}

// rawConn speaks frames directly, to test the server without the client's own checks.
type rawConn struct {
	t  *testing.T
	nc net.Conn
	fr *wire.FrameReader
}

func dialRaw(t *testing.T, addr string) *rawConn {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	nc.SetDeadline(time.Now().Add(testDeadline))
	t.Cleanup(func() { nc.Close() })
	return &rawConn{t: t, nc: nc, fr: wire.NewFrameReader(bufio.NewReader(nc), 0)}
}

func (r *rawConn) send(req *wire.Request) {
	r.t.Helper()
	if err := wire.WriteFrame(r.nc, req); err != nil {
		r.t.Fatalf("send %v: %v", req, err)
	}
}

func (r *rawConn) recv() *wire.Response {
	r.t.Helper()
	resp, err := r.fr.ReadResponse()
	if err != nil {
		r.t.Fatalf("receive: %v", err)
	}
	return resp
}

func (r *rawConn) call(req *wire.Request) *wire.Response {
	r.t.Helper()
	r.send(req)
	resp := r.recv()
	if resp.GetRequestId() != req.GetRequestId() {
		r.t.Fatalf("response id %d for request %d", resp.GetRequestId(), req.GetRequestId())
	}
	return resp
}

// expectClosed waits until the server closes the connection (read fails without a frame).
func (r *rawConn) expectClosed() {
	r.t.Helper()
	resp, err := r.fr.ReadResponse()
	if err == nil {
		r.t.Fatalf("connection still open: got response %v", resp)
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		r.t.Fatalf("server did not close the connection within %v", testDeadline)
	}
}

func addReq(id uint64, ledger, entry, lac int64, payload string) *wire.Request {
	return &wire.Request{RequestId: id, Body: &wire.Request_Add{Add: &wire.AddRequest{
		LedgerId: ledger, EntryId: entry, LastAddConfirmed: lac, Payload: []byte(payload),
	}}}
}

func readReq(id uint64, ledger, entry int64, fence bool) *wire.Request {
	return &wire.Request{RequestId: id, Body: &wire.Request_Read{Read: &wire.ReadRequest{
		LedgerId: ledger, EntryId: entry, Fence: fence,
	}}}
}

func longPollReq(id uint64, ledger, previousLAC int64, timeout time.Duration) *wire.Request {
	return &wire.Request{RequestId: id, Body: &wire.Request_LongPollRead{LongPollRead: &wire.LongPollReadRequest{
		LedgerId: ledger, PreviousLac: previousLAC, TimeoutMs: uint32(timeout.Milliseconds()),
	}}}
}

func writeLacReq(id uint64, ledger, lac int64) *wire.Request {
	return &wire.Request{RequestId: id, Body: &wire.Request_WriteLac{WriteLac: &wire.WriteLacRequest{
		LedgerId: ledger, Lac: lac,
	}}}
}

// TestRequestScript runs one request of each kind, in an order that exercises fencing, and
// checks each status and the interesting body fields.
func TestRequestScript(t *testing.T) {
	eng := memengine.New()
	addr, _ := startServer(t, server.Config{}, eng)
	rc := dialRaw(t, addr)

	steps := []struct {
		name  string
		req   *wire.Request
		want  wire.Status
		check func(t *testing.T, resp *wire.Response)
	}{
		{"add 0", addReq(1, 5, 0, -1, "zero"), wire.Status_OK, func(t *testing.T, resp *wire.Response) {
			if a := resp.GetAdd(); a.GetLedgerId() != 5 || a.GetEntryId() != 0 {
				t.Errorf("add response %v", a)
			}
		}},
		{"add 1", addReq(2, 5, 1, 0, "one"), wire.Status_OK, nil},
		{"add 2", addReq(3, 5, 2, 1, "two"), wire.Status_OK, nil},
		{"read entry", readReq(4, 5, 1, false), wire.Status_OK, func(t *testing.T, resp *wire.Response) {
			if r := resp.GetRead(); string(r.GetPayload()) != "one" || r.GetEntryId() != 1 || r.GetLastAddConfirmed() != 0 {
				t.Errorf("read response %v", r)
			}
		}},
		{"read LAC", readReq(5, 5, -1, false), wire.Status_OK, func(t *testing.T, resp *wire.Response) {
			if lac := resp.GetRead().GetLastAddConfirmed(); lac != 1 {
				t.Errorf("LAC %d, want 1", lac)
			}
		}},
		{"write LAC", writeLacReq(30, 5, 2), wire.Status_OK, func(t *testing.T, resp *wire.Response) {
			if w := resp.GetWriteLac(); w.GetLedgerId() != 5 || w.GetLastAddConfirmed() != 2 {
				t.Errorf("write LAC response %v", w)
			}
		}},
		{"write a lower LAC", writeLacReq(31, 5, 0), wire.Status_OK, func(t *testing.T, resp *wire.Response) {
			if lac := resp.GetWriteLac().GetLastAddConfirmed(); lac != 2 {
				t.Errorf("LAC %d after a lower update, want 2 kept", lac)
			}
		}},
		{"write LAC of a missing ledger", writeLacReq(32, 99, 0), wire.Status_NO_SUCH_LEDGER, nil},
		{"write LAC below -1", writeLacReq(33, 5, -2), wire.Status_BAD_REQUEST, nil},
		{"missing entry", readReq(6, 5, 9, false), wire.Status_NO_SUCH_ENTRY, nil},
		{"missing ledger", readReq(7, 99, 0, false), wire.Status_NO_SUCH_LEDGER, nil},
		{"batch read", &wire.Request{RequestId: 8, Body: &wire.Request_BatchRead{BatchRead: &wire.BatchReadRequest{
			LedgerId: 5, FirstEntryId: 1, MaxEntries: 10,
		}}}, wire.Status_OK, func(t *testing.T, resp *wire.Response) {
			got := resp.GetBatchRead().GetEntries()
			if len(got) != 2 || got[0].GetEntryId() != 1 || string(got[1].GetPayload()) != "two" {
				t.Errorf("batch read %v", got)
			}
		}},
		// The LAC the explicit update raised: the writer confirmed entry 2.
		{"fence and read LAC", readReq(9, 5, -1, true), wire.Status_OK, func(t *testing.T, resp *wire.Response) {
			if r := resp.GetRead(); r.GetLastAddConfirmed() != 2 || r.GetEntryId() != -1 {
				t.Errorf("fence response %v", r)
			}
		}},
		{"add after fence", addReq(10, 5, 3, 2, "three"), wire.Status_FENCED, nil},
		{"write LAC after fence", writeLacReq(34, 5, 2), wire.Status_FENCED, nil},
		{"recovery add after fence", &wire.Request{RequestId: 11, Body: &wire.Request_Add{Add: &wire.AddRequest{
			LedgerId: 5, EntryId: 3, LastAddConfirmed: 2, Recovery: true, Payload: []byte("three"),
		}}}, wire.Status_OK, nil},
		{"fencing read of an entry", readReq(12, 5, 3, true), wire.Status_OK, func(t *testing.T, resp *wire.Response) {
			if string(resp.GetRead().GetPayload()) != "three" {
				t.Errorf("fencing read %v", resp.GetRead())
			}
		}},
		{"fence a ledger never seen", readReq(13, 6, -1, true), wire.Status_OK, nil},
		{"add to it", addReq(14, 6, 0, -1, "zombie"), wire.Status_FENCED, nil},
		{"negative ledger id", addReq(15, -1, 0, -1, ""), wire.Status_BAD_REQUEST, nil},
		{"entry id below -1", readReq(16, 5, -2, false), wire.Status_BAD_REQUEST, nil},
		{"info", &wire.Request{RequestId: 17, Body: &wire.Request_Info{Info: &wire.InfoRequest{}}}, wire.Status_OK,
			func(t *testing.T, resp *wire.Response) {
				if i := resp.GetInfo(); i.GetFreeBytes() != 1<<30 || i.GetTotalBytes() != 2<<30 || i.GetReadOnly() {
					t.Errorf("info %v", i)
				}
			}},
		{"delete", &wire.Request{RequestId: 18, Body: &wire.Request_DeleteLedger{DeleteLedger: &wire.DeleteLedgerRequest{LedgerId: 5}}},
			wire.Status_OK, nil},
		{"read deleted", readReq(19, 5, 0, false), wire.Status_NO_SUCH_LEDGER, nil},
		{"delete again", &wire.Request{RequestId: 20, Body: &wire.Request_DeleteLedger{DeleteLedger: &wire.DeleteLedgerRequest{LedgerId: 5}}},
			wire.Status_NO_SUCH_LEDGER, nil},
	}
	for _, step := range steps {
		resp := rc.call(step.req)
		if resp.GetStatus() != step.want {
			t.Fatalf("%s: status %v (%q), want %v", step.name, resp.GetStatus(), resp.GetErrorMessage(), step.want)
		}
		if step.want != wire.Status_OK && resp.GetErrorMessage() == "" {
			t.Errorf("%s: %v without an error message", step.name, resp.GetStatus())
		}
		if step.check != nil {
			step.check(t, resp)
		}
	}
}

// TestTooManyRequests fills a connection's in-flight window with held adds: the next
// request is refused at once, and the held ones still complete.
func TestTooManyRequests(t *testing.T) {
	const window = 4
	eng := memengine.New()
	reg := prometheus.NewRegistry()
	addr, _ := startServer(t, server.Config{MaxInFlightPerConn: window, Registerer: reg}, eng)
	rc := dialRaw(t, addr)
	ctx := testContext(t)

	eng.Hold()
	for i := range window {
		rc.send(addReq(uint64(i+1), 1, int64(i), int64(i)-1, "x"))
	}
	if err := eng.WaitHeld(ctx, window); err != nil {
		t.Fatal(err)
	}
	resp := rc.call(readReq(100, 1, 0, false))
	if resp.GetStatus() != wire.Status_TOO_MANY_REQUESTS {
		t.Fatalf("request beyond the window: %v, want TOO_MANY_REQUESTS", resp.GetStatus())
	}
	if got := metricValue(t, reg, "quire_bookie_requests_in_flight"); got != window {
		t.Errorf("in-flight gauge %v, want %d", got, window)
	}

	eng.Release(false)
	seen := map[uint64]bool{}
	for range window {
		resp := rc.recv()
		if resp.GetStatus() != wire.Status_OK || seen[resp.GetRequestId()] {
			t.Fatalf("held add answered %v", resp)
		}
		seen[resp.GetRequestId()] = true
	}
	if resp := rc.call(readReq(101, 1, 0, false)); resp.GetStatus() != wire.Status_OK {
		t.Fatalf("after the window drained: %v", resp.GetStatus())
	}
	if got := metricValue(t, reg, "quire_bookie_requests_in_flight"); got != 0 {
		t.Errorf("in-flight gauge %v after draining, want 0", got)
	}
}

// metricValue returns the value of an unlabelled gauge or counter.
func metricValue(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() == name {
			m := f.GetMetric()[0]
			if g := m.GetGauge(); g != nil {
				return g.GetValue()
			}
			return m.GetCounter().GetValue()
		}
	}
	t.Fatalf("metric %s not registered", name)
	return 0
}

// TestOutOfOrderResponses completes adds in reverse: each response still carries its own
// request's id and entry.
func TestOutOfOrderResponses(t *testing.T) {
	const n = 50
	eng := memengine.New()
	addr, _ := startServer(t, server.Config{}, eng)
	rc := dialRaw(t, addr)
	eng.Hold()
	for i := range n {
		rc.send(addReq(uint64(1000+i), 2, int64(i), int64(i)-1, "p"))
	}
	if err := eng.WaitHeld(testContext(t), n); err != nil {
		t.Fatal(err)
	}
	eng.Release(true)
	for i := n - 1; i >= 0; i-- {
		resp := rc.recv()
		if resp.GetRequestId() != uint64(1000+i) || resp.GetAdd().GetEntryId() != int64(i) {
			t.Fatalf("want response for entry %d, got %v", i, resp)
		}
	}
}

// TestBadFrameClosesOnlyThatConnection sends each kind of bad frame on one connection while
// another connection keeps adding: the bad one is closed, the good one never notices.
func TestBadFrameClosesOnlyThatConnection(t *testing.T) {
	noBody := []byte{0, 0, 0, 2, 1 << 3, 1} // a Request with only request_id = 1

	tests := []struct {
		name  string
		bytes []byte
	}{
		{"garbage", []byte("GET / HTTP/1.1\r\nHost: bookie\r\n\r\n")},
		{"oversized length prefix", []byte{0xFF, 0xFF, 0xFF, 0xF0, 1, 2, 3, 4}},
		{"just over the limit", binary.BigEndian.AppendUint32(nil, wire.DefaultMaxFrameBytes+1)},
		{"zero length", []byte{0, 0, 0, 0}},
		{"undecodable protobuf", []byte{0, 0, 0, 3, 0xFF, 0xFF, 0xFF}},
		{"request without body", noBody},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			eng := memengine.New()
			reg := prometheus.NewRegistry()
			addr, _ := startServer(t, server.Config{Registerer: reg}, eng)
			good := dialRaw(t, addr)
			bad := dialRaw(t, addr)

			// Entry 0 first, so the read at the end has something to find even if
			// the bad connection is closed before the loop below sends an add.
			if resp := good.call(addReq(0, 1, 0, -1, "ok")); resp.GetStatus() != wire.Status_OK {
				t.Fatalf("first add: %v", resp)
			}
			// The good connection pipelines adds the whole time the bad one misbehaves.
			stop := make(chan struct{})
			var wg sync.WaitGroup
			var goodErr error
			wg.Go(func() {
				for i := int64(1); ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					if err := wire.WriteFrame(good.nc, addReq(uint64(i), 1, i, i-1, "ok")); err != nil {
						goodErr = err
						return
					}
					resp, err := good.fr.ReadResponse()
					if err != nil || resp.GetStatus() != wire.Status_OK || resp.GetRequestId() != uint64(i) {
						goodErr = errors.Join(err, errors.New("bad response on the good connection: "+resp.String()))
						return
					}
				}
			})

			if _, err := bad.nc.Write(tc.bytes); err != nil {
				t.Fatal(err)
			}
			bad.expectClosed()
			close(stop)
			wg.Wait()
			if goodErr != nil {
				t.Fatal(goodErr)
			}
			if resp := good.call(readReq(1<<40, 1, 0, false)); resp.GetStatus() != wire.Status_OK {
				t.Fatalf("good connection after the bad one closed: %v", resp)
			}
			if got := metricValue(t, reg, "quire_bookie_bad_frames_total"); got != 1 {
				t.Errorf("bad frames counted: %v, want 1", got)
			}
		})
	}
}

func TestLongPoll(t *testing.T) {
	eng := memengine.New()
	addr, _ := startServer(t, server.Config{}, eng)
	rc := dialRaw(t, addr)
	ctx := testContext(t)

	for i := range int64(3) {
		if resp := rc.call(addReq(uint64(i), 3, i, i-1, "e")); resp.GetStatus() != wire.Status_OK {
			t.Fatal(resp)
		}
	}
	// LAC is 1. A poll from an older LAC answers at once, with the next entry.
	resp := rc.call(longPollReq(10, 3, 0, time.Minute))
	if lp := resp.GetLongPollRead(); resp.GetStatus() != wire.Status_OK || lp.GetLastAddConfirmed() != 1 ||
		!lp.GetHasEntry() || lp.GetEntry().GetEntryId() != 1 {
		t.Fatalf("poll behind the LAC: %v", resp)
	}

	// A poll at the LAC waits for the next add that moves it.
	rc.send(longPollReq(11, 3, 1, time.Minute))
	if err := eng.WaitWatchers(ctx, 3, 1); err != nil {
		t.Fatal(err)
	}
	rc.send(addReq(12, 3, 3, 2, "moves the LAC to 2"))
	got := map[uint64]*wire.Response{}
	for range 2 {
		resp := rc.recv()
		got[resp.GetRequestId()] = resp
	}
	if lp := got[11].GetLongPollRead(); got[11].GetStatus() != wire.Status_OK || lp.GetLastAddConfirmed() != 2 ||
		!lp.GetHasEntry() || string(lp.GetEntry().GetPayload()) != "e" || lp.GetEntry().GetEntryId() != 2 {
		t.Fatalf("poll after the LAC moved: %v", got[11])
	}

	// Nothing moves: TIMEOUT, and the watch is gone.
	resp = rc.call(longPollReq(13, 3, 2, 20*time.Millisecond))
	if resp.GetStatus() != wire.Status_TIMEOUT {
		t.Fatalf("idle poll: %v, want TIMEOUT", resp)
	}
	if err := eng.WaitWatchers(ctx, 3, 0); err != nil {
		t.Fatal(err)
	}

	// A poll on a ledger the bookie does not have fails at once.
	if resp := rc.call(longPollReq(14, 77, -1, time.Minute)); resp.GetStatus() != wire.Status_NO_SUCH_LEDGER {
		t.Fatalf("poll on missing ledger: %v", resp)
	}

	// A connection that closes with a poll waiting drops its watch.
	rc.send(longPollReq(15, 3, 2, time.Minute))
	if err := eng.WaitWatchers(ctx, 3, 1); err != nil {
		t.Fatal(err)
	}
	rc.nc.Close()
	if err := eng.WaitWatchers(ctx, 3, 0); err != nil {
		t.Fatalf("watch not cancelled after the connection closed: %v", err)
	}
}

// TestLongPollWokenByWriteLac: a poll at the LAC of an idle writer's last add is answered,
// with the entry, by the writer's explicit LAC, which arrives on another connection.
func TestLongPollWokenByWriteLac(t *testing.T) {
	eng := memengine.New()
	addr, _ := startServer(t, server.Config{}, eng)
	writer, reader := dialRaw(t, addr), dialRaw(t, addr)
	for i := range int64(2) {
		if resp := writer.call(addReq(uint64(i), 3, i, i-1, fmt.Sprintf("e%d", i))); resp.GetStatus() != wire.Status_OK {
			t.Fatal(resp)
		}
	}
	// LAC is 0: entry 1 is stored, and no add will ever say it is confirmed.
	reader.send(longPollReq(10, 3, 0, time.Minute))
	if err := eng.WaitWatchers(testContext(t), 3, 1); err != nil {
		t.Fatal(err)
	}
	if resp := writer.call(writeLacReq(2, 3, 1)); resp.GetStatus() != wire.Status_OK {
		t.Fatalf("write LAC: %v", resp)
	}
	resp := reader.recv()
	if lp := resp.GetLongPollRead(); resp.GetStatus() != wire.Status_OK || lp.GetLastAddConfirmed() != 1 ||
		!lp.GetHasEntry() || lp.GetEntry().GetEntryId() != 1 || string(lp.GetEntry().GetPayload()) != "e1" {
		t.Fatalf("poll after the explicit LAC: %v", resp)
	}
}

// TestLongPollWithoutEntry: the LAC moves past an entry this bookie does not hold (another
// bookie's stripe); the poll still answers OK, without an entry.
func TestLongPollWithoutEntry(t *testing.T) {
	eng := memengine.New()
	addr, _ := startServer(t, server.Config{}, eng)
	rc := dialRaw(t, addr)
	if resp := rc.call(addReq(1, 4, 0, -1, "a")); resp.GetStatus() != wire.Status_OK {
		t.Fatal(resp)
	}
	rc.send(longPollReq(2, 4, 0, time.Minute))
	if err := eng.WaitWatchers(testContext(t), 4, 1); err != nil {
		t.Fatal(err)
	}
	rc.send(addReq(3, 4, 2, 1, "c")) // entry 1 lives elsewhere; LAC becomes 1
	got := map[uint64]*wire.Response{}
	for range 2 {
		resp := rc.recv()
		got[resp.GetRequestId()] = resp
	}
	if resp := got[3]; resp.GetStatus() != wire.Status_OK {
		t.Fatalf("add: %v", resp)
	}
	resp := got[2]
	if lp := resp.GetLongPollRead(); resp.GetStatus() != wire.Status_OK ||
		lp.GetLastAddConfirmed() != 1 || lp.GetHasEntry() {
		t.Fatalf("poll: %v", resp)
	}
}

// TestBatchReadFitsInFrame: with small frames, a batch read returns only the entries that
// fit, in order, and the response frame is within the limit.
func TestBatchReadFitsInFrame(t *testing.T) {
	const maxFrame = 4096
	eng := memengine.New()
	addr, _ := startServer(t, server.Config{MaxFrameBytes: maxFrame}, eng)
	rc := dialRaw(t, addr)
	rc.fr = wire.NewFrameReader(bufio.NewReader(rc.nc), maxFrame)
	payload := string(bytes.Repeat([]byte("b"), 1000))
	for i := range int64(10) {
		if resp := rc.call(addReq(uint64(i), 8, i, i-1, payload)); resp.GetStatus() != wire.Status_OK {
			t.Fatal(resp)
		}
	}
	resp := rc.call(&wire.Request{RequestId: 50, Body: &wire.Request_BatchRead{BatchRead: &wire.BatchReadRequest{
		LedgerId: 8, FirstEntryId: 2,
	}}})
	entries := resp.GetBatchRead().GetEntries()
	// Four 1000-byte entries and their framing fit in 4096 bytes; five cannot. (The reader
	// above would have refused a response frame over the limit.)
	if resp.GetStatus() != wire.Status_OK || len(entries) < 3 || len(entries) > 4 {
		t.Fatalf("got %d entries (%v), want 3 or 4 in a %d-byte frame", len(entries), resp.GetStatus(), maxFrame)
	}
	for i, e := range entries {
		if e.GetEntryId() != int64(2+i) {
			t.Fatalf("entry %d has id %d", i, e.GetEntryId())
		}
	}
}

// TestCloseWithRequestsInFlight: Close returns while the engine still holds adds, and the
// late completions go nowhere.
func TestCloseWithRequestsInFlight(t *testing.T) {
	eng := memengine.New()
	addr, srv := startServer(t, server.Config{}, eng)
	rc := dialRaw(t, addr)
	eng.Hold()
	for i := range 10 {
		rc.send(addReq(uint64(i), 1, int64(i), -1, "x"))
	}
	rc.send(longPollReq(99, 1, 100, time.Minute))
	ctx := testContext(t)
	if err := eng.WaitHeld(ctx, 10); err != nil {
		t.Fatal(err)
	}
	if err := eng.WaitWatchers(ctx, 1, 1); err != nil {
		t.Fatal(err)
	}
	srv.Close()
	rc.expectClosed()
	if n := eng.Release(false); n != 10 {
		t.Fatalf("released %d adds, want 10", n)
	}
	if err := eng.WaitWatchers(ctx, 1, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := net.Dial("tcp", addr); err == nil {
		t.Fatal("listener still accepting after Close")
	}
}

// An add reaches the engine whatever valid protobuf encoding it arrives in: the usual one
// (decoded by the fast path) and ones the fast path leaves to protobuf (fields in another
// order, a field repeated, an unknown field). Many adds pipelined in one write, with distinct
// payloads, read back intact: the payload of one add is not overwritten by the frames after it.
func TestAddInAnyValidEncoding(t *testing.T) {
	eng := memengine.New()
	addr, _ := startServer(t, server.Config{}, eng)
	r := dialRaw(t, addr)

	varint := func(num protowire.Number, v uint64) []byte {
		return protowire.AppendVarint(protowire.AppendTag(nil, num, protowire.VarintType), v)
	}
	bytesField := func(num protowire.Number, b []byte) []byte {
		return protowire.AppendBytes(protowire.AppendTag(nil, num, protowire.BytesType), b)
	}
	frame := func(body ...[]byte) []byte {
		b := bytes.Join(body, nil)
		return append(binary.BigEndian.AppendUint32(nil, uint32(len(b))), b...)
	}
	payload := func(i int) []byte { return bytes.Repeat([]byte{byte(i)}, 100+i) }
	var stream []byte
	const n = 300
	for i := range n {
		id, entry := uint64(i+1), uint64(i)
		switch i % 4 {
		case 0, 1: // as proto.Marshal encodes it
			var err error
			if stream, err = wire.AppendFrame(stream, addReq(id, 1, int64(entry), int64(entry)-1, string(payload(i)))); err != nil {
				t.Fatal(err)
			}
		case 2: // fields in reverse order
			stream = append(stream, frame(bytesField(2, bytes.Join([][]byte{bytesField(5, payload(i)), varint(2, entry), varint(1, 1)}, nil)), varint(1, id))...)
		case 3: // an unknown field, and the entry id sent twice (the last one counts)
			stream = append(stream, frame(varint(1, id), bytesField(2, bytes.Join([][]byte{varint(1, 1), varint(2, 999), varint(2, entry), bytesField(5, payload(i)), varint(15, 7)}, nil)))...)
		}
	}
	if _, err := r.nc.Write(stream); err != nil {
		t.Fatal(err)
	}
	for range n {
		resp := r.recv()
		if resp.GetStatus() != wire.Status_OK || resp.GetAdd().GetEntryId() != int64(resp.GetRequestId()-1) || resp.GetAdd().GetLedgerId() != 1 {
			t.Fatalf("add answered %v", resp)
		}
	}
	for i := range n {
		resp := r.call(readReq(uint64(n+1+i), 1, int64(i), false))
		if !bytes.Equal(resp.GetRead().GetPayload(), payload(i)) {
			t.Fatalf("entry %d reads back %d bytes %x…, want %d bytes of %x", i, len(resp.GetRead().GetPayload()), resp.GetRead().GetPayload()[:1], 100+i, byte(i))
		}
	}
}

// releasingEngine counts the ReadRange releases the server makes.
type releasingEngine struct {
	*memengine.Engine
	mu             sync.Mutex
	lent, released int
}

func (e *releasingEngine) ReadRange(ledgerID, first int64, maxEntries, maxBytes int) ([]server.Entry, func(), error) {
	entries, _, err := e.Engine.ReadRange(ledgerID, first, maxEntries, maxBytes)
	if err != nil {
		return nil, nil, err
	}
	e.mu.Lock()
	e.lent++
	e.mu.Unlock()
	return entries, func() {
		e.mu.Lock()
		e.released++
		e.mu.Unlock()
	}, nil
}

func (e *releasingEngine) counts() (lent, released int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.lent, e.released
}

// TestBatchReadLarge: batch reads of megabytes (written with writev from the engine's
// buffers) and small ones (through the connection's buffer), pipelined, arrive intact and
// in order, and the server releases every range the engine lent once it has written it.
func TestBatchReadLarge(t *testing.T) {
	eng := &releasingEngine{Engine: memengine.New()}
	addr, _ := startServer(t, server.Config{}, eng)
	rc := dialRaw(t, addr)
	payload := func(entry int64) []byte { return bytes.Repeat([]byte{byte(entry), byte(entry >> 8)}, 16<<10) }
	const n = 300 // 32 KiB each
	for i := range int64(n) {
		if resp := rc.call(addReq(uint64(i+1), 8, i, i-1, string(payload(i)))); resp.GetStatus() != wire.Status_OK {
			t.Fatal(resp)
		}
	}
	for i, first := range []int64{0, 100, 299, 5, 200} {
		max := []uint32{100, 100, 10, 1, 0}[i]
		rc.send(&wire.Request{RequestId: uint64(1000 + i), Body: &wire.Request_BatchRead{BatchRead: &wire.BatchReadRequest{
			LedgerId: 8, FirstEntryId: first, MaxEntries: max,
		}}})
	}
	firsts, wants := []int64{0, 100, 299, 5, 200}, []int{100, 100, 1, 1, 100}
	for range firsts {
		resp := rc.recv() // in any order: the request id says which
		i := int(resp.GetRequestId()) - 1000
		if i < 0 || i >= len(firsts) {
			t.Fatalf("response to request %d", resp.GetRequestId())
		}
		entries := resp.GetBatchRead().GetEntries()
		if resp.GetStatus() != wire.Status_OK || len(entries) != wants[i] {
			t.Fatalf("response %d: %v, %d entries; want %d", i, resp.GetStatus(), len(entries), wants[i])
		}
		for j, e := range entries {
			id := firsts[i] + int64(j)
			if e.GetLedgerId() != 8 || e.GetEntryId() != id || e.GetLastAddConfirmed() != id-1 || !bytes.Equal(e.GetPayload(), payload(id)) {
				t.Fatalf("response %d entry %d: ledger %d entry %d LAC %d, %d bytes", i, j, e.GetLedgerId(), e.GetEntryId(), e.GetLastAddConfirmed(), len(e.GetPayload()))
			}
		}
	}
	// The writer releases a range after writing it, so perhaps after the reader has it.
	testutil.WaitFor(t, "every lent range released", func() bool {
		lent, released := eng.counts()
		return lent == len(firsts) && released == len(firsts)
	})
}

// gatedEngine holds every ReadRange until its gate closes, counting how
// many are inside at once.
type gatedEngine struct {
	*memengine.Engine
	gate    chan struct{}
	mu      sync.Mutex
	in, max int
}

func (e *gatedEngine) ReadRange(ledgerID, first int64, maxEntries, maxBytes int) ([]server.Entry, func(), error) {
	e.mu.Lock()
	e.in++
	e.max = max(e.max, e.in)
	e.mu.Unlock()
	<-e.gate
	e.mu.Lock()
	e.in--
	e.mu.Unlock()
	return e.Engine.ReadRange(ledgerID, first, maxEntries, maxBytes)
}

func (e *gatedEngine) inside() (in, most int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.in, e.max
}

// TestConcurrentRangeReadsBounded: batch reads from several connections
// wait for their turn at MaxConcurrentRangeReads, and adds are answered
// meanwhile; every read is answered once the engine lets them through.
func TestConcurrentRangeReadsBounded(t *testing.T) {
	eng := &gatedEngine{Engine: memengine.New(), gate: make(chan struct{})}
	addr, _ := startServer(t, server.Config{MaxConcurrentRangeReads: 2}, eng)
	var open sync.Once
	release := func() { open.Do(func() { close(eng.gate) }) }
	t.Cleanup(release) // before the server closes: it waits for its reads
	writer := dialRaw(t, addr)
	for i := range int64(10) {
		if resp := writer.call(addReq(uint64(i+1), 4, i, i-1, "entry")); resp.GetStatus() != wire.Status_OK {
			t.Fatal(resp)
		}
	}
	var readers []*rawConn
	for i := range 6 {
		rc := dialRaw(t, addr)
		rc.send(&wire.Request{RequestId: uint64(100 + i), Body: &wire.Request_BatchRead{BatchRead: &wire.BatchReadRequest{LedgerId: 4, FirstEntryId: int64(i)}}})
		readers = append(readers, rc)
	}
	testutil.WaitFor(t, "two range reads inside the engine", func() bool { in, _ := eng.inside(); return in == 2 })
	// Adds do not wait for the reads.
	if resp := writer.call(addReq(50, 4, 10, 9, "more")); resp.GetStatus() != wire.Status_OK {
		t.Fatal(resp)
	}
	release()
	for i, rc := range readers {
		resp := rc.recv()
		if resp.GetStatus() != wire.Status_OK || resp.GetBatchRead().GetEntries()[0].GetEntryId() != int64(i) {
			t.Fatalf("reader %d: %v", i, resp)
		}
	}
	if _, most := eng.inside(); most != 2 {
		t.Fatalf("%d range reads inside the engine at once, want at most (and here exactly) 2", most)
	}
}
