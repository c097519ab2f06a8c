package group

// TxnOffsetCommit (key 28) v0–v4 on the state machine: the offsets a
// transactional producer commits for a group (Kafka Streams' and
// exactly-once consumers' "consume-transform-produce") are pending until the
// producer's transaction ends. The transaction coordinator then resolves
// them (its marker for the group): committed on commit, dropped on abort.
// Pending offsets are made durable with the group's committed ones (one
// store value), so a coordinator failover keeps them; an OffsetFetch with
// require_stable (KIP-447) gets UNSTABLE_OFFSET_COMMIT for a partition with
// pending offsets, so a new consumer does not start from an offset its
// predecessor's transaction may still abort.
//
// Deviations from Kafka: the producer id and epoch are not checked against
// the transaction coordinator here (Kafka does not either, before KIP-890);
// a producer's pending offsets are keyed by its id alone.

import (
	"maps"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"quire/internal/invariants"
)

// TxnResolve ends a producer's pending offsets: committed, or dropped.
type TxnResolve struct {
	ProducerID int64
	Commit     bool
}

// ValidateTxnCommit checks a TxnOffsetCommit. Like ValidateCommit: the
// response carries the rejected partitions' errors, the accepted ones are in
// the write (nil when none), answered once it is durable.
func (g *Group) ValidateTxnCommit(now time.Time, req *kmsg.TxnOffsetCommitRequest) (*kmsg.TxnOffsetCommitResponse, *OffsetWrite) {
	resp := kmsg.NewPtrTxnOffsetCommitResponse()
	resp.Version = req.Version
	for _, t := range req.Topics {
		rt := kmsg.TxnOffsetCommitResponseTopic{Topic: t.Topic}
		for _, p := range t.Partitions {
			rt.Partitions = append(rt.Partitions, kmsg.TxnOffsetCommitResponseTopicPartition{Partition: p.Partition})
		}
		resp.Topics = append(resp.Topics, rt)
	}
	fail := func(err *kerr.Error) {
		for ti := range resp.Topics {
			for pi := range resp.Topics[ti].Partitions {
				resp.Topics[ti].Partitions[pi].ErrorCode = err.Code
			}
		}
	}
	generation, memberID, instanceID := int32(-1), "", (*string)(nil)
	if req.Version >= 3 {
		generation, memberID, instanceID = req.Generation, req.MemberID, req.InstanceID
	}
	// Without member information (v0–v2, or a producer outside the group)
	// Kafka checks nothing but that the group is usable.
	switch {
	case g.state == Dead && g.exists:
		fail(kerr.CoordinatorNotAvailable)
		return resp, nil
	case generation >= 0 || memberID != "" || instanceID != nil:
		if err := g.validateCommit(now, generation, memberID, instanceID); err != nil {
			fail(err)
			return resp, nil
		}
	}
	w := &OffsetWrite{TxnProducer: req.ProducerID, TxnSet: map[TopicPartition]Offset{}}
	nowMillis := now.UnixMilli()
	for ti, t := range req.Topics {
		for pi, p := range t.Partitions {
			o, ok := g.newOffset(p.Offset, p.Metadata, nowMillis)
			if !ok {
				resp.Topics[ti].Partitions[pi].ErrorCode = kerr.OffsetMetadataTooLarge.Code
				continue
			}
			if req.Version >= 2 {
				o.LeaderEpoch = p.LeaderEpoch
			}
			w.TxnSet[TopicPartition{t.Topic, p.Partition}] = o
			w.txnIndexes = append(w.txnIndexes, [2]int{ti, pi})
		}
	}
	if len(w.TxnSet) == 0 {
		return resp, nil
	}
	return resp, w
}

// FailTxnCommit sets err on the partitions of the write.
func FailTxnCommit(resp *kmsg.TxnOffsetCommitResponse, w *OffsetWrite, err *kerr.Error) {
	for _, ix := range w.txnIndexes {
		resp.Topics[ix[0]].Partitions[ix[1]].ErrorCode = err.Code
	}
}

// ResolveTxn returns the write that ends a producer's pending offsets (nil
// when it has none here).
func (g *Group) ResolveTxn(producerID int64, commit bool) *OffsetWrite {
	if len(g.txnPending[producerID]) == 0 {
		return nil
	}
	return &OffsetWrite{Resolve: &TxnResolve{ProducerID: producerID, Commit: commit}}
}

// Unstable reports whether a transaction's offsets for tp are pending.
func (g *Group) Unstable(tp TopicPartition) bool {
	for _, os := range g.txnPending {
		if _, ok := os[tp]; ok {
			return true
		}
	}
	return false
}

// LoadPending replaces the pending transactional offsets with what the
// store holds.
func (g *Group) LoadPending(pending map[int64]map[TopicPartition]Offset) {
	g.txnPending = pending
	if len(pending) > 0 {
		g.exists = true
	}
}

// pendingWith is the pending offsets once w is applied; next is the
// committed offsets w leads to, which a commit resolution adds to.
func (g *Group) pendingWith(w *OffsetWrite, next map[TopicPartition]Offset) map[int64]map[TopicPartition]Offset {
	out := make(map[int64]map[TopicPartition]Offset, len(g.txnPending)+1)
	for pid, os := range g.txnPending {
		out[pid] = maps.Clone(os)
	}
	if w.TxnSet != nil {
		if out[w.TxnProducer] == nil {
			out[w.TxnProducer] = map[TopicPartition]Offset{}
		}
		maps.Copy(out[w.TxnProducer], w.TxnSet)
	}
	if r := w.Resolve; r != nil {
		if r.Commit {
			maps.Copy(next, out[r.ProducerID])
		}
		delete(out, r.ProducerID)
	}
	return out
}

// applyTxn applies the transactional part of a durable write.
func (g *Group) applyTxn(w *OffsetWrite) {
	if w.TxnSet == nil && w.Resolve == nil {
		return
	}
	if g.txnPending == nil {
		g.txnPending = map[int64]map[TopicPartition]Offset{}
	}
	next := map[TopicPartition]Offset{}
	g.txnPending = g.pendingWith(w, next)
	maps.Copy(g.offsets, next)
	g.exists = true
	if invariants.Enabled {
		for pid, os := range g.txnPending {
			if len(os) == 0 {
				g.violated("a producer with pending offsets has some: producer %d", pid)
			}
		}
	}
}
