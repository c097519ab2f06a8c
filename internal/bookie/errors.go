package bookie

import (
	"errors"
	"fmt"

	"github.com/cockroachdb/pebble/v2/vfs"
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
	// ErrReadOnly: the bookie is read-only: disk usage above DiskUsageHigh
	// (predicted), or a write ran out of space. Adds that failed for lack of
	// space wrap it too, so that the client takes its writes elsewhere.
	ErrReadOnly = errors.New("bookie: read-only")
	// ErrTooManyRequests: the write cache stayed full for longer than the
	// add wait limit; the client should retry (or pick another bookie).
	ErrTooManyRequests = errors.New("bookie: too many requests")
	// ErrClosed: the engine is closed.
	ErrClosed = errors.New("bookie: closed")
	// ErrIO wraps every I/O error. After a journal or entry-log I/O error
	// the engine refuses further adds: a failed fsync leaves the file's
	// state unknown. Running out of space (ENOSPC) is the exception: the
	// file is abandoned and the engine is read-only until there is room
	// (see disk.go).
	ErrIO = errors.New("bookie: i/o error")
	// ErrInvalidRequest: negative ids, oversize payloads.
	ErrInvalidRequest = errors.New("bookie: invalid request")
)

// errOutOfSpace is the engine's own "would not fit": a checkpoint or GC
// pass that did not start because its estimated growth exceeds the free
// space. isNoSpace treats it as ENOSPC.
var errOutOfSpace = errors.New("bookie: not enough free space")

// isNoSpace reports whether err says the file system is full (ENOSPC, or
// the engine's own prediction that a write would not fit). Such errors turn
// the bookie read-only until there is room; every other I/O error is
// permanent.
func isNoSpace(err error) bool {
	return err != nil && (errors.Is(err, errOutOfSpace) || vfs.IsNoSpaceError(err))
}

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
