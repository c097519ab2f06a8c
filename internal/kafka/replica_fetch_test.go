package kafka_test

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"quire/internal/kafka"
	"quire/internal/kafka/kafkatest"
)

// replicaFetchBackend answers replica fetches with a marker error code, so
// the test sees which path served a Fetch.
type replicaFetchBackend struct {
	*kafkatest.Backend
	calls atomic.Int64
}

func (b *replicaFetchBackend) HandleReplicaFetch(_ context.Context, req *kmsg.FetchRequest) *kmsg.FetchResponse {
	b.calls.Add(1)
	resp := req.ResponseKind().(*kmsg.FetchResponse)
	resp.ErrorCode = kerr.FencedLeaderEpoch.Code
	return resp
}

// TestReplicaFetchRouting: a Fetch from a replica (replica_id before v15,
// replica_state from v15) goes whole to a backend that implements
// ReplicaFetchBackend; a consumer's Fetch does not.
func TestReplicaFetchRouting(t *testing.T) {
	var backend *replicaFetchBackend
	c := newCluster(t, func(cfg *kafka.Config) {
		backend = &replicaFetchBackend{Backend: cfg.Backend.(*kafkatest.Backend)}
		cfg.Backend = backend
	})
	conn := c.raw()
	for _, tc := range []struct {
		name    string
		version int16
		replica bool
		set     func(*kmsg.FetchRequest)
	}{
		{"consumer v12", 12, false, func(*kmsg.FetchRequest) {}},
		{"consumer v17", 17, false, func(*kmsg.FetchRequest) {}},
		{"replica_id v12", 12, true, func(r *kmsg.FetchRequest) { r.ReplicaID = 2 }},
		{"replica_state v17", 17, true, func(r *kmsg.FetchRequest) { r.ReplicaState.ID, r.ReplicaState.Epoch = 2, 5 }},
	} {
		before := backend.calls.Load()
		req := kmsg.NewPtrFetchRequest()
		req.SetVersion(tc.version)
		tc.set(req)
		resp := conn.request(req).(*kmsg.FetchResponse)
		routed := backend.calls.Load() > before
		if routed != tc.replica || routed != (resp.ErrorCode == kerr.FencedLeaderEpoch.Code) {
			t.Errorf("%s: routed to the backend %v (error %d), want %v", tc.name, routed, resp.ErrorCode, tc.replica)
		}
	}
}
