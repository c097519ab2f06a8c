package txn

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
)

var t0 = time.UnixMilli(1_700_000_000_000)

// marker is one control batch a partition received.
type marker struct {
	pid    int64
	epoch  int16
	commit bool
}

// world is what the shell would drive: the store of records, a producer id
// sequence, the partitions' markers and groups' outcomes, and one or more
// coordinators (a new one after a failover). Ops can be held back and
// failed on purpose.
type world struct {
	t        *testing.T
	now      time.Time
	store    map[string]LoadedRecord
	nextPID  int64
	markers  map[Partition][]marker
	groups   map[string][]marker
	c        *Coordinator
	resp     map[RequestID]Response
	lastReq  RequestID
	held     []any // ops not carried out yet, in order
	hold     bool  // hold new ops instead of carrying them out
	failMeta int   // the next n MetaOps fail (store unavailable, not applied)
	failPart map[Partition]bool
}

func newWorld(t *testing.T) *world {
	w := &world{t: t, now: t0, store: map[string]LoadedRecord{}, nextPID: 1000,
		markers: map[Partition][]marker{}, groups: map[string][]marker{}, resp: map[RequestID]Response{},
		failPart: map[Partition]bool{}}
	w.c = New(Config{})
	w.c.Load(nil, w.now)
	return w
}

// failover replaces the coordinator with a new one loaded from the store.
func (w *world) failover() {
	w.held = nil
	w.c = New(Config{})
	var recs []LoadedRecord
	for _, id := range slices.Sorted(mapKeys(w.store)) {
		recs = append(recs, w.store[id])
	}
	w.c.Load(recs, w.now)
	w.pump()
}

func mapKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// pump carries out what the coordinator asked for until nothing is left
// (or holds it).
func (w *world) pump() {
	for i := 0; i < 1000; i++ {
		rd := w.c.Ready()
		for _, r := range rd.Responses {
			if _, dup := w.resp[r.ID]; dup {
				w.t.Fatalf("request %d answered twice", r.ID)
			}
			w.resp[r.ID] = r
		}
		var ops []any
		for _, op := range rd.ProducerIDs {
			ops = append(ops, op)
		}
		for _, op := range rd.MetaOps {
			ops = append(ops, op)
		}
		for _, op := range rd.Markers {
			ops = append(ops, op)
		}
		if len(ops) == 0 {
			return
		}
		if w.hold {
			w.held = append(w.held, ops...)
			return
		}
		for _, op := range ops {
			w.apply(op)
		}
	}
	w.t.Fatal("the coordinator never went quiet")
}

// release carries out the held ops.
func (w *world) release() {
	held := w.held
	w.held, w.hold = nil, false
	for _, op := range held {
		w.apply(op)
	}
	w.pump()
}

func (w *world) apply(op any) {
	switch op := op.(type) {
	case OpID:
		w.nextPID++
		w.c.StepProducerID(ProducerIDResult{ID: op, ProducerID: w.nextPID}, w.now)
	case MetaOp:
		cur := w.store[op.Record.TransactionalID]
		switch {
		case w.failMeta > 0:
			w.failMeta--
			w.c.StepMeta(MetaResult{ID: op.ID, Err: errors.New("store unavailable")}, w.now)
		case cur.Version != op.Expect:
			w.c.StepMeta(MetaResult{ID: op.ID, Err: ErrVersionConflict}, w.now)
		default:
			v := cur.Version + 1
			w.store[op.Record.TransactionalID] = LoadedRecord{Record: op.Record.Clone(), Version: v}
			w.c.StepMeta(MetaResult{ID: op.ID, Version: v}, w.now)
		}
	case MarkerOp:
		// A marker goes out only under a durable decision: the stored
		// record is in the Prepare state of this outcome, for this
		// producer id and epoch, with these participants.
		rec := w.store[op.TransactionalID].Record
		want := PrepareAbort
		if op.Commit {
			want = PrepareCommit
		}
		if rec.State != want || rec.ProducerID != op.ProducerID || rec.ProducerEpoch != op.ProducerEpoch {
			w.t.Fatalf("marker %+v sent while the stored record is %+v", op, rec)
		}
		for _, pp := range op.Partitions {
			if !slices.Contains(rec.Partitions, pp) {
				w.t.Fatalf("marker for %v, not a participant of %+v", pp, rec)
			}
		}
		var res MarkerResult
		res.ID = op.ID
		m := marker{pid: op.ProducerID, epoch: op.ProducerEpoch, commit: op.Commit}
		for _, p := range op.Partitions {
			if w.failPart[p] {
				res.FailedPartitions = append(res.FailedPartitions, p)
				continue
			}
			w.markers[p] = append(w.markers[p], m)
		}
		for _, g := range op.Groups {
			w.groups[g] = append(w.groups[g], m)
		}
		w.c.StepMarkers(res, w.now)
	}
}

func (w *world) req() RequestID {
	w.lastReq++
	return w.lastReq
}

// adopt does what the shell does before a request: an id the coordinator
// does not know is read from the store and adopted.
func (w *world) adopt(txnID string) {
	if lr, ok := w.store[txnID]; ok && !w.c.Known(txnID) {
		w.c.Adopt([]LoadedRecord{lr}, w.now)
	}
}

func (w *world) answer(id RequestID) Response {
	w.t.Helper()
	w.pump()
	r, ok := w.resp[id]
	if !ok {
		w.t.Fatalf("request %d not answered", id)
	}
	return r
}

func (w *world) init(txnID string) Response {
	w.t.Helper()
	id := w.req()
	w.adopt(txnID)
	w.c.InitProducerID(id, InitProducerIDRequest{TransactionalID: txnID, TimeoutMs: 60000, ProducerID: -1, ProducerEpoch: -1}, w.now)
	return w.answer(id)
}

func (w *world) add(txnID string, pid int64, epoch int16, parts ...Partition) error {
	w.t.Helper()
	id := w.req()
	w.adopt(txnID)
	w.c.AddPartitions(id, AddPartitionsRequest{TransactionalID: txnID, ProducerID: pid, ProducerEpoch: epoch, Partitions: parts}, w.now)
	return w.answer(id).Err
}

func (w *world) end(txnID string, pid int64, epoch int16, commit bool) error {
	w.t.Helper()
	id := w.req()
	w.adopt(txnID)
	w.c.EndTxn(id, EndTxnRequest{TransactionalID: txnID, ProducerID: pid, ProducerEpoch: epoch, Commit: commit}, w.now)
	return w.answer(id).Err
}

func (w *world) state(txnID string) State {
	rec, ok := w.c.Transaction(txnID)
	if !ok {
		w.t.Fatalf("no record for %q", txnID)
	}
	return rec.State
}

func mustErr(t *testing.T, got, want error, what string) {
	t.Helper()
	if want == nil && got != nil || want != nil && !errors.Is(got, want) {
		t.Fatalf("%s: %v, want %v", what, got, want)
	}
}

var p0, p1 = Partition{"t", 0}, Partition{"t", 1}

func TestCommitAndAbort(t *testing.T) {
	w := newWorld(t)
	r := w.init("a")
	if r.Err != nil || r.ProducerID != 1001 || r.ProducerEpoch != 0 {
		t.Fatalf("init = %+v, want a new producer id at epoch 0", r)
	}
	mustErr(t, w.add("a", 1001, 0, p1, p0), nil, "add partitions")
	mustErr(t, w.add("a", 1001, 0, p0), nil, "add a partition already in")
	id := w.req()
	w.c.AddOffsets(id, AddOffsetsRequest{TransactionalID: "a", ProducerID: 1001, ProducerEpoch: 0, Group: "g"}, w.now)
	mustErr(t, w.answer(id).Err, nil, "add offsets")
	if rec, _ := w.c.Transaction("a"); rec.State != Ongoing || len(rec.Partitions) != 2 || rec.Partitions[0] != p0 || len(rec.Groups) != 1 {
		t.Fatalf("record %+v, want Ongoing with t-0, t-1 and g", rec)
	}
	mustErr(t, w.end("a", 1001, 0, true), nil, "commit")
	if w.state("a") != CompleteCommit {
		t.Fatalf("state %s after the markers, want CompleteCommit", w.state("a"))
	}
	for _, p := range []Partition{p0, p1} {
		if got := w.markers[p]; len(got) != 1 || !got[0].commit || got[0].pid != 1001 {
			t.Fatalf("markers of %v: %+v, want one commit", p, got)
		}
	}
	if got := w.groups["g"]; len(got) != 1 || !got[0].commit {
		t.Fatalf("group g: %+v, want its offsets committed", got)
	}
	mustErr(t, w.end("a", 1001, 0, true), nil, "a retried commit")
	mustErr(t, w.end("a", 1001, 0, false), kerr.InvalidTxnState, "abort after commit")

	// The next transaction, aborted.
	mustErr(t, w.add("a", 1001, 0, p1), nil, "add")
	mustErr(t, w.end("a", 1001, 0, false), nil, "abort")
	if got := w.markers[p1]; len(got) != 2 || got[1].commit {
		t.Fatalf("markers of t-1: %+v, want commit then abort", got)
	}
	if len(w.markers[p0]) != 1 {
		t.Fatalf("t-0 was not in the second transaction: %+v", w.markers[p0])
	}
	// Nothing open: EndTxn is refused; a new instance bumps the epoch.
	r = w.init("a")
	if r.Err != nil || r.ProducerID != 1001 || r.ProducerEpoch != 1 {
		t.Fatalf("second init = %+v, want the same id at epoch 1", r)
	}
	mustErr(t, w.end("a", 1001, 1, true), kerr.InvalidTxnState, "commit with nothing open")
}

// A new instance of a producer fences the old one: what it left open is
// aborted under the next epoch, and its requests get PRODUCER_FENCED.
func TestNewInstanceFencesOld(t *testing.T) {
	w := newWorld(t)
	old := w.init("a")
	mustErr(t, w.add("a", old.ProducerID, old.ProducerEpoch, p0), nil, "add")
	r := w.init("a")
	mustErr(t, r.Err, kerr.ConcurrentTransactions, "init while a transaction is open")
	if got := w.markers[p0]; len(got) != 1 || got[0].commit || got[0].epoch != 1 {
		t.Fatalf("markers of t-0: %+v, want an abort under epoch 1", got)
	}
	r = w.init("a")
	if r.Err != nil || r.ProducerEpoch != 2 {
		t.Fatalf("retried init = %+v, want epoch 2", r)
	}
	mustErr(t, w.add("a", old.ProducerID, old.ProducerEpoch, p1), kerr.ProducerFenced, "the old instance adds")
	mustErr(t, w.end("a", old.ProducerID, old.ProducerEpoch, true), kerr.ProducerFenced, "the old instance commits")
	mustErr(t, w.add("a", 999, 2, p1), kerr.InvalidProducerIDMapping, "another producer id")
}

// A transaction open past its timeout is aborted under the next epoch.
func TestTimeoutAborts(t *testing.T) {
	w := newWorld(t)
	r := w.init("a")
	mustErr(t, w.add("a", r.ProducerID, r.ProducerEpoch, p0), nil, "add")
	w.now = w.now.Add(59 * time.Second)
	w.c.Tick(w.now)
	w.pump()
	if w.state("a") != Ongoing {
		t.Fatalf("aborted before its timeout: %s", w.state("a"))
	}
	w.now = w.now.Add(2 * time.Second)
	w.c.Tick(w.now)
	w.pump()
	if w.state("a") != CompleteAbort || len(w.markers[p0]) != 1 || w.markers[p0][0].commit {
		t.Fatalf("after the timeout: %s, markers %+v; want CompleteAbort and an abort marker", w.state("a"), w.markers[p0])
	}
	mustErr(t, w.end("a", r.ProducerID, r.ProducerEpoch, true), kerr.ProducerFenced, "commit after the timeout")
}

// One change in flight per id: requests meanwhile are answered
// CONCURRENT_TRANSACTIONS, and so is EndTxn while the markers are written.
func TestConcurrentRequests(t *testing.T) {
	w := newWorld(t)
	r := w.init("a")
	mustErr(t, w.add("a", r.ProducerID, r.ProducerEpoch, p0), nil, "add")
	w.failPart[p0] = true
	mustErr(t, w.end("a", r.ProducerID, r.ProducerEpoch, true), nil, "commit (answered once the decision is durable)")
	if w.state("a") != PrepareCommit {
		t.Fatalf("state %s with a marker failing, want PrepareCommit", w.state("a"))
	}
	mustErr(t, w.end("a", r.ProducerID, r.ProducerEpoch, true), kerr.ConcurrentTransactions, "a retried commit while markers are written")
	mustErr(t, w.end("a", r.ProducerID, r.ProducerEpoch, false), kerr.InvalidTxnState, "abort after commit was decided")
	mustErr(t, w.add("a", r.ProducerID, r.ProducerEpoch, p1), kerr.ConcurrentTransactions, "add while markers are written")
	mustErr(t, w.init("a").Err, kerr.ConcurrentTransactions, "init while markers are written")
	// The marker is retried after MarkerRetry, then the state completes.
	delete(w.failPart, p0)
	w.now = w.now.Add(50 * time.Millisecond)
	w.c.Tick(w.now)
	w.pump()
	if w.state("a") != PrepareCommit {
		t.Fatal("marker retried before MarkerRetry")
	}
	w.now = w.now.Add(60 * time.Millisecond)
	w.c.Tick(w.now)
	w.pump()
	if w.state("a") != CompleteCommit || len(w.markers[p0]) != 1 {
		t.Fatalf("state %s, markers %+v after the retry; want CompleteCommit and one marker", w.state("a"), w.markers[p0])
	}

	// A request while a record write is in flight.
	w.hold = true
	id := w.req()
	w.c.AddPartitions(id, AddPartitionsRequest{TransactionalID: "a", ProducerID: r.ProducerID, ProducerEpoch: r.ProducerEpoch, Partitions: []Partition{p1}}, w.now)
	w.pump()
	id2 := w.req()
	w.c.EndTxn(id2, EndTxnRequest{TransactionalID: "a", ProducerID: r.ProducerID, ProducerEpoch: r.ProducerEpoch, Commit: true}, w.now)
	mustErr(t, w.answer(id2).Err, kerr.ConcurrentTransactions, "EndTxn while AddPartitions is being written")
	if _, ok := w.resp[id]; ok {
		t.Fatal("AddPartitions answered before its record was durable")
	}
	w.release()
	mustErr(t, w.answer(id).Err, nil, "AddPartitions once durable")
}

// A coordinator that fails over after the decision was made durable (and
// answered) but before the markers: the next one writes them.
func TestFailoverFinishesDecidedTransactions(t *testing.T) {
	w := newWorld(t)
	r := w.init("a")
	mustErr(t, w.add("a", r.ProducerID, r.ProducerEpoch, p0, p1), nil, "add")
	w.failPart[p1] = true
	mustErr(t, w.end("a", r.ProducerID, r.ProducerEpoch, true), nil, "commit")
	if len(w.markers[p0]) != 1 || len(w.markers[p1]) != 0 {
		t.Fatalf("markers %v", w.markers)
	}
	delete(w.failPart, p1)
	w.failover()
	if w.state("a") != CompleteCommit || len(w.markers[p1]) != 1 || !w.markers[p1][0].commit {
		t.Fatalf("after failover: %s, markers of t-1 %+v; want CompleteCommit and a commit marker", w.state("a"), w.markers[p1])
	}
	// The new coordinator serves the producer as it was.
	mustErr(t, w.add("a", r.ProducerID, r.ProducerEpoch, p0), nil, "add after failover")
}

// A write that fails its compare-and-swap: another coordinator wrote.
func TestVersionConflictDeposes(t *testing.T) {
	w := newWorld(t)
	r := w.init("a")
	// Another coordinator bumps the record behind this one's back.
	lr := w.store["a"]
	lr.Version++
	w.store["a"] = lr
	mustErr(t, w.add("a", r.ProducerID, r.ProducerEpoch, p0), kerr.NotCoordinator, "add after another coordinator wrote")
	if !w.c.Deposed() {
		t.Fatal("not deposed after a version conflict")
	}
}

// A store that fails a write: the client is told to retry; an internal
// write is retried after MetaRetry.
func TestStoreUnavailable(t *testing.T) {
	w := newWorld(t)
	w.failMeta = 1
	mustErr(t, w.init("a").Err, kerr.CoordinatorNotAvailable, "init with the store down")
	if _, ok := w.c.Transaction("a"); ok {
		t.Fatal("an id whose creation failed is kept")
	}
	r := w.init("a")
	mustErr(t, r.Err, nil, "init again")
	mustErr(t, w.add("a", r.ProducerID, r.ProducerEpoch, p0), nil, "add")
	w.failMeta = 1
	mustErr(t, w.end("a", r.ProducerID, r.ProducerEpoch, true), kerr.CoordinatorNotAvailable, "commit with the store down")
	w.failPart[p0] = true
	mustErr(t, w.end("a", r.ProducerID, r.ProducerEpoch, true), nil, "commit retried")
	// The marker succeeds on its retry; the Complete write then fails once.
	delete(w.failPart, p0)
	w.failMeta = 1
	w.now = w.now.Add(150 * time.Millisecond)
	w.c.Tick(w.now)
	w.pump()
	if w.state("a") != PrepareCommit || len(w.markers[p0]) != 1 {
		t.Fatalf("state %s, markers %+v with the Complete write failed; want PrepareCommit and the marker", w.state("a"), w.markers[p0])
	}
	w.now = w.now.Add(150 * time.Millisecond)
	w.c.Tick(w.now)
	w.pump()
	if w.state("a") != CompleteCommit {
		t.Fatalf("state %s after the retry, want CompleteCommit", w.state("a"))
	}
}

func TestInitValidation(t *testing.T) {
	c := New(Config{})
	c.InitProducerID(1, InitProducerIDRequest{TransactionalID: "a", TimeoutMs: 1000, ProducerID: -1, ProducerEpoch: -1}, t0)
	if rd := c.Ready(); len(rd.Responses) != 1 || !errors.Is(rd.Responses[0].Err, kerr.CoordinatorLoadInProgress) {
		t.Fatalf("before Load: %+v", rd.Responses)
	}
	w := newWorld(t)
	id := w.req()
	w.c.InitProducerID(id, InitProducerIDRequest{TransactionalID: "a", TimeoutMs: 16 * 60 * 1000, ProducerID: -1, ProducerEpoch: -1}, w.now)
	mustErr(t, w.answer(id).Err, kerr.InvalidTransactionTimeout, "a timeout above the maximum")

	// KIP-360: a producer re-initialising with the pair it has bumps it; a
	// retry whose answer was lost gets the current pair again; a stale
	// pair is fenced.
	r := w.init("a")
	initWith := func(pid int64, epoch int16) Response {
		id := w.req()
		w.c.InitProducerID(id, InitProducerIDRequest{TransactionalID: "a", TimeoutMs: 1000, ProducerID: pid, ProducerEpoch: epoch}, w.now)
		return w.answer(id)
	}
	r1 := initWith(r.ProducerID, r.ProducerEpoch)
	if r1.Err != nil || r1.ProducerEpoch != r.ProducerEpoch+1 {
		t.Fatalf("re-init with the current pair = %+v", r1)
	}
	if r2 := initWith(r.ProducerID, r.ProducerEpoch); r2.Err != nil || r2.ProducerEpoch != r1.ProducerEpoch {
		t.Fatalf("a retried re-init = %+v, want epoch %d again", r2, r1.ProducerEpoch)
	}
	if r3 := initWith(r.ProducerID, r.ProducerEpoch-1); !errors.Is(r3.Err, kerr.ProducerFenced) {
		t.Fatalf("re-init with a stale pair = %+v, want PRODUCER_FENCED", r3)
	}
}

// An exhausted epoch gets a new producer id.
func TestEpochExhausted(t *testing.T) {
	w := newWorld(t)
	r := w.init("a")
	lr := w.store["a"]
	lr.Record.ProducerEpoch = maxEpoch - 1
	w.store["a"] = lr
	w.failover()
	r2 := w.init("a")
	if r2.Err != nil || r2.ProducerID == r.ProducerID || r2.ProducerEpoch != 0 {
		t.Fatalf("init at epoch %d = %+v, want a new producer id at epoch 0", maxEpoch-1, r2)
	}
}

// Random schedules: two instances of each of three producers run
// transactions while ops are delayed, the store and markers fail, time
// jumps past timeouts and the coordinator fails over. The checks: no
// partition receives both outcomes for one producer id and epoch; a commit
// marker appears only for a transaction its producer asked to commit; every
// EndTxn answered with success ends with its markers once the faults heal;
// a fenced epoch never succeeds again.
func TestRandomSchedules(t *testing.T) {
	for seed := uint64(1); seed <= 300; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { randomSchedule(t, seed) })
	}
}

type producer struct {
	txnID      string
	pid        int64
	epoch      int16
	open       bool
	parts      []Partition
	commitWant map[[2]int64]bool // (pid, epoch) of transactions asked to commit
}

func randomSchedule(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 7))
	w := newWorld(t)
	parts := []Partition{p0, p1, {"u", 0}}
	var prods []*producer
	asked := map[[2]int64]bool{}           // (pid, epoch) asked to commit
	answered := map[[2]int64][]Partition{} // commits answered OK: their partitions
	fencedBelow := map[int64]int16{}       // pid → the lowest epoch still current
	for _, id := range []string{"a", "b", "c"} {
		for range 2 {
			prods = append(prods, &producer{txnID: id, pid: -1})
		}
	}
	for step := 0; step < 200; step++ {
		p := prods[rng.IntN(len(prods))]
		switch k := rng.IntN(10); {
		case k == 0:
			w.now = w.now.Add(time.Duration(rng.IntN(70)) * time.Second)
			w.c.Tick(w.now)
		case k == 1 && rng.IntN(4) == 0:
			w.failover()
		case k == 2:
			w.failMeta = rng.IntN(2)
		case k == 3:
			pp := parts[rng.IntN(len(parts))]
			w.failPart[pp] = !w.failPart[pp]
		case p.pid < 0 || k == 4:
			r := w.init(p.txnID)
			if r.Err == nil {
				p.pid, p.epoch, p.open, p.parts = r.ProducerID, r.ProducerEpoch, false, nil
				if e, ok := fencedBelow[r.ProducerID]; ok && r.ProducerEpoch < e {
					t.Fatalf("seed %d: init gave epoch %d below %d", seed, r.ProducerEpoch, e)
				}
				fencedBelow[r.ProducerID] = r.ProducerEpoch
			}
		case k < 8:
			pp := parts[rng.IntN(len(parts))]
			if err := w.add(p.txnID, p.pid, p.epoch, pp); err == nil {
				if e := fencedBelow[p.pid]; p.epoch < e {
					t.Fatalf("seed %d: a fenced epoch %d (current %d) added a partition", seed, p.epoch, e)
				}
				p.open = true
				if !slices.Contains(p.parts, pp) {
					p.parts = append(p.parts, pp)
				}
			}
		default:
			commit := rng.IntN(3) > 0
			key := [2]int64{p.pid, int64(p.epoch)}
			if commit {
				asked[key] = true
			}
			if err := w.end(p.txnID, p.pid, p.epoch, commit); err == nil && p.open {
				if commit {
					answered[key] = append(answered[key], p.parts...)
				}
				p.open, p.parts = false, nil
			}
		}
		w.pump()
		// Commits only where asked (apply checks every marker against
		// the durable decision).
		for pp, ms := range w.markers {
			for _, m := range ms {
				if m.commit && !asked[[2]int64{m.pid, int64(m.epoch)}] {
					t.Fatalf("seed %d: commit marker on %v for pid %d epoch %d, never asked to commit", seed, pp, m.pid, m.epoch)
				}
			}
		}
	}
	// Heal and settle: every answered commit has its markers.
	w.failMeta = 0
	clear(w.failPart)
	for range 5 {
		w.now = w.now.Add(time.Second)
		w.c.Tick(w.now)
		w.pump()
	}
	for key, ps := range answered {
		for _, pp := range ps {
			if !slices.ContainsFunc(w.markers[pp], func(m marker) bool { return m.commit && m.pid == key[0] && int64(m.epoch) == key[1] }) {
				t.Fatalf("seed %d: commit of pid %d epoch %d answered, but %v has no commit marker: %+v", seed, key[0], key[1], pp, w.markers[pp])
			}
		}
	}
	for _, rec := range w.c.Transactions() {
		if rec.State.preparing() {
			t.Fatalf("seed %d: %q still %s after the faults healed", seed, rec.TransactionalID, rec.State)
		}
	}
}
