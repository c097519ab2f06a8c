package directio

import "golang.org/x/sys/unix"

// Enable switches the open file fd to direct I/O, reporting whether the file
// system accepted it (tmpfs on older kernels does not).
func Enable(fd uintptr) bool {
	flags, err := unix.FcntlInt(fd, unix.F_GETFL, 0)
	if err != nil {
		return false
	}
	_, err = unix.FcntlInt(fd, unix.F_SETFL, flags|unix.O_DIRECT)
	return err == nil
}
