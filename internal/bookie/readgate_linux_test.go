package bookie

import (
	"testing"
	"time"

	"quire/internal/lowprio"
)

// TestGatedReadsRunAsBulk: with a bulk pool, a range read's reads and
// parsing run on the pool's low-priority threads while adds arrive, and on
// the reader's own goroutine once none has for the quiet period (a reader
// alone reads at full speed).
func TestGatedReadsRunAsBulk(t *testing.T) {
	pool := lowprio.New(1)
	defer pool.Close()
	now := time.Unix(1000, 0)
	g := NewReadGate(1, time.Second)
	g.now = func() time.Time { return now }
	g.SetBulk(pool)
	nice := func() (n int) {
		g.run(func() {
			var err error
			if n, err = lowprio.CurrentNice(); err != nil {
				t.Error(err)
			}
		})
		return n
	}
	if n := nice(); n == lowprio.Nice {
		t.Fatalf("no add yet: a read ran at nice %d", n)
	}
	g.noteAdd()
	if n := nice(); n != lowprio.Nice {
		t.Fatalf("adds arriving: a read ran at nice %d, want %d", n, lowprio.Nice)
	}
	now = now.Add(time.Second)
	if n := nice(); n == lowprio.Nice {
		t.Fatalf("quiet again: a read ran at nice %d", n)
	}
	var nilGate *ReadGate
	nilGate.run(func() {}) // a nil gate runs reads inline
}
