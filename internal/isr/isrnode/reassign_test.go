package isrnode

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"quire/internal/isr"
	"quire/internal/testutil"
)

// TestReassignMovesReplicas: the replica managers carry out a
// reassignment's records. The partition on (1,2,3) moves to (4,2,3) with
// the leader among the moved: broker 4 opens a replica and catches up, the
// controller completes, broker 1 stops its replica and deletes its log,
// and the new leader holds every acknowledged record. Broker 3, stopped
// while a second reassignment removes it, deletes its log when it starts
// again and reads the record.
func TestReassignMovesReplicas(t *testing.T) {
	c := newCluster(t, 1, 2, 3)
	leader := c.waitLeader("a leader").id
	c.start(4)
	var want []string
	for i := range 5 {
		_, names, err := c.append(leader, isr.AcksAll, fmt.Sprintf("before%d", i), 3)
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, names...)
	}
	target := []isr.BrokerID{4}
	for _, id := range []isr.BrokerID{1, 2, 3} {
		if id != leader {
			target = append(target, id)
		}
	}
	testutil.WaitFor(t, "the controller to take broker 4's registration", func() bool {
		return c.ctl.Reassign(c.ctx, isr.ReassignRequest{Partition: partition, Target: target}) == nil
	})
	testutil.WaitFor(t, "the reassignment to complete", func() bool {
		rec := c.record()
		return !rec.Reassigning() && slices.Equal(rec.Replicas, target) && len(rec.ISR) == 3
	})
	newLeader := c.waitLeader("a leader of the target").id
	if !slices.Contains(target, newLeader) {
		t.Fatalf("leader %d after the move, want one of %v", newLeader, target)
	}
	testutil.WaitFor(t, "the removed replica and its log deleted", func() bool {
		_, err := c.node(leader).m.Status(partition)
		_, serr := os.Stat(filepath.Join(c.dir, fmt.Sprint(leader), partition))
		return errors.Is(err, isr.ErrUnknownPartition) && errors.Is(serr, os.ErrNotExist)
	})
	_, names, err := c.append(newLeader, isr.AcksAll, "after", 3)
	if err != nil {
		t.Fatal(err)
	}
	want = append(want, names...)
	waitReplicasInSync(c, newLeader, target)
	for _, id := range target {
		if got := c.readAll(id); !slices.Equal(got, want) {
			t.Fatalf("broker %d reads %v, want %v", id, got, want)
		}
	}

	// A broker removed while it is down deletes its log once it reads the
	// record.
	gone := target[len(target)-1]
	dir := filepath.Join(c.dir, fmt.Sprint(gone), partition)
	c.stop(gone)
	next := []isr.BrokerID{target[0], target[1], leader}
	testutil.WaitFor(t, "the reassignment without "+fmt.Sprint(gone)+" asked", func() bool {
		return c.ctl.Reassign(c.ctx, isr.ReassignRequest{Partition: partition, Target: next}) == nil
	})
	testutil.WaitFor(t, "it to complete", func() bool {
		rec := c.record()
		return !rec.Reassigning() && slices.Equal(rec.Replicas, next) && len(rec.ISR) == 3
	})
	if _, err := os.Stat(dir); err != nil {
		t.Fatalf("the stopped broker's log before it starts: %v", err)
	}
	c.start(gone)
	testutil.WaitFor(t, "the stray log deleted at start", func() bool {
		_, err := os.Stat(dir)
		return errors.Is(err, os.ErrNotExist)
	})
	waitReplicasInSync(c, c.waitLeader("a leader").id, next)
	if got := c.readAll(leader); !slices.Equal(got, want) {
		t.Fatalf("broker %d, added back, reads %v, want %v", leader, got, want)
	}
}

// waitReplicasInSync is cluster.waitInSync for the replicas ids (other
// running brokers hold none).
func waitReplicasInSync(c *cluster, leader isr.BrokerID, ids []isr.BrokerID) {
	testutil.WaitFor(c.t, fmt.Sprintf("replicas %v in sync with leader %d", ids, leader), func() bool {
		lst := c.status(leader)
		if lst.HighWatermark != lst.LogEndOffset {
			return false
		}
		for _, id := range ids {
			st, err := c.node(id).m.Status(partition)
			if err != nil || !slices.Contains(lst.ISR, id) || st.LogEndOffset != lst.LogEndOffset || st.HighWatermark != lst.HighWatermark {
				return false
			}
		}
		return true
	})
}
