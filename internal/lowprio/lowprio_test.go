package lowprio

import (
	"runtime"
	"sync"
	"testing"
)

func TestDoRaisesPanicsInTheCaller(t *testing.T) {
	p := New(1)
	defer p.Close()
	func() {
		defer func() {
			if r := recover(); r != "boom" {
				t.Fatalf("recovered %v, want boom", r)
			}
		}()
		p.Do(func() { panic("boom") })
	}()
	ran := false
	p.Do(func() { ran = true }) // the thread survived the panic
	if !ran {
		t.Fatal("Do after a panic did not run")
	}
}

func TestNilPoolRunsInline(t *testing.T) {
	var p *Pool
	ran := false
	p.Do(func() { ran = true })
	if !ran {
		t.Fatal("nil pool's Do did not run")
	}
	p.Close()
}

// Do returns only once fn has returned, and at most the pool's size of
// functions run at once.
func TestDoBoundsConcurrency(t *testing.T) {
	const threads = 2
	p := New(threads)
	defer p.Close()
	var mu sync.Mutex
	running, most := 0, 0
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			done := false
			p.Do(func() {
				mu.Lock()
				running++
				most = max(most, running)
				mu.Unlock()
				runtime.Gosched()
				mu.Lock()
				running--
				mu.Unlock()
				done = true
			})
			if !done {
				t.Error("Do returned before fn did")
			}
		})
	}
	wg.Wait()
	if most > threads {
		t.Fatalf("%d functions ran at once, the pool has %d threads", most, threads)
	}
}
