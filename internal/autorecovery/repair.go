package autorecovery

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"quire/internal/bookie/client"
	"quire/internal/bookie/registry"
	"quire/internal/ledger"
	"quire/internal/meta"
)

// ErrNoSource: no surviving replica of an entry could serve it; the ledger
// stays marked and is retried.
var ErrNoSource = errors.New("autorecovery: no surviving replica served the entry")

// clusterView is the registry as one repair sees it.
type clusterView struct {
	cluster []ledger.BookieInfo // registered bookies, plus the lost ones with their zones, not writable
	addrs   map[ledger.BookieID]string
}

func (w *worker) readCluster(ctx context.Context, mark Mark) (clusterView, error) {
	infos, err := registry.List(ctx, w.s.cfg.Store)
	if err != nil {
		return clusterView{}, err
	}
	v := clusterView{addrs: map[ledger.BookieID]string{}}
	for _, i := range infos {
		id := ledger.BookieID(i.ID)
		v.addrs[id] = i.Addr
		v.cluster = append(v.cluster, ledger.BookieInfo{ID: id, Zone: i.Zone, Writable: !i.ReadOnly})
	}
	// Placement prefers the lost bookie's zone for its replacement, so it
	// must know that zone: add the lost bookies, never as candidates.
	for b, zone := range mark.LostZones {
		if _, up := v.addrs[ledger.BookieID(b)]; !up {
			v.cluster = append(v.cluster, ledger.BookieInfo{ID: ledger.BookieID(b), Zone: zone})
		}
	}
	return v, nil
}

// repair rebuilds every slot of the ledger held by the mark's lost bookies.
// It returns a non-zero time when the ledger is open and its last fragment
// must wait for the grace period to end (the other fragments are repaired
// already).
func (w *worker) repair(ctx context.Context, mark Mark) (deferUntil time.Time, err error) {
	id := mark.LedgerID
	w.s.progress.begin(id, time.Now())
	repaired := false
	defer func() { w.s.progress.end(id, repaired) }()

	view, err := w.readCluster(ctx, mark)
	if err != nil {
		return time.Time{}, errorf(id, "read registry: %w", err)
	}
	lost := map[ledger.BookieID]bool{}
	for _, b := range mark.LostBookies {
		if _, up := view.addrs[ledger.BookieID(b)]; up {
			// Registered again: its copies are back, nothing to rebuild.
			w.s.log.Info("autorecovery: lost bookie is back; not rebuilding its copies", "ledger", id, "bookie", b)
			continue
		}
		lost[ledger.BookieID(b)] = true
	}
	md, version, err := w.readMetadata(ctx, id)
	if errors.Is(err, meta.ErrNotFound) {
		return time.Time{}, nil // deleted: nothing to repair
	}
	if err != nil {
		return time.Time{}, err
	}
	fenced, rebuilt := false, 0
	for {
		slots, openTail := planRepairs(&md, lost)
		if len(slots) == 0 && !openTail {
			break
		}
		for _, slot := range slots {
			var swapped bool
			if md, version, swapped, err = w.repairSlot(ctx, md, version, slot, view, lost); err != nil {
				return time.Time{}, err
			}
			if swapped {
				rebuilt++
			}
		}
		if !openTail {
			continue // plan again: the slots are done, confirm nothing is left
		}
		if graceEnd := mark.MarkedAt.Add(w.s.cfg.OpenLedgerGracePeriod); time.Now().Before(graceEnd) {
			return graceEnd, nil
		}
		if fenced {
			return time.Time{}, errorf(id, "still %s after recovery", md.State)
		}
		// The writer had its grace period. Fence and close the ledger, as
		// BookKeeper does, so that the last fragment's end is known.
		w.s.log.Info("autorecovery: fencing open ledger after its grace period", "ledger", id, "state", md.State)
		// Bounded: a recovery that cannot finish (too many bookies down)
		// must not hold one of this worker's slots forever.
		rctx, cancel := context.WithTimeout(ctx, 6*w.s.cfg.RequestTimeout)
		_, err := w.s.cfg.Ledgers.Recover(rctx, id)
		cancel()
		if err != nil {
			return time.Time{}, errorf(id, "fence and close: %w", err)
		}
		fenced = true
		if md, version, err = w.readMetadata(ctx, id); err != nil {
			return time.Time{}, err
		}
	}
	if rebuilt > 0 {
		repaired = true
		w.s.metrics.ledgers.Inc()
		w.s.log.Info("autorecovery: ledger repaired", "ledger", id, "slots", rebuilt)
	}
	return time.Time{}, nil
}

func (w *worker) readMetadata(ctx context.Context, id int64) (ledger.Metadata, meta.Version, error) {
	kv, err := w.s.cfg.Store.Get(ctx, ledger.Key(id))
	if err != nil {
		return ledger.Metadata{}, 0, errorf(id, "read metadata: %w", err)
	}
	md, err := ledger.UnmarshalMetadata(kv.Value)
	if err != nil {
		return ledger.Metadata{}, 0, errorf(id, "%w", err)
	}
	return md, kv.Version, nil
}

// repairSlot copies the slot's entries to a replacement and swaps the
// replacement into the fragment's ensemble. It returns the ledger's metadata
// after the swap, and whether this worker's swap was the one that happened.
func (w *worker) repairSlot(ctx context.Context, md ledger.Metadata, version meta.Version, slot slotRepair, view clusterView, lost map[ledger.BookieID]bool) (ledger.Metadata, meta.Version, bool, error) {
	id := md.ID
	ensemble := md.Fragments[slot.Fragment].Ensemble
	target, err := ledger.ReplaceBookie(view.cluster, ensemble, slot.Index, md.WriteQuorum, lost, md.ID+int64(slot.Fragment))
	if err != nil {
		return md, version, false, errorf(id, "fragment %d: %w", slot.Fragment, err)
	}
	entries := entriesOnSlot(slot.First, slot.Last, slot.Index, md.EnsembleSize, md.WriteQuorum)
	w.s.progress.addTotal(id, int64(len(entries)))
	start := time.Now()
	copied, err := w.copyEntries(ctx, id, ensemble, slot.Index, md.WriteQuorum, entries, target, view, lost)
	if err != nil {
		return md, version, false, errorf(id, "fragment %d slot %d (%s → %s): %w", slot.Fragment, slot.Index, slot.Lost, target, err)
	}
	// Swap the replacement in. Only this slot changes; state, end and every
	// other slot are those of the record read just before the CAS.
	for {
		cur := md
		fi := slot.Fragment
		if fi >= len(cur.Fragments) || cur.Fragments[fi].FirstEntry != slot.First {
			return md, version, false, errorf(id, "fragment %d changed during the copy", fi)
		}
		if cur.Fragments[fi].Ensemble[slot.Index] != slot.Lost {
			return cur, version, false, nil // another worker rebuilt it first
		}
		if first, last, ok := fragmentRange(&cur, fi); !ok || first != slot.First || last != slot.Last {
			return md, version, false, errorf(id, "fragment %d's range changed during the copy", fi)
		}
		next := cur.Clone()
		next.Fragments[fi].Ensemble[slot.Index] = target
		if err := next.Validate(); err != nil {
			return md, version, false, errorf(id, "swap %s for %s: %w", slot.Lost, target, err)
		}
		v, err := w.s.cfg.Store.Put(ctx, ledger.Key(id), next.Marshal(), version)
		if err == nil {
			w.s.metrics.fragments.Inc()
			w.s.log.Info("autorecovery: slot rebuilt", "ledger", id, "fragment", fi, "index", slot.Index,
				"lost", slot.Lost, "replacement", target, "entries", len(entries), "bytes", copied, "took", time.Since(start))
			return next, v, true, nil
		}
		if !errors.Is(err, meta.ErrBadVersion) {
			return md, version, false, errorf(id, "swap %s for %s: %w", slot.Lost, target, err)
		}
		// A writer or a recovery changed the record: re-read and check again.
		if md, version, err = w.readMetadata(ctx, id); err != nil {
			return md, version, false, err
		}
	}
}

// copyEntries copies entries to target with EntriesInFlight of them in
// flight, each read from one of its surviving replicas (rotating, so every
// surviving replica serves a share). Each entry's checksum is verified before
// it is written. It returns the bytes copied.
func (w *worker) copyEntries(ctx context.Context, ledgerID int64, ensemble []ledger.BookieID, index, writeQuorum int,
	entries []int64, target ledger.BookieID, view clusterView, lost map[ledger.BookieID]bool) (int64, error) {
	if len(entries) == 0 {
		return 0, nil
	}
	targetAddr, ok := view.addrs[target]
	if !ok {
		return 0, fmt.Errorf("replacement %s not registered", target)
	}
	usable := func(b ledger.BookieID) bool {
		_, up := view.addrs[b]
		return up && !lost[b]
	}
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		next     atomic.Int64
		total    atomic.Int64
		errOnce  sync.Once
		firstErr error
		wg       sync.WaitGroup
	)
	fail := func(err error) {
		errOnce.Do(func() { firstErr = err; cancel() })
	}
	for range min(w.s.cfg.EntriesInFlight, len(entries)) {
		wg.Go(func() {
			for cctx.Err() == nil {
				i := next.Add(1) - 1
				if i >= int64(len(entries)) {
					return
				}
				entry := entries[i]
				e, source, err := w.readEntry(cctx, ledgerID, entry, sourcesFor(entry, ensemble, index, writeQuorum, usable), view)
				if err != nil {
					fail(err)
					return
				}
				if err := w.writeEntry(cctx, targetAddr, e); err != nil {
					fail(fmt.Errorf("write entry %d to %s: %w", entry, target, err))
					return
				}
				n := int64(len(e.Payload))
				total.Add(n)
				w.s.metrics.entries.Inc()
				w.s.metrics.bytes.Add(float64(n))
				w.s.progress.copied(ledgerID, string(source), n, time.Now())
			}
		})
	}
	wg.Wait()
	if firstErr == nil && ctx.Err() != nil {
		firstErr = ctx.Err()
	}
	return total.Load(), firstErr
}

// readEntry reads entry from the first source that has it intact.
func (w *worker) readEntry(ctx context.Context, ledgerID, entry int64, sources []ledger.BookieID, view clusterView) (client.Entry, ledger.BookieID, error) {
	var errs []error
	for _, b := range sources {
		rctx, cancel := context.WithTimeout(ctx, w.s.cfg.RequestTimeout)
		e, err := w.s.cfg.Bookies.Read(rctx, view.addrs[b], ledgerID, entry, false)
		cancel()
		if err == nil {
			// Verify on read what the writer checksummed on write: a corrupt
			// copy must not become a second corrupt copy.
			if _, _, err = ledger.DecodeEntry(ledgerID, entry, e.Payload); err == nil {
				return e, b, nil
			}
		}
		errs = append(errs, err)
		if ctx.Err() != nil {
			break
		}
	}
	return client.Entry{}, "", fmt.Errorf("entry %d from %v: %w", entry, sources, errors.Join(append([]error{ErrNoSource}, errs...)...))
}

// writeEntry adds the entry to the replacement with the recovery flag (a
// fenced ledger accepts it), carrying the LAC the source stored with it.
func (w *worker) writeEntry(ctx context.Context, addr string, e client.Entry) error {
	var err error
	for attempt := range 3 {
		actx, cancel := context.WithTimeout(ctx, w.s.cfg.RequestTimeout)
		err = w.s.cfg.Bookies.Add(actx, addr, client.AddRequest{LedgerID: e.LedgerID, EntryID: e.EntryID,
			LastAddConfirmed: e.LastAddConfirmed, Recovery: true, Payload: e.Payload})
		cancel()
		if err == nil || !errors.Is(err, client.ErrTooManyRequests) {
			return err
		}
		// Retry pacing: the replacement's write cache is full; give it a
		// moment to flush.
		pause(ctx, time.Duration(attempt+1)*100*time.Millisecond)
	}
	return err
}
