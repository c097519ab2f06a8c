package perf

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// usage is a snapshot of this process's CPU time and, where /proc/stat is
// readable (Linux), the machine's CPU time by state. The difference of two
// tells how much CPU a phase cost per entry and whether the machine was
// saturated or waiting: a pipeline that is slow while CPUs idle is bound by
// latency (hand-offs, wake-ups), not by work.
type usage struct {
	process time.Duration
	machine [8]uint64 // user nice system idle iowait irq softirq steal, in clock ticks
	hasMach bool
}

func takeUsage() usage {
	var u usage
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		u.process = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	u.machine, u.hasMach = readProcStat()
	return u
}

// readProcStat reads the aggregate "cpu" line of /proc/stat.
func readProcStat() ([8]uint64, bool) {
	var out [8]uint64
	f, err := os.Open("/proc/stat")
	if err != nil {
		return out, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	if !sc.Scan() {
		return out, false
	}
	fields := strings.Fields(sc.Text())
	if len(fields) < 9 || fields[0] != "cpu" {
		return out, false
	}
	for i := range out {
		v, err := strconv.ParseUint(fields[i+1], 10, 64)
		if err != nil {
			return out, false
		}
		out[i] = v
	}
	return out, true
}

// Usage is what a phase cost: process CPU per entry and, if known, the
// machine's CPU states as fractions of its total CPU time.
type Usage struct {
	CPUPerEntry               time.Duration
	Busy, Idle, IOWait, Steal float64 // fractions; Busy = user+nice+system+irq+softirq
	Machine                   bool    // the machine fractions are known
}

func usageBetween(before, after usage, entries int64) Usage {
	var u Usage
	if entries > 0 {
		u.CPUPerEntry = (after.process - before.process) / time.Duration(entries)
	}
	if !before.hasMach || !after.hasMach {
		return u
	}
	var d [8]float64
	var total float64
	for i := range d {
		d[i] = float64(after.machine[i] - before.machine[i])
		total += d[i]
	}
	if total == 0 {
		return u
	}
	u.Machine = true
	u.Busy = (d[0] + d[1] + d[2] + d[5] + d[6]) / total
	u.Idle, u.IOWait, u.Steal = d[3]/total, d[4]/total, d[7]/total
	return u
}

func (u Usage) String() string {
	s := fmt.Sprintf("process CPU %.2fµs/entry", float64(u.CPUPerEntry)/float64(time.Microsecond))
	if u.Machine {
		s += fmt.Sprintf("; machine busy %.0f%% idle %.0f%% iowait %.0f%% steal %.0f%%",
			100*u.Busy, 100*u.Idle, 100*u.IOWait, 100*u.Steal)
	}
	return s
}
