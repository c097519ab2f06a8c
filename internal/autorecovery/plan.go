package autorecovery

import (
	"slices"
	"sort"

	"quire/internal/ledger"
)

// The decisions of autorecovery, as pure functions of ledger metadata: which
// ledgers a lost bookie leaves under-replicated, which ensemble slots to
// rebuild, which entries each slot holds and where to read them from. The
// auditor and the workers (the I/O shells) call these; the tests check them
// against tables.

// slotRepair is one ensemble slot of one fragment held by a lost bookie.
type slotRepair struct {
	Fragment int
	Index    int
	Lost     ledger.BookieID
	// First and Last bound the fragment's entries; Last < First when the
	// fragment is empty.
	First, Last int64
}

// referencedBookies lists every bookie named by md's fragments.
func referencedBookies(md *ledger.Metadata) map[ledger.BookieID]bool {
	out := map[ledger.BookieID]bool{}
	for _, f := range md.Fragments {
		for _, b := range f.Ensemble {
			out[b] = true
		}
	}
	return out
}

// lostBookiesOf lists, sorted, the lost bookies md's fragments name.
func lostBookiesOf(md *ledger.Metadata, lost map[ledger.BookieID]bool) []string {
	var out []string
	for b := range referencedBookies(md) {
		if lost[b] {
			out = append(out, string(b))
		}
	}
	sort.Strings(out)
	return out
}

// fragmentRange returns the entries of fragment fi. The last fragment of a
// ledger that is not CLOSED has no known end: ok is false.
func fragmentRange(md *ledger.Metadata, fi int) (first, last int64, ok bool) {
	first = md.Fragments[fi].FirstEntry
	if fi+1 < len(md.Fragments) {
		return first, md.Fragments[fi+1].FirstEntry - 1, true
	}
	if md.State != ledger.StateClosed {
		return first, 0, false
	}
	return first, md.LastEntryID, true
}

// planRepairs lists the slots held by lost bookies whose entries are known:
// every fragment of a CLOSED ledger, and every fragment but the last of an
// OPEN or IN_RECOVERY one (those entries were all acknowledged when the next
// fragment began, so they never change). openTail reports that the last
// fragment of a ledger that is not closed has a lost slot: its end is
// unknown until the ledger is fenced and closed.
func planRepairs(md *ledger.Metadata, lost map[ledger.BookieID]bool) (slots []slotRepair, openTail bool) {
	for fi, f := range md.Fragments {
		for idx, b := range f.Ensemble {
			if !lost[b] {
				continue
			}
			first, last, ok := fragmentRange(md, fi)
			if !ok {
				openTail = true
				continue
			}
			slots = append(slots, slotRepair{Fragment: fi, Index: idx, Lost: b, First: first, Last: last})
		}
	}
	return slots, openTail
}

// entriesOnSlot lists the entries of [first, last] whose write set includes
// ensemble index: with striping (E > Qw) a slot holds only some of them.
func entriesOnSlot(first, last int64, index, ensembleSize, writeQuorum int) []int64 {
	var out []int64
	for e := first; e <= last; e++ {
		if slices.Contains(ledger.WriteSet(e, ensembleSize, writeQuorum), index) {
			out = append(out, e)
		}
	}
	return out
}

// sourcesFor lists the surviving replicas of entry (the other members of its
// write set that usable accepts), rotated by the entry id so that
// consecutive entries are read from different bookies: a fragment's copy
// draws on all its surviving replicas at once.
func sourcesFor(entry int64, ensemble []ledger.BookieID, index, writeQuorum int, usable func(ledger.BookieID) bool) []ledger.BookieID {
	// Ensemble order first (the write set's own order starts at entry mod E,
	// which would skew the rotation), then rotated by entry.
	writeSet := ledger.WriteSet(entry, len(ensemble), writeQuorum)
	var out []ledger.BookieID
	for i, b := range ensemble {
		if i != index && slices.Contains(writeSet, i) && usable(b) {
			out = append(out, b)
		}
	}
	if len(out) > 1 {
		r := int(entry % int64(len(out)))
		out = append(out[r:], out[:r]...)
	}
	return out
}

// mergeMark adds lost bookies (and their zones) to a mark; changed reports
// whether anything was new.
func mergeMark(m Mark, lost []string, zones map[string]string) (Mark, bool) {
	changed := false
	for _, b := range lost {
		if !slices.Contains(m.LostBookies, b) {
			m.LostBookies = append(m.LostBookies, b)
			changed = true
		}
		if z, ok := zones[b]; ok && m.LostZones[b] != z {
			if m.LostZones == nil {
				m.LostZones = map[string]string{}
			}
			m.LostZones[b] = z
			changed = true
		}
	}
	sort.Strings(m.LostBookies)
	return m, changed
}
