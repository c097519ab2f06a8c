package isr_test

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"

	"quire/internal/isr"
)

// TestInteraction runs the scenario scripts in testdata/: the seed's
// figures, with real Replicas (one per broker and partition, over MemLogs)
// and a real Controller, wired by a network the script drives. Nothing is
// delivered on its own: a message waits until the script delivers or drops
// it, as in etcd/raft's interaction tests. Metadata operations run at once
// against a model store (unless the store is down). Rewrite the golden
// output with
//
//	go test ./internal/isr/ -run TestInteraction -rewrite
//
// and read the diff: the output is the test.
//
// Commands:
//
//	cluster brokers=3 [min-isr=1] [lag=10s] [unclean] [no-elr] [auto-rebalance] [rebalance-every=300s]
//	        [flush-messages=0] [flush-ms=0] [push-every=0] [recovery=balanced|aggressive|none] [mutant=name]
//	                                   brokers 1..N register; controller "c" (epoch 1) starts
//	create-partition p1 replicas=(2,1,3)
//	produce p1 to=2 [acks=1|all|0] [n=1] [timeout=30s]
//	                                   a client sends records v<k>.. of p1 to broker 2
//	deliver [from=2] [to=1] [kind=fetch|fetch-resp|push|alter|alter-resp] [n=all] [drop]
//	                                   messages now in the network that match, oldest first;
//	                                   what the receiver sends goes into the network
//	stabilize [max=200]                deliver everything until the network is empty
//	tick [d=1s] [n=1]                  time passes; every running core gets a Tick
//	crash 2 [lose-unflushed] [keep-session]
//	                                   broker 2's process dies (lose-unflushed: its page cache too);
//	                                   its session expires at once unless keep-session
//	expire 2                           broker 2's session expires while it keeps running (NP4)
//	restart 2 [unclean]                broker 2 restarts: registers again (new broker epoch), reads the records
//	register 2                         running broker 2 opens a new session (new broker epoch)
//	cut 1 2 / heal [1 2]               drop every message between two nodes (c: the controller)
//	elect-preferred p1
//	reassign p1 replicas=(4,5,6) [keep-rf] / reassign p1 cancel
//	                                   AlterPartitionReassignments: a broker a pushed record names
//	                                   opens a replica (a new MemLog); one it no longer names deletes
//	                                   its replica and log, as the broker's replica manager does
//	consume p1 from=2 [offset=0]       a consumer fetch; prints what it got
//	print [p1]                         the record, and per replica role, epoch, LEO, HW and log
//	acked p1                           acknowledged records, and those missing from the leader's log
//	flush 2                            broker 2's logs are flushed (the OS wrote the page cache back)
//	expect-loss p1                     the script exceeds the fault model: loss is counted, not a violation
//
// After every command the harness checks: at most one replica leads per
// leader epoch, and no record acknowledged with acks=all or read by a
// consumer is missing from the leader's log (unless an unclean election,
// which the configuration allowed, lost it). A broken check fails the test, unless the
// script runs a mutant: then it prints as a VIOLATION line, which the golden
// output expects.
func TestInteraction(t *testing.T) {
	datadriven.Walk(t, "testdata", func(t *testing.T, path string) {
		e := newScriptEnv()
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			return e.run(t, d)
		})
	})
}

var errStoreDown = errors.New("store unavailable")

type scriptNode struct {
	id       isr.BrokerID
	epoch    int64
	up       bool
	replicas map[string]*isr.Replica
	logs     map[string]*isr.MemLog
}

type scriptMsg struct {
	from, to string
	kind     string
	v        any
}

type storeRecord struct {
	state   isr.PartitionState
	version int64
}

type ackedRecord struct {
	offset int64
	value  string
	acks   int8
}

type scriptEnv struct {
	now      time.Time
	minISR   int
	lag      time.Duration
	flushMsg int64
	flushMs  time.Duration
	mutants  isr.Mutants
	mutated  bool

	nodes []*scriptNode
	ctrl  *isr.Controller
	store map[string]*storeRecord
	rev   int64
	down  bool // the store

	net  []scriptMsg
	cuts map[[2]string]bool

	nextValue map[string]int
	nextReq   uint64
	values    map[uint64][]string // produce request → its values
	reqAcks   map[uint64]int8
	acked     map[string][]ackedRecord
	// unclean: partitions that had an unclean election, whose loss the
	// configuration permits (it is counted, not a violation).
	unclean map[string]bool
	// consumed: what consumers read (below the HW, so never to disappear).
	consumed map[string][]ackedRecord

	out      strings.Builder
	reported map[string]bool
	broken   []string
}

func newScriptEnv() *scriptEnv {
	return &scriptEnv{
		now: time.Unix(0, 0), store: map[string]*storeRecord{}, cuts: map[[2]string]bool{},
		nextValue: map[string]int{}, values: map[uint64][]string{}, reqAcks: map[uint64]int8{}, unclean: map[string]bool{}, consumed: map[string][]ackedRecord{}, acked: map[string][]ackedRecord{},
		reported: map[string]bool{},
	}
}

type scriptError struct{ msg string }

func (e *scriptEnv) fail(format string, args ...any) {
	panic(scriptError{fmt.Sprintf(format, args...)})
}

func (e *scriptEnv) printf(format string, args ...any) {
	fmt.Fprintf(&e.out, format, args...)
	e.out.WriteByte('\n')
}

func (e *scriptEnv) run(t *testing.T, d *datadriven.TestData) string {
	e.out.Reset()
	e.broken = nil
	defer func() {
		if r := recover(); r != nil {
			se, ok := r.(scriptError)
			if !ok {
				panic(r)
			}
			t.Fatalf("%s: %s: %s", d.Pos, d.Cmd, se.msg)
		}
	}()
	switch d.Cmd {
	case "cluster":
		e.cmdCluster(d)
	case "create-partition":
		name := e.arg0(d)
		var reps []isr.BrokerID
		for _, s := range e.list(d, "replicas") {
			reps = append(reps, e.broker(s).id)
		}
		if err := e.ctrl.CreatePartition(name, reps, e.now); err != nil {
			e.printf("error: %v", err)
		}
		for _, n := range e.nodes {
			if slices.Contains(reps, n.id) {
				n.logs[name] = isr.NewMemLog()
				if n.up {
					n.replicas[name] = e.newReplica(n, name)
				}
			}
		}
		e.drainController()
	case "produce":
		e.cmdProduce(d)
	case "deliver":
		if e.deliver(d) == 0 {
			e.fail("no message in the network matches")
		}
	case "stabilize":
		e.stabilize(d)
	case "tick":
		e.cmdTick(d)
	case "crash":
		e.cmdCrash(d)
	case "expire":
		n := e.broker(e.arg0(d))
		e.ctrl.SessionExpired(n.id, n.epoch, e.now)
		e.drainController()
	case "restart":
		e.cmdRestart(d)
	case "register":
		// A running broker whose session expired opens a new one.
		n := e.broker(e.arg0(d))
		e.rev++
		n.epoch = e.rev
		e.printf("broker %d registers again (broker epoch %d)", n.id, n.epoch)
		for _, part := range sortedKeys(n.replicas) {
			n.replicas[part].SetBrokerEpoch(n.epoch, e.now)
		}
		e.ctrl.Register(isr.Registration{ID: n.id, Epoch: n.epoch, LogEnds: n.logEnds()}, e.now)
		e.drainControllerIndent("  ")
	case "cut", "heal":
		e.cmdCut(d)
	case "store-down", "store-up":
		e.down = d.Cmd == "store-down"
		e.printf("store %s", map[bool]string{true: "down", false: "up"}[e.down])
	case "reassign":
		req := isr.ReassignRequest{Partition: e.arg0(d), KeepReplicationFactor: slices.Contains(e.args(d), "keep-rf")}
		if !slices.Contains(e.args(d), "cancel") {
			req.Target = []isr.BrokerID{}
			for _, s := range e.list(d, "replicas") {
				req.Target = append(req.Target, e.broker(s).id)
			}
		}
		if err := e.ctrl.Reassign(req, e.now); err != nil {
			e.printf("error: %v", err)
		}
		e.drainController()
	case "elect-preferred":
		if err := e.ctrl.ElectPreferred(e.arg0(d), e.now); err != nil {
			e.printf("error: %v", err)
		}
		e.drainController()
	case "consume":
		e.cmdConsume(d)
	case "print":
		e.cmdPrint(d)
	case "acked":
		e.cmdAcked(e.arg0(d))
	case "flush":
		// The OS writes a broker's page cache back (or flush.ms fires).
		n := e.broker(e.arg0(d))
		for _, part := range sortedKeys(n.replicas) {
			n.replicas[part].Flush(e.now)
			e.drainReplica(n, n.replicas[part], "")
		}
	case "expect-loss":
		// The script goes beyond what the configuration protects against
		// (more simultaneous failures than min.insync.replicas-1): loss is
		// counted, not a violation.
		e.unclean[e.arg0(d)] = true
		e.printf("%s: loss permitted from here on", e.arg0(d))
	default:
		e.fail("unknown command")
	}
	e.check()
	for _, b := range e.broken {
		if !e.mutated {
			t.Errorf("%s: %s: %s", d.Pos, d.Cmd, b)
		}
		e.printf("VIOLATION: %s", b)
	}
	return e.out.String()
}

// Arguments.

func (e *scriptEnv) arg0(d *datadriven.TestData) string {
	if len(d.CmdArgs) == 0 || len(d.CmdArgs[0].Vals) != 0 {
		e.fail("missing the first argument")
	}
	return d.CmdArgs[0].Key
}

func (e *scriptEnv) args(d *datadriven.TestData) []string {
	var out []string
	for _, a := range d.CmdArgs {
		if len(a.Vals) == 0 {
			out = append(out, a.Key)
		}
	}
	return out
}

func (e *scriptEnv) str(d *datadriven.TestData, key, def string) string {
	for _, a := range d.CmdArgs {
		if a.Key == key {
			if len(a.Vals) != 1 {
				e.fail("%s wants one value", key)
			}
			return a.Vals[0]
		}
	}
	return def
}

func (e *scriptEnv) list(d *datadriven.TestData, key string) []string {
	for _, a := range d.CmdArgs {
		if a.Key == key {
			return a.Vals
		}
	}
	return nil
}

func (e *scriptEnv) num(d *datadriven.TestData, key string, def int) int {
	s := e.str(d, key, "")
	if s == "" {
		return def
	}
	n, err := strconv.Atoi(s)
	if err != nil {
		e.fail("%s=%s: %v", key, s, err)
	}
	return n
}

func (e *scriptEnv) dur(d *datadriven.TestData, key string, def time.Duration) time.Duration {
	s := e.str(d, key, "")
	if s == "" {
		return def
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		e.fail("%s=%s: %v", key, s, err)
	}
	return v
}

func (e *scriptEnv) broker(s string) *scriptNode {
	id, err := strconv.Atoi(s)
	if err != nil || id < 1 || id > len(e.nodes) {
		e.fail("no broker %q", s)
	}
	return e.nodes[id-1]
}

// Setup.

func (e *scriptEnv) cmdCluster(d *datadriven.TestData) {
	n := e.num(d, "brokers", 3)
	e.minISR = e.num(d, "min-isr", 1)
	e.lag = e.dur(d, "lag", 10*time.Second)
	e.flushMsg = int64(e.num(d, "flush-messages", 0))
	e.flushMs = e.dur(d, "flush-ms", 0)
	m, err := isr.ParseMutant(e.str(d, "mutant", ""))
	if err != nil {
		e.fail("%v", err)
	}
	e.mutants, e.mutated = m, m.Any()
	flags := e.args(d)
	recovery, err := isr.ParseRecoveryStrategy(e.str(d, "recovery", "balanced"))
	if err != nil {
		e.fail("%v", err)
	}
	e.ctrl = isr.NewController(isr.ControllerConfig{
		Epoch: 1, MinISR: e.minISR, DisableELR: slices.Contains(flags, "no-elr"),
		UncleanElection: slices.Contains(flags, "unclean"), DisableAutoRebalance: !slices.Contains(flags, "auto-rebalance"),
		RebalanceInterval: e.dur(d, "rebalance-every", 300*time.Second), PushInterval: e.dur(d, "push-every", 0), Mutants: m,
		UncleanRecovery: recovery,
	}, e.now)
	e.ctrl.Load(nil, nil, e.now)
	for i := 1; i <= n; i++ {
		e.rev++
		node := &scriptNode{id: isr.BrokerID(i), epoch: e.rev, up: true, replicas: map[string]*isr.Replica{}, logs: map[string]*isr.MemLog{}}
		e.nodes = append(e.nodes, node)
		e.ctrl.Register(isr.Registration{ID: node.id, Epoch: node.epoch}, e.now)
	}
	e.drainController()
	e.printf("%d brokers, min.insync.replicas=%d, replica.lag.time.max.ms=%v, mutant=%v", n, e.minISR, e.lag, m.Any())
}

func (e *scriptEnv) newReplica(n *scriptNode, partition string) *isr.Replica {
	return isr.NewReplica(isr.ReplicaConfig{
		Broker: n.id, Partition: partition, BrokerEpoch: n.epoch, Log: n.logs[partition], MinISR: e.minISR,
		LagTimeMax: e.lag, FlushMessages: e.flushMsg, FlushInterval: e.flushMs, Mutants: e.mutants,
		HighWatermarkCheckpointInterval: time.Second, FetchTimeout: 2 * time.Second,
	}, e.now)
}

// Message flow.

func nodeName(id isr.BrokerID) string { return strconv.Itoa(int(id)) }

func (e *scriptEnv) send(from, to, kind string, v any) {
	e.net = append(e.net, scriptMsg{from: from, to: to, kind: kind, v: v})
}

// drainReplica routes what a replica wants done.
func (e *scriptEnv) drainReplica(n *scriptNode, r *isr.Replica, indent string) {
	rd := r.Ready()
	from := nodeName(n.id)
	for _, ev := range rd.Events {
		e.printf("%s%s: %s", indent, from, ev)
	}
	for _, f := range rd.Fetches {
		e.send(from, nodeName(f.To), "fetch", f)
	}
	for _, f := range rd.FetchResponses {
		if f.ReplicaID < 0 {
			continue // consumers: cmdConsume reads them
		}
		e.send(from, nodeName(f.ReplicaID), "fetch-resp", f)
	}
	for _, a := range rd.AlterPartitions {
		e.send(from, "c", "alter", a)
	}
	for _, p := range rd.ProduceResponses {
		e.produceAnswered(indent, p)
	}
}

func (e *scriptEnv) drainController() { e.drainControllerIndent("") }

func (e *scriptEnv) drainControllerIndent(indent string) {
	for {
		rd := e.ctrl.Ready()
		if rd.Empty() {
			return
		}
		for _, ev := range rd.Events {
			if ev.Kind == isr.EventPartitionWritten {
				continue // the pushes show it
			}
			if ev.Kind == isr.EventUncleanElection {
				e.unclean[ev.Partition] = true
			}
			e.printf("%sc: %s", indent, ev)
		}
		for _, p := range rd.Pushes {
			e.send("c", nodeName(p.To), "push", p)
		}
		for _, a := range rd.AlterPartitionResponses {
			e.send("c", nodeName(a.To), "alter-resp", a)
		}
		for _, op := range rd.MetaOps {
			e.ctrl.StepMeta(e.execMeta(op), e.now)
		}
	}
}

func (e *scriptEnv) execMeta(op isr.MetaOp) isr.MetaResult {
	if e.down {
		return isr.MetaResult{ID: op.ID, Err: errStoreDown}
	}
	rec := e.store[op.Partition]
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
	e.rev++
	e.store[op.Partition] = &storeRecord{state: op.State.Clone(), version: e.rev}
	return isr.MetaResult{ID: op.ID, Version: e.rev}
}

func (e *scriptEnv) isCut(a, b string) bool {
	return e.cuts[[2]string{a, b}] || e.cuts[[2]string{b, a}]
}

func (e *scriptEnv) matches(d *datadriven.TestData, m scriptMsg) bool {
	if f := e.str(d, "from", ""); f != "" && f != m.from {
		return false
	}
	if t := e.str(d, "to", ""); t != "" && t != m.to {
		return false
	}
	if k := e.str(d, "kind", ""); k != "" && k != m.kind {
		return false
	}
	return true
}

func (e *scriptEnv) deliver(d *datadriven.TestData) int {
	limit := e.num(d, "n", 1<<30)
	drop := slices.Contains(e.args(d), "drop")
	var picked []scriptMsg
	var rest []scriptMsg
	for _, m := range e.net {
		if len(picked) < limit && e.matches(d, m) {
			picked = append(picked, m)
		} else {
			rest = append(rest, m)
		}
	}
	e.net = rest
	for _, m := range picked {
		if drop {
			e.printf("%s -> %s %s: dropped", m.from, m.to, describe(m))
			continue
		}
		e.handle(m)
	}
	return len(picked)
}

func (e *scriptEnv) stabilize(d *datadriven.TestData) {
	for i := 0; len(e.net) > 0; i++ {
		if i >= e.num(d, "max", 200) {
			lines := strings.Split(e.out.String(), "\n")
			e.fail("the network is still busy after %d deliveries; last lines:\n%s", i, strings.Join(lines[max(0, len(lines)-30):], "\n"))
		}
		m := e.net[0]
		e.net = e.net[1:]
		e.handle(m)
	}
}

// handle delivers one message: to a crashed node or across a cut it is lost.
func (e *scriptEnv) handle(m scriptMsg) {
	head := fmt.Sprintf("%s -> %s %s", m.from, m.to, describe(m))
	if e.isCut(m.from, m.to) {
		e.printf("%s: lost (cut)", head)
		return
	}
	if m.to == "c" {
		e.printf("%s", head)
		e.ctrl.AlterPartition(m.v.(isr.AlterPartitionRequest), e.now)
		e.drainControllerIndent("  ")
		return
	}
	n := e.broker(m.to)
	if !n.up {
		e.printf("%s: lost (down)", head)
		return
	}
	var part string
	switch v := m.v.(type) {
	case isr.FetchRequest:
		part = v.Partition
	case isr.FetchResponse:
		part = v.Partition
	case isr.StatePush:
		part = v.State.Partition
	case isr.AlterPartitionResponse:
		part = v.Partition
	}
	r := n.replicas[part]
	if push, ok := m.v.(isr.StatePush); ok && r == nil && slices.Contains(push.State.Replicas, n.id) {
		e.printf("%s", head)
		e.printf("  broker %d opens a replica of %s", n.id, part)
		n.logs[part] = isr.NewMemLog()
		r = e.newReplica(n, part)
		n.replicas[part] = r
		head = ""
	}
	if r == nil {
		e.printf("%s: no replica", head)
		return
	}
	if head != "" {
		e.printf("%s", head)
	}
	switch v := m.v.(type) {
	case isr.FetchRequest:
		r.Fetch(v, e.now)
	case isr.FetchResponse:
		r.StepFetchResponse(v, e.now)
	case isr.StatePush:
		applied := r.LeaderEpoch() == isr.NoEpoch || v.State.Newer(r.State())
		r.ApplyState(v.State, e.now)
		if applied && !slices.Contains(v.State.Replicas, n.id) {
			// A reassignment removed this broker: the replica stops and
			// its log is deleted (a record naming it again opens a new one).
			e.drainReplica(n, r, "  ")
			e.printf("  broker %d deletes its replica of %s", n.id, part)
			delete(n.replicas, part)
			delete(n.logs, part)
			return
		}
	case isr.AlterPartitionResponse:
		r.StepAlterPartition(v, e.now)
	}
	e.drainReplica(n, r, "  ")
}

func describe(m scriptMsg) string {
	switch v := m.v.(type) {
	case isr.FetchRequest:
		return fmt.Sprintf("fetch %s off=%d last-epoch=%d epoch=%d", v.Partition, v.FetchOffset, v.LastFetchedEpoch, v.CurrentLeaderEpoch)
	case isr.FetchResponse:
		s := fmt.Sprintf("fetch-resp %s", v.Partition)
		switch {
		case v.Err != nil:
			return s + fmt.Sprintf(" err=%v leo=%d", v.Err, v.LogEndOffset)
		case v.Diverging != nil:
			return s + fmt.Sprintf(" epoch=%d diverging=(epoch %d ends %d)", v.LeaderEpoch, v.Diverging.Epoch, v.Diverging.EndOffset)
		}
		return s + fmt.Sprintf(" epoch=%d hw=%d %s", v.LeaderEpoch, v.HighWatermark, formatBatches(v.Batches))
	case isr.StatePush:
		return "push " + v.State.String()
	case isr.AlterPartitionRequest:
		ids := make([]string, len(v.NewISR))
		for i, m := range v.NewISR {
			ids[i] = nodeName(m.ID)
		}
		return fmt.Sprintf("alter %s isr=(%s) le=%d pe=%d", v.Partition, strings.Join(ids, ","), v.LeaderEpoch, v.PartitionEpoch)
	case isr.AlterPartitionResponse:
		if v.Err != nil {
			return fmt.Sprintf("alter-resp %s err=%v", v.Partition, v.Err)
		}
		return "alter-resp " + v.State.String()
	}
	return m.kind
}

func formatBatches(bs []isr.Batch) string {
	if len(bs) == 0 {
		return "[]"
	}
	var parts []string
	for _, b := range bs {
		vals := make([]string, len(b.Records))
		for i, r := range b.Records {
			vals[i] = string(r)
		}
		parts = append(parts, fmt.Sprintf("%d:%s@%d", b.BaseOffset, strings.Join(vals, ","), b.LeaderEpoch))
	}
	return "[" + strings.Join(parts, " ") + "]"
}

// Clients.

func (e *scriptEnv) cmdProduce(d *datadriven.TestData) {
	part := e.arg0(d)
	n := e.broker(e.str(d, "to", ""))
	acks := map[string]int8{"0": isr.AcksNone, "1": isr.AcksLeader, "all": isr.AcksAll, "-1": isr.AcksAll}[e.str(d, "acks", "1")]
	e.nextReq++
	req := isr.ProduceRequest{ID: e.nextReq, Client: "client", Partition: part, Acks: acks, Timeout: e.dur(d, "timeout", 0)}
	for range e.num(d, "n", 1) {
		e.nextValue[part]++
		v := fmt.Sprintf("v%d", e.nextValue[part])
		req.Records = append(req.Records, []byte(v))
		e.values[req.ID] = append(e.values[req.ID], v)
	}
	e.reqAcks[req.ID] = acks
	e.printf("client -> %d produce#%d %s acks=%s %s", n.id, req.ID, part, e.str(d, "acks", "1"), strings.Join(e.values[req.ID], ","))
	r := n.replicas[part]
	if !n.up || r == nil || e.isCut("client", nodeName(n.id)) {
		e.printf("  lost: broker %d is down", n.id)
		return
	}
	r.Produce(req, e.now)
	e.drainReplica(n, r, "  ")
}

func (e *scriptEnv) produceAnswered(indent string, p isr.ProduceResponse) {
	if p.Err != nil {
		e.printf("%sclient <- %d produce#%d: %v", indent, p.From, p.ID, p.Err)
		return
	}
	vals := e.values[p.ID]
	e.printf("%sclient <- %d produce#%d: ok offsets %d..%d", indent, p.From, p.ID, p.BaseOffset, p.BaseOffset+int64(len(vals))-1)
	acks := e.reqAcks[p.ID]
	for i, v := range vals {
		e.acked[p.Partition] = append(e.acked[p.Partition], ackedRecord{offset: p.BaseOffset + int64(i), value: v, acks: acks})
	}
}

func (e *scriptEnv) cmdConsume(d *datadriven.TestData) {
	part := e.arg0(d)
	n := e.broker(e.str(d, "from", ""))
	r := n.replicas[part]
	if !n.up || r == nil {
		e.printf("broker %d is down", n.id)
		return
	}
	e.nextReq++
	r.Fetch(isr.FetchRequest{ID: e.nextReq, Partition: part, ReplicaID: -1, Client: "consumer", To: n.id,
		CurrentLeaderEpoch: isr.NoEpoch, FetchOffset: int64(e.num(d, "offset", 0)), LastFetchedEpoch: isr.NoEpoch}, e.now)
	rd := r.Ready()
	for _, f := range rd.FetchResponses {
		if f.Err != nil {
			e.printf("consumer <- %d: %v", n.id, f.Err)
			continue
		}
		e.printf("consumer <- %d: hw=%d %s", n.id, f.HighWatermark, formatBatches(f.Batches))
		for _, b := range f.Batches {
			for i, rec := range b.Records {
				e.consumed[part] = append(e.consumed[part], ackedRecord{offset: b.BaseOffset + int64(i), value: string(rec)})
			}
		}
	}
}

// Time and faults.

func (e *scriptEnv) cmdTick(d *datadriven.TestData) {
	step := e.dur(d, "d", time.Second)
	for range e.num(d, "n", 1) {
		e.now = e.now.Add(step)
		e.printf("t=%v", e.now.Sub(time.Unix(0, 0)))
		e.ctrl.Tick(e.now)
		e.drainControllerIndent("  ")
		for _, n := range e.nodes {
			if !n.up {
				continue
			}
			for _, part := range sortedKeys(n.replicas) {
				r := n.replicas[part]
				r.Tick(e.now)
				e.drainReplica(n, r, "  ")
			}
		}
	}
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func (e *scriptEnv) cmdCrash(d *datadriven.TestData) {
	n := e.broker(e.arg0(d))
	flags := e.args(d)
	n.up = false
	n.replicas = map[string]*isr.Replica{}
	lost := ""
	if slices.Contains(flags, "lose-unflushed") {
		for _, part := range sortedKeys(n.logs) {
			l := n.logs[part]
			if u := l.Unflushed(); u > 0 {
				lost += fmt.Sprintf(" %s: %d unflushed records lost", part, u)
			}
			l.Crash()
		}
	}
	e.printf("broker %d crashed%s", n.id, lost)
	if !slices.Contains(flags, "keep-session") {
		e.ctrl.SessionExpired(n.id, n.epoch, e.now)
		e.drainControllerIndent("  ")
	}
}

// logEnds is what a broker registers: where each of its logs ends.
func (n *scriptNode) logEnds() []isr.ReplicaLogEnd {
	var ends []isr.ReplicaLogEnd
	for _, part := range sortedKeys(n.logs) {
		l := n.logs[part]
		ends = append(ends, isr.ReplicaLogEnd{Partition: part, LastEpoch: l.LatestEpoch(), EndOffset: l.EndOffset()})
	}
	return ends
}

func (e *scriptEnv) cmdRestart(d *datadriven.TestData) {
	n := e.broker(e.arg0(d))
	unclean := slices.Contains(e.args(d), "unclean")
	e.rev++
	n.epoch, n.up = e.rev, true
	n.replicas = map[string]*isr.Replica{}
	e.printf("broker %d registers (broker epoch %d%s)", n.id, n.epoch, map[bool]string{true: ", unclean shutdown"}[unclean])
	// A starting broker reads the current records (KRaft's metadata log):
	// it opens the replicas they name it in, and deletes the logs of
	// those that no longer name it (a reassignment removed it meanwhile).
	for _, part := range sortedKeys(e.store) {
		if _, ok := n.logs[part]; !ok && slices.Contains(e.store[part].state.Replicas, n.id) {
			n.logs[part] = isr.NewMemLog()
		}
	}
	for _, part := range sortedKeys(n.logs) {
		rec := e.store[part]
		if rec != nil && !slices.Contains(rec.state.Replicas, n.id) {
			e.printf("  broker %d deletes its replica of %s", n.id, part)
			delete(n.logs, part)
			continue
		}
		r := e.newReplica(n, part)
		n.replicas[part] = r
		if rec != nil {
			r.ApplyState(rec.state, e.now)
		}
		e.drainReplica(n, r, "  ")
	}
	e.ctrl.Register(isr.Registration{ID: n.id, Epoch: n.epoch, UncleanShutdown: unclean, LogEnds: n.logEnds()}, e.now)
	e.drainControllerIndent("  ")
}

func (e *scriptEnv) cmdCut(d *datadriven.TestData) {
	a := e.args(d)
	if d.Cmd == "heal" && len(a) == 0 {
		e.cuts = map[[2]string]bool{}
		e.printf("network healed")
		return
	}
	if len(a) != 2 {
		e.fail("%s wants two nodes", d.Cmd)
	}
	if d.Cmd == "cut" {
		e.cuts[[2]string{a[0], a[1]}] = true
		e.printf("cut %s-%s", a[0], a[1])
		return
	}
	delete(e.cuts, [2]string{a[0], a[1]})
	delete(e.cuts, [2]string{a[1], a[0]})
	e.printf("healed %s-%s", a[0], a[1])
}

// Inspection.

func (e *scriptEnv) cmdPrint(d *datadriven.TestData) {
	parts := sortedKeys(e.store)
	if len(d.CmdArgs) > 0 {
		parts = []string{e.arg0(d)}
	}
	for _, part := range parts {
		s, _ := e.ctrl.Partition(part)
		e.printf("%s", s)
		for _, n := range e.nodes {
			l := n.logs[part]
			if l == nil {
				continue
			}
			r := n.replicas[part]
			switch {
			case !n.up:
				e.printf("  %d: down leo=%d flushed=%d log=%s", n.id, l.EndOffset(), l.FlushedOffset(), formatLog(l))
			default:
				e.printf("  %d: %s epoch=%d leo=%d hw=%d log=%s", n.id, r.Role(), r.LeaderEpoch(), l.EndOffset(), r.HighWatermark(), formatLog(l))
			}
		}
	}
}

func formatLog(l *isr.MemLog) string {
	var b strings.Builder
	b.WriteByte('[')
	for o := int64(0); o < l.EndOffset(); o++ {
		v, ep, _ := l.Record(o)
		if o > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%s@%d", v, ep)
	}
	b.WriteByte(']')
	return b.String()
}

// leaderOf returns the leader the controller's record names, if it runs
// and has taken up that leader epoch (a deposed leader that has not heard
// yet is not it).
func (e *scriptEnv) leaderOf(part string) (*scriptNode, *isr.Replica) {
	s, ok := e.ctrl.Partition(part)
	if !ok || s.Leader == isr.NoLeader {
		return nil, nil
	}
	n := e.nodes[s.Leader-1]
	r := n.replicas[part]
	if !n.up || r == nil || r.Role() != isr.RoleLeader || r.LeaderEpoch() != s.LeaderEpoch {
		return nil, nil
	}
	return n, r
}

func (e *scriptEnv) cmdAcked(part string) {
	recs := e.acked[part]
	n, r := e.leaderOf(part)
	var lost []string
	for _, a := range recs {
		if n == nil || !holds(n.logs[part], a) {
			lost = append(lost, a.value)
		}
	}
	leader := "none"
	if n != nil {
		leader = fmt.Sprintf("%d (epoch %d, leo=%d, hw=%d)", n.id, r.LeaderEpoch(), r.LogEndOffset(), r.HighWatermark())
	}
	e.printf("%s leader=%s acked=%d lost=%d %v", part, leader, len(recs), len(lost), lost)
}

func holds(l *isr.MemLog, a ackedRecord) bool {
	v, _, ok := l.Record(a.offset)
	return ok && string(v) == a.value
}

// check runs the harness's safety checks after every command.
func (e *scriptEnv) check() {
	for _, part := range sortedKeys(e.store) {
		leaders := map[int32]isr.BrokerID{}
		for _, n := range e.nodes {
			r := n.replicas[part]
			if !n.up || r == nil || r.Role() != isr.RoleLeader {
				continue
			}
			if other, ok := leaders[r.LeaderEpoch()]; ok {
				e.violation("%s: brokers %d and %d both lead epoch %d", part, other, n.id, r.LeaderEpoch())
			}
			leaders[r.LeaderEpoch()] = n.id
		}
		n, _ := e.leaderOf(part)
		if n == nil || e.unclean[part] {
			continue
		}
		for _, a := range e.acked[part] {
			if a.acks == isr.AcksAll && !holds(n.logs[part], a) {
				e.violation("%s: %s acknowledged with acks=all at offset %d is not in leader %d's log", part, a.value, a.offset, n.id)
			}
		}
		for _, a := range e.consumed[part] {
			if !holds(n.logs[part], a) {
				e.violation("%s: %s read by a consumer at offset %d is not in leader %d's log", part, a.value, a.offset, n.id)
			}
		}
	}
}

func (e *scriptEnv) violation(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	if e.reported[msg] {
		return
	}
	e.reported[msg] = true
	e.broken = append(e.broken, msg)
}
