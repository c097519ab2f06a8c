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
// leader_epoch (v4+) is the epoch of the offset found for a partition that
// knows it (OffsetEpochPartition, ISR mode: its leader-epoch cache), as
// Kafka answers it: earliest, the first batch's epoch; latest, the latest
// epoch started at or before the high watermark; a timestamp or the max
// timestamp, the found batch's; −1 when no offset was found. Ledger-mode
// partitions answer −1 (no epochs; a client then validates nothing for
// the offset, and checks again after its next fetch).
//
// Deviations: read_committed is read_uncommitted (no transactions, the
// high watermark is the last stable offset); for latest Kafka answers the
// partition's current leader epoch, here the epoch the high watermark
// falls in, which is the same once the high watermark reached the current
// epoch's start (a high watermark still lagging behind it right after an
// election, which Kafka answers OFFSET_NOT_AVAILABLE, is answered with
// the epoch before).

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
		offset, ts = part.LogStartOffset(), -1
	case timestamp == -1:
		offset, ts = part.HighWatermark(), -1
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
	return offset, ts, offsetEpoch(ctx, part, offset)
}

// offsetEpoch is leader_epoch for offset: its epoch where the partition
// knows it, −1 otherwise and for no offset.
func offsetEpoch(ctx context.Context, part Partition, offset int64) int32 {
	ep, ok := part.(OffsetEpochPartition)
	if !ok || offset < 0 {
		return -1
	}
	return ep.EpochForOffset(ctx, offset)
}
