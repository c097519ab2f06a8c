package kafka

import (
	"bytes"
	"math/rand/v2"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestFetchEncodingMatchesKmsg: for every Fetch version served and random
// answers (topics, partitions, errors, offsets, null / empty / held record
// batches in random pieces), the vectored encoding joined up is byte for
// byte kmsg's encoding of the same answer with the batches in
// RecordBatches; answers with what it does not encode are refused by
// vectorable.
func TestFetchEncodingMatchesKmsg(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for v := int16(4); v <= 18; v++ {
		for range 200 {
			a := randomFetchAnswer(rng, v)
			if !vectorable(a.FetchResponse) {
				t.Fatalf("v%d: an answer of the vectored shape was refused", v)
			}
			head := []byte{9, 9, 9}
			dst, pieces := appendFetchVectored(append([]byte(nil), head...), a)
			var got []byte
			for _, p := range pieces {
				got = append(got, p...)
			}
			if !bytes.HasPrefix(got, head) || !bytes.HasPrefix(dst, head) {
				t.Fatalf("v%d: the pieces do not start with what dst held", v)
			}
			want := a.flatten().AppendTo(append([]byte(nil), head...))
			if !bytes.Equal(got, want) {
				t.Fatalf("v%d: vectored encoding differs from kmsg's\n got %x\nwant %x", v, got, want)
			}
			// And kmsg reads it back.
			back := kmsg.NewPtrFetchResponse()
			back.Version = v
			if err := back.ReadFrom(got[len(head):]); err != nil {
				t.Fatalf("v%d: kmsg cannot read the encoding: %v", v, err)
			}
		}
	}

	// What the vectored encoder leaves to kmsg.
	for name, change := range map[string]func(r *kmsg.FetchResponse){
		"aborted transactions": func(r *kmsg.FetchResponse) {
			r.Topics[0].Partitions[0].AbortedTransactions = []kmsg.FetchResponseTopicPartitionAbortedTransaction{{ProducerID: 1}}
		},
		"diverging epoch": func(r *kmsg.FetchResponse) { r.Topics[0].Partitions[0].DivergingEpoch.Epoch = 3 },
		"current leader":  func(r *kmsg.FetchResponse) { r.Topics[0].Partitions[0].CurrentLeader.LeaderID = 1 },
		"snapshot id":     func(r *kmsg.FetchResponse) { r.Topics[0].Partitions[0].SnapshotID.EndOffset = 5 },
		"node endpoints":  func(r *kmsg.FetchResponse) { r.Brokers = []kmsg.FetchResponseBroker{{NodeID: 1}} },
		"version 3":       func(r *kmsg.FetchResponse) { r.Version = 3 },
	} {
		a := randomFetchAnswer(rng, 16)
		for len(a.Topics) == 0 || len(a.Topics[0].Partitions) == 0 {
			a = randomFetchAnswer(rng, 16)
		}
		change(a.FetchResponse)
		if vectorable(a.FetchResponse) {
			t.Errorf("%s: accepted by the vectored encoder, which does not encode it", name)
		}
	}
}

func randomFetchAnswer(rng *rand.Rand, v int16) *fetchAnswer {
	r := kmsg.NewPtrFetchResponse()
	r.Version = v
	r.ThrottleMillis = rng.Int32N(100)
	r.ErrorCode = int16(rng.IntN(3))
	a := &fetchAnswer{FetchResponse: r}
	for ti := range rng.IntN(4) {
		rt := kmsg.NewFetchResponseTopic()
		rt.Topic = string(rune('a'+ti)) + "topic"
		for i := range rt.TopicID {
			rt.TopicID[i] = byte(rng.IntN(256))
		}
		for pi := range rng.IntN(5) {
			rp := kmsg.NewFetchResponseTopicPartition()
			rp.Partition = int32(pi)
			rp.ErrorCode = int16(rng.IntN(2))
			rp.HighWatermark, rp.LastStableOffset, rp.LogStartOffset = rng.Int64N(1e9), rng.Int64N(1e9), rng.Int64N(1e6)
			rp.PreferredReadReplica = -1
			switch rng.IntN(3) {
			case 0:
				rp.RecordBatches = nil
			case 1:
				rp.RecordBatches = noRecords
			}
			rt.Partitions = append(rt.Partitions, rp)
		}
		r.Topics = append(r.Topics, rt)
	}
	for ti := range r.Topics {
		for pi := range r.Topics[ti].Partitions {
			if r.Topics[ti].Partitions[pi].RecordBatches != nil || rng.IntN(2) == 0 {
				continue
			}
			// Held batches, in random pieces (a piece may be empty).
			r.Topics[ti].Partitions[pi].RecordBatches = noRecords
			var held [][]byte
			for range 1 + rng.IntN(4) {
				b := make([]byte, rng.IntN(300))
				for i := range b {
					b[i] = byte(rng.IntN(256))
				}
				held = append(held, b)
			}
			*a.recordsOf(ti, pi) = held
		}
	}
	return a
}
