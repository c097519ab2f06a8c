package mlog

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"quire/internal/ledger"
	"quire/internal/meta"
)

// fakeEnv carries out a Topic's Ready synchronously: an in-memory metadata
// store with CAS, and ledgers that fence like real ones. Several topics (two
// would-be owners) may share one env.
type fakeEnv struct {
	t          *testing.T
	store      map[string]fakeKV
	ledgers    map[int64]*fakeLedger
	nextLedger int64
	// metaDown makes every metadata write fail with ErrUnavailable (reads
	// too when metaReadsDown).
	metaDown      bool
	metaReadsDown bool
	now           time.Time
	ledgerOps     []LedgerOp
	// checkDelete, when set, sees every ledger delete before it happens.
	checkDelete func(o *owner, ledger int64)
	// cursorLedgers: ledgers a cursor pointer named (cursor ledgers, as
	// opposed to the topic's).
	cursorLedgers map[int64]bool
}

// noteCursorPointer remembers the cursor ledger a cursor record names.
func (e *fakeEnv) noteCursorPointer(key string, value []byte) {
	if !strings.Contains(key, "/cursors/") {
		return
	}
	if ptr, ok := DecodeCursorPointer(value); ok {
		if e.cursorLedgers == nil {
			e.cursorLedgers = map[int64]bool{}
		}
		e.cursorLedgers[ptr.Ledger] = true
	}
}

// topicLedgerCount counts the stored ledgers that are not cursor ledgers.
func (e *fakeEnv) topicLedgerCount() int {
	n := 0
	for id := range e.ledgers {
		if !e.cursorLedgers[id] {
			n++
		}
	}
	return n
}

type fakeKV struct {
	value   []byte
	version meta.Version
}

type fakeLedger struct {
	entries [][]byte
	closed  bool
	fenced  bool
}

func newFakeEnv(t *testing.T) *fakeEnv {
	return &fakeEnv{t: t, store: map[string]fakeKV{}, ledgers: map[int64]*fakeLedger{},
		now: time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)}
}

func (e *fakeEnv) advance(d time.Duration) { e.now = e.now.Add(d) }

// owner is one would-be owner: a Topic plus what its Ready delivered.
type owner struct {
	e      *fakeEnv
	tp     *ManagedLedger
	acks   map[uint64]AppendAck
	events []Event
	token  uint64
	// compactions: answers to RegisterCompaction / EndCompaction by token.
	compactions map[uint64]CompactionDone
}

func (e *fakeEnv) newOwner(cfg Config) *owner {
	if cfg.Name == "" {
		cfg.Name = "t"
	}
	return &owner{e: e, tp: New(cfg), acks: map[uint64]AppendAck{}, compactions: map[uint64]CompactionDone{}}
}

// open starts the takeover and runs it to the end.
func (o *owner) open() {
	o.tp.Open(o.e.now)
	o.drive()
}

// drive carries out Ready until the topic asks for nothing more.
func (o *owner) drive() {
	for range 10_000 {
		rd := o.tp.Ready()
		if rd.Empty() {
			return
		}
		o.apply(rd)
	}
	o.e.t.Fatal("topic never settles")
}

func (o *owner) apply(rd Ready) {
	for _, a := range rd.Acks {
		o.acks[a.Token] = a
	}
	o.events = append(o.events, rd.Events...)
	for _, c := range rd.Compactions {
		o.compactions[c.Token] = c
	}
	for _, op := range rd.MetaOps {
		o.tp.StepMeta(o.e.doMeta(op), o.e.now)
	}
	for _, op := range rd.LedgerOps {
		if op.Kind == LedgerDelete && o.e.checkDelete != nil {
			o.e.checkDelete(o, op.Ledger)
		}
		o.tp.StepLedger(o.e.doLedger(op), o.e.now)
	}
}

// append appends n entries and returns their tokens.
func (o *owner) append(n int, size int) []uint64 {
	var tokens []uint64
	for range n {
		o.token++
		o.tp.Append(o.token, make([]byte, size), o.e.now)
		tokens = append(tokens, o.token)
		o.drive()
	}
	return tokens
}

func (o *owner) tick() {
	o.tp.Tick(o.e.now)
	o.drive()
}

func (o *owner) ack(token uint64) AppendAck {
	o.e.t.Helper()
	a, ok := o.acks[token]
	if !ok {
		o.e.t.Fatalf("append %d not answered", token)
	}
	return a
}

func (o *owner) countEvents(kind EventKind) int {
	n := 0
	for _, ev := range o.events {
		if ev.Kind == kind {
			n++
		}
	}
	return n
}

func (e *fakeEnv) doMeta(op MetaOp) MetaResult {
	res := MetaResult{ID: op.ID}
	if e.metaDown && (op.Kind != MetaGet || e.metaReadsDown) {
		res.Err = meta.ErrUnavailable
		return res
	}
	kv, exists := e.store[op.Key]
	switch op.Kind {
	case MetaGet:
		if !exists {
			res.Err = meta.ErrNotFound
			return res
		}
		res.Value, res.Version = kv.value, kv.version
	case MetaCreate:
		if exists {
			res.Err = meta.ErrExists
			return res
		}
		e.store[op.Key] = fakeKV{op.Value, 1}
		e.noteCursorPointer(op.Key, op.Value)
		res.Version = 1
	case MetaPut:
		if !exists {
			res.Err = meta.ErrNotFound
			return res
		}
		if kv.version != op.Version {
			res.Err = meta.ErrBadVersion
			return res
		}
		e.store[op.Key] = fakeKV{op.Value, kv.version + 1}
		e.noteCursorPointer(op.Key, op.Value)
		res.Version = kv.version + 1
	case MetaDelete:
		if !exists || kv.version != op.Version {
			res.Err = meta.ErrBadVersion
			return res
		}
		delete(e.store, op.Key)
	}
	return res
}

func (e *fakeEnv) doLedger(op LedgerOp) LedgerResult {
	e.ledgerOps = append(e.ledgerOps, op)
	res := LedgerResult{ID: op.ID}
	l := e.ledgers[op.Ledger]
	if op.Kind != LedgerCreate && l == nil {
		res.Err = fmt.Errorf("no ledger %d", op.Ledger)
		return res
	}
	switch op.Kind {
	case LedgerCreate:
		e.nextLedger += 3 // ids are cluster wide, not contiguous
		e.ledgers[e.nextLedger] = &fakeLedger{}
		res.Ledger = e.nextLedger
	case LedgerAppend:
		if l.fenced || l.closed {
			res.Err = ledger.ErrFenced
			return res
		}
		l.entries = append(l.entries, op.Payload)
		res.EntryID = int64(len(l.entries) - 1)
	case LedgerRecover:
		l.fenced, l.closed = true, true
		res.Entries, res.Size = l.stats()
	case LedgerClose:
		if l.fenced {
			res.Err = ledger.ErrFenced
			return res
		}
		l.closed = true
		res.Entries, res.Size = l.stats()
	case LedgerDelete:
		delete(e.ledgers, op.Ledger)
	case LedgerRead:
		if op.Entry < 0 || op.Entry >= int64(len(l.entries)) {
			res.Err = fmt.Errorf("ledger %d: no entry %d", op.Ledger, op.Entry)
			return res
		}
		res.Payload = l.entries[op.Entry]
	}
	return res
}

func (l *fakeLedger) stats() (entries, size int64) {
	for _, p := range l.entries {
		size += int64(len(p))
	}
	return int64(len(l.entries)), size
}

func (e *fakeEnv) record(name string) Record {
	e.t.Helper()
	kv, ok := e.store[Key(name)]
	if !ok {
		e.t.Fatalf("no record for %s", name)
	}
	rec, err := unmarshalRecord(kv.value)
	if err != nil {
		e.t.Fatal(err)
	}
	return rec
}

func ledgerIDs(infos []LedgerInfo) []int64 {
	var ids []int64
	for _, l := range infos {
		ids = append(ids, l.ID)
	}
	return ids
}
