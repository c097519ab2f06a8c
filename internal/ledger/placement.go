package ledger

import (
	"errors"
	"fmt"
	"sort"
)

// BookieInfo is what placement knows of a bookie.
type BookieInfo struct {
	ID       BookieID
	Zone     string
	Writable bool // registered and not read-only
}

// ErrNotEnoughBookies: placement found no ensemble meeting the rules.
var ErrNotEnoughBookies = errors.New("ledger: not enough writable bookies meeting the placement rules")

// zoneRuleApplies: the zone rule (each write quorum spans distinct zones) is
// enforced when the cluster has at least Qw zones, counting read-only
// bookies too. Then a zone turning read-only makes placement fail rather than
// silently put two copies in one zone (the seed's "zone read-only" failure).
func zoneRuleApplies(cluster []BookieInfo, writeQuorum int) bool {
	zones := map[string]bool{}
	for _, b := range cluster {
		zones[b.Zone] = true
	}
	return len(zones) >= writeQuorum
}

// PickEnsemble chooses E writable bookies, not in exclude, such that every
// write quorum (Qw consecutive members, cyclically) spans distinct zones when
// the rule applies. rotate spreads load: callers pass e.g. the ledger id.
// Deterministic for the same inputs.
func PickEnsemble(cluster []BookieInfo, ensembleSize, writeQuorum int, exclude map[BookieID]bool, rotate int64) ([]BookieID, error) {
	cands := interleaveZones(candidates(cluster, exclude, 0), rotate)
	if len(cands) < ensembleSize {
		return nil, fmt.Errorf("%w: %d writable of %d needed", ErrNotEnoughBookies, len(cands), ensembleSize)
	}
	strict := zoneRuleApplies(cluster, writeQuorum)
	out := make([]BookieInfo, 0, ensembleSize)
	used := map[BookieID]bool{}
	var fill func() bool
	fill = func() bool {
		pos := len(out)
		if pos == ensembleSize {
			return true
		}
		// Prefer bookies from zones used least so far: spreads copies and
		// keeps the search short.
		order := append([]BookieInfo(nil), cands...)
		count := map[string]int{}
		for _, b := range out {
			count[b.Zone]++
		}
		sort.SliceStable(order, func(i, j int) bool { return count[order[i].Zone] < count[order[j].Zone] })
		for _, b := range order {
			if used[b.ID] || strict && !zoneFits(out, pos, b.Zone, ensembleSize, writeQuorum) {
				continue
			}
			out = append(out, b)
			used[b.ID] = true
			if fill() {
				return true
			}
			out = out[:len(out)-1]
			delete(used, b.ID)
		}
		return false
	}
	if !fill() {
		return nil, fmt.Errorf("%w: no ensemble of %d with each write quorum of %d in distinct zones", ErrNotEnoughBookies, ensembleSize, writeQuorum)
	}
	ids := make([]BookieID, len(out))
	for i, b := range out {
		ids[i] = b.ID
	}
	return ids, nil
}

// zoneFits reports whether zone may sit at position pos given the members
// already placed at positions < pos: it must differ from every placed member
// within writeQuorum-1 positions, cyclically.
func zoneFits(placed []BookieInfo, pos int, zone string, ensembleSize, writeQuorum int) bool {
	for d := 1; d < writeQuorum; d++ {
		for _, q := range []int{pos - d, pos + d} {
			q = ((q % ensembleSize) + ensembleSize) % ensembleSize
			if q < len(placed) && q != pos && placed[q].Zone == zone {
				return false
			}
		}
	}
	return true
}

// ReplaceBookie picks a replacement for ensemble[index]: writable, not in the
// ensemble or exclude, preferring the lost bookie's own zone (a copy lost in
// zone A is rebuilt in zone A), and keeping every write quorum that contains
// index in distinct zones when the rule applies.
func ReplaceBookie(cluster []BookieInfo, ensemble []BookieID, index, writeQuorum int, exclude map[BookieID]bool, rotate int64) (BookieID, error) {
	zoneOf := map[BookieID]string{}
	for _, b := range cluster {
		zoneOf[b.ID] = b.Zone
	}
	skip := map[BookieID]bool{}
	for id := range exclude {
		skip[id] = true
	}
	for _, id := range ensemble {
		skip[id] = true
	}
	cands := candidates(cluster, skip, rotate)
	lostZone, lostZoneKnown := zoneOf[ensemble[index]]
	sort.SliceStable(cands, func(i, j int) bool {
		return lostZoneKnown && cands[i].Zone == lostZone && cands[j].Zone != lostZone
	})
	strict := zoneRuleApplies(cluster, writeQuorum)
	placed := make([]BookieInfo, len(ensemble))
	for i, id := range ensemble {
		placed[i] = BookieInfo{ID: id, Zone: zoneOf[id]}
	}
	for _, c := range cands {
		if !strict || replacementFits(placed, index, c.Zone, writeQuorum) {
			return c.ID, nil
		}
	}
	return "", fmt.Errorf("%w: no replacement for %s at index %d", ErrNotEnoughBookies, ensemble[index], index)
}

func replacementFits(placed []BookieInfo, index int, zone string, writeQuorum int) bool {
	n := len(placed)
	for d := 1; d < writeQuorum; d++ {
		for _, q := range []int{index - d, index + d} {
			q = ((q % n) + n) % n
			if q != index && placed[q].Zone == zone {
				return false
			}
		}
	}
	return true
}

// interleaveZones orders candidates zone by zone in turn (z0[0], z1[0],
// z2[0], z0[1], ...), with the zone order and each zone's members rotated by
// rotate, so that successive ledgers start on different zones and use every
// bookie of a zone equally, not the first of each zone every time.
func interleaveZones(cands []BookieInfo, rotate int64) []BookieInfo {
	byZone := map[string][]BookieInfo{}
	var zones []string
	for _, b := range cands {
		if _, ok := byZone[b.Zone]; !ok {
			zones = append(zones, b.Zone)
		}
		byZone[b.Zone] = append(byZone[b.Zone], b)
	}
	if len(zones) == 0 {
		return nil
	}
	sort.Strings(zones)
	rot := func(n int, by int64) int { return int(((by % int64(n)) + int64(n)) % int64(n)) }
	r := rot(len(zones), rotate)
	zones = append(zones[r:], zones[:r]...)
	for i, z := range zones {
		members := byZone[z]
		k := rot(len(members), rotate/int64(len(zones))+int64(i))
		byZone[z] = append(members[k:], members[:k]...)
	}
	out := make([]BookieInfo, 0, len(cands))
	for depth := 0; len(out) < len(cands); depth++ {
		for _, z := range zones {
			if depth < len(byZone[z]) {
				out = append(out, byZone[z][depth])
			}
		}
	}
	return out
}

// candidates lists writable bookies not in skip, sorted by id then rotated.
func candidates(cluster []BookieInfo, skip map[BookieID]bool, rotate int64) []BookieInfo {
	var out []BookieInfo
	for _, b := range cluster {
		if b.Writable && !skip[b.ID] {
			out = append(out, b)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	if len(out) > 0 {
		r := int(((rotate % int64(len(out))) + int64(len(out))) % int64(len(out)))
		out = append(out[r:], out[:r]...)
	}
	return out
}

// ZoneRuleHolds reports whether every write quorum of every fragment of m
// spans distinct zones (used by checkers).
func ZoneRuleHolds(m *Metadata, zoneOf map[BookieID]string) error {
	for fi, f := range m.Fragments {
		for start := 0; start < m.EnsembleSize; start++ {
			seen := map[string]BookieID{}
			for _, i := range WriteSet(int64(start), m.EnsembleSize, m.WriteQuorum) {
				b := f.Ensemble[i]
				if other, dup := seen[zoneOf[b]]; dup {
					return fmt.Errorf("ledger %d fragment %d: write quorum at %d has %s and %s both in zone %q", m.ID, fi, start, other, b, zoneOf[b])
				}
				seen[zoneOf[b]] = b
			}
		}
	}
	return nil
}
