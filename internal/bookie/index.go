package bookie

import (
	"encoding/binary"
	"fmt"
	"log/slog"

	"github.com/cockroachdb/pebble/v2"
)

// Index layout in Pebble (all integers big-endian, so keys sort by ledger
// then entry; ledger and entry ids are non-negative):
//
//	'e' ledger(8) entry(8) → logID(8) offset(8) size(4)   entry location
//	'l' ledger(8)          → flags(1) lac(8)              ledger metadata
//	'c'                    → journalFileID(8) offset(8)   checkpoint
//
// The checkpoint key is written in the same synced batch as the locations it
// covers, so the index never claims a journal position whose entries it
// cannot locate.
const (
	keyPrefixEntry  = 'e'
	keyPrefixLedger = 'l'
	keyCheckpoint   = 'c'

	ledgerFlagFenced  = 1 << 0
	ledgerFlagDeleted = 1 << 1

	locationBytes   = 20
	ledgerMetaBytes = 9
)

func entryKey(ledgerID, entryID int64) []byte {
	k := make([]byte, 17)
	k[0] = keyPrefixEntry
	binary.BigEndian.PutUint64(k[1:], uint64(ledgerID))
	binary.BigEndian.PutUint64(k[9:], uint64(entryID))
	return k
}

func decodeEntryKey(k []byte) (ledgerID, entryID int64, ok bool) {
	if len(k) != 17 || k[0] != keyPrefixEntry {
		return 0, 0, false
	}
	return int64(binary.BigEndian.Uint64(k[1:])), int64(binary.BigEndian.Uint64(k[9:])), true
}

// ledgerEntriesBounds returns [lower, upper) covering every entry key of the
// ledger.
func ledgerEntriesBounds(ledgerID int64) (lower, upper []byte) {
	lower = make([]byte, 9)
	lower[0] = keyPrefixEntry
	binary.BigEndian.PutUint64(lower[1:], uint64(ledgerID))
	upper = make([]byte, 9)
	upper[0] = keyPrefixEntry
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

func (l location) encode() []byte {
	v := make([]byte, locationBytes)
	binary.BigEndian.PutUint64(v[0:], l.logID)
	binary.BigEndian.PutUint64(v[8:], uint64(l.offset))
	binary.BigEndian.PutUint32(v[16:], l.size)
	return v
}

func decodeLocation(v []byte) (location, error) {
	if len(v) != locationBytes {
		return location{}, fmt.Errorf("bookie: index location has %d bytes, want %d", len(v), locationBytes)
	}
	return location{
		logID:  binary.BigEndian.Uint64(v[0:]),
		offset: int64(binary.BigEndian.Uint64(v[8:])),
		size:   binary.BigEndian.Uint32(v[16:]),
	}, nil
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
