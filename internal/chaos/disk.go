package chaos

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// smallDiskMB is the size of the file system under each bookie's data dir
// when the nemesis may fill disks: small enough to fill in a moment, large
// enough for the journal files (8 MiB each, preallocated), the entry logs
// and the index of a run.
const smallDiskMB = 256

// fillFile is the file a disk-full fault fills a bookie's file system with.
const fillFile = "chaos-fill"

// mountSmallDisk mounts a file system of smallDiskMB at dir: ext4 on a
// loop device over image (no blocks reserved for root, as root would
// otherwise write into them), else tmpfs. The mount lives in the host's
// mount namespace under the run's directory (whose name carries the
// harness's pid, so a sweep finds it); unmountSmallDisk removes it.
func mountSmallDisk(dir, image string) (kind string, err error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	f, err := os.Create(image)
	if err != nil {
		return "", err
	}
	f.Close()
	if err := os.Truncate(image, smallDiskMB<<20); err != nil {
		return "", err
	}
	loopErr := run("mkfs.ext4", "-q", "-F", "-m", "0", image)
	if loopErr == nil {
		// A loop device set up by mount -o loop is detached on unmount.
		if loopErr = run("mount", "-o", "loop", image, dir); loopErr == nil {
			return "ext4 on a loop device", nil
		}
	}
	os.Remove(image)
	if err := run("mount", "-t", "tmpfs", "-o", fmt.Sprintf("size=%dm", smallDiskMB), "tmpfs", dir); err != nil {
		return "", fmt.Errorf("small disk at %s: %v; tmpfs: %w", dir, loopErr, err)
	}
	return "tmpfs", nil
}

// unmountSmallDisk unmounts dir, lazily if something still holds it (the
// processes are gone by then; a lazy unmount frees it once they are).
func unmountSmallDisk(dir string) error {
	if err := run("umount", dir); err != nil {
		if lazyErr := run("umount", "-l", dir); lazyErr != nil {
			return fmt.Errorf("%v; lazily: %w", err, lazyErr)
		}
	}
	return nil
}

// fillDisk fills the file system under dir: fillFile takes every free
// block (fallocate, then writes until ENOSPC for what fallocate left).
// emptyDisk deletes it.
func fillDisk(dir string) error {
	path := filepath.Join(dir, fillFile)
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return fmt.Errorf("statfs %s: %w", dir, err)
	}
	free := int64(st.Bavail) * int64(st.Bsize)
	if free > 0 {
		// Errors here are fine: the writes below fill what is left.
		_ = unix.Fallocate(int(f.Fd()), 0, 0, free)
	}
	// Megabytes, then single blocks; bounded, as the file system holds
	// smallDiskMB at most.
	for _, size := range []int{1 << 20, 4096} {
		chunk := make([]byte, size)
		for i := 0; i < (2*smallDiskMB<<20)/size; i++ {
			if _, err := f.Write(chunk); err != nil {
				if !errors.Is(err, syscall.ENOSPC) && !errors.Is(err, syscall.EDQUOT) {
					return fmt.Errorf("fill %s: %w", dir, err)
				}
				break
			}
		}
	}
	return nil
}

func emptyDisk(dir string) error {
	if err := os.Remove(filepath.Join(dir, fillFile)); err != nil && !os.IsNotExist(err) {
		return err
	}
	return nil
}

// harnessMounts lists the mount points under the system's temporary
// directory whose path holds a harness's run directory (namePrefix + pid),
// deepest first, so that nested ones unmount before their parents.
func harnessMounts() ([]string, error) {
	f, err := os.Open("/proc/self/mounts")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []string
	prefix := filepath.Join(os.TempDir(), namePrefix)
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) >= 2 && strings.HasPrefix(fields[1], prefix) {
			out = append(out, fields[1])
		}
	}
	for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
		out[i], out[j] = out[j], out[i]
	}
	return out, sc.Err()
}

func run(name string, args ...string) error {
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}
