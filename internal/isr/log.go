package isr

// Log is a replica's copy of one partition: record batches in offset order,
// the leader-epoch cache (which epoch starts at which offset, Kafka's
// leader-epoch-checkpoint) and the HW checkpoint. The Replica calls it
// synchronously, as Kafka's partition calls its log: Append writes to the
// page cache, Flush makes everything appended so far durable. What survives a
// crash is the flushed prefix (the on-disk implementation decides how; MemLog
// models it).
//
// Offsets are dense: the first record is 0 and EndOffset() is the log end
// offset (LEO), the offset the next record gets.
type Log interface {
	// EndOffset is the LEO.
	EndOffset() int64
	// Append adds a batch whose BaseOffset is EndOffset(). A batch of an
	// epoch newer than LatestEpoch starts that epoch in the epoch cache; one
	// of an older epoch is stored but starts nothing (Kafka's cache ignores
	// it). An Append that could not write (out of space) returns an error
	// wrapping ErrLogWrite and leaves the log as it was: a leader answers
	// the produce KAFKA_STORAGE_ERROR, a follower fetches the batch again.
	Append(b Batch) error
	// Read returns up to maxBatches batches holding the records from offset
	// from on, the first one cut to start exactly at from, or, a raw batch
	// (Batch.Raw), whole. Nothing when from is at or past the end.
	Read(from int64, maxBatches int) []Batch
	// TruncateTo removes every record at offset ≥ offset; afterwards
	// EndOffset() is min(offset, the old LEO), and every epoch cache entry
	// that starts at or after that new LEO is gone too (even when no record
	// was: an entry a leader assigned at its LEO and never appended under,
	// as Kafka's UnifiedLog.truncateTo drops it). A raw batch holding offset
	// goes whole, as in Kafka, so EndOffset() may end below offset.
	TruncateTo(offset int64)
	// Flush makes every record appended so far durable.
	Flush()
	// FlushedOffset is the offset below which records survive a crash.
	FlushedOffset() int64
	// LatestEpoch is the epoch of the cache's last entry, NoEpoch when empty.
	LatestEpoch() int32
	// AssignEpochStart records that epoch starts at offset (a new leader
	// does this at its LEO before appending anything, so followers of its
	// epoch can be told where the previous one ended). Ignored unless
	// epoch is newer than LatestEpoch.
	AssignEpochStart(epoch int32, offset int64)
	// EndOffsetForEpoch answers OffsetsForLeaderEpoch: the largest epoch
	// ≤ epoch in the cache and where it ends (the next entry's start, or the
	// LEO for the last). An epoch older than every entry gets itself and the
	// first entry's start (as Kafka's LeaderEpochFileCache.endOffsetFor);
	// NoEpoch, or an empty cache, gets {NoEpoch, -1}.
	EndOffsetForEpoch(epoch int32) EpochEndOffset
	// HighWatermarkCheckpoint is the HW last checkpointed (durable).
	HighWatermarkCheckpoint() int64
	// CheckpointHighWatermark durably records hw (Kafka's
	// replication-offset-checkpoint, written every few seconds).
	CheckpointHighWatermark(hw int64)
}
