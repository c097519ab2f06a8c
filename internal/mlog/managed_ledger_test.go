package mlog

import (
	"errors"
	"slices"
	"testing"
	"time"
)

// noRoll never rolls over by itself (tests that do not care).
var noRoll = RolloverPolicy{MaxEntries: 1 << 40}

func TestManagedLedgerOpenAppendTakeover(t *testing.T) {
	e := newFakeEnv(t)
	a := e.newOwner(Config{Owner: "a", Rollover: noRoll})
	a.open()
	if a.tp.Phase() != "open" {
		t.Fatalf("phase %s, err %v", a.tp.Phase(), a.tp.Err())
	}
	first := a.tp.Current()
	tokens := a.append(5, 10)
	for i, tok := range tokens {
		if got := a.ack(tok); got.Err != nil || got.Pos != (Position{first, int64(i)}) {
			t.Fatalf("append %d: %+v", i, got)
		}
	}

	b := e.newOwner(Config{Owner: "b", Rollover: noRoll})
	b.open()
	if b.tp.Phase() != "open" {
		t.Fatalf("b: phase %s, err %v", b.tp.Phase(), b.tp.Err())
	}
	rec := e.record("t")
	if len(rec.Ledgers) != 2 || rec.Ledgers[0].ID != first || rec.Ledgers[0].Entries != 5 ||
		rec.Ledgers[0].Size != 50 || rec.Ledgers[0].Closed.IsZero() {
		t.Fatalf("record after takeover: %+v", rec)
	}
	// The first owner's ledger is fenced: its next append fails and it stops.
	tok := a.append(1, 10)[0]
	if err := a.ack(tok).Err; !errors.Is(err, ErrFenced) {
		t.Fatalf("append on the old owner: %v", err)
	}
	if done, err := a.tp.Done(); !done || !errors.Is(err, ErrFenced) {
		t.Fatalf("old owner done=%v err=%v", done, err)
	}
	if a.countEvents(EventFenced) != 1 {
		t.Fatalf("events %v", a.events)
	}
	// The new owner appends to its own ledger.
	if got := b.ack(b.append(1, 10)[0]); got.Err != nil || got.Pos != (Position{b.tp.Current(), 0}) {
		t.Fatalf("b append: %+v", got)
	}
}

// Two would-be owners read the same record, then both try to take over:
// exactly one CAS wins, the other is fenced and deletes the ledger it made.
func TestManagedLedgerTwoOwnersRace(t *testing.T) {
	for _, existing := range []bool{false, true} {
		e := newFakeEnv(t)
		if existing {
			z := e.newOwner(Config{Rollover: noRoll})
			z.open()
			z.append(3, 1)
		}
		a := e.newOwner(Config{Owner: "a", Rollover: noRoll})
		b := e.newOwner(Config{Owner: "b", Rollover: noRoll})
		a.tp.Open(e.now)
		b.tp.Open(e.now)
		rdA, rdB := a.tp.Ready(), b.tp.Ready()
		a.apply(rdA) // both read the record before either writes it
		b.apply(rdB)
		a.drive()
		b.drive()
		_, errA := a.tp.Done()
		_, errB := b.tp.Done()
		if a.tp.Phase() != "open" || !errors.Is(errB, ErrFenced) {
			t.Fatalf("existing=%v: a %s %v, b %s %v", existing, a.tp.Phase(), errA, b.tp.Phase(), errB)
		}
		rec := e.record("t")
		if rec.Owner != "a" || rec.Ledgers[len(rec.Ledgers)-1].ID != a.tp.Current() {
			t.Fatalf("record %+v", rec)
		}
		if e.topicLedgerCount() != len(rec.Ledgers) {
			t.Fatalf("loser's ledger not deleted: %d ledgers, list %v", e.topicLedgerCount(), ledgerIDs(rec.Ledgers))
		}
		if got := b.ack(b.append(1, 1)[0]); !errors.Is(got.Err, ErrFenced) {
			t.Fatalf("append on the loser: %v", got.Err)
		}
	}
}

func TestManagedLedgerRollover(t *testing.T) {
	tests := []struct {
		name   string
		policy RolloverPolicy
		steps  func(o *owner)
		want   []int64 // entries per ledger, the current one last
	}{
		{"entries", RolloverPolicy{MaxEntries: 3}, func(o *owner) { o.append(7, 1) }, []int64{3, 3, 1}},
		{"size", RolloverPolicy{MaxSize: 100}, func(o *owner) { o.append(5, 40) }, []int64{3, 2}},
		{"age", RolloverPolicy{MaxAge: time.Hour}, func(o *owner) {
			o.append(2, 1)
			o.e.advance(59 * time.Minute)
			o.tick()
			o.append(1, 1)
			o.e.advance(time.Minute)
			o.tick()
			o.append(1, 1)
		}, []int64{3, 1}},
		{"min age holds a full ledger", RolloverPolicy{MaxEntries: 2, MinAge: 10 * time.Minute}, func(o *owner) {
			o.append(5, 1)
			o.e.advance(10 * time.Minute)
			o.tick()
			o.append(1, 1)
		}, []int64{5, 1}},
		{"empty ledger never rolls", RolloverPolicy{MaxAge: time.Minute}, func(o *owner) {
			o.e.advance(time.Hour)
			o.tick()
		}, []int64{0}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newFakeEnv(t)
			o := e.newOwner(Config{Rollover: tt.policy})
			o.open()
			tt.steps(o)
			var got []int64
			for _, l := range o.tp.Ledgers() {
				got = append(got, l.Entries)
			}
			if !slices.Equal(got, tt.want) {
				t.Fatalf("entries per ledger %v, want %v", got, tt.want)
			}
			rec := e.record("t")
			if !slices.Equal(ledgerIDs(rec.Ledgers), ledgerIDs(o.tp.Ledgers())) {
				t.Fatalf("record %v, memory %v", ledgerIDs(rec.Ledgers), ledgerIDs(o.tp.Ledgers()))
			}
			for _, l := range rec.Ledgers[:len(rec.Ledgers)-1] {
				if l.Closed.IsZero() || e.ledgers[l.ID].closed != true {
					t.Fatalf("ledger %d not closed: %+v", l.ID, l)
				}
			}
			// Every acknowledged append is in the ledger it was acknowledged for.
			for tok := uint64(1); tok <= o.token; tok++ {
				a := o.ack(tok)
				if a.Err != nil || int64(len(e.ledgers[a.Pos.LedgerID].entries)) <= a.Pos.EntryID {
					t.Fatalf("append %d: %+v", tok, a)
				}
			}
		})
	}
}

// P7: with the metadata store down, writes continue on the current ledger
// past the rollover point; the rollover is retried and succeeds once the
// store is back.
func TestManagedLedgerRolloverDuringMetadataOutage(t *testing.T) {
	e := newFakeEnv(t)
	o := e.newOwner(Config{Rollover: RolloverPolicy{MaxEntries: 3}, RetryInterval: time.Second})
	o.open()
	first := o.tp.Current()
	e.metaDown = true
	o.append(10, 1)
	for tok := uint64(1); tok <= 10; tok++ {
		if a := o.ack(tok); a.Err != nil || a.Pos.LedgerID != first {
			t.Fatalf("append %d during outage: %+v", tok, a)
		}
	}
	st := o.tp.Stats()
	if st.RolloverFailures == 0 || st.LastRolloverError == "" || st.Ledgers != 1 {
		t.Fatalf("stats %+v", st)
	}
	if o.countEvents(EventRolloverFailed) == 0 {
		t.Fatal("no rollover-failed event")
	}
	// Retries are spaced: failures grow per retry, not per append.
	if st.RolloverFailures > 2 {
		t.Fatalf("%d rollover attempts without time passing", st.RolloverFailures)
	}
	e.metaDown = false
	e.advance(time.Second)
	o.tick()
	if got := ledgerIDs(o.tp.Ledgers()); len(got) != 2 || o.tp.Current() == first {
		t.Fatalf("after the outage: ledgers %v current %d", got, o.tp.Current())
	}
	if l := o.tp.Ledgers()[0]; l.Entries != 10 {
		t.Fatalf("first ledger %+v", l)
	}
	createdLedgers := 0
	for _, op := range e.ledgerOps {
		if op.Kind == LedgerCreate {
			createdLedgers++
		}
	}
	if createdLedgers != 2 {
		t.Fatalf("%d ledgers created: the spare should be reused across retries", createdLedgers)
	}
}

// threeLedgers opens a topic with a cursor from the start and fills ledgers
// of 3 entries: two closed, one current.
func threeLedgers(t *testing.T, cfg Config) (*fakeEnv, *owner, []LedgerInfo) {
	e := newFakeEnv(t)
	cfg.Rollover = RolloverPolicy{MaxEntries: 3}
	o := e.newOwner(cfg)
	o.open()
	if err := o.tp.OpenCursor("sub", true, e.now); err != nil {
		t.Fatal(err)
	}
	o.append(7, 10)
	ls := o.tp.Ledgers()
	if len(ls) != 3 {
		t.Fatalf("ledgers %+v", ls)
	}
	return e, o, ls
}

func TestManagedLedgerTrim(t *testing.T) {
	for _, early := range []bool{false, true} {
		e, o, ls := threeLedgers(t, Config{EarlyTrim: early})
		if err := o.tp.AckCumulative("sub", Position{ls[0].ID, 1}, e.now); err != nil {
			t.Fatal(err)
		}
		o.tick()
		_, deleted := e.ledgers[ls[0].ID]
		deleted = !deleted
		if deleted != early {
			t.Fatalf("early=%v: ledger %d deleted=%v with its last entry unacknowledged", early, ls[0].ID, deleted)
		}
		if early {
			continue
		}
		if err := o.tp.AckCumulative("sub", Position{ls[0].ID, 2}, e.now); err != nil {
			t.Fatal(err)
		}
		o.tick()
		if _, ok := e.ledgers[ls[0].ID]; ok {
			t.Fatal("consumed ledger not deleted")
		}
		if got := ledgerIDs(e.record("t").Ledgers); !slices.Equal(got, []int64{ls[1].ID, ls[2].ID}) {
			t.Fatalf("record %v", got)
		}
		if st := o.tp.Stats(); st.TrimmedLedgers != 1 || st.Ledgers != 2 {
			t.Fatalf("stats %+v", st)
		}
	}
}

func TestManagedLedgerTrimWaitsForRetentionAndMetadata(t *testing.T) {
	e, o, ls := threeLedgers(t, Config{Retention: RetentionPolicy{Time: time.Hour, Size: -1}})
	if err := o.tp.AckCumulative("sub", Position{ls[1].ID, 2}, e.now); err != nil {
		t.Fatal(err)
	}
	o.tick()
	if len(o.tp.Ledgers()) != 3 {
		t.Fatal("retention ignored")
	}
	e.advance(time.Hour)
	e.metaDown = true
	o.tick()
	if e.topicLedgerCount() != 3 {
		t.Fatal("ledger deleted before the list CAS succeeded")
	}
	e.metaDown = false
	o.tick()
	if e.topicLedgerCount() != 1 || len(o.tp.Ledgers()) != 1 {
		t.Fatalf("ledgers %d, list %v", e.topicLedgerCount(), ledgerIDs(o.tp.Ledgers()))
	}
}

// P8: one unacknowledged message pins every ledger after it.
func TestManagedLedgerStorageLockedByOneUnackedMessage(t *testing.T) {
	e, o, ls := threeLedgers(t, Config{})
	o.append(9, 10) // 16 entries in 6 ledgers
	for _, l := range o.tp.Ledgers() {
		for entry := range l.Entries {
			p := Position{l.ID, entry}
			if p == (Position{ls[0].ID, 0}) {
				continue // the poison message
			}
			if err := o.tp.Ack("sub", p, e.now); err != nil {
				t.Fatal(err)
			}
		}
	}
	before := o.tp.Stats()
	for range 5 {
		e.advance(time.Minute)
		o.append(2, 10)
		o.tick()
	}
	st := o.tp.Stats()
	c := st.Cursors[0]
	if st.TrimmedLedgers != 0 || st.StorageSize <= before.StorageSize {
		t.Fatalf("trimmed %d, storage %d -> %d", st.TrimmedLedgers, before.StorageSize, st.StorageSize)
	}
	if c.MarkDelete != BeforeLedger(ls[0].ID) || c.MarkDeleteAge < 5*time.Minute {
		t.Fatalf("cursor %+v", c)
	}
	if c.BacklogEntries != 11 { // the poison message and the 10 new ones
		t.Fatalf("backlog %d entries", c.BacklogEntries)
	}
	if err := o.tp.Ack("sub", Position{ls[0].ID, 0}, e.now); err != nil {
		t.Fatal(err)
	}
	o.tick()
	st = o.tp.Stats()
	if st.TrimmedLedgers == 0 || st.Cursors[0].MarkDeleteAge != 0 && st.Cursors[0].BacklogEntries == 0 {
		t.Fatalf("after acking the poison message: %+v", st)
	}
	if _, ok := e.ledgers[ls[0].ID]; ok {
		t.Fatal("first ledger not trimmed")
	}
}

// The other remedy for P8: delete the abandoned subscription.
func TestManagedLedgerDeleteCursorUnpinsStorage(t *testing.T) {
	e, o, ls := threeLedgers(t, Config{})
	if err := o.tp.OpenCursor("live", true, e.now); err != nil {
		t.Fatal(err)
	}
	if err := o.tp.AckCumulative("live", Position{ls[1].ID, 2}, e.now); err != nil {
		t.Fatal(err)
	}
	o.tick()
	if len(o.tp.Ledgers()) != 3 {
		t.Fatal("trimmed below the stuck cursor")
	}
	if err := o.tp.DeleteCursor("sub", e.now); err != nil {
		t.Fatal(err)
	}
	o.tick() // the record drops "sub" (then its key goes) and trims
	o.tick()
	if got := ledgerIDs(o.tp.Ledgers()); !slices.Equal(got, []int64{ls[2].ID}) {
		t.Fatalf("ledgers %v", got)
	}
	if _, ok := e.store[CursorKey("t", "sub")]; ok {
		t.Fatal("deleted cursor's record remains")
	}
	if rec := e.record("t"); !slices.Equal(rec.Cursors, []string{"live"}) {
		t.Fatalf("record cursors %v", rec.Cursors)
	}
}

func TestManagedLedgerBacklogQuota(t *testing.T) {
	quota := func(p BacklogQuotaPolicy) Config {
		// threeLedgers leaves 70 bytes of backlog: the next append breaks it.
		return Config{Quota: BacklogQuota{LimitSize: 65, Policy: p}, QuotaHoldTimeout: time.Minute}
	}
	t.Run("producer_exception", func(t *testing.T) {
		e, o, _ := threeLedgers(t, quota(ProducerException)) // 70 bytes of backlog
		tok := o.append(1, 10)[0]
		if err := o.ack(tok).Err; !errors.Is(err, ErrBacklogQuotaExceeded) {
			t.Fatalf("append over quota: %v", err)
		}
		_ = e
	})
	t.Run("producer_request_hold", func(t *testing.T) {
		e, o, ls := threeLedgers(t, quota(ProducerRequestHold))
		held := o.append(2, 10)
		if _, ok := o.acks[held[0]]; ok || o.tp.Stats().HeldAppends != 2 {
			t.Fatalf("append not held: %+v", o.tp.Stats())
		}
		// Consuming makes room: the held appends go through, before a new
		// one that arrives ahead of the tick.
		if err := o.tp.AckCumulative("sub", Position{ls[1].ID, 2}, e.now); err != nil {
			t.Fatal(err)
		}
		later := o.append(1, 10)[0]
		o.tick()
		for _, tok := range held {
			if a := o.ack(tok); a.Err != nil || !a.Pos.Less(o.ack(later).Pos) {
				t.Fatalf("released append %+v, later one %+v", a, o.ack(later))
			}
		}
		// Over quota again: this one times out.
		o.append(6, 10)
		tok := o.append(1, 10)[0]
		e.advance(30 * time.Second)
		o.tick()
		if _, ok := o.acks[tok]; ok {
			t.Fatal("answered before the hold timeout")
		}
		e.advance(30 * time.Second)
		o.tick()
		if err := o.ack(tok).Err; !errors.Is(err, ErrBacklogQuotaHoldTimeout) {
			t.Fatalf("held append: %v", err)
		}
	})
	t.Run("consumer_backlog_eviction", func(t *testing.T) {
		_, o, ls := threeLedgers(t, quota(ConsumerBacklogEviction))
		tok := o.append(1, 10)[0]
		if err := o.ack(tok).Err; err != nil {
			t.Fatalf("append with eviction: %v", err)
		}
		c := o.tp.Stats().Cursors[0]
		if c.MarkDelete.Less(Position{ls[0].ID, 0}) || o.tp.Stats().Evictions == 0 {
			t.Fatalf("cursor after eviction %+v", c)
		}
		if o.countEvents(EventBacklogEvicted) == 0 {
			t.Fatal("no eviction event")
		}
	})
}

func TestManagedLedgerBacklogQuotaAge(t *testing.T) {
	e, o, _ := threeLedgers(t, Config{Quota: BacklogQuota{LimitAge: time.Hour, Policy: ProducerException}})
	if err := o.ack(o.append(1, 1)[0]).Err; err != nil {
		t.Fatal(err)
	}
	e.advance(time.Hour + time.Second)
	if err := o.ack(o.append(1, 1)[0]).Err; !errors.Is(err, ErrBacklogQuotaExceeded) {
		t.Fatalf("append with hour-old backlog: %v", err)
	}
}

func TestManagedLedgerMessageTTL(t *testing.T) {
	e := newFakeEnv(t)
	o := e.newOwner(Config{Rollover: RolloverPolicy{MaxEntries: 3}, MessageTTL: 10 * time.Minute, TimeIndexInterval: time.Second})
	o.open()
	if err := o.tp.OpenCursor("sub", true, e.now); err != nil {
		t.Fatal(err)
	}
	o.append(4, 1) // ledger A: 0..2, ledger B: 0
	e.advance(5 * time.Minute)
	o.append(2, 1)       // ledger B: 1, 2
	ls := o.tp.Ledgers() // A: 0..2 closed at 12:00, B: 0..2 closed at 12:05, C
	e.advance(5*time.Minute + time.Second)
	o.tick()
	md, _ := o.tp.Cursor("sub")
	if got := md.MarkDelete(); got != (Position{ls[1].ID, 0}) {
		t.Fatalf("mark-delete after TTL %v, want %v (ledgers %+v)", got, Position{ls[1].ID, 0}, ls)
	}
	e.advance(5 * time.Minute)
	o.tick()
	if got := md.MarkDelete(); got.Less(Position{ls[1].ID, 2}) {
		t.Fatalf("mark-delete %v", got)
	}
	if o.countEvents(EventTTLExpired) == 0 {
		t.Fatal("no TTL event")
	}
}

func TestManagedLedgerCursorPersistenceAndTakeover(t *testing.T) {
	e, o, ls := threeLedgers(t, Config{CursorPersistInterval: time.Second, MaxRangesToPersist: 2})
	for _, p := range []Position{{ls[0].ID, 0}, {ls[0].ID, 2}, {ls[1].ID, 1}, {ls[2].ID, 0}} {
		if err := o.tp.Ack("sub", p, e.now); err != nil {
			t.Fatal(err)
		}
	}
	o.tick()
	if o.countEvents(EventAckRangesOverLimit) != 1 {
		t.Fatalf("events %v", o.events)
	}
	if _, ok := e.store[CursorKey("t", "sub")]; !ok {
		// Created when the cursor opened (dirty from the start), at once.
		t.Fatal("cursor never persisted")
	}
	c := o.tp.Stats().Cursors[0]
	if c.Holes != 3 || c.HolesPersisted != 2 || c.HolesInMemoryOnly != 1 {
		t.Fatalf("cursor stats %+v", c)
	}
	// Rate limit: another ack within the interval is not written yet.
	version := e.store[CursorKey("t", "sub")].version
	if err := o.tp.Ack("sub", Position{ls[1].ID, 0}, e.now); err != nil {
		t.Fatal(err)
	}
	o.tick()
	if e.store[CursorKey("t", "sub")].version != version {
		t.Fatal("cursor written twice within the interval")
	}

	b := e.newOwner(Config{Rollover: noRoll})
	b.open()
	b.tick() // claims the cursor records
	bc, ok := b.tp.Cursor("sub")
	if !ok {
		t.Fatal("cursor lost in takeover")
	}
	if bc.MarkDelete() != (Position{ls[0].ID, 0}) || !bc.IsAcked(Position{ls[1].ID, 1}) || bc.IsAcked(Position{ls[2].ID, 0}) {
		t.Fatalf("restored cursor md=%v ranges=%v", bc.MarkDelete(), slices.Collect(bc.AckedRanges()))
	}
	if p, _ := bc.NextUnacked(Position{}); p != (Position{ls[0].ID, 1}) {
		t.Fatalf("first redelivery %v", p)
	}
	// The old owner's cursor write now loses the CAS: fenced.
	e.advance(time.Second)
	o.tick()
	if !errors.Is(o.tp.Err(), ErrFenced) {
		t.Fatalf("old owner after a cursor write: %v", o.tp.Err())
	}
}

func TestManagedLedgerCloseFlushesCursors(t *testing.T) {
	e, o, ls := threeLedgers(t, Config{CursorPersistInterval: time.Hour})
	o.tick()
	if err := o.tp.AckCumulative("sub", Position{ls[1].ID, 0}, e.now); err != nil {
		t.Fatal(err)
	}
	o.tp.Close(e.now)
	o.drive()
	if done, err := o.tp.Done(); !done || err != nil {
		t.Fatalf("close: %v %v (%s)", done, err, o.tp.Phase())
	}
	b := e.newOwner(Config{Rollover: noRoll})
	b.open()
	bc, _ := b.tp.Cursor("sub")
	if bc.MarkDelete() != (Position{ls[1].ID, 0}) {
		t.Fatalf("mark-delete after close and reopen %v", bc.MarkDelete())
	}
	if e.record("t").Ledgers[2].Closed.IsZero() {
		t.Fatal("closed topic's last ledger recorded open") // recovered by b at least
	}
}

// A subscription created just before a clean close, with no tick in
// between to write the topic record that names it: the close writes the
// record, so the next owner keeps the subscription (and does not trim what
// it has not acknowledged).
func TestManagedLedgerCloseWritesANewCursorIntoTheRecord(t *testing.T) {
	e := newFakeEnv(t)
	a := e.newOwner(Config{Owner: "a", Rollover: noRoll})
	a.open()
	a.append(3, 10)
	if err := a.tp.OpenCursor("late", true, e.now); err != nil {
		t.Fatal(err)
	}
	a.tp.Close(e.now)
	a.drive()
	if done, err := a.tp.Done(); !done || err != nil {
		t.Fatalf("close: %v %v (%s)", done, err, a.tp.Phase())
	}
	if rec := e.record("t"); !slices.Contains(rec.Cursors, "late") {
		t.Fatalf("the record after close names cursors %v, not the one opened before it", rec.Cursors)
	}
	b := e.newOwner(Config{Owner: "b", Rollover: noRoll})
	b.open()
	if _, ok := b.tp.Cursor("late"); !ok {
		t.Fatal("the next owner does not know the subscription opened before the close")
	}
}

// A cursor pointer an earlier owner left for a subscription the record
// does not name (it crashed between writing the pointer and the record):
// when a client creates the subscription again, the new owner's first
// persist finds the key taken. An older owner's pointer does not fence it:
// it overwrites the pointer. (Before, the topic failed as fenced, on every
// load, for as long as a client used that name.)
func TestManagedLedgerOrphanCursorPointerIsReplaced(t *testing.T) {
	e := newFakeEnv(t)
	a := e.newOwner(Config{Owner: "a", Rollover: noRoll})
	a.open()
	a.append(3, 10)
	key := CursorKey("t", "orphan")
	e.store[key] = fakeKV{CursorPointer{Ledger: 999, Entry: -1, Epoch: 0}.marshal(), 1}
	b := e.newOwner(Config{Owner: "b", Rollover: noRoll, CursorPersistInterval: time.Second})
	b.open()
	if err := b.tp.OpenCursor("orphan", true, e.now); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		e.advance(time.Second)
		b.tick()
	}
	if err := b.tp.Err(); err != nil || b.tp.Phase() != "open" {
		t.Fatalf("new owner %s: %v", b.tp.Phase(), err)
	}
	ptr, ok := DecodeCursorPointer(e.store[key].value)
	if !ok || ptr.Epoch == 0 {
		t.Fatalf("the orphan pointer was not replaced: %+v", ptr)
	}
	if !slices.Contains(e.record("t").Cursors, "orphan") {
		t.Fatalf("the record does not name the subscription: %v", e.record("t").Cursors)
	}
}

func TestManagedLedgerAckValidation(t *testing.T) {
	e, o, ls := threeLedgers(t, Config{})
	if err := o.tp.Ack("sub", Position{ls[2].ID, 5}, e.now); !errors.Is(err, ErrNoSuchEntry) {
		t.Fatalf("ack beyond the end: %v", err)
	}
	if err := o.tp.Ack("nope", Position{ls[0].ID, 0}, e.now); !errors.Is(err, ErrNoSuchCursor) {
		t.Fatalf("ack on unknown cursor: %v", err)
	}
}

func TestManagedLedgerLocate(t *testing.T) {
	_, o, ls := threeLedgers(t, Config{})
	got := o.tp.Locate(Position{ls[0].ID, 1}, 5)
	want := []ReadSpan{{ls[0].ID, 1, 2, ls[0].ID}, {ls[1].ID, 0, 2, ls[1].ID}}
	if !slices.Equal(got, want) {
		t.Fatalf("Locate = %v, want %v", got, want)
	}
	if got := o.tp.Locate(Position{ls[2].ID, 1}, 5); len(got) != 0 {
		t.Fatalf("Locate past the end = %v", got)
	}
}

// A fenced owner's late cursor write is fenced by the new owner's recovery
// of its cursor ledger, and does not fence the new owner.
func TestManagedLedgerCursorWriteRaceAfterTakeover(t *testing.T) {
	e, a, ls := threeLedgers(t, Config{CursorPersistInterval: time.Second})
	a.tick()
	b := e.newOwner(Config{Rollover: noRoll, CursorPersistInterval: time.Second})
	b.open()
	e.advance(time.Second)
	if err := a.tp.AckCumulative("sub", Position{ls[0].ID, 0}, e.now); err != nil {
		t.Fatal(err)
	}
	a.tick() // appends to its cursor ledger, which b recovered: fenced
	if !errors.Is(a.tp.Err(), ErrFenced) {
		t.Fatalf("old owner: %v", a.tp.Err())
	}
	b.tick()
	b.tick()
	if b.tp.Err() != nil || b.tp.Phase() != "open" {
		t.Fatalf("new owner: %v", b.tp.Err())
	}
	if bc, _ := b.tp.Cursor("sub"); bc.IsAcked(Position{ls[0].ID, 0}) {
		t.Fatal("the fenced owner's acknowledgement reached the new owner")
	}
}

// A takeover that stalled after reading the topic record (a GC pause) and
// resumes after a newer owner took the topic over must not claim the
// cursor: claiming would recover, and so fence, the newer owner's cursor
// ledger. Found by the topic simulator (seed 3528), where a later zombie
// that had loaded the same record version as the stale opener then took the
// claim for its own write.
func TestManagedLedgerStaleOpenerLeavesNewerCursorAlone(t *testing.T) {
	e, a, ls := threeLedgers(t, Config{CursorPersistInterval: time.Second})
	a.tick()
	stale := e.newOwner(Config{Owner: "stale", Rollover: noRoll, CursorPersistInterval: time.Second})
	stale.tp.Open(e.now)
	stale.apply(stale.tp.Ready()) // reads the topic record, then stalls
	a.append(3, 10)               // a rollover: the record moves on
	b := e.newOwner(Config{Owner: "b", Rollover: noRoll, CursorPersistInterval: time.Second})
	b.open()
	b.tick()
	key := CursorKey("t", "sub")
	before, _ := DecodeCursorPointer(e.store[key].value)

	stale.drive() // resumes
	if !errors.Is(stale.tp.Err(), ErrFenced) {
		t.Fatalf("stale opener: phase %s, err %v", stale.tp.Phase(), stale.tp.Err())
	}
	if after, _ := DecodeCursorPointer(e.store[key].value); after != before {
		t.Fatalf("stale opener rewrote the cursor pointer: %+v -> %+v", before, after)
	}
	e.advance(time.Second)
	if err := b.tp.AckCumulative("sub", Position{ls[0].ID, 0}, e.now); err != nil {
		t.Fatal(err)
	}
	b.tick()
	b.tick()
	if b.tp.Err() != nil || b.tp.Phase() != "open" {
		t.Fatalf("new owner after the stale opener resumed: phase %s, err %v", b.tp.Phase(), b.tp.Err())
	}
}

// Appends that arrive during a rollover queue (bounded) and go to the new
// ledger once it is on the list.
func TestManagedLedgerAppendsDuringRollover(t *testing.T) {
	e := newFakeEnv(t)
	o := e.newOwner(Config{Rollover: RolloverPolicy{MaxEntries: 2}, MaxQueuedAppends: 2})
	o.open()
	first := o.tp.Current()
	o.append(1, 1)
	o.tp.Append(100, []byte("x"), e.now)
	rd := o.tp.Ready() // the append to the first ledger
	o.apply(rd)        // its ack starts the rollover: Create is now pending
	rd = o.tp.Ready()
	if len(rd.LedgerOps) != 1 || rd.LedgerOps[0].Kind != LedgerCreate {
		t.Fatalf("ready %+v", rd)
	}
	for tok := uint64(101); tok <= 103; tok++ {
		o.tp.Append(tok, []byte("y"), e.now)
	}
	queued := o.tp.Ready()
	if len(queued.LedgerOps) != 0 || len(queued.Acks) != 1 || !errors.Is(queued.Acks[0].Err, ErrTooManyQueued) {
		t.Fatalf("during rollover: %+v", queued)
	}
	o.apply(rd)
	o.drive()
	for tok := uint64(101); tok <= 102; tok++ {
		if a := o.ack(tok); a.Err != nil || a.Pos.LedgerID == first {
			t.Fatalf("queued append %d: %+v", tok, a)
		}
	}
}
