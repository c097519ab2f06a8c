// Package disklog is the on-disk log of one partition replica in ISR mode:
// the production implementation of isr.Log, modelled on Kafka's log layer
// (UnifiedLog, LocalLog, LogSegment).
//
// It owns one directory per replica:
//
//	00000000000000000000.log        segments named by base offset: stored batches
//	00000000000000000000.index      sparse offset index (relative offset → position)
//	00000000000000000000.timeindex  time index (max timestamp so far → relative offset)
//	leader-epoch-checkpoint         Kafka's text format: version, count, "epoch start" lines
//	high-watermark-checkpoint       "0", then the HW
//	log-start-offset-checkpoint     "0", then the log start offset
//	recovery-point-checkpoint       "0", then the offset below which segments need no recovery
//
// Files: format.go (the stored batch, ISRLog's record encoding), segment.go
// (a segment, its indexes, the scan), log.go (Log: append, read, roll,
// flush, epochs, checkpoints), truncate.go, retention.go (log start,
// retention, lookups by time), recover.go (Open), checkpoint.go (atomic
// files, the epoch cache), isrlog.go (the isr.Log adapter).
//
// Two layers: Log stores opaque payloads per batch (the production shell
// stores Kafka v2 record batches as produced, base offset and epoch stamped
// by the caller), and ISRLog adapts it to isr.Log, encoding isr.Batch records
// into the payload.
//
// What it must never do: fsync segments on its own initiative on the append
// path (the replica core decides when to Flush: flush.messages, flush.ms; an
// append that starts a new epoch does write the epoch checkpoint), read the
// clock in logic tests need to control (timestamps and "now" come in as
// arguments; ISRLog takes its clock from its caller), keep payloads in memory
// (reads go to the files; only the sparse indexes of segments not yet
// flushed are held), or
// serve bytes past what recovery validated. All file I/O goes through
// pebble's vfs.FS, so the crash tests run on vfs.NewCrashableMem.
//
// Durability, in order of what a crash can leave behind:
//   - Flush syncs every segment written since the last Flush, the index files
//     of rolled segments and the directory; then FlushedOffset is the LEO.
//   - Checkpoints (epochs, HW, log start, recovery point) are written
//     atomically: temporary file, fsync, rename, fsync of the directory.
//     The epoch checkpoint is written whenever the cache changes, before the
//     batch that starts an epoch is written.
//   - TruncateTo, TruncateFullyAndStartAt, DeleteRecordsBefore and retention
//     are durable when they return.
//   - Open recovers every segment from the recovery point on: batches are
//     checked by CRC-32C and offset sequence; the first bad batch and all
//     after it are cut, later segments deleted, indexes rebuilt, the epoch
//     cache truncated to the recovered LEO, and what survived is synced.
//
// Errors: a failed write of an append leaves the log as it was (the next
// append overwrites the torn bytes). Any other failed write or sync (a flush,
// a checkpoint, a truncation) fails the log, as Kafka takes a log directory
// offline: every later mutation returns ErrFailed until the log is closed and
// opened again, which recovers it from what is on disk. After a failed fsync
// the page cache can no longer be trusted, so retrying in place would be
// unsafe. A failed append whose bytes all reached the page cache can
// reappear after a restart or crash before the next Flush, roll or
// truncation cuts them (like a produce that timed out but was written).
//
// Deviations from Kafka, on purpose:
//   - Log.TruncateTo cuts at the start of the batch holding the offset (as
//     Kafka), but ISRLog.TruncateTo cuts exactly, as isr.Log requires: the
//     head of the cut batch is stored again as a batch with the same base,
//     the segment rewritten with it (copy, sync, rename), so a crash leaves
//     the old or the new segment and never loses flushed records.
//   - Truncations are durable when they return (Kafka leaves it to the
//     next flush), so a crash never brings back records a truncation
//     removed.
//   - The epoch cache keeps an epoch that ended before its leader appended
//     anything (same start offset as the next epoch), as isr.MemLog does;
//     Kafka's assign drops it. truncateFromStart keeps it too.
//   - A segment whose batches carry no timestamp (-1) never expires by
//     retention.ms (Kafka falls back to the file's modification time).
//   - One file format of our own (a 36-byte header before the caller's
//     payload), not Kafka's: the payload is opaque here.
package disklog
