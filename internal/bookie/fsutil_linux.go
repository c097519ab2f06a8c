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

// adviseNoReadAhead tells the kernel not to read ahead of f's reads: the
// engine reads entry logs in spans it sized itself (a range, a read-ahead
// window), and the kernel's own read-ahead past them — up to read_ahead_kb,
// often megabytes — would read records nobody asked this bookie for: a
// reader spreads consecutive ranges over the replicas, so each bookie reads
// every E-th range of its log. A hint: errors are ignored.
func adviseNoReadAhead(f vfs.File) {
	if fd := f.Fd(); fd != vfs.InvalidFd {
		_ = unix.Fadvise(int(fd), 0, 0, unix.FADV_RANDOM)
	}
}
