package kafka

import (
	"encoding/binary"
	"hash/crc32"

	"github.com/twmb/franz-go/pkg/kerr"
)

// Record batch (magic 2) layout: the fields the front end checks.
const (
	batchLengthOffset     = 8  // int32: bytes after this field
	batchMagicOffset      = 16 // int8
	batchCRCOffset        = 17 // uint32, CRC-32C of everything from attributes on
	batchAttributesOffset = 21 // int16
	batchLastDeltaOffset  = 23 // int32
	batchRecordsCount     = 57 // int32
	batchHeaderLen        = 61 // up to and including the record count
	batchLogOverhead      = 12 // base offset + length: not counted by the length

	attrTransactional = 0x10
	attrControl       = 0x20
)

var crc32c = crc32.MakeTable(crc32.Castagnoli)

// splitBatches splits a produce request's records into record batches,
// checking each minimally: magic 2, a length that fits, the CRC, a record
// count that matches the offset delta, not a control batch, not
// transactional unless transactional (a transactional id's produce to a
// server with a transaction coordinator), and at most maxBytes. It returns the batches (sub-slices of records) or the
// error code for the whole partition: a bad batch fails all of them, so
// nothing of a partially bad request is appended.
func splitBatches(records []byte, maxBytes int32, transactional bool) ([][]byte, int16) {
	if len(records) == 0 {
		return nil, kerr.CorruptMessage.Code
	}
	var batches [][]byte
	for rest := records; len(rest) > 0; {
		if len(rest) <= batchMagicOffset {
			return nil, kerr.CorruptMessage.Code
		}
		if magic := rest[batchMagicOffset]; magic != 2 {
			if magic < 2 {
				return nil, kerr.UnsupportedForMessageFormat.Code
			}
			return nil, kerr.CorruptMessage.Code
		}
		if len(rest) < batchHeaderLen {
			return nil, kerr.CorruptMessage.Code
		}
		length := int64(int32(binary.BigEndian.Uint32(rest[batchLengthOffset:])))
		size := length + batchLogOverhead
		if size < batchHeaderLen || size > int64(len(rest)) {
			return nil, kerr.CorruptMessage.Code
		}
		batch := rest[:size]
		rest = rest[size:]
		if size > int64(maxBytes) {
			return nil, kerr.MessageTooLarge.Code
		}
		if crc32.Checksum(batch[batchAttributesOffset:], crc32c) != binary.BigEndian.Uint32(batch[batchCRCOffset:]) {
			return nil, kerr.CorruptMessage.Code
		}
		attributes := binary.BigEndian.Uint16(batch[batchAttributesOffset:])
		if attributes&attrControl != 0 || attributes&attrTransactional != 0 && !transactional {
			return nil, kerr.InvalidRecord.Code
		}
		lastDelta := int32(binary.BigEndian.Uint32(batch[batchLastDeltaOffset:]))
		count := int32(binary.BigEndian.Uint32(batch[batchRecordsCount:]))
		if count <= 0 || lastDelta != count-1 {
			return nil, kerr.CorruptMessage.Code
		}
		batches = append(batches, batch)
	}
	return batches, 0
}
