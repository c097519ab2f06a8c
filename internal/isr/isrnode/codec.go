package isrnode

import (
	"context"
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
// Fetch request and response (kmsg), the records as the record batches
// (magic 2) the producers sent, each an isr.Batch in its raw form
// (Batch.Raw: the bytes, Count: its offsets), stored and served unchanged
// but for the two header fields a broker owns, which lie outside the CRC:
// the base offset and partition_leader_epoch, stamped by the log when the
// batch is appended (stampBatch). Batches are CRC-32C checked when a
// producer's arrive (checkBatch) and on a follower's receipt.

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

// Record batch (magic 2) header fields the broker reads or writes.
const (
	batchPartitionLeaderEpochOffset = 12
	batchMagicOffset                = 16
	batchLastOffsetDeltaOffset      = 23
	batchMaxTimestampOffset         = 35
	batchRecordCountOffset          = 57
)

// errCorruptBatch: bytes that are not a valid record batch of magic 2.
var errCorruptBatch = errors.New("isrnode: corrupt record batch")

// checkBatch checks that raw is exactly one record batch of magic 2 with a
// good CRC and as many records as offsets, and returns its offset count
// (last offset delta + 1).
func checkBatch(raw []byte) (int32, error) {
	if len(raw) < batchHeaderLen {
		return 0, fmt.Errorf("%w: %d bytes", errCorruptBatch, len(raw))
	}
	length := int64(int32(binary.BigEndian.Uint32(raw[batchLengthOffset:])))
	if length+batchLogOverhead != int64(len(raw)) {
		return 0, fmt.Errorf("%w: length %d in %d bytes", errCorruptBatch, length, len(raw))
	}
	if raw[batchMagicOffset] != 2 {
		return 0, fmt.Errorf("%w: magic %d", errCorruptBatch, raw[batchMagicOffset])
	}
	if crc32.Checksum(raw[batchAttributesStart:], crc32c) != binary.BigEndian.Uint32(raw[batchCRCOffset:]) {
		return 0, fmt.Errorf("%w: CRC mismatch", errCorruptBatch)
	}
	lastDelta := int32(binary.BigEndian.Uint32(raw[batchLastOffsetDeltaOffset:]))
	records := int32(binary.BigEndian.Uint32(raw[batchRecordCountOffset:]))
	if lastDelta < 0 || records != lastDelta+1 {
		return 0, fmt.Errorf("%w: %d records, last offset delta %d", errCorruptBatch, records, lastDelta)
	}
	return lastDelta + 1, nil
}

// stampBatch is the logs' disklog.RawStamp: it writes the base offset and
// the leader epoch into the batch's header, as Kafka's leader does when it
// appends (both lie outside the CRC, which therefore stands), and returns
// the batch's max timestamp for the time index.
func stampBatch(raw []byte, baseOffset int64, leaderEpoch int32) (int64, error) {
	if len(raw) < batchHeaderLen || raw[batchMagicOffset] != 2 {
		return 0, fmt.Errorf("%w: %d bytes", errCorruptBatch, len(raw))
	}
	binary.BigEndian.PutUint64(raw, uint64(baseOffset))
	binary.BigEndian.PutUint32(raw[batchPartitionLeaderEpochOffset:], uint32(leaderEpoch))
	return int64(binary.BigEndian.Uint64(raw[batchMaxTimestampOffset:])), nil
}

// encodeValues encodes values as one uncompressed record batch (no keys,
// no headers, timestamp ts for every record), base offset and epoch left
// for the log to stamp: what Manager.Append appends.
func encodeValues(values [][]byte, ts int64) []byte {
	var records, body []byte
	for i, r := range values {
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
		Length:               int32(batchHeaderLen - batchLogOverhead + len(records)),
		PartitionLeaderEpoch: -1,
		Magic:                2,
		LastOffsetDelta:      int32(len(values) - 1),
		FirstTimestamp:       ts,
		MaxTimestamp:         ts,
		ProducerID:           -1,
		ProducerEpoch:        -1,
		FirstSequence:        -1,
		NumRecords:           int32(len(values)),
		Records:              records,
	}
	dst := rb.AppendTo(nil)
	binary.BigEndian.PutUint32(dst[batchCRCOffset:], crc32.Checksum(dst[batchAttributesStart:], crc32c))
	return dst
}

// decodeBatches splits fetched record batches into raw isr.Batches (each
// checked by checkBatch; the bytes are raw's, not copied). A partial batch
// at the end (a fetch cut by size) is dropped, as a Kafka follower drops it.
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
		one := raw[:size:size]
		raw = raw[size:]
		count, err := checkBatch(one)
		if err != nil {
			return out, err
		}
		out = append(out, isr.Batch{
			BaseOffset:  int64(binary.BigEndian.Uint64(one)),
			LeaderEpoch: int32(binary.BigEndian.Uint32(one[batchPartitionLeaderEpochOffset:])),
			Raw:         one, Count: count,
		})
	}
	return out, nil
}

// batchValues returns the values of an uncompressed raw batch's records
// (tests read back what Manager.Append wrote).
func batchValues(b isr.Batch) ([][]byte, error) {
	var rb kmsg.RecordBatch
	if err := rb.ReadFrom(b.Raw); err != nil {
		return nil, fmt.Errorf("%w: %v", errCorruptBatch, err)
	}
	if rb.Attributes&0x07 != 0 {
		return nil, fmt.Errorf("%w: compressed (attributes %#x)", errCorruptBatch, rb.Attributes)
	}
	var out [][]byte
	rest := rb.Records
	for range rb.NumRecords {
		value, next, err := recordValue(rest)
		if err != nil {
			return nil, fmt.Errorf("%w: batch %d: %v", errCorruptBatch, rb.FirstOffset, err)
		}
		out = append(out, value)
		rest = next
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
	case errors.Is(err, errCorruptBatch):
		return kerr.CorruptMessage.Code
	case errors.Is(err, ErrOutOfOrderSequence):
		return kerr.OutOfOrderSequenceNumber.Code
	case errors.Is(err, ErrProducerFenced):
		return kerr.InvalidProducerEpoch.Code
	case errors.Is(err, context.DeadlineExceeded):
		return kerr.RequestTimedOut.Code
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
	case errors.Is(err, isr.ErrElectionNotNeeded):
		return kerr.ElectionNotNeeded.Code
	case errors.Is(err, isr.ErrPreferredLeaderNotAvailable):
		return kerr.PreferredLeaderNotAvailable.Code
	case errors.Is(err, isr.ErrEligibleLeadersNotAvailable):
		return kerr.EligibleLeadersNotAvailable.Code
	case errors.Is(err, isr.ErrInvalidReplicaAssignment):
		return kerr.InvalidReplicaAssignment.Code
	case errors.Is(err, isr.ErrNoReassignmentInProgress):
		return kerr.NoReassignmentInProgress.Code
	case errors.Is(err, isr.ErrInvalidReplicationFactor):
		return kerr.InvalidReplicationFactor.Code
	case errors.Is(err, ErrLogFailed), errors.Is(err, isr.ErrKafkaStorageError):
		return kerr.KafkaStorageError.Code
	default:
		return kerr.UnknownServerError.Code
	}
}

// KafkaError is err as the Kafka error (a *kerr.Error) a front end
// answers; nil for nil.
func KafkaError(err error) error {
	if code := errorCode(err); code != 0 {
		return kerr.ErrorForCode(code)
	}
	return nil
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
