package sim

import (
	"time"

	"quire/internal/ledger"
)

// readerActor opens the CLOSED ledger after recovery and reads every entry
// (ledger.Reader, in ranges), retrying the entries no replica could serve.
// Each attempt's results must come in entry order, each entry once, from
// the attempt's first entry on (kindReadOrder).
type readerActor struct {
	s        *ledgerSim
	nameStr  string
	gen      int // a new core per attempt; answers to older attempts are ignored
	core     *ledger.Reader
	md       ledger.Metadata
	got      map[int64][]byte
	failed   map[int64]bool // entries the last attempt could not read
	expect   int64          // the entry the attempt's next result must be for
	asked    map[uint64]ledger.Request
	attempts int
	started  bool
	done     bool
}

const readerMaxAttempts = 20

func (r *readerActor) name() string { return r.nameStr }

func (r *readerActor) start() {
	if r.started {
		return
	}
	s := r.s
	md, err := s.metaSvc.read(r.name(), s.ledgerID)
	if err != nil {
		s.e.tracef(r.name(), "open failed: %v; retrying", err)
		s.e.after(50*time.Millisecond, r.start)
		return
	}
	r.started = true
	if md.State != ledger.StateClosed {
		s.violate(kindReopened, "after every recovery finished the ledger is %s, not CLOSED: %s", md.State, describeMetadata(md))
		r.done = true
		return
	}
	r.md = md
	r.got = map[int64][]byte{}
	s.e.tracef(r.name(), "opens ledger: %s", describeMetadata(md))
	r.attempt(0, md.LastEntryID)
}

func (r *readerActor) attempt(first, last int64) {
	r.gen++
	r.attempts++
	if r.attempts > 1 {
		r.s.stats.ReaderRetries++
	}
	r.failed = map[int64]bool{}
	r.expect = first
	r.asked = map[uint64]ledger.Request{}
	rc := r.s.sc.reader
	r.core = ledger.NewReader(ledger.ReaderConfig{Metadata: r.md, MaxRangesInFlight: rc.rangesInFlight,
		MaxRangeEntries: rc.rangeEntries, MaxRangeBytes: rc.rangeBytes}, first, last)
	if r.md.FragmentFor(first) != r.md.FragmentFor(last) {
		r.s.stats.ReaderFragments++
	}
	r.after()
	gen := r.gen
	r.s.e.after(tickInterval, func() { r.tickLoop(gen) })
}

func (r *readerActor) tickLoop(gen int) {
	if r.done || gen != r.gen {
		return
	}
	r.core.Tick()
	r.after()
	r.s.e.after(tickInterval, func() { r.tickLoop(gen) })
}

func (r *readerActor) onResponse(gen int, resp ledger.Response) {
	if !r.started || r.done || gen != r.gen {
		return
	}
	if req, ok := r.asked[resp.ID]; ok && req.Kind == ledger.RequestReadRange {
		delete(r.asked, resp.ID)
		switch {
		case resp.Status != ledger.StatusOK:
			r.s.stats.ReaderFailovers++
		case len(resp.Entries) < req.MaxEntries:
			r.s.stats.ReaderShortAnswers++
		}
	}
	r.core.Step(resp)
	r.after()
}

func (r *readerActor) onMetaResult(ledger.MetaResult) {}

func (r *readerActor) after() {
	s := r.s
	reqs, results := r.core.Ready()
	for _, req := range reqs {
		r.asked[req.ID] = req
		s.sendRequest(r.name(), r.gen, req)
	}
	for _, res := range results {
		if res.EntryID != r.expect {
			s.violate(kindReadOrder, "%s got entry %d, want entry %d next", r.name(), res.EntryID, r.expect)
		}
		r.expect = res.EntryID + 1
		if res.Err != nil {
			r.failed[res.EntryID] = true
			s.e.tracef(r.name(), "read e%d failed: %v", res.EntryID, res.Err)
			continue
		}
		if prev, ok := r.got[res.EntryID]; ok && string(prev) != string(res.Payload) {
			s.violate(kindReadersDisagree, "%s read entry %d twice with different bytes", r.name(), res.EntryID)
		}
		r.got[res.EntryID] = res.Payload
		s.checkEntryRead(r.name(), res.EntryID, res.Payload)
	}
	if !r.core.Done() || r.done {
		return
	}
	if len(r.failed) == 0 || r.attempts >= readerMaxAttempts {
		r.done = true
		s.e.tracef(r.name(), "reader done: %d entries read, %d unreadable", len(r.got), len(r.failed))
		return
	}
	first, last := int64(-1), int64(-1)
	for id := range r.failed { // min and max: order does not matter
		if first == -1 || id < first {
			first = id
		}
		if id > last {
			last = id
		}
	}
	gen := r.gen
	s.e.after(300*time.Millisecond, func() {
		if gen == r.gen && !r.done {
			r.attempt(first, last)
		}
	})
}
