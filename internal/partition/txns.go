package partition

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"slices"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// What a partition needs for Kafka transactions (KIP-98), apart from the
// coordinator (internal/kafka/txn): control batches (the commit and abort
// markers the coordinator writes into every partition of a transaction),
// and the transactions' state in offset order — the first offset of each
// producer's open transaction, so the last stable offset (LSO) is known,
// and the aborted transactions a read_committed fetch must name. Not yet
// wired into Append and Read.

// Control record types (the key's second int16).
const (
	controlAbort  = 0
	controlCommit = 1
)

// ControlBatch encodes a transaction marker as Kafka writes it: a
// transactional control batch of one record whose key is (version 0,
// type) and whose value is (version 0, coordinator epoch). The base offset
// and leader epoch are left 0 for the partition to assign.
func ControlBatch(pid int64, epoch int16, commit bool, coordinatorEpoch int32, timestampMs int64) []byte {
	typ := int16(controlAbort)
	if commit {
		typ = controlCommit
	}
	key := binary.BigEndian.AppendUint16(binary.BigEndian.AppendUint16(nil, 0), uint16(typ))
	value := binary.BigEndian.AppendUint32(binary.BigEndian.AppendUint16(nil, 0), uint32(coordinatorEpoch))
	body := recordBody(key, value)
	b := make([]byte, BatchHeaderSize, BatchHeaderSize+len(body))
	b[offMagic] = 2
	binary.BigEndian.PutUint16(b[offAttributes:], attrTransactional|attrControl)
	binary.BigEndian.PutUint32(b[offLastOffsetDelta:], 0)
	binary.BigEndian.PutUint64(b[offBaseTimestamp:], uint64(timestampMs))
	binary.BigEndian.PutUint64(b[offMaxTimestamp:], uint64(timestampMs))
	binary.BigEndian.PutUint64(b[offProducerID:], uint64(pid))
	binary.BigEndian.PutUint16(b[offProducerEpoch:], uint16(epoch))
	binary.BigEndian.PutUint32(b[offBaseSequence:], 0xffffffff) // -1: markers carry no sequence
	binary.BigEndian.PutUint32(b[offRecordCount:], 1)
	b = append(b, body...)
	binary.BigEndian.PutUint32(b[offBatchLength:], uint32(len(b)-12))
	binary.BigEndian.PutUint32(b[offCRC:], crc32.Checksum(b[offAttributes:], castagnoli))
	return b
}

// recordBody encodes one record (offset and timestamp deltas 0) with its
// varint length prefix.
func recordBody(key, value []byte) []byte {
	inner := []byte{0}                    // attributes
	inner = binary.AppendVarint(inner, 0) // timestamp delta
	inner = binary.AppendVarint(inner, 0) // offset delta
	inner = binary.AppendVarint(inner, int64(len(key)))
	inner = append(inner, key...)
	inner = binary.AppendVarint(inner, int64(len(value)))
	inner = append(inner, value...)
	inner = binary.AppendVarint(inner, 0) // no headers
	return append(binary.AppendVarint(nil, int64(len(inner))), inner...)
}

// Control reports whether the batch is a control batch.
func (b Batch) Control() bool { return b.Attributes&attrControl != 0 }

// Transactional reports whether the batch belongs to a transaction.
func (b Batch) Transactional() bool { return b.Attributes&attrTransactional != 0 }

// ParseControl returns whether a control batch's marker commits (true) or
// aborts (false), and the coordinator epoch it carries (Quire's
// transaction coordinator puts the decision number there).
func ParseControl(raw []byte) (commit bool, coordinatorEpoch int32, err error) {
	b, err := ParseBatch(raw)
	if err != nil {
		return false, 0, err
	}
	if !b.Control() || b.Records < 1 {
		return false, 0, fmt.Errorf("%w: not a control batch", ErrCorruptBatch)
	}
	rest := raw[BatchHeaderSize:]
	n, ok := recordLen(rest)
	if !ok || n > len(rest) {
		return false, 0, fmt.Errorf("%w: control record", ErrCorruptBatch)
	}
	var r kmsg.Record
	if err := r.ReadFrom(rest[:n]); err != nil || len(r.Key) < 4 {
		return false, 0, fmt.Errorf("%w: control record key", ErrCorruptBatch)
	}
	if len(r.Value) >= 6 {
		coordinatorEpoch = int32(binary.BigEndian.Uint32(r.Value[2:]))
	}
	switch typ := int16(binary.BigEndian.Uint16(r.Key[2:])); typ {
	case controlAbort:
		return false, coordinatorEpoch, nil
	case controlCommit:
		return true, coordinatorEpoch, nil
	default:
		return false, 0, fmt.Errorf("%w: control type %d", ErrCorruptBatch, typ)
	}
}

// AbortedTxn is an aborted transaction of one producer in a partition: its
// records lie from FirstOffset to its abort marker at LastOffset.
type AbortedTxn struct {
	ProducerID  int64
	FirstOffset int64
	LastOffset  int64
}

// txnTracker follows one partition's transactions in offset order: each
// producer's open transaction (from its first transactional batch to its
// marker) and the aborted ones. The LSO is the first offset of the oldest
// open transaction (the high watermark when none is open); a
// read_committed fetch reads up to it and is told which aborted
// transactions overlap what it read.
type txnTracker struct {
	open    map[int64]int64 // producer id → first offset of its open transaction
	aborted []AbortedTxn    // in marker (LastOffset) order
	// decided is, per producer id, the coordinator epoch (decision number)
	// of its last marker here: a marker not above it is a late copy of one
	// already applied, and must not end a later transaction.
	decided map[int64]int32
}

func newTxnTracker() *txnTracker {
	return &txnTracker{open: map[int64]int64{}, decided: map[int64]int32{}}
}

// stale reports whether a marker of pid with this coordinator epoch was
// already superseded here.
func (t *txnTracker) stale(pid int64, coordinatorEpoch int32) bool {
	last, ok := t.decided[pid]
	return ok && coordinatorEpoch <= last
}

// observe takes one appended batch, in offset order; commit and
// coordinatorEpoch are a control batch's.
func (t *txnTracker) observe(b Batch, commit bool, coordinatorEpoch int32) {
	switch {
	case b.Control():
		t.decided[b.ProducerID] = max(t.decided[b.ProducerID], coordinatorEpoch)
		first, ok := t.open[b.ProducerID]
		if !ok {
			return // a marker for a transaction with no records here
		}
		delete(t.open, b.ProducerID)
		if !commit {
			t.aborted = append(t.aborted, AbortedTxn{ProducerID: b.ProducerID, FirstOffset: first, LastOffset: b.BaseOffset})
		}
	case b.Transactional():
		if _, ok := t.open[b.ProducerID]; !ok {
			t.open[b.ProducerID] = b.BaseOffset
		}
	}
}

// lso is the last stable offset given the high watermark.
func (t *txnTracker) lso(hw int64) int64 {
	lso := hw
	for _, first := range t.open {
		lso = min(lso, first)
	}
	return lso
}

// abortedIn returns the aborted transactions with records in [from, to):
// what a read_committed fetch of that range must filter out.
func (t *txnTracker) abortedIn(from, to int64) []AbortedTxn {
	i, _ := slices.BinarySearchFunc(t.aborted, from, func(a AbortedTxn, off int64) int {
		switch {
		case a.LastOffset < off:
			return -1
		case a.LastOffset > off:
			return 1
		}
		return 0
	})
	var out []AbortedTxn
	for _, a := range t.aborted[i:] {
		if a.FirstOffset < to {
			out = append(out, a)
		}
	}
	return out
}

// trim forgets the aborted transactions that end before the log start.
func (t *txnTracker) trim(logStart int64) {
	i := 0
	for i < len(t.aborted) && t.aborted[i].LastOffset < logStart {
		i++
	}
	t.aborted = slices.Delete(t.aborted, 0, i)
}
