package bookie

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// The crash checker. A seeded workload of adds (random sizes, several
// ledgers, some recovery adds and overwrites), fences, deletes, checkpoints
// and GC passes runs on vfs.NewCrashableMem. At random moments it snapshots
// what was acknowledged, takes fs.CrashClone — the file system after a
// power cut, where only synced data survives, plus 0, 30 or 100% of the
// unsynced blocks — opens a second engine on the clone and checks:
//
//   - every acknowledged add reads back byte-identical with its LAC (or a
//     later submitted version of the same entry);
//   - every entry that reads back has exactly the bytes (and LAC) of some
//     add submitted for it — nothing surfaces as a different entry;
//   - fences that returned survive; deletes that returned stay deleted;
//   - the ledger's LAC is at least the largest acknowledged one.
//
// Then it checkpoints and compacts the recovered engine and checks again.
// Some crash points are taken with the journal held between its write and
// its fsync, so written-but-unacknowledged records survive whole or torn at
// 4 KiB blocks. One seed in eight runs with JournalSyncData=false, where
// acknowledged adds may be lost by design and only integrity is checked.
// TestCrashCheckerCatchesMutants runs the same checker against deliberately
// broken engines and requires it to fail.
//
// Environment: QUIRE_CRASH_SEEDS=n runs n seeds (default 90, ≥2000 crash
// points); QUIRE_CRASH_SEED=s replays one seed. The operation sequence is a
// function of the seed; goroutine interleavings are not, so a replay usually
// but not always reproduces a failure.

type addVersion struct {
	payload []byte
	lac     int64
}

type crashModel struct {
	versions        map[cacheKey][]addVersion // every add submitted; owned by the workload goroutine
	maxSubmittedLAC map[int64]int64
	deleteStarted   map[int64]bool

	mu          sync.Mutex       // guards the fields below, updated by callbacks
	acked       map[cacheKey]int // highest acknowledged version index
	maxAckedLAC map[int64]int64
	fenced      map[int64]bool // Fence returned nil
	deleted     map[int64]bool // DeleteLedger returned nil
	pending     int
	refused     int           // adds failed with ErrReadOnly
	lastErr     error         // of the last add that failed
	acks        chan struct{} // signalled after every completion
}

type modelSnapshot struct {
	acked       map[cacheKey]int
	maxAckedLAC map[int64]int64
	fenced      map[int64]bool
	deleted     map[int64]bool
}

func (m *crashModel) snapshot() modelSnapshot {
	m.mu.Lock()
	defer m.mu.Unlock()
	clone := func(src map[int64]bool) map[int64]bool {
		dst := make(map[int64]bool, len(src))
		for k, v := range src {
			dst[k] = v
		}
		return dst
	}
	s := modelSnapshot{acked: make(map[cacheKey]int, len(m.acked)), maxAckedLAC: make(map[int64]int64), fenced: clone(m.fenced), deleted: clone(m.deleted)}
	for k, v := range m.acked {
		s.acked[k] = v
	}
	for k, v := range m.maxAckedLAC {
		s.maxAckedLAC[k] = v
	}
	return s
}

type crashResult struct {
	points     int
	violations []string
	// Coverage, so a run that checks nothing is visible.
	ackedChecked  int // acknowledged entries verified after a crash
	unackedFound  int // unacknowledged entries that survived (and were verified)
	replayed      uint64
	checkpoints   uint64
	gcRelocated   uint64
	gcReclaimed   uint64
	entryLogReads uint64
	// ENOSPC runs only.
	enospcInjected  int64  // ENOSPC errors the file system returned
	addsRefused     int    // adds failed with ErrReadOnly
	noSpaceRecovers int    // times the engine was out of space and came back writable
	noSpaceFailures uint64 // checkpoints or GC passes that ran out of space
}

// crashRun is one seeded workload.
type crashRun struct {
	seed     int64
	rng      *rand.Rand
	fs       *vfs.MemFS
	cfg      Config
	percents []int
	model    *crashModel
	ledgers  []int64 // live ledger ids the workload adds to
	nextID   int64
	next     map[int64]int64 // next entry id per ledger
	result   crashResult
	// ackedMayBeLost: JournalSyncData=false, where acknowledged adds may be
	// lost by design; only integrity is checked.
	ackedMayBeLost bool
	// stall, when set, blocks the journal between write and fsync;
	// stalled is signalled when it is blocked there.
	stall   atomic.Pointer[chan struct{}]
	stalled chan struct{}
	// faults injects ENOSPC into the journal and entry logs (nil: none).
	faults *faultFS
}

func crashConfig(fs vfs.FS, rng *rand.Rand, hooks testHooks) Config {
	cfg := testConfig(fs)
	cfg.JournalFileBytes = int64([]int{8 << 10, 32 << 10}[rng.IntN(2)])
	cfg.JournalMaxBytes = []int{4 << 10, 64 << 10}[rng.IntN(2)]
	cfg.JournalFlushWhenQueueEmpty = rng.IntN(4) != 0
	cfg.JournalMaxWait = 200 * time.Microsecond
	cfg.EntryLogMaxBytes = int64([]int{8 << 10, 24 << 10}[rng.IntN(2)])
	cfg.WriteCacheBytes = []int{32 << 10, 128 << 10}[rng.IntN(2)]
	cfg.ReadCacheBytes = 32 << 10
	cfg.ReadAheadEntries = 8
	cfg.GCThreshold = 0.6
	if rng.IntN(4) == 0 {
		cfg.LedgerDir = cfg.JournalDir // one directory for everything is allowed
	}
	cfg.hooks = hooks
	return cfg
}

func runCrashSeed(seed int64, hooks testHooks, percents []int, ops int) crashResult {
	return runCrashSeedFaults(seed, hooks, percents, ops, false)
}

// runCrashSeedFaults runs a seed; enospc also injects ENOSPC into the
// journal's and entry logs' writes, syncs, preallocations and creations,
// switched on and off at random during the workload, and checks at the end
// that the engine came back writable by itself.
func runCrashSeedFaults(seed int64, hooks testHooks, percents []int, ops int, enospc bool) crashResult {
	rng := rand.New(rand.NewPCG(uint64(seed), 0x9e3779b97f4a7c15))
	fs := vfs.NewCrashableMem()
	var engineFS vfs.FS = crashableFS{fs}
	var faults *faultFS
	if enospc {
		faults = newFaultFS(engineFS, uint64(seed))
		faults.injectInto = journalAndEntryLogs
		engineFS = faults
	}
	r := &crashRun{
		seed: seed, rng: rng, fs: fs, cfg: crashConfig(engineFS, rng, hooks), percents: percents, faults: faults,
		model: &crashModel{
			versions: make(map[cacheKey][]addVersion), maxSubmittedLAC: make(map[int64]int64),
			deleteStarted: make(map[int64]bool), acked: make(map[cacheKey]int),
			maxAckedLAC: make(map[int64]int64), fenced: make(map[int64]bool), deleted: make(map[int64]bool),
			acks: make(chan struct{}, 1),
		},
		nextID: 1, next: make(map[int64]int64),
	}
	r.stalled = make(chan struct{}, 1)
	r.cfg.hooks.beforeJournalSync = func() {
		if ch := r.stall.Load(); ch != nil {
			select {
			case r.stalled <- struct{}{}:
			default:
			}
			<-*ch
		}
	}
	if rng.IntN(8) == 0 && !hooks.skipJournalSync && !hooks.skipEntryLogSync && !hooks.skipLedgerMetaSync && !hooks.ackDespiteNoSpace {
		r.cfg.JournalSyncData = false
		r.ackedMayBeLost = true
	}
	e, err := Open(r.cfg)
	if err != nil {
		return crashResult{violations: []string{fmt.Sprintf("open: %v", err)}}
	}
	for range 4 {
		r.newLedger()
	}
	var background sync.WaitGroup
	for op := 0; op < ops && len(r.result.violations) == 0; op++ {
		if faults != nil && rng.IntN(20) == 0 {
			faults.injectOneIn.Store([]int64{0, 0, 2, 5, 20}[rng.IntN(5)])
			continue
		}
		switch x := rng.IntN(100); {
		case x < 62:
			r.add(e, false)
		case x < 68:
			r.add(e, true)
		case x < 71:
			l := r.pickLedger()
			background.Add(1)
			go func() {
				defer background.Done()
				if _, err := e.Fence(l); err == nil {
					r.model.mu.Lock()
					r.model.fenced[l] = true
					r.model.mu.Unlock()
				}
			}()
		case x < 73:
			l := r.pickLedger()
			r.model.deleteStarted[l] = true
			r.ledgers = slices.DeleteFunc(r.ledgers, func(id int64) bool { return id == l })
			r.newLedger()
			background.Add(1)
			go func() {
				defer background.Done()
				if err := e.DeleteLedger(l); err == nil {
					r.model.mu.Lock()
					r.model.deleted[l] = true
					r.model.mu.Unlock()
				}
			}()
		case x < 79:
			background.Add(1)
			go func() { defer background.Done(); _ = e.Checkpoint() }()
		case x < 82:
			background.Add(1)
			go func() { defer background.Done(); _ = e.CompactEntryLogs() }()
		case x < 87:
			r.waitPending(rng.IntN(3) == 0)
		case x < 90:
			r.crashWhileUnsynced(e)
		default:
			r.crashPoint()
		}
	}
	r.waitPending(true)
	if faults != nil {
		background.Wait()
		// End out of space more often than not: adds and a checkpoint
		// with half the writes failing.
		faults.injectOneIn.Store(2)
		for range 10 {
			r.add(e, false)
		}
		r.waitPending(true)
		_ = e.Checkpoint()
		r.recoverFromNoSpace(e)
	}
	r.crashPoint()
	background.Wait()
	st := e.Stats()
	r.result.checkpoints += st.Checkpoints
	r.result.gcRelocated += st.GCRelocatedEntries
	r.result.gcReclaimed += st.GCReclaimedBytes
	r.model.mu.Lock()
	r.result.addsRefused = r.model.refused
	r.model.mu.Unlock()
	r.result.noSpaceFailures = st.NoSpaceErrors
	if err := e.Close(); err != nil {
		r.violate("close: %v", err)
	}
	return r.result
}

// recoverFromNoSpace stops the injection and checks that the engine comes
// back writable by itself, without reopening: adds to a fresh ledger are
// acknowledged.
func (r *crashRun) recoverFromNoSpace(e *Engine) {
	r.result.enospcInjected = r.faults.enospc.Load()
	r.faults.injectOneIn.Store(0)
	wasOut := e.Stats().ReadOnlyReason == reasonNoSpace
	e.checkDisk() // what the disk loop does every DiskCheckInterval
	if st := e.Stats(); st.ReadOnly {
		r.violate("still read-only (%s) once the disk has room", st.ReadOnlyReason)
		return
	}
	if wasOut {
		r.result.noSpaceRecovers++
	}
	e.mu.RLock()
	failErr := e.failErr
	e.mu.RUnlock()
	if failErr != nil {
		r.violate("engine failed for good: %v", failErr)
		return
	}
	r.newLedger()
	l := r.ledgers[len(r.ledgers)-1]
	for range 5 {
		r.addTo(e, l, false)
	}
	r.waitPending(true)
	snap := r.model.snapshot()
	r.model.mu.Lock()
	lastErr := r.model.lastErr
	r.model.mu.Unlock()
	for i := range r.next[l] {
		if _, ok := snap.acked[cacheKey{ledgerID: l, entryID: i}]; !ok {
			r.violate("add ledger %d entry %d not acknowledged after the disk had room again (last add error: %v)", l, i, lastErr)
		}
	}
}

func (r *crashRun) violate(format string, args ...any) {
	r.result.violations = append(r.result.violations, fmt.Sprintf(format, args...))
}

func (r *crashRun) newLedger() {
	r.ledgers = append(r.ledgers, r.nextID)
	r.nextID++
}

func (r *crashRun) pickLedger() int64 { return r.ledgers[r.rng.IntN(len(r.ledgers))] }

func (r *crashRun) payload(l, entry int64, version int) []byte {
	size := 8 + r.rng.IntN(1500)
	if r.rng.IntN(20) == 0 {
		size = 2000 + r.rng.IntN(7000)
	}
	p := make([]byte, size)
	var h [24]byte
	binary.BigEndian.PutUint64(h[0:], uint64(l))
	binary.BigEndian.PutUint64(h[8:], uint64(entry))
	binary.BigEndian.PutUint64(h[16:], uint64(version))
	n := copy(p, h[:])
	for i := n; i < len(p); i += 8 {
		var w [8]byte
		binary.LittleEndian.PutUint64(w[:], r.rng.Uint64())
		copy(p[i:], w[:])
	}
	return p
}

// add submits an add. recovery=true re-adds an existing entry (usually the
// same bytes, sometimes newer ones) with the recovery flag.
//
// It reports whether the add is still pending when Add returns (a rejected
// add completes inside Add).
func (r *crashRun) add(e *Engine, recovery bool) (pending bool) {
	return r.addTo(e, r.pickLedger(), recovery)
}

func (r *crashRun) addTo(e *Engine, l int64, recovery bool) (pending bool) {
	entry := r.next[l]
	if recovery && entry > 0 {
		entry = r.rng.Int64N(entry)
	} else {
		r.next[l] = entry + 1
	}
	k := cacheKey{ledgerID: l, entryID: entry}
	m := r.model
	var v addVersion
	if old := m.versions[k]; recovery && len(old) > 0 && r.rng.IntN(3) != 0 {
		v = old[len(old)-1]
	} else {
		v = addVersion{payload: r.payload(l, entry, len(old)), lac: max(-1, entry-1-r.rng.Int64N(3))}
	}
	idx := len(m.versions[k])
	m.versions[k] = append(m.versions[k], v)
	if lac, ok := m.maxSubmittedLAC[l]; !ok || v.lac > lac {
		m.maxSubmittedLAC[l] = v.lac
	}
	req := AddRequest{LedgerID: l, EntryID: entry, LastAddConfirmed: v.lac, Recovery: recovery || r.rng.IntN(10) == 0,
		Payload: slices.Clone(v.payload)}
	m.mu.Lock()
	m.pending++
	m.mu.Unlock()
	var completed atomic.Bool
	e.Add(req, func(err error) {
		completed.Store(true)
		clear(req.Payload) // the engine must have copied it
		m.mu.Lock()
		defer m.mu.Unlock()
		m.pending--
		select {
		case m.acks <- struct{}{}:
		default:
		}
		if err != nil {
			if errors.Is(err, ErrReadOnly) {
				m.refused++
			}
			m.lastErr = err
			return
		}
		if cur, ok := m.acked[k]; !ok || idx > cur {
			m.acked[k] = idx
		}
		if lac, ok := m.maxAckedLAC[l]; !ok || v.lac > lac {
			m.maxAckedLAC[l] = v.lac
		}
	})
	return !completed.Load()
}

// waitPending waits for every outstanding add (all=true) or a few.
func (r *crashRun) waitPending(all bool) {
	m := r.model
	m.mu.Lock()
	target := 0
	if !all {
		target = m.pending / 2
	}
	m.mu.Unlock()
	deadline := time.NewTimer(10 * time.Second)
	defer deadline.Stop()
	for {
		m.mu.Lock()
		done := m.pending <= target
		m.mu.Unlock()
		if done {
			return
		}
		select {
		case <-m.acks:
		case <-deadline.C:
			r.violate("adds not acknowledged within 10s")
			return
		}
	}
}

// crashWhileUnsynced blocks the journal after it wrote a batch and before
// the fsync, adds more, and crashes there: written, unacknowledged records
// survive in part (torn at 4 KiB blocks) or whole.
func (r *crashRun) crashWhileUnsynced(e *Engine) {
	if r.faults != nil && r.faults.injectOneIn.Load() != 0 {
		// Failed journal writes never reach the fsync to stall at.
		r.crashPoint()
		return
	}
	select {
	case <-r.stalled: // a stale signal from a stall that ended
	default:
	}
	ch := make(chan struct{})
	r.stall.Store(&ch)
	inJournal := false
	for range 1 + r.rng.IntN(8) {
		// Accepted adds cannot complete while the stall is set: the
		// journal blocks before acknowledging.
		inJournal = r.add(e, false) || inJournal
	}
	if !inJournal {
		r.stall.Store(nil)
		close(ch)
		return
	}
	deadline := time.NewTimer(10 * time.Second)
	defer deadline.Stop()
wait:
	for {
		select {
		case <-r.stalled:
			r.crashPoint()
			break wait
		case <-r.model.acks:
			// With ENOSPC injected (or stopped just now) the adds may
			// fail instead of reaching the fsync.
			r.model.mu.Lock()
			pending := r.model.pending
			r.model.mu.Unlock()
			if pending == 0 {
				break wait
			}
		case <-deadline.C:
			r.violate("journal did not reach its fsync within 10s")
			break wait
		}
	}
	r.stall.Store(nil)
	close(ch)
}

// crashPoint clones the file system as a crash would leave it and checks
// the recovered engine against the model.
func (r *crashRun) crashPoint() {
	r.result.points++
	snap := r.model.snapshot() // before the clone: everything acknowledged here was synced before it
	percent := r.percents[r.rng.IntN(len(r.percents))]
	clone := r.fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: percent, RNG: r.rng})
	cfg := r.cfg
	cfg.FS = clone
	cfg.hooks = testHooks{}
	e, err := Open(cfg)
	if err != nil {
		r.violate("point %d (unsynced %d%%): open after crash: %v", r.result.points, percent, err)
		return
	}
	defer func() {
		if err := e.Close(); err != nil {
			r.violate("point %d: close recovered engine: %v", r.result.points, err)
		}
	}()
	r.check(e, snap, fmt.Sprintf("point %d (unsynced %d%%)", r.result.points, percent))
	r.result.replayed += e.Stats().ReplayedRecords
	if err := e.Checkpoint(); err != nil {
		r.violate("point %d: checkpoint after recovery: %v", r.result.points, err)
	}
	if err := e.CompactEntryLogs(); err != nil {
		r.violate("point %d: gc after recovery: %v", r.result.points, err)
	}
	r.check(e, snap, fmt.Sprintf("point %d (unsynced %d%%) after checkpoint+gc", r.result.points, percent))
	r.result.entryLogReads += e.Stats().ReadCacheMisses
}

func (r *crashRun) check(e *Engine, snap modelSnapshot, where string) {
	m := r.model
	byLedger := make(map[int64][]cacheKey)
	for k := range m.versions {
		byLedger[k.ledgerID] = append(byLedger[k.ledgerID], k)
	}
	for l := int64(1); l < r.nextID; l++ {
		if snap.deleted[l] {
			if _, err := e.Read(l, 0); !errors.Is(err, ErrNoSuchLedger) {
				r.violate("%s: ledger %d deleted, read gives %v", where, l, err)
			}
			if _, err := e.LastAddConfirmed(l); !errors.Is(err, ErrNoSuchLedger) {
				r.violate("%s: ledger %d deleted, LAC gives %v", where, l, err)
			}
			continue
		}
		mayBeDeleted := m.deleteStarted[l]
		mayBeLost := mayBeDeleted || r.ackedMayBeLost
		if snap.fenced[l] && !mayBeDeleted && !e.fencedForTest(l) {
			r.violate("%s: ledger %d fence lost", where, l)
		}
		lac, err := e.LastAddConfirmed(l)
		if wantLAC, ok := snap.maxAckedLAC[l]; ok && !mayBeLost && (err != nil || lac < wantLAC) {
			r.violate("%s: ledger %d LAC %d (err %v), acknowledged LAC %d", where, l, lac, err, wantLAC)
		}
		if err == nil && lac > max(-1, m.maxSubmittedLAC[l]) {
			r.violate("%s: ledger %d LAC %d above any submitted (%d)", where, l, lac, m.maxSubmittedLAC[l])
		}
		keys := byLedger[l]
		slices.SortFunc(keys, cacheKey.compare)
		for _, k := range keys {
			ackedIdx, acked := snap.acked[k]
			ent, err := e.Read(l, k.entryID)
			if err != nil {
				if errors.Is(err, ErrNoSuchEntry) || errors.Is(err, ErrNoSuchLedger) {
					if acked && !mayBeLost {
						r.violate("%s: ledger %d entry %d acknowledged but lost: %v", where, l, k.entryID, err)
					}
				} else {
					r.violate("%s: ledger %d entry %d: unexpected error %v", where, l, k.entryID, err)
				}
				continue
			}
			idx := -1
			for i, v := range m.versions[k] {
				if bytes.Equal(v.payload, ent.Payload) && v.lac == ent.LastAddConfirmed {
					idx = i
				}
			}
			if acked {
				r.result.ackedChecked++
			} else {
				r.result.unackedFound++
			}
			switch {
			case idx < 0:
				r.violate("%s: ledger %d entry %d reads %d bytes (LAC %d) that were never added for it",
					where, l, k.entryID, len(ent.Payload), ent.LastAddConfirmed)
			case acked && !mayBeLost && idx < ackedIdx:
				r.violate("%s: ledger %d entry %d reads version %d, acknowledged version %d", where, l, k.entryID, idx, ackedIdx)
			case ent.LedgerID != l || ent.EntryID != k.entryID:
				r.violate("%s: ledger %d entry %d read returned ids %d/%d", where, l, k.entryID, ent.LedgerID, ent.EntryID)
			}
		}
		if _, err := e.Read(l, r.next[l]+1); err != nil && !errors.Is(err, ErrNoSuchEntry) && !errors.Is(err, ErrNoSuchLedger) {
			r.violate("%s: ledger %d entry past the end: %v", where, l, err)
		}
	}
}

func crashSeeds(t *testing.T) []int64 {
	if s := os.Getenv("QUIRE_CRASH_SEED"); s != "" {
		seed, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			t.Fatalf("QUIRE_CRASH_SEED: %v", err)
		}
		return []int64{seed}
	}
	n := 90
	if s := os.Getenv("QUIRE_CRASH_SEEDS"); s != "" {
		var err error
		if n, err = strconv.Atoi(s); err != nil {
			t.Fatalf("QUIRE_CRASH_SEEDS: %v", err)
		}
	}
	seeds := make([]int64, n)
	for i := range seeds {
		seeds[i] = int64(i + 1)
	}
	return seeds
}

// runSeeds runs seeds on GOMAXPROCS workers.
func runSeeds(seeds []int64, run func(seed int64) crashResult) map[int64]crashResult {
	results := make(map[int64]crashResult, len(seeds))
	var mu sync.Mutex
	work := make(chan int64)
	var wg sync.WaitGroup
	for range runtime.GOMAXPROCS(0) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for seed := range work {
				res := run(seed)
				mu.Lock()
				results[seed] = res
				mu.Unlock()
			}
		}()
	}
	for _, s := range seeds {
		work <- s
	}
	close(work)
	wg.Wait()
	return results
}

func TestCrashSafety(t *testing.T) {
	seeds := crashSeeds(t)
	start := time.Now()
	results := runSeeds(seeds, func(seed int64) crashResult {
		return runCrashSeed(seed, testHooks{}, []int{0, 30, 100}, 300)
	})
	points := 0
	var total crashResult
	for _, seed := range seeds {
		res := results[seed]
		points += res.points
		total.ackedChecked += res.ackedChecked
		total.unackedFound += res.unackedFound
		total.replayed += res.replayed
		total.checkpoints += res.checkpoints
		total.gcRelocated += res.gcRelocated
		total.gcReclaimed += res.gcReclaimed
		total.entryLogReads += res.entryLogReads
		if len(res.violations) > 0 {
			t.Errorf("seed %d: %d violations (replay: QUIRE_CRASH_SEED=%d go test ./internal/bookie/ -run TestCrashSafety):\n  %s",
				seed, len(res.violations), seed, joinFirst(res.violations, 10))
		}
	}
	t.Logf("%d seeds, %d crash points in %v", len(seeds), points, time.Since(start).Round(time.Millisecond))
	t.Logf("verified %d acknowledged and %d unacknowledged surviving entry reads; %d journal records replayed; "+
		"%d entry-log reads; workload ran %d checkpoints, GC relocated %d entries and reclaimed %d bytes",
		total.ackedChecked, total.unackedFound, total.replayed, total.entryLogReads, total.checkpoints, total.gcRelocated, total.gcReclaimed)
	if len(seeds) > 1 && (total.ackedChecked == 0 || total.replayed == 0 || total.entryLogReads == 0 || total.gcRelocated == 0) {
		t.Errorf("the workload did not exercise every path: %+v", total)
	}
	if len(seeds) > 1 && points < 2000 {
		t.Errorf("only %d crash points; want at least 2000", points)
	}
}

// TestCrashSafetyOutOfSpace runs the crash checker with ENOSPC injected at
// random into the journal's and entry logs' writes, fsyncs, preallocations
// and creations: no acknowledged entry is lost, nothing unacknowledged
// reads back as garbage, and every seed ends with the engine writable
// again without a reopen (runCrashSeedFaults). QUIRE_CRASH_SEEDS and
// QUIRE_CRASH_SEED apply; the default is a third of TestCrashSafety's (8
// under -race).
func TestCrashSafetyOutOfSpace(t *testing.T) {
	seeds := crashSeeds(t)
	if len(seeds) > 1 && os.Getenv("QUIRE_CRASH_SEEDS") == "" {
		// A third of TestCrashSafety's; under the race detector, which
		// runs both in one package's time limit, 8.
		seeds = seeds[:len(seeds)/3]
		if raceEnabled {
			seeds = seeds[:8]
		}
	}
	start := time.Now()
	results := runSeeds(seeds, func(seed int64) crashResult {
		return runCrashSeedFaults(seed, testHooks{}, []int{0, 30, 100}, 300, true)
	})
	var total crashResult
	for _, seed := range seeds {
		res := results[seed]
		total.points += res.points
		total.ackedChecked += res.ackedChecked
		total.unackedFound += res.unackedFound
		total.enospcInjected += res.enospcInjected
		total.addsRefused += res.addsRefused
		total.noSpaceRecovers += res.noSpaceRecovers
		total.noSpaceFailures += res.noSpaceFailures
		if len(res.violations) > 0 {
			t.Errorf("seed %d: %d violations (replay: QUIRE_CRASH_SEED=%d go test ./internal/bookie/ -run TestCrashSafetyOutOfSpace):\n  %s",
				seed, len(res.violations), seed, joinFirst(res.violations, 10))
		}
	}
	t.Logf("%d seeds, %d crash points in %v; %d ENOSPC injected, %d adds refused read-only, %d out-of-space states (checkpoint/GC/journal), %d seeds ended out of space and recovered",
		len(seeds), total.points, time.Since(start).Round(time.Millisecond), total.enospcInjected, total.addsRefused, total.noSpaceFailures, total.noSpaceRecovers)
	t.Logf("verified %d acknowledged and %d unacknowledged surviving entry reads", total.ackedChecked, total.unackedFound)
	if len(seeds) > 1 && (total.enospcInjected == 0 || total.addsRefused == 0 || total.noSpaceFailures == 0 || total.ackedChecked == 0) {
		t.Errorf("the workload did not exercise running out of space: %+v", total)
	}
}

// TestCrashCheckerCatchesNoSpaceMutant: with ENOSPC injected, an engine
// that acknowledges the adds its journal could not write must be caught.
func TestCrashCheckerCatchesNoSpaceMutant(t *testing.T) {
	seeds := []int64{1, 2, 3, 4, 5, 6, 7, 8}
	results := runSeeds(seeds, func(seed int64) crashResult {
		return runCrashSeedFaults(seed, testHooks{ackDespiteNoSpace: true}, []int{0}, 300, true)
	})
	caught := 0
	var example string
	for _, seed := range seeds {
		if v := results[seed].violations; len(v) > 0 {
			caught++
			example = fmt.Sprintf("seed %d: %s", seed, v[0])
		}
	}
	if caught == 0 {
		t.Fatalf("the crash checker did not catch the ack-despite-ENOSPC mutant in %d seeds", len(seeds))
	}
	t.Logf("caught in %d of %d seeds, e.g. %s", caught, len(seeds), example)
}

// TestCrashCheckerCatchesMutants proves the checker is not vacuous: with a
// deliberately broken engine it must report violations.
func TestCrashCheckerCatchesMutants(t *testing.T) {
	mutants := []struct {
		name  string
		hooks testHooks
	}{
		{"ack without journal fsync", testHooks{skipJournalSync: true}},
		{"checkpoint without entry log sync", testHooks{skipEntryLogSync: true}},
		{"fence and delete without sync", testHooks{skipLedgerMetaSync: true}},
	}
	for _, mutant := range mutants {
		t.Run(mutant.name, func(t *testing.T) {
			seeds := []int64{1, 2, 3, 4, 5, 6, 7, 8}
			results := runSeeds(seeds, func(seed int64) crashResult {
				return runCrashSeed(seed, mutant.hooks, []int{0}, 300)
			})
			caught := 0
			var example string
			for _, seed := range seeds {
				if v := results[seed].violations; len(v) > 0 {
					caught++
					example = fmt.Sprintf("seed %d: %s", seed, v[0])
				}
			}
			if caught == 0 {
				t.Fatalf("the crash checker did not catch mutant %q in %d seeds", mutant.name, len(seeds))
			}
			t.Logf("caught in %d of %d seeds, e.g. %s", caught, len(seeds), example)
		})
	}
}

func joinFirst(s []string, n int) string {
	var b bytes.Buffer
	for i, v := range s {
		if i == n {
			fmt.Fprintf(&b, "... and %d more", len(s)-n)
			break
		}
		if i > 0 {
			b.WriteString("\n  ")
		}
		b.WriteString(v)
	}
	return b.String()
}

// TestCrashableFSReuseUnderCrashClone: journal files reused while crash
// points clone the file system. On pebble's own MemFS.ReuseForWrite this
// hangs within a few thousand rounds (seen: TestCrashSafety stuck for ten
// minutes); crashableFS must finish.
func TestCrashableFSReuseUnderCrashClone(t *testing.T) {
	mem := vfs.NewCrashableMem()
	fs := crashableFS{mem}
	f, err := fs.Create("/a", vfs.WriteCategoryUnspecified)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-done:
				return
			default:
				mem.CrashClone(vfs.CrashCloneCfg{})
			}
		}
	}()
	defer close(done)
	names := []string{"/a", "/b"}
	for i := range 50_000 {
		f, err := fs.ReuseForWrite(names[i%2], names[(i+1)%2], vfs.WriteCategoryUnspecified)
		if err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
}
