package isr

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"quire/internal/invariants"
)

// ReplicaConfig configures a Replica. Zero durations and counts take Kafka's
// defaults, named beside each.
type ReplicaConfig struct {
	Broker    BrokerID
	Partition string
	// BrokerEpoch is this broker's registration epoch (the version of its
	// key in the metadata store). A record electing this broker under
	// another broker epoch elected a previous incarnation: it is not obeyed.
	BrokerEpoch int64
	Log         Log
	// MinISR is min.insync.replicas (default 1).
	MinISR int
	// LagTimeMax is replica.lag.time.max.ms (default 30 s; the seed's era
	// used 10 s): a follower not caught up for longer leaves the ISR.
	LagTimeMax time.Duration
	// FetchBackoff is how long a follower waits after an empty fetch
	// response before fetching again (default 500 ms: it stands in for the
	// leader holding the request, replica.fetch.wait.max.ms).
	FetchBackoff time.Duration
	// FetchTimeout: a follower's fetch unanswered for this long is given up
	// and sent again (default 30 s, replica.socket.timeout.ms).
	FetchTimeout time.Duration
	// FetchMaxBatches bounds the batches of one fetch response (default 16).
	FetchMaxBatches int
	// AlterPartitionTimeout: an ISR proposal unanswered for this long is
	// sent again (default 5 s).
	AlterPartitionTimeout time.Duration
	// ProduceTimeout is the acks=all wait of a request that names none
	// (default 30 s, request.timeout.ms).
	ProduceTimeout time.Duration
	// FlushMessages is flush.messages: flush once this many records are
	// unflushed. 0 never forces a flush (Kafka's default: the OS flushes).
	FlushMessages int64
	// FlushInterval is flush.ms: flush when unflushed records are this old
	// (checked on Tick). 0: never.
	FlushInterval time.Duration
	// HighWatermarkCheckpointInterval is
	// replica.high.watermark.checkpoint.interval.ms (default 5 s).
	HighWatermarkCheckpointInterval time.Duration
	Mutants                         Mutants
}

func (c *ReplicaConfig) setDefaults() {
	if c.MinISR <= 0 {
		c.MinISR = 1
	}
	if c.LagTimeMax <= 0 {
		c.LagTimeMax = 30 * time.Second
	}
	if c.FetchBackoff <= 0 {
		c.FetchBackoff = 500 * time.Millisecond
	}
	if c.FetchTimeout <= 0 {
		c.FetchTimeout = 30 * time.Second
	}
	if c.FetchMaxBatches <= 0 {
		c.FetchMaxBatches = 16
	}
	if c.AlterPartitionTimeout <= 0 {
		c.AlterPartitionTimeout = 5 * time.Second
	}
	if c.ProduceTimeout <= 0 {
		c.ProduceTimeout = 30 * time.Second
	}
	if c.HighWatermarkCheckpointInterval <= 0 {
		c.HighWatermarkCheckpointInterval = 5 * time.Second
	}
}

// Ready is what a Replica wants done: messages to send, answers to give and
// events to report, each list in the order the replica produced it.
type Ready struct {
	// Fetches are a follower's fetch requests, to its leader.
	Fetches []FetchRequest
	// FetchResponses answer fetches (followers' and consumers').
	FetchResponses []FetchResponse
	// ProduceResponses answer produce requests with acks 1 or all.
	ProduceResponses []ProduceResponse
	// AlterPartitions are ISR proposals, to the controller.
	AlterPartitions []AlterPartitionRequest
	Events          []Event
}

// Empty reports whether there is nothing to do.
func (r Ready) Empty() bool {
	return len(r.Fetches) == 0 && len(r.FetchResponses) == 0 && len(r.ProduceResponses) == 0 &&
		len(r.AlterPartitions) == 0 && len(r.Events) == 0
}

// Role is what a replica currently does for its partition.
type Role int

const (
	// RoleNone: no record names this replica leader or follower (not yet
	// told, removed from the assignment, or elected under another broker
	// epoch). It refuses everything.
	RoleNone Role = iota
	RoleLeader
	RoleFollower
)

func (r Role) String() string { return [...]string{"none", "leader", "follower"}[r] }

// Replica is one broker's replica of one partition, as a deterministic state
// machine: leader or follower as the controller's record says. Every input
// carries the time; outputs come out of Ready. See the package doc.
type Replica struct {
	cfg ReplicaConfig
	log Log
	now time.Time

	// state is the newest record applied. Invariant: (LeaderEpoch,
	// PartitionEpoch) never decreases.
	state     PartitionState
	haveState bool
	role      Role
	// hw is the high watermark. Invariant: 0 ≤ hw ≤ log.EndOffset().
	hw int64

	// Leader role.
	// epochStart is where this leader's epoch starts in its log.
	epochStart int64
	followers  map[BrokerID]*followerState
	// pendingISR is the AlterPartition proposal in flight (one at a time).
	pendingISR *isrProposal
	// waiting are acks=all requests appended and not yet answered, in
	// offset order.
	waiting []*waitingProduce

	// Follower role.
	fetchInFlight uint64 // id of the fetch sent and not answered; 0: none
	fetchSentAt   time.Time
	nextFetchAt   time.Time
	// leaderHW is the HW the leader sent in its last answer of this
	// follower's current leader epoch; -1 before one.
	leaderHW int64

	lastFlush        time.Time
	lastHWCheckpoint time.Time
	lastID           uint64
	ready            Ready

	// Kept for the invariant checks only.
	hwCheckEpoch int32 // the leader epoch hwCheckMax belongs to
	hwCheckMax   int64 // the highest HW this replica had as leader of hwCheckEpoch
	stateChecked PartitionState
}

// followerState is what a leader knows of one follower.
type followerState struct {
	logEndOffset       int64 // -1: unknown (no fetch in this leader epoch yet)
	lastCaughtUp       time.Time
	lastFetch          time.Time
	lastFetchLeaderLEO int64 // the leader's LEO at the follower's previous fetch
	brokerEpoch        int64 // from its last fetch
}

type isrProposal struct {
	req    AlterPartitionRequest
	sentAt time.Time
}

type waitingProduce struct {
	req      ProduceRequest
	base     int64
	next     int64 // the offset after the batch: acked once hw ≥ next
	deadline time.Time
}

// NewReplica returns a replica over log that waits for its partition state.
// Its HW starts at the checkpointed HW (capped at the log end), as a broker
// reads replication-offset-checkpoint on start.
func NewReplica(cfg ReplicaConfig, now time.Time) *Replica {
	if cfg.Log == nil {
		panic("isr: NewReplica without a Log")
	}
	cfg.setDefaults()
	r := &Replica{
		cfg: cfg, log: cfg.Log, now: now, lastFlush: now, lastHWCheckpoint: now,
		hw:           min(max(cfg.Log.HighWatermarkCheckpoint(), 0), cfg.Log.EndOffset()),
		leaderHW:     -1,
		followers:    map[BrokerID]*followerState{},
		hwCheckEpoch: NoEpoch,
	}
	if invariants.Enabled {
		r.checkInvariants()
	}
	return r
}

// Role is the replica's current role.
func (r *Replica) Role() Role { return r.role }

// State is the newest partition record the replica applied.
func (r *Replica) State() PartitionState { return r.state.Clone() }

// HighWatermark is the replica's HW.
func (r *Replica) HighWatermark() int64 { return r.hw }

// LogEndOffset is the replica's LEO.
func (r *Replica) LogEndOffset() int64 { return r.log.EndOffset() }

// LeaderEpoch is the leader epoch of the newest record applied (NoEpoch
// before the first).
func (r *Replica) LeaderEpoch() int32 {
	if !r.haveState {
		return NoEpoch
	}
	return r.state.LeaderEpoch
}

// LeaderHighWatermark is the leader's HW as this replica knows it: its
// own as the leader; as a follower, what the leader sent in its last
// answer in this leader epoch (-1 before one, and with no role). What a
// follower lags by is this minus its LEO (DescribeLogDirs' offset lag).
func (r *Replica) LeaderHighWatermark() int64 {
	switch r.role {
	case RoleLeader:
		return r.hw
	case RoleFollower:
		return r.leaderHW
	}
	return -1
}

// PendingISR is the ISR proposal in flight, if any.
func (r *Replica) PendingISR() ([]BrokerID, bool) {
	if r.pendingISR == nil {
		return nil, false
	}
	return memberIDs(r.pendingISR.req.NewISR), true
}

// FollowerLogEndOffset is what the leader knows of a follower's LEO (-1:
// nothing yet in this leader epoch).
func (r *Replica) FollowerLogEndOffset(id BrokerID) int64 {
	if f := r.followers[id]; f != nil {
		return f.logEndOffset
	}
	return -1
}

// FollowerLastCaughtUp is when the leader last knew a follower to be
// caught up with its log (Kafka's lastCaughtUpTimeMs; an ISR member counts
// as caught up when this replica became leader); the zero time when never
// in this leader epoch, or when id is not a follower here.
func (r *Replica) FollowerLastCaughtUp(id BrokerID) time.Time {
	if f := r.followers[id]; f != nil {
		return f.lastCaughtUp
	}
	return time.Time{}
}

// SetBrokerEpoch records that the broker registered again (its session was
// lost and renewed) under a new broker epoch.
func (r *Replica) SetBrokerEpoch(epoch int64, now time.Time) {
	r.input(now)
	if invariants.Enabled {
		defer r.checkInvariants()
	}
	// A follower whose next fetch fell due while time moved through
	// another input sends it now (runs before the invariant check).
	defer r.maybeFetch()
	r.cfg.BrokerEpoch = epoch
}

// Ready returns and clears the outputs accumulated so far.
func (r *Replica) Ready() Ready {
	out := r.ready
	r.ready = Ready{}
	return out
}

func (r *Replica) nextID() uint64 {
	r.lastID++
	return r.lastID
}

// input advances the replica's time: time never goes backwards inside a
// core, whatever the caller passes.
func (r *Replica) input(now time.Time) {
	if now.After(r.now) {
		r.now = now
	}
}

func (r *Replica) event(e Event) {
	e.Partition = r.cfg.Partition
	r.ready.Events = append(r.ready.Events, e)
}

// ApplyState feeds a partition record from the controller (pushed, or
// returned by AlterPartition). Records that are not newer than the one
// applied are ignored, so a deposed controller or a reordered push changes
// nothing.
func (r *Replica) ApplyState(s PartitionState, now time.Time) {
	r.input(now)
	if invariants.Enabled {
		defer r.checkInvariants()
	}
	r.applyState(s)
	r.maybeFetch()
}

func (r *Replica) applyState(s PartitionState) {
	if s.Partition != r.cfg.Partition || s.Validate() != nil {
		return
	}
	if r.haveState && !s.Newer(r.state) {
		return
	}
	old, hadState := r.state, r.haveState
	r.state, r.haveState = s.Clone(), true
	me := r.cfg.Broker
	switch {
	case !slices.Contains(s.Replicas, me):
		r.stopLeading(ErrNotLeaderOrFollower)
		r.role = RoleNone
	case s.Leader == me && s.LeaderBrokerEpoch != 0 && s.LeaderBrokerEpoch != r.cfg.BrokerEpoch:
		// The record elected a previous incarnation of this broker; the
		// controller will elect again once it sees the new registration.
		r.stopLeading(ErrNotLeaderOrFollower)
		r.role = RoleNone
	case s.Leader == me:
		if r.role == RoleLeader && hadState && old.LeaderEpoch == s.LeaderEpoch {
			r.leaderStateChanged()
			return
		}
		r.becomeLeader()
	default:
		if r.role == RoleFollower && hadState && old.LeaderEpoch == s.LeaderEpoch {
			return // an ISR change of the same leader epoch: nothing for a follower to do
		}
		r.becomeFollower()
	}
}

// becomeLeader starts this replica's leader epoch at its LEO.
func (r *Replica) becomeLeader() {
	r.stopLeading(ErrNotLeaderOrFollower) // answers of an earlier epoch are not this epoch's to give
	r.role = RoleLeader
	r.fetchInFlight = 0
	leo := r.log.EndOffset()
	r.log.AssignEpochStart(r.state.LeaderEpoch, leo)
	r.epochStart = leo
	r.followers = map[BrokerID]*followerState{}
	for _, id := range r.state.Replicas {
		if id == r.cfg.Broker {
			continue
		}
		f := &followerState{logEndOffset: -1, lastFetchLeaderLEO: -1}
		if r.state.InISR(id) {
			// Kafka's resetReplicaState: an ISR member counts as caught up
			// now, so it is not shrunk out before it could fetch once.
			f.lastCaughtUp = r.now
		}
		r.followers[id] = f
	}
	r.event(Event{Kind: EventBecameLeader, Broker: r.cfg.Broker, Epoch: r.state.LeaderEpoch, Offset: leo})
	r.maybeAdvanceHighWatermark()
}

// becomeFollower follows the record's leader (NoLeader: waits). It keeps
// its log: divergence is found by fetching with the last fetched epoch,
// except under the truncate-to-hw mutant (Kafka before KIP-101).
func (r *Replica) becomeFollower() {
	r.stopLeading(ErrNotLeaderOrFollower)
	r.role = RoleFollower
	r.fetchInFlight = 0
	r.nextFetchAt = r.now
	r.leaderHW = -1
	r.event(Event{Kind: EventBecameFollower, Broker: r.state.Leader, Epoch: r.state.LeaderEpoch})
	if r.cfg.Mutants.TruncateToHighWatermark {
		r.truncateTo(r.hw)
	}
}

// stopLeading answers every waiting acks=all request with err and drops the
// leader's bookkeeping.
func (r *Replica) stopLeading(err error) {
	for _, w := range r.waiting {
		r.answerProduce(w.req, w.base, err)
	}
	r.waiting = nil
	r.pendingISR = nil
	r.followers = map[BrokerID]*followerState{}
}

// leaderStateChanged handles a newer record of the same leader epoch on the
// leader: the controller changed the ISR (this leader's proposal, or a
// fenced broker removed) or the replicas (a reassignment).
func (r *Replica) leaderStateChanged() {
	if p := r.pendingISR; p != nil && p.req.PartitionEpoch < r.state.PartitionEpoch {
		// The record moved past the proposal's base: it was applied, or
		// it lost. Either way it is no longer in flight.
		r.pendingISR = nil
	}
	r.trackReplicas()
	r.checkMinISR()
	r.maybeAdvanceHighWatermark()
}

// minISR is min.insync.replicas: the partition record's, else the
// replica's configured one.
func (r *Replica) minISR() int { return r.state.Config.MinISROr(r.cfg.MinISR) }

// checkMinISR fails the waiting acks=all requests once the ISR is below
// min.insync.replicas. Kafka would let them time out under the strict HW
// rule; answering at once tells the producer what happened.
func (r *Replica) checkMinISR() {
	if len(r.state.ISR) >= r.minISR() || len(r.waiting) == 0 {
		return
	}
	for _, w := range r.waiting {
		r.answerProduce(w.req, w.base, ErrNotEnoughReplicasAfterAppend)
	}
	r.waiting = nil
}

// Produce appends a produce request's records if this replica leads. The
// answer (acks 1 and all) comes out of Ready.
func (r *Replica) Produce(req ProduceRequest, now time.Time) {
	r.input(now)
	if invariants.Enabled {
		defer r.checkInvariants()
	}
	// A follower whose next fetch fell due while time moved through
	// another input sends it now (runs before the invariant check).
	defer r.maybeFetch()
	switch {
	case req.Partition != r.cfg.Partition:
		r.answerProduce(req, -1, ErrUnknownPartition)
		return
	case r.role != RoleLeader:
		r.answerProduce(req, -1, ErrNotLeaderOrFollower)
		return
	case (len(req.Records) == 0) == (req.Raw == nil) || (req.Raw != nil && req.Count < 1) ||
		(req.Acks != AcksNone && req.Acks != AcksLeader && req.Acks != AcksAll):
		r.answerProduce(req, -1, ErrInvalidRequest)
		return
	case req.Acks == AcksAll && len(r.state.ISR) < r.minISR():
		r.answerProduce(req, -1, ErrNotEnoughReplicas)
		return
	}
	base := r.log.EndOffset()
	if err := r.log.Append(Batch{BaseOffset: base, LeaderEpoch: r.state.LeaderEpoch, Records: req.Records, Raw: req.Raw, Count: req.Count}); err != nil {
		if !errors.Is(err, ErrLogWrite) {
			panic(fmt.Sprintf("isr: partition %s: leader append at %d: %v", r.cfg.Partition, base, err)) // the Log's contract is broken
		}
		// Out of space: nothing was appended, the producer retries.
		r.answerProduce(req, -1, ErrKafkaStorageError)
		return
	}
	r.maybeFlushByCount()
	switch req.Acks {
	case AcksLeader:
		r.answerProduce(req, base, nil)
	case AcksAll:
		timeout := req.Timeout
		if timeout <= 0 {
			timeout = r.cfg.ProduceTimeout
		}
		r.waiting = append(r.waiting, &waitingProduce{req: req, base: base, next: r.log.EndOffset(), deadline: r.now.Add(timeout)})
	}
	r.maybeAdvanceHighWatermark()
}

// answerProduce answers a produce request (acks=0 gets no answer at all).
func (r *Replica) answerProduce(req ProduceRequest, base int64, err error) {
	if req.Acks == AcksNone {
		return
	}
	if err != nil {
		base = -1
	}
	r.ready.ProduceResponses = append(r.ready.ProduceResponses, ProduceResponse{
		ID: req.ID, Client: req.Client, Partition: req.Partition, From: r.cfg.Broker, Err: err,
		BaseOffset: base, LeaderEpoch: r.LeaderEpoch(),
	})
}

// Tick advances time: acks=all requests time out, the leader shrinks the
// ISR and resends an unanswered proposal, a follower fetches (again), and
// the flush and HW checkpoint policies run.
func (r *Replica) Tick(now time.Time) {
	r.input(now)
	if invariants.Enabled {
		defer r.checkInvariants()
	}
	kept := r.waiting[:0]
	for _, w := range r.waiting {
		if !r.now.Before(w.deadline) {
			r.answerProduce(w.req, w.base, ErrRequestTimedOut)
			continue
		}
		kept = append(kept, w)
	}
	clear(r.waiting[len(kept):])
	r.waiting = kept

	switch r.role {
	case RoleLeader:
		if p := r.pendingISR; p != nil && r.now.Sub(p.sentAt) >= r.cfg.AlterPartitionTimeout {
			p.req.ID, p.sentAt = r.nextID(), r.now
			r.ready.AlterPartitions = append(r.ready.AlterPartitions, p.req)
		}
		r.maybeShrinkISR()
	case RoleFollower:
		if r.fetchInFlight != 0 && r.now.Sub(r.fetchSentAt) >= r.cfg.FetchTimeout {
			r.fetchInFlight = 0
		}
	}
	if every := r.flushInterval(); every > 0 && r.log.FlushedOffset() < r.log.EndOffset() && r.now.Sub(r.lastFlush) >= every {
		r.flush()
	}
	if r.now.Sub(r.lastHWCheckpoint) >= r.cfg.HighWatermarkCheckpointInterval {
		r.log.CheckpointHighWatermark(r.hw)
		r.lastHWCheckpoint = r.now
	}
	r.maybeFetch()
}

// Flush makes the log durable now (a shell's shutdown, or a test).
func (r *Replica) Flush(now time.Time) {
	r.input(now)
	if invariants.Enabled {
		defer r.checkInvariants()
	}
	// A follower whose next fetch fell due while time moved through
	// another input sends it now (runs before the invariant check).
	defer r.maybeFetch()
	r.flush()
}

func (r *Replica) flush() {
	r.log.Flush()
	r.lastFlush = r.now
	r.event(Event{Kind: EventFlushed, Broker: r.cfg.Broker, Offset: r.log.FlushedOffset()})
}

// maybeFlushByCount applies flush.messages after an append.
func (r *Replica) maybeFlushByCount() {
	if n := r.flushMessages(); n > 0 && r.log.EndOffset()-r.log.FlushedOffset() >= n {
		r.flush()
	}
}

// flushMessages and flushInterval are flush.messages and flush.ms: the
// partition record's (the topic's configs), else the replica's configured
// ones.
func (r *Replica) flushMessages() int64 { return r.state.Config.FlushMessagesOr(r.cfg.FlushMessages) }

func (r *Replica) flushInterval() time.Duration {
	return r.state.Config.FlushIntervalOr(r.cfg.FlushInterval)
}

// truncateTo cuts the log (and the HW with it). Even a cut at or past the
// LEO goes to the log: it drops an epoch entry at the LEO that this replica
// wrote as a leader that never appended (Kafka's UnifiedLog.truncateTo does
// the same), or the follower would fetch with that epoch forever.
func (r *Replica) truncateTo(offset int64) {
	old := r.log.EndOffset()
	offset = max(offset, 0)
	r.log.TruncateTo(offset)
	if offset >= old {
		return
	}
	r.hw = min(r.hw, r.log.EndOffset())
	r.event(Event{Kind: EventTruncated, Broker: r.cfg.Broker, Offset: r.log.EndOffset(), Other: old})
}
