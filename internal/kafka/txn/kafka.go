package txn

import (
	"context"

	"quire/internal/kafka"
)

// KafkaCoordinator is a Service as the Kafka front end's
// kafka.TransactionCoordinator; coordinator names the broker that
// coordinates an id (FindCoordinator).
func (s *Service) KafkaCoordinator(coordinator func(ctx context.Context, transactionalID string) (kafka.Node, error)) kafka.TransactionCoordinator {
	return kafkaCoordinator{s: s, coordinator: coordinator}
}

type kafkaCoordinator struct {
	s           *Service
	coordinator func(ctx context.Context, transactionalID string) (kafka.Node, error)
}

func (k kafkaCoordinator) InitProducerID(ctx context.Context, id string, timeoutMs int32, pid int64, epoch int16) (int64, int16, error) {
	r := k.s.InitProducerID(ctx, InitProducerIDRequest{TransactionalID: id, TimeoutMs: timeoutMs, ProducerID: pid, ProducerEpoch: epoch})
	return r.ProducerID, r.ProducerEpoch, r.Err
}

func (k kafkaCoordinator) AddPartitions(ctx context.Context, id string, pid int64, epoch int16, parts []kafka.TransactionPartition) error {
	req := AddPartitionsRequest{TransactionalID: id, ProducerID: pid, ProducerEpoch: epoch}
	for _, p := range parts {
		req.Partitions = append(req.Partitions, Partition{Topic: p.Topic, Partition: p.Partition})
	}
	return k.s.AddPartitions(ctx, req).Err
}

func (k kafkaCoordinator) AddOffsets(ctx context.Context, id string, pid int64, epoch int16, group string) error {
	return k.s.AddOffsets(ctx, AddOffsetsRequest{TransactionalID: id, ProducerID: pid, ProducerEpoch: epoch, Group: group}).Err
}

func (k kafkaCoordinator) EndTxn(ctx context.Context, id string, pid int64, epoch int16, commit bool) error {
	return k.s.EndTxn(ctx, EndTxnRequest{TransactionalID: id, ProducerID: pid, ProducerEpoch: epoch, Commit: commit}).Err
}

func (k kafkaCoordinator) Describe(ctx context.Context, id string) (kafka.TransactionState, bool, error) {
	rec, ok, err := k.s.Describe(ctx, id)
	return stateOf(rec), ok, err
}

func (k kafkaCoordinator) List(ctx context.Context) ([]kafka.TransactionState, error) {
	recs, err := k.s.List(ctx)
	out := make([]kafka.TransactionState, 0, len(recs))
	for _, r := range recs {
		out = append(out, stateOf(r))
	}
	return out, err
}

func (k kafkaCoordinator) Coordinator(ctx context.Context, id string) (kafka.Node, error) {
	return k.coordinator(ctx, id)
}

// stateOf is a record as DescribeTransactions shows it.
func stateOf(r Record) kafka.TransactionState {
	st := kafka.TransactionState{TransactionalID: r.TransactionalID, ProducerID: r.ProducerID, ProducerEpoch: r.ProducerEpoch,
		State: r.State.String(), TimeoutMs: r.TimeoutMs, StartMs: -1}
	if r.State == Ongoing || r.State.preparing() {
		st.StartMs = r.StartMs
	}
	for _, p := range r.Partitions {
		st.Partitions = append(st.Partitions, kafka.TransactionPartition{Topic: p.Topic, Partition: p.Partition})
	}
	return st
}
