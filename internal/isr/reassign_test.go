package isr

import (
	"errors"
	"slices"
	"testing"
)

// newReassignController is newTestController with brokers 4..6 registered
// too (broker epochs equal to their ids): partition "p" on (1,2,3), led by
// 1, and three brokers to move it to.
func newReassignController(t *testing.T, cfg ControllerConfig) (*Controller, *memStore) {
	t.Helper()
	c, store := newTestController(t, cfg)
	for id := BrokerID(4); id <= 6; id++ {
		c.Register(Registration{ID: id, Epoch: int64(id)}, t0)
	}
	store.run(c, t0)
	return c, store
}

// reassign asks for a reassignment and runs the writes it makes.
func reassign(t *testing.T, c *Controller, store *memStore, target ...BrokerID) (PartitionState, ControllerReady) {
	t.Helper()
	if err := c.Reassign(ReassignRequest{Partition: "p", Target: target}, t0); err != nil {
		t.Fatalf("reassign to %v: %v", target, err)
	}
	rd := store.run(c, t0)
	s, _ := c.Partition("p")
	return s, rd
}

// join has the leader propose the ISR plus ids (as it does for followers
// that caught up) and runs the writes that follow.
func join(t *testing.T, c *Controller, store *memStore, ids ...BrokerID) (PartitionState, ControllerReady) {
	t.Helper()
	s, _ := c.Partition("p")
	isr := s.ISRIDs()
	for _, id := range ids {
		isr = append(isr, id)
	}
	req := AlterPartitionRequest{ID: 9, Partition: "p", Broker: s.Leader, BrokerEpoch: s.LeaderBrokerEpoch,
		LeaderEpoch: s.LeaderEpoch, PartitionEpoch: s.PartitionEpoch}
	for _, id := range isr {
		req.NewISR = append(req.NewISR, Member{ID: id, BrokerEpoch: int64(id)})
	}
	c.AlterPartition(req, t0)
	rd := store.run(c, t0)
	if len(rd.AlterPartitionResponses) != 1 || rd.AlterPartitionResponses[0].Err != nil {
		t.Fatalf("%d joining the ISR: %+v", ids, rd.AlterPartitionResponses)
	}
	s, _ = c.Partition("p")
	return s, rd
}

func pushedTo(rd ControllerReady) []BrokerID {
	var out []BrokerID
	for _, p := range rd.Pushes {
		if !slices.Contains(out, p.To) {
			out = append(out, p.To)
		}
	}
	slices.Sort(out)
	return out
}

func wantRecord(t *testing.T, s PartitionState, replicas, adding, removing, isr []BrokerID, leader BrokerID) {
	t.Helper()
	if !slices.Equal(s.Replicas, replicas) || !slices.Equal(s.AddingReplicas, adding) || !slices.Equal(s.RemovingReplicas, removing) ||
		!slices.Equal(s.ISRIDs(), isr) || s.Leader != leader {
		t.Fatalf("record %s replicas=%v adding=%v removing=%v; want replicas=%v adding=%v removing=%v isr=%v leader=%d",
			s, s.Replicas, s.AddingReplicas, s.RemovingReplicas, replicas, adding, removing, isr, leader)
	}
}

// TestReassignDisjoint moves a partition from (1,2,3) to (4,5,6): the
// replicas grow to the union with the ISR unchanged; each new replica joins
// the ISR as the leader proposes it; once the last joined the controller
// completes on its own: the target is the replica set, the old replicas
// leave the ISR, and since the leader was one of them a new leader of the
// target is elected under a new leader epoch. The removed brokers get the
// record too.
func TestReassignDisjoint(t *testing.T) {
	c, store := newReassignController(t, ControllerConfig{})
	s0, _ := c.Partition("p")
	s, rd := reassign(t, c, store, 4, 5, 6)
	wantRecord(t, s, []BrokerID{4, 5, 6, 1, 2, 3}, []BrokerID{4, 5, 6}, []BrokerID{1, 2, 3}, []BrokerID{1, 2, 3}, 1)
	if s.LeaderEpoch != s0.LeaderEpoch || s.PartitionEpoch != s0.PartitionEpoch+1 {
		t.Fatalf("start %s: want the leader epoch kept, the partition epoch bumped (from %s)", s, s0)
	}
	if got := pushedTo(rd); !slices.Equal(got, []BrokerID{1, 2, 3, 4, 5, 6}) {
		t.Fatalf("start pushed to %v", got)
	}
	if !hasEvent(rd, EventReassignment, "started") {
		t.Fatalf("no started event: %v", rd.Events)
	}
	s, _ = join(t, c, store, 4)
	s, _ = join(t, c, store, 5)
	if !s.Reassigning() {
		t.Fatalf("completed with 6 outside the ISR: %s", s)
	}
	s, rd = join(t, c, store, 6)
	wantRecord(t, s, []BrokerID{4, 5, 6}, nil, nil, []BrokerID{4, 5, 6}, 4)
	if s.LeaderEpoch != s0.LeaderEpoch+1 {
		t.Fatalf("completion moved the leader without a new leader epoch: %s", s)
	}
	if got := pushedTo(rd); !slices.Equal(got, []BrokerID{1, 2, 3, 4, 5, 6}) {
		t.Fatalf("completion pushed to %v, want the removed brokers too", got)
	}
	if !hasEvent(rd, EventReassignment, "completed") {
		t.Fatalf("no completed event: %v", rd.Events)
	}
}

// TestReassignShrinkThenGrow: 3 → 2 replicas adds nothing, so it completes
// in the start's own write, the leader kept under a new leader epoch (the
// removed replica's fetches are fenced); 2 → 3 adds one, which completes
// once it joins, removing nobody: the leader epoch stays.
func TestReassignShrinkThenGrow(t *testing.T) {
	c, store := newReassignController(t, ControllerConfig{})
	s0, _ := c.Partition("p")
	s, rd := reassign(t, c, store, 1, 2)
	wantRecord(t, s, []BrokerID{1, 2}, nil, nil, []BrokerID{1, 2}, 1)
	if s.LeaderEpoch != s0.LeaderEpoch+1 || s.Leader != 1 {
		t.Fatalf("shrink around leader 1: %s, want it kept under a new leader epoch (fencing 3's fetches)", s)
	}
	if got := pushedTo(rd); !slices.Equal(got, []BrokerID{1, 2, 3}) {
		t.Fatalf("shrink pushed to %v, want 3 told too", got)
	}
	s, _ = reassign(t, c, store, 1, 2, 3)
	wantRecord(t, s, []BrokerID{1, 2, 3}, []BrokerID{3}, nil, []BrokerID{1, 2}, 1)
	s, _ = join(t, c, store, 3)
	wantRecord(t, s, []BrokerID{1, 2, 3}, nil, nil, []BrokerID{1, 2, 3}, 1)
	if s.LeaderEpoch != s0.LeaderEpoch+1 {
		t.Fatalf("growth changed the leader epoch: %s", s)
	}
	// The same target again is nothing to do: no write.
	if err := c.Reassign(ReassignRequest{Partition: "p", Target: []BrokerID{1, 2, 3}}, t0); err != nil {
		t.Fatal(err)
	}
	if rd := store.run(c, t0); len(rd.Pushes) != 0 {
		t.Fatalf("a reassignment to the current replicas wrote: %v", rd.Pushes)
	}
}

// TestReassignCancel: cancelling restores the original replicas; an adding
// replica that had joined leaves the ISR again. A second cancel has
// nothing to cancel. A new target replacing one in progress is computed
// from the original replicas.
func TestReassignCancel(t *testing.T) {
	c, store := newReassignController(t, ControllerConfig{})
	reassign(t, c, store, 4, 5, 6)
	join(t, c, store, 4)
	s0, _ := c.Partition("p")
	s, _ := reassign(t, c, store, 4, 5, 2) // replaces it: 6 dropped, 1 and 3 removing
	wantRecord(t, s, []BrokerID{4, 5, 2, 1, 3}, []BrokerID{4, 5}, []BrokerID{1, 3}, []BrokerID{4, 2, 1, 3}, 1)
	if s.LeaderEpoch != s0.LeaderEpoch+1 {
		t.Fatalf("6 dropped without a new leader epoch: %s after %s", s, s0)
	}
	if err := c.Reassign(ReassignRequest{Partition: "p"}, t0); err != nil {
		t.Fatal(err)
	}
	rd := store.run(c, t0)
	s, _ = c.Partition("p")
	wantRecord(t, s, []BrokerID{2, 1, 3}, nil, nil, []BrokerID{2, 1, 3}, 1)
	if s.LeaderEpoch != s0.LeaderEpoch+2 {
		t.Fatalf("4 and 5 dropped without a new leader epoch: %s", s)
	}
	if !hasEvent(rd, EventReassignment, "cancelled") {
		t.Fatalf("no cancelled event: %v", rd.Events)
	}
	if got := pushedTo(rd); !slices.Equal(got, []BrokerID{1, 2, 3, 4, 5}) {
		t.Fatalf("cancel pushed to %v, want the dropped adding replicas told too", got)
	}
	if err := c.Reassign(ReassignRequest{Partition: "p"}, t0); !errors.Is(err, ErrNoReassignmentInProgress) {
		t.Fatalf("cancel without a reassignment: %v", err)
	}
}

// TestReassignLeaderMovedOut: the leader is not in the target; completion
// elects the first in-sync replica of the target.
func TestReassignLeaderMovedOut(t *testing.T) {
	c, store := newReassignController(t, ControllerConfig{})
	s0, _ := c.Partition("p")
	reassign(t, c, store, 3, 2, 4)
	s, rd := join(t, c, store, 4)
	wantRecord(t, s, []BrokerID{3, 2, 4}, nil, nil, []BrokerID{3, 2, 4}, 3)
	if s.LeaderEpoch != s0.LeaderEpoch+1 || !hasEvent(rd, EventElected, "") {
		t.Fatalf("leader moved out: %s, events %v", s, rd.Events)
	}
}

// TestReassignWaitsForMinISR: with min.insync.replicas 2, a reassignment
// whose adding replica joined does not complete while only one replica of
// its target is in sync (the removed replicas delete their logs, so
// acknowledged records would rest on one broker); it completes once a
// second one is.
func TestReassignWaitsForMinISR(t *testing.T) {
	c, store := newReassignController(t, ControllerConfig{MinISR: 2})
	s0, _ := c.Partition("p")
	alter(c, store, s0, 1, 2) // 3 falls out of the ISR
	reassign(t, c, store, 3, 4)
	s, _ := join(t, c, store, 4)
	wantRecord(t, s, []BrokerID{3, 4, 1, 2}, []BrokerID{4}, []BrokerID{1, 2}, []BrokerID{4, 1, 2}, 1)
	s, _ = join(t, c, store, 3)
	wantRecord(t, s, []BrokerID{3, 4}, nil, nil, []BrokerID{3, 4}, 3)
}

// TestReassignAddingNeverElected: an adding replica that has not joined
// the ISR is not elected even by an unclean election, which takes an
// original replica instead, or nobody.
func TestReassignAddingNeverElected(t *testing.T) {
	c, store := newReassignController(t, ControllerConfig{DisableELR: true, UncleanElection: true})
	reassign(t, c, store, 4, 5, 6)
	for id := BrokerID(1); id <= 3; id++ {
		c.SessionExpired(id, int64(id), t0)
		store.run(c, t0)
	}
	s, _ := c.Partition("p")
	if s.Leader != NoLeader {
		t.Fatalf("with only the adding replicas live, %d was elected: %s", s.Leader, s)
	}
	if err := c.Elect("p", ElectionUnclean, t0); !errors.Is(err, ErrEligibleLeadersNotAvailable) {
		t.Fatalf("unclean election with only adding replicas live: %v", err)
	}
	c.Register(Registration{ID: 2, Epoch: 22}, t0)
	store.run(c, t0)
	s, _ = c.Partition("p")
	if s.Leader != 2 || !s.Unclean {
		t.Fatalf("broker 2 back: %s, want it elected uncleanly", s)
	}
}

// TestReassignRefused: the requests Kafka refuses, each with its error,
// and nothing written.
func TestReassignRefused(t *testing.T) {
	c, store := newReassignController(t, ControllerConfig{})
	for _, tc := range []struct {
		req  ReassignRequest
		want error
	}{
		{ReassignRequest{Partition: "p", Target: []BrokerID{}}, ErrInvalidReplicaAssignment},
		{ReassignRequest{Partition: "p", Target: []BrokerID{4, 4}}, ErrInvalidReplicaAssignment},
		{ReassignRequest{Partition: "p", Target: []BrokerID{4, 99}}, ErrInvalidReplicaAssignment},
		{ReassignRequest{Partition: "p"}, ErrNoReassignmentInProgress},
		{ReassignRequest{Partition: "nope", Target: []BrokerID{4}}, ErrUnknownPartition},
		{ReassignRequest{Partition: "p", Target: []BrokerID{4, 5}, KeepReplicationFactor: true}, ErrInvalidReplicationFactor},
	} {
		if err := c.Reassign(tc.req, t0); !errors.Is(err, tc.want) {
			t.Errorf("%+v: %v, want %v", tc.req, err, tc.want)
		}
	}
	if rd := store.run(c, t0); len(rd.Pushes) != 0 {
		t.Fatalf("a refused reassignment wrote: %v", rd.Pushes)
	}
	// Keeping the replication factor: a move of the same size is fine.
	if err := c.Reassign(ReassignRequest{Partition: "p", Target: []BrokerID{4, 5, 6}, KeepReplicationFactor: true}, t0); err != nil {
		t.Fatal(err)
	}
	store.run(c, t0)
	// A cancel that would leave no in-sync replica: refused.
	join(t, c, store, 4)
	for _, id := range []BrokerID{1, 2, 3} {
		c.SessionExpired(id, int64(id), t0)
		store.run(c, t0)
	}
	if s, _ := c.Partition("p"); s.Leader != 4 {
		t.Fatalf("want 4 (in the ISR) elected: %s", s)
	}
	if err := c.Reassign(ReassignRequest{Partition: "p"}, t0); !errors.Is(err, ErrInvalidReplicaAssignment) {
		t.Fatalf("cancel dropping every in-sync replica: %v", err)
	}
}

// TestReassignSurvivesFailedWrite: a reassignment whose write fails (the
// store down) is written once the store is back.
func TestReassignSurvivesFailedWrite(t *testing.T) {
	c, store := newReassignController(t, ControllerConfig{})
	store.down = true
	if err := c.Reassign(ReassignRequest{Partition: "p", Target: []BrokerID{1, 2, 4}}, t0); err != nil {
		t.Fatal(err)
	}
	store.run(c, t0)
	store.down = false
	later := t0.Add(2 * c.cfg.RetryInterval)
	c.Tick(later)
	store.run(c, later)
	s, _ := c.Partition("p")
	wantRecord(t, s, []BrokerID{1, 2, 4, 3}, []BrokerID{4}, []BrokerID{3}, []BrokerID{1, 2, 3}, 1)
}

func hasEvent(rd ControllerReady, kind EventKind, detail string) bool {
	return slices.ContainsFunc(rd.Events, func(e Event) bool {
		return e.Kind == kind && (detail == "" || len(e.Detail) >= len(detail) && e.Detail[:len(detail)] == detail)
	})
}
