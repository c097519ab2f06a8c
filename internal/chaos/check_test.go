package chaos

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

// historyBuilder writes hand-made histories: each call advances a clock by
// one millisecond, so the order of the calls is the real-time order.
type historyBuilder struct {
	now    time.Time
	events []Event
}

func newHistoryBuilder() *historyBuilder {
	return &historyBuilder{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
}

func (b *historyBuilder) add(e Event) *historyBuilder {
	b.now = b.now.Add(time.Millisecond)
	e.Time = b.now
	b.events = append(b.events, e)
	return b
}

func (b *historyBuilder) invoke(producer int, seq int64, value string, partition int32) *historyBuilder {
	return b.add(Event{Kind: KindInvoke, Producer: producer, Seq: seq, Value: value, Partition: partition})
}

func (b *historyBuilder) ok(value string, partition int32, offset int64) *historyBuilder {
	return b.add(Event{Kind: KindOK, Value: value, Partition: partition, Offset: offset})
}

func (b *historyBuilder) outcome(kind Kind, value string, partition int32) *historyBuilder {
	return b.add(Event{Kind: kind, Value: value, Partition: partition, Err: "x"})
}

// read is a complete final read of partition: values at offsets 0, 1, ...
func (b *historyBuilder) read(partition int32, values ...string) *historyBuilder {
	b.add(Event{Kind: KindReadStart, Partition: partition, Offset: int64(len(values))})
	for i, v := range values {
		b.add(Event{Kind: KindRead, Partition: partition, Offset: int64(i), Value: v})
	}
	return b.add(Event{Kind: KindReadEnd, Partition: partition, Offset: int64(len(values))})
}

// TestCheck runs the checker over hand-made histories, each with one kind
// of anomaly (or none), and expects exactly that anomaly to be counted: the
// checker catches what it claims to and nothing else.
func TestCheck(t *testing.T) {
	type counts struct {
		lost, duplicated, reordered, offsetConflicts, failedPresent, phantoms int
		illegal                                                               bool
	}
	for _, tc := range []struct {
		name    string
		history *historyBuilder
		want    counts
	}{
		{
			name: "clean: two producers, two partitions, an unknown that landed and one that did not",
			history: newHistoryBuilder().
				invoke(1, 1, "p1-1", 0).invoke(2, 1, "p2-1", 1).ok("p1-1", 0, 0).ok("p2-1", 1, 0).
				invoke(1, 2, "p1-2", 0).invoke(2, 2, "p2-2", 1).ok("p1-2", 0, 1).outcome(KindInfo, "p2-2", 1).
				invoke(1, 3, "p1-3", 0).outcome(KindInfo, "p1-3", 0).
				invoke(1, 4, "p1-4", 0).outcome(KindFail, "p1-4", 0).
				read(0, "p1-1", "p1-2").read(1, "p2-1", "p2-2"),
		},
		{
			name: "lost: an acknowledged record is not read back",
			history: newHistoryBuilder().
				invoke(1, 1, "p1-1", 0).ok("p1-1", 0, 0).invoke(1, 2, "p1-2", 0).ok("p1-2", 0, 1).
				read(0, "p1-1"),
			want: counts{lost: 1, illegal: true},
		},
		{
			name: "duplicated: a record is in the log twice",
			history: newHistoryBuilder().
				invoke(1, 1, "p1-1", 0).ok("p1-1", 0, 0).invoke(1, 2, "p1-2", 0).ok("p1-2", 0, 1).
				read(0, "p1-1", "p1-2", "p1-2"),
			want: counts{duplicated: 1, illegal: true},
		},
		{
			name: "reordered: a producer's later record sits before its earlier one",
			history: newHistoryBuilder().
				invoke(1, 1, "p1-1", 0).invoke(1, 2, "p1-2", 0).ok("p1-2", 0, 0).ok("p1-1", 0, 1).
				read(0, "p1-2", "p1-1"),
			want: counts{reordered: 1},
		},
		{
			name: "offset reused: acknowledged at an offset that holds another record",
			history: newHistoryBuilder().
				invoke(1, 1, "p1-1", 0).ok("p1-1", 0, 0).invoke(2, 1, "p2-1", 0).ok("p2-1", 0, 0).
				read(0, "p2-1", "p1-1"),
			want: counts{offsetConflicts: 2, illegal: true},
		},
		{
			name: "failed but present: a definite failure is in the log",
			history: newHistoryBuilder().
				invoke(1, 1, "p1-1", 0).outcome(KindFail, "p1-1", 0).
				read(0, "p1-1"),
			want: counts{failedPresent: 1, illegal: true},
		},
		{
			name: "phantom: the log holds a record nobody sent",
			history: newHistoryBuilder().
				invoke(1, 1, "p1-1", 0).ok("p1-1", 0, 0).
				read(0, "p1-1", "ghost"),
			want: counts{phantoms: 1, illegal: true},
		},
		{
			// Offsets and contents agree, but p2-1 was sent only after p1-1
			// was acknowledged at offset 1, yet sits at offset 0: no
			// real-time order explains it. Only porcupine sees this.
			name: "not linearizable: a later append got an earlier offset",
			history: newHistoryBuilder().
				invoke(1, 1, "p1-1", 0).ok("p1-1", 0, 1).
				invoke(2, 1, "p2-1", 0).ok("p2-1", 0, 0).
				read(0, "p2-1", "p1-1"),
			want: counts{illegal: true},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := Check(tc.history.events)
			got := counts{r.Lost, r.Duplicated, r.Reordered, r.OffsetConflicts, r.FailedPresent, r.Phantoms,
				r.Linearizable[0] == linearizableIllegal || r.Linearizable[0] == linearizableIllegalDirect}
			if got != tc.want {
				t.Fatalf("got %+v, want %+v\nlinearizable: %v\nexamples:\n%s", got, tc.want, r.Linearizable, strings.Join(r.Examples, "\n"))
			}
			wantValid := tc.want == counts{}
			if r.Valid() != wantValid {
				t.Fatalf("Valid() = %v, want %v", r.Valid(), wantValid)
			}
		})
	}
}

// TestCheckPermits: a configuration that permits loss (acks=1) gets the
// loss, its offset conflicts, non-linearizable partitions and duplicates
// counted but not failed; reordering and phantoms still fail it.
func TestCheckPermits(t *testing.T) {
	acks1 := Permits{Loss: true, Duplicates: true, Why: "acks=1"}
	// p1-2 acknowledged at offset 1 by a leader that died; the new leader
	// wrote p2-1 there; p1-3 was retried and written twice.
	lossy := newHistoryBuilder().
		invoke(1, 1, "p1-1", 0).ok("p1-1", 0, 0).invoke(1, 2, "p1-2", 0).ok("p1-2", 0, 1).
		invoke(2, 1, "p2-1", 0).ok("p2-1", 0, 1).invoke(1, 3, "p1-3", 0).ok("p1-3", 0, 3).
		read(0, "p1-1", "p2-1", "p1-3", "p1-3")
	reordered := newHistoryBuilder().
		invoke(1, 1, "p1-1", 0).invoke(1, 2, "p1-2", 0).ok("p1-2", 0, 0).ok("p1-1", 0, 1).
		read(0, "p1-2", "p1-1")
	phantom := newHistoryBuilder().invoke(1, 1, "p1-1", 0).ok("p1-1", 0, 0).read(0, "p1-1", "ghost")
	for _, tc := range []struct {
		name    string
		history *historyBuilder
		permits Permits
		valid   bool
	}{
		{"loss under acks=all", lossy, Permits{}, false},
		{"loss under acks=1", lossy, acks1, true},
		{"duplicates only permitted, loss not", lossy, Permits{Duplicates: true}, false},
		{"reordered under acks=1", reordered, acks1, false},
		{"phantom under acks=1", phantom, acks1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := Check(tc.history.events)
			r.Permits = tc.permits
			if r.Valid() != tc.valid {
				t.Fatalf("Valid() = %v, want %v (lost=%d duplicated=%d offset-conflicts=%d reordered=%d phantoms=%d linearizable=%v)",
					r.Valid(), tc.valid, r.Lost, r.Duplicated, r.OffsetConflicts, r.Reordered, r.Phantoms, r.Linearizable)
			}
		})
	}
	r := Check(lossy.events)
	if r.Lost != 1 || r.Duplicated != 1 || r.OffsetConflicts == 0 {
		t.Fatalf("lossy history: lost=%d duplicated=%d offset-conflicts=%d, want 1, 1, >0", r.Lost, r.Duplicated, r.OffsetConflicts)
	}
}

// TestCheckCounts: the totals the summary line reports.
func TestCheckCounts(t *testing.T) {
	h := newHistoryBuilder().
		invoke(1, 1, "p1-1", 0).ok("p1-1", 0, 0).
		invoke(1, 2, "p1-2", 0).outcome(KindInfo, "p1-2", 0).
		invoke(1, 3, "p1-3", 0).outcome(KindFail, "p1-3", 0).
		invoke(1, 4, "p1-4", 0). // no outcome at all: unknown
		read(0, "p1-1", "p1-2")
	r := Check(h.events)
	if r.Invoked != 4 || r.Acked != 1 || r.Unknown != 2 || r.Failed != 1 || r.UnknownPresent != 1 || r.Read != 2 || !r.Valid() {
		t.Fatalf("%+v", r)
	}
}

// TestHistoryRoundTrip: what History writes, ReadHistory reads back.
func TestHistoryRoundTrip(t *testing.T) {
	path := t.TempDir() + "/history.jsonl"
	h, err := CreateHistory(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range newHistoryBuilder().invoke(1, 1, "p1-1", 2).ok("p1-1", 2, 7).read(2, "p1-1").events {
		h.Add(e)
	}
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	data := readFile(t, path)
	got, err := ReadHistory(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	want := h.Events()
	if len(got) != len(want) {
		t.Fatalf("%d events, want %d", len(got), len(want))
	}
	for i := range got {
		if !got[i].Time.Equal(want[i].Time) || got[i].Kind != want[i].Kind || got[i].Value != want[i].Value || got[i].Offset != want[i].Offset {
			t.Fatalf("event %d: %+v, want %+v", i, got[i], want[i])
		}
	}
}

// TestUnavailable: whole seconds without an acknowledgement.
func TestUnavailable(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var events []Event
	for _, s := range []int{0, 1, 5, 6} { // seconds 2, 3 and 4 without acks
		at := t0.Add(time.Duration(s) * time.Second)
		v := "v" + string(rune('a'+s))
		events = append(events, Event{Time: at, Kind: KindInvoke, Value: v}, Event{Time: at.Add(time.Millisecond), Kind: KindOK, Value: v})
	}
	if got := Check(events).Unavailable; got != 3*time.Second {
		t.Fatalf("unavailable %v, want 3s", got)
	}
}

// TestCheckUnfinishedRead: an interrupted run's acknowledged records on a
// partition that was never read back are unread, not lost.
func TestCheckUnfinishedRead(t *testing.T) {
	h := newHistoryBuilder().
		invoke(1, 1, "p1-1", 0).ok("p1-1", 0, 0).
		invoke(1, 2, "p1-2", 1).ok("p1-2", 1, 0).
		read(0, "p1-1")
	r := Check(h.events)
	if r.Lost != 0 || r.Unread != 1 || !r.Valid() {
		t.Fatalf("%+v", r)
	}
}

// TestDirectCheckAgreesWithPorcupine: on random small histories of
// determinate appends, the direct check used for large partitions gives
// porcupine's verdict.
func TestDirectCheckAgreesWithPorcupine(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	illegal := 0
	for round := range 2000 {
		n := 1 + rng.IntN(6)
		var ops []porcupine.Operation
		var s logState
		for i := range n {
			call := rng.Int64N(20)
			ops = append(ops, porcupine.Operation{ClientId: i, Input: appendInput{fmt.Sprint(i)}, Call: call,
				Output: appendOutput{int64(i)}, Return: call + rng.Int64N(10)})
			s = s.append(fmt.Sprint(i))
		}
		withRead := append(append([]porcupine.Operation(nil), ops...), porcupine.Operation{
			Input: readInput{}, Call: 100, Output: readOutput{s}, Return: 101})
		want := porcupine.CheckOperations(logModel, withRead)
		got := directCheck(ops) == linearizableDirect
		if got != want {
			t.Fatalf("round %d: direct %v, porcupine %v: %+v", round, got, want, ops)
		}
		if !want {
			illegal++
		}
	}
	if illegal == 0 {
		t.Fatal("no illegal history drawn: the comparison proves nothing")
	}
}

// TestCheckCommits: a committed offset answered below a commit that was
// acknowledged before the fetch started is an anomaly; an answer that
// raced the acknowledgement, or an unknown commit, is not.
func TestCheckCommits(t *testing.T) {
	commit := func(b *historyBuilder, kind Kind, p int32, o int64) *historyBuilder {
		return b.add(Event{Kind: KindCommitInvoke, Partition: p, Offset: o}).add(Event{Kind: kind, Partition: p, Offset: o})
	}
	observe := func(b *historyBuilder, p int32, o int64) *historyBuilder {
		return b.add(Event{Kind: KindCommitted, Partition: p, Offset: o})
	}
	for _, tc := range []struct {
		name      string
		build     func(b *historyBuilder)
		backwards int
	}{
		{"monotone", func(b *historyBuilder) {
			commit(b, KindCommitOK, 0, 10)
			observe(b, 0, 10)
			commit(b, KindCommitOK, 0, 20)
			observe(b, 0, 25) // a later commit's answer may already show
		}, 0},
		{"lost commit", func(b *historyBuilder) {
			commit(b, KindCommitOK, 0, 10)
			commit(b, KindCommitOK, 0, 20)
			observe(b, 0, 10)
		}, 1},
		{"vanished group", func(b *historyBuilder) {
			commit(b, KindCommitOK, 1, 5)
			observe(b, 1, -1)
		}, 1},
		{"other partition", func(b *historyBuilder) {
			commit(b, KindCommitOK, 0, 10)
			observe(b, 1, 0)
		}, 0},
		{"unknown commit does not count", func(b *historyBuilder) {
			commit(b, KindCommitOK, 0, 10)
			commit(b, KindCommitInfo, 0, 20)
			observe(b, 0, 10)
		}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newHistoryBuilder()
			tc.build(b)
			r := Check(b.events)
			if r.CommitsBackwards != tc.backwards {
				t.Fatalf("went back %d, want %d (%v)", r.CommitsBackwards, tc.backwards, r.Examples)
			}
			if r.Valid() != (tc.backwards == 0) {
				t.Fatalf("Valid() = %v with %d commits gone back", r.Valid(), r.CommitsBackwards)
			}
		})
	}

	// The fetch was asked for before the commit's acknowledgement came
	// back: it may answer the older offset.
	b := newHistoryBuilder()
	commit(b, KindCommitOK, 0, 10)
	b.add(Event{Kind: KindCommitInvoke, Partition: 0, Offset: 20})
	start := b.now.Add(time.Millisecond / 2)
	b.add(Event{Kind: KindCommitOK, Partition: 0, Offset: 20})
	b.events = append(b.events, Event{Time: start, Kind: KindCommitted, Partition: 0, Offset: 10})
	if r := Check(b.events); r.CommitsBackwards != 0 {
		t.Fatalf("a fetch concurrent with the commit: went back %d (%v)", r.CommitsBackwards, r.Examples)
	}
}

// TestCheckConsumed: a record the group member consumed during the run must
// be in the final read at the offset it was consumed at. One that is gone,
// or replaced by another record there, is an anomaly even where loss of
// acknowledged records is permitted; a partition whose read did not finish
// is not judged.
func TestCheckConsumed(t *testing.T) {
	consumed := func(b *historyBuilder, p int32, o int64, v string) *historyBuilder {
		return b.add(Event{Kind: KindConsumed, Partition: p, Offset: o, Value: v})
	}
	for _, tc := range []struct {
		name     string
		build    func(b *historyBuilder)
		vanished int
	}{
		{"still there", func(b *historyBuilder) {
			b.invoke(0, 1, "a", 0).ok("a", 0, 0).invoke(0, 2, "b", 0).ok("b", 0, 1)
			consumed(b, 0, 0, "a")
			consumed(b, 0, 1, "b")
			consumed(b, 0, 0, "a") // consumed again after a rebalance
			b.read(0, "a", "b")
		}, 0},
		{"gone", func(b *historyBuilder) {
			b.invoke(0, 1, "a", 0).ok("a", 0, 0).invoke(0, 2, "b", 0).ok("b", 0, 1)
			consumed(b, 0, 1, "b")
			b.read(0, "a")
		}, 1},
		{"another record at its offset", func(b *historyBuilder) {
			b.invoke(0, 1, "a", 0).ok("a", 0, 0).invoke(0, 2, "b", 0).outcome(KindInfo, "b", 0).invoke(1, 1, "c", 0).ok("c", 0, 1)
			consumed(b, 0, 1, "b")
			b.read(0, "a", "c")
		}, 1},
		{"read not finished", func(b *historyBuilder) {
			b.invoke(0, 1, "a", 1).ok("a", 1, 0)
			consumed(b, 1, 0, "a")
			b.add(Event{Kind: KindReadStart, Partition: 1, Offset: 1})
		}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newHistoryBuilder()
			tc.build(b)
			r := Check(b.events)
			if r.ConsumedVanished != tc.vanished {
				t.Fatalf("vanished %d, want %d (%v)", r.ConsumedVanished, tc.vanished, r.Examples)
			}
			r.Permits = Permits{Loss: true, Duplicates: true, Why: "acks=1"}
			if r.Valid() != (tc.vanished == 0) {
				t.Fatalf("Valid() = %v with %d consumed records vanished, loss permitted", r.Valid(), r.ConsumedVanished)
			}
		})
	}
}
