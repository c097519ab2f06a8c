package kafka

// Fetch (key 1), versions 4–18.
//
// Reads every requested partition from its fetch offset; if fewer than
// min_bytes came back (and no partition failed), it long-polls with
// Partition.Wait on all of them until one grows or max_wait_ms passes, and
// reads again. max_bytes bounds the whole response and partition_max_bytes
// each partition, except that the first partition with data returns its
// first batch whole even when larger (KIP-74), so consumers always progress;
// any later partition whose data would not fit answers empty. v13+ address
// topics by ID (UNKNOWN_TOPIC_ID when unknown).
//
// Deviations: no fetch sessions. Every response has session_id 0, which
// tells clients sessions are not in use, and is a full response; a request
// naming a session id gets FETCH_SESSION_ID_NOT_FOUND, one with id 0 and an
// epoch > 0 INVALID_FETCH_SESSION_EPOCH (what Kafka answers for sessions it
// does not have); forgotten_topics is ignored. A partition that stores
// transactions (TransactionalPartition) reports its last stable offset, and
// a read_committed fetch of it stops there and names the aborted
// transactions it returns (null when none, where Kafka sends an empty
// list); for other partitions last_stable_offset is the high watermark.
// current_leader_epoch (v9+) is checked for a partition with leader epochs
// (EpochPartition, ISR mode) as KIP-320 says: older than the partition's
// FENCED_LEADER_EPOCH, newer UNKNOWN_LEADER_EPOCH, −1 not checked; a
// ledger-mode partition has no epochs (Metadata gives −1) and checks
// nothing; a follower serving a v11+ fetch checks it against the leader
// epoch it knows. Kafka checks the epoch before leadership, so a follower
// answers a stale epoch FENCED_LEADER_EPOCH at any version; here a broker
// that does not serve the partition to this fetch (not its leader, nor a
// follower for v11+) answers NOT_LEADER_OR_FOLLOWER first (both make a
// client refresh its metadata). A consumer's last_fetched_epoch is not checked
// (only followers send it; their fetches are the backend's). Replica (follower)
// fetches are served like a consumer's, unless the backend implements
// ReplicaFetchBackend: then it answers them whole (epochs, diverging epoch,
// its own long-poll).
//
// Follower fetching (KIP-392), for backends with followers (ISR mode): a
// consumer's v11+ fetch takes its partitions from FollowerFetchBackend, so
// a follower serves them up to its own HW (older versions get
// NOT_LEADER_OR_FOLLOWER there, as before), and a leader whose partition
// is a ReadReplicaSelector may answer a partition with
// preferred_read_replica (the broker's replica.selector.class decides, for
// a request with a rack_id): no records, the leader's HW, last stable
// offset and log start, and the fetch answered without a long-poll, as
// Kafka does. Otherwise preferred_read_replica is −1.

import (
	"context"
	"math"
	"reflect"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// noRecords is an empty, non-null records field. Kafka never sends null
// records and librdkafka rejects them ("invalid MessageSetSize -1").
var noRecords = []byte{}

func handleFetch(s *Server, _ context.Context, rq *request) finishFunc {
	req := rq.kreq.(*kmsg.FetchRequest)
	if rb, ok := s.backend.(ReplicaFetchBackend); ok && !isConsumerFetch(req) {
		return func(ctx context.Context) kmsg.Response { return s.replicaFetch(ctx, rq, rb, req) }
	}
	return func(ctx context.Context) kmsg.Response { return s.fetch(ctx, rq, req) }
}

// replicaFetch hands a follower's fetch to the backend. A backend that
// answers nothing gets UNKNOWN_SERVER_ERROR on the wire rather than no
// response, which would stall the connection's pipeline.
func (s *Server) replicaFetch(ctx context.Context, rq *request, rb ReplicaFetchBackend, req *kmsg.FetchRequest) kmsg.Response {
	resp := rb.HandleReplicaFetch(ctx, req)
	if resp == nil {
		resp = req.ResponseKind().(*kmsg.FetchResponse)
		resp.ErrorCode = kerr.UnknownServerError.Code
	}
	resp.SetVersion(req.Version)
	rq.note(resp.ErrorCode)
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			rq.note(p.ErrorCode)
		}
	}
	return resp
}

// fetchPartition is a partition being fetched.
type fetchPartition struct {
	topic, partition int // indexes into the response
	part             Partition
	offset           int64
	maxBytes         int32
	// highWatermark is what the last read saw; the long-poll waits for
	// the partition to grow past it.
	highWatermark int64
}

func (s *Server) fetch(ctx context.Context, rq *request, req *kmsg.FetchRequest) *fetchAnswer {
	resp := req.ResponseKind().(*kmsg.FetchResponse)
	answer := &fetchAnswer{FetchResponse: resp}
	resp.SessionID = 0
	if req.SessionID != 0 {
		resp.ErrorCode = rq.note(kerr.FetchSessionIDNotFound.Code)
		return answer
	}
	if req.SessionEpoch > 0 {
		resp.ErrorCode = rq.note(kerr.InvalidFetchSessionEpoch.Code)
		return answer
	}

	var parts []fetchPartition
	redirected := false // a partition was answered with a preferred read replica
	for _, t := range req.Topics {
		rt := kmsg.NewFetchResponseTopic()
		rt.Topic, rt.TopicID = t.Topic, t.TopicID
		name, topicCode := t.Topic, int16(0)
		if req.Version >= 13 {
			var ok bool
			if name, ok = s.topicIDs.name(ctx, t.TopicID); !ok {
				topicCode = kerr.UnknownTopicID.Code
			}
		}
		for _, p := range t.Partitions {
			rp := kmsg.NewFetchResponseTopicPartition()
			rp.Partition, rp.HighWatermark, rp.RecordBatches = p.Partition, -1, noRecords
			code := topicCode
			var part Partition
			if code == 0 {
				var err error
				part, err = s.partitionToFetch(ctx, req, name, p.Partition)
				code = s.errorCode(err, "fetch: partition", "topic", name, "partition", p.Partition)
				if code == 0 {
					code = checkLeaderEpoch(part, p.CurrentLeaderEpoch)
				}
			}
			switch {
			case code != 0:
				rp.ErrorCode = rq.note(code)
			case preferReplica(ctx, req, part, &rp, p.FetchOffset):
				redirected = true
			default:
				parts = append(parts, fetchPartition{
					topic: len(resp.Topics), partition: len(rt.Partitions),
					part: part, offset: p.FetchOffset, maxBytes: p.PartitionMaxBytes,
				})
			}
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}

	maxBytes := req.MaxBytes
	if maxBytes <= 0 {
		maxBytes = math.MaxInt32
	}
	deadline := time.Now().Add(time.Duration(max(req.MaxWaitMillis, 0)) * time.Millisecond)
	for {
		total, failed := s.readPartitions(ctx, rq, answer, parts, maxBytes)
		if failed || redirected || total >= int(req.MinBytes) || len(parts) == 0 || !time.Now().Before(deadline) || ctx.Err() != nil {
			return answer
		}
		woken := waitForData(ctx, parts, deadline)
		if woken < 0 {
			return answer
		}
		if fp := &parts[woken]; fp.part.HighWatermark() <= fp.highWatermark {
			// Woken without growth: the partition stopped being served
			// here. Answer now (the next fetch sees its new state) rather
			// than spin on a channel that stays closed.
			return answer
		}
	}
}

// partitionToFetch is the partition a fetch reads: for a consumer's v11+
// fetch, from a backend with followers, the leader's or a follower's
// (FollowerFetchBackend); otherwise the backend's Partition.
func (s *Server) partitionToFetch(ctx context.Context, req *kmsg.FetchRequest, topic string, partition int32) (Partition, error) {
	if fb, ok := s.backend.(FollowerFetchBackend); ok && req.Version >= 11 && isConsumerFetch(req) {
		return fb.FetchPartition(ctx, topic, partition)
	}
	return s.backend.Partition(ctx, topic, partition)
}

// isConsumerFetch: the fetch names no replica (a follower's names itself
// in replica_id before v15, in replica_state from v15).
func isConsumerFetch(req *kmsg.FetchRequest) bool {
	return req.ReplicaID < 0 && req.ReplicaState.ID < 0
}

// preferReplica answers rp with the partition's preferred read replica
// when its leader sends this consumer elsewhere (ReadReplicaSelector, v11+
// with a rack_id): error 0, no records, where the partition is. It
// reports whether it did.
func preferReplica(ctx context.Context, req *kmsg.FetchRequest, part Partition, rp *kmsg.FetchResponseTopicPartition, offset int64) bool {
	sel, ok := part.(ReadReplicaSelector)
	if !ok || req.Version < 11 || req.Rack == "" || !isConsumerFetch(req) {
		return false
	}
	id := sel.PreferredReadReplica(ctx, req.Rack, offset)
	if id < 0 {
		return false
	}
	hw := part.HighWatermark()
	lso := hw
	if tp, ok := part.(TransactionalPartition); ok {
		lso = min(tp.LastStableOffset(), hw)
	}
	rp.PreferredReadReplica, rp.HighWatermark, rp.LastStableOffset, rp.LogStartOffset = id, hw, lso, part.LogStartOffset()
	return true
}

// readPartitions reads every partition into resp (replacing what an earlier
// round read), returning the bytes read and whether any partition failed.
//
// When every partition's limit fits in maxBytes together, no partition's
// limit depends on what the others return, and the partitions are read
// concurrently (at most fetchReadConcurrency at once): a catch-up consumer
// of many partitions then waits for the slowest read, not for the sum of
// them. Otherwise they are read one after another, each limited by what is
// left.
func (s *Server) readPartitions(ctx context.Context, rq *request, answer *fetchAnswer, parts []fetchPartition, maxBytes int32) (int, bool) {
	resp := answer.FetchResponse
	var isolation int8
	if req, ok := rq.kreq.(*kmsg.FetchRequest); ok {
		isolation = req.IsolationLevel
	}
	var early []readOutcome
	if len(parts) > 1 && limitsFit(parts, maxBytes) {
		early = make([]readOutcome, len(parts))
		var wg sync.WaitGroup
		slots := make(chan struct{}, fetchReadConcurrency)
		for i := range parts {
			slots <- struct{}{}
			wg.Go(func() {
				defer func() { <-slots }()
				fp := &parts[i]
				early[i].res, early[i].err = fp.part.Read(ctx, fp.offset, max(fp.maxBytes, 1))
			})
		}
		wg.Wait()
	}
	total, failed := 0, false
	for i := range parts {
		fp := &parts[i]
		rp := &resp.Topics[fp.topic].Partitions[fp.partition]
		records := answer.recordsOf(fp.topic, fp.partition)
		rp.RecordBatches, *records = noRecords, nil
		limit := fp.maxBytes
		if left := int64(maxBytes) - int64(total); int64(limit) > left {
			limit = int32(max(left, 0))
		}
		if limit <= 0 && total > 0 {
			// The response is full: report where the partition is, no data.
			rp.HighWatermark, rp.LastStableOffset, rp.LogStartOffset = fp.part.HighWatermark(), fp.part.HighWatermark(), fp.part.LogStartOffset()
			fp.highWatermark = rp.HighWatermark
			continue
		}
		var res ReadResult
		var err error
		if early != nil {
			res, err = early[i].res, early[i].err
		} else {
			res, err = fp.part.Read(ctx, fp.offset, max(limit, 1))
		}
		if code := s.errorCode(err, "fetch: read", "partition", rp.Partition); code != 0 {
			rp.ErrorCode = rq.note(code)
			rp.HighWatermark, rp.LastStableOffset, rp.LogStartOffset = fp.part.HighWatermark(), fp.part.HighWatermark(), fp.part.LogStartOffset()
			failed = true
			continue
		}
		rp.ErrorCode = 0
		rp.HighWatermark, rp.LastStableOffset, rp.LogStartOffset = res.HighWatermark, res.LastStableOffset, res.LogStartOffset
		fp.highWatermark = res.HighWatermark
		if tp, ok := fp.part.(TransactionalPartition); ok {
			readCommitted(&res, rp, tp, fp.offset, isolation)
		}
		size := res.Size()
		if total > 0 && size > int(limit) {
			continue // only the first partition with data may exceed the limits
		}
		if size > 0 {
			*records = res.Batches
			if len(res.Records) > 0 {
				*records = append([][]byte{res.Records}, res.Batches...)
			}
		}
		total += size
	}
	return total, failed
}

// readCommitted applies a transactional partition's last stable offset to
// one partition's read: every fetch reports it; a read_committed one
// (isolation 1) returns only batches below it, with the aborted
// transactions among them (null when there are none, which clients read
// as an empty list, and which keeps the answer on the vectored path).
func readCommitted(res *ReadResult, rp *kmsg.FetchResponseTopicPartition, tp TransactionalPartition, from int64, isolation int8) {
	lso := min(tp.LastStableOffset(), res.HighWatermark)
	res.LastStableOffset, rp.LastStableOffset = lso, lso
	if isolation != 1 {
		return
	}
	end := belowStable(res, lso, from)
	if end <= from {
		return
	}
	for _, a := range tp.AbortedTransactions(from, end) {
		at := kmsg.NewFetchResponseTopicPartitionAbortedTransaction()
		at.ProducerID, at.FirstOffset = a.ProducerID, a.FirstOffset
		rp.AbortedTransactions = append(rp.AbortedTransactions, at)
	}
}

// fetchReadConcurrency bounds the partitions of one fetch read at once.
const fetchReadConcurrency = 8

// readOutcome is one partition's read, done ahead of assembling the answer.
type readOutcome struct {
	res ReadResult
	err error
}

// limitsFit reports whether the partitions' limits add up to at most maxBytes.
func limitsFit(parts []fetchPartition, maxBytes int32) bool {
	var sum int64
	for _, fp := range parts {
		sum += int64(max(fp.maxBytes, 1))
	}
	return sum <= int64(maxBytes)
}

// waitForData blocks until a partition grows past what was read (it
// returns that partition's index), the deadline passes or ctx ends (−1).
func waitForData(ctx context.Context, parts []fetchPartition, deadline time.Time) int {
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	cases := make([]reflect.SelectCase, 0, len(parts)+2)
	cases = append(cases,
		reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(ctx.Done())},
		reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(timer.C)},
	)
	for i := range parts {
		// Waiting past the high watermark read: a fetch offset below it
		// whose data did not reach min_bytes is waiting for more data.
		waitFrom := max(parts[i].offset, parts[i].highWatermark)
		cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(parts[i].part.Wait(waitFrom))})
	}
	chosen, _, _ := reflect.Select(cases)
	return chosen - 2
}

// fetchResponseSize bounds what the records of a fetch response add to its
// encoding, with a generous allowance for each partition's other fields.
func fetchResponseSize(fr *kmsg.FetchResponse) int {
	n := 64
	for _, t := range fr.Topics {
		n += 64 + len(t.Topic)
		for _, p := range t.Partitions {
			n += 96 + len(p.RecordBatches) + 24*len(p.AbortedTransactions)
		}
	}
	return n
}
