package autorecovery

import (
	"cmp"
	"context"
	"errors"
	"hash/fnv"
	"maps"
	"slices"
	"sort"
	"strconv"
	"sync"
	"time"

	"quire/internal/meta"
)

// worker claims under-replicated ledgers and repairs up to LedgersPerWorker
// of them at once. Its loop goroutine owns the scheduling state; each repair
// runs on its own goroutine and reports back through results.
type worker struct {
	s    *Service
	sess meta.Session

	marks *mirror
	locks *mirror

	results chan jobResult
	active  map[int64]bool
	// notBefore paces the retry of a ledger whose repair failed; failures
	// counts its consecutive failures, doubling the pause each time (a
	// ledger whose slot no placement can fill fails until the cluster
	// changes).
	notBefore map[int64]time.Time
	failures  map[int64]int
	// handled remembers the mark version each repair finished with, so a
	// lagging watch does not hand the same mark out again.
	handled map[int64]meta.Version

	publishMu      sync.Mutex
	publishVersion meta.Version
}

// maxRetryBackoff caps the pause before retrying a failed ledger.
const maxRetryBackoff = 5 * time.Minute

type jobResult struct {
	ledgerID    int64
	markVersion meta.Version
	err         error
}

func newWorker(s *Service, sess meta.Session) *worker {
	cfg := s.cfg
	return &worker{
		s: s, sess: sess,
		marks:     newMirror(cfg.Store, UnderReplicatedPrefix, s.log, cfg.RetryBackoff),
		locks:     newMirror(cfg.Store, LockPrefix, s.log, cfg.RetryBackoff),
		results:   make(chan jobResult),
		active:    map[int64]bool{},
		notBefore: map[int64]time.Time{},
		failures:  map[int64]int{},
		handled:   map[int64]meta.Version{},
	}
}

// run schedules repairs until ctx ends, then waits for its repairs to stop.
func (w *worker) run(ctx context.Context) {
	cfg := w.s.cfg
	mctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go w.marks.run(mctx)
	go w.locks.run(mctx)
	var publishers sync.WaitGroup
	publishers.Go(func() { w.publishLoop(mctx) })
	defer publishers.Wait()

	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		wake := w.schedule(ctx, time.Now())
		if !wake.IsZero() {
			timer.Reset(time.Until(wake))
		}
		select {
		case <-ctx.Done():
			for len(w.active) > 0 {
				r := <-w.results
				delete(w.active, r.ledgerID)
			}
			return
		case r := <-w.results:
			delete(w.active, r.ledgerID)
			if r.err != nil {
				n := min(w.failures[r.ledgerID], 10)
				w.failures[r.ledgerID]++
				w.notBefore[r.ledgerID] = time.Now().Add(min(cfg.RetryBackoff<<n, maxRetryBackoff))
			} else {
				w.handled[r.ledgerID] = r.markVersion
				delete(w.notBefore, r.ledgerID)
				delete(w.failures, r.ledgerID)
			}
		case <-w.marks.Changed():
		case <-w.locks.Changed():
		case <-timer.C:
		}
	}
}

// schedule claims marked ledgers while there are free slots. It returns when
// it next needs to look again for a reason no watch signals (a deferral or a
// retry pause ending); zero for none.
func (w *worker) schedule(ctx context.Context, now time.Time) time.Time {
	marks, marksListed := w.marks.Snapshot()
	locks, locksListed := w.locks.Snapshot()
	if !marksListed || !locksListed {
		return time.Time{}
	}
	type candidate struct {
		mark    Mark
		version meta.Version
		order   uint64
	}
	var candidates []candidate
	var wake time.Time
	later := func(t time.Time) {
		if wake.IsZero() || t.Before(wake) {
			wake = t
		}
	}
	for id, v := range w.handled {
		if kv, ok := marks[markKey(id)]; !ok || kv.Version != v {
			delete(w.handled, id) // the mark is gone or changed since
		}
	}
	for id := range w.notBefore {
		if _, ok := marks[markKey(id)]; !ok {
			delete(w.notBefore, id) // repaired elsewhere: forget its failures
			delete(w.failures, id)
		}
	}
	for key, kv := range marks {
		id, ok := ledgerIDOf(key, UnderReplicatedPrefix)
		if !ok || w.active[id] || w.handled[id] == kv.Version {
			continue
		}
		if _, locked := locks[lockKey(id)]; locked {
			continue
		}
		m, err := decodeMark(kv.Value)
		if err != nil {
			w.s.log.Warn("autorecovery: bad mark", "key", key, "err", err)
			continue
		}
		if m.DeferredUntil.After(now) {
			later(m.DeferredUntil)
			continue
		}
		if t, ok := w.notBefore[id]; ok && t.After(now) {
			later(t)
			continue
		}
		candidates = append(candidates, candidate{mark: m, version: kv.Version, order: w.order(id)})
	}
	// Each worker walks the marks in its own pseudo-random order, so that
	// workers claim different ledgers instead of racing for the same one.
	sort.Slice(candidates, func(i, j int) bool { return candidates[i].order < candidates[j].order })
	for _, c := range candidates {
		if len(w.active) >= w.s.cfg.LedgersPerWorker {
			break
		}
		lockVersion, err := w.sess.CreateEphemeral(ctx, lockKey(c.mark.LedgerID), mustJSON(LockInfo{Worker: w.s.cfg.ID, Since: now.UTC()}))
		if errors.Is(err, meta.ErrExists) {
			continue // another worker has it; the lock watch will tell us
		}
		if err != nil {
			w.s.log.Debug("autorecovery: claim", "ledger", c.mark.LedgerID, "err", err)
			later(now.Add(w.s.cfg.RetryBackoff))
			break
		}
		w.active[c.mark.LedgerID] = true
		go w.job(ctx, c.mark, c.version, lockVersion)
	}
	return wake
}

func (w *worker) order(ledgerID int64) uint64 {
	h := fnv.New64a()
	h.Write([]byte(w.s.cfg.ID))
	h.Write([]byte(strconv.FormatInt(ledgerID, 10)))
	return h.Sum64()
}

// job repairs one claimed ledger, settles its mark and releases the claim.
func (w *worker) job(ctx context.Context, mark Mark, markVersion meta.Version, lockVersion meta.Version) {
	store := w.s.cfg.Store
	id := mark.LedgerID
	err := w.settle(ctx, mark, markVersion)
	if err != nil && ctx.Err() == nil {
		w.s.metrics.failures.Inc()
		w.s.progress.failed()
		w.s.log.Warn("autorecovery: repair failed; will retry", "ledger", id, "err", err)
	}
	// Release the claim even when ctx ended (the service closing): if the
	// session is gone the key went with it and this fails harmlessly.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), w.s.cfg.RequestTimeout)
	defer cancel()
	if derr := store.Delete(rctx, lockKey(id), lockVersion); derr != nil && !errors.Is(derr, meta.ErrNotFound) {
		w.s.log.Debug("autorecovery: release claim", "ledger", id, "err", derr)
	}
	w.results <- jobResult{ledgerID: id, markVersion: markVersion, err: err}
}

// settle repairs the ledger, then deletes its mark, or defers it when the
// open ledger's grace period is still running.
func (w *worker) settle(ctx context.Context, mark Mark, markVersion meta.Version) error {
	store := w.s.cfg.Store
	deferUntil, err := w.repair(ctx, mark)
	if err != nil {
		return err
	}
	key := markKey(mark.LedgerID)
	if !deferUntil.IsZero() {
		mark.DeferredUntil = deferUntil.UTC()
		_, err := store.Put(ctx, key, mustJSON(mark), markVersion)
		if errors.Is(err, meta.ErrBadVersion) || errors.Is(err, meta.ErrNotFound) {
			return nil // the auditor changed it meanwhile: it is handed out again
		}
		if err == nil {
			w.s.log.Info("autorecovery: open ledger deferred for its writer's grace period", "ledger", mark.LedgerID, "until", mark.DeferredUntil)
		}
		return err
	}
	// Publish first, so that once the last mark is gone the published
	// progress is complete.
	w.publish(ctx)
	err = store.Delete(ctx, key, markVersion)
	if errors.Is(err, meta.ErrBadVersion) || errors.Is(err, meta.ErrNotFound) {
		return nil // the auditor added a bookie meanwhile: it is handed out again
	}
	return err
}

// publishLoop republishes the worker's progress while it changes.
func (w *worker) publishLoop(ctx context.Context) {
	w.publish(ctx)
	t := time.NewTicker(w.s.cfg.ProgressInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if w.s.progress.takeChanged() {
				w.publish(ctx)
			}
		}
	}
}

// publish writes the progress key; best effort (it is for operators).
func (w *worker) publish(ctx context.Context) {
	w.publishMu.Lock()
	defer w.publishMu.Unlock()
	key := WorkerPrefix + w.s.cfg.ID
	value := mustJSON(w.s.progress.snapshot())
	var err error
	for range 3 {
		if w.publishVersion != 0 {
			var v meta.Version
			if v, err = w.sess.PutEphemeral(ctx, key, value, w.publishVersion); err == nil {
				w.publishVersion = v
				return
			}
			w.publishVersion = 0
			continue
		}
		var v meta.Version
		if v, err = w.sess.CreateEphemeral(ctx, key, value); err == nil {
			w.publishVersion = v
			return
		}
		if errors.Is(err, meta.ErrExists) {
			// Our previous session's key, not yet expired: replace it.
			if kv, gerr := w.s.cfg.Store.Get(ctx, key); gerr == nil {
				_ = w.s.cfg.Store.Delete(ctx, key, kv.Version)
			}
		}
	}
	w.s.log.Debug("autorecovery: publish progress", "err", err)
}

// progressTracker accumulates the worker's Progress; repairs update it
// concurrently.
type progressTracker struct {
	mu      sync.Mutex
	p       Progress
	active  map[int64]*ActiveRepair
	changed bool
}

func newProgressTracker(worker string) *progressTracker {
	return &progressTracker{p: Progress{Worker: worker, Sources: map[string]SourceStats{}}, active: map[int64]*ActiveRepair{}}
}

func (t *progressTracker) begin(ledgerID int64, now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.active[ledgerID] = &ActiveRepair{LedgerID: ledgerID, Since: now.UTC()}
	t.changed = true
}

func (t *progressTracker) addTotal(ledgerID, entries int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if a := t.active[ledgerID]; a != nil {
		a.EntriesTotal += entries
	}
	t.changed = true
}

func (t *progressTracker) copied(ledgerID int64, source string, bytes int64, now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if a := t.active[ledgerID]; a != nil {
		a.EntriesCopied++
	}
	t.p.EntriesCopied++
	t.p.BytesCopied += bytes
	s := t.p.Sources[source]
	if s.Entries == 0 {
		s.First = now.UTC()
	}
	s.Entries++
	s.Bytes += bytes
	s.Last = now.UTC()
	t.p.Sources[source] = s
	t.changed = true
}

func (t *progressTracker) end(ledgerID int64, repaired bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.active, ledgerID)
	if repaired {
		t.p.LedgersRepaired++
	}
	t.changed = true
}

func (t *progressTracker) failed() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.p.Failures++
	t.changed = true
}

func (t *progressTracker) takeChanged() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	c := t.changed
	t.changed = false
	return c
}

func (t *progressTracker) snapshot() Progress {
	t.mu.Lock()
	defer t.mu.Unlock()
	p := t.p
	p.Sources = maps.Clone(t.p.Sources)
	p.Active = nil
	for _, a := range t.active {
		p.Active = append(p.Active, *a)
	}
	slices.SortFunc(p.Active, func(a, b ActiveRepair) int { return cmp.Compare(a.LedgerID, b.LedgerID) })
	p.UpdatedAt = time.Now().UTC()
	return p
}
