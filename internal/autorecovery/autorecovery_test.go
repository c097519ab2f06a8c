package autorecovery

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"sync"
	"testing"
	"time"

	"quire/internal/bookie"
	"quire/internal/bookie/client"
	"quire/internal/bookie/node"
	"quire/internal/ledger"
	"quire/internal/ledger/ledgerclient"
	"quire/internal/meta"
)

func testLogger() *slog.Logger {
	if os.Getenv("QUIRE_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// testCluster is bookies in-process, registered in one in-memory store, and
// autorecovery services each on their own store client (a process each).
type testCluster struct {
	t        *testing.T
	srv      *meta.MemServer
	store    meta.Store // the test's own client
	bookies  *client.Client
	log      *slog.Logger
	nodes    map[string]*node.Node
	zones    map[ledger.BookieID]string
	services map[string]*Service
	clients  map[string]*meta.MemClient
}

func newTestCluster(t *testing.T) *testCluster {
	srv := meta.NewMemServer(meta.MemConfig{})
	c := &testCluster{t: t, srv: srv, store: srv.NewClient(), log: testLogger(),
		nodes: map[string]*node.Node{}, zones: map[ledger.BookieID]string{}, services: map[string]*Service{}, clients: map[string]*meta.MemClient{}}
	c.bookies = client.New(client.Config{Logger: c.log, RedialBackoffMin: 10 * time.Millisecond, RedialBackoffMax: 50 * time.Millisecond})
	t.Cleanup(c.bookies.Close)
	return c
}

// startBookies starts bookie b<i> in zones[i-1].
func (c *testCluster) startBookies(zones ...string) {
	for i, z := range zones {
		id := fmt.Sprintf("b%d", i+1)
		ecfg := bookie.DefaultConfig("", "")
		ecfg.JournalFileBytes = 4 << 20
		ecfg.WriteCacheBytes = 8 << 20
		n, err := node.Start(context.Background(), node.Config{ID: id, DataDir: c.t.TempDir(), ListenAddr: "127.0.0.1:0", Zone: z,
			Store: c.srv.NewClient(), SessionTTL: time.Second, Engine: &ecfg, Logger: c.log})
		if err != nil {
			c.t.Fatal(err)
		}
		c.t.Cleanup(func() { n.Close() })
		c.nodes[id] = n
		c.zones[ledger.BookieID(id)] = z
	}
}

// startService runs autorecovery as worker id, with test timings.
func (c *testCluster) startService(id string, change func(*Config)) *Service {
	mc := c.srv.NewClient()
	cfg := Config{ID: id, Store: mc, LostBookieDelay: 300 * time.Millisecond, OpenLedgerGracePeriod: 30 * time.Second,
		AuditInterval: time.Minute, SessionTTL: time.Second, RetryBackoff: 100 * time.Millisecond,
		ProgressInterval: 100 * time.Millisecond, RequestTimeout: 5 * time.Second, Logger: c.log.With("service", id)}
	if change != nil {
		change(&cfg)
	}
	s, err := Start(cfg)
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(func() { s.Close(); mc.Close() })
	c.services[id] = s
	c.clients[id] = mc
	return s
}

// killBookie stops a bookie and the autorecovery service of its process.
func (c *testCluster) killBookie(id string) {
	if s := c.services[id]; s != nil {
		s.Close()
		delete(c.services, id)
	}
	c.nodes[id].Close()
}

func (c *testCluster) ledgerClient(name string) *ledgerclient.Client {
	return ledgerclient.New(ledgerclient.Config{Store: c.srv.NewClient(), Bookies: c.bookies, Tick: 10 * time.Millisecond,
		RequestTimeoutTicks: 50, Name: name, Logger: c.log})
}

func entryPayload(ledgerID, entry int64) []byte {
	r := rand.New(rand.NewPCG(uint64(ledgerID), uint64(entry)))
	b := make([]byte, 100+r.IntN(900))
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// writeLedger creates a ledger through the ledger client, appends entries
// and closes it unless keepOpen.
func (c *testCluster) writeLedger(ctx context.Context, lc *ledgerclient.Client, e, qw, qa, entries int, keepOpen bool) *ledgerclient.Writer {
	w, err := lc.Create(ctx, e, qw, qa)
	if err != nil {
		c.t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	for i := range entries {
		wg.Add(1)
		w.AppendAsync(entryPayload(w.ID(), int64(i)), func(_ int64, err error) {
			defer wg.Done()
			mu.Lock()
			defer mu.Unlock()
			if err != nil && firstErr == nil {
				firstErr = err
			}
		})
	}
	wg.Wait()
	if firstErr != nil {
		c.t.Fatal(firstErr)
	}
	if !keepOpen {
		if err := w.Close(ctx); err != nil {
			c.t.Fatal(err)
		}
	}
	return w
}

// craftLedger writes a ledger by hand: its metadata record with the given
// fragments and state, and entries [0, entries) on their write quorums.
// This makes shapes the writer only reaches through failures.
func (c *testCluster) craftLedger(ctx context.Context, state ledger.State, e, qw int, entries int64, frags ...ledger.Fragment) int64 {
	id, err := c.store.AllocateID(ctx, ledger.IDSequence)
	if err != nil {
		c.t.Fatal(err)
	}
	md := ledger.Metadata{ID: id, EnsembleSize: e, WriteQuorum: qw, AckQuorum: 2, State: state, Fragments: frags, LastEntryID: -1}
	var length int64
	for entry := range entries {
		p := entryPayload(id, entry)
		length += int64(len(p))
		stored := ledger.EncodeEntry(id, entry, length, p)
		for _, b := range md.WriteQuorumBookies(entry) {
			if err := c.bookies.Add(ctx, c.nodes[string(b)].Addr(), client.AddRequest{LedgerID: id, EntryID: entry, LastAddConfirmed: entry - 1, Payload: stored}); err != nil {
				c.t.Fatal(err)
			}
		}
	}
	if state == ledger.StateClosed {
		md.LastEntryID, md.Length = entries-1, length
	}
	if err := md.Validate(); err != nil {
		c.t.Fatal(err)
	}
	if _, err := c.store.Create(ctx, ledger.Key(id), md.Marshal()); err != nil {
		c.t.Fatal(err)
	}
	return id
}

func (c *testCluster) metadata(ctx context.Context, id int64) ledger.Metadata {
	kv, err := c.store.Get(ctx, ledger.Key(id))
	if err != nil {
		c.t.Fatal(err)
	}
	md, err := ledger.UnmarshalMetadata(kv.Value)
	if err != nil {
		c.t.Fatal(err)
	}
	return md
}

// waitUntil polls cond (each poll is a store read) until it holds.
func (c *testCluster) waitUntil(what string, limit time.Duration, cond func() bool) {
	c.t.Helper()
	deadline := time.Now().Add(limit)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			st, _ := ReadStatus(context.Background(), c.store)
			c.t.Fatalf("no %s within %v; autorecovery status: %+v", what, limit, st)
		}
		<-tick.C
	}
}

func (c *testCluster) marks() int {
	st, err := ReadStatus(context.Background(), c.store)
	if err != nil {
		c.t.Fatal(err)
	}
	return len(st.UnderReplicated)
}

// verifyReplicas checks that no fragment names a lost bookie, that the zone
// rule holds, and that every entry in [0, entries) reads back, checksum
// intact and byte-identical, from every bookie of its write quorum.
func (c *testCluster) verifyReplicas(ctx context.Context, id int64, entries int64, lost ...ledger.BookieID) ledger.Metadata {
	c.t.Helper()
	md := c.metadata(ctx, id)
	for fi, f := range md.Fragments {
		for _, b := range f.Ensemble {
			for _, l := range lost {
				if b == l {
					c.t.Fatalf("ledger %d fragment %d still names lost bookie %s: %+v", id, fi, l, md.Fragments)
				}
			}
		}
	}
	if err := ledger.ZoneRuleHolds(&md, c.zones); err != nil {
		c.t.Fatal(err)
	}
	for entry := range entries {
		var first []byte
		for _, b := range md.WriteQuorumBookies(entry) {
			e, err := c.bookies.Read(ctx, c.nodes[string(b)].Addr(), id, entry, false)
			if err != nil {
				c.t.Fatalf("ledger %d entry %d on %s: %v", id, entry, b, err)
			}
			p, _, err := ledger.DecodeEntry(id, entry, e.Payload)
			if err != nil || !bytes.Equal(p, entryPayload(id, entry)) {
				c.t.Fatalf("ledger %d entry %d on %s: wrong payload (%v)", id, entry, b, err)
			}
			if first != nil && !bytes.Equal(first, e.Payload) {
				c.t.Fatalf("ledger %d entry %d differs between replicas", id, entry)
			}
			first = e.Payload
		}
	}
	return md
}

func hasBookie(md ledger.Metadata, b ledger.BookieID) bool {
	return referencedBookies(&md)[b]
}

// TestLostBookieAllLedgersRepaired: six bookies in three zones, ledgers of
// several shapes (E=Qw=3, striped E=4 Qw=2, multi-fragment), one bookie lost:
// every ledger that held it is repaired to full replication, with the
// replacement in the lost bookie's zone and the zone rule intact.
func TestLostBookieAllLedgersRepaired(t *testing.T) {
	c := newTestCluster(t)
	c.startBookies("a", "a", "b", "b", "c", "c")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	lc := c.ledgerClient("writer")
	type written struct {
		id      int64
		entries int64
	}
	var ledgers []written
	for range 10 {
		w := c.writeLedger(ctx, lc, 3, 3, 2, 60, false)
		ledgers = append(ledgers, written{w.ID(), 60})
	}
	// b1 in the first fragment only, in both, and striped (E=4, Qw=2: b1
	// holds only the entries whose write set includes slot 0).
	multi := c.craftLedger(ctx, ledger.StateClosed, 3, 3, 30, frag(0, "b1", "b3", "b5"), frag(10, "b2", "b4", "b6"))
	both := c.craftLedger(ctx, ledger.StateClosed, 3, 3, 30, frag(0, "b1", "b3", "b5"), frag(20, "b4", "b6", "b1"))
	striped := c.craftLedger(ctx, ledger.StateClosed, 4, 2, 41, frag(0, "b1", "b3", "b5", "b4"))
	ledgers = append(ledgers, written{multi, 30}, written{both, 30}, written{striped, 41})
	// No bookie can take b1's slot here without breaking the zone rule
	// (its neighbours are in zones b and c and the other zone-a bookie is
	// in the ensemble already): it must stay marked, not be placed badly.
	stuck := c.craftLedger(ctx, ledger.StateClosed, 4, 2, 20, frag(0, "b1", "b3", "b2", "b5"))

	var services []*Service
	for _, id := range []string{"b1", "b2", "b3", "b4", "b5", "b6"} {
		services = append(services, c.startService(id, nil))
	}
	c.waitUntil("auditor", 10*time.Second, func() bool {
		for _, s := range services {
			if s.IsAuditor() {
				return true
			}
		}
		return false
	})
	// The same-zone preference needs b1's zone on record (the auditor
	// records each registration's zone, best effort): if b1 were killed
	// first, perhaps as the auditor itself before its first scan, its
	// replacement could go to any zone the rule allows.
	c.waitUntil("every bookie's zone recorded", 10*time.Second, func() bool {
		kvs, _, err := meta.ListAll(ctx, c.store, ZonePrefix)
		return err == nil && len(kvs) == 6
	})
	affected := 0
	for _, l := range ledgers {
		if hasBookie(c.metadata(ctx, l.id), "b1") {
			affected++
		}
	}
	c.killBookie("b1")
	c.waitUntil("mark", 10*time.Second, func() bool { return c.marks() > 0 })
	c.waitUntil("repair of every repairable ledger", 30*time.Second, func() bool {
		st, err := ReadStatus(ctx, c.store)
		if err != nil {
			t.Fatal(err)
		}
		return len(st.UnderReplicated) == 1 && st.UnderReplicated[0].LedgerID == stuck
	})
	c.waitUntil("failed attempt at the unrepairable ledger", 10*time.Second, func() bool {
		for _, s := range c.services {
			if s.Progress().Failures > 0 {
				return true
			}
		}
		return false
	})
	if md := c.metadata(ctx, stuck); md.Fragments[0].Ensemble[0] != "b1" {
		t.Fatalf("unrepairable ledger changed: %+v", md.Fragments)
	}
	for _, l := range ledgers {
		md := c.verifyReplicas(ctx, l.id, l.entries, "b1")
		if md.State != ledger.StateClosed {
			t.Fatalf("ledger %d state %s", l.id, md.State)
		}
	}
	// The replacement is the surviving zone-a bookie wherever the zone rule
	// allows nothing else; check it took every one of b1's slots.
	for _, l := range []int64{multi, both, striped} {
		md := c.metadata(ctx, l)
		if md.Fragments[0].Ensemble[0] != "b2" {
			t.Fatalf("ledger %d: b1 replaced by %s, want b2 (same zone)", l, md.Fragments[0].Ensemble[0])
		}
	}
	var entries, repaired int64
	sources := map[string]bool{}
	for _, s := range c.services {
		p := s.Progress()
		entries += p.EntriesCopied
		repaired += p.LedgersRepaired
		for src := range p.Sources {
			sources[src] = true
		}
	}
	if repaired != int64(affected) {
		t.Fatalf("%d ledgers repaired, %d held b1", repaired, affected)
	}
	if len(sources) < 3 {
		t.Fatalf("reads came from %v only", sources)
	}
	t.Logf("%d of %d ledgers held b1; %d entries copied from %d sources %v", affected, len(ledgers), entries, len(sources), sources)
}

// TestOpenLedgerGraceThenFence: an open ledger whose last fragment held the
// lost bookie waits out the grace period, then is fenced (its idle writer
// gets ErrFenced) and repaired; an open ledger that held it only in an
// earlier fragment is repaired at once and stays open.
func TestOpenLedgerGraceThenFence(t *testing.T) {
	c := newTestCluster(t)
	c.startBookies("a", "a", "b", "b", "c", "c")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	lc := c.ledgerClient("writer")
	w := c.writeLedger(ctx, lc, 3, 3, 2, 40, true)
	victim := ""
	for _, b := range w.Metadata().Fragments[0].Ensemble {
		if c.zones[b] == "a" {
			victim = string(b)
		}
	}
	other := map[string]string{"b1": "b2", "b2": "b1"}[victim]
	earlier := c.craftLedger(ctx, ledger.StateOpen, 3, 3, 25,
		frag(0, ledger.BookieID(victim), "b3", "b5"), frag(10, ledger.BookieID(other), "b4", "b6"))

	const grace = 2 * time.Second
	for _, id := range []string{"b1", "b2", "b3", "b4", "b5", "b6"} {
		if id != victim {
			c.startService(id, func(cfg *Config) { cfg.OpenLedgerGracePeriod = grace })
		}
	}
	c.killBookie(victim)

	// The earlier-fragment ledger is repaired during the grace period and
	// stays open; the writer's ledger waits, deferred.
	c.waitUntil("repair of the earlier fragment", 10*time.Second, func() bool {
		return !hasBookie(c.metadata(ctx, earlier), ledger.BookieID(victim))
	})
	if md := c.metadata(ctx, earlier); md.State != ledger.StateOpen || md.LastEntryID != -1 {
		t.Fatalf("repair changed the open ledger's state: %s, last %d", md.State, md.LastEntryID)
	}
	c.verifyReplicas(ctx, earlier, 10, ledger.BookieID(victim))
	var mark *MarkStatus
	c.waitUntil("the open ledger's mark, deferred", 10*time.Second, func() bool {
		st, err := ReadStatus(ctx, c.store)
		if err != nil {
			t.Fatal(err)
		}
		for i := range st.UnderReplicated {
			if m := st.UnderReplicated[i]; m.LedgerID == w.ID() && !m.DeferredUntil.IsZero() {
				mark = &m
			}
		}
		return mark != nil
	})
	if want := mark.MarkedAt.Add(grace); !mark.DeferredUntil.Equal(want) {
		t.Fatalf("deferred until %v, want mark + grace = %v", mark.DeferredUntil, want)
	}
	if md := c.metadata(ctx, w.ID()); md.State != ledger.StateOpen {
		t.Fatalf("open ledger touched during its grace period: %s", md.State)
	}

	c.waitUntil("repair after the grace period", 20*time.Second, func() bool { return c.marks() == 0 })
	if since := time.Since(mark.MarkedAt); since < grace {
		t.Fatalf("repaired %v after the mark, before the grace period of %v", since, grace)
	}
	md := c.verifyReplicas(ctx, w.ID(), 40, ledger.BookieID(victim))
	if md.State != ledger.StateClosed || md.LastEntryID != 39 {
		t.Fatalf("after fencing: %s at %d, want CLOSED at 39", md.State, md.LastEntryID)
	}
	if _, err := w.Append(ctx, []byte("late")); !errors.Is(err, ledger.ErrFenced) && !errors.Is(err, ledger.ErrClosed) {
		t.Fatalf("append by the fenced writer: %v", err)
	}
}

// TestAuditorFailover: the auditor's process dies (its session expires);
// another candidate takes over and the next lost bookie is still handled.
func TestAuditorFailover(t *testing.T) {
	c := newTestCluster(t)
	c.startBookies("a", "a", "b", "b", "c", "c")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	lc := c.ledgerClient("writer")
	var ids []int64
	for range 6 {
		ids = append(ids, c.writeLedger(ctx, lc, 3, 3, 2, 30, false).ID())
	}
	for _, id := range []string{"x1", "x2", "x3"} {
		c.startService(id, nil)
	}
	auditor := func() string {
		for id, s := range c.services {
			if s.IsAuditor() {
				return id
			}
		}
		return ""
	}
	c.waitUntil("auditor", 10*time.Second, func() bool { return auditor() != "" })
	first := auditor()
	// A crash, not a shutdown: the session is not revoked and must expire
	// (TTL 1s) before another candidate can take over.
	crashed := c.services[first]
	delete(c.services, first)
	crashedAt := time.Now()
	c.clients[first].Crash()
	c.waitUntil("new auditor", 10*time.Second, func() bool { a := auditor(); return a != "" && a != first })
	took := time.Since(crashedAt)
	crashed.Close()
	if crashed.IsAuditor() {
		t.Fatal("the crashed process still claims to be the auditor")
	}
	st, err := ReadStatus(ctx, c.store)
	if err != nil || st.Auditor == nil || st.Auditor.ID != auditor() {
		t.Fatalf("auditor key %+v (%v), want %s", st.Auditor, err, auditor())
	}
	t.Logf("auditor %s crashed; %s took over after %v", first, st.Auditor.ID, took)

	// An operator deletes the auditor key: the auditor steps down and the
	// election runs again; one auditor, named by the key, comes out.
	kv, err := c.store.Get(ctx, AuditorKey)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.store.Delete(ctx, AuditorKey, kv.Version); err != nil {
		t.Fatal(err)
	}
	c.waitUntil("one auditor after the key was deleted", 10*time.Second, func() bool {
		n := 0
		for _, s := range c.services {
			if s.IsAuditor() {
				n++
			}
		}
		st, err := ReadStatus(ctx, c.store)
		return err == nil && n == 1 && st.Auditor != nil && st.Auditor.ID == auditor()
	})

	held := 0
	for _, id := range ids {
		if hasBookie(c.metadata(ctx, id), "b3") {
			held++
		}
	}
	if held == 0 {
		t.Fatal("no ledger on b3; the test needs one")
	}
	c.killBookie("b3")
	// Marks may come and go between two polls: wait for the outcome.
	c.waitUntil("repair", 30*time.Second, func() bool {
		for _, id := range ids {
			if hasBookie(c.metadata(ctx, id), "b3") {
				return false
			}
		}
		return c.marks() == 0
	})
	for _, id := range ids {
		c.verifyReplicas(ctx, id, 30, "b3")
	}
}

// TestBookieLostWhileNoAuditor: the bookie is gone before any auditor
// runs; the first audit finds ledgers naming an unregistered bookie and,
// after the delay, marks them.
func TestBookieLostWhileNoAuditor(t *testing.T) {
	c := newTestCluster(t)
	c.startBookies("a", "a", "b", "b", "c", "c")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	lc := c.ledgerClient("writer")
	var ids []int64
	for range 4 {
		ids = append(ids, c.writeLedger(ctx, lc, 3, 3, 2, 20, false).ID())
	}
	lost := c.metadata(ctx, ids[0]).Fragments[0].Ensemble[0]
	c.killBookie(string(lost))
	for _, id := range []string{"w1", "w2"} {
		c.startService(id, nil)
	}
	c.waitUntil("repair", 30*time.Second, func() bool {
		return c.marks() == 0 && !hasBookie(c.metadata(ctx, ids[0]), lost)
	})
	for _, id := range ids {
		c.verifyReplicas(ctx, id, 20, lost)
	}
}
