package broker

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"quire/internal/catalog"
	"quire/internal/isr"
	"quire/internal/isr/isrctl"
	"quire/internal/isr/isrnode"
	"quire/internal/kafka"
	"quire/internal/meta"
)

// Partition reassignment of ISR-mode topics (Kafka's
// AlterPartitionReassignments and ListPartitionReassignments, KIP-455):
// each partition's request goes to the active controller wherever it runs
// (an isrctl proposal through the metadata store), whose core decides
// (isr.Controller.Reassign: the replicas grow to the target plus the
// removed ones, the new replicas catch up and join the ISR, the controller
// completes); the answer waits until the partition's record shows the
// change. The brokers the record adds open their replicas and fetch; those
// it removes stop theirs and delete their logs (isrnode.Manager). Ledger-
// mode partitions have no replicas to move: INVALID_REQUEST
// (errLedgerReassignment). The replication of a reassignment may be
// throttled (isr_throttle.go).

var _ kafka.PartitionReassigner = (*Broker)(nil)

// errLedgerReassignment answers a reassignment of a ledger-mode partition.
var errLedgerReassignment = fmt.Errorf("%w: a ledger-mode partition has no replicas to move: its data is on the bookies "+
	"and the broker that owns its bundle leads it (ownership moves it, not a reassignment)", kerr.InvalidRequest)

// reassignmentPoll is how often AlterPartitionReassignments looks for the
// change in the partition records.
const reassignmentPoll = 20 * time.Millisecond

// AlterPartitionReassignments implements kafka.PartitionReassigner.
func (b *Broker) AlterPartitionReassignments(ctx context.Context, reqs []kafka.ReassignmentRequest, allowRFChange bool, timeout time.Duration) []kafka.ReassignmentResult {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	client := isrctl.Client{Store: b.cfg.Store}
	type lookup struct {
		rec catalog.Topic
		err error
	}
	topics := map[string]lookup{}
	type asked struct {
		i      int
		name   string
		target []isr.BrokerID
	}
	var waits []asked
	out := make([]kafka.ReassignmentResult, len(reqs))
	for i, r := range reqs {
		out[i] = kafka.ReassignmentResult{Topic: r.Topic, Partition: r.Partition}
		t, ok := topics[r.Topic]
		if !ok {
			t.rec, t.err = b.admin.GetTopic(ctx, b.cfg.Namespace, r.Topic)
			topics[r.Topic] = t
		}
		switch {
		case t.err != nil:
			out[i].Err = topicErr(t.err)
			continue
		case r.Partition < 0 || r.Partition >= t.rec.Partitions:
			out[i].Err = kerr.UnknownTopicOrPartition
			continue
		case !t.rec.IsISR():
			out[i].Err = errLedgerReassignment
			continue
		}
		var target []isr.BrokerID
		if r.Replicas != nil {
			target = make([]isr.BrokerID, 0, len(r.Replicas))
			for _, id := range r.Replicas {
				target = append(target, isr.BrokerID(id))
			}
			if slices.ContainsFunc(target, func(id isr.BrokerID) bool { return id < 0 }) {
				out[i].Err = fmt.Errorf("%w: a negative broker id in %v", kerr.InvalidReplicaAssignment, r.Replicas)
				continue
			}
		}
		name := isrnode.PartitionName(r.Topic, r.Partition)
		err := client.Reassign(ctx, isr.ReassignRequest{Partition: name, Target: target, KeepReplicationFactor: !allowRFChange})
		if err != nil {
			out[i].Err = reassignmentErr(err)
			continue
		}
		waits = append(waits, asked{i: i, name: name, target: target})
	}
	for _, w := range waits {
		for {
			if st, ok := b.isrRecord(ctx, w.name); ok && st.ShowsReassignment(w.target) {
				break
			}
			select {
			case <-ctx.Done():
				out[w.i].Err = kerr.RequestTimedOut
			case <-time.After(reassignmentPoll):
				continue
			}
			break
		}
	}
	return out
}

// reassignmentErr is the Kafka error of a refused or failed reassignment,
// with the controller's words.
func reassignmentErr(err error) error {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) || errors.Is(err, meta.ErrUnavailable) {
		return kerr.RequestTimedOut
	}
	return fmt.Errorf("%w: %v", isrnode.KafkaError(err), err)
}

// ListPartitionReassignments implements kafka.PartitionReassigner: the
// partition records with a reassignment in progress, from the records this
// broker watches (read from the store without ISR mode here).
func (b *Broker) ListPartitionReassignments(ctx context.Context, topics []kafka.TopicPartitions) ([]kafka.Reassignment, error) {
	records, err := b.isrRecords(ctx)
	if err != nil {
		return nil, kerr.RequestTimedOut
	}
	var want map[string][]int32 // topic → partitions asked (nil: all)
	if topics != nil {
		want = map[string][]int32{}
		for _, t := range topics {
			want[t.Topic] = append(want[t.Topic], t.Partitions...)
			if t.Partitions == nil {
				want[t.Topic] = nil
			}
		}
	}
	var out []kafka.Reassignment
	for _, st := range records {
		topic, idx, ok := isrnode.SplitPartitionName(st.Partition)
		if !ok || !st.Reassigning() {
			continue
		}
		if want != nil {
			parts, named := want[topic]
			if !named || parts != nil && !slices.Contains(parts, idx) {
				continue
			}
		}
		out = append(out, kafka.Reassignment{Topic: topic, Partition: idx,
			Replicas: brokerIDs(st.Replicas), Adding: brokerIDs(st.AddingReplicas), Removing: brokerIDs(st.RemovingReplicas)})
	}
	slices.SortFunc(out, func(a, b kafka.Reassignment) int {
		return cmp.Or(cmp.Compare(a.Topic, b.Topic), cmp.Compare(a.Partition, b.Partition))
	})
	return out, nil
}

// isrRecords is every partition record: those this broker watches when ISR
// mode runs here, else read from the store.
func (b *Broker) isrRecords(ctx context.Context) ([]isr.PartitionState, error) {
	if s := b.isr; s != nil {
		s.mu.Lock()
		defer s.mu.Unlock()
		out := make([]isr.PartitionState, 0, len(s.records))
		for _, st := range s.records {
			out = append(out, st.Clone())
		}
		return out, nil
	}
	kvs, _, err := meta.ListAll(ctx, b.cfg.Store, isr.PartitionPrefix)
	if err != nil {
		return nil, err
	}
	var out []isr.PartitionState
	for _, kv := range kvs {
		if st, err := isr.UnmarshalState(kv.Value); err == nil {
			out = append(out, st)
		}
	}
	return out, nil
}

func brokerIDs(ids []isr.BrokerID) []int32 {
	out := make([]int32, len(ids))
	for i, id := range ids {
		out[i] = int32(id)
	}
	return out
}
