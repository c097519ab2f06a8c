package bookie

import (
	"bytes"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/prometheus/client_golang/prometheus"
)

func TestFencing(t *testing.T) {
	fs := vfs.NewCrashableMem()
	e := openTest(t, testConfig(fs))
	for i := range int64(3) {
		mustAdd(t, e, AddRequest{LedgerID: 7, EntryID: i, LastAddConfirmed: i - 1, Payload: payloadFor(7, i, 100)})
	}
	lac, err := e.Fence(7)
	if err != nil || lac != 1 {
		t.Fatalf("Fence(7) = %d, %v; want 1, nil", lac, err)
	}
	// The fence is durable when Fence returns: a crash right now keeps it.
	crashed := fs.CrashClone(vfs.CrashCloneCfg{})

	tests := []struct {
		name    string
		req     AddRequest
		wantErr error
	}{
		{"ordinary add after fence", AddRequest{LedgerID: 7, EntryID: 3, LastAddConfirmed: 2, Payload: []byte("zombie")}, ErrFenced},
		{"recovery add after fence", AddRequest{LedgerID: 7, EntryID: 2, LastAddConfirmed: 1, Recovery: true, Payload: payloadFor(7, 2, 100)}, nil},
		{"recovery add of a new entry", AddRequest{LedgerID: 7, EntryID: 3, LastAddConfirmed: 2, Recovery: true, Payload: []byte("recovered")}, nil},
		{"other ledgers are not fenced", AddRequest{LedgerID: 8, EntryID: 0, LastAddConfirmed: -1, Payload: []byte("x")}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := addWait(t, e, tc.req); !errors.Is(err, tc.wantErr) {
				t.Fatalf("add = %v, want %v", err, tc.wantErr)
			}
		})
	}
	if ent, err := e.Read(7, 3); err != nil || string(ent.Payload) != "recovered" {
		t.Fatalf("Read(7,3) = %q, %v", ent.Payload, err)
	}

	// Fencing an unknown ledger creates it, with LAC -1.
	if lac, err := e.Fence(99); err != nil || lac != -1 {
		t.Fatalf("Fence(99) = %d, %v; want -1, nil", lac, err)
	}
	if err := addWait(t, e, AddRequest{LedgerID: 99, EntryID: 0, LastAddConfirmed: -1}); !errors.Is(err, ErrFenced) {
		t.Fatalf("add to fenced new ledger = %v, want ErrFenced", err)
	}

	cfg := testConfig(crashed)
	after := openTest(t, cfg)
	if err := addWait(t, after, AddRequest{LedgerID: 7, EntryID: 3, LastAddConfirmed: 2, Payload: []byte("zombie")}); !errors.Is(err, ErrFenced) {
		t.Fatalf("after crash: ordinary add = %v, want ErrFenced", err)
	}
	if lac, err := after.LastAddConfirmed(7); err != nil || lac != 1 {
		t.Fatalf("after crash: LAC = %d, %v; want 1", lac, err)
	}
}

func TestReadPath(t *testing.T) {
	cfg := testConfig(vfs.NewMem())
	cfg.ReadAheadEntries = 16
	e := openTest(t, cfg)
	const n = 200
	for i := range int64(n) {
		mustAdd(t, e, AddRequest{LedgerID: 1, EntryID: i, LastAddConfirmed: i - 1, Payload: payloadFor(1, i, 300)})
	}
	check := func(t *testing.T, i int64) {
		t.Helper()
		ent, err := e.Read(1, i)
		if err != nil {
			t.Fatalf("Read(1,%d): %v", i, err)
		}
		if ent.EntryID != i || ent.LastAddConfirmed != i-1 || !bytes.Equal(ent.Payload, payloadFor(1, i, 300)) {
			t.Fatalf("Read(1,%d) = entry %d LAC %d, %d bytes: wrong", i, ent.EntryID, ent.LastAddConfirmed, len(ent.Payload))
		}
	}

	t.Run("write cache", func(t *testing.T) {
		before := e.Stats()
		for i := range int64(n) {
			check(t, i)
		}
		after := e.Stats()
		if got := after.WriteCacheHits - before.WriteCacheHits; got != n {
			t.Fatalf("write cache hits = %d, want %d", got, n)
		}
	})

	if err := e.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	if st := e.Stats(); st.WriteCacheBytes != 0 || st.EntryLogBytes == 0 {
		t.Fatalf("after checkpoint: write cache %d bytes, entry logs %d bytes", st.WriteCacheBytes, st.EntryLogBytes)
	}

	t.Run("entry logs with read-ahead", func(t *testing.T) {
		before := e.Stats()
		for i := range int64(n) {
			check(t, i)
		}
		after := e.Stats()
		hits := after.ReadCacheHits - before.ReadCacheHits
		misses := after.ReadCacheMisses - before.ReadCacheMisses
		if hits+misses != n {
			t.Fatalf("hits %d + misses %d != %d reads", hits, misses, n)
		}
		// One miss reads the entry and the next 16: 200/17 → 12 misses.
		if ratio := float64(hits) / n; ratio < 0.9 {
			t.Fatalf("read cache hit ratio %.2f (%d hits, %d misses), want >= 0.9", ratio, hits, misses)
		}
		t.Logf("sequential reads: %d hits, %d misses", hits, misses)
	})

	t.Run("read range", func(t *testing.T) {
		tests := []struct {
			first             int64
			maxEntries, bytes int
			want              int
		}{
			{0, 10, 0, 10},
			{195, 10, 0, 5},   // stops at the end of the ledger
			{0, 100, 1000, 3}, // 300-byte payloads: 3 fit in 1000
			{0, 100, 10, 1},   // at least one entry
		}
		for _, tc := range tests {
			got, err := e.ReadRange(1, tc.first, tc.maxEntries, tc.bytes)
			if err != nil || len(got) != tc.want {
				t.Errorf("ReadRange(1, %d, %d, %d) = %d entries, %v; want %d", tc.first, tc.maxEntries, tc.bytes, len(got), err, tc.want)
				continue
			}
			for i, ent := range got {
				if ent.EntryID != tc.first+int64(i) {
					t.Errorf("ReadRange entry %d has id %d", i, ent.EntryID)
				}
			}
		}
		if _, err := e.ReadRange(1, n, 10, 0); !errors.Is(err, ErrNoSuchEntry) {
			t.Errorf("ReadRange past the end = %v, want ErrNoSuchEntry", err)
		}
	})

	t.Run("errors and LAC read", func(t *testing.T) {
		if _, err := e.Read(1, n+5); !errors.Is(err, ErrNoSuchEntry) {
			t.Errorf("missing entry: %v", err)
		}
		if _, err := e.Read(2, 0); !errors.Is(err, ErrNoSuchLedger) {
			t.Errorf("missing ledger: %v", err)
		}
		ent, err := e.Read(1, -1)
		if err != nil || ent.EntryID != -1 || ent.LastAddConfirmed != n-2 || ent.Payload != nil {
			t.Errorf("Read(1,-1) = %+v, %v; want LAC %d", ent, err, n-2)
		}
	})
}

func TestWatchLAC(t *testing.T) {
	e := openTest(t, testConfig(vfs.NewMem()))
	if _, err := e.WatchLAC(1, -1, func(int64) {}); !errors.Is(err, ErrNoSuchLedger) {
		t.Fatalf("watch unknown ledger: %v", err)
	}
	mustAdd(t, e, AddRequest{LedgerID: 1, EntryID: 0, LastAddConfirmed: -1})
	mustAdd(t, e, AddRequest{LedgerID: 1, EntryID: 1, LastAddConfirmed: 0})

	immediate := make(chan int64, 1)
	if _, err := e.WatchLAC(1, -1, func(lac int64) { immediate <- lac }); err != nil {
		t.Fatal(err)
	}
	if lac := recvWithin(t, immediate); lac != 0 {
		t.Fatalf("immediate notify LAC %d, want 0", lac)
	}

	var calls atomic.Int32
	notified := make(chan int64, 2)
	if _, err := e.WatchLAC(1, 0, func(lac int64) { calls.Add(1); notified <- lac }); err != nil {
		t.Fatal(err)
	}
	cancelled := make(chan int64, 1)
	cancel, err := e.WatchLAC(1, 0, func(lac int64) { cancelled <- lac })
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	mustAdd(t, e, AddRequest{LedgerID: 1, EntryID: 2, LastAddConfirmed: 1})
	mustAdd(t, e, AddRequest{LedgerID: 1, EntryID: 3, LastAddConfirmed: 2})
	if lac := recvWithin(t, notified); lac != 1 {
		t.Fatalf("notify LAC %d, want 1", lac)
	}
	if c := calls.Load(); c != 1 {
		t.Fatalf("notify called %d times, want once", c)
	}
	select {
	case lac := <-cancelled:
		t.Fatalf("cancelled watcher notified with %d", lac)
	default:
	}
}

// TestWriteLAC: an explicit LAC raises the ledger's LAC (never lowers it),
// wakes the long polls it satisfies, is refused on fenced, unknown and
// deleted ledgers, and is not journaled: after a crash the bookie reports
// the LAC its adds carried.
func TestWriteLAC(t *testing.T) {
	fs := vfs.NewCrashableMem()
	e := openTest(t, testConfig(fs))
	if _, err := e.WriteLAC(1, 0); !errors.Is(err, ErrNoSuchLedger) {
		t.Fatalf("write LAC of an unknown ledger: %v", err)
	}
	if _, err := e.WriteLAC(1, -2); !errors.Is(err, ErrInvalidRequest) {
		t.Fatalf("write LAC -2: %v", err)
	}
	mustAdd(t, e, AddRequest{LedgerID: 1, EntryID: 0, LastAddConfirmed: -1})
	mustAdd(t, e, AddRequest{LedgerID: 1, EntryID: 1, LastAddConfirmed: 0})

	notified := make(chan int64, 1)
	if _, err := e.WatchLAC(1, 0, func(lac int64) { notified <- lac }); err != nil {
		t.Fatal(err)
	}
	if lac, err := e.WriteLAC(1, 1); err != nil || lac != 1 {
		t.Fatalf("WriteLAC(1, 1) = %d, %v; want 1", lac, err)
	}
	if lac := recvWithin(t, notified); lac != 1 {
		t.Fatalf("long poll woken with LAC %d, want 1", lac)
	}
	// Never lowered: an older update (or a late one) changes nothing.
	if lac, err := e.WriteLAC(1, 0); err != nil || lac != 1 {
		t.Fatalf("WriteLAC(1, 0) = %d, %v; want 1 kept", lac, err)
	}
	if ent, err := e.Read(1, -1); err != nil || ent.LastAddConfirmed != 1 {
		t.Fatalf("LAC read = %+v, %v; want 1", ent, err)
	}

	// Not journaled: a crash now leaves the LAC the adds carried.
	crashed := fs.CrashClone(vfs.CrashCloneCfg{})
	after := openTest(t, testConfig(crashed))
	if lac, err := after.LastAddConfirmed(1); err != nil || lac != 0 {
		t.Fatalf("after crash: LAC %d, %v; want the journaled 0", lac, err)
	}

	if _, err := e.Fence(1); err != nil {
		t.Fatal(err)
	}
	if _, err := e.WriteLAC(1, 1); !errors.Is(err, ErrFenced) {
		t.Fatalf("write LAC of a fenced ledger: %v, want ErrFenced", err)
	}
	mustAdd(t, e, AddRequest{LedgerID: 2, EntryID: 0, LastAddConfirmed: -1})
	if err := e.DeleteLedger(2); err != nil {
		t.Fatal(err)
	}
	if _, err := e.WriteLAC(2, 0); !errors.Is(err, ErrNoSuchLedger) {
		t.Fatalf("write LAC of a deleted ledger: %v, want ErrNoSuchLedger", err)
	}
}

func TestDeleteLedger(t *testing.T) {
	fs := vfs.NewCrashableMem()
	e := openTest(t, testConfig(fs))
	for i := range int64(10) {
		mustAdd(t, e, AddRequest{LedgerID: 3, EntryID: i, LastAddConfirmed: i - 1, Payload: payloadFor(3, i, 50)})
		mustAdd(t, e, AddRequest{LedgerID: 4, EntryID: i, LastAddConfirmed: i - 1, Payload: payloadFor(4, i, 50)})
	}
	if err := e.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	mustAdd(t, e, AddRequest{LedgerID: 3, EntryID: 10, LastAddConfirmed: 9}) // in the write cache and journal only
	if err := e.DeleteLedger(3); err != nil {
		t.Fatal(err)
	}
	crashed := fs.CrashClone(vfs.CrashCloneCfg{})
	for _, eng := range []*Engine{e, openTest(t, testConfig(crashed))} {
		if _, err := eng.Read(3, 0); !errors.Is(err, ErrNoSuchLedger) {
			t.Errorf("read deleted ledger: %v", err)
		}
		if _, err := eng.LastAddConfirmed(3); !errors.Is(err, ErrNoSuchLedger) {
			t.Errorf("LAC of deleted ledger: %v", err)
		}
		if err := addWait(t, eng, AddRequest{LedgerID: 3, EntryID: 11}); !errors.Is(err, ErrNoSuchLedger) {
			t.Errorf("add to deleted ledger: %v", err)
		}
		if _, err := eng.Read(4, 9); err != nil {
			t.Errorf("other ledger: %v", err)
		}
	}
}

func TestMetricsRegistered(t *testing.T) {
	reg := prometheus.NewRegistry()
	cfg := testConfig(vfs.NewMem())
	cfg.Registerer = reg
	e := openTest(t, cfg)
	mustAdd(t, e, AddRequest{LedgerID: 1, EntryID: 0, LastAddConfirmed: -1, Payload: []byte("m")})
	if _, err := e.Read(1, 0); err != nil {
		t.Fatal(err)
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	names := make(map[string]bool)
	status := -1.0
	for _, f := range families {
		names[f.GetName()] = true
		if f.GetName() == "bookie_SERVER_STATUS" {
			status = f.GetMetric()[0].GetGauge().GetValue()
		}
	}
	for _, want := range []string{
		"bookie_add_entry_latency_seconds", "bookie_read_entry_latency_seconds", "bookie_journal_queue_depth",
		"bookie_journal_fsync_latency_seconds", "bookie_read_cache_hits_total", "bookie_read_cache_misses_total",
		"bookie_ledger_disk_bytes", "bookie_SERVER_STATUS",
	} {
		if !names[want] {
			t.Errorf("metric %s not registered", want)
		}
	}
	if status != 1 {
		t.Errorf("bookie_SERVER_STATUS = %v, want 1", status)
	}
	if _, err := Open(cfg); err == nil {
		t.Errorf("a second engine on the same registerer should fail to register")
	}
	// Close unregisters, so the engine can be reopened in the same process.
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	reopened := openTest(t, cfg)
	if _, err := reopened.Read(1, 0); err != nil {
		t.Fatalf("read after reopen: %v", err)
	}
}
