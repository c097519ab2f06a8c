package partition

import (
	"errors"
	"time"
)

// Outcomes of an idempotent batch's sequence check (Kafka's
// ProducerStateManager rules, KIP-98 and KIP-360).
var (
	// ErrOutOfOrderSequence: the batch's first sequence is not the one
	// after the producer's last (OUT_OF_ORDER_SEQUENCE_NUMBER).
	ErrOutOfOrderSequence = errors.New("partition: out of order sequence number")
	// ErrProducerFenced: an epoch older than the producer's current one
	// (INVALID_PRODUCER_EPOCH).
	ErrProducerFenced = errors.New("partition: producer epoch is stale")
)

// DedupWindow is how many recent batches per producer are remembered, as
// in Kafka: a producer has at most 5 requests in flight per partition, so
// any retry names one of its last 5 batches.
const DedupWindow = 5

// batchRecord is one remembered batch of a producer.
type batchRecord struct {
	firstSeq, lastSeq int32
	base, last        int64
	// done is closed once the batch is durable or failed; err says which.
	done chan struct{}
	err  error
}

type producerState struct {
	epoch   int16
	batches []*batchRecord // oldest first, at most DedupWindow
	// lastAppend is when the producer's last batch was appended (or the
	// table was rebuilt with it); expire forgets it after the expiry.
	lastAppend time.Time
}

// producers is the per-partition producer table. Not safe for concurrent
// use; the partition's mutex guards it. No clocks or I/O: the caller
// passes the time, and the table is rebuilt after a takeover from the
// batches at the log's tail.
type producers struct {
	m map[int64]*producerState
	// peak is the most entries m has held since it was last rebuilt: a Go
	// map keeps its buckets after deletes, so expire rebuilds it when it
	// has shrunk to a quarter of that.
	peak int
}

func newProducers() producers { return producers{m: map[int64]*producerState{}} }

// expire forgets producers whose last append is before cutoff and whose
// batches are all settled (Kafka's producer.id.expiration.ms); it returns
// how many it forgot. A producer forgotten and then heard from again is
// accepted as new (KIP-360), as after a takeover that did not see it.
func (ps *producers) expire(cutoff time.Time) int {
	n := 0
	for id, st := range ps.m {
		if !st.lastAppend.Before(cutoff) || !st.settled() {
			continue
		}
		delete(ps.m, id)
		n++
	}
	if len(ps.m) < ps.peak/4 {
		m := make(map[int64]*producerState, len(ps.m))
		for id, st := range ps.m {
			m[id] = st
		}
		ps.m, ps.peak = m, len(m)
	}
	return n
}

// settled: no batch of the producer is still waiting for the log, so a
// retry of one could not need the table to find it.
func (st *producerState) settled() bool {
	for _, r := range st.batches {
		select {
		case <-r.done:
		default:
			return false
		}
	}
	return true
}

// check decides what to do with batch b of an idempotent producer: a
// duplicate of a remembered batch (returned), an error, or (nil, nil):
// append it.
func (ps *producers) check(b Batch) (*batchRecord, error) {
	st := ps.m[b.ProducerID]
	if st == nil {
		// Unknown producer: new, or its state is older than the tail we
		// rebuilt from. Kafka (KIP-360) accepts such a batch; so do we.
		return nil, nil
	}
	switch {
	case b.ProducerEpoch < st.epoch:
		return nil, ErrProducerFenced
	case b.ProducerEpoch > st.epoch:
		if b.BaseSequence != 0 {
			return nil, ErrOutOfOrderSequence
		}
		return nil, nil
	}
	last := b.LastSequence()
	for _, r := range st.batches {
		if r.firstSeq == b.BaseSequence && r.lastSeq == last {
			return r, nil
		}
	}
	if n := len(st.batches); n > 0 {
		if want := addSeq(st.batches[n-1].lastSeq, 1); b.BaseSequence != want {
			return nil, ErrOutOfOrderSequence
		}
	}
	return nil, nil
}

// record remembers an accepted batch (assigned offsets already set in b),
// appended at now.
func (ps *producers) record(b Batch, r *batchRecord, now time.Time) {
	st := ps.m[b.ProducerID]
	if st == nil || b.ProducerEpoch > st.epoch {
		st = &producerState{epoch: b.ProducerEpoch}
		ps.m[b.ProducerID] = st
		ps.peak = max(ps.peak, len(ps.m))
	}
	st.lastAppend = now
	r.firstSeq, r.lastSeq = b.BaseSequence, b.LastSequence()
	r.base, r.last = b.BaseOffset, b.LastOffset()
	st.batches = append(st.batches, r)
	if len(st.batches) > DedupWindow {
		st.batches = st.batches[len(st.batches)-DedupWindow:]
	}
}

// doneRecord is a batch rebuilt from the log: already durable.
func doneRecord() *batchRecord {
	r := &batchRecord{done: make(chan struct{})}
	close(r.done)
	return r
}

// fence applies a transaction marker of (pid, epoch): a marker of an epoch
// older than the producer's is refused (the coordinator that wrote it was
// deposed); a newer one moves the producer to it, so batches of older
// epochs are fenced from now on (Kafka's appendEndTxnMarker).
func (ps *producers) fence(pid int64, epoch int16, now time.Time) error {
	st := ps.m[pid]
	switch {
	case st == nil:
		ps.m[pid] = &producerState{epoch: epoch, lastAppend: now}
		ps.peak = max(ps.peak, len(ps.m))
	case epoch < st.epoch:
		return ErrProducerFenced
	case epoch > st.epoch:
		st.epoch, st.batches = epoch, nil
	}
	return nil
}
