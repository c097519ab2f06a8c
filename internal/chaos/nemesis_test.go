package chaos

import (
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestScheduleReplays: a seed fixes the schedule (so a failing run can be
// replayed), different seeds differ, and every fault is bounded and ends
// before the run's tail.
func TestScheduleReplays(t *testing.T) {
	targets := []string{"meta1", "meta2", "meta3", "bookie1", "bookie2", "bookie3", "bookie4", "broker1", "broker2"}
	a := Schedule(7, 10*time.Minute, FaultKinds, targets)
	b := Schedule(7, 10*time.Minute, FaultKinds, []string{"broker2", "broker1", "bookie4", "bookie3", "bookie2", "bookie1", "meta3", "meta2", "meta1"})
	if !reflect.DeepEqual(a, b) {
		t.Fatalf("the same seed gave two schedules:\n%v\n%v", a, b)
	}
	if reflect.DeepEqual(a, Schedule(8, 10*time.Minute, FaultKinds, targets)) {
		t.Fatal("seeds 7 and 8 gave the same schedule")
	}
	kinds := map[FaultKind]int{}
	var end time.Duration
	for _, f := range a {
		kinds[f.Kind]++
		if f.At < end+gapMin || f.For < faultMin || f.For > faultMax {
			t.Fatalf("fault %v at %v overlaps the previous (ended %v) or is out of bounds", f, f.At, end)
		}
		end = f.At + f.For
	}
	if end > 10*time.Minute-scheduleTail {
		t.Fatalf("last fault ends at %v", end)
	}
	if len(kinds) != len(FaultKinds) {
		t.Fatalf("10 minutes of faults used only %v", kinds)
	}
}

func TestParseNemesis(t *testing.T) {
	if k, err := ParseNemesis("kill, partition"); err != nil || !reflect.DeepEqual(k, []FaultKind{FaultKill, FaultPartition}) {
		t.Fatalf("%v %v", k, err)
	}
	for _, bad := range []string{"", "kill,flood"} {
		if _, err := ParseNemesis(bad); err == nil {
			t.Fatalf("%q accepted", bad)
		}
	}
	if _, err := ParseNemesis("kill,clock"); err == nil || !strings.Contains(err.Error(), "not yet") {
		t.Fatalf("clock: %v", err)
	}
}

// TestConfigModes: each mode's defaults, and what ISR mode refuses
// (bookies, bookie targets, a replication factor other than the brokers',
// the ledger mutants).
func TestConfigModes(t *testing.T) {
	c := Config{Mode: "ledger", Duration: time.Minute}
	if err := c.Validate(); err != nil || c.Bookies != 5 || c.Brokers != 2 || c.Acks != -1 || len(c.Targets) != 3 {
		t.Fatalf("ledger defaults: %+v %v", c, err)
	}
	c = Config{Mode: "isr", Duration: time.Minute}
	if err := c.Validate(); err != nil || c.Bookies != 0 || c.Brokers != 3 || c.Acks != -1 ||
		!slices.Equal(c.Targets, []Role{RoleMeta, RoleBroker}) || c.Permits() != (Permits{}) {
		t.Fatalf("isr defaults: %+v %v", c, err)
	}
	c = Config{Mode: "isr", Duration: time.Minute, Acks: 1}
	if err := c.Validate(); err != nil || !c.NoIdempotence || !c.Permits().Loss || !c.Permits().Duplicates {
		t.Fatalf("isr acks=1: %+v %v", c, err)
	}
	if !strings.Contains(c.Replay(1), "--acks 1") || strings.Contains(c.Replay(1), "--no-idempotence") {
		t.Fatalf("replay of acks=1: %s", c.Replay(1))
	}
	for _, bad := range []Config{
		{Mode: "isr", Duration: time.Minute, Bookies: 5},
		{Mode: "isr", Duration: time.Minute, Brokers: 2},
		{Mode: "isr", Duration: time.Minute, Targets: []Role{RoleBookie}},
		{Mode: "isr", Duration: time.Minute, LedgerMutant: "no-fence-recovery-read"},
		{Mode: "isr", Duration: time.Minute, Acks: 2},
		{Mode: "kraft", Duration: time.Minute},
	} {
		if err := bad.Validate(); err == nil {
			t.Errorf("%+v: accepted", bad)
		}
	}
}

// TestScheduleDiskFullTargetsDataHolders: a disk-full fault picks a
// bookie when there are any, a broker when there are none (ISR mode).
func TestScheduleDiskFullTargetsDataHolders(t *testing.T) {
	for _, tc := range []struct {
		targets []string
		prefix  string
	}{
		{[]string{"meta1", "bookie1", "bookie2", "broker1"}, "bookie"},
		{[]string{"meta1", "meta2", "broker1", "broker2", "broker3"}, "broker"},
	} {
		faults := Schedule(1, 5*time.Minute, []FaultKind{FaultDiskFull}, tc.targets)
		if len(faults) == 0 {
			t.Fatal("no faults")
		}
		for _, f := range faults {
			if !strings.HasPrefix(f.Target, tc.prefix) {
				t.Errorf("targets %v: disk-full on %s, want a %s", tc.targets, f.Target, tc.prefix)
			}
		}
	}
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// TestSplitKeepsEtcdQuorum: a split's minority side is never empty, never
// more than half the targets, and never holds two etcd members (the
// majority side, where the clients are, keeps etcd's quorum).
func TestSplitKeepsEtcdQuorum(t *testing.T) {
	targets := []string{"meta1", "meta2", "meta3", "bookie1", "bookie2", "bookie3", "bookie4", "bookie5", "broker1", "broker2"}
	splits := 0
	for seed := int64(0); seed < 200; seed++ {
		for _, f := range Schedule(seed, 5*time.Minute, []FaultKind{FaultSplit}, targets) {
			splits++
			side := strings.Split(f.Target, "+")
			metas := 0
			for _, n := range side {
				if strings.HasPrefix(n, "meta") {
					metas++
				}
			}
			if len(side) == 0 || len(side) > len(targets)/2 || metas > 1 {
				t.Fatalf("seed %d: minority %v", seed, side)
			}
		}
	}
	if splits == 0 {
		t.Fatal("no splits scheduled")
	}
}

// TestScheduleCutMetaOutlastsSession: every cut from etcd lasts past the
// session TTL and a takeover, and a power loss takes every bookie and
// broker.
func TestScheduleCutMetaOutlastsSession(t *testing.T) {
	targets := []string{"bookie1", "broker1", "broker2"}
	cuts := 0
	for _, f := range Schedule(3, 10*time.Minute, []FaultKind{FaultCutMeta, FaultPower}, targets) {
		switch f.Kind {
		case FaultCutMeta:
			cuts++
			if f.For < cutMetaMin || f.For > faultMax {
				t.Fatalf("%v: want %v to %v", f, cutMetaMin, faultMax)
			}
		case FaultPower:
			if f.Target != powerTarget {
				t.Fatalf("%v: want target %s", f, powerTarget)
			}
		}
	}
	if cuts == 0 {
		t.Fatal("10 minutes without a cut-meta fault")
	}
}

// TestScheduleLagKill: a lag-kill targets a broker and leaves it dead
// past the pause of the others.
func TestScheduleLagKill(t *testing.T) {
	targets := []string{"meta1", "meta2", "meta3", "broker1", "broker2", "broker3"}
	faults := Schedule(3, 5*time.Minute, []FaultKind{FaultLagKill}, targets)
	if len(faults) == 0 {
		t.Fatal("no faults")
	}
	for _, f := range faults {
		if !strings.HasPrefix(f.Target, "broker") || f.For < lagKillMin || f.For > faultMax {
			t.Errorf("%v: want a broker, for %v to %v", f, lagKillMin, faultMax)
		}
	}
}

// TestSchedulePartitionKill: a partition-kill names two different nodes,
// the isolated one and the killed one, and over a few schedules every
// node is drawn as the killed one.
func TestSchedulePartitionKill(t *testing.T) {
	targets := []string{"meta1", "meta2", "meta3", "bookie1", "bookie2", "broker1", "broker2"}
	killed := map[string]bool{}
	for seed := int64(1); seed <= 20; seed++ {
		for _, f := range Schedule(seed, 5*time.Minute, []FaultKind{FaultPartitionKill}, targets) {
			a, b, ok := strings.Cut(f.Target, ">")
			if !ok || a == b || !slices.Contains(targets, a) || !slices.Contains(targets, b) {
				t.Fatalf("%v: want isolated>killed, two different nodes", f)
			}
			killed[b] = true
		}
	}
	if len(killed) != len(targets) {
		t.Fatalf("killed nodes drawn: %v, want all of %v", killed, targets)
	}
}

// TestScheduleOneWay: a one-way fault names a node and a direction, its
// packets out ("node>all") or everyone's packets in ("all>node"), and over
// a few schedules both directions are drawn.
func TestScheduleOneWay(t *testing.T) {
	targets := []string{"meta1", "meta2", "meta3", "bookie1", "broker1", "broker2"}
	seen := map[string]bool{}
	for seed := int64(1); seed <= 10; seed++ {
		for _, f := range Schedule(seed, 3*time.Minute, []FaultKind{FaultOneWay}, targets) {
			from, to, ok := strings.Cut(f.Target, ">")
			switch {
			case ok && to == oneWayAll && slices.Contains(targets, from):
				seen["out"] = true
			case ok && from == oneWayAll && slices.Contains(targets, to):
				seen["in"] = true
			default:
				t.Fatalf("%v: want node>all or all>node", f)
			}
		}
	}
	if !seen["out"] || !seen["in"] {
		t.Fatalf("directions drawn: %v, want both", seen)
	}
}
