package sim

import (
	"errors"
	"fmt"
	"runtime/debug"
	"slices"
	"strings"
	"time"

	"quire/internal/isr"
)

// ISROptions configures one simulated ISR-mode run (`quire sim isr`).
type ISROptions struct {
	// Mutant names one of isr.MutantNames; "" runs the real protocol.
	Mutant string
	// Verbose keeps every event of the run in the trace.
	Verbose bool
	// TraceLimit bounds the kept trace when not Verbose; default 400 events.
	TraceLimit int
}

// ISRResult is the outcome of one ISR-mode run.
type ISRResult struct {
	Seed int64
	// Scenario summarises the configuration and the faults the seed drew.
	Scenario   string
	Violations []string
	// Liveness is non-empty when a partition ended without a leader that
	// the configuration did not excuse: not a safety violation.
	Liveness string
	Trace    []string
	Stats    ISRStats
	Err      error
}

// ISRStats counts what happened in a run, so that a clean range can be
// shown to have reached the faults the checkers are about.
type ISRStats struct {
	Events, Messages, Dropped int
	Produced, AckedAll        int // records appended by requests; acks=all records acknowledged
	AckedLeader, SentNoAck    int // acks=1 records acknowledged; acks=0 records sent
	Consumed                  int // records read by consumers
	// Lost counts acknowledged records missing from the final leader's log
	// (or from the leader at some point) in ways the configuration permits:
	// acks=1 failovers, unclean elections, too many lossy crashes at once.
	LostAcks1, LostAcksAll, LostConsumed int
	LostUnflushed                        int // records crashes threw away from page caches
	// Shapes counts the fault shapes that happened (see isrShapes).
	Shapes map[string]int
	// Situations counts protocol situations reached (elections, shrinks…).
	Situations  map[string]int
	VirtualTime time.Duration
}

// isrConfig is what a seed draws before the run starts.
type isrConfig struct {
	brokers, partitions, rf, minISR int
	acks                            int8 // isr.AcksNone/AcksLeader/AcksAll; mixed: 2
	mixedAcks                       bool
	unclean, elr                    bool
	flushMessages                   int64
	flushInterval                   time.Duration
	lagMax                          time.Duration
	// durable: acks=all only, minISR ≥ 2, unclean off: checker (a) is armed.
	durable bool
}

func (c isrConfig) String() string {
	acks := map[int8]string{isr.AcksNone: "0", isr.AcksLeader: "1", isr.AcksAll: "all"}[c.acks]
	if c.mixedAcks {
		acks = "mixed"
	}
	flush := "os"
	switch {
	case c.flushMessages > 0:
		flush = fmt.Sprintf("every-%d", c.flushMessages)
	case c.flushInterval > 0:
		flush = "ms=" + c.flushInterval.String()
	}
	return fmt.Sprintf("brokers=%d partitions=%d rf=%d min-isr=%d acks=%s unclean=%v elr=%v flush=%s lag=%v durable=%v",
		c.brokers, c.partitions, c.rf, c.minISR, acks, c.unclean, c.elr, flush, c.lagMax, c.durable)
}

// Timing of a run.
const (
	isrSessionTimeout = 3 * time.Second
	isrHeartbeat      = 500 * time.Millisecond
	isrTick           = 200 * time.Millisecond
	isrFaultsFrom     = 3 * time.Second
	isrFaultsUntil    = 34 * time.Second
	isrHealAt         = 38 * time.Second
	isrEndAt          = 60 * time.Second
	isrCheckEvery     = time.Second
	isrProduceTimeout = 4 * time.Second
)

// Network names.
const (
	isrMeta   = "meta"
	isrClient = "client"
)

func brokerName(id isr.BrokerID) string { return fmt.Sprintf("b%d", id) }

// isrBroker is one broker process: a replica per partition it hosts, each
// over a MemLog that outlives the process (its disk and page cache).
type isrBroker struct {
	id       isr.BrokerID
	epoch    int64 // broker epoch of its current registration; 0: not registered
	up       bool
	pausedTo time.Duration // frozen until then (a GC pause, a stopped VM)
	// slowBy delays everything it sends (a slow follower: disk, GC, a bad NIC).
	slowBy   time.Duration
	replicas map[string]*isr.Replica
	logs     map[string]*isr.MemLog
	// registering: a registration is in flight.
	registering bool
	// lastHeartbeatOK is when the store last confirmed its session.
	lastHeartbeatOK time.Duration
	incarnation     int // bumps on every crash: stale timers stop
	// ctrl is the controller it sends ISR proposals to: the one the store
	// named in its last heartbeat answer (it may have been replaced since).
	ctrl        *isrController
	lossEpoch   int64
	uncleanNext bool // the next registration reports an unclean shutdown
	// seen is the newest record of each partition the broker saw
	// (isr_reassign.go's assign), kept when a replica is deleted.
	seen map[string]isr.PartitionState
}

// logEnds is what the broker registers: where each of its logs ends
// (read when the store takes the registration).
func (b *isrBroker) logEnds() []isr.ReplicaLogEnd {
	var ends []isr.ReplicaLogEnd
	for _, part := range sortedKeys(b.logs) {
		l := b.logs[part]
		ends = append(ends, isr.ReplicaLogEnd{Partition: part, LastEpoch: l.LatestEpoch(), EndOffset: l.EndOffset()})
	}
	return ends
}

// isrController is one controller incarnation at node name.
type isrController struct {
	name string
	c    *isr.Controller
	// lastSeen is when the store last heard its heartbeat.
	lastSeen time.Duration
}

// isrRecord is a partition record in the store.
type isrRecord struct {
	state   isr.PartitionState
	version int64
}

// isrSession is a broker's ephemeral registration in the store.
type isrSession struct {
	epoch    int64
	lastBeat time.Duration
	live     bool
	reg      isr.Registration
}

// isrSim is one run.
type isrSim struct {
	e       *engine
	cfg     isrConfig
	mutants isr.Mutants
	net     *network
	netStat Stats
	base    time.Time
	parts   []string

	brokers []*isrBroker
	byName  map[string]*isrBroker
	ctrls   []*isrController // every incarnation; the last is the active one
	// The metadata store (KRaft's quorum, or ZooKeeper): records, sessions,
	// the controller's own session.
	records  map[string]*isrRecord
	sessions map[isr.BrokerID]*isrSession
	rev      int64

	producers map[string]*isrProducer
	consumers map[string]*isrConsumer

	faults []isrFault
	// reassigns are the partition reassignments the seed drew
	// (isr_reassign.go).
	reassigns []isrReassign
	// onNewLeader: a fault waiting for a partition's next leader (called
	// once, when a record names a new leader).
	onNewLeader map[string]func(isr.BrokerID)
	// onAlter: a fault waiting for the next ISR proposal to reach a
	// controller (called once, just before the controller takes it).
	onAlter func()
	chk     isrChecker
	stats   ISRStats
}

func (s *isrSim) now() time.Time { return s.base.Add(s.e.now) }

func (s *isrSim) broker(id isr.BrokerID) *isrBroker { return s.brokers[id-1] }

func (s *isrSim) activeCtrl() *isrController { return s.ctrls[len(s.ctrls)-1] }

func (s *isrSim) situation(what string) { s.stats.Situations[what]++ }

func (s *isrSim) shape(what string) { s.stats.Shapes[what]++ }

// RunISR runs one seed of the ISR-mode simulation.
func RunISR(seed int64, opts ISROptions) (res ISRResult) {
	res.Seed = seed
	m, err := isr.ParseMutant(opts.Mutant)
	if err != nil {
		res.Err = err
		return res
	}
	limit := opts.TraceLimit
	if limit == 0 {
		limit = 400
	}
	if opts.Verbose {
		limit = 0
	}
	s := &isrSim{
		e: newEngine(seed, limit), mutants: m, base: time.Unix(0, 0),
		records: map[string]*isrRecord{}, sessions: map[isr.BrokerID]*isrSession{},
		producers: map[string]*isrProducer{}, consumers: map[string]*isrConsumer{}, byName: map[string]*isrBroker{},
		onNewLeader: map[string]func(isr.BrokerID){},
	}
	s.stats.Shapes, s.stats.Situations = map[string]int{}, map[string]int{}
	s.chk.init()
	s.cfg = drawISRConfig(s.e)
	s.net = newNetwork(s.e, netConfig{
		delayMin: 200 * time.Microsecond, delayMax: time.Duration(s.e.intn(1, 20)) * time.Millisecond,
		slowProb: []float64{0, 0.02, 0.05}[s.e.intn(0, 2)], slowMin: 50 * time.Millisecond, slowMax: 800 * time.Millisecond,
		lossProb: []float64{0, 0.002, 0.01}[s.e.intn(0, 2)],
	}, &s.netStat)
	s.faults = drawISRFaults(s)
	s.reassigns = drawISRReassignments(seed, s.cfg)
	res.Scenario = s.describe()
	s.e.tracef("sim", "config %s", s.cfg)
	s.e.tracef("sim", "faults %s", describeFaults(s.faults))
	if len(s.reassigns) > 0 {
		s.e.tracef("sim", "reassignments %s", describeReassigns(s.reassigns))
	}

	defer func() {
		if p := recover(); p != nil {
			if opts.Verbose {
				s.e.tracef("sim", "panic stack:\n%s", debug.Stack())
			}
			s.chk.violate(s, kindPanic, "%v (replay the seed to see the stack)", p)
		}
		res.Violations = s.chk.violations
		res.Trace = s.e.trace.snapshot()
		s.stats.Events, s.stats.Messages, s.stats.Dropped = s.e.events, s.netStat.Messages, s.netStat.Dropped
		s.stats.VirtualTime = s.e.now
		res.Stats = s.stats
	}()
	s.start()
	for s.e.step(isrEndAt) {
		if len(s.chk.violations) > 0 {
			return res
		}
	}
	s.e.now = isrEndAt
	res.Liveness = s.finalChecks()
	return res
}

func drawISRConfig(e *engine) isrConfig {
	c := isrConfig{brokers: e.intn(3, 5), partitions: e.intn(1, 2)}
	c.rf = 3
	if e.chance(0.25) {
		c.rf = e.intn(2, c.brokers)
	}
	c.durable = e.chance(0.5)
	if c.durable {
		c.acks, c.minISR, c.unclean = isr.AcksAll, e.intn(2, max(2, c.rf-1)), false
		if c.rf < 3 {
			c.rf = 3
		}
	} else {
		c.minISR = e.intn(1, min(2, c.rf))
		switch e.intn(0, 3) {
		case 0:
			c.acks = isr.AcksNone
		case 1:
			c.acks = isr.AcksLeader
		case 2:
			c.acks = isr.AcksAll
		default:
			c.acks, c.mixedAcks = isr.AcksAll, true
		}
		c.unclean = e.chance(0.4)
	}
	c.elr = e.chance(0.8)
	switch e.intn(0, 3) {
	case 0:
		c.flushMessages = 1
	case 1:
		c.flushMessages = int64(e.intn(2, 20))
	case 2:
		c.flushInterval = time.Duration(e.intn(1, 5)) * 500 * time.Millisecond
	}
	c.lagMax = time.Duration(e.intn(2, 10)) * time.Second
	return c
}

func (s *isrSim) describe() string {
	d := s.cfg.String() + " mutant=" + map[bool]string{true: "yes", false: "no"}[s.mutants.Any()] + " faults=" + describeFaults(s.faults)
	if len(s.reassigns) > 0 {
		d += " reassignments=" + describeReassigns(s.reassigns)
	}
	return d
}

// start registers every broker, starts the controller, creates the
// partitions and schedules the clients, the ticks and the faults.
func (s *isrSim) start() {
	for i := 1; i <= s.cfg.brokers; i++ {
		b := &isrBroker{id: isr.BrokerID(i), up: true, replicas: map[string]*isr.Replica{}, logs: map[string]*isr.MemLog{},
			seen: map[string]isr.PartitionState{}}
		s.brokers = append(s.brokers, b)
		s.byName[brokerName(b.id)] = b
		s.rev++
		b.epoch = s.rev
		s.sessions[b.id] = &isrSession{epoch: b.epoch, live: true, reg: isr.Registration{ID: b.id, Epoch: b.epoch}}
	}
	s.newController(nil)
	c := s.activeCtrl()
	for p := range s.cfg.partitions {
		name := fmt.Sprintf("p%d", p)
		s.parts = append(s.parts, name)
		var replicas []isr.BrokerID
		for k := range s.cfg.rf {
			replicas = append(replicas, isr.BrokerID((p+k)%s.cfg.brokers+1))
		}
		for _, id := range replicas {
			b := s.broker(id)
			b.logs[name] = isr.NewMemLog()
			b.replicas[name] = s.newReplica(b, name)
		}
		if err := c.c.CreatePartition(name, replicas, s.now()); err != nil {
			s.chk.violate(s, kindSimError, "create %s: %v", name, err)
			return
		}
	}
	s.drainController(c)
	for _, b := range s.brokers {
		s.scheduleBroker(b)
	}
	s.e.after(isrHeartbeat, s.storeTick)
	for _, name := range s.parts {
		s.startClients(name)
	}
	for _, f := range s.faults {
		s.scheduleFault(f)
	}
	for _, r := range s.reassigns {
		s.scheduleReassign(r)
	}
	s.e.at(isrHealAt, s.healAll)
	var check func()
	check = func() {
		s.chk.periodic(s)
		s.e.after(isrCheckEvery, check)
	}
	s.e.after(isrCheckEvery, check)
}

func (s *isrSim) newReplica(b *isrBroker, part string) *isr.Replica {
	return isr.NewReplica(isr.ReplicaConfig{
		Broker: b.id, Partition: part, BrokerEpoch: b.epoch, Log: b.logs[part], MinISR: s.cfg.minISR,
		LagTimeMax: s.cfg.lagMax, FetchBackoff: 100 * time.Millisecond, FetchTimeout: 2 * time.Second,
		AlterPartitionTimeout: 2 * time.Second, ProduceTimeout: isrProduceTimeout,
		FlushMessages: s.cfg.flushMessages, FlushInterval: s.cfg.flushInterval,
		HighWatermarkCheckpointInterval: time.Second, Mutants: s.mutants,
	}, s.now())
}

// newController starts a controller incarnation with the next epoch and
// loads what the store holds (a KRaft controller failover, or a new
// ZooKeeper-era controller after the old one lost its session: K20).
func (s *isrSim) newController(prev *isrController) {
	epoch := int64(len(s.ctrls) + 1)
	c := &isrController{name: fmt.Sprintf("c%d", epoch), lastSeen: s.e.now}
	c.c = isr.NewController(isr.ControllerConfig{
		Epoch: epoch, MinISR: s.cfg.minISR, DisableELR: !s.cfg.elr, UncleanElection: s.cfg.unclean,
		DisableAutoRebalance: true, RetryInterval: 500 * time.Millisecond, PushInterval: time.Second, Mutants: s.mutants,
	}, s.now())
	s.ctrls = append(s.ctrls, c)
	var parts []isr.StoredPartition
	for _, name := range sortedKeys(s.records) {
		r := s.records[name]
		parts = append(parts, isr.StoredPartition{State: r.state.Clone(), Version: r.version})
	}
	var regs []isr.Registration
	for _, b := range s.brokers {
		if ss := s.sessions[b.id]; ss != nil && ss.live {
			regs = append(regs, ss.reg)
		}
	}
	if prev != nil {
		s.e.tracef(c.name, "elected controller (epoch %d): %s lost its session", epoch, prev.name)
		s.situation("controller failover")
	}
	c.c.Load(parts, regs, s.now())
	s.drainController(c)
	var beat func()
	beat = func() {
		s.quiet(c.name, isrMeta, func() {
			if s.activeCtrl() == c {
				c.lastSeen = s.e.now
			}
		})
		c.c.Tick(s.now())
		s.drainController(c)
		s.e.after(isrTick, beat)
	}
	s.e.after(isrTick, beat)
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// send carries a message over the network; a slow or paused sender's
// messages leave late.
func (s *isrSim) send(from, to, what string, deliver func()) {
	if b := s.brokerByName(from); b != nil && b.slowBy > 0 {
		d := b.slowBy
		s.e.after(d, func() { s.net.send(from, to, what, func() { s.arrive(to, deliver) }) })
		return
	}
	s.net.send(from, to, what, func() { s.arrive(to, deliver) })
}

// arrive hands a message to its receiver: a paused broker takes it when it
// wakes, a crashed one never.
func (s *isrSim) arrive(to string, deliver func()) {
	b := s.brokerByName(to)
	if b == nil {
		deliver()
		return
	}
	inc := b.incarnation
	var run func()
	run = func() {
		if !b.up || b.incarnation != inc {
			return
		}
		if b.pausedTo > s.e.now {
			s.e.at(b.pausedTo, run)
			return
		}
		deliver()
	}
	run()
}

func (s *isrSim) brokerByName(name string) *isrBroker { return s.byName[name] }

// The metadata store.

// storeTick expires broker sessions and the controller's session.
func (s *isrSim) storeTick() {
	for _, b := range s.brokers {
		ss := s.sessions[b.id]
		if ss == nil || !ss.live || s.e.now-ss.lastBeat <= isrSessionTimeout {
			continue
		}
		ss.live = false
		s.e.tracef(isrMeta, "session of %s (epoch %d) expired", brokerName(b.id), ss.epoch)
		s.situation("session expired")
		id, epoch := b.id, ss.epoch
		s.notify(fmt.Sprintf("expired %s@%d", brokerName(id), epoch), func(c *isrController) {
			c.c.SessionExpired(id, epoch, s.now())
			s.drainController(c)
		})
	}
	if c := s.activeCtrl(); s.e.now-c.lastSeen > isrSessionTimeout {
		s.newController(c)
	}
	s.e.after(isrHeartbeat, s.storeTick)
}

// notify tells the active controller of a change in the store (a session
// that expired, a registration), as a watch does: never lost, delivered
// once the controller is reachable, to whichever controller is active then.
func (s *isrSim) notify(what string, deliver func(c *isrController)) {
	c := s.activeCtrl()
	retry := func() { s.e.after(200*time.Millisecond, func() { s.notify(what, deliver) }) }
	if s.net.isCut(isrMeta, c.name) {
		retry()
		return
	}
	s.e.tracef(isrMeta, "-> %s %s", c.name, what)
	s.e.after(s.e.between(s.net.cfg.delayMin, s.net.cfg.delayMax), func() {
		if s.net.isCut(isrMeta, c.name) || s.activeCtrl() != c {
			retry()
			return
		}
		deliver(c)
	})
}

// execMeta applies a controller's MetaOp at the store.
func (s *isrSim) execMeta(op isr.MetaOp) isr.MetaResult {
	rec := s.records[op.Partition]
	switch op.Kind {
	case isr.MetaRead:
		if rec == nil {
			return isr.MetaResult{ID: op.ID, Err: isr.ErrVersionConflict}
		}
		return isr.MetaResult{ID: op.ID, Version: rec.version, State: rec.state.Clone()}
	case isr.MetaCreate:
		if rec != nil {
			return isr.MetaResult{ID: op.ID, Err: isr.ErrVersionConflict}
		}
	case isr.MetaWrite:
		if op.Expected != isr.AnyVersion && (rec == nil || rec.version != op.Expected) {
			s.situation("CAS conflict")
			return isr.MetaResult{ID: op.ID, Err: isr.ErrVersionConflict}
		}
	}
	s.rev++
	if hook := s.onNewLeader[op.Partition]; hook != nil && op.State.Leader != isr.NoLeader && (rec == nil || rec.state.Leader != op.State.Leader) {
		delete(s.onNewLeader, op.Partition)
		hook(op.State.Leader)
	}
	s.records[op.Partition] = &isrRecord{state: op.State.Clone(), version: s.rev}
	s.chk.recordWritten(s, op.State)
	return isr.MetaResult{ID: op.ID, Version: s.rev}
}

// drainController routes what a controller wants done.
func (s *isrSim) drainController(c *isrController) {
	for {
		rd := c.c.Ready()
		if rd.Empty() {
			return
		}
		for _, ev := range rd.Events {
			s.controllerEvent(c, ev)
		}
		for _, p := range rd.Pushes {
			push := p
			to := brokerName(p.To)
			s.send(c.name, to, "push "+p.State.String(), func() { s.onPush(to, push) })
		}
		for _, a := range rd.AlterPartitionResponses {
			resp := a
			to := brokerName(a.To)
			what := "alter-resp"
			if a.Err != nil {
				what += " " + a.Err.Error()
			}
			s.send(c.name, to, what, func() { s.onAlterResponse(to, resp) })
		}
		for _, op := range rd.MetaOps {
			s.metaCall(c, op)
		}
	}
}

// errStoreUnreachable is what the controller's shell reports for a
// metadata operation that could not reach the store, or whose answer did
// not come back (then it may have been applied: the controller cannot tell).
var errStoreUnreachable = errors.New("sim: metadata store unreachable")

// metaCall performs a controller's MetaOp at the store. Unlike other
// messages it is never silently lost (the core relies on its shell to
// complete every operation): across a partition it fails, after a timeout.
func (s *isrSim) metaCall(c *isrController, op isr.MetaOp) {
	s.e.tracef(c.name, "-> meta %s#%d %s@v%d", op.Kind, op.ID, op.Partition, op.Expected)
	fail := func(why string) {
		s.e.after(time.Second, func() {
			s.e.tracef(c.name, "meta %s#%d failed: %s", op.Kind, op.ID, why)
			c.c.StepMeta(isr.MetaResult{ID: op.ID, Err: errStoreUnreachable}, s.now())
			s.drainController(c)
		})
	}
	if s.net.isCut(c.name, isrMeta) {
		fail("store unreachable")
		return
	}
	s.e.after(s.e.between(s.net.cfg.delayMin, s.net.cfg.delayMax), func() {
		if s.net.isCut(c.name, isrMeta) {
			fail("store unreachable")
			return
		}
		res := s.execMeta(op)
		s.e.after(s.e.between(s.net.cfg.delayMin, s.net.cfg.delayMax), func() {
			if s.net.isCut(isrMeta, c.name) {
				s.situation("ambiguous metadata write")
				fail("answer lost (the operation may have applied)")
				return
			}
			if res.Err != nil {
				s.e.tracef(c.name, "<- meta %s#%d: %v", op.Kind, op.ID, res.Err)
			} else {
				s.e.tracef(c.name, "<- meta %s#%d: v%d", op.Kind, op.ID, res.Version)
			}
			c.c.StepMeta(res, s.now())
			s.drainController(c)
		})
	})
}

// quiet delivers a small control message (heartbeats, metadata lookups)
// across the network without tracing it: never lost at random, dropped
// across a partition.
func (s *isrSim) quiet(from, to string, deliver func()) {
	if s.net.isCut(from, to) {
		return
	}
	s.e.after(s.e.between(s.net.cfg.delayMin, s.net.cfg.delayMax), func() {
		if s.net.isCut(from, to) {
			return
		}
		s.arrive(to, deliver)
	})
}

func (s *isrSim) controllerEvent(c *isrController, ev isr.Event) {
	s.e.tracef(c.name, "%s", ev)
	switch ev.Kind {
	case isr.EventUncleanElection:
		s.situation("unclean election")
		if strings.Contains(ev.Detail, "unclean recovery") {
			s.situation("unclean recovery")
		}
		s.chk.unclean[ev.Partition] = true
	case isr.EventElected:
		s.situation("election")
		if strings.Contains(ev.Detail, "elr") || strings.Contains(ev.Detail, "ELR") {
			s.situation("ELR election")
		}
	case isr.EventDeposed:
		s.situation("controller deposed")
	case isr.EventFenced:
		s.situation("broker fenced")
	case isr.EventReassignment:
		s.reassignmentEvent(ev)
	}
}

// Brokers.

// scheduleBroker starts a broker's tick and heartbeat loops for its
// current incarnation.
func (s *isrSim) scheduleBroker(b *isrBroker) {
	inc := b.incarnation
	b.lastHeartbeatOK = s.e.now
	var tick func()
	tick = func() {
		if !b.up || b.incarnation != inc {
			return
		}
		if b.pausedTo > s.e.now {
			s.e.at(b.pausedTo, tick)
			return
		}
		for _, name := range sortedKeys(b.replicas) {
			r := b.replicas[name]
			r.Tick(s.now())
			s.drainReplica(b, r)
		}
		s.e.after(isrTick, tick)
	}
	s.e.after(s.e.between(0, isrTick), tick)
	var beat func()
	beat = func() {
		if !b.up || b.incarnation != inc {
			return
		}
		if b.pausedTo > s.e.now {
			s.e.at(b.pausedTo, beat)
			return
		}
		s.heartbeat(b)
		s.e.after(isrHeartbeat, beat)
	}
	s.e.after(s.e.between(0, isrHeartbeat), beat)
}

// heartbeat renews the broker's session, or registers it again once the
// store says the session is gone (a new broker epoch).
func (s *isrSim) heartbeat(b *isrBroker) {
	if b.registering {
		return
	}
	name := brokerName(b.id)
	epoch := b.epoch
	s.quiet(name, isrMeta, func() {
		ss := s.sessions[b.id]
		alive := ss != nil && ss.live && ss.epoch == epoch
		if alive {
			ss.lastBeat = s.e.now
		}
		active := s.activeCtrl()
		s.quiet(isrMeta, name, func() {
			b.ctrl = active
			if b.epoch != epoch {
				return
			}
			if alive {
				b.lastHeartbeatOK = s.e.now
				return
			}
			s.register(b)
		})
	})
}

// register asks the store for a new session (broker epoch); the answer
// carries the current partition records, which a starting broker reads.
func (s *isrSim) register(b *isrBroker) {
	if b.registering {
		return
	}
	b.registering = true
	name := brokerName(b.id)
	inc := b.incarnation
	unclean := b.uncleanNext
	s.send(name, isrMeta, "register", func() {
		s.rev++
		reg := isr.Registration{ID: b.id, Epoch: s.rev, UncleanShutdown: unclean, LossEpoch: b.lossEpoch, LogEnds: b.logEnds()}
		if unclean {
			b.lossEpoch = s.rev
		}
		s.sessions[b.id] = &isrSession{epoch: s.rev, lastBeat: s.e.now, live: true, reg: reg}
		s.notify(fmt.Sprintf("registered %s@%d", name, reg.Epoch), func(c *isrController) {
			c.c.Register(reg, s.now())
			s.drainController(c)
		})
		s.send(isrMeta, name, fmt.Sprintf("register-resp epoch=%d", reg.Epoch), func() {
			if b.incarnation != inc {
				return
			}
			b.registering, b.uncleanNext = false, false
			b.epoch, b.lastHeartbeatOK = reg.Epoch, s.e.now
			s.e.tracef(name, "registered under broker epoch %d (unclean shutdown %v)", reg.Epoch, unclean)
			for _, part := range sortedKeys(b.replicas) {
				b.replicas[part].SetBrokerEpoch(reg.Epoch, s.now())
			}
			// Registered, it reads the current records (KRaft's metadata
			// log); pushes before this were not for this incarnation. A
			// reassignment may have added or removed it meanwhile.
			for _, p := range sortedKeys(s.records) {
				if r := s.assign(b, s.records[p].state.Clone()); r != nil {
					r.ApplyState(s.records[p].state.Clone(), s.now())
					s.drainReplica(b, r)
				}
			}
		})
	})
	// A registration lost on the way is tried again.
	s.e.after(2*time.Second, func() {
		if b.incarnation == inc && b.registering && b.up {
			b.registering = false
			if b.pausedTo <= s.e.now {
				s.register(b)
			}
		}
	})
}

func (s *isrSim) onPush(to string, p isr.StatePush) {
	b := s.brokerByName(to)
	if b.epoch == 0 {
		return // not registered yet: it reads the records once it is
	}
	r := s.assign(b, p.State) // a reassignment may add or remove it
	if r == nil {
		return
	}
	r.ApplyState(p.State, s.now())
	s.drainReplica(b, r)
}

func (s *isrSim) onAlterResponse(to string, a isr.AlterPartitionResponse) {
	b := s.brokerByName(to)
	r := b.replicas[a.Partition]
	if r == nil {
		return
	}
	r.StepAlterPartition(a, s.now())
	s.drainReplica(b, r)
}

// drainReplica routes what a replica wants done.
func (s *isrSim) drainReplica(b *isrBroker, r *isr.Replica) {
	rd := r.Ready()
	name := brokerName(b.id)
	for _, ev := range rd.Events {
		s.replicaEvent(b, ev)
	}
	for _, f := range rd.Fetches {
		req := f
		to := brokerName(f.To)
		s.send(name, to, fmt.Sprintf("fetch %s@%d e%d", f.Partition, f.FetchOffset, f.CurrentLeaderEpoch), func() {
			tb := s.brokerByName(to)
			if tr := tb.replicas[req.Partition]; tr != nil {
				tr.Fetch(req, s.now())
				s.drainReplica(tb, tr)
			}
		})
	}
	for _, f := range rd.FetchResponses {
		resp := f
		if f.ReplicaID < 0 {
			s.send(name, f.Client, describeFetchResp(f), func() { s.onConsumerFetch(resp) })
			continue
		}
		if errorsIs(f.Err, isr.ErrFencedLeaderEpoch) {
			s.situation("fenced leader epoch")
		}
		if f.Diverging != nil {
			s.situation("diverging epoch")
		}
		to := brokerName(f.ReplicaID)
		s.send(name, to, describeFetchResp(f), func() {
			tb := s.brokerByName(to)
			if tr := tb.replicas[resp.Partition]; tr != nil {
				l := tb.logs[resp.Partition]
				leo, epoch := l.EndOffset(), l.LatestEpoch()
				tr.StepFetchResponse(resp, s.now())
				s.chk.fetchApplied(s, tb, tr, resp, leo, epoch)
				s.drainReplica(tb, tr)
			}
		})
	}
	for _, a := range rd.AlterPartitions {
		req := a
		c := b.ctrl
		if c == nil {
			c = s.activeCtrl()
		}
		// A broker sends to the controller it knows, which a failover may
		// have replaced: the old one's writes then fail their CAS.
		s.send(name, c.name, fmt.Sprintf("alter %s isr=%v pe=%d", a.Partition, memberIDsOf(a.NewISR), a.PartitionEpoch), func() {
			if rec := s.records[req.Partition]; s.onAlter != nil && rec != nil && rec.state.PartitionEpoch == req.PartitionEpoch {
				hook := s.onAlter
				s.onAlter = nil
				hook()
			}
			c.c.AlterPartition(req, s.now())
			s.drainController(c)
		})
	}
	for _, p := range rd.ProduceResponses {
		resp := p
		s.chk.produceAnswered(s, b, resp)
		s.send(name, p.Client, describeProduceResp(p), func() { s.onProduceResponse(resp) })
	}
}

func (s *isrSim) replicaEvent(b *isrBroker, ev isr.Event) {
	s.e.tracef(brokerName(b.id), "%s", ev)
	switch ev.Kind {
	case isr.EventBecameLeader:
		s.chk.becameLeader(s, b, ev)
	case isr.EventHighWatermark:
		s.chk.highWatermark(s, b, ev)
	case isr.EventTruncated:
		s.situation("truncation")
	case isr.EventISRProposed:
		if strings.Contains(ev.Detail, "shrink") {
			s.situation("ISR shrink")
		} else if strings.Contains(ev.Detail, "expand") {
			s.situation("ISR expand")
		}
	case isr.EventISRRejected:
		s.situation("ISR proposal rejected")
	}
}

func memberIDsOf(ms []isr.Member) []isr.BrokerID {
	out := make([]isr.BrokerID, len(ms))
	for i, m := range ms {
		out[i] = m.ID
	}
	return out
}

func describeFetchResp(f isr.FetchResponse) string {
	switch {
	case f.Err != nil:
		return fmt.Sprintf("fetch-resp %s %v", f.Partition, f.Err)
	case f.Diverging != nil:
		return fmt.Sprintf("fetch-resp %s diverging epoch %d ends %d", f.Partition, f.Diverging.Epoch, f.Diverging.EndOffset)
	}
	n := 0
	for _, b := range f.Batches {
		n += len(b.Records)
	}
	return fmt.Sprintf("fetch-resp %s e%d hw=%d records=%d", f.Partition, f.LeaderEpoch, f.HighWatermark, n)
}

func describeProduceResp(p isr.ProduceResponse) string {
	if p.Err != nil {
		return fmt.Sprintf("produce-resp#%d %s %v", p.ID, p.Partition, p.Err)
	}
	return fmt.Sprintf("produce-resp#%d %s ok base=%d e%d", p.ID, p.Partition, p.BaseOffset, p.LeaderEpoch)
}
