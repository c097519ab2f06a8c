package mlog

import (
	"fmt"
	"testing"
	"time"
)

func TestShouldRoll(t *testing.T) {
	t0 := time.Unix(1_000_000, 0)
	p := DefaultRolloverPolicy()
	cases := []struct {
		name    string
		entries int64
		size    int64
		age     time.Duration
		want    bool
	}{
		{"empty never rolls", 0, 0, 1000 * time.Hour, false},
		{"full but younger than min age", 50_000, 1, 9 * time.Minute, false},
		{"full and old enough", 50_000, 1, 10 * time.Minute, true},
		{"size limit", 10, 2 << 30, 11 * time.Minute, true},
		{"not full, not old", 49_999, 1, 239 * time.Minute, false},
		{"max age", 1, 1, 240 * time.Minute, true},
	}
	for _, c := range cases {
		got := p.ShouldRoll(LedgerInfo{ID: 1, Entries: c.entries, Size: c.size, Created: t0}, t0.Add(c.age))
		if got != c.want {
			t.Errorf("%s: ShouldRoll = %v, want %v", c.name, got, c.want)
		}
	}
}

func TestTrimCandidates(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	hour := time.Hour
	ledgers := []LedgerInfo{
		{ID: 1, Entries: 10, Size: 100, Created: now.Add(-10 * hour), Closed: now.Add(-9 * hour)},
		{ID: 2, Entries: 10, Size: 100, Created: now.Add(-9 * hour), Closed: now.Add(-5 * hour)},
		{ID: 5, Entries: 10, Size: 100, Created: now.Add(-5 * hour), Closed: now.Add(-1 * hour)},
		{ID: 7, Entries: 3, Size: 30, Created: now.Add(-1 * hour)}, // current
	}
	none := RetentionPolicy{}
	cases := []struct {
		name      string
		slowest   Position
		cursors   bool
		retention RetentionPolicy
		early     bool
		want      string
	}{
		{"nothing consumed", Position{1, 8}, true, none, false, "[]"},
		{"first ledger consumed to its last entry", Position{1, 9}, true, none, false, "[1]"},
		{"mark-delete in the next ledger", Position{2, -1}, true, none, false, "[1]"},
		{"all closed consumed; current never trimmed", Position{7, 2}, true, none, false, "[1 2 5]"},
		{"early-trim mutant deletes one entry too early", Position{1, 8}, true, none, true, "[1]"},
		{"no cursors: retention alone decides", Position{}, false, none, false, "[1 2 5]"},
		{"retention by time keeps younger ledgers", Position{7, 2}, true, RetentionPolicy{Time: 4 * hour, Size: -1}, false, "[1 2]"},
		{"retention by size keeps the newest 150 bytes", Position{7, 2}, true, RetentionPolicy{Time: -1, Size: 150}, false, "[1 2]"},
		{"infinite retention", Position{7, 2}, true, RetentionPolicy{Time: -1, Size: -1}, false, "[]"},
	}
	for _, c := range cases {
		got := fmt.Sprint(TrimCandidates(ledgers, c.slowest, c.cursors, c.retention, now, c.early))
		if got != c.want {
			t.Errorf("%s: %s, want %s", c.name, got, c.want)
		}
	}
}

func TestBacklogQuotaExceeded(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	q := BacklogQuota{LimitSize: 1000, LimitAge: time.Hour, Policy: ProducerException}
	if q.Exceeded(1000, now.Add(-59*time.Minute), now) {
		t.Fatal("at the limits counts as exceeded")
	}
	if !q.Exceeded(1001, now, now) || !q.Exceeded(0, now.Add(-61*time.Minute), now) {
		t.Fatal("over size or over age not detected")
	}
	if (BacklogQuota{}).Exceeded(1<<40, now.Add(-1000*time.Hour), now) {
		t.Fatal("a zero quota limits nothing")
	}
}
