package isr

import (
	"errors"
	"fmt"
	"testing"
	"time"
)

var t0 = time.Unix(0, 0)

func at(d time.Duration) time.Time { return t0.Add(d) }

// record builds a valid partition record with broker epochs equal to the
// broker ids (as the tests register them).
func record(leader BrokerID, leaderEpoch, partitionEpoch int32, isr ...BrokerID) PartitionState {
	s := PartitionState{Partition: "p", Replicas: []BrokerID{1, 2, 3}, Leader: leader, LeaderEpoch: leaderEpoch,
		PartitionEpoch: partitionEpoch, ControllerEpoch: 1}
	if leader != NoLeader {
		s.LeaderBrokerEpoch = int64(leader)
	}
	for _, id := range isr {
		s.ISR = append(s.ISR, Member{ID: id, BrokerEpoch: int64(id)})
	}
	return s
}

func newTestReplica(id BrokerID, cfg ReplicaConfig) (*Replica, *MemLog) {
	l := NewMemLog()
	cfg.Broker, cfg.Partition, cfg.BrokerEpoch, cfg.Log = id, "p", int64(id), l
	if cfg.LagTimeMax == 0 {
		cfg.LagTimeMax = 10 * time.Second
	}
	return NewReplica(cfg, t0), l
}

func produce(r *Replica, id uint64, acks int8, now time.Time, values ...string) {
	req := ProduceRequest{ID: id, Partition: "p", Acks: acks}
	for _, v := range values {
		req.Records = append(req.Records, []byte(v))
	}
	r.Produce(req, now)
}

func followerFetch(r *Replica, from BrokerID, offset int64, lastEpoch int32, now time.Time) FetchResponse {
	r.Fetch(FetchRequest{ID: 100, Partition: "p", ReplicaID: from, BrokerEpoch: int64(from), CurrentLeaderEpoch: r.LeaderEpoch(),
		FetchOffset: offset, LastFetchedEpoch: lastEpoch}, now)
	rd := r.Ready()
	if len(rd.FetchResponses) != 1 {
		panic("want one fetch response")
	}
	return rd.FetchResponses[0]
}

func produceErrs(rd Ready) []error {
	var out []error
	for _, p := range rd.ProduceResponses {
		out = append(out, p.Err)
	}
	return out
}

func TestAcksLevels(t *testing.T) {
	r, _ := newTestReplica(1, ReplicaConfig{})
	r.ApplyState(record(1, 0, 0, 1, 2, 3), t0)
	r.Ready()

	produce(r, 1, AcksNone, t0, "a")
	if rd := r.Ready(); len(rd.ProduceResponses) != 0 {
		t.Fatalf("acks=0 answered: %+v", rd.ProduceResponses)
	}
	produce(r, 2, AcksLeader, t0, "b")
	if rd := r.Ready(); len(rd.ProduceResponses) != 1 || rd.ProduceResponses[0].Err != nil || rd.ProduceResponses[0].BaseOffset != 1 {
		t.Fatalf("acks=1: %+v", rd.ProduceResponses)
	}
	produce(r, 3, AcksAll, t0, "c", "d")
	if rd := r.Ready(); len(rd.ProduceResponses) != 0 {
		t.Fatalf("acks=all answered before the HW passed it: %+v", rd.ProduceResponses)
	}
	followerFetch(r, 2, 4, 0, t0)
	if rd := r.Ready(); len(rd.ProduceResponses) != 0 || r.HighWatermark() != 0 {
		t.Fatalf("acks=all answered with broker 3 behind: HW %d", r.HighWatermark())
	}
	followerFetch(r, 3, 3, 0, t0)
	if r.HighWatermark() != 3 {
		t.Fatalf("HW %d, want 3 = min LEO over the ISR", r.HighWatermark())
	}
	followerFetch(r, 3, 4, 0, t0) // its answer to acks=all came out with this fetch (TestAcksAllAnsweredWhenHighWatermarkPasses)
	if r.HighWatermark() != 4 || len(r.waiting) != 0 {
		t.Fatalf("HW %d, %d waiting", r.HighWatermark(), len(r.waiting))
	}
}

func TestAcksAllAnsweredWhenHighWatermarkPasses(t *testing.T) {
	r, _ := newTestReplica(1, ReplicaConfig{})
	r.ApplyState(record(1, 0, 0, 1, 2), t0)
	r.Ready()
	produce(r, 7, AcksAll, t0, "a")
	r.Fetch(FetchRequest{ID: 1, Partition: "p", ReplicaID: 2, BrokerEpoch: 2, CurrentLeaderEpoch: 0, FetchOffset: 1, LastFetchedEpoch: 0}, t0)
	rd := r.Ready()
	if len(rd.ProduceResponses) != 1 || rd.ProduceResponses[0].ID != 7 || rd.ProduceResponses[0].Err != nil {
		t.Fatalf("acks=all not answered once the HW passed: %+v", rd.ProduceResponses)
	}
}

func TestNotEnoughReplicas(t *testing.T) {
	r, l := newTestReplica(1, ReplicaConfig{MinISR: 2})
	r.ApplyState(record(1, 0, 0, 1), t0)
	r.Ready()
	produce(r, 1, AcksAll, t0, "a")
	if errs := produceErrs(r.Ready()); len(errs) != 1 || !errors.Is(errs[0], ErrNotEnoughReplicas) {
		t.Fatalf("acks=all with |ISR| < minISR: %v", errs)
	}
	if l.EndOffset() != 0 {
		t.Fatalf("refused before append, yet the log has %d records", l.EndOffset())
	}
	produce(r, 2, AcksLeader, t0, "a")
	if errs := produceErrs(r.Ready()); len(errs) != 1 || errs[0] != nil {
		t.Fatalf("acks=1 with |ISR| < minISR: %v", errs)
	}
}

func TestNotEnoughReplicasAfterAppend(t *testing.T) {
	r, l := newTestReplica(1, ReplicaConfig{MinISR: 2})
	r.ApplyState(record(1, 0, 0, 1, 2), t0)
	r.Ready()
	produce(r, 1, AcksAll, t0, "a")
	if l.EndOffset() != 1 {
		t.Fatal("not appended")
	}
	// The controller shrinks the ISR to the leader (broker 2 fenced).
	r.ApplyState(record(1, 0, 1, 1), at(time.Second))
	if errs := produceErrs(r.Ready()); len(errs) != 1 || !errors.Is(errs[0], ErrNotEnoughReplicasAfterAppend) {
		t.Fatalf("ISR shrank below minISR while waiting: %v", errs)
	}
}

func TestProduceTimeout(t *testing.T) {
	r, _ := newTestReplica(1, ReplicaConfig{})
	r.ApplyState(record(1, 0, 0, 1, 2), t0)
	r.Ready()
	r.Produce(ProduceRequest{ID: 1, Partition: "p", Acks: AcksAll, Records: [][]byte{[]byte("a")}, Timeout: 3 * time.Second}, t0)
	r.Tick(at(2 * time.Second))
	if errs := produceErrs(r.Ready()); len(errs) != 0 {
		t.Fatalf("answered before its timeout: %v", errs)
	}
	r.Tick(at(3 * time.Second))
	if errs := produceErrs(r.Ready()); len(errs) != 1 || !errors.Is(errs[0], ErrRequestTimedOut) {
		t.Fatalf("at its timeout: %v", errs)
	}
}

// TestCaughtUpAsOfPreviousFetch: a follower fetching from at least the LEO
// the leader had at its previous fetch counts as caught up as of that
// previous fetch (Kafka's Replica.updateFetchStateOrThrow), and it leaves
// the ISR at the first tick more than replica.lag.time.max.ms after that.
func TestCaughtUpAsOfPreviousFetch(t *testing.T) {
	r, _ := newTestReplica(1, ReplicaConfig{LagTimeMax: 10 * time.Second})
	r.ApplyState(record(1, 0, 0, 1, 2), t0)
	r.Ready()
	produce(r, 1, AcksLeader, at(time.Second), "a", "b")
	followerFetch(r, 2, 0, NoEpoch, at(2*time.Second)) // leader LEO 2 at this fetch
	produce(r, 2, AcksLeader, at(3*time.Second), "c")
	followerFetch(r, 2, 2, 0, at(5*time.Second)) // reached 2: caught up as of t=2s
	if got := r.FollowerLastCaughtUp(2); !got.Equal(at(2 * time.Second)) {
		t.Fatalf("lastCaughtUp %v, want t=2s", got.Sub(t0))
	}
	for _, id := range []BrokerID{3, 4} { // out of the ISR and never fetched; no replica
		if got := r.FollowerLastCaughtUp(id); !got.IsZero() {
			t.Fatalf("lastCaughtUp of broker %d: %v, want none", id, got.Sub(t0))
		}
	}
	r.Tick(at(12 * time.Second))
	if _, pending := r.PendingISR(); pending {
		t.Fatal("shrunk at exactly lag.time.max after the last catch-up")
	}
	r.Tick(at(12*time.Second + time.Millisecond))
	isr, pending := r.PendingISR()
	if !pending || len(isr) != 1 || isr[0] != 1 {
		t.Fatalf("no shrink to (1) after the lag: %v %v", isr, pending)
	}
	rd := r.Ready()
	if len(rd.AlterPartitions) != 1 || rd.AlterPartitions[0].PartitionEpoch != 0 || rd.AlterPartitions[0].LeaderEpoch != 0 {
		t.Fatalf("proposal %+v", rd.AlterPartitions)
	}
	// One proposal in flight at a time; unanswered, it is sent again.
	r.Tick(at(13 * time.Second))
	if rd := r.Ready(); len(rd.AlterPartitions) != 0 {
		t.Fatalf("second proposal while one is in flight: %+v", rd.AlterPartitions)
	}
	r.Tick(at(18 * time.Second))
	if rd := r.Ready(); len(rd.AlterPartitions) != 1 {
		t.Fatalf("unanswered proposal not resent after AlterPartitionTimeout")
	}
}

func TestLeaderEpochFencing(t *testing.T) {
	r, _ := newTestReplica(1, ReplicaConfig{})
	r.ApplyState(record(1, 3, 0, 1, 2), t0)
	r.Ready()
	for _, tc := range []struct {
		epoch int32
		want  error
	}{{2, ErrFencedLeaderEpoch}, {4, ErrUnknownLeaderEpoch}, {3, nil}} {
		r.Fetch(FetchRequest{ID: 1, Partition: "p", ReplicaID: 2, BrokerEpoch: 2, CurrentLeaderEpoch: tc.epoch, LastFetchedEpoch: NoEpoch}, t0)
		got := r.Ready().FetchResponses[0].Err
		if !errors.Is(got, tc.want) && got != tc.want {
			t.Errorf("fetch with leader epoch %d: %v, want %v", tc.epoch, got, tc.want)
		}
	}
	// A follower drops an answer of another leader epoch.
	f, fl := newTestReplica(2, ReplicaConfig{})
	f.ApplyState(record(1, 3, 0, 1, 2), t0)
	req := f.Ready().Fetches[0]
	f.StepFetchResponse(FetchResponse{ID: req.ID, Partition: "p", From: 1, LeaderEpoch: 2, HighWatermark: 1,
		Batches: []Batch{{BaseOffset: 0, LeaderEpoch: 2, Records: [][]byte{[]byte("zombie")}}}}, t0)
	if fl.EndOffset() != 0 {
		t.Fatal("follower appended an answer of an older leader epoch")
	}
	// And an older record changes nothing.
	f.ApplyState(record(3, 2, 9, 3, 2), t0)
	if f.state.LeaderEpoch != 3 || f.state.Leader != 1 {
		t.Fatalf("stale record applied: %s", f.state)
	}
}

// TestTruncateByEpochNotHighWatermark: a follower whose log diverges from
// the new leader's truncates to the end of their last common epoch, keeping
// records above its own HW that the leader has.
func TestTruncateByEpochNotHighWatermark(t *testing.T) {
	leader, ll := newTestReplica(1, ReplicaConfig{})
	follower, fl := newTestReplica(2, ReplicaConfig{})
	// Both hold a,b of epoch 0; the follower also has c of epoch 0 that
	// the leader never got; the leader then wrote d in epoch 1.
	for _, l := range []*MemLog{ll, fl} {
		_ = l.Append(Batch{BaseOffset: 0, LeaderEpoch: 0, Records: [][]byte{[]byte("a"), []byte("b")}})
	}
	_ = fl.Append(Batch{BaseOffset: 2, LeaderEpoch: 0, Records: [][]byte{[]byte("c")}})
	leader.ApplyState(record(1, 1, 1, 1, 2), t0)
	produce(leader, 1, AcksLeader, t0, "d")
	leader.Ready()
	follower.ApplyState(record(1, 1, 1, 1, 2), t0) // its HW is 0
	req := follower.Ready().Fetches[0]
	if req.FetchOffset != 3 || req.LastFetchedEpoch != 0 {
		t.Fatalf("fetch %+v", req)
	}
	leader.Fetch(req, t0)
	resp := leader.Ready().FetchResponses[0]
	if resp.Diverging == nil || *resp.Diverging != (EpochEndOffset{Epoch: 0, EndOffset: 2}) {
		t.Fatalf("leader answer %+v", resp)
	}
	follower.StepFetchResponse(resp, t0)
	if fl.EndOffset() != 2 {
		t.Fatalf("follower LEO %d after truncation, want 2 (end of epoch 0 on the leader; its HW is 0)", fl.EndOffset())
	}
	req = follower.Ready().Fetches[0]
	leader.Fetch(req, t0)
	follower.StepFetchResponse(leader.Ready().FetchResponses[0], t0)
	if v, ep, _ := fl.Record(2); string(v) != "d" || ep != 1 || fl.EndOffset() != 3 {
		t.Fatalf("follower did not refetch d@1: %q@%d", v, ep)
	}
}

func TestConsumerReadsBelowHighWatermark(t *testing.T) {
	r, _ := newTestReplica(1, ReplicaConfig{})
	r.ApplyState(record(1, 0, 0, 1, 2), t0)
	produce(r, 1, AcksLeader, t0, "a", "b", "c")
	followerFetch(r, 2, 2, 0, t0)
	r.Fetch(FetchRequest{ID: 5, Partition: "p", ReplicaID: -1, CurrentLeaderEpoch: NoEpoch, FetchOffset: 0, LastFetchedEpoch: NoEpoch}, t0)
	resp := r.Ready().FetchResponses[0]
	if len(resp.Batches) != 1 || len(resp.Batches[0].Records) != 2 || resp.HighWatermark != 2 {
		t.Fatalf("consumer got %+v, want a,b (HW 2)", resp)
	}
	r.Fetch(FetchRequest{ID: 6, Partition: "p", ReplicaID: -1, CurrentLeaderEpoch: NoEpoch, FetchOffset: 4, LastFetchedEpoch: NoEpoch}, t0)
	if err := r.Ready().FetchResponses[0].Err; !errors.Is(err, ErrOffsetOutOfRange) {
		t.Fatalf("fetch past the LEO: %v", err)
	}
}

// TestExpandNeedsEpochStart: a follower at the HW but below the start of
// the leader's epoch is not added (it may hold a diverging suffix).
func TestExpandNeedsEpochStart(t *testing.T) {
	r, l := newTestReplica(1, ReplicaConfig{})
	_ = l.Append(Batch{BaseOffset: 0, LeaderEpoch: 0, Records: [][]byte{[]byte("a"), []byte("b")}})
	r.ApplyState(record(1, 1, 0, 1), t0) // epoch 1 starts at 2; HW 0
	r.Ready()
	followerFetch(r, 2, 1, 0, t0)
	if _, pending := r.PendingISR(); pending {
		t.Fatal("expanded a follower below the leader's epoch start")
	}
	followerFetch(r, 2, 2, 0, t0)
	if isr, pending := r.PendingISR(); !pending || len(isr) != 2 {
		t.Fatalf("not expanded at the epoch start: %v", isr)
	}
	// The HW counts the pending member at once (maximal ISR).
	if r.HighWatermark() != 2 {
		t.Fatalf("HW %d, want 2", r.HighWatermark())
	}
	// The controller's answer makes it the ISR.
	req := r.pendingISR.req // followerFetch took it out of Ready
	if req.NewISR[1] != (Member{ID: 2, BrokerEpoch: 2}) {
		t.Fatalf("new member %+v lacks its broker epoch", req.NewISR)
	}
	s := record(1, 1, 1, 1, 2)
	r.StepAlterPartition(AlterPartitionResponse{ID: req.ID, Partition: "p", To: 1, State: s}, t0)
	if !r.state.InISR(2) || r.state.PartitionEpoch != 1 {
		t.Fatalf("state after the answer: %s", r.state)
	}
}

func TestNewLeaderStartsEpochAtItsLEO(t *testing.T) {
	r, l := newTestReplica(2, ReplicaConfig{})
	_ = l.Append(Batch{BaseOffset: 0, LeaderEpoch: 0, Records: [][]byte{[]byte("a")}})
	r.ApplyState(record(1, 0, 0, 1, 2), t0)
	produce(r, 1, AcksLeader, t0, "x")
	if errs := produceErrs(r.Ready()); len(errs) != 1 || !errors.Is(errs[0], ErrNotLeaderOrFollower) {
		t.Fatalf("a follower took a write: %v", errs)
	}
	r.ApplyState(record(2, 1, 1, 2), t0)
	if r.Role() != RoleLeader || r.epochStart != 1 || l.EndOffsetForEpoch(0).EndOffset != 1 || l.LatestEpoch() != 1 {
		t.Fatalf("role %s, epoch start %d, epochs %v", r.Role(), r.epochStart, l.Epochs())
	}
	// A record electing a previous incarnation of this broker is not obeyed.
	s := record(2, 2, 2, 2)
	s.LeaderBrokerEpoch = 99
	r.ApplyState(s, t0)
	if r.Role() != RoleNone {
		t.Fatalf("led under another broker epoch: %s", r.Role())
	}
}

func TestFlushPolicies(t *testing.T) {
	r, l := newTestReplica(1, ReplicaConfig{FlushMessages: 3})
	r.ApplyState(record(1, 0, 0, 1), t0)
	produce(r, 1, AcksLeader, t0, "a", "b")
	if l.FlushedOffset() != 0 {
		t.Fatal("flushed before flush.messages")
	}
	produce(r, 2, AcksLeader, t0, "c")
	if l.FlushedOffset() != 3 {
		t.Fatalf("flushed %d after 3 records, flush.messages=3", l.FlushedOffset())
	}
	r2, l2 := newTestReplica(1, ReplicaConfig{FlushInterval: 5 * time.Second})
	r2.ApplyState(record(1, 0, 0, 1), t0)
	produce(r2, 1, AcksLeader, t0, "a")
	r2.Tick(at(4 * time.Second))
	if l2.FlushedOffset() != 0 {
		t.Fatal("flushed before flush.ms")
	}
	r2.Tick(at(5 * time.Second))
	if l2.FlushedOffset() != 1 {
		t.Fatal("not flushed at flush.ms")
	}
	// Default: never forced; a crash loses what the OS did not flush.
	r3, l3 := newTestReplica(1, ReplicaConfig{})
	r3.ApplyState(record(1, 0, 0, 1), t0)
	produce(r3, 1, AcksAll, t0, "a")
	r3.Tick(at(time.Hour))
	if l3.FlushedOffset() != 0 {
		t.Fatal("flushed without a policy")
	}
	l3.Crash()
	if l3.EndOffset() != 0 {
		t.Fatal("unflushed record survived a crash")
	}
}

// TestFlushPoliciesFromRecord: a topic's flush.messages and flush.ms come
// with its partition record (PartitionConfig) and override the replica's
// configured ones, on the leader and on a follower alike.
func TestFlushPoliciesFromRecord(t *testing.T) {
	withConfig := func(s PartitionState, c PartitionConfig) PartitionState { s.Config = c; return s }
	everyRecord := PartitionConfig{FlushMessages: 1}
	leader, ll := newTestReplica(1, ReplicaConfig{})
	follower, fl := newTestReplica(2, ReplicaConfig{})
	leader.ApplyState(withConfig(record(1, 0, 0, 1, 2), everyRecord), t0)
	follower.ApplyState(withConfig(record(1, 0, 0, 1, 2), everyRecord), t0)
	leader.Ready()
	produce(leader, 1, AcksLeader, t0, "a", "b")
	if ll.FlushedOffset() != 2 {
		t.Fatalf("leader flushed %d of 2 records with the record's flush.messages=1", ll.FlushedOffset())
	}
	req := follower.Ready().Fetches[0]
	leader.Fetch(req, t0)
	follower.StepFetchResponse(leader.Ready().FetchResponses[0], t0)
	if fl.EndOffset() != 2 || fl.FlushedOffset() != 2 {
		t.Fatalf("follower LEO %d flushed %d with the record's flush.messages=1", fl.EndOffset(), fl.FlushedOffset())
	}
	// The record's flush.messages over a replica's own.
	r, l := newTestReplica(1, ReplicaConfig{FlushMessages: 1})
	r.ApplyState(withConfig(record(1, 0, 0, 1), PartitionConfig{FlushMessages: 3}), t0)
	produce(r, 1, AcksLeader, t0, "a", "b")
	if l.FlushedOffset() != 0 {
		t.Fatalf("flushed %d before the record's flush.messages=3", l.FlushedOffset())
	}
	produce(r, 2, AcksLeader, t0, "c")
	if l.FlushedOffset() != 3 {
		t.Fatalf("flushed %d after 3 records, the record's flush.messages=3", l.FlushedOffset())
	}
	// flush.ms likewise.
	r2, l2 := newTestReplica(1, ReplicaConfig{})
	r2.ApplyState(withConfig(record(1, 0, 0, 1), PartitionConfig{FlushMs: 5000}), t0)
	produce(r2, 1, AcksLeader, t0, "a")
	r2.Tick(at(4 * time.Second))
	if l2.FlushedOffset() != 0 {
		t.Fatal("flushed before the record's flush.ms")
	}
	r2.Tick(at(5 * time.Second))
	if l2.FlushedOffset() != 1 {
		t.Fatal("not flushed at the record's flush.ms")
	}
}

func TestHighWatermarkCheckpointOnRestart(t *testing.T) {
	r, l := newTestReplica(1, ReplicaConfig{HighWatermarkCheckpointInterval: time.Second})
	r.ApplyState(record(1, 0, 0, 1), t0)
	produce(r, 1, AcksLeader, t0, "a", "b")
	r.Tick(at(time.Second))
	if l.HighWatermarkCheckpoint() != 2 {
		t.Fatalf("checkpoint %d", l.HighWatermarkCheckpoint())
	}
	l.Flush()
	l.TruncateTo(1) // lost a record, say
	again := NewReplica(ReplicaConfig{Broker: 1, Partition: "p", BrokerEpoch: 1, Log: l}, at(time.Second))
	if again.HighWatermark() != 1 {
		t.Fatalf("restarted HW %d, want min(checkpoint 2, LEO 1)", again.HighWatermark())
	}
}

func TestFollowerTakesLeaderHighWatermarkCapped(t *testing.T) {
	f, fl := newTestReplica(2, ReplicaConfig{})
	f.ApplyState(record(1, 0, 0, 1, 2), t0)
	req := f.Ready().Fetches[0]
	f.StepFetchResponse(FetchResponse{ID: req.ID, Partition: "p", From: 1, LeaderEpoch: 0, HighWatermark: 5,
		Batches: []Batch{{BaseOffset: 0, LeaderEpoch: 0, Records: [][]byte{[]byte("a"), []byte("b")}}}}, t0)
	if fl.EndOffset() != 2 || f.HighWatermark() != 2 {
		t.Fatalf("LEO %d HW %d, want 2 and 2 (leader HW capped at own LEO)", fl.EndOffset(), f.HighWatermark())
	}
	// It fetches again at once after data, after FetchBackoff after none.
	req = f.Ready().Fetches[0]
	f.StepFetchResponse(FetchResponse{ID: req.ID, Partition: "p", From: 1, LeaderEpoch: 0, HighWatermark: 2}, t0)
	if rd := f.Ready(); len(rd.Fetches) != 0 {
		t.Fatal("fetched again at once after an empty answer")
	}
	f.Tick(at(500 * time.Millisecond))
	if rd := f.Ready(); len(rd.Fetches) != 1 {
		t.Fatal("no fetch after the backoff")
	}
}

// fullLog is a MemLog whose appends fail, as a disk log out of space: the
// error wraps ErrLogWrite and nothing is appended.
type fullLog struct {
	*MemLog
	full bool
}

func (l *fullLog) Append(b Batch) error {
	if l.full {
		return fmt.Errorf("append at %d: %w: no space left", b.BaseOffset, ErrLogWrite)
	}
	return l.MemLog.Append(b)
}

// A log out of space is not a broken log: the leader answers the produce
// KAFKA_STORAGE_ERROR and appends again once there is room; a follower
// fetches the batch it could not store again.
func TestLogOutOfSpace(t *testing.T) {
	ll := &fullLog{MemLog: NewMemLog()}
	leader := NewReplica(ReplicaConfig{Broker: 1, Partition: "p", BrokerEpoch: 1, Log: ll, LagTimeMax: 10 * time.Second}, t0)
	leader.ApplyState(record(1, 0, 0, 1), t0)
	leader.Ready()
	ll.full = true
	produce(leader, 1, AcksLeader, t0, "a")
	if errs := produceErrs(leader.Ready()); len(errs) != 1 || !errors.Is(errs[0], ErrKafkaStorageError) {
		t.Fatalf("produce to a full log answered %v, want KAFKA_STORAGE_ERROR", errs)
	}
	if ll.EndOffset() != 0 {
		t.Fatalf("LEO %d after a refused append, want 0", ll.EndOffset())
	}
	ll.full = false
	produce(leader, 2, AcksLeader, t0, "a")
	if errs := produceErrs(leader.Ready()); len(errs) != 1 || errs[0] != nil || ll.EndOffset() != 1 {
		t.Fatalf("produce once there is room answered %v, LEO %d; want nil and 1", errs, ll.EndOffset())
	}

	fl := &fullLog{MemLog: NewMemLog(), full: true}
	f := NewReplica(ReplicaConfig{Broker: 2, Partition: "p", BrokerEpoch: 2, Log: fl, LagTimeMax: 10 * time.Second}, t0)
	f.ApplyState(record(1, 0, 0, 1, 2), t0)
	req := f.Ready().Fetches[0]
	batch := Batch{BaseOffset: 0, LeaderEpoch: 0, Records: [][]byte{[]byte("a")}}
	f.StepFetchResponse(FetchResponse{ID: req.ID, Partition: "p", From: 1, LeaderEpoch: 0, HighWatermark: 1, Batches: []Batch{batch}}, t0)
	if fl.EndOffset() != 0 {
		t.Fatalf("follower LEO %d after a refused append, want 0", fl.EndOffset())
	}
	fl.full = false
	f.Tick(at(time.Second))
	rd := f.Ready()
	if len(rd.Fetches) != 1 || rd.Fetches[0].FetchOffset != 0 {
		t.Fatalf("follower fetches %+v after a refused append, want one from offset 0", rd.Fetches)
	}
	f.StepFetchResponse(FetchResponse{ID: rd.Fetches[0].ID, Partition: "p", From: 1, LeaderEpoch: 0, HighWatermark: 1, Batches: []Batch{batch}}, at(time.Second))
	if fl.EndOffset() != 1 {
		t.Fatalf("follower LEO %d once there is room, want 1", fl.EndOffset())
	}
}

// TestLeaderHighWatermark: a follower knows the leader's HW from the last
// answer in its leader epoch (its own HW is capped at its LEO), the leader
// its own; nothing before the first answer.
func TestLeaderHighWatermark(t *testing.T) {
	f, _ := newTestReplica(2, ReplicaConfig{})
	if hw := f.LeaderHighWatermark(); hw != -1 {
		t.Fatalf("before any record: %d", hw)
	}
	f.ApplyState(record(1, 0, 0, 1, 2, 3), t0)
	rd := f.Ready()
	if len(rd.Fetches) != 1 || f.LeaderHighWatermark() != -1 {
		t.Fatalf("follower: fetches %v, leader HW %d", rd.Fetches, f.LeaderHighWatermark())
	}
	f.StepFetchResponse(FetchResponse{ID: rd.Fetches[0].ID, Partition: "p", From: 1, LeaderEpoch: 0, HighWatermark: 5}, t0)
	if f.LeaderHighWatermark() != 5 || f.HighWatermark() != 0 {
		t.Fatalf("after an answer: leader HW %d, HW %d", f.LeaderHighWatermark(), f.HighWatermark())
	}
	f.ApplyState(record(3, 1, 1, 2, 3), t0)
	if f.LeaderHighWatermark() != -1 {
		t.Fatalf("a new leader's HW is not known yet: %d", f.LeaderHighWatermark())
	}
	l, _ := newTestReplica(1, ReplicaConfig{})
	l.ApplyState(record(1, 0, 0, 1), t0)
	produce(l, 1, AcksLeader, t0, "a", "b")
	if l.LeaderHighWatermark() != l.HighWatermark() || l.HighWatermark() != 2 {
		t.Fatalf("leader: %d, HW %d", l.LeaderHighWatermark(), l.HighWatermark())
	}
}
