//go:build linux

package lowprio

import (
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"

	"golang.org/x/sys/unix"
)

func threadNice(t *testing.T) int {
	t.Helper()
	n, err := CurrentNice()
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// lowered returns the ids of the process's threads whose nice value is Nice.
func lowered(t *testing.T) map[int]bool {
	t.Helper()
	stats, err := filepath.Glob("/proc/self/task/*/stat")
	if err != nil {
		t.Fatal(err)
	}
	ids := map[int]bool{}
	for _, s := range stats {
		b, err := os.ReadFile(s)
		if err != nil {
			continue // the thread ended
		}
		// Fields after the command's closing parenthesis: state is the
		// first, nice the 17th (field 19 of proc(5)).
		f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
		if nice, _ := strconv.Atoi(f[16]); nice == Nice {
			id, _ := strconv.Atoi(filepath.Base(filepath.Dir(s)))
			ids[id] = true
		}
	}
	return ids
}

func TestDoRunsOnALoweredThread(t *testing.T) {
	runtime.LockOSThread()
	caller := threadNice(t)
	runtime.UnlockOSThread()
	p := New(2)
	defer p.Close()
	var in int
	p.Do(func() { in = threadNice(t) })
	if in != Nice {
		t.Fatalf("nice in Do = %d, want %d", in, Nice)
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if got := threadNice(t); got != caller {
		t.Fatalf("caller's thread nice %d after Do, was %d", got, caller)
	}
}

// Threads the runtime starts while a pool thread runs Go code or blocks in
// a system call keep the process's priority: only the pool's own are
// lowered.
func TestOnlyThePoolsThreadsAreLowered(t *testing.T) {
	before := lowered(t) // an earlier test's pool's threads may still be ending
	const threads = 3
	p := New(threads)
	defer p.Close()
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 50 {
				p.Do(func() {
					// A blocking system call hands the P off, and
					// goroutines started here need threads.
					var started sync.WaitGroup
					for range 4 {
						started.Go(func() {
							ts := unix.Timespec{Nsec: 100_000}
							_ = unix.Nanosleep(&ts, nil)
						})
					}
					ts := unix.Timespec{Nsec: 200_000}
					_ = unix.Nanosleep(&ts, nil)
					started.Wait()
				})
			}
		})
	}
	wg.Wait()
	now := lowered(t)
	p.mu.Lock()
	ours := p.threads
	p.mu.Unlock()
	if len(ours) != threads {
		t.Fatalf("pool noted %d threads, want %d", len(ours), threads)
	}
	for _, id := range ours {
		if !now[id] {
			t.Errorf("pool thread %d is not at nice %d", id, Nice)
		}
		delete(now, id)
	}
	for id := range now {
		if !before[id] {
			t.Errorf("thread %d, not the pool's, is at nice %d", id, Nice)
		}
	}
}
