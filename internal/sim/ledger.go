package sim

import (
	"context"
	"fmt"
	"sort"
	"time"

	"quire/internal/clock"
	"quire/internal/ledger"
)

// LedgerOptions configures one simulated ledger run.
type LedgerOptions struct {
	// Mutant names a deliberately broken protocol variant (see Mutants); "" runs the real one.
	Mutant string
	// Verbose keeps every event of the run in the trace instead of the last TraceLimit.
	Verbose bool
	// TraceLimit bounds the kept trace when not Verbose; default 400 events.
	TraceLimit int
	// MaxVirtualTime bounds a run; default 120 s of virtual time.
	MaxVirtualTime time.Duration
}

// LedgerResult is the outcome of one run.
type LedgerResult struct {
	Seed int64
	// Scenario summarises the options and faults the seed chose.
	Scenario string
	// Violations lists safety violations as "kind: detail", first one first.
	Violations []string
	// Liveness is non-empty when the run hit its time bound before the ledger
	// was recovered, closed and read back: not a safety violation.
	Liveness string
	// Trace holds the events up to the first violation (the whole run when
	// there was none): the last TraceLimit of them, or all when Verbose.
	Trace []string
	Stats Stats
	// Err reports bad options (an unknown mutant); nothing ran.
	Err error
}

// Stats counts what happened in a run (also to see that the scenario
// generator reaches the situations the checkers are about).
type Stats struct {
	Events, Messages, Dropped    int
	EntriesAdded, Acked          int
	Crashes, Partitions, Outages int
	// DisksFull counts read-only (out of space) faults; RecoveryAbandoned
	// the recoveries that ended before an entry they found (never
	// acknowledged, and refused by its read-only bookies).
	DisksFull, RecoveryAbandoned int
	// LostUnsynced counts entries that bookie crashes lost before their fsync.
	LostUnsynced int
	// FencedRejects counts adds and explicit LAC updates a fenced bookie refused.
	FencedRejects int
	// ExplicitLacs counts explicit LAC updates a bookie applied.
	ExplicitLacs int
	// EnsembleChanges counts the writer's successful ensemble changes.
	EnsembleChanges int
	// CASConflicts counts metadata writes that lost their compare-and-swap;
	// AmbiguousMeta those that applied but reported ErrUnavailable.
	CASConflicts, AmbiguousMeta int
	// ReaderRetries counts read attempts beyond each reader's first.
	ReaderRetries int
	// ReaderFailovers counts range reads a bookie answered with a failure
	// (or no-such-entry): the reader asks another replica for the rest.
	// ReaderShortAnswers counts those answered with fewer entries than
	// asked. ReaderFragments counts readers whose read spanned an ensemble
	// change. ReaderPhaseFaults counts faults injected while readers read.
	ReaderFailovers, ReaderShortAnswers, ReaderFragments, ReaderPhaseFaults int
	LastEntryID                                                             int64 // of the CLOSED ledger, -1 when empty
	VirtualTime                                                             time.Duration
	// WriterPaused: the zombie pause happened. WriterEnd says how the writer
	// ended: "closed" (its own close), "fenced", or "running".
	WriterPaused bool
	WriterEnd    string
}

// Kinds of violation, each the prefix of a violation string. Every one is a
// safety property of the ledger protocol (DESIGN.md "Ledgers").
const (
	kindAckedLost       = "acked-entry-lost"       // (a) an acknowledged entry is missing or differs after recovery
	kindEntryLost       = "closed-entry-lost"      // (a) an entry of the CLOSED ledger has no durable copy on its write quorum
	kindReadersDisagree = "readers-disagree"       // (b) readers or recoverers see different ledgers
	kindReadOrder       = "read-order"             // (b) a reader delivered entries out of order, twice or with a gap
	kindWrongBytes      = "entry-bytes-differ"     // (b) an entry read is not what the writer wrote as that entry
	kindZombieAck       = "zombie-ack-after-close" // (c) the old writer got an ack past the recovered end
	kindReopened        = "closed-ledger-changed"  // (c) CLOSED metadata changed, or the state went backwards
	kindAckOrder        = "ack-order"              // (d) acks out of entry order, duplicated, or LAC regressed
	kindZoneRule        = "zone-rule"              // (e) a write quorum with two bookies in one zone
	kindFenceIncomplete = "fence-incomplete"       // (f) recovery read on with a write quorum still able to ack the old writer
	kindLACAhead        = "lac-ahead-of-acks"      // (g) a bookie took a LAC beyond the writer's last acknowledged entry
	kindBadMetadata     = "bad-metadata"           // a core wrote metadata that breaks its invariants
	kindSimError        = "sim-error"              // the simulator itself could not set the run up
	kindPanic           = "panic"                  // a core or model panicked
)

// Mutants lists the names LedgerOptions.Mutant accepts.
var Mutants = []string{"weak-fence", "no-fence-recovery-read", "unordered-ack", "ensemble-change-ignores-recovery", "explicit-lac-ahead"}

// ParseMutant turns a mutant name into the ledger core's switches.
func ParseMutant(name string) (ledger.Mutants, error) {
	var m ledger.Mutants
	switch name {
	case "":
	case "weak-fence":
		m.WeakFence = true
	case "no-fence-recovery-read":
		m.NoFenceRecoveryRead = true
	case "unordered-ack":
		m.UnorderedAck = true
	case "ensemble-change-ignores-recovery":
		m.EnsembleChangeIgnoresRecovery = true
	case "explicit-lac-ahead":
		m.ExplicitLacAhead = true
	default:
		return m, fmt.Errorf("sim: unknown mutant %q (known: %v)", name, Mutants)
	}
	return m, nil
}

const maxViolations = 20

// ledgerSim is one run: the models, the actors and the checkers' state.
type ledgerSim struct {
	e         *engine
	clock     *clock.Virtual
	sc        scenario
	mutants   ledger.Mutants
	bookieCfg bookieConfig
	net       *network
	metaSvc   *metaService
	bookies   []*bookie
	byID      map[ledger.BookieID]*bookie
	zoneOf    map[ledger.BookieID]string
	actors    map[string]actor
	stats     Stats

	ledgerID   int64
	payloads   [][]byte // by entry id: what the writer added
	writer     *writerActor
	recoverers []*recovererActor
	readers    []*readerActor

	// closedByRecovery names the first recoverer whose CAS to CLOSED
	// succeeded; closedLast is that record's last entry.
	closedByRecovery string
	closedLast       int64

	violations []string
	firstTrace []string
	finished   bool
}

// RunLedger runs one simulated ledger from seed. The same seed and options
// give the same result, trace included, byte for byte.
func RunLedger(seed int64, opts LedgerOptions) LedgerResult {
	mutants, err := ParseMutant(opts.Mutant)
	if err != nil {
		return LedgerResult{Seed: seed, Err: err}
	}
	if opts.TraceLimit == 0 {
		opts.TraceLimit = 400
	}
	if opts.Verbose {
		opts.TraceLimit = 0
	}
	if opts.MaxVirtualTime == 0 {
		opts.MaxVirtualTime = 120 * time.Second
	}
	e := newEngine(seed, opts.TraceLimit)
	s := &ledgerSim{e: e, clock: clock.NewVirtual(time.Unix(0, 0)), mutants: mutants,
		byID: map[ledger.BookieID]*bookie{}, zoneOf: map[ledger.BookieID]string{}, actors: map[string]actor{}}
	s.sc = newScenario(e)
	s.stats.LastEntryID = -1
	e.tracef("sim", "seed %d mutant=%q: %s", seed, opts.Mutant, s.sc.String())
	panicked := s.run(opts)
	res := LedgerResult{Seed: seed, Scenario: s.sc.String()}
	if panicked {
		res.Liveness = "the run stopped at a panic"
	} else if s.finished {
		res.Liveness = s.finalChecks()
	} else {
		res.Liveness = s.livenessReport()
		e.tracef("sim", "LIVENESS: %s", res.Liveness)
	}
	s.stats.Events, s.stats.VirtualTime = e.events, e.now
	s.stats.WriterEnd = "running"
	if w := s.writer; w.core != nil && w.finished {
		s.stats.WriterEnd = "closed"
		if _, err := w.core.Closed(); err != nil {
			s.stats.WriterEnd = "fenced"
		}
	}
	res.Violations, res.Stats = s.violations, s.stats
	if s.firstTrace != nil && !opts.Verbose {
		res.Trace = s.firstTrace
	} else {
		res.Trace = e.trace.snapshot()
	}
	return res
}

// run executes the events until the run is over. A panic in a core or a
// model is a failed run, reported as a violation with the trace so far —
// except in Verbose mode (replaying one seed), where it propagates with its
// stack.
func (s *ledgerSim) run(opts LedgerOptions) (panicked bool) {
	if !opts.Verbose {
		defer func() {
			if p := recover(); p != nil {
				s.violate(kindPanic, "%v (replay the seed to see the stack)", p)
				panicked = true
			}
		}()
	}
	s.setUp()
	for !s.finished && s.e.step(opts.MaxVirtualTime) {
		s.clock.AdvanceTo(time.Unix(0, 0).Add(s.e.now))
		if s.allDone() {
			s.finished = true
		}
	}
	return false
}

// setUp builds the cluster, creates the ledger and schedules the actors and faults.
func (s *ledgerSim) setUp() {
	e, sc := s.e, s.sc
	s.bookieCfg = sc.bookie
	s.net = newNetwork(e, sc.net, &s.stats)
	s.metaSvc = newMetaService(s, sc.meta)
	for i := 0; i < sc.bookies; i++ {
		b := newBookie(s, ledger.BookieID(fmt.Sprintf("b%d", i)), fmt.Sprintf("z%d", i%sc.zones))
		s.bookies = append(s.bookies, b)
		s.byID[b.id] = b
		s.zoneOf[b.id] = b.zone
	}

	s.writer = &writerActor{s: s, lastOK: -1, lastLAC: -1, okAcks: map[int64]bool{}}
	s.actors["writer"] = s.writer
	for i := 0; i < sc.recoverers; i++ {
		r := &recovererActor{s: s, nameStr: fmt.Sprintf("rec%d", i+1)}
		s.recoverers = append(s.recoverers, r)
		s.actors[r.name()] = r
	}
	for i := 0; i < sc.readers; i++ {
		r := &readerActor{s: s, nameStr: fmt.Sprintf("reader%d", i+1)}
		s.readers = append(s.readers, r)
		s.actors[r.name()] = r
	}

	if !s.createLedger() {
		return
	}
	e.after(0, s.writer.addLoop)
	e.after(tickInterval, s.writer.tickLoop)
	for _, d := range sc.recoverersAt {
		e.at(d.delay, s.recoverers[d.index].start)
	}
	// A recoverer waiting for a pause that never comes (the writer was
	// fenced or closed first) starts anyway once the writer is done adding.
	fallback := time.Duration(sc.entries)*sc.addGapMax + sc.pauseFor + time.Second
	for _, d := range sc.recoverersAfterPause {
		e.at(fallback+d.delay, s.recoverers[d.index].start)
	}
	for _, f := range sc.faults {
		if f.at < 0 {
			continue // at the writer's pause (writerActor.pause)
		}
		e.at(f.at, func() { s.inject(f) })
	}
}

// createLedger is the writer's first step: allocate an id, place an
// ensemble, create the OPEN metadata record.
func (s *ledgerSim) createLedger() bool {
	sc := s.sc
	id, err := s.metaSvc.client("writer").AllocateID(context.Background(), ledger.IDSequence)
	if err != nil {
		s.violate(kindSimError, "allocate ledger id: %v", err)
		return false
	}
	s.ledgerID = id
	cluster := s.clusterView()
	ensemble, err := ledger.PickEnsemble(cluster, sc.ensemble, sc.writeQuorum, nil, id)
	if err != nil {
		s.violate(kindZoneRule, "placement failed on a healthy cluster built to satisfy it: %v", err)
		return false
	}
	md := ledger.Metadata{ID: id, EnsembleSize: sc.ensemble, WriteQuorum: sc.writeQuorum, AckQuorum: sc.ackQuorum,
		State: ledger.StateOpen, Fragments: []ledger.Fragment{{FirstEntry: 0, Ensemble: ensemble}}, LastEntryID: -1, CreatedBy: "writer"}
	s.checkZones(md)
	v, err := s.metaSvc.create("writer", md)
	if err != nil {
		s.violate(kindSimError, "create ledger metadata: %v", err)
		return false
	}
	w, err := ledger.NewWriter(ledger.WriterConfig{Metadata: md, Version: v, Cluster: cluster,
		ExplicitLacTicks: sc.explicitLacTicks, Mutants: s.mutants})
	if err != nil {
		s.violate(kindSimError, "new writer: %v", err)
		return false
	}
	s.writer.core = w
	s.e.tracef("writer", "created ledger %d at v%d: %s", id, v, describeMetadata(md))
	return true
}

// clusterView is what the bookie registry shows: every bookie with its zone,
// writable while it is up. Sorted by id.
func (s *ledgerSim) clusterView() []ledger.BookieInfo {
	out := make([]ledger.BookieInfo, 0, len(s.bookies))
	for _, b := range s.bookies {
		out = append(out, ledger.BookieInfo{ID: b.id, Zone: b.zone, Writable: b.up && b.readOnly == 0})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// sendRequest carries a core's request to its bookie.
func (s *ledgerSim) sendRequest(from string, gen int, req ledger.Request) {
	b := s.byID[req.To]
	if b == nil {
		s.e.tracef(from, "request to unknown bookie %s dropped", req.To)
		return
	}
	s.net.send(from, b.name(), describeRequest(req), func() { b.receive(from, gen, req) })
}

// inject starts one scheduled fault.
func (s *ledgerSim) inject(f fault) {
	e := s.e
	switch f.kind {
	case faultCrash:
		b := s.bookies[f.bookie]
		if !b.up {
			return
		}
		s.stats.Crashes++
		b.crash()
		s.clusterChanged()
		e.after(f.dur, func() {
			b.restart()
			s.clusterChanged()
		})
	case faultIsolate:
		s.stats.Partitions++
		b := s.bookies[f.bookie].name()
		e.tracef("sim", "PARTITION: %s isolated for %v", b, f.dur)
		s.net.cut(b, "", f.dur)
		s.net.cut("", b, f.dur)
	case faultCutLink:
		s.stats.Partitions++
		e.tracef("sim", "PARTITION: %s <-> %s cut for %v", f.node, f.other, f.dur)
		s.net.cut(f.node, f.other, f.dur)
		s.net.cut(f.other, f.node, f.dur)
	case faultReadOnly, faultAllReadOnly:
		bs := s.bookies
		if f.kind == faultReadOnly {
			bs = bs[f.bookie : f.bookie+1]
		}
		s.stats.DisksFull++
		for _, b := range bs {
			b.readOnly++
			e.tracef(b.name(), "READ-ONLY (out of space) for %v", f.dur)
		}
		s.clusterChanged()
		e.after(f.dur, func() {
			for _, b := range bs {
				b.readOnly--
			}
			s.clusterChanged()
		})
	case faultMetaOutage:
		s.stats.Outages++
		e.tracef("meta", "OUTAGE for %v", f.dur)
		s.metaSvc.outages = append(s.metaSvc.outages, window{from: e.now, until: e.now + f.dur})
	case faultMetaPartition:
		s.stats.Partitions++
		s.metaSvc.partition(f.node, f.dur)
	}
}

// clusterChanged tells the writer what the registry now shows.
func (s *ledgerSim) clusterChanged() {
	w := s.writer
	if w.core == nil || w.finished {
		return
	}
	view := s.clusterView()
	w.input(func() { w.core.SetCluster(view) })
}

// payloadFor returns the bytes the writer adds as entry id: random, but
// recognisable in a hex dump.
func (s *ledgerSim) payloadFor(id int64) []byte {
	n := s.e.intn(1, 48)
	p := make([]byte, 0, n+16)
	p = fmt.Appendf(p, "e%d:", id)
	for range n {
		p = append(p, byte(s.e.rng.IntN(256)))
	}
	return p
}

func (s *ledgerSim) onRecoveryDone() {
	for _, r := range s.recoverers {
		if !r.done {
			return
		}
	}
	// Every recovery finished: the readers open the ledger a little later,
	// and the faults drawn for the reading phase hit them mid-read.
	for _, r := range s.readers {
		s.e.after(s.e.between(0, 200*time.Millisecond), r.start)
	}
	for _, f := range s.sc.readerFaults {
		s.e.after(f.at, func() {
			s.stats.ReaderPhaseFaults++
			s.inject(f)
		})
	}
}

// allDone: recoveries finished, readers finished, and the writer is either
// ended or has had time after its pause to do whatever harm it can.
func (s *ledgerSim) allDone() bool {
	for _, r := range s.recoverers {
		if !r.done {
			return false
		}
	}
	for _, r := range s.readers {
		if !r.done {
			return false
		}
	}
	w := s.writer
	if w.core == nil || w.finished {
		return true
	}
	// A writer that stopped adding (or asked to close) and has been awake
	// for a while has done whatever harm it could.
	return !w.paused && w.quietFrom > 0 && s.e.now >= w.quietFrom+3*time.Second
}

func (s *ledgerSim) livenessReport() string {
	var waiting []string
	for _, r := range s.recoverers {
		switch {
		case !r.started:
			waiting = append(waiting, r.name()+" never started")
		case !r.done:
			waiting = append(waiting, fmt.Sprintf("%s stuck in phase %s", r.name(), r.phase))
		}
	}
	for _, r := range s.readers {
		if !r.done {
			waiting = append(waiting, fmt.Sprintf("%s not done (started=%v)", r.name(), r.started))
		}
	}
	if w := s.writer; w.core != nil && !w.finished && len(waiting) == 0 {
		waiting = append(waiting, fmt.Sprintf("writer still running (pending=%d paused=%v)", w.core.Pending(), w.paused))
	}
	return fmt.Sprintf("not finished after %v of virtual time: %v", s.e.now, waiting)
}
