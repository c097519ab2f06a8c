package ledger_test

import (
	"errors"
	"fmt"
	"reflect"
	"testing"

	"quire/internal/ledger"
)

// cluster builds a placement view from "id@zone" specs; a trailing "!" marks
// a read-only bookie.
func cluster(specs ...string) []ledger.BookieInfo {
	out := make([]ledger.BookieInfo, 0, len(specs))
	for _, s := range specs {
		writable := true
		if s[len(s)-1] == '!' {
			writable, s = false, s[:len(s)-1]
		}
		var id, zone string
		for i := range s {
			if s[i] == '@' {
				id, zone = s[:i], s[i+1:]
			}
		}
		out = append(out, ledger.BookieInfo{ID: ledger.BookieID(id), Zone: zone, Writable: writable})
	}
	return out
}

func zonesOf(c []ledger.BookieInfo) map[ledger.BookieID]string {
	out := map[ledger.BookieID]string{}
	for _, b := range c {
		out[b.ID] = b.Zone
	}
	return out
}

// threeByThree is the seed's numerical example: 3 zones × 3 bookies.
var threeByThree = []string{"a1@A", "a2@A", "a3@A", "b1@B", "b2@B", "b3@B", "c1@C", "c2@C", "c3@C"}

func TestPickEnsembleZoneRule(t *testing.T) {
	for _, tc := range []struct {
		name                      string
		cluster                   []string
		ensembleSize, writeQuorum int
		exclude                   []ledger.BookieID
		wantErr                   bool
	}{
		{name: "3 zones, E=Qw=3", cluster: threeByThree, ensembleSize: 3, writeQuorum: 3},
		{name: "3 zones, E=6 Qw=3", cluster: threeByThree, ensembleSize: 6, writeQuorum: 3},
		{name: "3 zones, E=5 Qw=2", cluster: threeByThree, ensembleSize: 5, writeQuorum: 2},
		{name: "5 zones, E=5 Qw=3", cluster: []string{"p@1", "q@2", "r@3", "s@4", "t@5"}, ensembleSize: 5, writeQuorum: 3},
		// A ring of 5 cannot have every 3 consecutive members in 3 distinct
		// zones when only 3 zones exist: refuse rather than double up a zone.
		{name: "3 zones, E=5 Qw=3 impossible", cluster: threeByThree, ensembleSize: 5, writeQuorum: 3, wantErr: true},
		// P10: one zone read-only and exactly Qw zones: no ensemble at all.
		{name: "zone C read-only, zones == Qw", cluster: []string{"a1@A", "a2@A", "a3@A", "b1@B", "b2@B", "b3@B", "c1@C!", "c2@C!", "c3@C!"}, ensembleSize: 3, writeQuorum: 3, wantErr: true},
		// With a fourth zone the read-only one is simply avoided.
		{name: "zone C read-only, 4 zones", cluster: []string{"a1@A", "b1@B", "c1@C!", "c2@C!", "d1@D"}, ensembleSize: 3, writeQuorum: 3},
		// Fewer zones than Qw: the rule cannot apply and placement still works.
		{name: "one zone", cluster: []string{"x1@X", "x2@X", "x3@X"}, ensembleSize: 3, writeQuorum: 3},
		{name: "too few writable", cluster: []string{"a1@A", "b1@B", "c1@C!"}, ensembleSize: 3, writeQuorum: 2, wantErr: true},
		{name: "excluded zone", cluster: threeByThree, ensembleSize: 3, writeQuorum: 3, exclude: []ledger.BookieID{"c1", "c2", "c3"}, wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := cluster(tc.cluster...)
			exclude := map[ledger.BookieID]bool{}
			for _, id := range tc.exclude {
				exclude[id] = true
			}
			for rotate := int64(0); rotate < 4; rotate++ {
				got, err := ledger.PickEnsemble(c, tc.ensembleSize, tc.writeQuorum, exclude, rotate)
				if tc.wantErr {
					if !errors.Is(err, ledger.ErrNotEnoughBookies) {
						t.Fatalf("rotate %d: got %v, %v; want ErrNotEnoughBookies", rotate, got, err)
					}
					continue
				}
				if err != nil {
					t.Fatalf("rotate %d: %v", rotate, err)
				}
				checkEnsemble(t, c, got, tc.ensembleSize, exclude)
				zones := map[string]bool{}
				for _, b := range c {
					zones[b.Zone] = true
				}
				if len(zones) >= tc.writeQuorum {
					m := ledger.Metadata{ID: 1, EnsembleSize: tc.ensembleSize, WriteQuorum: tc.writeQuorum, AckQuorum: 1,
						State: ledger.StateOpen, Fragments: []ledger.Fragment{{Ensemble: got}}}
					if err := ledger.ZoneRuleHolds(&m, zonesOf(c)); err != nil {
						t.Fatalf("rotate %d: %v: %v", rotate, got, err)
					}
				}
				again, _ := ledger.PickEnsemble(c, tc.ensembleSize, tc.writeQuorum, exclude, rotate)
				if !reflect.DeepEqual(again, got) {
					t.Fatalf("rotate %d: not deterministic: %v then %v", rotate, got, again)
				}
			}
		})
	}
}

func checkEnsemble(t *testing.T, c []ledger.BookieInfo, got []ledger.BookieID, size int, exclude map[ledger.BookieID]bool) {
	t.Helper()
	if len(got) != size {
		t.Fatalf("ensemble %v has %d bookies, want %d", got, len(got), size)
	}
	writable := map[ledger.BookieID]bool{}
	for _, b := range c {
		writable[b.ID] = b.Writable
	}
	seen := map[ledger.BookieID]bool{}
	for _, id := range got {
		if !writable[id] || exclude[id] || seen[id] {
			t.Fatalf("ensemble %v: %s is read-only, excluded or repeated", got, id)
		}
		seen[id] = true
	}
}

// TestPickEnsembleSpreadsLoad: rotate moves ledgers onto different bookies.
func TestPickEnsembleSpreadsLoad(t *testing.T) {
	c := cluster(threeByThree...)
	used := map[ledger.BookieID]bool{}
	for rotate := int64(0); rotate < 9; rotate++ {
		got, err := ledger.PickEnsemble(c, 3, 3, nil, rotate)
		if err != nil {
			t.Fatal(err)
		}
		for _, id := range got {
			used[id] = true
		}
	}
	if len(used) != len(c) {
		t.Fatalf("9 ledgers used only %d of %d bookies: %v", len(used), len(c), used)
	}
}

func TestReplaceBookie(t *testing.T) {
	for _, tc := range []struct {
		name     string
		cluster  []string
		ensemble []ledger.BookieID
		index    int
		exclude  []ledger.BookieID
		want     ledger.BookieID // "" when it must fail
	}{
		// b2 in zone B is lost; b4 and b5 (zone D) would also keep the write
		// quorum in distinct zones, but the copy is rebuilt in zone B.
		{name: "prefers the lost zone", cluster: []string{"b1@A", "b2@B", "b3@C", "b4@D", "b5@D", "b6@B"}, ensemble: []ledger.BookieID{"b1", "b2", "b3"}, index: 1, want: "b6"},
		// No writable bookie left in zone B: another zone that fits.
		{name: "lost zone read-only", cluster: []string{"b1@A", "b2@B", "b3@C", "b4@D", "b6@B!"}, ensemble: []ledger.BookieID{"b1", "b2", "b3"}, index: 1, want: "b4"},
		{name: "lost zone excluded", cluster: []string{"b1@A", "b2@B", "b3@C", "b4@D", "b6@B"}, ensemble: []ledger.BookieID{"b1", "b2", "b3"}, index: 1, exclude: []ledger.BookieID{"b6"}, want: "b4"},
		// The only candidate shares zone A with b1, in the same write quorum.
		{name: "no zone fits", cluster: []string{"b1@A", "b2@B", "b3@C", "b4@A"}, ensemble: []ledger.BookieID{"b1", "b2", "b3"}, index: 1},
		// With E=5 Qw=2, index 2's write quorums are (1,2) and (2,3): only
		// q and s are its neighbours, so u may share zone A with p (index 0)
		// but v may not share zone B with q.
		{name: "striped neighbours only", cluster: []string{"p@A", "q@B", "r@C", "s@D", "t@E", "u@A", "v@B"}, ensemble: []ledger.BookieID{"p", "q", "r", "s", "t"}, index: 2, want: "u"},
		{name: "nothing writable", cluster: []string{"b1@A", "b2@B", "b3@C", "b4@D!"}, ensemble: []ledger.BookieID{"b1", "b2", "b3"}, index: 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := cluster(tc.cluster...)
			exclude := map[ledger.BookieID]bool{}
			for _, id := range tc.exclude {
				exclude[id] = true
			}
			writeQuorum := 3
			if len(tc.ensemble) == 5 {
				writeQuorum = 2
			}
			for rotate := int64(0); rotate < 5; rotate++ {
				got, err := ledger.ReplaceBookie(c, tc.ensemble, tc.index, writeQuorum, exclude, rotate)
				if tc.want == "" {
					if !errors.Is(err, ledger.ErrNotEnoughBookies) {
						t.Fatalf("rotate %d: got %q, %v; want ErrNotEnoughBookies", rotate, got, err)
					}
					continue
				}
				if err != nil || got != tc.want {
					t.Fatalf("rotate %d: got %q, %v; want %s", rotate, got, err, tc.want)
				}
			}
		})
	}
}

func TestZoneRuleHoldsReportsTheCulprit(t *testing.T) {
	m := ledger.Metadata{ID: 3, EnsembleSize: 3, WriteQuorum: 2, AckQuorum: 1, State: ledger.StateOpen,
		Fragments: []ledger.Fragment{{Ensemble: []ledger.BookieID{"a1", "b1", "a2"}}}}
	zones := map[ledger.BookieID]string{"a1": "A", "a2": "A", "b1": "B"}
	err := ledger.ZoneRuleHolds(&m, zones)
	// Write quorum at 2 is (a2, a1): both in A.
	want := fmt.Sprintf("ledger 3 fragment 0: write quorum at 2 has %s and %s both in zone %q", "a2", "a1", "A")
	if err == nil || err.Error() != want {
		t.Fatalf("got %v, want %q", err, want)
	}
}

// TestPickEnsembleBalancesBookies: over many ledgers every bookie is used about
// equally, whatever the bookies' names and zones.
func TestPickEnsembleBalancesBookies(t *testing.T) {
	cluster := []ledger.BookieInfo{
		{ID: "b1", Zone: "a", Writable: true}, {ID: "b2", Zone: "a", Writable: true},
		{ID: "b3", Zone: "b", Writable: true}, {ID: "b4", Zone: "b", Writable: true},
		{ID: "b5", Zone: "c", Writable: true}, {ID: "b6", Zone: "c", Writable: true},
	}
	uses := map[ledger.BookieID]int{}
	const ledgers = 60
	for id := int64(1); id <= ledgers; id++ {
		ens, err := ledger.PickEnsemble(cluster, 3, 3, nil, id)
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range ens {
			uses[b]++
		}
	}
	for _, b := range cluster {
		// 60 ledgers × 3 copies / 6 bookies = 30 each.
		if n := uses[b.ID]; n < 25 || n > 35 {
			t.Fatalf("uneven placement: %v", uses)
		}
	}
}
