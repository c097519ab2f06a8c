package autorecovery

import (
	"reflect"
	"slices"
	"testing"

	"quire/internal/ledger"
)

func md(state ledger.State, last int64, e, qw int, frags ...ledger.Fragment) *ledger.Metadata {
	return &ledger.Metadata{ID: 7, EnsembleSize: e, WriteQuorum: qw, AckQuorum: 1, State: state, LastEntryID: last, Fragments: frags}
}

func frag(first int64, ens ...ledger.BookieID) ledger.Fragment {
	return ledger.Fragment{FirstEntry: first, Ensemble: ens}
}

func TestPlanRepairs(t *testing.T) {
	lostB1 := map[ledger.BookieID]bool{"b1": true}
	tests := []struct {
		name     string
		md       *ledger.Metadata
		lost     map[ledger.BookieID]bool
		want     []slotRepair
		openTail bool
	}{
		{"closed, one fragment", md(ledger.StateClosed, 99, 3, 3, frag(0, "b3", "b1", "b5")), lostB1,
			[]slotRepair{{Fragment: 0, Index: 1, Lost: "b1", First: 0, Last: 99}}, false},
		{"closed, lost in two fragments", md(ledger.StateClosed, 30, 3, 3, frag(0, "b1", "b3", "b5"), frag(10, "b2", "b3", "b5"), frag(20, "b3", "b5", "b1")), lostB1,
			[]slotRepair{{0, 0, "b1", 0, 9}, {2, 2, "b1", 20, 30}}, false},
		{"closed, empty last fragment", md(ledger.StateClosed, 9, 3, 3, frag(0, "b2", "b3", "b5"), frag(10, "b1", "b3", "b5")), lostB1,
			[]slotRepair{{1, 0, "b1", 10, 9}}, false},
		{"open, lost only in an earlier fragment", md(ledger.StateOpen, -1, 3, 3, frag(0, "b1", "b3", "b5"), frag(10, "b2", "b3", "b5")), lostB1,
			[]slotRepair{{0, 0, "b1", 0, 9}}, false},
		{"open, lost in the last fragment", md(ledger.StateOpen, -1, 3, 3, frag(0, "b1", "b3", "b5"), frag(10, "b1", "b4", "b5")), lostB1,
			[]slotRepair{{0, 0, "b1", 0, 9}}, true},
		{"in recovery, lost in the last fragment", md(ledger.StateInRecovery, -1, 3, 3, frag(0, "b3", "b5", "b1")), lostB1, nil, true},
		{"two lost in one fragment", md(ledger.StateClosed, 5, 3, 2, frag(0, "b1", "b2", "b5")), map[ledger.BookieID]bool{"b1": true, "b5": true},
			[]slotRepair{{0, 0, "b1", 0, 5}, {0, 2, "b5", 0, 5}}, false},
		{"nothing lost", md(ledger.StateClosed, 5, 3, 3, frag(0, "b2", "b3", "b5")), lostB1, nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, openTail := planRepairs(tt.md, tt.lost)
			if !reflect.DeepEqual(got, tt.want) || openTail != tt.openTail {
				t.Fatalf("got %+v openTail=%v, want %+v openTail=%v", got, openTail, tt.want, tt.openTail)
			}
		})
	}
}

// TestEntriesOnSlotMatchesWriteSets checks entriesOnSlot against the
// obvious oracle: an entry is on a slot iff the slot is in its write set.
func TestEntriesOnSlotMatchesWriteSets(t *testing.T) {
	for _, c := range []struct{ e, qw int }{{3, 3}, {4, 2}, {5, 3}, {6, 2}, {1, 1}} {
		for index := range c.e {
			got := entriesOnSlot(3, 40, index, c.e, c.qw)
			var want []int64
			for entry := int64(3); entry <= 40; entry++ {
				ws := ledger.WriteSet(entry, c.e, c.qw)
				if slices.Contains(ws, index) {
					want = append(want, entry)
				}
			}
			if !slices.Equal(got, want) {
				t.Fatalf("E=%d Qw=%d index %d: %v, want %v", c.e, c.qw, index, got, want)
			}
		}
	}
	if got := entriesOnSlot(10, 9, 0, 3, 3); len(got) != 0 {
		t.Fatalf("empty range: %v", got)
	}
}

// TestSourcesSpreadOverSurvivors: consecutive entries start at different
// surviving replicas, the lost slot and unusable bookies are never sources.
func TestSourcesSpreadOverSurvivors(t *testing.T) {
	ens := []ledger.BookieID{"b1", "b3", "b5"}
	usable := func(b ledger.BookieID) bool { return b != "b1" }
	firsts := map[ledger.BookieID]int{}
	for entry := int64(0); entry < 10; entry++ {
		s := sourcesFor(entry, ens, 0, 3, usable)
		if len(s) != 2 || slices.Contains(s, "b1") {
			t.Fatalf("entry %d: sources %v", entry, s)
		}
		firsts[s[0]]++
	}
	if firsts["b3"] != 5 || firsts["b5"] != 5 {
		t.Fatalf("first choices not spread: %v", firsts)
	}
	// Striping: E=4, Qw=2, slot 1 lost; entry 1's write set is {1, 2}.
	ens4 := []ledger.BookieID{"b2", "b1", "b4", "b6"}
	if s := sourcesFor(1, ens4, 1, 2, usable); !slices.Equal(s, []ledger.BookieID{"b4"}) {
		t.Fatalf("striped sources %v", s)
	}
}

func TestMergeMark(t *testing.T) {
	m := Mark{LedgerID: 3, LostBookies: []string{"b4"}}
	m, changed := mergeMark(m, []string{"b4"}, nil)
	if changed {
		t.Fatal("no new bookie, but changed")
	}
	m, changed = mergeMark(m, []string{"b1", "b4"}, map[string]string{"b1": "a"})
	if !changed || !slices.Equal(m.LostBookies, []string{"b1", "b4"}) || m.LostZones["b1"] != "a" {
		t.Fatalf("merge: %+v changed=%v", m, changed)
	}
}
