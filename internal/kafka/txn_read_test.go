package kafka

import (
	"encoding/binary"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// rawBatch is a record batch header with base offset base and n records
// (no records encoded: readCommitted looks at offsets and lengths only).
func rawBatch(base int64, n int32) []byte {
	b := make([]byte, 61)
	binary.BigEndian.PutUint64(b[0:], uint64(base))
	binary.BigEndian.PutUint32(b[8:], uint32(len(b)-12))
	binary.BigEndian.PutUint32(b[23:], uint32(n-1))
	return b
}

type fakeTxnPartition struct {
	lso     int64
	aborted []AbortedTransaction
	asked   [2]int64
}

func (f *fakeTxnPartition) LastStableOffset() int64 { return f.lso }
func (f *fakeTxnPartition) AbortedTransactions(from, to int64) []AbortedTransaction {
	f.asked = [2]int64{from, to}
	return f.aborted
}

// A read_committed fetch keeps the batches below the LSO and names the
// aborted transactions among them; read_uncommitted keeps everything and
// reports the same LSO. In one piece (Records) or as stored batches.
func TestReadCommitted(t *testing.T) {
	for _, pieces := range []bool{false, true} {
		for _, isolation := range []int8{0, 1} {
			batches := [][]byte{rawBatch(10, 3), rawBatch(13, 2), rawBatch(15, 4)}
			res := ReadResult{HighWatermark: 19, LastStableOffset: 19}
			if pieces {
				res.Batches = batches
			} else {
				for _, b := range batches {
					res.Records = append(res.Records, b...)
				}
			}
			tp := &fakeTxnPartition{lso: 15, aborted: []AbortedTransaction{{ProducerID: 4, FirstOffset: 11}}}
			rp := kmsg.NewFetchResponseTopicPartition()
			readCommitted(&res, &rp, tp, 11, isolation)
			if rp.LastStableOffset != 15 || res.LastStableOffset != 15 {
				t.Fatalf("LSO %d / %d, want 15", rp.LastStableOffset, res.LastStableOffset)
			}
			want := 3 * 61
			if isolation == 1 {
				want = 2 * 61
			}
			if res.Size() != want {
				t.Fatalf("pieces=%v isolation=%d: %d bytes kept, want %d", pieces, isolation, res.Size(), want)
			}
			switch {
			case isolation == 0 && rp.AbortedTransactions != nil:
				t.Fatalf("read_uncommitted got aborted transactions %v", rp.AbortedTransactions)
			case isolation == 1 && (len(rp.AbortedTransactions) != 1 || rp.AbortedTransactions[0].ProducerID != 4 || tp.asked != [2]int64{11, 15}):
				t.Fatalf("read_committed: aborted %v asked %v, want producer 4 for [11, 15)", rp.AbortedTransactions, tp.asked)
			}
		}
	}
	// Nothing below the LSO: nothing returned, nothing named.
	res := ReadResult{Batches: [][]byte{rawBatch(15, 1)}, HighWatermark: 16}
	rp := kmsg.NewFetchResponseTopicPartition()
	readCommitted(&res, &rp, &fakeTxnPartition{lso: 15}, 15, 1)
	if res.Size() != 0 || rp.AbortedTransactions != nil {
		t.Fatalf("at the LSO: %d bytes, aborted %v", res.Size(), rp.AbortedTransactions)
	}
}
