package bookie

import (
	"bytes"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
)

func TestGCReclaimsDeletedLedgers(t *testing.T) {
	fs := vfs.NewMem()
	cfg := testConfig(fs)
	cfg.EntryLogMaxBytes = 16 << 10
	e := openTest(t, cfg)
	const ledgers, entries, size = 4, 60, 500
	for round := range int64(3) { // several checkpoints: each ledger spread over several logs
		for l := int64(1); l <= ledgers; l++ {
			for i := round * entries / 3; i < (round+1)*entries/3; i++ {
				mustAdd(t, e, AddRequest{LedgerID: l, EntryID: i, LastAddConfirmed: i - 1, Payload: payloadFor(l, i, size)})
			}
		}
		if err := e.Checkpoint(); err != nil {
			t.Fatal(err)
		}
	}
	before := e.Stats()
	for l := int64(1); l < ledgers; l++ {
		if err := e.DeleteLedger(l); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.CompactEntryLogs(); err != nil {
		t.Fatal(err)
	}
	after := e.Stats()
	t.Logf("entry logs: %d bytes in %d files → %d bytes in %d files; relocated %d entries",
		before.EntryLogBytes, before.EntryLogFiles, after.EntryLogBytes, after.EntryLogFiles, after.GCRelocatedEntries)
	// One ledger of four stays live: well under half the bytes remain.
	if after.EntryLogBytes >= before.EntryLogBytes/2 || after.GCReclaimedBytes == 0 {
		t.Fatalf("GC did not reclaim space: %d → %d bytes (reclaimed %d)", before.EntryLogBytes, after.EntryLogBytes, after.GCReclaimedBytes)
	}

	verify := func(t *testing.T, e *Engine) {
		t.Helper()
		for i := range int64(entries) {
			ent, err := e.Read(ledgers, i)
			if err != nil || !bytes.Equal(ent.Payload, payloadFor(ledgers, i, size)) || ent.LastAddConfirmed != i-1 {
				t.Fatalf("ledger %d entry %d after GC: %v", ledgers, i, err)
			}
		}
		if _, err := e.Read(1, 0); !errors.Is(err, ErrNoSuchLedger) {
			t.Fatalf("deleted ledger after GC: %v", err)
		}
	}
	verify(t, e)
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	verify(t, openTest(t, cfg)) // cold read cache: every read goes to the entry logs
}

func TestDiskThresholds(t *testing.T) {
	const total = 1 << 30
	var usedPermille atomic.Int64
	usedPermille.Store(500)
	changes := make(chan bool, 10)
	cfg := testConfig(vfs.NewMem())
	cfg.DiskUsage = func() (used, total uint64, err error) {
		return uint64(usedPermille.Load()) * (1 << 30) / 1000, 1 << 30, nil
	}
	cfg.OnReadOnlyChange = func(readOnly bool) { changes <- readOnly }
	cfg.DiskCheckInterval = time.Millisecond
	e := openTest(t, cfg)
	mustAdd(t, e, AddRequest{LedgerID: 1, EntryID: 0, LastAddConfirmed: -1, Payload: []byte("before")})

	// The background monitor notices crossing the high threshold.
	usedPermille.Store(970)
	if ro := recvWithin(t, changes); !ro {
		t.Fatalf("callback readOnly=%v, want true", ro)
	}
	if free, tot, ro := e.Info(); !ro || tot != total || free != total-970*total/1000 {
		t.Fatalf("Info = %d free, %d total, readOnly %v", free, tot, ro)
	}
	if ro, reason := e.ReadOnlyReason(); !ro || !strings.Contains(reason, "disk usage") {
		t.Fatalf("ReadOnlyReason = %v %q", ro, reason)
	}
	if err := addWait(t, e, AddRequest{LedgerID: 1, EntryID: 1, LastAddConfirmed: 0}); !errors.Is(err, ErrReadOnly) {
		t.Fatalf("add when read-only = %v, want ErrReadOnly", err)
	}
	if ent, err := e.Read(1, 0); err != nil || string(ent.Payload) != "before" {
		t.Fatalf("read when read-only = %q, %v", ent.Payload, err)
	}
	if st := e.Stats(); !st.ReadOnly || st.ReadOnlyReason != reasonDiskUsage {
		t.Fatalf("Stats.ReadOnly = %v %q", st.ReadOnly, st.ReadOnlyReason)
	}
	// Recovery adds are still taken: ledgers this bookie holds can be
	// recovered.
	mustAdd(t, e, AddRequest{LedgerID: 1, EntryID: 0, LastAddConfirmed: -1, Recovery: true, Payload: []byte("before")})

	// Between the thresholds nothing changes (hysteresis); checked
	// synchronously so the assertion does not depend on timing.
	usedPermille.Store(920)
	e.checkDisk()
	if _, _, ro := e.Info(); !ro {
		t.Fatalf("writable again above the low threshold")
	}
	usedPermille.Store(850)
	if ro := recvWithin(t, changes); ro {
		t.Fatalf("callback readOnly=%v, want false", ro)
	}
	mustAdd(t, e, AddRequest{LedgerID: 1, EntryID: 1, LastAddConfirmed: 0, Payload: []byte("after")})
	select {
	case ro := <-changes:
		t.Fatalf("unexpected extra change to readOnly=%v", ro)
	default:
	}
}

// TestJournalReplayAfterUncleanStop runs on the real disk: entries that
// were only in the journal come back after a stop without checkpoint, and
// a torn record at the journal's end is ignored.
func TestJournalReplayAfterUncleanStop(t *testing.T) {
	dir := t.TempDir()
	cfg := testConfig(vfs.Default)
	cfg.JournalDir = dir + "/journal"
	cfg.LedgerDir = dir + "/ledgers"
	cfg.JournalFileBytes = 256 << 10

	e, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	const n = 300
	for i := range int64(n) {
		for l := int64(1); l <= 3; l++ {
			mustAdd(t, e, AddRequest{LedgerID: l, EntryID: i, LastAddConfirmed: i - 1, Payload: payloadFor(l, i, 200+int(i))})
		}
		if i == n/2 {
			if err := e.Checkpoint(); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, err := e.Fence(2); err != nil {
		t.Fatal(err)
	}
	if err := e.DeleteLedger(3); err != nil {
		t.Fatal(err)
	}
	if err := e.close(false); err != nil { // no checkpoint: the second half lives only in the journal
		t.Fatal(err)
	}
	tearJournalTail(t, cfg)

	e = openTest(t, cfg)
	if st := e.Stats(); st.ReplayedRecords == 0 {
		t.Fatalf("nothing replayed")
	}
	for i := range int64(n) {
		for l := int64(1); l <= 2; l++ {
			ent, err := e.Read(l, i)
			if err != nil || !bytes.Equal(ent.Payload, payloadFor(l, i, 200+int(i))) {
				t.Fatalf("ledger %d entry %d after replay: %v", l, i, err)
			}
		}
	}
	if err := addWait(t, e, AddRequest{LedgerID: 2, EntryID: n, LastAddConfirmed: n - 1}); !errors.Is(err, ErrFenced) {
		t.Fatalf("fence lost: %v", err)
	}
	if _, err := e.Read(3, 0); !errors.Is(err, ErrNoSuchLedger) {
		t.Fatalf("deleted ledger back after replay: %v", err)
	}
	if lac, err := e.LastAddConfirmed(1); err != nil || lac != n-2 {
		t.Fatalf("LAC = %d, %v; want %d", lac, err, n-2)
	}
	mustAdd(t, e, AddRequest{LedgerID: 1, EntryID: n, LastAddConfirmed: n - 1, Payload: []byte("after replay")})
	if ent, err := e.Read(1, n); err != nil || string(ent.Payload) != "after replay" {
		t.Fatalf("add after replay: %q, %v", ent.Payload, err)
	}
}

// tearJournalTail writes half a record (valid-looking header, bad CRC)
// after the last valid record of the newest journal file that has one.
func tearJournalTail(t *testing.T, cfg Config) {
	t.Helper()
	fs := cfg.FS
	names, err := fs.List(cfg.JournalDir)
	if err != nil {
		t.Fatal(err)
	}
	var newest uint64
	var end int
	for _, name := range names {
		id, ok := parseJournalName(name)
		if !ok {
			continue
		}
		data, err := readWholeFile(fs, fs.PathJoin(cfg.JournalDir, name))
		if err != nil {
			t.Fatal(err)
		}
		off := 0
		for {
			_, _, size, ok := parseJournalRecord(data[off:], id)
			if !ok {
				break
			}
			off += size
		}
		if off > 0 && id > newest {
			newest, end = id, off
		}
	}
	if newest == 0 {
		t.Fatal("no journal file with records")
	}
	f, err := fs.OpenReadWrite(fs.PathJoin(cfg.JournalDir, journalName(newest)), vfs.WriteCategoryUnspecified)
	if err != nil {
		t.Fatal(err)
	}
	torn := appendJournalRecord(nil, newest, recordKindAdd, encodeAddBody(AddRequest{LedgerID: 1, EntryID: 1 << 40, Payload: make([]byte, 100)}))
	torn[len(torn)-1] ^= 0xff
	if _, err := f.WriteAt(torn[:len(torn)-10], int64(end)); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestJournalFilesRecycled: checkpoints release journal files, which are
// reused under new ids instead of piling up.
func TestJournalFilesRecycled(t *testing.T) {
	fs := vfs.NewMem()
	cfg := testConfig(fs)
	cfg.JournalFileBytes = 8 << 10
	e := openTest(t, cfg)
	maxFiles := 0
	for i := range int64(400) {
		mustAdd(t, e, AddRequest{LedgerID: 1, EntryID: i, LastAddConfirmed: i - 1, Payload: payloadFor(1, i, 500)})
		if i%20 == 19 {
			if err := e.Checkpoint(); err != nil {
				t.Fatal(err)
			}
		}
		names, err := fs.List(cfg.JournalDir)
		if err != nil {
			t.Fatal(err)
		}
		maxFiles = max(maxFiles, len(names))
	}
	// ~400 × 540 bytes = 26 files' worth went through the journal.
	if limit := maxPooledJournalFiles + 4; maxFiles > limit {
		t.Fatalf("%d journal files at once, want at most %d", maxFiles, limit)
	}
	e.journal.mu.Lock()
	newestLive := e.journal.live[len(e.journal.live)-1]
	e.journal.mu.Unlock()
	if st := e.Stats(); st.JournalFilesRecycled == 0 {
		t.Fatalf("no journal file was recycled")
	}
	if newestLive < 20 {
		t.Fatalf("journal reached file %d only; expected many rolls", newestLive)
	}
	t.Logf("journal rolled to file %d with at most %d files on disk", newestLive, maxFiles)
}

func TestAddValidation(t *testing.T) {
	e := openTest(t, testConfig(vfs.NewMem()))
	tests := []AddRequest{
		{LedgerID: -1, EntryID: 0},
		{LedgerID: 1, EntryID: -2},
		{LedgerID: 1, EntryID: 0, Payload: make([]byte, maxPayloadBytes+1)},
	}
	for _, req := range tests {
		if err := addWait(t, e, req); !errors.Is(err, ErrInvalidRequest) {
			t.Errorf("add ledger %d entry %d (%d bytes) = %v, want ErrInvalidRequest", req.LedgerID, req.EntryID, len(req.Payload), err)
		}
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if err := addWait(t, e, AddRequest{LedgerID: 1}); !errors.Is(err, ErrClosed) {
		t.Errorf("add after close = %v, want ErrClosed", err)
	}
	if _, err := e.Read(1, 0); !errors.Is(err, ErrClosed) {
		t.Errorf("read after close = %v, want ErrClosed", err)
	}
}

// Stats carries what `quire perf bookie` splits an add's latency with: the
// summed engine-side latency of acknowledged adds, and the time the journal
// waited with nothing queued (it must have waited between two adds sent one
// after the other's acknowledgement).
func TestStatsAddAndIdleTime(t *testing.T) {
	e := openTest(t, testConfig(vfs.NewMem()))
	before := e.Stats()
	for i := range int64(3) {
		mustAdd(t, e, AddRequest{LedgerID: 1, EntryID: i, LastAddConfirmed: i - 1, Payload: []byte("x")})
	}
	after := e.Stats()
	if got := after.Adds - before.Adds; got != 3 {
		t.Fatalf("adds %d, want 3", got)
	}
	if after.AddTime <= before.AddTime {
		t.Errorf("AddTime did not grow: %v -> %v", before.AddTime, after.AddTime)
	}
	if after.JournalIdleTime <= before.JournalIdleTime {
		t.Errorf("JournalIdleTime did not grow: %v -> %v", before.JournalIdleTime, after.JournalIdleTime)
	}
}

// An add's latency starts at Arrived when the caller sets it (the server
// passes the time the request was read), else at the call to Add.
func TestAddLatencyStartsAtArrived(t *testing.T) {
	e := openTest(t, testConfig(vfs.NewMem()))
	const early = time.Hour
	before := e.Stats()
	mustAdd(t, e, AddRequest{LedgerID: 1, EntryID: 0, LastAddConfirmed: -1, Payload: []byte("x"), Arrived: time.Now().Add(-early)})
	if took := e.Stats().AddTime - before.AddTime; took < early {
		t.Errorf("add with Arrived an hour ago counted %v, want at least %v", took, early)
	}
	before = e.Stats()
	mustAdd(t, e, AddRequest{LedgerID: 1, EntryID: 1, LastAddConfirmed: 0, Payload: []byte("x")})
	if took := e.Stats().AddTime - before.AddTime; took <= 0 || took >= early {
		t.Errorf("add without Arrived counted %v", took)
	}
}
