package partition

import "github.com/twmb/franz-go/pkg/kmsg"

// firstRecordAtOrAfter returns the offset and timestamp of the batch's
// first record with timestamp ≥ ts. Records of uncompressed batches are
// decoded (with kmsg); a compressed batch answers with its base offset and
// max timestamp — a documented approximation, since the broker never
// decompresses what producers send.
func firstRecordAtOrAfter(b Batch, raw []byte, ts int64) (int64, int64) {
	if b.Attributes&0x07 != 0 || b.BaseTimestamp >= ts {
		if b.BaseTimestamp >= ts {
			return b.BaseOffset, b.BaseTimestamp
		}
		return b.BaseOffset, b.MaxTimestamp
	}
	rest := raw[BatchHeaderSize:]
	for range b.Records {
		var r kmsg.Record
		n, ok := recordLen(rest)
		if !ok || n > len(rest) {
			break
		}
		if err := r.ReadFrom(rest[:n]); err != nil {
			break
		}
		rest = rest[n:]
		if t := b.BaseTimestamp + r.TimestampDelta64; t >= ts {
			return b.BaseOffset + int64(r.OffsetDelta), t
		}
	}
	return b.BaseOffset, b.MaxTimestamp
}

// recordLen is the encoded size of the record at the start of rest: its
// varint length prefix plus that many bytes.
func recordLen(rest []byte) (int, bool) {
	var x uint64
	var s uint
	for i, c := range rest {
		if i == 5 {
			return 0, false
		}
		x |= uint64(c&0x7f) << s
		if c < 0x80 {
			l := int64(x>>1) ^ -int64(x&1)
			if l < 0 {
				return 0, false
			}
			return i + 1 + int(l), true
		}
		s += 7
	}
	return 0, false
}
