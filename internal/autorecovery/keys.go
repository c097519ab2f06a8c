package autorecovery

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"quire/internal/meta"
)

// Key layout under Prefix. Every key is plain JSON so that `quire admin
// autorecovery` and operators with etcdctl can read it.
const (
	Prefix = "/quire/autorecovery/"
	// AuditorKey is the elected auditor's ephemeral key (AuditorInfo).
	AuditorKey = Prefix + "auditor"
	// UnderReplicatedPrefix + ledger id: a Mark, written by the auditor,
	// deleted by the worker that repaired the ledger.
	UnderReplicatedPrefix = Prefix + "underreplicated/"
	// LockPrefix + ledger id: the ephemeral claim of the worker repairing it.
	LockPrefix = Prefix + "locks/"
	// WorkerPrefix + worker id: the ephemeral Progress a worker publishes.
	WorkerPrefix = Prefix + "workers/"
	// ZonePrefix + bookie id: the zone the bookie was last registered in.
	// Registrations vanish with their bookie; this outlives it, so that an
	// auditor elected after the loss still knows the lost bookie's zone.
	ZonePrefix = Prefix + "zones/"
)

// AuditorInfo is the value of AuditorKey.
type AuditorInfo struct {
	ID    string    `json:"id"`
	Since time.Time `json:"since"`
}

// Mark says a ledger has fragments stored on lost bookies.
type Mark struct {
	LedgerID int64 `json:"ledgerId"`
	// LostBookies are the lost bookies the ledger's fragments name, sorted.
	LostBookies []string `json:"lostBookies"`
	// LostZones holds the zones the lost bookies were registered in, when
	// known, so that replacements go to the same zone.
	LostZones map[string]string `json:"lostZones,omitempty"`
	// MarkedAt is when the auditor first marked the ledger; the open-ledger
	// grace period counts from it.
	MarkedAt time.Time `json:"markedAt"`
	// DeferredUntil, when set, is when the ledger's last fragment may be
	// repaired: the ledger was open and its writer gets the grace period to
	// replace the bookie itself. Workers leave the mark alone until then.
	DeferredUntil time.Time `json:"deferredUntil,omitzero"`
}

// LockInfo is the value of a worker's claim on a ledger.
type LockInfo struct {
	Worker string    `json:"worker"`
	Since  time.Time `json:"since"`
}

// Progress is what a worker publishes under WorkerPrefix.
type Progress struct {
	Worker string `json:"worker"`
	// Active lists the repairs in progress.
	Active []ActiveRepair `json:"active,omitempty"`
	// Cumulative counters since the worker started.
	EntriesCopied   int64 `json:"entriesCopied"`
	BytesCopied     int64 `json:"bytesCopied"`
	LedgersRepaired int64 `json:"ledgersRepaired"`
	Failures        int64 `json:"failures"`
	// Sources counts what each source bookie served to this worker.
	Sources   map[string]SourceStats `json:"sources,omitempty"`
	UpdatedAt time.Time              `json:"updatedAt"`
}

// ActiveRepair is one ledger a worker is repairing.
type ActiveRepair struct {
	LedgerID      int64     `json:"ledgerId"`
	Since         time.Time `json:"since"`
	EntriesCopied int64     `json:"entriesCopied"`
	EntriesTotal  int64     `json:"entriesTotal"`
}

// SourceStats is one source bookie's share of a worker's reads, with the
// interval during which it served them (to tell how many sources were read
// in parallel).
type SourceStats struct {
	Entries int64     `json:"entries"`
	Bytes   int64     `json:"bytes"`
	First   time.Time `json:"first"`
	Last    time.Time `json:"last"`
}

func markKey(ledgerID int64) string { return UnderReplicatedPrefix + strconv.FormatInt(ledgerID, 10) }
func lockKey(ledgerID int64) string { return LockPrefix + strconv.FormatInt(ledgerID, 10) }

// ledgerIDOf parses the ledger id at the end of a mark or lock key.
func ledgerIDOf(key, prefix string) (int64, bool) {
	id, err := strconv.ParseInt(strings.TrimPrefix(key, prefix), 10, 64)
	return id, err == nil && strings.HasPrefix(key, prefix)
}

func decodeMark(b []byte) (Mark, error) {
	var m Mark
	if err := json.Unmarshal(b, &m); err != nil {
		return Mark{}, fmt.Errorf("autorecovery: mark: %w", err)
	}
	return m, nil
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // plain structs: cannot fail
	}
	return b
}

// Status is autorecovery's state as the metadata store shows it.
type Status struct {
	// Auditor is nil when no auditor is elected.
	Auditor *AuditorInfo
	// UnderReplicated lists the marks, by ledger id, with the worker holding
	// each (empty when unclaimed).
	UnderReplicated []MarkStatus
	Workers         []Progress
}

// MarkStatus is a mark and who is repairing it.
type MarkStatus struct {
	Mark
	LockedBy string
}

// ReadStatus reads the auditor, the marks, the locks and the workers'
// published progress.
func ReadStatus(ctx context.Context, store meta.Store) (Status, error) {
	var st Status
	kv, err := store.Get(ctx, AuditorKey)
	switch {
	case err == nil:
		var a AuditorInfo
		if err := json.Unmarshal(kv.Value, &a); err != nil {
			return Status{}, fmt.Errorf("autorecovery: auditor key: %w", err)
		}
		st.Auditor = &a
	case !errors.Is(err, meta.ErrNotFound):
		return Status{}, fmt.Errorf("autorecovery: auditor key: %w", err)
	}
	locks, _, err := meta.ListAll(ctx, store, LockPrefix)
	if err != nil {
		return Status{}, err
	}
	lockedBy := map[int64]string{}
	for _, kv := range locks {
		var l LockInfo
		if id, ok := ledgerIDOf(kv.Key, LockPrefix); ok && json.Unmarshal(kv.Value, &l) == nil {
			lockedBy[id] = l.Worker
		}
	}
	marks, _, err := meta.ListAll(ctx, store, UnderReplicatedPrefix)
	if err != nil {
		return Status{}, err
	}
	for _, kv := range marks {
		m, err := decodeMark(kv.Value)
		if err != nil {
			return Status{}, fmt.Errorf("%s: %w", kv.Key, err)
		}
		st.UnderReplicated = append(st.UnderReplicated, MarkStatus{Mark: m, LockedBy: lockedBy[m.LedgerID]})
	}
	sort.Slice(st.UnderReplicated, func(i, j int) bool { return st.UnderReplicated[i].LedgerID < st.UnderReplicated[j].LedgerID })
	workers, _, err := meta.ListAll(ctx, store, WorkerPrefix)
	if err != nil {
		return Status{}, err
	}
	for _, kv := range workers {
		var p Progress
		if err := json.Unmarshal(kv.Value, &p); err != nil {
			return Status{}, fmt.Errorf("%s: %w", kv.Key, err)
		}
		st.Workers = append(st.Workers, p)
	}
	sort.Slice(st.Workers, func(i, j int) bool { return st.Workers[i].Worker < st.Workers[j].Worker })
	return st, nil
}
