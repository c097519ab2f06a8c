package mlogclient

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"quire/internal/ledger"
	"quire/internal/ledger/ledgerclient"
	"quire/internal/loop"
	"quire/internal/mlog"
	"quire/internal/testutil"
)

// inboxBound is how many posted functions the loop's queue holds (the
// default Config.InboxBound).
const inboxBound = loop.DefaultQueueBound

// The loop's inbox is full of appends from callers (and more callers wait
// for room) while the current ledger has no writer: each append sent to it
// is answered by the loop to its own core — a self-post — at the moment the
// inbox is full. The loop must not wait for itself: every append is
// answered, the ones sent to the writerless ledger with an error and the
// rest, after the rollover that error causes, in order. (The 1,024-slot
// channel loop this replaced deadlocked here, its goroutine blocked in
// post from runLedger.)
func TestFullInboxAndASelfPostDoNotDeadlock(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	srv := startCluster(t)
	tp := openTopic(t, ctx, srv, "a", mlog.Config{Retention: keepAll})
	var w *ledgerclient.Writer
	if err := tp.call(ctx, func() {
		cur := tp.core.Current()
		w = tp.writers[cur]
		delete(tp.writers, cur)
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Close(context.Background()) })

	// Park the loop, then fill its inbox.
	parked, release := make(chan struct{}), make(chan struct{})
	go func() { _ = tp.call(ctx, func() { close(parked); <-release }) }()
	waitChan(t, ctx, parked, "the loop to park", tp)
	const appends = 3 * inboxBound
	accepted := make(chan struct{}, appends)
	answers := make(chan mlog.AppendAck, appends)
	for i := range appends {
		go func() {
			tp.AppendAsync(payload(i), func(a mlog.AppendAck) { answers <- a })
			accepted <- struct{}{}
		}()
	}
	// inboxBound appends accepted: the inbox is full, and the other
	// appenders are waiting for room, which they take as soon as the loop
	// frees it.
	for range inboxBound {
		waitChan(t, ctx, accepted, "the inbox to fill", tp)
	}
	close(release)

	var last mlog.Position
	failed, ok := 0, 0
	for range appends {
		a := waitChan(t, ctx, answers, "every append answered", tp)
		switch {
		case a.Err == nil:
			if !last.Less(a.Pos) {
				t.Fatalf("ack at %v after %v", a.Pos, last)
			}
			last = a.Pos
			ok++
		case errors.Is(a.Err, ledger.ErrClosed):
			failed++ // sent to the ledger without a writer
		default:
			t.Fatalf("append: %v", a.Err)
		}
	}
	if failed == 0 || ok == 0 {
		t.Fatalf("%d appends failed on the writerless ledger, %d succeeded: the self-post path was not exercised", failed, ok)
	}
	if _, err := tp.Append(ctx, payload(0)); err != nil {
		t.Fatal(err)
	}
}

// waitChan receives from ch; past ctx's deadline it stops the managed
// ledger (so cleanup does not hang on a deadlocked loop) and fails.
func waitChan[T any](t *testing.T, ctx context.Context, ch <-chan T, what string, tp *ManagedLedger) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-ctx.Done():
		go tp.stop()
		t.Fatalf("waiting for %s: %v (deadlock?)", what, ctx.Err())
		panic("unreachable")
	}
}

// warnings records the messages logged at Warn or above: the shell logs
// every failure, fencing and failed rollover event there.
type warnings struct {
	mu   sync.Mutex
	msgs []string
}

func (w *warnings) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }
func (w *warnings) WithAttrs([]slog.Attr) slog.Handler           { return w }
func (w *warnings) WithGroup(string) slog.Handler                { return w }
func (w *warnings) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	b.WriteString(r.Message)
	r.Attrs(func(a slog.Attr) bool {
		b.WriteString(" " + a.String())
		return true
	})
	w.mu.Lock()
	defer w.mu.Unlock()
	w.msgs = append(w.msgs, b.String())
	return nil
}

// backpressureTopic opens a managed ledger whose ledger writer accepts 16
// appends in flight and whose core queues at most 64.
func backpressureTopic(t *testing.T, ctx context.Context) (*ManagedLedger, *warnings) {
	t.Helper()
	srv := startCluster(t)
	cfg := config(t, srv, "a", mlog.Config{Retention: keepAll, MaxQueuedAppends: 64},
		func(c *ledgerclient.Config) { c.MaxInFlight = 16 })
	warned := &warnings{}
	cfg.Logger = slog.New(warned)
	tp, err := Open(ctx, "tenant/ns/topic", cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = tp.Close(cctx)
	})
	if err := tp.call(ctx, func() {}); err != nil {
		t.Fatal(err)
	}
	return tp, warned
}

// checkCalm fails unless tp is open on its first ledger with no rollover
// and nothing logged as a failure.
func checkCalm(t *testing.T, ctx context.Context, tp *ManagedLedger, warned *warnings) mlog.Stats {
	t.Helper()
	s, err := tp.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if s.Phase != "open" || s.Rollovers != 0 || s.RolloverFailures != 0 || s.Ledgers != 1 {
		t.Fatalf("phase %s, %d rollovers, %d failed, %d ledgers: a bound reached must not roll over or fail",
			s.Phase, s.Rollovers, s.RolloverFailures, s.Ledgers)
	}
	warned.mu.Lock()
	defer warned.mu.Unlock()
	if len(warned.msgs) > 0 {
		t.Fatalf("warnings: %q", warned.msgs)
	}
	return s
}

// 2,000 appends from 8 concurrent producers, each admitted first, on a
// ledger writer that takes 16 at a time: all acknowledged, each producer's
// in its order and all in position order, none refused or lost, no
// rollover, no failure — the bound was reached (appends queued) and was
// only backpressure.
func TestAdmittedAppendsWaitForTheWriter(t *testing.T) {
	const producers, each = 8, 250
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	tp, warned := backpressureTopic(t, ctx)
	var (
		mu        sync.Mutex
		last      mlog.Position
		next      [producers]int // each producer's next append to be answered
		positions = make([]mlog.Position, producers*each)
		answered  int
		problems  []string // the first few
	)
	for g := range producers {
		go func() {
			for i := range each {
				p, err := tp.Admit(ctx)
				if err != nil {
					t.Errorf("admit: %v", err)
					return
				}
				p.AppendAsync(payload(g*each+i), func(a mlog.AppendAck) {
					mu.Lock()
					defer mu.Unlock()
					answered++
					var problem string
					switch {
					case a.Err != nil:
						problem = fmt.Sprintf("producer %d append %d: %v", g, i, a.Err)
					case next[g] != i:
						problem = fmt.Sprintf("producer %d: append %d answered when %d was due", g, i, next[g])
					case !last.Less(a.Pos):
						problem = fmt.Sprintf("ack at %v after %v", a.Pos, last)
					}
					if problem != "" && len(problems) < 10 {
						problems = append(problems, problem)
					}
					next[g] = i + 1
					last = a.Pos
					positions[g*each+i] = a.Pos
				})
			}
		}()
	}
	testutil.WaitFor(t, "every append answered", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return answered == producers*each
	})
	if len(problems) > 0 {
		t.Fatalf("appends answered wrong (the first %d):\n%s", len(problems), strings.Join(problems, "\n"))
	}
	s := checkCalm(t, ctx, tp, warned)
	if s.AppendsQueuedTotal == 0 || s.BusyRejected != 0 || s.Entries != producers*each {
		t.Fatalf("%d appends queued (the writer's bound was never reached?), %d refused, %d entries",
			s.AppendsQueuedTotal, s.BusyRejected, s.Entries)
	}
	byPos := map[mlog.Position]int{}
	for i, p := range positions {
		byPos[p] = i
	}
	got := readAll(t, ctx, tp, mlog.Position{})
	if len(got) != producers*each {
		t.Fatalf("read %d entries", len(got))
	}
	for _, e := range got {
		if i, ok := byPos[e.Pos]; !ok || string(e.Payload) != string(payload(i)) {
			t.Fatalf("entry at %v: %q", e.Pos, e.Payload)
		}
	}
}

// Without admission, 2,000 appends at once overrun the queue: the excess is
// refused with mlog.ErrBusy (counted), and that is all — the rest are
// written in order, nothing rolls over or fails, and the next append is
// taken.
func TestAppendsWithoutAdmissionMayGetErrBusy(t *testing.T) {
	const appends = 2000
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	tp, warned := backpressureTopic(t, ctx)
	answers := make(chan mlog.AppendAck, appends)
	// Park the loop so that the burst arrives at once.
	parked, release := make(chan struct{}), make(chan struct{})
	go func() { _ = tp.call(ctx, func() { close(parked); <-release }) }()
	waitChan(t, ctx, parked, "the loop to park", tp)
	submitted := make(chan struct{})
	go func() {
		for i := range appends {
			tp.AppendAsync(payload(i), func(a mlog.AppendAck) { answers <- a })
		}
		close(submitted)
	}()
	close(release)
	waitChan(t, ctx, submitted, "the burst submitted", tp)
	var last mlog.Position
	busy := 0
	for range appends {
		a := waitChan(t, ctx, answers, "every append answered", tp)
		switch {
		case errors.Is(a.Err, mlog.ErrBusy):
			busy++
		case a.Err != nil:
			t.Fatalf("append: %v", a.Err)
		case !last.Less(a.Pos):
			t.Fatalf("ack at %v after %v", a.Pos, last)
		default:
			last = a.Pos
		}
	}
	s := checkCalm(t, ctx, tp, warned)
	if busy == 0 || s.BusyRejected != int64(busy) || s.Entries != int64(appends-busy) {
		t.Fatalf("%d refused with ErrBusy, stats: %d refused, %d entries", busy, s.BusyRejected, s.Entries)
	}
	if _, err := tp.Append(ctx, payload(appends)); err != nil {
		t.Fatal(err)
	}
}

// A permit is spent once: its room comes back when its append is answered
// (or on Release), and Admit waits, bounded by its context, while every
// permit is out.
func TestAdmitWaitsForRoom(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	srv := startCluster(t)
	tp := openTopic(t, ctx, srv, "a", mlog.Config{Retention: keepAll, MaxQueuedAppends: 2})
	first, err := tp.Admit(ctx)
	if err != nil {
		t.Fatal(err)
	}
	second, err := tp.Admit(ctx)
	if err != nil {
		t.Fatal(err)
	}
	short, cancelShort := context.WithCancel(ctx)
	cancelShort()
	if _, err := tp.Admit(short); !errors.Is(err, context.Canceled) {
		t.Fatalf("admit with every permit out: %v", err)
	}
	second.Release()
	third, err := tp.Admit(ctx)
	if err != nil {
		t.Fatal(err)
	}
	acked := make(chan mlog.AppendAck, 1)
	first.AppendAsync(payload(0), func(a mlog.AppendAck) { acked <- a })
	if a := waitChan(t, ctx, acked, "the admitted append", tp); a.Err != nil {
		t.Fatal(a.Err)
	}
	fourth, err := tp.Admit(ctx) // first's room is back
	if err != nil {
		t.Fatal(err)
	}
	fourth.Release()
	third.Release()
	func() {
		defer func() {
			if recover() == nil {
				t.Error("a permit used twice did not panic")
			}
		}()
		third.Release()
	}()
}
