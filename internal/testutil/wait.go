// Package testutil holds what tests of several packages share. It is
// imported only from _test.go files.
package testutil

import (
	"testing"
	"time"
)

// WaitTimeout is how long WaitFor waits by default: long enough for a
// loaded 2-core CI machine, short enough that a hung test says so.
const WaitTimeout = 30 * time.Second

// WaitFor polls cond until it holds, failing the test with what after
// WaitTimeout. Polling a condition with a deadline is how tests wait;
// sleeping a fixed time and hoping is not.
func WaitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	WaitForWithin(t, WaitTimeout, what, cond)
}

// WaitForWithin is WaitFor with its own deadline.
func WaitForWithin(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.NewTimer(within)
	defer deadline.Stop()
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-deadline.C:
			t.Fatalf("timed out after %v waiting for %s", within, what)
		case <-tick.C:
		}
	}
}
