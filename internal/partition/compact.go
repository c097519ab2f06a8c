package partition

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"hash/crc32"

	"github.com/twmb/franz-go/pkg/kgo"
)

// What compaction needs from record batches: the key and whether each
// record is a tombstone (records of compressed batches are decompressed,
// with franz-go's decompressors), and a batch rewritten with some records
// left out. The compactor that uses them is package broker's.

// KeyHash identifies a record key in the compactor's map: the first 16
// bytes of its SHA-256 (Kafka's cleaner keeps an MD5 of 16 bytes). Two
// keys with one hash would lose the older one's records; at 2^-64 per pair
// that is not a practical risk.
type KeyHash [16]byte

// HashKey returns key's KeyHash.
func HashKey(key []byte) KeyHash {
	sum := sha256.Sum256(key)
	return KeyHash(sum[:16])
}

// RecordInfo is what compaction knows of one record.
type RecordInfo struct {
	OffsetDelta int32
	HasKey      bool
	Key         KeyHash
	Tombstone   bool // a null value
	raw         []byte
}

// compressionMask is the codec's bits in a batch's attributes.
const compressionMask = 0x07

var decompressor = kgo.DefaultDecompressor()

// BatchRecords decodes the records of the batch raw (whose header is b).
func BatchRecords(b Batch, raw []byte) ([]RecordInfo, error) {
	body := raw[BatchHeaderSize:]
	if codec := b.Attributes & compressionMask; codec != 0 {
		var err error
		if body, err = decompressor.Decompress(body, kgo.CompressionCodecType(codec)); err != nil {
			return nil, fmt.Errorf("%w: decompress records: %v", ErrCorruptBatch, err)
		}
	}
	out := make([]RecordInfo, 0, b.Records)
	for range b.Records {
		r, n, err := parseRecord(body)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
		body = body[n:]
	}
	return out, nil
}

// parseRecord decodes the record at the start of body (KIP-98's format:
// varint length, attributes, varlong timestamp delta, varint offset delta,
// varint-length key and value, -1 meaning null) and returns its size.
func parseRecord(body []byte) (RecordInfo, int, error) {
	bad := func(what string) (RecordInfo, int, error) {
		return RecordInfo{}, 0, fmt.Errorf("%w: record %s", ErrCorruptBatch, what)
	}
	l, n := binary.Varint(body)
	if n <= 0 || l < 0 || int64(len(body)-n) < l {
		return bad("length")
	}
	size := n + int(l)
	rec := body[n:size]
	if len(rec) < 1 {
		return bad("attributes")
	}
	rest := rec[1:]
	if _, n = binary.Varint(rest); n <= 0 { // timestamp delta
		return bad("timestamp")
	}
	rest = rest[n:]
	od, n := binary.Varint(rest)
	if n <= 0 {
		return bad("offset delta")
	}
	rest = rest[n:]
	r := RecordInfo{OffsetDelta: int32(od), raw: body[:size]}
	kl, n := binary.Varint(rest)
	if n <= 0 || kl > int64(len(rest)-n) {
		return bad("key")
	}
	rest = rest[n:]
	if kl >= 0 {
		r.HasKey, r.Key = true, HashKey(rest[:kl])
		rest = rest[kl:]
	}
	vl, n := binary.Varint(rest)
	if n <= 0 || vl > int64(len(rest)-n) {
		return bad("value")
	}
	r.Tombstone = vl < 0
	return r, size, nil
}

// HasKeylessRecord reports whether a batch holds a record without a key,
// which a compacted topic refuses (as Kafka does, with INVALID_RECORD).
func HasKeylessRecord(b Batch, raw []byte) (bool, error) {
	rs, err := BatchRecords(b, raw)
	if err != nil {
		return false, err
	}
	for _, r := range rs {
		if !r.HasKey {
			return true, nil
		}
	}
	return false, nil
}

// RewriteBatch returns the batch with only the records kept (records as
// returned by BatchRecords for it, in order). As Kafka's cleaner does, the
// batch keeps its base offset, last offset delta, timestamps and producer
// fields, so offsets never change and a batch with no record left still
// says which offsets it covered; unlike Kafka's, a rewritten batch is
// stored uncompressed. A batch that keeps every record is returned as is.
func RewriteBatch(raw []byte, records []RecordInfo, keep []bool) []byte {
	all := true
	for _, k := range keep {
		all = all && k
	}
	if all {
		return raw
	}
	out := make([]byte, BatchHeaderSize, len(raw))
	copy(out, raw[:BatchHeaderSize])
	n := int32(0)
	for i, r := range records {
		if keep[i] {
			out = append(out, r.raw...)
			n++
		}
	}
	attrs := binary.BigEndian.Uint16(out[offAttributes:]) &^ compressionMask
	binary.BigEndian.PutUint16(out[offAttributes:], attrs)
	binary.BigEndian.PutUint32(out[offBatchLength:], uint32(len(out)-12))
	binary.BigEndian.PutUint32(out[offRecordCount:], uint32(n))
	binary.BigEndian.PutUint32(out[offCRC:], crc32.Checksum(out[offAttributes:], castagnoli))
	return out
}
