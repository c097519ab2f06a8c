package bookie

import (
	"bytes"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// Entry logs are written in whole blocks, with direct I/O on a real Linux
// disk and through the page cache elsewhere. In both, every record reads back,
// and a sync pads the last block so that the next record starts in a fresh
// one: a block that holds synced records is never written again.
func TestEntryLogBlocks(t *testing.T) {
	for _, tc := range []struct {
		name   string
		fs     vfs.FS
		dir    string
		direct bool
	}{
		{"memfs", vfs.NewMem(), "/logs", false},
		{"disk", vfs.Default, t.TempDir(), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.fs.MkdirAll(tc.dir, 0o755); err != nil {
				t.Fatal(err)
			}
			l, err := openEntryLogs(tc.fs, tc.dir, 64<<20, false, tc.direct)
			if err != nil {
				t.Fatal(err)
			}
			type written struct {
				k   cacheKey
				v   cachedEntry
				loc location
			}
			var all []written
			// Sizes cross blocks and chunks; the 300 KiB entry outgrows the
			// writer's aligned buffer.
			sizes := []int{1, 1000, 4096, 5000, 300 << 10, 17, 1024}
			entry := int64(0)
			for round := range 3 {
				for i := range 200 {
					k := cacheKey{ledgerID: 7, entryID: entry}
					v := cachedEntry{lastAddConfirmed: entry - 1, payload: payloadFor(7, entry, sizes[(i+round)%len(sizes)])}
					loc, err := l.append(k, v)
					if err != nil {
						t.Fatal(err)
					}
					if i == 0 && round > 0 && loc.offset%entryLogBlockBytes != 0 {
						t.Errorf("round %d: first record after a sync at offset %d, inside a synced block", round, loc.offset)
					}
					all = append(all, written{k, v, loc})
					entry++
				}
				if round == 1 {
					// As if the buffer had been reallocated by append: direct
					// I/O needs aligned memory, so the writer must copy.
					odd := make([]byte, len(l.w.buf)+1, len(l.w.buf)+1+2*entryLogBlockBytes)[1:]
					l.w.buf = odd[:copy(odd, l.w.buf)]
				}
				if err := l.sync(); err != nil {
					t.Fatal(err)
				}
				if got := l.w.written; got%entryLogBlockBytes != 0 || len(l.w.buf) != 0 {
					t.Fatalf("after sync: written %d, %d bytes buffered", got, len(l.w.buf))
				}
			}
			if tc.direct && runtime.GOOS == "linux" && !l.w.direct {
				t.Logf("direct I/O refused by the file system under %s; buffered path tested twice", tc.dir)
			}
			for _, w := range all {
				got, err := l.read(w.loc, w.k)
				if err != nil {
					t.Fatal(err)
				}
				if got.lastAddConfirmed != w.v.lastAddConfirmed || !bytes.Equal(got.payload, w.v.payload) {
					t.Fatalf("entry %d read back different", w.k.entryID)
				}
			}
			if err := l.close(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// sizeRecordingFS records the length of every ReadAt of an entry log.
type sizeRecordingFS struct {
	vfs.FS
	mu    sync.Mutex
	reads []int
}

func (fs *sizeRecordingFS) Open(name string, opts ...vfs.OpenOption) (vfs.File, error) {
	f, err := fs.FS.Open(name, opts...)
	if err != nil || !strings.Contains(name, "entrylog-") {
		return f, err
	}
	return &sizeRecordingFile{File: f, fs: fs}, nil
}

type sizeRecordingFile struct {
	vfs.File
	fs *sizeRecordingFS
}

func (f *sizeRecordingFile) ReadAt(p []byte, off int64) (int, error) {
	f.fs.mu.Lock()
	f.fs.reads = append(f.fs.reads, len(p))
	f.fs.mu.Unlock()
	return f.File.ReadAt(p, off)
}

// TestSpanReadsAreBounded: a span of an entry log is read in requests of at
// most maxReadRequest bytes (a journal fsync queued behind one waits for
// all of it), back to back, into the caller's buffer; a span past the end of
// the log is a short read, an error.
func TestSpanReadsAreBounded(t *testing.T) {
	fs := &sizeRecordingFS{FS: vfs.NewMem()}
	if err := fs.MkdirAll("/logs", 0o755); err != nil {
		t.Fatal(err)
	}
	l, err := openEntryLogs(fs, "/logs", 64<<20, false, false)
	if err != nil {
		t.Fatal(err)
	}
	defer l.close()
	var first location
	var end int64
	for i := range int64(40) { // 40 records of 30 KiB: a span of 1.2 MB
		loc, err := l.append(cacheKey{ledgerID: 3, entryID: i}, cachedEntry{lastAddConfirmed: i - 1, payload: payloadFor(3, i, 30<<10)})
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			first = loc
		}
		end = loc.offset + int64(loc.size)
	}
	if err := l.sync(); err != nil {
		t.Fatal(err)
	}
	span := make([]byte, end-first.offset)
	if err := l.readSpanInto(first.logID, first.offset, span); err != nil {
		t.Fatal(err)
	}
	for i := range int64(40) {
		k, v, size, err := parseEntryRecord(span)
		if err != nil || k != (cacheKey{ledgerID: 3, entryID: i}) || !bytes.Equal(v.payload, payloadFor(3, i, 30<<10)) {
			t.Fatalf("record %d of the span: %v, %v", i, k, err)
		}
		span = span[size:]
	}
	fs.mu.Lock()
	reads := append([]int(nil), fs.reads...)
	fs.mu.Unlock()
	total := 0
	for _, n := range reads {
		if n > maxReadRequest {
			t.Fatalf("a read of %d bytes, over %d: %v", n, maxReadRequest, reads)
		}
		total += n
	}
	if want := int(end - first.offset); total != want || len(reads) != (want+maxReadRequest-1)/maxReadRequest {
		t.Fatalf("reads %v: %d bytes in %d, want %d in %d", reads, total, len(reads), want, (want+maxReadRequest-1)/maxReadRequest)
	}
	if err := l.readSpanInto(first.logID, end-100, make([]byte, 1<<20)); err == nil {
		t.Fatal("a span past the end of the log read without an error")
	}
}
