package disklog

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
)

// A stored batch is a header and the caller's payload. The header, big
// endian:
//
//	 0  magic          uint32  batchMagic (names the format version too)
//	 4  base offset    int64
//	12  record count   int32   ≥ 1
//	16  leader epoch   int32   ≥ 0
//	20  max timestamp  int64   milliseconds; -1 when unknown
//	28  payload length uint32
//	32  CRC-32C        uint32  of bytes 0..32 and the payload
const (
	batchMagic     uint32 = 0x51444c31 // "QDL1"
	batchHeaderLen        = 36
)

// ErrCorrupt is a stored batch that fails its checks: magic, lengths, CRC or
// offset sequence.
var ErrCorrupt = errors.New("disklog: corrupt batch")

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// batchHeader is a stored batch's header.
type batchHeader struct {
	baseOffset   int64
	count        int32
	epoch        int32
	maxTimestamp int64
	payloadLen   uint32
	crc          uint32
}

func (h batchHeader) nextOffset() int64 { return h.baseOffset + int64(h.count) }

// size is the batch's bytes in the segment.
func (h batchHeader) size() int64 { return batchHeaderLen + int64(h.payloadLen) }

// encodeBatch returns the stored form of a batch (header and payload).
func encodeBatch(h batchHeader, payload []byte) []byte {
	b := make([]byte, batchHeaderLen+len(payload))
	binary.BigEndian.PutUint32(b[0:], batchMagic)
	binary.BigEndian.PutUint64(b[4:], uint64(h.baseOffset))
	binary.BigEndian.PutUint32(b[12:], uint32(h.count))
	binary.BigEndian.PutUint32(b[16:], uint32(h.epoch))
	binary.BigEndian.PutUint64(b[20:], uint64(h.maxTimestamp))
	binary.BigEndian.PutUint32(b[28:], uint32(len(payload)))
	copy(b[batchHeaderLen:], payload)
	crc := crc32.Update(crc32.Checksum(b[:32], castagnoli), castagnoli, payload)
	binary.BigEndian.PutUint32(b[32:], crc)
	return b
}

// decodeHeader parses and checks a header, not its CRC (which needs the
// payload). maxPayload bounds the payload length a corrupt header can claim.
func decodeHeader(b []byte, maxPayload int64) (batchHeader, error) {
	if len(b) < batchHeaderLen {
		return batchHeader{}, fmt.Errorf("%w: header of %d bytes", ErrCorrupt, len(b))
	}
	if m := binary.BigEndian.Uint32(b[0:]); m != batchMagic {
		return batchHeader{}, fmt.Errorf("%w: magic %#x", ErrCorrupt, m)
	}
	h := batchHeader{
		baseOffset:   int64(binary.BigEndian.Uint64(b[4:])),
		count:        int32(binary.BigEndian.Uint32(b[12:])),
		epoch:        int32(binary.BigEndian.Uint32(b[16:])),
		maxTimestamp: int64(binary.BigEndian.Uint64(b[20:])),
		payloadLen:   binary.BigEndian.Uint32(b[28:]),
		crc:          binary.BigEndian.Uint32(b[32:]),
	}
	switch {
	case h.baseOffset < 0 || h.count < 1 || h.nextOffset() < h.baseOffset:
		return batchHeader{}, fmt.Errorf("%w: offsets %d+%d", ErrCorrupt, h.baseOffset, h.count)
	case h.epoch < 0:
		return batchHeader{}, fmt.Errorf("%w: epoch %d", ErrCorrupt, h.epoch)
	case int64(h.payloadLen) > maxPayload:
		return batchHeader{}, fmt.Errorf("%w: payload of %d bytes (limit %d)", ErrCorrupt, h.payloadLen, maxPayload)
	}
	return h, nil
}

// checkCRC verifies a whole stored batch (header and payload).
func checkCRC(stored []byte) bool {
	if len(stored) < batchHeaderLen {
		return false
	}
	want := binary.BigEndian.Uint32(stored[32:])
	crc := crc32.Update(crc32.Checksum(stored[:32], castagnoli), castagnoli, stored[batchHeaderLen:])
	return crc == want
}

// encodeRecords is ISRLog's payload: each record as a uvarint length and its
// bytes.
func encodeRecords(records [][]byte) []byte {
	n := 0
	for _, r := range records {
		n += binary.MaxVarintLen32 + len(r)
	}
	out := make([]byte, 0, n)
	for _, r := range records {
		out = binary.AppendUvarint(out, uint64(len(r)))
		out = append(out, r...)
	}
	return out
}

// decodeRecords is encodeRecords' inverse: exactly count records that use
// the whole payload.
func decodeRecords(payload []byte, count int32) ([][]byte, error) {
	records := make([][]byte, 0, count)
	for i := int32(0); i < count; i++ {
		n, w := binary.Uvarint(payload)
		if w <= 0 || n > uint64(len(payload)-w) {
			return nil, fmt.Errorf("%w: record %d of %d", ErrCorrupt, i, count)
		}
		records = append(records, payload[w:w+int(n)])
		payload = payload[w+int(n):]
	}
	if len(payload) != 0 {
		return nil, fmt.Errorf("%w: %d bytes after %d records", ErrCorrupt, len(payload), count)
	}
	return records, nil
}
