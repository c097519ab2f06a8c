package isr

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"quire/internal/invariants"
)

// ControllerConfig configures a Controller. Zero values take Kafka's
// defaults (the Disable* switches keep them on).
type ControllerConfig struct {
	// Epoch is this controller's epoch, from ControllerEpochSequence: every
	// record it writes carries it.
	Epoch int64
	// MinISR is min.insync.replicas (default 1): the ELR is kept while the
	// ISR is smaller.
	MinISR int
	// DisableELR turns eligible leader replicas (KIP-966) off.
	DisableELR bool
	// UncleanElection is unclean.leader.election.enable (default false).
	UncleanElection bool
	// UncleanRecovery is KIP-966's unclean.recovery.strategy: what happens
	// to a partition whose ISR and ELR are both empty because their members
	// came back from unclean shutdowns (default RecoveryBalanced).
	UncleanRecovery RecoveryStrategy
	// DisableAutoRebalance turns auto.leader.rebalance.enable off.
	DisableAutoRebalance bool
	// RebalanceInterval is leader.imbalance.check.interval.seconds
	// (default 300 s).
	RebalanceInterval time.Duration
	// ImbalancePercent is leader.imbalance.per.broker.percentage (default
	// 10): a broker leading fewer of the partitions it is preferred for
	// than this share allows gets them back.
	ImbalancePercent int
	// RetryInterval: a store write that failed (unavailable) is tried again
	// after this long (default 1 s).
	RetryInterval time.Duration
	// MaxQueued bounds the AlterPartition proposals waiting per partition
	// while a write of it is in flight (default 16); beyond, they are
	// refused with ErrRequestTimedOut and the leader proposes again.
	MaxQueued int
	// PushInterval, if set, sends every record to its replicas again at
	// this interval, so a broker that missed a push (a lost message, a
	// partition from the controller) learns the record once it is reachable
	// again, as KRaft brokers catch up on the metadata log. 0: records are
	// pushed only when written, and the shell delivers pushes reliably.
	PushInterval time.Duration
	Mutants      Mutants
}

// RecoveryStrategy is KIP-966's unclean.recovery.strategy. Recovery works
// on the partition's LastKnownELR and the log ends its members registered
// with (Registration.LogEnds); it needs the ELR (not DisableELR). A
// recovered leader is reported as an unclean election and its record marked
// Unclean: a replica whose unflushed tail was lost with its machine may
// lack records the partition acknowledged; after a process crash, where the
// page cache survived, the longest log holds them all.
type RecoveryStrategy int

const (
	// RecoveryBalanced (Kafka's default) waits until every member of the
	// LastKnownELR has registered again, then elects the longest log.
	RecoveryBalanced RecoveryStrategy = iota
	// RecoveryAggressive elects the longest log among the LastKnownELR
	// members registered now, without waiting for the others.
	RecoveryAggressive
	// RecoveryNone never recovers: the partition stays offline until an
	// operator elects a leader uncleanly.
	RecoveryNone
)

func (r RecoveryStrategy) String() string {
	switch r {
	case RecoveryBalanced:
		return "balanced"
	case RecoveryAggressive:
		return "aggressive"
	case RecoveryNone:
		return "none"
	}
	return fmt.Sprintf("RecoveryStrategy(%d)", int(r))
}

// ParseRecoveryStrategy reads Kafka's spelling (Balanced, Aggressive,
// None; any case).
func ParseRecoveryStrategy(s string) (RecoveryStrategy, error) {
	for _, r := range []RecoveryStrategy{RecoveryBalanced, RecoveryAggressive, RecoveryNone} {
		if strings.EqualFold(s, r.String()) {
			return r, nil
		}
	}
	return 0, fmt.Errorf("unclean recovery strategy %q: want balanced, aggressive or none", s)
}

func (c *ControllerConfig) setDefaults() {
	if c.MinISR <= 0 {
		c.MinISR = 1
	}
	if c.RebalanceInterval <= 0 {
		c.RebalanceInterval = 300 * time.Second
	}
	if c.ImbalancePercent <= 0 {
		c.ImbalancePercent = 10
	}
	if c.RetryInterval <= 0 {
		c.RetryInterval = time.Second
	}
	if c.MaxQueued <= 0 {
		c.MaxQueued = 16
	}
}

// MetaOpKind says what a metadata operation does.
type MetaOpKind int

const (
	// MetaCreate writes a record that must not exist yet.
	MetaCreate MetaOpKind = iota + 1
	// MetaWrite replaces a record whose version is Expected (AnyVersion:
	// unconditionally).
	MetaWrite
	// MetaRead reads a record.
	MetaRead
	// MetaDelete deletes a record whose version is Expected (its topic
	// was deleted).
	MetaDelete
)

func (k MetaOpKind) String() string {
	return map[MetaOpKind]string{MetaCreate: "create", MetaWrite: "write", MetaRead: "read", MetaDelete: "delete"}[k]
}

// AnyVersion as a MetaOp's Expected writes without a compare-and-swap. Only
// the isr-change-without-cas mutant asks for that.
const AnyVersion int64 = -1

// MetaOp is a metadata store operation the controller wants performed on a
// partition's record (key PartitionKey(Partition), value State.Marshal()).
type MetaOp struct {
	ID        uint64
	Kind      MetaOpKind
	Partition string
	State     PartitionState // what to write (create, write)
	Expected  int64          // the version a write replaces
}

// Key is the record's metadata key.
func (o MetaOp) Key() string { return PartitionKey(o.Partition) }

// MetaResult completes MetaOp ID: the version written or read, the record
// read; Err nil, ErrVersionConflict (the compare-and-swap failed: someone
// else wrote), or anything else for a store that could not be reached.
type MetaResult struct {
	ID      uint64
	Version int64
	State   PartitionState // for a read
	Err     error
}

// ControllerReady is what a Controller wants done.
type ControllerReady struct {
	MetaOps []MetaOp
	// Pushes tell brokers a partition's new record (after it was written).
	Pushes []StatePush
	// AlterPartitionResponses answer leaders' proposals.
	AlterPartitionResponses []AlterPartitionResponse
	Events                  []Event
}

// Empty reports whether there is nothing to do.
func (r ControllerReady) Empty() bool {
	return len(r.MetaOps) == 0 && len(r.Pushes) == 0 && len(r.AlterPartitionResponses) == 0 && len(r.Events) == 0
}

// StoredPartition is a partition record as read from the store.
type StoredPartition struct {
	State   PartitionState
	Version int64
}

type brokerState struct {
	epoch  int64
	fenced bool
	// lastLoss is the broker epoch of its last return from an unclean
	// shutdown (Registration.LastLoss).
	lastLoss int64
	// logEnds are its replicas' log ends as it registered them
	// (Registration.LogEnds), by partition: unclean recovery compares them.
	logEnds map[string]ReplicaLogEnd
}

func newBrokerState(reg Registration) *brokerState {
	b := &brokerState{epoch: reg.Epoch, lastLoss: reg.LastLoss(), logEnds: make(map[string]ReplicaLogEnd, len(reg.LogEnds))}
	for _, e := range reg.LogEnds {
		b.logEnds[e.Partition] = e
	}
	return b
}

type partition struct {
	state   PartitionState // as committed in the store
	version int64
	// exists: the record is in the store (a create succeeded or it was
	// loaded).
	exists bool
	// inflight is the write in flight (one per partition at a time).
	inflight *pendingWrite
	readOp   uint64 // a read after a lost CAS; 0: none
	queued   []AlterPartitionRequest
	retryAt  time.Time // a failed write is reconsidered at this time; zero: none
	// wantPreferred asks the next reconcile to move leadership to the
	// preferred replica.
	wantPreferred bool
	// wantUnclean lets the next election of a partition without a leader
	// take any live replica (Elect with ElectionUnclean).
	wantUnclean bool
	// reassign is a reassignment asked for (Reassign) and not yet written:
	// the next reconcile applies it; it is kept until a write carrying it
	// succeeds, so a failed write is retried with it.
	reassign *ReassignRequest
	// deleting: the partition's topic was deleted; its record is deleted
	// (by CAS, as soon as no other operation is in flight) and nothing else
	// is written.
	deleting bool
}

type pendingWrite struct {
	op       MetaOp
	reply    *AlterPartitionRequest // the proposal it answers, if any
	events   []Event                // reported once written
	reassign *ReassignRequest       // the reassignment it carries, if any
}

// Controller owns the partition records, as a deterministic state machine:
// broker liveness comes in as registrations and session expiries; records
// change only through MetaOps (compare-and-swap on the record's version)
// whose results come back through StepMeta. See the package doc.
type Controller struct {
	cfg     ControllerConfig
	now     time.Time
	deposed bool
	brokers map[BrokerID]*brokerState
	parts   map[string]*partition
	names   []string // sorted: the order every sweep uses
	lastID  uint64
	// nextRebalance is when the next auto-rebalance check runs.
	nextRebalance time.Time
	// nextPush is when every record is pushed again (PushInterval).
	nextPush time.Time
	ready    ControllerReady

	// For the invariant checks: the leader of every (partition, leader
	// epoch) this controller ever wrote or loaded, the last epochs, and
	// the last record.
	leaders map[string]map[int32]BrokerID
	epochs  map[string][2]int32 // partition → (leader epoch, partition epoch)
	noted   map[string]PartitionState
}

// NewController returns a controller of the given epoch with no partitions.
// The shell then feeds it what the store holds (Load).
func NewController(cfg ControllerConfig, now time.Time) *Controller {
	cfg.setDefaults()
	return &Controller{
		cfg: cfg, now: now, brokers: map[BrokerID]*brokerState{}, parts: map[string]*partition{},
		nextRebalance: now.Add(cfg.RebalanceInterval), nextPush: now.Add(cfg.PushInterval),
		leaders: map[string]map[int32]BrokerID{}, epochs: map[string][2]int32{}, noted: map[string]PartitionState{},
	}
}

// Epoch is the controller's epoch.
func (c *Controller) Epoch() int64 { return c.cfg.Epoch }

// Deposed reports whether a newer controller's write was seen: this one
// does nothing any more.
func (c *Controller) Deposed() bool { return c.deposed }

// Partition returns a partition's committed record.
func (c *Controller) Partition(name string) (PartitionState, bool) {
	p := c.parts[name]
	if p == nil || !p.exists {
		return PartitionState{}, false
	}
	return p.state.Clone(), true
}

// Partitions lists the partitions in name order.
func (c *Controller) Partitions() []string { return slices.Clone(c.names) }

// BrokerAlive reports whether a broker is registered and not fenced.
func (c *Controller) BrokerAlive(id BrokerID) bool {
	b := c.brokers[id]
	return b != nil && !b.fenced
}

// Ready returns and clears the outputs accumulated so far.
func (c *Controller) Ready() ControllerReady {
	out := c.ready
	c.ready = ControllerReady{}
	return out
}

func (c *Controller) input(now time.Time) {
	if now.After(c.now) {
		c.now = now
	}
}

func (c *Controller) nextID() uint64 {
	c.lastID++
	return c.lastID
}

func (c *Controller) event(e Event) { c.ready.Events = append(c.ready.Events, e) }

// Load takes what the store holds when this controller starts: partition
// records and live broker registrations. Records written by an older
// controller are written again under this controller's epoch, so that the
// older one's writes fail their CAS from then on; one written by a newer
// controller deposes this one.
func (c *Controller) Load(parts []StoredPartition, regs []Registration, now time.Time) {
	c.input(now)
	if invariants.Enabled {
		defer c.checkInvariants()
	}
	for _, reg := range regs {
		c.brokers[reg.ID] = newBrokerState(reg)
	}
	for _, sp := range parts {
		if sp.State.ControllerEpoch > c.cfg.Epoch {
			c.depose(sp.State)
			return
		}
		p := c.partition(sp.State.Partition)
		p.state, p.version, p.exists = sp.State.Clone(), sp.Version, true
		c.noteRecord(p.state)
	}
	for _, name := range c.names {
		p := c.parts[name]
		if p.exists && p.state.ControllerEpoch < c.cfg.Epoch {
			s := p.state.Clone()
			c.write(p, s, nil, nil)
			continue
		}
		c.reconcile(p)
	}
}

func (c *Controller) partition(name string) *partition {
	p := c.parts[name]
	if p == nil {
		p = &partition{}
		c.parts[name] = p
		i, _ := slices.BinarySearch(c.names, name)
		c.names = slices.Insert(c.names, i, name)
	}
	return p
}

// CreatePartition writes a new partition's first record: every live replica
// in the ISR, the first live one (in assignment order) the leader.
func (c *Controller) CreatePartition(name string, replicas []BrokerID, now time.Time) error {
	return c.CreatePartitionWith(name, replicas, PartitionConfig{}, now)
}

// CreatePartitionWith is CreatePartition for a partition whose topic sets
// its own min.insync.replicas or unclean election (kept in the record).
func (c *Controller) CreatePartitionWith(name string, replicas []BrokerID, cfg PartitionConfig, now time.Time) error {
	c.input(now)
	if invariants.Enabled {
		defer c.checkInvariants()
	}
	if c.deposed {
		return ErrNotController
	}
	if p := c.parts[name]; p != nil {
		return fmt.Errorf("create partition %s: %w", name, ErrInvalidRequest)
	}
	s := PartitionState{Partition: name, Replicas: slices.Clone(replicas), Leader: NoLeader, Config: cfg}
	for _, id := range replicas {
		if c.alive(id) {
			s.ISR = append(s.ISR, Member{ID: id, BrokerEpoch: c.brokers[id].epoch})
		}
	}
	if len(s.ISR) == 0 {
		return fmt.Errorf("create partition %s: no live replica in %v: %w", name, replicas, ErrNotEnoughReplicas)
	}
	s.Leader, s.LeaderBrokerEpoch = s.ISR[0].ID, s.ISR[0].BrokerEpoch
	if err := s.Validate(); err != nil {
		return fmt.Errorf("create partition %s: %w: %v", name, ErrInvalidRequest, err)
	}
	p := c.partition(name)
	c.write(p, s, nil, []Event{{Kind: EventElected, Partition: name, Broker: s.Leader, Epoch: 0, Detail: "created"}})
	p.inflight.op.Kind = MetaCreate
	p.inflight.op.Expected = 0
	c.ready.MetaOps[len(c.ready.MetaOps)-1] = p.inflight.op
	return nil
}

// DeletePartition deletes a partition's record (its topic was deleted),
// by compare-and-swap once no other write is in flight; the controller
// then forgets the partition, and brokers that watch the records drop
// their replicas. Proposals waiting for it are refused.
func (c *Controller) DeletePartition(name string, now time.Time) error {
	c.input(now)
	if invariants.Enabled {
		defer c.checkInvariants()
	}
	if c.deposed {
		return ErrNotController
	}
	p := c.parts[name]
	if p == nil || !p.exists {
		return fmt.Errorf("delete partition %s: %w", name, ErrUnknownPartition)
	}
	p.deleting, p.wantPreferred, p.wantUnclean, p.reassign = true, false, false, nil
	for _, q := range p.queued {
		c.answer(q, ErrUnknownPartition, p.state)
	}
	p.queued = nil
	c.reconcile(p)
	return nil
}

// deleteRecord starts the delete of a partition being deleted.
func (c *Controller) deleteRecord(p *partition) {
	op := MetaOp{ID: c.nextID(), Kind: MetaDelete, Partition: p.state.Partition, Expected: p.version}
	p.inflight = &pendingWrite{op: op}
	c.ready.MetaOps = append(c.ready.MetaOps, op)
}

// forget drops a partition the controller no longer keeps (deleted, or
// never created): a partition of that name created later starts its epochs
// again, as a new one.
func (c *Controller) forget(name string) {
	delete(c.parts, name)
	delete(c.epochs, name)
	delete(c.leaders, name)
	delete(c.noted, name)
	if i, ok := slices.BinarySearch(c.names, name); ok {
		c.names = slices.Delete(c.names, i, i+1)
	}
}

// Register feeds a broker's registration (its ephemeral key, at broker
// epoch reg.Epoch). A registration under a newer epoch ends the previous
// incarnation first, as if its session had expired.
func (c *Controller) Register(reg Registration, now time.Time) {
	c.input(now)
	if invariants.Enabled {
		defer c.checkInvariants()
	}
	if c.deposed {
		return
	}
	b := c.brokers[reg.ID]
	if b != nil && reg.Epoch < b.epoch {
		return // stale
	}
	if b != nil && reg.Epoch > b.epoch && !b.fenced {
		c.fence(reg.ID)
	}
	c.brokers[reg.ID] = newBrokerState(reg)
	c.reconcileAll()
}

// SessionExpired feeds the end of a broker's session at broker epoch epoch
// (its ephemeral key is gone): the broker is fenced, it leaves every ISR
// (but the last member's place, without ELR) and loses every leadership.
func (c *Controller) SessionExpired(id BrokerID, epoch int64, now time.Time) {
	c.input(now)
	if invariants.Enabled {
		defer c.checkInvariants()
	}
	if c.deposed {
		return
	}
	b := c.brokers[id]
	if b == nil || b.epoch != epoch || b.fenced {
		return
	}
	c.fence(id)
	c.reconcileAll()
}

func (c *Controller) fence(id BrokerID) {
	c.brokers[id].fenced = true
	c.event(Event{Kind: EventFenced, Broker: id})
}

func (c *Controller) alive(id BrokerID) bool {
	b := c.brokers[id]
	return b != nil && !b.fenced
}

// lostSince reports whether a broker came back from an unclean shutdown
// after it was admitted (to the ISR or ELR) under broker epoch admitted: it
// may lack committed records.
func (c *Controller) lostSince(id BrokerID, admitted int64) bool {
	b := c.brokers[id]
	return b != nil && b.lastLoss > admitted
}

// ElectionKind is what an election asked for (Kafka's ElectLeaders
// election_type) wants.
type ElectionKind int8

const (
	// ElectionPreferred moves leadership to the preferred replica (the
	// first of the assignment) if it is live and in the ISR.
	ElectionPreferred ElectionKind = 0
	// ElectionUnclean elects a leader for a partition that has none, out of
	// sync if it must (as unclean.leader.election.enable would, once).
	ElectionUnclean ElectionKind = 1
)

// ElectPreferred moves a partition's leadership to its preferred replica
// (the first of the assignment) if that one is live and in the ISR; it is
// Elect(ElectionPreferred) with nothing to do answered nil.
func (c *Controller) ElectPreferred(name string, now time.Time) error {
	if err := c.Elect(name, ElectionPreferred, now); err != nil && !errors.Is(err, ErrElectionNotNeeded) {
		return err
	}
	return nil
}

// Elect is an election asked for by an operator (Kafka's ElectLeaders, as
// its controller's electLeader answers it): ErrUnknownPartition for no
// such partition; ErrElectionNotNeeded when the preferred replica already
// leads (preferred) or the partition has a leader (unclean);
// ErrPreferredLeaderNotAvailable when the preferred replica is not live
// or not in the ISR; ErrEligibleLeadersNotAvailable when no replica is
// live. Otherwise the election is the next reconcile's (a write, whose
// record shows the new leader once committed): a preferred one moves
// leadership, an unclean one runs the ordinary election (ISR, ELR, unclean
// recovery) and then, whatever the partition's unclean.leader.election
// setting, takes any live replica.
func (c *Controller) Elect(name string, kind ElectionKind, now time.Time) error {
	c.input(now)
	if invariants.Enabled {
		defer c.checkInvariants()
	}
	if c.deposed {
		return ErrNotController
	}
	p := c.parts[name]
	if p == nil || !p.exists || p.deleting {
		return fmt.Errorf("elect a leader of %s: %w", name, ErrUnknownPartition)
	}
	switch kind {
	case ElectionPreferred:
		pref := p.state.Replicas[0]
		if p.state.Leader == pref {
			return fmt.Errorf("elect preferred leader %d of %s: %w", pref, name, ErrElectionNotNeeded)
		}
		if !c.alive(pref) || !p.state.InISR(pref) {
			return fmt.Errorf("elect preferred leader %d of %s: %w", pref, name, ErrPreferredLeaderNotAvailable)
		}
		p.wantPreferred = true
	case ElectionUnclean:
		if p.state.Leader != NoLeader {
			return fmt.Errorf("elect a leader of %s (led by %d): %w", name, p.state.Leader, ErrElectionNotNeeded)
		}
		if !slices.ContainsFunc(p.state.Replicas, func(id BrokerID) bool { return c.alive(id) && !p.state.Adding(id) }) {
			return fmt.Errorf("elect a leader of %s: no replica of %v is live: %w", name, p.state.Replicas, ErrEligibleLeadersNotAvailable)
		}
		p.wantUnclean = true
	default:
		return fmt.Errorf("election type %d: %w", kind, ErrInvalidRequest)
	}
	c.reconcile(p)
	return nil
}

// Tick advances time: failed writes are retried, and every
// RebalanceInterval (unless disabled) leadership moves back to preferred
// replicas of brokers whose imbalance exceeds ImbalancePercent.
func (c *Controller) Tick(now time.Time) {
	c.input(now)
	if invariants.Enabled {
		defer c.checkInvariants()
	}
	if c.deposed {
		return
	}
	if c.cfg.PushInterval > 0 && !c.now.Before(c.nextPush) {
		c.nextPush = c.now.Add(c.cfg.PushInterval)
		for _, name := range c.names {
			if p := c.parts[name]; p.exists {
				c.push(p.state, nil)
			}
		}
	}
	if !c.cfg.DisableAutoRebalance && !c.now.Before(c.nextRebalance) {
		c.nextRebalance = c.now.Add(c.cfg.RebalanceInterval)
		c.checkImbalance()
	}
	for _, name := range c.names {
		p := c.parts[name]
		if !p.retryAt.IsZero() && !c.now.Before(p.retryAt) {
			p.retryAt = time.Time{}
			if !p.exists && p.inflight == nil && p.readOp == 0 {
				// A create of unknown outcome: find out what the store has.
				p.readOp = c.nextID()
				c.ready.MetaOps = append(c.ready.MetaOps, MetaOp{ID: p.readOp, Kind: MetaRead, Partition: name})
				continue
			}
			c.reconcile(p)
		}
	}
}

// AlterPartition feeds a leader's ISR proposal. It is applied by
// compare-and-swap: only against the partition epoch it names, from the
// current leader in its current epoch, adding only live replicas of their
// current broker epoch. The answer comes out of Ready once the record is
// written (or at once when refused).
func (c *Controller) AlterPartition(req AlterPartitionRequest, now time.Time) {
	c.input(now)
	if invariants.Enabled {
		defer c.checkInvariants()
	}
	if c.deposed {
		c.answer(req, ErrNotController, PartitionState{})
		return
	}
	p := c.parts[req.Partition]
	if p == nil || !p.exists {
		c.answer(req, ErrUnknownPartition, PartitionState{})
		return
	}
	if p.deleting {
		c.answer(req, ErrUnknownPartition, p.state)
		return
	}
	if p.inflight != nil || p.readOp != 0 {
		if len(p.queued) >= c.cfg.MaxQueued {
			c.answer(req, ErrRequestTimedOut, p.state)
			return
		}
		p.queued = append(p.queued, req)
		return
	}
	c.alterPartition(p, req)
}

func (c *Controller) answer(req AlterPartitionRequest, err error, s PartitionState) {
	c.ready.AlterPartitionResponses = append(c.ready.AlterPartitionResponses, AlterPartitionResponse{
		ID: req.ID, Partition: req.Partition, To: req.Broker, ControllerEpoch: c.cfg.Epoch, Err: err, State: s.Clone(),
	})
}

// alterPartition validates a proposal against the committed record and
// starts its write, or answers why not.
func (c *Controller) alterPartition(p *partition, req AlterPartitionRequest) {
	s := p.state
	if c.cfg.Mutants.ISRChangeWithoutCAS {
		// The proposal is written as its proposer saw the record, whatever
		// the record is now, and without a CAS.
		w := s.Clone()
		w.Leader, w.LeaderBrokerEpoch, w.LeaderEpoch = req.Broker, req.BrokerEpoch, req.LeaderEpoch
		w.ISR = sortMembers(req.NewISR, w.Replicas)
		w.ELR = c.targetELR(s, w.ISR)
		w.PartitionEpoch = req.PartitionEpoch + 1
		w.Unclean = false
		if w.Validate() != nil {
			c.answer(req, ErrInvalidRequest, s)
			return
		}
		c.write(p, w, &req, nil)
		p.inflight.op.Expected = AnyVersion
		c.ready.MetaOps[len(c.ready.MetaOps)-1] = p.inflight.op
		return
	}
	switch {
	case req.Broker != s.Leader || req.LeaderEpoch < s.LeaderEpoch:
		c.answer(req, ErrFencedLeaderEpoch, s)
		return
	case req.LeaderEpoch > s.LeaderEpoch:
		c.answer(req, ErrInvalidUpdateVersion, s)
		return
	case c.brokers[req.Broker] == nil || req.BrokerEpoch != c.brokers[req.Broker].epoch || c.brokers[req.Broker].fenced:
		// A fenced leader changes nothing, even before its replacement is
		// written (the store may be down).
		c.answer(req, ErrStaleBrokerEpoch, s)
		return
	}
	isr := sortMembers(req.NewISR, s.Replicas)
	if req.PartitionEpoch != s.PartitionEpoch {
		// A retry of a proposal that was applied gets the record it made.
		if req.PartitionEpoch < s.PartitionEpoch && slices.Equal(isr, s.ISR) {
			c.answer(req, nil, s)
			return
		}
		c.answer(req, ErrInvalidUpdateVersion, s)
		return
	}
	if memberIndex(isr, req.Broker) < 0 {
		c.answer(req, ErrInvalidRequest, s)
		return
	}
	for i, m := range isr {
		if !slices.Contains(s.Replicas, m.ID) || (i > 0 && isr[i-1].ID == m.ID) {
			c.answer(req, ErrInvalidRequest, s)
			return
		}
		if s.InISR(m.ID) {
			continue
		}
		// A new member must be live under the registration it fetched with.
		if b := c.brokers[m.ID]; b == nil || b.fenced || b.epoch != m.BrokerEpoch {
			c.answer(req, ErrIneligibleReplica, s)
			return
		}
	}
	w := s.Clone()
	w.ISR = isr
	w.ELR = c.targetELR(s, isr)
	w.PartitionEpoch++
	if w.Validate() != nil {
		c.answer(req, ErrInvalidRequest, s)
		return
	}
	c.write(p, w, &req, nil)
}

// write starts writing s as p's record by CAS on the committed version.
func (c *Controller) write(p *partition, s PartitionState, reply *AlterPartitionRequest, events []Event) {
	s.ControllerEpoch = c.cfg.Epoch
	op := MetaOp{ID: c.nextID(), Kind: MetaWrite, Partition: s.Partition, State: s, Expected: p.version}
	p.inflight = &pendingWrite{op: op, reply: reply, events: events}
	c.ready.MetaOps = append(c.ready.MetaOps, op)
}

// StepMeta feeds the result of a MetaOp.
func (c *Controller) StepMeta(res MetaResult, now time.Time) {
	c.input(now)
	if invariants.Enabled {
		defer c.checkInvariants()
	}
	if c.deposed {
		return
	}
	for _, name := range c.names {
		p := c.parts[name]
		switch {
		case p.inflight != nil && p.inflight.op.ID == res.ID:
			c.stepWrite(p, res)
			return
		case p.readOp != 0 && p.readOp == res.ID:
			c.stepRead(name, p, res)
			return
		}
	}
}

func (c *Controller) stepWrite(p *partition, res MetaResult) {
	w := p.inflight
	p.inflight = nil
	switch {
	case w.op.Kind == MetaDelete && res.Err == nil:
		c.event(Event{Kind: EventPartitionWritten, Partition: w.op.Partition, Detail: "deleted"})
		c.forget(w.op.Partition)
	case res.Err == nil:
		prev := p.state
		p.state, p.version, p.exists = w.op.State.Clone(), res.Version, true
		if w.reassign != nil && p.reassign == w.reassign {
			p.reassign = nil
		}
		c.noteRecord(p.state)
		for _, e := range w.events {
			c.event(e)
		}
		c.event(Event{Kind: EventPartitionWritten, Partition: p.state.Partition, Broker: p.state.Leader,
			Epoch: p.state.LeaderEpoch, Detail: p.state.String()})
		c.push(p.state, prev.Replicas)
		if w.reply != nil {
			c.answer(*w.reply, nil, p.state)
		}
		c.afterSettled(p)
	case errors.Is(res.Err, ErrVersionConflict):
		// Someone else wrote: read what is there before deciding anything.
		if w.reply != nil {
			p.queued = append([]AlterPartitionRequest{*w.reply}, p.queued...)
		}
		p.readOp = c.nextID()
		c.ready.MetaOps = append(c.ready.MetaOps, MetaOp{ID: p.readOp, Kind: MetaRead, Partition: w.op.Partition})
	default:
		if w.reply != nil {
			c.answer(*w.reply, ErrRequestTimedOut, p.state)
		}
		if !p.exists && w.op.Kind == MetaCreate {
			// The create may or may not have happened: read to find out.
			p.readOp = c.nextID()
			c.ready.MetaOps = append(c.ready.MetaOps, MetaOp{ID: p.readOp, Kind: MetaRead, Partition: w.op.Partition})
			return
		}
		p.retryAt = c.now.Add(c.cfg.RetryInterval)
	}
}

func (c *Controller) stepRead(name string, p *partition, res MetaResult) {
	p.readOp = 0
	if !p.exists && errors.Is(res.Err, ErrVersionConflict) {
		// The create whose outcome was unknown did not happen: forget the
		// partition, so that CreatePartition can be called again.
		c.forget(name)
		return
	}
	if p.deleting && errors.Is(res.Err, ErrVersionConflict) {
		c.forget(name) // the record is gone: deleted already
		return
	}
	if res.Err != nil {
		p.retryAt = c.now.Add(c.cfg.RetryInterval)
		for _, q := range p.queued {
			c.answer(q, ErrRequestTimedOut, p.state)
		}
		p.queued = nil
		return
	}
	if res.State.ControllerEpoch > c.cfg.Epoch {
		c.depose(res.State)
		return
	}
	p.state, p.version, p.exists = res.State.Clone(), res.Version, true
	c.noteRecord(p.state)
	c.afterSettled(p)
}

// push sends a record to each of its replicas, in assignment order, and
// to those of prev (the record it replaced) it no longer names: a
// reassignment removed them, and the record tells them to stop.
func (c *Controller) push(s PartitionState, prev []BrokerID) {
	for _, id := range s.Replicas {
		c.ready.Pushes = append(c.ready.Pushes, StatePush{To: id, ControllerEpoch: c.cfg.Epoch, State: s.Clone()})
	}
	for _, id := range prev {
		if !slices.Contains(s.Replicas, id) {
			c.ready.Pushes = append(c.ready.Pushes, StatePush{To: id, ControllerEpoch: c.cfg.Epoch, State: s.Clone()})
		}
	}
}

// afterSettled runs queued proposals against the settled record, then
// reconciles it, until a write is in flight or nothing is left to do.
func (c *Controller) afterSettled(p *partition) {
	for len(p.queued) > 0 && p.inflight == nil {
		req := p.queued[0]
		p.queued = p.queued[1:]
		c.alterPartition(p, req)
	}
	c.reconcile(p)
}

// depose stops this controller: a newer one wrote.
func (c *Controller) depose(s PartitionState) {
	c.deposed = true
	c.event(Event{Kind: EventDeposed, Partition: s.Partition, Detail: fmt.Sprintf("controller epoch %d wrote; mine is %d", s.ControllerEpoch, c.cfg.Epoch)})
	for _, name := range c.names {
		p := c.parts[name]
		for _, q := range p.queued {
			c.answer(q, ErrNotController, PartitionState{})
		}
		if p.inflight != nil && p.inflight.reply != nil {
			c.answer(*p.inflight.reply, ErrNotController, PartitionState{})
		}
		p.queued, p.inflight, p.readOp = nil, nil, 0
	}
}
