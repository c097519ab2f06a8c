package sim

import (
	"fmt"
	"sort"
	"strings"
	"time"
)

// quorumChoices are the (E, Qw, Qa) settings a run picks from.
var quorumChoices = [][3]int{{3, 3, 2}, {3, 2, 2}, {5, 3, 2}, {4, 3, 3}, {3, 3, 3}, {5, 5, 3}, {4, 2, 2}, {5, 3, 3}}

// scenario is everything random about one run, drawn up front from the seed.
type scenario struct {
	ensemble, writeQuorum, ackQuorum int
	bookies, zones                   int

	entries   int
	addGapMax time.Duration

	net    netConfig
	bookie bookieConfig
	meta   metaConfig

	// The writer's pause: after its pauseAfterEntry-th add it freezes for
	// pauseFor. In a blackout every link between it and the bookies is cut
	// for as long (what it had in flight is lost).
	pause           bool
	pauseAfterEntry int
	pauseFor        time.Duration
	blackout        bool
	tickCatchUp     bool
	backlog         backlogOrder

	recoverers           int
	recoverersAfterPause []delayedStart // relative to the pause
	recoverersAt         []delayedStart // absolute
	// recovererPauses freeze a recoverer part-way (after: from its start).
	recovererPauses []recovererPause

	readers int
	faults  []fault
	// reader is the readers' range configuration, and readerFaults the
	// faults of the reading phase (at: after every recovery finished).
	reader       readerConfig
	readerFaults []fault

	// explicitLacTicks is the writer's ExplicitLacTicks (0: off).
	explicitLacTicks int
	// idleAfter: after its n-th add the writer goes quiet for this long
	// before the next (a producer with nothing to send), where an idle
	// writer's explicit LAC goes out with entries still to come.
	idleAfter map[int]time.Duration
}

// readerConfig is what the readers' cores are configured with (0: the core's default).
type readerConfig struct {
	rangesInFlight, rangeEntries, rangeBytes int
}

type recovererPause struct {
	index      int
	after, dur time.Duration
}

type delayedStart struct {
	index int
	delay time.Duration
}

type faultKind int

const (
	faultCrash         faultKind = iota + 1 // bookie crashes, restarts after dur
	faultIsolate                            // every link to and from a bookie cut
	faultCutLink                            // both directions between an actor and a bookie
	faultMetaOutage                         // the metadata store answers nothing but ErrUnavailable
	faultMetaPartition                      // one actor cannot reach the metadata store
	faultReadOnly                           // a bookie out of space: reads served, adds refused
	faultAllReadOnly                        // every bookie out of space at once
)

type fault struct {
	kind   faultKind
	at     time.Duration
	dur    time.Duration
	node   string // bookie or actor
	other  string // the other end of a cut link
	bookie int
}

func (f fault) String() string {
	switch f.kind {
	case faultCrash:
		return fmt.Sprintf("crash b%d at %v for %v", f.bookie, f.at, f.dur)
	case faultIsolate:
		return fmt.Sprintf("isolate b%d at %v for %v", f.bookie, f.at, f.dur)
	case faultCutLink:
		return fmt.Sprintf("cut %s<->%s at %v for %v", f.node, f.other, f.at, f.dur)
	case faultMetaOutage:
		return fmt.Sprintf("meta outage at %v for %v", f.at, f.dur)
	case faultMetaPartition:
		return fmt.Sprintf("cut %s<->meta at %v for %v", f.node, f.at, f.dur)
	case faultReadOnly:
		return fmt.Sprintf("b%d read-only at %v for %v", f.bookie, f.at, f.dur)
	case faultAllReadOnly:
		return fmt.Sprintf("every bookie read-only at %v for %v", f.at, f.dur)
	}
	return "?"
}

func pick[T any](e *engine, xs []T) T { return xs[e.rng.IntN(len(xs))] }

// newScenario draws a run's options and fault schedule.
func newScenario(e *engine) scenario {
	var sc scenario
	q := pick(e, quorumChoices)
	sc.ensemble, sc.writeQuorum, sc.ackQuorum = q[0], q[1], q[2]
	sc.bookies = sc.ensemble + max(e.intn(0, 4), e.intn(0, 4)) // skewed towards spares for replacements
	// One zone per ensemble member (sometimes one more): zone-aware placement
	// of E members whose every write quorum spans distinct zones then always
	// exists, and a lost bookie is replaced from its own zone when it can be.
	sc.zones = sc.ensemble
	if sc.bookies > sc.ensemble && e.chance(0.3) {
		sc.zones++
	}
	sc.entries = e.intn(20, 200)
	sc.addGapMax = pick(e, []time.Duration{time.Millisecond, 3 * time.Millisecond, 10 * time.Millisecond, 20 * time.Millisecond})

	sc.net.delayMin = e.between(50*time.Microsecond, time.Millisecond)
	sc.net.delayMax = sc.net.delayMin + pick(e, []time.Duration{500 * time.Microsecond, 2 * time.Millisecond, 10 * time.Millisecond, 30 * time.Millisecond})
	if e.chance(0.5) {
		sc.net.slowProb = pick(e, []float64{0.002, 0.01, 0.03})
		sc.net.slowMin, sc.net.slowMax = 20*time.Millisecond, pick(e, []time.Duration{100 * time.Millisecond, 400 * time.Millisecond})
	}
	if e.chance(0.6) {
		sc.net.lossProb = pick(e, []float64{0.001, 0.005, 0.02})
	}

	sc.bookie.fsyncMin = e.between(100*time.Microsecond, time.Millisecond)
	sc.bookie.fsyncMax = sc.bookie.fsyncMin + pick(e, []time.Duration{500 * time.Microsecond, 3 * time.Millisecond, 15 * time.Millisecond})
	if e.chance(0.3) {
		sc.bookie.failProb = pick(e, []float64{0.001, 0.005})
	}
	sc.bookie.readUnsynced = e.chance(0.5)

	sc.meta.delayMin = e.between(200*time.Microsecond, 2*time.Millisecond)
	sc.meta.delayMax = sc.meta.delayMin + pick(e, []time.Duration{time.Millisecond, 5 * time.Millisecond, 20 * time.Millisecond})
	if e.chance(0.4) {
		sc.meta.ambiguousProb = pick(e, []float64{0.05, 0.2})
	}

	// The zombie: usually the writer freezes part-way, while adds are in
	// flight, for long enough that a new owner recovers the ledger.
	sc.pause = e.chance(0.85)
	sc.pauseAfterEntry = e.intn(sc.entries/5, sc.entries*4/5)
	sc.pauseFor = e.between(200*time.Millisecond, 3*time.Second)
	sc.blackout = e.chance(0.5)
	sc.tickCatchUp = e.chance(0.75)
	sc.backlog = backlogOrder(e.intn(0, 2))

	sc.recoverers = 1
	if e.chance(0.4) {
		sc.recoverers = 2
	}
	addSpan := time.Duration(sc.entries) * sc.addGapMax / 2
	for i := 0; i < sc.recoverers; i++ {
		switch {
		case i == 1 && e.chance(0.4): // concurrent with the first recovery
			first := sc.startOf(0)
			sc.setStart(i, first.afterPause, first.delay+e.between(0, 20*time.Millisecond))
		case sc.pause && e.chance(0.75): // while the writer is frozen
			sc.setStart(i, true, e.between(10*time.Millisecond, sc.pauseFor*3/4))
		default: // at some point while the writer is active
			sc.setStart(i, false, e.between(0, addSpan+100*time.Millisecond))
		}
	}
	for i := 0; i < sc.recoverers; i++ {
		if sc.recoverers == 2 && e.chance(0.3) {
			sc.recovererPauses = append(sc.recovererPauses, recovererPause{index: i,
				after: e.between(0, 60*time.Millisecond), dur: e.between(50*time.Millisecond, 1500*time.Millisecond)})
		}
	}
	sc.readers = 2

	horizon := addSpan + sc.pauseFor + 500*time.Millisecond
	for range e.intn(0, 3) {
		f := fault{kind: faultCrash, bookie: e.intn(0, sc.bookies-1), at: e.between(0, horizon), dur: e.between(50*time.Millisecond, 2*time.Second)}
		sc.faults = append(sc.faults, f)
	}
	for range e.intn(0, 3) {
		f := fault{at: e.between(0, horizon), dur: e.between(20*time.Millisecond, time.Second)}
		if e.chance(0.5) {
			f.kind, f.bookie = faultIsolate, e.intn(0, sc.bookies-1)
		} else {
			f.kind, f.node, f.other = faultCutLink, pick(e, []string{"writer", "rec1", "rec2"}), fmt.Sprintf("b%d", e.intn(0, sc.bookies-1))
		}
		sc.faults = append(sc.faults, f)
	}
	for range e.intn(0, 2) {
		sc.faults = append(sc.faults, fault{kind: faultMetaOutage, at: e.between(0, horizon), dur: e.between(10*time.Millisecond, 300*time.Millisecond)})
	}
	if e.chance(0.3) {
		sc.faults = append(sc.faults, fault{kind: faultMetaPartition, node: pick(e, []string{"writer", "rec1", "rec2"}), at: e.between(0, horizon), dur: e.between(10*time.Millisecond, 500*time.Millisecond)})
	}
	// Drawn last, so that the draws above (and the scenario each seed had
	// before explicit LAC existed) stay as they were. From every tick (the
	// writer's adds are at most 20 ms apart: updates all along) to only
	// after long quiet (a pause, the end).
	sc.explicitLacTicks = pick(e, []int{0, 1, 2, 5, 20})
	if e.chance(0.6) {
		sc.idleAfter = map[int]time.Duration{}
		for range e.intn(1, 3) {
			sc.idleAfter[e.intn(1, sc.entries-1)] = e.between(50*time.Millisecond, 600*time.Millisecond)
		}
	}
	// The readers' ranges, from one entry per request to the production
	// default (one range for the whole ledger); small byte bounds make the
	// bookies answer short (payloads are 17..64 bytes framed). Then faults
	// while they read: a bookie crashes or is cut off mid-range.
	sc.reader.rangeEntries = pick(e, []int{1, 2, 5, 16, 0})
	sc.reader.rangesInFlight = pick(e, []int{1, 2, 0})
	sc.reader.rangeBytes = pick(e, []int{0, 0, 100, 400})
	for range e.intn(0, 2) {
		f := fault{at: e.between(0, 250*time.Millisecond), dur: e.between(20*time.Millisecond, time.Second), bookie: e.intn(0, sc.bookies-1)}
		f.kind = faultCrash
		if e.chance(0.4) {
			f.kind = faultIsolate
		}
		sc.readerFaults = append(sc.readerFaults, f)
	}
	// Full disks (drawn last, as above): a bookie, or every bookie at
	// once, turns read-only for a while. A recovery then meets bookies
	// that refuse its copies of entries they do not hold.
	if e.chance(0.3) {
		f := fault{kind: faultReadOnly, bookie: e.intn(0, sc.bookies-1), at: e.between(0, horizon), dur: e.between(50*time.Millisecond, 2*time.Second)}
		if e.chance(0.6) {
			f.kind = faultAllReadOnly
			if sc.pause && e.chance(0.7) { // as the writer freezes, before the recoveries
				f.at = -1
			}
		}
		sc.faults = append(sc.faults, f)
	}
	return sc
}

// recoveryStart is when recoverer i starts: after the pause began, or at an absolute time.
type recoveryStart struct {
	afterPause bool
	delay      time.Duration
}

func (sc *scenario) setStart(i int, afterPause bool, d time.Duration) {
	if afterPause {
		sc.recoverersAfterPause = append(sc.recoverersAfterPause, delayedStart{index: i, delay: d})
	} else {
		sc.recoverersAt = append(sc.recoverersAt, delayedStart{index: i, delay: d})
	}
}

func (sc *scenario) startOf(i int) recoveryStart {
	for _, d := range sc.recoverersAfterPause {
		if d.index == i {
			return recoveryStart{afterPause: true, delay: d.delay}
		}
	}
	for _, d := range sc.recoverersAt {
		if d.index == i {
			return recoveryStart{delay: d.delay}
		}
	}
	return recoveryStart{}
}

// String is the one-line summary printed with a run's trace.
func (sc *scenario) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "E=%d Qw=%d Qa=%d bookies=%d zones=%d entries=%d addGap<=%v", sc.ensemble, sc.writeQuorum, sc.ackQuorum, sc.bookies, sc.zones, sc.entries, sc.addGapMax)
	fmt.Fprintf(&b, " net=%v..%v loss=%g slow=%g fsync=%v..%v fail=%g readUnsynced=%v", sc.net.delayMin, sc.net.delayMax, sc.net.lossProb, sc.net.slowProb, sc.bookie.fsyncMin, sc.bookie.fsyncMax, sc.bookie.failProb, sc.bookie.readUnsynced)
	fmt.Fprintf(&b, " meta=%v..%v ambiguous=%g explicitLac=%d", sc.meta.delayMin, sc.meta.delayMax, sc.meta.ambiguousProb, sc.explicitLacTicks)
	if sc.pause {
		fmt.Fprintf(&b, " pause=after e%d for %v blackout=%v catchUp=%v backlog=%s", sc.pauseAfterEntry, sc.pauseFor, sc.blackout, sc.tickCatchUp, sc.backlog)
	}
	for _, d := range sc.recoverersAfterPause {
		fmt.Fprintf(&b, " rec%d=pause+%v", d.index+1, d.delay)
	}
	for _, d := range sc.recoverersAt {
		fmt.Fprintf(&b, " rec%d=%v", d.index+1, d.delay)
	}
	for _, p := range sc.recovererPauses {
		fmt.Fprintf(&b, " rec%d-pause=+%v/%v", p.index+1, p.after, p.dur)
	}
	idle := make([]int, 0, len(sc.idleAfter))
	for n := range sc.idleAfter {
		idle = append(idle, n)
	}
	sort.Ints(idle)
	for _, n := range idle {
		fmt.Fprintf(&b, " idle=after e%d for %v", n-1, sc.idleAfter[n])
	}
	for _, f := range sc.faults {
		fmt.Fprintf(&b, "; %s", f)
	}
	fmt.Fprintf(&b, "; readers: ranges=%d entries=%d bytes=%d", sc.reader.rangesInFlight, sc.reader.rangeEntries, sc.reader.rangeBytes)
	for _, f := range sc.readerFaults {
		fmt.Fprintf(&b, "; reading phase: %s", f)
	}
	return b.String()
}
