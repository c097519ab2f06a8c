// Package bookie is the storage engine of a bookie, BookKeeper's storage node:
// journal, write cache, entry logs, entry-location index (Pebble), read cache,
// fencing, ledger deletion, entry-log garbage collection and disk space
// (read-only mode). It has no networking; internal/bookie/server puts it on
// the wire.
//
// What it owns:
//
//   - The journal (JournalDir/journal-<id>.log): every add is appended and
//     acknowledged only after the group-commit fsync that covers it
//     (JournalSyncData=false acknowledges after write(2), a documented
//     trade-off that loses acknowledged entries on power loss). Journal files
//     are preallocated and recycled, and every record carries a CRC-32C and the
//     file's id so that stale bytes in a reused file never replay.
//   - Entry logs (LedgerDir/entrylog-<id>.log) and the index
//     (LedgerDir/index, Pebble): the write cache is flushed sorted by (ledger,
//     entry) by a checkpoint, which syncs the entry logs, then commits the
//     index batch together with the journal position it covers, and only then
//     releases older journal files.
//   - Reads: from the write cache, the read cache, then the entry logs. A
//     single-entry miss reads ahead into the read cache (once per run of
//     entries, however many misses arrive at once); a range read
//     (ReadRange, what catch-up readers use) locates its entries with one
//     index iterator and reads each run of adjacent records with one ReadAt,
//     past both caches, never holding a lock the add path waits on.
//   - Disk space (disk.go): read-only before the disk fills, predicted on
//     every add from the last statfs plus what is accepted but unwritten;
//     an ENOSPC that still happens turns the bookie read-only (not failed)
//     until a retried checkpoint succeeds; the index keeps a ballast it
//     spends on ENOSPC, since Pebble cannot survive a failed WAL write.
//     Entry logs left with nothing live are removed within ReclaimDelay of
//     the deletion; partly dead ones are compacted on the dead fraction,
//     on disk pressure (DiskUsageWarn) and on the GC timer.
//   - Ledger metadata: the fence bit, the deletion tombstone and the last
//     add confirmed (LAC). Fence and delete are synced to Pebble before they
//     return. The LAC comes from adds and from WriteLAC (an idle writer's
//     explicit LAC), which is kept in memory only: see WriteLAC for why
//     that is safe.
//
// What it must never do:
//
//   - acknowledge an add before the journal fsync covering it (unless the
//     operator chose JournalSyncData=false), nor an add whose journal write
//     or fsync failed (ENOSPC included);
//   - enter the permanent failed state for ENOSPC, or release journal files
//     that a checkpoint which ran out of space has not covered;
//   - record a checkpoint that covers entries not yet durable in synced entry
//     logs and a synced index batch;
//   - serve reads from the journal, or return bytes for (ledger, entry) other
//     than those that were added for it — after a crash a read returns the
//     added bytes or ErrNoSuchEntry;
//   - resurrect a deleted ledger or lose a fence bit on replay;
//   - do file I/O other than through the configured vfs.FS, so that
//     vfs.NewCrashableMem crash tests see every write and sync.
package bookie
