package disklog

import (
	"math/rand/v2"
	"os"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// faultFS wraps a file system to inject ENOSPC (as bookie's faultfs_test
// does): one in injectOneIn (0: never) of the writes, syncs and creations
// fails, and failAll fails them all. A failed write writes a random prefix
// first (none under failAll); a failed sync syncs nothing. Renames, removes
// and reads never fail: they need no space.
type faultFS struct {
	vfs.FS
	injectOneIn atomic.Int64
	failAll     atomic.Bool
	enospc      atomic.Int64

	mu  sync.Mutex
	rng *rand.Rand // guarded by mu
}

func newFaultFS(inner vfs.FS, seed uint64) *faultFS {
	return &faultFS{FS: inner, rng: rand.New(rand.NewPCG(seed, 7))}
}

func errNoSpace(op, path string) error {
	return &os.PathError{Op: op, Path: path, Err: syscall.ENOSPC}
}

// inject reports whether to fail an operation now.
func (q *faultFS) inject() bool {
	if q.failAll.Load() {
		q.enospc.Add(1)
		return true
	}
	oneIn := q.injectOneIn.Load()
	if oneIn <= 0 {
		return false
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.rng.Int64N(oneIn) != 0 {
		return false
	}
	q.enospc.Add(1)
	return true
}

func (q *faultFS) prefix(n int) int {
	if q.failAll.Load() {
		return 0
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.rng.IntN(n + 1)
}

func (q *faultFS) wrap(f vfs.File, path string, err error) (vfs.File, error) {
	if err != nil {
		return nil, err
	}
	return &faultFile{File: f, fs: q, path: path}, nil
}

func (q *faultFS) Create(name string, category vfs.DiskWriteCategory) (vfs.File, error) {
	if q.inject() {
		return nil, errNoSpace("create", name)
	}
	f, err := q.FS.Create(name, category)
	return q.wrap(f, name, err)
}

func (q *faultFS) OpenReadWrite(name string, category vfs.DiskWriteCategory, opts ...vfs.OpenOption) (vfs.File, error) {
	f, err := q.FS.OpenReadWrite(name, category, opts...)
	return q.wrap(f, name, err)
}

func (q *faultFS) OpenDir(name string) (vfs.File, error) {
	f, err := q.FS.OpenDir(name)
	return q.wrap(f, name, err)
}

type faultFile struct {
	vfs.File
	fs   *faultFS
	path string
}

func (f *faultFile) Write(p []byte) (int, error) {
	if !f.fs.inject() {
		return f.File.Write(p)
	}
	n, _ := f.File.Write(p[:f.fs.prefix(len(p))])
	return n, errNoSpace("write", f.path)
}

func (f *faultFile) WriteAt(p []byte, off int64) (int, error) {
	if !f.fs.inject() {
		return f.File.WriteAt(p, off)
	}
	n, _ := f.File.WriteAt(p[:f.fs.prefix(len(p))], off)
	return n, errNoSpace("write", f.path)
}

func (f *faultFile) Sync() error {
	if f.fs.inject() {
		return errNoSpace("fsync", f.path)
	}
	return f.File.Sync()
}

func (f *faultFile) SyncData() error {
	if f.fs.inject() {
		return errNoSpace("fdatasync", f.path)
	}
	return f.File.SyncData()
}
