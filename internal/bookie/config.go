package bookie

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/prometheus/client_golang/prometheus"
)

// Config configures an Engine. Zero numeric fields take the documented
// defaults. The two booleans documented "default true" cannot be told apart
// from an explicit false in a Go struct, so start from DefaultConfig, which
// sets them; Open logs a warning whenever JournalSyncData is false.
type Config struct {
	FS         vfs.FS // nil → vfs.Default
	JournalDir string // journal files
	LedgerDir  string // entry logs and the Pebble index (subdirectory "index"); may equal JournalDir

	JournalMaxWait             time.Duration // group-commit upper bound when JournalFlushWhenQueueEmpty is false; default 2ms
	JournalMaxBytes            int           // most bytes written per group commit; default 512 KiB
	JournalFlushWhenQueueEmpty bool          // DefaultConfig: true — write what is queued, fsync, repeat; the fsync forms the batch
	JournalSyncData            bool          // DefaultConfig: true. false = acknowledge after write(2), before fsync: acknowledged entries are lost on power loss
	JournalFileBytes           int64         // preallocated journal file size; default 64 MiB; files are recycled after checkpoints

	WriteCacheBytes  int   // total write cache, split in two halves (double-buffered); default 64 MiB
	ReadCacheBytes   int   // default 32 MiB; negative disables the read cache
	ReadAheadEntries int   // entries read ahead on a read-cache miss; default 64; negative disables
	EntryLogMaxBytes int64 // roll to a new entry log file past this size; default 256 MiB
	// EntryLogBufferedIO writes entry logs through the page cache. By default
	// they are written with direct I/O where the file system supports it:
	// they are written once and read back through the bookie's own caches,
	// so the page-cache copy, the writeback and the dropping of synced pages
	// were all CPU spent for nothing.
	EntryLogBufferedIO bool

	CheckpointInterval time.Duration // background checkpoint; default 10s; also when a write-cache half is full
	GCInterval         time.Duration // background entry-log compaction; default 15 min
	GCThreshold        float64       // compact entry logs whose live fraction is below this; default 0.5

	// GCDeadFraction starts an entry-log compaction as soon as the dead
	// bytes (records of deleted ledgers, relocated or overwritten entries)
	// exceed this fraction of all entry-log bytes, without waiting for
	// GCInterval; default 0.25. Entry logs with nothing live are removed
	// within ReclaimDelay of the deletion that killed them, whatever this is.
	GCDeadFraction float64
	// ReclaimDelay bounds how long after a DeleteLedger the entry logs it
	// left without a live entry are removed (deletions within it are
	// swept together); default 2s.
	ReclaimDelay time.Duration

	// Disk space (see disk.go). Usage is the fraction of the file system
	// holding LedgerDir (and JournalDir) that is used, predicted: the last
	// statfs plus what the engine has accepted but not yet written (the
	// write cache with its index overhead, the next journal file when none
	// can be recycled).
	//
	// DiskUsageWarn, default 0.85: above it the engine logs once per
	// crossing, sets bookie_disk_usage_warn and compacts entry logs at
	// once. DiskUsageHigh, default 0.95: above it (or with less than
	// DiskReserveBytes predicted free) the bookie turns read-only. It
	// turns writable again below DiskUsageLow, default 0.90, with at
	// least 1.5×DiskReserveBytes predicted free: the gap keeps a bookie
	// whose GC frees a little from flapping. On a 400 MB file system these
	// are 340/380/360 MB; the reserve, not the fraction, decides on small
	// disks.
	DiskUsageWarn float64
	DiskUsageHigh float64
	DiskUsageLow  float64
	// DiskReserveBytes is free space never planned for: Pebble's flushes
	// and compactions, directory blocks, other writers on a shared file
	// system (standalone runs three bookies on one). Default 16 MiB. A
	// checkpoint whose estimated growth does not fit in the free space
	// minus half of it is not started; entry-log compaction, which gives
	// space back, may use all but a sixteenth of it.
	DiskReserveBytes int64
	// IndexBallastBytes is a file (LedgerDir/index.ballast) removed when
	// the index (Pebble) hits ENOSPC, so that its retried write succeeds:
	// Pebble cannot survive a failed WAL write. Default 16 MiB; negative
	// disables. It counts as used space, and is recreated once there is
	// room again.
	IndexBallastBytes int64
	// DiskCheckInterval: statfs at least this often; default 10s. Adds
	// also trigger one every DiskCheckBytes (default 8 MiB) they bring,
	// and every checkpoint and GC pass ends with one.
	DiskCheckInterval time.Duration
	DiskCheckBytes    int64
	// StatFS reports the space of the file system holding dir (test seam);
	// nil → DiskUsage if set, else FS.GetDiskUsage(dir). An error (an
	// in-memory FS) means unknown: thresholds are not applied.
	StatFS func(dir string) (DiskSpace, error)
	// DiskUsage is the older seam: the used and total bytes of LedgerDir's
	// file system, used for every directory. Prefer StatFS.
	DiskUsage        func() (used, total uint64, err error)
	OnReadOnlyChange func(readOnly bool) // called without engine locks held, in order

	// ReadGate gives adds priority over range reads for the CPUs (see
	// ReadGate); engines sharing CPUs may share one. nil → a gate of the
	// engine's own with the defaults.
	ReadGate *ReadGate

	Registerer prometheus.Registerer // may be nil
	Logger     *slog.Logger          // nil → slog.Default()

	// hooks break the engine on purpose so tests can prove the crash checker
	// catches a broken variant. Never set outside tests.
	hooks testHooks
}

// testHooks are deliberate bugs ("mutants") for the crash checker.
type testHooks struct {
	// skipJournalSync acknowledges adds after write(2) and never fsyncs the
	// journal.
	skipJournalSync bool
	// skipEntryLogSync lets a checkpoint record its journal position
	// without syncing the entry logs it wrote.
	skipEntryLogSync bool
	// skipLedgerMetaSync lets Fence and DeleteLedger return before their
	// index batch is synced.
	skipLedgerMetaSync bool
	// ackDespiteNoSpace acknowledges the adds of a journal batch that ran
	// out of space, as if they had been synced.
	ackDespiteNoSpace bool
	// beforeJournalSync runs on the journal goroutine after a batch is
	// written and before it is synced: crash tests block there to crash
	// with written-but-unsynced (possibly torn) records.
	beforeJournalSync func()
}

// DefaultConfig returns a Config with every default set, including the two
// booleans whose default is true.
func DefaultConfig(journalDir, ledgerDir string) Config {
	cfg := Config{
		JournalDir:                 journalDir,
		LedgerDir:                  ledgerDir,
		JournalFlushWhenQueueEmpty: true,
		JournalSyncData:            true,
	}
	return cfg.withDefaults()
}

// Limits that are not configurable.
const (
	// maxPayloadBytes bounds one entry; the wire layer has its own frame
	// limit, this one protects the journal and entry-log record format.
	maxPayloadBytes = 64 << 20
	// writeCacheWaitMax bounds how long Add waits for a full write cache to
	// drain before answering ErrTooManyRequests.
	writeCacheWaitMax = 5 * time.Second
	// maxPooledJournalFiles bounds the journal files kept for recycling.
	maxPooledJournalFiles = 4
	// entryLogPaceMax bounds how long a step of entry-log writeback waits
	// for a journal fsync (an idle journal has none): at least
	// entryLogWriteChunk per entryLogPaceMax, 256 MiB/s.
	entryLogPaceMax = time.Millisecond
)

func (c Config) withDefaults() Config {
	if c.FS == nil {
		c.FS = vfs.Default
	}
	if c.JournalMaxWait <= 0 {
		c.JournalMaxWait = 2 * time.Millisecond
	}
	if c.JournalMaxBytes <= 0 {
		c.JournalMaxBytes = 512 << 10
	}
	if c.JournalFileBytes <= 0 {
		c.JournalFileBytes = 64 << 20
	}
	if c.WriteCacheBytes <= 0 {
		c.WriteCacheBytes = 64 << 20
	}
	if c.ReadCacheBytes == 0 {
		c.ReadCacheBytes = 32 << 20
	}
	if c.ReadAheadEntries == 0 {
		c.ReadAheadEntries = 64
	}
	if c.EntryLogMaxBytes <= 0 {
		c.EntryLogMaxBytes = 256 << 20
	}
	if c.CheckpointInterval <= 0 {
		c.CheckpointInterval = 10 * time.Second
	}
	if c.GCInterval <= 0 {
		c.GCInterval = 15 * time.Minute
	}
	if c.GCThreshold <= 0 {
		c.GCThreshold = 0.5
	}
	if c.GCDeadFraction <= 0 {
		c.GCDeadFraction = 0.25
	}
	if c.ReclaimDelay <= 0 {
		c.ReclaimDelay = 2 * time.Second
	}
	if c.DiskUsageWarn <= 0 {
		c.DiskUsageWarn = 0.85
	}
	if c.DiskReserveBytes <= 0 {
		c.DiskReserveBytes = 16 << 20
	}
	if c.IndexBallastBytes == 0 {
		c.IndexBallastBytes = 16 << 20
	}
	if c.DiskCheckBytes <= 0 {
		c.DiskCheckBytes = 8 << 20
	}
	if c.DiskUsageHigh <= 0 {
		c.DiskUsageHigh = 0.95
	}
	if c.DiskUsageLow <= 0 {
		c.DiskUsageLow = 0.90
	}
	if c.DiskCheckInterval <= 0 {
		c.DiskCheckInterval = 10 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

func (c Config) validate() error {
	switch {
	case c.JournalDir == "" || c.LedgerDir == "":
		return fmt.Errorf("bookie: JournalDir and LedgerDir are required")
	case c.DiskUsageLow > c.DiskUsageHigh || c.DiskUsageHigh > 1:
		return fmt.Errorf("bookie: want DiskUsageLow %.2f ≤ DiskUsageHigh %.2f ≤ 1", c.DiskUsageLow, c.DiskUsageHigh)
	case c.DiskUsageLow > c.DiskUsageHigh:
		return fmt.Errorf("bookie: DiskUsageLow %.2f above DiskUsageHigh %.2f", c.DiskUsageLow, c.DiskUsageHigh)
	case c.GCThreshold > 1:
		return fmt.Errorf("bookie: GCThreshold %.2f above 1", c.GCThreshold)
	}
	return nil
}
