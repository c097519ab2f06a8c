package perf

import (
	"strings"
	"testing"
	"time"
)

func TestUsageBetween(t *testing.T) {
	before := usage{process: time.Second, machine: [8]uint64{100, 0, 50, 1000, 10, 0, 5, 0}, hasMach: true}
	// +60 user, +20 system, +10 idle, +5 iowait, +5 steal over 100 ticks.
	after := usage{process: 3 * time.Second, machine: [8]uint64{160, 0, 70, 1010, 15, 0, 5, 5}, hasMach: true}
	u := usageBetween(before, after, 1000)
	if u.CPUPerEntry != 2*time.Millisecond {
		t.Errorf("CPU per entry = %v, want 2ms", u.CPUPerEntry)
	}
	if !u.Machine || u.Busy != 0.80 || u.Idle != 0.10 || u.IOWait != 0.05 || u.Steal != 0.05 {
		t.Errorf("machine = %+v, want busy 0.80 idle 0.10 iowait 0.05 steal 0.05", u)
	}
	if s := u.String(); !strings.Contains(s, "2000.00µs/entry") || !strings.Contains(s, "busy 80%") {
		t.Errorf("String() = %q", s)
	}
	// Without /proc/stat only the process figure is reported.
	after.hasMach = false
	if u := usageBetween(before, after, 1000); u.Machine || strings.Contains(u.String(), "machine") {
		t.Errorf("without machine figures: %+v %q", u, u.String())
	}
}

func TestTakeUsageCountsThisProcess(t *testing.T) {
	before := takeUsage()
	deadline := time.Now().Add(50 * time.Millisecond)
	x := 0
	for time.Now().Before(deadline) {
		x++
	}
	after := takeUsage()
	if after.process <= before.process {
		t.Errorf("process CPU did not grow while spinning (%d iterations): %v → %v", x, before.process, after.process)
	}
}
