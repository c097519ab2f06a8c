package isr

import (
	"slices"
	"testing"
)

func logEnd(lastEpoch int32, end int64) []ReplicaLogEnd {
	return []ReplicaLogEnd{{Partition: "p", LastEpoch: lastEpoch, EndOffset: end}}
}

// TestUncleanRecovery: every replica that held the committed records comes
// back from an unclean shutdown, so the ISR and ELR empty out and their
// members gather in the LastKnownELR. Replica 3 left the ISR while it still
// had min.insync.replicas members, so it is never a candidate, however long
// its log. Balanced waits for every last known member, Aggressive elects at
// once among those registered, None never elects.
func TestUncleanRecovery(t *testing.T) {
	for _, tc := range []struct {
		strategy RecoveryStrategy
		// leaders after: 2 registered while 1 is down again; 1 back.
		whileOneDown, afterOneBack BrokerID
	}{
		{RecoveryBalanced, NoLeader, 1},
		{RecoveryAggressive, 2, 2},
		{RecoveryNone, NoLeader, NoLeader},
	} {
		t.Run(tc.strategy.String(), func(t *testing.T) {
			c, store := newTestController(t, ControllerConfig{MinISR: 2, UncleanRecovery: tc.strategy})
			s, _ := c.Partition("p")
			alter(c, store, s, 1, 2) // 3 leaves while |ISR| ≥ minISR: not eligible
			c.SessionExpired(2, 2, t0)
			c.SessionExpired(1, 1, t0)
			c.SessionExpired(3, 3, t0)
			store.run(c, t0)
			if s, _ = c.Partition("p"); s.Leader != NoLeader || len(s.ELR) != 2 || len(s.LastKnownELR) != 0 {
				t.Fatalf("all down: %s", s)
			}
			// 3 has the longest log but never held every committed record.
			c.Register(Registration{ID: 3, Epoch: 30, UncleanShutdown: true, LogEnds: logEnd(4, 99)}, t0)
			c.Register(Registration{ID: 1, Epoch: 31, UncleanShutdown: true, LogEnds: logEnd(4, 15)}, t0)
			store.run(c, t0)
			s, _ = c.Partition("p")
			if s.Leader != NoLeader || !slices.Equal(s.LastKnownELR, []BrokerID{1}) || !s.InELR(2) {
				t.Fatalf("1 back uncleanly, 2 still eligible: %s", s)
			}
			c.SessionExpired(1, 31, t0)
			c.Register(Registration{ID: 2, Epoch: 32, UncleanShutdown: true, LogEnds: logEnd(4, 12)}, t0)
			rd := store.run(c, t0)
			s, _ = c.Partition("p")
			if s.Leader != tc.whileOneDown {
				t.Fatalf("2 back uncleanly, 1 down again: leader %d, want %d: %s", s.Leader, tc.whileOneDown, s)
			}
			if s.Leader == NoLeader && (len(s.ISR) != 0 || len(s.ELR) != 0 || !slices.Equal(s.LastKnownELR, []BrokerID{1, 2})) {
				t.Fatalf("waiting: %s", s)
			}
			c.Register(Registration{ID: 1, Epoch: 33, LossEpoch: 31, LogEnds: logEnd(4, 15)}, t0)
			rd2 := store.run(c, t0)
			rd.Events = append(rd.Events, rd2.Events...)
			s, _ = c.Partition("p")
			if s.Leader != tc.afterOneBack {
				t.Fatalf("1 back: leader %d, want %d: %s", s.Leader, tc.afterOneBack, s)
			}
			reported := slices.ContainsFunc(rd.Events, func(e Event) bool { return e.Kind == EventUncleanElection })
			if s.Leader != NoLeader {
				if !s.Unclean || !reported || len(s.ISR) != 1 || len(s.LastKnownELR) != 0 || len(s.ELR) != 0 {
					t.Fatalf("recovered: %s (reported %v)", s, reported)
				}
				if want := c.brokers[s.Leader].epoch; s.LeaderBrokerEpoch != want {
					t.Fatalf("recovered leader's broker epoch %d, want %d", s.LeaderBrokerEpoch, want)
				}
			} else if reported {
				t.Fatal("None reported an unclean election")
			}
		})
	}
}

// TestUncleanRecoveryAfterRestart: a new controller after every broker
// died at once (a SIGKILL of the standalone): the records still name the
// old incarnations; each broker registers back uncleanly in turn and the
// last registration elects the longest log, by last epoch before offset.
func TestUncleanRecoveryAfterRestart(t *testing.T) {
	old, store := newTestController(t, ControllerConfig{Epoch: 1, MinISR: 2})
	old.Ready()
	var parts []StoredPartition
	for _, p := range store.records {
		parts = append(parts, p)
	}
	c := NewController(ControllerConfig{Epoch: 2, MinISR: 2}, t0)
	c.Load(parts, nil, t0)
	store.run(c, t0)
	ends := map[BrokerID][]ReplicaLogEnd{1: logEnd(3, 40), 2: logEnd(4, 20), 3: logEnd(4, 18)}
	for i, id := range []BrokerID{1, 3, 2} {
		c.Register(Registration{ID: id, Epoch: int64(10 + i), UncleanShutdown: true, LogEnds: ends[id]}, t0)
		store.run(c, t0)
		s, _ := c.Partition("p")
		if i < 2 && s.Leader != NoLeader {
			t.Fatalf("elected before every replica of the last known ELR was back: %s", s)
		}
	}
	s, _ := c.Partition("p")
	if s.Leader != 2 || !s.Unclean || !slices.Equal(s.ISRIDs(), []BrokerID{2}) {
		t.Fatalf("want 2 (epoch 4, end 20) elected by recovery: %s", s)
	}
}

func TestParseRecoveryStrategy(t *testing.T) {
	for _, r := range []RecoveryStrategy{RecoveryBalanced, RecoveryAggressive, RecoveryNone} {
		if got, err := ParseRecoveryStrategy(r.String()); err != nil || got != r {
			t.Fatalf("%s: %v %v", r, got, err)
		}
	}
	if _, err := ParseRecoveryStrategy("eager"); err == nil {
		t.Fatal("eager parsed")
	}
}
