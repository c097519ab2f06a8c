package kafka

// Transactions (KIP-98): InitProducerId with a transactional id (key 22),
// AddPartitionsToTxn (24) v0–v3, AddOffsetsToTxn (25) v0–v3, EndTxn (26)
// v0–v3, TxnOffsetCommit (28) v0–v3, DescribeTransactions (65) v0,
// ListTransactions (66) v0–v1, and FindCoordinator for key type 1
// (transaction). Served, and advertised, only when the Backend implements
// TransactionBackend; the coordinator's rules live behind it
// (internal/kafka/txn), this file only maps the requests.
//
// Deviations: AddPartitionsToTxn v4+ and EndTxn v4+ (KIP-890's broker-side
// verification and per-transaction epoch bump) are not served; a request's
// partitions all get the coordinator's one answer, as Kafka's do except for
// partitions it cannot find (UNKNOWN_TOPIC_OR_PARTITION is not checked
// here: the partition's owner refuses a transactional batch it cannot
// store).

import (
	"context"
	"strings"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// coordinatorTypeTransaction is FindCoordinator's key type for
// transactional ids.
const coordinatorTypeTransaction = 1

// TransactionBackend is a Backend with a transaction coordinator.
type TransactionBackend interface {
	// Transactions returns the coordinator (nil: none, as if the Backend
	// did not implement this).
	Transactions() TransactionCoordinator
}

// TransactionPartition is a partition of a transaction.
type TransactionPartition struct {
	Topic     string
	Partition int32
}

// TransactionState is a transactional id as DescribeTransactions and
// ListTransactions show it.
type TransactionState struct {
	TransactionalID string
	ProducerID      int64
	ProducerEpoch   int16
	State           string // Kafka's names: Empty, Ongoing, PrepareCommit, ...
	TimeoutMs       int32
	StartMs         int64 // -1 when no transaction is open
	Partitions      []TransactionPartition
}

// TransactionCoordinator serves the transaction APIs; errors are kerr
// errors (the coordinator's protocol outcomes).
type TransactionCoordinator interface {
	// InitProducerID gives transactionalID its producer id and a new epoch
	// (producerID and epoch are -1, or the pair the producer had: KIP-360).
	InitProducerID(ctx context.Context, transactionalID string, timeoutMs int32, producerID int64, epoch int16) (int64, int16, error)
	AddPartitions(ctx context.Context, transactionalID string, producerID int64, epoch int16, partitions []TransactionPartition) error
	AddOffsets(ctx context.Context, transactionalID string, producerID int64, epoch int16, group string) error
	EndTxn(ctx context.Context, transactionalID string, producerID int64, epoch int16, commit bool) error
	// Describe returns the ids' states (false: unknown id).
	Describe(ctx context.Context, transactionalID string) (TransactionState, bool, error)
	List(ctx context.Context) ([]TransactionState, error)
	// Coordinator is the broker that coordinates transactionalID.
	Coordinator(ctx context.Context, transactionalID string) (Node, error)
}

// TxnGroupCoordinator is a GroupCoordinator that takes transactional
// offset commits (pending until the transaction's marker).
type TxnGroupCoordinator interface {
	TxnOffsetCommit(ctx context.Context, req *kmsg.TxnOffsetCommitRequest) *kmsg.TxnOffsetCommitResponse
}

// transactions returns the backend's coordinator, or nil.
func (s *Server) transactions() TransactionCoordinator {
	if tb, ok := s.backend.(TransactionBackend); ok {
		return tb.Transactions()
	}
	return nil
}

// initTransactionalProducerID serves InitProducerId with a transactional id.
func (s *Server) initTransactionalProducerID(ctx context.Context, rq *request, req *kmsg.InitProducerIDRequest, resp *kmsg.InitProducerIDResponse) {
	tc := s.transactions()
	if tc == nil {
		resp.ErrorCode = rq.note(kerr.TransactionalIDAuthorizationFailed.Code)
		return
	}
	pid, epoch := int64(-1), int16(-1)
	if req.Version >= 3 {
		pid, epoch = req.ProducerID, req.ProducerEpoch
	}
	id, e, err := tc.InitProducerID(ctx, *req.TransactionalID, req.TransactionTimeoutMillis, pid, epoch)
	if code := s.errorCode(err, "init transactional producer id"); code != 0 {
		resp.ErrorCode = rq.note(code)
		return
	}
	resp.ProducerID, resp.ProducerEpoch = id, e
}

func handleAddPartitionsToTxn(s *Server, _ context.Context, rq *request) finishFunc {
	req := rq.kreq.(*kmsg.AddPartitionsToTxnRequest)
	return func(ctx context.Context) kmsg.Response {
		resp := req.ResponseKind().(*kmsg.AddPartitionsToTxnResponse)
		var parts []TransactionPartition
		for _, t := range req.Topics {
			for _, p := range t.Partitions {
				parts = append(parts, TransactionPartition{Topic: t.Topic, Partition: p})
			}
		}
		code := int16(0)
		if tc := s.transactions(); tc == nil {
			code = kerr.UnsupportedVersion.Code
		} else {
			code = s.errorCode(tc.AddPartitions(ctx, req.TransactionalID, req.ProducerID, req.ProducerEpoch, parts), "add partitions to txn")
		}
		rq.note(code)
		for _, t := range req.Topics {
			rt := kmsg.NewAddPartitionsToTxnResponseTopic()
			rt.Topic = t.Topic
			for _, p := range t.Partitions {
				rp := kmsg.NewAddPartitionsToTxnResponseTopicPartition()
				rp.Partition, rp.ErrorCode = p, code
				rt.Partitions = append(rt.Partitions, rp)
			}
			resp.Topics = append(resp.Topics, rt)
		}
		return resp
	}
}

func handleAddOffsetsToTxn(s *Server, _ context.Context, rq *request) finishFunc {
	req := rq.kreq.(*kmsg.AddOffsetsToTxnRequest)
	return func(ctx context.Context) kmsg.Response {
		resp := req.ResponseKind().(*kmsg.AddOffsetsToTxnResponse)
		if tc := s.transactions(); tc == nil {
			resp.ErrorCode = rq.note(kerr.UnsupportedVersion.Code)
		} else {
			resp.ErrorCode = rq.note(s.errorCode(tc.AddOffsets(ctx, req.TransactionalID, req.ProducerID, req.ProducerEpoch, req.Group), "add offsets to txn"))
		}
		return resp
	}
}

func handleEndTxn(s *Server, _ context.Context, rq *request) finishFunc {
	req := rq.kreq.(*kmsg.EndTxnRequest)
	return func(ctx context.Context) kmsg.Response {
		resp := req.ResponseKind().(*kmsg.EndTxnResponse)
		if tc := s.transactions(); tc == nil {
			resp.ErrorCode = rq.note(kerr.UnsupportedVersion.Code)
		} else {
			resp.ErrorCode = rq.note(s.errorCode(tc.EndTxn(ctx, req.TransactionalID, req.ProducerID, req.ProducerEpoch, req.Commit), "end txn"))
		}
		return resp
	}
}

func handleTxnOffsetCommit(s *Server, _ context.Context, rq *request) finishFunc {
	req := rq.kreq.(*kmsg.TxnOffsetCommitRequest)
	return func(ctx context.Context) kmsg.Response {
		if gc, ok := s.backend.Groups().(TxnGroupCoordinator); ok {
			resp := gc.TxnOffsetCommit(ctx, req)
			for _, t := range resp.Topics {
				for _, p := range t.Partitions {
					rq.note(p.ErrorCode)
				}
			}
			return resp
		}
		resp := req.ResponseKind().(*kmsg.TxnOffsetCommitResponse)
		for _, t := range req.Topics {
			rt := kmsg.NewTxnOffsetCommitResponseTopic()
			rt.Topic = t.Topic
			for _, p := range t.Partitions {
				rp := kmsg.NewTxnOffsetCommitResponseTopicPartition()
				rp.Partition, rp.ErrorCode = p.Partition, rq.note(kerr.UnsupportedVersion.Code)
				rt.Partitions = append(rt.Partitions, rp)
			}
			resp.Topics = append(resp.Topics, rt)
		}
		return resp
	}
}

func handleDescribeTransactions(s *Server, _ context.Context, rq *request) finishFunc {
	req := rq.kreq.(*kmsg.DescribeTransactionsRequest)
	return func(ctx context.Context) kmsg.Response {
		resp := req.ResponseKind().(*kmsg.DescribeTransactionsResponse)
		tc := s.transactions()
		for _, id := range req.TransactionalIDs {
			ts := kmsg.NewDescribeTransactionsResponseTransactionState()
			ts.TransactionalID, ts.ProducerID, ts.ProducerEpoch = id, -1, -1
			if tc == nil {
				ts.ErrorCode = rq.note(kerr.UnsupportedVersion.Code)
				resp.TransactionStates = append(resp.TransactionStates, ts)
				continue
			}
			st, ok, err := tc.Describe(ctx, id)
			switch code := s.errorCode(err, "describe transactions"); {
			case code != 0:
				ts.ErrorCode = rq.note(code)
			case !ok:
				ts.ErrorCode = rq.note(kerr.TransactionalIDNotFound.Code)
			default:
				ts.State, ts.ProducerID, ts.ProducerEpoch = st.State, st.ProducerID, st.ProducerEpoch
				ts.TimeoutMillis, ts.StartTimestamp = st.TimeoutMs, st.StartMs
				for _, p := range st.Partitions {
					i := len(ts.Topics) - 1
					if i < 0 || ts.Topics[i].Topic != p.Topic {
						t := kmsg.NewDescribeTransactionsResponseTransactionStateTopic()
						t.Topic = p.Topic
						ts.Topics = append(ts.Topics, t)
						i++
					}
					ts.Topics[i].Partitions = append(ts.Topics[i].Partitions, p.Partition)
				}
			}
			resp.TransactionStates = append(resp.TransactionStates, ts)
		}
		return resp
	}
}

func handleListTransactions(s *Server, _ context.Context, rq *request) finishFunc {
	req := rq.kreq.(*kmsg.ListTransactionsRequest)
	return func(ctx context.Context) kmsg.Response {
		resp := req.ResponseKind().(*kmsg.ListTransactionsResponse)
		tc := s.transactions()
		if tc == nil {
			resp.ErrorCode = rq.note(kerr.UnsupportedVersion.Code)
			return resp
		}
		all, err := tc.List(ctx)
		if code := s.errorCode(err, "list transactions"); code != 0 {
			resp.ErrorCode = rq.note(code)
			return resp
		}
		for _, st := range all {
			if len(req.StateFilters) > 0 && !contains(req.StateFilters, st.State) ||
				len(req.ProducerIDFilters) > 0 && !contains(req.ProducerIDFilters, st.ProducerID) {
				continue
			}
			t := kmsg.NewListTransactionsResponseTransactionState()
			t.TransactionalID, t.ProducerID, t.TransactionState = st.TransactionalID, st.ProducerID, st.State
			resp.TransactionStates = append(resp.TransactionStates, t)
		}
		return resp
	}
}

func contains[T comparable](xs []T, x T) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

// GroupMarkerTopic is the topic name under which a WriteTxnMarkers request
// between Quire brokers carries a consumer group's marker: Kafka writes it
// to the group's __consumer_offsets partition, which Quire does not have,
// so the group is named instead (GroupMarkerTopic + group name).
const GroupMarkerTopic = "__quire_group:"

// MarkerPartition is a Partition that stores transactions: it appends the
// coordinator's commit and abort markers.
type MarkerPartition interface {
	AppendMarker(ctx context.Context, producerID int64, epoch int16, commit bool, coordinatorEpoch int32) <-chan AppendResult
}

// TxnGroupMarker is a GroupCoordinator that ends a producer's pending
// transactional offsets in a group it coordinates.
type TxnGroupMarker interface {
	CompleteTxn(ctx context.Context, group string, producerID int64, commit bool) *kerr.Error
}

// WriteTxnMarkers (key 27) v0–v1: the transaction coordinator's markers, sent
// to the broker serving each partition (and, between Quire brokers, to each
// group's coordinator under GroupMarkerTopic). Each partition answers its
// own error; the coordinator retries the failed ones.
func handleWriteTxnMarkers(s *Server, _ context.Context, rq *request) finishFunc {
	req := rq.kreq.(*kmsg.WriteTxnMarkersRequest)
	return func(ctx context.Context) kmsg.Response {
		resp := req.ResponseKind().(*kmsg.WriteTxnMarkersResponse)
		for _, m := range req.Markers {
			rm := kmsg.NewWriteTxnMarkersResponseMarker()
			rm.ProducerID = m.ProducerID
			for _, t := range m.Topics {
				rt := kmsg.NewWriteTxnMarkersResponseMarkerTopic()
				rt.Topic = t.Topic
				for _, p := range t.Partitions {
					rp := kmsg.NewWriteTxnMarkersResponseMarkerTopicPartition()
					rp.Partition = p
					rp.ErrorCode = rq.note(s.writeMarker(ctx, m, t.Topic, p))
					rt.Partitions = append(rt.Partitions, rp)
				}
				rm.Topics = append(rm.Topics, rt)
			}
			resp.Markers = append(resp.Markers, rm)
		}
		return resp
	}
}

// writeMarker appends one marker and returns its error code.
func (s *Server) writeMarker(ctx context.Context, m kmsg.WriteTxnMarkersRequestMarker, topic string, partition int32) int16 {
	if group, ok := strings.CutPrefix(topic, GroupMarkerTopic); ok {
		gm, ok := s.backend.Groups().(TxnGroupMarker)
		if !ok {
			return kerr.UnsupportedVersion.Code
		}
		if err := gm.CompleteTxn(ctx, group, m.ProducerID, m.Committed); err != nil {
			return err.Code
		}
		return 0
	}
	p, err := s.backend.Partition(ctx, topic, partition)
	if code := s.errorCode(err, "write txn markers", "topic", topic); code != 0 {
		return code
	}
	mp, ok := p.(MarkerPartition)
	if !ok {
		return kerr.UnsupportedForMessageFormat.Code
	}
	select {
	case r := <-mp.AppendMarker(ctx, m.ProducerID, m.ProducerEpoch, m.Committed, m.CoordinatorEpoch):
		return s.errorCode(r.Err, "write txn marker", "topic", topic)
	case <-ctx.Done():
		return kerr.RequestTimedOut.Code
	}
}
