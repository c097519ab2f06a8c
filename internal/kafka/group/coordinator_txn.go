package group

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TxnOffsetCommit serves TxnOffsetCommit: the offsets are stored pending
// and answered once durable; they count as committed only after
// CompleteTxn(commit) for the producer.
func (c *Coordinator) TxnOffsetCommit(ctx context.Context, req *kmsg.TxnOffsetCommitRequest) *kmsg.TxnOffsetCommitResponse {
	e, err := c.acquire(ctx, req.Group, true)
	if err != nil {
		// The response's shape from a throwaway group, every partition
		// failed.
		resp, _ := NewGroup(req.Group, c.groupCfg).ValidateTxnCommit(c.cfg.Clock.Now(), req)
		for ti := range resp.Topics {
			for pi := range resp.Topics[ti].Partitions {
				resp.Topics[ti].Partitions[pi].ErrorCode = err.Code
			}
		}
		return resp
	}
	defer e.io.Unlock()
	resp, w := e.g.ValidateTxnCommit(c.cfg.Clock.Now(), req)
	if w != nil {
		if err := c.write(ctx, e, w); err != nil {
			FailTxnCommit(resp, w, err)
		}
	}
	c.release(e)
	return resp
}

// CompleteTxn ends a transactional producer's pending offsets in group:
// the transaction coordinator's marker for a group (AddOffsetsToTxn made
// it a participant). Nothing pending is a success: a marker may be written
// twice.
func (c *Coordinator) CompleteTxn(ctx context.Context, group string, producerID int64, commit bool) *kerr.Error {
	e, err := c.acquire(ctx, group, true)
	if err != nil {
		return err
	}
	defer e.io.Unlock()
	if w := e.g.ResolveTxn(producerID, commit); w != nil {
		err = c.write(ctx, e, w)
	}
	c.release(e)
	return err
}

// Unstable reports whether a transaction's offsets for a partition of group
// are pending (an OffsetFetch with require_stable answers
// UNSTABLE_OFFSET_COMMIT for it).
func (c *Coordinator) Unstable(ctx context.Context, group string, tp TopicPartition) (bool, *kerr.Error) {
	e, err := c.acquire(ctx, group, false)
	if err != nil {
		return false, err
	}
	unstable := e.g.Unstable(tp)
	c.release(e)
	return unstable, nil
}
