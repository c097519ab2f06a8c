package group

import (
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// harness drives one Group with a fake time and records what it delivers.
type harness struct {
	t        *testing.T
	g        *Group
	now      time.Time
	waiter   WaiterID
	ids      int
	answered map[WaiterID]Delivery
}

const (
	session   = 10 * time.Second
	rebalance = 30 * time.Second
)

func newHarness(t *testing.T, delay time.Duration) *harness {
	h := &harness{t: t, now: time.Unix(1_700_000_000, 0), answered: map[WaiterID]Delivery{}}
	h.g = NewGroup("g", GroupConfig{
		InitialRebalanceDelay: delay,
		MinSessionTimeout:     time.Second,
		MaxSessionTimeout:     time.Hour,
		MaxMembers:            100,
		MaxMetadataBytes:      16,
		NewMemberID: func(prefix string) string {
			h.ids++
			return fmt.Sprintf("%s-%d", prefix, h.ids)
		},
	})
	return h
}

func (h *harness) drain() {
	for _, d := range h.g.TakeDeliveries() {
		if _, dup := h.answered[d.Waiter]; dup {
			h.t.Fatalf("waiter %d answered twice", d.Waiter)
		}
		h.answered[d.Waiter] = d
	}
	h.g.TakeEvents()
}

func (h *harness) advance(d time.Duration) {
	h.t.Helper()
	end := h.now.Add(d)
	// Step through every deadline on the way, as the shell's timer would.
	for {
		next, ok := h.g.NextDeadline()
		if !ok || next.After(end) {
			break
		}
		if next.After(h.now) {
			h.now = next
		}
		h.g.Tick(h.now)
		h.drain()
	}
	h.now = end
	h.g.Tick(h.now)
	h.drain()
}

func consumerMetadata(topics ...string) []byte {
	md := kmsg.NewConsumerMemberMetadata()
	md.Topics = topics
	return md.AppendTo(nil)
}

func joinReq(memberID string, instance *string, protocols ...string) *kmsg.JoinGroupRequest {
	req := kmsg.NewPtrJoinGroupRequest()
	req.Version = 9
	req.Group = "g"
	req.MemberID = memberID
	req.InstanceID = instance
	req.SessionTimeoutMillis = int32(session / time.Millisecond)
	req.RebalanceTimeoutMillis = int32(rebalance / time.Millisecond)
	req.ProtocolType = "consumer"
	if len(protocols) == 0 {
		protocols = []string{"range"}
	}
	for _, p := range protocols {
		req.Protocols = append(req.Protocols, kmsg.JoinGroupRequestProtocol{Name: p, Metadata: consumerMetadata("t1")})
	}
	return req
}

// join sends a JoinGroup; it returns the waiter and the immediate answer (nil if blocked).
func (h *harness) join(req *kmsg.JoinGroupRequest, client string) (WaiterID, *kmsg.JoinGroupResponse) {
	h.waiter++
	w := h.waiter
	resp := h.g.Join(h.now, w, ClientInfo{ID: client, Host: "/10.0.0.1"}, req)
	h.drain()
	return w, resp
}

// newMember does the KIP-394 dance and returns the member id, blocked in its join.
func (h *harness) newMember(client string) (string, WaiterID) {
	h.t.Helper()
	_, resp := h.join(joinReq("", nil), client)
	if resp == nil || resp.ErrorCode != kerr.MemberIDRequired.Code || resp.MemberID == "" {
		h.t.Fatalf("first join: want MEMBER_ID_REQUIRED with an id, got %+v", resp)
	}
	id := resp.MemberID
	w, resp := h.join(joinReq(id, nil), client)
	if resp != nil {
		h.t.Fatalf("second join answered at once: %+v", resp)
	}
	return id, w
}

func (h *harness) joined(w WaiterID) *kmsg.JoinGroupResponse {
	h.t.Helper()
	d, ok := h.answered[w]
	if !ok || d.Join == nil {
		h.t.Fatalf("waiter %d: no join answer", w)
	}
	return d.Join
}

func (h *harness) synced(w WaiterID) *kmsg.SyncGroupResponse {
	h.t.Helper()
	d, ok := h.answered[w]
	if !ok || d.Sync == nil {
		h.t.Fatalf("waiter %d: no sync answer", w)
	}
	return d.Sync
}

func (h *harness) sync(memberID string, generation int32, assignments map[string]string) (WaiterID, *kmsg.SyncGroupResponse) {
	req := kmsg.NewPtrSyncGroupRequest()
	req.Version = 5
	req.Group = "g"
	req.MemberID = memberID
	req.Generation = generation
	for id, a := range assignments {
		req.GroupAssignment = append(req.GroupAssignment, kmsg.SyncGroupRequestGroupAssignment{MemberID: id, MemberAssignment: []byte(a)})
	}
	h.waiter++
	w := h.waiter
	resp := h.g.Sync(h.now, w, req)
	h.drain()
	return w, resp
}

func (h *harness) heartbeat(memberID string, generation int32) int16 {
	req := kmsg.NewPtrHeartbeatRequest()
	req.Version = 4
	req.Group = "g"
	req.MemberID = memberID
	req.Generation = generation
	resp := h.g.Heartbeat(h.now, req)
	h.drain()
	return resp.ErrorCode
}

func (h *harness) leave(memberIDs ...string) *kmsg.LeaveGroupResponse {
	req := kmsg.NewPtrLeaveGroupRequest()
	req.Version = 5
	req.Group = "g"
	for _, id := range memberIDs {
		req.Members = append(req.Members, kmsg.LeaveGroupRequestMember{MemberID: id})
	}
	resp := h.g.Leave(h.now, req)
	h.drain()
	return resp
}

func (h *harness) commit(memberID string, generation int32, offset int64) *kmsg.OffsetCommitResponse {
	req := kmsg.NewPtrOffsetCommitRequest()
	req.Version = 9
	req.Group = "g"
	req.MemberID = memberID
	req.Generation = generation
	p := kmsg.NewOffsetCommitRequestTopicPartition()
	p.Partition, p.Offset = 0, offset
	req.Topics = []kmsg.OffsetCommitRequestTopic{{Topic: "t1", Partitions: []kmsg.OffsetCommitRequestTopicPartition{p}}}
	resp, w := h.g.ValidateCommit(h.now, req)
	if w != nil {
		h.g.ApplyWrite(w) // durable at once in these tests
	}
	h.drain()
	return resp
}

func wantCode(t *testing.T, what string, got int16, want *kerr.Error) {
	t.Helper()
	if got != errCode(want) {
		t.Fatalf("%s: error %v, want %v", what, kerr.ErrorForCode(got), want)
	}
}

func (h *harness) wantState(s State, generation int32) {
	h.t.Helper()
	if h.g.State() != s || h.g.Generation() != generation {
		h.t.Fatalf("group %s gen %d, want %s gen %d", h.g.State(), h.g.Generation(), s, generation)
	}
}

// stableThree brings three members (a, b, c in join order) to Stable at generation 1.
func stableThree(t *testing.T) (h *harness, a, b, c string) {
	h = newHarness(t, 3*time.Second)
	a, wa := h.newMember("c")
	h.wantState(PreparingRebalance, 0)
	b, wb := h.newMember("c")
	c, wc := h.newMember("c")
	// The initial delay (3 s) is extended once because members arrived during it.
	h.advance(3 * time.Second)
	h.wantState(PreparingRebalance, 0)
	h.advance(3 * time.Second)
	h.wantState(CompletingRebalance, 1)
	ra, rb, rc := h.joined(wa), h.joined(wb), h.joined(wc)
	if ra.LeaderID != a || ra.Generation != 1 || len(ra.Members) != 3 || *ra.Protocol != "range" {
		t.Fatalf("leader join response: %+v", ra)
	}
	if len(rb.Members) != 0 || len(rc.Members) != 0 || rb.LeaderID != a {
		t.Fatalf("followers must not get members: %+v %+v", rb, rc)
	}
	// A follower syncs before the leader: it waits.
	wsb, resp := h.sync(b, 1, nil)
	if resp != nil {
		t.Fatalf("follower sync answered before the leader synced: %+v", resp)
	}
	wsa, resp := h.sync(a, 1, map[string]string{a: "A", b: "B", c: "C"})
	if resp != nil {
		t.Fatalf("leader sync answered directly, want delivery")
	}
	h.wantState(Stable, 1)
	if got := string(h.synced(wsb).MemberAssignment); got != "B" {
		t.Fatalf("b's assignment %q", got)
	}
	if got := string(h.synced(wsa).MemberAssignment); got != "A" {
		t.Fatalf("a's assignment %q", got)
	}
	_, resp = h.sync(c, 1, nil) // late follower in Stable: answered at once
	if resp == nil || string(resp.MemberAssignment) != "C" {
		t.Fatalf("late sync: %+v", resp)
	}
	return h, a, b, c
}

func TestJoinThreeMembersAndSync(t *testing.T) {
	h, a, b, _ := stableThree(t)
	wantCode(t, "heartbeat", h.heartbeat(a, 1), nil)
	wantCode(t, "heartbeat old generation", h.heartbeat(b, 0), kerr.IllegalGeneration)
	wantCode(t, "heartbeat unknown", h.heartbeat("nobody", 1), kerr.UnknownMemberID)
	_, resp := h.sync(a, 0, nil)
	wantCode(t, "sync old generation", resp.ErrorCode, kerr.IllegalGeneration)
}

func TestMemberLeavesAndOthersRejoin(t *testing.T) {
	h, a, b, c := stableThree(t)
	resp := h.leave(c, "nobody")
	wantCode(t, "leave c", resp.Members[0].ErrorCode, nil)
	wantCode(t, "leave unknown", resp.Members[1].ErrorCode, kerr.UnknownMemberID)
	h.wantState(PreparingRebalance, 1)
	// Heartbeats tell the others to rejoin.
	wantCode(t, "heartbeat during rebalance", h.heartbeat(b, 1), kerr.RebalanceInProgress)
	// A commit of the current generation is still accepted while preparing.
	wantCode(t, "commit while preparing", h.commit(a, 1, 5).Topics[0].Partitions[0].ErrorCode, nil)
	wb, _ := h.join(joinReq(b, nil), "c")
	h.wantState(PreparingRebalance, 1)
	wa, _ := h.join(joinReq(a, nil), "c")
	// Everyone rejoined: the join completes at once, no timeout needed.
	h.wantState(CompletingRebalance, 2)
	if r := h.joined(wa); r.LeaderID != a || len(r.Members) != 2 {
		t.Fatalf("leader: %+v", r)
	}
	if r := h.joined(wb); r.Generation != 2 {
		t.Fatalf("follower: %+v", r)
	}
	// Committing before the assignment arrives.
	wantCode(t, "commit while completing", h.commit(b, 2, 6).Topics[0].Partitions[0].ErrorCode, kerr.RebalanceInProgress)
	wantCode(t, "commit old generation", h.commit(b, 1, 6).Topics[0].Partitions[0].ErrorCode, kerr.IllegalGeneration)
}

func TestSessionTimeoutRemovesMember(t *testing.T) {
	h, a, b, c := stableThree(t)
	// a and b heartbeat every 3 s; c is silent.
	for i := 0; i < 3; i++ {
		h.advance(3 * time.Second)
		wantCode(t, "heartbeat a", h.heartbeat(a, 1), nil)
		wantCode(t, "heartbeat b", h.heartbeat(b, 1), nil)
	}
	h.wantState(Stable, 1)
	h.advance(3 * time.Second) // c's 10 s session has run out
	h.wantState(PreparingRebalance, 1)
	wantCode(t, "heartbeat c", h.heartbeat(c, 1), kerr.UnknownMemberID)
	wa, _ := h.join(joinReq(a, nil), "c")
	wb, _ := h.join(joinReq(b, nil), "c")
	h.wantState(CompletingRebalance, 2)
	if len(h.joined(wa).Members) != 2 || h.joined(wb).Generation != 2 {
		t.Fatal("rebalance without c")
	}
}

func TestRebalanceTimeoutRemovesMembersThatDoNotRejoin(t *testing.T) {
	h, a, b, c := stableThree(t)
	// b rejoins with a new subscription: a rebalance; a heartbeats and
	// rejoins, c never does.
	req := joinReq(b, nil)
	req.Protocols[0].Metadata = consumerMetadata("t1", "t2")
	wb, _ := h.join(req, "c")
	h.wantState(PreparingRebalance, 1)
	h.advance(5 * time.Second)
	wantCode(t, "heartbeat a", h.heartbeat(a, 1), kerr.RebalanceInProgress)
	wantCode(t, "heartbeat c", h.heartbeat(c, 1), kerr.RebalanceInProgress)
	wa, _ := h.join(joinReq(a, nil), "c")
	// c is alive (its heartbeats go on) but does not rejoin.
	for elapsed := 5 * time.Second; elapsed < rebalance-5*time.Second; elapsed += 5 * time.Second {
		h.advance(5 * time.Second)
		wantCode(t, "heartbeat c", h.heartbeat(c, 1), kerr.RebalanceInProgress)
	}
	h.advance(5*time.Second - time.Millisecond)
	h.wantState(PreparingRebalance, 1)
	h.advance(time.Millisecond)
	h.wantState(CompletingRebalance, 2)
	if got := h.g.MemberIDs(); len(got) != 2 {
		t.Fatalf("members %v", got)
	}
	if r := h.joined(wa); r.LeaderID != a || len(r.Members) != 2 {
		t.Fatalf("leader response %+v", r)
	}
	_ = wb
	if !h.g.subscribed["t2"] || !h.g.subscribedKnown {
		t.Fatalf("subscriptions %v", h.g.subscribed)
	}
}

func TestLeaderMustSyncInTime(t *testing.T) {
	h := newHarness(t, 0)
	a, wa := h.newMember("c")
	h.wantState(CompletingRebalance, 1)
	h.joined(wa)
	// b joins: a must rejoin.
	_, resp := h.join(joinReq("", nil), "c")
	b := resp.MemberID
	wb, _ := h.join(joinReq(b, nil), "c")
	h.wantState(PreparingRebalance, 1)
	wa, _ = h.join(joinReq(a, nil), "c")
	h.wantState(CompletingRebalance, 2)
	h.joined(wa)
	h.joined(wb)
	wsb, _ := h.sync(b, 2, nil)
	// The leader never syncs: after the rebalance timeout it is removed,
	// the waiting follower is told to rejoin.
	// a is alive (it heartbeats), it just does not sync.
	for i := 0; i < 6; i++ {
		wantCode(t, "heartbeat a", h.heartbeat(a, 2), nil)
		h.advance(5 * time.Second)
	}
	wantCode(t, "follower sync", h.synced(wsb).ErrorCode, kerr.RebalanceInProgress)
	h.wantState(PreparingRebalance, 2)
	if got := h.g.MemberIDs(); len(got) != 1 || got[0] != b {
		t.Fatalf("members %v", got)
	}
}

func TestStaticMemberRejoinsWithoutRebalance(t *testing.T) {
	h := newHarness(t, 0)
	ia, ib := "instance-a", "instance-b"
	wa, resp := h.join(joinReq("", &ia), "c")
	if resp != nil {
		t.Fatalf("static members get no MEMBER_ID_REQUIRED: %+v", resp)
	}
	a := h.joined(wa).MemberID
	h.wantState(CompletingRebalance, 1)
	wb, _ := h.join(joinReq("", &ib), "c")
	wa, _ = h.join(joinReq(a, &ia), "c")
	h.wantState(CompletingRebalance, 2)
	b := h.joined(wb).MemberID
	h.sync(a, 2, map[string]string{a: "A", b: "B"})
	h.wantState(Stable, 2)

	// b restarts: same instance id, no member id.
	wb2, resp := h.join(joinReq("", &ib), "c")
	if resp == nil {
		t.Fatal("static rejoin in Stable should be answered at once")
	}
	wantCode(t, "static rejoin", resp.ErrorCode, nil)
	b2 := resp.MemberID
	if b2 == b || resp.Generation != 2 || resp.LeaderID != a {
		t.Fatalf("static rejoin: %+v", resp)
	}
	_ = wb2
	h.wantState(Stable, 2)
	// The old incarnation is fenced.
	req := kmsg.NewPtrHeartbeatRequest()
	req.Version, req.Group, req.MemberID, req.Generation, req.InstanceID = 4, "g", b, 2, &ib
	wantCode(t, "old incarnation heartbeat", h.g.Heartbeat(h.now, req).ErrorCode, kerr.FencedInstanceID)
	wantCode(t, "new incarnation heartbeat", h.heartbeat(b2, 2), nil)
	_, sresp := h.sync(b2, 2, nil)
	if sresp == nil || string(sresp.MemberAssignment) != "B" {
		t.Fatalf("new incarnation keeps the assignment: %+v", sresp)
	}
	// A static leader rejoining is told to skip the assignment.
	_, resp = h.join(joinReq("", &ia), "c")
	if resp == nil || !resp.SkipAssignment || len(resp.Members) != 2 {
		t.Fatalf("static leader rejoin: %+v", resp)
	}
	// Leaving by instance id.
	lreq := kmsg.NewPtrLeaveGroupRequest()
	lreq.Version, lreq.Group = 5, "g"
	lreq.Members = []kmsg.LeaveGroupRequestMember{{InstanceID: &ib}}
	lresp := h.g.Leave(h.now, lreq)
	wantCode(t, "leave by instance", lresp.Members[0].ErrorCode, nil)
	h.wantState(PreparingRebalance, 2)
}

func TestProtocolChecks(t *testing.T) {
	h := newHarness(t, 0)
	wa, _ := h.join(joinReq("", nil), "c")
	_ = wa
	a := fmt.Sprintf("c-%d", h.ids)
	wa, _ = h.join(joinReq(a, nil, "cooperative-sticky", "range"), "c")
	h.wantState(CompletingRebalance, 1)
	if p := *h.joined(wa).Protocol; p != "cooperative-sticky" {
		t.Fatalf("protocol %q", p)
	}
	// Another type is refused.
	req := joinReq("", nil, "range")
	req.ProtocolType = "connect"
	_, resp := h.join(req, "c")
	wantCode(t, "other protocol type", resp.ErrorCode, kerr.InconsistentGroupProtocol)
	// No common protocol is refused.
	_, resp = h.join(joinReq("", nil, "roundrobin"), "c")
	wantCode(t, "no common protocol", resp.ErrorCode, kerr.InconsistentGroupProtocol)
	// Sync v5 with the wrong protocol name.
	sreq := kmsg.NewPtrSyncGroupRequest()
	sreq.Version, sreq.Group, sreq.MemberID, sreq.Generation = 5, "g", a, 1
	other := "range"
	sreq.Protocol = &other
	wantCode(t, "sync protocol", h.g.Sync(h.now, 99, sreq).ErrorCode, kerr.InconsistentGroupProtocol)
	// Session timeout bounds.
	req = joinReq("", nil)
	req.SessionTimeoutMillis = 10
	_, resp = h.join(req, "c")
	wantCode(t, "short session", resp.ErrorCode, kerr.InvalidSessionTimeout)
}

func TestRejoinWhileCompletingAnswersAgain(t *testing.T) {
	h := newHarness(t, 0)
	a, wa := h.newMember("c")
	h.wantState(CompletingRebalance, 1)
	first := h.joined(wa)
	// The member lost the response and joins again with the same metadata.
	_, resp := h.join(joinReq(a, nil), "c")
	if resp == nil || resp.Generation != first.Generation || len(resp.Members) != 1 {
		t.Fatalf("repeated join: %+v", resp)
	}
	h.wantState(CompletingRebalance, 1)
}

func TestCommitRules(t *testing.T) {
	h := newHarness(t, 0)
	// A simple commit creates the group.
	wantCode(t, "simple commit", h.commit("", -1, 10).Topics[0].Partitions[0].ErrorCode, nil)
	if !h.g.Exists() || h.g.State() != Empty {
		t.Fatal("simple commit should create an Empty group")
	}
	a, _ := h.newMember("c")
	h.wantState(CompletingRebalance, 1)
	wantCode(t, "simple commit with members", h.commit("", -1, 11).Topics[0].Partitions[0].ErrorCode, kerr.UnknownMemberID)
	wantCode(t, "completing", h.commit(a, 1, 11).Topics[0].Partitions[0].ErrorCode, kerr.RebalanceInProgress)
	h.sync(a, 1, map[string]string{a: "x"})
	wantCode(t, "wrong generation", h.commit(a, 7, 11).Topics[0].Partitions[0].ErrorCode, kerr.IllegalGeneration)
	wantCode(t, "unknown member", h.commit("x", 1, 11).Topics[0].Partitions[0].ErrorCode, kerr.UnknownMemberID)
	wantCode(t, "member commit", h.commit(a, 1, 12).Topics[0].Partitions[0].ErrorCode, nil)
	if o, _ := h.g.Committed(TopicPartition{"t1", 0}); o.Offset != 12 {
		t.Fatalf("committed %d", o.Offset)
	}
	// Metadata over the limit (16 bytes in this harness).
	req := kmsg.NewPtrOffsetCommitRequest()
	req.Version, req.Group, req.MemberID, req.Generation = 9, "g", a, 1
	long := "0123456789abcdefXYZ"
	p := kmsg.NewOffsetCommitRequestTopicPartition()
	p.Metadata = &long
	req.Topics = []kmsg.OffsetCommitRequestTopic{{Topic: "t1", Partitions: []kmsg.OffsetCommitRequestTopicPartition{p}}}
	resp, w := h.g.ValidateCommit(h.now, req)
	wantCode(t, "metadata too large", resp.Topics[0].Partitions[0].ErrorCode, kerr.OffsetMetadataTooLarge)
	if w != nil {
		t.Fatal("nothing to write")
	}
	// A commit on a group that does not exist with a generation.
	g2 := NewGroup("g2", h.g.cfg)
	resp, _ = g2.ValidateCommit(h.now, req)
	wantCode(t, "no group", resp.Topics[0].Partitions[0].ErrorCode, kerr.IllegalGeneration)
}

func TestOffsetDeleteAndDeleteGroup(t *testing.T) {
	h := newHarness(t, 0)
	a, _ := h.newMember("c")
	h.sync(a, 1, map[string]string{a: "x"})
	h.commit(a, 1, 3)
	req := kmsg.NewPtrOffsetCommitRequest()
	req.Version, req.Group, req.MemberID, req.Generation = 9, "g", a, 1
	req.Topics = []kmsg.OffsetCommitRequestTopic{{Topic: "old", Partitions: []kmsg.OffsetCommitRequestTopicPartition{kmsg.NewOffsetCommitRequestTopicPartition()}}}
	_, w := h.g.ValidateCommit(h.now, req)
	h.g.ApplyWrite(w)

	dreq := kmsg.NewPtrOffsetDeleteRequest()
	dreq.Group = "g"
	dreq.Topics = []kmsg.OffsetDeleteRequestTopic{
		{Topic: "t1", Partitions: []kmsg.OffsetDeleteRequestTopicPartition{{Partition: 0}}},
		{Topic: "old", Partitions: []kmsg.OffsetDeleteRequestTopicPartition{{Partition: 0}}},
	}
	dresp, w := h.g.DeleteOffsets(dreq)
	wantCode(t, "subscribed topic", dresp.Topics[0].Partitions[0].ErrorCode, kerr.GroupSubscribedToTopic)
	wantCode(t, "unsubscribed topic", dresp.Topics[1].Partitions[0].ErrorCode, nil)
	h.g.ApplyWrite(w)
	if _, ok := h.g.Committed(TopicPartition{"old", 0}); ok {
		t.Fatal("old offset should be gone")
	}
	if _, err := h.g.DeleteGroup(); err != kerr.NonEmptyGroup {
		t.Fatalf("delete non-empty group: %v", err)
	}
	h.leave(a)
	h.wantState(Empty, 2)
	w, err := h.g.DeleteGroup()
	if err != nil {
		t.Fatal(err)
	}
	h.g.ApplyWrite(w)
	if h.g.Exists() {
		t.Fatal("deleted group exists")
	}
	if _, err := h.g.DeleteGroup(); err != kerr.GroupIDNotFound {
		t.Fatalf("delete twice: %v", err)
	}
}

// TestDeleteGroupInFlight: between DeleteGroup and the write's outcome the
// group is Dead, so a join cannot slip in before the delete applies; a
// failed delete brings the group back, unless it was unloaded meanwhile.
func TestDeleteGroupInFlight(t *testing.T) {
	emptyWithOffsets := func(t *testing.T) *harness {
		h := newHarness(t, 0)
		wantCode(t, "commit", h.commit("", -1, 7).Topics[0].Partitions[0].ErrorCode, nil)
		h.wantState(Empty, 0)
		return h
	}
	t.Run("applied", func(t *testing.T) {
		h := emptyWithOffsets(t)
		w, err := h.g.DeleteGroup()
		if err != nil {
			t.Fatal(err)
		}
		_, resp := h.join(joinReq("", nil), "c")
		wantCode(t, "join during delete", resp.ErrorCode, kerr.CoordinatorNotAvailable)
		h.g.ApplyWrite(w)
		if h.g.Exists() || len(h.g.MemberIDs()) != 0 {
			t.Fatalf("after delete: exists %v, members %v", h.g.Exists(), h.g.MemberIDs())
		}
		if _, ok := h.g.Committed(TopicPartition{"t1", 0}); ok {
			t.Fatal("offset kept after delete")
		}
	})
	t.Run("aborted", func(t *testing.T) {
		h := emptyWithOffsets(t)
		w, _ := h.g.DeleteGroup()
		h.g.AbortWrite(w)
		h.wantState(Empty, 0)
		if o, ok := h.g.Committed(TopicPartition{"t1", 0}); !ok || o.Offset != 7 {
			t.Fatalf("offset after failed delete: %+v %v", o, ok)
		}
		id, w2 := h.newMember("c")
		h.advance(rebalance)
		if r := h.joined(w2); r.ErrorCode != 0 || r.LeaderID != id {
			t.Fatalf("join after failed delete: %+v", r)
		}
	})
	t.Run("unloaded", func(t *testing.T) {
		h := emptyWithOffsets(t)
		w, _ := h.g.DeleteGroup()
		h.g.Unload()
		h.g.AbortWrite(w)
		if h.g.State() != Dead {
			t.Fatalf("unloaded group revived: %s", h.g.State())
		}
	})
}

func TestPendingMemberExpires(t *testing.T) {
	h := newHarness(t, 0)
	a, _ := h.newMember("c")
	h.sync(a, 1, map[string]string{a: "x"})
	h.wantState(Stable, 1)
	// A new consumer gets an id but never joins with it: the group must not wait forever.
	_, resp := h.join(joinReq("", nil), "c")
	wantCode(t, "first join", resp.ErrorCode, kerr.MemberIDRequired)
	h.wantState(Stable, 1)
	h.advance(session)
	// a kept heartbeating? No: it was silent too, so it is gone as well.
	if h.g.State() != Empty {
		t.Fatalf("state %s", h.g.State())
	}
}

func TestOldVersionsJoinWithoutMemberIDRequired(t *testing.T) {
	h := newHarness(t, 0)
	req := joinReq("", nil)
	req.Version = 3
	w, resp := h.join(req, "c")
	if resp != nil {
		t.Fatalf("v3 join should block, got %+v", resp)
	}
	r := h.joined(w)
	if r.MemberID == "" || r.LeaderID != r.MemberID || r.Generation != 1 {
		t.Fatalf("v3 join: %+v", r)
	}
}

func TestGroupMaxSize(t *testing.T) {
	h := newHarness(t, 0)
	h.g.cfg.MaxMembers = 2
	a, _ := h.newMember("c")
	h.sync(a, 1, map[string]string{a: "x"})
	_, resp := h.join(joinReq("", nil), "c")
	b := resp.MemberID
	wb, _ := h.join(joinReq(b, nil), "c")
	h.join(joinReq(a, nil), "c")
	h.wantState(CompletingRebalance, 2)
	h.joined(wb)
	// A third member is refused once the group is full (before it gets an id).
	_, resp = h.join(joinReq("", nil), "c")
	wantCode(t, "third joins", resp.ErrorCode, kerr.GroupMaxSizeReached)
	h.wantState(CompletingRebalance, 2)
}

func TestLeaveV0AndStaticRejoinWhileCompleting(t *testing.T) {
	h := newHarness(t, 0)
	ia := "ia"
	wa, _ := h.join(joinReq("", &ia), "c")
	a := h.joined(wa).MemberID
	h.wantState(CompletingRebalance, 1)
	// The static member restarts before syncing: its old id is fenced and
	// the group rebalances with the new one.
	wa2, resp := h.join(joinReq("", &ia), "c")
	if resp != nil {
		t.Fatalf("rejoin while completing should block: %+v", resp)
	}
	h.wantState(CompletingRebalance, 2)
	a2 := h.joined(wa2).MemberID
	if a2 == a {
		t.Fatal("static rejoin kept the old member id")
	}
	req := kmsg.NewPtrLeaveGroupRequest()
	req.Version, req.Group, req.MemberID = 0, "g", a
	wantCode(t, "leave old id v0", h.g.Leave(h.now, req).ErrorCode, kerr.UnknownMemberID)
	req.MemberID = a2
	wantCode(t, "leave v0", h.g.Leave(h.now, req).ErrorCode, nil)
	h.wantState(Empty, 3)
}

func TestDescribeAndListing(t *testing.T) {
	h := newHarness(t, 0)
	if d := h.g.Describe(6, false); d.ErrorCode != kerr.GroupIDNotFound.Code || d.State != "Dead" {
		t.Fatalf("describe v6 of no group: %+v", d)
	}
	a, _ := h.newMember("cli")
	d := h.g.Describe(5, true)
	if d.State != "CompletingRebalance" || d.Protocol != "" || len(d.Members) != 1 || len(d.Members[0].ProtocolMetadata) != 0 || d.Members[0].ClientID != "cli" {
		t.Fatalf("describe while completing: %+v", d)
	}
	h.sync(a, 1, map[string]string{a: "x"})
	d = h.g.Describe(5, false)
	if d.State != "Stable" || d.Protocol != "range" || string(d.Members[0].MemberAssignment) != "x" || len(d.Members[0].ProtocolMetadata) == 0 {
		t.Fatalf("describe stable: %+v", d)
	}
	if l := h.g.Listing(); l.GroupState != "Stable" || l.ProtocolType != "consumer" || l.GroupType != "classic" {
		t.Fatalf("listing: %+v", l)
	}
}

func TestOffsetsEncoding(t *testing.T) {
	in := map[TopicPartition]Offset{
		{"a", 1}: {Offset: 5, LeaderEpoch: 2, Metadata: "m", CommitMillis: 7, ExpireMillis: -1},
		{"b", 0}: {Offset: 9, LeaderEpoch: -1, CommitMillis: 8, ExpireMillis: 100},
	}
	value, err := encodeOffsets(in, "consumer")
	if err != nil {
		t.Fatal(err)
	}
	out, protocolType, err := decodeOffsets(value)
	if err != nil {
		t.Fatal(err)
	}
	if protocolType != "consumer" || len(out) != 2 || out[TopicPartition{"a", 1}] != in[TopicPartition{"a", 1}] || out[TopicPartition{"b", 0}] != in[TopicPartition{"b", 0}] {
		t.Fatalf("round trip: %v %q", out, protocolType)
	}
	if _, _, err := decodeOffsets([]byte(`{"format":2}`)); err == nil {
		t.Fatal("unknown format accepted")
	}
}

func TestExpireOffsets(t *testing.T) {
	const retention = time.Hour
	// A standalone group: each offset expires retention after its commit.
	h := newHarness(t, 0)
	h.commit("", -1, 1)
	if w := h.g.ExpireOffsets(h.now.Add(retention-time.Millisecond), retention); w != nil {
		t.Fatalf("expired early: %+v", w)
	}
	w := h.g.ExpireOffsets(h.now.Add(retention), retention)
	if w == nil || len(w.Delete) != 1 {
		t.Fatalf("standalone expiry: %+v", w)
	}
	h.g.ApplyWrite(w)
	if h.g.Exists() {
		t.Fatal("a standalone group without offsets should be gone")
	}

	// A consumer group: while Stable only unsubscribed topics expire; once
	// Empty, everything expires retention after it emptied.
	h = newHarness(t, 0)
	a, _ := h.newMember("c")
	h.sync(a, 1, map[string]string{a: "x"})
	h.commit(a, 1, 5) // t1, subscribed
	req := kmsg.NewPtrOffsetCommitRequest()
	req.Version, req.Group, req.MemberID, req.Generation = 9, "g", a, 1
	req.Topics = []kmsg.OffsetCommitRequestTopic{{Topic: "old", Partitions: []kmsg.OffsetCommitRequestTopicPartition{kmsg.NewOffsetCommitRequestTopicPartition()}}}
	_, cw := h.g.ValidateCommit(h.now, req)
	h.g.ApplyWrite(cw)
	w = h.g.ExpireOffsets(h.now.Add(retention), retention)
	if w == nil || len(w.Delete) != 1 || w.Delete[0].Topic != "old" {
		t.Fatalf("stable expiry: %+v", w)
	}
	h.g.ApplyWrite(w)
	h.advance(session) // a stops heartbeating: the group empties now
	h.wantState(Empty, 2)
	emptied := h.now
	if w := h.g.ExpireOffsets(emptied.Add(retention-time.Millisecond), retention); w != nil {
		t.Fatalf("expired before retention since empty: %+v", w)
	}
	if w := h.g.ExpireOffsets(emptied.Add(retention), retention); w == nil || len(w.Delete) != 1 {
		t.Fatalf("empty expiry: %+v", w)
	}

	// An explicit retention (OffsetCommit v2–v4) wins.
	h = newHarness(t, 0)
	req = kmsg.NewPtrOffsetCommitRequest()
	req.Version, req.Group, req.RetentionTimeMillis = 2, "g", 1000
	req.Topics = []kmsg.OffsetCommitRequestTopic{{Topic: "t", Partitions: []kmsg.OffsetCommitRequestTopicPartition{kmsg.NewOffsetCommitRequestTopicPartition()}}}
	_, cw = h.g.ValidateCommit(h.now, req)
	h.g.ApplyWrite(cw)
	if w := h.g.ExpireOffsets(h.now.Add(time.Second), retention); w == nil {
		t.Fatal("explicit retention ignored")
	}
}
