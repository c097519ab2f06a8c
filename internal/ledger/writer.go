package ledger

import (
	"errors"
	"fmt"
	"sort"

	"quire/internal/invariants"
	"quire/internal/meta"
)

// Mutants break the protocol on purpose so the simulator's checkers can be
// seen failing. Never set outside tests and `quire sim --mutant`.
type Mutants struct {
	// WeakFence: recovery waits for only Qw−Qa fence responses per write quorum.
	WeakFence bool
	// NoFenceRecoveryRead: recovery reads without the fence flag (BookKeeper issue 2614).
	NoFenceRecoveryRead bool
	// UnorderedAck: the writer acknowledges an entry before earlier ones.
	UnorderedAck bool
	// EnsembleChangeIgnoresRecovery: an ensemble change that loses its CAS
	// re-applies itself on whatever it reads, without checking for IN_RECOVERY.
	EnsembleChangeIgnoresRecovery bool
	// ExplicitLacAhead: the explicit LAC update does not wait for pending
	// entries and sends the last entry added (nextEntry-1) instead of
	// lastAddConfirmed, so bookies report entries nobody acknowledged.
	ExplicitLacAhead bool
}

// WriterConfig configures a Writer.
type WriterConfig struct {
	// Metadata of a ledger in state OPEN, as created, and its version.
	Metadata Metadata
	Version  meta.Version
	// Cluster is the placement view (updated later with SetCluster).
	Cluster []BookieInfo
	// MaxInFlight bounds entries added but not yet acknowledged; default 1000.
	MaxInFlight int
	// RequestTimeoutTicks: a bookie that has not answered an add within this
	// many ticks is treated as failed; default 10.
	RequestTimeoutTicks int
	// RetryTicks: delay before retrying a metadata operation that could not
	// run or an ensemble change that found no bookies; default 5.
	RetryTicks int
	// ExplicitLacTicks: a writer that is open, has nothing pending, has not
	// added for this many ticks and whose LAC is past the last one it sent
	// to the bookies sends its LAC to the bookies of its current ensemble
	// (RequestWriteLac, BookKeeper's explicit LAC). An add carries the LAC
	// of the entries before it, so without this a tailing reader never sees
	// the last entry of a writer that went quiet. 0 turns it off.
	ExplicitLacTicks int
	Mutants          Mutants
}

type writerState int

const (
	writerOpen writerState = iota
	writerClosing
	writerClosed
	writerFenced
)

// Writer is the single writer of one ledger, as a deterministic state
// machine. Entries are striped over the ensemble, acknowledged once Qa
// bookies of their write quorum confirmed them and every earlier entry is
// acknowledged, and a failed bookie is replaced by an ensemble change recorded
// with a CAS on the ledger's metadata.
type Writer struct {
	cfg     WriterConfig
	md      Metadata
	version meta.Version
	cluster []BookieInfo
	state   writerState
	tick    int64
	lastID  uint64

	// Invariant: lastAddConfirmed < every key of pending < nextEntry.
	nextEntry        int64
	lastAddConfirmed int64
	length           int64 // payload bytes of entries 0..lastAddConfirmed
	assignedLength   int64 // payload bytes of entries 0..nextEntry-1
	pending          map[int64]*pendingEntry
	outstanding      map[uint64]outstandingAdd

	// lacSent is the highest LAC sent to bookies, on an add or an explicit
	// update. Invariant: -1 <= lacSent <= lastAddConfirmed (a bookie never
	// learns of an entry the writer has not acknowledged).
	lacSent int64
	// lastAddTick is the tick of the last Add: explicit LAC waits for
	// ExplicitLacTicks of quiet after it.
	lastAddTick int64
	// lacUpdates are the explicit LAC updates awaiting an answer: request id
	// → tick sent. Only a fenced answer matters; the rest expire after
	// RequestTimeoutTicks.
	lacUpdates map[uint64]int64

	// failed holds ensemble indexes (of the last fragment) whose bookie failed
	// and awaits replacement; their acks no longer count.
	failed map[int]bool
	// bad lists every bookie that ever failed for this writer: never chosen again.
	bad map[BookieID]bool

	change      *ensembleChange
	closeOp     uint64
	closeRead   uint64
	retryAt     int64 // tick at which a blocked change or close retries; 0 = none
	closeResult error

	ready Ready

	// ackedThrough is the entry id of the last Ack emitted and acksChecked
	// how many of ready.Acks checkInvariants has seen: kept only for the
	// checks (-tags invariants), which see every Ack once, in order.
	ackedThrough int64
	acksChecked  int
	// requestsChecked: how many of ready.Requests checkInvariants has seen.
	requestsChecked int
}

type pendingEntry struct {
	id     int64
	data   []byte       // framed entry
	acked  map[int]bool // ensemble index → confirmed
	sentTo map[int]uint64
	done   bool // acknowledged to the caller (only early under UnorderedAck)
}

type outstandingAdd struct {
	entry    int64
	index    int
	bookie   BookieID
	sentTick int64
}

type ensembleChange struct {
	op       uint64 // the CAS in flight, or the read after a lost CAS
	reading  bool
	proposal Metadata
	replaced map[int]BookieID // index → new bookie
}

// NewWriter returns a writer for an OPEN ledger that it created.
func NewWriter(cfg WriterConfig) (*Writer, error) {
	if err := cfg.Metadata.Validate(); err != nil {
		return nil, err
	}
	if cfg.Metadata.State != StateOpen {
		return nil, fmt.Errorf("ledger %d: writer needs an OPEN ledger, it is %s", cfg.Metadata.ID, cfg.Metadata.State)
	}
	if cfg.MaxInFlight == 0 {
		cfg.MaxInFlight = 1000
	}
	if cfg.RequestTimeoutTicks == 0 {
		cfg.RequestTimeoutTicks = 10
	}
	if cfg.RetryTicks == 0 {
		cfg.RetryTicks = 5
	}
	return &Writer{
		cfg:              cfg,
		md:               cfg.Metadata.Clone(),
		version:          cfg.Version,
		cluster:          cfg.Cluster,
		lastAddConfirmed: -1,
		lacSent:          -1,
		ackedThrough:     -1,
		pending:          map[int64]*pendingEntry{},
		outstanding:      map[uint64]outstandingAdd{},
		lacUpdates:       map[uint64]int64{},
		failed:           map[int]bool{},
		bad:              map[BookieID]bool{},
	}, nil
}

// LastAddConfirmed is the highest entry acknowledged to the caller in order.
func (w *Writer) LastAddConfirmed() int64 { return w.lastAddConfirmed }

// Metadata is the writer's current view of the ledger's record.
func (w *Writer) Metadata() (Metadata, meta.Version) { return w.md.Clone(), w.version }

// Closed reports whether the ledger is closed (err nil) or the writer ended
// otherwise (ErrFenced); false while still open or closing.
func (w *Writer) Closed() (bool, error) {
	switch w.state {
	case writerClosed:
		return true, w.closeResult
	case writerFenced:
		return true, ErrFenced
	}
	return false, nil
}

// Pending counts entries added but not yet acknowledged.
func (w *Writer) Pending() int { return len(w.pending) }

// SetCluster updates the placement view; a blocked ensemble change retries.
func (w *Writer) SetCluster(cluster []BookieInfo) {
	if invariants.Enabled {
		defer w.checkInvariants()
	}
	w.cluster = cluster
	// A closed or fenced writer keeps its failed set but must never propose
	// again: after a close the CAS would expect the CLOSED record's own
	// version and succeed, adding a fragment to a closed ledger.
	if w.state == writerClosed || w.state == writerFenced {
		return
	}
	if w.change == nil && len(w.failed) > 0 {
		w.startEnsembleChange()
	}
}

// Ready returns and clears the outputs accumulated so far.
func (w *Writer) Ready() Ready {
	// No invariant check here: Ready changes nothing but the outputs, and
	// the input that produced them was checked.
	r := w.ready
	w.ready, w.acksChecked, w.requestsChecked = Ready{}, 0, 0
	return r
}

func (w *Writer) nextOpID() uint64 {
	w.lastID++
	return w.lastID
}

// Add appends payload as the next entry and returns its id. The outcome
// comes later as an Ack, in entry order.
func (w *Writer) Add(payload []byte) (int64, error) {
	if invariants.Enabled {
		defer w.checkInvariants()
	}
	switch w.state {
	case writerFenced:
		return 0, ErrFenced
	case writerClosing, writerClosed:
		return 0, ErrClosed
	}
	if len(w.pending) >= w.cfg.MaxInFlight {
		return 0, ErrTooManyInFlight
	}
	id := w.nextEntry
	w.nextEntry++
	w.lastAddTick = w.tick
	w.assignedLength += int64(len(payload))
	p := &pendingEntry{
		id:     id,
		data:   EncodeEntry(w.md.ID, id, w.assignedLength, payload),
		acked:  map[int]bool{},
		sentTo: map[int]uint64{},
	}
	w.pending[id] = p
	if w.change == nil {
		w.send(p)
	}
	return id, nil
}

// send writes p to every member of its write quorum it has not been sent to
// in the current ensemble (all of them for a new entry; the replacements
// after an ensemble change).
func (w *Writer) send(p *pendingEntry) {
	ensemble := w.md.Fragments[len(w.md.Fragments)-1].Ensemble
	for _, idx := range WriteSet(p.id, w.md.EnsembleSize, w.md.WriteQuorum) {
		if p.sentTo[idx] != 0 || w.failed[idx] {
			continue
		}
		id := w.nextOpID()
		w.lacSent = max(w.lacSent, w.lastAddConfirmed)
		p.sentTo[idx] = id
		w.outstanding[id] = outstandingAdd{entry: p.id, index: idx, bookie: ensemble[idx], sentTick: w.tick}
		w.ready.Requests = append(w.ready.Requests, Request{
			ID: id, To: ensemble[idx], Kind: RequestAdd, LedgerID: w.md.ID, EntryID: p.id,
			LastAddConfirmed: w.lastAddConfirmed, Payload: p.data,
		})
	}
}

// Step feeds a bookie's response to an add or an explicit LAC update.
func (w *Writer) Step(r Response) {
	if invariants.Enabled {
		defer w.checkInvariants()
	}
	if _, ok := w.lacUpdates[r.ID]; ok {
		delete(w.lacUpdates, r.ID)
		// Best effort: a failed update costs a tailing reader some delay,
		// never the ledger a bookie, so it starts no ensemble change. But a
		// fenced ledger was taken over, as a fenced add says.
		if r.Status == StatusFenced {
			w.fence()
		}
		return
	}
	o, ok := w.outstanding[r.ID]
	if !ok {
		return // timed out already, or superseded
	}
	delete(w.outstanding, r.ID)
	if w.state == writerFenced || w.state == writerClosed {
		return
	}
	p := w.pending[o.entry]
	if p == nil {
		// The entry was acknowledged without this bookie. Its failure still
		// matters: later entries would go to it, so replace it now.
		switch r.Status {
		case StatusOK:
		case StatusFenced:
			w.fence()
		default:
			w.lateFailure(o)
		}
		return
	}
	if p.sentTo[o.index] != r.ID {
		return
	}
	switch r.Status {
	case StatusOK:
		if !w.failed[o.index] {
			p.acked[o.index] = true
			w.advance()
		}
	case StatusFenced:
		w.fence()
	default:
		w.bookieFailed(o.index)
	}
}

// advance acknowledges entries that reached the ack quorum, strictly in order.
func (w *Writer) advance() {
	if w.cfg.Mutants.UnorderedAck {
		ids := w.pendingIDs()
		for _, id := range ids {
			p := w.pending[id]
			if !p.done && len(p.acked) >= w.md.AckQuorum {
				p.done = true
				w.ready.Acks = append(w.ready.Acks, Ack{EntryID: id})
			}
		}
	}
	for {
		p := w.pending[w.lastAddConfirmed+1]
		if p == nil || len(p.acked) < w.md.AckQuorum {
			break
		}
		// Requests still outstanding for p stay in w.outstanding: a late
		// failure or timeout of that bookie must still replace it.
		delete(w.pending, p.id)
		w.lastAddConfirmed = p.id
		w.length = storedLength(p.data) // encoded here: no checksum to verify
		if !p.done {
			w.ready.Acks = append(w.ready.Acks, Ack{EntryID: p.id})
		}
	}
	w.maybeClose()
}

func (w *Writer) pendingIDs() []int64 {
	ids := make([]int64, 0, len(w.pending))
	for id := range w.pending {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	return ids
}

// fence ends the writer: a bookie or the metadata says a new owner took over.
func (w *Writer) fence() {
	if w.state == writerFenced || w.state == writerClosed {
		return
	}
	w.state = writerFenced
	for _, id := range w.pendingIDs() {
		if !w.pending[id].done {
			w.ready.Acks = append(w.ready.Acks, Ack{EntryID: id, Err: ErrFenced})
		}
	}
	w.pending = map[int64]*pendingEntry{}
	w.outstanding = map[uint64]outstandingAdd{}
	w.lacUpdates = map[uint64]int64{}
	w.change = nil
}

// lateFailure handles a failure (or timeout) of an add whose entry was
// already acknowledged: the bookie is replaced if it is still in the ensemble.
func (w *Writer) lateFailure(o outstandingAdd) {
	ensemble := w.md.Fragments[len(w.md.Fragments)-1].Ensemble
	if o.index < len(ensemble) && ensemble[o.index] == o.bookie {
		w.bookieFailed(o.index)
	}
}

// bookieFailed stops counting the bookie at index and replaces it.
func (w *Writer) bookieFailed(index int) {
	if w.state == writerFenced || w.state == writerClosed || w.failed[index] {
		return
	}
	w.failed[index] = true
	w.bad[w.md.Fragments[len(w.md.Fragments)-1].Ensemble[index]] = true
	for _, p := range w.pending {
		delete(p.acked, index)
	}
	if w.change == nil {
		w.startEnsembleChange()
	}
}

// startEnsembleChange proposes a new fragment from the first unacknowledged
// entry with every failed bookie replaced, as a CAS on the metadata.
func (w *Writer) startEnsembleChange() {
	proposal, replaced, err := w.propose(w.md)
	if err != nil {
		w.retryAt = w.tick + int64(w.cfg.RetryTicks)
		return
	}
	w.retryAt = 0
	w.change = &ensembleChange{op: w.nextOpID(), proposal: proposal, replaced: replaced}
	w.ready.MetaOps = append(w.ready.MetaOps, MetaOp{ID: w.change.op, Kind: MetaWrite, LedgerID: w.md.ID, Metadata: proposal, Expected: w.version})
}

func (w *Writer) propose(base Metadata) (Metadata, map[int]BookieID, error) {
	proposal := base.Clone()
	last := proposal.Fragments[len(proposal.Fragments)-1]
	ensemble := append([]BookieID(nil), w.md.Fragments[len(w.md.Fragments)-1].Ensemble...)
	replaced := map[int]BookieID{}
	indexes := make([]int, 0, len(w.failed))
	for idx := range w.failed {
		indexes = append(indexes, idx)
	}
	sort.Ints(indexes)
	for _, idx := range indexes {
		b, err := ReplaceBookie(w.cluster, ensemble, idx, w.md.WriteQuorum, w.bad, w.md.ID)
		if err != nil {
			return Metadata{}, nil, err
		}
		ensemble[idx] = b
		replaced[idx] = b
	}
	first := w.lastAddConfirmed + 1
	if last.FirstEntry >= first {
		proposal.Fragments[len(proposal.Fragments)-1] = Fragment{FirstEntry: last.FirstEntry, Ensemble: ensemble}
	} else {
		proposal.Fragments = append(proposal.Fragments, Fragment{FirstEntry: first, Ensemble: ensemble})
	}
	return proposal, replaced, nil
}

// StepMeta feeds the result of a metadata operation.
func (w *Writer) StepMeta(r MetaResult) {
	if invariants.Enabled {
		defer w.checkInvariants()
	}
	switch {
	case w.change != nil && r.ID == w.change.op:
		w.stepChange(r)
	case r.ID == w.closeOp && w.closeOp != 0:
		w.stepClose(r)
	case r.ID == w.closeRead && w.closeRead != 0:
		w.stepCloseRead(r)
	}
}

func (w *Writer) stepChange(r MetaResult) {
	c := w.change
	if c.reading {
		if r.Err != nil {
			w.change, w.retryAt = nil, w.tick+int64(w.cfg.RetryTicks)
			return
		}
		if r.Metadata.State != StateOpen && !w.cfg.Mutants.EnsembleChangeIgnoresRecovery {
			// A recovery started: this writer is no longer the owner.
			w.fence()
			return
		}
		base := r.Metadata.Clone()
		base.State, base.LastEntryID, base.Length = StateOpen, -1, 0 // only the mutant gets here with another state
		w.version = r.Version
		proposal, replaced, err := w.propose(base)
		if err != nil {
			w.change, w.retryAt = nil, w.tick+int64(w.cfg.RetryTicks)
			return
		}
		w.change = &ensembleChange{op: w.nextOpID(), proposal: proposal, replaced: replaced}
		w.ready.MetaOps = append(w.ready.MetaOps, MetaOp{ID: w.change.op, Kind: MetaWrite, LedgerID: w.md.ID, Metadata: proposal, Expected: w.version})
		return
	}
	switch {
	case r.Err == nil:
		w.md, w.version = c.proposal, r.Version
		w.change = nil
		for idx := range c.replaced {
			delete(w.failed, idx)
		}
		for _, id := range w.pendingIDs() {
			p := w.pending[id]
			for idx := range c.replaced {
				if reqID, ok := p.sentTo[idx]; ok {
					delete(w.outstanding, reqID)
					delete(p.sentTo, idx)
				}
			}
			w.send(p)
		}
		if len(w.failed) > 0 {
			w.startEnsembleChange()
		}
		w.maybeClose()
	case errors.Is(r.Err, meta.ErrBadVersion), errors.Is(r.Err, meta.ErrNotFound):
		c.op, c.reading = w.nextOpID(), true
		w.ready.MetaOps = append(w.ready.MetaOps, MetaOp{ID: c.op, Kind: MetaRead, LedgerID: w.md.ID})
	default:
		// The store is unreachable: keep the pending entries and retry.
		w.change, w.retryAt = nil, w.tick+int64(w.cfg.RetryTicks)
	}
}

// Tick advances logical time: adds unanswered for RequestTimeoutTicks fail
// their bookie; blocked changes and closes retry; an idle writer sends its
// LAC.
func (w *Writer) Tick() {
	if invariants.Enabled {
		defer w.checkInvariants()
	}
	w.tick++
	for id, sent := range w.lacUpdates { // deletions only: order does not matter
		if w.tick-sent >= int64(w.cfg.RequestTimeoutTicks) {
			delete(w.lacUpdates, id)
		}
	}
	if w.state == writerFenced || w.state == writerClosed {
		return
	}
	var timedOut []uint64
	for id, o := range w.outstanding {
		if w.tick-o.sentTick >= int64(w.cfg.RequestTimeoutTicks) {
			timedOut = append(timedOut, id)
		}
	}
	sort.Slice(timedOut, func(i, j int) bool { return timedOut[i] < timedOut[j] })
	for _, id := range timedOut {
		o := w.outstanding[id]
		delete(w.outstanding, id)
		if p := w.pending[o.entry]; p == nil {
			w.lateFailure(o)
		} else if p.sentTo[o.index] == id {
			w.bookieFailed(o.index)
		}
	}
	if w.retryAt != 0 && w.tick >= w.retryAt {
		w.retryAt = 0
		if w.change == nil && len(w.failed) > 0 {
			w.startEnsembleChange()
		}
		w.maybeClose()
	}
	w.maybeSendLac()
}

// maybeSendLac sends the LAC to every live bookie of the current ensemble
// when the writer has gone quiet with a LAC the bookies have not been sent:
// the last add carried the LAC of the entries before it, so tailing readers
// (who read up to a bookie's LAC) would otherwise never see its entry.
// Every member, not just the last entry's write quorum: a reader polls the
// whole ensemble, and with striping the others trail further. A closing
// writer sends nothing: its close records the end in the metadata.
func (w *Writer) maybeSendLac() {
	if w.cfg.ExplicitLacTicks <= 0 || w.state != writerOpen || w.tick-w.lastAddTick < int64(w.cfg.ExplicitLacTicks) {
		return
	}
	lac := w.lastAddConfirmed
	switch {
	case w.cfg.Mutants.ExplicitLacAhead:
		lac = w.nextEntry - 1
	case len(w.pending) > 0:
		return // their acks will move the LAC; the next quiet period sends it
	}
	if lac <= w.lacSent {
		return
	}
	w.lacSent = lac
	for idx, b := range w.md.Fragments[len(w.md.Fragments)-1].Ensemble {
		if w.failed[idx] {
			continue
		}
		id := w.nextOpID()
		w.lacUpdates[id] = w.tick
		w.ready.Requests = append(w.ready.Requests, Request{ID: id, To: b, Kind: RequestWriteLac, LedgerID: w.md.ID,
			EntryID: -1, LastAddConfirmed: lac})
	}
}

// Close stops accepting adds; once every pending entry is resolved the
// ledger is closed with a CAS to CLOSED at the last acknowledged entry.
func (w *Writer) Close() {
	if invariants.Enabled {
		defer w.checkInvariants()
	}
	if w.state == writerOpen {
		w.state = writerClosing
	}
	w.maybeClose()
}

func (w *Writer) maybeClose() {
	if w.state != writerClosing || len(w.pending) > 0 || w.change != nil || w.closeOp != 0 || w.closeRead != 0 {
		return
	}
	closed := w.md.Clone()
	closed.State, closed.LastEntryID, closed.Length = StateClosed, w.lastAddConfirmed, w.length
	w.closeOp = w.nextOpID()
	w.ready.MetaOps = append(w.ready.MetaOps, MetaOp{ID: w.closeOp, Kind: MetaWrite, LedgerID: w.md.ID, Metadata: closed, Expected: w.version})
}

func (w *Writer) stepClose(r MetaResult) {
	w.closeOp = 0
	switch {
	case r.Err == nil:
		w.md, w.version, w.state = r.Metadata, r.Version, writerClosed
	case errors.Is(r.Err, meta.ErrBadVersion), errors.Is(r.Err, meta.ErrNotFound):
		w.closeRead = w.nextOpID()
		w.ready.MetaOps = append(w.ready.MetaOps, MetaOp{ID: w.closeRead, Kind: MetaRead, LedgerID: w.md.ID})
	default:
		w.retryAt = w.tick + int64(w.cfg.RetryTicks)
	}
}

func (w *Writer) stepCloseRead(r MetaResult) {
	w.closeRead = 0
	if r.Err != nil {
		w.retryAt = w.tick + int64(w.cfg.RetryTicks)
		return
	}
	switch r.Metadata.State {
	case StateOpen:
		// Someone else changed the record while it stayed open (autorecovery
		// replacing a lost bookie in an earlier fragment): close on top of
		// what is there now, not our stale copy, or the repair is undone.
		w.md, w.version = r.Metadata.Clone(), r.Version
		w.maybeClose()
	case StateClosed:
		// Someone recovered and closed it; it holds what we acknowledged if
		// the protocol is right, which the checkers verify.
		w.md, w.version, w.state = r.Metadata, r.Version, writerClosed
	default:
		w.fence()
	}
}

// checkInvariants panics, naming the invariant and its values, if the
// writer's state breaks what must hold after every input. It runs at the end
// of every input under -tags invariants; O(pending entries).
func (w *Writer) checkInvariants() {
	// Every Add is answered exactly once, in entry order: the Acks emitted
	// are 0, 1, 2, ... (fenced ones included). UnorderedAck breaks this on
	// purpose, for the checkers to catch.
	ordered := !w.cfg.Mutants.UnorderedAck
	for _, a := range w.ready.Acks[w.acksChecked:] {
		if ordered && a.EntryID != w.ackedThrough+1 {
			w.violated("acks in entry order: ack of entry %d follows the ack of entry %d", a.EntryID, w.ackedThrough)
		}
		w.ackedThrough = max(w.ackedThrough, a.EntryID)
	}
	w.acksChecked = len(w.ready.Acks)

	if w.lastAddConfirmed < -1 || w.lastAddConfirmed >= w.nextEntry {
		w.violated("-1 <= lastAddConfirmed < nextEntry: lastAddConfirmed(%d) nextEntry(%d)", w.lastAddConfirmed, w.nextEntry)
	}
	// A bookie never learns a LAC beyond what the writer acknowledged, on
	// an add or an explicit update. ExplicitLacAhead breaks this on
	// purpose, for the simulator's bookie LAC checker to catch.
	if !w.cfg.Mutants.ExplicitLacAhead {
		if w.lacSent < -1 || w.lacSent > w.lastAddConfirmed {
			w.violated("-1 <= lacSent <= lastAddConfirmed: lacSent(%d) lastAddConfirmed(%d)", w.lacSent, w.lastAddConfirmed)
		}
		for _, r := range w.ready.Requests[w.requestsChecked:] {
			if r.LastAddConfirmed > w.lacSent {
				w.violated("every LAC sent is counted in lacSent: %s of entry %d to %s carries LAC %d, lacSent(%d)",
					r.Kind, r.EntryID, r.To, r.LastAddConfirmed, w.lacSent)
			}
		}
	}
	w.requestsChecked = len(w.ready.Requests)
	if w.length < 0 || w.length > w.assignedLength {
		w.violated("0 <= length <= assignedLength: length(%d) assignedLength(%d)", w.length, w.assignedLength)
	}
	if len(w.pending) > w.cfg.MaxInFlight {
		w.violated("pending <= MaxInFlight: %d pending, MaxInFlight(%d)", len(w.pending), w.cfg.MaxInFlight)
	}
	running := w.state == writerOpen || w.state == writerClosing
	if !running && len(w.pending) > 0 {
		w.violated("a %s writer has no pending entries: %d pending", w.stateName(), len(w.pending))
	}
	// Pending is exactly the entries added and not yet acknowledged in
	// order: lastAddConfirmed < every key of pending < nextEntry, no gaps.
	if running && int64(len(w.pending)) != w.nextEntry-w.lastAddConfirmed-1 {
		w.violated("pending = (lastAddConfirmed, nextEntry): %d pending, lastAddConfirmed(%d) nextEntry(%d)",
			len(w.pending), w.lastAddConfirmed, w.nextEntry)
	}
	e, qw := int64(w.md.EnsembleSize), int64(w.md.WriteQuorum)
	for id, p := range w.pending {
		if id != p.id || id <= w.lastAddConfirmed || id >= w.nextEntry {
			w.violated("lastAddConfirmed < every pending entry < nextEntry: pending key %d (entry %d), lastAddConfirmed(%d) nextEntry(%d)",
				id, p.id, w.lastAddConfirmed, w.nextEntry)
		}
		if p.done && !w.cfg.Mutants.UnorderedAck {
			w.violated("no entry is acknowledged ahead of lastAddConfirmed: entry %d, lastAddConfirmed(%d)", id, w.lastAddConfirmed)
		}
		for idx := range p.acked {
			if w.failed[idx] || ((int64(idx)-id%e)%e+e)%e >= qw {
				w.violated("an entry's acks come from live members of its write set: entry %d acked by index %d (failed %v, E=%d Qw=%d)",
					id, idx, w.failed[idx], e, qw)
			}
		}
	}
	// advance acknowledges as soon as it can: the next entry in order
	// never sits on an ack quorum.
	if p := w.pending[w.lastAddConfirmed+1]; p != nil && len(p.acked) >= w.md.AckQuorum {
		w.violated("the entry after lastAddConfirmed lacks an ack quorum: entry %d has %d acks, Qa=%d", p.id, len(p.acked), w.md.AckQuorum)
	}
	if ordered {
		// What was acknowledged is exactly 0..lastAddConfirmed, and a
		// fenced writer answered every add.
		want := w.lastAddConfirmed
		if w.state == writerFenced {
			want = w.nextEntry - 1
		}
		if w.ackedThrough != want {
			w.violated("acks emitted through %d (lastAddConfirmed(%d), nextEntry(%d), %s), want through %d",
				w.ackedThrough, w.lastAddConfirmed, w.nextEntry, w.stateName(), want)
		}
	}
	for idx := range w.failed {
		if idx < 0 || idx >= w.md.EnsembleSize {
			w.violated("failed indexes are ensemble indexes: %d, E=%d", idx, w.md.EnsembleSize)
		}
	}
	// A failed bookie is always being replaced, or about to be retried.
	if running && len(w.failed) > 0 && w.change == nil && w.retryAt == 0 {
		w.violated("a failed bookie has an ensemble change in flight or scheduled: failed %v, no change, no retry", w.failed)
	}
	if w.closeOp != 0 && w.closeRead != 0 {
		w.violated("at most one close step in flight: closeOp(%d) closeRead(%d)", w.closeOp, w.closeRead)
	}
	if (w.closeOp != 0 || w.closeRead != 0) && w.state != writerClosing && w.state != writerFenced {
		w.violated("a close is in flight only while closing: closeOp(%d) closeRead(%d) in state %s", w.closeOp, w.closeRead, w.stateName())
	}
	switch {
	case running && w.md.State != StateOpen:
		w.violated("an open or closing writer holds OPEN metadata: %s writer, metadata %s", w.stateName(), w.md.State)
	case w.state == writerClosed && w.md.State != StateClosed:
		w.violated("a closed writer holds CLOSED metadata: metadata %s", w.md.State)
	}
	if last := w.md.Fragments[len(w.md.Fragments)-1].FirstEntry; running && last > w.lastAddConfirmed+1 {
		w.violated("the last fragment starts at or before lastAddConfirmed+1: starts at %d, lastAddConfirmed(%d)", last, w.lastAddConfirmed)
	}
}

// violated reports a broken invariant of the writer.
func (w *Writer) violated(format string, args ...any) {
	panic(fmt.Sprintf("ledger %d writer: invariant violated: ", w.md.ID) + fmt.Sprintf(format, args...))
}

func (w *Writer) stateName() string {
	return [...]string{"open", "closing", "closed", "fenced"}[w.state]
}
