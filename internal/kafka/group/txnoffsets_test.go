package group

import (
	"context"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func txnCommitReq(group string, pid int64, offsets map[int32]int64) *kmsg.TxnOffsetCommitRequest {
	req := kmsg.NewPtrTxnOffsetCommitRequest()
	req.Version, req.Group, req.TransactionalID, req.ProducerID, req.Generation = 3, group, "app", pid, -1
	t := kmsg.NewTxnOffsetCommitRequestTopic()
	t.Topic = "t"
	for p, o := range offsets {
		rp := kmsg.NewTxnOffsetCommitRequestTopicPartition()
		rp.Partition, rp.Offset = p, o
		t.Partitions = append(t.Partitions, rp)
	}
	req.Topics = append(req.Topics, t)
	return req
}

// fetchOne returns partition p of topic t: its offset and error code, with
// require_stable as asked.
func fetchOne(t *testing.T, c *Coordinator, group string, p int32, stable bool) (int64, int16) {
	t.Helper()
	req := kmsg.NewPtrOffsetFetchRequest()
	req.Version, req.RequireStable = 8, stable
	g := kmsg.NewOffsetFetchRequestGroup()
	g.Group = group
	rt := kmsg.NewOffsetFetchRequestGroupTopic()
	rt.Topic, rt.Partitions = "t", []int32{p}
	g.Topics = append(g.Topics, rt)
	req.Groups = append(req.Groups, g)
	resp := c.OffsetFetch(context.Background(), req)
	rp := resp.Groups[0].Topics[0].Partitions[0]
	return rp.Offset, rp.ErrorCode
}

// Offsets committed in a transaction are pending until its marker: not
// visible, unstable for require_stable fetches; a commit makes them the
// group's offsets, an abort drops them; a coordinator failover keeps them.
func TestTxnOffsetCommit(t *testing.T) {
	e := newEnv(t)
	c := e.coordinator()
	ctx := context.Background()
	resp := c.TxnOffsetCommit(ctx, txnCommitReq("g", 7, map[int32]int64{0: 10, 1: 20}))
	for _, p := range resp.Topics[0].Partitions {
		if p.ErrorCode != 0 {
			t.Fatalf("txn commit: %v", kerr.ErrorForCode(p.ErrorCode))
		}
	}
	if off, code := fetchOne(t, c, "g", 0, false); off != -1 || code != 0 {
		t.Fatalf("a pending offset is visible: %d (%d)", off, code)
	}
	if _, code := fetchOne(t, c, "g", 0, true); code != kerr.UnstableOffsetCommit.Code {
		t.Fatalf("require_stable on a pending offset: code %d, want UNSTABLE_OFFSET_COMMIT", code)
	}

	// A new coordinator (failover) loads the pending offsets from the store.
	c2 := e.coordinator()
	if _, code := fetchOne(t, c2, "g", 1, true); code != kerr.UnstableOffsetCommit.Code {
		t.Fatalf("after a failover, require_stable: code %d, want UNSTABLE_OFFSET_COMMIT", code)
	}
	if err := c2.CompleteTxn(ctx, "g", 7, true); err != nil {
		t.Fatalf("commit marker: %v", err)
	}
	if off, code := fetchOne(t, c2, "g", 1, true); off != 20 || code != 0 {
		t.Fatalf("after the commit marker: offset %d code %d, want 20 and stable", off, code)
	}
	if err := c2.CompleteTxn(ctx, "g", 7, true); err != nil {
		t.Fatalf("a repeated marker: %v", err)
	}

	// An aborted transaction's offsets are dropped.
	c2.TxnOffsetCommit(ctx, txnCommitReq("g", 8, map[int32]int64{0: 99}))
	if err := c2.CompleteTxn(ctx, "g", 8, false); err != nil {
		t.Fatalf("abort marker: %v", err)
	}
	if off, code := fetchOne(t, c2, "g", 0, true); off != 10 || code != 0 {
		t.Fatalf("after the abort marker: offset %d code %d, want the committed 10", off, code)
	}
}
