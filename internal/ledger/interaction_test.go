package ledger_test

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"

	"quire/internal/ledger"
	"quire/internal/meta"
)

// TestInteraction runs the scenario scripts in testdata/. Each script drives
// the real Writer, Recovery and Reader against model bookies and a model
// metadata store (interaction_model_test.go). Nothing is delivered on its
// own: a request sits in the network until the script delivers, drops or
// fails it, exactly like etcd/raft's deliver-msgs. Rewrite the golden output
// with
//
//	go test ./internal/ledger/ -run TestInteraction -rewrite
//
// and read the diff: the output is the test.
//
// Commands:
//
//	cluster bookies=(b1@zoneA, b2@zoneB, ...)
//	create-ledger id=1 E=3 Qw=3 Qa=2 [ensemble=(b1,b2,b3)] [writer=A] [timeout=10] [explicit-lac=0]
//	              [mutants=(...)]     explicit-lac: the writer's ExplicitLacTicks (0: off)
//	add [payload=x | n=5] [quiet]          the writer adds entries (payload m<entry> by default)
//	deliver [from=A] [to=(b1,b2)] [entry=7] [kind=add|read|read-lac|write-lac] [n=1] [drop|noreply|fail]
//	                                       requests now in the network that match; the bookie
//	                                       answers and the answer goes straight back
//	                                       drop: lost before the bookie; noreply: applied, answer
//	                                       lost; fail: answered "failed" without being applied
//	deliver-all [from=A] [to=(b1)] [quiet] deliver matching requests until none is left
//	deliver-meta [from=r1] [n=1] [fail]    metadata operations (fail: store unavailable)
//	stabilize [quiet]                      deliver everything until the network is quiet
//	tick [n=1] [who=A]                     logical time for the running state machines
//	crash b2 / restart b2                  a bookie process dies (its disk survives) / returns
//	read-only b1 b2 / writable b1          bookies out of space: reads served, adds refused except
//	                                       recovery adds of entries they hold (answered at once)
//	lose-entry b2 entry=5                  a bookie loses one entry (a bad sector; the ledger is
//	                                       under-replicated until autorecovery copies it back)
//	pause-writer / resume-writer           a GC pause: answers to the writer wait
//	crash-writer                           the writer is gone for good; answers to it are lost
//	close-writer                           the writer closes the ledger
//	recover name=r1 [mutants=(...)]        a new owner starts recovering the ledger
//	print-bookies / print-acks / print-metadata / print-placement / print-recoveries
//	read-ledger [ranges=4] [range-entries=256] [range-bytes=N] [slow=(b2)] [from=0] [to=last]
//	                                       read the CLOSED ledger with the Reader; it asks the
//	                                       model bookies directly, which answer at once, except
//	                                       slow ones, which never answer (the reader ticks)
//
// Output conventions: "A -> b1 add e7 lac=5" is a request put on the network,
// "b1 <- A add e7 lac=5: ok" its delivery and answer; lines indented below a
// delivery are what the receiver did with the answer. After every command
// the harness checks the writer's guarantees (acks in entry order, every
// acknowledged entry on at least Qa bookies, a CLOSED ledger holding every
// acknowledged entry, a CLOSED record never rewritten, no bookie with a LAC
// beyond the writer's last acknowledged entry) and fails the test if
// one breaks, unless the script switched on a protocol mutant (Mutants): then
// it prints the violations as VIOLATION lines, which the golden output
// expects.
func TestInteraction(t *testing.T) {
	datadriven.Walk(t, "testdata", func(t *testing.T, path string) {
		e := newEnv()
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			return e.run(t, d)
		})
	})
}

// stateMachine is what Writer and Recovery have in common.
type stateMachine interface {
	Step(ledger.Response)
	StepMeta(ledger.MetaResult)
	Tick()
	Ready() ledger.Ready
}

type clientState int

const (
	clientRunning clientState = iota
	clientPaused
	clientCrashed
)

// client is one state machine of the script: the writer or a recovery.
type client struct {
	name     string
	sm       stateMachine
	writer   *ledger.Writer
	recovery *ledger.Recovery
	state    clientState
	parked   []func() // answers that arrived while paused, in arrival order
	finished bool     // its end (closed, fenced, recovered) was reported
}

type inflight struct {
	from *client
	req  ledger.Request
}

type inflightMeta struct {
	from *client
	op   ledger.MetaOp
}

type env struct {
	bookies     map[ledger.BookieID]*modelBookie
	bookieOrder []ledger.BookieID
	store       *modelMeta
	ledgerID    int64

	clients  map[string]*client
	order    []*client
	writer   *client
	payloads map[int64]string // what the writer added, by entry
	acks     []ledger.Ack     // every ack the writer gave, in order
	next     int64            // the writer's next entry id

	net   []inflight // requests sent and not yet delivered, oldest first
	metaQ []inflightMeta

	ticks int // ticks so far (every running state machine gets each one)

	out    strings.Builder
	depth  int
	quiet  bool
	hidden int
	broken []string // invariant violations seen while running the command
	// mutated: a state machine runs with Mutants set. Violations are then
	// the expected outcome: they print as VIOLATION lines instead of
	// failing the test, so a script can show the checks catching a broken
	// protocol.
	mutated  bool
	reported map[string]bool // violations already printed
}

func newEnv() *env {
	return &env{
		bookies:  map[ledger.BookieID]*modelBookie{},
		store:    newModelMeta(),
		clients:  map[string]*client{},
		payloads: map[int64]string{},
		reported: map[string]bool{},
	}
}

// scriptError aborts a command whose script is wrong (not the protocol).
type scriptError struct{ msg string }

func (e *env) run(t *testing.T, d *datadriven.TestData) (output string) {
	e.out.Reset()
	e.depth, e.hidden, e.broken = 0, 0, nil
	e.quiet = d.HasArg("quiet")
	defer func() {
		if r := recover(); r != nil {
			se, ok := r.(scriptError)
			if !ok {
				panic(r)
			}
			t.Fatalf("%s: %s: %s", d.Pos, d.Cmd, se.msg)
		}
	}()
	switch d.Cmd {
	case "cluster":
		e.cmdCluster(d)
	case "create-ledger":
		e.cmdCreateLedger(d)
	case "add":
		e.cmdAdd(d)
	case "deliver":
		if e.deliver(d, false) == 0 {
			e.scriptFail("no request in the network matches")
		}
	case "deliver-all":
		e.deliver(d, true)
	case "deliver-meta":
		e.cmdDeliverMeta(d)
	case "stabilize":
		e.stabilize()
	case "tick":
		e.cmdTick(d)
	case "crash", "restart":
		e.cmdBookieProcess(d)
	case "read-only", "writable":
		e.cmdBookieDisk(d)
	case "lose-entry":
		e.cmdLoseEntry(d)
	case "pause-writer":
		e.mustWriter().state = clientPaused
		e.event("%s is paused", e.writer.name)
	case "resume-writer":
		e.cmdResume()
	case "crash-writer":
		w := e.mustWriter()
		w.state, w.parked = clientCrashed, nil
		e.event("%s crashed", w.name)
	case "close-writer":
		w := e.mustWriter()
		e.event("%s closes l%d", w.name, e.ledgerID)
		w.writer.Close()
		e.drain(w)
	case "recover":
		e.cmdRecover(d)
	case "print-bookies":
		e.printBookies()
	case "print-acks":
		e.printAcks()
	case "print-metadata":
		e.printMetadata()
	case "print-placement":
		e.printPlacement()
	case "print-recoveries":
		e.printRecoveries()
	case "read-ledger":
		e.readLedger(d)
	default:
		e.scriptFail("unknown command")
	}
	if e.hidden > 0 {
		e.event("(%d bookie messages not shown)", e.hidden)
	}
	e.checkInvariants()
	if len(e.broken) > 0 && e.mutated {
		for _, v := range e.broken {
			if !e.reported[v] {
				e.reported[v] = true
				e.event("VIOLATION: %s", v)
			}
		}
	} else if len(e.broken) > 0 {
		t.Errorf("%s: %s: protocol guarantee broken:\n%s\noutput so far:\n%s", d.Pos, d.FullCmd(), strings.Join(e.broken, "\n"), e.out.String())
	}
	if e.out.Len() == 0 {
		return "ok\n"
	}
	return e.out.String()
}

func (e *env) scriptFail(format string, args ...any) {
	panic(scriptError{msg: fmt.Sprintf(format, args...)})
}

func (e *env) violate(format string, args ...any) {
	e.broken = append(e.broken, fmt.Sprintf(format, args...))
}

// event prints a line that always shows; message prints a bookie message
// line, hidden under quiet.
func (e *env) event(format string, args ...any) {
	if !e.quiet {
		e.out.WriteString(strings.Repeat("  ", e.depth))
	}
	fmt.Fprintf(&e.out, format, args...)
	e.out.WriteByte('\n')
}

func (e *env) message(format string, args ...any) {
	if e.quiet {
		e.hidden++
		return
	}
	e.event(format, args...)
}

// ---- arguments ----

func (e *env) argString(d *datadriven.TestData, key, def string) string {
	a, ok := d.Arg(key)
	if !ok {
		return def
	}
	if len(a.Vals) != 1 {
		e.scriptFail("%s wants one value", key)
	}
	return a.Vals[0]
}

func (e *env) argInt(d *datadriven.TestData, key string, def int64) int64 {
	s := e.argString(d, key, "")
	if s == "" {
		return def
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		e.scriptFail("%s=%s: %v", key, s, err)
	}
	return n
}

func argList(d *datadriven.TestData, key string) []string {
	a, ok := d.Arg(key)
	if !ok {
		return nil
	}
	return a.Vals
}

// firstKey returns the first bare argument (as "b2" in "crash b2").
func (e *env) firstKey(d *datadriven.TestData) string {
	if len(d.CmdArgs) == 0 || len(d.CmdArgs[0].Vals) != 0 {
		e.scriptFail("want a bare name, as in %q", d.Cmd+" b2")
	}
	return d.CmdArgs[0].Key
}

// ---- setup ----

func (e *env) cmdCluster(d *datadriven.TestData) {
	for _, spec := range argList(d, "bookies") {
		id, zone, ok := strings.Cut(spec, "@")
		if !ok {
			e.scriptFail("bookie %q: want id@zone", spec)
		}
		b := newModelBookie(ledger.BookieID(id), zone)
		e.bookies[b.id] = b
		e.bookieOrder = append(e.bookieOrder, b.id)
	}
	sort.Slice(e.bookieOrder, func(i, j int) bool { return e.bookieOrder[i] < e.bookieOrder[j] })
	for _, id := range e.bookieOrder {
		e.event("%s in %s", id, e.bookies[id].zone)
	}
}

func (e *env) clusterView() []ledger.BookieInfo {
	out := make([]ledger.BookieInfo, 0, len(e.bookieOrder))
	for _, id := range e.bookieOrder {
		b := e.bookies[id]
		out = append(out, ledger.BookieInfo{ID: id, Zone: b.zone, Writable: !b.down && !b.readOnly})
	}
	return out
}

func (e *env) cmdCreateLedger(d *datadriven.TestData) {
	if e.writer != nil {
		e.scriptFail("one ledger per script")
	}
	md := ledger.Metadata{
		ID:           e.argInt(d, "id", 1),
		EnsembleSize: int(e.argInt(d, "E", 3)),
		WriteQuorum:  int(e.argInt(d, "Qw", 3)),
		AckQuorum:    int(e.argInt(d, "Qa", 2)),
		State:        ledger.StateOpen,
		LastEntryID:  -1,
	}
	name := e.argString(d, "writer", "w")
	md.CreatedBy = name
	var ensemble []ledger.BookieID
	if ids := argList(d, "ensemble"); ids != nil {
		for _, id := range ids {
			if e.bookies[ledger.BookieID(id)] == nil {
				e.scriptFail("unknown bookie %s", id)
			}
			ensemble = append(ensemble, ledger.BookieID(id))
		}
	} else {
		var err error
		ensemble, err = ledger.PickEnsemble(e.clusterView(), md.EnsembleSize, md.WriteQuorum, nil, md.ID)
		if err != nil {
			e.event("placement: %v", err)
			return
		}
		e.event("placement picked %s", fmtEnsemble(ensemble))
	}
	md.Fragments = []ledger.Fragment{{FirstEntry: 0, Ensemble: ensemble}}
	v, err := e.store.create(md)
	if err != nil {
		e.event("create l%d: %v", md.ID, err)
		return
	}
	e.event("meta create l%d: v=%d %s", md.ID, v, fmtRecord(md))
	w, err := ledger.NewWriter(ledger.WriterConfig{
		Metadata:            md,
		Version:             v,
		Cluster:             e.clusterView(),
		RequestTimeoutTicks: int(e.argInt(d, "timeout", 10)),
		ExplicitLacTicks:    int(e.argInt(d, "explicit-lac", 0)),
		Mutants:             e.mutants(d),
	})
	if err != nil {
		e.scriptFail("new writer: %v", err)
	}
	e.ledgerID = md.ID
	e.writer = e.addClient(name, w)
	e.writer.writer = w
	e.event("%s writes l%d (E=%d Qw=%d Qa=%d)", name, md.ID, md.EnsembleSize, md.WriteQuorum, md.AckQuorum)
}

// mutants reads mutants=(WeakFence, ...): protocol bugs switched on.
func (e *env) mutants(d *datadriven.TestData) ledger.Mutants {
	var m ledger.Mutants
	for _, name := range argList(d, "mutants") {
		switch name {
		case "WeakFence":
			m.WeakFence = true
		case "NoFenceRecoveryRead":
			m.NoFenceRecoveryRead = true
		case "UnorderedAck":
			m.UnorderedAck = true
		case "EnsembleChangeIgnoresRecovery":
			m.EnsembleChangeIgnoresRecovery = true
		case "ExplicitLacAhead":
			m.ExplicitLacAhead = true
		default:
			e.scriptFail("unknown mutant %s", name)
		}
		e.mutated = true
	}
	return m
}

func (e *env) addClient(name string, sm stateMachine) *client {
	if e.clients[name] != nil {
		e.scriptFail("name %s is taken", name)
	}
	c := &client{name: name, sm: sm}
	e.clients[name] = c
	e.order = append(e.order, c)
	return c
}

func (e *env) mustWriter() *client {
	if e.writer == nil {
		e.scriptFail("no writer: create-ledger first")
	}
	return e.writer
}

// ---- the writer ----

func (e *env) cmdAdd(d *datadriven.TestData) {
	w := e.mustWriter()
	if w.state != clientRunning {
		e.scriptFail("%s is not running", w.name)
	}
	payloads := argList(d, "payload")
	if n := e.argInt(d, "n", 0); n > 0 {
		for i := int64(0); i < n; i++ {
			payloads = append(payloads, fmt.Sprintf("m%d", e.next+i))
		}
	}
	if len(payloads) == 0 {
		payloads = []string{fmt.Sprintf("m%d", e.next)}
	}
	first := e.next
	for _, p := range payloads {
		id, err := w.writer.Add([]byte(p))
		if err != nil {
			e.event("%s add %q refused: %s", w.name, p, errName(err))
			continue
		}
		if id != e.next {
			e.violate("Add returned entry %d, want %d", id, e.next)
		}
		e.next = id + 1
		e.payloads[id] = p
		if !e.quiet {
			e.event("%s add e%d %q", w.name, id, p)
		}
		e.drain(w)
	}
	if e.quiet && e.next > first {
		e.event("%s add e%d..e%d", w.name, first, e.next-1)
	}
}

func (e *env) cmdResume() {
	w := e.mustWriter()
	if w.state != clientPaused {
		e.scriptFail("%s is not paused", w.name)
	}
	w.state = clientRunning
	e.event("%s resumes with %d parked answers", w.name, len(w.parked))
	// The placement view may have changed during the pause.
	w.writer.SetCluster(e.clusterView())
	e.drain(w)
	parked := w.parked
	w.parked = nil
	for _, step := range parked {
		step()
		e.drain(w)
	}
}

// drain takes c's Ready and puts its outputs on the network, the metadata
// queue and the ack log. Acks print first: a writer acknowledges before it
// reacts to the new LAC (say, with the CAS that closes the ledger).
func (e *env) drain(c *client) {
	rd := c.sm.Ready()
	e.depth++
	defer func() { e.depth-- }()
	for _, a := range rd.Acks {
		if c != e.writer {
			e.violate("%s produced an ack", c.name)
		}
		e.acks = append(e.acks, a)
		if a.Err != nil {
			e.event("%s ack e%d err=%s", c.name, a.EntryID, errName(a.Err))
		} else {
			e.event("%s ack e%d", c.name, a.EntryID)
		}
	}
	for _, req := range rd.Requests {
		if c == e.writer && req.LastAddConfirmed > e.lastAcked() {
			e.violate("%s sent %s to %s: lac above its last acknowledged entry %d", c.name, fmtRequest(req), req.To, e.lastAcked())
		}
		e.net = append(e.net, inflight{from: c, req: req})
		e.message("%s -> %s %s", c.name, req.To, fmtRequest(req))
	}
	for _, op := range rd.MetaOps {
		e.metaQ = append(e.metaQ, inflightMeta{from: c, op: op})
		e.event("%s -> meta %s", c.name, fmtMetaOp(op, true))
	}
	e.reportEnd(c)
}

// reportEnd prints, once, that a client reached its end.
func (e *env) reportEnd(c *client) {
	if c.finished {
		return
	}
	switch {
	case c.writer != nil:
		closed, err := c.writer.Closed()
		if !closed {
			return
		}
		c.finished = true
		if err != nil {
			e.event("%s stops: %s", c.name, errName(err))
			return
		}
		md, v := c.writer.Metadata()
		e.event("%s sees l%d closed: v=%d %s", c.name, md.ID, v, fmtRecord(md))
	case c.recovery != nil:
		done, md, err := c.recovery.Done()
		if !done {
			return
		}
		c.finished = true
		if err != nil {
			e.event("%s failed: %v", c.name, err)
			return
		}
		_, v, _ := e.store.get(md.ID)
		e.event("%s done: l%d %s (store at v=%d)", c.name, md.ID, fmtRecord(md), v)
	}
}

func (e *env) lastAcked() int64 {
	last := int64(-1)
	for _, a := range e.acks {
		if a.Err == nil && a.EntryID > last {
			last = a.EntryID
		}
	}
	return last
}

// ---- delivery ----

type deliveryMode string

const (
	modeNormal  deliveryMode = ""
	modeDrop    deliveryMode = "drop"
	modeNoReply deliveryMode = "noreply"
	modeFail    deliveryMode = "fail"
)

type filter struct {
	from  map[string]bool
	to    map[ledger.BookieID]bool
	entry *int64
	kind  string
}

func (e *env) parseFilter(d *datadriven.TestData) filter {
	var f filter
	if names := argList(d, "from"); names != nil {
		f.from = map[string]bool{}
		for _, n := range names {
			if e.clients[n] == nil {
				e.scriptFail("unknown sender %s", n)
			}
			f.from[n] = true
		}
	}
	if ids := argList(d, "to"); ids != nil {
		f.to = map[ledger.BookieID]bool{}
		for _, id := range ids {
			if e.bookies[ledger.BookieID(id)] == nil {
				e.scriptFail("unknown bookie %s", id)
			}
			f.to[ledger.BookieID(id)] = true
		}
	}
	if d.HasArg("entry") {
		n := e.argInt(d, "entry", 0)
		f.entry = &n
	}
	f.kind = e.argString(d, "kind", "")
	switch f.kind {
	case "", "add", "read", "read-lac", "write-lac":
	default:
		e.scriptFail("kind=%s: want add, read, read-lac or write-lac", f.kind)
	}
	return f
}

func (f filter) match(m inflight) bool {
	if f.from != nil && !f.from[m.from.name] || f.to != nil && !f.to[m.req.To] {
		return false
	}
	if f.entry != nil && m.req.EntryID != *f.entry {
		return false
	}
	return f.kind == "" || f.kind == requestKind(m.req)
}

func requestKind(r ledger.Request) string {
	switch {
	case r.Kind == ledger.RequestAdd:
		return "add"
	case r.Kind == ledger.RequestWriteLac:
		return "write-lac"
	case r.Kind == ledger.RequestReadRange:
		return "read-range"
	case r.EntryID == -1:
		return "read-lac"
	}
	return "read"
}

func (e *env) modeArg(d *datadriven.TestData) deliveryMode {
	mode := modeNormal
	for _, m := range []deliveryMode{modeDrop, modeNoReply, modeFail} {
		if d.HasArg(string(m)) {
			if mode != modeNormal {
				e.scriptFail("choose one of drop, noreply, fail")
			}
			mode = m
		}
	}
	return mode
}

// deliver delivers the matching requests now in the network (and, with
// untilQuiet, those the deliveries send in turn), oldest first. It returns
// how many it delivered.
func (e *env) deliver(d *datadriven.TestData, untilQuiet bool) int {
	f := e.parseFilter(d)
	mode := e.modeArg(d)
	limit := int(e.argInt(d, "n", 0))
	total := 0
	for round := 0; ; round++ {
		if round > 10000 {
			e.scriptFail("still delivering after 10000 rounds")
		}
		var batch, rest []inflight
		for _, m := range e.net {
			if f.match(m) && (limit == 0 || total+len(batch) < limit) {
				batch = append(batch, m)
			} else {
				rest = append(rest, m)
			}
		}
		if len(batch) == 0 {
			return total
		}
		e.net = rest
		for _, m := range batch {
			e.deliverOne(m, mode)
		}
		total += len(batch)
		if !untilQuiet {
			return total
		}
	}
}

func (e *env) deliverOne(m inflight, mode deliveryMode) {
	b := e.bookies[m.req.To]
	line := fmt.Sprintf("%s <- %s %s", m.req.To, m.from.name, fmtRequest(m.req))
	var resp ledger.Response
	switch mode {
	case modeDrop:
		e.message("%s: dropped", line)
		return
	case modeFail:
		resp = ledger.Response{ID: m.req.ID, From: b.id, Status: ledger.StatusFailed, LastAddConfirmed: -1}
		line += ": failed (injected)"
	default:
		down := b.down
		resp = b.handle(m.req)
		line += ": " + fmtResponse(m.req, resp)
		if down {
			line += " (down)"
		}
		if mode == modeNoReply {
			e.message("%s, answer lost", line)
			return
		}
	}
	e.answer(m.from, line, false, func() { m.from.sm.Step(resp) })
}

// answer prints line and hands the answer to c, unless c is paused (parked)
// or crashed (lost).
func (e *env) answer(c *client, line string, isEvent bool, step func()) {
	emit := e.message
	if isEvent {
		emit = e.event
	}
	switch c.state {
	case clientCrashed:
		emit("%s (%s is gone: answer lost)", line, c.name)
	case clientPaused:
		emit("%s (%s is paused: answer parked)", line, c.name)
		c.parked = append(c.parked, step)
	default:
		emit("%s", line)
		step()
		e.drain(c)
	}
}

func (e *env) cmdDeliverMeta(d *datadriven.TestData) {
	var from map[string]bool
	if names := argList(d, "from"); names != nil {
		from = map[string]bool{}
		for _, n := range names {
			from[n] = true
		}
	}
	limit := int(e.argInt(d, "n", 0))
	var batch, rest []inflightMeta
	for _, m := range e.metaQ {
		if (from == nil || from[m.from.name]) && (limit == 0 || len(batch) < limit) {
			batch = append(batch, m)
		} else {
			rest = append(rest, m)
		}
	}
	if len(batch) == 0 {
		e.scriptFail("no metadata operation matches")
	}
	e.metaQ = rest
	for _, m := range batch {
		e.deliverMeta(m, d.HasArg("fail"))
	}
}

func (e *env) deliverMeta(m inflightMeta, unavailable bool) {
	line := fmt.Sprintf("meta <- %s %s", m.from.name, fmtMetaOp(m.op, false))
	var res ledger.MetaResult
	if unavailable {
		res = ledger.MetaResult{ID: m.op.ID, Err: fmt.Errorf("injected: %w", meta.ErrUnavailable)}
		line += ": unavailable (injected)"
	} else {
		var err error
		res, err = e.store.apply(m.op)
		if err != nil {
			e.violate("%s: %v", line, err)
		}
		line += ": " + e.fmtMetaResult(m.op, res)
	}
	e.answer(m.from, line, true, func() { m.from.sm.StepMeta(res) })
}

func (e *env) stabilize() {
	for round := 0; len(e.net) > 0 || len(e.metaQ) > 0; round++ {
		if round > 10000 {
			e.scriptFail("not quiet after 10000 rounds")
		}
		batch := e.net
		e.net = nil
		for _, m := range batch {
			e.deliverOne(m, modeNormal)
		}
		metaBatch := e.metaQ
		e.metaQ = nil
		for _, m := range metaBatch {
			e.deliverMeta(m, false)
		}
	}
}

func (e *env) cmdTick(d *datadriven.TestData) {
	n := e.argInt(d, "n", 1)
	who := e.argString(d, "who", "")
	if who != "" && e.clients[who] == nil {
		e.scriptFail("unknown state machine %s", who)
	}
	for i := int64(0); i < n; i++ {
		e.ticks++
		// Print a tick's header only when the tick produced something.
		before := e.out.String()
		for _, c := range e.order {
			if c.state != clientRunning || who != "" && c.name != who {
				continue
			}
			c.sm.Tick()
			e.drain(c)
		}
		if produced := e.out.String()[len(before):]; produced != "" {
			e.out.Reset()
			e.out.WriteString(before)
			e.event("tick %d:", e.ticks)
			e.out.WriteString(produced)
		}
	}
}

// cmdBookieDisk turns bookies read-only (out of space) or writable again.
func (e *env) cmdBookieDisk(d *datadriven.TestData) {
	if len(d.CmdArgs) == 0 {
		e.scriptFail("want bare names, as in %q", d.Cmd+" b1 b2")
	}
	for _, a := range d.CmdArgs {
		b := e.mustBookie(a.Key)
		b.readOnly = d.Cmd == "read-only"
		if b.readOnly {
			e.event("%s is read-only (out of space): it serves reads and refuses adds", b.id)
		} else {
			e.event("%s is writable", b.id)
		}
	}
	e.registryChanged()
}

// mustBookie returns the named bookie or fails the script.
func (e *env) mustBookie(name string) *modelBookie {
	b := e.bookies[ledger.BookieID(name)]
	if b == nil {
		e.scriptFail("unknown bookie %s", name)
	}
	return b
}

// registryChanged tells the writer which bookies it may place on, as the
// registry would (a paused writer catches up when it resumes).
func (e *env) registryChanged() {
	if e.writer != nil && e.writer.state == clientRunning {
		e.writer.writer.SetCluster(e.clusterView())
		e.drain(e.writer)
	}
}

func (e *env) cmdBookieProcess(d *datadriven.TestData) {
	b := e.mustBookie(e.firstKey(d))
	b.down = d.Cmd == "crash"
	if b.down {
		e.event("%s is down", b.id)
	} else {
		e.event("%s is back (its disk kept everything)", b.id)
	}
	e.registryChanged()
}

func (e *env) cmdLoseEntry(d *datadriven.TestData) {
	id := ledger.BookieID(e.firstKey(d))
	b := e.bookies[id]
	if b == nil {
		e.scriptFail("unknown bookie %s", id)
	}
	entry := e.argInt(d, "entry", -1)
	l := b.ledgers[e.ledgerID]
	if l == nil || l.entries[entry] == nil {
		e.scriptFail("%s holds no e%d", id, entry)
	}
	delete(l.entries, entry)
	e.event("%s lost e%d", id, entry)
}

func (e *env) cmdRecover(d *datadriven.TestData) {
	name := e.argString(d, "name", "")
	if name == "" {
		e.scriptFail("recover wants name=")
	}
	r := ledger.NewRecovery(ledger.RecoveryConfig{LedgerID: e.ledgerID, Mutants: e.mutants(d)})
	c := e.addClient(name, r)
	c.recovery = r
	e.event("%s recovers l%d", name, e.ledgerID)
	r.Start()
	e.drain(c)
}

// checkInvariants checks the writer's guarantees against the models.
func (e *env) checkInvariants() {
	if e.writer == nil {
		return
	}
	md, _, _ := e.store.get(e.ledgerID)
	next, failedSeen := int64(0), false
	for _, a := range e.acks {
		switch {
		case a.Err != nil:
			failedSeen = true
		case failedSeen:
			e.violate("e%d acknowledged after a failed ack", a.EntryID)
		case a.EntryID != next:
			e.violate("e%d acknowledged, want e%d next (acks must follow entry order)", a.EntryID, next)
		default:
			next++
		}
	}
	for id := int64(0); id < next; id++ {
		copies := 0
		for _, b := range e.bookies {
			l := b.ledgers[e.ledgerID]
			if l == nil {
				continue
			}
			payload, _, err := ledger.DecodeEntry(e.ledgerID, id, l.entries[id])
			if err == nil && string(payload) == e.payloads[id] {
				copies++
			}
		}
		if copies < md.AckQuorum {
			e.violate("acknowledged e%d is on %d bookies, fewer than Qa=%d", id, copies, md.AckQuorum)
		}
	}
	if md.State == ledger.StateClosed && next-1 > md.LastEntryID {
		e.violate("l%d closed at e%d but e%d was acknowledged", md.ID, md.LastEntryID, next-1)
	}
	// A LAC is a promise to readers that every entry up to it was
	// acknowledged: no bookie may hold one beyond the writer's acks.
	for _, id := range e.bookieOrder {
		if l := e.bookies[id].ledgers[e.ledgerID]; l != nil && l.lac > e.lastAcked() {
			e.violate("%s holds lac=%d beyond the last acknowledged entry %d", id, l.lac, e.lastAcked())
		}
	}
}
