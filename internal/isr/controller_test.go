package isr

import (
	"errors"
	"slices"
	"testing"
	"time"
)

// memStore is a model metadata store for controller tests: versioned
// records, compare-and-swap, and a switch that makes it unreachable.
type memStore struct {
	records map[string]StoredPartition
	rev     int64
	down    bool
}

func newMemStore() *memStore { return &memStore{records: map[string]StoredPartition{}} }

func (m *memStore) exec(op MetaOp) MetaResult {
	if m.down {
		return MetaResult{ID: op.ID, Err: errors.New("store unavailable")}
	}
	rec, ok := m.records[op.Partition]
	switch op.Kind {
	case MetaRead:
		if !ok {
			return MetaResult{ID: op.ID, Err: ErrVersionConflict}
		}
		return MetaResult{ID: op.ID, Version: rec.Version, State: rec.State.Clone()}
	case MetaCreate:
		if ok {
			return MetaResult{ID: op.ID, Err: ErrVersionConflict}
		}
	case MetaWrite:
		if op.Expected != AnyVersion && (!ok || rec.Version != op.Expected) {
			return MetaResult{ID: op.ID, Err: ErrVersionConflict}
		}
	case MetaDelete:
		if !ok || rec.Version != op.Expected {
			return MetaResult{ID: op.ID, Err: ErrVersionConflict}
		}
		delete(m.records, op.Partition)
		return MetaResult{ID: op.ID}
	}
	m.rev++
	m.records[op.Partition] = StoredPartition{State: op.State.Clone(), Version: m.rev}
	return MetaResult{ID: op.ID, Version: m.rev}
}

// run executes the controller's store operations until it wants none, and
// returns everything else it produced.
func (m *memStore) run(c *Controller, now time.Time) ControllerReady {
	var all ControllerReady
	for {
		rd := c.Ready()
		all.Pushes = append(all.Pushes, rd.Pushes...)
		all.AlterPartitionResponses = append(all.AlterPartitionResponses, rd.AlterPartitionResponses...)
		all.Events = append(all.Events, rd.Events...)
		if len(rd.MetaOps) == 0 {
			return all
		}
		for _, op := range rd.MetaOps {
			c.StepMeta(m.exec(op), now)
		}
	}
}

// newTestController starts a controller with brokers 1..3 registered at
// broker epochs equal to their ids, and partition "p" on (1,2,3) led by 1.
func newTestController(t *testing.T, cfg ControllerConfig) (*Controller, *memStore) {
	t.Helper()
	if cfg.Epoch == 0 {
		cfg.Epoch = 1
	}
	store := newMemStore()
	c := NewController(cfg, t0)
	c.Load(nil, nil, t0)
	for id := BrokerID(1); id <= 3; id++ {
		c.Register(Registration{ID: id, Epoch: int64(id)}, t0)
	}
	if err := c.CreatePartition("p", []BrokerID{1, 2, 3}, t0); err != nil {
		t.Fatal(err)
	}
	store.run(c, t0)
	s, ok := c.Partition("p")
	if !ok || s.Leader != 1 || len(s.ISR) != 3 {
		t.Fatalf("created %s", s)
	}
	return c, store
}

func alter(c *Controller, store *memStore, s PartitionState, isr ...BrokerID) AlterPartitionResponse {
	req := AlterPartitionRequest{ID: 9, Partition: "p", Broker: s.Leader, BrokerEpoch: s.LeaderBrokerEpoch,
		LeaderEpoch: s.LeaderEpoch, PartitionEpoch: s.PartitionEpoch}
	for _, id := range isr {
		req.NewISR = append(req.NewISR, Member{ID: id, BrokerEpoch: int64(id)})
	}
	c.AlterPartition(req, t0)
	rd := store.run(c, t0)
	if len(rd.AlterPartitionResponses) != 1 {
		panic("want one answer")
	}
	return rd.AlterPartitionResponses[0]
}

func TestAlterPartitionCompareAndSwap(t *testing.T) {
	c, store := newTestController(t, ControllerConfig{})
	s0, _ := c.Partition("p")
	resp := alter(c, store, s0, 1, 2)
	if resp.Err != nil || resp.State.PartitionEpoch != s0.PartitionEpoch+1 || resp.State.LeaderEpoch != s0.LeaderEpoch {
		t.Fatalf("shrink: %v %s", resp.Err, resp.State)
	}
	// The same proposal again, based on the old partition epoch but asking
	// for what is now the ISR: the retry of an applied proposal succeeds.
	if resp := alter(c, store, s0, 1, 2); resp.Err != nil {
		t.Fatalf("retry of the applied proposal: %v", resp.Err)
	}
	// A different proposal on the old partition epoch is stale.
	if resp := alter(c, store, s0, 1); !errors.Is(resp.Err, ErrInvalidUpdateVersion) {
		t.Fatalf("stale proposal: %v", resp.Err)
	}
	// From a leader of an older leader epoch: fenced.
	old := s0
	old.LeaderEpoch--
	if resp := alter(c, store, old, 1); !errors.Is(resp.Err, ErrFencedLeaderEpoch) {
		t.Fatalf("old leader epoch: %v", resp.Err)
	}
	// Adding a member under a broker epoch that is not its current one.
	s1, _ := c.Partition("p")
	req := AlterPartitionRequest{ID: 10, Partition: "p", Broker: 1, BrokerEpoch: 1, LeaderEpoch: s1.LeaderEpoch,
		PartitionEpoch: s1.PartitionEpoch, NewISR: []Member{{1, 1}, {2, 2}, {3, 77}}}
	c.AlterPartition(req, t0)
	if rd := store.run(c, t0); !errors.Is(rd.AlterPartitionResponses[0].Err, ErrIneligibleReplica) {
		t.Fatalf("stale member epoch: %v", rd.AlterPartitionResponses[0].Err)
	}
}

func TestElectionOrder(t *testing.T) {
	t.Run("isr first", func(t *testing.T) {
		c, store := newTestController(t, ControllerConfig{})
		c.SessionExpired(1, 1, t0)
		store.run(c, t0)
		s, _ := c.Partition("p")
		if s.Leader != 2 || s.LeaderEpoch != 1 || s.InISR(1) || s.Unclean {
			t.Fatalf("after the leader's session expired: %s", s)
		}
	})
	t.Run("unclean only when enabled, and reported", func(t *testing.T) {
		for _, unclean := range []bool{false, true} {
			c, store := newTestController(t, ControllerConfig{UncleanElection: unclean, DisableELR: true})
			s, _ := c.Partition("p")
			alter(c, store, s, 1) // ISR = {1}
			c.SessionExpired(1, 1, t0)
			rd := store.run(c, t0)
			s, _ = c.Partition("p")
			reported := slices.ContainsFunc(rd.Events, func(e Event) bool { return e.Kind == EventUncleanElection })
			switch {
			case unclean && (s.Leader != 2 || !s.Unclean || !reported || len(s.ISR) != 1):
				t.Fatalf("unclean on: %s, reported %v", s, reported)
			case !unclean && (s.Leader != NoLeader || reported || !s.InISR(1)):
				t.Fatalf("unclean off: %s (the last ISR member stays in the ISR without ELR)", s)
			}
			if !unclean {
				// Its return makes it leader again, cleanly.
				c.Register(Registration{ID: 1, Epoch: 10}, t0)
				store.run(c, t0)
				if s, _ = c.Partition("p"); s.Leader != 1 || s.LeaderBrokerEpoch != 10 {
					t.Fatalf("after the last ISR member returned: %s", s)
				}
			}
		}
	})
	t.Run("eligible leader replicas", func(t *testing.T) {
		c, store := newTestController(t, ControllerConfig{MinISR: 2})
		s, _ := c.Partition("p")
		alter(c, store, s, 1, 2) // broker 3 out (while |ISR| ≥ minISR: not an ELR member)
		c.SessionExpired(2, 2, t0)
		store.run(c, t0)
		s, _ = c.Partition("p")
		if !s.InELR(2) || s.InELR(3) || len(s.ISR) != 1 {
			t.Fatalf("broker 2 left the ISR below minISR: %s", s)
		}
		c.SessionExpired(1, 1, t0)
		store.run(c, t0)
		s, _ = c.Partition("p")
		if s.Leader != NoLeader || !s.InELR(1) || !s.InELR(2) || len(s.ISR) != 0 {
			t.Fatalf("no live ISR or ELR member: %s", s)
		}
		// Broker 2 comes back cleanly: elected from the ELR.
		c.Register(Registration{ID: 2, Epoch: 20}, t0)
		store.run(c, t0)
		s, _ = c.Partition("p")
		if s.Leader != 2 || !s.InISR(2) || s.InELR(2) || !s.InELR(1) || s.Unclean {
			t.Fatalf("ELR election: %s", s)
		}
	})
	t.Run("unclean shutdown leaves the ELR", func(t *testing.T) {
		c, store := newTestController(t, ControllerConfig{MinISR: 2})
		s, _ := c.Partition("p")
		alter(c, store, s, 1, 2)
		c.SessionExpired(2, 2, t0)
		c.SessionExpired(1, 1, t0)
		store.run(c, t0)
		c.Register(Registration{ID: 2, Epoch: 20, UncleanShutdown: true}, t0)
		store.run(c, t0)
		s, _ = c.Partition("p")
		if s.Leader != NoLeader || s.InELR(2) || !s.InELR(1) {
			t.Fatalf("a replica back from an unclean shutdown was kept eligible: %s", s)
		}
	})
}

func TestEpochsBump(t *testing.T) {
	c, store := newTestController(t, ControllerConfig{})
	s0, _ := c.Partition("p")
	alter(c, store, s0, 1, 2)
	s1, _ := c.Partition("p")
	c.SessionExpired(1, 1, t0)
	store.run(c, t0)
	s2, _ := c.Partition("p")
	if s1.PartitionEpoch != s0.PartitionEpoch+1 || s1.LeaderEpoch != s0.LeaderEpoch {
		t.Fatalf("ISR change: %s -> %s", s0, s1)
	}
	if s2.PartitionEpoch != s1.PartitionEpoch+1 || s2.LeaderEpoch != s1.LeaderEpoch+1 {
		t.Fatalf("leader change: %s -> %s", s1, s2)
	}
}

// TestDeposedController: a new controller rewrites every record under its
// epoch, so the old one's next write fails its CAS; reading the record it
// finds a newer controller epoch and stops.
func TestDeposedController(t *testing.T) {
	old, store := newTestController(t, ControllerConfig{Epoch: 1})
	var regs []Registration
	for id := BrokerID(1); id <= 3; id++ {
		regs = append(regs, Registration{ID: id, Epoch: int64(id)})
	}
	var parts []StoredPartition
	for _, p := range store.records {
		parts = append(parts, p)
	}
	next := NewController(ControllerConfig{Epoch: 2}, t0)
	next.Load(parts, regs, t0)
	store.run(next, t0)
	if s := store.records["p"].State; s.ControllerEpoch != 2 {
		t.Fatalf("record not rewritten under the new epoch: %s", s)
	}
	s, _ := old.Partition("p")
	resp := alter(old, store, s, 1, 2)
	if !errors.Is(resp.Err, ErrNotController) || !old.Deposed() {
		t.Fatalf("deposed controller's write: %v, deposed %v", resp.Err, old.Deposed())
	}
	if s := store.records["p"].State; len(s.ISR) != 3 || s.ControllerEpoch != 2 {
		t.Fatalf("deposed controller changed the record: %s", s)
	}
}

func TestStoreUnavailableRetries(t *testing.T) {
	c, store := newTestController(t, ControllerConfig{RetryInterval: time.Second})
	store.down = true
	c.SessionExpired(1, 1, t0)
	store.run(c, t0)
	if s, _ := c.Partition("p"); s.Leader != 1 {
		t.Fatalf("record changed while the store was down: %s", s)
	}
	store.down = false
	c.Tick(at(500 * time.Millisecond))
	store.run(c, t0)
	if s, _ := c.Partition("p"); s.Leader != 1 {
		t.Fatal("retried before RetryInterval")
	}
	c.Tick(at(time.Second))
	store.run(c, t0)
	if s, _ := c.Partition("p"); s.Leader != 2 {
		t.Fatalf("not retried: %s", s)
	}
}

func TestPreferredLeaderAndAutoRebalance(t *testing.T) {
	c, store := newTestController(t, ControllerConfig{RebalanceInterval: 300 * time.Second, ImbalancePercent: 10})
	c.SessionExpired(1, 1, t0)
	store.run(c, t0)
	c.Register(Registration{ID: 1, Epoch: 11}, t0)
	store.run(c, t0)
	s, _ := c.Partition("p")
	if s.Leader == 1 || s.InISR(1) {
		t.Fatalf("rejoining moved leadership or skipped the ISR: %s", s)
	}
	if err := c.ElectPreferred("p", t0); !errors.Is(err, ErrPreferredLeaderNotAvailable) {
		t.Fatalf("preferred replica out of the ISR: %v", err)
	}
	// The leader (2) adds broker 1 back, under its new broker epoch.
	c.AlterPartition(AlterPartitionRequest{ID: 3, Partition: "p", Broker: 2, BrokerEpoch: 2, LeaderEpoch: s.LeaderEpoch,
		PartitionEpoch: s.PartitionEpoch, NewISR: []Member{{1, 11}, {2, 2}, {3, 3}}}, t0)
	if rd := store.run(c, t0); rd.AlterPartitionResponses[0].Err != nil {
		t.Fatal(rd.AlterPartitionResponses[0].Err)
	}
	c.Tick(at(299 * time.Second))
	store.run(c, t0)
	if s, _ := c.Partition("p"); s.Leader != 2 {
		t.Fatal("rebalanced before the check interval")
	}
	c.Tick(at(300 * time.Second))
	rd := store.run(c, t0)
	if s, _ := c.Partition("p"); s.Leader != 1 || !slices.ContainsFunc(rd.Events, func(e Event) bool { return e.Kind == EventRebalance }) {
		t.Fatalf("auto rebalance: %s", s)
	}
}

// TestImbalanceThreshold: below the threshold nothing moves.
func TestImbalanceThreshold(t *testing.T) {
	store := newMemStore()
	c := NewController(ControllerConfig{Epoch: 1, ImbalancePercent: 50, RebalanceInterval: time.Second}, t0)
	for id := BrokerID(1); id <= 3; id++ {
		c.Register(Registration{ID: id, Epoch: int64(id)}, t0)
	}
	// Broker 1 is preferred for a and b; b ends up led by 2: 50% ≤ 50%.
	for _, name := range []string{"a", "b"} {
		if err := c.CreatePartition(name, []BrokerID{1, 2, 3}, t0); err != nil {
			t.Fatal(err)
		}
	}
	store.run(c, t0)
	b, _ := c.Partition("b")
	b.Leader, b.LeaderEpoch, b.PartitionEpoch, b.LeaderBrokerEpoch = 2, b.LeaderEpoch+1, b.PartitionEpoch+1, 2
	c.parts["b"].state = b
	c.Tick(at(time.Second))
	store.run(c, t0)
	if s, _ := c.Partition("b"); s.Leader != 2 {
		t.Fatalf("moved at the threshold: %s", s)
	}
	c.cfg.ImbalancePercent = 49
	c.Tick(at(2 * time.Second))
	store.run(c, t0)
	if s, _ := c.Partition("b"); s.Leader != 1 {
		t.Fatalf("not moved above the threshold: %s", s)
	}
}

// TestCreateOfUnknownOutcome: a create that failed on an unreachable store
// is looked up once the store is back; if it never happened the partition
// is forgotten and can be created again.
func TestCreateOfUnknownOutcome(t *testing.T) {
	store := newMemStore()
	c := NewController(ControllerConfig{Epoch: 1, RetryInterval: time.Second}, t0)
	c.Register(Registration{ID: 1, Epoch: 1}, t0)
	store.down = true
	if err := c.CreatePartition("q", []BrokerID{1}, t0); err != nil {
		t.Fatal(err)
	}
	store.run(c, t0)
	if _, ok := c.Partition("q"); ok {
		t.Fatal("created on a store that is down")
	}
	store.down = false
	c.Tick(at(time.Second)) // the read finds nothing
	store.run(c, at(time.Second))
	if len(c.Partitions()) != 0 {
		t.Fatalf("partitions %v after a create that never happened", c.Partitions())
	}
	if err := c.CreatePartition("q", []BrokerID{1}, at(time.Second)); err != nil {
		t.Fatal(err)
	}
	store.run(c, at(time.Second))
	if s, ok := c.Partition("q"); !ok || s.Leader != 1 {
		t.Fatalf("second create: %s %v", s, ok)
	}
}

func TestPushInterval(t *testing.T) {
	c, store := newTestController(t, ControllerConfig{PushInterval: 5 * time.Second})
	c.Tick(at(4 * time.Second))
	if rd := store.run(c, t0); len(rd.Pushes) != 0 {
		t.Fatalf("pushed before the interval: %d", len(rd.Pushes))
	}
	c.Tick(at(5 * time.Second))
	rd := store.run(c, t0)
	if len(rd.Pushes) != 3 || rd.Pushes[0].To != 1 || rd.Pushes[2].To != 3 {
		t.Fatalf("pushes %+v", rd.Pushes)
	}
}

// TestDeletePartition: a deleted topic's partition record is deleted by
// CAS after the write in flight, proposals for it are refused, and a
// partition of the same name can be created again, its epochs starting
// over; a topic's own min.insync.replicas rides in the record and decides
// the ELR.
func TestDeletePartition(t *testing.T) {
	c, store := newTestController(t, ControllerConfig{MinISR: 1})
	c.SessionExpired(3, 3, t0) // a write in flight when the delete comes
	if err := c.DeletePartition("p", t0); err != nil {
		t.Fatal(err)
	}
	c.AlterPartition(AlterPartitionRequest{ID: 7, Partition: "p", Broker: 1, BrokerEpoch: 1}, t0)
	rd := store.run(c, t0)
	if len(rd.AlterPartitionResponses) != 1 || !errors.Is(rd.AlterPartitionResponses[0].Err, ErrUnknownPartition) {
		t.Fatalf("a proposal for a partition being deleted: %+v", rd.AlterPartitionResponses)
	}
	if _, ok := store.records["p"]; ok {
		t.Fatal("the record is still in the store")
	}
	if _, ok := c.Partition("p"); ok || slices.Contains(c.Partitions(), "p") {
		t.Fatal("the controller still keeps the partition")
	}
	if err := c.DeletePartition("p", t0); !errors.Is(err, ErrUnknownPartition) {
		t.Fatalf("deleting it again: %v", err)
	}
	c.Register(Registration{ID: 3, Epoch: 4}, t0)
	if err := c.CreatePartitionWith("p", []BrokerID{2, 3, 1}, PartitionConfig{MinISR: 3}, t0); err != nil {
		t.Fatal(err)
	}
	store.run(c, t0)
	s, ok := c.Partition("p")
	if !ok || s.Leader != 2 || s.LeaderEpoch != 0 || s.Config.MinISR != 3 {
		t.Fatalf("created again: %s (config %+v)", s, s.Config)
	}
	c.SessionExpired(1, 1, t0)
	store.run(c, t0)
	if s, _ = c.Partition("p"); len(s.ISR) != 2 || !s.InELR(1) {
		t.Fatalf("after broker 1 left below the topic's min.insync.replicas 3: %s; want it in the ELR", s)
	}
}

// TestElect: elections asked for (ElectLeaders) answer as Kafka's
// controller does, and an unclean one elects an out-of-sync replica of a
// partition left without a leader although unclean election is off.
func TestElect(t *testing.T) {
	c, store := newTestController(t, ControllerConfig{})
	for _, tc := range []struct {
		name string
		kind ElectionKind
		want error
	}{
		{"p", ElectionPreferred, ErrElectionNotNeeded},
		{"p", ElectionUnclean, ErrElectionNotNeeded},
		{"nope", ElectionPreferred, ErrUnknownPartition},
		{"p", ElectionKind(7), ErrInvalidRequest},
	} {
		if err := c.Elect(tc.name, tc.kind, t0); !errors.Is(err, tc.want) {
			t.Errorf("elect %s kind %d: %v, want %v", tc.name, tc.kind, err, tc.want)
		}
	}
	if rd := store.run(c, t0); len(rd.Events) != 0 {
		t.Fatalf("refused elections changed something: %v", rd.Events)
	}
	// The ISR shrinks to the leader, which then dies: no clean candidate.
	s, _ := c.Partition("p")
	if resp := alter(c, store, s, 1); resp.Err != nil {
		t.Fatal(resp.Err)
	}
	c.SessionExpired(1, 1, t0)
	store.run(c, t0)
	if s, _ := c.Partition("p"); s.Leader != NoLeader {
		t.Fatalf("elected out of sync with unclean election off: %s", s)
	}
	if err := c.Elect("p", ElectionPreferred, t0); !errors.Is(err, ErrPreferredLeaderNotAvailable) {
		t.Fatalf("preferred replica dead: %v", err)
	}
	before, _ := c.Partition("p")
	if err := c.Elect("p", ElectionUnclean, t0); err != nil {
		t.Fatalf("unclean: %v", err)
	}
	rd := store.run(c, t0)
	after, _ := c.Partition("p")
	if after.Leader != 2 || !after.Unclean || after.LeaderEpoch != before.LeaderEpoch+1 ||
		!slices.ContainsFunc(rd.Events, func(e Event) bool { return e.Kind == EventUncleanElection }) {
		t.Fatalf("unclean election: %s, events %v", after, rd.Events)
	}
	// The flag was for that election only: with every replica gone and back
	// out of sync, the partition stays leaderless until asked again.
	c.SessionExpired(2, 2, t0)
	c.SessionExpired(3, 3, t0)
	store.run(c, t0)
	if err := c.Elect("p", ElectionUnclean, t0); !errors.Is(err, ErrEligibleLeadersNotAvailable) {
		t.Fatalf("no live replica: %v", err)
	}
	c.Register(Registration{ID: 3, Epoch: 13}, t0)
	store.run(c, t0)
	if s, _ := c.Partition("p"); s.Leader != NoLeader {
		t.Fatalf("an earlier unclean election's flag elected %s", s)
	}
	if err := c.Elect("p", ElectionUnclean, t0); err != nil {
		t.Fatal(err)
	}
	store.run(c, t0)
	if s, _ := c.Partition("p"); s.Leader != 3 {
		t.Fatalf("second unclean election: %s", s)
	}
}
