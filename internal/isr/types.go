package isr

import (
	"errors"
	"fmt"
	"time"
)

// BrokerID names a broker (Kafka's node id).
type BrokerID int32

// NoLeader is the leader of a partition that has none.
const NoLeader BrokerID = -1

// Acks values of a produce request.
const (
	AcksNone   int8 = 0  // no answer at all
	AcksLeader int8 = 1  // answered once the leader appended
	AcksAll    int8 = -1 // answered once the HW passed the batch
)

// NoEpoch is "no leader epoch" (Kafka's -1): a fetch without
// LastFetchedEpoch, an empty log's latest epoch.
const NoEpoch int32 = -1

// Protocol outcomes, named after Kafka's error codes. The shell maps them once
// to wire codes.
var (
	ErrNotLeaderOrFollower          = errors.New("isr: NOT_LEADER_OR_FOLLOWER")
	ErrNotEnoughReplicas            = errors.New("isr: NOT_ENOUGH_REPLICAS")
	ErrNotEnoughReplicasAfterAppend = errors.New("isr: NOT_ENOUGH_REPLICAS_AFTER_APPEND")
	ErrFencedLeaderEpoch            = errors.New("isr: FENCED_LEADER_EPOCH")
	ErrUnknownLeaderEpoch           = errors.New("isr: UNKNOWN_LEADER_EPOCH")
	ErrOffsetOutOfRange             = errors.New("isr: OFFSET_OUT_OF_RANGE")
	ErrRequestTimedOut              = errors.New("isr: REQUEST_TIMED_OUT")
	ErrInvalidUpdateVersion         = errors.New("isr: INVALID_UPDATE_VERSION")
	ErrIneligibleReplica            = errors.New("isr: INELIGIBLE_REPLICA")
	ErrNotController                = errors.New("isr: NOT_CONTROLLER")
	ErrUnknownPartition             = errors.New("isr: UNKNOWN_TOPIC_OR_PARTITION")
	ErrInvalidRequest               = errors.New("isr: INVALID_REQUEST")
	ErrStaleBrokerEpoch             = errors.New("isr: STALE_BROKER_EPOCH")
	// Elections asked for (Controller.Elect, Kafka's ElectLeaders).
	ErrElectionNotNeeded           = errors.New("isr: ELECTION_NOT_NEEDED")
	ErrPreferredLeaderNotAvailable = errors.New("isr: PREFERRED_LEADER_NOT_AVAILABLE")
	ErrEligibleLeadersNotAvailable = errors.New("isr: ELIGIBLE_LEADERS_NOT_AVAILABLE")
	// Reassignments asked for (Controller.Reassign, Kafka's
	// AlterPartitionReassignments).
	ErrInvalidReplicaAssignment = errors.New("isr: INVALID_REPLICA_ASSIGNMENT")
	ErrNoReassignmentInProgress = errors.New("isr: NO_REASSIGNMENT_IN_PROGRESS")
	ErrInvalidReplicationFactor = errors.New("isr: INVALID_REPLICATION_FACTOR")
	// ErrKafkaStorageError: the leader's log could not store the append
	// (out of space; see ErrLogWrite); retriable, the log is unchanged.
	ErrKafkaStorageError = errors.New("isr: KAFKA_STORAGE_ERROR")
	// ErrLogWrite is what a Log's Append wraps when it could not write the
	// batch (out of space, an I/O error) and left the log as it was. Any
	// other Append error breaks the Log's contract and stops the replica.
	ErrLogWrite = errors.New("isr: log write failed")
	// ErrVersionConflict is what the shell feeds back for a MetaOp whose
	// compare-and-swap failed (the store's version mismatch, key exists on
	// create, key missing on write): someone else wrote the record.
	ErrVersionConflict = errors.New("isr: metadata version conflict")
)

// Batch is a record batch as a replica's log stores it: the leader assigns
// BaseOffset and stamps its leader epoch when it appends; followers copy
// batches unchanged.
//
// A batch has one of two forms. Records holds the records one value each
// (the simulator's, MemLog's and the scripted tests' form); such a batch may
// be cut at any record. Raw holds Count records in bytes the core never
// looks inside: one Kafka record batch exactly as the producer sent it
// (internal/isr/isrnode), which the log stamps with BaseOffset and
// LeaderEpoch when it appends; it is never cut, as Kafka never splits a
// batch: a read returns it whole (from the one holding the offset asked
// for), and a truncation inside it removes it whole.
type Batch struct {
	BaseOffset  int64
	LeaderEpoch int32
	Records     [][]byte // at least one, unless Raw is set
	Raw         []byte   // when set, Records is nil
	Count       int32    // the records in Raw (≥ 1); unused with Records
}

// Len is the number of records in the batch.
func (b Batch) Len() int64 {
	if b.Raw != nil {
		return int64(b.Count)
	}
	return int64(len(b.Records))
}

// NextOffset is the offset after the batch's last record.
func (b Batch) NextOffset() int64 { return b.BaseOffset + b.Len() }

// EpochEndOffset is the answer to "where does epoch E end in your log?"
// (OffsetsForLeaderEpoch, and Fetch's DivergingEpoch): the largest epoch the
// log knows that is ≤ E, and the offset where it ends (the start of the next
// epoch, or the LEO for the latest). Epoch NoEpoch with EndOffset -1 is
// "undefined": the log knows no epoch ≤ E.
type EpochEndOffset struct {
	Epoch     int32
	EndOffset int64
}

// FetchRequest is Kafka's Fetch for one partition, from a follower
// (ReplicaID ≥ 0) or a consumer (ReplicaID -1, identified by Client).
type FetchRequest struct {
	ID        uint64 // chosen by the sender; echoed in the response
	Partition string
	ReplicaID BrokerID
	Client    string
	To        BrokerID // the broker it is sent to (the leader as the sender sees it)
	// BrokerEpoch is the follower's registration epoch (KIP-903's
	// ReplicaState.ReplicaEpoch): an ISR expansion carries it, and the
	// controller refuses it if the broker has registered again since.
	BrokerEpoch int64
	// CurrentLeaderEpoch is the sender's leader epoch (KIP-320): an older one
	// gets ErrFencedLeaderEpoch, a newer one ErrUnknownLeaderEpoch.
	CurrentLeaderEpoch int32
	FetchOffset        int64
	// LastFetchedEpoch is the epoch of the follower's last batch (NoEpoch
	// when its log is empty); the leader answers DivergingEpoch when its own
	// log ends that epoch earlier.
	LastFetchedEpoch int32
	MaxBatches       int
}

// FetchResponse answers a FetchRequest.
type FetchResponse struct {
	ID        uint64
	Partition string
	From      BrokerID // the answering broker
	ReplicaID BrokerID // the request's
	Client    string   // the request's
	Err       error
	// LeaderEpoch is the answering leader's epoch.
	LeaderEpoch   int32
	HighWatermark int64
	LogEndOffset  int64
	// Diverging is set when the follower's log diverges from the leader's:
	// truncate to (at most) Diverging.EndOffset and fetch again.
	Diverging *EpochEndOffset
	Batches   []Batch
}

// ProduceRequest appends records to a partition through its leader.
type ProduceRequest struct {
	ID        uint64
	Client    string
	Partition string
	Acks      int8
	// Records, or Raw and Count: the batch to append, in one of Batch's
	// two forms.
	Records [][]byte
	Raw     []byte
	Count   int32
	// Timeout bounds how long an acks=all request waits for the HW
	// (Kafka's produce timeoutMs); 0 takes ReplicaConfig.ProduceTimeout.
	Timeout time.Duration
}

// ProduceResponse answers a ProduceRequest with acks 1 or all.
type ProduceResponse struct {
	ID         uint64
	Client     string
	Partition  string
	From       BrokerID
	Err        error
	BaseOffset int64 // of the appended batch; -1 when nothing was appended
	// LeaderEpoch is the leader's epoch when it answered (which may be newer
	// than the batch's if the broker was elected again meanwhile).
	LeaderEpoch int32
}

// Member is a replica in an ISR or ELR with the broker epoch (registration)
// it was admitted under. Kafka's AlterPartition carries these epochs
// (NewIsrWithEpochs, KIP-903); keeping them in the record lets a controller
// tell, from the registration alone, that a member restarted after an
// unclean shutdown since it was admitted.
type Member struct {
	ID          BrokerID
	BrokerEpoch int64
}

// AlterPartitionRequest is a leader's proposal of a new ISR, valid only
// against the partition epoch it names.
type AlterPartitionRequest struct {
	ID             uint64
	Partition      string
	Broker         BrokerID // the proposing leader
	BrokerEpoch    int64
	LeaderEpoch    int32
	PartitionEpoch int32 // the version of the record the proposal is based on
	NewISR         []Member
}

// AlterPartitionResponse answers an AlterPartitionRequest: the record as
// written, or why not.
type AlterPartitionResponse struct {
	ID              uint64
	Partition       string
	To              BrokerID
	ControllerEpoch int64
	Err             error
	State           PartitionState
}

// StatePush is the controller telling a broker a partition's new record
// (Kafka's metadata propagation; LeaderAndIsr in the ZooKeeper era).
type StatePush struct {
	To              BrokerID
	ControllerEpoch int64
	State           PartitionState
}

// EventKind classifies what a core reports for the trace and the checkers.
type EventKind int

const (
	EventBecameLeader     EventKind = iota + 1 // Epoch, Offset: epoch start offset
	EventBecameFollower                        // Epoch, Broker: the leader
	EventTruncated                             // Offset: new LEO, Other: old LEO
	EventHighWatermark                         // Offset: new HW (a leader's)
	EventISRProposed                           // Detail
	EventISRRejected                           // Detail
	EventAckedAll                              // Offset: base offset of an acks=all batch acknowledged
	EventFlushed                               // Offset: flushed up to
	EventElected                               // controller: Broker elected at Epoch; Detail says how
	EventUncleanElection                       // controller: Broker elected uncleanly at Epoch
	EventFenced                                // controller: Broker fenced
	EventDeposed                               // controller: a newer controller wrote; this one stops
	EventPartitionWritten                      // controller: Detail describes the record written
	EventRebalance                             // controller: preferred-leader election
	EventReassignment                          // controller: a reassignment started, completed or was cancelled (Detail)
)

var eventNames = map[EventKind]string{
	EventBecameLeader: "became-leader", EventBecameFollower: "became-follower", EventTruncated: "truncated",
	EventHighWatermark: "hw", EventISRProposed: "isr-proposed", EventISRRejected: "isr-rejected",
	EventAckedAll: "acked-all", EventFlushed: "flushed", EventElected: "elected",
	EventUncleanElection: "unclean-election", EventFenced: "fenced", EventDeposed: "deposed",
	EventPartitionWritten: "written", EventRebalance: "rebalance", EventReassignment: "reassignment",
}

func (k EventKind) String() string {
	if s, ok := eventNames[k]; ok {
		return s
	}
	return fmt.Sprintf("event(%d)", int(k))
}

// Event is one thing a core did that the shell may log and the simulator's
// checkers look at.
type Event struct {
	Kind      EventKind
	Partition string
	Broker    BrokerID
	Epoch     int32
	Offset    int64
	Other     int64
	Detail    string
}

func (e Event) String() string {
	s := e.Kind.String()
	if e.Partition != "" {
		s += " " + e.Partition
	}
	switch e.Kind {
	case EventBecameLeader:
		s += fmt.Sprintf(" epoch=%d start=%d", e.Epoch, e.Offset)
	case EventBecameFollower:
		s += fmt.Sprintf(" epoch=%d leader=%d", e.Epoch, e.Broker)
	case EventTruncated:
		s += fmt.Sprintf(" %d -> %d", e.Other, e.Offset)
	case EventHighWatermark, EventFlushed, EventAckedAll:
		s += fmt.Sprintf(" %d", e.Offset)
	case EventElected, EventUncleanElection, EventRebalance:
		s += fmt.Sprintf(" broker=%d epoch=%d", e.Broker, e.Epoch)
	case EventFenced:
		s += fmt.Sprintf(" broker=%d", e.Broker)
	}
	if e.Detail != "" {
		s += " " + e.Detail
	}
	return s
}

// Mutants break the protocol on purpose so that the simulator's checkers can
// be seen failing. Never set outside tests and `quire sim isr --mutant`. They
// are switches in each core's config (ReplicaConfig.Mutants,
// ControllerConfig.Mutants), as in internal/ledger, rather than package
// variables, so that simulations of different mutants can run side by side;
// ParseMutant turns the names in MutantNames into them.
type Mutants struct {
	// TruncateToHighWatermark: a replica that becomes a follower truncates
	// to its own HW and fetches without LastFetchedEpoch (Kafka before
	// KIP-101, KAFKA-1211).
	TruncateToHighWatermark bool
	// HighWatermarkIgnoresMinISR: the leader advances the HW while
	// |ISR| < min.insync.replicas.
	HighWatermarkIgnoresMinISR bool
	// ElectOutOfSync: the controller elects the first live replica in
	// assignment order, in sync or not, as if it were a clean election.
	ElectOutOfSync bool
	// NoEpochFencing: leaders answer fetches whatever leader epoch they
	// carry, and followers take fetch responses from whichever broker
	// answers, even a deposed leader answering an old fetch: its batches
	// are written at their offsets, replacing what the log held there.
	NoEpochFencing bool
	// ISRChangeWithoutCAS: the controller writes a leader's ISR proposal as
	// the proposer saw the record (its leader, epochs and ISR) without
	// checking the partition epoch or the stored version.
	ISRChangeWithoutCAS bool
}

// MutantNames are the names ParseMutant accepts, one per Mutants field, in
// field order.
var MutantNames = []string{"truncate-to-hw", "hw-ignores-min-isr", "elect-out-of-sync", "no-epoch-fencing", "isr-change-without-cas"}

// ParseMutant turns a mutant name into the switch it sets; "" is the real
// protocol.
func ParseMutant(name string) (Mutants, error) {
	var m Mutants
	switch name {
	case "":
	case "truncate-to-hw":
		m.TruncateToHighWatermark = true
	case "hw-ignores-min-isr":
		m.HighWatermarkIgnoresMinISR = true
	case "elect-out-of-sync":
		m.ElectOutOfSync = true
	case "no-epoch-fencing":
		m.NoEpochFencing = true
	case "isr-change-without-cas":
		m.ISRChangeWithoutCAS = true
	default:
		return m, fmt.Errorf("isr: unknown mutant %q (known: %v)", name, MutantNames)
	}
	return m, nil
}

// Any reports whether any mutant is switched on.
func (m Mutants) Any() bool { return m != Mutants{} }

// invariantViolated panics with the broken invariant, for checkInvariants.
func invariantViolated(what string, args ...any) {
	panic("isr: invariant violated: " + fmt.Sprintf(what, args...))
}
