package sim

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"quire/internal/ledger"
	"quire/internal/meta"
	"quire/internal/mlog"
)

// topicOwner is one broker process instance owning (or trying to own) the
// topic: a real mlog.ManagedLedger whose Ready the simulator carries out. A crashed
// instance is discarded with everything in flight to it; a paused one
// queues its inputs and runs them when it wakes (the zombie).
type topicOwner struct {
	s            *topicSim
	gen          int
	broker, name string
	tp           *mlog.ManagedLedger
	alive        bool
	paused       bool
	backlog      []func()
	done         bool
	// loaded: the cursor records this instance read while opening (nil
	// value: not found), for checker 2.
	loaded map[string][]byte
	// cursorLedgers: the cursor ledgers named by the cursor pointers this
	// instance read while opening, by ledger id.
	cursorLedgers map[int64]string
	// compacting: its compactor is at work; compactWaiters: compaction
	// answers it waits for, by token.
	compacting     bool
	compactWaiters map[uint64]func(error)
}

// input runs fn on the owner (or queues it while paused) and carries out
// what it asks for.
func (o *topicOwner) input(fn func()) {
	if !o.alive {
		return
	}
	if o.paused {
		o.backlog = append(o.backlog, fn)
		return
	}
	fn()
	o.drain()
}

func (o *topicOwner) resume() {
	if !o.alive {
		return
	}
	o.s.e.tracef(o.name, "RESUME with %d queued inputs", len(o.backlog))
	o.paused = false
	b := o.backlog
	o.backlog = nil
	for _, fn := range b {
		if !o.alive {
			return
		}
		fn()
		o.drain()
	}
}

func (o *topicOwner) kill() {
	o.alive, o.paused, o.backlog = false, false, nil
}

func (o *topicOwner) tickLoop() {
	if !o.alive || o.done {
		return
	}
	if !o.paused {
		o.input(func() { o.tp.Tick(o.s.now()) })
	}
	o.s.e.after(o.s.sc.tickEvery, o.tickLoop)
}

// drain carries out the topic's Ready until it asks for nothing more.
func (o *topicOwner) drain() {
	s := o.s
	for o.alive {
		rd := o.tp.Ready()
		if rd.Empty() {
			return
		}
		for _, a := range rd.Acks {
			s.e.after(s.e.between(s.sc.metaMin, s.sc.metaMax), func() {
				if o.alive { // a crashed broker's acks in flight are lost
					s.onAppendAck(o, a)
				}
			})
		}
		for _, op := range rd.LedgerOps {
			s.ledgers.submit(o, op)
		}
		for _, op := range rd.MetaOps {
			s.metaStore.submit(o, op)
		}
		for _, ev := range rd.Events {
			o.onEvent(ev)
		}
		for _, d := range rd.Compactions {
			o.onCompactionDone(d)
		}
	}
}

func (o *topicOwner) onEvent(ev mlog.Event) {
	s := o.s
	switch ev.Kind {
	case mlog.EventOpened:
		s.e.tracef(o.name, "OPENED: %s ledgers=%v", ev.Detail, describeInfos(o.tp.Ledgers()))
		s.onOpened(o)
	case mlog.EventFenced, mlog.EventFailed:
		o.done = true
		if ev.Kind == mlog.EventFenced {
			s.stats.FencedOwners++
		}
		s.e.tracef(o.name, "STOPPED: %v", ev.Err)
		if o == s.latest {
			// The topic has no owner: another broker picks it up.
			s.e.after(s.e.between(50*time.Millisecond, 300*time.Millisecond), func() {
				if o == s.latest {
					s.startOwner()
				}
			})
		}
	case mlog.EventRolledOver:
		s.stats.Rollovers++
		s.e.tracef(o.name, "rolled over: %s", ev.Detail)
	case mlog.EventTrimmed:
		s.e.tracef(o.name, "trimmed %s", ev.Detail)
	case mlog.EventTTLExpired:
		s.stats.TTLExpirations++
		s.e.tracef(o.name, "TTL expired on %s %s", ev.Cursor, ev.Detail)
	case mlog.EventAckRangesOverLimit:
		s.stats.OverLimit++
		s.e.tracef(o.name, "cursor %s over the range limit: %s", ev.Cursor, ev.Detail)
	default:
		s.e.tracef(o.name, "%v", ev)
	}
}

func describeInfos(infos []mlog.LedgerInfo) string {
	out := "["
	for i, l := range infos {
		if i > 0 {
			out += " "
		}
		out += fmt.Sprintf("L%d:%d", l.ID, l.Entries)
		if !l.Closed.IsZero() {
			out += "c"
		}
	}
	return out + "]"
}

// --- ledger service model ---

var errBookieWrite = errors.New("sim: not enough bookies acknowledged the add")

// ledgerModel is the ledger service the topic core relies on: ledgers of
// entries written in order; an add is stored on arrival and acknowledged
// after a (journal) delay; recover-and-close fences the ledger and keeps a
// random prefix of the stored but unacknowledged tail; a failed add breaks
// the writer's handle (every later add to that ledger fails too).
type ledgerModel struct {
	s      *topicSim
	next   int64
	byID   map[int64]*modelLedger
	tail   map[string]time.Duration // FIFO per link
	ackTip map[int64]time.Duration  // acks of one ledger in entry order
}

type modelLedger struct {
	id                           int64
	creator                      string
	entries                      []modelEntry
	fenced, closed, broken, gone bool
	listed                       bool // has been on the topic record's list
}

type modelEntry struct {
	payload []byte
	acked   bool
	written time.Duration // when the ledger service stored it
}

func newLedgerModel(s *topicSim) *ledgerModel {
	return &ledgerModel{s: s, next: 100, byID: map[int64]*modelLedger{}, tail: map[string]time.Duration{}, ackTip: map[int64]time.Duration{}}
}

func (m *ledgerModel) fifo(link string) time.Duration {
	at := m.s.e.now + m.s.e.between(m.s.sc.ledgerMin, m.s.sc.ledgerMax)
	if t := m.tail[link]; at < t {
		at = t
	}
	m.tail[link] = at
	return at
}

func (m *ledgerModel) submit(o *topicOwner, op mlog.LedgerOp) {
	s := m.s
	s.e.at(m.fifo(o.name+">L"), func() {
		reply := func(res mlog.LedgerResult) {
			s.e.at(m.fifo("L>"+o.name), func() { o.input(func() { o.tp.StepLedger(res, s.now()) }) })
		}
		m.apply(o, op, reply)
	})
}

func (m *ledgerModel) apply(o *topicOwner, op mlog.LedgerOp, reply func(mlog.LedgerResult)) {
	s := m.s
	res := mlog.LedgerResult{ID: op.ID}
	l := m.byID[op.Ledger]
	if op.Kind != mlog.LedgerCreate && (l == nil || l.gone) {
		res.Err = fmt.Errorf("sim: no ledger %d", op.Ledger)
		s.e.tracef("ledgers", "%s L%d from %s: no such ledger", op.Kind, op.Ledger, o.name)
		reply(res)
		return
	}
	switch op.Kind {
	case mlog.LedgerCreate:
		m.next += int64(s.e.intn(1, 3))
		l = &modelLedger{id: m.next, creator: o.name}
		m.byID[l.id] = l
		res.Ledger = l.id
		s.e.tracef("ledgers", "created L%d for %s", l.id, o.name)
	case mlog.LedgerAppend:
		m.append(o, l, op, reply)
		return
	case mlog.LedgerRecover:
		if !l.closed {
			firstUnacked := len(l.entries)
			for i, en := range l.entries {
				if !en.acked {
					firstUnacked = i
					break
				}
			}
			keep := s.e.intn(firstUnacked, len(l.entries))
			for i := firstUnacked; i < keep; i++ {
				l.entries[i].acked = true
			}
			s.stats.RecoveredUnacked += keep - firstUnacked
			s.e.tracef("ledgers", "RECOVER L%d for %s: fenced, %d acked + %d of %d unacked kept", l.id, o.name, firstUnacked, keep-firstUnacked, len(l.entries)-firstUnacked)
			l.entries = l.entries[:keep]
		} else {
			s.e.tracef("ledgers", "RECOVER L%d for %s: already closed at %d entries", l.id, o.name, len(l.entries))
		}
		l.fenced, l.closed = true, true
		res.Entries, res.Size = l.stats()
	case mlog.LedgerClose:
		if l.fenced {
			res.Err = ledger.ErrFenced
			break
		}
		l.closed = true
		res.Entries, res.Size = l.stats()
		s.e.tracef("ledgers", "closed L%d for %s at %d entries", l.id, o.name, res.Entries)
	case mlog.LedgerDelete:
		s.e.tracef("ledgers", "DELETE L%d for %s (%d entries)", l.id, o.name, len(l.entries))
		s.checkDelete(o, l)
		l.gone = true
	case mlog.LedgerRead:
		if op.Entry < 0 || op.Entry >= int64(len(l.entries)) {
			res.Err = fmt.Errorf("sim: L%d has no entry %d", l.id, op.Entry)
			break
		}
		res.Payload = l.entries[op.Entry].payload
		if cursor, ok := o.cursorLedgers[l.id]; ok {
			if o.loaded == nil {
				o.loaded = map[string][]byte{}
			}
			o.loaded[cursor] = res.Payload
		}
		s.e.tracef("ledgers", "read L%d:%d for %s", l.id, op.Entry, o.name)
	}
	reply(res)
}

func (m *ledgerModel) append(o *topicOwner, l *modelLedger, op mlog.LedgerOp, reply func(mlog.LedgerResult)) {
	s := m.s
	res := mlog.LedgerResult{ID: op.ID}
	switch {
	case l.fenced || l.closed:
		if l.fenced {
			s.stats.ZombieWritesRejected++
		}
		res.Err = ledger.ErrFenced
	case l.broken:
		res.Err = errBookieWrite
	case l.creator != o.name:
		res.Err = fmt.Errorf("sim: %s appends to L%d, which %s created", o.name, l.id, l.creator)
		s.violate(kindTopicTwoWriters, "%v", res.Err)
	case s.e.chance(s.sc.appendFailProb):
		l.broken = true
		res.Err = errBookieWrite
		s.e.tracef("ledgers", "append to L%d from %s FAILED (bookies)", l.id, o.name)
	}
	if res.Err != nil {
		reply(res)
		return
	}
	if o.gen < s.openedGen {
		s.violate(kindTopicTwoWriters, "%s (generation %d) wrote L%d:%d after generation %d had opened the topic", o.name, o.gen, l.id, len(l.entries), s.openedGen)
	}
	l.entries = append(l.entries, modelEntry{payload: op.Payload, written: s.e.now})
	idx := len(l.entries) - 1
	s.noteWritten(op.Payload, mlog.Position{LedgerID: l.id, EntryID: int64(idx)})
	at := s.e.now + s.e.between(s.sc.ledgerMin, s.sc.ledgerMax)
	if t := m.ackTip[l.id]; at < t {
		at = t
	}
	m.ackTip[l.id] = at
	s.e.at(at, func() {
		if idx >= len(l.entries) { // dropped by a recovery: never acknowledged
			res.Err = ledger.ErrFenced
		} else {
			l.entries[idx].acked = true
			res.EntryID = int64(idx)
		}
		reply(res)
	})
}

func (l *modelLedger) stats() (entries, size int64) {
	for _, en := range l.entries {
		size += int64(len(en.payload))
	}
	return int64(len(l.entries)), size
}

// entry returns what the ledger service holds at p.
func (m *ledgerModel) entry(p mlog.Position) ([]byte, bool) {
	l := m.byID[p.LedgerID]
	if l == nil || l.gone || p.EntryID < 0 || p.EntryID >= int64(len(l.entries)) {
		return nil, false
	}
	return l.entries[p.EntryID].payload, true
}

// --- metadata store ---

// topicMeta carries out the cores' MetaOps on meta.MemServer: each applied
// after a random delay and answered after another, in order per owner.
// Outages come from the server's fault hook; a write may apply and still
// report ErrUnavailable (the answer was lost).
type topicMeta struct {
	s       *topicSim
	server  *meta.MemServer
	client  *meta.MemClient
	tail    map[string]time.Duration
	outages []window
	bypass  bool
}

func newTopicMeta(s *topicSim) *topicMeta {
	m := &topicMeta{s: s, server: meta.NewMemServer(meta.MemConfig{Clock: s.clock}), tail: map[string]time.Duration{}}
	m.client = m.server.NewClient()
	m.server.SetFault(func(meta.Op, string) error {
		if m.bypass {
			return nil
		}
		for _, w := range m.outages {
			if s.e.now >= w.from && s.e.now < w.until {
				return fmt.Errorf("sim outage: %w", meta.ErrUnavailable)
			}
		}
		return nil
	})
	return m
}

func (m *topicMeta) fifo(link string) time.Duration {
	at := m.s.e.now + m.s.e.between(m.s.sc.metaMin, m.s.sc.metaMax)
	if t := m.tail[link]; at < t {
		at = t
	}
	m.tail[link] = at
	return at
}

func (m *topicMeta) submit(o *topicOwner, op mlog.MetaOp) {
	s := m.s
	s.e.at(m.fifo(o.name+">M"), func() {
		res := m.apply(o, op)
		s.e.at(m.fifo("M>"+o.name), func() { o.input(func() { o.tp.StepMeta(res, s.now()) }) })
	})
}

var metaKindNames = map[mlog.MetaOpKind]string{mlog.MetaGet: "get", mlog.MetaCreate: "create", mlog.MetaPut: "put", mlog.MetaDelete: "delete"}

func (m *topicMeta) apply(o *topicOwner, op mlog.MetaOp) mlog.MetaResult {
	s, ctx := m.s, context.Background()
	res := mlog.MetaResult{ID: op.ID}
	isRecord := op.Key == mlog.Key(topicName)
	var prev mlog.Record
	if isRecord && op.Kind != mlog.MetaGet {
		prev, _ = m.record()
		if op.Kind == mlog.MetaPut && op.Version == 0 {
			s.violate(kindTopicNotCAS, "%s wrote the topic record without a version", o.name)
		}
	}
	var err error
	switch op.Kind {
	case mlog.MetaGet:
		var kv meta.KV
		kv, err = m.client.Get(ctx, op.Key)
		res.Value, res.Version = kv.Value, kv.Version
		if cursor, ok := cursorOfKey(op.Key); ok && (err == nil || errors.Is(err, meta.ErrNotFound)) {
			if o.loaded == nil {
				o.loaded = map[string][]byte{}
			}
			if ptr, isPtr := mlog.DecodeCursorPointer(kv.Value); isPtr {
				// The snapshot loaded is the cursor ledger entry read next.
				if o.cursorLedgers == nil {
					o.cursorLedgers = map[int64]string{}
				}
				o.cursorLedgers[ptr.Ledger] = cursor
			} else if _, seen := o.loaded[cursor]; !seen {
				o.loaded[cursor] = kv.Value
			}
		}
	case mlog.MetaCreate:
		res.Version, err = m.client.Create(ctx, op.Key, op.Value)
	case mlog.MetaPut:
		res.Version, err = m.client.Put(ctx, op.Key, op.Value, op.Version)
	case mlog.MetaDelete:
		err = m.client.Delete(ctx, op.Key, op.Version)
	}
	res.Err = err
	desc := fmt.Sprintf("%s %s@v%d from %s", metaKindNames[op.Kind], shortKey(op.Key), op.Version, o.name)
	if err != nil {
		s.e.tracef("meta", "%s: %v", desc, err)
		return res
	}
	if isRecord && op.Kind != mlog.MetaGet {
		next, _ := m.record()
		s.e.tracef("meta", "%s: ok v%d %s cursors=%v", desc, res.Version, describeInfos(next.Ledgers), next.Cursors)
		s.onRecordWritten(o, prev, next)
	} else {
		s.e.tracef("meta", "%s: ok v%d", desc, res.Version)
		if cursor, ok := cursorOfKey(op.Key); ok && op.Kind != mlog.MetaGet && op.Kind != mlog.MetaDelete {
			data := op.Value
			if ptr, isPtr := mlog.DecodeCursorPointer(op.Value); isPtr {
				// Check the snapshot the pointer names.
				data = nil
				if l := s.ledgers.byID[ptr.Ledger]; l != nil && ptr.Entry >= 0 && ptr.Entry < int64(len(l.entries)) {
					data = l.entries[ptr.Entry].payload
				}
			}
			if data != nil || !isPointer(op.Value) {
				s.onCursorWritten(o, cursor, data)
			}
		}
	}
	if op.Kind != mlog.MetaGet && s.e.chance(s.sc.ambiguousProb) {
		s.stats.AmbiguousMeta++
		s.e.tracef("meta", "result of %s LOST", desc)
		return mlog.MetaResult{ID: op.ID, Err: fmt.Errorf("sim: result lost: %w", meta.ErrUnavailable)}
	}
	return res
}

// record reads the topic record past any outage (for the checkers).
func (m *topicMeta) record() (mlog.Record, bool) {
	m.bypass = true
	defer func() { m.bypass = false }()
	kv, err := m.client.Get(context.Background(), mlog.Key(topicName))
	if err != nil {
		return mlog.Record{}, false
	}
	var rec mlog.Record
	if err := json.Unmarshal(kv.Value, &rec); err != nil {
		m.s.violate(kindSimError, "topic record does not decode: %v", err)
		return mlog.Record{}, false
	}
	return rec, true
}

// cursorsPersisted reports whether the record names every cursor and each has a record.
func (m *topicMeta) cursorsPersisted(names []string) bool {
	rec, ok := m.record()
	if !ok || len(rec.Cursors) < len(names) {
		return false
	}
	m.bypass = true
	defer func() { m.bypass = false }()
	for _, n := range names {
		if _, err := m.client.Get(context.Background(), mlog.CursorKey(topicName, n)); err != nil {
			return false
		}
	}
	return true
}

// isPointer reports whether a cursor record is a pointer naming a cursor
// ledger entry (a pointer with no entry yet names a fresh ledger).
func isPointer(b []byte) bool {
	ptr, ok := mlog.DecodeCursorPointer(b)
	return ok && ptr.Entry < 0
}

func cursorOfKey(key string) (string, bool) {
	prefix := mlog.CursorKey(topicName, "")
	if len(key) > len(prefix) && key[:len(prefix)] == prefix {
		return key[len(prefix):], true
	}
	return "", false
}

func shortKey(key string) string {
	if c, ok := cursorOfKey(key); ok {
		return "cursor/" + c
	}
	return "record"
}
