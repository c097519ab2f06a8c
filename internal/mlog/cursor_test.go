package mlog

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// ledgerList is a test topic: ledgers in order with their entry counts; only
// the first visible ones exist yet (a topic grows by rolling over).
type ledgerList struct {
	ids     []int64
	sizes   []int64
	visible int
}

func newLedgerList(idsAndSizes ...int64) *ledgerList {
	l := &ledgerList{}
	for i := 0; i < len(idsAndSizes); i += 2 {
		l.ids = append(l.ids, idsAndSizes[i])
		l.sizes = append(l.sizes, idsAndSizes[i+1])
	}
	l.visible = len(l.ids)
	return l
}

func (l *ledgerList) Next(p Position) (Position, bool) {
	for i := range l.visible {
		id, size := l.ids[i], l.sizes[i]
		switch {
		case size == 0 || id < p.LedgerID:
		case id == p.LedgerID:
			if p.EntryID < size-1 {
				return Position{id, max(p.EntryID+1, 0)}, true
			}
		default:
			return Position{id, 0}, true
		}
	}
	return Position{}, false
}

// entries lists every visible entry in order.
func (l *ledgerList) entries() []Position {
	var out []Position
	for i := range l.visible {
		for e := range l.sizes[i] {
			out = append(out, Position{l.ids[i], e})
		}
	}
	return out
}

func newTestCursor(t testing.TB, md Position, opts CursorOptions) *Cursor {
	t.Helper()
	c, err := NewCursor("sub", md, opts)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// checkCursor verifies the cursor's invariant.
func checkCursor(c *Cursor) error {
	if err := checkRangeSet(&c.acked); err != nil {
		return err
	}
	first, ok := c.acked.First()
	if !ok {
		return nil
	}
	if !c.markDelete.Less(first.Lo) {
		return fmt.Errorf("first range %v not above mark-delete %v", first, c.markDelete)
	}
	if c.noEntriesBetween(c.markDelete, first.Lo) {
		return fmt.Errorf("first range %v should be folded into mark-delete %v", first, c.markDelete)
	}
	var prev Range
	for i, r := range slices.Collect(c.acked.All()) {
		if i > 0 && c.noEntriesBetween(prev.Hi, r.Lo) {
			return fmt.Errorf("ranges %v and %v have no entry between them", prev, r)
		}
		prev = r
	}
	return nil
}

func p(l, e int64) Position { return Position{l, e} }

func TestCursorAck(t *testing.T) {
	// Ledger 3: entries 0-9; ledger 5: empty; ledger 8: entries 0-4.
	ledgers := newLedgerList(3, 10, 5, 0, 8, 5)
	type ack struct {
		lo, hi     Position
		cumulative bool
		advanced   bool
	}
	single := func(l, e int64, advanced bool) ack { return ack{p(l, e), p(l, e), false, advanced} }
	tests := []struct {
		name       string
		acks       []ack
		markDelete Position
		holes      int
		acked      []Position
		unacked    []Position
	}{
		{
			name:       "in order",
			acks:       []ack{single(3, 0, true), single(3, 1, true), single(3, 2, true)},
			markDelete: p(3, 2), holes: 0,
		},
		{
			name:       "out of order then the hole fills",
			acks:       []ack{single(3, 1, false), single(3, 3, false), single(3, 5, false), single(3, 2, false), single(3, 4, false), single(3, 0, true)},
			markDelete: p(3, 5), holes: 0,
			unacked: []Position{p(3, 6)},
		},
		{
			name:       "hole fill advances across many ranges and ledgers",
			acks:       []ack{single(8, 0, false), single(3, 9, false), single(3, 1, false), {p(3, 3), p(3, 7), false, false}, single(3, 2, false), single(3, 8, false), single(3, 0, true)},
			markDelete: p(8, 0), holes: 0,
			unacked: []Position{p(8, 1)},
		},
		{
			name:       "storage locked by one unacked message (P8)",
			acks:       []ack{{p(3, 1), p(3, 9), false, false}, {p(8, 0), p(8, 4), false, false}},
			markDelete: BeforeLedger(3), holes: 1,
			acked:   []Position{p(3, 1), p(8, 4)},
			unacked: []Position{p(3, 0)},
		},
		{
			name:       "P8 unlocked",
			acks:       []ack{{p(3, 1), p(3, 9), false, false}, {p(8, 0), p(8, 4), false, false}, single(3, 0, true)},
			markDelete: p(8, 4), holes: 0,
		},
		{
			name:       "ranges bridge an empty ledger",
			acks:       []ack{single(3, 9, false), single(8, 0, false), single(3, 5, false)},
			markDelete: BeforeLedger(3), holes: 2, // [3:5] and [3:9, 8:0]
			acked:   []Position{p(3, 5), p(3, 9), p(8, 0)},
			unacked: []Position{p(3, 4), p(3, 6), p(3, 8), p(8, 1)},
		},
		{
			name:       "acks at or below mark-delete are ignored",
			acks:       []ack{{p(3, 0), p(3, 4), false, true}, single(3, 2, false), {p(3, 1), p(3, 3), false, false}},
			markDelete: p(3, 4), holes: 0,
		},
		{
			name:       "range overlapping mark-delete",
			acks:       []ack{{p(3, 0), p(3, 4), false, true}, {p(3, 2), p(3, 6), false, true}},
			markDelete: p(3, 6), holes: 0,
		},
		{
			name:       "range spanning ledgers",
			acks:       []ack{{p(3, 7), p(8, 1), false, false}, {p(3, 0), p(3, 5), false, true}},
			markDelete: p(3, 5), holes: 1,
			acked:   []Position{p(3, 7), p(3, 9), p(8, 0), p(8, 1)},
			unacked: []Position{p(3, 6), p(8, 2)},
		},
		{
			name:       "empty range",
			acks:       []ack{{p(3, 5), p(3, 4), false, false}},
			markDelete: BeforeLedger(3), holes: 0,
			unacked: []Position{p(3, 4), p(3, 5)},
		},
		{
			name:       "cumulative",
			acks:       []ack{{p(3, 4), p(3, 4), true, true}, {p(3, 2), p(3, 2), true, false}},
			markDelete: p(3, 4), holes: 0,
		},
		{
			name:       "cumulative drops ranges below and folds the next",
			acks:       []ack{single(3, 2, false), {p(3, 4), p(3, 6), false, false}, single(3, 9, false), {p(3, 3), p(3, 3), true, true}},
			markDelete: p(3, 6), holes: 1,
			acked:   []Position{p(3, 9)},
			unacked: []Position{p(3, 7)},
		},
		{
			name:       "cumulative inside a range folds its rest",
			acks:       []ack{{p(3, 2), p(8, 3), false, false}, {p(3, 5), p(3, 5), true, true}},
			markDelete: p(8, 3), holes: 0,
			unacked: []Position{p(8, 4)},
		},
		{
			name:       "cumulative inside a range",
			acks:       []ack{{p(3, 2), p(3, 4), false, false}, {p(3, 7), p(8, 3), false, false}, {p(3, 3), p(3, 3), true, true}},
			markDelete: p(3, 4), holes: 1,
			acked:   []Position{p(3, 7), p(8, 3)},
			unacked: []Position{p(3, 5), p(3, 6), p(8, 4)},
		},
		{
			name:       "cumulative to a ledger's end folds the next ledger's range",
			acks:       []ack{{p(8, 0), p(8, 2), false, false}, {p(3, 9), p(3, 9), true, true}},
			markDelete: p(8, 2), holes: 0,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newTestCursor(t, BeforeLedger(3), CursorOptions{Ledgers: ledgers})
			for i, a := range tt.acks {
				var advanced bool
				switch {
				case a.cumulative:
					advanced = c.AckCumulative(a.lo)
				case a.lo == a.hi:
					advanced = c.Ack(a.lo)
				default:
					advanced = c.AckRange(a.lo, a.hi)
				}
				if advanced != a.advanced {
					t.Errorf("ack %d (%v-%v): advanced = %v, want %v", i, a.lo, a.hi, advanced, a.advanced)
				}
				if err := checkCursor(c); err != nil {
					t.Fatalf("after ack %d: %v", i, err)
				}
			}
			if c.MarkDelete() != tt.markDelete {
				t.Errorf("MarkDelete() = %v, want %v", c.MarkDelete(), tt.markDelete)
			}
			if c.Holes() != tt.holes {
				t.Errorf("Holes() = %d, want %d; ranges %v", c.Holes(), tt.holes, slices.Collect(c.AckedRanges()))
			}
			for _, q := range tt.acked {
				if !c.IsAcked(q) {
					t.Errorf("IsAcked(%v) = false", q)
				}
			}
			for _, q := range tt.unacked {
				if c.IsAcked(q) {
					t.Errorf("IsAcked(%v) = true", q)
				}
			}
		})
	}
}

func TestCursorNextUnacked(t *testing.T) {
	ledgers := newLedgerList(3, 10, 5, 0, 8, 5)
	c := newTestCursor(t, BeforeLedger(3), CursorOptions{Ledgers: ledgers})
	c.AckRange(p(3, 0), p(3, 2))
	c.AckRange(p(3, 4), p(3, 9))
	c.AckRange(p(8, 0), p(8, 1))
	c.Ack(p(8, 4))
	tests := []struct {
		from Position
		want Position
		ok   bool
	}{
		{BeforeLedger(0), p(3, 3), true}, // below mark-delete: the first unacked
		{p(3, 0), p(3, 3), true},
		{p(3, 3), p(3, 3), true},
		{p(3, 4), p(8, 2), true}, // skips the rest of ledger 3 and the empty ledger 5
		{p(5, 0), p(8, 2), true}, // a position that holds no entry
		{p(8, 3), p(8, 3), true},
		{p(8, 4), Position{}, false}, // acked, and the last entry
		{p(9, 0), Position{}, false},
	}
	for _, tt := range tests {
		got, ok := c.NextUnacked(tt.from)
		if got != tt.want || ok != tt.ok {
			t.Errorf("NextUnacked(%v) = %v, %v; want %v, %v", tt.from, got, ok, tt.want, tt.ok)
		}
	}
}

// TestCursorGrowingTopic acks entries of a ledger that is still the last one,
// then rolls over: ranges on both sides of the boundary join once the next
// ledger exists, and the mark-delete position crosses it.
func TestCursorGrowingTopic(t *testing.T) {
	ledgers := newLedgerList(3, 5, 4, 0, 6, 3)
	ledgers.visible = 1
	c := newTestCursor(t, BeforeLedger(3), CursorOptions{Ledgers: ledgers})
	c.AckRange(p(3, 2), p(3, 4))
	ledgers.visible = 3 // rolled over twice; ledger 4 stayed empty
	c.Ack(p(6, 0))
	if c.Holes() != 1 {
		t.Fatalf("Holes() = %d, want 1 (ranges %v)", c.Holes(), slices.Collect(c.AckedRanges()))
	}
	c.AckRange(p(3, 0), p(3, 1))
	if c.MarkDelete() != p(6, 0) || c.Holes() != 0 {
		t.Errorf("MarkDelete() = %v, Holes() = %d; want 6:0, 0", c.MarkDelete(), c.Holes())
	}
}

func TestCursorLimit(t *testing.T) {
	c := newTestCursor(t, BeforeLedger(1), CursorOptions{MaxRangesToPersist: 3})
	ackOdd := func(from, to int64) {
		for e := from; e <= to; e += 2 {
			c.Ack(p(1, e))
		}
	}
	ackOdd(1, 5) // 3 ranges: at the limit, not over it
	if c.LimitCrossed() || c.RangesInMemoryOnly() != 0 {
		t.Fatalf("at the limit: crossed %v, in memory only %d", c.LimitCrossed(), c.RangesInMemoryOnly())
	}
	ackOdd(7, 11) // 6 ranges
	if !c.LimitCrossed() {
		t.Error("LimitCrossed() = false after crossing")
	}
	if c.LimitCrossed() {
		t.Error("LimitCrossed() = true twice for one crossing")
	}
	if c.RangesInMemoryOnly() != 3 {
		t.Errorf("RangesInMemoryOnly() = %d, want 3", c.RangesInMemoryOnly())
	}
	ackOdd(13, 13) // still over: no new crossing
	if c.LimitCrossed() {
		t.Error("LimitCrossed() = true while staying over the limit")
	}
	c.AckCumulative(p(1, 8)) // 9 folds in too: ranges 11, 13
	if c.Holes() != 2 || c.RangesInMemoryOnly() != 0 || c.LimitCrossed() {
		t.Errorf("below the limit: holes %d, in memory only %d", c.Holes(), c.RangesInMemoryOnly())
	}
	ackOdd(15, 17)
	if !c.LimitCrossed() {
		t.Error("LimitCrossed() = false on the second crossing")
	}
}

func TestNewCursorName(t *testing.T) {
	if _, err := NewCursor(strings.Repeat("n", MaxCursorNameLen+1), p(1, 0), CursorOptions{}); !errors.Is(err, ErrNameTooLong) {
		t.Errorf("long name: err = %v, want ErrNameTooLong", err)
	}
	c := newTestCursor(t, p(1, 0), CursorOptions{})
	if c.Name() != "sub" || c.MaxRangesToPersist() != DefaultMaxUnackedRangesToPersist {
		t.Errorf("Name() = %q, MaxRangesToPersist() = %d", c.Name(), c.MaxRangesToPersist())
	}
}

// cursorModel is the obviously correct cursor: the set of acknowledged
// entries of the topic, read in entry order.
type cursorModel struct {
	ledgers *ledgerList
	initial Position // the cursor's starting mark-delete position
	acked   map[Position]bool
}

func (m *cursorModel) markDelete() Position {
	md := m.initial
	for _, e := range m.ledgers.entries() {
		if !md.Less(e) {
			continue
		}
		if !m.acked[e] {
			break
		}
		md = e
	}
	return md
}

// runs returns the maximal runs of acknowledged entries above mark-delete.
func (m *cursorModel) runs() [][]Position {
	md := m.markDelete()
	var out [][]Position
	inRun := false
	for _, e := range m.ledgers.entries() {
		switch {
		case !md.Less(e):
		case m.acked[e] && inRun:
			out[len(out)-1] = append(out[len(out)-1], e)
		case m.acked[e]:
			out = append(out, []Position{e})
			inRun = true
		default:
			inRun = false
		}
	}
	return out
}

// TestCursorQuick runs random acknowledgement sequences, with rollovers and
// snapshot/restore cycles, against cursorModel.
func TestCursorQuick(t *testing.T) {
	const sequences, steps, limit = 1500, 80, 3
	for seq := range sequences {
		seed := uint64(seq)
		r := rand.New(rand.NewPCG(seed, 0xc0de))
		var idsAndSizes []int64
		id := int64(r.IntN(3))
		for range 2 + r.IntN(4) {
			id += 1 + int64(r.IntN(3))
			idsAndSizes = append(idsAndSizes, id, int64(r.IntN(6))) // some ledgers empty
		}
		ledgers := newLedgerList(idsAndSizes...)
		ledgers.visible = 1
		m := &cursorModel{ledgers: ledgers, initial: BeforeLedger(ledgers.ids[0]), acked: map[Position]bool{}}
		c := newTestCursor(t, m.initial, CursorOptions{Ledgers: ledgers, MaxRangesToPersist: limit})
		over, crossedPending := false, false
		for step := range steps {
			entries := ledgers.entries()
			var op string
			before := c.MarkDelete()
			var advanced bool
			switch k := r.IntN(20); {
			case k < 2 && ledgers.visible < len(ledgers.ids):
				ledgers.visible++
				op = "rollover"
			case len(entries) == 0:
				continue
			case k < 14:
				e := entries[r.IntN(len(entries))]
				op = fmt.Sprintf("Ack(%v)", e)
				advanced = c.Ack(e)
				m.acked[e] = true
			case k < 17:
				i := r.IntN(len(entries))
				j := min(i+r.IntN(6), len(entries)-1)
				op = fmt.Sprintf("AckRange(%v, %v)", entries[i], entries[j])
				advanced = c.AckRange(entries[i], entries[j])
				for _, e := range entries[i : j+1] {
					m.acked[e] = true
				}
			case k < 18:
				e := entries[r.IntN(len(entries))]
				op = fmt.Sprintf("AckCumulative(%v)", e)
				advanced = c.AckCumulative(e)
				for _, q := range entries {
					if !e.Less(q) {
						m.acked[q] = true
					}
				}
			default:
				keep := r.IntN(5)
				op = fmt.Sprintf("Snapshot(%d)+Restore", keep)
				data, info := c.Snapshot(keep)
				runs := m.runs()
				if info.Persisted != min(keep, len(runs)) || info.Dropped != len(runs)-info.Persisted {
					t.Fatalf("seed %d step %d: %s: info %+v with %d runs", seed, step, op, info, len(runs))
				}
				restored, err := Restore(data, CursorOptions{Ledgers: ledgers, MaxRangesToPersist: limit})
				if err != nil {
					t.Fatalf("seed %d step %d: %s: %v", seed, step, op, err)
				}
				for _, run := range runs[info.Persisted:] {
					for _, e := range run {
						delete(m.acked, e) // dropped ranges are redelivered
					}
				}
				c = restored
				over, crossedPending = false, false
			}
			fail := func(format string, args ...any) {
				t.Fatalf("seed %d step %d after %s: %s\nledgers %v/%v visible %d\nmark-delete %v ranges %v",
					seed, step, op, fmt.Sprintf(format, args...), ledgers.ids, ledgers.sizes, ledgers.visible,
					c.MarkDelete(), slices.Collect(c.AckedRanges()))
			}
			if err := checkCursor(c); err != nil {
				fail("%v", err)
			}
			if want := m.markDelete(); c.MarkDelete() != want {
				fail("mark-delete %v, model %v", c.MarkDelete(), want)
			}
			if advanced != (c.MarkDelete() != before) && !strings.HasPrefix(op, "Snapshot") {
				fail("advanced = %v, mark-delete %v -> %v", advanced, before, c.MarkDelete())
			}
			runs := m.runs()
			if c.Holes() != len(runs) {
				fail("Holes() = %d, model has %d runs", c.Holes(), len(runs))
			}
			entries = ledgers.entries()
			var ackedAbove int64
			for _, e := range entries {
				if c.IsAcked(e) != (m.acked[e] || !m.initial.Less(e)) {
					fail("IsAcked(%v) = %v", e, c.IsAcked(e))
				}
				if m.acked[e] && c.MarkDelete().Less(e) {
					ackedAbove++
				}
			}
			if n, ok := c.AckedCount(); ok && n != ackedAbove {
				fail("AckedCount() = %d, model %d", n, ackedAbove)
			}
			from := BeforeLedger(ledgers.ids[0])
			if len(entries) > 0 && r.IntN(2) == 0 {
				from = entries[r.IntN(len(entries))]
			}
			want, wantOK := Position{}, false
			for _, e := range entries {
				if !e.Less(from) && !c.IsAcked(e) {
					want, wantOK = e, true
					break
				}
			}
			if got, ok := c.NextUnacked(from); got != want || ok != wantOK {
				fail("NextUnacked(%v) = %v, %v; want %v, %v", from, got, ok, want, wantOK)
			}
			nowOver := len(runs) > limit
			crossedPending = crossedPending || (nowOver && !over)
			over = nowOver
			if c.RangesInMemoryOnly() != max(0, len(runs)-limit) {
				fail("RangesInMemoryOnly() = %d", c.RangesInMemoryOnly())
			}
			if r.IntN(3) == 0 {
				if got := c.LimitCrossed(); got != crossedPending {
					fail("LimitCrossed() = %v, want %v", got, crossedPending)
				}
				crossedPending = false
			}
		}
	}
}

// BenchmarkCursorAck acknowledges 100,000 entries (two ledgers of the default
// 50,000-entry rollover) into a fresh cursor per iteration. "random" acks them
// in a random order, which peaks at about 25,000 ranges; "in-order" is the
// baseline of a consumer that acks as it goes.
func BenchmarkCursorAck(b *testing.B) {
	const perLedger, total = 50000, 100000
	ledgers := newLedgerList(7, perLedger, 9, perLedger)
	entries := ledgers.entries()
	shuffled := slices.Clone(entries)
	rand.New(rand.NewPCG(1, 2)).Shuffle(len(shuffled), func(i, j int) {
		shuffled[i], shuffled[j] = shuffled[j], shuffled[i]
	})
	for _, bc := range []struct {
		name  string
		order []Position
	}{{"random", shuffled}, {"in-order", entries}} {
		b.Run(bc.name, func(b *testing.B) {
			maxHoles := 0
			for b.Loop() {
				c := newTestCursor(b, BeforeLedger(7), CursorOptions{Ledgers: ledgers})
				for i, e := range bc.order {
					c.Ack(e)
					if i%1000 == 0 {
						maxHoles = max(maxHoles, c.Holes())
					}
				}
				if c.MarkDelete() != p(9, perLedger-1) || c.Holes() != 0 {
					b.Fatalf("after acking everything: mark-delete %v, holes %d", c.MarkDelete(), c.Holes())
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*total), "ns/ack")
			b.ReportMetric(float64(maxHoles), "max-holes")
		})
	}
}
