//go:build invariants

package isr

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// expectInvariantPanic runs input and asserts that it panics naming the
// broken invariant (want is part of the message).
func expectInvariantPanic(t *testing.T, want string, input func()) {
	t.Helper()
	msg := func() (msg string) {
		defer func() {
			if p := recover(); p != nil {
				msg = fmt.Sprint(p)
			}
		}()
		input()
		return ""
	}()
	if msg == "" {
		t.Fatalf("no panic, want invariant %q violated", want)
	}
	if !strings.Contains(msg, "invariant violated: ") || !strings.Contains(msg, want) {
		t.Fatalf("panic %q, want invariant %q violated", msg, want)
	}
	t.Log(msg)
}

// TestInvariantsFire corrupts a core's state the way a bug would and checks
// that its next input stops at once, naming the invariant and the values.
func TestInvariantsFire(t *testing.T) {
	leader := func(t *testing.T) (*Replica, *MemLog) {
		r, l := newTestReplica(1, ReplicaConfig{})
		r.ApplyState(record(1, 2, 0, 1, 2), t0)
		produce(r, 1, AcksAll, t0, "a", "b")
		followerFetch(r, 2, 1, 2, t0) // HW 1; the acks=all batch [0,2) waits
		r.Ready()
		r.Tick(t0) // the uncorrupted replica passes its checks
		return r, l
	}
	for _, tc := range []struct {
		name    string
		corrupt func(r *Replica, l *MemLog)
		want    string
	}{
		{"HW past the LEO", func(r *Replica, _ *MemLog) { r.hw = 3 }, "0 <= HW <= LEO: HW(3) LEO(2)"},
		{"HW backwards in an epoch", func(r *Replica, _ *MemLog) { r.hw = 0 }, "the HW never decreases within a leader epoch: HW(0) after 1 in epoch 2"},
		{"leader outside its ISR", func(r *Replica, _ *MemLog) { r.state.ISR = r.state.ISR[1:] }, "leader 1 is not in the ISR"},
		{"answer held back", func(r *Replica, _ *MemLog) { r.hw = 2 }, "an acks=all batch below the HW is answered: [0,2), HW(2)"},
		{"proposal on an old record", func(r *Replica, _ *MemLog) {
			r.pendingISR = &isrProposal{req: AlterPartitionRequest{LeaderEpoch: 2, PartitionEpoch: 7}}
		}, "a proposal in flight is based on the current record: based on pe=7 le=2, record pe=0 le=2"},
		{"follower ahead of the leader", func(r *Replica, _ *MemLog) { r.followers[2].logEndOffset = 5 },
			"a follower's known LEO <= the leader's: follower 2 at 5, LEO(2)"},
		{"record epochs backwards", func(r *Replica, _ *MemLog) { r.state.PartitionEpoch = -1 },
			"leader and partition epochs never decrease: record le=2 pe=-1 after le=2 pe=0"},
		{"epoch cache out of order", func(_ *Replica, l *MemLog) { l.epochs = append(l.epochs, epochEntry{epoch: 1, start: 2}) },
			"a leader's log ends in its own epoch: log epoch 1, leader epoch 2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, l := leader(t)
			tc.corrupt(r, l)
			expectInvariantPanic(t, tc.want, func() { r.Tick(at(time.Millisecond)) })
		})
	}

	t.Run("memlog epoch cache", func(t *testing.T) {
		l := NewMemLog()
		_ = l.Append(Batch{BaseOffset: 0, LeaderEpoch: 3, Records: [][]byte{[]byte("a")}})
		l.epochs = append(l.epochs, epochEntry{epoch: 2, start: 1})
		expectInvariantPanic(t, "epoch cache increasing: epoch 2@1 follows 3@0", func() {
			_ = l.Append(Batch{BaseOffset: 1, LeaderEpoch: 4, Records: [][]byte{[]byte("b")}})
		})
	})

	controller := func(t *testing.T) (*Controller, *memStore) {
		c, store := newTestController(t, ControllerConfig{})
		c.Tick(t0)
		return c, store
	}
	t.Run("partition epoch backwards", func(t *testing.T) {
		c, store := controller(t)
		s, _ := c.Partition("p")
		stale := s.Clone()
		stale.ISR = stale.ISR[:2]
		stale.PartitionEpoch--
		store.records["p"] = StoredPartition{State: stale, Version: store.records["p"].Version}
		c.parts["p"].readOp = 99
		expectInvariantPanic(t, "partition and leader epochs never decrease", func() {
			c.StepMeta(MetaResult{ID: 99, Version: store.records["p"].Version, State: stale}, t0)
		})
	})
	t.Run("two leaders in one epoch", func(t *testing.T) {
		c, _ := controller(t)
		s, _ := c.Partition("p")
		other := s.Clone()
		other.Leader, other.PartitionEpoch = 2, s.PartitionEpoch+1
		c.parts["p"].readOp = 99
		expectInvariantPanic(t, "at most one leader per leader epoch", func() {
			c.StepMeta(MetaResult{ID: 99, Version: 100, State: other}, t0)
		})
	})
	t.Run("leader outside the ISR", func(t *testing.T) {
		c, _ := controller(t)
		c.parts["p"].state.ISR = c.parts["p"].state.ISR[1:]
		expectInvariantPanic(t, "records are valid", func() { c.Tick(at(time.Millisecond)) })
	})
	// Reassignments (reassign.go): a record read back after a lost CAS
	// that another writer broke, and a settled record left uncompleted.
	reassigning := func(t *testing.T) (*Controller, PartitionState) {
		c, store := newReassignController(t, ControllerConfig{})
		s, _ := reassign(t, c, store, 4, 5, 6)
		c.parts["p"].readOp = 99
		return c, s
	}
	t.Run("reassignment completed early", func(t *testing.T) {
		c, s := reassigning(t)
		done := s.Clone()
		done.Replicas, done.AddingReplicas, done.RemovingReplicas = []BrokerID{4, 5, 6}, nil, nil
		done.ISR, done.Leader, done.LeaderBrokerEpoch = []Member{{4, 4}, {5, 5}, {6, 6}}, 4, 4
		done.LeaderEpoch, done.PartitionEpoch = s.LeaderEpoch+1, s.PartitionEpoch+1
		expectInvariantPanic(t, "a reassignment completes only once every adding replica is in the ISR", func() {
			c.StepMeta(MetaResult{ID: 99, Version: 100, State: done}, t0)
		})
	})
	t.Run("adding replica elected", func(t *testing.T) {
		c, s := reassigning(t)
		bad := s.Clone()
		bad.ISR, bad.Leader, bad.LeaderBrokerEpoch, bad.Unclean = []Member{{5, 5}}, 5, 5, true
		bad.LeaderEpoch, bad.PartitionEpoch = s.LeaderEpoch+1, s.PartitionEpoch+1
		expectInvariantPanic(t, "an adding replica is elected only after it joined the ISR", func() {
			c.StepMeta(MetaResult{ID: 99, Version: 100, State: bad}, t0)
		})
	})
	t.Run("reassignment left uncompleted", func(t *testing.T) {
		c, _ := reassigning(t)
		c.parts["p"].readOp = 0
		st := &c.parts["p"].state
		st.ISR = []Member{{4, 4}, {5, 5}, {6, 6}, {1, 1}, {2, 2}, {3, 3}}
		expectInvariantPanic(t, "a settled reassignment whose adding replicas are all in the ISR is completed", func() {
			c.Tick(at(time.Millisecond))
		})
	})
	t.Run("adding replica outside the replicas", func(t *testing.T) {
		c, _ := reassigning(t)
		c.parts["p"].readOp = 0
		c.parts["p"].state.AddingReplicas = []BrokerID{4, 7}
		expectInvariantPanic(t, "records are valid", func() { c.Tick(at(time.Millisecond)) })
	})
	t.Run("ELR kept with a full ISR", func(t *testing.T) {
		c, _ := controller(t)
		s := &c.parts["p"].state
		s.ELR = []Member{{ID: 3, BrokerEpoch: 3}}
		s.ISR = s.ISR[:2]
		expectInvariantPanic(t, "the ELR is empty once |ISR| >= minISR", func() { c.Tick(at(time.Millisecond)) })
	})
}
