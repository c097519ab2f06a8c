package ledgerclient

import (
	"bytes"
	"context"
	"encoding/binary"
	"log/slog"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"quire/internal/bookie/client"
	"quire/internal/bookie/node"
	"quire/internal/ledger"
	"quire/internal/meta"
	"quire/internal/testutil"
)

// bigPayload is entry i's payload: size bytes that say which entry they are.
func bigPayload(i, size int) []byte {
	p := bytes.Repeat([]byte{byte(i), byte(i >> 8)}, size/2)
	binary.BigEndian.PutUint64(p, uint64(i))
	return p
}

func (c *cluster) node(id ledger.BookieID) *node.Node {
	for _, n := range c.nodes {
		if n.ID() == string(id) {
			return n
		}
	}
	return nil
}

// TestReadAcrossEnsembleChangesAndBookieLoss: a catch-up read of a ledger
// with an ensemble change, in ranges spread over the replicas, while one of
// the first fragment's bookies is already gone and another one, of both
// fragments, is closed in the middle of the read (its ranges in flight fail
// with the connection): every entry comes back once, in order, with its
// bytes.
func TestReadAcrossEnsembleChangesAndBookieLoss(t *testing.T) {
	const entries, size = 2000, 16 << 10
	c := startCluster(t, "a", "b", "c", "a", "b", "c")
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	writer := c.client(t, "w")
	w, err := writer.Create(ctx, 3, 3, 2)
	if err != nil {
		t.Fatal(err)
	}
	appendRange := func(from, to int) {
		t.Helper()
		slots := make(chan struct{}, 200)
		errs := make(chan error, to-from)
		for i := from; i < to; i++ {
			slots <- struct{}{}
			w.AppendAsync(bigPayload(i, size), func(_ int64, err error) { <-slots; errs <- err })
		}
		for i := from; i < to; i++ {
			if err := <-errs; err != nil {
				t.Fatalf("append: %v", err)
			}
		}
	}
	appendRange(0, entries/2)
	first := w.Metadata().Fragments[0].Ensemble
	lost := c.node(first[0])
	lost.Close() // the writer replaces it: a second fragment
	appendRange(entries/2, entries)
	if err := w.Close(ctx); err != nil {
		t.Fatal(err)
	}
	md, _, err := writer.ReadMetadata(ctx, w.ID())
	if err != nil || len(md.Fragments) < 2 {
		t.Fatalf("want an ensemble change: %+v, %v", md.Fragments, err)
	}
	// A bookie of both fragments, closed once it has served a range.
	var victim *node.Node
	for _, b := range md.Fragments[len(md.Fragments)-1].Ensemble {
		if b != first[0] && slices.Contains(first, b) {
			victim = c.node(b)
			break
		}
	}
	if victim == nil {
		t.Fatalf("no bookie in both fragments: %+v", md.Fragments)
	}
	// The reader's answers from the victim are held until it is closed:
	// ranges asked of it are in flight then, whatever the machine's speed.
	gate := make(chan struct{})
	failed := &countingHandler{message: "range read failed", n: map[string]int{}}
	bc := client.New(client.Config{Logger: quiet, RedialBackoffMin: 10 * time.Millisecond, RedialBackoffMax: 50 * time.Millisecond,
		Dial: func(ctx context.Context, addr string) (net.Conn, error) {
			nc, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
			if err != nil || addr != victim.Addr() {
				return nc, err
			}
			return &gatedConn{Conn: nc, gate: gate}, nil
		}})
	t.Cleanup(bc.Close)
	openGate := sync.OnceFunc(func() { close(gate) })
	t.Cleanup(openGate) // before bc.Close (cleanups run last first): its reader must not stay held
	reader := New(Config{Store: c.srv.NewClient(), Bookies: bc, Tick: 10 * time.Millisecond, RequestTimeoutTicks: 50, Name: "r",
		Logger: slog.New(failed), ReadRangeEntries: 32, ReadRangesInFlight: 4})
	type result struct {
		got [][]byte
		err error
	}
	done := make(chan result, 1)
	go func() {
		got, err := reader.Read(ctx, md, 0, md.LastEntryID)
		done <- result{got, err}
	}()
	testutil.WaitForWithin(t, 30*time.Second, "the victim to serve a range", func() bool {
		return victim.Engine().Stats().RangeReads > 0
	})
	victim.Close()
	openGate()
	t.Logf("closed %s; lost %s before; fragments %v", victim.ID(), lost.ID(), md.Fragments)
	res := <-done
	if res.err != nil {
		t.Fatal(res.err)
	}
	// The victim's ranges in flight when it closed (and those asked of it
	// later) fell back to another replica, as did the lost bookie's.
	t.Logf("range reads failed over: %d of %s, %d of %s", failed.count(victim.ID()), victim.ID(), failed.count(lost.ID()), lost.ID())
	if failed.count(victim.ID()) == 0 || failed.count(lost.ID()) == 0 {
		t.Fatalf("the read never fell back from %s or %s", victim.ID(), lost.ID())
	}
	if len(res.got) != entries {
		t.Fatalf("read %d entries, want %d", len(res.got), entries)
	}
	for i, p := range res.got {
		if !bytes.Equal(p, bigPayload(i, size)) {
			t.Fatalf("entry %d holds entry %d's bytes (%d bytes)", i, binary.BigEndian.Uint64(p), len(p))
		}
	}
}

// gatedConn holds reads until gate is closed.
type gatedConn struct {
	net.Conn
	gate chan struct{}
}

func (c *gatedConn) Read(p []byte) (int, error) {
	<-c.gate
	return c.Conn.Read(p)
}

// countingHandler counts log records with one message, at any level, by
// their "bookie" attribute.
type countingHandler struct {
	message string
	mu      sync.Mutex
	n       map[string]int
}

func (h *countingHandler) count(bookie string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.n[bookie]
}

func (h *countingHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *countingHandler) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *countingHandler) WithGroup(string) slog.Handler            { return h }
func (h *countingHandler) Handle(_ context.Context, r slog.Record) error {
	if r.Message != h.message {
		return nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "bookie" {
			h.n[a.Value.String()]++
		}
		return true
	})
	return nil
}

// countingStore counts listings of the bookie registry.
type countingStore struct {
	meta.Store
	lists atomic.Int64
}

func (s *countingStore) List(ctx context.Context, prefix string, opts meta.ListOptions) (meta.ListResult, error) {
	s.lists.Add(1)
	return s.Store.List(ctx, prefix, opts)
}

// TestReadUsesCachedAddresses: reads do not list the bookie registry each
// time; only a ledger naming a bookie the client does not know yet does.
func TestReadUsesCachedAddresses(t *testing.T) {
	c := startCluster(t, "a", "b", "c")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	w, err := c.client(t, "w").Create(ctx, 3, 3, 2)
	if err != nil {
		t.Fatal(err)
	}
	if acked, err := appendN(t, w, 0, 50); acked != 50 || err != nil {
		t.Fatalf("acked %d: %v", acked, err)
	}
	md := w.Metadata()
	store := &countingStore{Store: c.srv.NewClient()}
	reader := c.clientWith(t, "r", func(cfg *Config) { cfg.Store = store })
	for i := int64(0); i < 50; i += 5 {
		got, err := reader.Read(ctx, md, i, i+4)
		if err != nil || len(got) != 5 || !bytes.Equal(got[0], payload(int(i))) {
			t.Fatalf("read %d..%d: %d entries, %v", i, i+4, len(got), err)
		}
	}
	if n := store.lists.Load(); n != 1 {
		t.Fatalf("10 reads listed the registry %d times, want once (the first read)", n)
	}
}
