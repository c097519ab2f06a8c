package ledger

import (
	"fmt"
	"sort"

	"quire/internal/invariants"
)

// ReaderConfig configures a Reader.
type ReaderConfig struct {
	Metadata Metadata
	// SpeculativeTicks: when a replica has not answered within this many
	// ticks, the next replica is asked too; default 2.
	SpeculativeTicks int
	// TimeoutTicks: an unanswered read counts as failed; default 10.
	TimeoutTicks int
	// MaxInFlight bounds entries being read at once; default 64.
	MaxInFlight int
}

// ReadResult is one entry read, delivered in entry order.
type ReadResult struct {
	EntryID int64
	Payload []byte
	Err     error
}

// Reader reads a range of entries: each from its write quorum (striping
// sends consecutive entries to different bookies), falling back to the other
// replicas on failure and asking the next one speculatively when a replica
// is slow. A deterministic state machine like Writer.
type Reader struct {
	cfg     ReaderConfig
	md      Metadata
	tick    int64
	lastID  uint64
	next    int64 // next entry to start reading
	last    int64 // last entry wanted
	deliver int64 // next entry to deliver
	reads   map[int64]*entryRead
	byReq   map[uint64]int64
	ready   []ReadResult
	out     []Request

	// deliveredThrough is the entry of the last result emitted and
	// resultsChecked how many of ready checkInvariants has seen: kept only
	// for the checks (-tags invariants).
	deliveredThrough int64
	resultsChecked   int
}

type entryRead struct {
	replicas []BookieID
	tried    int            // replicas asked so far
	asked    map[uint64]int // request → sent tick
	failures int
	result   *ReadResult
}

// NewReader returns a reader of entries first..last of the ledger.
func NewReader(cfg ReaderConfig, first, last int64) *Reader {
	if cfg.SpeculativeTicks == 0 {
		cfg.SpeculativeTicks = 2
	}
	if cfg.TimeoutTicks == 0 {
		cfg.TimeoutTicks = 10
	}
	if cfg.MaxInFlight == 0 {
		cfg.MaxInFlight = 64
	}
	r := &Reader{cfg: cfg, md: cfg.Metadata.Clone(), next: first, last: last, deliver: first,
		reads: map[int64]*entryRead{}, byReq: map[uint64]int64{}, deliveredThrough: first - 1}
	r.fill()
	if invariants.Enabled {
		r.checkInvariants()
	}
	return r
}

// Done reports whether every entry was delivered.
func (r *Reader) Done() bool { return r.deliver > r.last }

// Ready returns requests to send and results to deliver (in entry order).
func (r *Reader) Ready() ([]Request, []ReadResult) {
	out, res := r.out, r.ready
	r.out, r.ready, r.resultsChecked = nil, nil, 0
	return out, res
}

func (r *Reader) fill() {
	for r.next <= r.last && len(r.reads) < r.cfg.MaxInFlight {
		e := &entryRead{replicas: r.md.WriteQuorumBookies(r.next), asked: map[uint64]int{}}
		r.reads[r.next] = e
		r.ask(r.next, e)
		r.next++
	}
}

// ask sends the read to the next replica not yet asked.
func (r *Reader) ask(entry int64, e *entryRead) bool {
	if e.tried >= len(e.replicas) {
		return false
	}
	r.lastID++
	e.asked[r.lastID] = int(r.tick)
	r.byReq[r.lastID] = entry
	r.out = append(r.out, Request{ID: r.lastID, To: e.replicas[e.tried], Kind: RequestRead, LedgerID: r.md.ID, EntryID: entry})
	e.tried++
	return true
}

// Step feeds a bookie's answer.
func (r *Reader) Step(resp Response) {
	if invariants.Enabled {
		defer r.checkInvariants()
	}
	entry, ok := r.byReq[resp.ID]
	if !ok {
		return
	}
	delete(r.byReq, resp.ID)
	e := r.reads[entry]
	if e == nil || e.result != nil {
		return
	}
	delete(e.asked, resp.ID)
	if resp.Status == StatusOK {
		payload, _, err := DecodeEntry(r.md.ID, entry, resp.Payload)
		if err == nil {
			e.result = &ReadResult{EntryID: entry, Payload: payload}
			r.flush()
			return
		}
	}
	e.failures++
	r.failOver(entry, e)
}

func (r *Reader) failOver(entry int64, e *entryRead) {
	if r.ask(entry, e) {
		return
	}
	if len(e.asked) == 0 {
		e.result = &ReadResult{EntryID: entry, Err: fmt.Errorf("ledger %d entry %d: no replica of %v answered", r.md.ID, entry, e.replicas)}
		r.flush()
	}
}

func (r *Reader) flush() {
	for {
		e := r.reads[r.deliver]
		if e == nil || e.result == nil {
			break
		}
		r.ready = append(r.ready, *e.result)
		for id := range e.asked {
			delete(r.byReq, id)
		}
		delete(r.reads, r.deliver)
		r.deliver++
	}
	r.fill()
}

// Tick advances logical time: speculative reads and timeouts.
func (r *Reader) Tick() {
	if invariants.Enabled {
		defer r.checkInvariants()
	}
	r.tick++
	entries := make([]int64, 0, len(r.reads))
	for id := range r.reads {
		entries = append(entries, id)
	}
	sort.Slice(entries, func(i, j int) bool { return entries[i] < entries[j] })
	for _, entry := range entries {
		// A failover below may deliver this entry and the ones after it
		// (flush removes them from reads): skip what is already decided.
		e := r.reads[entry]
		if e == nil || e.result != nil {
			continue
		}
		asked := make([]uint64, 0, len(e.asked))
		for id := range e.asked {
			asked = append(asked, id)
		}
		sort.Slice(asked, func(i, j int) bool { return asked[i] < asked[j] })
		for _, id := range asked {
			if e.result != nil {
				break // decided by an earlier timeout in this loop
			}
			age := int(r.tick) - e.asked[id]
			if age >= r.cfg.TimeoutTicks {
				delete(e.asked, id)
				delete(r.byReq, id)
				e.failures++
				r.failOver(entry, e)
			} else if age == r.cfg.SpeculativeTicks {
				r.ask(entry, e)
			}
		}
	}
}

// checkInvariants panics, naming the invariant and its values, if the
// reader's state breaks what must hold after every input. It runs at the end
// of every input under -tags invariants; O(entries being read + requests).
func (r *Reader) checkInvariants() {
	// Results come out in entry order, each entry once.
	for _, res := range r.ready[r.resultsChecked:] {
		if res.EntryID != r.deliveredThrough+1 {
			r.violated("results in entry order: result for entry %d follows entry %d", res.EntryID, r.deliveredThrough)
		}
		r.deliveredThrough = res.EntryID
	}
	r.resultsChecked = len(r.ready)
	if r.deliveredThrough != r.deliver-1 {
		r.violated("results emitted through deliver-1: through %d, deliver(%d)", r.deliveredThrough, r.deliver)
	}
	// reads holds exactly the entries started and not yet delivered.
	if r.next < r.deliver || int64(len(r.reads)) != r.next-r.deliver {
		r.violated("reads = [deliver, next): %d reads, deliver(%d) next(%d)", len(r.reads), r.deliver, r.next)
	}
	if len(r.reads) > r.cfg.MaxInFlight {
		r.violated("reads <= MaxInFlight: %d, MaxInFlight(%d)", len(r.reads), r.cfg.MaxInFlight)
	}
	if e := r.reads[r.deliver]; e != nil && e.result != nil {
		r.violated("a decided entry at the head is delivered at once: entry %d", r.deliver)
	}
	for entry, e := range r.reads {
		if entry < r.deliver || entry >= r.next {
			r.violated("reads = [deliver, next): entry %d, deliver(%d) next(%d)", entry, r.deliver, r.next)
		}
		if e.tried > len(e.replicas) || len(e.asked) > e.tried {
			r.violated("replicas asked at most once each: entry %d tried %d of %d replicas, %d in flight", entry, e.tried, len(e.replicas), len(e.asked))
		}
		if e.result != nil {
			continue // late answers to it are dropped
		}
		// An undecided entry always has a read in flight, so it is
		// decided by an answer or a timeout.
		if len(e.asked) == 0 {
			r.violated("an undecided entry has a read in flight: entry %d tried %d of %d replicas", entry, e.tried, len(e.replicas))
		}
		for id := range e.asked {
			if got, ok := r.byReq[id]; !ok || got != entry {
				r.violated("every read in flight is indexed: request %d of entry %d indexed as %d (%v)", id, entry, got, ok)
			}
		}
	}
	for id, entry := range r.byReq {
		var inFlight bool
		if e := r.reads[entry]; e != nil {
			_, inFlight = e.asked[id]
		}
		if !inFlight || id > r.lastID {
			r.violated("the request index names reads in flight: request %d of entry %d (in flight %v, lastID(%d))", id, entry, inFlight, r.lastID)
		}
	}
}

// violated reports a broken invariant of the reader.
func (r *Reader) violated(format string, args ...any) {
	panic(fmt.Sprintf("ledger %d reader: invariant violated: ", r.md.ID) + fmt.Sprintf(format, args...))
}
