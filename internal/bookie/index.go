package bookie

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/bits"

	"github.com/cockroachdb/pebble/v2"
)

// Index layout in Pebble (all integers big-endian, so keys sort by ledger
// then entry; ledger and entry ids are non-negative):
//
//	'b' ledger(8) block(8) → location records (merged)    entry locations
//	'l' ledger(8)          → flags(1) lac(8)              ledger metadata
//	'c'                    → journalFileID(8) offset(8)   checkpoint
//
// Entry locations are grouped in blocks of 64 consecutive entries (block =
// entry / 64), one key per block, and written with Pebble's Merge: a
// checkpoint adds one merge operand per block it touches, holding a record
// per entry:
//
//	slot (1: entry % 64) | logID (uvarint) | offset (uvarint) | size (uvarint)
//
// Merging applies operands oldest to newest, a newer record for a slot
// replacing an older one — what a Set per entry would give — and writes the
// result sorted by slot. One key per 64 entries instead of one per entry
// divides Pebble's work (memtable inserts, flushes, compactions rewriting
// overlapping ledgers' keys) by about as much: with a key per entry, index
// compactions took a third of the engine's CPU at 100k adds/s.
//
// The checkpoint key is written in the same synced batch as the locations it
// covers, so the index never claims a journal position whose entries it
// cannot locate.
const (
	keyPrefixBlock  = 'b'
	keyPrefixLedger = 'l'
	keyCheckpoint   = 'c'

	ledgerFlagFenced  = 1 << 0
	ledgerFlagDeleted = 1 << 1

	ledgerMetaBytes = 9

	blockShift   = 6
	blockEntries = 1 << blockShift
	blockKeyLen  = 17

	// locationMergerName is stored by Pebble: a database written with
	// another layout refuses to open instead of being misread.
	locationMergerName = "quire.bookie.entry-location-blocks.v1"
)

func blockKey(ledgerID, block int64) []byte {
	k := make([]byte, blockKeyLen)
	k[0] = keyPrefixBlock
	binary.BigEndian.PutUint64(k[1:], uint64(ledgerID))
	binary.BigEndian.PutUint64(k[9:], uint64(block))
	return k
}

func decodeBlockKey(k []byte) (ledgerID, block int64, ok bool) {
	if len(k) != blockKeyLen || k[0] != keyPrefixBlock {
		return 0, 0, false
	}
	ledgerID, block = int64(binary.BigEndian.Uint64(k[1:])), int64(binary.BigEndian.Uint64(k[9:]))
	return ledgerID, block, ledgerID >= 0 && block >= 0 && block <= math.MaxInt64>>blockShift
}

// ledgerEntriesBounds returns [lower, upper) covering every location key of
// the ledger.
func ledgerEntriesBounds(ledgerID int64) (lower, upper []byte) {
	lower = make([]byte, 9)
	lower[0] = keyPrefixBlock
	binary.BigEndian.PutUint64(lower[1:], uint64(ledgerID))
	upper = make([]byte, 9)
	upper[0] = keyPrefixBlock
	binary.BigEndian.PutUint64(upper[1:], uint64(ledgerID)+1)
	return lower, upper
}

func ledgerKey(ledgerID int64) []byte {
	k := make([]byte, 9)
	k[0] = keyPrefixLedger
	binary.BigEndian.PutUint64(k[1:], uint64(ledgerID))
	return k
}

// location is where an entry record lives: entry log id, byte offset of the
// record and its total size (header included).
type location struct {
	logID  uint64
	offset int64
	size   uint32
}

// appendLocationRecord appends one record of a block value.
func appendLocationRecord(dst []byte, slot int, l location) []byte {
	dst = append(dst, byte(slot))
	dst = binary.AppendUvarint(dst, l.logID)
	dst = binary.AppendUvarint(dst, uint64(l.offset))
	return binary.AppendUvarint(dst, uint64(l.size))
}

var errCorruptBlock = errors.New("bookie: corrupt index location block")

// nextLocationRecord decodes the record at the start of v.
func nextLocationRecord(v []byte) (slot int, l location, rest []byte, err error) {
	if len(v) == 0 || v[0] >= blockEntries {
		return 0, l, nil, errCorruptBlock
	}
	slot, v = int(v[0]), v[1:]
	var fields [3]uint64
	for i := range fields {
		x, n := binary.Uvarint(v)
		if n <= 0 {
			return 0, l, nil, errCorruptBlock
		}
		fields[i], v = x, v[n:]
	}
	if fields[1] > math.MaxInt64 || fields[2] > math.MaxUint32 {
		return 0, l, nil, errCorruptBlock
	}
	return slot, location{logID: fields[0], offset: int64(fields[1]), size: uint32(fields[2])}, v, nil
}

// blockLocations is a decoded block: the location of each present slot.
type blockLocations struct {
	present uint64 // bit i: slot i has a location
	locs    [blockEntries]location
}

// apply decodes value onto b. With newer, its records replace existing ones
// (value is newer than what b holds); otherwise they fill only empty slots.
// Within value, a later record for a slot wins over an earlier one.
func (b *blockLocations) apply(value []byte, newer bool) error {
	var seen uint64 // slots set from this value
	for len(value) > 0 {
		slot, loc, rest, err := nextLocationRecord(value)
		if err != nil {
			return err
		}
		bit := uint64(1) << slot
		if newer || b.present&bit == 0 || seen&bit != 0 {
			b.locs[slot] = loc
			b.present |= bit
			seen |= bit
		}
		value = rest
	}
	return nil
}

func (b *blockLocations) get(slot int) (location, bool) {
	return b.locs[slot], b.present&(uint64(1)<<slot) != 0
}

func (b *blockLocations) encode() []byte {
	out := make([]byte, 0, bits.OnesCount64(b.present)*12)
	for slot := range blockEntries {
		if l, ok := b.get(slot); ok {
			out = appendLocationRecord(out, slot, l)
		}
	}
	return out
}

func decodeBlock(value []byte) (*blockLocations, error) {
	b := &blockLocations{}
	return b, b.apply(value, true)
}

// locationMerger merges a block's operands (pebble.ValueMerger): it decodes
// each operand onto one blockLocations as it comes, retaining no buffer.
type locationMerger struct{ b blockLocations }

func (m *locationMerger) MergeNewer(value []byte) error { return m.b.apply(value, true) }
func (m *locationMerger) MergeOlder(value []byte) error { return m.b.apply(value, false) }

func (m *locationMerger) Finish(bool) ([]byte, io.Closer, error) { return m.b.encode(), nil, nil }

var locationMergerOptions = &pebble.Merger{
	Name: locationMergerName,
	Merge: func(_, value []byte) (pebble.ValueMerger, error) {
		m := &locationMerger{}
		if err := m.b.apply(value, true); err != nil {
			return nil, err
		}
		return m, nil
	},
}

// appendBlockOperands adds, for keys sorted by (ledger, entry) with their
// locations, one merge operand per block to batch. skip filters keys out.
func appendBlockOperands(batch *pebble.Batch, keys []cacheKey, locs []location, skip func(cacheKey) bool) error {
	var operand []byte
	for i := 0; i < len(keys); {
		ledgerID, block := keys[i].ledgerID, keys[i].entryID>>blockShift
		operand = operand[:0]
		for ; i < len(keys) && keys[i].ledgerID == ledgerID && keys[i].entryID>>blockShift == block; i++ {
			if !skip(keys[i]) {
				operand = appendLocationRecord(operand, int(keys[i].entryID&(blockEntries-1)), locs[i])
			}
		}
		if len(operand) > 0 {
			if err := batch.Merge(blockKey(ledgerID, block), operand, nil); err != nil {
				return err
			}
		}
	}
	return nil
}

type ledgerMeta struct {
	flags byte
	lac   int64
}

func (m ledgerMeta) encode() []byte {
	v := make([]byte, ledgerMetaBytes)
	v[0] = m.flags
	binary.BigEndian.PutUint64(v[1:], uint64(m.lac))
	return v
}

func decodeLedgerMeta(v []byte) (ledgerMeta, error) {
	if len(v) != ledgerMetaBytes {
		return ledgerMeta{}, fmt.Errorf("bookie: ledger metadata has %d bytes, want %d", len(v), ledgerMetaBytes)
	}
	return ledgerMeta{flags: v[0], lac: int64(binary.BigEndian.Uint64(v[1:]))}, nil
}

// journalPosition is a point in the journal: replay starts there.
type journalPosition struct {
	fileID uint64
	offset int64
}

func (p journalPosition) encode() []byte {
	v := make([]byte, 16)
	binary.BigEndian.PutUint64(v[0:], p.fileID)
	binary.BigEndian.PutUint64(v[8:], uint64(p.offset))
	return v
}

func decodeJournalPosition(v []byte) (journalPosition, error) {
	if len(v) != 16 {
		return journalPosition{}, fmt.Errorf("bookie: checkpoint has %d bytes, want 16", len(v))
	}
	return journalPosition{fileID: binary.BigEndian.Uint64(v[0:]), offset: int64(binary.BigEndian.Uint64(v[8:]))}, nil
}

func (p journalPosition) less(q journalPosition) bool {
	return p.fileID < q.fileID || (p.fileID == q.fileID && p.offset < q.offset)
}

// getValue returns a copy of the value of key, or ok=false when absent.
func getValue(db *pebble.DB, key []byte) (value []byte, ok bool, err error) {
	v, closer, err := db.Get(key)
	if err == pebble.ErrNotFound {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	value = append([]byte(nil), v...)
	return value, true, closer.Close()
}

// pebbleLogger routes Pebble's log lines to slog.
type pebbleLogger struct{ log *slog.Logger }

func (l pebbleLogger) Infof(format string, args ...any) {
	l.log.Debug("pebble", "msg", fmt.Sprintf(format, args...))
}

func (l pebbleLogger) Errorf(format string, args ...any) {
	l.log.Warn("pebble", "msg", fmt.Sprintf(format, args...))
}

func (l pebbleLogger) Fatalf(format string, args ...any) {
	panic(fmt.Sprintf("pebble fatal: "+format, args...))
}
