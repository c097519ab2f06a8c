package catalog

import (
	"context"
	"errors"
	"testing"
)

// TestReplicationPolicy: a namespace's replication policy is validated,
// defaults to ledger mode, and a topic's mode is fixed in its record when
// it is created: changing the policy afterwards leaves existing topics as
// they were.
func TestReplicationPolicy(t *testing.T) {
	for _, tc := range []struct {
		r  Replication
		ok bool
	}{
		{Replication{}, true},
		{Replication{Mode: ModeLedger}, true},
		{Replication{Mode: ModeISR}, true},
		{Replication{Mode: ModeISR, Factor: 3, MinInSyncReplicas: 2, UncleanLeaderElection: true}, true},
		{Replication{Mode: ModeISR, Factor: 1}, true}, // min.insync.replicas defaults to 1 then
		{Replication{Mode: ModeISR, Factor: 2, MinInSyncReplicas: 3}, false},
		{Replication{Mode: ModeLedger, Factor: 3}, false},
		{Replication{Mode: "raft"}, false},
	} {
		if err := tc.r.Validate(); (err == nil) != tc.ok || (err != nil && !errors.Is(err, ErrInvalidPolicies)) {
			t.Errorf("%+v: %v, want ok=%v", tc.r, err, tc.ok)
		}
	}
	if d := (Replication{Mode: ModeISR}).WithDefaults(); d.Factor != 3 || d.MinInSyncReplicas != 2 {
		t.Errorf("ISR defaults: %+v", d)
	}

	ctx := context.Background()
	_, c := newMemAdmin(t)
	if err := c.EnsureDefaults(ctx); err != nil {
		t.Fatal(err)
	}
	const ns = "public/default"
	if p, err := c.GetPolicies(ctx, ns); err != nil || p.Replication.IsISR() {
		t.Fatalf("default namespace: %v, %+v", err, p.Replication)
	}
	ledger, err := c.CreateTopic(ctx, ns, "l", 1, nil)
	if err != nil || ledger.IsISR() {
		t.Fatalf("ledger topic: %v, %+v", err, ledger)
	}
	if _, err := c.SetReplication(ctx, ns, Replication{Mode: ModeISR, Factor: 2, MinInSyncReplicas: 3}); !errors.Is(err, ErrInvalidPolicies) {
		t.Fatalf("an invalid policy: %v", err)
	}
	if _, err := c.SetReplication(ctx, ns, Replication{Mode: ModeISR, Factor: 3, MinInSyncReplicas: 2}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CreateTopicMode(ctx, ns, "i", 2, nil, ModeISR, 3); err != nil {
		t.Fatal(err)
	}
	if _, err := c.SetReplication(ctx, ns, Replication{Mode: ModeLedger}); err != nil {
		t.Fatal(err)
	}
	for name, isr := range map[string]bool{"l": false, "i": true} {
		rec, err := c.GetTopic(ctx, ns, name)
		if err != nil || rec.IsISR() != isr {
			t.Errorf("topic %s: %v, mode %q; want ISR %v", name, err, rec.Mode, isr)
		}
	}
}
