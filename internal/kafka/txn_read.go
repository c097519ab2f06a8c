package kafka

import "encoding/binary"

// AbortedTransaction is an aborted transaction a read_committed fetch
// names: the producer and the offset of its first record (the consumer
// drops that producer's records from there to its abort marker).
type AbortedTransaction struct {
	ProducerID  int64
	FirstOffset int64
}

// TransactionalPartition is implemented by a Partition that stores
// transactions. A read_committed fetch (isolation_level 1) of such a
// partition stops at its LastStableOffset and carries the aborted
// transactions overlapping what it returns; other partitions have no open
// transactions, and their last stable offset is the high watermark.
type TransactionalPartition interface {
	LastStableOffset() int64
	// AbortedTransactions returns the aborted transactions with records
	// in [from, to).
	AbortedTransactions(from, to int64) []AbortedTransaction
}

// belowStable keeps the whole batches of res that start below lso (a
// batch never straddles it: the LSO is where an open transaction's first
// batch starts) and returns the offset after the last record kept (from
// when none is).
func belowStable(res *ReadResult, lso, from int64) int64 {
	end := from
	keep := func(b []byte) bool {
		if len(b) < 27 {
			return false
		}
		base := int64(binary.BigEndian.Uint64(b[0:]))
		if base >= lso {
			return false
		}
		end = max(end, base+int64(int32(binary.BigEndian.Uint32(b[23:])))+1)
		return true
	}
	if len(res.Records) > 0 {
		rest, n, stopped := res.Records, 0, false
		for len(rest) > 0 {
			if len(rest) < 12 {
				stopped = true
				break
			}
			l := 12 + int(int32(binary.BigEndian.Uint32(rest[8:])))
			if l < 12 || l > len(rest) || !keep(rest[:l]) {
				stopped = true
				break
			}
			n += l
			rest = rest[l:]
		}
		res.Records = res.Records[:n]
		if stopped {
			res.Batches = nil
			return end
		}
	}
	for i, b := range res.Batches {
		if !keep(b) {
			res.Batches = res.Batches[:i]
			break
		}
	}
	return end
}
