package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"quire/internal/autorecovery"
	"quire/internal/bookie/client"
	"quire/internal/bookie/registry"
	"quire/internal/ledger"
	"quire/internal/ledger/ledgerclient"
	"quire/internal/meta"
)

// arPayload is the one value entry (ledger, entry) has: 1–4 KiB.
func arPayload(ledgerID, entry int64) []byte {
	r := rand.New(rand.NewPCG(uint64(ledgerID), uint64(entry)^0xa5))
	b := make([]byte, 1024+r.IntN(3*1024+1))
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// recoveryFigures is what the acceptance test measures.
type recoveryFigures struct {
	ledgersRepaired int
	bytesCopied     int64
	window          time.Duration // first mark to last mark deleted
	mbPerSecond     float64
	sources         int           // distinct bookies that served reads
	parallelSources int           // most of them serving at the same moment
	copyWindow      time.Duration // first entry read to last, over all workers
}

// TestAutorecoveryLostBookieProcess is the acceptance test: six `quire
// bookie` processes in three zones, 50 closed ledgers (E=3, Qw=3, Qa=2) of
// 200 entries of 1–4 KiB, one bookie SIGKILLed. Autorecovery must bring
// every entry back to three replicas in three distinct zones, identical
// bytes, read straight from each bookie.
func TestAutorecoveryLostBookieProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("runs quire processes")
	}
	const (
		ledgers = 50
		entries = 200
	)
	start := time.Now()
	endpoint := startTestMeta(t)
	zones := map[ledger.BookieID]string{"b1": "a", "b2": "a", "b3": "b", "b4": "b", "b5": "c", "b6": "c"}
	procs := map[ledger.BookieID]*quireProcess{}
	for _, id := range []ledger.BookieID{"b1", "b2", "b3", "b4", "b5", "b6"} {
		procs[id] = startQuire(t, "bookie", "--id", string(id), "--zone", zones[id], "--data-dir", t.TempDir(), "--listen", freeAddr(t),
			"--meta-endpoints", endpoint, "--http-addr", "", "--session-ttl", "2s",
			"--autorecovery-lost-bookie-delay", "1s", "--autorecovery-ledgers-per-worker", "4")
	}
	store, err := meta.NewEtcd(meta.EtcdConfig{Endpoints: []string{endpoint}})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	waitCond(t, "six bookies registered and an auditor", 30*time.Second, procs, func() bool {
		infos, err := registry.List(ctx, store)
		st, serr := autorecovery.ReadStatus(ctx, store)
		return err == nil && serr == nil && len(infos) == 6 && st.Auditor != nil
	})

	lc, closeAll, err := newLedgerClient(endpoint, "autorecovery-test")
	if err != nil {
		t.Fatal(err)
	}
	defer closeAll()
	ids := writeClosedLedgers(t, ctx, lc, ledgers, entries)
	t.Logf("wrote %d ledgers of %d entries in %v", ledgers, entries, time.Since(start).Round(time.Millisecond))

	const victim = ledger.BookieID("b1")
	affected := 0
	var expectBytes int64
	membership := map[ledger.BookieID]int{}
	for _, id := range ids {
		md, _, err := lc.ReadMetadata(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range md.Fragments[0].Ensemble {
			membership[b]++
		}
		if hasRef(md, victim) {
			affected++
			for e := range int64(entries) {
				expectBytes += int64(len(arPayload(id, e)))
			}
		}
	}
	st, err := autorecovery.ReadStatus(ctx, store)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("SIGKILL %s (auditor: %s); %d ledgers hold it; ensembles per bookie: %v", victim, st.Auditor.ID, affected, membership)

	// Watch the marks from now: the throughput window is first mark to last
	// repair, and the wait ends when every mark made is gone.
	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	marks := store.Watch(wctx, autorecovery.UnderReplicatedPrefix, 0)
	if err := procs[victim].cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	fig := waitRepaired(t, marks, affected, 60*time.Second)

	// The figures the workers published.
	st, err = autorecovery.ReadStatus(ctx, store)
	if err != nil {
		t.Fatal(err)
	}
	fig.bytesCopied, fig.sources, fig.parallelSources, fig.copyWindow = progressFigures(st.Workers)
	if fig.bytesCopied < expectBytes {
		t.Fatalf("workers copied %d bytes, the lost bookie held at least %d", fig.bytesCopied, expectBytes)
	}
	fig.mbPerSecond = float64(fig.bytesCopied) / 1e6 / fig.window.Seconds()

	verifyThreeZoneReplicas(t, ctx, store, lc, ids, entries, zones, victim)
	t.Logf("re-replicated %d ledgers, %.1f MB in %v (first mark to last repair): %.1f MB/s (copying alone: %v, %.1f MB/s); %d source bookies, up to %d serving in parallel; test took %v",
		fig.ledgersRepaired, float64(fig.bytesCopied)/1e6, fig.window.Round(time.Millisecond), fig.mbPerSecond,
		fig.copyWindow.Round(time.Millisecond), float64(fig.bytesCopied)/1e6/fig.copyWindow.Seconds(),
		fig.sources, fig.parallelSources, time.Since(start).Round(time.Second))
	if fig.sources < 2 {
		t.Fatalf("reads came from %d source bookies; want many", fig.sources)
	}

	// The admin commands show the outcome.
	out := runAdmin(t, "bookies", "--meta-endpoints", endpoint)
	if !strings.Contains(out, "5 registered, 1 unregistered") || !strings.Contains(out, "read-only") && !strings.Contains(out, "writable") {
		t.Fatalf("admin bookies:\n%s", out)
	}
	out = runAdmin(t, "autorecovery", "--meta-endpoints", endpoint)
	if !strings.Contains(out, "Under-replicated ledgers: 0") || !strings.Contains(out, "Workers: 5") {
		t.Fatalf("admin autorecovery:\n%s", out)
	}
	t.Logf("quire admin bookies / autorecovery:\n%s", out)
}

func hasRef(md ledger.Metadata, b ledger.BookieID) bool {
	for _, f := range md.Fragments {
		for _, x := range f.Ensemble {
			if x == b {
				return true
			}
		}
	}
	return false
}

// waitCond polls cond (a store read) until it holds, failing if a process exits.
func waitCond(t *testing.T, what string, limit time.Duration, procs map[ledger.BookieID]*quireProcess, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("no %s within %v", what, limit)
		}
		for id, p := range procs {
			select {
			case err := <-p.exited:
				t.Fatalf("bookie %s exited: %v\n%s", id, err, p.output)
			default:
			}
		}
		select {
		case <-time.After(20 * time.Millisecond):
		case <-t.Context().Done():
		}
	}
}

// writeClosedLedgers writes n ledgers of entries each, eight at a time.
func writeClosedLedgers(t *testing.T, ctx context.Context, lc *ledgerclient.Client, n, entries int) []int64 {
	t.Helper()
	ids := make([]int64, n)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	slots := make(chan struct{}, 8)
	for i := range n {
		wg.Go(func() {
			slots <- struct{}{}
			defer func() { <-slots }()
			w, err := lc.Create(ctx, 3, 3, 2)
			if err != nil {
				errs <- err
				return
			}
			ids[i] = w.ID()
			var acks sync.WaitGroup
			var failed atomic.Pointer[error]
			for e := range int64(entries) {
				acks.Add(1)
				w.AppendAsync(arPayload(w.ID(), e), func(_ int64, err error) {
					if err != nil {
						failed.CompareAndSwap(nil, &err)
					}
					acks.Done()
				})
			}
			acks.Wait()
			if p := failed.Load(); p != nil {
				errs <- *p
				return
			}
			if err := w.Close(ctx); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	return ids
}

// waitRepaired follows the marks until `affected` ledgers were marked and
// every mark is gone again.
func waitRepaired(t *testing.T, marks <-chan meta.WatchResponse, affected int, limit time.Duration) recoveryFigures {
	t.Helper()
	deadline := time.NewTimer(limit)
	defer deadline.Stop()
	live := map[string]bool{}
	marked := map[string]bool{}
	var firstMark, lastRepair time.Time
	for len(marked) < affected || len(live) > 0 {
		select {
		case resp, ok := <-marks:
			if !ok || resp.Err != nil {
				t.Fatalf("watch on marks ended: %v", resp.Err)
			}
			for _, ev := range resp.Events {
				switch ev.Type {
				case meta.EventPut:
					if !marked[ev.Key] {
						m, err := decodeMarkForTest(ev.Value)
						if err != nil {
							t.Fatal(err)
						}
						if firstMark.IsZero() || m.MarkedAt.Before(firstMark) {
							firstMark = m.MarkedAt
						}
					}
					live[ev.Key], marked[ev.Key] = true, true
				case meta.EventDelete:
					delete(live, ev.Key)
					lastRepair = time.Now()
				}
			}
		case <-deadline.C:
			t.Fatalf("after %v: %d of %d ledgers marked, %d still under-replicated", limit, len(marked), affected, len(live))
		}
	}
	return recoveryFigures{ledgersRepaired: len(marked), window: lastRepair.Sub(firstMark)}
}

func decodeMarkForTest(b []byte) (autorecovery.Mark, error) {
	var st autorecovery.Mark
	err := json.Unmarshal(b, &st)
	return st, err
}

// progressFigures sums the workers' copies and finds how many source bookies
// were serving reads at the same moment (a sweep over each worker's
// first-to-last read interval per source).
func progressFigures(workers []autorecovery.Progress) (bytesCopied int64, sources, parallel int, copyWindow time.Duration) {
	type edge struct {
		at     time.Time
		source string
		delta  int
	}
	var edges []edge
	all := map[string]bool{}
	for _, w := range workers {
		bytesCopied += w.BytesCopied
		for src, s := range w.Sources {
			all[src] = true
			edges = append(edges, edge{s.First, src, +1}, edge{s.Last, src, -1})
		}
	}
	sort.Slice(edges, func(i, j int) bool {
		if !edges[i].at.Equal(edges[j].at) {
			return edges[i].at.Before(edges[j].at)
		}
		return edges[i].delta > edges[j].delta // an interval touching another overlaps it
	})
	if len(edges) == 0 {
		return 0, 0, 0, 0
	}
	active := map[string]int{}
	for _, e := range edges {
		active[e.source] += e.delta
		if active[e.source] == 0 {
			delete(active, e.source)
		}
		parallel = max(parallel, len(active))
	}
	return bytesCopied, len(all), parallel, edges[len(edges)-1].at.Sub(edges[0].at)
}

// verifyThreeZoneReplicas reads every entry of every ledger from each bookie
// of its write quorum.
func verifyThreeZoneReplicas(t *testing.T, ctx context.Context, store meta.Store, lc *ledgerclient.Client, ids []int64, entries int,
	zones map[ledger.BookieID]string, lost ledger.BookieID) {
	t.Helper()
	infos, err := registry.List(ctx, store)
	if err != nil {
		t.Fatal(err)
	}
	addrs := map[ledger.BookieID]string{}
	for _, i := range infos {
		addrs[ledger.BookieID(i.ID)] = i.Addr
	}
	bc := client.New(client.Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	defer bc.Close()
	type item struct {
		md    ledger.Metadata
		entry int64
	}
	work := make(chan item)
	failures := make(chan string, 1)
	fail := func(format string, args ...any) {
		select {
		case failures <- fmt.Sprintf(format, args...):
		default:
		}
	}
	var wg sync.WaitGroup
	for range 32 {
		wg.Go(func() {
			for it := range work {
				quorum := it.md.WriteQuorumBookies(it.entry)
				seenZones := map[string]bool{}
				var first []byte
				for _, b := range quorum {
					seenZones[zones[b]] = true
					e, err := bc.Read(ctx, addrs[b], it.md.ID, it.entry, false)
					if err != nil {
						fail("ledger %d entry %d on %s: %v", it.md.ID, it.entry, b, err)
						continue
					}
					p, _, err := ledger.DecodeEntry(it.md.ID, it.entry, e.Payload)
					if err != nil || !bytes.Equal(p, arPayload(it.md.ID, it.entry)) {
						fail("ledger %d entry %d on %s: wrong bytes (%v)", it.md.ID, it.entry, b, err)
					}
					if first != nil && !bytes.Equal(first, e.Payload) {
						fail("ledger %d entry %d: replicas differ", it.md.ID, it.entry)
					}
					first = e.Payload
				}
				if len(quorum) != 3 || len(seenZones) != 3 {
					fail("ledger %d entry %d: replicas on %v, zones %v", it.md.ID, it.entry, quorum, seenZones)
				}
			}
		})
	}
	for _, id := range ids {
		md, _, err := lc.ReadMetadata(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if md.State != ledger.StateClosed || md.LastEntryID != int64(entries-1) || hasRef(md, lost) {
			t.Fatalf("ledger %d after repair: %s at %d, fragments %+v", id, md.State, md.LastEntryID, md.Fragments)
		}
		if err := ledger.ZoneRuleHolds(&md, zones); err != nil {
			t.Fatal(err)
		}
		for e := range int64(entries) {
			work <- item{md, e}
		}
	}
	close(work)
	wg.Wait()
	select {
	case msg := <-failures:
		t.Fatal(msg)
	default:
	}
}

// runAdmin runs `quire admin args...` in-process and returns its output.
func runAdmin(t *testing.T, args ...string) string {
	t.Helper()
	root := newRootCommand()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs(append([]string{"admin"}, args...))
	if err := root.Execute(); err != nil {
		t.Fatalf("admin %v: %v\n%s", args, err, out.String())
	}
	return out.String()
}
