package mlog

import (
	"time"
)

// LedgerInfo describes one ledger of a topic in the topic's ledger list.
type LedgerInfo struct {
	ID int64 `json:"id"`
	// Entries and Size are known once the ledger is closed (and tracked live
	// by the owner for the open one).
	Entries int64 `json:"entries"`
	Size    int64 `json:"size"`
	// Created is when the ledger was opened; Closed when it was closed
	// (zero while open). Unix milliseconds in JSON.
	Created time.Time `json:"created"`
	Closed  time.Time `json:"closed,omitzero"`
	// Data is the ledger holding this segment's entries when compaction
	// rewrote it (see Compact in maint.go); 0: the ledger ID itself. ID
	// then stays the first replaced ledger's, so that the list keeps its
	// order and positions keep comparing by ledger, then entry.
	Data int64 `json:"data,omitempty"`
}

// LastEntry is the ledger's last entry id (-1 when empty).
func (l LedgerInfo) LastEntry() int64 { return l.Entries - 1 }

// Stored is the ledger on the bookies that holds the entries.
func (l LedgerInfo) Stored() int64 {
	if l.Data != 0 {
		return l.Data
	}
	return l.ID
}

// RolloverPolicy decides when the owner closes the current ledger and opens
// a new one. Defaults follow Pulsar's managedLedger* settings.
type RolloverPolicy struct {
	MaxEntries int64         // managedLedgerMaxEntriesPerLedger, default 50,000
	MaxSize    int64         // managedLedgerMaxSizePerLedgerMbytes, default 2 GiB
	MaxAge     time.Duration // managedLedgerMaxLedgerRolloverTimeMinutes, default 240 min
	MinAge     time.Duration // managedLedgerMinLedgerRolloverTimeMinutes, default 10 min
}

// DefaultRolloverPolicy returns the defaults.
func DefaultRolloverPolicy() RolloverPolicy {
	return RolloverPolicy{MaxEntries: 50_000, MaxSize: 2 << 30, MaxAge: 240 * time.Minute, MinAge: 10 * time.Minute}
}

// ShouldRoll reports whether the current ledger should be rolled over now:
// it is full (entries or size) or too old, and in every case at least MinAge
// old — a full ledger younger than MinAge keeps growing, which bounds the
// metadata write rate of a hot topic. An empty ledger never rolls.
func (p RolloverPolicy) ShouldRoll(current LedgerInfo, now time.Time) bool {
	if current.Entries == 0 {
		return false
	}
	age := now.Sub(current.Created)
	if age < p.MinAge {
		return false
	}
	full := p.MaxEntries > 0 && current.Entries >= p.MaxEntries || p.MaxSize > 0 && current.Size >= p.MaxSize
	old := p.MaxAge > 0 && age >= p.MaxAge
	return full || old
}

// RetentionPolicy keeps acknowledged data for replay. Negative values mean
// unlimited; zero means delete as soon as every cursor has acknowledged it.
type RetentionPolicy struct {
	Time time.Duration
	Size int64
}

// TrimCandidates returns the ids of ledgers that may be deleted now: closed
// ledgers (never the last one in the list, which is the current ledger) that
// lie wholly at or below slowest — the smallest mark-delete position over
// all cursors — and that retention no longer keeps. Ledgers are considered
// oldest first and trimming stops at the first one that must stay, so the
// list always remains a contiguous suffix.
//
// Retention (as in Pulsar): an acknowledged ledger is kept while it is
// younger than Time and while the acknowledged ledgers kept total at most
// Size; it is deleted when either limit is exceeded.
//
// earlyTrim is the `early-trim` mutant: a ledger counts as consumed one entry
// too early. Never set outside the simulator.
func TrimCandidates(ledgers []LedgerInfo, slowest Position, hasCursors bool, retention RetentionPolicy, now time.Time, earlyTrim bool) []int64 {
	if len(ledgers) < 2 {
		return nil
	}
	closed := ledgers[:len(ledgers)-1]
	// Consumed: the prefix of closed ledgers wholly below the slowest cursor.
	consumed := 0
	for _, l := range closed {
		last := l.LastEntry()
		if earlyTrim {
			last--
		}
		if hasCursors && !(l.ID < slowest.LedgerID || l.ID == slowest.LedgerID && last <= slowest.EntryID) {
			break
		}
		consumed++
	}
	// Size of the acknowledged ledgers still kept, if we deleted none.
	var keptSize int64
	for _, l := range closed[:consumed] {
		keptSize += l.Size
	}
	var out []int64
	for _, l := range closed[:consumed] {
		expired := retention.Time >= 0 && now.Sub(closedAt(l)) >= retention.Time
		overSize := retention.Size >= 0 && keptSize > retention.Size
		if !expired && !overSize {
			break
		}
		out = append(out, l.ID)
		keptSize -= l.Size
	}
	return out
}

func closedAt(l LedgerInfo) time.Time {
	if l.Closed.IsZero() {
		return l.Created
	}
	return l.Closed
}

// BacklogQuotaPolicy is what happens when a topic's backlog exceeds its quota.
type BacklogQuotaPolicy string

const (
	// ProducerRequestHold: writes wait for space (or time out).
	ProducerRequestHold BacklogQuotaPolicy = "producer_request_hold"
	// ProducerException: writes fail at once with ErrBacklogQuotaExceeded.
	ProducerException BacklogQuotaPolicy = "producer_exception"
	// ConsumerBacklogEviction: the oldest backlog is acknowledged away.
	ConsumerBacklogEviction BacklogQuotaPolicy = "consumer_backlog_eviction"
)

// BacklogQuota limits unacknowledged data by size and by message age.
// Zero or negative limits are off.
type BacklogQuota struct {
	LimitSize int64
	LimitAge  time.Duration
	Policy    BacklogQuotaPolicy
}

// Exceeded reports whether a backlog of backlogSize bytes whose oldest
// unacknowledged message was published at oldest breaks the quota.
func (q BacklogQuota) Exceeded(backlogSize int64, oldest time.Time, now time.Time) bool {
	if q.LimitSize > 0 && backlogSize > q.LimitSize {
		return true
	}
	return q.LimitAge > 0 && !oldest.IsZero() && now.Sub(oldest) > q.LimitAge
}
