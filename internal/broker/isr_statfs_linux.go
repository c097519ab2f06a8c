//go:build linux

package broker

import "syscall"

// diskSpace is the size of the file system holding dir and what of it is
// usable by an unprivileged process (Kafka's total and usable bytes of a
// log directory); −1 each when it cannot be read.
func diskSpace(dir string) (total, usable int64) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return -1, -1
	}
	return int64(st.Blocks) * st.Bsize, int64(st.Bavail) * st.Bsize
}
