package bookie

import (
	"github.com/cockroachdb/pebble/v2/vfs"
	"golang.org/x/sys/unix"
)

// dropCachedPages asks the kernel to drop f's cached pages in [offset,
// offset+length) (length 0: to the end). Only clean pages go, so callers
// sync first. A hint without effect on data or durability: files without a
// descriptor (in-memory file systems) are skipped, errors ignored.
func dropCachedPages(f vfs.File, offset, length int64) {
	if fd := f.Fd(); fd != vfs.InvalidFd {
		_ = unix.Fadvise(int(fd), offset, length, unix.FADV_DONTNEED)
	}
}
