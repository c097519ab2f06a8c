package ledger

import (
	"errors"
	"fmt"
	"maps"
	"sort"

	"quire/internal/invariants"
	"quire/internal/meta"
)

// RecoveryConfig configures a Recovery.
type RecoveryConfig struct {
	LedgerID int64
	// RequestTimeoutTicks: an unanswered request counts as failed after this
	// many ticks; default 10.
	RequestTimeoutTicks int
	// RetryTicks: delay before resending a failed request or metadata op; default 3.
	RetryTicks int
	Mutants    Mutants
}

type recoveryPhase int

const (
	phaseReadMetadata recoveryPhase = iota
	phaseMarkInRecovery
	phaseFence
	phaseRead
	phaseClose
	phaseDone
)

func (p recoveryPhase) String() string {
	return [...]string{"read-metadata", "mark-in-recovery", "fence", "read", "close", "done"}[p]
}

// Recovery closes a ledger whose writer may be gone or may be a zombie:
// CAS OPEN→IN_RECOVERY; fence the last fragment's bookies until Qw−Qa+1 of
// every write quorum answered; read forward from the highest LAC with fencing
// reads until an entry is provably absent; re-replicate what it found to the
// write quorum; CAS to CLOSED. Concurrent recoveries converge because only
// one CAS to CLOSED can succeed and the others adopt it.
type Recovery struct {
	cfg     RecoveryConfig
	phase   recoveryPhase
	md      Metadata
	version meta.Version
	tick    int64
	lastID  uint64
	metaOp  uint64
	retryAt int64 // tick to resend the metadata op; 0 = none
	err     error

	outstanding map[uint64]recoveryRequest
	retries     []recoveryRequest // failed requests to resend at retryTick
	retryTick   int64

	// Fence phase.
	fenced map[int]bool // ensemble index of the last fragment → answered
	maxLAC int64

	// Read phase. Invariant: the entries in [firstRead, nextRead) were found
	// (and only they); the end, once known, is nextRead-1.
	firstRead int64
	nextRead  int64 // the entry being looked up
	readState *entryLookup
	found     map[int64]*recoveredEntry
	lastEntry int64 // -2 until the end is known
	length    int64
	// abandoned is the found entry the recovery ended before, as never
	// acknowledged and impossible to re-replicate (maybeAbandon); -1: none.
	abandoned int64

	ready Ready
}

type recoveryRequest struct {
	req      Request
	index    int // ensemble index (fence) or -1
	sentTick int64
	// retried: it timed out and was sent again, but a late answer still
	// counts (answers are idempotent), so slowness cannot livelock recovery.
	retried bool
}

type entryLookup struct {
	entry     int64
	negatives map[BookieID]bool
	failed    map[BookieID]bool
}

type recoveredEntry struct {
	data   []byte
	acked  map[BookieID]bool
	length int64
	// negatives: bookies that answered the lookup without the entry;
	// refused: bookies that answered its re-replication with a failure.
	negatives, refused map[BookieID]bool
}

// NewRecovery returns a recovery; call Start to begin.
func NewRecovery(cfg RecoveryConfig) *Recovery {
	if cfg.RequestTimeoutTicks == 0 {
		cfg.RequestTimeoutTicks = 10
	}
	if cfg.RetryTicks == 0 {
		cfg.RetryTicks = 3
	}
	return &Recovery{cfg: cfg, outstanding: map[uint64]recoveryRequest{}, lastEntry: -2, abandoned: -1}
}

// Done reports whether recovery finished: the CLOSED metadata, or an error.
func (r *Recovery) Done() (bool, Metadata, error) {
	if r.phase != phaseDone {
		return false, Metadata{}, nil
	}
	return true, r.md.Clone(), r.err
}

// Abandoned returns the found entry the recovery ended the ledger before,
// because it was provably never acknowledged and its bookies refused to
// take copies of it (all read-only, say); ok is false when there is none.
func (r *Recovery) Abandoned() (entry int64, ok bool) { return r.abandoned, r.abandoned >= 0 }

// Phase names the current step (diagnostics and traces).
func (r *Recovery) Phase() string { return r.phase.String() }

func (r *Recovery) nextOpID() uint64 {
	r.lastID++
	return r.lastID
}

// Ready collects outputs; see Writer.Ready.
func (r *Recovery) Ready() Ready {
	out := r.ready
	r.ready = Ready{}
	return out
}

// Start reads the ledger's metadata.
func (r *Recovery) Start() {
	if invariants.Enabled {
		defer r.checkInvariants()
	}
	r.phase = phaseReadMetadata
	r.metaOp = r.nextOpID()
	r.ready.MetaOps = append(r.ready.MetaOps, MetaOp{ID: r.metaOp, Kind: MetaRead, LedgerID: r.cfg.LedgerID})
}

// StepMeta feeds a metadata result.
func (r *Recovery) StepMeta(res MetaResult) {
	if invariants.Enabled {
		defer r.checkInvariants()
	}
	if res.ID != r.metaOp || r.phase == phaseDone {
		return
	}
	r.metaOp = 0
	if res.Err != nil && !errors.Is(res.Err, meta.ErrBadVersion) {
		if errors.Is(res.Err, meta.ErrNotFound) && r.phase == phaseReadMetadata {
			r.finish(fmt.Errorf("recover ledger %d: %w", r.cfg.LedgerID, res.Err))
			return
		}
		r.retryAt = r.tick + int64(r.cfg.RetryTicks) // store unreachable: retry the same step
		return
	}
	switch r.phase {
	case phaseReadMetadata:
		r.md, r.version = res.Metadata.Clone(), res.Version
		switch r.md.State {
		case StateClosed:
			r.finish(nil) // opening a CLOSED ledger reads only its metadata
		case StateOpen:
			r.phase = phaseMarkInRecovery
			r.sendMeta()
		default:
			r.startFence()
		}
	case phaseMarkInRecovery:
		if res.Err != nil { // lost the CAS: look again
			r.Start()
			return
		}
		r.md, r.version = res.Metadata.Clone(), res.Version
		r.startFence()
	case phaseClose:
		if res.Err == nil {
			r.md, r.version = res.Metadata.Clone(), res.Version
			r.finish(nil)
			return
		}
		// Lost the CAS: read what is there now, then decide.
		r.phase = phaseReadMetadata
		r.metaOp = r.nextOpID()
		r.ready.MetaOps = append(r.ready.MetaOps, MetaOp{ID: r.metaOp, Kind: MetaRead, LedgerID: r.cfg.LedgerID})
	}
}

// sendMeta sends (or resends) the metadata operation of the current phase.
func (r *Recovery) sendMeta() {
	r.metaOp = r.nextOpID()
	switch r.phase {
	case phaseReadMetadata:
		r.ready.MetaOps = append(r.ready.MetaOps, MetaOp{ID: r.metaOp, Kind: MetaRead, LedgerID: r.cfg.LedgerID})
	case phaseMarkInRecovery:
		next := r.md.Clone()
		next.State = StateInRecovery
		r.ready.MetaOps = append(r.ready.MetaOps, MetaOp{ID: r.metaOp, Kind: MetaWrite, LedgerID: r.cfg.LedgerID, Metadata: next, Expected: r.version})
	case phaseClose:
		next := r.md.Clone()
		next.State, next.LastEntryID, next.Length = StateClosed, r.lastEntry, r.length
		r.ready.MetaOps = append(r.ready.MetaOps, MetaOp{ID: r.metaOp, Kind: MetaWrite, LedgerID: r.cfg.LedgerID, Metadata: next, Expected: r.version})
	}
}

func (r *Recovery) finish(err error) {
	r.phase, r.err = phaseDone, err
	r.outstanding = map[uint64]recoveryRequest{}
	r.retries = nil
}

func (r *Recovery) lastEnsemble() []BookieID { return r.md.Fragments[len(r.md.Fragments)-1].Ensemble }

func (r *Recovery) fenceFlag() bool { return !r.cfg.Mutants.NoFenceRecoveryRead }

// startFence asks every bookie of the last fragment for its LAC with the
// fence flag: from then on they reject the old writer's adds.
func (r *Recovery) startFence() {
	r.phase = phaseFence
	r.fenced = map[int]bool{}
	r.maxLAC = -1
	r.readState, r.found, r.lastEntry, r.length, r.abandoned = nil, nil, -2, 0, -1
	for idx, b := range r.lastEnsemble() {
		r.send(Request{To: b, Kind: RequestRead, LedgerID: r.cfg.LedgerID, EntryID: -1, Fence: r.fenceFlag()}, idx)
	}
}

func (r *Recovery) send(req Request, index int) {
	req.ID = r.nextOpID()
	r.outstanding[req.ID] = recoveryRequest{req: req, index: index, sentTick: r.tick}
	r.ready.Requests = append(r.ready.Requests, req)
}

// fenceComplete: every write quorum of the last fragment has at least
// Qw−Qa+1 fenced members, so no write quorum has Qa unfenced members left
// and the old writer can never again gather an ack quorum.
func (r *Recovery) fenceComplete() bool {
	need := r.md.WriteQuorum - r.md.AckQuorum + 1
	if r.cfg.Mutants.WeakFence {
		need--
	}
	for start := 0; start < r.md.EnsembleSize; start++ {
		n := 0
		for _, idx := range WriteSet(int64(start), r.md.EnsembleSize, r.md.WriteQuorum) {
			if r.fenced[idx] {
				n++
			}
		}
		if n < need {
			return false
		}
	}
	return true
}

// Step feeds a bookie's response.
func (r *Recovery) Step(resp Response) {
	if invariants.Enabled {
		defer r.checkInvariants()
	}
	o, ok := r.outstanding[resp.ID]
	if !ok {
		return
	}
	delete(r.outstanding, resp.ID)
	switch {
	case r.phase == phaseFence && o.req.EntryID == -1 && o.req.Kind == RequestRead:
		r.stepFence(o, resp)
	case r.phase == phaseRead && o.req.Kind == RequestRead:
		r.stepRead(o, resp)
	case o.req.Kind == RequestAdd:
		r.stepWrite(o, resp)
	}
}

func (r *Recovery) stepFence(o recoveryRequest, resp Response) {
	switch resp.Status {
	case StatusOK, StatusNoSuchLedger:
		r.fenced[o.index] = true
		if resp.Status == StatusOK && resp.LastAddConfirmed > r.maxLAC {
			r.maxLAC = resp.LastAddConfirmed
		}
	default:
		r.retry(o)
		return
	}
	if !r.fenceComplete() {
		return
	}
	// Entries before the last fragment were all acknowledged when it was
	// created; never start below that (a LAC of −1 on a multi-fragment
	// ledger must not send recovery back to entry 0 — BookKeeper issue 2615).
	start := r.maxLAC
	if first := r.md.Fragments[len(r.md.Fragments)-1].FirstEntry - 1; first > start {
		start = first
	}
	if start < 0 {
		start = 0
	}
	r.phase = phaseRead
	r.found = map[int64]*recoveredEntry{}
	r.firstRead = start
	r.lookup(start)
}

// lookup asks entry's write quorum for it, with the fence flag.
func (r *Recovery) lookup(entry int64) {
	r.nextRead = entry
	r.readState = &entryLookup{entry: entry, negatives: map[BookieID]bool{}, failed: map[BookieID]bool{}}
	for _, b := range r.md.WriteQuorumBookies(entry) {
		r.send(Request{To: b, Kind: RequestRead, LedgerID: r.cfg.LedgerID, EntryID: entry, Fence: r.fenceFlag()}, -1)
	}
}

func (r *Recovery) stepRead(o recoveryRequest, resp Response) {
	ls := r.readState
	if ls == nil || o.req.EntryID != ls.entry {
		// A late answer about an entry already decided. A negative one
		// still counts toward proving that a found entry was never
		// acknowledged (see maybeAbandon).
		if e := r.found[o.req.EntryID]; e != nil && (resp.Status == StatusNoSuchEntry || resp.Status == StatusNoSuchLedger) {
			e.negatives[resp.From] = true
			r.maybeAbandon(o.req.EntryID)
		}
		return
	}
	switch resp.Status {
	case StatusOK:
		_, length, err := DecodeEntry(r.cfg.LedgerID, ls.entry, resp.Payload)
		if err != nil {
			ls.failed[resp.From] = true
			r.retry(o)
			return
		}
		r.found[ls.entry] = &recoveredEntry{data: resp.Payload, acked: map[BookieID]bool{}, length: length,
			negatives: maps.Clone(ls.negatives), refused: map[BookieID]bool{}}
		r.length = length
		r.replicate(ls.entry)
		r.lookup(ls.entry + 1)
	case StatusNoSuchEntry, StatusNoSuchLedger:
		ls.negatives[resp.From] = true
		// An acknowledged entry is on at least Qa of its Qw bookies, so
		// Qw−Qa+1 bookies without it prove it was never acknowledged.
		if len(ls.negatives) >= r.md.WriteQuorum-r.md.AckQuorum+1 {
			r.readState = nil
			r.lastEntry = ls.entry - 1
			if ls.entry-1 < r.firstRead {
				// Nothing at or after the starting point: the length is
				// unknown from entries; keep the LAC entry's if we saw it.
				r.length = r.lengthBefore(ls.entry)
			}
			r.maybeClose()
		}
	default:
		r.retry(o)
	}
}

// lengthBefore returns the cumulative length through entry-1 when known.
func (r *Recovery) lengthBefore(entry int64) int64 {
	if e := r.found[entry-1]; e != nil {
		return e.length
	}
	return r.length
}

// replicate writes a found entry to every bookie of its write quorum with the
// recovery flag (accepted by fenced bookies).
func (r *Recovery) replicate(entry int64) {
	e := r.found[entry]
	for _, b := range r.md.WriteQuorumBookies(entry) {
		r.send(Request{To: b, Kind: RequestAdd, LedgerID: r.cfg.LedgerID, EntryID: entry,
			LastAddConfirmed: r.maxLAC, Payload: e.data, Recovery: true}, -1)
	}
}

func (r *Recovery) stepWrite(o recoveryRequest, resp Response) {
	e := r.found[o.req.EntryID]
	if e == nil {
		return
	}
	if resp.Status != StatusOK {
		e.refused[resp.From] = true
		r.retry(o)
		r.maybeAbandon(o.req.EntryID)
		return
	}
	e.acked[resp.From] = true
	r.maybeClose()
}

// maybeAbandon ends the recovered ledger before entry when entry can be
// proved never acknowledged and cannot be re-replicated: it is on fewer
// than Qa bookies, Qw−Qa+1 bookies of its write quorum said they lack it
// (and have not taken it since: the proof that ends the lookup), and every
// bookie of its write quorum has answered its re-replication, each
// refusal being retried. Without this a recovery whose bookies refuse
// writes — all read-only, out of space — would retry for ever an entry
// that only one bookie ever stored. The entries after it go too: the
// writer acknowledges in entry order, so none of them was acknowledged
// either. The entry looked up first (the highest LAC's) is never
// abandoned.
func (r *Recovery) maybeAbandon(entry int64) {
	e := r.found[entry]
	if r.phase != phaseRead || e == nil || entry <= r.firstRead || len(e.acked) >= r.md.AckQuorum {
		return
	}
	absent := 0
	for b := range e.negatives {
		if !e.acked[b] {
			absent++
		}
	}
	if absent < r.md.WriteQuorum-r.md.AckQuorum+1 {
		return
	}
	for _, b := range r.md.WriteQuorumBookies(entry) {
		if !e.acked[b] && !e.refused[b] {
			return
		}
	}
	for x := entry; x < r.nextRead; x++ {
		delete(r.found, x)
	}
	r.nextRead, r.readState, r.lastEntry, r.abandoned = entry, nil, entry-1, entry
	r.length = r.found[entry-1].length
	r.maybeClose()
}

// maybeClose closes the ledger once its end is known and every found entry
// is confirmed by an ack quorum.
func (r *Recovery) maybeClose() {
	if r.phase != phaseRead || r.lastEntry == -2 {
		return
	}
	for _, e := range r.found {
		if len(e.acked) < r.md.AckQuorum {
			return
		}
	}
	r.phase = phaseClose
	r.sendMeta()
}

// retry schedules a failed request to be sent again.
func (r *Recovery) retry(o recoveryRequest) {
	r.retries = append(r.retries, o)
	if r.retryTick == 0 {
		r.retryTick = r.tick + int64(r.cfg.RetryTicks)
	}
}

// Tick advances logical time: requests time out and are retried.
func (r *Recovery) Tick() {
	if invariants.Enabled {
		defer r.checkInvariants()
	}
	r.tick++
	if r.phase == phaseDone {
		return
	}
	ids := make([]uint64, 0)
	for id, o := range r.outstanding {
		if !o.retried && r.tick-o.sentTick >= int64(r.cfg.RequestTimeoutTicks) {
			ids = append(ids, id)
		}
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	for _, id := range ids {
		o := r.outstanding[id]
		o.retried = true
		r.outstanding[id] = o
		o.retried = false
		r.retry(o)
	}
	if r.retryTick != 0 && r.tick >= r.retryTick {
		retries := r.retries
		r.retries, r.retryTick = nil, 0
		for _, o := range retries {
			if r.stillWanted(o) {
				r.send(o.req, o.index)
			}
		}
	}
	if r.retryAt != 0 && r.tick >= r.retryAt && r.metaOp == 0 {
		r.retryAt = 0
		r.sendMeta()
	}
}

// stillWanted drops retries that the protocol no longer needs.
func (r *Recovery) stillWanted(o recoveryRequest) bool {
	switch {
	case o.req.Kind == RequestRead && o.req.EntryID == -1:
		return r.phase == phaseFence && !r.fenced[o.index]
	case o.req.Kind == RequestRead:
		return r.phase == phaseRead && r.readState != nil && r.readState.entry == o.req.EntryID
	default:
		e := r.found[o.req.EntryID]
		return r.phase == phaseRead && e != nil && !e.acked[o.req.To]
	}
}

// checkInvariants panics, naming the invariant and its values, if the
// recovery's state breaks what its phase promises. It runs at the end of every
// input under -tags invariants; O(entries found + outstanding requests).
func (r *Recovery) checkInvariants() {
	if r.phase == phaseDone {
		if len(r.outstanding) != 0 || len(r.retries) != 0 {
			r.violated("a finished recovery sends nothing: %d outstanding, %d retries", len(r.outstanding), len(r.retries))
		}
		if r.err == nil && r.md.State != StateClosed {
			r.violated("a recovery that succeeded holds CLOSED metadata: %s", r.md.State)
		}
		return
	}
	for id := range r.outstanding {
		if id > r.lastID {
			r.violated("outstanding requests were sent: request %d, lastID(%d)", id, r.lastID)
		}
	}
	started := r.lastID != 0
	switch r.phase {
	case phaseReadMetadata, phaseMarkInRecovery, phaseClose:
		// A metadata step is always in flight or scheduled to be resent.
		if started && r.metaOp == 0 && r.retryAt == 0 {
			r.violated("phase %s has a metadata op in flight or a retry scheduled: metaOp(%d) retryAt(%d)", r.phase, r.metaOp, r.retryAt)
		}
	}
	switch r.phase {
	case phaseMarkInRecovery:
		if r.md.State != StateOpen {
			r.violated("phase %s marks an OPEN ledger: metadata %s", r.phase, r.md.State)
		}
	case phaseFence, phaseRead, phaseClose:
		if r.md.State != StateInRecovery {
			r.violated("phase %s holds IN_RECOVERY metadata: %s", r.phase, r.md.State)
		}
	}
	switch r.phase {
	case phaseFence:
		if r.found != nil || r.readState != nil || r.lastEntry != -2 || r.maxLAC < -1 {
			r.violated("phase fence has read nothing: found %d, reading %v, lastEntry(%d) maxLAC(%d)",
				len(r.found), r.readState != nil, r.lastEntry, r.maxLAC)
		}
		for idx := range r.fenced {
			if idx < 0 || idx >= r.md.EnsembleSize {
				r.violated("fenced indexes are ensemble indexes: %d, E=%d", idx, r.md.EnsembleSize)
			}
		}
		// stepFence moves on as soon as an answer completes the fence.
		// (Under the WeakFence mutant with Qw = Qa nothing is needed, so
		// the fence is complete before any answer arrives.)
		if len(r.fenced) > 0 && r.fenceComplete() {
			r.violated("phase fence ends once every write quorum has Qw-Qa+1 fenced members: fenced %v", r.fenced)
		}
	case phaseRead, phaseClose:
		r.checkRead()
	}
}

// checkRead checks the read and close phases.
func (r *Recovery) checkRead() {
	if !r.fenceComplete() {
		r.violated("phase %s starts after a complete fence: fenced %v (E=%d Qw=%d Qa=%d)",
			r.phase, r.fenced, r.md.EnsembleSize, r.md.WriteQuorum, r.md.AckQuorum)
	}
	lastFirst := r.md.Fragments[len(r.md.Fragments)-1].FirstEntry
	if r.firstRead < 0 || r.firstRead < r.maxLAC || r.firstRead < lastFirst-1 {
		r.violated("reading starts at max(LAC, last fragment start - 1, 0): firstRead(%d) maxLAC(%d) last fragment at %d",
			r.firstRead, r.maxLAC, lastFirst)
	}
	// The written invariant: found holds exactly [firstRead, nextRead).
	if r.nextRead < r.firstRead || int64(len(r.found)) != r.nextRead-r.firstRead {
		r.violated("found = [firstRead, nextRead): %d found, firstRead(%d) nextRead(%d)", len(r.found), r.firstRead, r.nextRead)
	}
	var prevLength int64
	waiting := 0
	for entry := r.firstRead; entry < r.nextRead; entry++ {
		e := r.found[entry]
		if e == nil {
			r.violated("found = [firstRead, nextRead): entry %d missing, firstRead(%d) nextRead(%d)", entry, r.firstRead, r.nextRead)
		}
		if e.length < prevLength {
			r.violated("cumulative lengths grow with the entry: entry %d length %d after %d", entry, e.length, prevLength)
		}
		prevLength = e.length
		if len(e.acked) > r.md.WriteQuorum {
			r.violated("an entry is re-replicated to its write quorum only: entry %d acked by %d, Qw=%d", entry, len(e.acked), r.md.WriteQuorum)
		}
		if len(e.acked) < r.md.AckQuorum {
			waiting++
		}
	}
	if r.nextRead > r.firstRead && r.length != prevLength {
		r.violated("length is the last found entry's: length(%d), entry %d has %d", r.length, r.nextRead-1, prevLength)
	}
	known := r.lastEntry != -2
	switch {
	case known == (r.readState != nil):
		r.violated("exactly one of: an entry being looked up, the end known: lastEntry(%d) looking up %v", r.lastEntry, r.readState != nil)
	case r.readState != nil && r.readState.entry != r.nextRead:
		r.violated("the entry looked up is nextRead: %d, nextRead(%d)", r.readState.entry, r.nextRead)
	case known && r.lastEntry != r.nextRead-1:
		r.violated("the end is the entry before the first one absent: lastEntry(%d) nextRead(%d)", r.lastEntry, r.nextRead)
	case r.phase == phaseRead && known && waiting == 0:
		// maybeClose moves on as soon as every found entry has an ack quorum.
		r.violated("phase read waits for re-replication only: end %d known and all %d found entries have Qa=%d acks",
			r.lastEntry, len(r.found), r.md.AckQuorum)
	case r.phase == phaseClose && (!known || waiting > 0):
		r.violated("phase close follows a known end, re-replicated: lastEntry(%d), %d entries below Qa=%d", r.lastEntry, waiting, r.md.AckQuorum)
	}
}

// violated reports a broken invariant of the recovery.
func (r *Recovery) violated(format string, args ...any) {
	panic(fmt.Sprintf("ledger %d recovery (%s): invariant violated: ", r.cfg.LedgerID, r.phase) + fmt.Sprintf(format, args...))
}
