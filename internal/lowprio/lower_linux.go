package lowprio

import "golang.org/x/sys/unix"

// lower sets the calling thread's nice value to Nice (on Linux a
// PRIO_PROCESS priority of a thread id is that thread's alone).
func lower() error {
	return unix.Setpriority(unix.PRIO_PROCESS, unix.Gettid(), Nice)
}

// threadID returns the calling thread's id.
func threadID() int { return unix.Gettid() }

// CurrentNice returns the calling thread's nice value.
func CurrentNice() (int, error) {
	p, err := unix.Getpriority(unix.PRIO_PROCESS, unix.Gettid())
	return 20 - p, err // the raw getpriority(2) answers 20 - nice
}
