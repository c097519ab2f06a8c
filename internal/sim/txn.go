package sim

// The transaction simulator (quire sim txn): the real coordinator core
// (internal/kafka/txn) over a modelled metadata store (delays, failed writes,
// writes that apply but whose answer is lost), modelled partitions that take
// transactional records and markers (delayed, failing), three transactional
// ids each used by two producer instances that fence each other, time jumps
// past transaction timeouts, and coordinator failovers (a new coordinator
// loads the store; the old one's answers are lost). Checkers:
//   - a marker is sent only under a durable decision: when it leaves, the
//     stored record is in the Prepare state of its outcome, for its producer
//     id and epoch, with its partition among the participants;
//   - read_committed: every record of a transaction whose commit was
//     answered ends up committed on its partition (the pid's next marker after
//     it commits), every record of one whose abort was answered ends up
//     aborted, once the faults heal;
//   - fencing: once InitProducerID answered epoch e for an id, no request of
//     an older epoch succeeds;
//   - liveness (reported, not a safety violation): after the faults heal no
//     record stays Prepare and no partition has a transaction open.

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"quire/internal/kafka/txn"
)

// TxnMutants are the mutant names RunTxn accepts.
// early-markers breaks the coordinator (markers before the decision is
// durable); no-marker-fence breaks the modelled partitions (a late copy of
// a marker is applied, and may end a later transaction of the producer).
var TxnMutants = []string{"early-markers", "no-marker-fence"}

// TxnOptions configure one transaction run.
type TxnOptions struct {
	Mutant     string
	Verbose    bool
	TraceLimit int
}

// TxnResult is the outcome of one transaction run.
type TxnResult struct {
	Seed       int64
	Scenario   string
	Violations []string
	Liveness   string
	Trace      []string
	Stats      TxnStats
	Err        error
}

// TxnStats counts what a run exercised.
type TxnStats struct {
	Commits, Aborts, Fenced, Failovers, TimedOut, StoreFailures, MarkerFailures int
}

type txnRecord struct {
	pid   int64
	epoch int16
	seq   int // the producer instance's transaction number, for the checker
	inst  int
	txnID string
}

type txnPartEntry struct {
	rec    *txnRecord // nil for a marker
	marker *txn.MarkerOp
}

type txnSimProducer struct {
	txnID   string
	inst    int
	pid     int64
	epoch   int16
	open    bool
	seq     int
	parts   []txn.Partition
	records []*txnRecord // of the open transaction
	busy    bool
	// ending: an EndTxn failed with a retriable error; as Kafka's clients
	// do, the producer retries it with the same outcome and adds nothing.
	ending *bool
}

type txnSim struct {
	e         *engine
	mutants   txn.Mutants
	store     map[string]txn.LoadedRecord
	pidSeq    int64
	coord     *txn.Coordinator
	gen       int // coordinator generation: answers to older ones are lost
	parts     map[txn.Partition][]txnPartEntry
	prods     []*txnSimProducer
	waiting   map[txn.RequestID]txnWaiter
	lastReq   txn.RequestID
	failStore float64
	failPart  float64
	// markerDelay bounds how long a marker takes to reach its partition:
	// long ones land after the coordinator moved on.
	markerDelay time.Duration
	// epochs: the newest epoch InitProducerID answered per id.
	epochs map[string]int16
	// outcomes of transactions whose EndTxn was answered with success:
	// record → true when committed.
	outcome    map[*txnRecord]bool
	violations []string
	stats      TxnStats
	healed     bool
	// skew moves the coordinator's clock ahead of virtual time (a time
	// jump: open transactions pass their timeout).
	skew time.Duration
	// decisions are the durable Prepare records ever written, by id and
	// decision number; decided is each partition's last applied decision
	// per producer (the partitions' fence against late markers).
	decisions map[txnDecision]txn.Record
	decided   map[txn.Partition]map[int64]int32
	noFence   bool // the no-marker-fence mutant
}

// txnWaiter is a request waiting for its answer: who asked, with which
// epoch (the fencing check runs when the coordinator answers, in its order).
type txnWaiter struct {
	done  func(txn.Response)
	txnID string
	epoch int16
	init  bool
	what  string
}

type txnDecision struct {
	id       string
	decision int32
}

// RunTxn runs one seed of the transaction simulator.
func RunTxn(seed int64, opts TxnOptions) TxnResult {
	var mutants txn.Mutants
	switch opts.Mutant {
	case "":
	case "early-markers":
		mutants.EarlyMarkers = true
	case "no-marker-fence":
	default:
		return TxnResult{Seed: seed, Err: fmt.Errorf("unknown txn mutant %q (want one of %v)", opts.Mutant, TxnMutants)}
	}
	if opts.TraceLimit == 0 {
		opts.TraceLimit = 400
	}
	if opts.Verbose {
		opts.TraceLimit = 0
	}
	s := &txnSim{e: newEngine(seed, opts.TraceLimit), mutants: mutants, store: map[string]txn.LoadedRecord{},
		parts: map[txn.Partition][]txnPartEntry{}, waiting: map[txn.RequestID]txnWaiter{},
		epochs: map[string]int16{}, outcome: map[*txnRecord]bool{}, pidSeq: 1000, noFence: opts.Mutant == "no-marker-fence",
		decisions: map[txnDecision]txn.Record{}, decided: map[txn.Partition]map[int64]int32{}}
	e := s.e
	s.failStore = pick(e, []float64{0, 0.02, 0.1})
	s.failPart = pick(e, []float64{0, 0.05, 0.2})
	s.markerDelay = pick(e, []time.Duration{5 * time.Millisecond, 50 * time.Millisecond})
	scenario := fmt.Sprintf("store failures %.2f, marker failures %.2f, markers within %v", s.failStore, s.failPart, s.markerDelay)
	for _, id := range []string{"a", "b", "c"} {
		for inst := 0; inst < 2; inst++ {
			s.prods = append(s.prods, &txnSimProducer{txnID: id, inst: inst, pid: -1})
		}
	}
	s.newCoordinator()
	horizon := time.Duration(e.intn(2, 6)) * time.Second
	for _, p := range s.prods {
		e.after(e.between(0, 50*time.Millisecond), func() { s.producerStep(p) })
	}
	var tick func()
	tick = func() {
		s.coordInput(func(c *txn.Coordinator, now time.Time) { c.Tick(now) })
		if e.now < horizon+30*time.Second {
			e.after(10*time.Millisecond, tick)
		}
	}
	e.after(10*time.Millisecond, tick)
	// As txn.Service's scan: transactions open or deciding in the store are
	// adopted (a coordinator that lost a CAS forgot them).
	var scan func()
	scan = func() {
		var open []txn.LoadedRecord
		for _, id := range sortedKeys(s.store) {
			if st := s.store[id].Record.State; st == txn.Ongoing || st == txn.PrepareCommit || st == txn.PrepareAbort {
				open = append(open, s.store[id])
			}
		}
		s.coordInput(func(c *txn.Coordinator, now time.Time) { c.Adopt(open, now) })
		if e.now < horizon+30*time.Second {
			e.after(100*time.Millisecond, scan)
		}
	}
	e.after(100*time.Millisecond, scan)
	for range e.intn(0, 3) {
		e.at(e.between(0, horizon), func() { s.stats.Failovers++; s.newCoordinator() })
		scenario += ", a failover"
	}
	for range e.intn(0, 2) { // a time jump: transactions time out
		e.at(e.between(0, horizon), func() {
			e.tracef("sim", "TIME JUMP: the coordinator's clock 2 s ahead")
			s.skew += 2 * time.Second
			s.stats.TimedOut++
		})
	}
	e.at(horizon, func() {
		e.tracef("sim", "HEAL: no more failures; producers stop starting transactions")
		s.failStore, s.failPart, s.healed = 0, 0, true
	})
	for e.step(horizon + 30*time.Second) {
		if len(s.violations) > 0 {
			break
		}
	}
	if len(s.violations) == 0 {
		s.checkEnd()
	}
	return TxnResult{Seed: seed, Scenario: scenario, Violations: s.violations, Liveness: s.liveness(),
		Trace: e.trace.snapshot(), Stats: s.stats}
}

func (s *txnSim) violate(format string, args ...any) {
	v := fmt.Sprintf(format, args...)
	s.e.tracef("CHECK", "VIOLATION: %s", v)
	s.violations = append(s.violations, v)
}

func (s *txnSim) now() time.Time { return time.Unix(0, 0).Add(s.e.now + s.skew) }

// newCoordinator replaces the coordinator with one loaded from the store.
func (s *txnSim) newCoordinator() {
	s.gen++
	for id, w := range s.waiting { // answers of the old one are lost: the clients time out
		delete(s.waiting, id)
		w.done(txn.Response{ID: id, Err: errors.New("request timed out")})
	}
	c := txn.New(txn.Config{Mutants: s.mutants, MarkerRetry: 20 * time.Millisecond, MetaRetry: 20 * time.Millisecond})
	var recs []txn.LoadedRecord
	for _, id := range sortedKeys(s.store) {
		recs = append(recs, s.store[id])
	}
	s.coord = c
	s.e.tracef("coord", "COORDINATOR %d loads %d records", s.gen, len(recs))
	s.coordInput(func(c *txn.Coordinator, now time.Time) { c.Load(recs, now) })
}

// coordInput feeds the current coordinator and carries out its Ready.
func (s *txnSim) coordInput(f func(*txn.Coordinator, time.Time)) {
	c, gen := s.coord, s.gen
	f(c, s.now())
	rd := c.Ready()
	e := s.e
	for _, r := range rd.Responses {
		if w, ok := s.waiting[r.ID]; ok {
			delete(s.waiting, r.ID)
			s.checkFencing(w, r)
			e.after(e.between(0, 2*time.Millisecond), func() { w.done(r) })
		}
	}
	for _, op := range rd.ProducerIDs {
		e.after(e.between(100*time.Microsecond, 2*time.Millisecond), func() {
			s.pidSeq++
			pid := s.pidSeq
			s.answer(gen, func(c *txn.Coordinator, now time.Time) {
				c.StepProducerID(txn.ProducerIDResult{ID: op, ProducerID: pid}, now)
			})
		})
	}
	for _, op := range rd.MetaOps {
		e.after(e.between(100*time.Microsecond, 5*time.Millisecond), func() { s.applyMeta(gen, op) })
	}
	for _, op := range rd.Markers {
		s.checkMarker(op)
		e.after(e.between(100*time.Microsecond, s.markerDelay), func() { s.applyMarkers(gen, op) })
	}
}

// answer feeds a result to the coordinator of generation gen, if it is
// still the current one.
func (s *txnSim) answer(gen int, f func(*txn.Coordinator, time.Time)) {
	if gen != s.gen {
		return
	}
	s.coordInput(f)
}

func (s *txnSim) applyMeta(gen int, op txn.MetaOp) {
	e := s.e
	cur := s.store[op.Record.TransactionalID]
	var res txn.MetaResult
	res.ID = op.ID
	switch {
	case e.chance(s.failStore / 2):
		s.stats.StoreFailures++
		res.Err = errors.New("store unavailable")
	case cur.Version != op.Expect:
		res.Err = txn.ErrVersionConflict
	default:
		v := cur.Version + 1
		s.store[op.Record.TransactionalID] = txn.LoadedRecord{Record: op.Record.Clone(), Version: v}
		if st := op.Record.State; st == txn.PrepareCommit || st == txn.PrepareAbort {
			s.decisions[txnDecision{op.Record.TransactionalID, op.Record.Decision}] = op.Record.Clone()
		}
		res.Version = v
		e.tracef("store", "%s v%d: %s pid %d epoch %d %v", op.Record.TransactionalID, v, op.Record.State, op.Record.ProducerID, op.Record.ProducerEpoch, op.Record.Partitions)
		if e.chance(s.failStore / 2) { // applied, answer lost
			s.stats.StoreFailures++
			res = txn.MetaResult{ID: op.ID, Err: errors.New("outcome unknown")}
		}
	}
	s.answer(gen, func(c *txn.Coordinator, now time.Time) { c.StepMeta(res, now) })
}

// checkMarker: a marker leaves only under the durable decision it carries
// (a late copy of one is allowed: the partitions ignore it).
func (s *txnSim) checkMarker(op txn.MarkerOp) {
	rec, ok := s.decisions[txnDecision{op.TransactionalID, op.Decision}]
	want := txn.PrepareAbort
	if op.Commit {
		want = txn.PrepareCommit
	}
	if !ok || rec.State != want || rec.ProducerID != op.ProducerID || rec.ProducerEpoch != op.ProducerEpoch {
		s.violate("marker (%s decision %d, commit=%v, pid %d epoch %d) sent without that durable decision (found %v: %s pid %d epoch %d)",
			op.TransactionalID, op.Decision, op.Commit, op.ProducerID, op.ProducerEpoch, ok, rec.State, rec.ProducerID, rec.ProducerEpoch)
		return
	}
	for _, p := range op.Partitions {
		if !slices.Contains(rec.Partitions, p) {
			s.violate("marker for %v, not a participant of %s decision %d", p, op.TransactionalID, op.Decision)
		}
	}
}

func (s *txnSim) applyMarkers(gen int, op txn.MarkerOp) {
	var res txn.MarkerResult
	res.ID = op.ID
	for _, p := range op.Partitions {
		if s.e.chance(s.failPart) {
			s.stats.MarkerFailures++
			res.FailedPartitions = append(res.FailedPartitions, p)
			continue
		}
		if s.decided[p] == nil {
			s.decided[p] = map[int64]int32{}
		}
		if last, ok := s.decided[p][op.ProducerID]; ok && op.Decision <= last && !s.noFence {
			s.e.tracef(p.String(), "late marker pid %d decision %d ignored (last %d)", op.ProducerID, op.Decision, last)
			continue
		}
		s.decided[p][op.ProducerID] = op.Decision
		m := op
		s.parts[p] = append(s.parts[p], txnPartEntry{marker: &m})
		s.e.tracef(p.String(), "marker pid %d epoch %d decision %d commit=%v", op.ProducerID, op.ProducerEpoch, op.Decision, op.Commit)
	}
	s.answer(gen, func(c *txn.Coordinator, now time.Time) { c.StepMarkers(res, now) })
}

// request sends a producer's request to the current coordinator.
func (s *txnSim) request(w txnWaiter, call func(c *txn.Coordinator, id txn.RequestID, now time.Time)) {
	s.lastReq++
	id := s.lastReq
	txnID := w.txnID
	s.waiting[id] = w
	s.e.after(s.e.between(0, 2*time.Millisecond), func() {
		if _, still := s.waiting[id]; !still {
			return
		}
		// As txn.Service: the id's stored record is read first, and
		// adopted if the coordinator does not know it.
		lr, stored := s.store[txnID]
		s.coordInput(func(c *txn.Coordinator, now time.Time) {
			if stored && !c.Known(txnID) {
				c.Adopt([]txn.LoadedRecord{lr}, now)
			}
			call(c, id, now)
		})
	})
}

// checkFencing, in the order the coordinator answers: once InitProducerID
// answered epoch e for an id, no request of an older epoch succeeds.
func (s *txnSim) checkFencing(w txnWaiter, r txn.Response) {
	if r.Err != nil {
		return
	}
	newest, known := s.epochs[w.txnID]
	switch {
	case w.init:
		s.epochs[w.txnID] = max(newest, r.ProducerEpoch)
	case known && w.epoch < newest:
		s.violate("%s of %s succeeded with epoch %d after epoch %d was handed out", w.what, w.txnID, w.epoch, newest)
	}
}

// producerStep is one action of a producer instance.
func (s *txnSim) producerStep(p *txnSimProducer) {
	e := s.e
	next := func() { e.after(e.between(time.Millisecond, 30*time.Millisecond), func() { s.producerStep(p) }) }
	if p.busy {
		next()
		return
	}
	if s.healed && !p.open {
		return // no new transactions once healed: the run settles
	}
	p.busy = true
	done := func() { p.busy = false; next() }
	k := e.intn(0, 9)
	if p.ending != nil && p.pid >= 0 {
		k = 9 // retry the EndTxn
	}
	switch {
	case p.pid < 0 || k == 0:
		s.request(txnWaiter{txnID: p.txnID, init: true, what: "InitProducerID", done: func(r txn.Response) {
			if r.Err == nil {
				e.tracef(p.txnID+"/"+fmt.Sprint(p.inst), "init: pid %d epoch %d", r.ProducerID, r.ProducerEpoch)
				p.pid, p.epoch, p.open, p.parts, p.records, p.ending = r.ProducerID, r.ProducerEpoch, false, nil, nil, nil
			}
			done()
		}}, func(c *txn.Coordinator, id txn.RequestID, now time.Time) {
			c.InitProducerID(id, txn.InitProducerIDRequest{TransactionalID: p.txnID, TimeoutMs: 500, ProducerID: -1, ProducerEpoch: -1}, now)
		})
	case k < 6:
		part := txn.Partition{Topic: "t", Partition: int32(e.intn(0, 2))}
		pid, epoch := p.pid, p.epoch
		s.request(txnWaiter{txnID: p.txnID, epoch: epoch, what: "AddPartitions", done: func(r txn.Response) {
			e.tracef(p.txnID+"/"+fmt.Sprint(p.inst), "add %v (epoch %d): %v", part, epoch, r.Err)
			if r.Err == nil {
				if !p.open {
					p.open, p.seq, p.records = true, p.seq+1, nil
				}
				if !slices.Contains(p.parts, part) {
					p.parts = append(p.parts, part)
				}
				rec := &txnRecord{pid: p.pid, epoch: p.epoch, seq: p.seq, inst: p.inst, txnID: p.txnID}
				s.parts[part] = append(s.parts[part], txnPartEntry{rec: rec})
				p.records = append(p.records, rec)
			}
			done()
		}}, func(c *txn.Coordinator, id txn.RequestID, now time.Time) {
			c.AddPartitions(id, txn.AddPartitionsRequest{TransactionalID: p.txnID, ProducerID: pid, ProducerEpoch: epoch, Partitions: []txn.Partition{part}}, now)
		})
	default:
		commit := e.intn(0, 2) > 0
		if p.ending != nil {
			commit = *p.ending
		}
		records := slices.Clone(p.records)
		pid, epoch := p.pid, p.epoch
		s.request(txnWaiter{txnID: p.txnID, epoch: epoch, what: "EndTxn", done: func(r txn.Response) {
			e.tracef(p.txnID+"/"+fmt.Sprint(p.inst), "end commit=%v (epoch %d, txn %d): %v", commit, epoch, p.seq, r.Err)
			switch {
			case r.Err == nil && p.open:
				for _, rec := range records {
					s.outcome[rec] = commit
				}
				if commit {
					s.stats.Commits++
				} else {
					s.stats.Aborts++
				}
				p.open, p.parts, p.records, p.ending = false, nil, nil, nil
			case r.Err == nil:
				p.ending = nil
			case p.open && (errors.Is(r.Err, kerr.ProducerFenced) || errors.Is(r.Err, kerr.InvalidTxnState) || errors.Is(r.Err, kerr.InvalidProducerIDMapping)):
				// Fatal for this transaction: the client starts over with
				// InitProducerID (which aborts whatever is open).
				s.stats.Fenced++
				p.pid, p.open, p.parts, p.records, p.ending = -1, false, nil, nil, nil
			case p.open:
				p.ending = &commit
			}
			done()
		}}, func(c *txn.Coordinator, id txn.RequestID, now time.Time) {
			c.EndTxn(id, txn.EndTxnRequest{TransactionalID: p.txnID, ProducerID: pid, ProducerEpoch: epoch, Commit: commit}, now)
		})
	}
}

// checkEnd: once settled, every record of an answered transaction ended as
// answered on its partition (the producer's next marker after it).
func (s *txnSim) checkEnd() {
	for _, p := range sortedPartitions(s.parts) {
		entries := s.parts[p]
		for i, en := range entries {
			if en.rec == nil {
				continue
			}
			want, answered := s.outcome[en.rec]
			var got *bool
			for _, later := range entries[i+1:] {
				if later.marker != nil && later.marker.ProducerID == en.rec.pid {
					c := later.marker.Commit
					got = &c
					break
				}
			}
			switch {
			case answered && got == nil:
				// liveness: reported below
			case answered && *got != want:
				s.violate("%v: a record of %s's transaction %d (pid %d epoch %d) whose EndTxn(commit=%v) was answered ended commit=%v",
					p, en.rec.txnID, en.rec.seq, en.rec.pid, en.rec.epoch, want, *got)
			}
		}
	}
}

func sortedPartitions(m map[txn.Partition][]txnPartEntry) []txn.Partition {
	var out []txn.Partition
	for p := range m {
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b txn.Partition) int { return int(a.Partition - b.Partition) })
	return out
}

// liveness reports what did not settle after the faults healed.
func (s *txnSim) liveness() string {
	for _, id := range sortedKeys(s.store) {
		if st := s.store[id].Record.State; st == txn.PrepareCommit || st == txn.PrepareAbort {
			return fmt.Sprintf("%s still %s at the end", id, st)
		}
	}
	return ""
}
