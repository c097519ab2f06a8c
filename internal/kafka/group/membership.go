package group

// JoinGroup v0–v9, SyncGroup v0–v5, Heartbeat v0–v4, LeaveGroup v0–v5: the
// classic rebalance protocol as Kafka's GroupCoordinator runs it.
//
// Deviations from Kafka:
//   - No "new member join timeout" (Kafka expires a new member blocked in
//     JoinGroup after 5 minutes): a blocked join is bounded by the rebalance
//     timeout anyway.
//   - The join request's reason (v8+) is only logged.
//   - Membership is not persisted: after a coordinator failover members get
//     UNKNOWN_MEMBER_ID and rejoin (generation starts again at 0; member ids
//     are fresh, so old members cannot be confused with new ones).

import (
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"quire/internal/invariants"
)

func joinError(version int16, memberID string, err *kerr.Error) *kmsg.JoinGroupResponse {
	r := kmsg.NewPtrJoinGroupResponse()
	r.Version = version
	r.ErrorCode = errCode(err)
	r.Generation = -1
	r.MemberID = memberID
	return r
}

func syncError(version int16, err *kerr.Error) *kmsg.SyncGroupResponse {
	r := kmsg.NewPtrSyncGroupResponse()
	r.Version = version
	r.ErrorCode = errCode(err)
	return r
}

// joinResponse is a successful JoinGroup answer for m in the current generation.
func (g *Group) joinResponse(version int16, m *member) *kmsg.JoinGroupResponse {
	r := kmsg.NewPtrJoinGroupResponse()
	r.Version = version
	r.Generation = g.generation
	protocolType, protocol := g.protocolType, g.protocol
	r.ProtocolType = &protocolType
	r.Protocol = &protocol
	r.LeaderID = g.leader
	r.MemberID = m.id
	if m.id == g.leader {
		for _, o := range g.members {
			r.Members = append(r.Members, kmsg.JoinGroupResponseMember{
				MemberID:         o.id,
				InstanceID:       o.instanceID,
				ProtocolMetadata: o.metadata(g.protocol),
			})
		}
	}
	return r
}

// Join handles JoinGroup. It returns the response, or nil when the caller
// must wait: its answer comes later as a Delivery to waiter.
func (g *Group) Join(now time.Time, waiter WaiterID, client ClientInfo, req *kmsg.JoinGroupRequest) *kmsg.JoinGroupResponse {
	if waiter == 0 {
		panic("group: waiter id 0")
	}
	if invariants.Enabled {
		defer g.checkInvariants()
	}
	if req.Reason != nil {
		g.note("member %q joins: %s", req.MemberID, *req.Reason)
	}
	sessionTimeout := millis(req.SessionTimeoutMillis)
	rebalanceTimeout := millis(req.RebalanceTimeoutMillis)
	if req.Version == 0 || req.RebalanceTimeoutMillis < 0 {
		rebalanceTimeout = sessionTimeout
	}
	if g.state == Dead {
		return joinError(req.Version, req.MemberID, kerr.CoordinatorNotAvailable)
	}
	if sessionTimeout < g.cfg.MinSessionTimeout || sessionTimeout > g.cfg.MaxSessionTimeout {
		return joinError(req.Version, req.MemberID, kerr.InvalidSessionTimeout)
	}
	unknown := req.MemberID == ""
	if !unknown && !g.exists {
		return joinError(req.Version, req.MemberID, kerr.UnknownMemberID)
	}
	if !g.acceptJoiningMember(req.MemberID) {
		if m := g.byID[req.MemberID]; m != nil {
			g.removeMemberAndUpdate(now, m)
		}
		return joinError(req.Version, "", kerr.GroupMaxSizeReached)
	}
	var resp *kmsg.JoinGroupResponse
	if unknown {
		g.exists = true
		resp = g.newMemberJoin(now, waiter, client, req, sessionTimeout, rebalanceTimeout)
	} else {
		resp = g.currentMemberJoin(now, waiter, client, req, sessionTimeout, rebalanceTimeout)
	}
	g.maybeCompleteJoin(now)
	return resp
}

// acceptJoiningMember is Kafka's group.max.size admission: members already
// in the rebalance are always accepted, others up to the limit.
func (g *Group) acceptJoiningMember(memberID string) bool {
	m := g.byID[memberID]
	switch g.state {
	case PreparingRebalance:
		// Counting the members that rejoined (not all members) lets the
		// last ones to rejoin be kicked out if the limit was lowered.
		if m != nil && m.joinWaiter != 0 {
			return true
		}
		awaiting := 0
		for _, o := range g.members {
			if o.joinWaiter != 0 {
				awaiting++
			}
		}
		return awaiting < g.cfg.MaxMembers
	case CompletingRebalance, Stable:
		return m != nil || len(g.members) < g.cfg.MaxMembers
	}
	return true
}

// supportsProtocols: an empty group takes any non-empty protocol type and
// list; otherwise the type must match and one protocol must be supported by
// every member.
func (g *Group) supportsProtocols(protocolType string, protocols []kmsg.JoinGroupRequestProtocol) bool {
	if len(g.members) == 0 {
		return protocolType != "" && len(protocols) > 0
	}
	if protocolType != g.protocolType {
		return false
	}
	candidates := g.candidateProtocols()
	for _, p := range protocols {
		if candidates[p.Name] {
			return true
		}
	}
	return false
}

// candidateProtocols are the protocols every member supports.
func (g *Group) candidateProtocols() map[string]bool {
	counts := map[string]int{}
	for _, m := range g.members {
		seen := map[string]bool{}
		for _, p := range m.protocols {
			if !seen[p.Name] {
				seen[p.Name] = true
				counts[p.Name]++
			}
		}
	}
	out := map[string]bool{}
	for name, n := range counts {
		if n == len(g.members) {
			out[name] = true
		}
	}
	return out
}

// selectProtocol is Kafka's vote: each member votes for its most preferred
// candidate; the most votes wins (ties go to the first member's preference).
func (g *Group) selectProtocol() string {
	candidates := g.candidateProtocols()
	votes := map[string]int{}
	for _, m := range g.members {
		for _, p := range m.protocols {
			if candidates[p.Name] {
				votes[p.Name]++
				break
			}
		}
	}
	best, bestVotes := "", -1
	if len(g.members) > 0 {
		for _, p := range g.members[0].protocols {
			if candidates[p.Name] && votes[p.Name] > bestVotes {
				best, bestVotes = p.Name, votes[p.Name]
			}
		}
	}
	return best
}

func (g *Group) newMemberJoin(now time.Time, waiter WaiterID, client ClientInfo, req *kmsg.JoinGroupRequest, sessionTimeout, rebalanceTimeout time.Duration) *kmsg.JoinGroupResponse {
	if !g.supportsProtocols(req.ProtocolType, req.Protocols) {
		return joinError(req.Version, "", kerr.InconsistentGroupProtocol)
	}
	if req.InstanceID != nil {
		return g.staticMemberJoin(now, waiter, client, req, sessionTimeout, rebalanceTimeout)
	}
	id := g.cfg.NewMemberID(client.ID)
	if req.Version >= 4 {
		if len(g.pending) >= g.cfg.MaxMembers {
			// Bound the ids handed out and not yet used.
			return joinError(req.Version, "", kerr.GroupMaxSizeReached)
		}
		// KIP-394: hand out the id; the member joins again with it.
		g.pending[id] = now.Add(sessionTimeout)
		return joinError(req.Version, id, kerr.MemberIDRequired)
	}
	g.addMemberAndRebalance(now, waiter, id, client, req, sessionTimeout, rebalanceTimeout)
	return nil
}

func (g *Group) currentMemberJoin(now time.Time, waiter WaiterID, client ClientInfo, req *kmsg.JoinGroupRequest, sessionTimeout, rebalanceTimeout time.Duration) *kmsg.JoinGroupResponse {
	if !g.supportsProtocols(req.ProtocolType, req.Protocols) {
		return joinError(req.Version, req.MemberID, kerr.InconsistentGroupProtocol)
	}
	if _, ok := g.pending[req.MemberID]; ok {
		if req.InstanceID != nil {
			// Static members never get MEMBER_ID_REQUIRED.
			return joinError(req.Version, req.MemberID, kerr.UnknownMemberID)
		}
		g.addMemberAndRebalance(now, waiter, req.MemberID, client, req, sessionTimeout, rebalanceTimeout)
		return nil
	}
	if err := g.validateMember(req.MemberID, req.InstanceID); err != nil {
		return joinError(req.Version, req.MemberID, err)
	}
	m := g.byID[req.MemberID]
	switch g.state {
	case PreparingRebalance:
		g.updateMemberAndRebalance(now, waiter, m, client, req, sessionTimeout, rebalanceTimeout)
		return nil
	case CompletingRebalance:
		if m.matches(req.Protocols) {
			// It lost the join response: answer it again.
			return g.joinResponse(req.Version, m)
		}
		g.updateMemberAndRebalance(now, waiter, m, client, req, sessionTimeout, rebalanceTimeout)
		return nil
	case Stable:
		if m.id == g.leader || !m.matches(req.Protocols) {
			// The leader rejoining, or new metadata (a changed
			// subscription): rebalance.
			g.updateMemberAndRebalance(now, waiter, m, client, req, sessionTimeout, rebalanceTimeout)
			return nil
		}
		m.sessionDeadline = now.Add(m.sessionTimeout)
		return g.joinResponse(req.Version, m)
	}
	return joinError(req.Version, req.MemberID, kerr.UnknownMemberID)
}

// staticMemberJoin: a member with a group.instance.id and no member id
// (KIP-345). A known instance takes over its old member id's place (the old
// id is fenced) without a rebalance when the group is stable and the selected
// protocol does not change.
func (g *Group) staticMemberJoin(now time.Time, waiter WaiterID, client ClientInfo, req *kmsg.JoinGroupRequest, sessionTimeout, rebalanceTimeout time.Duration) *kmsg.JoinGroupResponse {
	instance := *req.InstanceID
	newID := g.cfg.NewMemberID(instance)
	oldID, known := g.static[instance]
	if !known {
		g.addMemberAndRebalance(now, waiter, newID, client, req, sessionTimeout, rebalanceTimeout)
		return nil
	}
	m := g.byID[oldID]
	g.answerWaiters(m, kerr.FencedInstanceID)
	delete(g.byID, oldID)
	m.id = newID
	g.byID[newID] = m
	g.static[instance] = newID
	if g.leader == oldID {
		g.leader = newID
	}
	if _, ok := g.pendingSync[oldID]; ok {
		delete(g.pendingSync, oldID)
		g.pendingSync[newID] = struct{}{}
	}
	g.note("static member %s replaced member %s with %s", instance, oldID, newID)
	g.updateMember(m, client, req, sessionTimeout, rebalanceTimeout)
	switch g.state {
	case Stable:
		if g.selectProtocol() == g.protocol {
			m.sessionDeadline = now.Add(m.sessionTimeout)
			resp := g.joinResponse(req.Version, m)
			// KIP-814: the leader need not assign again (v9+); older
			// leaders sync an assignment that Stable ignores.
			resp.SkipAssignment = m.id == g.leader
			return resp
		}
		m.joinWaiter, m.joinVersion = waiter, req.Version
		g.maybePrepareRebalance(now, "static member changed the selected protocol")
		return nil
	case CompletingRebalance:
		m.joinWaiter, m.joinVersion = waiter, req.Version
		g.prepareRebalance(now, "static member rejoined during CompletingRebalance")
		return nil
	default: // PreparingRebalance: it just joins this rebalance.
		m.joinWaiter, m.joinVersion = waiter, req.Version
		return nil
	}
}

func (g *Group) addMemberAndRebalance(now time.Time, waiter WaiterID, id string, client ClientInfo, req *kmsg.JoinGroupRequest, sessionTimeout, rebalanceTimeout time.Duration) {
	m := &member{
		id:               id,
		instanceID:       req.InstanceID,
		client:           client,
		protocolType:     req.ProtocolType,
		protocols:        req.Protocols,
		sessionTimeout:   sessionTimeout,
		rebalanceTimeout: rebalanceTimeout,
		joinWaiter:       waiter,
		joinVersion:      req.Version,
		sessionDeadline:  now.Add(sessionTimeout),
	}
	if len(g.members) == 0 {
		g.protocolType = req.ProtocolType
	}
	g.members = append(g.members, m)
	g.byID[id] = m
	if m.instanceID != nil {
		g.static[*m.instanceID] = id
	}
	if g.leader == "" {
		g.leader = id
	}
	delete(g.pending, id)
	if g.state == PreparingRebalance && g.generation == 0 {
		g.newMemberAdded = true
	}
	g.note("member %s joined", id)
	g.maybePrepareRebalance(now, "member "+id+" joined")
}

func (g *Group) updateMember(m *member, client ClientInfo, req *kmsg.JoinGroupRequest, sessionTimeout, rebalanceTimeout time.Duration) {
	m.client = client
	m.protocols = req.Protocols
	m.sessionTimeout = sessionTimeout
	m.rebalanceTimeout = rebalanceTimeout
}

func (g *Group) updateMemberAndRebalance(now time.Time, waiter WaiterID, m *member, client ClientInfo, req *kmsg.JoinGroupRequest, sessionTimeout, rebalanceTimeout time.Duration) {
	if m.joinWaiter != 0 {
		// A second join while the first is still blocked: the first
		// will never be answered otherwise.
		g.deliveries = append(g.deliveries, Delivery{Waiter: m.joinWaiter, Join: joinError(m.joinVersion, m.id, kerr.RebalanceInProgress)})
	}
	g.updateMember(m, client, req, sessionTimeout, rebalanceTimeout)
	m.joinWaiter, m.joinVersion = waiter, req.Version
	g.maybePrepareRebalance(now, "member "+m.id+" rejoined")
}

func (g *Group) maybePrepareRebalance(now time.Time, reason string) {
	switch g.state {
	case Empty, Stable, CompletingRebalance:
		g.prepareRebalance(now, reason)
	}
}

// prepareRebalance moves to PreparingRebalance: members must rejoin within
// the rebalance timeout. Members blocked in SyncGroup learn of it now.
func (g *Group) prepareRebalance(now time.Time, reason string) {
	if g.state == CompletingRebalance {
		for _, m := range g.members {
			m.assignment = nil
			if m.syncWaiter != 0 {
				g.deliveries = append(g.deliveries, Delivery{Waiter: m.syncWaiter, Sync: syncError(m.syncVersion, kerr.RebalanceInProgress)})
				m.syncWaiter = 0
				// Its session was not counting while it waited.
				m.sessionDeadline = now.Add(m.sessionTimeout)
			}
		}
	}
	clear(g.pendingSync)
	rebalanceTimeout := g.rebalanceTimeout()
	if g.state == Empty && g.cfg.InitialRebalanceDelay > 0 {
		delay := min(g.cfg.InitialRebalanceDelay, rebalanceTimeout)
		g.initialDelay = true
		g.initialRemaining = max(rebalanceTimeout-delay, 0)
		g.newMemberAdded = false
		g.joinDeadline = now.Add(delay)
	} else {
		g.initialDelay = false
		g.joinDeadline = now.Add(rebalanceTimeout)
	}
	g.note("preparing rebalance from %s at generation %d: %s", g.state, g.generation, reason)
	g.state = PreparingRebalance
	g.emptySince = time.Time{}
	g.maybeCompleteJoin(now)
}

// maybeCompleteJoin completes the join phase once every member has rejoined
// and no handed-out member id is outstanding (never during the initial delay).
func (g *Group) maybeCompleteJoin(now time.Time) {
	if g.state != PreparingRebalance || g.initialDelay || len(g.pending) > 0 {
		return
	}
	for _, m := range g.members {
		if m.joinWaiter == 0 {
			return
		}
	}
	g.completeJoin(now)
}

// completeJoin ends the join phase: dynamic members that did not rejoin are
// removed, the generation advances and every joined member is answered (the
// leader with all members' metadata).
func (g *Group) completeJoin(now time.Time) {
	for _, m := range append([]*member(nil), g.members...) {
		if m.joinWaiter == 0 && !m.isStatic() {
			g.note("member %s did not rejoin in time", m.id)
			g.removeMember(m)
		}
	}
	if !g.electJoinedLeader() && len(g.members) > 0 {
		// Only static members that have not rejoined remain: wait for them.
		g.initialDelay = false
		g.joinDeadline = now.Add(g.rebalanceTimeout())
		return
	}
	g.generation++
	g.initialDelay = false
	if len(g.members) == 0 {
		g.protocol = ""
		g.subscribed, g.subscribedKnown = nil, false
		g.state = Empty
		g.emptySince = now
		g.note("group is empty at generation %d", g.generation)
		return
	}
	g.protocol = g.selectProtocol()
	g.computeSubscribed()
	g.state = CompletingRebalance
	g.note("generation %d: %d members, protocol %s, leader %s", g.generation, len(g.members), g.protocol, g.leader)
	for _, m := range g.members {
		if m.joinWaiter != 0 {
			g.deliveries = append(g.deliveries, Delivery{Waiter: m.joinWaiter, Join: g.joinResponse(m.joinVersion, m)})
			m.joinWaiter = 0
		}
		m.sessionDeadline = now.Add(m.sessionTimeout)
		g.pendingSync[m.id] = struct{}{}
	}
	g.syncDeadline = now.Add(g.rebalanceTimeout())
}

// electJoinedLeader keeps the leader if it rejoined, else picks the first
// member that did; false when none did.
func (g *Group) electJoinedLeader() bool {
	if g.leader == "" {
		return false
	}
	if l := g.byID[g.leader]; l != nil && l.joinWaiter != 0 {
		return true
	}
	for _, m := range g.members {
		if m.joinWaiter != 0 {
			g.leader = m.id
			return true
		}
	}
	return false
}

// computeSubscribed decodes the consumer protocol metadata of every member
// for the selected protocol; OffsetDelete refuses topics in it.
func (g *Group) computeSubscribed() {
	g.subscribed, g.subscribedKnown = nil, false
	if g.protocolType != "consumer" {
		return
	}
	topics := map[string]bool{}
	for _, m := range g.members {
		var md kmsg.ConsumerMemberMetadata
		if err := md.ReadFrom(m.metadata(g.protocol)); err != nil {
			return
		}
		for _, t := range md.Topics {
			topics[t] = true
		}
	}
	g.subscribed, g.subscribedKnown = topics, true
}

// removeMember drops m, answering its blocked calls with UNKNOWN_MEMBER_ID.
func (g *Group) removeMember(m *member) {
	g.answerWaiters(m, kerr.UnknownMemberID)
	delete(g.byID, m.id)
	if m.instanceID != nil && g.static[*m.instanceID] == m.id {
		delete(g.static, *m.instanceID)
	}
	delete(g.pendingSync, m.id)
	for i, o := range g.members {
		if o == m {
			g.members = append(g.members[:i], g.members[i+1:]...)
			break
		}
	}
	if g.leader == m.id {
		g.leader = ""
		if len(g.members) > 0 {
			g.leader = g.members[0].id
		}
	}
}

// removeMemberAndUpdate drops m and rebalances (or completes the pending join).
func (g *Group) removeMemberAndUpdate(now time.Time, m *member) {
	g.removeMember(m)
	switch g.state {
	case Stable, CompletingRebalance:
		g.maybePrepareRebalance(now, "member "+m.id+" left")
	case PreparingRebalance:
		g.maybeCompleteJoin(now)
	}
}

// Sync handles SyncGroup. It returns the response, or nil when the caller
// must wait for the leader's assignment (a Delivery to waiter).
func (g *Group) Sync(now time.Time, waiter WaiterID, req *kmsg.SyncGroupRequest) *kmsg.SyncGroupResponse {
	if waiter == 0 {
		panic("group: waiter id 0")
	}
	if invariants.Enabled {
		defer g.checkInvariants()
	}
	if !g.exists {
		return syncError(req.Version, kerr.UnknownMemberID)
	}
	if g.state == Dead {
		return syncError(req.Version, kerr.CoordinatorNotAvailable)
	}
	if err := g.validateMember(req.MemberID, req.InstanceID); err != nil {
		return syncError(req.Version, err)
	}
	if req.Generation != g.generation {
		return syncError(req.Version, kerr.IllegalGeneration)
	}
	if req.Version >= 5 && ((req.ProtocolType != nil && *req.ProtocolType != g.protocolType) || (req.Protocol != nil && *req.Protocol != g.protocol)) {
		return syncError(req.Version, kerr.InconsistentGroupProtocol)
	}
	m := g.byID[req.MemberID]
	switch g.state {
	case PreparingRebalance:
		return syncError(req.Version, kerr.RebalanceInProgress)
	case CompletingRebalance:
		if m.syncWaiter != 0 {
			g.deliveries = append(g.deliveries, Delivery{Waiter: m.syncWaiter, Sync: syncError(m.syncVersion, kerr.RebalanceInProgress)})
		}
		m.syncWaiter, m.syncVersion = waiter, req.Version
		delete(g.pendingSync, m.id)
		if m.id == g.leader {
			assignments := make(map[string][]byte, len(req.GroupAssignment))
			for _, a := range req.GroupAssignment {
				assignments[a.MemberID] = a.MemberAssignment
			}
			for _, o := range g.members {
				o.assignment = assignments[o.id]
				if o.assignment == nil {
					o.assignment = []byte{}
				}
				if o.syncWaiter != 0 {
					g.deliveries = append(g.deliveries, Delivery{Waiter: o.syncWaiter, Sync: g.syncResponse(o.syncVersion, o)})
					o.syncWaiter = 0
					o.sessionDeadline = now.Add(o.sessionTimeout)
				}
			}
			g.state = Stable
			g.note("generation %d stable", g.generation)
		}
		return nil
	case Stable:
		delete(g.pendingSync, m.id)
		m.sessionDeadline = now.Add(m.sessionTimeout)
		return g.syncResponse(req.Version, m)
	}
	return syncError(req.Version, kerr.UnknownMemberID)
}

func (g *Group) syncResponse(version int16, m *member) *kmsg.SyncGroupResponse {
	r := kmsg.NewPtrSyncGroupResponse()
	r.Version = version
	protocolType, protocol := g.protocolType, g.protocol
	r.ProtocolType = &protocolType
	r.Protocol = &protocol
	r.MemberAssignment = m.assignment
	return r
}

// Heartbeat handles Heartbeat: REBALANCE_IN_PROGRESS tells a member to rejoin.
func (g *Group) Heartbeat(now time.Time, req *kmsg.HeartbeatRequest) *kmsg.HeartbeatResponse {
	if invariants.Enabled {
		defer g.checkInvariants()
	}
	r := kmsg.NewPtrHeartbeatResponse()
	r.Version = req.Version
	r.ErrorCode = errCode(g.heartbeat(now, req))
	return r
}

func (g *Group) heartbeat(now time.Time, req *kmsg.HeartbeatRequest) *kerr.Error {
	if !g.exists {
		return kerr.UnknownMemberID
	}
	if g.state == Dead {
		return kerr.CoordinatorNotAvailable
	}
	if err := g.validateMember(req.MemberID, req.InstanceID); err != nil {
		return err
	}
	if req.Generation != g.generation {
		return kerr.IllegalGeneration
	}
	m := g.byID[req.MemberID]
	switch g.state {
	case CompletingRebalance, Stable:
		m.sessionDeadline = now.Add(m.sessionTimeout)
		return nil
	case PreparingRebalance:
		m.sessionDeadline = now.Add(m.sessionTimeout)
		return kerr.RebalanceInProgress
	}
	return kerr.UnknownMemberID
}

// Leave handles LeaveGroup: v0–v2 one member (the error at the top level),
// v3+ a batch with an error per member.
func (g *Group) Leave(now time.Time, req *kmsg.LeaveGroupRequest) *kmsg.LeaveGroupResponse {
	if invariants.Enabled {
		defer g.checkInvariants()
	}
	r := kmsg.NewPtrLeaveGroupResponse()
	r.Version = req.Version
	if g.state == Dead {
		r.ErrorCode = kerr.CoordinatorNotAvailable.Code
		return r
	}
	if req.Version < 3 {
		r.ErrorCode = errCode(g.leaveOne(now, req.MemberID, nil, nil))
		return r
	}
	for _, lm := range req.Members {
		err := g.leaveOne(now, lm.MemberID, lm.InstanceID, lm.Reason)
		r.Members = append(r.Members, kmsg.LeaveGroupResponseMember{MemberID: lm.MemberID, InstanceID: lm.InstanceID, ErrorCode: errCode(err)})
	}
	return r
}

func (g *Group) leaveOne(now time.Time, memberID string, instanceID, reason *string) *kerr.Error {
	if !g.exists {
		return kerr.UnknownMemberID
	}
	if reason != nil {
		g.note("member %q (instance %v) leaves: %s", memberID, instanceID, *reason)
	}
	if memberID == "" && instanceID != nil {
		id, ok := g.static[*instanceID]
		if !ok {
			return kerr.UnknownMemberID
		}
		memberID = id
	} else if _, ok := g.pending[memberID]; ok && instanceID == nil {
		delete(g.pending, memberID)
		g.maybeCompleteJoin(now)
		return nil
	} else if err := g.validateMember(memberID, instanceID); err != nil {
		return err
	}
	g.note("member %s left", memberID)
	g.removeMemberAndUpdate(now, g.byID[memberID])
	return nil
}
