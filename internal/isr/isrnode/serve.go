package isrnode

import (
	"context"
	"reflect"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"quire/internal/isr"
)

// HandleReplicaFetch answers a follower's Fetch (Kafka's, versions 4–18)
// for the partitions this broker leads: it implements the Kafka front end's
// ReplicaFetchBackend.
//
// Each partition's fetch goes to its core, which checks the leader epoch
// (KIP-320: FENCED_LEADER_EPOCH, UNKNOWN_LEADER_EPOCH), answers
// diverging_epoch from its leader-epoch cache when the follower's
// last_fetched_epoch ends earlier here (KIP-279; the follower truncates),
// and otherwise records the follower's fetch offset as its LEO (so the HW
// advances and the ISR expands) and returns batches from it. With less than
// min_bytes and no error or divergence, the fetch waits up to max_wait_ms
// for a partition's LEO, HW or role to change and asks its core again.
//
// Deviations: no fetch sessions (session_id 0 answered, forgotten topics
// ignored); a partition gets at most the core's FetchMaxBatches batches,
// then partition_max_bytes and max_bytes cut at batch boundaries (the first
// batch always goes, as KIP-74); "no epoch known" (the core's {-1, -1}) is
// sent as diverging epoch -1 ending at 0, which truncates a follower the
// same way; last_stable_offset is the HW (no transactions).
//
// The leader throttle (throttle.go): a partition in this broker's
// leader.replication.throttled.replicas fetched by a follower outside its
// ISR is answered with no records while the leader rate is over its
// bound (and with at most a quarter window's worth of it otherwise); the
// bytes of every throttled partition sent count against the rate.
func (m *Manager) HandleReplicaFetch(ctx context.Context, req *kmsg.FetchRequest) *kmsg.FetchResponse {
	resp := req.ResponseKind().(*kmsg.FetchResponse)
	replicaID, brokerEpoch := req.ReplicaID, int64(-1)
	if req.Version >= 15 {
		replicaID, brokerEpoch = req.ReplicaState.ID, req.ReplicaState.Epoch
	}
	type fetchPart struct {
		t, p int
		r    *replica
		req  isr.FetchRequest
	}
	var parts []fetchPart
	for _, t := range req.Topics {
		rt := kmsg.NewFetchResponseTopic()
		rt.Topic, rt.TopicID = t.Topic, t.TopicID
		name := t.Topic
		if req.Version >= 13 {
			m.mu.Lock()
			name = m.topics[t.TopicID]
			m.mu.Unlock()
		}
		for _, p := range t.Partitions {
			rp := kmsg.NewFetchResponseTopicPartition()
			rp.Partition, rp.HighWatermark, rp.LastStableOffset, rp.LogStartOffset = p.Partition, -1, -1, -1
			rp.RecordBatches = []byte{}
			r, err := m.replica(PartitionName(name, p.Partition))
			switch {
			case name == "" && req.Version >= 13:
				rp.ErrorCode = kerr.UnknownTopicID.Code
			case err != nil:
				rp.ErrorCode = kerr.UnknownTopicOrPartition.Code
			default:
				parts = append(parts, fetchPart{t: len(resp.Topics), p: len(rt.Partitions), r: r, req: isr.FetchRequest{
					Partition: r.name, ReplicaID: isr.BrokerID(replicaID), To: m.cfg.Broker, BrokerEpoch: brokerEpoch,
					CurrentLeaderEpoch: p.CurrentLeaderEpoch, FetchOffset: p.FetchOffset, LastFetchedEpoch: p.LastFetchedEpoch,
				}})
			}
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	maxBytes := int(req.MaxBytes)
	if maxBytes <= 0 {
		maxBytes = int(m.cfg.FetchMaxBytes)
	}
	deadline := time.Now().Add(time.Duration(max(req.MaxWaitMillis, 0)) * time.Millisecond)
	// The leader throttle (throttle.go): throttled[i] says partition i's
	// bytes count against the leader rate, held[i] that its records are
	// held back while the rate is over its bound (the follower is out of
	// sync); sent[i] is what the answer carries of it.
	throttled, held, sent := make([]bool, len(parts)), make([]bool, len(parts)), make([]int, len(parts))
	for i, fp := range parts {
		throttled[i] = m.throttle.leaderThrottled(fp.r)
		held[i] = throttled[i] && !inSync(fp.r, isr.BrokerID(replicaID))
	}
	done := func() *kmsg.FetchResponse {
		n := 0
		for i := range parts {
			if throttled[i] {
				n += sent[i]
			}
		}
		m.throttle.recordLeader(n, time.Now())
		return resp
	}
	for {
		total, final := 0, false
		changed := make([]<-chan struct{}, 0, len(parts))
		over := false
		if slices.Contains(held, true) {
			over, _ = m.throttle.leader.exceeded(time.Now())
		}
		for i, fp := range parts {
			sent[i] = 0
			rp := &resp.Topics[fp.t].Partitions[fp.p]
			res, logStart, ch, err := fp.r.fetch(ctx, fp.req)
			if err != nil {
				res = isr.FetchResponse{Err: err, HighWatermark: -1, LeaderEpoch: isr.NoEpoch}
				logStart = -1
			}
			changed = append(changed, ch)
			rp.ErrorCode = errorCode(res.Err)
			rp.HighWatermark, rp.LastStableOffset, rp.LogStartOffset = res.HighWatermark, res.HighWatermark, logStart
			rp.CurrentLeader.LeaderID, rp.CurrentLeader.LeaderEpoch = int32(m.cfg.Broker), res.LeaderEpoch
			rp.DivergingEpoch.Epoch, rp.DivergingEpoch.EndOffset = -1, -1
			rp.RecordBatches = []byte{}
			if res.Err != nil {
				// Not (or no longer) the leader: name the leader this
				// replica knows of, as Kafka's current_leader does.
				st := fp.r.Status()
				rp.CurrentLeader.LeaderID, rp.CurrentLeader.LeaderEpoch = int32(st.Leader), st.LeaderEpoch
				final = true
				continue
			}
			if d := res.Diverging; d != nil {
				rp.DivergingEpoch.Epoch, rp.DivergingEpoch.EndOffset = d.Epoch, max(d.EndOffset, 0)
				final = true
				continue
			}
			limit := min(int(m.cfg.FetchPartitionMaxBytes), maxBytes-total)
			if p := partitionMaxBytes(req, fp.t, fp.p); p > 0 {
				limit = min(limit, int(p))
			}
			if held[i] {
				if over {
					// Answered with no records, from where the follower
					// asked: it fetches them again once the rate allows.
					continue
				}
				limit = min(limit, int(m.throttle.leader.share(m.cfg.FetchPartitionMaxBytes)))
			}
			var records []byte
			for i, b := range res.Batches {
				before := len(records)
				records = append(records, b.Raw...)
				if i > 0 && len(records) > limit || total > 0 && len(records) > limit {
					records = records[:before]
					break
				}
			}
			if len(records) > 0 {
				rp.RecordBatches = records
			}
			total += len(records)
			sent[i] = len(records)
		}
		if final || total >= int(req.MinBytes) || len(parts) == 0 || !time.Now().Before(deadline) || ctx.Err() != nil {
			return done()
		}
		if !waitForChange(ctx, changed, deadline) {
			return done()
		}
	}
}

// partitionMaxBytes is the request's partition_max_bytes of the response's
// partition (t, p): the response lists them in request order.
func partitionMaxBytes(req *kmsg.FetchRequest, t, p int) int32 {
	if t < len(req.Topics) && p < len(req.Topics[t].Partitions) {
		return req.Topics[t].Partitions[p].PartitionMaxBytes
	}
	return 0
}

// waitForChange blocks until one of changed is closed (true), or the
// deadline passes or ctx ends (false).
func waitForChange(ctx context.Context, changed []<-chan struct{}, deadline time.Time) bool {
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	cases := make([]reflect.SelectCase, 0, len(changed)+2)
	cases = append(cases,
		reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(ctx.Done())},
		reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(timer.C)})
	for _, ch := range changed {
		cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(ch)})
	}
	chosen, _, _ := reflect.Select(cases)
	return chosen >= 2
}
