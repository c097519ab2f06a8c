package disklog

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"time"

	"quire/internal/isr"
)

// ISRLog is a Log as an isr.Log: an isr.Batch's records are the payload
// (each a uvarint length and its bytes), stamped with the caller's clock as
// the batch's max timestamp (the time retention and time-based rolls use).
//
// isr.Log's TruncateTo, Flush, AssignEpochStart and CheckpointHighWatermark
// return nothing, as the replica core treats its log as infallible; ISRLog
// keeps the first error they meet in Err, and a failed Log refuses every
// later append, so the shell notices at the next produce or fetch and
// reopens the log (as Kafka takes a failed log directory offline). Flush's
// failure leaves FlushedOffset where it was, which is what the core relies
// on.
//
// Read serves nothing below the log start (records deleted by retention or
// DeleteRecordsBefore): isr.Log's offsets start at 0, and a replica reading
// below the log start is told so by the shell, not the log.
//
// A raw ISRLog (NewRawISRLog) stores raw batches only (isr.Batch.Raw): the
// payload is the batch's bytes, stamped on append by the caller's
// RawStamp, reads return whole batches from the one holding the offset
// asked for, and truncation removes a batch holding the offset whole, as
// Kafka does.
type ISRLog struct {
	log   *Log
	now   func() time.Time
	stamp RawStamp // nil: batches of values (isr.Batch.Records)
	err   error
}

// RawStamp writes a raw batch's base offset and leader epoch into its bytes
// (in place) and returns the batch's max timestamp in milliseconds, which
// the time index and time-based retention use. An error refuses the append
// (isr.ErrLogWrite is not wrapped: the batch is malformed).
type RawStamp func(raw []byte, baseOffset int64, leaderEpoch int32) (maxTimestamp int64, err error)

var _ isr.Log = (*ISRLog)(nil)

// NewISRLog adapts l; now stamps appended batches (time.Now in production).
func NewISRLog(l *Log, now func() time.Time) *ISRLog { return &ISRLog{log: l, now: now} }

// NewRawISRLog adapts l for raw batches, stamped by stamp.
func NewRawISRLog(l *Log, stamp RawStamp) *ISRLog { return &ISRLog{log: l, stamp: stamp} }

// Log is the log underneath.
func (a *ISRLog) Log() *Log { return a.log }

// Err is the first error of a method that could not return it.
func (a *ISRLog) Err() error { return a.err }

func (a *ISRLog) keep(err error) {
	if err != nil && a.err == nil {
		a.err = err
	}
}

func (a *ISRLog) EndOffset() int64 { return a.log.EndOffset() }

func (a *ISRLog) Append(b isr.Batch) error {
	if a.stamp != nil {
		return a.appendRaw(b)
	}
	if b.Raw != nil || len(b.Records) == 0 || len(b.Records) > math.MaxInt32 {
		return fmt.Errorf("%w: %d records at %d", ErrInvalidAppend, len(b.Records), b.BaseOffset)
	}
	err := a.log.AppendRaw(b.BaseOffset, int32(len(b.Records)), b.LeaderEpoch, a.now().UnixMilli(), encodeRecords(b.Records))
	if err != nil && !errors.Is(err, ErrInvalidAppend) {
		// Not written (out of space, an I/O error, a failed log): the
		// replica answers KAFKA_STORAGE_ERROR or fetches it again.
		return fmt.Errorf("%w: %w", isr.ErrLogWrite, err)
	}
	return err
}

func (a *ISRLog) appendRaw(b isr.Batch) error {
	if b.Raw == nil || b.Count < 1 {
		return fmt.Errorf("%w: a raw log takes raw batches (%d records at %d)", ErrInvalidAppend, b.Len(), b.BaseOffset)
	}
	maxTimestamp, err := a.stamp(b.Raw, b.BaseOffset, b.LeaderEpoch)
	if err != nil {
		return fmt.Errorf("%w: batch at %d: %w", ErrInvalidAppend, b.BaseOffset, err)
	}
	err = a.log.AppendRaw(b.BaseOffset, b.Count, b.LeaderEpoch, maxTimestamp, b.Raw)
	if err != nil && !errors.Is(err, ErrInvalidAppend) {
		return fmt.Errorf("%w: %w", isr.ErrLogWrite, err)
	}
	return err
}

// Read returns up to maxBatches batches from offset from on, the first cut
// to start exactly at from (a raw log's first whole). A read error ends the
// batches early and is kept in Err.
func (a *ISRLog) Read(from int64, maxBatches int) []isr.Batch {
	if from < a.log.LogStartOffset() || from >= a.log.EndOffset() || maxBatches <= 0 {
		return nil
	}
	raw, err := a.log.read(from, maxBatches, math.MaxInt)
	a.keep(err)
	var out []isr.Batch
	for _, r := range raw {
		if a.stamp != nil {
			out = append(out, isr.Batch{BaseOffset: r.BaseOffset, LeaderEpoch: r.LeaderEpoch, Raw: r.Payload, Count: r.Count})
			continue
		}
		records, err := decodeRecords(r.Payload, r.Count)
		if err != nil {
			a.keep(fmt.Errorf("read batch %d: %w", r.BaseOffset, err))
			break
		}
		b := isr.Batch{BaseOffset: r.BaseOffset, LeaderEpoch: r.LeaderEpoch, Records: records}
		if b.BaseOffset < from {
			b.Records, b.BaseOffset = b.Records[from-b.BaseOffset:], from
		}
		out = append(out, b)
	}
	return out
}

// TruncateTo cuts at offset exactly, inside a batch if need be: the head of
// that batch is stored again as a batch of its own (the segment rewritten
// with it, atomically).
func (a *ISRLog) TruncateTo(offset int64) {
	a.log.mu.Lock()
	defer a.log.mu.Unlock()
	if err := a.log.writable(); err != nil {
		a.keep(err)
		return
	}
	reencode := reencodeFunc(headRecords)
	if a.stamp != nil {
		reencode = nil // the batch holding offset goes whole
	}
	_, err := a.log.truncateLocked(max(offset, 0), reencode)
	a.keep(err)
}

// headRecords re-encodes the first keep records of a payload.
func headRecords(payload []byte, keep int32) ([]byte, error) {
	var records [][]byte
	rest := payload
	for range keep {
		n, w := binary.Uvarint(rest)
		if w <= 0 || n > uint64(len(rest)-w) {
			return nil, fmt.Errorf("%w: cannot cut batch after %d records", ErrCorrupt, keep)
		}
		records = append(records, rest[w:w+int(n)])
		rest = rest[w+int(n):]
	}
	return encodeRecords(records), nil
}

func (a *ISRLog) Flush() { a.keep(a.log.Flush()) }

func (a *ISRLog) FlushedOffset() int64 { return a.log.FlushedOffset() }

func (a *ISRLog) LatestEpoch() int32 { return a.log.LatestEpoch() }

func (a *ISRLog) AssignEpochStart(epoch int32, offset int64) {
	a.keep(a.log.AssignEpochStart(epoch, offset))
}

func (a *ISRLog) EndOffsetForEpoch(epoch int32) isr.EpochEndOffset {
	return a.log.EndOffsetForEpoch(epoch)
}

func (a *ISRLog) HighWatermarkCheckpoint() int64 { return a.log.HighWatermarkCheckpoint() }

func (a *ISRLog) CheckpointHighWatermark(hw int64) { a.keep(a.log.CheckpointHighWatermark(hw)) }
