// Package mlog is the managed ledger (topic log) and its cursors.
//
// A topic in ledger mode is an ordered list of ledgers; an entry is named by
// its Position (ledger id, entry id). A cursor is a subscription's progress
// through the topic: a mark-delete position (everything at or below it is
// acknowledged) plus the individually acknowledged ranges above it.
//
// The cursor is a deterministic state machine: no goroutines, clocks, files
// or sockets. It never reads the ledger list itself; it asks the caller
// through the small Ledgers interface. Persisting a cursor snapshot, trimming
// ledgers and dispatching messages belong to the managed ledger and the
// subscription that own it.
//
// ManagedLedger is the managed ledger of one topic, a state machine of the same
// kind: takeover, rollover, trimming, cursor persistence, backlog quota and
// TTL, with every ledger and metadata operation an output (Ready) carried
// out by the shell in package mlogclient. It also keeps the ordering rules
// of compaction (maint.go): a compacted ledger is named in the record
// before it is written, swapped in for a run of closed ledgers by one CAS
// (readers see the old ledgers or the new one, never a mix), and the
// replaced ledgers are deleted only after that CAS; what survives is for
// the compactor, a shell, to decide. This package must never do I/O,
// start goroutines or read a clock.
package mlog

import (
	"cmp"
	"math"
	"strconv"
)

// Position names one entry of a topic: entry EntryID of ledger LedgerID.
// Positions are ordered by ledger, then by entry. Ledger ids grow along a
// topic's ledger list but are not contiguous (they are allocated cluster
// wide), and a ledger may be empty; only the Ledgers interface knows which
// positions hold entries.
type Position struct {
	LedgerID int64
	EntryID  int64
}

// BeforeLedger is the position just before entry 0 of ledger: the
// mark-delete position of a cursor that has acknowledged nothing of it.
func BeforeLedger(ledgerID int64) Position {
	return Position{LedgerID: ledgerID, EntryID: -1}
}

// Compare returns -1, 0 or +1 as p is before, equal to or after q.
func (p Position) Compare(q Position) int {
	if c := cmp.Compare(p.LedgerID, q.LedgerID); c != 0 {
		return c
	}
	return cmp.Compare(p.EntryID, q.EntryID)
}

// Less reports whether p is before q.
func (p Position) Less(q Position) bool { return p.Compare(q) < 0 }

// String formats p as "ledger:entry", e.g. "12:345".
func (p Position) String() string {
	return strconv.FormatInt(p.LedgerID, 10) + ":" + strconv.FormatInt(p.EntryID, 10)
}

// maxPosition returns the later of p and q.
func maxPosition(p, q Position) Position {
	if p.Less(q) {
		return q
	}
	return p
}

// adjacentInLedger reports whether q is the entry right after p in the same
// ledger. Entries of one ledger are dense (0, 1, 2, ...), so this is the only
// adjacency a position can see without asking the ledger list.
func adjacentInLedger(p, q Position) bool {
	return p.LedgerID == q.LedgerID && p.EntryID != math.MaxInt64 && p.EntryID+1 == q.EntryID
}

// successor returns the smallest position after p in the (ledger, entry)
// order, whether or not it holds an entry; false only for the largest
// representable position.
func successor(p Position) (Position, bool) {
	switch {
	case p.EntryID != math.MaxInt64:
		return Position{p.LedgerID, p.EntryID + 1}, true
	case p.LedgerID != math.MaxInt64:
		return Position{p.LedgerID + 1, math.MinInt64}, true
	}
	return Position{}, false
}

// predecessor returns the largest position before p in the (ledger, entry)
// order; false only for the smallest representable position.
func predecessor(p Position) (Position, bool) {
	switch {
	case p.EntryID != math.MinInt64:
		return Position{p.LedgerID, p.EntryID - 1}, true
	case p.LedgerID != math.MinInt64:
		return Position{p.LedgerID - 1, math.MaxInt64}, true
	}
	return Position{}, false
}

// Ledgers is what a cursor needs to know about the topic's ledger list, and
// all it needs: which entry comes after a given position. The managed ledger
// implements it from its in-memory ledger list, on the goroutine that owns the
// topic, so an answer never waits for I/O.
//
// The cursor relies on two facts about the answers: within a ledger, entries
// are dense (0 up to its last entry), and the topic only appends entries, so
// an answer about positions that already hold entries never changes. It
// therefore asks Next only where a ledger boundary matters — when the
// mark-delete position or two neighbouring acknowledged ranges sit in
// different ledgers — so acknowledgement within a ledger costs no call at
// all (NextUnacked asks once per range it steps over).
type Ledgers interface {
	// Next returns the position of the first entry strictly after p, for any
	// p (it need not hold an entry itself), skipping empty ledgers; false
	// when no entry after p exists yet.
	Next(p Position) (Position, bool)
}

// denseLedgers is the Ledgers of a log without ledger boundaries, used when
// the caller passes none (e.g. a Kafka-style partition whose offsets are the
// entry ids of one "ledger"): the entry after p is p's successor in its own
// ledger.
type denseLedgers struct{}

func (denseLedgers) Next(p Position) (Position, bool) {
	if p.EntryID == math.MaxInt64 {
		return Position{}, false
	}
	return Position{p.LedgerID, p.EntryID + 1}, true
}
