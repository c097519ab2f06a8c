package sim

import (
	"slices"
	"strconv"
	"time"

	"quire/internal/isr"
)

// scenarioCatalogue is SCENARIOS.md's list: K1–K21 (ISR mode, run here)
// and the ledger-mode ones other simulations and scripts model. It is
// filled in init because K21 runs the others.
var scenarioCatalogue []ScenarioInfo

func init() { scenarioCatalogue = catalogue() }

func catalogue() []ScenarioInfo {
	return []ScenarioInfo{
		{Name: "K1", Title: "leader migration and preferred-leader rebalance", runISR: k1,
			seedOutcome: "after B3 and B1 die every leader is on B2; rejoining moves nothing; a rebalance returns each leader to its preferred replica"},
		{Name: "K2", Title: "ISR membership", runISR: k2,
			seedOutcome: "a follower leaves the ISR at the first check after lastCaughtUp + replica.lag.time.max.ms, and rejoins once its LEO reaches the leader's"},
		{Name: "K3", Title: "acks=1, leader loss", runISR: k3,
			seedOutcome: "B2 crashes, B1 (~1 s behind) leads: 123 acknowledged messages lost = LEO(B2) - LEO(B1)"},
		{Name: "K4", Title: "acks=1, unclean election", runISR: k4,
			seedOutcome: "B3 out of the ISR, B1 crashes, unclean election of B3: 15,286 lost; with unclean=false no leader and zero loss"},
		{Name: "K5", Title: "acks=all, slow follower", runISR: k5,
			seedOutcome: "acks wait for the slowest ISR follower (~4 s) until it is dropped, then ~500 ms"},
		{Name: "K6", Title: "acks=all clean failover", runISR: k6,
			seedOutcome: "B2 dies, B1 leads with no loss; ISR = {B1}: acks=all adds no redundancy now"},
		{Name: "K7", Title: "acks=all, unclean election", runISR: k7,
			seedOutcome: "B1 dies, unclean failover to B3: 14,238 lost even with acks=all; unclean=false: unavailable instead"},
		{Name: "K8", Title: "min.insync.replicas=2", runISR: k8,
			seedOutcome: "B2 dies, B1 leads with no loss; ISR = {B1} < 2: every produce gets NOT_ENOUGH_REPLICAS"},
		{Name: "K9", Title: "HW and LEO", runISR: k9,
			seedOutcome: "HW <= min LEO over the ISR; a follower's HW <= the leader's; consumers read below the HW"},
		{Name: "K10", Title: "truncation: HW vs leader epoch", runISR: k10,
			seedOutcome: "truncating to the own HW (old Kafka) loses acknowledged data in some interleavings; by leader epoch (KIP-101) it does not"},
		{Name: "K11", Title: "rejoin", runISR: k11,
			seedOutcome: "a returning replica truncates its divergent suffix, catches up outside the ISR, joins once caught up; writes go on throughout"},
		{Name: "K12", Title: "all replicas crash at once", runISR: k12,
			seedOutcome: "acknowledged but unflushed messages are lost even with acks=all, minISR=2: loss = acked LEO - max flushed offset"},
		{Name: "K13", Title: "NP1 follower cut from leader, sees the store", runISR: k13,
			seedOutcome: "the follower leaves the ISR after lagMax and rejoins when healed; no split brain, zero loss"},
		{Name: "K14", Title: "NP2 leader cut from followers, sees the store", runISR: k14,
			seedOutcome: "ISR shrinks to {leader}; acks=all goes on with redundancy 1, or NOT_ENOUGH_REPLICAS with minISR=2"},
		{Name: "K15", Title: "NP3 follower sees leader, cut from the store", runISR: k15,
			seedOutcome: "it keeps fetching and stays in the ISR: no consequence"},
		{Name: "K16", Title: "NP4 leader sees followers, cut from the store", runISR: k16,
			seedOutcome: "a follower is elected; the old leader takes acks=1 writes that are lost when it rejoins; no acks=all write acknowledged"},
		{Name: "K17", Title: "NP5 follower fully isolated", runISR: k17,
			seedOutcome: "removed from the ISR; catches up after the heal; no loss"},
		{Name: "K18", Title: "NP6 leader fully isolated", runISR: k18,
			seedOutcome: "the old leader's acks=1 writes are lost; with ISR = {leader} and minISR=1 even acks=all (unclean on), offline with unclean off"},
		{Name: "K19", Title: "NP7 controller cut from one broker", runISR: k19,
			seedOutcome: "its records do not reach that broker; that broker must not be elected meanwhile"},
		{Name: "K20", Title: "NP8 controller cut from the store", runISR: k20,
			seedOutcome: "a new controller is elected; the old one's commands take no effect (controller epoch)"},
		{Name: "K21", Title: "recap (regression matrix)", runISR: k21,
			seedOutcome: "loss on any acks=1 failover, any unclean failover, a store-isolated leader taking acks=1, an isolated leader with ISR={itself} and minISR=1, all replicas failing at once; none with the durable setting"},

		{Name: "P1", Title: "single write, E=3, Qw=3, Qa=2", ModelledBy: "internal/ledger/testdata/write_e3_qw3_qa2.txt; sim ledger checkers ack-order and acked-entry-lost", Ledger: "ledger", LedgerSeed: 1},
		{Name: "P2", Title: "striping, E=5, Qw=3", ModelledBy: "internal/ledger/testdata/striping_e5_qw3.txt; sim ledger zone-rule checker", Ledger: "ledger", LedgerSeed: 2},
		{Name: "P3", Title: "ensemble change vs ISR shrink", ModelledBy: "internal/ledger/testdata/ensemble_change.txt; sim ledger (ensemble changes counted, acked-entry-lost)", Ledger: "ledger", LedgerSeed: 3},
		{Name: "P5", Title: "fencing recovery", ModelledBy: "internal/ledger/testdata/recovery_concurrent.txt, recovery_lac_minus_one.txt; sim ledger checkers fence-incomplete, readers-disagree", Ledger: "ledger", LedgerSeed: 5},
		{Name: "P6", Title: "zombie broker after a pause", ModelledBy: "internal/ledger/testdata/zombie_broker.txt, zombie_no_fence.txt; sim ledger zombie-ack-after-close; sim topic two-writers", Ledger: "topic", LedgerSeed: 6},
		{Name: "P7", Title: "metadata store degradation", ModelledBy: "internal/mlog/testdata/rollover_metadata_outage.txt; internal/mlog/managed_ledger_test.go (P7); sim topic metadata outages", Ledger: "topic", LedgerSeed: 7},
		{Name: "P8", Title: "storage locked by one unacknowledged message", ModelledBy: "internal/mlog/testdata/trim_held_by_one_unacked.txt; internal/mlog/cursor_test.go; sim topic ledger-deleted-early", Ledger: "topic", LedgerSeed: 8},
		{Name: "P9", Title: "ack holes beyond 10,000", ModelledBy: "internal/mlog/testdata/ack_holes_over_limit.txt; internal/mlog/cursor_codec_test.go TestSnapshotBeyondLimit; sim topic cursor-over-range-limit", Ledger: "topic", LedgerSeed: 9},
		{Name: "P10", Title: "read-only or too few writable bookies", ModelledBy: "internal/ledger/placement_test.go (one zone read-only, zones == Qw: no ensemble)"},
		{Name: "P13", Title: "ownership and rollover defaults", ModelledBy: "internal/mlog/testdata/takeover.txt; sim topic (owners take over in turn, rollovers)", Ledger: "topic", LedgerSeed: 13},
	}
}

func k1(sc *scenarioRun) {
	cfg := isrScriptConfig{brokers: 3, minISR: 1, elr: true, lagMax: 10 * time.Second, autoRebalance: true, rebalanceEvery: 300 * time.Second}
	if sc.durable {
		cfg.minISR = 2
	}
	s := newISRScript(cfg)
	s.quiet = true
	assign := [][]isr.BrokerID{{1, 2, 3}, {2, 3, 1}, {3, 2, 1}, {1, 3, 2}}
	parts := []string{"P0", "P1", "P2", "P3"}
	for i, p := range parts {
		s.create(p, assign[i]...)
		s.produce(p, assign[i][0], sc.acks(isr.AcksLeader), 100)
	}
	leaders := func() []isr.BrokerID {
		var out []isr.BrokerID
		for _, p := range parts {
			out = append(out, s.store[p].state.Leader)
		}
		return out
	}
	sc.printf("leaders of P0..P3: %v (preferred: 1 2 3 1)", leaders())
	s.crash(3, false)
	sc.printf("B3 dies: leaders %v", leaders())
	s.crash(1, false)
	sc.printf("B1 dies: leaders %v", leaders())
	allOnB2 := !slices.ContainsFunc(leaders(), func(id isr.BrokerID) bool { return id != 2 })
	s.restart(1, false)
	s.tick(2 * time.Second)
	s.restart(3, false)
	s.tick(2 * time.Second)
	sc.printf("B1 and B3 return: leaders %v (rejoining moves nothing)", leaders())
	stayed := !slices.ContainsFunc(leaders(), func(id isr.BrokerID) bool { return id != 2 })
	s.tick(300 * time.Second)
	sc.printf("after auto.leader.rebalance (300 s): leaders %v", leaders())
	back := slices.Equal(leaders(), []isr.BrokerID{1, 2, 3, 1})
	for _, p := range parts {
		s.state(p)
	}
	acked, lost := 0, 0
	for _, p := range parts[1:] {
		a, l := s.tally(p)
		acked, lost = acked+a, lost+l
	}
	sc.finish(s, "P0")
	sc.acked, sc.lost = sc.acked+acked, sc.lost+lost
	sc.asSeed = allOnB2 && stayed && back && sc.lost == 0
}

func k2(sc *scenarioRun) {
	s := sc.script(3, 1, false, true)
	s.create("p", 1, 2, 3)
	s.produce("p", 1, sc.acks(isr.AcksLeader), 10)
	s.cut(1, 3)
	start := s.now
	var shrunkAt time.Duration
	for range 200 {
		s.produce("p", 1, sc.acks(isr.AcksLeader), 1)
		s.tick(100 * time.Millisecond)
		if !s.store["p"].state.InISR(3) {
			shrunkAt = s.now.Sub(start)
			break
		}
	}
	sc.printf("B3 stops fetching at t=0; it leaves the ISR at t=%v (replica.lag.time.max.ms=10s)", shrunkAt)
	s.heal()
	s.tick(2 * time.Second)
	s.state("p")
	back := s.store["p"].state.InISR(3)
	sc.printf("healed: B3 back in the ISR once its LEO reached the leader's: %v", back)
	sc.finish(s, "p")
	sc.asSeed = shrunkAt >= 10*time.Second && shrunkAt <= 11*time.Second && back && sc.lost == 0
}

func k5(sc *scenarioRun) {
	s := sc.script(3, 1, false, true)
	s.create("p", 2, 1, 3)
	s.produce("p", 2, isr.AcksAll, 10)
	// ackAfter sends one acks=all write and returns how long its
	// acknowledgement took, with B1 answering after b1 and B3 after b3
	// (their fetches are held up until then).
	ackAfter := func(b1, b3 time.Duration) time.Duration {
		if b1 > 0 {
			s.cut(2, 1)
		}
		s.cut(2, 3)
		sent, start := len(s.acked), s.now
		s.manual = true
		s.produce("p", 2, isr.AcksAll, 1)
		s.manual = false
		for len(s.acked) == sent && s.now.Sub(start) < 20*time.Second {
			s.tick(100 * time.Millisecond)
			if s.now.Sub(start) >= b1 {
				delete(s.cuts, [2]isr.BrokerID{2, 1})
			}
			if s.now.Sub(start) >= b3 {
				delete(s.cuts, [2]isr.BrokerID{2, 3})
			}
		}
		return s.now.Sub(start)
	}
	slow := ackAfter(500*time.Millisecond, 4*time.Second)
	sc.printf("B3 ~4 s behind, B1 ~500 ms: the acks=all write is acknowledged after %v", slow)
	s.cut(2, 3)
	s.produce("p", 2, isr.AcksLeader, 1)
	for i := 0; i < 30 && s.store["p"].state.InISR(3); i++ {
		s.tick(time.Second)
	}
	s.state("p")
	fast := ackAfter(0, time.Hour)
	sc.printf("B3 dropped from the ISR: the next acks=all write is acknowledged after %v, B1's next fetch (the seed: ~500 ms, replica.fetch.wait.max.ms)", fast)
	sc.finish(s, "p")
	sc.asSeed = slow >= 4*time.Second && fast <= 500*time.Millisecond && sc.lost == 0
}

func k6(sc *scenarioRun) {
	s := sc.script(3, 1, false, true)
	s.create("p", 2, 1, 3)
	s.crash(3, false) // B3 is gone: ISR = {B2, B1}
	s.produce("p", 2, isr.AcksAll, 1000)
	s.crash(2, false)
	s.run()
	s.state("p")
	s.produce("p", 1, isr.AcksAll, 100)
	st := s.store["p"].state
	sc.printf("ISR = %v: acks=all acknowledged by B1 alone (redundancy 1)", st.ISRIDs())
	sc.finish(s, "p")
	nl, _ := s.leader("p")
	if sc.durable {
		sc.asSeed = sc.lost == 0
	} else {
		sc.asSeed = nl != nil && nl.id == 1 && sc.lost == 0 && len(st.ISR) == 1
	}
}

func k9(sc *scenarioRun) {
	s := sc.script(3, 1, false, true)
	s.create("p", 1, 2, 3)
	s.cut(1, 3)
	s.produce("p", 1, sc.acks(isr.AcksLeader), 50)
	s.state("p")
	rec := s.store["p"].state
	_, lr := s.leader("p")
	minLEO := int64(1 << 62)
	for _, m := range rec.ISR {
		minLEO = min(minLEO, s.broker(m.ID).logs["p"].EndOffset())
	}
	ok := lr.HighWatermark() <= minLEO
	for _, id := range []isr.BrokerID{2, 3} {
		ok = ok && s.broker(id).replicas["p"].HighWatermark() <= lr.HighWatermark()
	}
	lr.Fetch(isr.FetchRequest{ID: 1, Partition: "p", ReplicaID: -1, Client: "c", CurrentLeaderEpoch: isr.NoEpoch, LastFetchedEpoch: isr.NoEpoch}, s.now)
	got := 0
	for _, r := range lr.Ready().FetchResponses {
		for _, b := range r.Batches {
			got += len(b.Records)
		}
	}
	sc.printf("leader HW=%d <= min LEO over the ISR=%d; a consumer reads %d records (below the HW), not the %d the leader holds",
		lr.HighWatermark(), minLEO, got, s.broker(1).logs["p"].EndOffset())
	sc.finish(s, "p")
	sc.asSeed = ok && int64(got) == lr.HighWatermark()
}

func k11(sc *scenarioRun) {
	s := sc.script(3, 1, true, true)
	acks := sc.acks(isr.AcksLeader)
	s.create("p", 1, 2, 3)
	s.produce("p", 1, acks, 100)
	s.cut(1, 2)
	s.cut(1, 3)
	s.produce("p", 1, acks, 20) // only on B1: its divergent suffix
	s.crash(1, false)
	s.heal()
	s.run()
	nl, _ := s.leader("p")
	s.produce("p", leaderID(nl), acks, 50)
	s.restart(1, false)
	s.run()
	s.produce("p", leaderID(nl), acks, 50)
	s.tick(2 * time.Second)
	s.state("p")
	back := s.store["p"].state.InISR(1)
	sc.finish(s, "p")
	sc.printf("B1 truncated its divergent suffix and rejoined the ISR: %v; writes went on throughout", back)
	if sc.durable {
		sc.asSeed = back && sc.lost == 0
	} else {
		sc.asSeed = back && sc.lost == 20
	}
}

func k13(sc *scenarioRun) {
	s := sc.script(3, 1, false, true)
	s.create("p", 1, 2, 3)
	s.produce("p", 1, sc.acks(isr.AcksLeader), 100)
	s.cut(1, 3)
	s.tick(11 * time.Second)
	s.produce("p", 1, sc.acks(isr.AcksLeader), 100)
	out := !s.store["p"].state.InISR(3)
	s.state("p")
	s.heal()
	s.tick(2 * time.Second)
	s.state("p")
	back := s.store["p"].state.InISR(3)
	sc.finish(s, "p")
	sc.asSeed = out && back && sc.lost == 0
}

func k14(sc *scenarioRun) {
	s := sc.script(3, 1, false, true)
	s.create("p", 1, 2, 3)
	s.produce("p", 1, isr.AcksAll, 100)
	s.cut(1, 2)
	s.cut(1, 3)
	s.produce("p", 1, sc.acks(isr.AcksLeader), 1) // the followers lag from the next write on
	for i := 0; i < 30 && len(s.store["p"].state.ISR) > 1; i++ {
		s.tick(time.Second)
	}
	s.state("p")
	before := len(s.acked)
	s.produce("p", 1, isr.AcksAll, 100)
	accepted := len(s.acked) - before
	sc.printf("ISR = %v; acks=all writes acknowledged with redundancy 1: %d of 100", s.store["p"].state.ISRIDs(), accepted)
	s.heal()
	s.tick(2 * time.Second)
	s.state("p")
	sc.finish(s, "p")
	if sc.durable {
		sc.asSeed = accepted == 0 && s.refused["NOT_ENOUGH_REPLICAS"] >= 100 && sc.lost == 0
	} else {
		sc.asSeed = accepted == 100 && sc.lost == 0
	}
}

func k15(sc *scenarioRun) {
	s := sc.script(3, 1, false, true)
	s.create("p", 1, 2, 3)
	s.storeCut[3] = true
	for range 30 {
		s.produce("p", 1, sc.acks(isr.AcksLeader), 10)
		s.tick(500 * time.Millisecond)
	}
	in := s.store["p"].state.InISR(3)
	s.state("p")
	sc.finish(s, "p")
	sc.printf("B3 cut from the store (its session kept here: the store cut is shorter than the session timeout) keeps fetching and stays in the ISR: %v", in)
	sc.asSeed = in && sc.lost == 0
}

func k17(sc *scenarioRun) {
	s := sc.script(3, 1, false, true)
	s.create("p", 1, 2, 3)
	s.storeCut[3] = true
	s.cut(3, 1)
	s.cut(3, 2)
	s.produce("p", 1, sc.acks(isr.AcksLeader), 100)
	s.expire(3)
	s.tick(11 * time.Second)
	out := !s.store["p"].state.InISR(3)
	s.heal()
	s.register(3)
	s.tick(2 * time.Second)
	s.state("p")
	back := s.store["p"].state.InISR(3)
	sc.finish(s, "p")
	sc.asSeed = out && back && sc.lost == 0
}

func k19(sc *scenarioRun) {
	s := sc.script(3, 1, false, true)
	s.create("p", 1, 2, 3)
	s.produce("p", 1, sc.acks(isr.AcksLeader), 100)
	// The controller cannot reach B2: it misses the records; B1 then dies.
	s.storeCut[2] = true
	s.crash(1, false)
	s.tick(2 * time.Second)
	s.state("p")
	st := s.store["p"].state
	b2 := s.broker(2).replicas["p"]
	sc.printf("record leader=%d; B2 still believes epoch %d (role %s): it is not the leader meanwhile", st.Leader, b2.LeaderEpoch(), b2.Role())
	notB2 := st.Leader != 2 || b2.Role() != isr.RoleLeader
	s.heal()
	s.tick(2 * time.Second)
	s.state("p")
	sc.finish(s, "p")
	sc.asSeed = notB2 && sc.lost == 0
}

func k20(sc *scenarioRun) {
	s := sc.script(3, 1, false, true)
	s.create("p", 1, 2, 3)
	s.produce("p", 1, sc.acks(isr.AcksLeader), 100)
	old := s.ctrl
	sc.printf("controller (epoch 1) is cut from the store; a new controller (epoch 2) loads the records")
	// The old controller's operations fail while it is cut off: keep it
	// out of the store by running it only after the new one wrote.
	var parts []isr.StoredPartition
	for _, name := range sortedKeys(s.store) {
		parts = append(parts, isr.StoredPartition{State: s.store[name].state.Clone(), Version: s.store[name].version})
	}
	var regs []isr.Registration
	for _, b := range s.nodes {
		regs = append(regs, isr.Registration{ID: b.id, Epoch: b.epoch})
	}
	nc := isr.NewController(isr.ControllerConfig{Epoch: 2, MinISR: s.cfg.minISR, DisableELR: !s.cfg.elr, UncleanElection: s.cfg.unclean, DisableAutoRebalance: true, PushInterval: time.Second}, s.now)
	nc.Load(parts, regs, s.now)
	s.ctrl = nc
	s.drain()
	s.run()
	// The old controller still believes B2 died and tries to act on it.
	old.SessionExpired(2, s.broker(2).epoch, s.now)
	s.oldCtrls = []*isr.Controller{old}
	s.drain()
	s.run()
	s.tick(time.Second)
	s.state("p")
	st := s.store["p"].state
	sc.printf("old controller deposed: %v; record written by controller epoch %d; B2 still in the ISR: %v", old.Deposed(), st.ControllerEpoch, st.InISR(2))
	sc.finish(s, "p")
	sc.asSeed = old.Deposed() && st.ControllerEpoch == 2 && st.InISR(2) && sc.lost == 0
}

func k21(sc *scenarioRun) {
	sc.printf("%-5s %-45s %10s %10s", "", "", "seed cfg", "durable")
	all := true
	acked, lost := 0, 0
	for _, name := range []string{"K3", "K4", "K7", "K12", "K16", "K18"} {
		a, _ := RunScenario(name, false)
		d, _ := RunScenario(name, true)
		title := ""
		for _, info := range scenarioCatalogue {
			if info.Name == name {
				title = info.Title
			}
		}
		sc.printf("%-5s %-45s %10s %10s", name, title, lossWord(a.Lost), lossWord(d.Lost))
		all = all && a.Lost > 0 && d.Lost == 0
		if sc.durable {
			acked, lost = acked+d.Acked, lost+d.Lost
		} else {
			acked, lost = acked+a.Acked, lost+a.Lost
		}
	}
	sc.printf("Beyond the seed: eligible leader replicas (KIP-966) close the last-replica-standing loss (K4, K7 durable)")
	sc.acked, sc.lost = acked, lost
	sc.asSeed = all
}

func lossWord(lost int) string {
	if lost == 0 {
		return "no loss"
	}
	return "lost " + strconv.Itoa(lost)
}
