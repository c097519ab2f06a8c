package kafka

// OffsetForLeaderEpoch (key 23), versions 2–4 (Kafka 4.0 dropped 0–1,
// KIP-896; franz-go needs 2 to validate with it).
//
// A consumer (replica_id −1) asks it after a leader change (KIP-320) to
// learn whether the log it read from was truncated: for each partition,
// the largest leader epoch ≤ leader_epoch in the leader's epoch cache and
// the offset where that epoch ends (the log end offset for the latest
// epoch), UNDEFINED_EPOCH (−1) and UNDEFINED_EPOCH_OFFSET (−1) when the
// cache has none (an empty cache, leader_epoch −1, or one newer than
// every epoch: Kafka's LeaderEpochFileCache.endOffsetFor). Served by the
// partition's leader only: NOT_LEADER_OR_FOLLOWER elsewhere,
// UNKNOWN_TOPIC_OR_PARTITION for a partition that does not exist, and
// current_leader_epoch checked first as in Fetch (older
// FENCED_LEADER_EPOCH, newer UNKNOWN_LEADER_EPOCH, −1 not checked). The
// answer's leader epochs come from an EpochPartition (ISR mode).
//
// Ledger-mode partitions have no leader epochs: Metadata gives them −1,
// so clients never ask (franz-go and the Java client validate only a
// partition whose Metadata gave an epoch). If one asks anyway, it gets
// the epoch it asked for ending at the high watermark, with nothing
// checked: a ledger is never truncated below what was acknowledged (its
// entries are acknowledged by a bookie quorum, and a new owner recovers
// every one of them), so no epoch a consumer read can have ended earlier.
// UNDEFINED would be Kafka's answer for a log without epochs, but both
// clients take it for truncation and reset the consumer's position.
//
// Deviations: replica_id −2 (Kafka's debugging id, also what a v2 request
// means) is answered by the leader only, as for a consumer; a follower's
// request (replica_id ≥ 0) is answered like a consumer's (Quire's
// followers use Fetch's diverging_epoch instead, as Kafka's since 2.7).

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func handleOffsetForLeaderEpoch(s *Server, _ context.Context, rq *request) finishFunc {
	req := rq.kreq.(*kmsg.OffsetForLeaderEpochRequest)
	return func(ctx context.Context) kmsg.Response {
		resp := req.ResponseKind().(*kmsg.OffsetForLeaderEpochResponse)
		for _, t := range req.Topics {
			rt := kmsg.NewOffsetForLeaderEpochResponseTopic()
			rt.Topic = t.Topic
			for _, p := range t.Partitions {
				rp := kmsg.NewOffsetForLeaderEpochResponseTopicPartition()
				rp.Partition = p.Partition
				rp.LeaderEpoch, rp.EndOffset, rp.ErrorCode = s.epochEndOffset(ctx, rq, t.Topic, &p)
				rt.Partitions = append(rt.Partitions, rp)
			}
			resp.Topics = append(resp.Topics, rt)
		}
		return resp
	}
}

// epochEndOffset answers one partition of an OffsetForLeaderEpoch request.
func (s *Server) epochEndOffset(ctx context.Context, rq *request, topic string, p *kmsg.OffsetForLeaderEpochRequestTopicPartition) (int32, int64, int16) {
	fail := func(code int16) (int32, int64, int16) { return -1, -1, rq.note(code) }
	part, err := s.backend.Partition(ctx, topic, p.Partition)
	if err != nil {
		return fail(s.errorCode(err, "offset for leader epoch", "topic", topic, "partition", p.Partition))
	}
	if code := checkLeaderEpoch(part, p.CurrentLeaderEpoch); code != 0 {
		return fail(code)
	}
	ep, ok := part.(EpochPartition)
	if !ok {
		if p.LeaderEpoch < 0 {
			return -1, -1, 0
		}
		return p.LeaderEpoch, part.HighWatermark(), 0
	}
	epoch, end, leaderEpoch, err := ep.EndOffsetForEpoch(ctx, p.LeaderEpoch)
	if err != nil {
		return fail(s.errorCode(err, "offset for leader epoch", "topic", topic, "partition", p.Partition))
	}
	// The epoch may have changed since the check above; the answer must
	// come from the epoch the client named.
	if code := epochMismatch(p.CurrentLeaderEpoch, leaderEpoch); code != 0 {
		return fail(code)
	}
	return epoch, end, 0
}

// checkLeaderEpoch is KIP-320's check of a request's current_leader_epoch
// against a partition with leader epochs: 0 when it matches, is −1 (not
// checked) or the partition has no epochs (ledger mode).
func checkLeaderEpoch(part Partition, current int32) int16 {
	ep, ok := part.(EpochPartition)
	if !ok {
		return 0
	}
	return epochMismatch(current, ep.LeaderEpoch())
}

// epochMismatch is FENCED_LEADER_EPOCH for a request epoch older than the
// partition's, UNKNOWN_LEADER_EPOCH for a newer one, 0 for the same or −1.
func epochMismatch(current, leaderEpoch int32) int16 {
	switch {
	case current == -1:
		return 0
	case current < leaderEpoch:
		return kerr.FencedLeaderEpoch.Code
	case current > leaderEpoch:
		return kerr.UnknownLeaderEpoch.Code
	}
	return 0
}
