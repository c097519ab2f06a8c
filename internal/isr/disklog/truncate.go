package disklog

import (
	"fmt"
	"sort"

	"github.com/cockroachdb/pebble/v2/vfs"

	"quire/internal/invariants"
)

// TruncateTo removes the batches at or after offset: the batch holding
// offset goes whole, as in Kafka, so the new LEO (returned) may be below
// offset. Epoch cache entries starting at or after the new LEO go too. It is
// durable when it returns; a failure fails the log (the in-memory view is
// truncated all the same).
func (l *Log) TruncateTo(offset int64) (int64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.writable(); err != nil {
		return l.leo(), err
	}
	return l.truncateLocked(offset, nil)
}

// reencodeFunc returns the payload of the first keep records of a batch's
// payload (ISRLog's cut inside a batch).
type reencodeFunc func(payload []byte, keep int32) ([]byte, error)

func (l *Log) truncateLocked(offset int64, reencode reencodeFunc) (int64, error) {
	if invariants.Enabled {
		defer l.checkInvariants()
	}
	offset = max(offset, 0)
	leo := l.leo()
	if offset >= leo {
		if l.epochs.truncateFromEnd(leo) {
			return leo, l.writeEpochs()
		}
		return leo, nil
	}
	if offset < l.logStart {
		// Kafka: truncating below the log start empties the log there.
		return offset, l.truncateFullyLocked(offset)
	}
	si := sort.Search(len(l.segments), func(i int) bool { return l.segments[i].base > offset }) - 1
	s := l.segments[si]
	pos, h, err := s.findBatch(offset, l.cfg.MaxBatchBytes)
	if err != nil {
		return leo, l.fail(fmt.Errorf("truncate to %d: %w", offset, err))
	}
	if h.baseOffset < l.logStart && reencode == nil {
		// The whole batch goes, and it starts below the log start (moved
		// inside it): nothing is left, and the log starts where it did.
		return l.logStart, l.truncateFullyLocked(l.logStart)
	}
	var tail []byte
	var tailHeader batchHeader
	if h.baseOffset < offset && reencode != nil {
		b, err := s.readBatch(pos, h)
		if err != nil {
			return leo, l.fail(fmt.Errorf("truncate to %d: %w", offset, err))
		}
		payload, err := reencode(b[batchHeaderLen:], int32(offset-h.baseOffset))
		if err != nil {
			return leo, l.fail(fmt.Errorf("truncate to %d: %w", offset, err))
		}
		tailHeader = h
		tailHeader.count, tailHeader.payloadLen = int32(offset-h.baseOffset), uint32(len(payload))
		tail = encodeBatch(tailHeader, payload)
	}
	// The in-memory view first, so that it is truncated even when the disk
	// work fails: the segment keeps the batches before pos, its indexes are
	// rebuilt from their headers (a rare operation: cost is one header
	// read per batch of one segment).
	later := l.segments[si+1:]
	l.segments = l.segments[:si+1]
	if err := l.resetSegment(s, pos); err != nil {
		return l.leo(), l.fail(fmt.Errorf("truncate to %d: %w", offset, err))
	}
	if tail != nil {
		s.noteBatch(tailHeader, pos, l.cfg.IndexIntervalBytes)
	}
	newEnd := l.leo()
	l.flushed = min(l.flushed, newEnd)
	l.epochs.truncateFromEnd(newEnd)

	// On disk: recovery must scan the cut segment, so the recovery point
	// goes down first; then later segments go (last first, so a crash
	// leaves a prefix), then the cut itself, durably; then the epochs.
	if l.recoveryPoint > h.baseOffset {
		if err := l.writeFileAtomic(recoveryPointFile, offsetCheckpoint(h.baseOffset)); err != nil {
			return newEnd, l.fail(fmt.Errorf("checkpoint recovery point: %w", err))
		}
		l.recoveryPoint = h.baseOffset
	}
	for j := len(later) - 1; j >= 0; j-- {
		if err := l.removeSegment(later[j]); err != nil {
			return newEnd, l.fail(err)
		}
	}
	if len(later) > 0 {
		if err := l.syncDir(); err != nil {
			return newEnd, l.fail(err)
		}
	}
	if err := l.cutSegmentFile(s, pos, tail); err != nil {
		return newEnd, l.fail(fmt.Errorf("truncate to %d: %w", offset, err))
	}
	s.dirty, s.tornTail = false, false
	for _, suffix := range []string{indexSuffix, timeIndexSuffix} {
		// The cut segment is active now, its indexes in memory; stale files
		// would be rebuilt by recovery, which scans it.
		_ = l.cfg.FS.Remove(l.path(segmentName(s.base, suffix)))
	}
	return newEnd, l.writeEpochs()
}

// resetSegment cuts s's in-memory state at pos and rebuilds its in-memory
// indexes from the headers before pos.
func (l *Log) resetSegment(s *segment, pos int64) error {
	s.closeIndexes()
	s.index, s.timeIndex = nil, nil
	s.next, s.firstTimestamp, s.maxTimestamp, s.offsetOfMaxTimestamp, s.bytesSinceIndex = s.base, -1, -1, s.base, 0
	for p := int64(0); p < pos; {
		h, err := s.readHeaderWithin(p, pos, l.cfg.MaxBatchBytes)
		if err != nil {
			return err
		}
		s.noteBatch(h, p, l.cfg.IndexIntervalBytes)
		p += h.size()
	}
	s.size = pos
	return nil
}

// cutSegmentFile makes s's file its first pos bytes followed by tail,
// durably: ftruncate and fsync where the file can (vfs.Default), otherwise
// (and whenever there is a tail) a copy synced and renamed over the file.
func (l *Log) cutSegmentFile(s *segment, pos int64, tail []byte) error {
	type truncater interface{ Truncate(size int64) error }
	if t, ok := s.file.(truncater); ok && tail == nil {
		if err := t.Truncate(pos); err != nil {
			return fmt.Errorf("truncate segment %d: %w", s.base, err)
		}
		if l.cfg.hooks.skipSegmentSync {
			return nil
		}
		return s.file.Sync()
	}
	name := l.path(segmentName(s.base, logSuffix))
	tmp := name + tmpSuffix
	f, err := l.cfg.FS.Create(tmp, vfs.WriteCategoryUnspecified)
	if err != nil {
		return fmt.Errorf("create %s: %w", tmp, err)
	}
	buf := make([]byte, 1<<20)
	for off := int64(0); off < pos; {
		n := min(int64(len(buf)), pos-off)
		if _, err := s.file.ReadAt(buf[:n], off); err != nil {
			_ = f.Close()
			return fmt.Errorf("read segment %d: %w", s.base, err)
		}
		if _, err := f.Write(buf[:n]); err != nil {
			_ = f.Close()
			return fmt.Errorf("write %s: %w", tmp, err)
		}
		off += n
	}
	if _, err := f.Write(tail); err != nil {
		_ = f.Close()
		return fmt.Errorf("write %s: %w", tmp, err)
	}
	if err := f.Sync(); err != nil {
		_ = f.Close()
		return fmt.Errorf("sync %s: %w", tmp, err)
	}
	if err := l.cfg.FS.Rename(tmp, name); err != nil {
		_ = f.Close()
		return fmt.Errorf("rename %s: %w", tmp, err)
	}
	_ = s.file.Close()
	s.file = f
	return l.syncDir()
}

// removeSegment closes and deletes a segment's files.
func (l *Log) removeSegment(s *segment) error {
	_ = s.close()
	for _, suffix := range []string{logSuffix, indexSuffix, timeIndexSuffix} {
		name := l.path(segmentName(s.base, suffix))
		if err := l.cfg.FS.Remove(name); err != nil && suffix == logSuffix {
			if _, statErr := l.cfg.FS.Stat(name); statErr == nil {
				return fmt.Errorf("remove %s: %w", name, err)
			}
		}
	}
	return nil
}

// TruncateFullyAndStartAt empties the log and starts it at offset (a
// follower whose log is behind the leader's log start). Durable when it
// returns; a failure fails the log.
func (l *Log) TruncateFullyAndStartAt(offset int64) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.writable(); err != nil {
		return err
	}
	if offset < 0 {
		return fmt.Errorf("%w: start at %d", ErrInvalidAppend, offset)
	}
	return l.truncateFullyLocked(offset)
}

// truncateFullyLocked: segments are deleted last first (a crash leaves a
// prefix of the log, or none), then the log start checkpoint commits the
// new start; recovery finishes the rest (a log start past every segment
// empties the log there).
func (l *Log) truncateFullyLocked(offset int64) error {
	if invariants.Enabled {
		defer l.checkInvariants()
	}
	old := l.segments
	fresh := newSegment(offset, nil)
	l.segments = []*segment{fresh}
	l.logStart, l.flushed = offset, offset
	l.epochs.entries = nil
	for j := len(old) - 1; j >= 0; j-- {
		if err := l.removeSegment(old[j]); err != nil {
			return l.fail(err)
		}
	}
	if err := l.syncDir(); err != nil {
		return l.fail(err)
	}
	if err := l.writeFileAtomic(logStartCheckpointFile, offsetCheckpoint(offset)); err != nil {
		return l.fail(fmt.Errorf("checkpoint log start: %w", err))
	}
	if err := l.writeFileAtomic(recoveryPointFile, offsetCheckpoint(offset)); err != nil {
		return l.fail(fmt.Errorf("checkpoint recovery point: %w", err))
	}
	l.recoveryPoint = offset
	if err := l.writeEpochs(); err != nil {
		return err
	}
	f, err := l.cfg.FS.Create(l.path(segmentName(offset, logSuffix)), vfs.WriteCategoryUnspecified)
	if err != nil {
		return l.fail(fmt.Errorf("create segment %d: %w", offset, err))
	}
	fresh.file = f
	if err := l.syncDir(); err != nil {
		return l.fail(err)
	}
	return nil
}
