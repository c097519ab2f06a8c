package ledger

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"

	"quire/internal/meta"
)

// RequestKind says what a bookie request asks.
type RequestKind int

const (
	// RequestAdd writes an entry (Recovery set for recovery re-replication).
	RequestAdd RequestKind = iota + 1
	// RequestRead reads an entry; EntryID -1 reads the bookie's LAC. Fence
	// makes the bookie durably fence the ledger first.
	RequestRead
	// RequestWriteLac raises the bookie's LAC of the ledger to
	// LastAddConfirmed without an entry: an idle writer's explicit LAC.
	// EntryID is -1. The answer is OK, or Fenced when a new owner took the
	// ledger over, or a failure the writer ignores.
	RequestWriteLac
	// RequestReadRange reads consecutive entries from EntryID: at most
	// MaxEntries, and no more than MaxBytes of stored entries (at least
	// one). The bookie answers OK with the entries it holds from EntryID
	// on, in order (Response.Entries), possibly fewer than asked: it stops
	// at the byte bound, at its frame size, and before the first entry it
	// does not hold; NoSuchEntry when it does not hold EntryID.
	RequestReadRange
)

func (k RequestKind) String() string {
	switch k {
	case RequestAdd:
		return "add"
	case RequestRead:
		return "read"
	case RequestWriteLac:
		return "write-lac"
	case RequestReadRange:
		return "read-range"
	}
	return "?"
}

// Request is a message a state machine wants sent to a bookie.
type Request struct {
	ID       uint64 // unique per state machine; the response carries it back
	To       BookieID
	Kind     RequestKind
	LedgerID int64
	EntryID  int64
	// LastAddConfirmed rides on every add, and is what a RequestWriteLac
	// sends.
	LastAddConfirmed int64
	Payload          []byte
	Recovery         bool
	Fence            bool
	// MaxEntries and MaxBytes bound a RequestReadRange.
	MaxEntries int
	MaxBytes   int
}

// Status is a bookie's answer, as the protocol cores see it.
type Status int

const (
	StatusOK Status = iota + 1
	StatusNoSuchEntry
	StatusNoSuchLedger
	StatusFenced
	// StatusFailed covers every failure that says nothing about the ledger:
	// I/O error, read-only, overload, connection lost, timeout.
	StatusFailed
)

func (s Status) String() string {
	switch s {
	case StatusOK:
		return "ok"
	case StatusNoSuchEntry:
		return "no-such-entry"
	case StatusNoSuchLedger:
		return "no-such-ledger"
	case StatusFenced:
		return "fenced"
	case StatusFailed:
		return "failed"
	}
	return "?"
}

// Response is a bookie's answer to Request ID.
type Response struct {
	ID     uint64
	From   BookieID
	Status Status
	// For reads: the entry's LAC (or the bookie's LAC for EntryID -1) and payload.
	LastAddConfirmed int64
	Payload          []byte
	// Entries answers a RequestReadRange: the stored entries from the
	// request's EntryID on, consecutive.
	Entries [][]byte
}

// MetaOpKind says what a metadata operation does.
type MetaOpKind int

const (
	// MetaWrite is a compare-and-swap of the ledger's record at Expected.
	MetaWrite MetaOpKind = iota + 1
	// MetaRead reads the ledger's record.
	MetaRead
)

// MetaOp is a metadata operation a state machine wants performed.
type MetaOp struct {
	ID       uint64
	Kind     MetaOpKind
	LedgerID int64
	Metadata Metadata     // for writes
	Expected meta.Version // for writes
}

// MetaResult completes MetaOp ID. Err is nil, or wraps meta.ErrBadVersion,
// meta.ErrNotFound or meta.ErrUnavailable.
type MetaResult struct {
	ID       uint64
	Metadata Metadata // the record written (writes) or read (reads)
	Version  meta.Version
	Err      error
}

// Ack tells the writer's caller the outcome of one Add, in entry order.
type Ack struct {
	EntryID int64
	Err     error
}

// Ready collects a state machine's outputs since the last call.
type Ready struct {
	Requests []Request
	MetaOps  []MetaOp
	Acks     []Ack
}

// Empty reports whether there is nothing to do.
func (r *Ready) Empty() bool {
	return len(r.Requests) == 0 && len(r.MetaOps) == 0 && len(r.Acks) == 0
}

// Errors delivered in Acks and by the cores.
var (
	// ErrFenced: the ledger was fenced or taken into recovery by a new owner;
	// this writer may not add to it any more.
	ErrFenced = errors.New("ledger: fenced")
	// ErrClosed: the writer was closed.
	ErrClosed = errors.New("ledger: closed")
	// ErrTooManyInFlight: Add refused because MaxInFlight entries are pending.
	ErrTooManyInFlight = errors.New("ledger: too many entries in flight")
	// ErrCorruptEntry: an entry failed its checksum.
	ErrCorruptEntry = errors.New("ledger: corrupt entry")
)

// Entries are stored on bookies framed with a small header so that readers
// and recovery can check integrity and know the ledger's length:
//
//	crc32c  uint32  over everything after it, plus the ledger and entry ids
//	length  uint64  total payload bytes of entries 0..this one
//	payload
const entryHeaderSize = 12

// EntryOverhead is what EncodeEntry adds to a payload.
const EntryOverhead = entryHeaderSize

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// EncodeEntry frames payload for storage.
func EncodeEntry(ledgerID, entryID, cumulativeLength int64, payload []byte) []byte {
	b := make([]byte, entryHeaderSize+len(payload))
	binary.BigEndian.PutUint64(b[4:], uint64(cumulativeLength))
	copy(b[entryHeaderSize:], payload)
	binary.BigEndian.PutUint32(b, entryChecksum(ledgerID, entryID, b[4:]))
	return b
}

// DecodeEntry checks a stored entry and returns its payload and the ledger's
// cumulative length up to it.
func DecodeEntry(ledgerID, entryID int64, b []byte) (payload []byte, cumulativeLength int64, err error) {
	if len(b) < entryHeaderSize {
		return nil, 0, fmt.Errorf("%w: ledger %d entry %d is %d bytes", ErrCorruptEntry, ledgerID, entryID, len(b))
	}
	if binary.BigEndian.Uint32(b) != entryChecksum(ledgerID, entryID, b[4:]) {
		return nil, 0, fmt.Errorf("%w: ledger %d entry %d checksum mismatch", ErrCorruptEntry, ledgerID, entryID)
	}
	return b[entryHeaderSize:], int64(binary.BigEndian.Uint64(b[4:])), nil
}

// storedLength is the cumulative length in the header of an entry this
// process encoded (EncodeEntry), read without verifying its checksum.
func storedLength(b []byte) int64 { return int64(binary.BigEndian.Uint64(b[4:])) }

func entryChecksum(ledgerID, entryID int64, rest []byte) uint32 {
	var ids [16]byte
	binary.BigEndian.PutUint64(ids[:], uint64(ledgerID))
	binary.BigEndian.PutUint64(ids[8:], uint64(entryID))
	return crc32.Update(crc32.Checksum(ids[:], castagnoli), castagnoli, rest)
}
