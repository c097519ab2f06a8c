package disklog

import (
	"fmt"

	"quire/internal/invariants"
	"quire/internal/isr"
)

// DeleteRecordsBefore moves the log start offset up to offset (≤ LEO) and
// deletes the segments wholly below it, never the active one. Durable when
// it returns.
func (l *Log) DeleteRecordsBefore(offset int64) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.writable(); err != nil {
		return err
	}
	if offset > l.leo() {
		return fmt.Errorf("%w: delete records before %d, LEO %d", isr.ErrOffsetOutOfRange, offset, l.leo())
	}
	return l.advanceLogStart(offset)
}

// EnforceRetention deletes the oldest segments that RetentionMs (by their
// max timestamp against nowMs) or RetentionBytes (the log's size) no longer
// keep, only whole segments below highWatermark and never the active one,
// and moves the log start offset to the first segment kept. It returns how
// many segments it deleted.
func (l *Log) EnforceRetention(nowMs, highWatermark int64) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.writable(); err != nil {
		return 0, err
	}
	var total int64
	for _, s := range l.segments {
		total += s.size
	}
	k := 0
	for ; k < len(l.segments)-1; k++ {
		s := l.segments[k]
		if s.next > highWatermark {
			break
		}
		byTime := l.cfg.RetentionMs > 0 && s.maxTimestamp >= 0 && nowMs-s.maxTimestamp > l.cfg.RetentionMs
		bySize := l.cfg.RetentionBytes > 0 && total-s.size >= l.cfg.RetentionBytes
		if !byTime && !bySize {
			break
		}
		total -= s.size
	}
	if k == 0 {
		return 0, nil
	}
	return k, l.advanceLogStart(l.segments[k].base)
}

// advanceLogStart checkpoints the new log start first (recovery deletes
// segments below it, finishing a deletion a crash interrupted), then
// truncates the epoch cache from the start and deletes the segments.
func (l *Log) advanceLogStart(offset int64) error {
	if invariants.Enabled {
		defer l.checkInvariants()
	}
	if offset <= l.logStart {
		return nil
	}
	// In memory first: a failure leaves the log failed with the view the
	// caller asked for.
	l.logStart = offset
	epochsChanged := l.epochs.truncateFromStart(offset)
	if !l.cfg.hooks.logStartAfterDeletes {
		if err := l.writeFileAtomic(logStartCheckpointFile, offsetCheckpoint(offset)); err != nil {
			return l.fail(fmt.Errorf("checkpoint log start: %w", err))
		}
	}
	if epochsChanged {
		if err := l.writeEpochs(); err != nil {
			return err
		}
	}
	k := 0
	for k < len(l.segments)-1 && l.segments[k].next <= offset {
		k++
	}
	gone := l.segments[:k]
	l.segments = l.segments[k:]
	for _, s := range gone {
		if err := l.removeSegment(s); err != nil {
			return l.fail(err)
		}
	}
	if k > 0 {
		if err := l.syncDir(); err != nil {
			return l.fail(err)
		}
	}
	if l.cfg.hooks.logStartAfterDeletes {
		if err := l.writeFileAtomic(logStartCheckpointFile, offsetCheckpoint(offset)); err != nil {
			return l.fail(fmt.Errorf("checkpoint log start: %w", err))
		}
	}
	return nil
}

// OffsetForTimestamp is ListOffsets by time: the first offset (at or after
// the log start) of the first batch whose max timestamp is ≥ ts.
func (l *Log) OffsetForTimestamp(ts int64) (int64, bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return 0, false, ErrClosed
	}
	for _, s := range l.segments {
		if s.maxTimestamp < ts || s.size == 0 {
			continue
		}
		from, err := s.timeFloor(ts)
		if err != nil {
			return 0, false, err
		}
		pos, h, err := s.findBatch(from, l.cfg.MaxBatchBytes)
		if err != nil {
			return 0, false, err
		}
		for {
			if h.maxTimestamp >= ts {
				return max(h.baseOffset, l.logStart), true, nil
			}
			pos += h.size()
			if pos >= s.size {
				break
			}
			if h, err = s.readHeader(pos, l.cfg.MaxBatchBytes); err != nil {
				return 0, false, err
			}
		}
	}
	return 0, false, nil
}
