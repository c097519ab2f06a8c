package bookie

import (
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// faultFS wraps a file system for disk-full tests:
//
//   - a capacity (bytes held in files; 0: unlimited), enforced on every
//     write with ENOSPC (the bytes that fit are written, as write(2) does)
//     and reported by GetDiskUsage, so the engine's statfs sees the same
//     disk its writes fill;
//   - ENOSPC injected at random (one in injectOneIn; 0: never) into the
//     writes, syncs, preallocations and creations of the files injectInto
//     selects. An injected failed write writes a random prefix first; an
//     injected failed sync syncs nothing.
//
// Every ENOSPC it returns is counted in enospc.
type faultFS struct {
	vfs.FS
	capacity    atomic.Int64
	injectOneIn atomic.Int64
	injectInto  func(path string) bool
	enospc      atomic.Int64

	mu  sync.Mutex // serializes quota checks with the writes they admit
	rng *rand.Rand // guarded by mu
}

func newFaultFS(inner vfs.FS, seed uint64) *faultFS {
	return &faultFS{FS: inner, rng: rand.New(rand.NewPCG(seed, 1)), injectInto: func(string) bool { return true }}
}

// journalAndEntryLogs selects the engine's own files. Pebble's are left
// alone: Pebble panics on a failed WAL or MANIFEST write, which is why the
// engine keeps a ballast for it (tested separately).
func journalAndEntryLogs(path string) bool {
	base := path[strings.LastIndexByte(path, '/')+1:]
	return strings.HasPrefix(base, "journal-") || strings.HasPrefix(base, "entrylog-")
}

func errNoSpace(op, path string) error {
	return &os.PathError{Op: op, Path: path, Err: syscall.ENOSPC}
}

// used is the bytes held in files, walking the whole tree.
func (q *faultFS) used() int64 {
	var walk func(dir string) int64
	walk = func(dir string) int64 {
		names, err := q.FS.List(dir)
		if err != nil {
			return 0
		}
		var n int64
		for _, name := range names {
			p := q.FS.PathJoin(dir, name)
			st, err := q.FS.Stat(p)
			switch {
			case err != nil:
			case st.IsDir():
				n += walk(p)
			default:
				n += st.Size()
			}
		}
		return n
	}
	return walk("/")
}

func (q *faultFS) GetDiskUsage(string) (vfs.DiskUsage, error) {
	capacity := q.capacity.Load()
	if capacity == 0 {
		return q.FS.GetDiskUsage("/")
	}
	q.mu.Lock()
	used := q.used()
	q.mu.Unlock()
	avail := max(0, capacity-used)
	return vfs.DiskUsage{TotalBytes: uint64(capacity), UsedBytes: uint64(capacity - avail), AvailBytes: uint64(avail)}, nil
}

// injectNow reports whether to fail an operation on path; the caller holds mu.
func (q *faultFS) injectNow(path string) bool {
	oneIn := q.injectOneIn.Load()
	if oneIn <= 0 || !q.injectInto(path) || q.rng.Int64N(oneIn) != 0 {
		return false
	}
	q.enospc.Add(1)
	return true
}

func (q *faultFS) wrap(f vfs.File, path string, err error) (vfs.File, error) {
	if err != nil {
		return nil, err
	}
	return &faultFile{File: f, fs: q, path: path}, nil
}

func (q *faultFS) Create(name string, category vfs.DiskWriteCategory) (vfs.File, error) {
	q.mu.Lock()
	inject := q.injectNow(name)
	q.mu.Unlock()
	if inject {
		return nil, errNoSpace("create", name)
	}
	f, err := q.FS.Create(name, category)
	return q.wrap(f, name, err)
}

func (q *faultFS) OpenReadWrite(name string, category vfs.DiskWriteCategory, opts ...vfs.OpenOption) (vfs.File, error) {
	f, err := q.FS.OpenReadWrite(name, category, opts...)
	return q.wrap(f, name, err)
}

func (q *faultFS) ReuseForWrite(oldname, newname string, category vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := q.FS.ReuseForWrite(oldname, newname, category)
	return q.wrap(f, newname, err)
}

type faultFile struct {
	vfs.File
	fs   *faultFS
	path string
}

// admit returns how many of n bytes written at offset off (off < 0: at the
// end) fit, and whether the write fails.
func (f *faultFile) admit(off int64, n int) (int, bool) {
	q := f.fs
	if q.injectNow(f.path) {
		return q.rng.IntN(n + 1), true
	}
	capacity := q.capacity.Load()
	if capacity == 0 {
		return n, false
	}
	size := int64(0)
	if st, err := f.File.Stat(); err == nil {
		size = st.Size()
	}
	if off < 0 {
		off = size
	}
	growth := max(0, off+int64(n)-size)
	room := capacity - q.used()
	if growth <= room {
		return n, false
	}
	q.enospc.Add(1)
	fits := int64(n) - (growth - max(0, room))
	return int(max(0, fits)), true
}

func (f *faultFile) Write(p []byte) (int, error) {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	fits, fail := f.admit(-1, len(p))
	if !fail {
		return f.File.Write(p)
	}
	n, _ := f.File.Write(p[:fits])
	return n, errNoSpace("write", f.path)
}

func (f *faultFile) WriteAt(p []byte, off int64) (int, error) {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	fits, fail := f.admit(off, len(p))
	if !fail {
		return f.File.WriteAt(p, off)
	}
	n, _ := f.File.WriteAt(p[:fits], off)
	return n, errNoSpace("write", f.path)
}

func (f *faultFile) Preallocate(off, length int64) error {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if _, fail := f.admit(off, int(length)); fail {
		return errNoSpace("fallocate", f.path)
	}
	return f.File.Preallocate(off, length)
}

func (f *faultFile) syncFails() bool {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	return f.fs.injectNow(f.path)
}

func (f *faultFile) Sync() error {
	if f.syncFails() {
		return errNoSpace("fsync", f.path)
	}
	return f.File.Sync()
}

func (f *faultFile) SyncData() error {
	if f.syncFails() {
		return errNoSpace("fdatasync", f.path)
	}
	return f.File.SyncData()
}

func (f *faultFile) SyncTo(length int64) (bool, error) {
	if f.syncFails() {
		return false, errNoSpace("sync_file_range", f.path)
	}
	return f.File.SyncTo(length)
}
