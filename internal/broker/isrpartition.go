package broker

import (
	"context"
	"errors"

	"github.com/twmb/franz-go/pkg/kerr"

	"quire/internal/isr"
	"quire/internal/isr/isrnode"
	"quire/internal/kafka"
)

// isrPartition is an ISR-mode partition led by this broker, as the Kafka
// front end sees it: produce and fetch go to the replica here (isrnode).
// With follower set it is one this broker follows, handed out only for a
// consumer's Fetch v11+ (KIP-392, isr_readreplica.go): reads stop at the
// follower's HW, and a fetch offset past it up to the follower's LEO is
// answered empty (the long-poll waits for the HW), as Kafka's follower
// does; OFFSET_OUT_OF_RANGE past the LEO.
//
// Idempotent producers' retries and sequences are checked by the replica
// (isrnode's producer table). Deviations from Kafka: message.timestamp.type
// is CreateTime only (LogAppendTime is -1); ListOffsets' max timestamp is
// the last batch's below the HW, not the largest of the log; no
// transactions. Its leader epochs are checked as KIP-320 says
// (kafka.EpochPartition), and ListOffsets answers each offset's epoch
// from the epoch cache (kafka.OffsetEpochPartition).
type isrPartition struct {
	m        *isrnode.Manager
	s        *isrSide
	name     string
	follower bool
	// counted is the offset up to which this follower partition's reads
	// were counted in the metrics: the value lives for one fetch request,
	// whose long-poll rounds may read the same batches again.
	counted int64
}

var (
	_ kafka.OffsetEpochPartition = (*isrPartition)(nil)
	_ kafka.ReadReplicaSelector  = (*isrPartition)(nil)
)

// LeaderEpoch implements kafka.EpochPartition: the leader epoch of the
// replica here (Fetch and ListOffsets check a client's against it).
func (p *isrPartition) LeaderEpoch() int32 {
	st, err := p.m.Status(p.name)
	if err != nil {
		return isr.NoEpoch
	}
	return st.LeaderEpoch
}

// EndOffsetForEpoch implements kafka.EpochPartition from the leader's
// epoch cache (OffsetForLeaderEpoch).
func (p *isrPartition) EndOffsetForEpoch(ctx context.Context, epoch int32) (int32, int64, int32, error) {
	end, leaderEpoch, err := p.m.EndOffsetForEpoch(ctx, p.name, epoch)
	if err != nil {
		return -1, -1, isr.NoEpoch, isrnode.KafkaError(err)
	}
	return end.Epoch, end.EndOffset, leaderEpoch, nil
}

// EpochForOffset implements kafka.OffsetEpochPartition from the replica's
// epoch cache (ListOffsets' leader_epoch); −1 when the replica is gone.
func (p *isrPartition) EpochForOffset(ctx context.Context, offset int64) int32 {
	epoch, err := p.m.EpochForOffset(ctx, p.name, offset)
	if err != nil {
		return isr.NoEpoch
	}
	return epoch
}

// Append implements kafka.Partition: the batch is handed to the leader's
// core before it returns (so a connection's batches keep their order),
// with the produce request's acks (acks=all by default); the answer comes
// when the core gives it: acks=1 once appended here, acks=all once the HW
// passed it.
func (p *isrPartition) Append(ctx context.Context, batch []byte) <-chan kafka.AppendResult {
	out := make(chan kafka.AppendResult, 1)
	acks := isr.AcksAll
	if a, ok := kafka.AcksFrom(ctx); ok {
		acks = int8(a)
	}
	answer, err := p.m.SubmitBatch(ctx, p.name, batch, acks)
	if err != nil {
		out <- kafka.AppendResult{BaseOffset: -1, LogAppendTime: -1, LogStartOffset: -1, Err: isrnode.KafkaError(err)}
		return out
	}
	go func() {
		a := <-answer
		res := kafka.AppendResult{BaseOffset: a.BaseOffset, LogAppendTime: -1, LogStartOffset: p.LogStartOffset(), Err: isrnode.KafkaError(a.Err)}
		if res.Err != nil {
			res.BaseOffset = -1
		}
		out <- res
	}()
	return out
}

// Read implements kafka.Partition: whole batches as stored, from the one
// holding offset, up to the HW (a follower's own: see the type).
func (p *isrPartition) Read(ctx context.Context, offset int64, maxBytes int32) (kafka.ReadResult, error) {
	st, err := p.m.Status(p.name)
	if err != nil {
		return kafka.ReadResult{}, kerr.NotLeaderForPartition
	}
	res := kafka.ReadResult{HighWatermark: st.HighWatermark, LastStableOffset: st.HighWatermark, LogStartOffset: st.LogStartOffset}
	size := 0
	for from := offset; ; {
		batches, st, err := p.m.Read(ctx, p.name, from, 64)
		if err != nil {
			if len(res.Batches) > 0 {
				return res, nil
			}
			if errors.Is(err, isr.ErrOffsetOutOfRange) {
				if p.follower && from >= st.LogStartOffset && from <= st.LogEndOffset {
					// Past the follower's HW, within its log: nothing
					// it may hand out yet.
					res.HighWatermark, res.LastStableOffset, res.LogStartOffset = st.HighWatermark, st.HighWatermark, st.LogStartOffset
					return res, nil
				}
				return res, kerr.OffsetOutOfRange
			}
			return res, isrnode.KafkaError(err)
		}
		res.HighWatermark, res.LastStableOffset, res.LogStartOffset = st.HighWatermark, st.HighWatermark, st.LogStartOffset
		for _, b := range batches {
			if size > 0 && size+len(b.Raw) > int(maxBytes) {
				return res, nil
			}
			res.Batches = append(res.Batches, b.Raw)
			size += len(b.Raw)
			from = b.NextOffset()
			p.countFollowerRead(b)
		}
		if len(batches) == 0 || from >= st.HighWatermark || size >= int(maxBytes) {
			return res, nil
		}
	}
}

// HighWatermark implements kafka.Partition.
func (p *isrPartition) HighWatermark() int64 {
	st, err := p.m.Status(p.name)
	if err != nil {
		return -1
	}
	return st.HighWatermark
}

// LogStartOffset implements kafka.Partition.
func (p *isrPartition) LogStartOffset() int64 {
	st, err := p.m.Status(p.name)
	if err != nil {
		return -1
	}
	return st.LogStartOffset
}

// Wait implements kafka.Partition: closed once the HW passes offset or
// the replica's role or epoch changes.
func (p *isrPartition) Wait(offset int64) <-chan struct{} {
	return p.m.WaitHighWatermark(p.name, offset)
}

// OffsetForTimestamp implements kafka.Partition through the log's time
// index.
func (p *isrPartition) OffsetForTimestamp(ctx context.Context, ts int64) (int64, int64, error) {
	off, at, err := p.m.OffsetForTimestamp(ctx, p.name, ts)
	return off, at, isrnode.KafkaError(err)
}

// MaxTimestamp implements kafka.Partition (see the type's deviations).
func (p *isrPartition) MaxTimestamp(ctx context.Context) (int64, int64, error) {
	off, at, err := p.m.LastBatchTimestamp(ctx, p.name)
	return off, at, isrnode.KafkaError(err)
}
