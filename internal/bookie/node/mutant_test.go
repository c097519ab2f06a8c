package node

import (
	"sync"
	"testing"
	"time"

	"quire/internal/bookie/server"
	"quire/internal/testutil"
)

// recordingEngine records the adds that reach it; only Add and Fence are
// used by the mutant.
type recordingEngine struct {
	server.Engine
	mu   sync.Mutex
	adds []int64
}

func (e *recordingEngine) Add(req server.AddRequest, done func(error)) {
	e.mu.Lock()
	e.adds = append(e.adds, req.EntryID)
	e.mu.Unlock()
	done(nil)
}

func (e *recordingEngine) Fence(int64) (int64, error) { return -1, nil }

func (e *recordingEngine) added() []int64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]int64(nil), e.adds...)
}

// TestAckBeforeWrite: the mutant acknowledges an add before the engine has
// it, hands it over in order after its delay, and passes adds to a ledger
// it saw fenced (and recovery adds) straight through.
func TestAckBeforeWrite(t *testing.T) {
	if _, err := ParseMutant("no-such-mutant"); err == nil {
		t.Fatal("an unknown mutant name was accepted")
	}
	engine := &recordingEngine{}
	a, stop := newAckBeforeWrite(engine, 200*time.Millisecond)
	defer stop()
	payload := []byte("entry")
	for id := int64(0); id < 3; id++ {
		acked := false
		a.Add(server.AddRequest{LedgerID: 1, EntryID: id, Payload: payload}, func(err error) { acked = err == nil })
		if !acked {
			t.Fatalf("entry %d: not acknowledged on arrival", id)
		}
	}
	payload[0] = 'X' // the server may reuse the buffer once Add returns
	if got := engine.added(); len(got) != 0 {
		t.Fatalf("the engine had %v at acknowledgement time; the mutant must ack before writing", got)
	}
	testutil.WaitForWithin(t, 5*time.Second, "the delayed adds to reach the engine", func() bool { return len(engine.added()) == 3 })
	if got := engine.added(); got[0] != 0 || got[1] != 1 || got[2] != 2 {
		t.Fatalf("engine got %v, want entries in arrival order", got)
	}

	a.Fence(2)
	a.Add(server.AddRequest{LedgerID: 2, EntryID: 7}, func(error) {})
	a.Add(server.AddRequest{LedgerID: 3, EntryID: 8, Recovery: true}, func(error) {})
	if got := engine.added(); len(got) != 5 || got[3] != 7 || got[4] != 8 {
		t.Fatalf("engine got %v: adds to a fenced ledger and recovery adds must go straight through", got)
	}
}
