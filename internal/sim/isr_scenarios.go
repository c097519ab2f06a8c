package sim

import (
	"fmt"
	"time"

	"quire/internal/isr"
)

// ScenarioInfo names a seed scenario (SCENARIOS.md) `quire sim scenario`
// knows: the ISR-mode ones (K1–K21) run on isrScript; the ledger-mode ones
// name the simulation check or test script that models them.
type ScenarioInfo struct {
	Name, Title string
	// ModelledBy, for ledger-mode scenarios: what models it.
	ModelledBy string
	// Ledger: a representative `quire sim ledger|topic` seed to run, if any.
	Ledger      string
	LedgerSeed  int64
	runISR      func(sc *scenarioRun)
	seedOutcome string // what the seed says happens, in a line
}

// ScenarioResult is what a scenario run printed and counted.
type ScenarioResult struct {
	Lines  []string
	AsSeed bool
	Acked  int
	Lost   int
}

// scenarioRun is one run of a K scenario.
type scenarioRun struct {
	// s is the cluster running now: lines go into its timed output.
	s       *isrScript
	durable bool
	out     []string
	asSeed  bool
	acked   int
	lost    int
}

func (sc *scenarioRun) printf(format string, args ...any) {
	if sc.s != nil {
		sc.s.printf(format, args...)
		return
	}
	sc.out = append(sc.out, fmt.Sprintf(format, args...))
}

// script starts a cluster with the scenario's configuration, or the
// durable one (acks=all, min.insync.replicas=2, unclean off, ELR on) when
// the run asks for it.
func (sc *scenarioRun) script(brokers, minISR int, unclean, elr bool) *isrScript {
	cfg := isrScriptConfig{brokers: brokers, minISR: minISR, unclean: unclean, elr: elr, lagMax: 10 * time.Second}
	if sc.durable {
		cfg.minISR, cfg.unclean, cfg.elr = 2, false, true
	}
	sc.printf("config: %d brokers, min.insync.replicas=%d, unclean.leader.election.enable=%v, ELR=%v, replica.lag.time.max.ms=10s",
		brokers, cfg.minISR, cfg.unclean, cfg.elr)
	sc.s = newISRScript(cfg)
	return sc.s
}

// acks returns the scenario's acks, or acks=all in the durable run.
func (sc *scenarioRun) acks(a int8) int8 {
	if sc.durable {
		return isr.AcksAll
	}
	return a
}

func acksName(a int8) string {
	return map[int8]string{isr.AcksNone: "0", isr.AcksLeader: "1", isr.AcksAll: "all"}[a]
}

// finish copies the script's trace and counts into the run.
func (sc *scenarioRun) finish(s *isrScript, part string) {
	for _, l := range s.lines {
		sc.out = append(sc.out, "  "+l)
	}
	s.lines = nil
	sc.s = nil
	sc.acked, sc.lost = s.tally(part)
	if len(s.refused) > 0 {
		sc.printf("refused produce requests: %v", s.refused)
	}
}

// ISRScenarioNames lists the scenarios in catalogue order.
func Scenarios() []ScenarioInfo { return scenarioCatalogue }

// RunScenario runs one scenario by name; durable runs the K scenarios
// under the durable configuration.
func RunScenario(name string, durable bool) (ScenarioResult, error) {
	for _, info := range scenarioCatalogue {
		if info.Name != name {
			continue
		}
		if info.runISR == nil {
			return ScenarioResult{}, fmt.Errorf("scenario %s is ledger mode: %s", name, info.ModelledBy)
		}
		sc := &scenarioRun{durable: durable}
		sc.printf("%s %s", info.Name, info.Title)
		sc.printf("seed: %s", info.seedOutcome)
		if durable {
			sc.printf("durable configuration: acks=all, min.insync.replicas=2, unclean election off, ELR on")
		}
		info.runISR(sc)
		return ScenarioResult{Lines: sc.out, AsSeed: sc.asSeed, Acked: sc.acked, Lost: sc.lost}, nil
	}
	return ScenarioResult{}, fmt.Errorf("unknown scenario %q (quire sim scenario --list)", name)
}

// lagged builds the seed's lag picture on partition p led by leader: every
// follower in order gets behind by its lag in messages (the seed's lags in
// seconds times its rate), by cutting it from the leader while the rest is
// produced. The followers stay in the ISR (no time passes).
func lagged(s *isrScript, part string, leader isr.BrokerID, acks int8, base int, lags map[isr.BrokerID]int, order []isr.BrokerID) {
	s.produce(part, leader, acks, base)
	s.tick(200 * time.Millisecond)
	produced := 0
	for i, id := range order {
		want := lags[order[0]] - lags[id] // produced while the ones before are cut
		if i > 0 {
			s.produce(part, leader, acks, want-produced)
			s.tick(200 * time.Millisecond)
			produced = want
		}
		s.cut(leader, id)
	}
	s.produce(part, leader, acks, lags[order[0]]-produced)
}

func k3(sc *scenarioRun) {
	const b3Lag, b1Lag = 7456, 123 // messages: the seed's 8 s and ~1 s behind
	s := sc.script(3, 1, true, false)
	acks := sc.acks(isr.AcksLeader)
	s.create("p", 2, 1, 3)
	sc.printf("producer acks=%s; B3 %d messages (8 s) behind, B1 %d (~1 s) behind, both still in the ISR", acksName(acks), b3Lag, b1Lag)
	lagged(s, "p", 2, acks, 2000, map[isr.BrokerID]int{3: b3Lag, 1: b1Lag}, []isr.BrokerID{3, 1})
	s.state("p")
	oldLEO := s.broker(2).logs["p"].EndOffset()
	s.crash(2, false)
	s.heal()
	s.run()
	s.state("p")
	newLeader, _ := s.leader("p")
	newLEO := int64(-1)
	if newLeader != nil {
		newLEO = newLeader.logs["p"].EndOffset()
		sc.printf("the producer finds B%d through bootstrap.servers; writes resume", newLeader.id)
		s.produce("p", newLeader.id, acks, 100)
		s.tick(2 * time.Second)
	}
	s.restart(2, false)
	s.tick(2 * time.Second)
	s.state("p")
	sc.finish(s, "p")
	sc.printf("records only B2 held at the failover = LEO(B2) - LEO(B%d) = %d - %d = %d (seed: 123 lost with acks=1); acknowledged and lost: %d", leaderID(newLeader), oldLEO, newLEO, oldLEO-newLEO, sc.lost)
	if sc.durable {
		sc.asSeed = sc.lost == 0
	} else {
		sc.asSeed = newLeader != nil && newLeader.id == 1 && sc.lost == b1Lag && oldLEO-newLEO == b1Lag
	}
}

func leaderID(b *scriptBroker) isr.BrokerID {
	if b == nil {
		return isr.NoLeader
	}
	return b.id
}

func k4(sc *scenarioRun) {
	const b3Behind = 15286
	s := sc.script(3, 1, true, false)
	acks := sc.acks(isr.AcksLeader)
	s.create("p", 2, 1, 3)
	s.produce("p", 2, acks, 1000)
	s.crash(2, false) // K3's failover: B1 leads
	sc.printf("continuing K3: B1 leads; B3 falls %d messages behind and leaves the ISR", b3Behind)
	s.cut(1, 3)
	s.produce("p", 1, acks, b3Behind)
	s.tick(11 * time.Second)
	s.state("p")
	b1LEO, b3LEO := s.broker(1).logs["p"].EndOffset(), s.broker(3).logs["p"].EndOffset()
	s.crash(1, false)
	s.heal()
	s.run()
	s.state("p")
	nl, _ := s.leader("p")
	if nl != nil {
		sc.printf("writes resume on B%d", nl.id)
		s.produce("p", nl.id, acks, 100)
	} else {
		sc.printf("no leader: every produce and fetch is refused until B1 returns with its data")
		s.produce("p", 3, acks, 100)
	}
	sc.finish(s, "p")
	sc.printf("lost = LEO(B1) - LEO(B3) = %d - %d = %d (seed: 15,286 with unclean=true; 0 and unavailable with unclean=false)", b1LEO, b3LEO, b1LEO-b3LEO)
	if sc.durable {
		sc.asSeed = sc.lost == 0
	} else {
		sc.asSeed = nl != nil && nl.id == 3 && sc.lost == b3Behind
	}
	if !sc.durable {
		sc.printf("with unclean=false instead:")
		clean := &scenarioRun{}
		s2 := clean.script(3, 1, false, false)
		s2.create("p", 2, 1, 3)
		s2.produce("p", 2, isr.AcksLeader, 1000)
		s2.crash(2, false)
		s2.cut(1, 3)
		s2.produce("p", 1, isr.AcksLeader, b3Behind)
		s2.tick(11 * time.Second)
		s2.crash(1, false)
		s2.heal()
		s2.run()
		s2.state("p")
		s2.produce("p", 3, isr.AcksLeader, 10)
		clean.finish(s2, "p")
		for _, l := range clean.out[1:] {
			sc.out = append(sc.out, "  "+l)
		}
		rec := s2.store["p"].state
		sc.printf("unclean=false: leader=%d (offline), acked=%d lost=%d", rec.Leader, clean.acked, clean.lost)
		sc.asSeed = sc.asSeed && rec.Leader == isr.NoLeader && clean.lost == 0
	}
}

func k7(sc *scenarioRun) {
	const b3Behind = 14238
	s := sc.script(3, 1, true, false)
	s.create("p", 2, 1, 3)
	s.produce("p", 2, isr.AcksAll, 1000)
	s.crash(2, false)
	sc.printf("B2 died, B1 leads; B3 falls behind and leaves the ISR: ISR = {B1}; acks=all now waits for B1 alone")
	s.cut(1, 3)
	s.tick(11 * time.Second)
	s.produce("p", 1, isr.AcksAll, b3Behind)
	s.state("p")
	b1LEO, b3LEO := s.broker(1).logs["p"].EndOffset(), s.broker(3).logs["p"].EndOffset()
	s.crash(1, false)
	s.heal()
	s.run()
	s.state("p")
	nl, _ := s.leader("p")
	sc.finish(s, "p")
	sc.printf("lost = LEO(B1) - LEO(B3) = %d - %d = %d acks=all records (seed: 14,238)", b1LEO, b3LEO, b1LEO-b3LEO)
	if sc.durable {
		sc.printf("min.insync.replicas=2 refused the writes once ISR = {B1}; ELR (B3 left the ISR while the HW was frozen) elects B3 without loss")
		sc.asSeed = sc.lost == 0
	} else {
		sc.asSeed = nl != nil && nl.id == 3 && sc.lost == b3Behind
	}
}

func k8(sc *scenarioRun) {
	s := sc.script(3, 2, false, true)
	s.create("p", 2, 1, 3)
	s.crash(3, false) // out since K7: ISR = {B2, B1}
	s.produce("p", 2, isr.AcksAll, 1000)
	s.state("p")
	s.crash(2, false)
	s.run()
	s.state("p")
	s.produce("p", 1, isr.AcksAll, 100)
	sc.finish(s, "p")
	nl, _ := s.leader("p")
	sc.asSeed = nl != nil && nl.id == 1 && sc.lost == 0 && s.refused["NOT_ENOUGH_REPLICAS"] == 100
}

// k10 runs the same interleaving under truncation to the HW (mode (a), the
// truncate-to-hw mutant) and by leader epoch (mode (b), KIP-101).
func k10(sc *scenarioRun) {
	run := func(mutant bool) (acked, lost int, lines []string) {
		r := &scenarioRun{durable: sc.durable}
		s := r.script(3, 1, false, true)
		s.cfg.mutants.TruncateToHighWatermark = mutant
		s.ctrl = s.newController(1)
		for _, b := range s.nodes {
			s.ctrl.Register(isr.Registration{ID: b.id, Epoch: b.epoch}, s.now)
		}
		s.create("p", 1, 2, 3)
		s.manual = true
		s.produce("p", 1, isr.AcksAll, 2)
		// The followers fetch both records; their next fetch moves the
		// leader's HW to 2 (acknowledged) but the answer carrying HW 2
		// never arrives: their own HW stays 0.
		s.dropIf = func(m scriptMessage) bool { return m.what == "fetch-resp" && m.from == 1 && m.hw == 2 }
		s.tick(100 * time.Millisecond)
		s.dropIf = nil
		s.state("p")
		s.cut(2, 3)
		s.crash(1, false)
		s.state("p")
		s.crash(2, false)
		s.state("p")
		r.finish(s, "p")
		return r.acked, r.lost, r.out
	}
	aAcked, aLost, aLines := run(true)
	bAcked, bLost, bLines := run(false)
	sc.printf("mode (a): a new follower truncates to its own HW (Kafka before KIP-101):")
	for _, l := range aLines[1:] {
		sc.out = append(sc.out, "  "+l)
	}
	sc.printf("mode (a): acked=%d lost=%d", aAcked, aLost)
	sc.printf("mode (b): it truncates to the end of its last epoch the leader knows (KIP-101, Quire):")
	for _, l := range bLines[1:] {
		sc.out = append(sc.out, "  "+l)
	}
	sc.printf("mode (b): acked=%d lost=%d", bAcked, bLost)
	if sc.durable {
		sc.acked, sc.lost = bAcked, bLost
		sc.asSeed = bLost == 0
	} else {
		sc.acked, sc.lost = aAcked, aLost
		sc.asSeed = aLost > 0 && bLost == 0
	}
}

func k12(sc *scenarioRun) {
	s := sc.script(3, 2, true, true)
	if sc.durable {
		s.cfg.flushMessages = 1
		sc.printf("durable run adds flush.messages=1 (fsync before acknowledging, as a bookie's journal does: P4)")
	}
	s.create("p", 1, 2, 3)
	s.produce("p", 1, isr.AcksAll, 60)
	// The OS wrote B1's page cache back at offset 60; the others' not yet.
	s.broker(1).replicas["p"].Flush(s.now)
	s.produce("p", 1, isr.AcksAll, 40)
	s.state("p")
	maxFlushed := int64(0)
	for _, b := range s.nodes {
		maxFlushed = max(maxFlushed, b.logs["p"].FlushedOffset())
	}
	ackedLEO := s.broker(1).logs["p"].EndOffset()
	sc.printf("every replica loses power at once: acked LEO %d, highest flushed offset %d", ackedLEO, maxFlushed)
	for _, id := range []isr.BrokerID{1, 2, 3} {
		s.crash(id, true)
	}
	for _, id := range []isr.BrokerID{1, 2, 3} {
		s.restart(id, true)
	}
	s.tick(3 * time.Second)
	s.state("p")
	sc.finish(s, "p")
	sc.printf("loss = acked LEO - max flushed offset = %d - %d = %d", ackedLEO, maxFlushed, ackedLEO-maxFlushed)
	if sc.durable {
		sc.asSeed = sc.lost == 0
	} else {
		sc.asSeed = sc.lost == int(ackedLEO-maxFlushed) && sc.lost > 0
	}
}

// k16: the leader is cut from the store (and so from the controller) but
// not from its followers or clients.
func k16(sc *scenarioRun) {
	const window = 500
	s := sc.script(3, 1, false, true)
	s.create("p", 1, 2, 3)
	acks := sc.acks(isr.AcksLeader)
	s.produce("p", 1, acks, 1000)
	s.storeCut[1] = true
	sc.printf("B1 (leader) is cut from the metadata store; its session expires")
	s.expire(1)
	s.state("p")
	before := len(s.acked)
	sc.printf("a producer with stale metadata sends %d acks=%s and 50 acks=all writes to B1", window, acksName(acks))
	s.produce("p", 1, acks, window)
	s.produce("p", 1, isr.AcksAll, 50)
	windowAcked := len(s.acked) - before
	s.tick(12 * time.Second)
	s.state("p")
	s.heal()
	s.register(1)
	s.tick(2 * time.Second)
	s.state("p")
	sc.finish(s, "p")
	allAcked := 0
	for _, a := range s.acked[before:] {
		if a.acks == isr.AcksAll {
			allAcked++
		}
	}
	sc.printf("acknowledged by the old leader during the two-leader window: %d (acks=all among them: %d)", windowAcked, allAcked)
	if sc.durable {
		sc.asSeed = sc.lost == 0 && allAcked == 0
	} else {
		sc.asSeed = sc.lost == window && allAcked == 0
	}
}

// k18: the leader is isolated from everything but a producer.
func k18(sc *scenarioRun) {
	const window = 500
	isolate := func(s *isrScript, id isr.BrokerID) {
		s.storeCut[id] = true
		for _, b := range s.nodes {
			if b.id != id {
				s.cut(id, b.id)
			}
		}
	}
	s := sc.script(3, 1, false, true)
	acks := sc.acks(isr.AcksLeader)
	s.create("p", 1, 2, 3)
	s.produce("p", 1, acks, 1000)
	sc.printf("B1 (leader) is fully isolated; a producer with stale metadata keeps writing to it (acks=%s)", acksName(acks))
	isolate(s, 1)
	s.produce("p", 1, acks, window)
	s.tick(4 * time.Second)
	s.expire(1)
	s.tick(8 * time.Second)
	s.state("p")
	s.heal()
	s.register(1)
	s.tick(2 * time.Second)
	s.state("p")
	sc.finish(s, "p")
	mainLost := sc.lost
	sc.printf("acknowledged on the isolated leader and lost: %d (seed: every write acknowledged by it since the partition began)", mainLost)

	// Variant: the ISR is already {B1} before the isolation.
	variant := func(unclean bool) (leader isr.BrokerID, acked, lost int, lines []string) {
		r := &scenarioRun{durable: sc.durable}
		s := r.script(3, 1, unclean, true)
		s.create("p", 1, 2, 3)
		s.produce("p", 1, isr.AcksAll, 100)
		s.cut(1, 2)
		s.cut(1, 3)
		// A follower whose LEO equals the leader's counts as caught up
		// (Kafka's isCaughtUp): the lag starts with the next write.
		s.produce("p", 1, r.acks(isr.AcksLeader), 1)
		for i := 0; i < 30 && len(s.store["p"].state.ISR) > 1; i++ {
			s.tick(time.Second)
		}
		s.state("p")
		isolate(s, 1)
		s.produce("p", 1, isr.AcksAll, window)
		s.expire(1)
		s.tick(2 * time.Second)
		s.state("p")
		rec := s.store["p"].state
		r.finish(s, "p")
		return rec.Leader, r.acked, r.lost, r.out
	}
	ok := true
	for _, unclean := range []bool{true, false} {
		leader, acked, lost, lines := variant(unclean)
		sc.printf("variant: ISR = {B1} before the isolation, acks=all, unclean=%v:", unclean && !sc.durable)
		for _, l := range lines[1:] {
			sc.out = append(sc.out, "  "+l)
		}
		sc.printf("variant unclean=%v: leader=%d acked=%d lost=%d", unclean && !sc.durable, leader, acked, lost)
		switch {
		case sc.durable:
			ok = ok && lost == 0
		case unclean:
			ok = ok && lost > 0 && leader != isr.NoLeader
		default:
			ok = ok && leader == isr.NoLeader
		}
	}
	if sc.durable {
		sc.asSeed = ok && mainLost == 0
	} else {
		sc.asSeed = ok && mainLost == window
	}
}
