//go:build linux

package main

import "syscall"

// fileSystemUsage reports the used and total bytes of the file system
// holding dir, and its device id. Used is what is not available to this
// process (blocks reserved for root count as used unless it is root), as the
// bookie engine counts free space.
func fileSystemUsage(dir string) (used, total, device uint64, err error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0, 0, 0, err
	}
	var fi syscall.Stat_t
	if err := syscall.Stat(dir, &fi); err != nil {
		return 0, 0, 0, err
	}
	total = uint64(st.Blocks) * uint64(st.Frsize)
	return total - min(total, uint64(st.Bavail)*uint64(st.Frsize)), total, uint64(fi.Dev), nil
}
