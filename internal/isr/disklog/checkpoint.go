package disklog

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/cockroachdb/pebble/v2/vfs"

	"quire/internal/isr"
)

// Checkpoint files, each replaced atomically: written to name+".tmp",
// synced, renamed over name, and the directory synced, so a crash leaves the
// old or the new file and never a torn one.
const (
	epochCheckpointFile    = "leader-epoch-checkpoint"
	hwCheckpointFile       = "high-watermark-checkpoint"
	logStartCheckpointFile = "log-start-offset-checkpoint"
	recoveryPointFile      = "recovery-point-checkpoint"
	tmpSuffix              = ".tmp"
	checkpointVersion      = 0
)

// writeFileAtomic replaces dir/name with data durably.
func (l *Log) writeFileAtomic(name string, data []byte) error {
	fs := l.cfg.FS
	path := fs.PathJoin(l.cfg.Dir, name)
	tmp := path + tmpSuffix
	f, err := fs.Create(tmp, vfs.WriteCategoryUnspecified)
	if err != nil {
		return fmt.Errorf("create %s: %w", tmp, err)
	}
	if _, err := f.Write(data); err != nil {
		_ = f.Close()
		return fmt.Errorf("write %s: %w", tmp, err)
	}
	if err := f.Sync(); err != nil {
		_ = f.Close()
		return fmt.Errorf("sync %s: %w", tmp, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("close %s: %w", tmp, err)
	}
	if err := fs.Rename(tmp, path); err != nil {
		return fmt.Errorf("rename %s: %w", tmp, err)
	}
	return l.syncDir()
}

// syncDir makes the directory's entries (created, renamed, removed files)
// durable.
func (l *Log) syncDir() error {
	if l.cfg.hooks.skipDirSync {
		return nil
	}
	d, err := l.cfg.FS.OpenDir(l.cfg.Dir)
	if err != nil {
		return fmt.Errorf("open dir %s: %w", l.cfg.Dir, err)
	}
	if err := d.Sync(); err != nil {
		_ = d.Close()
		return fmt.Errorf("sync dir %s: %w", l.cfg.Dir, err)
	}
	return d.Close()
}

// readFile returns dir/name's contents, and false when it does not exist.
func readFile(fs vfs.FS, path string) ([]byte, bool, error) {
	if _, err := fs.Stat(path); err != nil {
		return nil, false, nil
	}
	f, err := fs.Open(path)
	if err != nil {
		return nil, false, fmt.Errorf("open %s: %w", path, err)
	}
	defer f.Close()
	data, err := io.ReadAll(f)
	if err != nil {
		return nil, false, fmt.Errorf("read %s: %w", path, err)
	}
	return data, true, nil
}

// offsetCheckpoint is the text of a one-offset checkpoint: the version, then
// the offset.
func offsetCheckpoint(offset int64) []byte {
	return []byte(fmt.Sprintf("%d\n%d\n", checkpointVersion, offset))
}

func parseOffsetCheckpoint(data []byte) (int64, error) {
	lines := strings.Split(strings.TrimSuffix(string(data), "\n"), "\n")
	if len(lines) != 2 || lines[0] != strconv.Itoa(checkpointVersion) {
		return 0, fmt.Errorf("malformed checkpoint %q", data)
	}
	v, err := strconv.ParseInt(lines[1], 10, 64)
	if err != nil || v < 0 {
		return 0, fmt.Errorf("malformed checkpoint %q", data)
	}
	return v, nil
}

// EpochEntry is one entry of the leader-epoch cache: epoch starts at
// StartOffset.
type EpochEntry struct {
	Epoch       int32
	StartOffset int64
}

// epochCache is Kafka's LeaderEpochFileCache in memory; Log writes it out.
//
// Invariant: entries are strictly increasing in Epoch and non-decreasing in
// StartOffset.
type epochCache struct {
	entries []EpochEntry
}

func (c *epochCache) latest() int32 {
	if len(c.entries) == 0 {
		return isr.NoEpoch
	}
	return c.entries[len(c.entries)-1].Epoch
}

// assign records that epoch starts at offset if it is newer than every
// entry, reporting whether the cache changed.
func (c *epochCache) assign(epoch int32, offset int64) bool {
	if epoch <= c.latest() {
		return false
	}
	if n := len(c.entries); n > 0 && offset < c.entries[n-1].StartOffset {
		// A newer epoch cannot start before an older one; Kafka drops the
		// entries it would overtake.
		for n > 0 && c.entries[n-1].StartOffset > offset {
			n--
		}
		c.entries = c.entries[:n]
	}
	c.entries = append(c.entries, EpochEntry{Epoch: epoch, StartOffset: offset})
	return true
}

// truncateFromEnd drops the entries starting at or after end.
func (c *epochCache) truncateFromEnd(end int64) bool {
	n := len(c.entries)
	for n > 0 && c.entries[n-1].StartOffset >= end {
		n--
	}
	changed := n != len(c.entries)
	c.entries = c.entries[:n]
	return changed
}

// truncateFromStart drops the entries wholly below start: the last of them
// is kept, moved to start, unless an entry starts exactly there (Kafka's
// truncateFromStart, except that an empty epoch at start is kept, as MemLog
// keeps empty epochs; so that applying it twice changes nothing).
func (c *epochCache) truncateFromStart(start int64) bool {
	i := 0
	for i < len(c.entries) && c.entries[i].StartOffset < start {
		i++
	}
	if i == 0 {
		return false
	}
	if i < len(c.entries) && c.entries[i].StartOffset == start {
		c.entries = c.entries[i:]
		return true
	}
	last := c.entries[i-1]
	last.StartOffset = start
	c.entries = append([]EpochEntry{last}, c.entries[i:]...)
	return true
}

// endOffsetFor answers OffsetsForLeaderEpoch as isr.Log.EndOffsetForEpoch
// describes.
func (c *epochCache) endOffsetFor(epoch int32, leo int64) isr.EpochEndOffset {
	for i := len(c.entries) - 1; i >= 0; i-- {
		if c.entries[i].Epoch > epoch {
			continue
		}
		end := leo
		if i+1 < len(c.entries) {
			end = c.entries[i+1].StartOffset
		}
		return isr.EpochEndOffset{Epoch: c.entries[i].Epoch, EndOffset: end}
	}
	if len(c.entries) > 0 && epoch != isr.NoEpoch {
		return isr.EpochEndOffset{Epoch: epoch, EndOffset: c.entries[0].StartOffset}
	}
	return isr.EpochEndOffset{Epoch: isr.NoEpoch, EndOffset: -1}
}

// epochFor is the leader epoch of the batch holding offset: the last
// entry starting at or before it (an empty epoch that another starts at
// the same offset holds no batch; the later one does). For the log end
// offset it is the latest epoch started by then. isr.NoEpoch when no entry
// starts at or before offset.
func (c *epochCache) epochFor(offset int64) int32 {
	for i := len(c.entries) - 1; i >= 0; i-- {
		if c.entries[i].StartOffset <= offset {
			return c.entries[i].Epoch
		}
	}
	return isr.NoEpoch
}

func (c *epochCache) encode() []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "%d\n%d\n", checkpointVersion, len(c.entries))
	for _, e := range c.entries {
		fmt.Fprintf(&b, "%d %d\n", e.Epoch, e.StartOffset)
	}
	return b.Bytes()
}

func parseEpochCheckpoint(data []byte) ([]EpochEntry, error) {
	sc := bufio.NewScanner(bytes.NewReader(data))
	next := func() (string, bool) {
		if !sc.Scan() {
			return "", false
		}
		return sc.Text(), true
	}
	bad := func() ([]EpochEntry, error) { return nil, fmt.Errorf("malformed %s %q", epochCheckpointFile, data) }
	if v, ok := next(); !ok || v != strconv.Itoa(checkpointVersion) {
		return bad()
	}
	v, ok := next()
	if !ok {
		return bad()
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		return bad()
	}
	var c epochCache
	for range n {
		line, ok := next()
		if !ok {
			return bad()
		}
		var e EpochEntry
		if _, err := fmt.Sscanf(line, "%d %d", &e.Epoch, &e.StartOffset); err != nil || e.Epoch < 0 || e.StartOffset < 0 {
			return bad()
		}
		if n := len(c.entries); n > 0 && (e.Epoch <= c.entries[n-1].Epoch || e.StartOffset < c.entries[n-1].StartOffset) {
			return bad()
		}
		c.entries = append(c.entries, e)
	}
	if _, ok := next(); ok {
		return bad()
	}
	return c.entries, nil
}
