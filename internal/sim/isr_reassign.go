package sim

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"quire/internal/isr"
)

// Partition reassignments in the ISR simulation (KIP-455): some seeds ask
// the controller, at a random time among the faults, to move a partition
// to a random target (a move, growth or shrink of a replica or two,
// sometimes a reordering), and now and then cancel it a little later. The
// request reaches whichever controller is active, as a watch would deliver
// it (notify). Brokers act on the records as isrnode.Manager does: a
// record naming a broker that has no replica of the partition opens one
// (a new, empty log), a record that no longer names it deletes the replica
// and its log, at once or when the broker next registers. The checkers are
// the run's own: no acknowledged or consumed record lost, one leader per
// epoch, followers a prefix of the leader; and the controller's
// reassignment invariants under -tags invariants.
//
// The draws come from a stream of their own (the seed with another PCG
// word), so a seed that draws no reassignment runs exactly as it did
// before reassignments existed.

// isrReassign is one drawn reassignment.
type isrReassign struct {
	at     time.Duration
	part   int
	target []isr.BrokerID
	// cancelAfter, when positive, cancels it this long after it was asked.
	cancelAfter time.Duration
}

func (r isrReassign) String() string {
	s := fmt.Sprintf("reassign(p%d to %v @%v", r.part, r.target, r.at)
	if r.cancelAfter > 0 {
		s += fmt.Sprintf(", cancel after %v", r.cancelAfter)
	}
	return s + ")"
}

// drawISRReassignments draws a seed's reassignments: none for most seeds,
// one or two for about a third.
func drawISRReassignments(seed int64, cfg isrConfig) []isrReassign {
	rng := rand.New(rand.NewPCG(uint64(seed), 0x5ea551e7))
	if rng.Float64() >= 0.35 {
		return nil
	}
	var out []isrReassign
	for range 1 + rng.IntN(2) {
		lo, hi := max(2, cfg.rf-1), min(cfg.brokers, cfg.rf+1)
		size := lo + rng.IntN(hi-lo+1)
		var target []isr.BrokerID
		for _, i := range rng.Perm(cfg.brokers)[:size] {
			target = append(target, isr.BrokerID(i+1))
		}
		r := isrReassign{
			at:     isrFaultsFrom + time.Duration(rng.Int64N(int64(isrFaultsUntil-isrFaultsFrom))),
			part:   rng.IntN(cfg.partitions),
			target: target,
		}
		if rng.IntN(5) == 0 {
			r.cancelAfter = time.Duration(1+rng.IntN(4)) * time.Second
		}
		out = append(out, r)
	}
	return out
}

func describeReassigns(rs []isrReassign) string {
	parts := make([]string, len(rs))
	for i, r := range rs {
		parts[i] = r.String()
	}
	return "[" + strings.Join(parts, " ") + "]"
}

// scheduleReassign asks for r at its time, and its cancel.
func (s *isrSim) scheduleReassign(r isrReassign) {
	name := s.parts[r.part]
	ask := func(req isr.ReassignRequest) {
		s.notify(fmt.Sprintf("reassign %s %s", name, req), func(c *isrController) {
			if err := c.c.Reassign(req, s.now()); err != nil {
				s.e.tracef(c.name, "reassign %s (%s) refused: %v", name, req, err)
				s.situation("reassignment refused")
			}
			s.drainController(c)
		})
	}
	s.e.at(r.at, func() {
		s.situation("reassignment asked")
		ask(isr.ReassignRequest{Partition: name, Target: slices.Clone(r.target)})
		if r.cancelAfter > 0 {
			s.e.after(r.cancelAfter, func() { ask(isr.ReassignRequest{Partition: name}) })
		}
	})
}

// reassignmentEvent counts a controller's reassignment events.
func (s *isrSim) reassignmentEvent(ev isr.Event) {
	for _, what := range []string{"started", "completed", "cancelled"} {
		if strings.HasPrefix(ev.Detail, what) {
			s.situation("reassignment " + what)
		}
	}
}

// assign brings broker b's replicas of st's partition in line with the
// record, as the replica manager does: it opens a replica over a new log
// when the record names b and b has none, and deletes the replica and log
// when the record no longer names b and is newer than what the replica
// applied (or b holds only the log). It returns the replica the record
// goes to (nil: none).
//
// Only a record newer than the last one the broker saw of the partition
// changes what it holds: a deposed controller's late push of an older
// record (which named the broker) must not bring back a replica the
// broker deleted, with an empty log that the old record would make lead.
// Brokers watching the store never see one; pushes here can.
func (s *isrSim) assign(b *isrBroker, st isr.PartitionState) *isr.Replica {
	part := st.Partition
	r := b.replicas[part]
	if old, ok := b.seen[part]; ok && !st.Newer(old) {
		return r
	}
	b.seen[part] = st.Clone()
	_, hasLog := b.logs[part]
	named := slices.Contains(st.Replicas, b.id)
	switch {
	case named && r == nil:
		if !hasLog {
			b.logs[part] = isr.NewMemLog()
		}
		r = s.newReplica(b, part)
		b.replicas[part] = r
		s.e.tracef(brokerName(b.id), "opens a replica of %s", part)
		s.situation("replica opened by a reassignment")
	case !named && (r == nil && hasLog || r != nil && (r.LeaderEpoch() == isr.NoEpoch || st.Newer(r.State()))):
		if r != nil {
			r.ApplyState(st, s.now()) // it stops leading or following
			s.drainReplica(b, r)
		}
		delete(b.replicas, part)
		delete(b.logs, part)
		s.e.tracef(brokerName(b.id), "deletes its replica of %s: a reassignment removed it", part)
		s.situation("replica deleted by a reassignment")
		return nil
	}
	return r
}
