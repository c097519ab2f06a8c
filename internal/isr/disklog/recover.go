package disklog

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// recover loads the log from its directory (Kafka's LogLoader):
//
//  1. leftover temporary files go; checkpoints are read (a missing one is
//     its default; a malformed recovery point means "recover everything");
//  2. segments wholly below the log start go (a deletion a crash cut short);
//  3. segments before the one holding the recovery point are trusted: their
//     size is the file's, their indexes are checked and rebuilt if missing
//     or invalid;
//  4. from that segment on every batch is read and checked (CRC, offset
//     sequence from the segment's base, each segment starting where the
//     previous ended); the first bad batch and everything after it are cut,
//     later segments deleted; batches of newer epochs start them in the
//     cache (a cache write a crash lost);
//  5. the log start is fitted to the segments (a log start past the end
//     finishes TruncateFullyAndStartAt), the epoch cache truncated to the
//     log start and the recovered LEO;
//  6. what recovery kept is synced, so the flushed offset is the LEO.
func (l *Log) recover() error {
	fs, dir := l.cfg.FS, l.cfg.Dir
	if err := fs.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	// The directory and every ancestor, so that the directory survives a
	// crash (vfs.MemFS drops unsynced entries, as a real file system may).
	for d := dir; !l.cfg.hooks.skipDirSync; d = fs.PathDir(d) {
		if err := syncPath(fs, d); err != nil {
			return err
		}
		if fs.PathDir(d) == d {
			break
		}
	}
	names, err := fs.List(dir)
	if err != nil {
		return err
	}
	var bases []int64
	for _, name := range names {
		if strings.HasSuffix(name, tmpSuffix) {
			if err := fs.Remove(l.path(name)); err != nil {
				return fmt.Errorf("remove %s: %w", name, err)
			}
			continue
		}
		if base, ok := parseSegmentName(name, logSuffix); ok {
			bases = append(bases, base)
		}
	}
	slices.Sort(bases)

	logStart := int64(-1)
	if data, ok, err := readFile(fs, l.path(logStartCheckpointFile)); err != nil {
		return err
	} else if ok {
		if logStart, err = parseOffsetCheckpoint(data); err != nil {
			return fmt.Errorf("%s: %w", logStartCheckpointFile, err)
		}
	}
	if data, ok, err := readFile(fs, l.path(recoveryPointFile)); err != nil {
		return err
	} else if ok {
		if rp, err := parseOffsetCheckpoint(data); err == nil {
			l.recoveryPoint = rp
		} else {
			l.recoveryPoint = -1 // recover everything, and write it again
		}
	}
	if data, ok, err := readFile(fs, l.path(hwCheckpointFile)); err != nil {
		return err
	} else if ok {
		if l.hw, err = parseOffsetCheckpoint(data); err != nil {
			return fmt.Errorf("%s: %w", hwCheckpointFile, err)
		}
	}
	var savedEpochs []EpochEntry
	if data, ok, err := readFile(fs, l.path(epochCheckpointFile)); err != nil {
		return err
	} else if ok {
		if savedEpochs, err = parseEpochCheckpoint(data); err != nil {
			return err
		}
	}
	l.epochs.entries = slices.Clone(savedEpochs)

	// 2. Segments wholly below the log start.
	for len(bases) > 1 && bases[1] <= logStart {
		if err := l.removeSegment(&segment{base: bases[0]}); err != nil {
			return err
		}
		bases = bases[1:]
	}

	// 3 and 4.
	firstScan := 0
	for i, b := range bases {
		if b <= l.recoveryPoint {
			firstScan = i
		}
	}
	for i, base := range bases {
		f, err := fs.OpenReadWrite(l.path(segmentName(base, logSuffix)), vfs.WriteCategoryUnspecified)
		if err != nil {
			return err
		}
		s := newSegment(base, f)
		if i > 0 && base != l.leo() {
			// Not where the previous segment ended: a segment that a
			// truncation deleted, or one past a corrupt batch.
			_ = f.Close()
			if err := l.removeSegments(bases[i:]); err != nil {
				return err
			}
			break
		}
		l.segments = append(l.segments, s)
		if i < firstScan {
			if err := l.loadTrusted(s, bases[i+1]); err != nil {
				return err
			}
			continue
		}
		res, err := scanSegment(f, base, l.cfg.MaxBatchBytes, l.cfg.hooks.skipRecoveryCRC, func(h batchHeader, pos int64) {
			s.noteBatch(h, pos, l.cfg.IndexIntervalBytes)
			l.epochs.assign(h.epoch, h.baseOffset)
			l.stats.RecoveredBatches++
		})
		if err != nil {
			return fmt.Errorf("recover segment %d: %w", base, err)
		}
		l.stats.RecoveredSegments++
		s.dirty = true
		if res.size < res.fileSize {
			l.stats.TruncatedBytes += res.fileSize - res.size
			if err := l.cutSegmentFile(s, res.size, nil); err != nil {
				return err
			}
			if err := l.removeSegments(bases[i+1:]); err != nil {
				return err
			}
			break
		}
	}
	for i, s := range l.segments {
		// Stale index files of scanned segments: their indexes are in
		// memory now, and Flush writes those of rolled ones, ending with
		// the max timestamp as at a roll.
		if s.indexInMemory {
			if i < len(l.segments)-1 {
				s.maybeTimeEntry()
			}
			for _, suffix := range []string{indexSuffix, timeIndexSuffix} {
				_ = fs.Remove(l.path(segmentName(s.base, suffix)))
			}
		}
	}

	// 5. The log start and the epoch cache.
	switch {
	case len(l.segments) == 0:
		l.logStart = max(logStart, 0)
		if err := l.createEmpty(l.logStart); err != nil {
			return err
		}
	case logStart > l.leo():
		for j := len(l.segments) - 1; j >= 0; j-- {
			if err := l.removeSegment(l.segments[j]); err != nil {
				return err
			}
		}
		l.segments, l.logStart = nil, logStart
		if err := l.createEmpty(logStart); err != nil {
			return err
		}
	default:
		l.logStart = max(logStart, l.segments[0].base)
	}
	if l.logStart != logStart {
		if err := l.writeFileAtomic(logStartCheckpointFile, offsetCheckpoint(l.logStart)); err != nil {
			return err
		}
	}
	l.epochs.truncateFromStart(l.logStart)
	if !l.cfg.hooks.keepEpochsPastEnd {
		l.epochs.truncateFromEnd(l.leo())
	}
	if !slices.Equal(l.epochs.entries, savedEpochs) {
		if err := l.writeFileAtomic(epochCheckpointFile, l.epochs.encode()); err != nil {
			return err
		}
	}

	// 6. Make what recovery kept durable: the page cache may hold more
	// than the disk after a process crash.
	// The directory always: removals before a failure (or a crash) that
	// were never synced must not come back at the next crash.
	l.dirDirty = true
	if err := l.flushLocked(); err != nil {
		return err
	}
	// Everything is durable now: the recovery point is the LEO. Written
	// whenever the file says otherwise, as a recovery point past the LEO
	// (left by a TruncateFullyAndStartAt that failed) would make the next
	// recovery trust segments written after it.
	if l.recoveryPoint != l.leo() {
		if err := l.writeFileAtomic(recoveryPointFile, offsetCheckpoint(l.leo())); err != nil {
			return err
		}
		l.recoveryPoint = l.leo()
	}
	return nil
}

// loadTrusted loads a segment before the recovery point: flushed before
// the recovery point was checkpointed, so its file size is its size and the
// next segment's base its end. Its indexes are checked and, if missing or
// invalid, rebuilt from its batches.
func (l *Log) loadTrusted(s *segment, next int64) error {
	st, err := s.file.Stat()
	if err != nil {
		return err
	}
	s.size, s.next, s.firstTimestamp = st.Size(), next, -1
	ok, err := s.loadIndexes(l.cfg.FS, l.cfg.Dir, l.cfg.MaxBatchBytes)
	if err != nil || ok {
		return err
	}
	l.stats.RebuiltIndexes++
	s.next, s.size = s.base, 0
	res, err := scanSegment(s.file, s.base, l.cfg.MaxBatchBytes, false, func(h batchHeader, pos int64) {
		s.noteBatch(h, pos, l.cfg.IndexIntervalBytes)
	})
	if err != nil {
		return err
	}
	if res.stopped != nil || res.next != next {
		// Flushed data that no longer reads back: refuse to guess.
		return fmt.Errorf("segment %d before the recovery point is corrupt (ends at %d, next segment at %d): %v", s.base, res.next, next, res.stopped)
	}
	s.maybeTimeEntry()
	return l.writeIndexes(s)
}

// removeSegments deletes the files of segments by base, last first.
func (l *Log) removeSegments(bases []int64) error {
	for j := len(bases) - 1; j >= 0; j-- {
		if err := l.removeSegment(&segment{base: bases[j]}); err != nil {
			return err
		}
		l.stats.DeletedSegments++
	}
	return nil
}

// createEmpty makes an empty active segment at base.
func (l *Log) createEmpty(base int64) error {
	f, err := l.cfg.FS.Create(l.path(segmentName(base, logSuffix)), vfs.WriteCategoryUnspecified)
	if err != nil {
		return err
	}
	l.segments = append(l.segments, newSegment(base, f))
	l.dirDirty = true
	return nil
}

// syncPath syncs a directory by path.
func syncPath(fs vfs.FS, dir string) error {
	d, err := fs.OpenDir(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	return errors.Join(err, d.Close())
}
