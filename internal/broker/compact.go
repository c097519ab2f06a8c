package broker

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"quire/internal/mlog"
	"quire/internal/mlog/mlogclient"
	"quire/internal/partition"
)

// The compactor: Kafka's log cleaner for ledger-mode partitions whose
// cleanup.policy has compact. It runs on the partition's owner, one
// partition at a time, every CompactInterval.
//
// A round looks at the closed ledgers at least min.compaction.lag.ms old
// (the open ledger and anything younger — the head — are never touched).
// Ledgers compacted before ("clean": their LedgerInfo has Data) form a
// prefix of the list; the rest are dirty. It compacts when the dirty
// ledgers hold min.cleanable.dirty.ratio of those bytes, or when the
// oldest dirty ledger was created max.compaction.lag.ms ago:
//
//  1. the key map: every keyed record of the dirty ledgers, oldest first,
//     as key hash → offset of its latest record. Memory is bounded by
//     CompactionMaxKeys: dirty ledgers are taken whole, oldest first, while
//     the map has fewer keys than that (so it may exceed it by one ledger's
//     keys, which the rollover bounds); the ledgers left go to a later
//     round. About 60 bytes a key: 2^19 keys, the default, take ~32 MiB;
//  2. a compacted ledger is created and registered (mlogclient's
//     BeginCompaction: named in the topic record before its first entry);
//  3. every batch of the run (clean and dirty ledgers), in order, goes to
//     it without the records the map says are superseded, and without
//     tombstones whose ledger closed delete.retention.ms ago. Batches keep
//     their offsets (partition.RewriteBatch; a rewritten batch is stored
//     uncompressed, and one that would then exceed an entry stays as it
//     was produced, superseded records included); a batch left with no
//     record is dropped, except the run's first and last, kept empty: the
//     segment still starts at the offset it started at (the log-start
//     offset and the partition's segment search never see compaction), and
//     the log still ends where it ended when the head is empty (a
//     partition loaded then takes its next offset from the last batch);
//  4. the swap: one CAS replaces the run by the compacted ledger; the
//     replaced ledgers are deleted after it.
//
// A failover at any step loses nothing: until the swap's CAS the list
// names the old ledgers, after it the compacted one, and whichever ledgers
// are on no list are in the record's garbage, which the new owner deletes.

// DefaultCompactionMaxKeys is Config.CompactionMaxKeys's default.
const DefaultCompactionMaxKeys = 1 << 19

// compactionState is one partition's compaction counters, for metrics.
type compactionState struct {
	mu         sync.Mutex
	runs       int64
	failures   int64
	dirtyRatio float64
	lastErr    string
}

func (s *compactionState) snapshot() (runs, failures int64, dirty float64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.runs, s.failures, s.dirtyRatio
}

// compactLoop runs compaction rounds until the broker stops.
func (b *Broker) compactLoop() {
	if b.cfg.CompactInterval < 0 {
		return
	}
	t := time.NewTicker(b.cfg.CompactInterval)
	defer t.Stop()
	for {
		select {
		case <-b.ctx.Done():
			return
		case <-t.C:
		}
		b.compactRound(b.ctx, false)
	}
}

// compactRound refreshes each loaded partition's cleanup.policy from the
// catalogue and compacts the compacted ones that need it (all of them with
// something dirty when force is set).
func (b *Broker) compactRound(ctx context.Context, force bool) {
	b.mu.Lock()
	var ls []*loaded
	for _, l := range b.parts {
		ls = append(ls, l)
	}
	b.mu.Unlock()
	configs := map[string]map[string]string{}
	for _, l := range ls {
		if l.partition() == nil || l.p.Failed() != nil || ctx.Err() != nil {
			continue
		}
		cfgs, ok := configs[l.topic]
		if !ok {
			rctx, cancel := context.WithTimeout(ctx, b.cfg.Timeouts.Stats)
			rec, err := b.admin.GetTopic(rctx, b.cfg.Namespace, l.topic)
			cancel()
			if err != nil {
				continue
			}
			cfgs = rec.Configs
			configs[l.topic] = cfgs
		}
		l.compacted.Store(isCompacted(cfgs))
		if !l.compacted.Load() {
			continue
		}
		if err := b.compactPartition(ctx, l, cfgs, force); err != nil {
			b.log.Warn("compaction failed", "partition", l.name, "err", err)
		}
	}
}

// compactPlan is what one compaction covers: the run of ledgers it
// replaces, the dirty ones among them from dirtyFrom on.
type compactPlan struct {
	run       []mlog.LedgerInfo
	dirtyFrom int
}

// planCompaction picks the run of closed ledgers old enough to compact and
// reports the dirty ratio; ok when the policy says to compact now.
func planCompaction(ls []mlog.LedgerInfo, cfgs map[string]string, now time.Time, force bool) (plan compactPlan, dirtyRatio float64, ok bool) {
	minLag := configMillis(cfgs, "min.compaction.lag.ms")
	maxLag := configMillis(cfgs, "max.compaction.lag.ms")
	if len(ls) == 0 {
		return plan, 0, false
	}
	var clean, dirty int64
	plan.dirtyFrom = -1
	oldestDirty := time.Time{}
	for _, li := range ls[:len(ls)-1] { // the last ledger is the head
		if li.Closed.IsZero() || now.Sub(li.Closed) < minLag {
			break
		}
		if li.Data != 0 && plan.dirtyFrom < 0 {
			clean += li.Size
		} else {
			if plan.dirtyFrom < 0 {
				plan.dirtyFrom, oldestDirty = len(plan.run), li.Created
			}
			dirty += li.Size
		}
		plan.run = append(plan.run, li)
	}
	if plan.dirtyFrom < 0 {
		return plan, 0, false
	}
	dirtyRatio = float64(dirty) / float64(max(clean+dirty, 1))
	due := maxLag > 0 && now.Sub(oldestDirty) >= maxLag
	return plan, dirtyRatio, force || due || dirtyRatio >= configFloat(cfgs, "min.cleanable.dirty.ratio")
}

// compactPartition runs one compaction of l if its policy says so.
func (b *Broker) compactPartition(ctx context.Context, l *loaded, cfgs map[string]string, force bool) error {
	now := time.Now()
	ls, err := l.ml.Ledgers(ctx)
	if err != nil {
		return err
	}
	plan, dirtyRatio, due := planCompaction(ls, cfgs, now, force)
	l.compaction.mu.Lock()
	l.compaction.dirtyRatio = dirtyRatio
	l.compaction.mu.Unlock()
	if !due {
		return nil
	}
	err = b.compact(ctx, l.name, l.ml, plan, cfgs, now)
	l.compaction.mu.Lock()
	l.compaction.runs++
	if err != nil {
		l.compaction.failures++
		l.compaction.lastErr = err.Error()
	} else {
		l.compaction.dirtyRatio = 0
	}
	l.compaction.mu.Unlock()
	return err
}

// compact carries a plan out: key map, compacted ledger, swap.
func (b *Broker) compact(ctx context.Context, name string, ml *mlogclient.ManagedLedger, plan compactPlan, cfgs map[string]string, now time.Time) error {
	keys := map[partition.KeyHash]int64{}
	run := plan.run
	for i := plan.dirtyFrom; i < len(run); i++ {
		if i > plan.dirtyFrom && len(keys) >= b.cfg.CompactionMaxKeys {
			run = run[:i] // the rest waits for a later round
			break
		}
		err := readLedger(ctx, ml, run[i], func(batch partition.Batch, recs []partition.RecordInfo, _ []byte) error {
			for _, r := range recs {
				if r.HasKey {
					keys[r.Key] = batch.BaseOffset + int64(r.OffsetDelta)
				}
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("build the key map: %w", err)
		}
	}
	deleteRetention := configMillis(cfgs, "delete.retention.ms")
	c, err := ml.BeginCompaction(ctx)
	if err != nil {
		return err
	}
	var total, seen int64 // entries of the run, and read so far
	for _, li := range run {
		total += li.Entries
	}
	first := true
	for _, li := range run {
		dropTombstones := now.Sub(li.Closed) >= deleteRetention
		err := readLedger(ctx, ml, li, func(batch partition.Batch, recs []partition.RecordInfo, raw []byte) error {
			keep := make([]bool, len(recs))
			kept := recs == nil // not a record batch: kept as it is
			for i, r := range recs {
				latest := true
				if r.HasKey {
					off, ok := keys[r.Key]
					latest = !ok || off <= batch.BaseOffset+int64(r.OffsetDelta)
				}
				keep[i] = latest && !(r.Tombstone && dropTombstones)
				kept = kept || keep[i]
			}
			seen++
			if !kept && !first && seen < total {
				return nil
			}
			first = false
			out := raw
			if recs != nil {
				out = partition.RewriteBatch(raw, recs, keep)
			}
			if len(out) > maxEntryBatch {
				// Stored uncompressed, the batch would not fit an entry:
				// it stays as produced, superseded records and all.
				out = raw
			}
			return c.Append(ctx, out)
		})
		if err != nil {
			_ = c.Abandon(ctx)
			return fmt.Errorf("write compacted ledger %d: %w", c.Ledger(), err)
		}
	}
	replace := make([]int64, len(run))
	for i, li := range run {
		replace[i] = li.ID
	}
	if err := c.Swap(ctx, replace); err != nil {
		return fmt.Errorf("swap ledgers %v for %d: %w", replace, c.Ledger(), err)
	}
	b.log.Info("compacted", "partition", name, "replaced", replace, "ledger", c.Ledger(), "keys", len(keys))
	return nil
}

// errLedgerShort: a ledger read ended before its last entry.
var errLedgerShort = errors.New("ledger read ended early")

// readLedger hands every batch of the ledger li to fn, in order, with its
// records (nil for an entry that is not a record batch).
func readLedger(ctx context.Context, ml *mlogclient.ManagedLedger, li mlog.LedgerInfo, fn func(partition.Batch, []partition.RecordInfo, []byte) error) error {
	const chunk = 64
	for next := int64(0); next < li.Entries; {
		es, err := ml.Read(ctx, mlog.Position{LedgerID: li.ID, EntryID: next}, int(min(chunk, li.Entries-next)))
		if err != nil {
			return err
		}
		n := 0
		for _, e := range es {
			if e.Pos.LedgerID != li.ID || e.Pos.EntryID != next {
				break
			}
			b, err := partition.ParseBatch(e.Payload)
			var recs []partition.RecordInfo
			if err == nil {
				if recs, err = partition.BatchRecords(b, e.Payload); err != nil {
					return fmt.Errorf("ledger %d entry %d: %w", li.ID, next, err)
				}
			}
			if err := fn(b, recs, e.Payload); err != nil {
				return err
			}
			next++
			n++
		}
		if n == 0 {
			return fmt.Errorf("ledger %d at entry %d of %d: %w", li.ID, next, li.Entries, errLedgerShort)
		}
	}
	return nil
}
