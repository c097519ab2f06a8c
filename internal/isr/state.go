package isr

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
)

// Keys under which ISR mode keeps its agreement state in the metadata store.
const (
	// PartitionPrefix + partition name holds a PartitionState (JSON).
	PartitionPrefix = "/quire/isr/partitions/"
	// BrokerPrefix + broker id holds a Registration (JSON), an ephemeral key
	// bound to the broker's session: its version is the broker epoch.
	BrokerPrefix = "/quire/isr/brokers/"
	// ControllerKey holds the active controller (ControllerRecord, JSON), an
	// ephemeral key bound to its session.
	ControllerKey = "/quire/isr/controller"
	// ControllerEpochSequence is the meta.Store id sequence controller epochs
	// come from: every election takes a new, higher one.
	ControllerEpochSequence = "isr-controller-epoch"
)

// PartitionKey is the metadata key of a partition's record.
func PartitionKey(partition string) string { return PartitionPrefix + partition }

// BrokerKey is the metadata key of a broker's registration.
func BrokerKey(id BrokerID) string { return fmt.Sprintf("%s%d", BrokerPrefix, id) }

// PartitionState is a partition's record in the metadata store (Kafka's
// PartitionRegistration): written only by the controller, only by CAS.
type PartitionState struct {
	Partition string     `json:"partition"`
	Replicas  []BrokerID `json:"replicas"` // the assignment; Replicas[0] is the preferred leader
	Leader    BrokerID   `json:"leader"`
	// LeaderBrokerEpoch is the leader's broker epoch when it was elected. A
	// broker leads only under that registration: after a restart it must
	// not act on a record that elected its previous incarnation.
	LeaderBrokerEpoch int64    `json:"leaderBrokerEpoch"`
	LeaderEpoch       int32    `json:"leaderEpoch"`
	ISR               []Member `json:"isr"`
	// ELR holds the eligible leader replicas (KIP-966): replicas that left
	// the ISR while it was below min.insync.replicas, so they still hold
	// every committed record.
	ELR []Member `json:"elr,omitempty"`
	// LastKnownELR (KIP-966's LastKnownELR) holds, while the ISR is below
	// min.insync.replicas and no leader was elected since, the replicas that
	// left the ISR or ELR because they came back from an unclean shutdown:
	// the last ones known to have held every committed record before it.
	// When the ISR and ELR are both empty, unclean recovery elects the
	// longest log among them (ControllerConfig.UncleanRecovery).
	LastKnownELR []BrokerID `json:"lastKnownElr,omitempty"`
	// AddingReplicas and RemovingReplicas describe a reassignment in
	// progress (KIP-455): Replicas is then the target followed by the
	// original replicas the target leaves out (RemovingReplicas), and
	// AddingReplicas are the target's replicas the original set lacked.
	// An adding replica fetches from the leader like any follower, but
	// until it joins the ISR no election takes it, clean or unclean. Once
	// every adding replica is in the ISR the controller completes the
	// reassignment: Replicas becomes the target, the removing replicas
	// leave the ISR and ELR, both lists empty (Controller.Reassign).
	// Invariant: both ⊆ Replicas, disjoint, and Replicas minus
	// RemovingReplicas is not empty.
	AddingReplicas   []BrokerID `json:"addingReplicas,omitempty"`
	RemovingReplicas []BrokerID `json:"removingReplicas,omitempty"`
	// PartitionEpoch bumps with every change of leader, ISR, ELR or
	// replicas.
	PartitionEpoch int32 `json:"partitionEpoch"`
	// ControllerEpoch is the epoch of the controller that last wrote it.
	ControllerEpoch int64 `json:"controllerEpoch"`
	// Unclean marks a record whose leader came from an unclean election
	// (Kafka's LeaderRecoveryState RECOVERING, simplified).
	Unclean bool `json:"unclean,omitempty"`
	// Config is the partition's topic's own replication settings, fixed
	// when the partition is created (zero: the cluster's).
	Config PartitionConfig `json:"config,omitzero"`
}

// PartitionConfig is what a topic may set for itself, as Kafka's topic
// configs do, over the controller's and replicas' defaults.
type PartitionConfig struct {
	// MinISR is min.insync.replicas (0: the default).
	MinISR int `json:"minISR,omitempty"`
	// UncleanElection is unclean.leader.election.enable (nil: the
	// default).
	UncleanElection *bool `json:"uncleanElection,omitempty"`
	// FlushMessages is flush.messages and FlushMs flush.ms (0: the
	// replicas' defaults, which force no flush, as Kafka's): every replica
	// of the partition, leader or follower, flushes its log by them.
	FlushMessages int64 `json:"flushMessages,omitempty"`
	FlushMs       int64 `json:"flushMs,omitempty"`
}

// MinISROr is the partition's min.insync.replicas, def when not set.
func (c PartitionConfig) MinISROr(def int) int {
	if c.MinISR > 0 {
		return c.MinISR
	}
	return def
}

// UncleanElectionOr is the partition's unclean.leader.election.enable,
// def when not set.
func (c PartitionConfig) UncleanElectionOr(def bool) bool {
	if c.UncleanElection != nil {
		return *c.UncleanElection
	}
	return def
}

// FlushMessagesOr is the partition's flush.messages, def when not set.
func (c PartitionConfig) FlushMessagesOr(def int64) int64 {
	if c.FlushMessages > 0 {
		return c.FlushMessages
	}
	return def
}

// FlushIntervalOr is the partition's flush.ms, def when not set.
func (c PartitionConfig) FlushIntervalOr(def time.Duration) time.Duration {
	if c.FlushMs > 0 {
		return time.Duration(min(c.FlushMs, int64(math.MaxInt64/time.Millisecond))) * time.Millisecond
	}
	return def
}

// Clone returns a deep copy.
func (s PartitionState) Clone() PartitionState {
	s.Replicas = slices.Clone(s.Replicas)
	s.ISR = slices.Clone(s.ISR)
	s.ELR = slices.Clone(s.ELR)
	s.LastKnownELR = slices.Clone(s.LastKnownELR)
	s.AddingReplicas = slices.Clone(s.AddingReplicas)
	s.RemovingReplicas = slices.Clone(s.RemovingReplicas)
	return s
}

// Reassigning reports whether a reassignment is in progress.
func (s PartitionState) Reassigning() bool {
	return len(s.AddingReplicas) > 0 || len(s.RemovingReplicas) > 0
}

// TargetReplicas is where a reassignment in progress takes the partition
// (Replicas without RemovingReplicas); Replicas when none is.
func (s PartitionState) TargetReplicas() []BrokerID {
	return without(s.Replicas, s.RemovingReplicas)
}

// ShowsReassignment reports whether the record shows a reassignment to
// target (in progress or completed), or, for a nil target (a cancel), none
// in progress.
func (s PartitionState) ShowsReassignment(target []BrokerID) bool {
	if target == nil {
		return !s.Reassigning()
	}
	return slices.Equal(s.TargetReplicas(), target)
}

// OriginalReplicas is the replica set a reassignment in progress started
// from (Replicas without AddingReplicas), which cancelling it restores;
// Replicas when none is.
func (s PartitionState) OriginalReplicas() []BrokerID {
	return without(s.Replicas, s.AddingReplicas)
}

// Adding reports whether id is an adding replica of a reassignment in
// progress.
func (s PartitionState) Adding(id BrokerID) bool { return slices.Contains(s.AddingReplicas, id) }

// without returns ids in order, less those in drop.
func without(ids, drop []BrokerID) []BrokerID {
	out := make([]BrokerID, 0, len(ids))
	for _, id := range ids {
		if !slices.Contains(drop, id) {
			out = append(out, id)
		}
	}
	return out
}

// Newer reports whether s supersedes old: a higher leader epoch, or the same
// leader epoch with a higher partition epoch.
func (s PartitionState) Newer(old PartitionState) bool {
	if s.LeaderEpoch != old.LeaderEpoch {
		return s.LeaderEpoch > old.LeaderEpoch
	}
	return s.PartitionEpoch > old.PartitionEpoch
}

// InISR reports whether id is an ISR member.
func (s PartitionState) InISR(id BrokerID) bool { return memberIndex(s.ISR, id) >= 0 }

// InELR reports whether id is an ELR member.
func (s PartitionState) InELR(id BrokerID) bool { return memberIndex(s.ELR, id) >= 0 }

// ISRIDs returns the ISR's broker ids.
func (s PartitionState) ISRIDs() []BrokerID { return memberIDs(s.ISR) }

// SameContent reports whether two records say the same thing apart from
// who wrote them (ControllerEpoch).
func (s PartitionState) SameContent(o PartitionState) bool {
	return s.Partition == o.Partition && slices.Equal(s.Replicas, o.Replicas) && s.Leader == o.Leader &&
		s.LeaderBrokerEpoch == o.LeaderBrokerEpoch && s.LeaderEpoch == o.LeaderEpoch &&
		slices.Equal(s.ISR, o.ISR) && slices.Equal(s.ELR, o.ELR) &&
		slices.Equal(s.LastKnownELR, o.LastKnownELR) && slices.Equal(s.AddingReplicas, o.AddingReplicas) &&
		slices.Equal(s.RemovingReplicas, o.RemovingReplicas) && s.PartitionEpoch == o.PartitionEpoch &&
		s.Unclean == o.Unclean && s.Config.equal(o.Config)
}

func (c PartitionConfig) equal(o PartitionConfig) bool {
	return c.MinISR == o.MinISR && (c.UncleanElection == nil) == (o.UncleanElection == nil) &&
		(c.UncleanElection == nil || *c.UncleanElection == *o.UncleanElection) &&
		c.FlushMessages == o.FlushMessages && c.FlushMs == o.FlushMs
}

// Validate checks what every record must satisfy.
func (s PartitionState) Validate() error {
	if s.Partition == "" || len(s.Replicas) == 0 {
		return fmt.Errorf("partition %q: no name or no replicas", s.Partition)
	}
	if s.Config.MinISR < 0 {
		return fmt.Errorf("partition %s: min.insync.replicas %d", s.Partition, s.Config.MinISR)
	}
	if s.Config.FlushMessages < 0 || s.Config.FlushMs < 0 {
		return fmt.Errorf("partition %s: flush.messages %d flush.ms %d", s.Partition, s.Config.FlushMessages, s.Config.FlushMs)
	}
	seen := map[BrokerID]string{}
	for _, r := range s.Replicas {
		if _, dup := seen[r]; dup {
			return fmt.Errorf("partition %s: replica %d twice", s.Partition, r)
		}
		seen[r] = "replica"
	}
	for _, set := range []struct {
		name    string
		members []Member
	}{{"isr", s.ISR}, {"elr", s.ELR}} {
		for _, m := range set.members {
			where, ok := seen[m.ID]
			if !ok {
				return fmt.Errorf("partition %s: %s member %d is not a replica", s.Partition, set.name, m.ID)
			}
			if where != "replica" {
				return fmt.Errorf("partition %s: %d is in %s and %s", s.Partition, m.ID, where, set.name)
			}
			seen[m.ID] = set.name
		}
	}
	for i, id := range s.LastKnownELR {
		if !slices.Contains(s.Replicas, id) || slices.Contains(s.LastKnownELR[:i], id) {
			return fmt.Errorf("partition %s: last known ELR %v: %d is not a replica or is there twice", s.Partition, s.LastKnownELR, id)
		}
	}
	if s.Leader != NoLeader && !s.InISR(s.Leader) {
		return fmt.Errorf("partition %s: leader %d is not in the ISR %v", s.Partition, s.Leader, s.ISRIDs())
	}
	for i, id := range s.AddingReplicas {
		if !slices.Contains(s.Replicas, id) || slices.Contains(s.AddingReplicas[:i], id) || slices.Contains(s.RemovingReplicas, id) {
			return fmt.Errorf("partition %s: adding replicas %v: %d is not a replica, is there twice or is also removing %v",
				s.Partition, s.AddingReplicas, id, s.RemovingReplicas)
		}
	}
	for i, id := range s.RemovingReplicas {
		if !slices.Contains(s.Replicas, id) || slices.Contains(s.RemovingReplicas[:i], id) {
			return fmt.Errorf("partition %s: removing replicas %v: %d is not a replica or is there twice", s.Partition, s.RemovingReplicas, id)
		}
	}
	if len(s.RemovingReplicas) >= len(s.Replicas) {
		return fmt.Errorf("partition %s: every replica of %v is removing", s.Partition, s.Replicas)
	}
	return nil
}

func (s PartitionState) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s leader=%d epoch=%d isr=%s", s.Partition, s.Leader, s.LeaderEpoch, formatMembers(s.ISR))
	if len(s.ELR) > 0 {
		fmt.Fprintf(&b, " elr=%s", formatMembers(s.ELR))
	}
	if len(s.LastKnownELR) > 0 {
		fmt.Fprintf(&b, " lastKnownElr=%v", s.LastKnownELR)
	}
	if s.Reassigning() {
		fmt.Fprintf(&b, " replicas=%v adding=%v removing=%v", s.Replicas, s.AddingReplicas, s.RemovingReplicas)
	}
	fmt.Fprintf(&b, " pe=%d ce=%d", s.PartitionEpoch, s.ControllerEpoch)
	if s.Unclean {
		b.WriteString(" unclean")
	}
	return b.String()
}

func formatMembers(ms []Member) string {
	parts := make([]string, len(ms))
	for i, m := range ms {
		parts[i] = fmt.Sprint(m.ID)
	}
	return "(" + strings.Join(parts, ",") + ")"
}

// Marshal encodes the record for the metadata store.
func (s PartitionState) Marshal() []byte {
	b, err := json.Marshal(s)
	if err != nil {
		panic(fmt.Sprintf("isr: encode partition state: %v", err)) // plain data: cannot fail
	}
	return b
}

// UnmarshalState decodes a record read from the metadata store.
func UnmarshalState(b []byte) (PartitionState, error) {
	var s PartitionState
	if err := json.Unmarshal(b, &s); err != nil {
		return PartitionState{}, fmt.Errorf("decode partition state: %w", err)
	}
	if err := s.Validate(); err != nil {
		return PartitionState{}, fmt.Errorf("decode partition state: %w", err)
	}
	return s, nil
}

// Registration is a broker's ephemeral key. Its version in the store is the
// broker epoch (Epoch, filled in by whoever reads it).
type Registration struct {
	ID    BrokerID `json:"id"`
	Epoch int64    `json:"-"`
	// UncleanShutdown: the broker restarted without a clean shutdown, so it
	// may have lost records that were never flushed.
	UncleanShutdown bool `json:"uncleanShutdown,omitempty"`
	// LossEpoch is the broker epoch of its first registration after its
	// last unclean shutdown (0: none). A registration with UncleanShutdown
	// set is itself that registration. An ISR or ELR member admitted under
	// an older broker epoch may lack committed records.
	LossEpoch int64 `json:"lossEpoch,omitempty"`
	// LogEnds says where each partition replica the broker holds on disk
	// ended when it registered (sorted by partition): what unclean recovery
	// compares. A replica's log does not change while its partition has no
	// leader, so the figures stay true for as long as recovery needs them.
	LogEnds []ReplicaLogEnd `json:"logEnds,omitempty"`
}

// ReplicaLogEnd is where a replica's log ends: the epoch of its last batch
// (from its leader-epoch cache) and its log end offset.
type ReplicaLogEnd struct {
	Partition string `json:"partition"`
	LastEpoch int32  `json:"lastEpoch"`
	EndOffset int64  `json:"endOffset"`
}

// Longer reports whether e is a longer log than o, as KIP-966's unclean
// recovery ranks them: the higher last epoch, then the higher end offset.
func (e ReplicaLogEnd) Longer(o ReplicaLogEnd) bool {
	if e.LastEpoch != o.LastEpoch {
		return e.LastEpoch > o.LastEpoch
	}
	return e.EndOffset > o.EndOffset
}

// LastLoss is the broker epoch at which the broker last came back from an
// unclean shutdown (0: never).
func (r Registration) LastLoss() int64 {
	if r.UncleanShutdown {
		return r.Epoch
	}
	return r.LossEpoch
}

// Marshal encodes the registration.
func (r Registration) Marshal() []byte {
	b, err := json.Marshal(r)
	if err != nil {
		panic(fmt.Sprintf("isr: encode registration: %v", err))
	}
	return b
}

// UnmarshalRegistration decodes a registration read at the given version.
func UnmarshalRegistration(b []byte, version int64) (Registration, error) {
	var r Registration
	if err := json.Unmarshal(b, &r); err != nil {
		return Registration{}, fmt.Errorf("decode broker registration: %w", err)
	}
	r.Epoch = version
	return r, nil
}

// ControllerRecord is the active controller's ephemeral key.
type ControllerRecord struct {
	ID    string `json:"id"`
	Epoch int64  `json:"epoch"`
}

func memberIndex(ms []Member, id BrokerID) int {
	for i, m := range ms {
		if m.ID == id {
			return i
		}
	}
	return -1
}

func memberIDs(ms []Member) []BrokerID {
	out := make([]BrokerID, len(ms))
	for i, m := range ms {
		out[i] = m.ID
	}
	return out
}

func withoutMember(ms []Member, id BrokerID) []Member {
	out := make([]Member, 0, len(ms))
	for _, m := range ms {
		if m.ID != id {
			out = append(out, m)
		}
	}
	return out
}

// sortMembers orders members as the assignment lists them, so records do not
// depend on the order in which replicas joined.
func sortMembers(ms []Member, replicas []BrokerID) []Member {
	out := slices.Clone(ms)
	slices.SortFunc(out, func(a, b Member) int {
		return slices.Index(replicas, a.ID) - slices.Index(replicas, b.ID)
	})
	return out
}
