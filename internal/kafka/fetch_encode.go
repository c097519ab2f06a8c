package kafka

import (
	"encoding/binary"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// A Fetch answer is mostly record batches that the backend already holds
// in the wire format. kmsg would copy them into the encoded response (and
// the partition into one slice before that); instead the response is
// encoded around them here and written with one writev: the encoded fields
// in pieces of the connection's buffer, the batches as the backend stored
// them.
//
// The encoding is the Fetch response's, v4–v18, for the fields Quire sets:
// no aborted transactions (null), no tagged fields (diverging epoch,
// current leader, snapshot id, node endpoints) and no unknown tags. An
// answer that has any of them is encoded by kmsg (fetchAnswer.flatten).
// TestFetchEncodingMatchesKmsg holds the two byte for byte.

// fetchAnswer is a Fetch response whose partitions' record batches are
// held apart: records[i] belongs to the i-th partition in response order
// (topics, then their partitions); the partitions' RecordBatches fields are
// the empty, non-null noRecords while they are.
type fetchAnswer struct {
	*kmsg.FetchResponse
	records [][][]byte
}

// recordsOf returns where the record batches of partition (topic t,
// partition p) are kept.
func (a *fetchAnswer) recordsOf(t, p int) *[][]byte {
	if a.records == nil {
		n := 0
		for _, rt := range a.Topics {
			n += len(rt.Partitions)
		}
		a.records = make([][][]byte, n)
	}
	i := p
	for _, rt := range a.Topics[:t] {
		i += len(rt.Partitions)
	}
	return &a.records[i]
}

// flatten moves the held batches into the partitions' RecordBatches (a
// copy), for encoding by kmsg.
func (a *fetchAnswer) flatten() *kmsg.FetchResponse {
	i := 0
	for t := range a.Topics {
		for p := range a.Topics[t].Partitions {
			if i < len(a.records) && len(a.records[i]) > 0 {
				a.Topics[t].Partitions[p].RecordBatches = ReadResult{Batches: a.records[i]}.Bytes()
			}
			i++
		}
	}
	a.records = nil
	return a.FetchResponse
}

// vectorable reports whether appendFetchVectored encodes r.
func vectorable(r *kmsg.FetchResponse) bool {
	if r.Version < 4 || r.Version > 18 || r.UnknownTags.Len() > 0 || len(r.Brokers) > 0 {
		return false
	}
	for _, t := range r.Topics {
		if t.UnknownTags.Len() > 0 {
			return false
		}
		for _, p := range t.Partitions {
			if p.AbortedTransactions != nil || p.UnknownTags.Len() > 0 ||
				p.DivergingEpoch.Epoch != -1 || p.DivergingEpoch.EndOffset != -1 || p.DivergingEpoch.UnknownTags.Len() > 0 ||
				p.CurrentLeader.LeaderID != -1 || p.CurrentLeader.LeaderEpoch != -1 || p.CurrentLeader.UnknownTags.Len() > 0 ||
				p.SnapshotID.EndOffset != -1 || p.SnapshotID.Epoch != -1 || p.SnapshotID.UnknownTags.Len() > 0 {
				return false
			}
		}
	}
	return true
}

// appendFetchVectored encodes a (which vectorable accepts) after dst and
// returns dst and the whole of it as pieces: dst from its start (what the
// caller put there first, then the encoded fields) cut where record
// batches go, and the batches, in order.
func appendFetchVectored(dst []byte, a *fetchAnswer) ([]byte, [][]byte) {
	r := a.FetchResponse
	v, flex := r.Version, r.Version >= 12
	// cuts: where in dst each run of encoded fields ends and which batches
	// follow it (built as offsets: dst may move while it grows).
	type cut struct {
		end   int
		after [][]byte
	}
	var cuts []cut
	arrayLen := func(n int) {
		if flex {
			dst = binary.AppendUvarint(dst, uint64(n)+1)
		} else {
			dst = binary.BigEndian.AppendUint32(dst, uint32(n))
		}
	}
	dst = binary.BigEndian.AppendUint32(dst, uint32(r.ThrottleMillis))
	if v >= 7 {
		dst = binary.BigEndian.AppendUint16(dst, uint16(r.ErrorCode))
		dst = binary.BigEndian.AppendUint32(dst, uint32(r.SessionID))
	}
	arrayLen(len(r.Topics))
	i := 0
	for _, t := range r.Topics {
		switch {
		case v >= 13:
			dst = append(dst, t.TopicID[:]...)
		case flex:
			dst = binary.AppendUvarint(dst, uint64(len(t.Topic))+1)
			dst = append(dst, t.Topic...)
		default:
			dst = binary.BigEndian.AppendUint16(dst, uint16(len(t.Topic)))
			dst = append(dst, t.Topic...)
		}
		arrayLen(len(t.Partitions))
		for _, p := range t.Partitions {
			dst = binary.BigEndian.AppendUint32(dst, uint32(p.Partition))
			dst = binary.BigEndian.AppendUint16(dst, uint16(p.ErrorCode))
			dst = binary.BigEndian.AppendUint64(dst, uint64(p.HighWatermark))
			dst = binary.BigEndian.AppendUint64(dst, uint64(p.LastStableOffset))
			if v >= 5 {
				dst = binary.BigEndian.AppendUint64(dst, uint64(p.LogStartOffset))
			}
			// Aborted transactions: null.
			if flex {
				dst = append(dst, 0)
			} else {
				dst = binary.BigEndian.AppendUint32(dst, 0xffffffff)
			}
			if v >= 11 {
				dst = binary.BigEndian.AppendUint32(dst, uint32(p.PreferredReadReplica))
			}
			var batches [][]byte
			if i < len(a.records) {
				batches = a.records[i]
			}
			i++
			n := len(p.RecordBatches)
			for _, b := range batches {
				n += len(b)
			}
			switch {
			case p.RecordBatches == nil && len(batches) == 0 && flex:
				dst = append(dst, 0)
			case p.RecordBatches == nil && len(batches) == 0:
				dst = binary.BigEndian.AppendUint32(dst, 0xffffffff)
			case flex:
				dst = binary.AppendUvarint(dst, uint64(n)+1)
			default:
				dst = binary.BigEndian.AppendUint32(dst, uint32(n))
			}
			dst = append(dst, p.RecordBatches...)
			if len(batches) > 0 {
				cuts = append(cuts, cut{end: len(dst), after: batches})
			}
			if flex {
				dst = append(dst, 0) // no partition tags
			}
		}
		if flex {
			dst = append(dst, 0) // no topic tags
		}
	}
	if flex {
		dst = append(dst, 0) // no response tags
	}
	pieces := make([][]byte, 0, 2*len(cuts)+1)
	start := 0
	for _, c := range cuts {
		pieces = append(pieces, dst[start:c.end])
		pieces = append(pieces, c.after...)
		start = c.end
	}
	pieces = append(pieces, dst[start:])
	return dst, pieces
}
