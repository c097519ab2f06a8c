package main

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"quire/internal/catalog"
	"quire/internal/isr"
	"quire/internal/isr/isrctl"
	"quire/internal/meta"
	"quire/internal/testutil"
)

// TestAdminReplicationAndDescribe: set-replication puts a namespace in ISR
// mode (defaults filled, invalid settings refused), topics lists each
// topic's mode, and topics describe shows an ISR topic's partitions as
// kafka-topics --describe does.
func TestAdminReplicationAndDescribe(t *testing.T) {
	ep := startTestMeta(t)
	m := "--meta-endpoints=" + strings.TrimPrefix(ep, "http://")
	runAdmin(t, "tenants", "create", "acme", m)
	runAdmin(t, "namespaces", "create", "acme/orders", m)
	out := runAdmin(t, "namespaces", "set-replication", "acme/orders", "--mode", "isr", m)
	for _, want := range []string{`"mode": "isr"`, `"factor": 3`, `"minInSyncReplicas": 2`} {
		if !strings.Contains(out, want) {
			t.Fatalf("set-replication lacks %s:\n%s", want, out)
		}
	}
	root := newRootCommand()
	root.SetArgs([]string{"admin", "namespaces", "set-replication", "acme/orders", "--mode", "isr", "--replication-factor", "2", "--min-insync-replicas", "3", m})
	root.SetOut(&strings.Builder{})
	root.SetErr(&strings.Builder{})
	if err := root.Execute(); err == nil {
		t.Fatal("min.insync.replicas 3 above a replication factor of 2 accepted")
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	store := createOldAndNew(t, ctx, ep, 4)
	st := isr.PartitionState{Partition: "new-0", Replicas: []isr.BrokerID{1, 2, 3}, Leader: 2, LeaderEpoch: 4,
		ISR: []isr.Member{{ID: 2, BrokerEpoch: 1}, {ID: 3, BrokerEpoch: 1}}, ELR: []isr.Member{{ID: 1, BrokerEpoch: 1}}}
	if _, err := store.Create(ctx, isr.PartitionKey("new-0"), st.Marshal()); err != nil {
		t.Fatal(err)
	}
	// Partition 1 lost its leader and every in-sync replica.
	st1 := isr.PartitionState{Partition: "new-1", Replicas: []isr.BrokerID{2, 3, 1}, Leader: isr.NoLeader, LeaderEpoch: 7,
		ELR: []isr.Member{{ID: 3, BrokerEpoch: 1}}, LastKnownELR: []isr.BrokerID{2}}
	if _, err := store.Create(ctx, isr.PartitionKey("new-1"), st1.Marshal()); err != nil {
		t.Fatal(err)
	}
	// Partition 2 moves from (1,2,3) to (4,2,3): a reassignment in progress.
	st2 := isr.PartitionState{Partition: "new-2", Replicas: []isr.BrokerID{4, 2, 3, 1}, Leader: 2, LeaderEpoch: 1,
		ISR:            []isr.Member{{ID: 2, BrokerEpoch: 1}, {ID: 3, BrokerEpoch: 1}, {ID: 4, BrokerEpoch: 1}},
		AddingReplicas: []isr.BrokerID{4}, RemovingReplicas: []isr.BrokerID{1}}
	if _, err := store.Create(ctx, isr.PartitionKey("new-2"), st2.Marshal()); err != nil {
		t.Fatal(err)
	}
	// Brokers 2 and 3 are registered (live); 1 is not.
	for _, id := range []isr.BrokerID{2, 3} {
		if _, err := store.Create(ctx, isr.BrokerKey(id), isr.Registration{ID: id}.Marshal()); err != nil {
			t.Fatal(err)
		}
	}
	out = runAdmin(t, "topics", "acme/orders", m)
	if !strings.Contains(out, "old    ledger") || !strings.Contains(out, "new    isr") {
		t.Fatalf("topics:\n%s", out)
	}
	out = runAdmin(t, "topics", "describe", "acme/orders", "new", m)
	for _, want := range []string{"PartitionCount: 4\tReplicationFactor: 3\tMode: isr",
		"Topic: new\tPartition: 0\tLeader: 2\tReplicas: 1,2,3\tIsr: 2,3\tElr: 1\tLastKnownElr: \tLeaderEpoch: 4\tUnderReplicated: true\tOffline: 1",
		"Topic: new\tPartition: 1\tLeader: none\tReplicas: 2,3,1\tIsr: \tElr: 3\tLastKnownElr: 2\tLeaderEpoch: 7\tUnderReplicated: true\tOffline: 1",
		"Topic: new\tPartition: 2\tLeader: 2\tReplicas: 4,2,3,1\tIsr: 2,3,4\tElr: \tLastKnownElr: \tLeaderEpoch: 1\tUnderReplicated: false\tOffline: 4,1\tAdding Replicas: 4\tRemoving Replicas: 1",
		"Partition: 3\t(no record yet)"} {
		if !strings.Contains(out, want) {
			t.Fatalf("describe lacks %q:\n%s", want, out)
		}
	}
}

// TestAdminTopicsReassign: topics reassign moves an ISR partition through
// the controller (KIP-455) and shows the move in progress as describe
// does; --cancel reverts it; a ledger-mode topic and a bad partition are
// refused.
func TestAdminTopicsReassign(t *testing.T) {
	ep := startTestMeta(t)
	m := "--meta-endpoints=" + strings.TrimPrefix(ep, "http://")
	runAdmin(t, "tenants", "create", "acme", m)
	runAdmin(t, "namespaces", "create", "acme/orders", m)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	store := createOldAndNew(t, ctx, ep, 1)
	sess, err := store.NewSession(ctx, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	for _, id := range []isr.BrokerID{1, 2, 3, 4} {
		if _, err := sess.CreateEphemeral(ctx, isr.BrokerKey(id), isr.Registration{ID: id}.Marshal()); err != nil {
			t.Fatal(err)
		}
	}
	ctl := isrctl.Start(isrctl.Config{Store: store, Name: "c1", SessionTTL: time.Second, Tick: 10 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Controller: isr.ControllerConfig{MinISR: 2, DisableAutoRebalance: true}})
	defer ctl.Close()
	testutil.WaitFor(t, "the controller to be elected", func() bool { ok, _ := ctl.Active(); return ok })
	if err := ctl.CreatePartition(ctx, "new-0", []isr.BrokerID{1, 2, 3}); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, "the partition's record", func() bool { _, err := store.Get(ctx, isr.PartitionKey("new-0")); return err == nil })

	out := runAdmin(t, "topics", "reassign", "acme/orders", "new", "--partition", "0", "--replicas", "4,2,3", m)
	// Broker 4 has no replica running to catch up, so the move stays in
	// progress: the record shows it being added and broker 1 being removed.
	if want := "Replicas: 4,2,3,1\tIsr: "; !strings.Contains(out, want) || !strings.Contains(out, "Adding Replicas: 4\tRemoving Replicas: 1") {
		t.Fatalf("reassign output lacks %q and the adding/removing replicas:\n%s", want, out)
	}
	out = runAdmin(t, "topics", "reassign", "acme/orders", "new", "--partition", "0", "--cancel", m)
	// Back to the original replicas, in the order Kafka's cancel leaves
	// them: the full list less the ones being added.
	if !strings.Contains(out, "Replicas: 2,3,1\tIsr: ") || strings.Contains(out, "Adding Replicas") {
		t.Fatalf("cancel output:\n%s", out)
	}
	for _, args := range [][]string{
		{"topics", "reassign", "acme/orders", "old", "--partition", "0", "--replicas", "4,2,3"},
		{"topics", "reassign", "acme/orders", "new", "--partition", "1", "--replicas", "4,2,3"},
		{"topics", "reassign", "acme/orders", "new", "--partition", "0", "--replicas", "4,2,9"},
		{"topics", "reassign", "acme/orders", "new", "--partition", "0", "--cancel"},
		{"topics", "reassign", "acme/orders", "new", "--partition", "0"},
	} {
		root := newRootCommand()
		root.SetArgs(append([]string{"admin"}, append(args, m)...))
		root.SetOut(&strings.Builder{})
		root.SetErr(&strings.Builder{})
		if err := root.Execute(); err == nil {
			t.Errorf("%v accepted", args)
		}
	}
}

// createOldAndNew connects to the metadata store at ep and creates, in
// acme/orders, the ledger-mode topic "old" (one partition) and the ISR
// topic "new" (partitions, RF 3); the store is closed with the test.
func createOldAndNew(t *testing.T, ctx context.Context, ep string, partitions int32) meta.Store {
	t.Helper()
	store, err := meta.NewEtcd(meta.EtcdConfig{Endpoints: []string{ep}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	cat := catalog.New(store)
	if _, err := cat.CreateTopic(ctx, "acme/orders", "old", 1, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := cat.CreateTopicMode(ctx, "acme/orders", "new", partitions, nil, catalog.ModeISR, 3); err != nil {
		t.Fatal(err)
	}
	return store
}
