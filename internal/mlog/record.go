package mlog

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"
)

// KeyPrefix is where topic records live in the metadata store.
const KeyPrefix = "/quire/topics/"

// Key is the metadata key of a topic's record (its ledger list).
func Key(topic string) string { return KeyPrefix + topic }

// CursorKey is the metadata key of one cursor's record: a small
// CursorPointer naming the cursor ledger entry that holds its newest
// snapshot (a 60 KB snapshot of 10,000 ranges goes to the cursor ledger,
// never to the metadata store). Cursor records sit beside the topic record,
// not inside it, so that persisting a busy cursor never rewrites the ledger
// list.
func CursorKey(topic, cursor string) string {
	return KeyPrefix + topic + "/cursors/" + cursor
}

// Record is the topic's record in the metadata store. Every change is a
// CAS by the owner; a failed CAS means another broker took the topic.
type Record struct {
	// Ledgers is the ledger list, oldest first; the last one is the one the
	// owner writes (open), all others are closed.
	Ledgers []LedgerInfo `json:"ledgers"`
	// Cursors names the topic's cursors; each one's pointer is at CursorKey.
	Cursors []string `json:"cursors,omitempty"`
	// Owner names the broker that wrote the record last (diagnostics).
	Owner string `json:"owner,omitempty"`
	// Garbage lists ledgers on no list that are still to be deleted: a
	// compacted ledger being written (named here before its first entry)
	// and the ledgers a compaction swap replaced. A new owner deletes them
	// all, so a compaction cut short by a crash leaves nothing behind.
	Garbage []int64 `json:"garbage,omitempty"`
}

func (r *Record) marshal() []byte {
	b, err := json.Marshal(r)
	if err != nil {
		panic(fmt.Sprintf("marshal topic record: %v", err)) // plain structs: cannot fail
	}
	return b
}

func unmarshalRecord(b []byte) (Record, error) {
	var r Record
	if err := json.Unmarshal(b, &r); err != nil {
		return Record{}, fmt.Errorf("topic record: %w", err)
	}
	for i := 1; i < len(r.Ledgers); i++ {
		if r.Ledgers[i].ID <= r.Ledgers[i-1].ID {
			return Record{}, fmt.Errorf("topic record: ledger ids not increasing at %d", i)
		}
	}
	return r, nil
}

// ledgerIndex is the topic's in-memory ledger list: the persisted LedgerInfo
// plus, for the current ledger, the entries acknowledged so far. It answers
// the cursors' Ledgers questions without I/O.
type ledgerIndex struct {
	infos []LedgerInfo
}

// index returns the position in infos of the first ledger with id >= id.
func (l *ledgerIndex) index(id int64) int {
	return sort.Search(len(l.infos), func(i int) bool { return l.infos[i].ID >= id })
}

// Next implements Ledgers.
func (l *ledgerIndex) Next(p Position) (Position, bool) {
	for i := l.index(p.LedgerID); i < len(l.infos); i++ {
		info := l.infos[i]
		next := int64(0)
		if info.ID == p.LedgerID && p.EntryID >= 0 {
			next = p.EntryID + 1
		}
		if next < info.Entries {
			return Position{info.ID, next}, true
		}
	}
	return Position{}, false
}

// exists reports whether p holds an entry.
func (l *ledgerIndex) exists(p Position) bool {
	i := l.index(p.LedgerID)
	return i < len(l.infos) && l.infos[i].ID == p.LedgerID && p.EntryID >= 0 && p.EntryID < l.infos[i].Entries
}

// start is the mark-delete position of a cursor that has acknowledged
// nothing: just before the first ledger.
func (l *ledgerIndex) start() Position {
	if len(l.infos) == 0 {
		return BeforeLedger(0)
	}
	return BeforeLedger(l.infos[0].ID)
}

// last returns the position of the last entry in the topic (BeforeLedger of
// the first ledger when empty).
func (l *ledgerIndex) last() Position {
	for i := len(l.infos) - 1; i >= 0; i-- {
		if l.infos[i].Entries > 0 {
			return Position{l.infos[i].ID, l.infos[i].Entries - 1}
		}
	}
	return l.start()
}

// backlog estimates the entries and bytes after md (entries include the
// individually acknowledged ones; the caller subtracts them). Bytes within a
// ledger are estimated from the ledger's average entry size.
func (l *ledgerIndex) backlog(md Position) (entries, bytes int64) {
	for _, info := range l.infos[l.index(md.LedgerID):] {
		n := info.Entries
		if info.ID == md.LedgerID {
			n = max(0, info.Entries-(md.EntryID+1))
		}
		entries += n
		if info.Entries > 0 {
			bytes += info.Size * n / info.Entries
		}
	}
	return entries, bytes
}

// countRange counts the entries in r.
func (l *ledgerIndex) countRange(r Range) int64 {
	var n int64
	for _, info := range l.infos[l.index(r.Lo.LedgerID):] {
		if info.ID > r.Hi.LedgerID {
			break
		}
		first, last := int64(0), info.Entries-1
		if info.ID == r.Lo.LedgerID {
			first = max(first, r.Lo.EntryID)
		}
		if info.ID == r.Hi.LedgerID {
			last = min(last, r.Hi.EntryID)
		}
		n += max(0, last-first+1)
	}
	return n
}

// totalSize is the storage the topic's ledgers hold.
func (l *ledgerIndex) totalSize() int64 {
	var s int64
	for _, info := range l.infos {
		s += info.Size
	}
	return s
}

// timeIndex bounds the publish times of a ledger's entries. Each sample
// (entry, at) says "every entry <= entry was published no later than at".
// One sample is kept per TimeIndexInterval and at most maxTimeSamples per
// ledger (then the last one slides forward), so the index is small and the
// answers are upper bounds: TTL and the age quota never act on an entry that
// is younger than they think, only — by at most one interval — later.
//
// The index lives in memory only. After a takeover, ledgers closed by the
// previous owner have only their Closed time, which bounds every entry in
// them; TTL then works a whole ledger at a time, which is still safe.
type timeIndex struct {
	samples []timeSample
}

type timeSample struct {
	entry int64
	at    time.Time
}

const maxTimeSamples = 1024

func (x *timeIndex) record(entry int64, at time.Time, interval time.Duration) {
	n := len(x.samples)
	if n == 0 || (at.Sub(x.samples[n-1].at) >= interval && n < maxTimeSamples) {
		x.samples = append(x.samples, timeSample{entry, at})
		return
	}
	x.samples[n-1] = timeSample{entry, at}
}

// publishedBy returns an upper bound on the publish time of entry; false
// when the index does not cover it.
func (x *timeIndex) publishedBy(entry int64) (time.Time, bool) {
	i := sort.Search(len(x.samples), func(i int) bool { return x.samples[i].entry >= entry })
	if i == len(x.samples) {
		return time.Time{}, false
	}
	return x.samples[i].at, true
}

// lastPublishedBefore returns the last entry published no later than t
// according to the samples; false when none is known to be.
func (x *timeIndex) lastPublishedBefore(t time.Time) (int64, bool) {
	i := sort.Search(len(x.samples), func(i int) bool { return x.samples[i].at.After(t) })
	if i == 0 {
		return 0, false
	}
	return x.samples[i-1].entry, true
}

func validCursorName(name string) error {
	if name == "" || strings.Contains(name, "/") || len(name) > MaxCursorNameLen {
		return fmt.Errorf("cursor name %q: must be 1..%d bytes without '/'", name, MaxCursorNameLen)
	}
	return nil
}
