package kafka

// ListOffsets (key 2), versions 1–11.
//
// Timestamps: −2 earliest (log start), −1 latest (high watermark), −3 the
// record with the largest timestamp (KIP-734), −4 earliest local (the log
// start: all of a ledger log is "local"), −5 earliest pending tiered upload
// (none: offset and timestamp −1), ≥ 0 the first offset whose batch max
// timestamp is at least it (Partition.OffsetForTimestamp; −1 when none).
//
// current_leader_epoch (v4+) is checked for a partition with leader epochs
// (EpochPartition, ISR mode) as in Fetch: older FENCED_LEADER_EPOCH, newer
// UNKNOWN_LEADER_EPOCH, −1 not checked; ledger-mode partitions check
// nothing (they have no epochs).
//
// Deviations: read_committed is read_uncommitted (no transactions, the
// high watermark is the last stable offset); leader_epoch is always −1
// (Kafka gives the epoch of the offset found; a client then validates
// nothing for it, and checks again after its next fetch, whose batches
// carry their epochs).

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func handleListOffsets(s *Server, _ context.Context, rq *request) finishFunc {
	req := rq.kreq.(*kmsg.ListOffsetsRequest)
	return func(ctx context.Context) kmsg.Response {
		resp := req.ResponseKind().(*kmsg.ListOffsetsResponse)
		for _, t := range req.Topics {
			rt := kmsg.NewListOffsetsResponseTopic()
			rt.Topic = t.Topic
			for _, p := range t.Partitions {
				rp := kmsg.NewListOffsetsResponseTopicPartition()
				rp.Partition = p.Partition
				rp.Offset, rp.Timestamp, rp.LeaderEpoch = s.listOffset(ctx, rq, t.Topic, p.Partition, p.CurrentLeaderEpoch, p.Timestamp, &rp.ErrorCode)
				rt.Partitions = append(rt.Partitions, rp)
			}
			resp.Topics = append(resp.Topics, rt)
		}
		return resp
	}
}

func (s *Server) listOffset(ctx context.Context, rq *request, topic string, partition, currentLeaderEpoch int32, timestamp int64, errorCode *int16) (offset, ts int64, epoch int32) {
	fail := func(err error) (int64, int64, int32) {
		*errorCode = rq.note(s.errorCode(err, "list offsets", "topic", topic, "partition", partition))
		return -1, -1, -1
	}
	part, err := s.backend.Partition(ctx, topic, partition)
	if err != nil {
		return fail(err)
	}
	if code := checkLeaderEpoch(part, currentLeaderEpoch); code != 0 {
		*errorCode = rq.note(code)
		return -1, -1, -1
	}
	switch {
	case timestamp == -2 || timestamp == -4:
		return part.LogStartOffset(), -1, -1
	case timestamp == -1:
		return part.HighWatermark(), -1, -1
	case timestamp == -3:
		offset, ts, err = part.MaxTimestamp(ctx)
	case timestamp == -5:
		return -1, -1, -1
	case timestamp >= 0:
		offset, ts, err = part.OffsetForTimestamp(ctx, timestamp)
	default:
		*errorCode = rq.note(kerr.InvalidRequest.Code)
		return -1, -1, -1
	}
	if err != nil {
		return fail(err)
	}
	return offset, ts, -1
}
