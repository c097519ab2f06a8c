package isrnode

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"strconv"
	"strings"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"quire/internal/isr"
)

// What crosses the wire between a follower and its leader is Kafka's: a
// Fetch request and response (kmsg), the records as record batches of magic
// 2, one per isr.Batch, its leader epoch in partition_leader_epoch and each
// of its records the value of one Kafka record (no key, no headers, no
// timestamps: -1). The batches are uncompressed and CRC-32C checked on
// receipt.

// PartitionName is the isr partition name of a Kafka topic partition
// ("orders-3").
func PartitionName(topic string, partition int32) string {
	return topic + "-" + strconv.FormatInt(int64(partition), 10)
}

// SplitPartitionName is PartitionName's inverse.
func SplitPartitionName(name string) (topic string, partition int32, ok bool) {
	i := strings.LastIndexByte(name, '-')
	if i <= 0 {
		return "", 0, false
	}
	p, err := strconv.ParseInt(name[i+1:], 10, 32)
	if err != nil || p < 0 {
		return "", 0, false
	}
	return name[:i], int32(p), true
}

// DefaultTopicID derives a topic's id from its name, for Fetch v13+ which
// names topics by id. Leader and follower must agree on it; the broker that
// wires this package in passes the catalogue's ids instead
// (Config.TopicID).
func DefaultTopicID(topic string) [16]byte {
	sum := sha256.Sum256([]byte("quire-isr-topic/" + topic))
	var id [16]byte
	copy(id[:], sum[:])
	return id
}

var crc32c = crc32.MakeTable(crc32.Castagnoli)

// Record batch (magic 2) layout.
const (
	batchHeaderLen       = 61 // up to and including the record count
	batchLengthOffset    = 8
	batchCRCOffset       = 17
	batchAttributesStart = 21
	batchLogOverhead     = 12 // base offset and length: not counted by the length
)

// appendBatches encodes batches as Kafka record batches onto dst.
func appendBatches(dst []byte, batches []isr.Batch) []byte {
	for _, b := range batches {
		dst = appendBatch(dst, b)
	}
	return dst
}

func appendBatch(dst []byte, b isr.Batch) []byte {
	var records []byte
	var body []byte
	for i, r := range b.Records {
		body = body[:0]
		body = append(body, 0)                          // attributes
		body = binary.AppendVarint(body, 0)             // timestamp delta
		body = binary.AppendVarint(body, int64(i))      // offset delta
		body = binary.AppendVarint(body, -1)            // key: null
		body = binary.AppendVarint(body, int64(len(r))) // value length
		body = append(body, r...)                       // value
		body = binary.AppendVarint(body, 0)             // headers
		records = binary.AppendVarint(records, int64(len(body)))
		records = append(records, body...)
	}
	rb := kmsg.RecordBatch{
		FirstOffset:          b.BaseOffset,
		Length:               int32(batchHeaderLen - batchLogOverhead + len(records)),
		PartitionLeaderEpoch: b.LeaderEpoch,
		Magic:                2,
		LastOffsetDelta:      int32(len(b.Records) - 1),
		FirstTimestamp:       -1,
		MaxTimestamp:         -1,
		ProducerID:           -1,
		ProducerEpoch:        -1,
		FirstSequence:        -1,
		NumRecords:           int32(len(b.Records)),
		Records:              records,
	}
	start := len(dst)
	dst = rb.AppendTo(dst)
	binary.BigEndian.PutUint32(dst[start+batchCRCOffset:], crc32.Checksum(dst[start+batchAttributesStart:], crc32c))
	return dst
}

// errCorruptBatch: fetched bytes that are not a valid uncompressed record
// batch of magic 2.
var errCorruptBatch = errors.New("isrnode: corrupt record batch in fetch response")

// decodeBatches parses Kafka record batches back into isr.Batches. A
// partial batch at the end (a fetch cut by size) is dropped, as a Kafka
// follower drops it.
func decodeBatches(raw []byte) ([]isr.Batch, error) {
	var out []isr.Batch
	for len(raw) >= batchHeaderLen {
		length := int64(int32(binary.BigEndian.Uint32(raw[batchLengthOffset:])))
		size := length + batchLogOverhead
		if size < batchHeaderLen {
			return out, fmt.Errorf("%w: length %d", errCorruptBatch, length)
		}
		if size > int64(len(raw)) {
			break
		}
		one := raw[:size]
		raw = raw[size:]
		if crc32.Checksum(one[batchAttributesStart:], crc32c) != binary.BigEndian.Uint32(one[batchCRCOffset:]) {
			return out, fmt.Errorf("%w: CRC mismatch", errCorruptBatch)
		}
		var rb kmsg.RecordBatch
		if err := rb.ReadFrom(one); err != nil {
			return out, fmt.Errorf("%w: %v", errCorruptBatch, err)
		}
		if rb.Magic != 2 || rb.Attributes&0x07 != 0 || rb.NumRecords <= 0 {
			return out, fmt.Errorf("%w: magic %d, attributes %#x, %d records", errCorruptBatch, rb.Magic, rb.Attributes, rb.NumRecords)
		}
		b := isr.Batch{BaseOffset: rb.FirstOffset, LeaderEpoch: rb.PartitionLeaderEpoch, Records: make([][]byte, 0, rb.NumRecords)}
		rest := rb.Records
		for range rb.NumRecords {
			value, next, err := recordValue(rest)
			if err != nil {
				return out, fmt.Errorf("%w: batch %d: %v", errCorruptBatch, rb.FirstOffset, err)
			}
			b.Records = append(b.Records, value)
			rest = next
		}
		out = append(out, b)
	}
	return out, nil
}

// recordValue reads one record and returns its value and what follows it.
func recordValue(src []byte) ([]byte, []byte, error) {
	n, w := binary.Varint(src)
	if w <= 0 || n < 0 || n > int64(len(src)-w) {
		return nil, nil, errors.New("bad record length")
	}
	var r kmsg.Record
	if err := r.ReadFrom(src[:w+int(n)]); err != nil {
		return nil, nil, err
	}
	value := r.Value
	if value == nil {
		value = []byte{}
	}
	return value, src[w+int(n):], nil
}

// errorCode maps the core's protocol outcomes to Kafka error codes, once.
func errorCode(err error) int16 {
	switch {
	case err == nil:
		return 0
	case errors.Is(err, isr.ErrNotLeaderOrFollower):
		return kerr.NotLeaderForPartition.Code
	case errors.Is(err, isr.ErrFencedLeaderEpoch):
		return kerr.FencedLeaderEpoch.Code
	case errors.Is(err, isr.ErrUnknownLeaderEpoch):
		return kerr.UnknownLeaderEpoch.Code
	case errors.Is(err, isr.ErrOffsetOutOfRange):
		return kerr.OffsetOutOfRange.Code
	case errors.Is(err, isr.ErrUnknownPartition):
		return kerr.UnknownTopicOrPartition.Code
	case errors.Is(err, isr.ErrNotEnoughReplicas):
		return kerr.NotEnoughReplicas.Code
	case errors.Is(err, isr.ErrNotEnoughReplicasAfterAppend):
		return kerr.NotEnoughReplicasAfterAppend.Code
	case errors.Is(err, isr.ErrRequestTimedOut):
		return kerr.RequestTimedOut.Code
	case errors.Is(err, isr.ErrInvalidRequest):
		return kerr.InvalidRequest.Code
	case errors.Is(err, ErrLogFailed), errors.Is(err, isr.ErrKafkaStorageError):
		return kerr.KafkaStorageError.Code
	default:
		return kerr.UnknownServerError.Code
	}
}

// errorOf maps a Kafka error code of a fetch response back to the core's
// outcome (nil for none).
func errorOf(code int16) error {
	switch code {
	case 0:
		return nil
	case kerr.NotLeaderForPartition.Code:
		return isr.ErrNotLeaderOrFollower
	case kerr.FencedLeaderEpoch.Code:
		return isr.ErrFencedLeaderEpoch
	case kerr.UnknownLeaderEpoch.Code:
		return isr.ErrUnknownLeaderEpoch
	case kerr.OffsetOutOfRange.Code:
		return isr.ErrOffsetOutOfRange
	case kerr.UnknownTopicOrPartition.Code, kerr.UnknownTopicID.Code:
		return isr.ErrUnknownPartition
	default:
		return fmt.Errorf("isrnode: fetch answered %w", kerr.ErrorForCode(code))
	}
}
