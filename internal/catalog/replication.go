package catalog

import (
	"context"
	"fmt"
)

// Replication is a namespace's choice of architecture for the topics
// created in it (DESIGN.md: one namespace policy chooses it). A topic's
// mode is copied into its record when it is created (Topic.Mode) and never
// changes afterwards, whatever the policy becomes.
type Replication struct {
	// Mode is ModeLedger (the default, "" in records written before the
	// policy existed) or ModeISR.
	Mode Mode `json:"mode,omitempty"`
	// ISR mode only: the replication factor of new topics (Kafka's
	// default.replication.factor; a CreateTopics request's
	// replication_factor overrides it), min.insync.replicas and
	// unclean.leader.election.enable (a topic's configs may override both,
	// as in Kafka).
	Factor                int32 `json:"factor,omitempty"`
	MinInSyncReplicas     int32 `json:"minInSyncReplicas,omitempty"`
	UncleanLeaderElection bool  `json:"uncleanLeaderElection,omitempty"`
}

// Mode is a replication architecture.
type Mode string

const (
	// ModeLedger: partitions are managed ledgers on the bookies, served by
	// the owner of their bundle.
	ModeLedger Mode = "ledger"
	// ModeISR: partitions are stored on the brokers, a leader and its
	// followers (Kafka's design).
	ModeISR Mode = "isr"
)

// Defaults of an ISR namespace's policy (Kafka's durable configuration).
const (
	DefaultISRFactor = 3
	DefaultMinISR    = 2
)

// IsISR reports whether the policy creates ISR-mode topics.
func (r Replication) IsISR() bool { return r.Mode == ModeISR }

// WithDefaults fills an ISR policy's unset numbers.
func (r Replication) WithDefaults() Replication {
	if r.Mode == "" {
		r.Mode = ModeLedger
	}
	if r.Mode == ModeISR {
		if r.Factor <= 0 {
			r.Factor = DefaultISRFactor
		}
		if r.MinInSyncReplicas <= 0 {
			r.MinInSyncReplicas = min(DefaultMinISR, r.Factor)
		}
	}
	return r
}

// Validate checks the policy; errors wrap ErrInvalidPolicies.
func (r Replication) Validate() error {
	switch r.Mode {
	case "", ModeLedger:
		if r.Factor != 0 || r.MinInSyncReplicas != 0 || r.UncleanLeaderElection {
			return fmt.Errorf("replication: factor, min.insync.replicas and unclean election are ISR-mode settings: %w", ErrInvalidPolicies)
		}
	case ModeISR:
		r = r.WithDefaults()
		if r.Factor < 1 || r.MinInSyncReplicas < 1 || r.MinInSyncReplicas > r.Factor {
			return fmt.Errorf("replication: factor %d, min.insync.replicas %d: want 1 <= min.insync.replicas <= factor: %w",
				r.Factor, r.MinInSyncReplicas, ErrInvalidPolicies)
		}
	default:
		return fmt.Errorf("replication mode %q: want %s or %s: %w", r.Mode, ModeLedger, ModeISR, ErrInvalidPolicies)
	}
	return nil
}

// SetReplication sets a namespace's replication policy. Topics that exist
// keep their mode.
func (a *Catalog) SetReplication(ctx context.Context, ns string, r Replication) (Policies, error) {
	if err := r.Validate(); err != nil {
		return Policies{}, fmt.Errorf("set replication of %s: %w", ns, err)
	}
	return a.UpdatePolicies(ctx, ns, func(p *Policies) error {
		p.Replication = r
		return nil
	})
}
