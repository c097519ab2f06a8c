package mlog

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// checkRangeSet verifies the RangeSet invariant and that its accessors agree.
func checkRangeSet(s *RangeSet) error {
	all := slices.Collect(s.All())
	if len(all) != s.Len() {
		return fmt.Errorf("All has %d ranges, Len %d", len(all), s.Len())
	}
	for i, r := range all {
		if r.Hi.Less(r.Lo) {
			return fmt.Errorf("range %d %v is empty", i, r)
		}
		if i > 0 {
			prev := all[i-1]
			if !prev.Hi.Less(r.Lo) || adjacentInLedger(prev.Hi, r.Lo) {
				return fmt.Errorf("ranges %v and %v overlap or touch", prev, r)
			}
		}
	}
	first, ok := s.First()
	if ok != (len(all) > 0) || (ok && first != all[0]) {
		return fmt.Errorf("First() = %v, %v; ranges %v", first, ok, all)
	}
	return nil
}

func rs(ranges ...Range) *RangeSet {
	var s RangeSet
	for _, r := range ranges {
		s.Add(r)
	}
	return &s
}

func rng(l1, e1, l2, e2 int64) Range { return Range{Position{l1, e1}, Position{l2, e2}} }

func TestRangeSetAdd(t *testing.T) {
	tests := []struct {
		name   string
		adds   []Range
		want   []Range
		merged Range // what the last Add returned
	}{
		{"one", []Range{rng(1, 5, 1, 5)}, []Range{rng(1, 5, 1, 5)}, rng(1, 5, 1, 5)},
		{"disjoint", []Range{rng(1, 5, 1, 5), rng(1, 7, 1, 7)}, []Range{rng(1, 5, 1, 5), rng(1, 7, 1, 7)}, rng(1, 7, 1, 7)},
		{"adjacent after", []Range{rng(1, 5, 1, 5), rng(1, 6, 1, 6)}, []Range{rng(1, 5, 1, 6)}, rng(1, 5, 1, 6)},
		{"adjacent before", []Range{rng(1, 6, 1, 6), rng(1, 5, 1, 5)}, []Range{rng(1, 5, 1, 6)}, rng(1, 5, 1, 6)},
		{"fills a hole", []Range{rng(1, 1, 1, 3), rng(1, 5, 1, 7), rng(1, 4, 1, 4)}, []Range{rng(1, 1, 1, 7)}, rng(1, 1, 1, 7)},
		{"swallows many", []Range{rng(1, 1, 1, 1), rng(1, 3, 1, 3), rng(1, 5, 1, 5), rng(1, 9, 1, 9), rng(1, 0, 1, 6)},
			[]Range{rng(1, 0, 1, 6), rng(1, 9, 1, 9)}, rng(1, 0, 1, 6)},
		{"inside existing", []Range{rng(1, 0, 1, 9), rng(1, 3, 1, 4)}, []Range{rng(1, 0, 1, 9)}, rng(1, 0, 1, 9)},
		{"same lo", []Range{rng(1, 3, 1, 4), rng(1, 3, 1, 8)}, []Range{rng(1, 3, 1, 8)}, rng(1, 3, 1, 8)},
		// Entry 0 of ledger 2 is not adjacent to any entry of ledger 1: only
		// the ledger list knows where ledger 1 ends.
		{"ledger boundary stays", []Range{rng(1, 9, 1, 9), rng(2, 0, 2, 0)}, []Range{rng(1, 9, 1, 9), rng(2, 0, 2, 0)}, rng(2, 0, 2, 0)},
		{"spanning joins", []Range{rng(1, 9, 1, 9), rng(2, 0, 2, 0), rng(1, 9, 2, 0)}, []Range{rng(1, 9, 2, 0)}, rng(1, 9, 2, 0)},
		{"spanning overlaps", []Range{rng(1, 2, 1, 3), rng(3, 4, 3, 9), rng(1, 5, 3, 5)},
			[]Range{rng(1, 2, 1, 3), rng(1, 5, 3, 9)}, rng(1, 5, 3, 9)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var s RangeSet
			var merged Range
			for _, r := range tt.adds {
				var ok bool
				if merged, ok = s.Add(r); !ok {
					t.Fatalf("Add(%v) added nothing", r)
				}
			}
			if got := slices.Collect(s.All()); !slices.Equal(got, tt.want) {
				t.Errorf("ranges %v, want %v", got, tt.want)
			}
			if merged != tt.merged {
				t.Errorf("last Add returned %v, want %v", merged, tt.merged)
			}
			if err := checkRangeSet(&s); err != nil {
				t.Error(err)
			}
		})
	}
}

func TestRangeSetEmptyRange(t *testing.T) {
	var s RangeSet
	if _, ok := s.Add(rng(1, 5, 1, 4)); ok || s.Len() != 0 {
		t.Errorf("empty range added: %v", slices.Collect(s.All()))
	}
	if s.Contains(Position{1, 5}) || s.FirstN(3) != nil {
		t.Error("empty set contains something")
	}
	if n, ok := s.Count(); n != 0 || !ok {
		t.Errorf("Count() = %d, %v", n, ok)
	}
}

func TestRangeSetRemoveThrough(t *testing.T) {
	base := []Range{rng(1, 2, 1, 4), rng(1, 8, 1, 9), rng(2, 5, 4, 1)}
	tests := []struct {
		p    Position
		want []Range
	}{
		{Position{1, 1}, base},
		{Position{1, 2}, []Range{rng(1, 3, 1, 4), rng(1, 8, 1, 9), rng(2, 5, 4, 1)}},
		{Position{1, 4}, []Range{rng(1, 8, 1, 9), rng(2, 5, 4, 1)}},
		{Position{1, 100}, []Range{rng(2, 5, 4, 1)}},
		{Position{3, 7}, []Range{rng(3, 8, 4, 1)}},
		{Position{4, 0}, []Range{rng(4, 1, 4, 1)}},
		{Position{4, 1}, nil},
	}
	for _, tt := range tests {
		s := rs(base...)
		s.RemoveThrough(tt.p)
		if got := slices.Collect(s.All()); !slices.Equal(got, tt.want) {
			t.Errorf("RemoveThrough(%v): %v, want %v", tt.p, got, tt.want)
		}
	}
}

func TestRangeSetCount(t *testing.T) {
	s := rs(rng(1, 0, 1, 9), rng(1, 20, 1, 20), rng(2, 0, 2, 4))
	if n, ok := s.Count(); n != 16 || !ok {
		t.Errorf("Count() = %d, %v; want 16", n, ok)
	}
	s.Add(rng(2, 10, 3, 1))
	if _, ok := s.Count(); ok {
		t.Error("Count() bounded with a range spanning ledgers")
	}
	if got := s.FirstN(2); !slices.Equal(got, []Range{rng(1, 0, 1, 9), rng(1, 20, 1, 20)}) {
		t.Errorf("FirstN(2) = %v", got)
	}
}

// naiveRanges is the obviously correct slow model of a RangeSet: a list of
// ranges, canonicalized after every change by sorting and merging neighbours.
type naiveRanges []Range

func (n naiveRanges) add(r Range) naiveRanges {
	all := append(slices.Clone(n), r)
	slices.SortFunc(all, func(a, b Range) int { return a.Lo.Compare(b.Lo) })
	var out naiveRanges
	for _, r := range all {
		if k := len(out) - 1; k >= 0 && mergeable(out[k], r) {
			out[k].Hi = maxPosition(out[k].Hi, r.Hi)
			continue
		}
		out = append(out, r)
	}
	return out
}

func (n naiveRanges) removeThrough(p Position) naiveRanges {
	var out naiveRanges
	for _, r := range n {
		switch {
		case !p.Less(r.Hi): // r <= p: gone
		case !p.Less(r.Lo):
			out = append(out, Range{Position{p.LedgerID, p.EntryID + 1}, r.Hi})
		default:
			out = append(out, r)
		}
	}
	return out
}

// TestRangeSetQuick runs thousands of random operation sequences against two
// oracles: a map of every position in a small domain (membership), and the
// naive range list (exact ranges, including merges across adjacency).
func TestRangeSetQuick(t *testing.T) {
	const (
		sequences = 3000
		steps     = 60
		entries   = 16
	)
	ledgers := []int64{1, 2, 5} // ledger ids are not contiguous
	for seq := range sequences {
		seed := uint64(seq)
		r := rand.New(rand.NewPCG(seed, 0x5eed))
		var s RangeSet
		var naive naiveRanges
		oracle := map[Position]bool{}
		domain := func() Position {
			return Position{ledgers[r.IntN(len(ledgers))], int64(r.IntN(entries))}
		}
		for step := range steps {
			var op string
			switch k := r.IntN(10); {
			case k < 7: // a short range within a ledger, often a single position
				lo := domain()
				hi := Position{lo.LedgerID, min(lo.EntryID+int64(r.IntN(3)), entries-1)}
				op = fmt.Sprintf("Add(%v)", Range{lo, hi})
				merged, _ := s.Add(Range{lo, hi})
				naive = naive.add(Range{lo, hi})
				for e := lo.EntryID; e <= hi.EntryID; e++ {
					oracle[Position{lo.LedgerID, e}] = true
				}
				if !merged.Contains(lo) || !merged.Contains(hi) {
					t.Fatalf("seed %d step %d: %s returned %v", seed, step, op, merged)
				}
			case k < 8: // a range that may span ledgers
				lo, hi := domain(), domain()
				if hi.Less(lo) {
					lo, hi = hi, lo
				}
				op = fmt.Sprintf("Add(%v)", Range{lo, hi})
				s.Add(Range{lo, hi})
				naive = naive.add(Range{lo, hi})
				for _, l := range ledgers {
					for e := range int64(entries) {
						if p := (Position{l, e}); (Range{lo, hi}).Contains(p) {
							oracle[p] = true
						}
					}
				}
			default:
				p := domain()
				if r.IntN(4) == 0 {
					p = BeforeLedger(p.LedgerID)
				}
				op = fmt.Sprintf("RemoveThrough(%v)", p)
				s.RemoveThrough(p)
				naive = naive.removeThrough(p)
				for q := range oracle {
					if !p.Less(q) {
						delete(oracle, q)
					}
				}
			}
			fail := func(format string, args ...any) {
				t.Fatalf("seed %d step %d after %s: %s\nset   %v\nnaive %v", seed, step, op,
					fmt.Sprintf(format, args...), slices.Collect(s.All()), naive)
			}
			if err := checkRangeSet(&s); err != nil {
				fail("%v", err)
			}
			if got := slices.Collect(s.All()); !slices.Equal(got, []Range(naive)) {
				fail("ranges differ from the naive model")
			}
			for _, l := range ledgers {
				for e := range int64(entries) {
					p := Position{l, e}
					if s.Contains(p) != oracle[p] {
						fail("Contains(%v) = %v, oracle %v", p, s.Contains(p), oracle[p])
					}
				}
			}
			if n := r.IntN(s.Len() + 2); !slices.Equal(s.FirstN(n), naive[:min(n, len(naive))]) {
				fail("FirstN(%d) = %v", n, s.FirstN(n))
			}
			if n, ok := s.Count(); ok && n != int64(len(oracle)) {
				fail("Count() = %d, oracle has %d positions", n, len(oracle))
			}
		}
	}
}
