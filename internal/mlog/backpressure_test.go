package mlog

import (
	"errors"
	"math/rand/v2"
	"testing"
)

// slowWriter carries out a managed ledger's Ready like fakeEnv, except that
// appends wait until the test answers them (in order, as a ledger writer
// does): the core then has appends in flight and must keep them within
// MaxWriterInFlight.
type slowWriter struct {
	t      *testing.T
	o      *owner
	limit  int
	sent   []LedgerOp  // appends carried out by nobody yet, oldest first
	acks   []AppendAck // in the order the core gave them
	events []Event
	most   int // the most appends that were in flight at once
}

func newSlowWriter(t *testing.T, cfg Config) *slowWriter {
	e := newFakeEnv(t)
	w := &slowWriter{t: t, o: e.newOwner(cfg), limit: cfg.MaxWriterInFlight}
	w.o.tp.Open(e.now)
	w.drive()
	if w.o.tp.Phase() != "open" {
		t.Fatalf("phase %s after open", w.o.tp.Phase())
	}
	return w
}

func (w *slowWriter) drive() {
	e, tp := w.o.e, w.o.tp
	for rd := tp.Ready(); !rd.Empty(); rd = tp.Ready() {
		w.acks = append(w.acks, rd.Acks...)
		w.events = append(w.events, rd.Events...)
		for _, op := range rd.MetaOps {
			tp.StepMeta(e.doMeta(op), e.now)
		}
		for _, op := range rd.LedgerOps {
			if op.Kind == LedgerAppend {
				w.sent = append(w.sent, op)
				continue
			}
			tp.StepLedger(e.doLedger(op), e.now)
		}
		w.most = max(w.most, len(w.sent))
		if len(w.sent) > w.limit {
			w.t.Fatalf("%d appends in flight, MaxWriterInFlight %d", len(w.sent), w.limit)
		}
	}
}

// answer carries out the n oldest appends in flight.
func (w *slowWriter) answer(n int) {
	n = min(n, len(w.sent))
	ops := w.sent[:n]
	w.sent = w.sent[n:]
	for _, op := range ops {
		w.o.tp.StepLedger(w.o.e.doLedger(op), w.o.e.now)
	}
	w.drive()
}

func (w *slowWriter) append(token uint64) {
	w.o.tp.Append(token, []byte{byte(token)}, w.o.e.now)
	w.drive()
}

// checkCalm fails unless the managed ledger is open on its first ledger:
// no rollover (attempted or done) and no failure.
func (w *slowWriter) checkCalm() {
	w.t.Helper()
	s := w.o.tp.Stats()
	if s.Phase != "open" || s.Rollovers != 0 || s.RolloverFailures != 0 || s.Ledgers != 1 {
		w.t.Fatalf("phase %s, %d rollovers, %d failed, %d ledgers: a bound reached must not roll over or fail",
			s.Phase, s.Rollovers, s.RolloverFailures, s.Ledgers)
	}
	for _, ev := range w.events {
		switch ev.Kind {
		case EventFailed, EventFenced, EventRolloverFailed, EventRolledOver:
			w.t.Fatalf("event %v", ev)
		}
	}
}

// 2,000 appends from a producer that keeps its unanswered appends within
// the queue (what mlogclient's admission does), with the writer taking 16
// at a time and answering in random batches: at most 16 are ever in flight,
// the rest wait in the queue, and all are acknowledged in order on the one
// ledger — no ErrBusy, no rollover, no failure.
func TestWriterInFlightLimitIsBackpressure(t *testing.T) {
	const appends, inFlight, queued = 2000, 16, 64
	w := newSlowWriter(t, Config{Retention: RetentionPolicy{Time: -1, Size: -1},
		MaxWriterInFlight: inFlight, MaxQueuedAppends: queued})
	rng := rand.New(rand.NewPCG(1, 2))
	next := uint64(1)
	for len(w.acks) < appends {
		// Submit while the producer has room (answered ones free it).
		for next <= appends && int(next-1)-len(w.acks) < queued {
			w.append(next)
			next++
		}
		w.answer(1 + rng.IntN(inFlight))
	}
	for i, a := range w.acks {
		if a.Err != nil || a.Token != uint64(i+1) || a.Pos.EntryID != int64(i) {
			t.Fatalf("ack %d: %+v", i, a)
		}
	}
	s := w.o.tp.Stats()
	if w.most != inFlight || s.AppendsQueuedTotal == 0 || s.BusyRejected != 0 {
		t.Fatalf("at most %d in flight, %d queued in all, %d refused: the bound was not reached, or refused",
			w.most, s.AppendsQueuedTotal, s.BusyRejected)
	}
	if s.AppendsInFlight != 0 || s.QueuedAppends != 0 {
		t.Fatalf("stats after the last ack: %d in flight, %d queued", s.AppendsInFlight, s.QueuedAppends)
	}
	w.checkCalm()
}

// A burst beyond in-flight + queue: the excess is answered ErrBusy at once
// (counted), nothing fails or rolls over, and what was taken is written in
// order; appends after it are taken again.
func TestFullQueueAnswersErrBusy(t *testing.T) {
	const burst, inFlight, queued = 2000, 16, 64
	w := newSlowWriter(t, Config{Retention: RetentionPolicy{Time: -1, Size: -1},
		MaxWriterInFlight: inFlight, MaxQueuedAppends: queued})
	for tok := uint64(1); tok <= burst; tok++ {
		w.o.tp.Append(tok, []byte("x"), w.o.e.now)
	}
	w.drive()
	s := w.o.tp.Stats()
	if len(w.sent) != inFlight || s.AppendsInFlight != inFlight || s.QueuedAppends != queued ||
		s.BusyRejected != burst-inFlight-queued || s.AppendsQueuedTotal != queued {
		t.Fatalf("%d sent, stats %+v", len(w.sent), s)
	}
	for _, a := range w.acks {
		if !errors.Is(a.Err, ErrBusy) || a.Token <= inFlight+queued {
			t.Fatalf("ack before any write: %+v", a)
		}
	}
	busy := len(w.acks)
	w.append(burst + 1) // the queue is still full
	if n := len(w.acks); n != busy+1 || !errors.Is(w.acks[n-1].Err, ErrBusy) {
		t.Fatalf("append to a full queue: %+v", w.acks[busy:])
	}
	w.answer(1)
	w.append(burst + 2) // room again: queued behind the others
	for len(w.sent) > 0 {
		w.answer(3)
	}
	written := w.acks[busy+1:]
	if len(written) != inFlight+queued+1 {
		t.Fatalf("%d written after the burst", len(written))
	}
	for i, a := range written {
		want := uint64(i + 1)
		if i == len(written)-1 {
			want = burst + 2
		}
		if a.Err != nil || a.Token != want || a.Pos.EntryID != int64(i) {
			t.Fatalf("write %d: %+v", i, a)
		}
	}
	w.checkCalm()
}
