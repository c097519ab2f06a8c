package sim

import (
	"time"

	"quire/internal/ledger"
)

// recovererActor is a new owner that recovers and closes the ledger
// (ledger.Recovery), from its start time to completion.
type recovererActor struct {
	s       *ledgerSim
	nameStr string
	core    *ledger.Recovery
	started bool
	done    bool
	result  ledger.Metadata
	err     error
	phase   string

	// lastOp is the metadata op the core waits for; adopted is the record
	// its last successful result carried — the record the core works on.
	lastOp  uint64
	adopted ledger.Metadata

	// A recoverer may freeze too (then its inputs and ticks queue up and
	// are handled in arrival order when it wakes), racing the other one.
	paused  bool
	backlog []func()
}

func (r *recovererActor) name() string { return r.nameStr }

func (r *recovererActor) start() {
	if r.started {
		return
	}
	r.started = true
	r.core = ledger.NewRecovery(ledger.RecoveryConfig{LedgerID: r.s.ledgerID, Mutants: r.s.mutants})
	r.s.e.tracef(r.name(), "RECOVERY starts")
	r.core.Start()
	r.after()
	r.s.e.after(tickInterval, r.tickLoop)
	for _, p := range r.s.sc.recovererPauses {
		if r.s.recoverers[p.index] == r {
			r.s.e.after(p.after, func() { r.pause(p.dur) })
		}
	}
}

func (r *recovererActor) pause(d time.Duration) {
	if r.done {
		return
	}
	r.paused = true
	r.s.e.tracef(r.name(), "PAUSE for %v in phase %s", d, r.phase)
	r.s.e.after(d, func() {
		items := r.backlog
		r.backlog, r.paused = nil, false
		r.s.e.tracef(r.name(), "RESUME: %d inputs queued", len(items))
		for _, fn := range items {
			if r.done {
				return
			}
			fn()
			r.after()
		}
	})
}

// input runs fn against the core now, or queues it while the recoverer is frozen.
func (r *recovererActor) input(fn func()) {
	if !r.started || r.done {
		return
	}
	if r.paused {
		r.backlog = append(r.backlog, fn)
		return
	}
	fn()
	r.after()
}

func (r *recovererActor) tickLoop() {
	if r.done {
		return
	}
	r.input(r.core.Tick)
	r.s.e.after(tickInterval, r.tickLoop)
}

func (r *recovererActor) onResponse(gen int, resp ledger.Response) {
	r.input(func() { r.core.Step(resp) })
}

func (r *recovererActor) onMetaResult(res ledger.MetaResult) {
	r.input(func() {
		r.s.e.tracef(r.name(), "meta result #%d: %s", res.ID, describeMetaResult(res))
		if res.ID == r.lastOp && res.Err == nil {
			r.adopted = res.Metadata.Clone()
		}
		r.core.StepMeta(res)
	})
}

// after sends the core's outputs, checks the fence coverage when the fence
// phase ends, and notices completion.
func (r *recovererActor) after() {
	s := r.s
	rd := r.core.Ready()
	for _, req := range rd.Requests {
		s.sendRequest(r.name(), 1, req)
	}
	for _, op := range rd.MetaOps {
		r.lastOp = op.ID
		s.metaSvc.submit(r.name(), op)
	}
	prev := r.phase
	r.phase = r.core.Phase()
	if prev != r.phase && prev != "" {
		s.e.tracef(r.name(), "phase %s -> %s", prev, r.phase)
		if prev == "fence" && r.phase == "read" {
			s.checkFenceCoverage(r.name(), r.adopted)
		}
	}
	if done, md, err := r.core.Done(); done && !r.done {
		r.done, r.result, r.err = true, md, err
		if err != nil {
			s.e.tracef(r.name(), "RECOVERY failed: %v", err)
		} else {
			s.e.tracef(r.name(), "RECOVERY done: %s", describeMetadata(md))
		}
		if entry, ok := r.core.Abandoned(); ok && err == nil {
			s.stats.RecoveryAbandoned++
			s.e.tracef(r.name(), "ended before e%d: never acknowledged, and its bookies refused copies", entry)
		}
		s.onRecoveryDone()
	}
}
