package kafka

// AlterPartitionReassignments (key 45), versions 0–1, and
// ListPartitionReassignments (key 46), version 0 (KIP-455).
//
// AlterPartitionReassignments moves each partition named to its target
// replicas (replicas[0] the preferred leader), or with null replicas
// cancels its reassignment in progress; v1's allow_replication_factor_change
// false (KIP-860) refuses a target whose size differs from the replica set
// the partition is headed for, and is echoed in the answer. Per partition,
// as Kafka: nothing; INVALID_REPLICA_ASSIGNMENT (an empty target, a broker
// twice, a broker that is not registered, a cancel or replacement that
// would leave no in-sync replica); NO_REASSIGNMENT_IN_PROGRESS (a cancel of
// nothing); INVALID_REPLICATION_FACTOR (KIP-860); UNKNOWN_TOPIC_OR_PARTITION
// (no such topic or partition); INVALID_TOPIC_EXCEPTION (a name Kafka would
// not allow); REQUEST_TIMED_OUT (the partition's record did not show the
// change within timeout_ms, default 60 s for timeout_ms ≤ 0). The answer
// comes once the change is recorded, not once the data moved: the
// reassignment then completes by itself, and ListPartitionReassignments
// lists it until it has. Any broker serves it (the Backend reaches the
// controller wherever it runs).
//
// The reassignments are the Backend's (PartitionReassigner: ISR mode's
// controller). A Backend without one, and a ledger-mode topic's partition
// (whose data is on the bookies, its only replica in Metadata the broker
// that owns its bundle: ownership moves it, not a reassignment), answer
// INVALID_REQUEST with a message saying so: Kafka has no code for a
// partition without replicas to move.
//
// ListPartitionReassignments lists each partition with a reassignment in
// progress: its replicas (the target first, then the replicas being
// removed), adding_replicas and removing_replicas; null topics lists every
// topic's. Partitions named that have none, and unknown topics, are left
// out, as Kafka does.
//
// Deviations: a partition named twice in one AlterPartitionReassignments is
// asked for twice, in order (Kafka refuses the request). A target naming a
// broker that is registered but down is accepted (as Kafka does); the
// reassignment then waits for it.

import (
	"context"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"quire/internal/auth"
)

// defaultReassignmentTimeout is the wait for the records of a request
// whose timeout_ms is not positive (Kafka's admin client default).
const defaultReassignmentTimeout = 60 * time.Second

// errNoReplicasToMove answers a reassignment of a Backend without a
// PartitionReassigner.
var errNoReplicasToMove = &wrappedKerr{kerr.InvalidRequest, "the partition has one replica, which leads it: nothing to reassign"}

func handleAlterPartitionReassignments(s *Server, _ context.Context, rq *request) finishFunc {
	req := rq.kreq.(*kmsg.AlterPartitionAssignmentsRequest)
	return func(ctx context.Context) kmsg.Response {
		resp := req.ResponseKind().(*kmsg.AlterPartitionAssignmentsResponse)
		resp.AllowReplicationFactorChange = req.AllowReplicationFactorChange
		s.alterPartitionReassignments(ctx, rq, req, resp)
		return resp
	}
}

func (s *Server) alterPartitionReassignments(ctx context.Context, rq *request, req *kmsg.AlterPartitionAssignmentsRequest, resp *kmsg.AlterPartitionAssignmentsResponse) {
	allowRF := req.Version < 1 || req.AllowReplicationFactorChange
	var names []string
	seen := map[string]bool{}
	for _, t := range req.Topics {
		if validTopicName(t.Topic) && !seen[t.Topic] {
			seen[t.Topic] = true
			names = append(names, t.Topic)
		}
	}
	partitions := map[string]int{}
	if len(names) > 0 {
		topics, err := s.backend.Topics(ctx, names, false)
		if err != nil {
			code := s.errorCode(err, "alter partition reassignments: topics")
			resp.ErrorCode, resp.ErrorMessage = rq.note(code), errorMessage(code)
			for _, t := range req.Topics {
				rt := kmsg.NewAlterPartitionAssignmentsResponseTopic()
				rt.Topic = t.Topic
				for _, p := range t.Partitions {
					rt.Partitions = append(rt.Partitions, reassignmentAnswer(p.Partition, code, errorMessage(code)))
				}
				resp.Topics = append(resp.Topics, rt)
			}
			return
		}
		for _, t := range topics {
			partitions[t.Name] = len(t.Partitions)
		}
	}
	// The front end's own answers, then the Backend's for the rest.
	codes := make([][]int16, len(req.Topics))
	var asked []ReassignmentRequest
	for i, t := range req.Topics {
		codes[i] = make([]int16, len(t.Partitions))
		n, exists := partitions[t.Topic]
		for j, p := range t.Partitions {
			switch {
			case !validTopicName(t.Topic):
				codes[i][j] = kerr.InvalidTopicException.Code
			case !exists || p.Partition < 0 || int(p.Partition) >= n:
				codes[i][j] = kerr.UnknownTopicOrPartition.Code
			default:
				asked = append(asked, ReassignmentRequest{Topic: t.Topic, Partition: p.Partition, Replicas: p.Replicas})
			}
		}
	}
	results := make([]error, len(asked))
	if ra, ok := s.backend.(PartitionReassigner); ok && len(asked) > 0 {
		timeout := time.Duration(req.TimeoutMillis) * time.Millisecond
		if timeout <= 0 {
			timeout = defaultReassignmentTimeout
		}
		answered := ra.AlterPartitionReassignments(ctx, asked, allowRF, timeout)
		for k := range results {
			if k < len(answered) {
				results[k] = answered[k].Err
			} else {
				results[k] = kerr.RequestTimedOut // a backend that left it out
			}
		}
	} else {
		for k := range results {
			results[k] = errNoReplicasToMove
		}
	}
	k := 0
	for i, t := range req.Topics {
		rt := kmsg.NewAlterPartitionAssignmentsResponseTopic()
		rt.Topic = t.Topic
		for j, p := range t.Partitions {
			code, msg := codes[i][j], errorMessage(codes[i][j])
			if code == 0 {
				err := results[k]
				k++
				if code = s.errorCode(err, "alter partition reassignments", "topic", t.Topic, "partition", p.Partition); code != 0 {
					msg = electionMessage(err, code)
				}
			}
			rt.Partitions = append(rt.Partitions, reassignmentAnswer(p.Partition, rq.note(code), msg))
		}
		resp.Topics = append(resp.Topics, rt)
	}
}

func reassignmentAnswer(partition int32, code int16, msg *string) kmsg.AlterPartitionAssignmentsResponseTopicPartition {
	rp := kmsg.NewAlterPartitionAssignmentsResponseTopicPartition()
	rp.Partition, rp.ErrorCode, rp.ErrorMessage = partition, code, msg
	return rp
}

func handleListPartitionReassignments(s *Server, _ context.Context, rq *request) finishFunc {
	req := rq.kreq.(*kmsg.ListPartitionReassignmentsRequest)
	return func(ctx context.Context) kmsg.Response {
		resp := req.ResponseKind().(*kmsg.ListPartitionReassignmentsResponse)
		ra, ok := s.backend.(PartitionReassigner)
		if !ok {
			return resp // no replicas to move: nothing in progress
		}
		var topics []TopicPartitions
		if req.Topics != nil {
			topics = []TopicPartitions{}
			for _, t := range req.Topics {
				topics = append(topics, TopicPartitions{Topic: t.Topic, Partitions: t.Partitions})
			}
		}
		list, err := ra.ListPartitionReassignments(ctx, topics)
		if code := s.errorCode(err, "list partition reassignments"); code != 0 {
			resp.ErrorCode, resp.ErrorMessage = rq.note(code), errorMessage(code)
			return resp
		}
		for _, r := range list {
			if n := len(resp.Topics); n == 0 || resp.Topics[n-1].Topic != r.Topic {
				rt := kmsg.NewListPartitionReassignmentsResponseTopic()
				rt.Topic = r.Topic
				resp.Topics = append(resp.Topics, rt)
			}
			rp := kmsg.NewListPartitionReassignmentsResponseTopicPartition()
			rp.Partition, rp.Replicas, rp.AddingReplicas, rp.RemovingReplicas = r.Partition, r.Replicas, r.Adding, r.Removing
			if rp.AddingReplicas == nil {
				rp.AddingReplicas = []int32{}
			}
			if rp.RemovingReplicas == nil {
				rp.RemovingReplicas = []int32{}
			}
			rt := &resp.Topics[len(resp.Topics)-1]
			rt.Partitions = append(rt.Partitions, rp)
		}
		return resp
	}
}

// authorizeAlterPartitionReassignments: ALTER on the cluster, as Kafka.
func authorizeAlterPartitionReassignments(s *Server, ctx context.Context, rq *request, h handler) finishFunc {
	req := rq.kreq.(*kmsg.AlterPartitionAssignmentsRequest)
	if s.allowedCluster(rq, auth.OpAlter) {
		return h(s, ctx, rq)
	}
	code := rq.note(kerr.ClusterAuthorizationFailed.Code)
	resp := req.ResponseKind().(*kmsg.AlterPartitionAssignmentsResponse)
	resp.ErrorCode, resp.ErrorMessage = code, errorMessage(code)
	for _, t := range req.Topics {
		rt := kmsg.NewAlterPartitionAssignmentsResponseTopic()
		rt.Topic = t.Topic
		for _, p := range t.Partitions {
			rt.Partitions = append(rt.Partitions, reassignmentAnswer(p.Partition, code, errorMessage(code)))
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return answer(resp)
}

// authorizeListPartitionReassignments: DESCRIBE on the cluster, as Kafka.
func authorizeListPartitionReassignments(s *Server, ctx context.Context, rq *request, h handler) finishFunc {
	req := rq.kreq.(*kmsg.ListPartitionReassignmentsRequest)
	if s.allowedCluster(rq, auth.OpDescribe) {
		return h(s, ctx, rq)
	}
	resp := req.ResponseKind().(*kmsg.ListPartitionReassignmentsResponse)
	code := rq.note(kerr.ClusterAuthorizationFailed.Code)
	resp.ErrorCode, resp.ErrorMessage = code, errorMessage(code)
	return answer(resp)
}
