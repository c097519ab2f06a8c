package chaos

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sync"
	"time"
)

// Kind says what an Event in the history records.
type Kind string

const (
	// KindInvoke: a producer handed a record to its client.
	KindInvoke Kind = "invoke"
	// KindOK: the record was acknowledged at Offset.
	KindOK Kind = "ok"
	// KindFail: the record was definitely not written (a non-retriable
	// error the broker answered).
	KindFail Kind = "fail"
	// KindInfo: the outcome is unknown (a timeout, a client closed with the
	// record in flight): it may or may not be in the log.
	KindInfo Kind = "info"
	// KindReadStart and KindReadEnd bracket the final read of one
	// partition; KindRead is one record it returned.
	KindReadStart Kind = "read-start"
	KindRead      Kind = "read"
	KindReadEnd   Kind = "read-end"
	// KindCommitInvoke: the group member asked to commit Offset on
	// Partition (commit number Seq); KindCommitOK: acknowledged;
	// KindCommitInfo: refused or unanswered (it may still have been
	// applied, or not).
	KindCommitInvoke Kind = "commit"
	KindCommitOK     Kind = "commit-ok"
	KindCommitInfo   Kind = "commit-info"
	// KindCommitted: an OffsetFetch, started at Time, answered Offset as
	// the group's committed offset of Partition.
	KindCommitted Kind = "committed"
	// KindConsumed: the group member polled the record Value at Offset of
	// Partition during the run.
	KindConsumed Kind = "consumed"
	// KindFaultStart and KindFaultEnd bracket a fault the nemesis injected.
	KindFaultStart Kind = "fault-start"
	KindFaultEnd   Kind = "fault-end"
)

// Event is one line of the history file (JSON lines). Produce operations
// are an invoke followed by exactly one of ok, fail or info for the same
// Value; every Value is unique in a run (producer id + sequence), so a
// value read twice is a duplicate and never two different records.
type Event struct {
	Time      time.Time `json:"time"`
	Kind      Kind      `json:"kind"`
	Producer  int       `json:"producer,omitempty"`
	Seq       int64     `json:"seq,omitempty"`
	Value     string    `json:"value,omitempty"`
	Partition int32     `json:"partition"`
	Offset    int64     `json:"offset,omitempty"`
	Err       string    `json:"err,omitempty"`
	// Fault describes a fault (KindFaultStart, KindFaultEnd).
	Fault string `json:"fault,omitempty"`
}

// History appends events to a JSON-lines file and keeps them in memory for
// the checker. It is safe for concurrent use.
type History struct {
	mu     sync.Mutex
	file   *os.File
	w      *bufio.Writer
	events []Event
	err    error // the first write error; later writes are dropped
}

// CreateHistory opens path for writing (truncating it).
func CreateHistory(path string) (*History, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("history: %w", err)
	}
	return &History{file: f, w: bufio.NewWriter(f)}, nil
}

// Add records e, stamping its time if unset.
func (h *History) Add(e Event) {
	if e.Time.IsZero() {
		e.Time = time.Now()
	}
	line, err := json.Marshal(e)
	h.mu.Lock()
	defer h.mu.Unlock()
	h.events = append(h.events, e)
	if h.err != nil {
		return
	}
	if err == nil {
		line = append(line, '\n')
		_, err = h.w.Write(line)
	}
	h.err = err
}

// Events returns a copy of what was recorded so far.
func (h *History) Events() []Event {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]Event(nil), h.events...)
}

// Close flushes the file and reports the first write error.
func (h *History) Close() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.w.Flush(); err != nil && h.err == nil {
		h.err = err
	}
	if err := h.file.Close(); err != nil && h.err == nil {
		h.err = err
	}
	if h.err != nil {
		return fmt.Errorf("history %s: %w", h.file.Name(), h.err)
	}
	return nil
}

// ReadHistory parses a history file written by History.
func ReadHistory(r io.Reader) ([]Event, error) {
	var events []Event
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for line := 1; sc.Scan(); line++ {
		var e Event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			return nil, fmt.Errorf("history line %d: %w", line, err)
		}
		events = append(events, e)
	}
	return events, sc.Err()
}
