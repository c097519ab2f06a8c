package mlog

import (
	"errors"
	"fmt"
	"time"

	"quire/internal/meta"
)

var (
	// ErrFenced: another broker took the topic over; this owner must stop.
	ErrFenced = errors.New("mlog: topic fenced by another owner")
	// ErrClosed: the topic is closing or closed.
	ErrClosed = errors.New("mlog: topic closed")
	// ErrBacklogQuotaExceeded: the producer_exception policy refused a write
	// (or producer_request_hold had no room left to hold it).
	ErrBacklogQuotaExceeded = errors.New("mlog: backlog quota exceeded")
	// ErrBacklogQuotaHoldTimeout: a held write waited QuotaHoldTimeout.
	ErrBacklogQuotaHoldTimeout = errors.New("mlog: backlog quota exceeded, hold timed out")
	// ErrBusy: the bounded queue of appends waiting to be sent (for a
	// writable ledger during takeover or rollover, or for room among the
	// writer's MaxWriterInFlight) is full. Backpressure: the append was not
	// written and nothing failed; try again later, or take an admission
	// first (mlogclient.ManagedLedger.Admit) so that this never happens.
	ErrBusy = errors.New("mlog: busy: too many appends queued")
	// ErrTooManyQueued is ErrBusy's former name.
	ErrTooManyQueued = ErrBusy
	// ErrNoWritableLedger: the topic has no ledger to append to, because
	// creating one failed (typically: too few writable bookies, their disks
	// full). Retriable: the topic keeps trying to create one and takes
	// appends again once it has.
	ErrNoWritableLedger = errors.New("mlog: no writable ledger")
	// ErrNoSuchEntry: an acknowledgement for a position that holds no entry.
	ErrNoSuchEntry = errors.New("mlog: no such entry")
	// ErrNoSuchCursor: an acknowledgement on an unknown cursor.
	ErrNoSuchCursor = errors.New("mlog: no such cursor")
)

// Config configures a Topic. Zero values take the defaults named.
type Config struct {
	Name  string // topic name; part of the metadata keys
	Owner string // this broker, written into the record for diagnostics

	Rollover  RolloverPolicy  // zero: DefaultRolloverPolicy
	Retention RetentionPolicy // zero: delete as soon as consumed
	Quota     BacklogQuota    // zero: no quota
	// QuotaHoldTimeout bounds how long producer_request_hold holds a write
	// (default 30s); MaxHeldAppends how many it holds (default 1,000).
	QuotaHoldTimeout time.Duration
	MaxHeldAppends   int
	// MessageTTL acknowledges entries older than it on every cursor; 0 off.
	MessageTTL time.Duration
	// MaxQueuedAppends bounds appends waiting to be sent: for a writable
	// ledger (takeover, rollover) or for room among MaxWriterInFlight;
	// default DefaultMaxQueuedAppends. An append beyond it gets ErrBusy.
	MaxQueuedAppends int
	// MaxWriterInFlight bounds appends sent to the current ledger and not
	// yet answered (default DefaultMaxWriterInFlight). It must not exceed
	// what the ledger writer accepts (ledgerclient's MaxInFlight, which
	// refuses an add beyond it): reaching it is backpressure — appends
	// wait in the queue — never a failed ledger.
	MaxWriterInFlight int
	// CursorPersistInterval: a changed cursor is written at most this often
	// (and on Close); default 1s.
	CursorPersistInterval time.Duration
	// MaxRangesToPersist: ack ranges per cursor snapshot (default 10,000).
	MaxRangesToPersist int
	// CursorLedgerMaxSnapshots: snapshots appended to one cursor ledger
	// before the cursor rolls to a new one (default 1,000).
	CursorLedgerMaxSnapshots int
	// RetryInterval spaces retries of a failed rollover; default 5s.
	RetryInterval time.Duration
	// TimeIndexInterval: one publish-time sample per ledger per interval
	// (default 1s); TTL and the age quota may act up to this much late.
	TimeIndexInterval time.Duration
	// EarlyTrim is the `early-trim` mutant (see TrimCandidates).
	EarlyTrim bool
}

// Defaults of Config's bounds on appends.
const (
	DefaultMaxQueuedAppends = 10_000
	// DefaultMaxWriterInFlight matches ledgerclient.DefaultMaxInFlight.
	DefaultMaxWriterInFlight = 1000
)

// New returns a topic core; call Open to start the takeover.
func New(cfg Config) *ManagedLedger {
	if cfg.Rollover == (RolloverPolicy{}) {
		cfg.Rollover = DefaultRolloverPolicy()
	}
	if cfg.QuotaHoldTimeout <= 0 {
		cfg.QuotaHoldTimeout = 30 * time.Second
	}
	if cfg.MaxHeldAppends <= 0 {
		cfg.MaxHeldAppends = 1000
	}
	if cfg.MaxQueuedAppends <= 0 {
		cfg.MaxQueuedAppends = DefaultMaxQueuedAppends
	}
	if cfg.MaxWriterInFlight <= 0 {
		cfg.MaxWriterInFlight = DefaultMaxWriterInFlight
	}
	if cfg.CursorPersistInterval <= 0 {
		cfg.CursorPersistInterval = time.Second
	}
	if cfg.MaxRangesToPersist <= 0 {
		cfg.MaxRangesToPersist = DefaultMaxUnackedRangesToPersist
	}
	if cfg.CursorLedgerMaxSnapshots <= 0 {
		cfg.CursorLedgerMaxSnapshots = 1000
	}
	if cfg.RetryInterval <= 0 {
		cfg.RetryInterval = 5 * time.Second
	}
	if cfg.TimeIndexInterval <= 0 {
		cfg.TimeIndexInterval = time.Second
	}
	return &ManagedLedger{
		cfg:       cfg,
		ledgerOps: map[OpID]pendingLedger{},
		metaOps:   map[OpID]pendingMeta{},
		times:     map[int64]*timeIndex{},
		cursors:   map[string]*cursorState{},
		loading:   map[string]*cursorState{},

		deleteAfterRecord: map[string]meta.Version{},
	}
}

// OpID correlates an operation in Ready with its result.
type OpID uint64

// LedgerOpKind says what a LedgerOp asks for.
type LedgerOpKind int

const (
	// LedgerCreate: create a ledger; the result carries its id.
	LedgerCreate LedgerOpKind = iota + 1
	// LedgerAppend: add Payload to Ledger; the result carries the entry id.
	// Appends to one ledger must be carried out in the order given.
	LedgerAppend
	// LedgerClose: close Ledger (our own) once its appends are answered.
	LedgerClose
	// LedgerRecover: fence and close a previous owner's Ledger; the result
	// carries its entry count and size.
	LedgerRecover
	// LedgerDelete: delete Ledger from the bookies and its metadata.
	LedgerDelete
	// LedgerRead: read entry Entry of (closed) Ledger; the result carries
	// its Payload.
	LedgerRead
)

var ledgerOpNames = [...]string{"?", "create", "append", "close", "recover", "delete", "read"}

func (k LedgerOpKind) String() string { return ledgerOpNames[k] }

// LedgerOp is a ledger operation for the caller to carry out.
type LedgerOp struct {
	ID      OpID
	Kind    LedgerOpKind
	Ledger  int64
	Payload []byte
	Entry   int64 // LedgerRead
}

// LedgerResult answers a LedgerOp.
type LedgerResult struct {
	ID      OpID
	Ledger  int64 // LedgerCreate: the new ledger
	EntryID int64 // LedgerAppend
	// Entries and Size: the closed ledger's (LedgerRecover, LedgerClose).
	Entries int64
	Size    int64
	Payload []byte // LedgerRead
	Err     error  // ledger.ErrFenced (or ErrFenced) when fenced
}

// MetaOpKind says what a MetaOp asks for.
type MetaOpKind int

const (
	MetaGet    MetaOpKind = iota + 1 // Get Key
	MetaCreate                       // Create Key with Value
	MetaPut                          // Put Key with Value on Version
	MetaDelete                       // Delete Key on Version
)

// MetaOp is a metadata operation for the caller to carry out.
type MetaOp struct {
	ID      OpID
	Kind    MetaOpKind
	Key     string
	Value   []byte
	Version meta.Version
}

// MetaResult answers a MetaOp with the store's value/version or error.
type MetaResult struct {
	ID      OpID
	Value   []byte
	Version meta.Version
	Err     error
}

// AppendAck answers one Append: its position, or why it failed.
type AppendAck struct {
	Token uint64
	Pos   Position
	Err   error
}

// EventKind classifies an Event.
type EventKind int

const (
	EventOpened EventKind = iota + 1
	EventClosed
	EventFenced
	EventFailed
	EventRolledOver
	EventRolloverFailed
	// EventAckRangesOverLimit: a cursor's ack ranges crossed the persisted
	// limit; ranges beyond it are in memory only (logged once per crossing).
	EventAckRangesOverLimit
	EventTrimmed
	EventTTLExpired
	EventBacklogEvicted
	// EventDeleteAbandoned: a ledger delete failed while maxDeleteRetries
	// others waited for a retry; the ledger stays on the bookies.
	EventDeleteAbandoned
	// EventCompacted: a compaction swap replaced ledgers (Detail says which).
	EventCompacted
)

// Event is something the shell should log.
type Event struct {
	Kind   EventKind
	Cursor string
	Err    error
	Detail string
}

func (e Event) String() string {
	return fmt.Sprintf("event %d cursor=%q err=%v %s", e.Kind, e.Cursor, e.Err, e.Detail)
}

// Ready is the work a Topic asks for.
type Ready struct {
	LedgerOps []LedgerOp
	MetaOps   []MetaOp
	Acks      []AppendAck
	Events    []Event
	// Compactions answer RegisterCompaction and EndCompaction.
	Compactions []CompactionDone
}

// Empty reports whether there is nothing to do.
func (r Ready) Empty() bool {
	return len(r.LedgerOps) == 0 && len(r.MetaOps) == 0 && len(r.Acks) == 0 && len(r.Events) == 0 &&
		len(r.Compactions) == 0
}

type metaPurpose int

const (
	metaLoadTopic metaPurpose = iota
	metaLoadCursor
	metaCursorPersist
	metaCheckOwner
	metaCursorVersion
	metaCursorDelete
	// metaCursorClaim: while loading, rewrite the cursor pointer before
	// recovering the cursor ledger it names, so that a previous owner
	// can no longer point the cursor at a ledger we would not fence.
	metaCursorClaim
	// metaRecordCheck reads the record after a CAS whose outcome is unknown
	// (an error that is not a version conflict: it may have applied).
	metaRecordCheck
	// Purposes from here on are topic-record CAS writes.
	metaRecordOpen
	metaRecordRoll
	metaRecordTrim
	metaRecordSync
	// metaRecordCompact: a compaction's CAS (registering its ledger, or
	// the swap).
	metaRecordCompact
)

var metaPurposeNames = [...]string{"load topic", "load cursor", "persist cursor", "check owner", "cursor version", "delete cursor", "claim cursor", "check record", "register ledger", "roll over", "trim", "sync record", "compact"}

func (p metaPurpose) String() string { return metaPurposeNames[p] }

type pendingMeta struct {
	purpose   metaPurpose
	cursor    string
	persisted int   // metaCursorPersist: ranges in the snapshot
	cledger   int64 // metaCursorPersist: the cursor ledger the pointer names
	// claim: a pointer write naming a new cursor ledger before its first
	// append, which follows once it succeeded.
	claim   *pendingLedger
	ledgers []int64 // metaRecordTrim: ledgers removed
	// deletes are cursor records to delete once this record write (which
	// no longer names them) succeeds.
	deletes  map[string]meta.Version
	proposal []LedgerInfo
	// written: a record CAS's value. check: for metaRecordCheck, the CAS
	// whose outcome it settles and the error that CAS reported.
	written  []byte
	check    *pendingMeta
	checkErr error
	// garbage: the Garbage list this record write carries (see
	// Record.Garbage); compaction: the request it writes for.
	garbage    []int64
	compaction *compactRequest
}

type pendingLedger struct {
	kind   LedgerOpKind
	ledger int64
	token  uint64
	size   int64
	// cursor names the cursor whose ledger this op is on ("" for the
	// topic's ledgers); snapshot, persisted and md describe the snapshot a
	// cursor create or append carries; entry is a cursor read's entry.
	cursor    string
	snapshot  []byte
	persisted int
	md        Position
	entry     int64
}

// Stats is the topic's state for metrics.
type Stats struct {
	Phase         string
	CurrentLedger int64
	Ledgers       int
	StorageSize   int64 // bytes in every ledger of the list
	Entries       int64

	Rollovers         int64
	RolloverFailures  int64
	LastRolloverError string
	TrimmedLedgers    int64
	// Compactions counts compaction swaps; CompactedBytes the bytes they
	// removed from the list (replaced minus compacted); Garbage the
	// ledgers off the list still to delete.
	Compactions    int64
	CompactedBytes int64
	Garbage        int
	// DeleteFailures counts failed ledger deletes (each is retried);
	// DeletesAbandoned those not retried because maxDeleteRetries were
	// already waiting.
	DeleteFailures   int64
	DeletesAbandoned int64
	DeletesPending   int

	// AppendsInFlight: sent to the current ledger, not yet answered (at
	// most MaxWriterInFlight). QueuedAppends: waiting to be sent.
	AppendsInFlight int
	QueuedAppends   int
	// AppendsQueuedTotal counts appends that had to wait in the queue;
	// BusyRejected those refused with ErrBusy because it was full.
	AppendsQueuedTotal int64
	BusyRejected       int64
	// NoLedgerRejected counts appends refused with ErrNoWritableLedger.
	NoLedgerRejected int64

	HeldAppends       int
	QuotaRejected     int64
	QuotaHoldTimeouts int64
	Evictions         int64
	TTLExpirations    int64

	// CacheHits and CacheMisses are counted by the shell's entry cache.
	CacheHits   int64
	CacheMisses int64
	// ReadAhead*: the shell's read-ahead for readers behind the tail:
	// entries served from it, entries fetched into it, fetches skipped (a
	// bound reached), and bytes it holds.
	ReadAheadHits    int64
	ReadAheadFetched int64
	ReadAheadSkipped int64
	ReadAheadBytes   int64

	Cursors []CursorStats
}

// CursorStats is one cursor's state for metrics.
type CursorStats struct {
	Name       string
	MarkDelete Position
	// MarkDeleteAge is how long the mark-delete position has not moved while
	// there is backlog: the "storage locked by one unacked message" signal
	// (P8). Zero without backlog.
	MarkDeleteAge  time.Duration
	BacklogEntries int64
	BacklogBytes   int64
	// HolesPersisted are ack ranges in the last written snapshot;
	// HolesInMemoryOnly those beyond the persisted limit (redelivered after
	// a crash).
	Holes             int
	HolesPersisted    int
	HolesInMemoryOnly int
	// Unpersisted: acknowledgements not yet written to the cursor's record
	// (a crash now redelivers them).
	Unpersisted bool
}
