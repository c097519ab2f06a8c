package sim

import (
	"bytes"
	"strconv"
	"time"

	"quire/internal/mlog"
)

// Compaction runs of `quire sim topic`: about one seed in five (and every
// seed of the compact-drop-live mutant) runs a compacted topic — no cursors
// and no retention, as a Kafka partition with cleanup.policy=compact —
// whose messages carry one of a few keys. A compactor on the owner
// (simulated here, as package broker's is a shell) now and then takes the
// closed ledgers, keeps each key's last entry among them, writes the
// survivors to a new ledger and asks the core to swap it in
// (RegisterCompaction, EndCompaction); owners crash and freeze around it
// as in every run.
//
// The compaction checker, after every record write and at the end: reading
// the listed ledgers (through each segment's stored ledger),
//   - every acknowledged message is there, or a later message (by the
//     position it was first written at) with the same key is: each key's
//     latest value stays readable;
//   - messages appear in the order they were first written, each once
//     (the sim's "offsets never change").
//
// The compact-drop-live mutant drops one key's surviving entry; the checker
// catches it once that entry was the key's latest acknowledged value.

const kindTopicCompactionLost = "compaction-lost-key" // a key's latest message not readable after a compaction
const kindTopicCompactionOrder = "compaction-reordered"

// compactDropLive is the mutant's name.
const compactDropLive = "compact-drop-live"

// compactionKeys is how many keys a compacted run's messages use.
const compactionKeys = 7

// isCompactionRun decides, from the seed alone (so the other seeds' runs
// stay what they were), whether a run compacts.
func isCompactionRun(seed int64, mutant string) bool {
	return mutant == compactDropLive || seed%5 == 3
}

// makeCompacted turns the scenario into a compacted topic's.
func (sc *topicScenario) makeCompacted(e *engine) {
	sc.compact = true
	sc.compactEvery = e.between(30*time.Millisecond, 300*time.Millisecond)
	sc.cursors = 0
	sc.retention = mlog.RetentionPolicy{Time: -1, Size: -1}
	sc.ttl = 0
	sc.quota = mlog.BacklogQuota{}
}

// messageKey is the key a compacted run's payload carries ("m<token>:k<key>:...").
func messageKey(payload []byte) (string, bool) {
	parts := bytes.SplitN(payload, []byte(":"), 3)
	if len(parts) < 3 || len(parts[1]) == 0 || parts[1][0] != 'k' {
		return "", false
	}
	return string(parts[1]), true
}

func messageToken(payload []byte) (uint64, bool) {
	parts := bytes.SplitN(payload, []byte(":"), 2)
	if len(parts) < 2 || len(parts[0]) < 2 || parts[0][0] != 'm' {
		return 0, false
	}
	n, err := strconv.ParseUint(string(parts[0][1:]), 10, 64)
	return n, err == nil
}

// compactLoop runs the simulated compactor on the newest owner now and then.
func (s *topicSim) compactLoop() {
	if s.end > 0 && s.e.now >= s.end-500*time.Millisecond {
		return
	}
	s.e.after(s.e.between(s.sc.compactEvery/2, s.sc.compactEvery*3/2), s.compactLoop)
	o := s.latest
	if !s.setupDone || !o.alive || o.paused || o.compacting || o.tp.Phase() != "open" {
		return
	}
	ls := o.tp.Ledgers()
	if len(ls) < 2 {
		return
	}
	run := ls[:len(ls)-1] // the last ledger is the head
	dirty := false
	for _, li := range run {
		dirty = dirty || li.Data == 0
	}
	if !dirty {
		return
	}
	o.compacting = true
	// The compactor creates its ledger (as mlogclient's BeginCompaction
	// does through the ledger client), then registers it.
	s.ledgers.next += int64(s.e.intn(1, 3))
	l := &modelLedger{id: s.ledgers.next, creator: o.name + "/compactor"}
	s.ledgers.byID[l.id] = l
	s.e.tracef(o.name, "COMPACT start: ledger L%d for %s", l.id, describeInfos(run))
	o.compactStep(func(token uint64) { o.tp.RegisterCompaction(token, l.id, s.now()) }, func(err error) {
		if err != nil {
			// Named nowhere: the compactor deletes it itself.
			s.e.tracef(o.name, "COMPACT register L%d failed: %v; deleted", l.id, err)
			l.gone = true
			o.compacting = false
			return
		}
		s.writeCompacted(o, l, run)
	})
}

// writeCompacted writes run's survivors to l, then swaps it in.
func (s *topicSim) writeCompacted(o *topicOwner, l *modelLedger, run []mlog.LedgerInfo) {
	var entries []modelEntry
	latest := map[string]int{} // key → index in entries of its last entry so far
	for _, li := range run {
		ml := s.ledgers.byID[li.Stored()]
		if ml == nil || ml.gone || int64(len(ml.entries)) < li.Entries {
			s.e.tracef(o.name, "COMPACT abandoned: L%d unreadable", li.Stored())
			o.compactStep(func(token uint64) { o.tp.EndCompaction(token, mlog.CompactSwap{Data: l.id}, s.now()) }, func(error) { o.compacting = false })
			return
		}
		for _, en := range ml.entries[:li.Entries] {
			if k, ok := messageKey(en.payload); ok {
				latest[k] = len(entries)
			}
			entries = append(entries, en)
		}
	}
	var survivors []modelEntry
	dropped := false
	for i, en := range entries {
		k, ok := messageKey(en.payload)
		if ok && latest[k] != i {
			continue
		}
		if s.compactMutant && !dropped {
			dropped = true // the mutant: a live key's entry left out
			s.e.tracef(o.name, "COMPACT (mutant) drops %q", en.payload)
			continue
		}
		survivors = append(survivors, modelEntry{payload: en.payload, acked: true, written: s.e.now})
	}
	replace := make([]int64, len(run))
	for i, li := range run {
		replace[i] = li.ID
	}
	// Writing takes a while: the owner may crash or freeze meanwhile.
	s.e.after(s.e.between(s.sc.ledgerMin, 10*s.sc.ledgerMax), func() {
		if !o.alive {
			s.stats.CompactionsInterrupted++
			s.e.tracef(o.name, "COMPACT of L%d dies with its owner", l.id)
			return // the new owner deletes L: the record names it as garbage
		}
		l.entries, l.closed = survivors, true
		n, size := l.stats()
		s.e.tracef(o.name, "COMPACT wrote L%d: %d of %d entries survive", l.id, n, len(entries))
		o.compactStep(func(token uint64) {
			o.tp.EndCompaction(token, mlog.CompactSwap{Replace: replace, Data: l.id, Entries: n, Size: size}, s.now())
		}, func(err error) {
			o.compacting = false
			if err != nil {
				s.e.tracef(o.name, "COMPACT swap of L%d failed: %v", l.id, err)
				return
			}
			s.stats.Compactions++
			s.e.tracef(o.name, "COMPACT swapped L%d in for %v", l.id, replace)
		})
	})
}

// compactStep gives the owner a compaction input; done gets its answer.
func (o *topicOwner) compactStep(step func(token uint64), done func(error)) {
	o.s.nextCompactToken++
	token := o.s.nextCompactToken
	if o.compactWaiters == nil {
		o.compactWaiters = map[uint64]func(error){}
	}
	o.compactWaiters[token] = done
	o.input(func() { step(token) })
}

// onCompactionDone routes a CompactionDone from Ready.
func (o *topicOwner) onCompactionDone(d mlog.CompactionDone) {
	if done, ok := o.compactWaiters[d.Token]; ok {
		delete(o.compactWaiters, d.Token)
		done(d.Err)
	}
}

// noteWritten remembers where a message was first written (checker).
func (s *topicSim) noteWritten(payload []byte, p mlog.Position) {
	if tok, ok := messageToken(payload); ok {
		if _, seen := s.firstPos[tok]; !seen {
			s.firstPos[tok] = p
		}
	}
}

// checkCompacted is the compaction checker over the record as last written.
func (s *topicSim) checkCompacted() {
	if !s.hasRec {
		return
	}
	present := map[uint64]bool{}
	latestPresent := map[string]mlog.Position{} // key → latest first-written position present
	var prev mlog.Position
	first := true
	for i, info := range s.rec.Ledgers {
		ml := s.ledgers.byID[info.Stored()]
		if ml == nil || ml.gone {
			s.violateOnce(kindTopicCompactionLost, "listed L%d (stored in L%d) is gone: %s", info.ID, info.Stored(), describeInfos(s.rec.Ledgers))
			return
		}
		n := info.Entries
		if i == len(s.rec.Ledgers)-1 {
			n = int64(len(ml.entries)) // the head: what its owner wrote so far
		}
		for _, en := range ml.entries[:min(n, int64(len(ml.entries)))] {
			tok, ok := messageToken(en.payload)
			if !ok {
				continue
			}
			p, known := s.firstPos[tok]
			if !known {
				continue
			}
			if present[tok] {
				s.violateOnce(kindTopicCompactionOrder, "m%d listed twice: %s", tok, describeInfos(s.rec.Ledgers))
				return
			}
			if !first && !prev.Less(p) {
				s.violateOnce(kindTopicCompactionOrder, "m%d (first written at %s) listed after a message first written at %s", tok, p, prev)
				return
			}
			present[tok], prev, first = true, p, false
			if k, ok := messageKey(en.payload); ok {
				if q, seen := latestPresent[k]; !seen || q.Less(p) {
					latestPresent[k] = p
				}
			}
		}
	}
	for _, tok := range s.ackOrder {
		if present[tok] {
			continue
		}
		k, _ := messageKey(s.payloads[tok])
		p := s.firstPos[tok]
		if q, ok := latestPresent[k]; !ok || !p.Less(q) {
			s.violateOnce(kindTopicCompactionLost, "m%d (key %s, acknowledged, first written at %s) is not readable and no later message of its key is: %s",
				tok, k, p, describeInfos(s.rec.Ledgers))
			return
		}
	}
}

// compactionLeft marks the ledgers of prev whose stored ledger next no
// longer lists, after a swap: legitimately removed once the checker passed.
func (s *topicSim) compactionLeft(prev, next mlog.Record) {
	stored := map[int64]bool{}
	for _, l := range next.Ledgers {
		stored[l.Stored()] = true
	}
	for _, l := range prev.Ledgers {
		if !stored[l.Stored()] {
			s.legitTrimmed[l.Stored()] = true
		}
	}
}
