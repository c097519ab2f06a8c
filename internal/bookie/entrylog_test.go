package bookie

import (
	"bytes"
	"runtime"
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
