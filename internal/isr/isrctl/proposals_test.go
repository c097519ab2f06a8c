package isrctl

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"quire/internal/isr"
	"quire/internal/meta"
	"quire/internal/testutil"
)

// TestProposalsThroughTheStore: a process that is not the controller
// creates a partition and proposes ISR changes through the store (Client);
// the active controller in another process answers: the change applied by
// CAS, the same proposal again answered with the record it made (a retry),
// another on the stale partition epoch rejected with the protocol error,
// the record deleted and created again, recognisable by errors.Is across the processes; and
// no proposal or answer is left behind.
func TestProposalsThroughTheStore(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	srv := meta.NewMemServer(meta.MemConfig{})
	brokers := srv.NewClient()
	for _, id := range []isr.BrokerID{1, 2, 3} {
		register(t, ctx, brokers, id)
	}
	s := Start(Config{Store: srv.NewClient(), Name: "c1", SessionTTL: time.Second, Tick: 10 * time.Millisecond, Logger: quiet(),
		Controller: isr.ControllerConfig{MinISR: 2, DisableAutoRebalance: true}})
	defer s.Close()
	testutil.WaitFor(t, "the controller to be elected", func() bool { ok, _ := s.Active(); return ok })

	client := Client{Store: srv.NewClient()} // another process
	if err := client.CreatePartition(ctx, "t-0", []isr.BrokerID{1, 2, 3}, isr.PartitionConfig{MinISR: 2}); err != nil {
		t.Fatal(err)
	}
	var st isr.PartitionState
	testutil.WaitFor(t, "the partition's record", func() bool {
		var ok bool
		st, ok = record(t, ctx, brokers, "t-0")
		return ok
	})
	if st.Config.MinISR != 2 {
		t.Fatalf("record %s: want the partition's min.insync.replicas 2 in it", st)
	}
	if err := client.CreatePartition(ctx, "t-0", []isr.BrokerID{1, 2, 3}, isr.PartitionConfig{MinISR: 2}); err == nil {
		t.Fatal("creating the partition again succeeded")
	}
	kv, err := brokers.Get(ctx, isr.BrokerKey(st.Leader))
	if err != nil {
		t.Fatal(err)
	}
	shrink := isr.AlterPartitionRequest{Partition: "t-0", Broker: st.Leader, BrokerEpoch: int64(kv.Version),
		LeaderEpoch: st.LeaderEpoch, PartitionEpoch: st.PartitionEpoch, NewISR: st.ISR[:2]}
	resp, err := client.AlterPartition(ctx, shrink)
	if err != nil || len(resp.State.ISR) != 2 || resp.State.PartitionEpoch <= st.PartitionEpoch {
		t.Fatalf("shrink: %v, %s", err, resp.State)
	}
	if got, _ := record(t, ctx, brokers, "t-0"); len(got.ISR) != 2 {
		t.Fatalf("record after the shrink: %s", got)
	}
	if again, err := client.AlterPartition(ctx, shrink); err != nil || again.State.PartitionEpoch != resp.State.PartitionEpoch {
		t.Fatalf("the proposal again (a retry): %v, %s; want the record it made", err, again.State)
	}
	other := shrink
	other.NewISR = []isr.Member{st.ISR[0], st.ISR[2]}
	if _, err := client.AlterPartition(ctx, other); !errors.Is(err, isr.ErrInvalidUpdateVersion) {
		t.Fatalf("another proposal on the stale partition epoch: %v, want INVALID_UPDATE_VERSION", err)
	}
	// Elections asked for from another process come back with the core's
	// refusals, recognisable by errors.Is.
	if err := client.Elect(ctx, "t-0", isr.ElectionPreferred); !errors.Is(err, isr.ErrElectionNotNeeded) {
		t.Fatalf("preferred election of a partition its preferred replica leads: %v", err)
	}
	if err := client.Elect(ctx, "t-9", isr.ElectionUnclean); !errors.Is(err, isr.ErrUnknownPartition) {
		t.Fatalf("election of an unknown partition: %v", err)
	}
	// Its topic deleted: the record goes, and the partition can be created
	// again (a topic of the same name).
	if err := client.DeletePartition(ctx, "t-0"); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, "the record deleted", func() bool { _, ok := record(t, ctx, brokers, "t-0"); return !ok })
	if err := client.DeletePartition(ctx, "t-0"); !errors.Is(err, isr.ErrUnknownPartition) {
		t.Fatalf("deleting it again: %v, want UNKNOWN_TOPIC_OR_PARTITION", err)
	}
	if err := client.CreatePartition(ctx, "t-0", []isr.BrokerID{2, 3, 1}, isr.PartitionConfig{}); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, "the partition created again", func() bool {
		st, ok := record(t, ctx, brokers, "t-0")
		return ok && st.Leader == 2 && st.PartitionEpoch == 0
	})
	// Reassignments from another process: a shrink completes at once; a
	// growth waits for its adding replica (no replica runs here to catch
	// up) until cancelled; refusals come back as themselves.
	if err := client.Reassign(ctx, isr.ReassignRequest{Partition: "t-0", Target: []isr.BrokerID{2, 3}}); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, "the shrink to (2,3)", func() bool {
		st, ok := record(t, ctx, brokers, "t-0")
		return ok && slices.Equal(st.Replicas, []isr.BrokerID{2, 3}) && !st.Reassigning()
	})
	if err := client.Reassign(ctx, isr.ReassignRequest{Partition: "t-0", Target: []isr.BrokerID{2, 3, 1}}); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, "the growth to (2,3,1) in progress", func() bool {
		st, ok := record(t, ctx, brokers, "t-0")
		return ok && slices.Equal(st.AddingReplicas, []isr.BrokerID{1})
	})
	for _, tc := range []struct {
		req  isr.ReassignRequest
		want error
	}{
		{isr.ReassignRequest{Partition: "t-0", Target: []isr.BrokerID{2, 9}}, isr.ErrInvalidReplicaAssignment},
		{isr.ReassignRequest{Partition: "t-0", Target: []isr.BrokerID{2}, KeepReplicationFactor: true}, isr.ErrInvalidReplicationFactor},
		{isr.ReassignRequest{Partition: "t-9"}, isr.ErrUnknownPartition},
	} {
		if err := client.Reassign(ctx, tc.req); !errors.Is(err, tc.want) {
			t.Errorf("reassign %+v: %v, want %v", tc.req, err, tc.want)
		}
	}
	if err := client.Reassign(ctx, isr.ReassignRequest{Partition: "t-0"}); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, "the growth cancelled", func() bool {
		st, ok := record(t, ctx, brokers, "t-0")
		return ok && slices.Equal(st.Replicas, []isr.BrokerID{2, 3}) && !st.Reassigning()
	})
	if err := client.Reassign(ctx, isr.ReassignRequest{Partition: "t-0"}); !errors.Is(err, isr.ErrNoReassignmentInProgress) {
		t.Fatalf("cancel with nothing in progress: %v", err)
	}
	testutil.WaitFor(t, "no proposal or answer left", func() bool {
		for _, prefix := range []string{ProposalPrefix, AnswerPrefix} {
			if kvs, _, err := meta.ListAll(ctx, brokers, prefix); err != nil || len(kvs) > 0 {
				return false
			}
		}
		return true
	})
}
