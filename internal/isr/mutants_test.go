package isr

import (
	"errors"
	"slices"
	"testing"
	"time"
)

// Each mutant must change behaviour: these tests run the same inputs with
// and without it and show the broken outcome the simulator's checkers must
// catch.

func TestParseMutant(t *testing.T) {
	for _, name := range MutantNames {
		m, err := ParseMutant(name)
		if err != nil || !m.Any() {
			t.Errorf("%s: %+v %v", name, m, err)
		}
	}
	if _, err := ParseMutant("no-such"); err == nil {
		t.Error("unknown mutant accepted")
	}
	if m, err := ParseMutant(""); err != nil || m.Any() {
		t.Errorf("empty name: %+v %v", m, err)
	}
}

// truncate-to-hw: a replica that becomes a follower cuts its log to its own
// HW (which lags the leader's), losing records the ISR acknowledged; the
// real follower keeps them and lets the leader's epochs decide.
func TestMutantTruncateToHighWatermark(t *testing.T) {
	for _, mutant := range []bool{false, true} {
		f, fl := newTestReplica(3, ReplicaConfig{Mutants: Mutants{TruncateToHighWatermark: mutant}})
		f.ApplyState(record(1, 0, 0, 1, 2, 3), t0)
		req := f.Ready().Fetches[0]
		// v1,v2 arrive; the answer that would carry HW 2 never does.
		f.StepFetchResponse(FetchResponse{ID: req.ID, Partition: "p", From: 1, LeaderEpoch: 0, HighWatermark: 0,
			Batches: []Batch{{BaseOffset: 0, LeaderEpoch: 0, Records: [][]byte{[]byte("v1"), []byte("v2")}}}}, t0)
		f.Ready()
		// Broker 1 dies; broker 2 leads epoch 1.
		f.ApplyState(record(2, 1, 1, 2, 3), t0)
		next := f.Ready().Fetches[0]
		switch {
		case !mutant && (fl.EndOffset() != 2 || next.LastFetchedEpoch != 0):
			t.Fatalf("real follower: LEO %d, fetch %+v", fl.EndOffset(), next)
		case mutant && (fl.EndOffset() != 0 || next.LastFetchedEpoch != NoEpoch):
			t.Fatalf("mutant follower kept its log: LEO %d, fetch %+v", fl.EndOffset(), next)
		}
		// If broker 2 now dies too, broker 3 is the only ISR member left:
		// as leader, the mutant has lost v1,v2.
		f.ApplyState(record(3, 2, 2, 3), t0)
		if got := fl.EndOffset(); (got == 2) == mutant {
			t.Fatalf("mutant=%v: new leader's LEO %d", mutant, got)
		}
	}
}

// hw-ignores-min-isr: with |ISR| < min.insync.replicas the HW still moves,
// so consumers read records only the leader holds (a crash of the leader
// then makes a consumed record disappear).
func TestMutantHighWatermarkIgnoresMinISR(t *testing.T) {
	for _, mutant := range []bool{false, true} {
		r, _ := newTestReplica(1, ReplicaConfig{MinISR: 2, Mutants: Mutants{HighWatermarkIgnoresMinISR: mutant}})
		r.ApplyState(record(1, 0, 0, 1), t0)
		produce(r, 1, AcksLeader, t0, "a")
		r.Fetch(FetchRequest{ID: 2, Partition: "p", ReplicaID: -1, CurrentLeaderEpoch: NoEpoch, LastFetchedEpoch: NoEpoch}, t0)
		resp := r.Ready().FetchResponses[0]
		read := len(resp.Batches) > 0
		if read != mutant || (r.HighWatermark() == 1) != mutant {
			t.Fatalf("mutant=%v: HW %d, consumer read %v", mutant, r.HighWatermark(), read)
		}
	}
}

// elect-out-of-sync: with unclean election off, the controller elects a
// live replica outside the ISR and calls it clean.
func TestMutantElectOutOfSync(t *testing.T) {
	for _, mutant := range []bool{false, true} {
		c, store := newTestController(t, ControllerConfig{DisableELR: true, Mutants: Mutants{ElectOutOfSync: mutant}})
		s, _ := c.Partition("p")
		alter(c, store, s, 1) // brokers 2 and 3 fell behind
		c.SessionExpired(1, 1, t0)
		rd := store.run(c, t0)
		s, _ = c.Partition("p")
		unclean := slices.ContainsFunc(rd.Events, func(e Event) bool { return e.Kind == EventUncleanElection })
		switch {
		case !mutant && s.Leader != NoLeader:
			t.Fatalf("real controller elected out of sync: %s", s)
		case mutant && (s.Leader != 2 || s.Unclean || unclean):
			t.Fatalf("mutant: %s, reported unclean %v", s, unclean)
		}
	}
}

// no-epoch-fencing: a follower takes records from a deposed leader's late
// answer, and a leader serves a fetch of another leader epoch.
func TestMutantNoEpochFencing(t *testing.T) {
	for _, mutant := range []bool{false, true} {
		f, fl := newTestReplica(2, ReplicaConfig{Mutants: Mutants{NoEpochFencing: mutant}})
		f.ApplyState(record(1, 0, 0, 1, 2, 3), t0)
		old := f.Ready().Fetches[0]
		// Broker 3 now leads epoch 1; broker 1's answer to the old fetch
		// arrives late, with what broker 1 alone wrote.
		f.ApplyState(record(3, 1, 1, 3, 2), t0)
		cur := f.Ready().Fetches[0]
		f.StepFetchResponse(FetchResponse{ID: old.ID, Partition: "p", From: 1, LeaderEpoch: 0, HighWatermark: 1,
			Batches: []Batch{{BaseOffset: 0, LeaderEpoch: 0, Records: [][]byte{[]byte("zombie")}}}}, t0)
		if (fl.EndOffset() == 1) != mutant {
			t.Fatalf("mutant=%v: follower took the deposed leader's record: LEO %d", mutant, fl.EndOffset())
		}

		// Worse: broker 3's records replicated to broker 2 are replaced by
		// another late answer of broker 1's, written at its offsets.
		f.StepFetchResponse(FetchResponse{ID: cur.ID, Partition: "p", From: 3, LeaderEpoch: 1, HighWatermark: 2,
			Batches: []Batch{{BaseOffset: 0, LeaderEpoch: 1, Records: [][]byte{[]byte("c1"), []byte("c2")}}}}, at(time.Second))
		f.StepFetchResponse(FetchResponse{ID: old.ID, Partition: "p", From: 1, LeaderEpoch: 0, HighWatermark: 0,
			Batches: []Batch{{BaseOffset: 0, LeaderEpoch: 0, Records: [][]byte{[]byte("zombie")}}}}, at(time.Second))
		if v, _, _ := fl.Record(0); (string(v) == "zombie") != mutant {
			t.Fatalf("mutant=%v: record 0 is %q after a late answer of the deposed leader", mutant, v)
		}

		l, _ := newTestReplica(1, ReplicaConfig{Mutants: Mutants{NoEpochFencing: mutant}})
		l.ApplyState(record(1, 5, 0, 1, 2), t0)
		l.Ready()
		l.Fetch(FetchRequest{ID: 1, Partition: "p", ReplicaID: 2, BrokerEpoch: 2, CurrentLeaderEpoch: 4, LastFetchedEpoch: NoEpoch}, t0)
		err := l.Ready().FetchResponses[0].Err
		if (err == nil) != mutant || (!mutant && !errors.Is(err, ErrFencedLeaderEpoch)) {
			t.Fatalf("mutant=%v: fetch of epoch 4 at a leader of epoch 5: %v", mutant, err)
		}
	}
}

// isr-change-without-cas: a deposed leader's ISR shrink is written as it
// saw the record, making it leader again in its old epoch with an ISR of
// itself, and it then acknowledges acks=all writes nobody else has.
func TestMutantISRChangeWithoutCAS(t *testing.T) {
	for _, mutant := range []bool{false, true} {
		c, store := newTestController(t, ControllerConfig{Mutants: Mutants{ISRChangeWithoutCAS: mutant}})
		s0, _ := c.Partition("p")
		zombie, _ := newTestReplica(1, ReplicaConfig{})
		zombie.ApplyState(s0, t0)
		zombie.Ready()
		// Broker 1's session expires (it is cut off from the store): the
		// controller elects broker 2 in epoch 1. Broker 1 does not hear.
		c.SessionExpired(1, 1, t0)
		store.run(c, t0)
		if s, _ := c.Partition("p"); s.Leader != 2 || s.LeaderEpoch != 1 {
			t.Fatalf("election: %s", s)
		}
		// Its followers are gone: it shrinks the ISR to itself.
		produce(zombie, 1, AcksAll, t0, "lost")
		zombie.Tick(at(11 * time.Second))
		props := zombie.Ready().AlterPartitions
		if len(props) != 1 {
			t.Fatal("no shrink proposal")
		}
		// Its broker epoch is still registered in this test's view of the
		// request: the mutant does not look.
		c.AlterPartition(props[0], at(11*time.Second))
		rd := store.run(c, at(11*time.Second))
		resp := rd.AlterPartitionResponses[0]
		zombie.StepAlterPartition(resp, at(11*time.Second))
		acked := slices.ContainsFunc(zombie.Ready().ProduceResponses, func(p ProduceResponse) bool { return p.Err == nil })
		s, _ := c.Partition("p")
		switch {
		case !mutant && (resp.Err == nil || s.Leader != 2 || acked || zombie.Role() == RoleLeader):
			t.Fatalf("real controller: answer %v, record %s, zombie acked %v, role %s", resp.Err, s, acked, zombie.Role())
		case mutant && (resp.Err != nil || resp.State.Leader != 1 || resp.State.LeaderEpoch != 0 || !acked):
			// The written record names the deposed leader in its old
			// epoch (the controller re-elects right after, as broker 1 is
			// fenced, but the zombie has already acknowledged).
			t.Fatalf("mutant: answer %v %s, zombie acked %v", resp.Err, resp.State, acked)
		}
	}
}
