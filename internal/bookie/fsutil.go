package bookie

import (
	"github.com/cockroachdb/pebble/v2/vfs"

	"quire/internal/directio"
)

// setDirectIO switches f to direct I/O, reporting whether it did. Files
// without a descriptor (in-memory file systems) keep their own I/O.
func setDirectIO(f vfs.File) bool {
	fd := f.Fd()
	return fd != vfs.InvalidFd && directio.Enable(fd)
}

// syncDir makes the directory's entries (created, renamed, removed files)
// durable.
func syncDir(fs vfs.FS, dir string) error {
	d, err := fs.OpenDir(dir)
	if err != nil {
		return err
	}
	if err := d.Sync(); err != nil {
		_ = d.Close()
		return err
	}
	return d.Close()
}

// mkdirAllSynced creates dir and syncs it and every ancestor, so that the
// directory survives a crash (vfs.MemFS drops unsynced directory entries just
// as a real file system may).
func mkdirAllSynced(fs vfs.FS, dir string) error {
	if err := fs.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for d := dir; ; d = fs.PathDir(d) {
		if err := syncDir(fs, d); err != nil {
			return err
		}
		if fs.PathDir(d) == d {
			return nil
		}
	}
}

type vfsDiskUsage = vfs.DiskUsage
