package ledger_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"testing/quick"

	"quire/internal/ledger"
	"quire/internal/meta"
)

// ackOracle is the obviously-correct model of the writer's acknowledgement
// rule: an entry is acknowledged once Qa distinct bookies of its write quorum
// confirmed it and every earlier entry is acknowledged. It recomputes from
// scratch; no cleverness to share bugs with.
type ackOracle struct {
	ackQuorum int
	confirmed map[int64]map[ledger.BookieID]bool
}

// lastAcknowledged is the end of the longest prefix of entries 0.. that each
// have Qa confirmations.
func (o *ackOracle) lastAcknowledged() int64 {
	last := int64(-1)
	for len(o.confirmed[last+1]) >= o.ackQuorum {
		last++
	}
	return last
}

// runWriterSchedule drives a writer with a random schedule drawn from seed:
// adds, answers delivered in any order (some twice, as a retransmitted
// duplicate), answers lost. After every step the writer's acks must be
// exactly the oracle's prefix, in order, and every add must carry the
// oracle's LAC at the time it was sent.
func runWriterSchedule(seed int64, mutants ledger.Mutants) error {
	rng := rand.New(rand.NewPCG(uint64(seed), 0x5eed))
	ensembleSize := 1 + rng.IntN(5)
	writeQuorum := 1 + rng.IntN(ensembleSize)
	ackQuorum := 1 + rng.IntN(writeQuorum)
	ensemble := make([]ledger.BookieID, ensembleSize)
	for i := range ensemble {
		ensemble[i] = ledger.BookieID(fmt.Sprintf("b%d", i))
	}
	md := ledger.Metadata{ID: 1, EnsembleSize: ensembleSize, WriteQuorum: writeQuorum, AckQuorum: ackQuorum,
		State: ledger.StateOpen, LastEntryID: -1, Fragments: []ledger.Fragment{{Ensemble: ensemble}}}
	w, err := ledger.NewWriter(ledger.WriterConfig{Metadata: md, Version: meta.Version(1), Mutants: mutants})
	if err != nil {
		return err
	}
	config := fmt.Sprintf("E=%d Qw=%d Qa=%d", ensembleSize, writeQuorum, ackQuorum)
	oracle := &ackOracle{ackQuorum: ackQuorum, confirmed: map[int64]map[ledger.BookieID]bool{}}
	var network []ledger.Request
	var acked []int64
	steps := 20 + rng.IntN(200)
	for step := 0; step < steps; step++ {
		what := "add"
		switch r := rng.IntN(10); {
		case r < 3 || len(network) == 0:
			if _, err := w.Add([]byte{byte(step)}); err != nil {
				return fmt.Errorf("%s step %d: add: %w", config, step, err)
			}
		case r < 9:
			k := rng.IntN(len(network))
			req := network[k]
			if rng.IntN(8) != 0 { // otherwise leave it: it is delivered again later
				network = slices.Delete(network, k, k+1)
			}
			what = fmt.Sprintf("%s confirms e%d", req.To, req.EntryID)
			if oracle.confirmed[req.EntryID] == nil {
				oracle.confirmed[req.EntryID] = map[ledger.BookieID]bool{}
			}
			oracle.confirmed[req.EntryID][req.To] = true
			w.Step(ledger.Response{ID: req.ID, From: req.To, Status: ledger.StatusOK})
		default:
			k := rng.IntN(len(network))
			what = fmt.Sprintf("answer of %s for e%d lost", network[k].To, network[k].EntryID)
			network = slices.Delete(network, k, k+1)
		}
		rd := w.Ready()
		want := oracle.lastAcknowledged()
		for _, req := range rd.Requests {
			if req.LastAddConfirmed != want {
				return fmt.Errorf("%s step %d (%s): e%d sent with lac=%d, want %d", config, step, what, req.EntryID, req.LastAddConfirmed, want)
			}
			network = append(network, req)
		}
		for _, a := range rd.Acks {
			if a.Err != nil {
				return fmt.Errorf("%s step %d (%s): ack e%d failed: %v", config, step, what, a.EntryID, a.Err)
			}
			acked = append(acked, a.EntryID)
		}
		for i, id := range acked {
			if id != int64(i) {
				return fmt.Errorf("%s step %d (%s): acks %v are not in entry order", config, step, what, acked)
			}
		}
		if got := int64(len(acked)) - 1; got != want || w.LastAddConfirmed() != want {
			return fmt.Errorf("%s step %d (%s): acknowledged through e%d (LAC %d), oracle says e%d", config, step, what, got, w.LastAddConfirmed(), want)
		}
	}
	return nil
}

func TestWriterAcksMatchOracle(t *testing.T) {
	check := func(seed int64) bool {
		if err := runWriterSchedule(seed, ledger.Mutants{}); err != nil {
			t.Logf("seed %d: %v", seed, err)
			return false
		}
		return true
	}
	if err := quick.Check(check, &quick.Config{MaxCount: 500}); err != nil {
		t.Fatal(err)
	}
}

// TestWriterAckOracleCatchesUnorderedAck shows the quick-check has teeth:
// the mutant that acknowledges entries out of order is caught.
func TestWriterAckOracleCatchesUnorderedAck(t *testing.T) {
	for seed := int64(0); seed < 500; seed++ {
		if err := runWriterSchedule(seed, ledger.Mutants{UnorderedAck: true}); err != nil {
			t.Logf("caught at seed %d: %v", seed, err)
			return
		}
	}
	t.Fatal("500 schedules did not catch the UnorderedAck mutant")
}

// TestWriterStopsOnFencedAnswer: one FENCED answer is enough for the writer
// to learn it lost the ledger: every pending entry fails, later adds are
// refused, and no ensemble change is attempted.
func TestWriterStopsOnFencedAnswer(t *testing.T) {
	md := ledger.Metadata{ID: 1, EnsembleSize: 3, WriteQuorum: 3, AckQuorum: 2, State: ledger.StateOpen, LastEntryID: -1,
		Fragments: []ledger.Fragment{{Ensemble: []ledger.BookieID{"b1", "b2", "b3"}}}}
	w, err := ledger.NewWriter(ledger.WriterConfig{Metadata: md, Version: 1,
		Cluster: cluster("b1@A", "b2@B", "b3@C", "b4@C")})
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, err := w.Add([]byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	reqs := w.Ready().Requests
	w.Step(ledger.Response{ID: reqs[0].ID, From: reqs[0].To, Status: ledger.StatusOK})
	w.Step(ledger.Response{ID: reqs[1].ID, From: reqs[1].To, Status: ledger.StatusFenced})
	// Later answers, even good ones, change nothing.
	for _, req := range reqs[2:] {
		w.Step(ledger.Response{ID: req.ID, From: req.To, Status: ledger.StatusOK})
	}
	rd := w.Ready()
	if len(rd.MetaOps) != 0 || len(rd.Requests) != 0 {
		t.Fatalf("fenced writer still sends: %+v", rd)
	}
	want := []ledger.Ack{{EntryID: 0, Err: ledger.ErrFenced}, {EntryID: 1, Err: ledger.ErrFenced}}
	if len(rd.Acks) != len(want) {
		t.Fatalf("acks %+v, want %+v", rd.Acks, want)
	}
	for i, a := range rd.Acks {
		if a.EntryID != want[i].EntryID || !errors.Is(a.Err, ledger.ErrFenced) {
			t.Fatalf("ack %d = %+v, want %+v", i, a, want[i])
		}
	}
	if closed, err := w.Closed(); !closed || !errors.Is(err, ledger.ErrFenced) {
		t.Fatalf("Closed() = %v, %v; want true, ErrFenced", closed, err)
	}
	if _, err := w.Add([]byte("y")); !errors.Is(err, ledger.ErrFenced) {
		t.Fatalf("Add after fencing: %v, want ErrFenced", err)
	}
}

// TestFinishedWriterIgnoresClusterUpdates: a writer that closed its ledger
// (or was fenced) with a failed bookie still awaiting replacement must not
// propose an ensemble change when the placement view later offers a bookie:
// the change would be a CAS at the CLOSED record's own version, and would
// succeed, adding a fragment to a closed ledger.
func TestFinishedWriterIgnoresClusterUpdates(t *testing.T) {
	md := ledger.Metadata{ID: 1, EnsembleSize: 3, WriteQuorum: 3, AckQuorum: 2, State: ledger.StateOpen, LastEntryID: -1,
		Fragments: []ledger.Fragment{{Ensemble: []ledger.BookieID{"b1", "b2", "b3"}}}}
	// b4 exists but is read-only: the change after b3 fails cannot run yet.
	w, err := ledger.NewWriter(ledger.WriterConfig{Metadata: md, Version: 1,
		Cluster: cluster("b1@A", "b2@B", "b3@C", "b4@C!")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Add([]byte("x")); err != nil {
		t.Fatal(err)
	}
	// b3 fails first, then b1 and b2 confirm.
	reqs := w.Ready().Requests
	slices.SortFunc(reqs, func(a, b ledger.Request) int {
		return -strings.Compare(string(a.To), string(b.To))
	})
	for _, req := range reqs {
		status := ledger.StatusOK
		if req.To == "b3" {
			status = ledger.StatusFailed
		}
		w.Step(ledger.Response{ID: req.ID, From: req.To, Status: status})
	}
	rd := w.Ready()
	if len(rd.Acks) != 1 || rd.Acks[0].Err != nil || len(rd.MetaOps) != 0 {
		t.Fatalf("after b3 failed and b1, b2 confirmed: %+v, want one ack and no metadata op", rd)
	}
	w.Close()
	closeOps := w.Ready().MetaOps
	if len(closeOps) != 1 || closeOps[0].Metadata.State != ledger.StateClosed {
		t.Fatalf("close: %+v", closeOps)
	}
	closed := closeOps[0].Metadata
	w.StepMeta(ledger.MetaResult{ID: closeOps[0].ID, Metadata: closed, Version: 2})
	if ok, err := w.Closed(); !ok || err != nil {
		t.Fatalf("Closed() = %v, %v", ok, err)
	}
	// b4 becomes writable.
	w.SetCluster(cluster("b1@A", "b2@B", "b3@C", "b4@C"))
	for range 20 {
		w.Tick()
	}
	if rd := w.Ready(); !rd.Empty() {
		t.Fatalf("closed writer acts on a cluster update: %+v", rd)
	}
}
