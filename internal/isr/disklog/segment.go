package disklog

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"sort"

	"github.com/cockroachdb/pebble/v2/vfs"
)

const (
	logSuffix       = ".log"
	indexSuffix     = ".index"
	timeIndexSuffix = ".timeindex"
	indexEntryLen   = 8  // relative offset uint32, position uint32
	timeEntryLen    = 12 // timestamp int64, relative offset uint32
)

func segmentName(base int64, suffix string) string { return fmt.Sprintf("%020d%s", base, suffix) }

// indexEntry maps the base offset of a batch (relative to the segment's)
// to its position in the segment file.
type indexEntry struct {
	rel uint32
	pos uint32
}

// timeEntry says that no batch before the one at base offset rel (relative)
// has a max timestamp ≥ ts, and that one has ts (the segment's max timestamp
// so far, first reached there).
type timeEntry struct {
	ts  int64
	rel uint32
}

// segment is one file of stored batches and its sparse indexes.
//
// The index entries of the active segment, and of a rolled one until the
// Flush that syncs it, are held in memory (indexInMemory); after that they
// are read from the index files with a binary search.
type segment struct {
	base int64
	// Invariant: base ≤ next; size is the validated (logical) end of the
	// file, and nothing past it is ever served.
	next int64
	size int64
	file vfs.File
	// dirty: written since its last sync.
	dirty bool
	// tornTail: a failed write may have left bytes past size.
	tornTail bool

	firstTimestamp       int64 // of the first batch; -1 when empty
	maxTimestamp         int64 // -1 when empty
	offsetOfMaxTimestamp int64

	indexInMemory   bool
	index           []indexEntry
	timeIndex       []timeEntry
	indexFile       vfs.File // when !indexInMemory
	timeIndexFile   vfs.File
	indexCount      int64
	timeIndexCount  int64
	bytesSinceIndex int64
}

func newSegment(base int64, f vfs.File) *segment {
	return &segment{base: base, next: base, file: f, firstTimestamp: -1, maxTimestamp: -1, offsetOfMaxTimestamp: base, indexInMemory: true}
}

// noteBatch updates the in-memory indexes for a batch written at pos.
func (s *segment) noteBatch(h batchHeader, pos, interval int64) {
	if s.firstTimestamp < 0 && pos == 0 {
		s.firstTimestamp = h.maxTimestamp
	}
	if h.maxTimestamp > s.maxTimestamp {
		s.maxTimestamp, s.offsetOfMaxTimestamp = h.maxTimestamp, h.baseOffset
	}
	if pos > 0 && s.bytesSinceIndex >= interval {
		s.index = append(s.index, indexEntry{rel: uint32(h.baseOffset - s.base), pos: uint32(pos)})
		s.maybeTimeEntry()
		s.bytesSinceIndex = 0
	}
	s.bytesSinceIndex += h.size()
	s.next = h.nextOffset()
	s.size = pos + h.size()
}

// maybeTimeEntry adds a time index entry when the max timestamp grew since
// the last one.
func (s *segment) maybeTimeEntry() {
	if s.maxTimestamp < 0 {
		return
	}
	if n := len(s.timeIndex); n > 0 && s.timeIndex[n-1].ts >= s.maxTimestamp {
		return
	}
	s.timeIndex = append(s.timeIndex, timeEntry{ts: s.maxTimestamp, rel: uint32(s.offsetOfMaxTimestamp - s.base)})
}

func (s *segment) indexLen() int64 {
	if s.indexInMemory {
		return int64(len(s.index))
	}
	return s.indexCount
}

func (s *segment) indexAt(i int64) (indexEntry, error) {
	if s.indexInMemory {
		return s.index[i], nil
	}
	var b [indexEntryLen]byte
	if _, err := s.indexFile.ReadAt(b[:], i*indexEntryLen); err != nil {
		return indexEntry{}, fmt.Errorf("read index of segment %d: %w", s.base, err)
	}
	return indexEntry{rel: binary.BigEndian.Uint32(b[0:]), pos: binary.BigEndian.Uint32(b[4:])}, nil
}

func (s *segment) timeIndexLen() int64 {
	if s.indexInMemory {
		return int64(len(s.timeIndex))
	}
	return s.timeIndexCount
}

func (s *segment) timeIndexAt(i int64) (timeEntry, error) {
	if s.indexInMemory {
		return s.timeIndex[i], nil
	}
	var b [timeEntryLen]byte
	if _, err := s.timeIndexFile.ReadAt(b[:], i*timeEntryLen); err != nil {
		return timeEntry{}, fmt.Errorf("read time index of segment %d: %w", s.base, err)
	}
	return timeEntry{ts: int64(binary.BigEndian.Uint64(b[0:])), rel: binary.BigEndian.Uint32(b[8:])}, nil
}

// floor returns the position of the last indexed batch starting at or
// before target (0: the segment's first batch).
func (s *segment) floor(target int64) (int64, error) {
	n := s.indexLen()
	var err error
	// The first entry past target; the one before it is the floor.
	i := sort.Search(int(n), func(i int) bool {
		e, e2 := s.indexAt(int64(i))
		if e2 != nil {
			err = e2
			return true
		}
		return s.base+int64(e.rel) > target
	})
	if err != nil || i == 0 {
		return 0, err
	}
	e, err := s.indexAt(int64(i - 1))
	return int64(e.pos), err
}

// timeFloor returns the base offset from which to scan for the first batch
// whose max timestamp is ≥ ts.
func (s *segment) timeFloor(ts int64) (int64, error) {
	n := s.timeIndexLen()
	var err error
	i := sort.Search(int(n), func(i int) bool {
		e, e2 := s.timeIndexAt(int64(i))
		if e2 != nil {
			err = e2
			return true
		}
		return e.ts >= ts
	})
	if err != nil || i == 0 {
		return s.base, err
	}
	e, err := s.timeIndexAt(int64(i - 1))
	return s.base + int64(e.rel), err
}

// readHeader reads and checks the header of the batch at pos.
func (s *segment) readHeader(pos, maxPayload int64) (batchHeader, error) {
	return s.readHeaderWithin(pos, s.size, maxPayload)
}

// readHeaderWithin reads and checks the header of the batch at pos, which
// must end by end.
func (s *segment) readHeaderWithin(pos, end, maxPayload int64) (batchHeader, error) {
	var b [batchHeaderLen]byte
	if pos+batchHeaderLen > end {
		return batchHeader{}, fmt.Errorf("%w: segment %d: header at %d past the end %d", ErrCorrupt, s.base, pos, end)
	}
	if _, err := s.file.ReadAt(b[:], pos); err != nil {
		return batchHeader{}, fmt.Errorf("read segment %d at %d: %w", s.base, pos, err)
	}
	h, err := decodeHeader(b[:], maxPayload)
	if err != nil {
		return h, fmt.Errorf("segment %d at %d: %w", s.base, pos, err)
	}
	if pos+h.size() > end {
		return h, fmt.Errorf("%w: segment %d: batch at %d ends past the end %d", ErrCorrupt, s.base, pos, end)
	}
	return h, nil
}

// findBatch returns the position and header of the batch holding offset
// target (base ≤ target < next).
func (s *segment) findBatch(target, maxPayload int64) (int64, batchHeader, error) {
	pos, err := s.floor(target)
	if err != nil {
		return 0, batchHeader{}, err
	}
	for pos < s.size {
		h, err := s.readHeader(pos, maxPayload)
		if err != nil {
			return 0, h, err
		}
		if h.nextOffset() > target {
			return pos, h, nil
		}
		pos += h.size()
	}
	return 0, batchHeader{}, fmt.Errorf("%w: segment %d has no batch holding offset %d", ErrCorrupt, s.base, target)
}

// readBatch reads the whole stored batch at pos and verifies it.
func (s *segment) readBatch(pos int64, h batchHeader) ([]byte, error) {
	b := make([]byte, h.size())
	if _, err := s.file.ReadAt(b, pos); err != nil {
		return nil, fmt.Errorf("read segment %d at %d: %w", s.base, pos, err)
	}
	if !checkCRC(b) {
		return nil, fmt.Errorf("%w: segment %d: batch at offset %d (position %d) fails its CRC", ErrCorrupt, s.base, h.baseOffset, pos)
	}
	return b, nil
}

// scanResult is what a scan of a segment file found valid.
type scanResult struct {
	size     int64 // bytes of valid batches
	next     int64 // offset after the last valid batch
	fileSize int64
	stopped  error // why the scan stopped before the end of the file; nil at a clean end
}

// scanSegment reads the file's batches in order from position 0, checking
// each (magic, lengths, CRC unless skipCRC, base offset = the previous
// batch's next offset, starting at base) and calling visit for the valid
// ones. It stops at the first invalid batch. An error is an I/O failure.
func scanSegment(f vfs.File, base, maxPayload int64, skipCRC bool, visit func(h batchHeader, pos int64)) (scanResult, error) {
	st, err := f.Stat()
	if err != nil {
		return scanResult{}, err
	}
	res := scanResult{next: base, fileSize: st.Size()}
	r := bufio.NewReaderSize(io.NewSectionReader(f, 0, res.fileSize), 256<<10)
	var buf []byte
	for res.size < res.fileSize {
		if res.fileSize-res.size < batchHeaderLen {
			res.stopped = fmt.Errorf("%w: %d trailing bytes", ErrCorrupt, res.fileSize-res.size)
			return res, nil
		}
		if cap(buf) < batchHeaderLen {
			buf = make([]byte, 0, 64<<10)
		}
		buf = buf[:batchHeaderLen]
		if _, err := io.ReadFull(r, buf); err != nil {
			return res, err
		}
		h, err := decodeHeader(buf, maxPayload)
		if err != nil {
			res.stopped = err
			return res, nil
		}
		if h.baseOffset != res.next {
			res.stopped = fmt.Errorf("%w: batch at offset %d where %d was next", ErrCorrupt, h.baseOffset, res.next)
			return res, nil
		}
		if h.size() > res.fileSize-res.size {
			res.stopped = fmt.Errorf("%w: batch of %d bytes with %d left", ErrCorrupt, h.size(), res.fileSize-res.size)
			return res, nil
		}
		if int64(cap(buf)) < h.size() {
			nb := make([]byte, h.size(), max(h.size(), 2*int64(cap(buf))))
			copy(nb, buf)
			buf = nb
		}
		buf = buf[:h.size()]
		if _, err := io.ReadFull(r, buf[batchHeaderLen:]); err != nil {
			return res, err
		}
		if !skipCRC && !checkCRC(buf) {
			res.stopped = fmt.Errorf("%w: batch at offset %d fails its CRC", ErrCorrupt, h.baseOffset)
			return res, nil
		}
		if res.size+h.size() > math.MaxUint32 {
			res.stopped = fmt.Errorf("%w: segment past 4 GiB", ErrCorrupt)
			return res, nil
		}
		visit(h, res.size)
		res.size += h.size()
		res.next = h.nextOffset()
	}
	return res, nil
}

// encodeIndexes returns the index files' contents from the in-memory
// entries.
func (s *segment) encodeIndexes() (index, timeIndex []byte) {
	index = make([]byte, 0, len(s.index)*indexEntryLen)
	for _, e := range s.index {
		index = binary.BigEndian.AppendUint32(index, e.rel)
		index = binary.BigEndian.AppendUint32(index, e.pos)
	}
	timeIndex = make([]byte, 0, len(s.timeIndex)*timeEntryLen)
	for _, e := range s.timeIndex {
		timeIndex = binary.BigEndian.AppendUint64(timeIndex, uint64(e.ts))
		timeIndex = binary.BigEndian.AppendUint32(timeIndex, e.rel)
	}
	return index, timeIndex
}

// loadIndexes opens a rolled segment's index files and checks them against
// the segment: entry sizes, increasing offsets and positions within the
// segment, the last offset entry naming a real batch. It reports false when
// they are missing or invalid (the caller rebuilds them).
func (s *segment) loadIndexes(fs vfs.FS, dir string, maxPayload int64) (bool, error) {
	open := func(suffix string, entryLen int64) (vfs.File, int64, bool) {
		f, err := fs.Open(fs.PathJoin(dir, segmentName(s.base, suffix)))
		if err != nil {
			return nil, 0, false
		}
		st, err := f.Stat()
		if err != nil || st.Size()%entryLen != 0 {
			_ = f.Close()
			return nil, 0, false
		}
		return f, st.Size() / entryLen, true
	}
	idx, n, ok := open(indexSuffix, indexEntryLen)
	if !ok {
		return false, nil
	}
	tidx, tn, ok := open(timeIndexSuffix, timeEntryLen)
	if !ok {
		_ = idx.Close()
		return false, nil
	}
	s.indexInMemory, s.indexFile, s.timeIndexFile, s.indexCount, s.timeIndexCount = false, idx, tidx, n, tn
	valid := func() bool {
		var prev indexEntry
		for i := range n {
			e, err := s.indexAt(i)
			if err != nil || int64(e.pos) >= s.size || s.base+int64(e.rel) >= s.next || (i > 0 && (e.rel <= prev.rel || e.pos <= prev.pos)) {
				return false
			}
			prev = e
		}
		if n > 0 {
			if h, err := s.readHeader(int64(prev.pos), maxPayload); err != nil || h.baseOffset != s.base+int64(prev.rel) {
				return false
			}
		}
		var prevT timeEntry
		for i := range tn {
			e, err := s.timeIndexAt(i)
			if err != nil || s.base+int64(e.rel) >= s.next || (i > 0 && (e.ts <= prevT.ts || e.rel < prevT.rel)) {
				return false
			}
			prevT = e
		}
		if tn > 0 {
			s.maxTimestamp, s.offsetOfMaxTimestamp = prevT.ts, s.base+int64(prevT.rel)
		}
		return true
	}
	if !valid() {
		s.closeIndexes()
		return false, nil
	}
	return true, nil
}

func (s *segment) closeIndexes() {
	if s.indexFile != nil {
		_ = s.indexFile.Close()
	}
	if s.timeIndexFile != nil {
		_ = s.timeIndexFile.Close()
	}
	s.indexFile, s.timeIndexFile, s.indexCount, s.timeIndexCount = nil, nil, 0, 0
	s.indexInMemory = true
}

func (s *segment) close() error {
	s.closeIndexes()
	if s.file == nil {
		return nil
	}
	err := s.file.Close()
	s.file = nil
	return err
}
