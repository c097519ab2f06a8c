package isr_test

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"

	"quire/internal/isr"
)

// TestRandomDurable drives the script harness with random commands under
// the durable configuration (acks=all, min.insync.replicas=2, unclean
// election off, every record flushed, at most one broker down at a time):
// random deliveries (per-link order kept), drops, ticks, crashes, restarts,
// session expiries, cuts and consumer reads. After every command the
// harness's checks run (at most one leader per epoch, no record acknowledged
// with acks=all or read by a consumer missing from the leader's log), and
// so do, with -tags invariants, the cores' own. It also checks that every
// running follower of the current leader epoch agrees with the leader below
// its HW, and that the partition ends with a leader whose HW covers every
// acks=all record. A failure prints the seed and the commands that led to
// it.
func TestRandomDurable(t *testing.T) {
	seeds := 300
	if testing.Short() {
		seeds = 30
	}
	if n, err := strconv.Atoi(os.Getenv("ISR_SEEDS")); err == nil {
		seeds = n // ISR_SEEDS=20000 for a longer search
	}
	reached := map[string]int{}
	for seed := 1; seed <= seeds; seed++ {
		if problem, history := runRandom(t, uint64(seed), 400, "", reached); problem != "" {
			t.Fatalf("seed %d: %s\nhistory:\n%s", seed, problem, history)
		}
	}
	// A clean run must not come from nothing happening: every situation
	// below was reached.
	for _, what := range reachedSituations {
		if reached[what] == 0 {
			t.Errorf("no seed reached %q", what)
		}
	}
	t.Logf("situations reached over %d seeds: %v", seeds, reached)
}

// reachedSituations are output fragments TestRandomDurable must see.
var reachedSituations = []string{
	"elected", "truncated", "shrink", "expand", "acked-all", "NOT_ENOUGH_REPLICAS", "NOT_ENOUGH_REPLICAS_AFTER_APPEND",
	"FENCED_LEADER_EPOCH", "INVALID_UPDATE_VERSION", "diverging", "REQUEST_TIMED_OUT",
}

// TestRandomLossyDurable: the durable configuration with crashes that lose
// the page cache, one broker at a time: no acks=all record is lost.
func TestRandomLossyDurable(t *testing.T) {
	seeds := 300
	if testing.Short() {
		seeds = 30
	}
	if n, err := strconv.Atoi(os.Getenv("ISR_SEEDS")); err == nil {
		seeds = n
	}
	for seed := 1; seed <= seeds; seed++ {
		if problem, history := runRandomConfig(t, uint64(seed), 400, "", "recovery=none", nil); problem != "" {
			t.Fatalf("seed %d: %s\nhistory:\n%s", seed, problem, history)
		}
	}
}

// TestRandomLossyRecovery: the lossy runs with unclean recovery Balanced
// (Kafka's default). Recovery may lose what every replica lost with its page
// cache, as an unclean election does, so acknowledged records are not
// checked after it; everything else is (one leader per epoch, the cores'
// invariants), and recovery must have happened.
func TestRandomLossyRecovery(t *testing.T) {
	seeds := 300
	if testing.Short() {
		seeds = 30
	}
	if n, err := strconv.Atoi(os.Getenv("ISR_SEEDS")); err == nil {
		seeds = n
	}
	reached := map[string]int{}
	for seed := 1; seed <= seeds; seed++ {
		if problem, history := runRandomConfig(t, uint64(seed), 400, "", "recovery=balanced", reached); problem != "" {
			t.Fatalf("seed %d: %s\nhistory:\n%s", seed, problem, history)
		}
	}
	if reached["unclean recovery"] == 0 {
		t.Errorf("no seed reached an unclean recovery: %v", reached)
	}
	t.Logf("situations reached over %d seeds: %v", seeds, reached)
}

// TestRandomReassign: the durable runs on four brokers with partition
// reassignments among them (moves, growth to four replicas, shrinks to two,
// replacements of one in progress, cancels) drawn between the crashes,
// session expiries, cuts and writes: every check of TestRandomDurable
// holds, and with -tags invariants so do the controller's reassignment
// invariants (completion only with every adding replica in the ISR, no
// adding replica elected before it joined). Reassignments must have
// started, completed (some moving the leader out) and been cancelled.
func TestRandomReassign(t *testing.T) {
	seeds := 300
	if testing.Short() {
		seeds = 30
	}
	if n, err := strconv.Atoi(os.Getenv("ISR_SEEDS")); err == nil {
		seeds = n
	}
	reached := map[string]int{}
	for seed := 1; seed <= seeds; seed++ {
		if problem, history := runRandomWith(t, uint64(seed), 400, randomOptions{reassign: true}, reached); problem != "" {
			t.Fatalf("seed %d: %s\nhistory:\n%s", seed, problem, history)
		}
	}
	for _, what := range append(reachedSituations[:5:5], reassignSituations...) {
		if reached[what] == 0 {
			t.Errorf("no seed reached %q", what)
		}
	}
	t.Logf("situations reached over %d seeds: %v", seeds, reached)
}

// reassignSituations are output fragments TestRandomReassign must see.
var reassignSituations = []string{
	"reassignment p1 started", "reassignment p1 completed", "reassignment p1 cancelled", "opens a replica", "deletes its replica",
	"INVALID_REPLICA_ASSIGNMENT",
}

// TestRandomCatchesMutants: the same random runs find each mutant (the
// checks have been seen failing).
func TestRandomCatchesMutants(t *testing.T) {
	for _, mutant := range isr.MutantNames {
		t.Run(mutant, func(t *testing.T) {
			for seed := 1; seed <= 500; seed++ {
				if problem, _ := runRandom(t, uint64(seed), 400, mutant, nil); problem != "" {
					t.Logf("seed %d: %s", seed, problem)
					return
				}
			}
			t.Errorf("mutant %s not caught in 500 seeds", mutant)
		})
	}
}

// runRandom runs one seed and returns the first problem found ("" if none)
// and the commands it ran.
func runRandom(t *testing.T, seed uint64, steps int, mutant string, reached map[string]int) (problem, history string) {
	return runRandomConfig(t, seed, steps, mutant, "", reached)
}

// runRandomConfig is runRandom; lossy (a non-empty recovery, the cluster's
// recovery= option): nothing is flushed but by the OS (a crash loses the
// page cache) and brokers come back from unclean shutdowns, and the
// partition may end without a leader (the durable configuration, with
// recovery=none, chooses unavailability over loss).
func runRandomConfig(t *testing.T, seed uint64, steps int, mutant string, recovery string, reached map[string]int) (problem, history string) {
	return runRandomWith(t, seed, steps, randomOptions{mutant: mutant, recovery: recovery}, reached)
}

// randomOptions are what a random run varies: a mutant, the lossy
// configuration's recovery strategy, and reassignments (four brokers
// instead of three; partition p1 starts on the first three).
type randomOptions struct {
	mutant, recovery string
	reassign         bool
}

func runRandomWith(t *testing.T, seed uint64, steps int, opts randomOptions, reached map[string]int) (problem, history string) {
	mutant, recovery := opts.mutant, opts.recovery
	lossy := recovery != ""
	brokers := 3
	if opts.reassign {
		brokers = 4
	}
	rng := rand.New(rand.NewPCG(seed, 0))
	e := newScriptEnv()
	var lines []string
	cmd := func(line string) {
		if problem != "" {
			return
		}
		lines = append(lines, line)
		out := e.run(t, parseCommand(line))
		for _, what := range append(append(reachedSituations, "unclean recovery"), reassignSituations...) {
			if reached != nil && strings.Contains(out, what) {
				reached[what]++
			}
		}
		if len(e.broken) > 0 {
			problem = e.broken[0]
		} else if msg := e.checkPrefix(); msg != "" {
			problem = msg
		}
	}
	cluster := fmt.Sprintf("cluster brokers=%d min-isr=2 lag=5s flush-messages=1 push-every=2s", brokers)
	crash, restart := "crash %s", "restart %s"
	if lossy {
		cluster = fmt.Sprintf("cluster brokers=%d min-isr=2 lag=5s push-every=2s %s", brokers, recovery)
		crash, restart = "crash %s lose-unflushed", "restart %s unclean"
	}
	if mutant != "" {
		cluster += " mutant=" + mutant
	}
	cmd(cluster)
	cmd("create-partition p1 replicas=(1,2,3)")
	down, expired := "", ""
	broker := func() int { return 1 + rng.IntN(brokers) }
	for range steps {
		if opts.reassign && rng.IntN(100) < 4 {
			cmd(randomReassign(rng, brokers))
			continue
		}
		switch x := rng.IntN(100); {
		case x < 45:
			if len(e.net) == 0 {
				cmd("tick d=500ms")
				continue
			}
			m := e.net[rng.IntN(len(e.net))]
			verb := ""
			if rng.IntN(20) == 0 {
				verb = " drop"
			}
			cmd(fmt.Sprintf("deliver from=%s to=%s n=1%s", m.from, m.to, verb))
		case x < 58:
			cmd(fmt.Sprintf("tick d=%dms", 100*(1+rng.IntN(20))))
		case x < 75:
			acks := []string{"all", "all", "1"}[rng.IntN(3)]
			cmd(fmt.Sprintf("produce p1 to=%d acks=%s n=%d", broker(), acks, 1+rng.IntN(3)))
		case x < 80:
			cmd(fmt.Sprintf("consume p1 from=%d", broker()))
		case x < 84:
			if down == "" && expired == "" {
				down = fmt.Sprint(broker())
				cmd(fmt.Sprintf(crash, down))
			}
		case x < 88:
			if down != "" {
				cmd(fmt.Sprintf(restart, down))
				down = ""
			}
		case x < 90:
			// A zombie: the session ends, the broker runs on, cut off from
			// the controller for a while.
			if down == "" && expired == "" {
				expired = fmt.Sprint(broker())
				cmd("expire " + expired)
				cmd("cut " + expired + " c")
			}
		case x < 92:
			if expired != "" {
				cmd("heal " + expired + " c")
				cmd("register " + expired)
				expired = ""
			}
		case x < 95:
			a, b := broker(), broker()
			if a != b && down == "" && expired == "" {
				cmd(fmt.Sprintf("cut %d %d", a, b))
			}
		case x < 98:
			if expired == "" {
				cmd("heal")
			}
		default:
			cmd("stabilize max=100000")
		}
	}
	cmd("heal")
	if expired != "" {
		cmd("register " + expired)
	}
	if down != "" {
		cmd(fmt.Sprintf(restart, down))
	}
	for range 30 {
		cmd("tick d=1s")
		cmd("stabilize max=100000")
	}
	if problem != "" {
		return problem, strings.Join(lines, "\n")
	}
	// Liveness, loosely: with everyone back and the network healed, the
	// partition has a leader and its HW covers every acknowledged record.
	n, r := e.leaderOf("p1")
	if (n == nil && lossy) || e.unclean["p1"] {
		return "", ""
	}
	if n == nil {
		return "no leader at the end\n" + e.run(t, parseCommand("print")), strings.Join(lines, "\n")
	}
	for _, a := range e.acked["p1"] {
		if a.acks == isr.AcksAll && a.offset >= r.HighWatermark() {
			return fmt.Sprintf("acks=all record %s at %d above the final HW %d", a.value, a.offset, r.HighWatermark()), strings.Join(lines, "\n")
		}
	}
	return "", ""
}

// randomReassign draws a reassignment of p1 among brokers 1..n: a cancel
// now and then, otherwise a target of two to n distinct brokers in random
// order (a move, growth, a shrink or a reordering, depending on the
// record), sometimes with a broker twice (refused).
func randomReassign(rng *rand.Rand, n int) string {
	if rng.IntN(5) == 0 {
		return "reassign p1 cancel"
	}
	ids := rng.Perm(n)[:2+rng.IntN(n-1)]
	if rng.IntN(20) == 0 {
		ids = append(ids, ids[0])
	}
	parts := make([]string, len(ids))
	for i, id := range ids {
		parts[i] = fmt.Sprint(id + 1)
	}
	return "reassign p1 replicas=(" + strings.Join(parts, ",") + ")"
}

// parseCommand turns "cmd a=1 b=(x,y) flag" into TestData.
func parseCommand(line string) *datadriven.TestData {
	fields := strings.Fields(line)
	d := &datadriven.TestData{Cmd: fields[0], Pos: "random"}
	for _, f := range fields[1:] {
		k, v, ok := strings.Cut(f, "=")
		arg := datadriven.CmdArg{Key: k}
		if ok {
			v = strings.TrimSuffix(strings.TrimPrefix(v, "("), ")")
			arg.Vals = strings.Split(v, ",")
		}
		d.CmdArgs = append(d.CmdArgs, arg)
	}
	return d
}

// checkPrefix reports a running follower of the leader's epoch whose log
// below its HW differs from the leader's.
func (e *scriptEnv) checkPrefix() string {
	for _, part := range sortedKeys(e.store) {
		ln, lr := e.leaderOf(part)
		if ln == nil || e.unclean[part] {
			// After an unclean election a follower's HW may cover records
			// the new leader never had, until it truncates (as in Kafka).
			continue
		}
		ll := ln.logs[part]
		for _, n := range e.nodes {
			r := n.replicas[part]
			if n == ln || !n.up || r == nil || r.Role() != isr.RoleFollower || r.LeaderEpoch() != lr.LeaderEpoch() {
				continue
			}
			fl := n.logs[part]
			for o := int64(0); o < r.HighWatermark(); o++ {
				a, ea, _ := fl.Record(o)
				b, eb, ok := ll.Record(o)
				if !ok || !bytes.Equal(a, b) || ea != eb {
					return fmt.Sprintf("%s: follower %d's log differs from leader %d's at offset %d below its HW %d", part, n.id, ln.id, o, r.HighWatermark())
				}
			}
		}
	}
	return ""
}

// TestReplay runs the commands of a file named by ISR_REPLAY (one per line,
// as TestRandomDurable prints its history) and prints every command's
// output: a failing seed, readable.
//
//	ISR_REPLAY=/tmp/history.txt go test ./internal/isr/ -run TestReplay -v
func TestReplay(t *testing.T) {
	path := os.Getenv("ISR_REPLAY")
	if path == "" {
		t.Skip("ISR_REPLAY not set")
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	e := newScriptEnv()
	for _, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		out := e.run(t, parseCommand(line))
		fmt.Printf("%s\n%s\n", line, out)
	}
}
