//go:build linux

package meta

import (
	"path/filepath"
	"syscall"
)

// diskSpace reports the free (available to unprivileged writers) and total
// bytes of the file system holding path (or, if path does not exist, its
// directory).
func diskSpace(path string) (free, total uint64, err error) {
	var st syscall.Statfs_t
	if err = syscall.Statfs(path, &st); err != nil {
		if err = syscall.Statfs(filepath.Dir(path), &st); err != nil {
			return 0, 0, err
		}
	}
	return uint64(st.Bavail) * uint64(st.Frsize), uint64(st.Blocks) * uint64(st.Frsize), nil
}
