package bookie

import (
	"bytes"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// TestReadRange reads ranges from every place an entry can be: the write
// cache, the read cache, the entry logs after a checkpoint and a mix; and
// checks the bounds (entries, bytes), the end of what the bookie holds (a
// missing entry, a deleted ledger) and a corrupt record. From the entry logs
// it must read each record once, a span of adjacent records per ReadAt.
func TestReadRange(t *testing.T) {
	fs := vfs.NewMem()
	cfg := testConfig(fs)
	cfg.ReadAheadEntries = 16
	e := openTest(t, cfg)
	const n, size = 200, 300
	const record = entryRecordHeaderBytes + size
	for i := range int64(n) {
		mustAdd(t, e, AddRequest{LedgerID: 1, EntryID: i, LastAddConfirmed: i - 1, Payload: payloadFor(1, i, size)})
	}
	// Ledger 2 misses entry 10.
	for i := range int64(20) {
		if i != 10 {
			mustAdd(t, e, AddRequest{LedgerID: 2, EntryID: i, LastAddConfirmed: -1, Payload: payloadFor(2, i, size)})
		}
	}
	check := func(t *testing.T, ledgerID, first int64, maxEntries, maxBytes, want int) {
		t.Helper()
		got, err := e.ReadRange(ledgerID, first, maxEntries, maxBytes)
		if err != nil || len(got) != want {
			t.Fatalf("ReadRange(%d, %d, %d, %d) = %d entries, %v; want %d", ledgerID, first, maxEntries, maxBytes, len(got), err, want)
		}
		for i, ent := range got {
			id := first + int64(i)
			if ent.LedgerID != ledgerID || ent.EntryID != id || !bytes.Equal(ent.Payload, payloadFor(ledgerID, id, size)) {
				t.Fatalf("ReadRange(%d, %d): entry %d is ledger %d entry %d, %d bytes", ledgerID, first, id, ent.LedgerID, ent.EntryID, len(ent.Payload))
			}
			if ledgerID == 1 && ent.LastAddConfirmed != id-1 {
				t.Fatalf("entry %d: LAC %d, want %d", id, ent.LastAddConfirmed, id-1)
			}
		}
	}
	delta := func(before Stats) Stats {
		after := e.Stats()
		return Stats{WriteCacheHits: after.WriteCacheHits - before.WriteCacheHits, ReadCacheHits: after.ReadCacheHits - before.ReadCacheHits,
			EntryLogReads: after.EntryLogReads - before.EntryLogReads, EntryLogReadBytes: after.EntryLogReadBytes - before.EntryLogReadBytes}
	}
	bounds := func(t *testing.T) {
		check(t, 1, 0, 100, 1000, 3) // 300-byte payloads: 3 fit in 1000
		check(t, 1, 0, 100, 10, 1)   // at least one entry
		check(t, 1, 195, 10, 0, 5)   // the end of the ledger
		check(t, 1, 7, 1, 0, 1)
		check(t, 2, 0, 100, 0, 10) // stops before the missing entry
		check(t, 2, 11, 100, 0, 9)
		for _, tc := range []struct {
			ledgerID, first int64
			want            error
		}{{1, n, ErrNoSuchEntry}, {2, 10, ErrNoSuchEntry}, {3, 0, ErrNoSuchLedger}, {1, -1, ErrInvalidRequest}} {
			if _, err := e.ReadRange(tc.ledgerID, tc.first, 10, 0); !errors.Is(err, tc.want) {
				t.Errorf("ReadRange(%d, %d) = %v, want %v", tc.ledgerID, tc.first, err, tc.want)
			}
		}
	}

	t.Run("write cache", func(t *testing.T) {
		before := e.Stats()
		check(t, 1, 0, n, 0, n)
		if d := delta(before); d.WriteCacheHits != n || d.EntryLogReads != 0 {
			t.Fatalf("%d write cache hits, %d entry log reads; want %d, 0", d.WriteCacheHits, d.EntryLogReads, n)
		}
		bounds(t)
	})

	if err := e.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	st := e.Stats()
	if st.WriteCacheBytes != 0 || st.EntryLogFiles < 3 {
		t.Fatalf("after checkpoint: write cache %d bytes, %d entry logs", st.WriteCacheBytes, st.EntryLogFiles)
	}

	t.Run("entry logs", func(t *testing.T) {
		before := e.Stats()
		check(t, 1, 0, n, 0, n)
		d := delta(before)
		// One ReadAt per entry log the ledger spans (32 KiB logs here),
		// every record read once.
		if d.EntryLogReadBytes != n*record || d.EntryLogReads > uint64(st.EntryLogFiles) || d.ReadCacheHits != 0 {
			t.Fatalf("read %d bytes in %d reads (%d read cache hits); want %d bytes in at most %d reads",
				d.EntryLogReadBytes, d.EntryLogReads, d.ReadCacheHits, n*record, st.EntryLogFiles)
		}
		// A byte bound reads no more than the records it returns.
		before = e.Stats()
		check(t, 1, 10, 100, 1000, 3)
		if d := delta(before); d.EntryLogReadBytes != 3*record {
			t.Fatalf("3 entries read %d bytes from the entry logs, want %d", d.EntryLogReadBytes, 3*record)
		}
		bounds(t)
	})

	t.Run("recycled buffers", func(t *testing.T) {
		// Ranges whose buffers are handed back and read into again: each
		// holds its own entries while it is in use.
		for round := range 20 {
			first := int64(round*37) % (n - 50)
			got, release, err := e.ReadRangeRecycled(1, first, 50, 0)
			if err != nil || len(got) != 50 {
				t.Fatalf("ReadRangeRecycled(1, %d): %d entries, %v", first, len(got), err)
			}
			for i, ent := range got {
				if !bytes.Equal(ent.Payload, payloadFor(1, first+int64(i), size)) {
					t.Fatalf("round %d: entry %d wrong", round, first+int64(i))
				}
			}
			release()
		}
	})

	t.Run("read cache", func(t *testing.T) {
		if _, err := e.Read(1, 50); err != nil { // fills the read cache with 50..66
			t.Fatal(err)
		}
		before := e.Stats()
		check(t, 1, 51, 16, 0, 16)
		if d := delta(before); d.ReadCacheHits != 16 || d.EntryLogReads != 0 {
			t.Fatalf("%d read cache hits, %d entry log reads; want 16, 0", d.ReadCacheHits, d.EntryLogReads)
		}
		// Past the read cache, on into the entry logs.
		before = e.Stats()
		check(t, 1, 60, 20, 0, 20)
		if d := delta(before); d.ReadCacheHits != 7 || d.EntryLogReadBytes != 13*record {
			t.Fatalf("%d read cache hits, %d bytes from entry logs; want 7, %d", d.ReadCacheHits, d.EntryLogReadBytes, 13*record)
		}
	})

	t.Run("entry logs then write cache", func(t *testing.T) {
		for i := int64(n); i < n+10; i++ {
			mustAdd(t, e, AddRequest{LedgerID: 1, EntryID: i, LastAddConfirmed: i - 1, Payload: payloadFor(1, i, size)})
		}
		before := e.Stats()
		check(t, 1, n-10, 100, 0, 20)
		if d := delta(before); d.WriteCacheHits != 10 || d.EntryLogReadBytes != 10*record {
			t.Fatalf("%d write cache hits, %d bytes from entry logs; want 10, %d", d.WriteCacheHits, d.EntryLogReadBytes, 10*record)
		}
	})

	t.Run("corrupt record", func(t *testing.T) {
		// Flip a payload byte of entry 120's record: the range stops before
		// it, and a range from it reports the corruption.
		loc, ok, err := e.lookup(cacheKey{ledgerID: 1, entryID: 120})
		if err != nil || !ok {
			t.Fatalf("lookup: %v %v", ok, err)
		}
		f, err := fs.OpenReadWrite(e.logs.path(loc.logID), vfs.WriteCategoryUnspecified)
		if err != nil {
			t.Fatal(err)
		}
		var b [1]byte
		if _, err := f.ReadAt(b[:], loc.offset+entryRecordHeaderBytes+5); err != nil {
			t.Fatal(err)
		}
		b[0] ^= 0xff
		if _, err := f.WriteAt(b[:], loc.offset+entryRecordHeaderBytes+5); err != nil {
			t.Fatal(err)
		}
		f.Close()
		check(t, 1, 110, 20, 0, 10)
		if _, err := e.ReadRange(1, 120, 20, 0); !errors.Is(err, ErrIO) || !strings.Contains(err.Error(), "corrupt") {
			t.Fatalf("range from the corrupt entry: %v, want a corruption (ErrIO)", err)
		}
		check(t, 1, 121, 20, 0, 20)
	})

	t.Run("deleted ledger", func(t *testing.T) {
		if err := e.DeleteLedger(1); err != nil {
			t.Fatal(err)
		}
		if _, err := e.ReadRange(1, 0, 10, 0); !errors.Is(err, ErrNoSuchLedger) {
			t.Fatalf("range of a deleted ledger: %v, want ErrNoSuchLedger", err)
		}
		check(t, 2, 0, 100, 0, 10)
	})
}

// TestReadAheadOnce: many concurrent single-entry misses on neighbouring
// entries (a reader with 64 reads in flight, each missing the read cache)
// read each entry from the entry logs about once, instead of each starting
// its own read-ahead of the same entries (64 times the bytes).
func TestReadAheadOnce(t *testing.T) {
	cfg := testConfig(vfs.NewMem())
	cfg.EntryLogMaxBytes = 1 << 20
	cfg.ReadCacheBytes = 4 << 20
	e := openTest(t, cfg)
	const n, size = 256, 1000
	const record = entryRecordHeaderBytes + size
	for i := range int64(n) {
		mustAdd(t, e, AddRequest{LedgerID: 1, EntryID: i, LastAddConfirmed: i - 1, Payload: payloadFor(1, i, size)})
	}
	if err := e.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	before := e.Stats()
	for first := int64(0); first < n; first += 64 {
		var wg sync.WaitGroup
		for i := first; i < first+64; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ent, err := e.Read(1, i)
				if err != nil || !bytes.Equal(ent.Payload, payloadFor(1, i, size)) {
					t.Errorf("Read(1, %d): %d bytes, %v", i, len(ent.Payload), err)
				}
			}()
		}
		wg.Wait()
	}
	after := e.Stats()
	readBytes := after.EntryLogReadBytes - before.EntryLogReadBytes
	t.Logf("%d concurrent reads: %d bytes from the entry logs (%.1f times the entries), %d waited for a read-ahead in progress",
		n, readBytes, float64(readBytes)/(n*record), after.ReadAheadJoins-before.ReadAheadJoins)
	// Concurrent read-aheads never overlap, and one stops at the first
	// entry a finished one brought: each entry is read about once (a read
	// that finds its read-ahead's entry gone reads it alone), whatever
	// order the misses come in (without the two rules, 17 times here).
	if readBytes > n*record*5/4 {
		t.Fatalf("read %d bytes from entry logs for %d entries of %d bytes: read-ahead repeated", readBytes, n, record)
	}
}

// blockingFS holds every read of an entry log while blocked is set, so a
// test can keep a range read in the middle of its I/O.
type blockingFS struct {
	vfs.FS
	mu      sync.Mutex
	blocked chan struct{} // nil: reads go through
	entered chan struct{} // receives once per blocked read
}

func (fs *blockingFS) Open(name string, opts ...vfs.OpenOption) (vfs.File, error) {
	f, err := fs.FS.Open(name, opts...)
	if err != nil || !strings.Contains(name, "entrylog-") {
		return f, err
	}
	return &blockingFile{File: f, fs: fs}, nil
}

type blockingFile struct {
	vfs.File
	fs *blockingFS
}

func (f *blockingFile) ReadAt(p []byte, off int64) (int, error) {
	f.fs.mu.Lock()
	blocked := f.fs.blocked
	f.fs.mu.Unlock()
	if blocked != nil {
		f.fs.entered <- struct{}{}
		<-blocked
	}
	return f.File.ReadAt(p, off)
}

// TestReadRangeDoesNotStallAdds: a range read waiting on the disk holds no
// lock that adds wait for (it reads under gcMu shared, never under mu), so
// adds to the same ledger and others are acknowledged meanwhile.
func TestReadRangeDoesNotStallAdds(t *testing.T) {
	fs := &blockingFS{FS: vfs.NewMem(), entered: make(chan struct{}, 1)}
	e := openTest(t, testConfig(fs))
	for i := range int64(50) {
		mustAdd(t, e, AddRequest{LedgerID: 1, EntryID: i, LastAddConfirmed: i - 1, Payload: payloadFor(1, i, 300)})
	}
	if err := e.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	fs.mu.Lock()
	fs.blocked = release
	fs.mu.Unlock()
	done := make(chan error, 1)
	go func() {
		got, err := e.ReadRange(1, 0, 50, 0)
		if err == nil && len(got) != 50 {
			err = errors.New("short range")
		}
		done <- err
	}()
	recvWithin(t, fs.entered) // the range read is at the entry log
	for i := range int64(20) {
		mustAdd(t, e, AddRequest{LedgerID: 1, EntryID: 50 + i, LastAddConfirmed: 49 + i, Payload: payloadFor(1, 50+i, 300)})
		mustAdd(t, e, AddRequest{LedgerID: 2, EntryID: i, LastAddConfirmed: i - 1, Payload: payloadFor(2, i, 300)})
	}
	fs.mu.Lock()
	fs.blocked = nil
	fs.mu.Unlock()
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestReadRangeBuffersFitTheirSpans: ReadRange's caller keeps the payloads
// (they alias the spans read), so the spans are read into buffers of their
// own size — a recycled buffer's power-of-two capacity would double what a
// catch-up allocates and keeps alive. ReadRangeRecycled's are recycled.
func TestReadRangeBuffersFitTheirSpans(t *testing.T) {
	cfg := testConfig(vfs.NewMem())
	cfg.EntryLogMaxBytes = 4 << 20
	cfg.WriteCacheBytes = 4 << 20
	e := openTest(t, cfg)
	const n, size = 100, 3000 // one span of ~300 KB: a 512 KiB recycled buffer
	for i := range int64(n) {
		mustAdd(t, e, AddRequest{LedgerID: 1, EntryID: i, LastAddConfirmed: i - 1, Payload: payloadFor(1, i, size)})
	}
	if err := e.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	got, err := e.ReadRange(1, 0, n, 0)
	if err != nil || len(got) != n {
		t.Fatalf("ReadRange: %d entries, %v", len(got), err)
	}
	for _, ent := range got {
		// A payload reaches to the end of its span's buffer: the last
		// entry read from each span has no room after it.
		if spare := cap(ent.Payload) - len(ent.Payload); spare > 0 && spare < entryRecordHeaderBytes+size {
			t.Fatalf("entry %d: %d bytes of buffer after its payload, not a record's", ent.EntryID, spare)
		}
	}
	if last := got[n-1].Payload; cap(last) != len(last) {
		t.Fatalf("the last entry's buffer has %d bytes after it", cap(last)-len(last))
	}
	got, release, err := e.ReadRangeRecycled(1, 0, n, 0)
	if err != nil || len(got) != n {
		t.Fatalf("ReadRangeRecycled: %d entries, %v", len(got), err)
	}
	if last := got[n-1].Payload; cap(last) == len(last) {
		t.Fatal("ReadRangeRecycled read into a buffer of the span's size, not a recycled one")
	}
	release()
}
