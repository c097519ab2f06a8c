package kafka

// Produce (key 0), versions 3–13.
//
// The submit phase checks every partition's records (records.go), finds the
// Partition and calls Append for each batch in the order they came, so
// pipelined produces keep their order; the finish phase waits for the
// results. Backend.Partition is called in the submit phase, so a partition
// that takes long to load (a topic takeover) holds up reading that
// connection's later requests, which could not be answered earlier anyway. v13 addresses topics by ID (the topic-ID cache resolves them).
//
// acks must be 0, 1 or −1 (else INVALID_REQUIRED_ACKS on every partition).
// Both 1 and −1 wait for Append's result, which in ledger mode comes once the
// batch is durable; the acks reach the Backend in Append's context
// (AcksFrom): ISR mode answers acks=1 once the leader appended. acks=0 gets no response, but its appends are still
// awaited in order; if any failed, the connection is closed so the producer
// notices (as Kafka does). timeout_ms > 0 bounds the wait, from the moment
// the request is read: for room in a partition's log (a full log holds up
// the connection's reader, which is backpressure on the client) and then
// for the results (REQUEST_TIMED_OUT); ≤ 0 waits as long as the connection
// lives.
//
// Deviations: several batches for one partition are accepted (Kafka ≥ 3
// allows one) and appended in order; the response's base offset is the
// first batch's. Without a transaction coordinator (transactions.go),
// transactional produce (a transactional id) answers
// TRANSACTIONAL_ID_AUTHORIZATION_FAILED on every partition, as transactions
// are not advertised; with one, its batches go to the partitions, which
// take transactional batches only when they store transactions. Control
// batches from clients answer INVALID_RECORD. Each batch must fit the topic's max.message.bytes when set
// on the topic, else Backend.MaxMessageBytes (MESSAGE_TOO_LARGE); see
// topic_limits.go.
// No error_records, no current-leader hints (NOT_LEADER_OR_FOLLOWER makes
// clients refresh metadata). Throttle is always 0.

import (
	"context"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// pendingAppend is one partition's submitted appends.
type pendingAppend struct {
	topic, partition int // indexes into the response
	results          []<-chan AppendResult
}

func handleProduce(s *Server, ctx context.Context, rq *request) finishFunc {
	req := rq.kreq.(*kmsg.ProduceRequest)
	resp := req.ResponseKind().(*kmsg.ProduceResponse)

	var requestCode int16
	switch {
	case req.TransactionID != nil && !s.withTxns:
		requestCode = kerr.TransactionalIDAuthorizationFailed.Code
	case req.Acks != 0 && req.Acks != 1 && req.Acks != -1:
		requestCode = kerr.InvalidRequiredAcks.Code
	}

	// One deadline for the whole request: submitting (a full log makes
	// Append wait) and then waiting for the results.
	waitCtx, cancelWait := withAcks(ctx, req.Acks), context.CancelFunc(func() {})
	if req.TimeoutMillis > 0 {
		waitCtx, cancelWait = context.WithTimeout(waitCtx, time.Duration(req.TimeoutMillis)*time.Millisecond)
	}

	var pending []pendingAppend
	for _, t := range req.Topics {
		rt := kmsg.NewProduceResponseTopic()
		rt.Topic, rt.TopicID = t.Topic, t.TopicID
		name, topicCode := t.Topic, requestCode
		maxBytes := int32(-1) // the topic's limit, looked up once it is needed
		if req.Version >= 13 && topicCode == 0 {
			var ok bool
			if name, ok = s.topicIDs.name(ctx, t.TopicID); !ok {
				topicCode = kerr.UnknownTopicID.Code
			}
		}
		for _, p := range t.Partitions {
			rp := kmsg.NewProduceResponseTopicPartition()
			rp.Partition = p.Partition
			rp.BaseOffset, rp.LogAppendTime, rp.LogStartOffset = -1, -1, -1
			code := topicCode
			var part Partition
			if code == 0 {
				var err error
				part, err = s.backend.Partition(ctx, name, p.Partition)
				code = s.errorCode(err, "produce: partition", "topic", name, "partition", p.Partition)
			}
			var batches [][]byte
			if code == 0 {
				if maxBytes < 0 {
					maxBytes = s.maxMessageBytes(ctx, name)
				}
				batches, code = splitBatches(p.Records, maxBytes, req.TransactionID != nil && s.withTxns)
			}
			if code != 0 {
				rp.ErrorCode = rq.note(code)
				rt.Partitions = append(rt.Partitions, rp)
				continue
			}
			pa := pendingAppend{topic: len(resp.Topics), partition: len(rt.Partitions)}
			for _, b := range batches {
				pa.results = append(pa.results, part.Append(waitCtx, b))
			}
			pending = append(pending, pa)
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}

	return func(ctx context.Context) kmsg.Response {
		defer cancelWait()
		for _, pa := range pending {
			rp := &resp.Topics[pa.topic].Partitions[pa.partition]
			for i, ch := range pa.results {
				var res AppendResult
				timedOut := false
				select {
				case res = <-ch:
				case <-waitCtx.Done():
					timedOut = true
					drainAppends(pa.results[i:])
					if ctx.Err() != nil {
						return nil // the connection is gone
					}
					if rp.ErrorCode == 0 {
						rp.ErrorCode = rq.note(kerr.RequestTimedOut.Code)
						rp.BaseOffset, rp.LogAppendTime, rp.LogStartOffset = -1, -1, -1
					}
				}
				if timedOut {
					break // timed out: the rest are drained
				}
				if rp.ErrorCode != 0 {
					continue // an earlier batch failed; the partition answers that
				}
				if code := s.errorCode(res.Err, "produce: append", "partition", rp.Partition); code != 0 {
					rp.ErrorCode = rq.note(code)
					rp.BaseOffset, rp.LogAppendTime, rp.LogStartOffset = -1, -1, -1
					continue
				}
				if i == 0 {
					rp.BaseOffset, rp.LogAppendTime, rp.LogStartOffset = res.BaseOffset, res.LogAppendTime, res.LogStartOffset
				}
			}
		}
		if req.Acks == 0 {
			if rq.errCode != 0 {
				rq.closeAfter = true
			}
			return nil
		}
		return resp
	}
}

// drainAppends receives the results nobody waits for any more, so a
// Partition that answers on unbuffered channels is never left blocked.
func drainAppends(results []<-chan AppendResult) {
	if len(results) == 0 {
		return
	}
	go func() {
		for _, ch := range results {
			<-ch
		}
	}()
}
