package mlog

import (
	"encoding/json"
	"fmt"
)

// CursorPointer is what a cursor's metadata record holds: where the cursor's
// newest persisted snapshot is. The snapshots themselves are entries of a
// rolling cursor ledger owned by the topic's owner; the newest acknowledged
// entry of that ledger is authoritative on recovery, the pointer's entry is
// the fallback, and MarkDelete is there for quick inspection.
type CursorPointer struct {
	Ledger     int64    `json:"ledger"`
	Entry      int64    `json:"entry"`
	MarkDelete Position `json:"markDelete"`
	// Epoch identifies the owner that wrote the pointer: the topic record
	// version it loaded when it took the topic over. A cursor CAS that
	// fails against a pointer of another epoch means another owner.
	Epoch int64 `json:"epoch"`
}

func (p CursorPointer) marshal() []byte {
	b, err := json.Marshal(p)
	if err != nil {
		panic(fmt.Sprintf("marshal cursor pointer: %v", err)) // plain struct: cannot fail
	}
	return b
}

// DecodeCursorPointer decodes a cursor record; false when it is not a
// pointer (an older record holding the snapshot itself).
func DecodeCursorPointer(b []byte) (CursorPointer, bool) {
	if len(b) == 0 || b[0] != '{' {
		return CursorPointer{}, false
	}
	var p CursorPointer
	if err := json.Unmarshal(b, &p); err != nil || p.Ledger <= 0 {
		return CursorPointer{}, false
	}
	return p, true
}

// maxCursorLoadTries bounds re-reads of a cursor pointer that a previous
// owner keeps moving, or whose ledger cannot be recovered.
const maxCursorLoadTries = 10

// onCursorClaimed starts restoring a loading cursor once its pointer is
// ours: recover and close the cursor ledger it names (fencing a previous
// owner's cursor writes; the previous owner can no longer name another
// one), then read its last entry.
func (t *ManagedLedger) onCursorClaimed(name string, res MetaResult) {
	cs := t.loading[name]
	if cs == nil || t.phase != phaseLoading {
		return
	}
	if res.Err != nil {
		t.reloadCursor(name, cs, res.Err)
		return
	}
	cs.version = res.Version
	t.sendLedger(pendingLedger{cursor: name}, LedgerOp{Kind: LedgerRecover, Ledger: cs.pointer.Ledger})
}

// reloadCursor reads a loading cursor's pointer again (the previous owner
// moved it, or the claim's outcome is unknown), a bounded number of times.
func (t *ManagedLedger) reloadCursor(name string, cs *cursorState, err error) {
	cs.loadTries++
	if cs.loadTries >= maxCursorLoadTries {
		t.fail(fmt.Errorf("open topic %s: cursor %s: %w", t.cfg.Name, name, err))
		return
	}
	t.sendMeta(pendingMeta{purpose: metaLoadCursor, cursor: name}, MetaOp{Kind: MetaGet, Key: CursorKey(t.cfg.Name, name)})
}

// stepCursorLedger handles the result of an operation on a cursor ledger.
func (t *ManagedLedger) stepCursorLedger(p pendingLedger, res LedgerResult) {
	switch p.kind {
	case LedgerRecover:
		t.onCursorLedgerRecovered(p, res)
	case LedgerRead:
		t.onCursorLedgerRead(p, res)
	case LedgerCreate:
		t.onCursorLedgerCreated(p, res)
	case LedgerAppend:
		t.onCursorAppended(p, res)
	case LedgerDelete:
		t.onDeleted(p, res)
	}
}

func (t *ManagedLedger) onCursorLedgerRecovered(p pendingLedger, res LedgerResult) {
	cs := t.loading[p.cursor]
	if cs == nil || t.phase != phaseLoading {
		return
	}
	if res.Err != nil {
		t.reloadCursor(p.cursor, cs, fmt.Errorf("recover cursor ledger %d: %w", p.ledger, res.Err))
		return
	}
	if res.Entries <= 0 {
		// No snapshot yet (the previous owner named a new cursor ledger
		// and stopped before its first append was acknowledged): restart
		// from the pointer's mark-delete, which that owner's consumers
		// had acknowledged through.
		c, err := NewCursor(p.cursor, cs.pointer.MarkDelete, t.cursorOptions())
		if err != nil {
			t.fail(err)
			return
		}
		cs.c, cs.dirty = c, true
		t.cursorLoaded(p.cursor, cs)
		return
	}
	t.sendLedger(pendingLedger{cursor: p.cursor, entry: res.Entries - 1},
		LedgerOp{Kind: LedgerRead, Ledger: p.ledger, Entry: res.Entries - 1})
}

func (t *ManagedLedger) onCursorLedgerRead(p pendingLedger, res LedgerResult) {
	cs := t.loading[p.cursor]
	if cs == nil || t.phase != phaseLoading {
		return
	}
	err := res.Err
	if err == nil {
		var c *Cursor
		if c, err = Restore(res.Payload, t.cursorOptions()); err == nil {
			cs.c, cs.persisted = c, c.Holes()
			t.cursorLoaded(p.cursor, cs)
			return
		}
	}
	if p.entry != cs.pointer.Entry && cs.pointer.Entry >= 0 {
		// Fall back to the snapshot the pointer names.
		t.sendLedger(pendingLedger{cursor: p.cursor, entry: cs.pointer.Entry},
			LedgerOp{Kind: LedgerRead, Ledger: p.ledger, Entry: cs.pointer.Entry})
		return
	}
	t.fail(fmt.Errorf("open topic %s: cursor %s: ledger %d entry %d: %w", t.cfg.Name, p.cursor, p.ledger, p.entry, err))
}

// persistCursor writes cs's snapshot as the next entry of its cursor ledger,
// creating a ledger first when it has none or the current one is full. A
// new cursor ledger is named by the pointer (a CAS) before its first
// append, so a fenced owner never writes a cursor ledger that the next
// owner would not recover.
func (t *ManagedLedger) persistCursor(name string, cs *cursorState) {
	data, info := cs.c.Snapshot(cs.c.MaxRangesToPersist())
	cs.dirty, cs.persisting = false, true
	p := pendingLedger{cursor: name, snapshot: data, persisted: info.Persisted, md: cs.c.MarkDelete()}
	switch {
	case cs.ledger == 0 || cs.snapshots >= t.cfg.CursorLedgerMaxSnapshots:
		t.sendLedger(p, LedgerOp{Kind: LedgerCreate})
	case cs.ledger != cs.pointed:
		t.claimCursorLedger(cs, p)
	default:
		t.sendCursorAppend(cs, p)
	}
}

// claimCursorLedger points the cursor record at cs.ledger (no snapshot in
// it yet); the append of p follows.
func (t *ManagedLedger) claimCursorLedger(cs *cursorState, p pendingLedger) {
	ptr := CursorPointer{Ledger: cs.ledger, Entry: -1, MarkDelete: p.md, Epoch: int64(t.epoch)}
	op := MetaOp{Kind: MetaPut, Key: CursorKey(t.cfg.Name, p.cursor), Value: ptr.marshal(), Version: cs.version}
	if cs.version == 0 {
		op.Kind = MetaCreate
	}
	claim := p
	t.sendMeta(pendingMeta{purpose: metaCursorPersist, cursor: p.cursor, persisted: cs.persisted, cledger: cs.ledger, claim: &claim}, op)
}

func (t *ManagedLedger) sendCursorAppend(cs *cursorState, p pendingLedger) {
	t.sendLedger(p, LedgerOp{Kind: LedgerAppend, Ledger: cs.ledger, Payload: p.snapshot})
}

func (t *ManagedLedger) onCursorLedgerCreated(p pendingLedger, res LedgerResult) {
	cs := t.cursors[p.cursor]
	if cs == nil || t.phase == phaseFailed || t.phase == phaseClosed {
		if res.Err == nil {
			t.sendLedger(pendingLedger{cursor: p.cursor}, LedgerOp{Kind: LedgerDelete, Ledger: res.Ledger})
		}
		if cs != nil {
			cs.persisting = false
		}
		return
	}
	if res.Err != nil {
		cs.persisting, cs.dirty, cs.lastPersist = false, true, t.now // retried at the next interval
		t.tryFinishClose()
		return
	}
	if cs.ledger != 0 && cs.ledger != cs.pointed {
		// A ledger we filled but never pointed at (its pointer write failed).
		t.sendLedger(pendingLedger{cursor: p.cursor}, LedgerOp{Kind: LedgerDelete, Ledger: cs.ledger})
	}
	cs.ledger, cs.snapshots = res.Ledger, 0
	t.claimCursorLedger(cs, p)
}

func (t *ManagedLedger) onCursorAppended(p pendingLedger, res LedgerResult) {
	cs := t.cursors[p.cursor]
	if cs == nil || t.phase == phaseFailed {
		return
	}
	if res.Err != nil {
		// The writer gave up on the cursor ledger (or a new owner deleted
		// it after moving the pointer): the next persist moves to a fresh
		// one, and the topic record says whether we still own the topic.
		if cs.ledger == p.ledger {
			if cs.ledger != cs.pointed {
				t.sendLedger(pendingLedger{cursor: p.cursor}, LedgerOp{Kind: LedgerDelete, Ledger: cs.ledger})
			}
			cs.ledger = 0
		}
		cs.persisting, cs.dirty, cs.lastPersist = false, true, t.now
		t.sendMeta(pendingMeta{purpose: metaCheckOwner, cursor: p.cursor}, MetaOp{Kind: MetaGet, Key: CursorKey(t.cfg.Name, p.cursor)})
		t.tryFinishClose()
		return
	}
	cs.snapshots++
	ptr := CursorPointer{Ledger: p.ledger, Entry: res.EntryID, MarkDelete: p.md, Epoch: int64(t.epoch)}
	op := MetaOp{Kind: MetaPut, Key: CursorKey(t.cfg.Name, p.cursor), Value: ptr.marshal(), Version: cs.version}
	if cs.version == 0 {
		op.Kind = MetaCreate
	}
	t.sendMeta(pendingMeta{purpose: metaCursorPersist, cursor: p.cursor, persisted: p.persisted, cledger: p.ledger}, op)
}

// deleteCursorLedgers deletes the ledgers of a deleted cursor.
func (t *ManagedLedger) deleteCursorLedgers(name string, ids ...int64) {
	for _, id := range ids {
		if id != 0 {
			t.sendLedger(pendingLedger{cursor: name}, LedgerOp{Kind: LedgerDelete, Ledger: id})
		}
	}
}
