package txn

import (
	"cmp"
	"fmt"
	"slices"
	"time"
)

// State is a transactional id's state, named as Kafka's
// TransactionState names it (DescribeTransactions shows these names).
type State int8

const (
	// Empty: a producer id and epoch, no transaction open.
	Empty State = iota
	// Ongoing: partitions (or groups) were added; records may be written.
	Ongoing
	// PrepareCommit and PrepareAbort: the outcome is decided and durable;
	// the markers are being written to every partition of the transaction.
	PrepareCommit
	PrepareAbort
	// CompleteCommit and CompleteAbort: every marker was written.
	CompleteCommit
	CompleteAbort
)

func (s State) String() string {
	switch s {
	case Empty:
		return "Empty"
	case Ongoing:
		return "Ongoing"
	case PrepareCommit:
		return "PrepareCommit"
	case PrepareAbort:
		return "PrepareAbort"
	case CompleteCommit:
		return "CompleteCommit"
	case CompleteAbort:
		return "CompleteAbort"
	}
	return fmt.Sprintf("State(%d)", int8(s))
}

// preparing reports whether s is a Prepare state (markers being written).
func (s State) preparing() bool { return s == PrepareCommit || s == PrepareAbort }

// complete reports whether s is a Complete state.
func (s State) complete() bool { return s == CompleteCommit || s == CompleteAbort }

// Partition is a topic partition in a transaction.
type Partition struct {
	Topic     string
	Partition int32
}

func comparePartitions(a, b Partition) int {
	if c := cmp.Compare(a.Topic, b.Topic); c != 0 {
		return c
	}
	return cmp.Compare(a.Partition, b.Partition)
}

func (p Partition) String() string { return fmt.Sprintf("%s-%d", p.Topic, p.Partition) }

// Record is what the coordinator keeps durable for one transactional id
// (Kafka's TransactionMetadata, a record of its __transaction_state topic;
// here the shell stores it in the metadata store). The coordinator changes
// it only through a MetaOp and applies a change only after the shell says
// it is durable.
type Record struct {
	TransactionalID string
	ProducerID      int64
	ProducerEpoch   int16
	// LastProducerID and LastProducerEpoch are the pair before the last
	// change: a producer retrying InitProducerID with the pair it had
	// (KIP-360) is recognised, and a new producer id keeps the old one
	// for the same reason. -1 when none.
	LastProducerID    int64
	LastProducerEpoch int16
	TimeoutMs         int32
	State             State
	// Partitions and Groups are the transaction's participants (sorted,
	// no duplicates): partitions get a marker, groups' pending offsets are
	// committed or dropped. Empty outside Ongoing and the Prepare states.
	Partitions []Partition
	Groups     []string
	// StartMs is when the transaction began (the first participant was
	// added); UpdateMs when the record last changed. Unix milliseconds.
	StartMs, UpdateMs int64
	// Decision numbers the id's decisions: it grows by one at every
	// Prepare. Markers carry it (as Kafka's coordinator epoch), and a
	// partition applies a producer's markers only in increasing order of
	// it, so a late marker of an earlier transaction — from a coordinator
	// that has not yet learnt it lost the id — cannot end a later one
	// that reuses the producer id and epoch.
	Decision int32
}

// Clone returns a deep copy.
func (r Record) Clone() Record {
	r.Partitions = slices.Clone(r.Partitions)
	r.Groups = slices.Clone(r.Groups)
	return r
}

// Version is the store's version of a Record, for compare-and-swap (0: the
// record does not exist yet).
type Version int64

// RequestID names a client request; the shell chooses it (never 0) and
// routes the Response by it.
type RequestID uint64

// OpID names an operation the coordinator asked the shell to carry out.
type OpID uint64

// InitProducerIDRequest is InitProducerId with a transactional id.
// ProducerID and ProducerEpoch are -1, or the pair the producer had
// (KIP-360: a producer recovering from an error keeps its id).
type InitProducerIDRequest struct {
	TransactionalID string
	TimeoutMs       int32
	ProducerID      int64
	ProducerEpoch   int16
}

// AddPartitionsRequest is AddPartitionsToTxn from a producer.
type AddPartitionsRequest struct {
	TransactionalID string
	ProducerID      int64
	ProducerEpoch   int16
	Partitions      []Partition
}

// AddOffsetsRequest is AddOffsetsToTxn: the group's offsets join the
// transaction.
type AddOffsetsRequest struct {
	TransactionalID string
	ProducerID      int64
	ProducerEpoch   int16
	Group           string
}

// EndTxnRequest is EndTxn.
type EndTxnRequest struct {
	TransactionalID string
	ProducerID      int64
	ProducerEpoch   int16
	Commit          bool
}

// Response answers one request. Err is a kerr error (nil: success); an
// InitProducerID success carries the producer id and epoch.
type Response struct {
	ID            RequestID
	Err           error
	ProducerID    int64
	ProducerEpoch int16
}

// MetaOp asks the shell to write Record if the stored version is still
// Expect (0: create it), and to call StepMeta with the outcome.
type MetaOp struct {
	ID     OpID
	Record Record
	Expect Version
}

// MetaResult is the outcome of a MetaOp: the new version, or an error
// (ErrVersionConflict when the compare failed: another coordinator wrote).
type MetaResult struct {
	ID      OpID
	Version Version
	Err     error
}

// MarkerOp asks the shell to end a transaction in each of its
// participants: a control batch (commit or abort, with the producer id and
// epoch) appended to each partition, and each group's pending transactional
// offsets committed or dropped; then to call StepMarkers.
type MarkerOp struct {
	ID              OpID
	TransactionalID string
	ProducerID      int64
	ProducerEpoch   int16
	Commit          bool
	// Decision is the record's Decision: partitions ignore a marker whose
	// Decision is not above the last one they applied for the producer.
	Decision   int32
	Partitions []Partition
	Groups     []string
}

// MarkerResult says which participants of a MarkerOp were not ended (they
// are retried after Config.MarkerRetry); nil slices mean all were.
type MarkerResult struct {
	ID               OpID
	FailedPartitions []Partition
	FailedGroups     []string
}

// ProducerIDResult answers a producer id request: a new, never used
// producer id, or an error.
type ProducerIDResult struct {
	ID         OpID
	ProducerID int64
	Err        error
}

// Ready is what the coordinator produced since the last call to Ready.
type Ready struct {
	Responses   []Response
	MetaOps     []MetaOp
	Markers     []MarkerOp
	ProducerIDs []OpID // each wants a ProducerIDResult
}

// Config configures a Coordinator.
type Config struct {
	// MaxTimeout bounds a transaction's timeout
	// (transaction.max.timeout.ms; default 15 minutes): InitProducerID
	// with a longer one gets INVALID_TRANSACTION_TIMEOUT.
	MaxTimeout time.Duration
	// MarkerRetry is how long after a failed marker the participant is
	// tried again; default 100 ms.
	MarkerRetry time.Duration
	// MetaRetry is how long after a failed metadata write (not a version
	// conflict) a Prepare or Complete write is tried again; default 100 ms.
	MetaRetry time.Duration
	// Mutants break the coordinator on purpose, for the simulator's
	// checkers to catch (quire sim txn --mutant); zero in production.
	Mutants Mutants
}

// Mutants are deliberately broken variants of the coordinator.
type Mutants struct {
	// EarlyMarkers sends a transaction's markers when EndTxn arrives, before
	// its decision is durable: a failed write then leaves markers of an
	// outcome the record never took.
	EarlyMarkers bool
}

func (c Config) withDefaults() Config {
	if c.MaxTimeout <= 0 {
		c.MaxTimeout = 15 * time.Minute
	}
	if c.MarkerRetry <= 0 {
		c.MarkerRetry = 100 * time.Millisecond
	}
	if c.MetaRetry <= 0 {
		c.MetaRetry = 100 * time.Millisecond
	}
	return c
}
