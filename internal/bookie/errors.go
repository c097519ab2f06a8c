package bookie

import (
	"errors"
	"fmt"
)

// Sentinel errors: protocol outcomes that the server maps once to wire codes.
var (
	// ErrNoSuchLedger: the ledger has no entry and no fence on this bookie, or
	// it was deleted (ledger ids never repeat).
	ErrNoSuchLedger = errors.New("bookie: no such ledger")
	// ErrNoSuchEntry: the ledger exists but the entry does not.
	ErrNoSuchEntry = errors.New("bookie: no such entry")
	// ErrFenced: a non-recovery add to a fenced ledger.
	ErrFenced = errors.New("bookie: ledger is fenced")
	// ErrReadOnly: the bookie is read-only (disk usage above DiskUsageHigh).
	ErrReadOnly = errors.New("bookie: read-only")
	// ErrTooManyRequests: the write cache stayed full for longer than the
	// add wait limit; the client should retry (or pick another bookie).
	ErrTooManyRequests = errors.New("bookie: too many requests")
	// ErrClosed: the engine is closed.
	ErrClosed = errors.New("bookie: closed")
	// ErrIO wraps every I/O error. After a journal or entry-log I/O error the
	// engine refuses further adds: a failed fsync leaves the file's state
	// unknown.
	ErrIO = errors.New("bookie: i/o error")
	// ErrInvalidRequest: negative ids, oversize payloads.
	ErrInvalidRequest = errors.New("bookie: invalid request")
)

// ioError wraps err so that errors.Is(err, ErrIO) holds and the cause stays
// visible.
func ioError(op string, err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, ErrIO) {
		return fmt.Errorf("%s: %w", op, err)
	}
	return fmt.Errorf("%s: %w: %w", op, ErrIO, err)
}
