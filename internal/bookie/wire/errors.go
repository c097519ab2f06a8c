package wire

import (
	"context"
	"errors"
	"fmt"
	"strings"
)

// Protocol outcomes, shared by the bookie (which maps them to a Status) and the client
// (which maps a Status back to them), so that callers on either side test with errors.Is.
var (
	ErrNoSuchLedger    = errors.New("bookie: no such ledger")
	ErrNoSuchEntry     = errors.New("bookie: no such entry")
	ErrFenced          = errors.New("bookie: ledger fenced")
	ErrReadOnly        = errors.New("bookie: read-only")
	ErrBadRequest      = errors.New("bookie: bad request")
	ErrTooManyRequests = errors.New("bookie: too many requests")
	ErrIO              = errors.New("bookie: I/O error")
	ErrTimeout         = errors.New("bookie: timed out")
	ErrUnknown         = errors.New("bookie: unknown error")
)

// maxErrorMessageBytes bounds the error_message a bookie sends.
const maxErrorMessageBytes = 1024

// StatusOf is the default mapping of an error to a Status: nil is OK, the sentinels above
// map to their status (context deadlines to TIMEOUT), anything else is UNKNOWN_ERROR.
func StatusOf(err error) Status {
	switch {
	case err == nil:
		return Status_OK
	case errors.Is(err, ErrNoSuchLedger):
		return Status_NO_SUCH_LEDGER
	case errors.Is(err, ErrNoSuchEntry):
		return Status_NO_SUCH_ENTRY
	case errors.Is(err, ErrFenced):
		return Status_FENCED
	case errors.Is(err, ErrReadOnly):
		return Status_READ_ONLY
	case errors.Is(err, ErrBadRequest):
		return Status_BAD_REQUEST
	case errors.Is(err, ErrTooManyRequests):
		return Status_TOO_MANY_REQUESTS
	case errors.Is(err, ErrIO):
		return Status_IO_ERROR
	case errors.Is(err, ErrTimeout), errors.Is(err, context.DeadlineExceeded):
		return Status_TIMEOUT
	default:
		return Status_UNKNOWN_ERROR
	}
}

// SentinelOf returns the sentinel error for a non-OK status (ErrUnknown for a status this
// build does not know), or nil for OK.
func SentinelOf(s Status) error {
	switch s {
	case Status_OK:
		return nil
	case Status_NO_SUCH_LEDGER:
		return ErrNoSuchLedger
	case Status_NO_SUCH_ENTRY:
		return ErrNoSuchEntry
	case Status_FENCED:
		return ErrFenced
	case Status_READ_ONLY:
		return ErrReadOnly
	case Status_BAD_REQUEST:
		return ErrBadRequest
	case Status_TOO_MANY_REQUESTS:
		return ErrTooManyRequests
	case Status_IO_ERROR:
		return ErrIO
	case Status_TIMEOUT:
		return ErrTimeout
	default:
		return ErrUnknown
	}
}

// StatusError is a non-OK status received from a bookie. It unwraps to the status's
// sentinel, so errors.Is(err, ErrFenced) works; errors.As gives the bookie's message.
type StatusError struct {
	Status  Status
	Message string
}

func (e *StatusError) Error() string {
	if e.Message == "" {
		return SentinelOf(e.Status).Error()
	}
	return fmt.Sprintf("%v: %s", SentinelOf(e.Status), e.Message)
}

func (e *StatusError) Unwrap() error { return SentinelOf(e.Status) }

// ErrorOf turns a response's status and message into an error: nil for OK, a *StatusError
// otherwise.
func ErrorOf(s Status, message string) error {
	if s == Status_OK {
		return nil
	}
	return &StatusError{Status: s, Message: message}
}

// ErrorMessage makes err's text fit for a Response's error_message: valid UTF-8 (proto3
// refuses to encode a string field that is not) and at most 1 KiB.
func ErrorMessage(err error) string {
	if err == nil {
		return ""
	}
	msg := strings.ToValidUTF8(err.Error(), "\uFFFD")
	if len(msg) > maxErrorMessageBytes {
		msg = strings.ToValidUTF8(msg[:maxErrorMessageBytes], "") + "…"
	}
	return msg
}
