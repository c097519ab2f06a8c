// Package ledger is the ledger protocol of ledger mode: quorum writes with
// striping, acknowledgements in order, ensemble changes, fencing recovery and
// reads. The writer and the recovery are deterministic state machines in the
// style of etcd's raft: inputs are bookie responses, metadata results and
// ticks; outputs (Ready) are bookie requests, metadata operations and
// acknowledgements. No goroutines, clocks, sockets or files inside; a thin
// shell drives them over the bookie client and the metadata store, and the
// simulator (internal/sim) drives the very same code.
package ledger

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
)

// BookieID names a bookie (its registration id).
type BookieID string

// State is a ledger's lifecycle state.
type State string

const (
	StateOpen       State = "OPEN"
	StateInRecovery State = "IN_RECOVERY"
	StateClosed     State = "CLOSED"
)

// Fragment is a range of entries stored on one ensemble: from FirstEntry up
// to the next fragment's FirstEntry (or the ledger's end).
type Fragment struct {
	FirstEntry int64      `json:"firstEntry"`
	Ensemble   []BookieID `json:"ensemble"`
}

// Metadata is a ledger's record in the metadata store. Every change is a
// compare-and-swap on its version.
type Metadata struct {
	ID           int64      `json:"id"`
	EnsembleSize int        `json:"ensembleSize"`
	WriteQuorum  int        `json:"writeQuorum"`
	AckQuorum    int        `json:"ackQuorum"`
	State        State      `json:"state"`
	Fragments    []Fragment `json:"fragments"`
	// LastEntryID is the last entry of a CLOSED ledger; -1 when empty or not closed.
	LastEntryID int64 `json:"lastEntryId"`
	// Length is the total payload bytes of a CLOSED ledger.
	Length int64 `json:"length"`
	// CreatedBy names the writer that created the ledger (diagnostics).
	CreatedBy string `json:"createdBy,omitempty"`
}

// ErrBadQuorum reports quorum sizes that break E ≥ Qw ≥ Qa ≥ 1.
var ErrBadQuorum = errors.New("ledger: quorum sizes must satisfy ensemble ≥ write quorum ≥ ack quorum ≥ 1")

// ValidateQuorum checks E ≥ Qw ≥ Qa ≥ 1.
func ValidateQuorum(ensemble, writeQuorum, ackQuorum int) error {
	if ackQuorum < 1 || writeQuorum < ackQuorum || ensemble < writeQuorum {
		return fmt.Errorf("%w (got E=%d Qw=%d Qa=%d)", ErrBadQuorum, ensemble, writeQuorum, ackQuorum)
	}
	return nil
}

// Validate checks the record's invariants.
func (m *Metadata) Validate() error {
	if err := ValidateQuorum(m.EnsembleSize, m.WriteQuorum, m.AckQuorum); err != nil {
		return fmt.Errorf("ledger %d: %w", m.ID, err)
	}
	switch m.State {
	case StateOpen, StateInRecovery, StateClosed:
	default:
		return fmt.Errorf("ledger %d: unknown state %q", m.ID, m.State)
	}
	if len(m.Fragments) == 0 {
		return fmt.Errorf("ledger %d: no fragments", m.ID)
	}
	for i, f := range m.Fragments {
		if len(f.Ensemble) != m.EnsembleSize {
			return fmt.Errorf("ledger %d: fragment %d has %d bookies, want %d", m.ID, i, len(f.Ensemble), m.EnsembleSize)
		}
		if i == 0 && f.FirstEntry != 0 || i > 0 && f.FirstEntry <= m.Fragments[i-1].FirstEntry {
			return fmt.Errorf("ledger %d: fragment %d starts at %d", m.ID, i, f.FirstEntry)
		}
		seen := map[BookieID]bool{}
		for _, b := range f.Ensemble {
			if seen[b] {
				return fmt.Errorf("ledger %d: fragment %d lists bookie %s twice", m.ID, i, b)
			}
			seen[b] = true
		}
	}
	return nil
}

// Clone returns a deep copy.
func (m Metadata) Clone() Metadata {
	m.Fragments = append([]Fragment(nil), m.Fragments...)
	for i := range m.Fragments {
		m.Fragments[i].Ensemble = append([]BookieID(nil), m.Fragments[i].Ensemble...)
	}
	return m
}

// Marshal encodes the record for the metadata store.
func (m *Metadata) Marshal() []byte {
	b, err := json.Marshal(m)
	if err != nil {
		panic(err) // plain struct: cannot fail
	}
	return b
}

// UnmarshalMetadata decodes and validates a record.
func UnmarshalMetadata(b []byte) (Metadata, error) {
	var m Metadata
	if err := json.Unmarshal(b, &m); err != nil {
		return Metadata{}, fmt.Errorf("ledger metadata: %w", err)
	}
	return m, m.Validate()
}

// Key is where ledger id's metadata lives in the metadata store.
func Key(id int64) string { return KeyPrefix + strconv.FormatInt(id, 10) }

// KeyPrefix is the prefix of every ledger's metadata key.
const KeyPrefix = "/quire/ledgers/"

// IDSequence is the metadata store sequence ledger ids come from.
const IDSequence = "ledger"

// FragmentFor returns the fragment index holding entry.
func (m *Metadata) FragmentFor(entry int64) int {
	i := len(m.Fragments) - 1
	for i > 0 && m.Fragments[i].FirstEntry > entry {
		i--
	}
	return i
}

// EnsembleFor returns the ensemble storing entry.
func (m *Metadata) EnsembleFor(entry int64) []BookieID {
	return m.Fragments[m.FragmentFor(entry)].Ensemble
}

// WriteSet returns the ensemble indexes of entry's write quorum: Qw
// consecutive members starting at entry mod E (striping when E > Qw).
func WriteSet(entry int64, ensembleSize, writeQuorum int) []int {
	out := make([]int, writeQuorum)
	start := int(entry % int64(ensembleSize))
	for k := range out {
		out[k] = (start + k) % ensembleSize
	}
	return out
}

// WriteQuorumBookies returns the bookies that store entry.
func (m *Metadata) WriteQuorumBookies(entry int64) []BookieID {
	ens := m.EnsembleFor(entry)
	out := make([]BookieID, 0, m.WriteQuorum)
	for _, i := range WriteSet(entry, m.EnsembleSize, m.WriteQuorum) {
		out = append(out, ens[i])
	}
	return out
}

// BookiesOf returns the bookies of the ensembles that store entries
// first..last, each once, in fragment order.
func (m *Metadata) BookiesOf(first, last int64) []BookieID {
	var out []BookieID
	seen := map[BookieID]bool{}
	for i := m.FragmentFor(first); i < len(m.Fragments) && (i == 0 || m.Fragments[i].FirstEntry <= last); i++ {
		for _, b := range m.Fragments[i].Ensemble {
			if !seen[b] {
				seen[b] = true
				out = append(out, b)
			}
		}
	}
	return out
}
