// Package lowprio runs bulk work on OS threads at the lowest CPU priority.
//
// Go's scheduler has no priorities, but the kernel's has, per thread. A
// catch-up reader's work in a broker — copying a backlog out of the page
// cache, writing multi-megabyte responses to its socket — is throughput
// work that should take what the live path (adds, produce requests, tailing
// fetches) leaves of the CPUs. A Pool keeps a few goroutines locked to
// threads whose nice value is 19; work given to Do runs there, so whenever a
// normal thread of the process (or of another one) wants a core, the kernel
// gives it that core first, and the bulk work goes on in what is left.
//
// Only work that is mostly system calls belongs here (large preads and
// writes): a thread of the pool holds a Go P while it runs Go code, and one
// the kernel leaves waiting holds it meanwhile.
package lowprio

import (
	"runtime"
	"sync"
)

// Nice is the nice value of a Pool's threads.
const Nice = 19

// A Pool runs functions on threads at nice Nice. A nil *Pool runs them on
// the caller's goroutine.
type Pool struct {
	jobs      chan *job
	closeOnce sync.Once
	wg        sync.WaitGroup

	mu      sync.Mutex
	threads []int // the threads' ids, where the system has them (tests)
}

type job struct {
	fn    func()
	done  chan struct{}
	panic any
}

var jobs = sync.Pool{New: func() any { return &job{done: make(chan struct{}, 1)} }}

// New starts a pool of the given number of threads (at least one). Where the
// system does not let a thread lower its priority (not Linux), the threads
// run at the process's priority, and Do only bounds how many bulk jobs run
// at once.
func New(threads int) *Pool {
	p := &Pool{jobs: make(chan *job)}
	for range max(threads, 1) {
		p.wg.Add(1)
		go p.work()
	}
	return p
}

func (p *Pool) work() {
	defer p.wg.Done()
	// Never unlocked: the thread's priority must not pass to another
	// goroutine. The runtime ends the thread when this goroutine returns,
	// and threads it starts meanwhile are started from its template thread
	// with the process's priority, not this one's.
	runtime.LockOSThread()
	_ = lower() // best effort: at the process's priority the pool still bounds the bulk work
	p.mu.Lock()
	p.threads = append(p.threads, threadID())
	p.mu.Unlock()
	for j := range p.jobs {
		j.run()
		j.done <- struct{}{}
	}
}

func (j *job) run() {
	defer func() { j.panic = recover() }()
	j.fn()
}

// Do runs fn on one of the pool's threads, waiting for one to be free, and
// returns once fn has returned. A panic in fn is raised again in the caller.
// Do must not be called after Close.
func (p *Pool) Do(fn func()) {
	if p == nil {
		fn()
		return
	}
	j := jobs.Get().(*job)
	j.fn = fn
	p.jobs <- j
	<-j.done
	r := j.panic
	j.fn, j.panic = nil, nil
	jobs.Put(j)
	if r != nil {
		panic(r)
	}
}

// Close stops the pool's threads once the jobs given to them are done.
func (p *Pool) Close() {
	if p == nil {
		return
	}
	p.closeOnce.Do(func() { close(p.jobs) })
	p.wg.Wait()
}
