// Package meta is Quire's metadata store: versioned keys with compare-and-swap,
// sessions with ephemeral keys, ordered resumable watches and unique id
// allocation. Every component keeps its agreement state here (who owns what,
// which ledgers a topic has, cursor pointers, partition leaders).
//
// Two implementations sit behind the one Store interface: Etcd (clientv3, for
// production, against an embedded or external etcd cluster) and Mem (in-memory
// and deterministic, for unit tests and the simulator, with injectable latency,
// failures and session expiry). One conformance suite (conformance_test.go)
// runs against both.
//
// This package never implements consensus of its own: agreement comes from etcd.
package meta

import (
	"context"
	"errors"
	"time"
)

// Sentinel errors for the outcomes callers branch on. Implementations wrap them
// with context; test with errors.Is.
var (
	// ErrNotFound: the key does not exist.
	ErrNotFound = errors.New("meta: key not found")
	// ErrExists: Create found the key already present.
	ErrExists = errors.New("meta: key already exists")
	// ErrBadVersion: a compare-and-swap found a different version than expected.
	ErrBadVersion = errors.New("meta: version mismatch")
	// ErrCompacted: a watch asked for history that the store no longer keeps.
	// The caller must re-list the prefix and watch again from the list's revision.
	ErrCompacted = errors.New("meta: revision compacted, re-list")
	// ErrSessionExpired: the session's lease is gone; its ephemeral keys were deleted.
	ErrSessionExpired = errors.New("meta: session expired")
	// ErrUnavailable: the store could not be reached (timeout, injected failure).
	ErrUnavailable = errors.New("meta: store unavailable")
	// ErrClosed: the client was closed.
	ErrClosed = errors.New("meta: client closed")
)

// Version identifies one write of one key. It is the store-wide revision of
// that write, so it never repeats, not even when a key is deleted and created
// again (which rules out ABA on compare-and-swap). 0 means "absent".
type Version int64

// KV is one key with its value and the version of the write that produced it.
type KV struct {
	Key     string
	Value   []byte
	Version Version
}

// ListOptions paginates List. Keys come sorted in byte order.
type ListOptions struct {
	// After, when non-empty, starts the listing after this key (exclusive).
	After string
	// Limit bounds the number of keys returned; 0 means DefaultListLimit.
	Limit int
}

// DefaultListLimit is the page size when ListOptions.Limit is 0.
const DefaultListLimit = 1000

// ListResult is one page of a prefix listing.
type ListResult struct {
	KVs []KV
	// More reports that keys beyond the last one returned exist.
	More bool
	// Revision is the store revision the page was read at; watching from
	// Revision+1 sees every change after this listing.
	Revision int64
}

// EventType says what happened to a key.
type EventType int

const (
	EventPut EventType = iota + 1
	EventDelete
)

func (t EventType) String() string {
	switch t {
	case EventPut:
		return "put"
	case EventDelete:
		return "delete"
	}
	return "unknown"
}

// Event is one change under a watched prefix. Events arrive in revision order.
type Event struct {
	Type EventType
	Key  string
	// Value is the new value for puts, nil for deletes.
	Value []byte
	// Revision of the change; for a put it equals the key's new Version.
	Revision int64
}

// WatchResponse carries a batch of events, or the error that ended the watch.
// After a response with Err != nil the channel is closed. Err is ErrCompacted
// when the requested start revision is no longer available: re-list and watch
// again from the listing's revision + 1.
type WatchResponse struct {
	Events []Event
	Err    error
}

// Store is the metadata store every component uses.
type Store interface {
	// Get returns the key's value and version, or ErrNotFound.
	Get(ctx context.Context, key string) (KV, error)
	// Create writes the key only if it is absent; ErrExists otherwise.
	Create(ctx context.Context, key string, value []byte) (Version, error)
	// Put replaces the key's value only if its current version is expected;
	// ErrBadVersion otherwise (ErrNotFound when the key is absent).
	Put(ctx context.Context, key string, value []byte, expected Version) (Version, error)
	// Delete removes the key only if its current version is expected.
	Delete(ctx context.Context, key string, expected Version) error
	// List returns keys under prefix, sorted, one page at a time.
	List(ctx context.Context, prefix string, opts ListOptions) (ListResult, error)
	// Watch streams every change under prefix from revision fromRevision
	// (inclusive; 0 means "from now"), in order, surviving client reconnects.
	// The channel closes when ctx ends or after an error response.
	Watch(ctx context.Context, prefix string, fromRevision int64) <-chan WatchResponse
	// NewSession starts a session kept alive in the background. Its ephemeral
	// keys vanish when it expires or is closed.
	NewSession(ctx context.Context, ttl time.Duration) (Session, error)
	// AllocateID returns a unique id from the named sequence; ids never repeat,
	// also across restarts. The first id is 1.
	AllocateID(ctx context.Context, sequence string) (int64, error)
	// Close releases the client. Sessions it created are closed.
	Close() error
}

// Session is a lease kept alive by its owner. When the owner dies or loses
// contact for longer than the TTL, the session expires and every ephemeral
// key bound to it is deleted.
type Session interface {
	// ID identifies the session (the lease id).
	ID() int64
	// TTL is the session's time to live.
	TTL() time.Duration
	// CreateEphemeral creates key bound to this session, only if absent.
	CreateEphemeral(ctx context.Context, key string, value []byte) (Version, error)
	// PutEphemeral replaces an ephemeral key's value on version, keeping it
	// bound to this session.
	PutEphemeral(ctx context.Context, key string, value []byte, expected Version) (Version, error)
	// Done is closed when the session is lost (expired or closed). The owner
	// must then stop acting on anything the session's keys claimed.
	Done() <-chan struct{}
	// Err says why Done was closed: ErrSessionExpired or ErrClosed.
	Err() error
	// Close revokes the session, deleting its ephemeral keys.
	Close() error
}

// Keys under which the package itself keeps state.
const (
	// SequencePrefix holds the id sequences of AllocateID.
	SequencePrefix = "/quire/sequences/"
)
