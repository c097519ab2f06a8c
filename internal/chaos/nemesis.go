package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"time"
)

// FaultKind is a kind of fault the nemesis injects.
type FaultKind string

const (
	// FaultKill SIGKILLs a process and restarts it on the same data after
	// the fault's duration.
	FaultKill FaultKind = "kill"
	// FaultPause SIGSTOPs a process and SIGCONTs it after the duration: a
	// broker paused past its session is the seed's zombie.
	FaultPause FaultKind = "pause"
	// FaultPartition cuts one node's namespace off from all others (both
	// directions) and reconnects it after the duration.
	FaultPartition FaultKind = "partition"
	// FaultSplit splits the cluster: a minority (at most one etcd member,
	// and a few bookies and brokers) keeps talking among itself but not to
	// the majority, which the harness's clients are on.
	FaultSplit FaultKind = "split"
	// FaultCutMeta cuts one node off from the etcd members (from the other
	// members, for a member) and from nothing else: blackhole routes in its
	// namespace drop its packets to them, and routes in theirs drop their
	// packets to it (one way would let the watch that tells a broker its
	// bundle is gone still arrive). A broker cut off this way loses its
	// session while it keeps serving producers and writing to the bookies
	// until its own lease deadline passes (clientv3 checks once a second):
	// the zombie writer that ledger fencing must stop. Its duration is
	// always longer than the session TTL and a takeover (cutMetaMin).
	FaultCutMeta FaultKind = "cut-meta"
	// FaultPower SIGKILLs every bookie and every broker at the same
	// instant (a power loss of the storage tier; the etcd members keep
	// running) and restarts them after the duration. What a bookie
	// acknowledged is on disk, so nothing acknowledged may be lost; a
	// bookie that acknowledges before writing loses it on every replica.
	// In ISR mode it kills the three brokers, which hold the replicas.
	FaultPower FaultKind = "power"
	// FaultDiskFull fills a bookie's file system (a small one the harness
	// mounted under its data dir when the run's nemesis has this kind) and
	// frees it after the duration: the bookie must turn read-only, or fail
	// its adds, without losing what it acknowledged. In ISR mode it fills a
	// broker's, under its replicas (--isr-data-dir).
	FaultDiskFull FaultKind = "disk-full"
	// FaultLagKill is the seed's K3 on real processes: every broker but
	// the target is paused for lagKillPause (shorter than the session TTL,
	// so they stay registered and in every ISR), while the target, leader
	// of its partitions, goes on appending alone; then it is SIGKILLed and
	// the others resumed, so the controller elects a leader that lacks
	// what the target appended meanwhile. acks=1 acknowledged those records
	// and loses them; acks=all never acknowledged them. The target is
	// restarted after the fault's duration. A composed fault (pause +
	// kill), needed because replication on one machine lags by well under
	// a millisecond and the kernel here has no netem to slow links.
	FaultLagKill FaultKind = "lag-kill"
	// FaultPartitionKill composes two faults: one node's namespace is cut
	// off (as FaultPartition) and, at the same instant, another node is
	// SIGKILLed; both are healed together after the duration. Target is
	// "isolated>killed". A partitioned bookie while a broker dies makes the
	// successor recover ledgers with one replica unreachable; a partitioned
	// broker while an etcd member dies makes its session ride on the two
	// members left.
	FaultPartitionKill FaultKind = "partition-kill"
	// FaultOneWay drops one node's packets in one direction only: its
	// packets to every other node and to the harness's clients (Target
	// "node>all"), or everyone's packets to it ("all>node"), with
	// blackhole routes in the sending namespaces; packets the other way
	// still arrive. Over TCP the node still receives what was sent before
	// the peer's window filled, but gets no acknowledgement through (or
	// sends none): a node that hears the cluster and is not heard (its
	// session expires while it keeps receiving watch events), or one that
	// is heard and hears nothing.
	FaultOneWay FaultKind = "one-way"
)

// oneWayAll names the rest of the cluster in a one-way fault's Target.
const oneWayAll = "all"

// FaultKinds are the kinds implemented, in the order --nemesis lists them.
var FaultKinds = []FaultKind{FaultKill, FaultPause, FaultPartition, FaultSplit, FaultCutMeta, FaultPower, FaultDiskFull, FaultLagKill, FaultPartitionKill, FaultOneWay}

// powerTarget is the Target of a FaultPower.
const powerTarget = "bookies+brokers"

// DefaultFaultKinds are the kinds a run uses unless told otherwise.
var DefaultFaultKinds = []FaultKind{FaultKill, FaultPause, FaultPartition}

// notYetFaults are kinds issue 16 asks for that this harness lacks.
var notYetFaults = map[string]string{
	"clock":      "not yet: clock jumps",
	"clock-jump": "not yet: clock jumps",
}

// ParseNemesis turns "kill,pause,partition" into fault kinds.
func ParseNemesis(list string) ([]FaultKind, error) {
	var kinds []FaultKind
	for _, word := range strings.Split(list, ",") {
		word = strings.TrimSpace(word)
		if word == "" {
			continue
		}
		if why, ok := notYetFaults[word]; ok {
			return nil, fmt.Errorf("--nemesis %s: %s", word, why)
		}
		found := false
		for _, k := range FaultKinds {
			if string(k) == word {
				kinds = append(kinds, k)
				found = true
			}
		}
		if !found {
			names := make([]string, len(FaultKinds))
			for i, k := range FaultKinds {
				names[i] = string(k)
			}
			return nil, fmt.Errorf("--nemesis %q: want some of %s", word, strings.Join(names, ", "))
		}
	}
	if len(kinds) == 0 {
		return nil, fmt.Errorf("--nemesis: no fault kind given")
	}
	return kinds, nil
}

// Fault is one scheduled fault: Kind on Target from At (since the workload
// started) for For, then healed.
type Fault struct {
	At     time.Duration
	Kind   FaultKind
	Target string
	For    time.Duration
}

func (f Fault) String() string {
	return fmt.Sprintf("%s %s for %v", f.Kind, f.Target, f.For.Round(100*time.Millisecond))
}

// Bounds of the schedule: a quiet warm-up, a gap between faults so the
// cluster can recover (and the workload be seen to recover), and each
// fault's duration.
const (
	scheduleWarmup = 5 * time.Second
	gapMin         = 3 * time.Second
	gapMax         = 8 * time.Second
	// faultMax is longer than the brokers' session TTL, so pauses and
	// partitions of a broker sometimes make it a zombie whose bundles move.
	faultMin = 2 * time.Second
	faultMax = 10 * time.Second
	// scheduleTail leaves time after the last fault before the workload
	// stops.
	scheduleTail = 3 * time.Second
	// cutMetaMin: a cut from etcd lasts past the session TTL (4s) and a
	// takeover, or it makes no zombie.
	cutMetaMin = 6 * time.Second
	// lagKillPause is how long a lag-kill pauses the other brokers before
	// it kills its target: well under the session TTL (4s), so they stay
	// in the ISR and one of them is elected. lagKillMin leaves the target
	// dead for a while after it.
	lagKillPause = 2 * time.Second
	lagKillMin   = 4 * time.Second
)

// Schedule draws the faults of a run of the given duration from seed: the
// same seed, kinds and targets give the same schedule, so a failing run can
// be replayed. Faults come one at a time (composition is later work), so at
// most one etcd member, bookie or broker is out at once.
func Schedule(seed int64, duration time.Duration, kinds []FaultKind, targets []string) []Fault {
	rng := rand.New(rand.NewPCG(uint64(seed), 0x6368616f73)) // "chaos"
	targets = append([]string(nil), targets...)
	sort.Strings(targets)
	between := func(lo, hi time.Duration) time.Duration {
		return lo + time.Duration(rng.Int64N(int64(hi-lo)+1))
	}
	var faults []Fault
	at := scheduleWarmup
	for {
		start := at + between(gapMin, gapMax)
		f := Fault{At: start, Kind: kinds[rng.IntN(len(kinds))], Target: targets[rng.IntN(len(targets))], For: between(faultMin, faultMax)}
		switch f.Kind {
		case FaultSplit:
			f.Target = strings.Join(minority(rng, targets), "+")
		case FaultCutMeta:
			// The same draws as every other kind (so adding this kind kept
			// the schedules of the others), mapped into [cutMetaMin, faultMax].
			f.For = cutMetaMin + time.Duration(float64(f.For-faultMin)*float64(faultMax-cutMetaMin)/float64(faultMax-faultMin))
		case FaultLagKill:
			f.For = lagKillMin + time.Duration(float64(f.For-faultMin)*float64(faultMax-lagKillMin)/float64(faultMax-faultMin))
			var brokers []string
			for _, t := range targets {
				if strings.HasPrefix(t, string(RoleBroker)) {
					brokers = append(brokers, t)
				}
			}
			if len(brokers) > 0 {
				f.Target = brokers[rng.IntN(len(brokers))]
			}
		case FaultPower:
			f.Target = powerTarget
		case FaultOneWay:
			if rng.IntN(2) == 0 {
				f.Target += ">" + oneWayAll // its packets are dropped
			} else {
				f.Target = oneWayAll + ">" + f.Target // packets to it are dropped
			}
		case FaultPartitionKill:
			// A second node, other than the isolated one.
			if len(targets) > 1 {
				other := targets[rng.IntN(len(targets)-1)]
				if other == f.Target {
					other = targets[len(targets)-1]
				}
				f.Target += ">" + other
			}
		case FaultDiskFull:
			// Only the nodes that keep data have a disk the harness can
			// fill: bookies, or brokers when there are none (ISR mode). A
			// draw only schedules with this kind make.
			var holders []string
			for _, role := range []Role{RoleBookie, RoleBroker} {
				for _, t := range targets {
					if strings.HasPrefix(t, string(role)) {
						holders = append(holders, t)
					}
				}
				if len(holders) > 0 {
					break
				}
			}
			if len(holders) > 0 {
				f.Target = holders[rng.IntN(len(holders))]
			}
		}
		if start+f.For > duration-scheduleTail {
			return faults
		}
		faults = append(faults, f)
		at = start + f.For
	}
}

// minority draws the minority side of a split from targets: one to half of
// them, at most one etcd member, so the majority side keeps etcd's quorum.
func minority(rng *rand.Rand, targets []string) []string {
	order := rng.Perm(len(targets))
	size := 1 + rng.IntN(max(1, len(targets)/2))
	var side []string
	metas := 0
	for _, i := range order {
		if len(side) == size {
			break
		}
		if strings.HasPrefix(targets[i], string(RoleMeta)) {
			if metas == 1 {
				continue
			}
			metas++
		}
		side = append(side, targets[i])
	}
	sort.Strings(side)
	return side
}

// nemesis runs a schedule against a cluster.
type nemesis struct {
	cluster *cluster
	history *History
	logf    func(string, ...any)
}

// FaultRecord is a fault as it happened.
type FaultRecord struct {
	Fault
	Started, Healed time.Time
	// Skipped: the fault could not be injected (a pause of a process that
	// had just stopped by itself); Err says why. It is not counted.
	Skipped bool
	Err     string
}

// run injects each fault at its time and heals it after its duration; on
// ctx's end it heals the current fault and returns what it did.
func (m *nemesis) run(ctx context.Context, start time.Time, faults []Fault) []FaultRecord {
	var done []FaultRecord
	for _, f := range faults {
		if !sleepUntil(ctx, start.Add(f.At)) {
			return done
		}
		rec := FaultRecord{Fault: f, Started: time.Now()}
		m.history.Add(Event{Kind: KindFaultStart, Fault: f.String()})
		m.logf("fault: %s", f)
		heal, err := m.inject(ctx, f)
		if err != nil {
			rec.Skipped = true
			rec.Err = err.Error()
			m.logf("fault %s: %v", f, err)
		}
		sleepUntil(ctx, rec.Started.Add(f.For)) // heal early when the run is interrupted
		if heal != nil {
			// Healing must happen even when ctx is done: a fresh context.
			healCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			if err := heal(healCtx); err != nil && rec.Err == "" {
				rec.Err = "heal: " + err.Error()
				m.logf("heal %s: %v", f, err)
			}
			cancel()
		}
		rec.Healed = time.Now()
		m.history.Add(Event{Kind: KindFaultEnd, Fault: f.String()})
		done = append(done, rec)
		if ctx.Err() != nil {
			return done
		}
	}
	return done
}

// inject starts f and returns what heals it.
func (m *nemesis) inject(ctx context.Context, f Fault) (func(context.Context) error, error) {
	switch f.Kind {
	case FaultSplit:
		side := strings.Split(f.Target, "+")
		if err := m.cluster.net.split(ctx, side); err != nil {
			return nil, err
		}
		return func(ctx context.Context) error { return m.cluster.net.join(ctx, side) }, nil
	case FaultPower:
		victims := m.cluster.roles(RoleBookie, RoleBroker)
		m.cluster.killAll(victims)
		return func(context.Context) error { return m.cluster.restartAll(victims) }, nil
	case FaultOneWay:
		from, to, _ := strings.Cut(f.Target, ">")
		outbound := to == oneWayAll
		name := to
		if outbound {
			name = from
		}
		n := m.cluster.node(name)
		if n == nil || (from != oneWayAll && to != oneWayAll) {
			return nil, fmt.Errorf("one-way %q: want node>%s or %s>node", f.Target, oneWayAll, oneWayAll)
		}
		if err := m.cluster.oneWay(ctx, n, outbound); err != nil {
			return nil, err
		}
		return func(ctx context.Context) error { return m.cluster.twoWay(ctx, n, outbound) }, nil
	case FaultPartitionKill:
		isolated, killed, ok := strings.Cut(f.Target, ">")
		a, b := m.cluster.node(isolated), m.cluster.node(killed)
		if !ok || a == nil || b == nil || a == b {
			return nil, fmt.Errorf("partition-kill %q: want two nodes, isolated>killed", f.Target)
		}
		if err := m.cluster.net.isolate(ctx, a.name); err != nil {
			return nil, err
		}
		m.cluster.kill(b)
		return func(ctx context.Context) error {
			err := m.cluster.net.connect(ctx, a.name)
			if rerr := m.cluster.restart(b); err == nil {
				err = rerr
			}
			return err
		}, nil
	}
	n := m.cluster.node(f.Target)
	if n == nil {
		return nil, fmt.Errorf("no node %q", f.Target)
	}
	switch f.Kind {
	case FaultKill:
		m.cluster.kill(n)
		return func(context.Context) error { return m.cluster.restart(n) }, nil
	case FaultPause:
		if err := m.cluster.pause(n); err != nil {
			return nil, err
		}
		return func(context.Context) error { return m.cluster.resume(n) }, nil
	case FaultPartition:
		if err := m.cluster.net.isolate(ctx, n.name); err != nil {
			return nil, err
		}
		return func(ctx context.Context) error { return m.cluster.net.connect(ctx, n.name) }, nil
	case FaultDiskFull:
		if !m.cluster.hasSmallDisk(n) {
			return nil, fmt.Errorf("%s has no small disk to fill (only bookies do, or brokers in ISR mode, in runs whose nemesis has disk-full)", n.name)
		}
		if err := fillDisk(n.dir); err != nil {
			emptyDisk(n.dir)
			return nil, err
		}
		return func(context.Context) error { return emptyDisk(n.dir) }, nil
	case FaultLagKill:
		if n.role != RoleBroker {
			return nil, fmt.Errorf("%s is not a broker (lag-kill kills a leader whose followers lag)", n.name)
		}
		var others []*node
		for _, o := range m.cluster.roles(RoleBroker) {
			if o != n {
				others = append(others, o)
			}
		}
		for i, o := range others {
			if err := m.cluster.pause(o); err != nil {
				for _, p := range others[:i] {
					m.cluster.resume(p)
				}
				return nil, err
			}
		}
		sleepUntil(ctx, time.Now().Add(lagKillPause))
		m.cluster.kill(n)
		var firstErr error
		for _, o := range others {
			if err := m.cluster.resume(o); err != nil && firstErr == nil {
				firstErr = err
			}
		}
		return func(context.Context) error { return m.cluster.restart(n) }, firstErr
	case FaultCutMeta:
		if err := m.cluster.cutMeta(ctx, n); err != nil {
			return nil, err
		}
		return func(ctx context.Context) error { return m.cluster.joinMeta(ctx, n) }, nil
	}
	return nil, fmt.Errorf("unknown fault kind %q", f.Kind)
}

// sleepUntil waits until t or ctx's end, reporting whether t was reached.
func sleepUntil(ctx context.Context, t time.Time) bool {
	timer := time.NewTimer(time.Until(t))
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-timer.C:
		return true
	}
}
