package ledgerclient

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"quire/internal/bookie/wire"

	"quire/internal/bookie"
	"quire/internal/bookie/client"
	"quire/internal/bookie/node"
	"quire/internal/ledger"
	"quire/internal/meta"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

type cluster struct {
	srv   *meta.MemServer
	nodes []*node.Node
}

// startCluster runs bookies in-process, registered in an in-memory store.
func startCluster(t *testing.T, zones ...string) *cluster {
	t.Helper()
	c := &cluster{srv: meta.NewMemServer(meta.MemConfig{})}
	for i, z := range zones {
		ecfg := bookie.DefaultConfig("", "")
		ecfg.JournalFileBytes = 4 << 20
		ecfg.WriteCacheBytes = 8 << 20
		n, err := node.Start(context.Background(), node.Config{
			ID: fmt.Sprintf("b%d", i+1), DataDir: t.TempDir(), ListenAddr: "127.0.0.1:0", Zone: z,
			Store: c.srv.NewClient(), Engine: &ecfg, Logger: quiet,
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { n.Close() })
		c.nodes = append(c.nodes, n)
	}
	return c
}

func (c *cluster) client(t *testing.T, name string) *Client {
	t.Helper()
	return c.clientWith(t, name, func(*Config) {})
}

// clientWith is client with changes to its configuration.
func (c *cluster) clientWith(t *testing.T, name string, change func(*Config)) *Client {
	t.Helper()
	bc := client.New(client.Config{Logger: quiet, RedialBackoffMin: 10 * time.Millisecond, RedialBackoffMax: 50 * time.Millisecond})
	t.Cleanup(bc.Close)
	cfg := Config{Store: c.srv.NewClient(), Bookies: bc, Tick: 10 * time.Millisecond, RequestTimeoutTicks: 50, Name: name, Logger: quiet}
	change(&cfg)
	return New(cfg)
}

func payload(i int) []byte {
	return []byte(fmt.Sprintf("entry-%04d-%s", i, bytes.Repeat([]byte{'x'}, i%50)))
}

// appendN appends n entries with all of them in flight and returns how
// many were acknowledged, checking the acks come in order.
func appendN(t *testing.T, w *Writer, from, n int) (acked int, firstErr error) {
	t.Helper()
	var mu sync.Mutex
	var wg sync.WaitGroup
	next := int64(from)
	for i := from; i < from+n; i++ {
		wg.Add(1)
		w.AppendAsync(payload(i), func(id int64, err error) {
			defer wg.Done()
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				if firstErr == nil {
					firstErr = err
				}
				return
			}
			if id != next {
				t.Errorf("ack for entry %d, want %d (out of order)", id, next)
			}
			next++
			acked++
		})
	}
	wg.Wait()
	return acked, firstErr
}

func TestWriteCloseRead(t *testing.T) {
	c := startCluster(t, "a", "b", "c", "a", "b")
	lc := c.client(t, "w")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	w, err := lc.Create(ctx, 3, 3, 2)
	if err != nil {
		t.Fatal(err)
	}
	if acked, err := appendN(t, w, 0, 300); acked != 300 || err != nil {
		t.Fatalf("acked %d: %v", acked, err)
	}
	if err := w.Close(ctx); err != nil {
		t.Fatal(err)
	}
	md, _, err := lc.ReadMetadata(ctx, w.ID())
	if err != nil || md.State != ledger.StateClosed || md.LastEntryID != 299 {
		t.Fatalf("metadata %+v %v", md, err)
	}
	zones := map[ledger.BookieID]string{"b1": "a", "b2": "b", "b3": "c", "b4": "a", "b5": "b"}
	if err := ledger.ZoneRuleHolds(&md, zones); err != nil {
		t.Fatal(err)
	}
	got, err := c.client(t, "r").Read(ctx, md, 0, md.LastEntryID)
	if err != nil || len(got) != 300 {
		t.Fatalf("read %d entries: %v", len(got), err)
	}
	for i, p := range got {
		if !bytes.Equal(p, payload(i)) {
			t.Fatalf("entry %d = %q", i, p)
		}
	}
}

// TestRecoveryFencesTheWriter: a second client recovers an open ledger; the
// first gets fenced and every entry it had acknowledged is in the ledger.
func TestRecoveryFencesTheWriter(t *testing.T) {
	c := startCluster(t, "a", "b", "c")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	w, err := c.client(t, "old-owner").Create(ctx, 3, 3, 2)
	if err != nil {
		t.Fatal(err)
	}
	acked, _ := appendN(t, w, 0, 100)
	recoverer := c.client(t, "new-owner")
	md, err := recoverer.Recover(ctx, w.ID())
	if err != nil {
		t.Fatal(err)
	}
	if md.State != ledger.StateClosed || md.LastEntryID < int64(acked)-1 {
		t.Fatalf("recovered %+v, %d were acknowledged", md, acked)
	}
	if _, err := w.Append(ctx, payload(1000)); !errors.Is(err, ledger.ErrFenced) {
		t.Fatalf("append after recovery: %v, want fenced", err)
	}
	got, err := recoverer.Read(ctx, md, 0, md.LastEntryID)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < acked; i++ {
		if !bytes.Equal(got[i], payload(i)) {
			t.Fatalf("entry %d lost or changed", i)
		}
	}
	// Recovering again (a CLOSED ledger) reads only the metadata.
	again, err := recoverer.Recover(ctx, w.ID())
	if err != nil || again.LastEntryID != md.LastEntryID {
		t.Fatalf("second recovery %+v %v", again, err)
	}
}

// TestEnsembleChangeOnBookieFailure: a bookie of the ensemble dies mid-stream;
// the writer replaces it and every entry is acknowledged.
func TestEnsembleChangeOnBookieFailure(t *testing.T) {
	// Two bookies per zone, so the lost bookie can be replaced in its own zone.
	c := startCluster(t, "a", "b", "c", "a", "b", "c")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	lc := c.client(t, "w")
	w, err := lc.Create(ctx, 3, 3, 2)
	if err != nil {
		t.Fatal(err)
	}
	if acked, err := appendN(t, w, 0, 50); acked != 50 || err != nil {
		t.Fatalf("acked %d: %v", acked, err)
	}
	md := w.Metadata()
	var victim *node.Node
	for _, n := range c.nodes {
		if n.ID() == string(md.Fragments[0].Ensemble[0]) {
			victim = n
		}
	}
	victim.Close()
	t.Logf("closed victim %s; ensemble %v", victim.ID(), md.Fragments)
	if acked, err := appendN(t, w, 50, 50); acked != 50 || err != nil {
		t.Fatalf("after bookie loss acked %d: %v", acked, err)
	}
	if err := w.Close(ctx); err != nil {
		t.Fatal(err)
	}
	md, _, _ = lc.ReadMetadata(ctx, w.ID())
	if len(md.Fragments) < 2 {
		t.Fatalf("no ensemble change recorded: %+v", md)
	}
	zoneOf := map[ledger.BookieID]string{"b1": "a", "b2": "b", "b3": "c", "b4": "a", "b5": "b", "b6": "c"}
	last := md.Fragments[len(md.Fragments)-1].Ensemble
	for i, b := range last {
		if string(b) == victim.ID() {
			t.Fatalf("dead bookie %s still in the last fragment %+v", b, md.Fragments)
		}
		if md.Fragments[0].Ensemble[i] == ledger.BookieID(victim.ID()) && zoneOf[b] != zoneOf[ledger.BookieID(victim.ID())] {
			t.Fatalf("replacement %s in zone %s, lost bookie was in zone %s", b, zoneOf[b], zoneOf[ledger.BookieID(victim.ID())])
		}
	}
	got, err := lc.Read(ctx, md, 0, md.LastEntryID)
	if err != nil || len(got) != 100 {
		t.Fatalf("read %d: %v", len(got), err)
	}
}

// TestTailReadByLongPoll: a reader follows an open ledger by long-polling the
// LAC and reading up to it.
func TestTailReadByLongPoll(t *testing.T) {
	c := startCluster(t, "a", "b", "c")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	w, err := c.client(t, "w").Create(ctx, 3, 3, 2)
	if err != nil {
		t.Fatal(err)
	}
	reader := c.client(t, "tail")
	md, _, err := reader.ReadMetadata(ctx, w.ID())
	if err != nil {
		t.Fatal(err)
	}
	// Nothing yet: the poll times out.
	if _, err := reader.WaitLAC(ctx, md, -1, 200*time.Millisecond); !errors.Is(err, ErrNoNewEntries) {
		t.Fatalf("poll on an empty ledger: %v", err)
	}
	// The writer appends in the background, one at a time (so each add
	// carries the previous entry's LAC), while the reader tails. The last
	// entry's LAC comes from the writer's explicit LAC once it is idle.
	written := make(chan struct{})
	defer func() { <-written }()
	go func() {
		defer close(written)
		for i := 0; i < 50; i++ {
			if _, err := w.Append(ctx, payload(i)); err != nil {
				t.Errorf("append %d: %v", i, err)
				return
			}
		}
	}()
	lac, next := int64(-1), int64(0)
	for next < 50 {
		got, err := reader.WaitLAC(ctx, md, lac, 5*time.Second)
		if err != nil {
			t.Fatalf("tail after LAC %d: %v", lac, err)
		}
		if got <= lac {
			t.Fatalf("LAC went from %d to %d", lac, got)
		}
		lac = got
		entries, err := reader.Read(ctx, md, next, lac)
		if err != nil {
			t.Fatal(err)
		}
		for i, p := range entries {
			if !bytes.Equal(p, payload(int(next)+i)) {
				t.Fatalf("tailed entry %d = %q", next+int64(i), p)
			}
		}
		next = lac + 1
	}
}

// TestTailSeesIdleWritersLastEntry: a writer appends and stops. A tailing
// reader long-polls for the LAC after the last entry's add: with explicit
// LAC (the default) it gets it within a bounded wait and reads the entry;
// without, the LAC stays one behind for as long as the writer stays quiet.
func TestTailSeesIdleWritersLastEntry(t *testing.T) {
	for _, tc := range []struct {
		name             string
		explicitLacTicks int // 0: the default
	}{{"explicit LAC", 0}, {"no explicit LAC", -1}} {
		t.Run(tc.name, func(t *testing.T) {
			c := startCluster(t, "a", "b", "c")
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			writer := c.clientWith(t, "w", func(cfg *Config) { cfg.ExplicitLacTicks = tc.explicitLacTicks })
			w, err := writer.Create(ctx, 3, 3, 2)
			if err != nil {
				t.Fatal(err)
			}
			const entries = 5
			for i := range entries {
				if _, err := w.Append(ctx, payload(i)); err != nil {
					t.Fatalf("append %d: %v", i, err)
				}
			}
			// Every entry is acknowledged; the last add carried LAC entries-2.
			reader := c.client(t, "tail")
			md, _, err := reader.ReadMetadata(ctx, w.ID())
			if err != nil {
				t.Fatal(err)
			}
			if tc.explicitLacTicks < 0 {
				// Ten times the default explicit LAC period: long enough that a
				// writer sending it would have.
				lac, err := reader.WaitLAC(ctx, md, entries-2, 1*time.Second)
				if !errors.Is(err, ErrNoNewEntries) {
					t.Fatalf("without explicit LAC the tail saw LAC %d (%v); want it stuck at %d", lac, err, entries-2)
				}
			} else {
				// The default is 10 ticks of 10 ms of quiet; the poll allows 50 times that.
				start := time.Now()
				lac, err := reader.WaitLAC(ctx, md, entries-2, 5*time.Second)
				if err != nil || lac != entries-1 {
					t.Fatalf("tail after LAC %d: LAC %d, %v; want %d", entries-2, lac, err, entries-1)
				}
				t.Logf("the idle writer's last entry became visible after %v", time.Since(start))
				got, err := reader.Read(ctx, md, entries-1, lac)
				if err != nil || len(got) != 1 || !bytes.Equal(got[0], payload(entries-1)) {
					t.Fatalf("read the last entry: %q, %v", got, err)
				}
			}
			if err := w.Close(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// An entry no bookie frame can carry is refused at once, before it gets an
// entry id; the writer goes on. (A bookie refusing it on every ensemble
// would otherwise make the writer change ensembles for ever.)
func TestEntryLargerThanAFrameIsRefused(t *testing.T) {
	c := startCluster(t, "a", "b", "c")
	lc := c.client(t, "w")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	w, err := lc.Create(ctx, 3, 3, 2)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Append(ctx, payload(0)); err != nil {
		t.Fatal(err)
	}
	huge := make([]byte, wire.DefaultMaxFrameBytes)
	if _, err := w.Append(ctx, huge); !errors.Is(err, ErrEntryTooLarge) {
		t.Fatalf("a %d-byte entry: %v", len(huge), err)
	}
	if id, err := w.Append(ctx, payload(1)); err != nil || id != 1 {
		t.Fatalf("append after the refused one: entry %d, %v", id, err)
	}
	if err := w.Close(ctx); err != nil {
		t.Fatal(err)
	}
}
