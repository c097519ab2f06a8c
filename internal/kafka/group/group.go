// Package group is Quire's coordinator for Kafka classic consumer groups
// (JoinGroup, SyncGroup, Heartbeat, LeaveGroup) and committed offsets
// (OffsetCommit, OffsetFetch, OffsetDelete), plus the group admin requests
// (ListGroups, DescribeGroups, DeleteGroups). It follows Apache Kafka's
// GroupCoordinator (the classic protocol) closely, so that franz-go, the Java
// client and librdkafka behave as they do against Kafka.
//
// It has two layers:
//   - Group is the protocol core: a deterministic state machine with no
//     goroutines, clocks or I/O. Requests go in with the time they arrived;
//     responses come out at once or later (as Deliveries to the waiters of
//     blocked JoinGroup/SyncGroup calls); offset changes come out as an
//     OffsetWrite that must be made durable before it is applied and answered.
//   - Coordinator is the shell that implements kafka.GroupCoordinator: one
//     mutex per group, timers from a clock.Clock for session and rebalance
//     timeouts, blocking calls on channels, and offsets persisted in the
//     metadata store (one key per group, compare-and-swap on the version it
//     last wrote, so a stale coordinator after a failover cannot overwrite).
//
// It never owns a group it is not told it owns (Config.Owns): requests for
// other groups get NOT_COORDINATOR, and group membership is never persisted,
// only committed offsets are (key DefaultKeyPrefix + url.PathEscape(group),
// a JSON document of every offset of the group).
//
// The front end should attach the client id and address of each connection
// with WithClient (member ids start with the client id, as in Kafka, and
// DescribeGroups shows both), and must pass a ctx to JoinGroup and SyncGroup
// that ends only when the connection does: they block for up to the
// rebalance timeout, as in Kafka.
package group

import (
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"quire/internal/invariants"
)

// State is a group's state, named as Kafka names it on the wire.
type State int8

const (
	Empty State = iota
	PreparingRebalance
	CompletingRebalance
	Stable
	Dead
)

func (s State) String() string {
	switch s {
	case Empty:
		return "Empty"
	case PreparingRebalance:
		return "PreparingRebalance"
	case CompletingRebalance:
		return "CompletingRebalance"
	case Stable:
		return "Stable"
	case Dead:
		return "Dead"
	}
	return fmt.Sprintf("State(%d)", int8(s))
}

// WaiterID names one blocked JoinGroup or SyncGroup call. The shell chooses
// them (never 0) and routes Deliveries by them.
type WaiterID uint64

// Delivery is a response for a blocked call: exactly one of Join and Sync is set.
type Delivery struct {
	Waiter WaiterID
	Join   *kmsg.JoinGroupResponse
	Sync   *kmsg.SyncGroupResponse
}

// ClientInfo is what DescribeGroups shows of a member's connection.
type ClientInfo struct {
	ID   string
	Host string
}

// GroupConfig holds the limits and policies of one group's state machine.
type GroupConfig struct {
	// InitialRebalanceDelay is Kafka's group.initial.rebalance.delay.ms: the
	// first rebalance of an empty group waits this long for more members
	// (extended while new members keep arriving, up to the rebalance
	// timeout). 0 disables the delay.
	InitialRebalanceDelay time.Duration
	// MinSessionTimeout and MaxSessionTimeout bound the session timeouts
	// members may ask for (INVALID_SESSION_TIMEOUT outside).
	MinSessionTimeout time.Duration
	MaxSessionTimeout time.Duration
	// MaxMembers is Kafka's group.max.size (GROUP_MAX_SIZE_REACHED above it);
	// it also bounds members that were handed a member id but have not joined.
	MaxMembers int
	// MaxMetadataBytes is offset.metadata.max.bytes (OFFSET_METADATA_TOO_LARGE).
	MaxMetadataBytes int
	// NewMemberID makes a fresh, unique member id for a client (Kafka uses
	// clientID-UUID; static members instanceID-UUID).
	NewMemberID func(prefix string) string
}

// member is one group member (dynamic or static).
type member struct {
	id         string
	instanceID *string
	client     ClientInfo

	protocolType     string
	protocols        []kmsg.JoinGroupRequestProtocol
	sessionTimeout   time.Duration
	rebalanceTimeout time.Duration

	// joinWaiter is the blocked JoinGroup of this member; 0 when the member
	// is not awaiting a join. Invariant: non-zero only in PreparingRebalance.
	joinWaiter  WaiterID
	joinVersion int16
	// syncWaiter is the blocked SyncGroup; 0 when none. Invariant: non-zero
	// only in CompletingRebalance.
	syncWaiter  WaiterID
	syncVersion int16

	assignment []byte
	// sessionDeadline: the member is removed if no heartbeat (or other
	// proof of life) arrives before it, unless it is awaiting a join or sync
	// (blocked members satisfy heartbeats, as in Kafka).
	sessionDeadline time.Time
}

func (m *member) awaiting() bool { return m.joinWaiter != 0 || m.syncWaiter != 0 }

func (m *member) isStatic() bool { return m.instanceID != nil }

// metadata is the member's metadata for protocol name (nil if unsupported).
func (m *member) metadata(protocol string) []byte {
	for _, p := range m.protocols {
		if p.Name == protocol {
			return p.Metadata
		}
	}
	return nil
}

// matches reports whether protocols are exactly the member's current ones.
func (m *member) matches(protocols []kmsg.JoinGroupRequestProtocol) bool {
	if len(protocols) != len(m.protocols) {
		return false
	}
	for i := range protocols {
		if protocols[i].Name != m.protocols[i].Name || string(protocols[i].Metadata) != string(m.protocols[i].Metadata) {
			return false
		}
	}
	return true
}

// Group is one consumer group's state machine. It is not safe for concurrent
// use: the shell serializes calls. Every method that may answer a blocked
// call leaves Deliveries to be taken with TakeDeliveries.
type Group struct {
	name string
	cfg  GroupConfig

	// exists: the group exists as Kafka sees it (created by a join or a
	// simple commit, or loaded with offsets); false until then and after
	// DeleteGroups. A non-existing group answers like Kafka's "no such group".
	exists bool

	state State
	// deleting: DeleteGroup made the group Dead and its delete is not yet
	// applied (ApplyWrite) or undone (AbortWrite).
	// Invariant: only while Dead with no members.
	deleting bool

	generation   int32
	protocolType string // set by the first member; kept when the group empties
	protocol     string // selected at the last completed join; "" when Empty
	leader       string

	// members in join order; byID and static index them.
	members []*member
	byID    map[string]*member
	static  map[string]string // group.instance.id → member id
	// pending: member ids handed out with MEMBER_ID_REQUIRED, with the time
	// they expire if the member does not join with them (KIP-394).
	pending map[string]time.Time

	// joinDeadline ends PreparingRebalance (the rebalance timeout, or the
	// initial delay when initialDelay is set).
	joinDeadline     time.Time
	initialDelay     bool
	initialRemaining time.Duration
	newMemberAdded   bool

	// pendingSync: members that must send SyncGroup for the current
	// generation before syncDeadline, or be removed (Kafka 3.x DelayedSync).
	pendingSync  map[string]struct{}
	syncDeadline time.Time

	// subscribed: topics the members' consumer metadata names; nil with
	// subscribedKnown false means unknown (treated as subscribed to all).
	subscribed      map[string]bool
	subscribedKnown bool

	offsets map[TopicPartition]Offset
	// txnPending: transactional producers' offsets, pending until their
	// transaction ends (txnoffsets.go).
	txnPending map[int64]map[TopicPartition]Offset
	// emptySince is when the group last became Empty (Kafka's current state
	// timestamp, which offset expiry counts from); zero when not known
	// (after a load), in which case each offset's commit time counts.
	emptySince time.Time

	deliveries []Delivery
	events     []string

	// checkedGeneration is the generation at the last invariant check
	// (-tags invariants, and the randomized test).
	checkedGeneration int32
}

// NewGroup returns a group that does not exist yet (state Empty).
func NewGroup(name string, cfg GroupConfig) *Group {
	if cfg.NewMemberID == nil {
		panic("group: GroupConfig.NewMemberID is required")
	}
	return &Group{
		name:        name,
		cfg:         cfg,
		byID:        map[string]*member{},
		static:      map[string]string{},
		pending:     map[string]time.Time{},
		pendingSync: map[string]struct{}{},
		offsets:     map[TopicPartition]Offset{},
	}
}

// Name is the group id.
func (g *Group) Name() string { return g.name }

// State is the group's current state.
func (g *Group) State() State { return g.state }

// Generation is the current generation id.
func (g *Group) Generation() int32 { return g.generation }

// Exists reports whether Kafka would consider the group to exist.
func (g *Group) Exists() bool { return g.exists && g.state != Dead }

// Leader is the leader's member id ("" when none).
func (g *Group) Leader() string { return g.leader }

// ProtocolType is the members' protocol type ("consumer" for consumers).
func (g *Group) ProtocolType() string { return g.protocolType }

// Protocol is the selected protocol (assignor) of the current generation.
func (g *Group) Protocol() string { return g.protocol }

// MemberIDs lists the members in join order.
func (g *Group) MemberIDs() []string {
	ids := make([]string, len(g.members))
	for i, m := range g.members {
		ids[i] = m.id
	}
	return ids
}

// Idle reports whether the group holds nothing worth keeping in memory: no
// members, no pending members and no offsets.
func (g *Group) Idle() bool {
	return len(g.members) == 0 && len(g.pending) == 0 && len(g.offsets) == 0
}

// TakeDeliveries returns and forgets the responses for blocked calls.
func (g *Group) TakeDeliveries() []Delivery {
	d := g.deliveries
	g.deliveries = nil
	return d
}

// TakeEvents returns and forgets the log lines describing what happened
// (rebalances, members added and removed), for the shell to log.
func (g *Group) TakeEvents() []string {
	e := g.events
	g.events = nil
	return e
}

func (g *Group) note(format string, args ...any) {
	g.events = append(g.events, fmt.Sprintf(format, args...))
}

// NextDeadline is the earliest time Tick has something to do (never for a
// Dead group, which Tick leaves alone).
func (g *Group) NextDeadline() (time.Time, bool) {
	var next time.Time
	if g.state == Dead {
		return next, false
	}
	consider := func(t time.Time) {
		if next.IsZero() || t.Before(next) {
			next = t
		}
	}
	for _, dl := range g.pending {
		consider(dl)
	}
	for _, m := range g.members {
		if !m.awaiting() {
			consider(m.sessionDeadline)
		}
	}
	if g.state == PreparingRebalance {
		consider(g.joinDeadline)
	}
	if g.syncTimerActive() {
		consider(g.syncDeadline)
	}
	return next, !next.IsZero()
}

func (g *Group) syncTimerActive() bool {
	return (g.state == CompletingRebalance || g.state == Stable) && len(g.pendingSync) > 0
}

// Tick expires what is due at now: members handed an id that never joined,
// members whose session timed out, the join phase of a rebalance and
// members that never synced.
func (g *Group) Tick(now time.Time) {
	if invariants.Enabled {
		defer g.checkInvariants()
	}
	if g.state == Dead {
		return
	}
	expiredPending := false
	for id, dl := range g.pending {
		if !now.Before(dl) {
			delete(g.pending, id)
			expiredPending = true
			g.note("pending member %s expired", id)
		}
	}
	if expiredPending {
		g.maybeCompleteJoin(now)
	}
	for _, m := range append([]*member(nil), g.members...) {
		if g.byID[m.id] == m && !m.awaiting() && !now.Before(m.sessionDeadline) {
			g.note("member %s session timed out", m.id)
			g.removeMemberAndUpdate(now, m)
		}
	}
	if g.state == PreparingRebalance && !now.Before(g.joinDeadline) {
		if g.initialDelay && g.newMemberAdded && g.initialRemaining > 0 {
			// Kafka's InitialDelayedJoin: members keep arriving, wait
			// once more (up to what is left of the rebalance timeout).
			delay := min(g.cfg.InitialRebalanceDelay, g.initialRemaining)
			g.initialRemaining -= delay
			g.newMemberAdded = false
			g.joinDeadline = now.Add(delay)
		} else {
			g.completeJoin(now)
		}
	}
	if g.syncTimerActive() && !now.Before(g.syncDeadline) {
		var late []*member
		for _, m := range g.members {
			if _, ok := g.pendingSync[m.id]; ok {
				late = append(late, m)
			}
		}
		for _, m := range late {
			g.note("member %s did not sync in time", m.id)
			g.removeMember(m)
		}
		g.prepareRebalance(now, "members did not sync in time")
	}
}

// Unload answers every blocked call with NOT_COORDINATOR and kills the group:
// this broker no longer coordinates it.
func (g *Group) Unload() {
	if invariants.Enabled {
		defer g.checkInvariants()
	}
	for _, m := range g.members {
		g.answerWaiters(m, kerr.NotCoordinator)
	}
	g.state = Dead
	g.deleting = false // a delete that fails now must not revive it
}

// rebalanceTimeout is the longest rebalance timeout of the members.
func (g *Group) rebalanceTimeout() time.Duration {
	var d time.Duration
	for _, m := range g.members {
		d = max(d, m.rebalanceTimeout)
	}
	return d
}

// answerWaiters fails the member's blocked calls with err.
func (g *Group) answerWaiters(m *member, err *kerr.Error) {
	if m.joinWaiter != 0 {
		g.deliveries = append(g.deliveries, Delivery{Waiter: m.joinWaiter, Join: joinError(m.joinVersion, m.id, err)})
		m.joinWaiter = 0
	}
	if m.syncWaiter != 0 {
		g.deliveries = append(g.deliveries, Delivery{Waiter: m.syncWaiter, Sync: syncError(m.syncVersion, err)})
		m.syncWaiter = 0
	}
}

// validateMember is Kafka's validateCurrentMember: if instanceID is given it
// must map to memberID (FENCED_INSTANCE_ID otherwise), and memberID must be a
// member (UNKNOWN_MEMBER_ID).
func (g *Group) validateMember(memberID string, instanceID *string) *kerr.Error {
	if instanceID != nil {
		current, ok := g.static[*instanceID]
		if !ok {
			return kerr.UnknownMemberID
		}
		if current != memberID {
			return kerr.FencedInstanceID
		}
		return nil
	}
	if g.byID[memberID] == nil {
		return kerr.UnknownMemberID
	}
	return nil
}

func millis(ms int32) time.Duration { return time.Duration(ms) * time.Millisecond }

func errCode(err *kerr.Error) int16 {
	if err == nil {
		return 0
	}
	return err.Code
}

// checkInvariants panics, naming the invariant and its values, if the
// group's state breaks what must hold after every input. It runs at the end
// of Join, Sync, Heartbeat, Leave, Tick, Unload, DeleteGroup, ApplyWrite and
// AbortWrite under -tags invariants, and after every step of the randomized
// test; O(members + pending).
func (g *Group) checkInvariants() {
	if g.generation < g.checkedGeneration {
		g.violated("the generation never decreases: %d after %d", g.generation, g.checkedGeneration)
	}
	g.checkedGeneration = g.generation
	switch g.state {
	case Empty:
		if len(g.members) != 0 || g.protocol != "" {
			g.violated("an Empty group has no members and no protocol: %d members, protocol %q", len(g.members), g.protocol)
		}
	case PreparingRebalance:
		if !g.initialDelay && len(g.pending) == 0 && len(g.members) > 0 {
			// maybeCompleteJoin ends the join phase once all rejoined.
			rejoined := 0
			for _, m := range g.members {
				if m.joinWaiter != 0 {
					rejoined++
				}
			}
			if rejoined == len(g.members) {
				g.violated("the join phase ends once every member rejoined: all %d rejoined, no pending member, no initial delay", rejoined)
			}
		}
	case CompletingRebalance, Stable:
		if len(g.members) == 0 || g.generation == 0 {
			g.violated("a %s group has members and a generation: %d members, generation %d", g.state, len(g.members), g.generation)
		}
	case Dead:
	default:
		g.violated("the state is one of Kafka's: %d", g.state)
	}
	if (len(g.members) == 0) != (g.leader == "") {
		g.violated("a group with members has a leader, one without none: %d members, leader %q", len(g.members), g.leader)
	}
	if g.leader != "" && g.byID[g.leader] == nil {
		g.violated("the leader is a member: leader %q, members %v", g.leader, g.MemberIDs())
	}
	if _, ok := g.pendingSync[g.leader]; g.state == CompletingRebalance && !ok {
		// The leader's SyncGroup completes the rebalance.
		g.violated("CompletingRebalance awaits the leader's SyncGroup: leader %q has synced (pending %d)", g.leader, len(g.pendingSync))
	}
	if len(g.byID) != len(g.members) {
		g.violated("the member index matches the member list: %d indexed, %d members", len(g.byID), len(g.members))
	}
	for _, m := range g.members {
		if g.byID[m.id] != m {
			g.violated("every member is indexed by its id: %s", m.id)
		}
		if m.joinWaiter != 0 && g.state != PreparingRebalance {
			g.violated("a member is blocked in JoinGroup only in PreparingRebalance: %s in %s", m.id, g.state)
		}
		if m.syncWaiter != 0 && g.state != CompletingRebalance {
			g.violated("a member is blocked in SyncGroup only in CompletingRebalance: %s in %s", m.id, g.state)
		}
		if m.instanceID != nil && g.static[*m.instanceID] != m.id {
			g.violated("a static member is indexed by its instance: %s (instance %s) indexed as %q", m.id, *m.instanceID, g.static[*m.instanceID])
		}
		if m.protocolType != g.protocolType {
			g.violated("members share the group's protocol type: %s has %q, the group %q", m.id, m.protocolType, g.protocolType)
		}
		if g.state == Stable && m.assignment == nil {
			g.violated("in Stable every member has its assignment: %s has none", m.id)
		}
		if _, ok := g.pending[m.id]; ok {
			g.violated("a pending member id is not a member yet: %s", m.id)
		}
	}
	for instance, id := range g.static {
		if m := g.byID[id]; m == nil || m.instanceID == nil || *m.instanceID != instance {
			g.violated("the static index names members: instance %s -> %s", instance, id)
		}
	}
	for id := range g.pendingSync {
		if g.byID[id] == nil {
			g.violated("members awaited in SyncGroup are members: %s", id)
		}
	}
	if len(g.pendingSync) > 0 && g.state != CompletingRebalance && g.state != Stable && g.state != Dead {
		g.violated("members are awaited in SyncGroup only after a join completed: %d in %s", len(g.pendingSync), g.state)
	}
	if len(g.pending) > g.cfg.MaxMembers {
		g.violated("pending member ids <= MaxMembers: %d, MaxMembers(%d)", len(g.pending), g.cfg.MaxMembers)
	}
	if len(g.members) > 0 && !g.exists {
		g.violated("a group with members exists: %d members", len(g.members))
	}
	if g.deleting && (g.state != Dead || len(g.members) > 0) {
		g.violated("a group being deleted is Dead with no members: %d members", len(g.members))
	}
}

// violated reports a broken invariant of the group.
func (g *Group) violated(format string, args ...any) {
	panic(fmt.Sprintf("group %q (%s, generation %d): invariant violated: ", g.name, g.state, g.generation) + fmt.Sprintf(format, args...))
}
