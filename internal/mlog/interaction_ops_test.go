package mlog

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"

	"github.com/cockroachdb/datadriven"

	"quire/internal/ledger"
	"quire/internal/meta"
)

// How the interaction scripts carry out what the cores ask for: the queue of
// operations, delivery (with injected failures and the metadata outage), and
// the one-line renderings of operations and answers.

// errInjected is the failure deliver fail injects.
var errInjected = errors.New("injected failure")

// errLedgerMetaDown: a ledger operation that must write the ledger's
// metadata (BookKeeper keeps it in the same store) during an outage.
var errLedgerMetaDown = fmt.Errorf("ledger metadata: %w", meta.ErrUnavailable)

func newScriptRand(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, seed)) }

// drain takes o's Ready and handles it.
func (e *scriptEnv) drain(o *scriptOwner) { e.handle(o, o.ml.Ready()) }

// handle records and prints a Ready: acks to producers, events, and the
// operations, which join the queue.
func (e *scriptEnv) handle(o *scriptOwner, rd Ready) {
	e.out.depth++
	defer func() { e.out.depth-- }()
	for _, a := range rd.Acks {
		if _, dup := o.acks[a.Token]; dup {
			e.violate("%s: %s answered twice", o.name, tokenName(a.Token))
		}
		o.acks[a.Token] = a
		e.out.ack(o.name, a)
	}
	for _, ev := range rd.Events {
		e.out.line("%s event %s", o.name, fmtEvent(ev))
	}
	for _, op := range rd.LedgerOps {
		// The core's pending op names the cursor a ledger op is for; the
		// op itself does not say.
		sop := scriptOp{owner: o, ledger: &op, cursor: o.ml.ledgerOps[op.ID].cursor}
		e.queue = append(e.queue, sop)
		e.out.op("%s -> bk %s", o.name, e.fmtLedgerOp(sop))
	}
	for _, op := range rd.MetaOps {
		sop := scriptOp{owner: o, meta: &op}
		e.queue = append(e.queue, sop)
		e.out.op("%s -> meta %s", o.name, fmtMetaOp(op, true))
	}
}

// scriptFilter selects queued operations.
type scriptFilter struct {
	owner *scriptOwner
	kind  string
}

func (e *scriptEnv) parseFilter(d *datadriven.TestData) scriptFilter {
	var f scriptFilter
	if d.HasArg("owner") {
		f.owner = e.mustOwner(d)
	}
	f.kind = e.argString(d, "kind", "")
	switch f.kind {
	case "", "meta", "ledger", "get", "put", "delete-key":
	default:
		if _, ok := ledgerKindByName(f.kind); !ok {
			e.scriptFail("kind=%s: unknown", f.kind)
		}
	}
	return f
}

func (f scriptFilter) match(op scriptOp) bool {
	if f.owner != nil && op.owner != f.owner {
		return false
	}
	switch f.kind {
	case "":
		return true
	case "meta":
		return op.meta != nil
	case "ledger":
		return op.ledger != nil
	case "get":
		return op.meta != nil && op.meta.Kind == MetaGet
	case "put":
		return op.meta != nil && (op.meta.Kind == MetaPut || op.meta.Kind == MetaCreate)
	case "delete-key":
		return op.meta != nil && op.meta.Kind == MetaDelete
	}
	return op.ledger != nil && op.ledger.Kind.String() == f.kind
}

// deliver carries out the matching queued operations (at most limit when
// limit > 0), oldest first, and returns how many. Operations they cause
// wait for the next command.
func (e *scriptEnv) deliver(f scriptFilter, limit int64, fail bool) int {
	var batch, rest []scriptOp
	for _, op := range e.queue {
		if f.match(op) && (limit <= 0 || int64(len(batch)) < limit) {
			batch = append(batch, op)
		} else {
			rest = append(rest, op)
		}
	}
	e.queue = rest
	for _, op := range batch {
		e.deliverOne(op, fail)
	}
	return len(batch)
}

// stabilize delivers until no matching operation is queued.
func (e *scriptEnv) stabilize(f scriptFilter) {
	for round := 0; e.deliver(f, 0, false) > 0; round++ {
		if round > 10_000 {
			e.scriptFail("not quiet after 10000 rounds")
		}
	}
}

func (e *scriptEnv) deliverOne(op scriptOp, fail bool) {
	o := op.owner
	if op.meta != nil {
		var res MetaResult
		switch {
		case fail:
			res = MetaResult{ID: op.meta.ID, Err: fmt.Errorf("%w: %w", errInjected, meta.ErrUnavailable)}
		default:
			res = e.fake.doMeta(*op.meta)
		}
		line := fmt.Sprintf("meta <- %s %s: %s", o.name, fmtMetaOp(*op.meta, false), e.fmtMetaResult(*op.meta, res))
		if res.Err != nil {
			e.out.line("%s", line)
		} else {
			e.out.op("%s", line)
		}
		o.ml.StepMeta(res, e.fake.now)
		e.drain(o)
		return
	}
	l := *op.ledger
	var res LedgerResult
	switch {
	case fail:
		res = LedgerResult{ID: l.ID, Err: errInjected}
	case e.outage && l.Kind != LedgerAppend && l.Kind != LedgerRead:
		res = LedgerResult{ID: l.ID, Err: errLedgerMetaDown}
	default:
		if l.Kind == LedgerDelete {
			e.checkDelete(op)
		}
		res = e.fake.doLedger(l)
		if l.Kind == LedgerCreate && res.Err == nil {
			e.made[res.Ledger] = madeLedger{by: o.name, cursor: op.cursor}
			e.madeOrder = append(e.madeOrder, res.Ledger)
		}
	}
	line := fmt.Sprintf("bk <- %s %s: %s", o.name, e.fmtLedgerOp(op), fmtLedgerResult(l, res))
	if res.Err != nil || l.Kind == LedgerDelete || l.Kind == LedgerRecover {
		e.out.line("%s", line)
	} else {
		e.out.op("%s", line)
	}
	o.ml.StepLedger(res, e.fake.now)
	e.drain(o)
}

// ---- rendering ----

func (e *scriptEnv) fmtLedgerOp(op scriptOp) string {
	l := op.ledger
	var s string
	switch l.Kind {
	case LedgerCreate:
		s = "create"
	case LedgerAppend:
		s = fmt.Sprintf("append L%d", l.Ledger)
		if op.cursor == "" {
			s += " " + string(l.Payload)
		} else {
			s += fmt.Sprintf(" snapshot(%s)", fmtSnapshot(l.Payload))
		}
	case LedgerRead:
		s = fmt.Sprintf("read L%d e%d", l.Ledger, l.Entry)
	default:
		s = fmt.Sprintf("%s L%d", l.Kind, l.Ledger)
	}
	if op.cursor != "" {
		s += " (cursor " + op.cursor + ")"
	}
	return s
}

// fmtSnapshot summarizes a cursor snapshot: its mark-delete and ranges.
func fmtSnapshot(b []byte) string {
	c, err := Restore(b, CursorOptions{})
	if err != nil {
		return err.Error()
	}
	return fmt.Sprintf("md=%s ranges=%d", c.MarkDelete(), c.Holes())
}

func fmtLedgerResult(op LedgerOp, res LedgerResult) string {
	if res.Err != nil {
		return errName(res.Err)
	}
	switch op.Kind {
	case LedgerCreate:
		return fmt.Sprintf("ok L%d", res.Ledger)
	case LedgerAppend:
		return fmt.Sprintf("ok e%d", res.EntryID)
	case LedgerRecover:
		return fmt.Sprintf("fenced and closed, entries=%d", res.Entries)
	case LedgerClose:
		return fmt.Sprintf("closed, entries=%d", res.Entries)
	case LedgerRead:
		return fmt.Sprintf("snapshot(%s)", fmtSnapshot(res.Payload))
	}
	return "ok"
}

// keyName renders a metadata key: the topic record or a cursor's pointer.
func keyName(key string) string {
	if key == Key("t") {
		return "record"
	}
	if name, ok := strings.CutPrefix(key, CursorKey("t", "")); ok {
		return "cursor " + name
	}
	return key
}

// fmtMetaOp renders a metadata operation; full adds the value written.
func fmtMetaOp(op MetaOp, full bool) string {
	var s string
	switch op.Kind {
	case MetaGet:
		return "get " + keyName(op.Key)
	case MetaCreate:
		s = "create " + keyName(op.Key)
	case MetaPut:
		s = fmt.Sprintf("put %s v=%d", keyName(op.Key), op.Version)
	case MetaDelete:
		return fmt.Sprintf("delete %s v=%d", keyName(op.Key), op.Version)
	}
	if full {
		s += " " + fmtValue(op.Key, op.Value)
	}
	return s
}

// fmtValue renders a stored value: a topic record or a cursor pointer.
func fmtValue(key string, value []byte) string {
	if key == Key("t") {
		rec, err := unmarshalRecord(value)
		if err != nil {
			return err.Error()
		}
		return fmtRecordValue(rec)
	}
	if p, ok := DecodeCursorPointer(value); ok {
		at := fmt.Sprintf("e%d", p.Entry)
		if p.Entry < 0 {
			at = "(no snapshot yet)"
		}
		return fmt.Sprintf("-> L%d %s md=%s epoch=%d", p.Ledger, at, p.MarkDelete, p.Epoch)
	}
	return fmt.Sprintf("(%d bytes)", len(value))
}

func fmtRecordValue(rec Record) string {
	s := make([]string, len(rec.Ledgers))
	for i, l := range rec.Ledgers {
		if l.Closed.IsZero() {
			s[i] = fmt.Sprintf("L%d open", l.ID)
		} else {
			s[i] = fmt.Sprintf("L%d closed n=%d", l.ID, l.Entries)
		}
	}
	out := "[" + strings.Join(s, ", ") + "]"
	if len(rec.Cursors) > 0 {
		out += " cursors=(" + strings.Join(rec.Cursors, ",") + ")"
	}
	return out + " owner=" + rec.Owner
}

func (e *scriptEnv) fmtMetaResult(op MetaOp, res MetaResult) string {
	switch {
	case res.Err == nil && op.Kind == MetaGet:
		return fmt.Sprintf("v=%d %s", res.Version, fmtValue(op.Key, res.Value))
	case res.Err == nil && op.Kind == MetaDelete:
		return "ok"
	case res.Err == nil:
		return fmt.Sprintf("ok v=%d", res.Version)
	case errors.Is(res.Err, meta.ErrBadVersion):
		return fmt.Sprintf("bad version (at v=%d)", e.fake.store[op.Key].version)
	}
	return errName(res.Err)
}

// errName is an error's short name in acks and answers.
func errName(err error) string {
	switch {
	case errors.Is(err, errInjected):
		return "failed (injected)"
	case errors.Is(err, errLedgerMetaDown):
		return "unavailable (ledger metadata)"
	case errors.Is(err, ErrFenced), errors.Is(err, ledger.ErrFenced):
		return "fenced"
	case errors.Is(err, meta.ErrUnavailable):
		return "unavailable"
	case errors.Is(err, meta.ErrNotFound):
		return "not found"
	case errors.Is(err, meta.ErrExists):
		return "exists"
	case errors.Is(err, ErrTooManyQueued):
		return "too many queued"
	case errors.Is(err, ErrClosed):
		return "closed"
	}
	return err.Error()
}

var eventNames = map[EventKind]string{
	EventOpened:             "opened",
	EventClosed:             "closed",
	EventFenced:             "fenced",
	EventFailed:             "failed",
	EventRolledOver:         "rolled-over",
	EventRolloverFailed:     "rollover-failed",
	EventAckRangesOverLimit: "ack-ranges-over-limit",
	EventTrimmed:            "trimmed",
	EventTTLExpired:         "ttl-expired",
	EventBacklogEvicted:     "backlog-evicted",
	EventDeleteAbandoned:    "delete-abandoned",
	EventCompacted:          "compacted",
}

func fmtEvent(ev Event) string {
	name, ok := eventNames[ev.Kind]
	if !ok {
		name = fmt.Sprintf("kind-%d", ev.Kind)
	}
	var parts []string
	if ev.Cursor != "" {
		parts = append(parts, "cursor "+ev.Cursor)
	}
	if ev.Detail != "" {
		parts = append(parts, ev.Detail)
	}
	if ev.Err != nil {
		parts = append(parts, ev.Err.Error())
	}
	if len(parts) == 0 {
		return name
	}
	return name + ": " + strings.Join(parts, "; ")
}

// ---- output ----

// scriptOut collects a command's output. Operations and their deliveries
// print with op (counted, not shown, under quiet); everything else with
// line. Consecutive acks of one owner merge into one line
// ("a ack m1..m3 -> 3:0..3:2") when nothing else printed between them.
type scriptOut struct {
	strings.Builder
	depth  int
	quiet  bool
	hidden int
	run    *ackRun
}

type ackRun struct {
	owner    string
	depth    int
	first    uint64
	last     uint64
	from, to Position
	err      string
	hasErr   bool
}

func (w *scriptOut) reset(quiet bool) {
	w.Reset()
	w.depth, w.quiet, w.hidden, w.run = 0, quiet, 0, nil
}

func (w *scriptOut) write(format string, args ...any) {
	w.flushRun()
	if !w.quiet {
		w.WriteString(strings.Repeat("  ", w.depth))
	}
	fmt.Fprintf(w, format, args...)
	w.WriteByte('\n')
}

// line prints a line that shows under quiet too.
func (w *scriptOut) line(format string, args ...any) { w.write(format, args...) }

// op prints an operation or a delivery, hidden under quiet.
func (w *scriptOut) op(format string, args ...any) {
	if w.quiet {
		w.hidden++
		return
	}
	w.write(format, args...)
}

func (w *scriptOut) ack(owner string, a AppendAck) {
	r := w.run
	if a.Err != nil {
		name := errName(a.Err)
		if r != nil && r.owner == owner && r.depth == w.depth && r.hasErr && r.err == name && a.Token == r.last+1 {
			r.last = a.Token
			return
		}
		w.flushRun()
		w.run = &ackRun{owner: owner, depth: w.depth, first: a.Token, last: a.Token, err: name, hasErr: true}
		return
	}
	if r != nil && r.owner == owner && r.depth == w.depth && !r.hasErr && a.Token == r.last+1 &&
		a.Pos.LedgerID == r.to.LedgerID && a.Pos.EntryID == r.to.EntryID+1 {
		r.last, r.to = a.Token, a.Pos
		return
	}
	w.flushRun()
	w.run = &ackRun{owner: owner, depth: w.depth, first: a.Token, last: a.Token, from: a.Pos, to: a.Pos}
}

func (w *scriptOut) flushRun() {
	r := w.run
	if r == nil {
		return
	}
	w.run = nil
	toks := tokenName(r.first)
	if r.last != r.first {
		toks += ".." + tokenName(r.last)
	}
	var s string
	switch {
	case r.hasErr:
		s = fmt.Sprintf("%s ack %s err=%s", r.owner, toks, r.err)
	case r.last == r.first:
		s = fmt.Sprintf("%s ack %s -> %s", r.owner, toks, r.from)
	default:
		s = fmt.Sprintf("%s ack %s -> %s..%s", r.owner, toks, r.from, r.to)
	}
	if !w.quiet {
		w.WriteString(strings.Repeat("  ", r.depth))
	}
	w.WriteString(s)
	w.WriteByte('\n')
}

// finish ends a command's output.
func (w *scriptOut) finish() {
	w.flushRun()
	if w.hidden > 0 {
		plural := "s"
		if w.hidden == 1 {
			plural = ""
		}
		fmt.Fprintf(w, "(%d operation%s not shown)\n", w.hidden, plural)
	}
}
