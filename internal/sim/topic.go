package sim

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"quire/internal/clock"
	"quire/internal/mlog"
)

// TopicOptions configures one simulated topic run.
type TopicOptions struct {
	// Mutant names a deliberately broken variant (see TopicMutants); "" runs the real core.
	Mutant string
	// Verbose keeps every event of the run in the trace instead of the last TraceLimit.
	Verbose bool
	// TraceLimit bounds the kept trace when not Verbose; default 400 events.
	TraceLimit int
}

// TopicResult is the outcome of one topic run.
type TopicResult struct {
	Seed     int64
	Scenario string
	// Violations lists safety violations as "kind: detail", first one first.
	Violations []string
	// Liveness is non-empty when the run did not produce every message or
	// ended without an open owner: not a safety violation.
	Liveness string
	// Trace holds the events up to the first violation (the whole run when
	// there was none): the last TraceLimit of them, or all when Verbose.
	Trace []string
	Stats TopicStats
	// Err reports bad options (an unknown mutant); nothing ran.
	Err error
}

// TopicStats counts what happened in a run (also to see that the scenario
// generator reaches the situations the checkers are about).
type TopicStats struct {
	Events, Appends, Acked, AppendErrors int
	Takeovers, Crashes, Pauses, Opens    int
	FencedOwners, ZombieWritesRejected   int
	Rollovers, TrimmedLedgers            int
	IndividualAcks, CumulativeAcks       int
	OverLimit, Outages, AmbiguousMeta    int
	TTLExpirations, QuotaRejected        int
	Compactions                          int // compaction swaps that succeeded
	CompactionsInterrupted               int // compactors that died with their owner mid-way
	GarbageLeft                          int // ledgers the final record names as garbage, not yet deleted
	RecoveredUnacked                     int // entries written, unacknowledged, kept by a recovery
	Redelivered                          int // acks lost in a takeover (unpersisted or over the limit)
	VirtualTime                          time.Duration
}

// TopicMutants lists the names TopicOptions.Mutant accepts.
var TopicMutants = []string{"early-trim", compactDropLive}

// ParseTopicMutant checks a topic mutant name and reports whether it is early-trim.
func ParseTopicMutant(name string) (earlyTrim bool, err error) {
	switch name {
	case "":
		return false, nil
	case "early-trim":
		return true, nil
	case compactDropLive:
		return false, nil
	}
	return false, fmt.Errorf("sim: unknown topic mutant %q (known: %v)", name, TopicMutants)
}

// Kinds of topic violation (DESIGN.md "Topic log (managed ledger) and cursors").
const (
	kindTopicAckedLost   = "acked-message-lost"        // (1) an acknowledged append is not readable from the listed ledgers
	kindTopicRedelivery  = "persisted-ack-redelivered" // (2) an ack persisted before the takeover came back as unacked
	kindTopicUnackedLost = "unacked-not-redelivered"   // (2) the new owner treats a never-acknowledged message as acked
	kindTopicEarlyDelete = "ledger-deleted-early"      // (3) a ledger deleted with an unconsumed entry or under retention
	kindTopicNotCAS      = "record-not-cas"            // (4) the topic record written without a version check
	kindTopicTwoWriters  = "two-writers"               // (4) a fenced owner's append succeeded after the new owner opened
	kindTopicBadAck      = "bad-append-ack"            // an append acknowledged at a position that holds something else
	kindTopicCursorLimit = "cursor-over-range-limit"   // (2) a cursor record holds more ranges than MaxRangesToPersist
)

// topicScenario is everything random about one topic run.
type topicScenario struct {
	brokers, cursors int
	messages         int
	appendGap        time.Duration
	maxRanges        int
	retention        mlog.RetentionPolicy
	ttl              time.Duration // message TTL; 0 off
	// quota: size-based backlog quota with a producer-side policy (hold or
	// exception) only; consumer_backlog_eviction is left out because it
	// acknowledges on the consumers' behalf by size estimates the checkers
	// would have to reproduce.
	quota            mlog.BacklogQuota
	rollEntries      int64
	persistEvery     time.Duration
	tickEvery        time.Duration
	consumeEvery     time.Duration
	cumulativeProb   float64
	ledgerMin        time.Duration
	ledgerMax        time.Duration
	metaMin, metaMax time.Duration
	appendFailProb   float64
	ambiguousProb    float64
	outages          []window
	takeovers        []takeover
	// compact: a compacted topic (topic_compact.go): no cursors, no
	// retention, keyed messages, a compactor every compactEvery.
	compact      bool
	compactEvery time.Duration
}

type takeover struct {
	at    time.Duration
	pause bool          // the owner freezes (zombie) instead of crashing
	dur   time.Duration // how long the pause lasts
	delay time.Duration // until the new owner opens
}

func newTopicScenario(e *engine) topicScenario {
	var sc topicScenario
	sc.brokers = e.intn(2, 3)
	sc.cursors = e.intn(1, 3)
	sc.messages = e.intn(40, 220)
	sc.appendGap = pick(e, []time.Duration{2 * time.Millisecond, 5 * time.Millisecond, 15 * time.Millisecond})
	sc.maxRanges = pick(e, []int{3, 5, 10, 20, 50, 10_000})
	switch e.intn(0, 4) {
	case 0, 1:
		sc.retention = mlog.RetentionPolicy{}
	case 2:
		sc.retention = mlog.RetentionPolicy{Time: e.between(100*time.Millisecond, 2*time.Second), Size: -1}
	case 3:
		sc.retention = mlog.RetentionPolicy{Time: -1, Size: int64(e.intn(0, 400))}
	case 4:
		sc.retention = mlog.RetentionPolicy{Time: e.between(50*time.Millisecond, time.Second), Size: int64(e.intn(0, 300))}
	}
	if e.chance(0.2) {
		sc.ttl = e.between(100*time.Millisecond, 2*time.Second)
	}
	if e.chance(0.15) {
		sc.quota = mlog.BacklogQuota{LimitSize: int64(e.intn(100, 1500)),
			Policy: pick(e, []mlog.BacklogQuotaPolicy{mlog.ProducerRequestHold, mlog.ProducerException})}
	}
	sc.rollEntries = int64(e.intn(2, 25))
	sc.persistEvery = e.between(20*time.Millisecond, 500*time.Millisecond)
	sc.tickEvery = e.between(5*time.Millisecond, 40*time.Millisecond)
	sc.consumeEvery = e.between(5*time.Millisecond, 60*time.Millisecond)
	sc.cumulativeProb = pick(e, []float64{0, 0.05, 0.2})
	sc.ledgerMin = e.between(100*time.Microsecond, time.Millisecond)
	sc.ledgerMax = sc.ledgerMin + pick(e, []time.Duration{time.Millisecond, 5 * time.Millisecond, 20 * time.Millisecond})
	sc.metaMin = e.between(200*time.Microsecond, 2*time.Millisecond)
	sc.metaMax = sc.metaMin + pick(e, []time.Duration{time.Millisecond, 5 * time.Millisecond, 20 * time.Millisecond})
	if e.chance(0.4) {
		sc.appendFailProb = pick(e, []float64{0.005, 0.02})
	}
	if e.chance(0.3) {
		sc.ambiguousProb = pick(e, []float64{0.02, 0.1})
	}
	span := time.Duration(sc.messages) * sc.appendGap
	for range e.intn(0, 2) {
		from := e.between(0, span)
		sc.outages = append(sc.outages, window{from: from, until: from + e.between(10*time.Millisecond, 300*time.Millisecond)})
	}
	for range e.intn(1, 3) {
		sc.takeovers = append(sc.takeovers, takeover{at: e.between(span/10, span+200*time.Millisecond), pause: e.chance(0.5),
			dur: e.between(50*time.Millisecond, 2*time.Second), delay: e.between(0, 100*time.Millisecond)})
	}
	return sc
}

func (sc *topicScenario) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "brokers=%d cursors=%d messages=%d gap=%v maxRanges=%d retention=%v/%d ttl=%v roll=%d persist=%v tick=%v consume=%v cumulative=%g",
		sc.brokers, sc.cursors, sc.messages, sc.appendGap, sc.maxRanges, sc.retention.Time, sc.retention.Size, sc.ttl, sc.rollEntries,
		sc.persistEvery, sc.tickEvery, sc.consumeEvery, sc.cumulativeProb)
	if sc.quota.LimitSize > 0 {
		fmt.Fprintf(&b, " quota=%d/%s", sc.quota.LimitSize, sc.quota.Policy)
	}
	fmt.Fprintf(&b, " ledger=%v..%v appendFail=%g meta=%v..%v ambiguous=%g", sc.ledgerMin, sc.ledgerMax, sc.appendFailProb, sc.metaMin, sc.metaMax, sc.ambiguousProb)
	for _, w := range sc.outages {
		fmt.Fprintf(&b, "; meta outage %v..%v", w.from, w.until)
	}
	if sc.compact {
		fmt.Fprintf(&b, " compact every %v", sc.compactEvery)
	}
	for _, t := range sc.takeovers {
		if t.pause {
			fmt.Fprintf(&b, "; takeover at %v (pause %v, open +%v)", t.at, t.dur, t.delay)
		} else {
			fmt.Fprintf(&b, "; takeover at %v (crash, open +%v)", t.at, t.delay)
		}
	}
	return b.String()
}

const topicName = "t"

// topicSim is one run: the models, the actors and the checkers' state.
type topicSim struct {
	e         *engine
	clock     *clock.Virtual
	sc        topicScenario
	earlyTrim bool
	stats     TopicStats

	ledgers    *ledgerModel
	metaStore  *topicMeta
	owners     []*topicOwner // every instance ever started, oldest first
	latest     *topicOwner   // the newest instance: producers and consumers use it
	openedGen  int           // highest generation whose Open completed
	nextToken  uint64
	produced   int
	producing  bool
	setupDone  bool
	cursorName []string

	// payloads by token; acked by token: the position acknowledged to the producer.
	payloads map[uint64][]byte
	acked    map[uint64]mlog.Position
	ackOrder []uint64
	ackedAt  map[mlog.Position]uint64
	// consumerAcks: what each consumer acknowledged (and the owner accepted).
	consumerAcks map[string]*consumerModel
	// legitTrimmed: ledgers a trim removed from the record after checker 3 passed.
	legitTrimmed map[int64]bool
	// rec is the topic record as last written.
	rec    mlog.Record
	hasRec bool
	// compactMutant: the compact-drop-live mutant; firstPos: where each
	// message was first written (compaction checker).
	compactMutant    bool
	firstPos         map[uint64]mlog.Position
	nextCompactToken uint64

	violations []string
	firstTrace []string
	end        time.Duration
}

// RunTopic runs one simulated topic from seed. The same seed and options
// give the same result, trace included, byte for byte.
func RunTopic(seed int64, opts TopicOptions) TopicResult {
	earlyTrim, err := ParseTopicMutant(opts.Mutant)
	if err != nil {
		return TopicResult{Seed: seed, Err: err}
	}
	if opts.TraceLimit == 0 {
		opts.TraceLimit = 400
	}
	if opts.Verbose {
		opts.TraceLimit = 0
	}
	e := newEngine(seed, opts.TraceLimit)
	s := &topicSim{e: e, clock: clock.NewVirtual(time.Unix(0, 0)), earlyTrim: earlyTrim,
		payloads: map[uint64][]byte{}, acked: map[uint64]mlog.Position{}, ackedAt: map[mlog.Position]uint64{},
		consumerAcks: map[string]*consumerModel{}, legitTrimmed: map[int64]bool{},
		compactMutant: opts.Mutant == compactDropLive, firstPos: map[uint64]mlog.Position{}}
	s.sc = newTopicScenario(e)
	if isCompactionRun(seed, opts.Mutant) {
		s.sc.makeCompacted(e)
	}
	e.tracef("sim", "seed %d mutant=%q: %s", seed, opts.Mutant, s.sc.String())
	s.run(opts)
	s.stats.Events, s.stats.VirtualTime = e.events, e.now
	res := TopicResult{Seed: seed, Scenario: s.sc.String(), Violations: s.violations, Stats: s.stats}
	switch {
	case s.end == 0:
		res.Liveness = fmt.Sprintf("produced %d of %d messages in %v of virtual time", s.produced, s.sc.messages, e.now)
	case s.latest.gen > s.openedGen:
		res.Liveness = fmt.Sprintf("the run ended with %s still opening the topic (phase %s)", s.latest.name, s.latest.tp.Phase())
	}
	if res.Liveness != "" {
		e.tracef("sim", "LIVENESS: %s", res.Liveness)
	}
	if s.firstTrace != nil && !opts.Verbose {
		res.Trace = s.firstTrace
	} else {
		res.Trace = e.trace.snapshot()
	}
	return res
}

func (s *topicSim) run(opts TopicOptions) {
	if !opts.Verbose {
		defer func() {
			if p := recover(); p != nil {
				s.violate(kindPanic, "%v (replay the seed to see the stack)", p)
			}
		}()
	}
	s.setUp()
	limit := 10 * time.Minute
	for s.e.step(limit) {
		s.clock.AdvanceTo(time.Unix(0, 0).Add(s.e.now))
		if s.end > 0 && s.e.now >= s.end {
			break
		}
	}
	s.finalChecks()
}

func (s *topicSim) violate(kind, format string, args ...any) {
	msg := kind + ": " + fmt.Sprintf(format, args...)
	s.e.tracef("CHECK", "VIOLATION %s", msg)
	if len(s.violations) < maxViolations {
		s.violations = append(s.violations, msg)
	}
	if s.firstTrace == nil {
		s.firstTrace = s.e.trace.snapshot()
	}
}

func (s *topicSim) now() time.Time { return time.Unix(0, 0).Add(s.e.now) }

func (s *topicSim) setUp() {
	s.ledgers = newLedgerModel(s)
	s.metaStore = newTopicMeta(s)
	for i := range s.sc.cursors {
		name := fmt.Sprintf("sub%d", i+1)
		s.cursorName = append(s.cursorName, name)
		s.consumerAcks[name] = newConsumerModel()
	}
	s.startOwner()
	s.e.after(s.sc.consumeEvery, s.consumeLoop)
	if s.sc.compact {
		s.e.after(s.sc.compactEvery, s.compactLoop)
	}
}

// startOwner starts a new owner instance on the next broker and opens the topic.
func (s *topicSim) startOwner() {
	gen := len(s.owners) + 1
	broker := fmt.Sprintf("b%d", (gen-1)%s.sc.brokers+1)
	for _, o := range s.owners {
		if o.broker == broker && o.alive {
			s.e.tracef(o.name, "process replaced by a new instance on %s", broker)
			o.kill()
		}
	}
	o := &topicOwner{s: s, gen: gen, broker: broker, name: fmt.Sprintf("%s#%d", broker, gen), alive: true}
	o.tp = mlog.New(mlog.Config{Name: topicName, Owner: o.name,
		Rollover:  mlog.RolloverPolicy{MaxEntries: s.sc.rollEntries},
		Retention: s.sc.retention, CursorPersistInterval: s.sc.persistEvery,
		MaxRangesToPersist: s.sc.maxRanges, MessageTTL: s.sc.ttl, Quota: s.sc.quota, QuotaHoldTimeout: 500 * time.Millisecond, RetryInterval: 200 * time.Millisecond, EarlyTrim: s.earlyTrim})
	s.owners = append(s.owners, o)
	s.latest = o
	s.stats.Opens++
	s.e.tracef(o.name, "OPEN topic")
	o.input(func() { o.tp.Open(s.now()) })
	s.e.after(s.sc.tickEvery, o.tickLoop)
}

// onOpened runs when an owner's Open completed.
func (s *topicSim) onOpened(o *topicOwner) {
	if o.gen > s.openedGen {
		s.openedGen = o.gen
	}
	if !s.setupDone {
		for _, name := range s.cursorName {
			if err := o.tp.OpenCursor(name, true, s.now()); err != nil {
				s.violate(kindSimError, "open cursor %s: %v", name, err)
			}
		}
		s.e.after(time.Millisecond, s.waitSetUp)
		return
	}
	s.checkTakeover(o)
}

// waitSetUp starts producing once the record names every cursor and every
// cursor record exists (before that a crash loses a subscription by design).
func (s *topicSim) waitSetUp() {
	if s.metaStore.cursorsPersisted(s.cursorName) {
		s.setupDone, s.producing = true, true
		s.e.tracef("sim", "set-up done: producing %d messages", s.sc.messages)
		start := s.e.now
		s.e.after(0, s.produceLoop)
		for _, t := range s.sc.takeovers {
			s.e.at(start+t.at, func() { s.takeover(t) })
		}
		for _, w := range s.sc.outages {
			s.metaStore.outages = append(s.metaStore.outages, window{from: start + w.from, until: start + w.until})
			s.e.at(start+w.from, func() { s.stats.Outages++; s.e.tracef("meta", "OUTAGE until %v", start+w.until) })
		}
		return
	}
	if o := s.latest; o.alive {
		o.input(func() { o.tp.Tick(s.now()) })
	}
	s.e.after(5*time.Millisecond, s.waitSetUp)
}

// takeover: the current owner crashes or freezes, and a new one opens.
func (s *topicSim) takeover(t takeover) {
	o := s.latest
	s.stats.Takeovers++
	if t.pause && o.alive {
		s.stats.Pauses++
		s.e.tracef(o.name, "PAUSE for %v (zombie)", t.dur)
		o.paused = true
		s.e.after(t.dur, o.resume)
	} else if o.alive {
		s.stats.Crashes++
		s.e.tracef(o.name, "CRASH")
		o.kill()
	}
	s.e.after(t.delay, s.startOwner)
}

func (s *topicSim) produceLoop() {
	if s.produced >= s.sc.messages {
		s.producing = false
		s.end = s.e.now + 4*time.Second
		return
	}
	s.produced++
	s.nextToken++
	token := s.nextToken
	payload := fmt.Appendf(nil, "m%d:", token)
	if s.sc.compact {
		payload = fmt.Appendf(payload, "k%d:", s.e.intn(0, compactionKeys-1))
	}
	for range s.e.intn(0, 24) {
		payload = append(payload, byte('a'+s.e.rng.IntN(26)))
	}
	s.payloads[token] = payload
	s.stats.Appends++
	// Usually to the newest owner; sometimes a stale route to a zombie.
	o := s.latest
	if z := s.zombie(); z != nil && s.e.chance(0.15) {
		o = z
	}
	if o.alive {
		s.e.tracef("producer", "append m%d -> %s", token, o.name)
		o.input(func() { o.tp.Append(token, payload, s.now()) })
	}
	s.e.after(s.e.between(s.sc.appendGap/2, s.sc.appendGap*3/2), s.produceLoop)
}

func (s *topicSim) zombie() *topicOwner {
	for _, o := range s.owners {
		if o.alive && o != s.latest {
			return o
		}
	}
	return nil
}

// onAppendAck is the producer receiving an acknowledgement.
func (s *topicSim) onAppendAck(o *topicOwner, a mlog.AppendAck) {
	if a.Err != nil {
		s.stats.AppendErrors++
		if errors.Is(a.Err, mlog.ErrBacklogQuotaExceeded) || errors.Is(a.Err, mlog.ErrBacklogQuotaHoldTimeout) {
			s.stats.QuotaRejected++
		}
		s.e.tracef("producer", "m%d failed via %s: %v", a.Token, o.name, a.Err)
		return
	}
	s.stats.Acked++
	s.e.tracef("producer", "m%d acked at %s by %s", a.Token, a.Pos, o.name)
	if prev, dup := s.ackedAt[a.Pos]; dup && prev != a.Token {
		s.violate(kindTopicBadAck, "m%d and m%d both acknowledged at %s", prev, a.Token, a.Pos)
		return
	}
	// (The ledger may be gone already: its consumers acknowledged the
	// entry before this acknowledgement reached the producer.)
	if got, ok := s.ledgers.entry(a.Pos); !s.legitTrimmed[a.Pos.LedgerID] && (!ok || string(got) != string(s.payloads[a.Token])) {
		s.violate(kindTopicBadAck, "m%d acknowledged at %s by %s, which holds %q (present=%v)", a.Token, a.Pos, o.name, got, ok)
		return
	}
	s.acked[a.Token] = a.Pos
	s.ackedAt[a.Pos] = a.Token
	s.ackOrder = append(s.ackOrder, a.Token)
	s.checkAckedReadable()
}

// consumeLoop: each consumer reads its cursor's unacknowledged entries from
// the current owner and acknowledges some, out of order.
func (s *topicSim) consumeLoop() {
	if s.end > 0 && s.e.now >= s.end-500*time.Millisecond {
		return
	}
	s.e.after(s.e.between(s.sc.consumeEvery/2, s.sc.consumeEvery*3/2), s.consumeLoop)
	o := s.latest
	if !s.setupDone || !o.alive || o.paused || o.tp.Phase() != "open" {
		return
	}
	for _, name := range s.cursorName {
		s.consume(o, name)
	}
	o.drain()
}

func (s *topicSim) consume(o *topicOwner, name string) {
	cur, ok := o.tp.Cursor(name)
	if !ok {
		return
	}
	var unacked []mlog.Position
	for _, info := range o.tp.Ledgers() {
		for id := int64(0); id < info.Entries && len(unacked) < 16; id++ {
			p := mlog.Position{LedgerID: info.ID, EntryID: id}
			if cur.IsAcked(p) {
				continue
			}
			if _, ok := s.ledgers.entry(p); !ok {
				s.violate(kindTopicAckedLost, "%s lists %s for %s but the ledger does not hold it", o.name, p, name)
				return
			}
			unacked = append(unacked, p)
		}
	}
	if len(unacked) == 0 {
		return
	}
	cm := s.consumerAcks[name]
	if s.e.chance(s.sc.cumulativeProb) {
		p := unacked[s.e.intn(0, min(len(unacked)-1, 4))]
		if err := o.tp.AckCumulative(name, p, s.now()); err == nil {
			s.stats.CumulativeAcks++
			cm.cumulative(p)
			s.e.tracef(name, "ack-cumulative %s via %s", p, o.name)
		}
		return
	}
	var acked []string
	for _, p := range unacked {
		if !s.e.chance(0.4) {
			continue
		}
		if err := o.tp.Ack(name, p, s.now()); err == nil {
			s.stats.IndividualAcks++
			cm.ack(p)
			acked = append(acked, p.String())
		}
	}
	if len(acked) > 0 {
		s.e.tracef(name, "ack %s via %s (holes %d)", strings.Join(acked, " "), o.name, cur.Holes())
	}
}

// consumerModel is what one consumer acknowledged: everything at or below
// floor (cumulative acks) and the individual positions.
type consumerModel struct {
	floor    mlog.Position
	hasFloor bool
	set      map[mlog.Position]bool
}

func newConsumerModel() *consumerModel { return &consumerModel{set: map[mlog.Position]bool{}} }

func (c *consumerModel) ack(p mlog.Position) { c.set[p] = true }

func (c *consumerModel) cumulative(p mlog.Position) {
	if !c.hasFloor || c.floor.Less(p) {
		c.floor, c.hasFloor = p, true
	}
}

func (c *consumerModel) acked(p mlog.Position) bool {
	return c.set[p] || c.hasFloor && !c.floor.Less(p)
}
