package mlog

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
)

// TestInteraction runs the scenario scripts in testdata/. Each script drives
// real ManagedLedger cores (one per would-be owner of topic "t") against the
// fake bookies and metadata store of env_test.go. Nothing is carried out on
// its own: every ledger and metadata operation a core asks for waits in one
// queue until the script delivers it, fails it or crashes its owner, as in
// internal/ledger's scripts. Rewrite the golden output with
//
//	go test ./internal/mlog/ -run TestInteraction -rewrite
//
// and read the diff: the output is the test.
//
// Commands (owner= names a would-be owner: a, b, ...; durations as "10m"):
//
//	open owner=a [config]                 a new owner opens the topic (Open)
//	takeover owner=b [config]             the same, with the last owner's config:
//	                                      b loads the record, recovers the last ledger
//	config: rollover-entries=3 rollover-age=4h min-age=10m retention-time=30m
//	        retention-size=100 max-ranges=10000 persist-interval=1s retry=5s max-queued=10
//	        mutant=early-trim (a core bug switched on: broken guarantees print as
//	        VIOLATION lines instead of failing the test)
//	append owner=a [n=1] [stabilize] [quiet]
//	                                      a producer appends m<token>; with stabilize each
//	                                      append is followed by a stabilize of a's work
//	cursor-open owner=a name=sub [from=start|end]
//	ack owner=a cursor=sub pos=6:1 [cumulative]
//	ack-all owner=a cursor=sub [except=(6:1, ...)]
//	                                      acknowledge every entry individually but these
//	ack-random owner=a cursor=sub n=25000 seed=1
//	                                      acknowledge n unacknowledged entries, random order
//	tick [owner=a] [advance=10m]          move the clock, then Tick (every live owner)
//	trim owner=a [advance=10m] [quiet]    move the clock, Tick a and stabilize a's work (a
//	                                      Tick trims), then say what went and why the first
//	                                      ledger of a's list stays
//	deliver [owner=a] [kind=K] [n=1] [fail] [quiet]
//	                                      carry out the matching queued operations (one round,
//	                                      oldest first); fail: answer "failed" unapplied.
//	                                      K: meta ledger get put delete-key (metadata ops), or a
//	                                      ledger op: create append close recover delete read
//	stabilize [owner=a] [quiet]           deliver until nothing (of a's) is queued
//	meta-outage on|off                    the metadata store is down: every metadata op and
//	                                      every ledger op that writes ledger metadata
//	                                      (create, close, recover, delete) fails unavailable
//	crash owner=a                         a's process is gone: its queued ops are lost
//	state owner=a                         a's ledger list, phase, cursors and stats
//	store                                 the metadata store (topic record, cursor pointers)
//	                                      and every ledger ever created on the bookies
//	acks owner=a                          every answer a's producers got
//	redelivery cursor=sub from=a to=b     what b's restored cursor redelivers of what a had
//	                                      acknowledged, and that b acknowledges nothing more
//
// Output: "a -> meta put record v=2 ..." is an operation a's core asks for,
// "meta <- a put record v=2 ...: ok v=3" its delivery and answer; lines
// indented below a delivery are what the core did with the answer: acks to
// producers ("a ack m4 -> 6:0"), events ("a event rolled-over: ...") and new
// operations. With quiet, operations and deliveries are counted, not shown,
// unless they fail, recover (fence) or delete a ledger. Ledger ids are allocated 3, 6, 9, ...
// cluster wide, for the topic's ledgers and cursor ledgers alike.
//
// After every command the harness checks the guarantees (interaction_check_test.go):
// every acknowledged entry is in its ledger, inside the entry count the
// record gives a closed ledger, until trimmed; a ledger is deleted only off
// the record and below every cursor; ledger ids increase; mark-delete
// positions never move back; acks follow append order; and the state
// machines' own checkInvariants (ManagedLedger's, every Cursor's), whose
// panic is reported as a broken guarantee.
func TestInteraction(t *testing.T) {
	datadriven.Walk(t, "testdata", func(t *testing.T, path string) {
		e := newScriptEnv(t)
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			return e.run(t, d)
		})
	})
}

// scriptEnv is one script's world: the fake store and bookies, the owners,
// and the queue of operations they asked for.
type scriptEnv struct {
	fake   *fakeEnv
	start  time.Time
	owners map[string]*scriptOwner
	order  []*scriptOwner
	last   *scriptOwner // the owner opened last: takeover copies its config
	queue  []scriptOp   // asked for and not yet carried out, oldest first
	token  uint64       // the last producer token handed out (m<token>)

	made      map[int64]madeLedger // every ledger created, by id
	madeOrder []int64
	outage    bool

	out    scriptOut
	broken []string // guarantees broken during the command
	// mutated: an owner runs a core mutant (mutant=early-trim). Broken
	// guarantees are then the expected outcome: they print as VIOLATION
	// lines (each once) instead of failing the test, so a script shows the
	// checks catching a broken core.
	mutated  bool
	reported map[string]bool
}

// scriptOwner is one would-be owner: its core and what its producers heard.
type scriptOwner struct {
	name    string
	cfg     Config
	ml      *ManagedLedger
	crashed bool
	sent    []uint64             // tokens in Append order
	acks    map[uint64]AppendAck // answers, by token
	// lastMarkDelete: each cursor's mark-delete after the previous command.
	lastMarkDelete map[string]Position
}

// scriptOp is an operation a core asked for. cursor names the cursor a
// ledger op is for ("" for the topic's own ledgers).
type scriptOp struct {
	owner  *scriptOwner
	ledger *LedgerOp
	meta   *MetaOp
	cursor string
}

// madeLedger says who created a ledger and what for.
type madeLedger struct {
	by     string
	cursor string
}

func newScriptEnv(t *testing.T) *scriptEnv {
	fake := newFakeEnv(t)
	return &scriptEnv{
		fake:     fake,
		start:    fake.now,
		owners:   map[string]*scriptOwner{},
		made:     map[int64]madeLedger{},
		reported: map[string]bool{},
	}
}

// scriptError aborts a command whose script is wrong (not the core).
type scriptError struct{ msg string }

func (e *scriptEnv) scriptFail(format string, args ...any) {
	panic(scriptError{msg: fmt.Sprintf(format, args...)})
}

func (e *scriptEnv) violate(format string, args ...any) {
	e.broken = append(e.broken, fmt.Sprintf(format, args...))
}

func (e *scriptEnv) run(t *testing.T, d *datadriven.TestData) string {
	e.out.reset(d.HasArg("quiet"))
	e.broken = nil
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
	case "open":
		e.cmdOpen(d, false)
	case "takeover":
		e.cmdOpen(d, true)
	case "append":
		e.cmdAppend(d)
	case "cursor-open":
		e.cmdCursorOpen(d)
	case "ack":
		e.cmdAck(d)
	case "ack-all":
		e.cmdAckAll(d)
	case "ack-random":
		e.cmdAckRandom(d)
	case "tick":
		e.cmdTick(d)
	case "trim":
		e.cmdTrim(d)
	case "deliver":
		if e.deliver(e.parseFilter(d), e.argInt(d, "n", 0), d.HasArg("fail")) == 0 {
			e.scriptFail("no queued operation matches")
		}
	case "stabilize":
		e.stabilize(e.parseFilter(d))
	case "meta-outage":
		e.cmdOutage(d)
	case "crash":
		e.cmdCrash(d)
	case "state":
		e.printState(e.mustOwner(d))
	case "store":
		e.printStore()
	case "acks":
		e.printAcks(e.mustOwner(d))
	case "redelivery":
		e.cmdRedelivery(d)
	default:
		e.scriptFail("unknown command")
	}
	e.out.finish()
	e.checkInvariants()
	if len(e.broken) > 0 && e.mutated {
		for _, v := range e.broken {
			if !e.reported[v] {
				e.reported[v] = true
				fmt.Fprintf(&e.out, "VIOLATION: %s\n", v)
			}
		}
	} else if len(e.broken) > 0 {
		t.Errorf("%s: %s: guarantee broken:\n%s\noutput so far:\n%s", d.Pos, d.FullCmd(), strings.Join(e.broken, "\n"), e.out.String())
	}
	if e.out.Len() == 0 {
		return "ok\n"
	}
	return e.out.String()
}

// ---- arguments ----

func (e *scriptEnv) argString(d *datadriven.TestData, key, def string) string {
	a, ok := d.Arg(key)
	if !ok {
		return def
	}
	if len(a.Vals) != 1 {
		e.scriptFail("%s wants one value", key)
	}
	return a.Vals[0]
}

func (e *scriptEnv) argInt(d *datadriven.TestData, key string, def int64) int64 {
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

func (e *scriptEnv) argDuration(d *datadriven.TestData, key string) (time.Duration, bool) {
	s := e.argString(d, key, "")
	if s == "" {
		return 0, false
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		e.scriptFail("%s=%s: %v", key, s, err)
	}
	return v, true
}

func (e *scriptEnv) parsePosition(s string) Position {
	l, en, ok := strings.Cut(s, ":")
	lid, err1 := strconv.ParseInt(l, 10, 64)
	eid, err2 := strconv.ParseInt(en, 10, 64)
	if !ok || err1 != nil || err2 != nil {
		e.scriptFail("position %q: want ledger:entry", s)
	}
	return Position{lid, eid}
}

func (e *scriptEnv) mustOwner(d *datadriven.TestData) *scriptOwner {
	name := e.argString(d, "owner", "")
	o := e.owners[name]
	if o == nil {
		e.scriptFail("unknown owner %q", name)
	}
	return o
}

// liveOwner is mustOwner for commands a crashed process cannot take.
func (e *scriptEnv) liveOwner(d *datadriven.TestData) *scriptOwner {
	o := e.mustOwner(d)
	if o.crashed {
		e.scriptFail("%s crashed", o.name)
	}
	return o
}

// ---- commands ----

func (e *scriptEnv) cmdOpen(d *datadriven.TestData, takeover bool) {
	name := e.argString(d, "owner", "")
	if name == "" || e.owners[name] != nil {
		e.scriptFail("owner %q: want a new name", name)
	}
	cfg := Config{Name: "t", Rollover: RolloverPolicy{MaxEntries: 1 << 40}}
	if takeover {
		if e.last == nil {
			e.scriptFail("takeover: nobody opened the topic yet")
		}
		cfg = e.last.cfg
	}
	cfg.Owner = name
	e.applyConfig(d, &cfg)
	o := &scriptOwner{name: name, cfg: cfg, ml: New(cfg), acks: map[uint64]AppendAck{}, lastMarkDelete: map[string]Position{}}
	e.owners[name] = o
	e.order = append(e.order, o)
	e.last = o
	if takeover {
		e.out.line("%s takes the topic over", name)
	} else {
		e.out.line("%s opens the topic", name)
	}
	o.ml.Open(e.fake.now)
	e.drain(o)
}

func (e *scriptEnv) applyConfig(d *datadriven.TestData, cfg *Config) {
	for _, a := range d.CmdArgs {
		switch a.Key {
		case "owner":
		case "rollover-entries":
			cfg.Rollover.MaxEntries = e.argInt(d, a.Key, 0)
		case "rollover-age":
			cfg.Rollover.MaxAge, _ = e.argDuration(d, a.Key)
		case "min-age":
			cfg.Rollover.MinAge, _ = e.argDuration(d, a.Key)
		case "retention-time":
			cfg.Retention.Time, _ = e.argDuration(d, a.Key)
		case "retention-size":
			cfg.Retention.Size = e.argInt(d, a.Key, 0)
		case "max-ranges":
			cfg.MaxRangesToPersist = int(e.argInt(d, a.Key, 0))
		case "persist-interval":
			cfg.CursorPersistInterval, _ = e.argDuration(d, a.Key)
		case "retry":
			cfg.RetryInterval, _ = e.argDuration(d, a.Key)
		case "max-queued":
			cfg.MaxQueuedAppends = int(e.argInt(d, a.Key, 0))
		case "mutant":
			if v := e.argString(d, a.Key, ""); v != "early-trim" {
				e.scriptFail("mutant=%s: the core has early-trim", v)
			}
			cfg.EarlyTrim, e.mutated = true, true
		default:
			e.scriptFail("unknown config %s", a.Key)
		}
	}
}

func (e *scriptEnv) cmdAppend(d *datadriven.TestData) {
	o := e.liveOwner(d)
	n := e.argInt(d, "n", 1)
	each := d.HasArg("stabilize")
	first := e.token + 1
	for range n {
		e.token++
		tok := e.token
		o.sent = append(o.sent, tok)
		o.ml.Append(tok, []byte(tokenName(tok)), e.fake.now)
		rd := o.ml.Ready()
		if !e.out.quiet {
			e.out.line("%s appends %s", o.name, tokenName(tok))
		}
		if !answersOrSends(rd, tok) {
			st := o.ml.Stats()
			e.out.line("%s: %s waits (queued=%d held=%d, phase %s)", o.name, tokenName(tok), st.QueuedAppends, st.HeldAppends, o.ml.Phase())
		}
		e.handle(o, rd)
		if each {
			e.stabilize(scriptFilter{owner: o})
		}
	}
	if e.out.quiet {
		e.out.line("%s appended %s..%s", o.name, tokenName(first), tokenName(e.token))
	}
}

// answersOrSends reports whether rd acknowledges tok or sends an append
// (which, the core sending appends in order, carries tok).
func answersOrSends(rd Ready, tok uint64) bool {
	for _, a := range rd.Acks {
		if a.Token == tok {
			return true
		}
	}
	for _, op := range rd.LedgerOps {
		if op.Kind == LedgerAppend && string(op.Payload) == tokenName(tok) {
			return true
		}
	}
	return false
}

func tokenName(tok uint64) string { return "m" + strconv.FormatUint(tok, 10) }

func (e *scriptEnv) cmdCursorOpen(d *datadriven.TestData) {
	o := e.liveOwner(d)
	name := e.argString(d, "name", "")
	from := e.argString(d, "from", "start")
	if from != "start" && from != "end" {
		e.scriptFail("from=%s: want start or end", from)
	}
	if err := o.ml.OpenCursor(name, from == "start", e.fake.now); err != nil {
		e.out.line("%s cursor-open %s: %v", o.name, name, err)
		return
	}
	c, _ := o.ml.Cursor(name)
	e.out.line("%s opens cursor %s at md=%s", o.name, name, c.MarkDelete())
	e.drain(o)
}

func (e *scriptEnv) cmdAck(d *datadriven.TestData) {
	o := e.liveOwner(d)
	name := e.argString(d, "cursor", "")
	p := e.parsePosition(e.argString(d, "pos", ""))
	ack, how := o.ml.Ack, "acks"
	if d.HasArg("cumulative") {
		ack, how = o.ml.AckCumulative, "acks through"
	}
	if err := ack(name, p, e.fake.now); err != nil {
		e.out.line("%s %s %s on %s: %v", o.name, how, p, name, err)
		return
	}
	e.out.line("%s %s %s on %s: %s", o.name, how, p, name, e.cursorBrief(o, name))
	e.drain(o)
}

func (e *scriptEnv) cmdAckAll(d *datadriven.TestData) {
	o := e.liveOwner(d)
	name := e.argString(d, "cursor", "")
	c := e.mustCursor(o, name)
	skip := map[Position]bool{}
	var skipped []string
	if a, ok := d.Arg("except"); ok {
		for _, v := range a.Vals {
			skip[e.parsePosition(v)] = true
			skipped = append(skipped, v)
		}
	}
	n := 0
	for _, p := range entriesOf(o.ml.Ledgers()) {
		if skip[p] || c.IsAcked(p) {
			continue
		}
		if err := o.ml.Ack(name, p, e.fake.now); err != nil {
			e.scriptFail("ack %s: %v", p, err)
		}
		n++
	}
	but := ""
	if len(skipped) > 0 {
		but = ", all but " + strings.Join(skipped, " ")
	}
	e.out.line("%s acks %d entries on %s one by one%s: %s", o.name, n, name, but, e.cursorBrief(o, name))
	e.drain(o)
}

func (e *scriptEnv) cmdAckRandom(d *datadriven.TestData) {
	o := e.liveOwner(d)
	name := e.argString(d, "cursor", "")
	c := e.mustCursor(o, name)
	n := int(e.argInt(d, "n", 0))
	seed := uint64(e.argInt(d, "seed", 1))
	var open []Position
	for _, p := range entriesOf(o.ml.Ledgers()) {
		if !c.IsAcked(p) {
			open = append(open, p)
		}
	}
	if n > len(open) {
		e.scriptFail("n=%d: only %d entries unacknowledged", n, len(open))
	}
	rng := newScriptRand(seed)
	rng.Shuffle(len(open), func(i, j int) { open[i], open[j] = open[j], open[i] })
	for _, p := range open[:n] {
		if err := o.ml.Ack(name, p, e.fake.now); err != nil {
			e.scriptFail("ack %s: %v", p, err)
		}
	}
	e.out.line("%s acks %d of %d unacknowledged entries on %s in random order (seed %d): %s",
		o.name, n, len(open), name, seed, e.cursorBrief(o, name))
	e.drain(o)
}

func (e *scriptEnv) mustCursor(o *scriptOwner, name string) *Cursor {
	c, ok := o.ml.Cursor(name)
	if !ok {
		e.scriptFail("%s has no cursor %q", o.name, name)
	}
	return c
}

// cursorBrief is a cursor's mark-delete and range count.
func (e *scriptEnv) cursorBrief(o *scriptOwner, name string) string {
	c, ok := o.ml.Cursor(name)
	if !ok {
		return "no such cursor"
	}
	return fmt.Sprintf("md=%s ranges=%d", c.MarkDelete(), c.Holes())
}

// entriesOf lists every entry of the ledgers, in order.
func entriesOf(ls []LedgerInfo) []Position {
	var out []Position
	for _, l := range ls {
		for en := range l.Entries {
			out = append(out, Position{l.ID, en})
		}
	}
	return out
}

func (e *scriptEnv) cmdTick(d *datadriven.TestData) {
	if adv, ok := e.argDuration(d, "advance"); ok {
		e.fake.advance(adv)
		e.out.line("clock %s", e.clock(e.fake.now))
	}
	var only *scriptOwner
	if d.HasArg("owner") {
		only = e.liveOwner(d)
	}
	for _, o := range e.order {
		if o.crashed || only != nil && o != only {
			continue
		}
		o.ml.Tick(e.fake.now)
		e.drain(o)
	}
}

func (e *scriptEnv) cmdTrim(d *datadriven.TestData) {
	o := e.liveOwner(d)
	if adv, ok := e.argDuration(d, "advance"); ok {
		e.fake.advance(adv)
		e.out.line("clock %s", e.clock(e.fake.now))
	}
	before := ledgerIDs(o.ml.Ledgers())
	o.ml.Tick(e.fake.now)
	e.drain(o)
	e.stabilize(scriptFilter{owner: o})
	after := ledgerIDs(o.ml.Ledgers())
	var gone []string
	for _, id := range before {
		if len(after) == 0 || id < after[0] {
			gone = append(gone, fmt.Sprintf("L%d", id))
		}
	}
	e.out.line("%s trimmed: %s; %s", o.name, orNone(gone), e.whyKept(o))
}

func (e *scriptEnv) cmdOutage(d *datadriven.TestData) {
	switch {
	case d.HasArg("on"):
		e.outage = true
		e.out.line("the metadata store is down")
	case d.HasArg("off"):
		e.outage = false
		e.out.line("the metadata store is back")
	default:
		e.scriptFail("meta-outage on|off")
	}
	e.fake.metaDown, e.fake.metaReadsDown = e.outage, e.outage
}

func ledgerKindByName(s string) (LedgerOpKind, bool) {
	for k := LedgerCreate; int(k) < len(ledgerOpNames); k++ {
		if ledgerOpNames[k] == s {
			return k, true
		}
	}
	return 0, false
}

func (e *scriptEnv) cmdCrash(d *datadriven.TestData) {
	o := e.liveOwner(d)
	o.crashed = true
	var kept []scriptOp
	lost := 0
	for _, op := range e.queue {
		if op.owner == o {
			lost++
			continue
		}
		kept = append(kept, op)
	}
	e.queue = kept
	e.out.line("%s crashed (%d queued operations lost)", o.name, lost)
}

func orNone(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, " ")
}
