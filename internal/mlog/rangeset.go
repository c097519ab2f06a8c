package mlog

import (
	"fmt"
	"iter"
	"math"

	// google/btree is already in the module graph (etcd depends on it). We
	// use it rather than a sorted slice because a cursor can hold ~25,000
	// ranges under random acknowledgement of 100,000 messages; inserting into
	// the middle of a slice then moves ~400 KB per ack, a B-tree moves none.
	"github.com/google/btree"

	"quire/internal/invariants"
)

// Range is the closed range [Lo, Hi] of positions, Lo <= Hi. It is a range in
// the (ledger, entry) order, so it may span ledgers: [3:7, 9:2] holds every
// entry of the topic from 3:7 to 9:2, including all of the ledgers between.
type Range struct {
	Lo, Hi Position
}

// String formats r as "[3:7, 9:2]".
func (r Range) String() string { return "[" + r.Lo.String() + ", " + r.Hi.String() + "]" }

// Contains reports whether p lies in r.
func (r Range) Contains(p Position) bool { return !p.Less(r.Lo) && !r.Hi.Less(p) }

// Count returns the number of positions in r when r lies within one ledger
// (where every position is an entry); false when r spans ledgers, whose
// entry counts only the ledger list knows.
func (r Range) Count() (int64, bool) {
	if r.Lo.LedgerID != r.Hi.LedgerID {
		return 0, false
	}
	n := uint64(r.Hi.EntryID) - uint64(r.Lo.EntryID) + 1 // exact modulo 2^64
	if n == 0 || n > math.MaxInt64 {
		return 0, false
	}
	return int64(n), true
}

// mergeable reports whether a and b (a.Lo <= b.Lo) overlap or touch, so that
// their union is one range. Touching means b starts at the entry right after
// a's end in the same ledger; the set never looks across ledger boundaries
// (the cursor bridges those, because only it can ask the ledger list).
func mergeable(a, b Range) bool {
	return !a.Hi.Less(b.Lo) || adjacentInLedger(a.Hi, b.Lo)
}

// RangeSet is a set of positions kept as disjoint closed ranges in order.
// The zero value is an empty set ready to use. Not safe for concurrent use.
//
// Invariant: for consecutive ranges a, b: a.Lo <= a.Hi < b.Lo, and b.Lo is
// not the entry right after a.Hi in the same ledger (such ranges are merged).
// So within one ledger the ranges are maximal and Len counts the gaps between
// them; across a ledger boundary two ranges stay separate unless an Add joins
// them (see Cursor, which bridges boundaries that hold no entries).
//
// Add, Contains and the removals cost O(log n) for n ranges (plus O(log n) per
// range that an Add absorbs); First O(log n); Count and All O(n).
type RangeSet struct {
	tree *btree.BTreeG[Range] // ordered by Lo; nil while empty and never added to
	// checksSkipped counts invariant checks skipped since the last full one
	// (-tags invariants only; see checkInvariants).
	checksSkipped int
}

// btreeDegree gives nodes of up to 63 ranges (about 2 KB): few levels for
// 10^5 ranges and cheap node copies on insert.
const btreeDegree = 32

func byLo(a, b Range) bool { return a.Lo.Less(b.Lo) }

func (s *RangeSet) init() {
	if s.tree == nil {
		s.tree = btree.NewG(btreeDegree, byLo)
	}
}

// Len returns the number of ranges.
func (s *RangeSet) Len() int {
	if s.tree == nil {
		return 0
	}
	return s.tree.Len()
}

// floor returns the range with the largest Lo <= p.
func (s *RangeSet) floor(p Position) (r Range, ok bool) {
	if s.tree == nil {
		return Range{}, false
	}
	s.tree.DescendLessOrEqual(Range{Lo: p}, func(item Range) bool {
		r, ok = item, true
		return false
	})
	return r, ok
}

// ceilingAfter returns the range with the smallest Lo > p.
func (s *RangeSet) ceilingAfter(p Position) (r Range, ok bool) {
	next, more := successor(p)
	if s.tree == nil || !more {
		return Range{}, false
	}
	s.tree.AscendGreaterOrEqual(Range{Lo: next}, func(item Range) bool {
		r, ok = item, true
		return false
	})
	return r, ok
}

// Containing returns the range that holds p.
func (s *RangeSet) Containing(p Position) (Range, bool) {
	r, ok := s.floor(p)
	if !ok || r.Hi.Less(p) {
		return Range{}, false
	}
	return r, true
}

// Contains reports whether p is in the set.
func (s *RangeSet) Contains(p Position) bool {
	_, ok := s.Containing(p)
	return ok
}

// Add adds every position of r to the set and returns the range of the set
// that now holds r (r merged with every range it overlaps or touches).
// An empty r (Hi < Lo) adds nothing and returns false.
func (s *RangeSet) Add(r Range) (Range, bool) {
	if invariants.Enabled {
		defer s.checkInvariants()
	}
	if r.Hi.Less(r.Lo) {
		return Range{}, false
	}
	merged, _ := s.add(r)
	return merged, true
}

// edges are the neighbours of a range that an add created: before is the
// range ending before it, after the one starting after it. Each is reported
// only if the add gave the merged range a new edge on that side (an edge
// taken over from an existing range keeps the neighbour it already had).
type edges struct {
	before, after       Range
	hasBefore, hasAfter bool
}

// add is Add for a non-empty r, also returning the new edges' neighbours,
// which it meets anyway while merging.
func (s *RangeSet) add(r Range) (merged Range, e edges) {
	s.init()
	merged = r
	if prev, ok := s.floor(r.Lo); ok {
		if mergeable(prev, merged) {
			s.tree.Delete(prev)
			merged.Lo = prev.Lo
			merged.Hi = maxPosition(prev.Hi, merged.Hi)
		} else {
			e.before, e.hasBefore = prev, true
		}
	}
	for {
		next, ok := s.ceilingAfter(merged.Lo)
		if !ok {
			break
		}
		if !mergeable(merged, next) {
			e.after, e.hasAfter = next, merged.Hi == r.Hi
			break
		}
		s.tree.Delete(next)
		merged.Hi = maxPosition(next.Hi, merged.Hi)
	}
	s.tree.ReplaceOrInsert(merged)
	return merged, e
}

// RemoveThrough removes every position <= p: ranges ending at or before p go,
// and a range holding p keeps only its part after p.
func (s *RangeSet) RemoveThrough(p Position) {
	if invariants.Enabled {
		defer s.checkInvariants()
	}
	for s.tree != nil {
		first, ok := s.tree.Min()
		if !ok || p.Less(first.Lo) {
			return
		}
		s.tree.DeleteMin()
		if p.Less(first.Hi) {
			lo, _ := successor(p) // exists: p < first.Hi
			s.tree.ReplaceOrInsert(Range{Lo: lo, Hi: first.Hi})
			return
		}
	}
}

// removeFirst removes the first range.
func (s *RangeSet) removeFirst() {
	if s.tree != nil {
		s.tree.DeleteMin()
	}
}

// First returns the first (lowest) range.
func (s *RangeSet) First() (Range, bool) {
	if s.tree == nil {
		return Range{}, false
	}
	return s.tree.Min()
}

// FirstN returns up to n ranges from the lowest, in order.
func (s *RangeSet) FirstN(n int) []Range {
	n = min(n, s.Len())
	if n <= 0 {
		return nil
	}
	out := make([]Range, 0, n)
	s.tree.Ascend(func(r Range) bool {
		out = append(out, r)
		return len(out) < n
	})
	return out
}

// All iterates over the ranges in order. The set must not change during the
// iteration.
func (s *RangeSet) All() iter.Seq[Range] {
	return func(yield func(Range) bool) {
		if s.tree == nil {
			return
		}
		s.tree.Ascend(func(r Range) bool { return yield(r) })
	}
}

// Count returns the number of positions in the set when every range lies
// within one ledger; false when some range spans ledgers (the managed ledger,
// which knows each ledger's size, counts those).
func (s *RangeSet) Count() (int64, bool) {
	var total int64
	for r := range s.All() {
		n, ok := r.Count()
		if !ok || total > math.MaxInt64-n {
			return 0, false
		}
		total += n
	}
	return total, true
}

// fullCheckRanges: a set of up to this many ranges is checked in full every
// time; a larger one of n ranges once every n/fullCheckRanges calls, so that
// a check costs about fullCheckRanges steps amortized (a test acknowledging
// every other one of 50,000 entries would otherwise take quadratic time).
const fullCheckRanges = 256

// checkInvariants panics, naming the invariant and the ranges, if the set
// breaks its invariant: every range non-empty, the ranges in order, disjoint
// and, within a ledger, not touching. It runs at the end of Add and
// RemoveThrough under -tags invariants (and from Cursor's checks).
func (s *RangeSet) checkInvariants() {
	if n := s.Len(); n > fullCheckRanges {
		s.checksSkipped++
		if s.checksSkipped < n/fullCheckRanges {
			return
		}
		s.checksSkipped = 0
	}
	var prev Range
	i := 0
	for r := range s.All() {
		if r.Hi.Less(r.Lo) {
			panic(fmt.Sprintf("range set: invariant violated: ranges are non-empty (Lo <= Hi): range %d is %v", i, r))
		}
		if i > 0 && (!prev.Hi.Less(r.Lo) || adjacentInLedger(prev.Hi, r.Lo)) {
			panic(fmt.Sprintf("range set: invariant violated: ranges are sorted, disjoint and not adjacent: range %d %v follows %v", i, r, prev))
		}
		prev = r
		i++
	}
}
