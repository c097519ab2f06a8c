package mlog

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// TestManagedLedgerRandomized drives the core with random appends, acks, ticks,
// metadata outages and takeovers, and checks after every step that every
// acknowledged append is still stored unless its ledger was trimmed, and
// that a ledger is deleted only when it is off the list and every cursor
// of the owner deleting it has acknowledged all of it. The early-trim
// mutant must be caught.
func TestManagedLedgerRandomized(t *testing.T) {
	for seed := uint64(1); seed <= 40; seed++ {
		if v := runRandomTopic(t, seed, false); v != "" {
			t.Fatalf("seed %d: %s", seed, v)
		}
	}
}

func TestManagedLedgerRandomizedCatchesEarlyTrim(t *testing.T) {
	for seed := uint64(1); seed <= 40; seed++ {
		if v := runRandomTopic(t, seed, true); v != "" {
			return // caught
		}
	}
	t.Fatal("the early-trim mutant went unnoticed")
}

func runRandomTopic(t *testing.T, seed uint64, earlyTrim bool) (violation string) {
	rng := rand.New(rand.NewPCG(seed, seed))
	e := newFakeEnv(t)
	cfg := Config{
		Rollover:              RolloverPolicy{MaxEntries: int64(2 + rng.IntN(5))},
		CursorPersistInterval: time.Second,
		RetryInterval:         time.Second,
		MaxRangesToPersist:    1 + rng.IntN(4),
		EarlyTrim:             earlyTrim,
	}
	deleted := map[int64]bool{}
	e.checkDelete = func(o *owner, id int64) {
		l := e.ledgers[id]
		if l == nil || len(l.entries) == 0 || violation != "" || e.cursorLedgers[id] {
			return
		}
		if slices.Contains(ledgerIDs(e.record("t").Ledgers), id) {
			violation = fmt.Sprintf("ledger %d deleted while on the list", id)
		}
		last := Position{id, int64(len(l.entries) - 1)}
		for name, cs := range o.tp.cursors {
			if !cs.c.IsAcked(last) {
				violation = fmt.Sprintf("ledger %d deleted with %s unacknowledged on %s (md %s)", id, last, name, cs.c.MarkDelete())
			}
		}
		deleted[id] = true
	}
	o := e.newOwner(cfg)
	o.open()
	for _, name := range []string{"a", "b"} {
		if err := o.tp.OpenCursor(name, true, e.now); err != nil {
			t.Fatal(err)
		}
	}
	payloads := map[uint64][]byte{} // token -> payload, across owners
	var acked []Position
	tokenAt := map[Position]uint64{}
	nextToken := uint64(0)
	for step := 0; step < 300 && violation == ""; step++ {
		switch r := rng.IntN(100); {
		case r < 40:
			nextToken++
			p := binary.AppendUvarint(nil, nextToken)
			p = append(p, bytes.Repeat([]byte{'x'}, rng.IntN(20))...)
			payloads[nextToken] = p
			o.tp.Append(nextToken, p, e.now)
			o.drive()
			if a, ok := o.acks[nextToken]; ok && a.Err == nil {
				acked = append(acked, a.Pos)
				tokenAt[a.Pos] = nextToken
			}
		case r < 60 && len(acked) > 0:
			p := acked[rng.IntN(len(acked))]
			_ = o.tp.Ack([]string{"a", "b"}[rng.IntN(2)], p, e.now) // may be trimmed already
			o.drive()
		case r < 65 && len(acked) > 0:
			p := acked[rng.IntN(len(acked))]
			_ = o.tp.AckCumulative([]string{"a", "b"}[rng.IntN(2)], p, e.now)
			o.drive()
		case r < 85:
			e.advance(time.Duration(rng.IntN(2000)) * time.Millisecond)
			o.tick()
		case r < 90:
			e.metaDown = !e.metaDown
		case r < 93 && !e.metaDown:
			next := e.newOwner(cfg)
			next.token = o.token
			next.open()
			if next.tp.Phase() != "open" {
				return fmt.Sprintf("takeover failed: %v", next.tp.Err())
			}
			old := o
			o = next
			// The fenced owner's next append fails; its acks stay valid.
			nextToken++
			old.tp.Append(nextToken, []byte("zombie"), e.now)
			old.drive()
			if a := old.acks[nextToken]; a.Err == nil {
				return fmt.Sprintf("fenced owner acknowledged %s", a.Pos)
			}
		}
		// Every acknowledged append is stored where its ack said, unless
		// its ledger was trimmed.
		for _, p := range acked {
			if deleted[p.LedgerID] {
				continue
			}
			l := e.ledgers[p.LedgerID]
			if l == nil || int64(len(l.entries)) <= p.EntryID || !bytes.Equal(l.entries[p.EntryID], payloads[tokenAt[p]]) {
				return fmt.Sprintf("step %d: acknowledged %s lost", step, p)
			}
		}
	}
	if violation == "" && len(deleted) == 0 && seed == 1 {
		t.Logf("seed %d trimmed nothing", seed)
	}
	return violation
}
