package partition

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
)

// Kafka record batch v2 header layout (KIP-98). The base offset and the
// partition leader epoch lie outside the CRC, so a broker may assign both
// without recomputing it.
const (
	offBaseOffset      = 0
	offBatchLength     = 8
	offLeaderEpoch     = 12
	offMagic           = 16
	offCRC             = 17
	offAttributes      = 21
	offLastOffsetDelta = 23
	offBaseTimestamp   = 27
	offMaxTimestamp    = 35
	offProducerID      = 43
	offProducerEpoch   = 51
	offBaseSequence    = 53
	offRecordCount     = 57
	// BatchHeaderSize is the size of a v2 batch header.
	BatchHeaderSize = 61

	attrTransactional = 0x10
	attrControl       = 0x20
)

// Errors of batch validation.
var (
	ErrCorruptBatch     = errors.New("topic: corrupt record batch")
	ErrUnsupportedMagic = errors.New("topic: record batch magic is not 2")
	ErrTransactional    = errors.New("topic: transactional batches are not supported")
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Batch is the decoded header of one v2 record batch.
type Batch struct {
	BaseOffset      int64
	LeaderEpoch     int32
	Attributes      int16
	LastOffsetDelta int32
	BaseTimestamp   int64
	MaxTimestamp    int64
	ProducerID      int64
	ProducerEpoch   int16
	BaseSequence    int32
	Records         int32
}

// LastOffset is the offset of the batch's last record.
func (b Batch) LastOffset() int64 { return b.BaseOffset + int64(b.LastOffsetDelta) }

// LastSequence is the sequence number of the batch's last record.
func (b Batch) LastSequence() int32 {
	return addSeq(b.BaseSequence, b.LastOffsetDelta)
}

// Idempotent reports whether the batch carries a producer id.
func (b Batch) Idempotent() bool { return b.ProducerID >= 0 }

// ParseBatch decodes the header of the single batch that fills raw exactly.
func ParseBatch(raw []byte) (Batch, error) {
	if len(raw) < BatchHeaderSize {
		return Batch{}, fmt.Errorf("%w: %d bytes is shorter than a header", ErrCorruptBatch, len(raw))
	}
	if m := raw[offMagic]; m != 2 {
		return Batch{}, fmt.Errorf("%w: magic %d", ErrUnsupportedMagic, m)
	}
	if l := int64(int32(binary.BigEndian.Uint32(raw[offBatchLength:]))); l+12 != int64(len(raw)) {
		return Batch{}, fmt.Errorf("%w: batch length %d does not match %d bytes", ErrCorruptBatch, l, len(raw))
	}
	b := Batch{
		BaseOffset:      int64(binary.BigEndian.Uint64(raw[offBaseOffset:])),
		LeaderEpoch:     int32(binary.BigEndian.Uint32(raw[offLeaderEpoch:])),
		Attributes:      int16(binary.BigEndian.Uint16(raw[offAttributes:])),
		LastOffsetDelta: int32(binary.BigEndian.Uint32(raw[offLastOffsetDelta:])),
		BaseTimestamp:   int64(binary.BigEndian.Uint64(raw[offBaseTimestamp:])),
		MaxTimestamp:    int64(binary.BigEndian.Uint64(raw[offMaxTimestamp:])),
		ProducerID:      int64(binary.BigEndian.Uint64(raw[offProducerID:])),
		ProducerEpoch:   int16(binary.BigEndian.Uint16(raw[offProducerEpoch:])),
		BaseSequence:    int32(binary.BigEndian.Uint32(raw[offBaseSequence:])),
		Records:         int32(binary.BigEndian.Uint32(raw[offRecordCount:])),
	}
	if b.LastOffsetDelta < 0 || b.Records < 0 {
		return Batch{}, fmt.Errorf("%w: negative last offset delta or record count", ErrCorruptBatch)
	}
	return b, nil
}

// CheckCRC verifies the batch's CRC-32C (over attributes to the end).
func CheckCRC(raw []byte) error {
	if len(raw) < BatchHeaderSize {
		return fmt.Errorf("%w: short batch", ErrCorruptBatch)
	}
	want := binary.BigEndian.Uint32(raw[offCRC:])
	if got := crc32.Checksum(raw[offAttributes:], castagnoli); got != want {
		return fmt.Errorf("%w: crc %08x, header says %08x", ErrCorruptBatch, got, want)
	}
	return nil
}

// SplitBatches cuts a produce request's records into whole batches.
func SplitBatches(records []byte) ([][]byte, error) {
	var out [][]byte
	for len(records) > 0 {
		if len(records) < offMagic+1 {
			return nil, fmt.Errorf("%w: %d trailing bytes", ErrCorruptBatch, len(records))
		}
		l := int64(int32(binary.BigEndian.Uint32(records[offBatchLength:])))
		if l < BatchHeaderSize-12 || l+12 > int64(len(records)) {
			return nil, fmt.Errorf("%w: batch length %d with %d bytes left", ErrCorruptBatch, l, len(records))
		}
		out = append(out, records[:l+12:l+12])
		records = records[l+12:]
	}
	return out, nil
}

// setOffsets writes the assigned base offset and leader epoch into raw.
func setOffsets(raw []byte, base int64, epoch int32) {
	binary.BigEndian.PutUint64(raw[offBaseOffset:], uint64(base))
	binary.BigEndian.PutUint32(raw[offLeaderEpoch:], uint32(epoch))
}

// addSeq adds delta to a producer sequence, wrapping past MaxInt32 to 0 as
// Kafka does.
func addSeq(seq, delta int32) int32 {
	s := int64(seq) + int64(delta)
	if s > 1<<31-1 {
		s -= 1 << 31
	}
	return int32(s)
}
