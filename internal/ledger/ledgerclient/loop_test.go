package ledgerclient

import (
	"context"
	"sync"
	"testing"
	"time"

	"quire/internal/bookie/client"
	"quire/internal/testutil"
)

// The writer's goroutine blocks in the bookie client's AddAsync whenever a
// connection's window (2 requests here) is full; the window frees only as
// the connection's reader delivers responses into the writer. Those
// deliveries must never wait for the writer (they go through the loop's
// completion path), however full callers keep its queue: 2,000 adds from 8
// goroutines, kept within the writer's in-flight bound, all acknowledged in
// order.
func TestWriterBlockedOnATinyBookieWindow(t *testing.T) {
	const appenders, each, inFlight = 8, 250, 32
	c := startCluster(t, "a", "b", "c")
	bc := client.New(client.Config{Logger: quiet, MaxInFlightPerConn: 2,
		RedialBackoffMin: 10 * time.Millisecond, RedialBackoffMax: 50 * time.Millisecond})
	t.Cleanup(bc.Close)
	lc := New(Config{Store: c.srv.NewClient(), Bookies: bc, Tick: 10 * time.Millisecond, RequestTimeoutTicks: 500,
		MaxInFlight: inFlight, Name: "w", Logger: quiet})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	w, err := lc.Create(ctx, 3, 3, 2)
	if err != nil {
		t.Fatal(err)
	}
	if lc.MaxInFlight() != inFlight {
		t.Fatalf("MaxInFlight %d", lc.MaxInFlight())
	}
	slots := make(chan struct{}, inFlight) // callers keep within the bound
	var (
		mu   sync.Mutex
		next int64 // adds answered
		errs []error
	)
	for g := range appenders {
		go func() {
			for i := range each {
				slots <- struct{}{}
				w.AppendAsync(payload(g*each+i), func(id int64, err error) {
					<-slots
					mu.Lock()
					defer mu.Unlock()
					if err != nil {
						errs = append(errs, err)
					} else if id != next {
						t.Errorf("ack for entry %d, want %d", id, next)
					}
					next++
				})
			}
		}()
	}
	testutil.WaitForWithin(t, time.Minute, "every add answered", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return next == appenders*each
	})
	if len(errs) > 0 {
		t.Fatalf("%d adds failed, first: %v", len(errs), errs[0])
	}
	if err := w.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if md := w.Metadata(); md.LastEntryID != appenders*each-1 {
		t.Fatalf("closed with last entry %d", md.LastEntryID)
	}
}
