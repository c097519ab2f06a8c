package sim

import (
	"testing"
	"time"

	"quire/internal/isr"
)

// TestISRFollowerFetchesOnAnyInput shows the fix to internal/isr that
// `quire sim isr` needed: a follower whose next fetch fell due while time
// moved through an input other than Tick (a consumer's fetch, a produce
// request, a new broker epoch, a flush) sends that fetch at once. Before,
// it waited for its next Tick, and under -tags invariants the replica's own
// check ("a follower with a leader fetches") panicked.
func TestISRFollowerFetchesOnAnyInput(t *testing.T) {
	t0 := time.Unix(0, 0)
	for _, tc := range []struct {
		name  string
		input func(r *isr.Replica, now time.Time)
	}{
		{"consumer fetch", func(r *isr.Replica, now time.Time) {
			r.Fetch(isr.FetchRequest{ID: 99, Partition: "p", ReplicaID: -1, Client: "c", CurrentLeaderEpoch: isr.NoEpoch, LastFetchedEpoch: isr.NoEpoch}, now)
		}},
		{"produce", func(r *isr.Replica, now time.Time) {
			r.Produce(isr.ProduceRequest{ID: 1, Client: "c", Partition: "p", Acks: isr.AcksLeader, Records: [][]byte{[]byte("v")}}, now)
		}},
		{"broker epoch", func(r *isr.Replica, now time.Time) { r.SetBrokerEpoch(7, now) }},
		{"flush", func(r *isr.Replica, now time.Time) { r.Flush(now) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := isr.NewReplica(isr.ReplicaConfig{Broker: 2, Partition: "p", BrokerEpoch: 2, Log: isr.NewMemLog()}, t0)
			r.ApplyState(isr.PartitionState{Partition: "p", Replicas: []isr.BrokerID{1, 2}, Leader: 1, LeaderBrokerEpoch: 1,
				ISR: []isr.Member{{ID: 1, BrokerEpoch: 1}, {ID: 2, BrokerEpoch: 2}}}, t0)
			fetch := r.Ready().Fetches[0]
			// An empty answer: the next fetch is due after the backoff.
			r.StepFetchResponse(isr.FetchResponse{ID: fetch.ID, Partition: "p", From: 1, LeaderEpoch: 0}, t0)
			if rd := r.Ready(); len(rd.Fetches) != 0 {
				t.Fatalf("fetched again before the backoff: %+v", rd.Fetches)
			}
			tc.input(r, t0.Add(time.Second))
			if rd := r.Ready(); len(rd.Fetches) != 1 {
				t.Fatalf("a follower whose fetch is due did not fetch on %s: %d fetches", tc.name, len(rd.Fetches))
			}
		})
	}
}
