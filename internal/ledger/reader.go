package ledger

import (
	"fmt"
	"math/bits"
	"sort"

	"quire/internal/invariants"
)

// ReaderConfig configures a Reader.
type ReaderConfig struct {
	Metadata Metadata
	// SpeculativeTicks: when a replica has not answered a range read within
	// this many ticks, another replica is asked for the same entries too;
	// default 2.
	SpeculativeTicks int
	// TimeoutTicks: an unanswered read counts as failed; default 10.
	TimeoutTicks int
	// MaxRangesInFlight bounds the ranges being read at once; default 4.
	// Ranges shorter than a full one (striping, the edges of fragments)
	// may exceed it while fewer than MaxRangeEntries entries are being read.
	MaxRangesInFlight int
	// MaxRangeEntries bounds the entries of one range; default 256. 1 reads
	// entry by entry.
	MaxRangeEntries int
	// MaxRangeBytes bounds the stored bytes one request asks for (the
	// bookie answers fewer entries rather than more bytes); default 4 MiB.
	// Ranges are also sized by it — from the average entry of a closed
	// ledger's record, then from the entries read — so that a range is
	// usually answered in one request.
	MaxRangeBytes int
}

// Defaults of ReaderConfig's zero fields.
const (
	DefaultMaxRangesInFlight = 4
	DefaultMaxRangeEntries   = 256
	DefaultMaxRangeBytes     = 4 << 20
)

// ReadResult is one entry read, delivered in entry order.
type ReadResult struct {
	EntryID int64
	Payload []byte
	Err     error
}

// Reader reads entries first..last of a ledger in ranges of consecutive
// entries, each range from one replica with one request (RequestReadRange),
// several ranges in flight, and delivers them in entry order. A
// deterministic state machine like Writer.
//
// Ranges and replicas. A range is a run of entries that one bookie holds,
// up to MaxRangeEntries (and MaxRangeBytes, once entry sizes are known).
// With E == Qw every bookie of a fragment holds every entry, so a range
// ends only at its place in the grid of its size (stride) or where the
// bookie leaves the ensemble, and consecutive ranges go round the replicas,
// the same entries to the same replica in every reader. With striping (E > Qw) a bookie
// holds runs of Qw consecutive entries, so ranges are at most Qw entries
// long and each goes to the bookie whose run is longest there: every bookie
// is asked for its share, one run per request (a request cannot skip the
// entries a bookie does not hold).
//
// Failures. A request that fails or times out rules its bookie out of that
// range for the entries it asked — for NoSuchEntry or a corrupt entry only
// for that entry — and the entries not yet received are asked from another
// replica. A short answer (a byte or frame bound, or a missing entry) just
// continues from where it ended, from the same bookie. An entry whose every
// replica is ruled out is delivered as an error, and the range goes on
// after it. A bookie that failed is asked last by later ranges.
//
// Speculation. When a request has not been answered within SpeculativeTicks,
// another replica is asked for the same entries; the first answer wins
// and the other's entries are only used past what was received.
type Reader struct {
	cfg    ReaderConfig
	md     Metadata
	tick   int64
	lastID uint64
	first  int64 // first entry wanted
	last   int64 // last entry wanted
	// deliver is the next entry to deliver and nextStart the first entry of
	// the next range to start.
	// Invariant: deliver <= nextStart <= last+1, and ranges covers
	// [deliver, nextStart) without gap or overlap.
	deliver   int64
	nextStart int64
	ranges    []*rangeRead // in entry order; the head one is being delivered
	byReq     map[uint64]*rangeRead
	// suspects failed or timed out in this reader: later ranges ask them last.
	suspects map[BookieID]bool
	// entryBytes is an estimate of one stored entry's size (0: none read yet).
	entryBytes int
	// fixedStride is the range grid of a closed ledger, from its record's
	// average entry (0: from entryBytes as it goes).
	fixedStride int64
	ready       []ReadResult
	out         []Request

	// deliveredThrough is the entry of the last result emitted and
	// resultsChecked how many of ready checkInvariants has seen: kept only
	// for the checks (-tags invariants).
	deliveredThrough int64
	resultsChecked   int
}

// rangeRead is one range: entries first..last.
type rangeRead struct {
	first, last int64
	// next is the first entry not yet received: results holds entries
	// first..next-1, of which the first delivered were handed out (only the
	// head range delivers).
	// Invariant: first <= next <= last+1, len(results) == next-first.
	next      int64
	results   []ReadResult
	delivered int
	asked     map[uint64]*rangeAsk // requests in flight
	// failedThrough rules a bookie out of this range up to an entry: its
	// request covering that entry failed.
	failedThrough map[BookieID]int64
}

// rangeAsk is a request in flight for entries from..end of a range.
type rangeAsk struct {
	to        BookieID
	from, end int64
	sent      int64 // tick
}

// NewReader returns a reader of entries first..last of the ledger.
func NewReader(cfg ReaderConfig, first, last int64) *Reader {
	if cfg.SpeculativeTicks == 0 {
		cfg.SpeculativeTicks = 2
	}
	if cfg.TimeoutTicks == 0 {
		cfg.TimeoutTicks = 10
	}
	if cfg.MaxRangesInFlight <= 0 {
		cfg.MaxRangesInFlight = DefaultMaxRangesInFlight
	}
	if cfg.MaxRangeEntries <= 0 {
		cfg.MaxRangeEntries = DefaultMaxRangeEntries
	}
	if cfg.MaxRangeBytes <= 0 {
		cfg.MaxRangeBytes = DefaultMaxRangeBytes
	}
	r := &Reader{cfg: cfg, md: cfg.Metadata.Clone(), first: first, last: last, deliver: first, nextStart: first,
		byReq: map[uint64]*rangeRead{}, suspects: map[BookieID]bool{}, deliveredThrough: first - 1}
	if md := &r.md; md.State == StateClosed && md.LastEntryID >= 0 && md.Length > 0 {
		// A closed ledger's record says how large its entries are on
		// average: the first ranges are sized by bytes too.
		r.entryBytes = int(md.Length/(md.LastEntryID+1)) + EntryOverhead
		r.fixedStride = r.stride()
	}
	r.flush()
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

// rangeEntries is how many entries a new range takes: MaxRangeEntries, or
// fewer when entries are large enough that they would exceed MaxRangeBytes.
func (r *Reader) rangeEntries() int64 {
	n := r.cfg.MaxRangeEntries
	if r.entryBytes > 0 {
		n = min(n, max(r.cfg.MaxRangeBytes/r.entryBytes, 1))
	}
	return int64(n)
}

// stride is the grid ranges are cut on: rangeEntries rounded down to a
// power of two, fixed for a closed ledger by its record. Ranges end on its
// multiples, so the same entries make the same ranges in every reader of
// them, and a range prefers the replica of its place in the grid: a backlog
// read again is read from the bookies that read it before, whose page
// caches still hold it (replicas taken by turns per reader sent a second
// catch-up of 2 GB to the disk for 1.3 of them).
func (r *Reader) stride() int64 {
	if r.fixedStride > 0 {
		return r.fixedStride
	}
	return int64(1) << (bits.Len64(uint64(r.rangeEntries())) - 1)
}

// mayStart reports whether another range may start: fewer than
// MaxRangesInFlight, or fewer entries being read than one full range.
func (r *Reader) mayStart() bool {
	return r.nextStart <= r.last &&
		(len(r.ranges) < r.cfg.MaxRangesInFlight || r.nextStart-r.deliver < r.rangeEntries())
}

// fill starts ranges while it may; it reports whether it started any.
func (r *Reader) fill() bool {
	started := false
	for r.mayStart() {
		start := r.nextStart
		stride := r.stride()
		limit := min(r.last, (start/stride+1)*stride-1)
		to, end := r.pickReplica(start, limit, start/stride)
		rg := &rangeRead{first: start, last: end, next: start, asked: map[uint64]*rangeAsk{}, failedThrough: map[BookieID]int64{}}
		r.ranges = append(r.ranges, rg)
		r.nextStart = end + 1
		r.ask(rg, to)
		started = true
	}
	return started
}

// pickReplica chooses the bookie for a new range from start (at most up to
// limit): of the bookies that hold start, the one that holds the longest
// run from there, bookies that failed in this reader only if every one did.
// Among equals (with E == Qw, all of them) the range in place slot of the
// stride's grid prefers ensemble member slot mod E, so that consecutive
// ranges go round the replicas, the same way in every reader. It returns
// the bookie and the run's last entry.
func (r *Reader) pickReplica(start, limit, slot int64) (BookieID, int64) {
	ensemble := r.md.EnsembleFor(start)
	size := int64(len(ensemble))
	var best BookieID
	bestEnd, bestSuspect := int64(-1), true
	for i := range size {
		b := ensemble[(slot%size+i)%size]
		suspect := r.suspects[b]
		if !r.md.holds(b, start) || suspect && !bestSuspect {
			continue
		}
		end := r.md.runEnd(b, start, limit)
		if bestEnd < 0 || (bestSuspect && !suspect) || end > bestEnd {
			best, bestEnd, bestSuspect = b, end, suspect
		}
	}
	return best, bestEnd
}

// ask sends a range request to bookie to for the range's entries from next
// on that it holds consecutively.
func (r *Reader) ask(rg *rangeRead, to BookieID) {
	end := r.md.runEnd(to, rg.next, rg.last)
	r.lastID++
	rg.asked[r.lastID] = &rangeAsk{to: to, from: rg.next, end: end, sent: r.tick}
	r.byReq[r.lastID] = rg
	r.out = append(r.out, Request{ID: r.lastID, To: to, Kind: RequestReadRange, LedgerID: r.md.ID, EntryID: rg.next,
		MaxEntries: int(end - rg.next + 1), MaxBytes: r.cfg.MaxRangeBytes})
}

// candidate returns the bookie to ask next for the range's entry next:
// prefer, if it may be asked, else the replica of the entry that may be
// asked and holds the longest run of the range from there (with striping,
// the fewest requests), bookies that failed in this reader last.
func (r *Reader) candidate(rg *rangeRead, prefer BookieID) (BookieID, bool) {
	quorum := r.md.WriteQuorumBookies(rg.next)
	for _, b := range quorum {
		if b == prefer && r.usable(rg, b) {
			return b, true
		}
	}
	for _, suspects := range []bool{false, true} {
		var best BookieID
		bestEnd := int64(-1)
		for _, b := range quorum {
			if r.suspects[b] != suspects || !r.usable(rg, b) {
				continue
			}
			if end := r.md.runEnd(b, rg.next, rg.last); end > bestEnd {
				best, bestEnd = b, end
			}
		}
		if bestEnd >= 0 {
			return best, true
		}
	}
	return "", false
}

// usable reports whether bookie b may be asked for the range's entry next
// (which its write quorum must include): it is not being asked already and
// has not failed a request covering next.
func (r *Reader) usable(rg *rangeRead, b BookieID) bool {
	if through, failed := rg.failedThrough[b]; failed && through >= rg.next {
		return false
	}
	for _, a := range rg.asked {
		if a.to == b {
			return false
		}
	}
	return true
}

// pump makes sure the range's next entry is being asked for: it asks a
// candidate when no request in flight covers it, and delivers it as an
// error when every replica is ruled out and nothing is in flight.
func (r *Reader) pump(rg *rangeRead, prefer BookieID) {
	for rg.next <= rg.last {
		for _, a := range rg.asked {
			if a.from <= rg.next && rg.next <= a.end {
				return // an answer is coming (or a timeout)
			}
		}
		if to, ok := r.candidate(rg, prefer); ok {
			r.ask(rg, to)
			return
		}
		if len(rg.asked) > 0 {
			return // the bookie asked now is usable again once it answers
		}
		rg.results = append(rg.results, ReadResult{EntryID: rg.next,
			Err: fmt.Errorf("ledger %d entry %d: no replica of %v answered", r.md.ID, rg.next, r.md.WriteQuorumBookies(rg.next))})
		rg.next++
	}
	r.settle(rg)
}

// settle drops the requests still in flight for a range that has every
// entry: their answers are no longer wanted.
func (r *Reader) settle(rg *rangeRead) {
	if rg.next <= rg.last {
		return
	}
	for id := range rg.asked {
		delete(r.byReq, id)
		delete(rg.asked, id)
	}
}

// Step feeds a bookie's answer.
func (r *Reader) Step(resp Response) {
	if invariants.Enabled {
		defer r.checkInvariants()
	}
	rg, ok := r.byReq[resp.ID]
	if !ok {
		return // a late answer to a request given up or no longer wanted
	}
	delete(r.byReq, resp.ID)
	a := rg.asked[resp.ID]
	delete(rg.asked, resp.ID)
	failedAt := int64(-1) // the entry through which a failure rules the bookie out
	progressed := false
	switch {
	case resp.Status == StatusOK && len(resp.Entries) > 0:
		delete(r.suspects, a.to)
		for i, framed := range resp.Entries {
			entry := a.from + int64(i)
			if entry > a.end {
				break // more than asked: not ours to trust
			}
			if entry < rg.next {
				continue // received from another replica already
			}
			payload, _, err := DecodeEntry(r.md.ID, entry, framed)
			if err != nil {
				failedAt = entry // this copy is bad; the next ones are unread
				break
			}
			rg.results = append(rg.results, ReadResult{EntryID: entry, Payload: payload})
			rg.next++
			progressed = true
			r.observeEntry(len(framed))
		}
	case resp.Status == StatusNoSuchEntry:
		failedAt = a.from // it lacks this entry; it may hold the next ones
	default: // failed, no such ledger, an OK without entries
		failedAt = a.end
		r.suspects[a.to] = true
	}
	if failedAt >= 0 {
		rg.failedThrough[a.to] = max(rg.failedThrough[a.to], failedAt)
	}
	// A short answer continues from where it ended, from the bookie that
	// answered (it is the fast one, even while a slower one is still asked
	// for the same entries).
	if progressed && rg.next <= rg.last && r.md.holds(a.to, rg.next) && r.usable(rg, a.to) {
		r.ask(rg, a.to)
	}
	r.pump(rg, a.to)
	r.flush()
}

// observeEntry updates the estimate of an entry's stored size.
func (r *Reader) observeEntry(size int) {
	if r.entryBytes == 0 {
		r.entryBytes = max(size, 1)
		return
	}
	r.entryBytes = max((7*r.entryBytes+size)/8, 1)
}

// flush delivers what the head range has, drops ranges that are delivered
// and starts new ones.
func (r *Reader) flush() {
	for {
		for len(r.ranges) > 0 {
			head := r.ranges[0]
			for ; head.delivered < len(head.results); head.delivered++ {
				r.ready = append(r.ready, head.results[head.delivered])
				head.results[head.delivered] = ReadResult{} // the caller has it now
				r.deliver++
			}
			if head.next <= head.last {
				break
			}
			r.ranges[0] = nil
			r.ranges = r.ranges[1:]
		}
		if !r.fill() {
			return
		}
	}
}

// Tick advances logical time: speculative reads and timeouts.
func (r *Reader) Tick() {
	if invariants.Enabled {
		defer r.checkInvariants()
	}
	r.tick++
	for _, rg := range append([]*rangeRead(nil), r.ranges...) {
		ids := make([]uint64, 0, len(rg.asked))
		for id := range rg.asked {
			ids = append(ids, id)
		}
		sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
		for _, id := range ids {
			a := rg.asked[id]
			if a == nil {
				continue // settled by an earlier timeout in this loop
			}
			switch age := r.tick - a.sent; {
			case age >= int64(r.cfg.TimeoutTicks):
				delete(rg.asked, id)
				delete(r.byReq, id)
				rg.failedThrough[a.to] = max(rg.failedThrough[a.to], a.end)
				r.suspects[a.to] = true
				r.pump(rg, "")
			case age == int64(r.cfg.SpeculativeTicks) && a.from <= rg.next && rg.next <= a.end:
				if to, ok := r.candidate(rg, ""); ok {
					r.ask(rg, to)
				}
			}
		}
	}
	r.flush()
}

// runEnd returns the last entry of the run from start (at most limit) that
// bookie b holds: it holds start when it is in start's write quorum, and
// the run goes on while it stays in the write quorum of the next entry.
// start itself is returned when b does not hold it (a run of one, which
// the bookie answers with NoSuchEntry).
func (m *Metadata) runEnd(b BookieID, start, limit int64) int64 {
	end := start
	for end < limit && m.holds(b, end+1) {
		end++
	}
	return end
}

// holds reports whether entry's write quorum includes bookie b.
func (m *Metadata) holds(b BookieID, entry int64) bool {
	ensemble := m.EnsembleFor(entry)
	for i, x := range ensemble {
		if x == b {
			offset := (int64(i) - entry%int64(m.EnsembleSize) + int64(m.EnsembleSize)) % int64(m.EnsembleSize)
			return offset < int64(m.WriteQuorum)
		}
	}
	return false
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
	if r.deliver > r.nextStart || r.nextStart > max(r.last+1, r.first) {
		r.violated("deliver <= nextStart <= last+1: deliver(%d) nextStart(%d) last(%d)", r.deliver, r.nextStart, r.last)
	}
	// ranges cover [deliver, nextStart) in order, without gap or overlap.
	at := r.deliver
	for i, rg := range r.ranges {
		from := rg.first
		if i == 0 {
			from += int64(rg.delivered)
		} else if rg.delivered != 0 {
			r.violated("only the head range delivers: range %d..%d delivered %d", rg.first, rg.last, rg.delivered)
		}
		if from != at {
			r.violated("ranges cover [deliver, nextStart): range %d..%d (delivered %d) follows entry %d", rg.first, rg.last, rg.delivered, at-1)
		}
		at = rg.last + 1
		if rg.last < rg.first || rg.last-rg.first >= int64(r.cfg.MaxRangeEntries) {
			r.violated("1 <= range entries <= MaxRangeEntries: range %d..%d, MaxRangeEntries(%d)", rg.first, rg.last, r.cfg.MaxRangeEntries)
		}
		if rg.next < rg.first || rg.next > rg.last+1 || int64(len(rg.results)) != rg.next-rg.first {
			r.violated("first <= next <= last+1, results = [first, next): range %d..%d next %d, %d results", rg.first, rg.last, rg.next, len(rg.results))
		}
		if i == 0 && rg.delivered != len(rg.results) {
			r.violated("the head range delivers what it has at once: range %d..%d delivered %d of %d", rg.first, rg.last, rg.delivered, len(rg.results))
		}
		if rg.next > rg.last && len(rg.asked) > 0 {
			r.violated("a complete range has no request in flight: range %d..%d, %d in flight", rg.first, rg.last, len(rg.asked))
		}
		// An incomplete range always has a read in flight, so it is
		// completed by answers or timeouts.
		if rg.next <= rg.last && len(rg.asked) == 0 {
			r.violated("an incomplete range has a read in flight: range %d..%d next %d", rg.first, rg.last, rg.next)
		}
		to := map[BookieID]bool{}
		for id, a := range rg.asked {
			if to[a.to] {
				r.violated("one request per bookie per range: range %d..%d asks %s twice", rg.first, rg.last, a.to)
			}
			to[a.to] = true
			if a.from < rg.first || a.from > a.end || a.end > rg.last || a.from > rg.next {
				r.violated("requests ask within their range from at most next: request %d asks %d..%d of range %d..%d next %d", id, a.from, a.end, rg.first, rg.last, rg.next)
			}
			if r.byReq[id] != rg || id > r.lastID {
				r.violated("every read in flight is indexed: request %d of range %d..%d (lastID %d)", id, rg.first, rg.last, r.lastID)
			}
		}
	}
	if at != r.nextStart {
		r.violated("ranges cover [deliver, nextStart): they end at %d, nextStart(%d)", at-1, r.nextStart)
	}
	if n := len(r.ranges); n > r.cfg.MaxRangesInFlight && r.ranges[n-1].first-r.deliver >= int64(r.cfg.MaxRangeEntries) {
		r.violated("ranges <= MaxRangesInFlight unless they are short: %d ranges, %d entries before the last, MaxRangesInFlight(%d)",
			n, r.ranges[n-1].first-r.deliver, r.cfg.MaxRangesInFlight)
	}
	for id, rg := range r.byReq {
		if _, ok := rg.asked[id]; !ok {
			r.violated("the request index names reads in flight: request %d of range %d..%d", id, rg.first, rg.last)
		}
	}
}

// violated reports a broken invariant of the reader.
func (r *Reader) violated(format string, args ...any) {
	panic(fmt.Sprintf("ledger %d reader: invariant violated: ", r.md.ID) + fmt.Sprintf(format, args...))
}
