package mlog

import (
	"fmt"
	"testing"

	"quire/internal/meta"
)

// driveLosing carries out o's Ready like owner.drive, except that the next
// topic-record Put while *lose is set reports ErrUnavailable — after
// applying when applied (the answer was lost), or without applying.
func driveLosing(o *owner, lose *bool, applied bool) {
	e := o.e
	for range 1000 {
		rd := o.tp.Ready()
		if rd.Empty() {
			return
		}
		for _, a := range rd.Acks {
			o.acks[a.Token] = a
		}
		o.events = append(o.events, rd.Events...)
		for _, op := range rd.MetaOps {
			var res MetaResult
			if *lose && op.Kind == MetaPut && op.Key == Key("t") {
				*lose = false
				if applied {
					e.doMeta(op)
				}
				res = MetaResult{ID: op.ID, Err: fmt.Errorf("answer lost: %w", meta.ErrUnavailable)}
			} else {
				res = e.doMeta(op)
			}
			o.tp.StepMeta(res, e.now)
		}
		for _, op := range rd.LedgerOps {
			o.tp.StepLedger(e.doLedger(op), e.now)
		}
	}
	e.t.Fatal("topic never settles")
}

// TestManagedLedgerRolloverAnswerLost: a rollover CAS that applied but whose answer
// was lost (ErrUnavailable) must not let the owner write on to the ledger
// the record now closes — those entries would be acknowledged past the end
// the next owner reads. Found by `quire sim topic` (e.g. seed 45). The
// other case: the CAS really did not apply, and the owner writes on.
func TestManagedLedgerRolloverAnswerLost(t *testing.T) {
	for _, applied := range []bool{true, false} {
		t.Run(fmt.Sprintf("applied=%v", applied), func(t *testing.T) {
			e := newFakeEnv(t)
			o := e.newOwner(Config{Owner: "a", Rollover: RolloverPolicy{MaxEntries: 2}})
			o.open()
			lose := true
			var tokens []uint64
			for range 6 {
				o.token++
				tokens = append(tokens, o.token)
				o.tp.Append(o.token, []byte("x"), e.now)
				driveLosing(o, &lose, applied)
				o.tick()
			}
			if lose {
				t.Fatal("no rollover CAS happened")
			}
			if done, err := o.tp.Done(); done {
				t.Fatalf("topic stopped: %v", err)
			}
			rec := e.record("t")
			for _, tok := range tokens {
				a := o.ack(tok)
				if a.Err != nil {
					continue
				}
				for i, info := range rec.Ledgers {
					if info.ID == a.Pos.LedgerID && i < len(rec.Ledgers)-1 && a.Pos.EntryID >= info.Entries {
						t.Fatalf("append %d acknowledged at %s, past the end of closed ledger %d (%d entries) in the record %v",
							tok, a.Pos, info.ID, info.Entries, rec.Ledgers)
					}
				}
			}
		})
	}
}

// TestManagedLedgerSyncAnswerLost: a record write (here the one registering a new
// cursor) that applied with its answer lost must not make the owner fence
// itself at its next record write (found by `quire sim topic`, seed 42).
func TestManagedLedgerSyncAnswerLost(t *testing.T) {
	e := newFakeEnv(t)
	o := e.newOwner(Config{Owner: "a", Rollover: RolloverPolicy{MaxEntries: 2}})
	o.open()
	if err := o.tp.OpenCursor("c", true, e.now); err != nil {
		t.Fatal(err)
	}
	lose := true
	o.tp.Tick(e.now)
	driveLosing(o, &lose, true)
	if lose {
		t.Fatal("no record write happened")
	}
	o.append(5, 10) // rolls over: another record write
	if done, err := o.tp.Done(); done {
		t.Fatalf("topic stopped: %v", err)
	}
	if rec := e.record("t"); len(rec.Ledgers) < 2 || len(rec.Cursors) != 1 {
		t.Fatalf("record %+v: want a rollover and the cursor", rec)
	}
}
