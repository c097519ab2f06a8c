package txn

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"quire/internal/invariants"
)

// ErrVersionConflict is what the shell feeds back (MetaResult.Err) when a
// MetaOp's compare-and-swap failed: another coordinator wrote the record.
var ErrVersionConflict = errors.New("txn: record version conflict")

// maxEpoch is the largest producer epoch. An id whose epoch would pass
// maxEpoch-1 gets a new producer id (as Kafka's isProducerEpochExhausted),
// so that a fencing bump of an open transaction always has room.
const maxEpoch = 32767

// Coordinator is the transaction coordinator of the transactional ids one
// broker coordinates: a deterministic state machine, Kafka's
// TransactionCoordinator and TransactionStateManager without the log. It
// owns no time: every input carries it. Its outputs (responses, record
// writes, markers, producer id requests) come out of Ready; the shell
// carries them out and feeds the results back.
//
// The rules it keeps:
//   - a record change is applied, and the request it serves answered, only
//     after the shell reports it durable; one change is in flight per
//     transactional id, and a request arriving meanwhile is answered
//     CONCURRENT_TRANSACTIONS (the clients retry it);
//   - EndTxn is answered once the Prepare state is durable; markers are
//     written only from a durable Prepare state, and the Complete state is
//     written only after every participant has its marker — so a
//     transaction's outcome, once answered, is the one every participant
//     ends with, across coordinator failovers (Load re-sends the markers of
//     Prepare records);
//   - a producer is fenced by an epoch bump: InitProducerID from a new
//     instance, or a transaction past its timeout, aborts the open
//     transaction under the next epoch, and the old epoch's requests get
//     PRODUCER_FENCED;
//   - a compare-and-swap that fails means another coordinator wrote: the
//     id is forgotten and answered NOT_COORDINATOR, and Deposed reports it
//     so that the shell reloads.
type Coordinator struct {
	cfg     Config
	loaded  bool
	deposed bool
	txns    map[string]*txnState
	lastOp  OpID
	now     time.Time
	ready   Ready
}

// txnState is one transactional id: its durable record and what is in
// flight for it.
type txnState struct {
	rec     Record
	version Version // 0: not stored yet
	pending *pending
	// While the record is in a Prepare state: the participants still
	// without their marker, the MarkerOp in flight (0: none), and when to
	// send them again after a failure.
	markerOp       OpID
	markerParts    []Partition
	markerGroups   []string
	markerRetryAt  time.Time
	markerNeedSend bool
}

type pendingKind int8

const (
	pendInit pendingKind = iota + 1
	pendAdd
	pendEnd
	pendAbort    // an open transaction aborted by fencing or its timeout
	pendComplete // every marker written: the Complete state
)

// pending is the one record change in flight for an id.
type pending struct {
	kind pendingKind
	req  RequestID // the request answered when it is durable; 0: none
	// op is the MetaOp in flight, or the producer id request when
	// waitingPID; next is the record being written (its producer id is
	// filled in when the new one arrives).
	op         OpID
	waitingPID bool
	next       Record
	// retryAt: a failed write of an internal change (abort, complete) is
	// sent again at this time; zero while it is in flight.
	retryAt time.Time
}

// New returns a coordinator that answers COORDINATOR_LOAD_IN_PROGRESS
// until Load.
func New(cfg Config) *Coordinator {
	return &Coordinator{cfg: cfg.withDefaults(), txns: map[string]*txnState{}}
}

// LoadedRecord is a stored record with its version.
type LoadedRecord struct {
	Record  Record
	Version Version
}

// Load gives the coordinator the records of the ids it now coordinates
// (read at one revision when its term begins). Transactions found in a
// Prepare state get their markers sent again: their outcome was decided,
// and perhaps answered, by the previous coordinator.
func (c *Coordinator) Load(recs []LoadedRecord, now time.Time) {
	c.loaded = true
	c.Adopt(recs, now)
}

// Adopt adds stored records of ids the coordinator does not know yet (read
// by the shell before a request for them, or found by a scan of the store)
// and sends the markers of those in a Prepare state. Ids it knows are left
// as they are: what it holds is at least as new.
func (c *Coordinator) Adopt(recs []LoadedRecord, now time.Time) {
	c.input(now)
	defer c.check()
	var adopted []*txnState
	for _, lr := range recs {
		id := lr.Record.TransactionalID
		if _, known := c.txns[id]; known || lr.Version == 0 {
			continue
		}
		ts := &txnState{rec: lr.Record.Clone(), version: lr.Version}
		c.txns[id] = ts
		adopted = append(adopted, ts)
	}
	slices.SortFunc(adopted, func(a, b *txnState) int { return strings.Compare(a.rec.TransactionalID, b.rec.TransactionalID) })
	for _, ts := range adopted {
		if ts.rec.State.preparing() {
			c.startMarkers(ts)
		}
	}
}

// Known reports whether the coordinator holds id (stored, or being
// created): the shell reads the stored record of an unknown id and Adopts
// it before passing a request for it on.
func (c *Coordinator) Known(id string) bool {
	_, ok := c.txns[id]
	return ok
}

// Deposed reports whether a compare-and-swap failed since the last Load:
// another coordinator wrote one of these ids, and the shell should end
// this term and load again.
func (c *Coordinator) Deposed() bool { return c.deposed }

// Transaction returns the record of an id, as DescribeTransactions shows it.
func (c *Coordinator) Transaction(id string) (Record, bool) {
	ts := c.txns[id]
	if ts == nil || ts.version == 0 {
		return Record{}, false
	}
	return ts.rec.Clone(), true
}

// Transactions returns every stored record, sorted by id
// (ListTransactions).
func (c *Coordinator) Transactions() []Record {
	var out []Record
	for _, id := range c.ids() {
		if ts := c.txns[id]; ts.version != 0 {
			out = append(out, ts.rec.Clone())
		}
	}
	return out
}

// Ready returns and clears what was produced since the last call.
func (c *Coordinator) Ready() Ready {
	rd := c.ready
	c.ready = Ready{}
	return rd
}

func (c *Coordinator) input(now time.Time) {
	if now.After(c.now) {
		c.now = now
	}
}

func (c *Coordinator) check() {
	if invariants.Enabled {
		c.checkInvariants()
	}
}

func (c *Coordinator) ids() []string { return slices.Sorted(maps.Keys(c.txns)) }

func (c *Coordinator) nextOp() OpID {
	c.lastOp++
	return c.lastOp
}

func (c *Coordinator) respond(id RequestID, err error) {
	if id != 0 {
		c.ready.Responses = append(c.ready.Responses, Response{ID: id, Err: err, ProducerID: -1, ProducerEpoch: -1})
	}
}

// refused answers a request that cannot be served now, or nil if it can:
// before Load, and for an id whose change is in flight.
func (c *Coordinator) refused(ts *txnState) error {
	switch {
	case !c.loaded:
		return kerr.CoordinatorLoadInProgress
	case ts != nil && ts.pending != nil:
		return kerr.ConcurrentTransactions
	}
	return nil
}

// InitProducerID gives a transactional id its producer id and a new epoch,
// fencing the previous instance: an open transaction is aborted under the
// next epoch first (answered CONCURRENT_TRANSACTIONS; the client retries).
func (c *Coordinator) InitProducerID(id RequestID, req InitProducerIDRequest, now time.Time) {
	c.input(now)
	defer c.check()
	ts := c.txns[req.TransactionalID]
	if err := c.refused(ts); err != nil {
		c.respond(id, err)
		return
	}
	if req.TimeoutMs <= 0 || time.Duration(req.TimeoutMs)*time.Millisecond > c.cfg.MaxTimeout {
		c.respond(id, kerr.InvalidTransactionTimeout)
		return
	}
	if ts == nil {
		ts = &txnState{rec: Record{TransactionalID: req.TransactionalID, ProducerID: -1, ProducerEpoch: -1,
			LastProducerID: -1, LastProducerEpoch: -1}}
		c.txns[req.TransactionalID] = ts
	}
	rec := ts.rec
	if req.ProducerID >= 0 && ts.version != 0 {
		switch {
		case req.ProducerID == rec.LastProducerID && req.ProducerEpoch == rec.LastProducerEpoch && rec.State == Empty:
			// A retry of the InitProducerID that made the current pair:
			// its answer was lost.
			c.ready.Responses = append(c.ready.Responses, Response{ID: id, ProducerID: rec.ProducerID, ProducerEpoch: rec.ProducerEpoch})
			return
		case req.ProducerID != rec.ProducerID || req.ProducerEpoch != rec.ProducerEpoch:
			c.respond(id, kerr.ProducerFenced)
			return
		}
	}
	switch {
	case rec.State.preparing():
		c.respond(id, kerr.ConcurrentTransactions)
	case rec.State == Ongoing:
		// A new instance: fence the old one and abort what it left open.
		c.abortOpen(ts)
		c.respond(id, kerr.ConcurrentTransactions)
	default:
		next := rec.Clone()
		next.State, next.Partitions, next.Groups = Empty, nil, nil
		next.TimeoutMs, next.StartMs, next.UpdateMs = req.TimeoutMs, 0, c.now.UnixMilli()
		next.LastProducerID, next.LastProducerEpoch = rec.ProducerID, rec.ProducerEpoch
		p := &pending{kind: pendInit, req: id, next: next}
		ts.pending = p
		if ts.version == 0 || rec.ProducerEpoch >= maxEpoch-1 {
			// A new id, or the epoch is exhausted: a new producer id.
			p.waitingPID, p.op = true, c.nextOp()
			c.ready.ProducerIDs = append(c.ready.ProducerIDs, p.op)
			return
		}
		next.ProducerEpoch++
		p.next = next
		c.write(ts)
	}
}

// AddPartitions adds partitions to the producer's transaction, opening it
// if none is open.
func (c *Coordinator) AddPartitions(id RequestID, req AddPartitionsRequest, now time.Time) {
	c.input(now)
	defer c.check()
	ts, ok := c.producerTxn(id, req.TransactionalID, req.ProducerID, req.ProducerEpoch)
	if !ok {
		return
	}
	parts := slices.Clone(ts.rec.Partitions)
	for _, p := range req.Partitions {
		if i, found := slices.BinarySearchFunc(parts, p, comparePartitions); !found {
			parts = slices.Insert(parts, i, p)
		}
	}
	c.addParticipants(id, ts, parts, ts.rec.Groups)
}

// AddOffsets adds a consumer group's offsets to the producer's transaction.
func (c *Coordinator) AddOffsets(id RequestID, req AddOffsetsRequest, now time.Time) {
	c.input(now)
	defer c.check()
	ts, ok := c.producerTxn(id, req.TransactionalID, req.ProducerID, req.ProducerEpoch)
	if !ok {
		return
	}
	groups := slices.Clone(ts.rec.Groups)
	if i, found := slices.BinarySearch(groups, req.Group); !found {
		groups = slices.Insert(groups, i, req.Group)
	}
	c.addParticipants(id, ts, ts.rec.Partitions, groups)
}

func (c *Coordinator) addParticipants(id RequestID, ts *txnState, parts []Partition, groups []string) {
	rec := ts.rec
	if rec.State.preparing() {
		c.respond(id, kerr.ConcurrentTransactions)
		return
	}
	if rec.State == Ongoing && len(parts) == len(rec.Partitions) && len(groups) == len(rec.Groups) {
		c.respond(id, nil) // nothing new
		return
	}
	next := rec.Clone()
	next.Partitions, next.Groups, next.UpdateMs = parts, groups, c.now.UnixMilli()
	if rec.State != Ongoing {
		next.State, next.StartMs = Ongoing, c.now.UnixMilli()
	}
	ts.pending = &pending{kind: pendAdd, req: id, next: next}
	c.write(ts)
}

// EndTxn commits or aborts the producer's transaction: answered once the
// decision is durable, then the markers go out.
func (c *Coordinator) EndTxn(id RequestID, req EndTxnRequest, now time.Time) {
	c.input(now)
	defer c.check()
	ts, ok := c.producerTxn(id, req.TransactionalID, req.ProducerID, req.ProducerEpoch)
	if !ok {
		return
	}
	want, done := PrepareAbort, CompleteAbort
	if req.Commit {
		want, done = PrepareCommit, CompleteCommit
	}
	switch st := ts.rec.State; {
	case st == Ongoing:
		next := ts.rec.Clone()
		next.State, next.UpdateMs, next.Decision = want, c.now.UnixMilli(), ts.rec.Decision+1
		ts.pending = &pending{kind: pendEnd, req: id, next: next}
		c.write(ts)
		if c.cfg.Mutants.EarlyMarkers {
			c.ready.Markers = append(c.ready.Markers, MarkerOp{ID: c.nextOp(), TransactionalID: next.TransactionalID,
				ProducerID: next.ProducerID, ProducerEpoch: next.ProducerEpoch, Commit: req.Commit, Decision: next.Decision,
				Partitions: slices.Clone(next.Partitions), Groups: slices.Clone(next.Groups)})
		}
	case st == want:
		c.respond(id, kerr.ConcurrentTransactions) // a retry: the markers are still being written
	case st == done:
		c.respond(id, nil) // a retry of an EndTxn that finished
	default:
		c.respond(id, kerr.InvalidTxnState)
	}
}

// producerTxn finds the id a producer's request is for and checks that the
// producer is its current instance; otherwise it answers the request.
func (c *Coordinator) producerTxn(id RequestID, txnID string, pid int64, epoch int16) (*txnState, bool) {
	ts := c.txns[txnID]
	if err := c.refused(ts); err != nil {
		c.respond(id, err)
		return nil, false
	}
	switch {
	case ts == nil || ts.version == 0 || ts.rec.ProducerID != pid:
		c.respond(id, kerr.InvalidProducerIDMapping)
		return nil, false
	case ts.rec.ProducerEpoch != epoch:
		c.respond(id, kerr.ProducerFenced)
		return nil, false
	}
	return ts, true
}

// abortOpen aborts an open transaction under the next epoch, which fences
// the producer that opened it.
func (c *Coordinator) abortOpen(ts *txnState) {
	next := ts.rec.Clone()
	next.LastProducerID, next.LastProducerEpoch = next.ProducerID, next.ProducerEpoch
	next.ProducerEpoch++
	next.State, next.UpdateMs, next.Decision = PrepareAbort, c.now.UnixMilli(), next.Decision+1
	ts.pending = &pending{kind: pendAbort, next: next}
	c.write(ts)
}

// write sends the pending record change.
func (c *Coordinator) write(ts *txnState) {
	p := ts.pending
	p.op, p.retryAt = c.nextOp(), time.Time{}
	c.ready.MetaOps = append(c.ready.MetaOps, MetaOp{ID: p.op, Record: p.next.Clone(), Expect: ts.version})
}

// StepProducerID feeds a new producer id for a pending InitProducerID.
func (c *Coordinator) StepProducerID(res ProducerIDResult, now time.Time) {
	c.input(now)
	defer c.check()
	ts := c.pendingFor(res.ID)
	if ts == nil || !ts.pending.waitingPID {
		return
	}
	p := ts.pending
	if res.Err != nil {
		ts.pending = nil
		c.respond(p.req, kerr.CoordinatorNotAvailable)
		c.forgetIfUnstored(ts)
		return
	}
	p.waitingPID = false
	p.next.ProducerID, p.next.ProducerEpoch = res.ProducerID, 0
	c.write(ts)
}

// StepMeta feeds the outcome of a MetaOp.
func (c *Coordinator) StepMeta(res MetaResult, now time.Time) {
	c.input(now)
	defer c.check()
	ts := c.pendingFor(res.ID)
	if ts == nil || ts.pending.waitingPID {
		return
	}
	p := ts.pending
	switch {
	case errors.Is(res.Err, ErrVersionConflict):
		// Another coordinator wrote this id: this one no longer owns it.
		c.deposed = true
		c.respond(p.req, kerr.NotCoordinator)
		delete(c.txns, ts.rec.TransactionalID)
		return
	case res.Err != nil && p.req != 0:
		// The write may or may not have happened: what the coordinator holds
		// may be stale, and a request it answered from it (an
		// AddPartitions with nothing new, say) could contradict a decision
		// the store already holds. The id is forgotten, so the next request
		// for it reads the store first (the shell's rule). The client
		// retries.
		ts.pending = nil
		c.respond(p.req, kerr.CoordinatorNotAvailable)
		delete(c.txns, ts.rec.TransactionalID)
		return
	case res.Err != nil:
		p.retryAt = c.now.Add(c.cfg.MetaRetry)
		return
	}
	ts.rec, ts.version, ts.pending = p.next, res.Version, nil
	switch p.kind {
	case pendInit:
		c.ready.Responses = append(c.ready.Responses, Response{ID: p.req, ProducerID: ts.rec.ProducerID, ProducerEpoch: ts.rec.ProducerEpoch})
	case pendAdd:
		c.respond(p.req, nil)
	case pendEnd:
		c.respond(p.req, nil)
		c.startMarkers(ts)
	case pendAbort:
		c.startMarkers(ts)
	case pendComplete:
	}
}

// forgetIfUnstored drops an id that was never stored (its first
// InitProducerID failed).
func (c *Coordinator) forgetIfUnstored(ts *txnState) {
	if ts.version == 0 {
		delete(c.txns, ts.rec.TransactionalID)
	}
}

// pendingFor returns the id whose pending change op is.
func (c *Coordinator) pendingFor(op OpID) *txnState {
	for _, id := range c.ids() {
		if ts := c.txns[id]; ts.pending != nil && ts.pending.op == op {
			return ts
		}
	}
	return nil
}

// startMarkers sends the markers of a durable Prepare record.
func (c *Coordinator) startMarkers(ts *txnState) {
	ts.markerParts, ts.markerGroups = slices.Clone(ts.rec.Partitions), slices.Clone(ts.rec.Groups)
	c.sendMarkers(ts)
}

func (c *Coordinator) sendMarkers(ts *txnState) {
	if len(ts.markerParts) == 0 && len(ts.markerGroups) == 0 {
		c.complete(ts)
		return
	}
	ts.markerOp, ts.markerNeedSend, ts.markerRetryAt = c.nextOp(), false, time.Time{}
	c.ready.Markers = append(c.ready.Markers, MarkerOp{ID: ts.markerOp, TransactionalID: ts.rec.TransactionalID,
		ProducerID: ts.rec.ProducerID, ProducerEpoch: ts.rec.ProducerEpoch, Commit: ts.rec.State == PrepareCommit,
		Decision: ts.rec.Decision, Partitions: slices.Clone(ts.markerParts), Groups: slices.Clone(ts.markerGroups)})
}

// StepMarkers feeds the outcome of a MarkerOp.
func (c *Coordinator) StepMarkers(res MarkerResult, now time.Time) {
	c.input(now)
	defer c.check()
	var ts *txnState
	for _, id := range c.ids() {
		if t := c.txns[id]; t.markerOp == res.ID && res.ID != 0 {
			ts = t
		}
	}
	if ts == nil {
		return
	}
	ts.markerOp = 0
	ts.markerParts = keepOnly(ts.markerParts, res.FailedPartitions, comparePartitions)
	ts.markerGroups = keepOnly(ts.markerGroups, res.FailedGroups, func(a, b string) int {
		switch {
		case a < b:
			return -1
		case a > b:
			return 1
		}
		return 0
	})
	if len(ts.markerParts) > 0 || len(ts.markerGroups) > 0 {
		ts.markerNeedSend, ts.markerRetryAt = true, c.now.Add(c.cfg.MarkerRetry)
		return
	}
	c.complete(ts)
}

// keepOnly returns the elements of have that are in failed (have sorted).
func keepOnly[T any](have, failed []T, cmp func(a, b T) int) []T {
	var out []T
	for _, x := range have {
		if slices.ContainsFunc(failed, func(f T) bool { return cmp(f, x) == 0 }) {
			out = append(out, x)
		}
	}
	return out
}

// complete writes the Complete state once every participant has its marker.
func (c *Coordinator) complete(ts *txnState) {
	next := ts.rec.Clone()
	next.State = CompleteAbort
	if ts.rec.State == PrepareCommit {
		next.State = CompleteCommit
	}
	next.Partitions, next.Groups, next.UpdateMs = nil, nil, c.now.UnixMilli()
	ts.markerParts, ts.markerGroups = nil, nil
	ts.pending = &pending{kind: pendComplete, next: next}
	c.write(ts)
}

// Tick advances time: transactions past their timeout are aborted under
// the next epoch (fencing their producer), failed markers and failed
// internal writes are sent again.
func (c *Coordinator) Tick(now time.Time) {
	c.input(now)
	defer c.check()
	if !c.loaded {
		return
	}
	for _, id := range c.ids() {
		ts := c.txns[id]
		switch p := ts.pending; {
		case p != nil && !p.retryAt.IsZero() && !c.now.Before(p.retryAt):
			c.write(ts)
		case p == nil && ts.rec.State == Ongoing &&
			c.now.UnixMilli()-ts.rec.StartMs > int64(ts.rec.TimeoutMs):
			c.abortOpen(ts)
		case ts.markerNeedSend && !c.now.Before(ts.markerRetryAt):
			c.sendMarkers(ts)
		}
	}
}

// checkInvariants panics, naming the invariant, if an id's state breaks
// what the rules above promise. Under -tags invariants, after every input.
func (c *Coordinator) checkInvariants() {
	for _, id := range c.ids() {
		ts := c.txns[id]
		r := ts.rec
		fail := func(format string, args ...any) {
			panic(fmt.Sprintf("txn %q (%s, pid %d epoch %d): invariant violated: ", id, r.State, r.ProducerID, r.ProducerEpoch) + fmt.Sprintf(format, args...))
		}
		if r.TransactionalID != id {
			fail("the record is filed under its own id, not %q", r.TransactionalID)
		}
		if !slices.IsSortedFunc(r.Partitions, comparePartitions) || !slices.IsSorted(r.Groups) {
			fail("participants are sorted: %v %v", r.Partitions, r.Groups)
		}
		participants := len(r.Partitions) + len(r.Groups)
		switch {
		case (r.State == Ongoing || r.State.preparing()) && participants == 0 && ts.version != 0:
			fail("an open or deciding transaction has participants")
		case (r.State == Empty || r.State.complete()) && participants != 0:
			fail("a closed transaction has no participants: %v %v", r.Partitions, r.Groups)
		case ts.markerOp != 0 && !r.State.preparing():
			fail("markers are written only from a durable Prepare state")
		case ts.markerOp != 0 && ts.markerNeedSend:
			fail("markers are in flight or waiting to be resent, not both")
		case ts.version == 0 && (ts.pending == nil || ts.pending.kind != pendInit):
			fail("an id not stored yet is being created by InitProducerID")
		case ts.version != 0 && (r.ProducerID < 0 || r.ProducerEpoch < 0 || r.ProducerEpoch > maxEpoch):
			fail("a stored id has a producer id and an epoch in range")
		}
		if p := ts.pending; p != nil && !p.waitingPID && ts.version != 0 {
			n := p.next
			if n.ProducerID == r.ProducerID && n.ProducerEpoch < r.ProducerEpoch {
				fail("an epoch never goes back: writing %d", n.ProducerEpoch)
			}
			if n.State.complete() && !r.State.preparing() {
				fail("a Complete state follows a Prepare state, not %s", r.State)
			}
			if n.State.preparing() && r.State.preparing() && n.State != r.State {
				fail("a decided outcome never changes: %s to %s", r.State, n.State)
			}
			if n.State.preparing() && !r.State.preparing() && n.Decision != r.Decision+1 {
				fail("every decision gets the next number: %d after %d", n.Decision, r.Decision)
			}
		}
	}
}
