package kafka_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"quire/internal/kafka"
	"quire/internal/kafka/kafkatest"
)

// reassignBackend is the in-memory backend with replicas to move: topic
// "isr"'s partitions answer reassignments by a rule of the test's and
// list one in progress; its broker configs are dynamic.
type reassignBackend struct {
	*kafkatest.Backend

	mu       sync.Mutex
	asked    []kafka.ReassignmentRequest
	allowRF  []bool
	timeouts []time.Duration
	listed   [][]kafka.TopicPartitions
	altered  []string // broker resources altered
}

func (b *reassignBackend) AlterPartitionReassignments(_ context.Context, reqs []kafka.ReassignmentRequest, allowRF bool, timeout time.Duration) []kafka.ReassignmentResult {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.asked = append(b.asked, reqs...)
	b.allowRF, b.timeouts = append(b.allowRF, allowRF), append(b.timeouts, timeout)
	var out []kafka.ReassignmentResult
	for _, r := range reqs {
		res := kafka.ReassignmentResult{Topic: r.Topic, Partition: r.Partition}
		switch {
		case r.Topic != "isr":
			res.Err = fmt.Errorf("%w: a ledger-mode partition has no replicas to move", kerr.InvalidRequest)
		case r.Replicas == nil:
			res.Err = kerr.NoReassignmentInProgress
		case len(r.Replicas) != 3 && !allowRF:
			res.Err = kerr.InvalidReplicationFactor
		}
		out = append(out, res)
	}
	return out
}

func (b *reassignBackend) ListPartitionReassignments(_ context.Context, topics []kafka.TopicPartitions) ([]kafka.Reassignment, error) {
	b.mu.Lock()
	b.listed = append(b.listed, topics)
	b.mu.Unlock()
	return []kafka.Reassignment{{Topic: "isr", Partition: 1, Replicas: []int32{4, 2, 3, 1}, Adding: []int32{4}, Removing: []int32{1}}}, nil
}

func (b *reassignBackend) AlterBrokerConfigs(_ context.Context, broker string, ops []kafka.ConfigOp, _ bool) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.altered = append(b.altered, broker)
	if ops[0].Name != "follower.replication.throttled.rate" {
		return fmt.Errorf("%w: cannot update %s dynamically", kerr.InvalidRequest, ops[0].Name)
	}
	return nil
}

var (
	_ kafka.PartitionReassigner = (*reassignBackend)(nil)
	_ kafka.BrokerConfigAlterer = (*reassignBackend)(nil)
)

func newReassignCluster(t *testing.T) (*cluster, *reassignBackend) {
	t.Helper()
	var backend *reassignBackend
	c := newCluster(t, func(cfg *kafka.Config) {
		backend = &reassignBackend{Backend: cfg.Backend.(*kafkatest.Backend)}
		cfg.Backend = backend
	})
	for _, topic := range []string{"isr", "t"} {
		if err := backend.CreateTopic(testContext(t), topic, 3, nil, false); err != nil {
			t.Fatal(err)
		}
	}
	return c, backend
}

func alterReassignments(version int16, allowRF bool, parts map[string]map[int32][]int32) *kmsg.AlterPartitionAssignmentsRequest {
	req := kmsg.NewPtrAlterPartitionAssignmentsRequest()
	req.Version, req.TimeoutMillis, req.AllowReplicationFactorChange = version, 2500, allowRF
	for _, topic := range sortedKeys(parts) {
		rt := kmsg.NewAlterPartitionAssignmentsRequestTopic()
		rt.Topic = topic
		ps := parts[topic]
		idxs := make([]int32, 0, len(ps))
		for p := range ps {
			idxs = append(idxs, p)
		}
		slices.Sort(idxs)
		for _, p := range idxs {
			rp := kmsg.NewAlterPartitionAssignmentsRequestTopicPartition()
			rp.Partition, rp.Replicas = p, ps[p]
			rt.Partitions = append(rt.Partitions, rp)
		}
		req.Topics = append(req.Topics, rt)
	}
	return req
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func reassignmentCodes(resp *kmsg.AlterPartitionAssignmentsResponse) map[string]int16 {
	out := map[string]int16{}
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			out[fmt.Sprintf("%s-%d", t.Topic, p.Partition)] = p.ErrorCode
		}
	}
	return out
}

// TestAlterPartitionReassignments: the front end answers unknown topics,
// partitions and names itself and hands the rest to the Backend (targets
// and cancels as asked, KIP-860's flag from v1, the request's timeout),
// whose answers and messages come back per partition; v1 echoes the flag.
// A Backend without replicas to move answers INVALID_REQUEST.
func TestAlterPartitionReassignments(t *testing.T) {
	c, backend := newReassignCluster(t)
	conn := c.raw()
	resp := conn.request(alterReassignments(1, false, map[string]map[int32][]int32{
		"isr": {0: {1, 2, 3}, 1: {1, 2}, 2: nil, 7: {1}}, "t": {0: {1}}, "nope": {0: {1}}, "bad/name": {0: {1}},
	})).(*kmsg.AlterPartitionAssignmentsResponse)
	want := map[string]int16{
		"isr-0": 0, "isr-1": kerr.InvalidReplicationFactor.Code, "isr-2": kerr.NoReassignmentInProgress.Code,
		"isr-7": kerr.UnknownTopicOrPartition.Code, "t-0": kerr.InvalidRequest.Code,
		"nope-0": kerr.UnknownTopicOrPartition.Code, "bad/name-0": kerr.InvalidTopicException.Code,
	}
	if got := reassignmentCodes(resp); resp.ErrorCode != 0 || !mapsEqual(got, want) || resp.AllowReplicationFactorChange {
		t.Fatalf("top %d allow %v, %v, want %v", resp.ErrorCode, resp.AllowReplicationFactorChange, got, want)
	}
	for _, tp := range resp.Topics {
		for _, p := range tp.Partitions {
			if tp.Topic == "t" && (p.ErrorMessage == nil || !containsWord(*p.ErrorMessage, "no replicas to move")) {
				t.Errorf("ledger-mode partition's message %v", p.ErrorMessage)
			}
		}
	}
	backend.mu.Lock()
	asked := slices.Clone(backend.asked)
	if len(backend.allowRF) != 1 || backend.allowRF[0] || backend.timeouts[0] != 2500*time.Millisecond {
		t.Errorf("allow RF change %v, timeouts %v", backend.allowRF, backend.timeouts)
	}
	backend.mu.Unlock()
	if len(asked) != 4 || asked[2].Replicas != nil || !slices.Equal(asked[0].Replicas, []int32{1, 2, 3}) {
		t.Fatalf("the backend was asked %+v; want isr-0..2 and t-0, isr-2 a cancel (nil replicas)", asked)
	}
	// v0 has no flag: a change of replication factor is allowed.
	resp = conn.request(alterReassignments(0, false, map[string]map[int32][]int32{"isr": {1: {1, 2}}})).(*kmsg.AlterPartitionAssignmentsResponse)
	if got := reassignmentCodes(resp); got["isr-1"] != 0 {
		t.Fatalf("v0: %v", got)
	}

	plain := newCluster(t)
	if err := plain.backend.CreateTopic(testContext(t), "p", 1, nil, false); err != nil {
		t.Fatal(err)
	}
	resp = plain.raw().request(alterReassignments(1, true, map[string]map[int32][]int32{"p": {0: {1}}})).(*kmsg.AlterPartitionAssignmentsResponse)
	if got := reassignmentCodes(resp); got["p-0"] != kerr.InvalidRequest.Code {
		t.Fatalf("a backend without replicas to move: %v", got)
	}
	list := plain.raw().request(kmsg.NewPtrListPartitionReassignmentsRequest()).(*kmsg.ListPartitionReassignmentsResponse)
	if list.ErrorCode != 0 || len(list.Topics) != 0 {
		t.Fatalf("a backend without replicas to move lists %+v", list)
	}
}

// TestListPartitionReassignments: null topics asks for every topic (nil to
// the Backend), named ones are passed on; the answer lists the Backend's
// reassignments with their adding and removing replicas.
func TestListPartitionReassignments(t *testing.T) {
	c, backend := newReassignCluster(t)
	conn := c.raw()
	req := kmsg.NewPtrListPartitionReassignmentsRequest()
	resp := conn.request(req).(*kmsg.ListPartitionReassignmentsResponse)
	if resp.ErrorCode != 0 || len(resp.Topics) != 1 || resp.Topics[0].Topic != "isr" {
		t.Fatalf("list all: %+v", resp)
	}
	p := resp.Topics[0].Partitions[0]
	if p.Partition != 1 || !slices.Equal(p.Replicas, []int32{4, 2, 3, 1}) || !slices.Equal(p.AddingReplicas, []int32{4}) ||
		!slices.Equal(p.RemovingReplicas, []int32{1}) {
		t.Fatalf("listed %+v", p)
	}
	rt := kmsg.NewListPartitionReassignmentsRequestTopic()
	rt.Topic, rt.Partitions = "isr", []int32{1, 2}
	req.Topics = append(req.Topics, rt)
	conn.request(req)
	backend.mu.Lock()
	defer backend.mu.Unlock()
	if len(backend.listed) != 2 || backend.listed[0] != nil || len(backend.listed[1]) != 1 ||
		backend.listed[1][0].Topic != "isr" || !slices.Equal(backend.listed[1][0].Partitions, []int32{1, 2}) {
		t.Fatalf("the backend was asked %+v", backend.listed)
	}
}

// TestAlterBrokerConfigs: broker resources go to a Backend with dynamic
// broker configs ("" the cluster default, or an id), its refusal with its
// message; without one they answer INVALID_REQUEST.
func TestAlterBrokerConfigs(t *testing.T) {
	alter := func(c *cluster, resource, name string) kmsg.IncrementalAlterConfigsResponseResource {
		req := kmsg.NewPtrIncrementalAlterConfigsRequest()
		r := kmsg.NewIncrementalAlterConfigsRequestResource()
		r.ResourceType, r.ResourceName = kmsg.ConfigResourceTypeBroker, resource
		cfg := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
		cfg.Name, cfg.Op, cfg.Value = name, kmsg.IncrementalAlterConfigOpSet, kmsg.StringPtr("1000")
		r.Configs = append(r.Configs, cfg)
		req.Resources = append(req.Resources, r)
		return c.raw().request(req).(*kmsg.IncrementalAlterConfigsResponse).Resources[0]
	}
	c, backend := newReassignCluster(t)
	if r := alter(c, "", "follower.replication.throttled.rate"); r.ErrorCode != 0 {
		t.Fatalf("the cluster default: %d", r.ErrorCode)
	}
	if r := alter(c, "7", "follower.replication.throttled.rate"); r.ErrorCode != 0 {
		t.Fatalf("broker 7's: %d", r.ErrorCode)
	}
	r := alter(c, "", "num.partitions")
	if r.ErrorCode != kerr.InvalidRequest.Code || r.ErrorMessage == nil || !containsWord(*r.ErrorMessage, "dynamically") {
		t.Fatalf("a static config: %d %v", r.ErrorCode, r.ErrorMessage)
	}
	backend.mu.Lock()
	if !slices.Equal(backend.altered, []string{"", "7", ""}) {
		t.Errorf("resources altered: %q", backend.altered)
	}
	backend.mu.Unlock()
	if r := alter(newCluster(t), "", "follower.replication.throttled.rate"); r.ErrorCode != kerr.InvalidRequest.Code {
		t.Fatalf("static broker configs: %d", r.ErrorCode)
	}
}
