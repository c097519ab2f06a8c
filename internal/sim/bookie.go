package sim

import (
	"bytes"
	"fmt"
	"sort"
	"time"

	"quire/internal/ledger"
)

// bookieConfig is the bookies' behaviour for one run.
type bookieConfig struct {
	// fsyncMin..fsyncMax: how long one journal group commit takes.
	fsyncMin, fsyncMax time.Duration
	// failProb: a request is refused with StatusFailed (I/O error, overload).
	failProb float64
	// readUnsynced: plain reads also see entries still waiting for their
	// fsync, as a real bookie's write cache serves them. Fencing reads are
	// answered only after the fence is durable, when everything accepted
	// before the fence is durable too, so they see the same either way.
	readUnsynced bool
}

// bookie models one storage node as the protocol cores assume it behaves:
// an add is acknowledged only after the journal fsync that makes it durable
// (group commit: one fsync covers everything queued before it started); a
// fencing read makes the fence durable the same way before it answers; a
// fenced ledger refuses every non-recovery add and explicit LAC update. A
// crash loses what was not yet synced — exactly the adds that were never
// acknowledged — and keeps acknowledged entries and durable fences. An
// explicit LAC is not journaled (internal/bookie's WriteLAC): a crash loses
// it, unless (as a checkpoint of the ledger's metadata may do) it was
// persisted by chance.
type bookie struct {
	s    *ledgerSim
	id   ledger.BookieID
	zone string
	up   bool
	// readOnly > 0: out of space (faults may overlap). Reads and fences
	// are served; adds are refused, except a recovery add of an entry the
	// bookie holds durably, acknowledged without writing — as
	// internal/bookie does for entries checkpointed or replayed.
	readOnly int
	// epoch changes at every crash, so that a group commit that was in
	// progress when the bookie crashed completes nothing.
	epoch   int
	ledgers map[int64]*bookieLedger
	journal []journalItem // accepted, waiting for the next group commit
	syncing bool
}

type bookieLedger struct {
	entries map[int64]storedEntry
	fenced  bool // in memory: refuses the old writer from now on
	// Invariant: fencedDurable implies fenced.
	fencedDurable bool
	// explicitLAC is the highest LAC an explicit update brought (-1: none).
	// The ledger's LAC is the highest of it and the LACs its visible
	// entries carried.
	explicitLAC int64
}

type storedEntry struct {
	data    []byte
	lac     int64
	durable bool
}

// journalItem is an add or a fence waiting for its group commit; reply runs
// once it is durable.
type journalItem struct {
	ledgerID int64
	entryID  int64 // -1 for a fence
	reply    func()
}

func newBookie(s *ledgerSim, id ledger.BookieID, zone string) *bookie {
	return &bookie{s: s, id: id, zone: zone, up: true, ledgers: map[int64]*bookieLedger{}}
}

func (b *bookie) name() string { return string(b.id) }

func (b *bookie) ledger(id int64) *bookieLedger {
	l := b.ledgers[id]
	if l == nil {
		l = &bookieLedger{entries: map[int64]storedEntry{}, explicitLAC: -1}
		b.ledgers[id] = l
	}
	return l
}

// receive handles a request that arrived from actor (generation gen).
func (b *bookie) receive(from string, gen int, req ledger.Request) {
	e := b.s.e
	if !b.up {
		b.s.stats.Dropped++
		e.tracef(b.name(), "<- %s %s DROPPED (bookie down)", from, describeRequest(req))
		return
	}
	if e.chance(b.s.bookieCfg.failProb) {
		e.tracef(b.name(), "refuses %s from %s (injected failure)", describeRequest(req), from)
		b.respond(from, gen, req, ledger.Response{ID: req.ID, From: b.id, Status: ledger.StatusFailed})
		return
	}
	if req.Kind == ledger.RequestAdd && b.readOnly > 0 {
		if _, held := b.durable(req.LedgerID, req.EntryID); req.Recovery && held {
			e.tracef(b.name(), "read-only: holds e%d, acknowledges %s's recovery add", req.EntryID, from)
			b.respond(from, gen, req, ledger.Response{ID: req.ID, From: b.id, Status: ledger.StatusOK})
			return
		}
		e.tracef(b.name(), "read-only: refuses %s from %s", describeRequest(req), from)
		b.respond(from, gen, req, ledger.Response{ID: req.ID, From: b.id, Status: ledger.StatusFailed})
		return
	}
	switch req.Kind {
	case ledger.RequestAdd:
		b.add(from, gen, req)
	case ledger.RequestRead:
		b.read(from, gen, req)
	case ledger.RequestReadRange:
		b.respond(from, gen, req, b.answerReadRange(req))
	case ledger.RequestWriteLac:
		b.writeLac(from, gen, req)
	}
}

func (b *bookie) add(from string, gen int, req ledger.Request) {
	l := b.ledger(req.LedgerID)
	if l.fenced && !req.Recovery {
		b.s.stats.FencedRejects++
		b.s.e.tracef(b.name(), "rejects add e%d from %s: FENCED", req.EntryID, from)
		b.respond(from, gen, req, ledger.Response{ID: req.ID, From: b.id, Status: ledger.StatusFenced})
		return
	}
	old, had := l.entries[req.EntryID]
	if !had || !old.durable || !bytes.Equal(old.data, req.Payload) {
		l.entries[req.EntryID] = storedEntry{data: req.Payload, lac: req.LastAddConfirmed}
		b.s.checkBookieLAC(b, req.LedgerID, req.LastAddConfirmed, fmt.Sprintf("add e%d from %s", req.EntryID, from))
	}
	b.enqueue(journalItem{ledgerID: req.LedgerID, entryID: req.EntryID, reply: func() {
		b.respond(from, gen, req, ledger.Response{ID: req.ID, From: b.id, Status: ledger.StatusOK})
	}})
}

func (b *bookie) read(from string, gen int, req ledger.Request) {
	l := b.ledgers[req.LedgerID]
	if req.Fence && (l == nil || !l.fencedDurable) {
		// Fence first, durably; answer (computed then) once the fence is synced.
		l = b.ledger(req.LedgerID)
		if !l.fenced {
			b.s.e.tracef(b.name(), "fences L%d (sync pending) for %s", req.LedgerID, from)
		}
		l.fenced = true
		b.enqueue(journalItem{ledgerID: req.LedgerID, entryID: -1, reply: func() {
			b.respond(from, gen, req, b.answerRead(req))
		}})
		return
	}
	b.respond(from, gen, req, b.answerRead(req))
}

// writeLac applies an explicit LAC update at once, in memory: the ledger's
// LAC is raised (never lowered), on a ledger this bookie holds something of
// and has not fenced.
func (b *bookie) writeLac(from string, gen int, req ledger.Request) {
	resp := ledger.Response{ID: req.ID, From: b.id}
	l := b.ledgers[req.LedgerID]
	switch {
	case l == nil || len(l.entries) == 0 && !l.fenced:
		resp.Status = ledger.StatusNoSuchLedger
	case l.fenced:
		b.s.stats.FencedRejects++
		b.s.e.tracef(b.name(), "rejects write-lac %d from %s: FENCED", req.LastAddConfirmed, from)
		resp.Status = ledger.StatusFenced
	default:
		b.s.stats.ExplicitLacs++
		l.explicitLAC = max(l.explicitLAC, req.LastAddConfirmed)
		b.s.checkBookieLAC(b, req.LedgerID, req.LastAddConfirmed, "write-lac from "+from)
		resp.Status, resp.LastAddConfirmed = ledger.StatusOK, b.lac(l)
	}
	b.respond(from, gen, req, resp)
}

// lac is the ledger's LAC as the bookie reports it: the highest of the
// explicit LAC and the LACs its visible entries carried (-1 for none).
func (b *bookie) lac(l *bookieLedger) int64 {
	lac := l.explicitLAC
	for _, se := range l.entries { // max: order does not matter
		if (se.durable || b.s.bookieCfg.readUnsynced) && se.lac > lac {
			lac = se.lac
		}
	}
	return lac
}

// answerRead reads entry req.EntryID (-1: the LAC) as the bookie sees it now.
func (b *bookie) answerRead(req ledger.Request) ledger.Response {
	resp := ledger.Response{ID: req.ID, From: b.id}
	l := b.ledgers[req.LedgerID]
	if l == nil || len(l.entries) == 0 && !l.fenced {
		resp.Status = ledger.StatusNoSuchLedger
		return resp
	}
	visible := func(se storedEntry) bool { return se.durable || b.s.bookieCfg.readUnsynced }
	if req.EntryID == -1 {
		resp.Status, resp.LastAddConfirmed = ledger.StatusOK, b.lac(l)
		return resp
	}
	se, ok := l.entries[req.EntryID]
	if !ok || !visible(se) {
		resp.Status = ledger.StatusNoSuchEntry
		return resp
	}
	resp.Status, resp.LastAddConfirmed, resp.Payload = ledger.StatusOK, se.lac, se.data
	return resp
}

// answerReadRange answers a range read as internal/bookie's ReadRange does:
// the visible entries from req.EntryID on, consecutive, at most MaxEntries
// and MaxBytes of them (at least one), NoSuchEntry when the first is not
// visible.
func (b *bookie) answerReadRange(req ledger.Request) ledger.Response {
	resp := ledger.Response{ID: req.ID, From: b.id, LastAddConfirmed: -1}
	l := b.ledgers[req.LedgerID]
	if l == nil || len(l.entries) == 0 && !l.fenced {
		resp.Status = ledger.StatusNoSuchLedger
		return resp
	}
	size := 0
	for id := req.EntryID; len(resp.Entries) < max(req.MaxEntries, 1); id++ {
		se, ok := l.entries[id]
		if !ok || !se.durable && !b.s.bookieCfg.readUnsynced {
			break
		}
		if len(resp.Entries) > 0 && req.MaxBytes > 0 && size+len(se.data) > req.MaxBytes {
			break
		}
		size += len(se.data)
		resp.Entries = append(resp.Entries, se.data)
	}
	resp.Status = ledger.StatusOK
	if len(resp.Entries) == 0 {
		resp.Status = ledger.StatusNoSuchEntry
	}
	return resp
}

func (b *bookie) respond(to string, gen int, req ledger.Request, resp ledger.Response) {
	b.s.net.send(b.name(), to, describeResponse(req, resp), func() {
		if a := b.s.actors[to]; a != nil {
			a.onResponse(gen, resp)
		}
	})
}

func (b *bookie) enqueue(it journalItem) {
	b.journal = append(b.journal, it)
	if !b.syncing {
		b.startSync()
	}
}

// startSync begins one group commit covering everything queued so far.
func (b *bookie) startSync() {
	batch := b.journal
	b.journal = nil
	b.syncing = true
	epoch := b.epoch
	b.s.e.after(b.s.e.between(b.s.bookieCfg.fsyncMin, b.s.bookieCfg.fsyncMax), func() {
		if b.epoch != epoch {
			return // crashed meanwhile: the batch is lost and nobody hears back
		}
		b.syncing = false
		for _, it := range batch {
			l := b.ledger(it.ledgerID)
			if it.entryID == -1 {
				l.fencedDurable = true
			} else if se, ok := l.entries[it.entryID]; ok {
				se.durable = true
				l.entries[it.entryID] = se
			}
		}
		for _, it := range batch {
			it.reply()
		}
		if len(b.journal) > 0 {
			b.startSync()
		}
	})
}

// crash stops the bookie, losing every entry and fence not yet synced.
func (b *bookie) crash() {
	b.up = false
	b.epoch++
	b.syncing = false
	b.journal = nil
	lost := 0
	for _, ledgerID := range sortedLedgerIDs(b.ledgers) { // sorted: the chance draws below use the seed's stream
		l := b.ledgers[ledgerID]
		for id, se := range l.entries {
			if !se.durable {
				delete(l.entries, id)
				lost++
			}
		}
		l.fenced = l.fencedDurable
		if l.explicitLAC >= 0 && !b.s.e.chance(0.5) {
			l.explicitLAC = -1
		}
	}
	b.s.stats.LostUnsynced += lost
	b.s.e.tracef(b.name(), "CRASH (lost %d unsynced entries)", lost)
}

func (b *bookie) restart() {
	b.up = true
	b.s.e.tracef(b.name(), "RESTART")
}

// durable reports whether the bookie holds entry durably (checkers).
func (b *bookie) durable(ledgerID, entryID int64) ([]byte, bool) {
	l := b.ledgers[ledgerID]
	if l == nil {
		return nil, false
	}
	se, ok := l.entries[entryID]
	return se.data, ok && se.durable
}

// fencedDurably reports whether the bookie's fence of ledgerID survives a crash.
func (b *bookie) fencedDurably(ledgerID int64) bool {
	l := b.ledgers[ledgerID]
	return l != nil && l.fencedDurable
}

func sortedLedgerIDs(m map[int64]*bookieLedger) []int64 {
	ids := make([]int64, 0, len(m))
	for id := range m {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	return ids
}

func describeRequest(r ledger.Request) string {
	switch {
	case r.Kind == ledger.RequestWriteLac:
		return fmt.Sprintf("write-lac#%d lac=%d", r.ID, r.LastAddConfirmed)
	case r.Kind == ledger.RequestAdd && r.Recovery:
		return fmt.Sprintf("recovery-add#%d e%d", r.ID, r.EntryID)
	case r.Kind == ledger.RequestAdd:
		return fmt.Sprintf("add#%d e%d lac=%d", r.ID, r.EntryID, r.LastAddConfirmed)
	case r.EntryID == -1 && r.Fence:
		return fmt.Sprintf("fence-read-lac#%d", r.ID)
	case r.EntryID == -1:
		return fmt.Sprintf("read-lac#%d", r.ID)
	case r.Fence:
		return fmt.Sprintf("fence-read#%d e%d", r.ID, r.EntryID)
	case r.Kind == ledger.RequestReadRange:
		return fmt.Sprintf("read-range#%d e%d..e%d", r.ID, r.EntryID, r.EntryID+int64(r.MaxEntries)-1)
	}
	return fmt.Sprintf("read#%d e%d", r.ID, r.EntryID)
}

func describeResponse(req ledger.Request, r ledger.Response) string {
	what := "add"
	switch {
	case req.Kind == ledger.RequestWriteLac:
		return fmt.Sprintf("write-lac#%d %s", r.ID, r.Status)
	case req.Kind == ledger.RequestReadRange && r.Status == ledger.StatusOK:
		return fmt.Sprintf("read-range#%d e%d..e%d ok", r.ID, req.EntryID, req.EntryID+int64(len(r.Entries))-1)
	case req.Kind == ledger.RequestReadRange:
		return fmt.Sprintf("read-range#%d e%d %s", r.ID, req.EntryID, r.Status)
	}
	if req.Kind == ledger.RequestRead {
		what = "read"
		if req.EntryID == -1 && r.Status == ledger.StatusOK {
			return fmt.Sprintf("read-lac#%d ok lac=%d", r.ID, r.LastAddConfirmed)
		}
	}
	return fmt.Sprintf("%s#%d e%d %s", what, r.ID, req.EntryID, r.Status)
}
