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

// diskTestConfig sizes everything for a disk of a few MiB.
func diskTestConfig(fs vfs.FS) Config {
	cfg := testConfig(fs)
	cfg.JournalFileBytes = 64 << 10
	cfg.WriteCacheBytes = 512 << 10
	cfg.EntryLogMaxBytes = 64 << 10
	cfg.DiskReserveBytes = 256 << 10
	cfg.IndexBallastBytes = 128 << 10
	cfg.ReclaimDelay = time.Hour // tests sweep when they mean to
	return cfg
}

// fillUntilReadOnly adds 4 KiB entries round-robin to ledgers 1..4,
// checkpointing now and then, until the engine refuses one with
// ErrReadOnly. It returns the acknowledged entries.
func fillUntilReadOnly(t *testing.T, e *Engine) []cacheKey {
	t.Helper()
	var acked []cacheKey
	for i := int64(0); ; i++ {
		if i > 20000 {
			t.Fatal("never turned read-only")
		}
		k := cacheKey{ledgerID: 1 + i%4, entryID: i / 4}
		err := addWait(t, e, AddRequest{LedgerID: k.ledgerID, EntryID: k.entryID, LastAddConfirmed: k.entryID - 1, Payload: payloadFor(k.ledgerID, k.entryID, 4<<10)})
		if errors.Is(err, ErrReadOnly) {
			return acked
		}
		if err != nil {
			t.Fatalf("add %v: %v", k, err)
		}
		acked = append(acked, k)
		if i%40 == 39 {
			if err := e.Checkpoint(); err != nil {
				t.Fatalf("checkpoint while filling: %v", err)
			}
		}
	}
}

func verifyEntries(t *testing.T, e *Engine, keys []cacheKey, when string) {
	t.Helper()
	for _, k := range keys {
		ent, err := e.Read(k.ledgerID, k.entryID)
		if err != nil || !bytes.Equal(ent.Payload, payloadFor(k.ledgerID, k.entryID, 4<<10)) {
			t.Fatalf("%s: read %v: %v", when, k, err)
		}
	}
}

// A max-rate producer on a small disk: the add path turns the bookie
// read-only before any write hits ENOSPC; what was accepted still
// checkpoints; deleting ledgers and collecting their entry logs makes it
// writable again by itself.
func TestReadOnlyBeforeDiskFull(t *testing.T) {
	q := newFaultFS(vfs.NewMem(), 1)
	q.capacity.Store(6 << 20)
	changes := make(chan bool, 16)
	cfg := diskTestConfig(q)
	cfg.OnReadOnlyChange = func(readOnly bool) { changes <- readOnly }
	e := openTest(t, cfg)

	acked := fillUntilReadOnly(t, e)
	if ro := recvWithin(t, changes); !ro {
		t.Fatalf("published readOnly=%v, want true", ro)
	}
	if ro, reason := e.ReadOnlyReason(); !ro || !strings.Contains(reason, "disk usage") {
		t.Fatalf("ReadOnlyReason = %v %q", ro, reason)
	}
	// What was accepted fits: the checkpoint runs, nothing hit ENOSPC.
	if err := e.Checkpoint(); err != nil {
		t.Fatalf("checkpoint when read-only: %v", err)
	}
	if n := q.enospc.Load(); n != 0 {
		t.Fatalf("%d writes hit ENOSPC", n)
	}
	used := q.used()
	t.Logf("read-only after %d entries; %d of %d bytes used", len(acked), used, q.capacity.Load())
	if used < q.capacity.Load()*3/4 {
		t.Fatalf("read-only with only %d of %d bytes used", used, q.capacity.Load())
	}
	verifyEntries(t, e, acked, "read-only")

	// Retention deletes three ledgers of four: their entry logs go.
	for l := int64(1); l <= 3; l++ {
		if err := e.DeleteLedger(l); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.CompactEntryLogs(); err != nil {
		t.Fatal(err)
	}
	e.checkDisk()
	if ro := recvWithin(t, changes); ro {
		t.Fatalf("published readOnly=%v, want false", ro)
	}
	var live []cacheKey
	for _, k := range acked {
		if k.ledgerID == 4 {
			live = append(live, k)
		}
	}
	verifyEntries(t, e, live, "after GC")
	mustAdd(t, e, AddRequest{LedgerID: 5, EntryID: 0, LastAddConfirmed: -1, Payload: payloadFor(5, 0, 4<<10)})
	if n := q.enospc.Load(); n != 0 {
		t.Fatalf("%d writes hit ENOSPC", n)
	}
}

// The journal runs out of space: the adds it could not sync fail with
// ErrReadOnly, the bookie turns read-only (reason no_space) instead of
// failing for good, reads go on, and once the space is back a checkpoint
// clears the state and adds succeed again, without reopening.
func TestJournalOutOfSpaceRecovers(t *testing.T) {
	mem := vfs.NewCrashableMem()
	q := newFaultFS(crashableFS{mem}, 2)
	q.injectInto = func(path string) bool { return strings.Contains(path, "journal-") }
	cfg := diskTestConfig(q)
	e := openTest(t, cfg)
	var acked []cacheKey
	add := func(k cacheKey) error {
		return addWait(t, e, AddRequest{LedgerID: k.ledgerID, EntryID: k.entryID, LastAddConfirmed: k.entryID - 1, Payload: payloadFor(k.ledgerID, k.entryID, 4<<10)})
	}
	for i := range int64(20) {
		k := cacheKey{ledgerID: 1, entryID: i}
		if err := add(k); err != nil {
			t.Fatal(err)
		}
		acked = append(acked, k)
	}
	q.injectOneIn.Store(1) // every journal write and sync fails
	if err := add(cacheKey{ledgerID: 1, entryID: 20}); !errors.Is(err, ErrReadOnly) {
		t.Fatalf("add with a full journal disk = %v, want ErrReadOnly", err)
	}
	if ro, reason := e.ReadOnlyReason(); !ro || !strings.Contains(reason, "out of space") {
		t.Fatalf("ReadOnlyReason = %v %q", ro, reason)
	}
	if err := add(cacheKey{ledgerID: 1, entryID: 21}); !errors.Is(err, ErrReadOnly) {
		t.Fatalf("add when read-only = %v, want ErrReadOnly", err)
	}
	verifyEntries(t, e, acked, "journal out of space")
	if _, err := e.Fence(2); err != nil {
		t.Fatalf("fence when read-only: %v", err)
	}

	q.injectOneIn.Store(0)
	e.checkDisk() // retries the checkpoint, which clears the state
	if ro, reason := e.ReadOnlyReason(); ro {
		t.Fatalf("still read-only after space returned: %s", reason)
	}
	for i := int64(22); i < 40; i++ {
		k := cacheKey{ledgerID: 1, entryID: i}
		if err := add(k); err != nil {
			t.Fatalf("add after recovery: %v", err)
		}
		acked = append(acked, k)
	}
	verifyEntries(t, e, acked, "after recovery")

	// A crash now: everything acknowledged is back.
	cfg.FS = mem.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 0})
	e2 := openTest(t, cfg)
	verifyEntries(t, e2, acked, "after crash")
}

// A checkpoint whose entry-log write hits ENOSPC keeps its frozen half and
// journal position and is retried; nothing acknowledged is lost, and the
// engine never enters the permanent failed state.
func TestCheckpointOutOfSpaceRetried(t *testing.T) {
	mem := vfs.NewCrashableMem()
	q := newFaultFS(crashableFS{mem}, 3)
	q.injectInto = func(path string) bool { return strings.Contains(path, "entrylog-") }
	cfg := diskTestConfig(q)
	e := openTest(t, cfg)
	var acked []cacheKey
	for i := range int64(60) {
		k := cacheKey{ledgerID: 1 + i%2, entryID: i / 2}
		mustAdd(t, e, AddRequest{LedgerID: k.ledgerID, EntryID: k.entryID, LastAddConfirmed: k.entryID - 1, Payload: payloadFor(k.ledgerID, k.entryID, 4<<10)})
		acked = append(acked, k)
	}
	q.injectOneIn.Store(1)
	if err := e.Checkpoint(); !isNoSpace(err) {
		t.Fatalf("checkpoint on a full disk = %v, want ENOSPC", err)
	}
	if st := e.Stats(); st.ReadOnlyReason != reasonNoSpace {
		t.Fatalf("Stats = %+v, want read-only no_space", st)
	}
	verifyEntries(t, e, acked, "checkpoint failed")
	// A crash while the checkpoint cannot finish: the journal has it all.
	clone := mem.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 0})
	q.injectOneIn.Store(0)
	e.checkDisk()
	if st := e.Stats(); st.ReadOnly || st.Checkpoints == 0 {
		t.Fatalf("Stats = %+v, want writable after a checkpoint", st)
	}
	verifyEntries(t, e, acked, "checkpoint retried")
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	for _, fs := range []vfs.FS{clone, mem} {
		cfg.FS = fs
		e := openTest(t, cfg)
		verifyEntries(t, e, acked, "reopened")
		if err := e.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// An entry log whose ledgers are all deleted is removed within
// ReclaimDelay, not at the next GC interval; partly dead logs are
// compacted once the dead bytes pass GCDeadFraction.
func TestDeadEntryLogsReclaimedPromptly(t *testing.T) {
	cfg := diskTestConfig(vfs.NewMem())
	cfg.ReclaimDelay = time.Millisecond
	cfg.GCDeadFraction = 0.3
	e := openTest(t, cfg)
	add := func(l, from, to int64) {
		for i := from; i < to; i++ {
			mustAdd(t, e, AddRequest{LedgerID: l, EntryID: i, LastAddConfirmed: i - 1, Payload: payloadFor(l, i, 4<<10)})
		}
		if err := e.Checkpoint(); err != nil {
			t.Fatal(err)
		}
	}
	add(1, 0, 60)                       // several logs of ledger 1 only
	for i := int64(0); i < 30; i += 2 { // then logs of ledgers 2 and 3, half and half
		add(2, i, i+2)
		add(3, i, i+2)
	}
	add(4, 0, 5) // the current log: never collected while written
	before := e.Stats()
	if err := e.DeleteLedger(1); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "ledger 1's entry logs removed", func() bool { return e.Stats().GCReclaimedBytes >= 60*4<<10 })
	if st := e.Stats(); st.GCRelocatedEntries != 0 {
		t.Fatalf("the sweep relocated %d entries; nothing was partly dead", st.GCRelocatedEntries)
	}
	// Half of the remaining logs is ledger 2: dead bytes pass 30%.
	if err := e.DeleteLedger(2); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "partly dead logs compacted", func() bool { return e.Stats().GCRelocatedEntries > 0 })
	after := e.Stats()
	t.Logf("entry logs %d bytes in %d files → %d bytes in %d files", before.EntryLogBytes, before.EntryLogFiles, after.EntryLogBytes, after.EntryLogFiles)
	for i := range int64(30) {
		if ent, err := e.Read(3, i); err != nil || !bytes.Equal(ent.Payload, payloadFor(3, i, 4<<10)) {
			t.Fatalf("ledger 3 entry %d: %v", i, err)
		}
	}
}

// Crossing DiskUsageWarn compacts entry logs at once, although neither
// the GC interval nor the dead fraction asked for it.
func TestGCTriggeredByDiskPressure(t *testing.T) {
	q := newFaultFS(vfs.NewMem(), 4)
	q.capacity.Store(8 << 20)
	cfg := diskTestConfig(q)
	cfg.DiskUsageWarn = 0.5
	cfg.GCDeadFraction = 0.99
	e := openTest(t, cfg)
	// Ledgers 1 and 2 interleaved in every checkpoint, so each log is
	// about half of each.
	next := int64(0)
	fill := func(entries int, ledgers ...int64) {
		for range entries {
			for _, l := range ledgers {
				mustAdd(t, e, AddRequest{LedgerID: l, EntryID: next, LastAddConfirmed: next - 1, Payload: payloadFor(l, next, 4<<10)})
			}
			next++
			if next%8 == 0 {
				if err := e.Checkpoint(); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	fill(120, 1, 2) // about 1 MiB of 8
	e.checkDisk()
	if st := e.Stats(); st.GCPasses != 0 {
		t.Fatalf("GC ran below the warn threshold: %+v", st)
	}
	if err := e.DeleteLedger(1); err != nil {
		t.Fatal(err)
	}
	// ReclaimDelay is an hour and the dead fraction is under 0.99: only
	// pressure collects now.
	ledger2 := next
	for e.Stats().GCRelocatedEntries == 0 && q.used() < q.capacity.Load()*6/10 {
		fill(8, 3)
	}
	waitFor(t, "pressure GC", func() bool { return e.Stats().GCRelocatedEntries > 0 })
	for i := range ledger2 {
		if ent, err := e.Read(2, i); err != nil || !bytes.Equal(ent.Payload, payloadFor(2, i, 4<<10)) {
			t.Fatalf("ledger 2 entry %d: %v", i, err)
		}
	}
}

// A ledger deleted while the disk is past the warn threshold has its dead
// bytes compacted away by the deletion's sweep, although the dead fraction
// would not ask for it and the warn crossing's own pass came before the
// deletion: a bookie short of space does not wait for GCInterval.
func TestDeletionUnderPressureCompacts(t *testing.T) {
	q := newFaultFS(vfs.NewMem(), 4)
	q.capacity.Store(8 << 20)
	cfg := diskTestConfig(q)
	cfg.DiskUsageWarn = 0.1
	cfg.GCDeadFraction = 0.99
	cfg.GCThreshold = 0.6
	cfg.ReclaimDelay = time.Millisecond
	e := openTest(t, cfg)
	// Ledgers 1 and 2 interleaved in every checkpoint: each log is about
	// half of each, so deleting ledger 1 leaves logs about half live.
	for i := range int64(160) {
		for _, l := range []int64{1, 2} {
			mustAdd(t, e, AddRequest{LedgerID: l, EntryID: i, LastAddConfirmed: i - 1, Payload: payloadFor(l, i, 4<<10)})
		}
		if i%8 == 7 {
			if err := e.Checkpoint(); err != nil {
				t.Fatal(err)
			}
		}
	}
	e.checkDisk()
	if !e.underDiskPressure() {
		t.Fatalf("not past the warn threshold: %d of %d bytes used", q.used(), q.capacity.Load())
	}
	waitFor(t, "the warn crossing's GC pass", func() bool { return e.Stats().GCPasses >= 1 })
	if st := e.Stats(); st.GCRelocatedEntries != 0 {
		t.Fatalf("the warn pass relocated %d entries with nothing dead", st.GCRelocatedEntries)
	}
	if err := e.DeleteLedger(1); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the deletion's sweep compacting the half-dead logs", func() bool { return e.Stats().GCRelocatedEntries > 0 })
	for i := range int64(160) {
		if ent, err := e.Read(2, i); err != nil || !bytes.Equal(ent.Payload, payloadFor(2, i, 4<<10)) {
			t.Fatalf("ledger 2 entry %d: %v", i, err)
		}
	}
}

// Open on a full disk succeeds read-only: the journal is replayed into
// memory and served, the reason is reported, and once space returns the
// bookie checkpoints and becomes writable by itself.
func TestOpenOnFullDisk(t *testing.T) {
	for _, ballast := range []int64{128 << 10, -1} {
		t.Run(map[bool]string{true: "ballast", false: "no ballast"}[ballast > 0], func(t *testing.T) {
			q := newFaultFS(vfs.NewMem(), 5)
			cfg := diskTestConfig(q)
			cfg.IndexBallastBytes = ballast
			e, err := Open(cfg)
			if err != nil {
				t.Fatal(err)
			}
			var acked []cacheKey
			for i := range int64(40) {
				k := cacheKey{ledgerID: 1, entryID: i}
				mustAdd(t, e, AddRequest{LedgerID: 1, EntryID: i, LastAddConfirmed: i - 1, Payload: payloadFor(1, i, 4<<10)})
				acked = append(acked, k)
			}
			if err := e.close(false); err != nil { // as a crash: the journal holds them
				t.Fatal(err)
			}
			q.capacity.Store(q.used()) // not a byte free

			e = openTest(t, cfg)
			ro, reason := e.ReadOnlyReason()
			if !ro {
				t.Fatal("writable on a full disk")
			}
			t.Logf("open on a full disk: %s", reason)
			verifyEntries(t, e, acked, "replayed on a full disk")
			if err := addWait(t, e, AddRequest{LedgerID: 1, EntryID: 40, LastAddConfirmed: 39, Payload: payloadFor(1, 40, 4<<10)}); !errors.Is(err, ErrReadOnly) {
				t.Fatalf("add on a full disk = %v, want ErrReadOnly", err)
			}
			if err := e.Checkpoint(); err == nil || !isNoSpace(err) {
				t.Fatalf("checkpoint on a full disk = %v, want out of space", err)
			}

			q.capacity.Store(q.used() + 16<<20)
			e.checkDisk()
			if ro, reason := e.ReadOnlyReason(); ro {
				t.Fatalf("still read-only with room: %s", reason)
			}
			mustAdd(t, e, AddRequest{LedgerID: 1, EntryID: 40, LastAddConfirmed: 39, Payload: payloadFor(1, 40, 4<<10)})
			acked = append(acked, cacheKey{ledgerID: 1, entryID: 40})
			if err := e.Checkpoint(); err != nil {
				t.Fatal(err)
			}
			verifyEntries(t, e, acked, "after space returned")
		})
	}
}

// The index hitting ENOSPC releases its ballast: the write that hit it
// succeeds (Pebble would panic otherwise) and the bookie turns read-only
// until there is room to recreate the ballast.
func TestIndexBallast(t *testing.T) {
	q := newFaultFS(vfs.NewMem(), 6)
	cfg := diskTestConfig(q)
	e := openTest(t, cfg)
	mustAdd(t, e, AddRequest{LedgerID: 1, EntryID: 0, LastAddConfirmed: -1, Payload: []byte("x")})
	if e.ballastMissing.Load() {
		t.Fatal("no ballast after open")
	}
	q.capacity.Store(q.used()) // the next index write does not fit
	if _, err := e.Fence(1); err != nil {
		t.Fatalf("fence with the ballast to spend: %v", err)
	}
	if !e.ballastMissing.Load() || q.enospc.Load() == 0 {
		t.Fatalf("ballast not released (ENOSPC seen %d)", q.enospc.Load())
	}
	e.checkDisk()
	if ro, reason := e.ReadOnlyReason(); !ro {
		t.Fatal("writable after the index ran out of space")
	} else {
		t.Logf("read-only: %s", reason)
	}
	q.capacity.Store(q.used() + 16<<20)
	e.checkDisk()
	if ro, reason := e.ReadOnlyReason(); ro || e.ballastMissing.Load() {
		t.Fatalf("read-only %v (%s), ballast missing %v after space returned", ro, reason, e.ballastMissing.Load())
	}
	mustAdd(t, e, AddRequest{LedgerID: 2, EntryID: 0, LastAddConfirmed: -1, Payload: []byte("y")})
}

// A small disk may never fill one entry log: all its data sits in the log
// being written. Deleting its ledgers must still give the space back.
func TestDeadCurrentEntryLogReclaimed(t *testing.T) {
	cfg := diskTestConfig(vfs.NewMem())
	cfg.EntryLogMaxBytes = 256 << 20
	cfg.ReclaimDelay = time.Millisecond
	e := openTest(t, cfg)
	for i := range int64(50) {
		mustAdd(t, e, AddRequest{LedgerID: 1, EntryID: i, LastAddConfirmed: i - 1, Payload: payloadFor(1, i, 4<<10)})
	}
	if err := e.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	if st := e.Stats(); st.EntryLogFiles != 1 {
		t.Fatalf("%d entry logs, want the one being written", st.EntryLogFiles)
	}
	if err := e.DeleteLedger(1); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the dead current log removed", func() bool { return e.Stats().EntryLogFiles == 0 })
	mustAdd(t, e, AddRequest{LedgerID: 2, EntryID: 0, LastAddConfirmed: -1, Payload: payloadFor(2, 0, 4<<10)})
	if err := e.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	if ent, err := e.Read(2, 0); err != nil || !bytes.Equal(ent.Payload, payloadFor(2, 0, 4<<10)) {
		t.Fatalf("read after the log was retired: %v", err)
	}
}

// On a disk full to a fifth of the reserve, compaction still runs: copying
// a little live data out of a mostly dead log is how the space comes back.
func TestCompactionOnFullDisk(t *testing.T) {
	q := newFaultFS(vfs.NewMem(), 7)
	cfg := diskTestConfig(q)
	cfg.EntryLogMaxBytes = 256 << 20 // everything in the log being written
	e := openTest(t, cfg)
	for i := range int64(200) {
		mustAdd(t, e, AddRequest{LedgerID: 1, EntryID: i, LastAddConfirmed: i - 1, Payload: payloadFor(1, i, 4<<10)})
		if i < 5 {
			mustAdd(t, e, AddRequest{LedgerID: 2, EntryID: i, LastAddConfirmed: i - 1, Payload: payloadFor(2, i, 4<<10)})
		}
	}
	if err := e.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	q.capacity.Store(q.used() + cfg.DiskReserveBytes*2/10)
	e.checkDisk()
	if ro, _ := e.ReadOnlyReason(); !ro {
		t.Fatal("writable with less than half the reserve free")
	}
	if err := e.DeleteLedger(1); err != nil {
		t.Fatal(err)
	}
	if err := e.collectGarbage(gcSweep); err != nil {
		t.Fatal(err)
	}
	st := e.Stats()
	if st.GCRelocatedEntries != 5 || st.GCReclaimedBytes < 200*4<<10 {
		t.Fatalf("relocated %d entries, reclaimed %d bytes; want ledger 2's 5 moved and ledger 1's 800 KiB back", st.GCRelocatedEntries, st.GCReclaimedBytes)
	}
	if n := q.enospc.Load(); n != 0 {
		t.Fatalf("%d writes hit ENOSPC", n)
	}
	for i := range int64(5) {
		if ent, err := e.Read(2, i); err != nil || !bytes.Equal(ent.Payload, payloadFor(2, i, 4<<10)) {
			t.Fatalf("ledger 2 entry %d after compaction: %v", i, err)
		}
	}
	e.checkDisk()
	if ro, reason := e.ReadOnlyReason(); ro {
		t.Fatalf("still read-only after compaction: %s", reason)
	}
}

// Pooled journal files are preallocated space: under disk pressure all but
// the next one are removed.
func TestJournalPoolTrimmedUnderPressure(t *testing.T) {
	fs := vfs.NewMem()
	var usedPermille atomic.Int64
	usedPermille.Store(500)
	cfg := diskTestConfig(fs)
	cfg.DiskUsage = func() (used, total uint64, err error) { return uint64(usedPermille.Load()) << 20, 1000 << 20, nil }
	e := openTest(t, cfg)
	journalFiles := func() int {
		names, err := fs.List(cfg.JournalDir)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, name := range names {
			if _, ok := parseJournalName(name); ok {
				n++
			}
		}
		return n
	}
	for i := range int64(200) { // 800 KiB: a dozen 64 KiB journal files
		mustAdd(t, e, AddRequest{LedgerID: 1, EntryID: i, LastAddConfirmed: i - 1, Payload: payloadFor(1, i, 4<<10)})
	}
	if err := e.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	before := journalFiles()
	if before < 4 {
		t.Fatalf("%d journal files; want a pool to trim", before)
	}
	usedPermille.Store(900) // past the warn threshold
	e.checkDisk()
	after := journalFiles()
	t.Logf("journal files: %d → %d", before, after)
	if after >= before || after > 3 { // the live file, the spare being prepared, one pooled
		t.Fatalf("journal files %d → %d under pressure", before, after)
	}
	mustAdd(t, e, AddRequest{LedgerID: 1, EntryID: 200, LastAddConfirmed: 199, Payload: payloadFor(1, 200, 4<<10)})
}

// With not a byte free (others filled the disk), compaction spends the
// index ballast to copy the live entries out of a dead log; the bookie is
// out of space until the ballast is back, then writable.
func TestCompactionSpendsBallastOnFullDisk(t *testing.T) {
	q := newFaultFS(vfs.NewMem(), 8)
	cfg := diskTestConfig(q)
	cfg.EntryLogMaxBytes = 256 << 20
	e := openTest(t, cfg)
	for i := range int64(200) {
		mustAdd(t, e, AddRequest{LedgerID: 1, EntryID: i, LastAddConfirmed: i - 1, Payload: payloadFor(1, i, 4<<10)})
		if i < 5 {
			mustAdd(t, e, AddRequest{LedgerID: 2, EntryID: i, LastAddConfirmed: i - 1, Payload: payloadFor(2, i, 4<<10)})
		}
	}
	if err := e.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	if err := e.DeleteLedger(1); err != nil {
		t.Fatal(err)
	}
	q.capacity.Store(q.used()) // full
	if err := e.collectGarbage(gcSweep); err != nil {
		t.Fatal(err)
	}
	if st := e.Stats(); st.GCRelocatedEntries != 5 || st.GCReclaimedBytes < 200*4<<10 {
		t.Fatalf("relocated %d, reclaimed %d bytes", st.GCRelocatedEntries, st.GCReclaimedBytes)
	}
	// Out of space while the ballast is spent (the disk loop may already
	// have recreated it). Pebble's background work may free a few bytes
	// after the capacity is set, enough at times to need no ballast.
	t.Logf("ballast spent: %v", e.Stats().NoSpaceErrors > 0)
	e.checkDisk()
	waitFor(t, "writable with the ballast back", func() bool {
		ro, _ := e.ReadOnlyReason()
		return !ro && !e.ballastMissing.Load()
	})
	if n := q.enospc.Load(); n != 0 {
		t.Fatalf("%d writes hit ENOSPC", n)
	}
	mustAdd(t, e, AddRequest{LedgerID: 3, EntryID: 0, LastAddConfirmed: -1, Payload: payloadFor(3, 0, 4<<10)})
	for i := range int64(5) {
		if ent, err := e.Read(2, i); err != nil || !bytes.Equal(ent.Payload, payloadFor(2, i, 4<<10)) {
			t.Fatalf("ledger 2 entry %d: %v", i, err)
		}
	}
}

// A bookie out of space acknowledges a recovery add of an entry it holds
// durably — checkpointed, or replayed from the journal at Open — without
// writing it, and refuses one for an entry of this run not yet checkpointed
// (its fsync may have failed). Without the first, the recovery of a ledger
// whose bookies are all full never reaches its ack quorum after a restart.
func TestRecoveryAddsOnFullDisk(t *testing.T) {
	mem := vfs.NewCrashableMem()
	q := newFaultFS(crashableFS{mem}, 3)
	q.injectInto = func(path string) bool { return strings.Contains(path, "entrylog-") }
	cfg := diskTestConfig(q)
	e := openTest(t, cfg)
	add := func(e *Engine, i int64, recovery bool) error {
		return addWait(t, e, AddRequest{LedgerID: 1, EntryID: i, LastAddConfirmed: i - 1, Recovery: recovery, Payload: payloadFor(1, i, 4<<10)})
	}
	for i := range int64(20) {
		if err := add(e, i, false); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	for i := int64(20); i < 40; i++ {
		if err := add(e, i, false); err != nil {
			t.Fatal(err)
		}
	}
	q.injectOneIn.Store(1) // every entry-log write fails: out of space
	if err := e.Checkpoint(); !isNoSpace(err) {
		t.Fatalf("checkpoint on a full disk = %v, want ENOSPC", err)
	}
	if st := e.Stats(); st.ReadOnlyReason != reasonNoSpace {
		t.Fatalf("Stats = %+v, want read-only no_space", st)
	}
	for i := range int64(20) {
		if err := add(e, i, true); err != nil {
			t.Fatalf("recovery add of checkpointed entry %d on a full disk: %v", i, err)
		}
	}
	for i := int64(20); i < 40; i++ {
		if err := add(e, i, true); !errors.Is(err, ErrReadOnly) {
			t.Fatalf("recovery add of entry %d, cached in this run, on a full disk = %v, want ErrReadOnly", i, err)
		}
	}
	if err := add(e, 40, true); !errors.Is(err, ErrReadOnly) {
		t.Fatalf("recovery add of an entry not held on a full disk = %v, want ErrReadOnly", err)
	}
	if err := add(e, 40, false); !errors.Is(err, ErrReadOnly) {
		t.Fatalf("add on a full disk = %v, want ErrReadOnly", err)
	}
	if st := e.Stats(); st.RecoveryAddsHeld != 20 {
		t.Fatalf("RecoveryAddsHeld = %d, want 20", st.RecoveryAddsHeld)
	}

	// Restarted on the full disk: entries 20..39 come back from the
	// journal, and every entry is held.
	if err := e.close(false); err != nil {
		t.Fatal(err)
	}
	q.capacity.Store(q.used())
	e = openTest(t, cfg)
	if ro, reason := e.ReadOnlyReason(); !ro {
		t.Fatal("writable on a full disk")
	} else {
		t.Logf("reopened on a full disk: %s", reason)
	}
	for i := range int64(40) {
		if err := add(e, i, true); err != nil {
			t.Fatalf("recovery add of entry %d after a restart on a full disk: %v", i, err)
		}
	}
	if err := add(e, 40, true); !errors.Is(err, ErrReadOnly) {
		t.Fatalf("recovery add of an entry not held after a restart = %v, want ErrReadOnly", err)
	}
	// Another payload under a held entry id is not held: 5 is in an entry
	// log, 25 replayed.
	for _, i := range []int64{5, 25} {
		err := addWait(t, e, AddRequest{LedgerID: 1, EntryID: i, LastAddConfirmed: i - 1, Recovery: true, Payload: payloadFor(1, i+100, 4<<10)})
		if !errors.Is(err, ErrReadOnly) {
			t.Fatalf("recovery add of entry %d with another payload = %v, want ErrReadOnly", i, err)
		}
	}
}
