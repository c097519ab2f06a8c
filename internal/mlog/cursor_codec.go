package mlog

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math"

	"quire/internal/invariants"
)

// Cursor snapshot, version 1. Integers are Go varints (binary.AppendUvarint,
// and zigzag binary.AppendVarint for signed values), always in their shortest
// form so that one state has exactly one encoding:
//
//	version       1 byte, = 1
//	name length   uvarint, <= MaxCursorNameLen
//	name          bytes
//	markDelete    varint ledger, varint entry
//	range count   uvarint
//	ranges        lowest first; each relative to prev (markDelete for the
//	              first range, the previous range's Hi after that):
//	                uvarint lo.ledger - prev.ledger
//	                if 0: uvarint lo.entry - prev.entry - 2 (a range never
//	                      touches prev within a ledger: it would be merged)
//	                else: varint lo.entry
//	                uvarint hi.ledger - lo.ledger
//	                if 0: uvarint hi.entry - lo.entry
//	                else: varint hi.entry
//	crc           4 bytes big endian, CRC-32C of every byte before it
//
// A range takes 4 bytes or more, so a snapshot of 10,000 ranges of nearby
// positions is about 40-60 KB.

// snapshotVersion is the first byte of every snapshot this code writes.
const snapshotVersion = 1

// MaxCursorNameLen bounds a cursor's name (bytes), so that a corrupt length
// cannot make Restore allocate much.
const MaxCursorNameLen = 1024

var (
	// ErrCorruptSnapshot: the bytes are not a valid cursor snapshot.
	ErrCorruptSnapshot = errors.New("corrupt cursor snapshot")
	// ErrSnapshotVersion: the snapshot was written by a format this code does
	// not know (a newer Quire).
	ErrSnapshotVersion = errors.New("unknown cursor snapshot version")
	// ErrNameTooLong: a cursor name longer than MaxCursorNameLen.
	ErrNameTooLong = errors.New("cursor name too long")
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// minRangeBytes is the smallest encoding of one range (four 1-byte varints).
const minRangeBytes = 4

// SnapshotInfo says what a snapshot left out.
type SnapshotInfo struct {
	// Persisted is the number of acknowledged ranges in the snapshot.
	Persisted int
	// Dropped is the number of ranges kept in memory only: after a crash
	// their messages are redelivered.
	Dropped int
}

// Snapshot encodes the mark-delete position and at most maxRanges
// acknowledged ranges (a negative maxRanges counts as 0). The ranges nearest
// the mark-delete position go first: they are the ones a restart would
// otherwise redeliver soonest, and they are what the mark-delete position
// folds in next. The shell normally passes MaxRangesToPersist().
func (c *Cursor) Snapshot(maxRanges int) (data []byte, info SnapshotInfo) {
	ranges := c.acked.FirstN(maxRanges)
	info = SnapshotInfo{Persisted: len(ranges), Dropped: c.acked.Len() - len(ranges)}

	data = make([]byte, 0, 1+2*binary.MaxVarintLen64+len(c.name)+3*binary.MaxVarintLen64+len(ranges)*8+4)
	data = append(data, snapshotVersion)
	data = binary.AppendUvarint(data, uint64(len(c.name)))
	data = append(data, c.name...)
	data = binary.AppendVarint(data, c.markDelete.LedgerID)
	data = binary.AppendVarint(data, c.markDelete.EntryID)
	data = binary.AppendUvarint(data, uint64(len(ranges)))
	prev := c.markDelete
	for _, r := range ranges {
		data = appendRelative(data, prev, r.Lo, 2)
		data = appendRelative(data, r.Lo, r.Hi, 0)
		prev = r.Hi
	}
	return binary.BigEndian.AppendUint32(data, crc32.Checksum(data, castagnoli)), info
}

// appendRelative encodes p relative to base (base <= p, and p.entry >=
// base.entry + minGap when they share a ledger). Differences are taken
// modulo 2^64, which is exact because they lie in [0, 2^64).
func appendRelative(data []byte, base, p Position, minGap uint64) []byte {
	data = binary.AppendUvarint(data, uint64(p.LedgerID)-uint64(base.LedgerID))
	if p.LedgerID == base.LedgerID {
		return binary.AppendUvarint(data, uint64(p.EntryID)-uint64(base.EntryID)-minGap)
	}
	return binary.AppendVarint(data, p.EntryID)
}

// Restore decodes a snapshot into a cursor. Positions in ranges that the
// snapshot left out are unacknowledged: they will be redelivered.
func Restore(data []byte, opts CursorOptions) (*Cursor, error) {
	if len(data) < 1+4 {
		return nil, fmt.Errorf("%w: %d bytes", ErrCorruptSnapshot, len(data))
	}
	if data[0] != snapshotVersion {
		return nil, fmt.Errorf("%w: %d", ErrSnapshotVersion, data[0])
	}
	body, sum := data[:len(data)-4], binary.BigEndian.Uint32(data[len(data)-4:])
	if got := crc32.Checksum(body, castagnoli); got != sum {
		return nil, fmt.Errorf("%w: crc %08x, want %08x", ErrCorruptSnapshot, got, sum)
	}
	d := decoder{buf: body[1:]}
	nameLen := d.uvarint("name length")
	if d.err == nil && (nameLen > MaxCursorNameLen || nameLen > uint64(len(d.buf))) {
		d.fail("name length %d", nameLen)
	}
	name := string(d.bytes(int(min(nameLen, MaxCursorNameLen))))
	markDelete := Position{d.varint("mark-delete ledger"), d.varint("mark-delete entry")}
	count := d.uvarint("range count")
	if d.err == nil && count > uint64(len(d.buf)/minRangeBytes) {
		d.fail("range count %d in %d bytes", count, len(d.buf))
	}
	c := &Cursor{name: name, markDelete: markDelete}
	c.setOptions(opts)
	prev := markDelete
	for i := uint64(0); i < count && d.err == nil; i++ {
		lo := d.relative(prev, 2)
		hi := d.relative(lo, 0)
		if d.err == nil {
			c.acked.Add(Range{Lo: lo, Hi: hi})
		}
		prev = hi
	}
	if d.err == nil && len(d.buf) != 0 {
		d.fail("%d trailing bytes", len(d.buf))
	}
	if d.err != nil {
		return nil, d.err
	}
	c.settle()
	c.updateLimit()
	if invariants.Enabled {
		c.checkInvariants()
	}
	return c, nil
}

// decoder reads a snapshot body; after the first error every read returns
// zero values and the error sticks.
type decoder struct {
	buf []byte
	err error
}

func (d *decoder) fail(format string, args ...any) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: %s", ErrCorruptSnapshot, fmt.Sprintf(format, args...))
	}
}

// uvarint reads a shortest-form uvarint. A longer form (a last byte of 0)
// is refused so that every accepted snapshot re-encodes to the same bytes.
func (d *decoder) uvarint(what string) uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.buf)
	if n <= 0 || (n > 1 && d.buf[n-1] == 0) {
		d.fail("bad varint for %s", what)
		return 0
	}
	d.buf = d.buf[n:]
	return v
}

// varint reads a shortest-form zigzag varint.
func (d *decoder) varint(what string) int64 {
	u := d.uvarint(what)
	return int64(u>>1) ^ -int64(u&1)
}

func (d *decoder) bytes(n int) []byte {
	if d.err != nil {
		return nil
	}
	b := d.buf[:n]
	d.buf = d.buf[n:]
	return b
}

// relative reads a position written by appendRelative(base, minGap),
// refusing any that would not fit in an int64.
func (d *decoder) relative(base Position, minGap uint64) Position {
	ledgerDelta := d.uvarint("ledger delta")
	if d.err != nil {
		return Position{}
	}
	if ledgerDelta == 0 {
		entryDelta := d.uvarint("entry delta")
		room := uint64(math.MaxInt64) - uint64(base.EntryID) // exact: in [0, 2^64)
		if d.err == nil && (room < minGap || entryDelta > room-minGap) {
			d.fail("entry %d + %d + %d overflows", base.EntryID, minGap, entryDelta)
		}
		return Position{base.LedgerID, int64(uint64(base.EntryID) + minGap + entryDelta)}
	}
	if room := uint64(math.MaxInt64) - uint64(base.LedgerID); ledgerDelta > room {
		d.fail("ledger %d + %d overflows", base.LedgerID, ledgerDelta)
	}
	return Position{int64(uint64(base.LedgerID) + ledgerDelta), d.varint("entry")}
}
