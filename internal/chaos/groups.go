package chaos

// The consumer-group workload: one member of group chaosGroup consumes the
// topic, records every record it polls (checked against the final read: a
// record read during the run must still be there, at the same offset), and
// commits what it has polled every commitEvery; an observer asks
// the coordinator for the group's committed offsets every observeEvery,
// and once more after the final read. The checker (checkCommits) holds the
// observations to the acknowledged commits: once a commit of offset o on a
// partition is acknowledged, no OffsetFetch that starts later may answer
// less than o — a commit that vanishes or goes back (lost on a coordinator
// failover, or overwritten by a zombie coordinator) is an anomaly.

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

const (
	chaosGroup   = "chaos-group"
	commitEvery  = 500 * time.Millisecond
	observeEvery = time.Second
	// groupOpTimeout bounds one commit or one observation.
	groupOpTimeout = 10 * time.Second
)

// consumeGroup runs the group member and the observer until stop is
// closed.
func (w *workload) consumeGroup(ctx context.Context, stop <-chan struct{}) {
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		w.runMember(ctx, stop)
	}()
	go func() {
		defer wg.Done()
		tick := time.NewTicker(observeEvery)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			w.observeCommitted(ctx)
		}
	}()
	wg.Wait()
}

func (w *workload) runMember(ctx context.Context, stop <-chan struct{}) {
	cl, err := w.client(kgo.ConsumerGroup(chaosGroup), kgo.ConsumeTopics(w.topic), kgo.DisableAutoCommit(),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(commitEvery))
	if err != nil {
		w.logf("group member: %v", err)
		return
	}
	defer cl.Close()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	var seq int64
	last := time.Now()
	for ctx.Err() == nil {
		pollCtx, pollCancel := context.WithTimeout(ctx, commitEvery)
		fs := cl.PollRecords(pollCtx, 10000)
		pollCancel()
		fs.EachRecord(func(rec *kgo.Record) {
			w.history.Add(Event{Kind: KindConsumed, Partition: rec.Partition, Offset: rec.Offset, Value: string(rec.Value)})
		})
		if time.Since(last) < commitEvery || ctx.Err() != nil {
			continue
		}
		last = time.Now()
		offsets := cl.UncommittedOffsets()[w.topic]
		if len(offsets) == 0 {
			continue
		}
		seq++
		w.commit(cl, seq, offsets)
	}
}

// commit commits offsets synchronously, recording an invoke and an
// outcome for each partition.
func (w *workload) commit(cl *kgo.Client, seq int64, offsets map[int32]kgo.EpochOffset) {
	for p, o := range offsets {
		w.history.Add(Event{Kind: KindCommitInvoke, Seq: seq, Partition: p, Offset: o.Offset})
	}
	done := map[int32]bool{}
	// Not the run's context: a commit cut short by the workload's stop
	// would only add unknown outcomes.
	cctx, cancel := context.WithTimeout(context.Background(), groupOpTimeout)
	defer cancel()
	cl.CommitOffsetsSync(cctx, map[string]map[int32]kgo.EpochOffset{w.topic: offsets},
		func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
			if err != nil {
				return // every partition's outcome is unknown: below
			}
			for _, t := range resp.Topics {
				if t.Topic != w.topic {
					continue
				}
				for _, p := range t.Partitions {
					o, ok := offsets[p.Partition]
					if !ok || done[p.Partition] {
						continue
					}
					done[p.Partition] = true
					e := Event{Kind: KindCommitOK, Seq: seq, Partition: p.Partition, Offset: o.Offset}
					if kerrErr := kerr.ErrorForCode(p.ErrorCode); kerrErr != nil {
						e.Kind, e.Err = KindCommitInfo, kerrErr.Error()
					}
					w.history.Add(e)
				}
			}
		})
	for p, o := range offsets {
		if !done[p] {
			w.history.Add(Event{Kind: KindCommitInfo, Seq: seq, Partition: p, Offset: o.Offset, Err: "no answer"})
		}
	}
}

// observeCommitted records the group's committed offsets as the
// coordinator answers them, stamped with the time the request started. It
// reports whether the coordinator answered.
func (w *workload) observeCommitted(ctx context.Context) bool {
	cl, err := w.client()
	if err != nil {
		return false
	}
	defer cl.Close()
	octx, cancel := context.WithTimeout(ctx, groupOpTimeout)
	defer cancel()
	start := time.Now()
	// Every partition of the topic, -1 for those without a commit: a
	// commit that vanished shows as -1, not as nothing.
	resps, err := kadm.NewClient(cl).FetchOffsetsForTopics(octx, chaosGroup, w.topic)
	if err != nil || len(resps[w.topic]) != int(w.partitions) {
		return false
	}
	for p, r := range resps[w.topic] {
		if r.Err == nil {
			w.history.Add(Event{Time: start, Kind: KindCommitted, Partition: p, Offset: r.At})
		}
	}
	return true
}

// finalObservation observes the committed offsets once after every fault
// is healed, retrying until the coordinator answers or ctx ends.
func (w *workload) finalObservation(ctx context.Context) error {
	for !w.observeCommitted(ctx) {
		select {
		case <-ctx.Done():
			return fmt.Errorf("fetch committed offsets of %s: %w", chaosGroup, ctx.Err())
		case <-time.After(500 * time.Millisecond):
		}
	}
	return nil
}
