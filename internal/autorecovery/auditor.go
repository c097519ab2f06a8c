package autorecovery

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"time"

	"quire/internal/bookie/registry"
	"quire/internal/ledger"
	"quire/internal/meta"
)

// auditor is the elected auditor's state. It lives for one term: the
// goroutine that won the election owns it, so it needs no lock.
type auditor struct {
	s *Service

	registered map[ledger.BookieID]registry.Info
	// goneSince: when this auditor saw each bookie unregistered (its
	// registration deleted, or named by a ledger without being registered).
	// A bookie is lost once LostBookieDelay has passed since.
	goneSince map[ledger.BookieID]time.Time
	// zones: the zone each bookie was last registered in (ZonePrefix).
	zones map[string]string
	// auditedAt is when the last successful audit ran (zero before it).
	auditedAt time.Time
}

func newAuditor(s *Service) *auditor {
	return &auditor{s: s, registered: map[ledger.BookieID]registry.Info{}, goneSince: map[ledger.BookieID]time.Time{}, zones: map[string]string{}}
}

// run audits until ctx ends: at once (bookies may have been lost while no
// auditor ran), whenever a missing bookie's delay passes, and every
// AuditInterval.
func (a *auditor) run(ctx context.Context) {
	cfg := a.s.cfg
	bookies := newMirror(cfg.Store, registry.Prefix, a.s.log, cfg.RetryBackoff)
	marks := newMirror(cfg.Store, UnderReplicatedPrefix, a.s.log, cfg.RetryBackoff)
	mctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go bookies.run(mctx)
	go marks.run(mctx)

	// Start from the zones recorded by earlier auditors.
	for {
		kvs, _, err := meta.ListAll(ctx, cfg.Store, ZonePrefix)
		if err == nil {
			for _, kv := range kvs {
				var zone string
				if json.Unmarshal(kv.Value, &zone) == nil {
					a.zones[strings.TrimPrefix(kv.Key, ZonePrefix)] = zone
				}
			}
			break
		}
		pause(ctx, cfg.RetryBackoff) // retry pacing: the store is unreachable
		if ctx.Err() != nil {
			return
		}
	}

	var nextAudit time.Time // zero: audit as soon as the registry is listed
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		if snap, listed := bookies.Snapshot(); listed {
			a.updateRegistry(ctx, snap, time.Now())
			now := time.Now()
			if !nextAudit.After(now) || a.lostDue(now) {
				if err := a.audit(ctx, now); err != nil {
					a.s.log.Warn("autorecovery: audit failed", "err", err)
					nextAudit = now.Add(cfg.RetryBackoff)
				} else {
					nextAudit = now.Add(cfg.AuditInterval)
				}
			}
			timer.Reset(time.Until(a.nextWake(nextAudit)))
		}
		if snap, listed := marks.Snapshot(); listed {
			a.s.metrics.underReplicated.Set(float64(len(snap)))
		}
		select {
		case <-ctx.Done():
			return
		case <-bookies.Changed():
		case <-marks.Changed():
		case <-timer.C:
		}
	}
}

// updateRegistry diffs the registry against the last view: a bookie that
// disappeared starts its delay; one that came back cancels it.
func (a *auditor) updateRegistry(ctx context.Context, snap map[string]meta.KV, now time.Time) {
	current := map[ledger.BookieID]registry.Info{}
	for _, kv := range snap {
		var info registry.Info
		if err := json.Unmarshal(kv.Value, &info); err != nil {
			a.s.log.Warn("autorecovery: bad registration", "key", kv.Key, "err", err)
			continue
		}
		current[ledger.BookieID(info.ID)] = info
	}
	for id := range a.registered {
		if _, ok := current[id]; !ok {
			if _, known := a.goneSince[id]; !known {
				a.s.log.Info("autorecovery: bookie unregistered", "bookie", id, "lost-after", a.s.cfg.LostBookieDelay)
				a.goneSince[id] = now
			}
		}
	}
	for id, info := range current {
		if _, gone := a.goneSince[id]; gone {
			a.s.log.Info("autorecovery: bookie registered again", "bookie", id)
			delete(a.goneSince, id)
		}
		if zone, known := a.zones[info.ID]; !known || zone != info.Zone {
			// Best effort: only the same-zone preference of replacements
			// depends on it, and the next change retries it.
			if err := a.recordZone(ctx, info.ID, info.Zone); err != nil {
				a.s.log.Debug("autorecovery: record zone", "bookie", info.ID, "err", err)
			} else {
				a.zones[info.ID] = info.Zone
			}
		}
	}
	a.registered = current
}

func (a *auditor) recordZone(ctx context.Context, id, zone string) error {
	key := ZonePrefix + id
	kv, err := a.s.cfg.Store.Get(ctx, key)
	switch {
	case errors.Is(err, meta.ErrNotFound):
		_, err = a.s.cfg.Store.Create(ctx, key, mustJSON(zone))
	case err == nil:
		_, err = a.s.cfg.Store.Put(ctx, key, mustJSON(zone), kv.Version)
	}
	return err
}

// lostDue reports whether some missing bookie's delay has passed since the
// last audit declared the lost ones.
func (a *auditor) lostDue(now time.Time) bool {
	for _, since := range a.goneSince {
		if due := since.Add(a.s.cfg.LostBookieDelay); !due.After(now) && due.After(a.auditedAt) {
			return true
		}
	}
	return false
}

// nextWake is the earliest of the next periodic audit and the moments a
// missing bookie becomes lost.
func (a *auditor) nextWake(nextAudit time.Time) time.Time {
	wake := nextAudit
	for _, since := range a.goneSince {
		if due := since.Add(a.s.cfg.LostBookieDelay); due.After(a.auditedAt) && due.Before(wake) {
			wake = due
		}
	}
	return wake
}

// audit scans every ledger's metadata and marks those with a fragment on a
// lost bookie. Bookies that ledgers name but that are not registered, and
// that this auditor had not seen go, start their delay now: they were lost
// while no auditor ran (or never registered with this auditor watching).
func (a *auditor) audit(ctx context.Context, now time.Time) error {
	cfg := a.s.cfg
	kvs, _, err := meta.ListAll(ctx, cfg.Store, ledger.KeyPrefix)
	if err != nil {
		return err
	}
	lost := func(b ledger.BookieID) bool {
		since, gone := a.goneSince[b]
		return gone && !since.Add(cfg.LostBookieDelay).After(now)
	}
	referenced := map[ledger.BookieID]bool{}
	existing := map[int64]bool{}
	marked := 0
	for _, kv := range kvs {
		md, err := ledger.UnmarshalMetadata(kv.Value)
		if err != nil {
			a.s.log.Warn("autorecovery: unreadable ledger metadata", "key", kv.Key, "err", err)
			continue
		}
		existing[md.ID] = true
		lostHere := map[ledger.BookieID]bool{}
		for b := range referencedBookies(&md) {
			referenced[b] = true
			if _, up := a.registered[b]; up {
				continue
			}
			if _, known := a.goneSince[b]; !known {
				a.s.log.Info("autorecovery: ledgers name an unregistered bookie", "bookie", b, "ledger", md.ID)
				a.goneSince[b] = now
			}
			if lost(b) {
				lostHere[b] = true
			}
		}
		if len(lostHere) == 0 {
			continue
		}
		if err := a.ensureMark(ctx, md.ID, lostBookiesOf(&md, lostHere), now); err != nil {
			return err
		}
		marked++
	}
	// Forget bookies nothing names any more once they count as lost: there
	// is nothing left to repair.
	for b := range a.goneSince {
		if !referenced[b] && lost(b) {
			delete(a.goneSince, b)
		}
	}
	if err := a.dropStaleMarks(ctx, existing); err != nil {
		return err
	}
	a.auditedAt = now
	if marked > 0 {
		a.s.log.Info("autorecovery: audit marked ledgers under-replicated", "ledgers", marked, "scanned", len(kvs))
	}
	return nil
}

// ensureMark creates the ledger's mark or adds bookies to it.
func (a *auditor) ensureMark(ctx context.Context, ledgerID int64, lost []string, now time.Time) error {
	store := a.s.cfg.Store
	key := markKey(ledgerID)
	for {
		kv, err := store.Get(ctx, key)
		if errors.Is(err, meta.ErrNotFound) {
			m, _ := mergeMark(Mark{LedgerID: ledgerID, MarkedAt: now.UTC()}, lost, a.zones)
			_, err = store.Create(ctx, key, mustJSON(m))
			if errors.Is(err, meta.ErrExists) {
				continue
			}
			if err == nil {
				a.s.log.Info("autorecovery: ledger under-replicated", "ledger", ledgerID, "lost", lost)
			}
			return err
		}
		if err != nil {
			return err
		}
		m, err := decodeMark(kv.Value)
		if err != nil {
			return err
		}
		next, changed := mergeMark(m, lost, a.zones)
		if !changed {
			return nil
		}
		if _, err = store.Put(ctx, key, mustJSON(next), kv.Version); errors.Is(err, meta.ErrBadVersion) || errors.Is(err, meta.ErrNotFound) {
			continue
		}
		return err
	}
}

// dropStaleMarks deletes marks of ledgers that no longer exist.
func (a *auditor) dropStaleMarks(ctx context.Context, existing map[int64]bool) error {
	store := a.s.cfg.Store
	kvs, _, err := meta.ListAll(ctx, store, UnderReplicatedPrefix)
	if err != nil {
		return err
	}
	for _, kv := range kvs {
		id, ok := ledgerIDOf(kv.Key, UnderReplicatedPrefix)
		if !ok || existing[id] {
			continue
		}
		// Not in the listing: confirm (the listing is a moment ago).
		if _, err := store.Get(ctx, ledger.Key(id)); !errors.Is(err, meta.ErrNotFound) {
			continue
		}
		if err := store.Delete(ctx, kv.Key, kv.Version); err != nil && !errors.Is(err, meta.ErrBadVersion) && !errors.Is(err, meta.ErrNotFound) {
			return err
		}
		a.s.log.Info("autorecovery: dropped the mark of a deleted ledger", "ledger", id)
	}
	return nil
}
