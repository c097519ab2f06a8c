package sim

import (
	"fmt"
	"strings"
	"time"

	"quire/internal/isr"
)

// Fault shapes a seed draws. The network-partition ones are the seed's
// NP1–NP8 (SCENARIOS.md K13–K20); whether "the leader" or "a follower" is
// hit is decided when the fault starts, from the partition record.
const (
	shapeCrash      = "crash (process, page cache kept)"
	shapePowerLoss  = "crash losing unflushed data"
	shapePause      = "pause (zombie)"
	shapeSlow       = "slow follower"
	shapeNP1        = "NP1 follower cut from leader"
	shapeNP2        = "NP2 leader cut from followers"
	shapeNP3        = "NP3 follower cut from store"
	shapeNP4        = "NP4 leader cut from store"
	shapeNP5        = "NP5 follower isolated"
	shapeNP6        = "NP6 leader isolated"
	shapeNP7        = "NP7 controller cut from a broker"
	shapeNP8        = "NP8 controller cut from store"
	shapeCorrelated = "all replicas lose power at once"
	// shapeCascade is the seed's K4/K7 shape: the followers fall out of
	// the ISR (here: cut from the leader, NP2), then the leader fails.
	shapeCascade = "followers out of ISR, then leader crash"
	// shapeDouble: the leader crashes, and its successor soon after, before
	// the followers caught up with the new leader (K10's interleaving).
	shapeDouble = "leader crash, then the new leader's"
)

// ISRShapes lists every fault shape RunISR draws; a range of seeds should
// reach each (the shapes counted are those that happened, with the
// leader/follower role they name).
var ISRShapes = []string{shapeCrash, shapePowerLoss, shapePause, shapeSlow, shapeNP1, shapeNP2, shapeNP3,
	shapeNP4, shapeNP5, shapeNP6, shapeNP7, shapeNP8, shapeCorrelated, shapeCascade, shapeDouble, "zombie leader"}

// isrFault is one drawn fault: a kind, when it starts and how long it lasts.
type isrFault struct {
	kind    string // "crash", "power", "pause", "slow", "np1".."np8", "correlated"
	at, dur time.Duration
	part    int  // the partition whose leader/follower it picks
	leader  bool // for crash/power/pause/slow: hit the leader (else a follower)
}

func drawISRFaults(s *isrSim) []isrFault {
	e := s.e
	kinds := []string{"crash", "power", "power", "pause", "pause", "slow", "np1", "np2", "np3", "np4", "np5", "np6", "np6", "np7", "np8", "cascade", "cascade", "double", "double"}
	n := e.intn(1, 4)
	var out []isrFault
	at := isrFaultsFrom
	for range n {
		f := isrFault{kind: kinds[e.intn(0, len(kinds)-1)], part: e.intn(0, s.cfg.partitions-1), leader: e.chance(0.6)}
		if e.chance(0.02) {
			f.kind = "correlated"
		}
		f.at = at + e.between(0, 8*time.Second)
		f.dur = e.between(time.Second, 15*time.Second)
		if f.at+f.dur > isrFaultsUntil {
			f.dur = max(time.Second, isrFaultsUntil-f.at)
		}
		out = append(out, f)
		// Faults overlap sometimes: the next one starts before this ends.
		if e.chance(0.3) {
			at = f.at + e.between(0, f.dur)
		} else {
			at = f.at + f.dur + e.between(time.Second, 4*time.Second)
		}
		if at >= isrFaultsUntil-time.Second {
			break
		}
	}
	return out
}

func describeFaults(fs []isrFault) string {
	var parts []string
	for _, f := range fs {
		who := " follower"
		switch {
		case f.kind == "np7" || f.kind == "np8" || f.kind == "correlated":
			who = ""
		case f.kind == "np1" || f.kind == "np3" || f.kind == "np5":
		case f.leader || f.kind == "np2" || f.kind == "np4" || f.kind == "np6" || f.kind == "cascade" || f.kind == "double":
			who = " leader"
		}
		parts = append(parts, fmt.Sprintf("%s(p%d%s @%v for %v)", f.kind, f.part, who, f.at, f.dur))
	}
	return "[" + strings.Join(parts, " ") + "]"
}

// pick returns the partition's leader (per the store) or one of its other
// replicas; 0 when there is none.
func (s *isrSim) pick(part int, leader bool) isr.BrokerID {
	rec := s.records[s.parts[part]]
	if rec == nil {
		return 0
	}
	st := rec.state
	if leader && st.Leader != isr.NoLeader {
		return st.Leader
	}
	var others []isr.BrokerID
	for _, id := range st.Replicas {
		if id != st.Leader {
			others = append(others, id)
		}
	}
	if len(others) == 0 {
		return 0
	}
	return others[s.e.intn(0, len(others)-1)]
}

func (s *isrSim) scheduleFault(f isrFault) {
	s.e.at(f.at, func() { s.startFault(f) })
}

func (s *isrSim) startFault(f isrFault) {
	leaderHit := f.leader
	id := s.pick(f.part, f.leader)
	switch f.kind {
	case "np2", "np4", "np6":
		id, leaderHit = s.pick(f.part, true), true
	case "cascade", "double":
		id, leaderHit = s.pick(f.part, true), true
	case "np1", "np3", "np5":
		id, leaderHit = s.pick(f.part, false), false
	}
	if id == 0 && f.kind != "np8" && f.kind != "correlated" {
		return
	}
	name := brokerName(id)
	role := map[bool]string{true: "leader", false: "follower"}[leaderHit]
	rec := s.records[s.parts[f.part]]
	switch f.kind {
	case "crash", "power":
		b := s.broker(id)
		if !b.up {
			return
		}
		if f.kind == "power" {
			s.shape(shapePowerLoss)
		} else {
			s.shape(shapeCrash)
		}
		s.crash(b, f.kind == "power")
		s.e.after(f.dur, func() { s.restart(b) })
	case "correlated":
		s.shape(shapeCorrelated)
		for _, rid := range rec.state.Replicas {
			if b := s.broker(rid); b.up {
				s.crash(b, true)
				s.e.after(f.dur, func() { s.restart(b) })
			}
		}
	case "pause":
		b := s.broker(id)
		if !b.up || b.pausedTo > s.e.now {
			return
		}
		s.shape(shapePause)
		if leaderHit {
			s.shape("zombie leader")
		}
		b.pausedTo = s.e.now + f.dur
		s.e.tracef(name, "PAUSED (%s of %s) for %v", role, s.parts[f.part], f.dur)
	case "slow":
		b := s.broker(id)
		s.shape(shapeSlow)
		b.slowBy = s.e.between(time.Second, s.cfg.lagMax+2*time.Second)
		s.e.tracef(name, "SLOW (%s of %s): everything it sends is %v late, for %v", role, s.parts[f.part], b.slowBy, f.dur)
		s.e.after(f.dur, func() { b.slowBy = 0; s.e.tracef(name, "no longer slow") })
	case "np1":
		leader := s.pick(f.part, true)
		if leader == 0 || leader == id {
			return
		}
		s.shape(shapeNP1)
		s.cutBoth(name, brokerName(leader), f.dur)
	case "np2":
		s.shape(shapeNP2)
		for _, b := range s.brokers {
			if b.id != id {
				s.cutBoth(name, brokerName(b.id), f.dur)
			}
		}
	case "cascade":
		s.shape(shapeCascade)
		cut := s.cfg.lagMax + s.e.between(2*time.Second, 6*time.Second)
		for _, b := range s.brokers {
			if b.id != id {
				s.cutBoth(name, brokerName(b.id), cut)
			}
		}
		b := s.broker(id)
		power := s.e.chance(0.5)
		s.e.after(s.cfg.lagMax+s.e.between(time.Second, 2*time.Second), func() {
			if !b.up {
				return
			}
			s.crash(b, power)
			s.e.after(f.dur, func() { s.restart(b) })
		})
	case "double":
		b := s.broker(id)
		if !b.up {
			return
		}
		s.shape(shapeDouble)
		s.crash(b, false)
		s.e.after(f.dur, func() { s.restart(b) })
		// The successor crashes as soon as the record names it, before
		// the other followers' first fetch from it returns.
		s.onNewLeader[s.parts[f.part]] = func(next isr.BrokerID) {
			nb := s.broker(next)
			s.e.after(s.e.between(0, 3*time.Millisecond), func() {
				if !nb.up {
					return
				}
				s.crash(nb, false)
				s.e.after(f.dur, func() { s.restart(nb) })
			})
		}
	case "np3", "np4":
		s.shape(map[string]string{"np3": shapeNP3, "np4": shapeNP4}[f.kind])
		s.cutBoth(name, isrMeta, f.dur)
	case "np5", "np6":
		s.shape(map[string]string{"np5": shapeNP5, "np6": shapeNP6}[f.kind])
		s.net.cut(name, "", f.dur)
		s.net.cut("", name, f.dur)
		s.e.tracef("sim", "ISOLATED %s (%s of %s) for %v", name, role, s.parts[f.part], f.dur)
	case "np7":
		s.shape(shapeNP7)
		s.cutBoth(s.activeCtrl().name, name, f.dur)
	case "np8":
		s.shape(shapeNP8)
		if s.e.chance(0.5) {
			s.cutBoth(s.activeCtrl().name, isrMeta, f.dur)
			break
		}
		// Half the time the cut waits for the next ISR proposal, so that
		// the controller has a write in flight when it loses the store:
		// after the heal that write meets the new controller's records.
		s.onAlter = func() {
			s.e.tracef("sim", "NP8 starts as the controller takes an ISR proposal")
			s.cutBoth(s.activeCtrl().name, isrMeta, f.dur)
		}
	}
}

func (s *isrSim) cutBoth(a, b string, d time.Duration) {
	s.net.cut(a, b, d)
	s.net.cut(b, a, d)
	s.e.tracef("sim", "PARTITION %s | %s for %v", a, b, d)
}

// crash stops a broker; power: its page cache is lost too.
func (s *isrSim) crash(b *isrBroker, power bool) {
	name := brokerName(b.id)
	lost := ""
	if power {
		for _, part := range sortedKeys(b.logs) {
			l := b.logs[part]
			if u := l.Unflushed(); u > 0 {
				lost += fmt.Sprintf(" %s: %d unflushed records lost", part, u)
				s.stats.LostUnflushed += int(u)
			}
			l.Crash()
		}
		b.uncleanNext = true
		s.chk.impair(s, b.id)
	}
	b.up, b.registering = false, false
	b.incarnation++
	b.replicas = map[string]*isr.Replica{}
	b.pausedTo, b.slowBy = 0, 0
	s.e.tracef(name, "CRASHED (power loss %v)%s", power, lost)
}

// restart brings a crashed broker back: new replicas over its logs, and a
// registration under a new broker epoch.
func (s *isrSim) restart(b *isrBroker) {
	if b.up {
		return
	}
	b.up = true
	b.incarnation++
	// Not registered yet: a record naming the previous incarnation leader
	// (a late push) must not make it lead, so it has no broker epoch until
	// the store gives it one.
	b.epoch = 0
	for _, part := range sortedKeys(b.logs) {
		b.replicas[part] = s.newReplica(b, part)
	}
	s.e.tracef(brokerName(b.id), "RESTARTED")
	s.register(b)
	s.scheduleBroker(b)
}

// healAll ends every fault: the network heals, paused brokers wake,
// crashed ones restart.
func (s *isrSim) healAll() {
	s.net.cuts = nil
	for _, b := range s.brokers {
		b.slowBy = 0
		if b.pausedTo > s.e.now {
			b.pausedTo = s.e.now
		}
		if !b.up {
			s.restart(b)
		}
	}
	s.e.tracef("sim", "HEALED everything")
}
