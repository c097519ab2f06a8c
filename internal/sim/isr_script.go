package sim

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"quire/internal/isr"
)

// isrScript is a deterministic, hand-driven ISR cluster for the seed's
// scenarios (`quire sim scenario K3`): real Replicas over MemLogs and a
// real Controller over an in-memory store, wired by a message queue that
// the scenario drives (run delivers everything deliverable; cuts drop
// messages; time moves only by tick). Nothing is random: a scenario's
// numbers come from its parameters.
type isrScript struct {
	now   time.Time
	start time.Time
	cfg   isrScriptConfig
	nodes []*scriptBroker
	ctrl  *isr.Controller
	// ctrls are deposed or cut-off controllers that still run (K20).
	oldCtrls []*isr.Controller
	store    map[string]*isrRecord
	rev      int64
	// storeCut: brokers cut from the store (and so from the controller,
	// whose records reach brokers through it).
	storeCut map[isr.BrokerID]bool
	cuts     map[[2]isr.BrokerID]bool
	queue    []scriptMessage
	lines    []string

	nextID  uint64
	values  map[uint64][]string
	acks    map[uint64]int8
	acked   []isrAcked // acknowledged records, in acknowledgement order
	refused map[string]int
	unclean bool
	// quiet: leave routine events out of the output.
	quiet bool
	// manual: produce does not let time pass afterwards (a scenario that
	// controls every fetch).
	manual bool
	// dropIf, if set, loses the messages it matches (a scenario's
	// hand-picked interleaving).
	dropIf func(scriptMessage) bool
}

type isrScriptConfig struct {
	brokers        int
	minISR         int
	unclean        bool
	elr            bool
	lagMax         time.Duration
	flushMessages  int64
	mutants        isr.Mutants
	autoRebalance  bool
	rebalanceEvery time.Duration
}

type scriptBroker struct {
	id       isr.BrokerID
	epoch    int64
	up       bool
	replicas map[string]*isr.Replica
	logs     map[string]*isr.MemLog
}

type scriptMessage struct {
	from, to isr.BrokerID // 0: the controller / the client
	what     string
	hw       int64 // a fetch response's HW; -1 otherwise
	deliver  func()
}

func newISRScript(cfg isrScriptConfig) *isrScript {
	t0 := time.Unix(0, 0)
	s := &isrScript{now: t0, start: t0, cfg: cfg, store: map[string]*isrRecord{}, storeCut: map[isr.BrokerID]bool{},
		cuts: map[[2]isr.BrokerID]bool{}, values: map[uint64][]string{}, acks: map[uint64]int8{}, refused: map[string]int{}}
	s.ctrl = s.newController(1)
	for i := 1; i <= cfg.brokers; i++ {
		s.rev++
		b := &scriptBroker{id: isr.BrokerID(i), epoch: s.rev, up: true, replicas: map[string]*isr.Replica{}, logs: map[string]*isr.MemLog{}}
		s.nodes = append(s.nodes, b)
		s.ctrl.Register(isr.Registration{ID: b.id, Epoch: b.epoch}, s.now)
	}
	s.drain()
	return s
}

func (s *isrScript) newController(epoch int64) *isr.Controller {
	c := isr.NewController(isr.ControllerConfig{
		Epoch: epoch, MinISR: s.cfg.minISR, DisableELR: !s.cfg.elr, UncleanElection: s.cfg.unclean,
		DisableAutoRebalance: !s.cfg.autoRebalance, RebalanceInterval: s.cfg.rebalanceEvery, Mutants: s.cfg.mutants,
		PushInterval: time.Second,
	}, s.now)
	c.Load(nil, nil, s.now)
	return c
}

func (s *isrScript) printf(format string, args ...any) {
	s.lines = append(s.lines, fmt.Sprintf("%6.1fs ", s.now.Sub(s.start).Seconds())+fmt.Sprintf(format, args...))
}

func (s *isrScript) broker(id isr.BrokerID) *scriptBroker { return s.nodes[id-1] }

func (s *isrScript) newReplica(b *scriptBroker, part string) *isr.Replica {
	return isr.NewReplica(isr.ReplicaConfig{
		Broker: b.id, Partition: part, BrokerEpoch: b.epoch, Log: b.logs[part], MinISR: s.cfg.minISR,
		LagTimeMax: s.cfg.lagMax, FetchBackoff: 100 * time.Millisecond, FetchTimeout: 2 * time.Second,
		AlterPartitionTimeout: time.Second, ProduceTimeout: 30 * time.Second, FlushMessages: s.cfg.flushMessages,
		FetchMaxBatches: 1 << 20, HighWatermarkCheckpointInterval: time.Second, Mutants: s.cfg.mutants,
	}, s.now)
}

// create makes a partition with the given assignment (the first is the
// preferred leader).
func (s *isrScript) create(part string, replicas ...isr.BrokerID) {
	for _, id := range replicas {
		b := s.broker(id)
		b.logs[part] = isr.NewMemLog()
		b.replicas[part] = s.newReplica(b, part)
	}
	if err := s.ctrl.CreatePartition(part, replicas, s.now); err != nil {
		s.printf("create %s: %v", part, err)
	}
	s.drain()
	s.run()
}

// execMeta applies a controller's operation to the store.
func (s *isrScript) execMeta(op isr.MetaOp) isr.MetaResult {
	rec := s.store[op.Partition]
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
			return isr.MetaResult{ID: op.ID, Err: isr.ErrVersionConflict}
		}
	}
	s.rev++
	s.store[op.Partition] = &isrRecord{state: op.State.Clone(), version: s.rev}
	return isr.MetaResult{ID: op.ID, Version: s.rev}
}

// drain routes what the controllers want done: store operations at once,
// pushes and answers into the queue.
func (s *isrScript) drain() {
	for _, c := range append(slices.Clone(s.oldCtrls), s.ctrl) {
		s.drainController(c)
	}
}

func (s *isrScript) drainController(c *isr.Controller) {
	for {
		rd := c.Ready()
		if rd.Empty() {
			return
		}
		for _, ev := range rd.Events {
			switch ev.Kind {
			case isr.EventPartitionWritten:
				continue
			case isr.EventUncleanElection:
				s.unclean = true
			}
			if !s.quiet || ev.Kind != isr.EventFenced {
				s.printf("controller(epoch %d): %s", c.Epoch(), ev)
			}
		}
		for _, p := range rd.Pushes {
			p := p
			s.queue = append(s.queue, scriptMessage{from: 0, to: p.To, what: "push", deliver: func() {
				b := s.broker(p.To)
				if r := b.replicas[p.State.Partition]; r != nil {
					r.ApplyState(p.State, s.now)
					s.drainReplica(b, r)
				}
			}})
		}
		for _, a := range rd.AlterPartitionResponses {
			a := a
			s.queue = append(s.queue, scriptMessage{from: 0, to: a.To, what: "alter-resp", deliver: func() {
				b := s.broker(a.To)
				if r := b.replicas[a.Partition]; r != nil {
					r.StepAlterPartition(a, s.now)
					s.drainReplica(b, r)
				}
			}})
		}
		for _, op := range rd.MetaOps {
			c.StepMeta(s.execMeta(op), s.now)
		}
	}
}

func (s *isrScript) drainReplica(b *scriptBroker, r *isr.Replica) {
	rd := r.Ready()
	for _, ev := range rd.Events {
		switch ev.Kind {
		case isr.EventBecameLeader, isr.EventTruncated, isr.EventISRProposed, isr.EventISRRejected:
			s.printf("B%d: %s", b.id, ev)
		}
	}
	for _, f := range rd.Fetches {
		f := f
		s.queue = append(s.queue, scriptMessage{from: b.id, to: f.To, what: "fetch", deliver: func() {
			tb := s.broker(f.To)
			if tr := tb.replicas[f.Partition]; tr != nil {
				tr.Fetch(f, s.now)
				s.drainReplica(tb, tr)
			}
		}})
	}
	for _, f := range rd.FetchResponses {
		f := f
		if f.ReplicaID < 0 {
			continue
		}
		s.queue = append(s.queue, scriptMessage{from: b.id, to: f.ReplicaID, what: "fetch-resp", hw: f.HighWatermark, deliver: func() {
			tb := s.broker(f.ReplicaID)
			if tr := tb.replicas[f.Partition]; tr != nil {
				tr.StepFetchResponse(f, s.now)
				s.drainReplica(tb, tr)
			}
		}})
	}
	for _, a := range rd.AlterPartitions {
		a := a
		s.queue = append(s.queue, scriptMessage{from: b.id, to: 0, what: "alter", deliver: func() {
			s.ctrl.AlterPartition(a, s.now)
			s.drain()
		}})
	}
	for _, p := range rd.ProduceResponses {
		s.answered(p)
	}
}

func (s *isrScript) answered(p isr.ProduceResponse) {
	if p.Err != nil {
		s.refused[errName(p.Err)]++
		return
	}
	for i, v := range s.values[p.ID] {
		s.acked = append(s.acked, isrAcked{part: p.Partition, offset: p.BaseOffset + int64(i), value: v, acks: s.acks[p.ID]})
	}
}

func errName(err error) string { return strings.TrimPrefix(err.Error(), "isr: ") }

// blocked reports whether a message cannot pass now.
func (s *isrScript) blocked(m scriptMessage) bool {
	if m.to != 0 && !s.broker(m.to).up || m.from != 0 && !s.broker(m.from).up {
		return true
	}
	if m.from == 0 || m.to == 0 {
		other := m.from + m.to
		return s.storeCut[other]
	}
	return s.cuts[[2]isr.BrokerID{m.from, m.to}] || s.cuts[[2]isr.BrokerID{m.to, m.from}]
}

// run delivers queued messages until none is left (blocked ones are lost).
func (s *isrScript) run() {
	for i := 0; len(s.queue) > 0 && i < 10_000_000; i++ {
		m := s.queue[0]
		s.queue = s.queue[1:]
		if s.blocked(m) || s.dropIf != nil && s.dropIf(m) {
			continue
		}
		m.deliver()
	}
}

// tick advances time by d in steps of 100 ms, ticking every core and
// delivering what they send.
func (s *isrScript) tick(d time.Duration) {
	for end := s.now.Add(d); s.now.Before(end); {
		s.now = s.now.Add(100 * time.Millisecond)
		for _, c := range append(slices.Clone(s.oldCtrls), s.ctrl) {
			c.Tick(s.now)
		}
		s.drain()
		for _, b := range s.nodes {
			if !b.up {
				continue
			}
			for _, part := range sortedKeys(b.replicas) {
				r := b.replicas[part]
				r.Tick(s.now)
				s.drainReplica(b, r)
			}
		}
		s.run()
	}
}

// produce sends n single-record requests to broker to (whatever its role).
func (s *isrScript) produce(part string, to isr.BrokerID, acks int8, n int) {
	b := s.broker(to)
	for range n {
		s.nextID++
		v := fmt.Sprintf("m%d", s.nextID)
		s.values[s.nextID], s.acks[s.nextID] = []string{v}, acks
		r := b.replicas[part]
		if !b.up || r == nil {
			s.refused["broker down"]++
			continue
		}
		r.Produce(isr.ProduceRequest{ID: s.nextID, Client: "producer", Partition: part, Acks: acks, Records: [][]byte{[]byte(v)}}, s.now)
		s.drainReplica(b, r)
		if acks == isr.AcksNone {
			s.acked = append(s.acked, isrAcked{part: part, offset: -1, value: v, acks: acks})
		}
	}
	s.run()
	if !s.manual {
		// Followers fetch what was produced (one fetch round: a fetch
		// response carries everything).
		s.tick(200 * time.Millisecond)
	}
}

// crash stops a broker (power: losing its page cache) and ends its session.
func (s *isrScript) crash(id isr.BrokerID, power bool) {
	b := s.broker(id)
	b.up = false
	b.replicas = map[string]*isr.Replica{}
	if power {
		for _, part := range sortedKeys(b.logs) {
			b.logs[part].Crash()
		}
	}
	s.printf("B%d crashes%s", id, map[bool]string{true: " (power loss: page cache lost)"}[power])
	s.ctrl.SessionExpired(id, b.epoch, s.now)
	s.drain()
	s.run()
}

// expire ends a running broker's session (it keeps running: NP4, NP6).
func (s *isrScript) expire(id isr.BrokerID) {
	s.printf("B%d's session expires", id)
	s.ctrl.SessionExpired(id, s.broker(id).epoch, s.now)
	s.drain()
	s.run()
}

// restart brings a broker back under a new broker epoch.
func (s *isrScript) restart(id isr.BrokerID, unclean bool) {
	b := s.broker(id)
	s.rev++
	b.epoch, b.up = s.rev, true
	b.replicas = map[string]*isr.Replica{}
	for _, part := range sortedKeys(b.logs) {
		r := s.newReplica(b, part)
		b.replicas[part] = r
		if rec := s.store[part]; rec != nil {
			r.ApplyState(rec.state, s.now)
		}
		s.drainReplica(b, r)
	}
	s.printf("B%d returns (broker epoch %d%s)", id, b.epoch, map[bool]string{true: ", unclean shutdown"}[unclean])
	s.ctrl.Register(isr.Registration{ID: id, Epoch: b.epoch, UncleanShutdown: unclean}, s.now)
	s.drain()
	s.run()
}

// register gives a running broker a new session (after its expiry).
func (s *isrScript) register(id isr.BrokerID) {
	b := s.broker(id)
	s.rev++
	b.epoch = s.rev
	for _, part := range sortedKeys(b.replicas) {
		b.replicas[part].SetBrokerEpoch(b.epoch, s.now)
	}
	s.ctrl.Register(isr.Registration{ID: id, Epoch: b.epoch}, s.now)
	s.drain()
	s.run()
}

func (s *isrScript) cut(a, b isr.BrokerID) { s.cuts[[2]isr.BrokerID{a, b}] = true }

func (s *isrScript) heal() {
	s.cuts = map[[2]isr.BrokerID]bool{}
	s.storeCut = map[isr.BrokerID]bool{}
	s.printf("network healed")
}

// leader returns the running leader the store names, if it took up its epoch.
func (s *isrScript) leader(part string) (*scriptBroker, *isr.Replica) {
	rec := s.store[part]
	if rec == nil || rec.state.Leader == isr.NoLeader {
		return nil, nil
	}
	b := s.broker(rec.state.Leader)
	r := b.replicas[part]
	if !b.up || r == nil || r.Role() != isr.RoleLeader || r.LeaderEpoch() != rec.state.LeaderEpoch {
		return nil, nil
	}
	return b, r
}

// state prints the record and every replica's LEO and HW.
func (s *isrScript) state(part string) {
	rec := s.store[part]
	leader := "none (offline)"
	if rec.state.Leader != isr.NoLeader {
		leader = fmt.Sprintf("B%d", rec.state.Leader)
	}
	isrIDs := []string{}
	for _, m := range rec.state.ISR {
		isrIDs = append(isrIDs, fmt.Sprintf("B%d", m.ID))
	}
	elr := []string{}
	for _, m := range rec.state.ELR {
		elr = append(elr, fmt.Sprintf("B%d", m.ID))
	}
	line := fmt.Sprintf("%s: leader=%s leader-epoch=%d ISR={%s}", part, leader, rec.state.LeaderEpoch, strings.Join(isrIDs, ","))
	if len(elr) > 0 {
		line += " ELR={" + strings.Join(elr, ",") + "}"
	}
	var reps []string
	for _, id := range rec.state.Replicas {
		b := s.broker(id)
		l := b.logs[part]
		if r := b.replicas[part]; b.up && r != nil {
			reps = append(reps, fmt.Sprintf("B%d %s LEO=%d HW=%d", id, r.Role(), l.EndOffset(), r.HighWatermark()))
		} else {
			reps = append(reps, fmt.Sprintf("B%d down LEO=%d flushed=%d", id, l.EndOffset(), l.FlushedOffset()))
		}
	}
	s.printf("%s; %s", line, strings.Join(reps, "; "))
}

// tally counts acknowledged records (acks 1 and all) and those missing
// from the log of the partition's leader (from the best log on any replica
// when it is offline: what an operator could still recover).
func (s *isrScript) tally(part string) (acked, lost int) {
	_, lr := s.leader(part)
	var logs []*isr.MemLog
	if lr != nil {
		logs = append(logs, s.broker(s.store[part].state.Leader).logs[part])
	} else {
		for _, b := range s.nodes {
			if l := b.logs[part]; l != nil {
				logs = append(logs, l)
			}
		}
	}
	for _, a := range s.acked {
		if a.acks == isr.AcksNone || a.part != part {
			continue
		}
		acked++
		held := false
		for _, l := range logs {
			if v, _, ok := l.Record(a.offset); ok && string(v) == a.value {
				held = true
			}
		}
		if !held {
			lost++
		}
	}
	return acked, lost
}
