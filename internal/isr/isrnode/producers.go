package isrnode

import (
	"encoding/binary"
	"errors"
	"math"

	"quire/internal/isr"
	"quire/internal/isr/disklog"
)

// Idempotent producers (KIP-98), as Kafka's ProducerStateManager keeps
// them: every replica, leader or follower, remembers the last DedupWindow
// batches of each producer in its log as they are appended (and forgets
// those a truncation removes), so that whichever replica leads next knows
// them. The leader checks a produced batch against the table before its
// core appends it: a batch it holds already (a retry) is answered with its
// first offset and not appended again; a sequence that skips ahead is
// OUT_OF_ORDER_SEQUENCE_NUMBER, an older producer epoch
// INVALID_PRODUCER_EPOCH. A producer the table does not know (new, or
// older than the tail the table was rebuilt from on open) is accepted, as
// Kafka does since KIP-360.

// Outcomes of a produced batch's sequence check.
var (
	ErrOutOfOrderSequence = errors.New("isrnode: OUT_OF_ORDER_SEQUENCE_NUMBER")
	ErrProducerFenced     = errors.New("isrnode: INVALID_PRODUCER_EPOCH")
)

// DedupWindow is how many recent batches per producer are remembered: a
// producer has at most 5 requests in flight per partition.
const DedupWindow = 5

// rebuildWindow bounds how many offsets at the log's tail a replica reads
// on open to rebuild its producer table.
const rebuildWindow = 100_000

// Record batch header fields of idempotent producers.
const (
	batchProducerIDOffset    = 43
	batchProducerEpochOffset = 51
	batchBaseSequenceOffset  = 53
)

// idempotence is what a raw batch says of its producer.
type idempotence struct {
	producerID        int64
	epoch             int16
	firstSeq, lastSeq int32
}

// idempotenceOf reads a raw batch's producer fields; false for a batch of
// a producer that is not idempotent (producer id -1).
func idempotenceOf(raw []byte) (idempotence, bool) {
	if len(raw) < batchHeaderLen {
		return idempotence{}, false
	}
	id := idempotence{
		producerID: int64(binary.BigEndian.Uint64(raw[batchProducerIDOffset:])),
		epoch:      int16(binary.BigEndian.Uint16(raw[batchProducerEpochOffset:])),
		firstSeq:   int32(binary.BigEndian.Uint32(raw[batchBaseSequenceOffset:])),
	}
	if id.producerID < 0 || id.firstSeq < 0 {
		return idempotence{}, false
	}
	id.lastSeq = addSeq(id.firstSeq, int32(binary.BigEndian.Uint32(raw[batchLastOffsetDeltaOffset:])))
	return id, true
}

// addSeq adds to a sequence number, wrapping after MaxInt32 as Kafka's do.
func addSeq(seq, delta int32) int32 {
	if s := int64(seq) + int64(delta); s <= math.MaxInt32 {
		return int32(s)
	} else {
		return int32(s - math.MaxInt32 - 1)
	}
}

// producedBatch is a remembered batch: its sequences and offsets.
type producedBatch struct {
	firstSeq, lastSeq int32
	base, next        int64
}

type producerBatches struct {
	epoch   int16
	batches []producedBatch // oldest first, at most DedupWindow
}

// producerTable is one replica's table. Used on the replica's loop only.
type producerTable struct {
	m map[int64]*producerBatches
}

// note remembers a batch appended to the log.
func (t *producerTable) note(b isr.Batch) {
	id, ok := idempotenceOf(b.Raw)
	if !ok {
		return
	}
	if t.m == nil {
		t.m = map[int64]*producerBatches{}
	}
	st := t.m[id.producerID]
	if st == nil || id.epoch > st.epoch {
		st = &producerBatches{epoch: id.epoch}
		t.m[id.producerID] = st
	}
	st.batches = append(st.batches, producedBatch{firstSeq: id.firstSeq, lastSeq: id.lastSeq, base: b.BaseOffset, next: b.NextOffset()})
	if len(st.batches) > DedupWindow {
		st.batches = st.batches[len(st.batches)-DedupWindow:]
	}
}

// truncate forgets the batches at or past leo (the log was cut there).
func (t *producerTable) truncate(leo int64) {
	for pid, st := range t.m {
		keep := st.batches[:0]
		for _, b := range st.batches {
			if b.next <= leo {
				keep = append(keep, b)
			}
		}
		st.batches = keep
		if len(keep) == 0 {
			delete(t.m, pid)
		}
	}
}

// check decides what the leader does with a produced batch: append it
// (nil, nil), answer it as the duplicate of a batch in the log, or refuse
// it.
func (t *producerTable) check(id idempotence) (*producedBatch, error) {
	st := t.m[id.producerID]
	if st == nil {
		return nil, nil
	}
	switch {
	case id.epoch < st.epoch:
		return nil, ErrProducerFenced
	case id.epoch > st.epoch:
		if id.firstSeq != 0 {
			return nil, ErrOutOfOrderSequence
		}
		return nil, nil
	}
	for i := range st.batches {
		if b := &st.batches[i]; b.firstSeq == id.firstSeq && b.lastSeq == id.lastSeq {
			dup := *b
			return &dup, nil
		}
	}
	if n := len(st.batches); n > 0 && id.firstSeq != addSeq(st.batches[n-1].lastSeq, 1) {
		return nil, ErrOutOfOrderSequence
	}
	return nil, nil
}

// rebuild fills the table from the batches at the tail of the log.
func (t *producerTable) rebuild(l *disklog.Log) error {
	t.m = nil
	for from := max(l.LogStartOffset(), l.EndOffset()-rebuildWindow); from < l.EndOffset(); {
		batches, err := l.ReadRaw(from, 1<<20)
		if err != nil {
			return err
		}
		if len(batches) == 0 {
			return nil
		}
		for _, b := range batches {
			t.note(isr.Batch{BaseOffset: b.BaseOffset, Raw: b.Payload, Count: b.Count})
			from = b.NextOffset()
		}
	}
	return nil
}

// producerLog is a replica's log as its core sees it: every append and
// truncation also kept in the producer table, and every Flush deferred to
// the end of the loop's batch of work (replica.syncLog).
type producerLog struct {
	*disklog.ISRLog
	table *producerTable
	sync  *deferredSync
}

// deferredSync is a Flush the core asked for and the shell has not done
// yet. The core's Flush promises durability before anything that depends
// on it leaves the replica: its produce answers, the fetches that tell a
// leader this replica's LEO, its status. The shell keeps that promise at
// the end of the loop's batch of work (process): every Flush of one batch
// is one fsync (flush.messages=1 under a leader's concurrent produces is
// one sync per batch, not per append, each append still answered only
// after it), and the batch's answers to followers' fetches go out before
// the sync, as Kafka's followers read a leader's log while its append
// syncs.
type deferredSync struct{ pending bool }

// Flush marks the log for the shell's sync (see deferredSync).
func (l producerLog) Flush() { l.sync.pending = true }

// FlushedOffset counts a pending sync as done: it is, before anything the
// core decides on it leaves the replica.
func (l producerLog) FlushedOffset() int64 {
	if l.sync.pending {
		return l.ISRLog.EndOffset()
	}
	return l.ISRLog.FlushedOffset()
}

func (l producerLog) Append(b isr.Batch) error {
	if err := l.ISRLog.Append(b); err != nil {
		return err
	}
	l.table.note(b)
	return nil
}

func (l producerLog) TruncateTo(offset int64) {
	l.ISRLog.TruncateTo(offset)
	l.table.truncate(l.ISRLog.EndOffset())
}
