package group

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"quire/internal/clock"
	"quire/internal/meta"
)

type env struct {
	t      *testing.T
	clock  *clock.Virtual
	server *meta.MemServer
	owns   atomic.Bool
}

func newEnv(t *testing.T) *env {
	e := &env{t: t, clock: clock.NewVirtual(time.Unix(1_700_000_000, 0))}
	e.server = meta.NewMemServer(meta.MemConfig{Clock: e.clock})
	e.owns.Store(true)
	return e
}

// coordinator starts a Coordinator on its own store client (one broker).
func (e *env) coordinator() *Coordinator {
	e.t.Helper()
	return e.coordinatorOn(func(s meta.Store) meta.Store { return s })
}

// coordinatorOn starts a Coordinator on its own store client seen through
// wrap (a test's hook into the store operations).
func (e *env) coordinatorOn(wrap func(meta.Store) meta.Store) *Coordinator {
	e.t.Helper()
	var ids atomic.Int64
	client := e.server.NewClient()
	c, err := New(Config{
		Store:                 wrap(client),
		Clock:                 e.clock,
		Owns:                  func(group string) bool { return group != "not-mine" && e.owns.Load() },
		InitialRebalanceDelay: 100 * time.Millisecond,
		Logger:                slog.New(slog.NewTextHandler(io.Discard, nil)),
		NewMemberID:           func(prefix string) string { return fmt.Sprintf("%s-%d", prefix, ids.Add(1)) },
	})
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { c.Close(); client.Close() })
	blocked := make(chan struct{}, 1)
	c.blockedHook = func(string) {
		select {
		case blocked <- struct{}{}:
		default:
		}
	}
	testBlocked.Store(c, blocked)
	return c
}

// testBlocked maps each test coordinator to its blocked-call signal.
var testBlocked sync.Map

func (c *Coordinator) blockedEvents() <-chan struct{} {
	ch, _ := testBlocked.Load(c)
	return ch.(chan struct{})
}

// waitBlocked waits until the group has n blocked calls: each call that
// blocks signals the hook, so this waits on events, not on a timer.
func waitBlocked(t *testing.T, c *Coordinator, group string, n int) {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for c.waiting(group) != n {
		select {
		case <-c.blockedEvents():
		case <-timeout:
			t.Fatalf("timed out waiting for %d blocked calls in %s (have %d)", n, group, c.waiting(group))
		}
	}
}

// waiting counts the blocked calls of a group.
func (c *Coordinator) waiting(group string) int {
	c.mu.Lock()
	e := c.groups[group]
	c.mu.Unlock()
	if e == nil {
		return 0
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.waiters)
}

func commitReq(group, memberID string, generation int32, offsets map[int32]int64) *kmsg.OffsetCommitRequest {
	req := kmsg.NewPtrOffsetCommitRequest()
	req.Version = 9
	req.Group = group
	req.MemberID = memberID
	req.Generation = generation
	t := kmsg.NewOffsetCommitRequestTopic()
	t.Topic = "t1"
	for p := int32(0); p < int32(len(offsets)); p++ {
		rp := kmsg.NewOffsetCommitRequestTopicPartition()
		rp.Partition, rp.Offset, rp.LeaderEpoch = p, offsets[p], 3
		md := fmt.Sprintf("md%d", p)
		rp.Metadata = &md
		t.Partitions = append(t.Partitions, rp)
	}
	req.Topics = []kmsg.OffsetCommitRequestTopic{t}
	return req
}

func commitCode(t *testing.T, resp *kmsg.OffsetCommitResponse) int16 {
	t.Helper()
	code := resp.Topics[0].Partitions[0].ErrorCode
	for _, p := range resp.Topics[0].Partitions {
		if p.ErrorCode != code {
			t.Fatalf("partitions disagree: %+v", resp.Topics[0].Partitions)
		}
	}
	return code
}

func fetchAll(t *testing.T, c *Coordinator, group string) map[int32]int64 {
	t.Helper()
	req := kmsg.NewPtrOffsetFetchRequest()
	req.Version = 7
	req.Group = group
	resp := c.OffsetFetch(context.Background(), req)
	wantCode(t, "fetch", resp.ErrorCode, nil)
	out := map[int32]int64{}
	for _, tp := range resp.Topics {
		for _, p := range tp.Partitions {
			out[p.Partition] = p.Offset
		}
	}
	return out
}

func TestOffsetsAreDurable(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	a := e.coordinator()
	resp := a.OffsetCommit(ctx, commitReq("g/1", "", -1, map[int32]int64{0: 5, 1: 7}))
	wantCode(t, "commit", commitCode(t, resp), nil)
	a.Close()

	// Another broker takes the group over and reads what was committed.
	b := e.coordinator()
	req := kmsg.NewPtrOffsetFetchRequest()
	req.Version = 7
	req.Group = "g/1"
	fresp := b.OffsetFetch(ctx, req) // null topics: all of them
	if len(fresp.Topics) != 1 || len(fresp.Topics[0].Partitions) != 2 {
		t.Fatalf("fetch all: %+v", fresp)
	}
	p := fresp.Topics[0].Partitions[1]
	if p.Offset != 7 || p.LeaderEpoch != 3 || *p.Metadata != "md1" {
		t.Fatalf("partition 1: %+v", p)
	}
	// The key is the escaped group name.
	if _, err := e.server.NewClient().Get(ctx, DefaultKeyPrefix+"g%2F1"); err != nil {
		t.Fatalf("stored key: %v", err)
	}
}

func TestStaleCoordinatorLosesCompareAndSwap(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	a, b := e.coordinator(), e.coordinator()
	wantCode(t, "a commits", commitCode(t, a.OffsetCommit(ctx, commitReq("g", "", -1, map[int32]int64{0: 1}))), nil)
	// The group moves to b (a does not know yet).
	wantCode(t, "b commits", commitCode(t, b.OffsetCommit(ctx, commitReq("g", "", -1, map[int32]int64{0: 2}))), nil)
	wantCode(t, "stale a commits", commitCode(t, a.OffsetCommit(ctx, commitReq("g", "", -1, map[int32]int64{0: 3}))), kerr.NotCoordinator)
	// a reloaded: it now reports b's offset, and b's write stands.
	if got := fetchAll(t, a, "g")[0]; got != 2 {
		t.Fatalf("a reads %d after reload, want 2", got)
	}
	if got := fetchAll(t, b, "g")[0]; got != 2 {
		t.Fatalf("b reads %d, want 2", got)
	}
}

func TestCommitFailsWhenStoreIsDown(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	a := e.coordinator()
	wantCode(t, "commit", commitCode(t, a.OffsetCommit(ctx, commitReq("g", "", -1, map[int32]int64{0: 1}))), nil)
	e.server.SetFault(func(op meta.Op, key string) error { return meta.ErrUnavailable })
	wantCode(t, "commit while down", commitCode(t, a.OffsetCommit(ctx, commitReq("g", "", -1, map[int32]int64{0: 2}))), kerr.CoordinatorNotAvailable)
	e.server.SetFault(nil)
	if got := fetchAll(t, a, "g")[0]; got != 1 {
		t.Fatalf("offset %d after failed commit, want 1", got)
	}
	wantCode(t, "commit after", commitCode(t, a.OffsetCommit(ctx, commitReq("g", "", -1, map[int32]int64{0: 3}))), nil)
}

func TestOffsetFetchBatched(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	c := e.coordinator()
	c.OffsetCommit(ctx, commitReq("g1", "", -1, map[int32]int64{0: 10, 1: 11}))
	c.OffsetCommit(ctx, commitReq("g2", "", -1, map[int32]int64{0: 20}))
	req := kmsg.NewPtrOffsetFetchRequest()
	req.Version = 8
	req.Groups = []kmsg.OffsetFetchRequestGroup{
		{Group: "g1"}, // null topics: all
		{Group: "g2", Topics: []kmsg.OffsetFetchRequestGroupTopic{{Topic: "t1", Partitions: []int32{0, 5}}}},
		{Group: "unknown", Topics: []kmsg.OffsetFetchRequestGroupTopic{{Topic: "t1", Partitions: []int32{0}}}},
		{Group: "not-mine"},
	}
	resp := c.OffsetFetch(ctx, req)
	if len(resp.Groups) != 4 {
		t.Fatalf("groups: %+v", resp.Groups)
	}
	g1 := resp.Groups[0]
	if g1.ErrorCode != 0 || len(g1.Topics) != 1 || len(g1.Topics[0].Partitions) != 2 || g1.Topics[0].Partitions[1].Offset != 11 {
		t.Fatalf("g1: %+v", g1)
	}
	g2 := resp.Groups[1].Topics[0].Partitions
	if g2[0].Offset != 20 || g2[1].Offset != -1 || g2[1].LeaderEpoch != -1 {
		t.Fatalf("g2: %+v", g2)
	}
	unknown := resp.Groups[2]
	if unknown.ErrorCode != 0 || unknown.Topics[0].Partitions[0].Offset != -1 {
		t.Fatalf("unknown group: %+v", unknown)
	}
	wantCode(t, "not mine", resp.Groups[3].ErrorCode, kerr.NotCoordinator)
}

// member is a test client of the shell.
type testMember struct {
	t          *testing.T
	c          *Coordinator
	group      string
	id         string
	generation int32
}

// join runs a JoinGroup on a goroutine; the channel yields its answer.
func (m *testMember) join(ctx context.Context) <-chan *kmsg.JoinGroupResponse {
	out := make(chan *kmsg.JoinGroupResponse, 1)
	req := joinReq(m.id, nil)
	req.Group = m.group
	go func() { out <- m.c.JoinGroup(ctx, req) }()
	return out
}

func (m *testMember) heartbeat() int16 {
	req := kmsg.NewPtrHeartbeatRequest()
	req.Version, req.Group, req.MemberID, req.Generation = 4, m.group, m.id, m.generation
	return m.c.Heartbeat(context.Background(), req).ErrorCode
}

func (m *testMember) sync(ctx context.Context, assignments map[string]string) <-chan *kmsg.SyncGroupResponse {
	req := kmsg.NewPtrSyncGroupRequest()
	req.Version, req.Group, req.MemberID, req.Generation = 5, m.group, m.id, m.generation
	for id, a := range assignments {
		req.GroupAssignment = append(req.GroupAssignment, kmsg.SyncGroupRequestGroupAssignment{MemberID: id, MemberAssignment: []byte(a)})
	}
	out := make(chan *kmsg.SyncGroupResponse, 1)
	go func() { out <- m.c.SyncGroup(ctx, req) }()
	return out
}

func receive[T any](t *testing.T, what string, ch <-chan T) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(10 * time.Second):
		t.Fatalf("no answer to %s", what)
		panic("unreachable")
	}
}

// getID does the MEMBER_ID_REQUIRED round.
func (m *testMember) getID(ctx context.Context) {
	m.t.Helper()
	resp := receive(m.t, "first join", m.join(ctx))
	wantCode(m.t, "first join", resp.ErrorCode, kerr.MemberIDRequired)
	m.id = resp.MemberID
}

func describe(t *testing.T, c *Coordinator, group string) kmsg.DescribeGroupsResponseGroup {
	t.Helper()
	req := kmsg.NewPtrDescribeGroupsRequest()
	req.Version = 5
	req.Groups = []string{group}
	return c.DescribeGroups(context.Background(), req).Groups[0]
}

func TestRebalanceThroughTheShell(t *testing.T) {
	e := newEnv(t)
	ctx := WithClient(context.Background(), ClientInfo{ID: "cli", Host: "/127.0.0.1"})
	c := e.coordinator()
	a := &testMember{t: t, c: c, group: "g"}
	a.getID(ctx)
	joinA := a.join(ctx)
	waitBlocked(t, c, "g", 1)
	// The initial rebalance delay runs on the virtual clock.
	e.clock.Advance(100 * time.Millisecond)
	ra := receive(t, "a's join", joinA)
	wantCode(t, "a's join", ra.ErrorCode, nil)
	if ra.LeaderID != a.id || ra.Generation != 1 {
		t.Fatalf("a's join: %+v", ra)
	}
	a.generation = 1
	sa := receive(t, "a's sync", a.sync(ctx, map[string]string{a.id: "all"}))
	if string(sa.MemberAssignment) != "all" {
		t.Fatalf("a's sync: %+v", sa)
	}
	if d := describe(t, c, "g"); d.State != "Stable" || len(d.Members) != 1 || d.Members[0].ClientID != "cli" || string(d.Members[0].MemberAssignment) != "all" {
		t.Fatalf("describe: %+v", d)
	}

	// b arrives: a learns of the rebalance from its heartbeat and rejoins.
	b := &testMember{t: t, c: c, group: "g"}
	b.getID(ctx)
	joinB := b.join(ctx)
	waitBlocked(t, c, "g", 1)
	wantCode(t, "a's heartbeat", a.heartbeat(), kerr.RebalanceInProgress)
	joinA = a.join(ctx)
	ra, rb := receive(t, "a's rejoin", joinA), receive(t, "b's join", joinB)
	if ra.Generation != 2 || len(ra.Members) != 2 || rb.Generation != 2 || rb.LeaderID != a.id {
		t.Fatalf("generation 2: %+v %+v", ra, rb)
	}
	a.generation, b.generation = 2, 2
	syncB := b.sync(ctx, nil)
	waitBlocked(t, c, "g", 1)
	receive(t, "a's sync", a.sync(ctx, map[string]string{a.id: "p0", b.id: "p1"}))
	if got := receive(t, "b's sync", syncB); string(got.MemberAssignment) != "p1" {
		t.Fatalf("b's sync: %+v", got)
	}

	// b goes silent: its session times out and a is told to rejoin.
	for i := 0; i < 4; i++ {
		e.clock.Advance(3 * time.Second)
		a.heartbeat()
	}
	if d := describe(t, c, "g"); d.State != "PreparingRebalance" || len(d.Members) != 1 {
		t.Fatalf("after b's session timeout: %+v", d)
	}
	wantCode(t, "a's heartbeat", a.heartbeat(), kerr.RebalanceInProgress)
	ra = receive(t, "a's rejoin", a.join(ctx))
	if ra.Generation != 3 || len(ra.Members) != 1 {
		t.Fatalf("generation 3: %+v", ra)
	}
}

func TestOwnershipLossAnswersBlockedCalls(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	c := e.coordinator()
	a := &testMember{t: t, c: c, group: "g"}
	a.getID(ctx)
	joinA := a.join(ctx)
	waitBlocked(t, c, "g", 1)
	e.clock.Advance(100 * time.Millisecond)
	receive(t, "a's join", joinA)
	// b joins and waits for a to rejoin (up to the rebalance timeout).
	b := &testMember{t: t, c: c, group: "g"}
	b.getID(ctx)
	joinB := b.join(ctx)
	waitBlocked(t, c, "g", 1)
	// The group moves to another broker.
	e.owns.Store(false)
	e.clock.Advance(DefaultOwnershipCheckPeriod)
	wantCode(t, "blocked join", receive(t, "b's join", joinB).ErrorCode, kerr.NotCoordinator)
	wantCode(t, "heartbeat", a.heartbeat(), kerr.NotCoordinator)
	resp := c.OffsetCommit(ctx, commitReq("g", "", -1, map[int32]int64{0: 1}))
	wantCode(t, "commit", commitCode(t, resp), kerr.NotCoordinator)
}

func TestBlockedJoinEndsWithContext(t *testing.T) {
	e := newEnv(t)
	c := e.coordinator()
	ctx, cancel := context.WithCancel(context.Background())
	a := &testMember{t: t, c: c, group: "g"}
	a.getID(ctx)
	joinA := a.join(ctx)
	waitBlocked(t, c, "g", 1)
	cancel()
	receive(t, "a's join", joinA)
	if n := c.waiting("g"); n != 0 {
		t.Fatalf("%d waiters left", n)
	}
}

func TestListDescribeDeleteGroups(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	old := e.coordinator()
	old.OffsetCommit(ctx, commitReq("stored", "", -1, map[int32]int64{0: 1}))

	c := e.coordinator()
	a := &testMember{t: t, c: c, group: "live"}
	a.getID(ctx)
	joinA := a.join(ctx)
	waitBlocked(t, c, "live", 1)
	e.clock.Advance(100 * time.Millisecond)
	receive(t, "a's join", joinA)
	a.generation = 1
	receive(t, "a's sync", a.sync(ctx, map[string]string{a.id: "x"}))
	wantCode(t, "commit", commitCode(t, c.OffsetCommit(ctx, commitReq("live", a.id, 1, map[int32]int64{0: 4}))), nil)

	lreq := kmsg.NewPtrListGroupsRequest()
	lreq.Version = 5
	lresp := c.ListGroups(ctx, lreq)
	if len(lresp.Groups) != 2 || lresp.Groups[0].Group != "live" || lresp.Groups[0].GroupState != "Stable" ||
		lresp.Groups[1].Group != "stored" || lresp.Groups[1].GroupState != "Empty" || lresp.Groups[1].ProtocolType != "" {
		t.Fatalf("list: %+v", lresp.Groups)
	}
	lreq.StatesFilter = []string{"empty"}
	if lresp := c.ListGroups(ctx, lreq); len(lresp.Groups) != 1 || lresp.Groups[0].Group != "stored" {
		t.Fatalf("list empty: %+v", lresp.Groups)
	}
	if d := describe(t, c, "nothing"); d.State != "Dead" || d.ErrorCode != 0 {
		t.Fatalf("describe unknown: %+v", d)
	}

	dreq := kmsg.NewPtrDeleteGroupsRequest()
	dreq.Version = 2
	dreq.Groups = []string{"live", "stored", "nothing", "not-mine"}
	dresp := c.DeleteGroups(ctx, dreq)
	wantCode(t, "delete live", dresp.Groups[0].ErrorCode, kerr.NonEmptyGroup)
	wantCode(t, "delete stored", dresp.Groups[1].ErrorCode, nil)
	wantCode(t, "delete nothing", dresp.Groups[2].ErrorCode, kerr.GroupIDNotFound)
	wantCode(t, "delete not mine", dresp.Groups[3].ErrorCode, kerr.NotCoordinator)
	if _, err := e.server.NewClient().Get(ctx, DefaultKeyPrefix+"stored"); err == nil {
		t.Fatal("deleted group's key still stored")
	}

	// a leaves; then the group goes too, with its offsets.
	leave := kmsg.NewPtrLeaveGroupRequest()
	leave.Version, leave.Group = 5, "live"
	leave.Members = []kmsg.LeaveGroupRequestMember{{MemberID: a.id}}
	wantCode(t, "leave", c.LeaveGroup(ctx, leave).Members[0].ErrorCode, nil)
	if d := describe(t, c, "live"); d.State != "Empty" {
		t.Fatalf("after leave: %+v", d)
	}
	dreq.Groups = []string{"live"}
	wantCode(t, "delete live", c.DeleteGroups(ctx, dreq).Groups[0].ErrorCode, nil)
	if got := fetchAll(t, c, "live"); len(got) != 0 {
		t.Fatalf("offsets after delete: %v", got)
	}
}

// heldDelete holds the store Delete of one key until the test releases it:
// the window in which DeleteGroups has let go of the group's lock.
type heldDelete struct {
	meta.Store
	key     string
	held    chan struct{} // closed when the Delete arrives
	release chan struct{} // closed by the test to let it through
}

func (s *heldDelete) Delete(ctx context.Context, key string, expected meta.Version) error {
	if key == s.key {
		close(s.held)
		<-s.release
	}
	return s.Store.Delete(ctx, key, expected)
}

// TestJoinDuringDeleteGroups: a JoinGroup that arrives while DeleteGroups
// writes the delete to the store once left the group Dead with a member and
// the join never answered. The group is Dead from the moment its delete is
// decided (as in Kafka), so the join is refused at once, retriably; the
// stored record and the group agree afterwards, and the member gets back in.
func TestJoinDuringDeleteGroups(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	hold := &heldDelete{key: DefaultKeyPrefix + "g", held: make(chan struct{}), release: make(chan struct{})}
	c := e.coordinatorOn(func(s meta.Store) meta.Store { hold.Store = s; return hold })
	wantCode(t, "commit", commitCode(t, c.OffsetCommit(ctx, commitReq("g", "", -1, map[int32]int64{0: 1}))), nil)
	a := &testMember{t: t, c: c, group: "g"}
	a.getID(ctx) // a pending member id leaves the group Empty: deletable

	deleted := make(chan *kmsg.DeleteGroupsResponse, 1)
	go func() {
		req := kmsg.NewPtrDeleteGroupsRequest()
		req.Version, req.Groups = 2, []string{"g"}
		deleted <- c.DeleteGroups(ctx, req)
	}()
	receive(t, "the delete at the store", hold.held)
	joinA := a.join(ctx)
	var ra *kmsg.JoinGroupResponse
	select {
	case ra = <-joinA:
	case <-c.blockedEvents(): // the join is in the group, waiting
	case <-time.After(10 * time.Second):
		t.Fatal("a's join neither answered nor blocked")
	}
	// Meanwhile the group shows as gone, also where the store still has it.
	if d := describe(t, c, "g"); d.State != "Dead" {
		t.Fatalf("during delete: %+v", d)
	}
	lreq := kmsg.NewPtrListGroupsRequest()
	lreq.Version = 5
	if l := c.ListGroups(ctx, lreq); len(l.Groups) != 0 {
		t.Fatalf("listed during delete: %+v", l.Groups)
	}
	close(hold.release)
	wantCode(t, "delete", receive(t, "delete", deleted).Groups[0].ErrorCode, nil)
	e.clock.Advance(100 * time.Millisecond) // the initial delay, were a in a rebalance
	if ra == nil {
		ra = receive(t, "a's join", joinA)
	}
	wantCode(t, "a's join during the delete", ra.ErrorCode, kerr.CoordinatorNotAvailable)

	if _, err := e.server.NewClient().Get(ctx, DefaultKeyPrefix+"g"); err == nil {
		t.Fatal("deleted group's key still stored")
	}
	if d := describe(t, c, "g"); d.State != "Dead" || len(d.Members) != 0 {
		t.Fatalf("after delete: %+v", d)
	}
	if got := fetchAll(t, c, "g"); len(got) != 0 {
		t.Fatalf("offsets after delete: %v", got)
	}
	if n := c.waiting("g"); n != 0 {
		t.Fatalf("%d waiters left", n)
	}
	// a retries as a client does: its id went with the group; a fresh one
	// joins a fresh group.
	wantCode(t, "a's old id", receive(t, "a's rejoin", a.join(ctx)).ErrorCode, kerr.UnknownMemberID)
	a.id = ""
	a.getID(ctx)
	joinA = a.join(ctx)
	waitBlocked(t, c, "g", 1)
	e.clock.Advance(100 * time.Millisecond)
	if ra := receive(t, "a's new join", joinA); ra.ErrorCode != 0 || ra.Generation != 1 || ra.LeaderID != a.id {
		t.Fatalf("a's new join: %+v", ra)
	}
}

// TestDeleteGroupStoreFailure: a delete the store refuses leaves the group
// Empty with its offsets, open to joins again.
func TestDeleteGroupStoreFailure(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	c := e.coordinator()
	wantCode(t, "commit", commitCode(t, c.OffsetCommit(ctx, commitReq("g", "", -1, map[int32]int64{0: 1}))), nil)
	e.server.SetFault(func(op meta.Op, key string) error {
		if op == meta.OpDelete {
			return meta.ErrUnavailable
		}
		return nil
	})
	req := kmsg.NewPtrDeleteGroupsRequest()
	req.Version, req.Groups = 2, []string{"g"}
	wantCode(t, "delete while down", c.DeleteGroups(ctx, req).Groups[0].ErrorCode, kerr.CoordinatorNotAvailable)
	e.server.SetFault(nil)
	if d := describe(t, c, "g"); d.State != "Empty" {
		t.Fatalf("after failed delete: %+v", d)
	}
	if got := fetchAll(t, c, "g"); got[0] != 1 {
		t.Fatalf("offsets after failed delete: %v", got)
	}
	a := &testMember{t: t, c: c, group: "g"}
	a.getID(ctx)
	joinA := a.join(ctx)
	waitBlocked(t, c, "g", 1)
	e.clock.Advance(100 * time.Millisecond)
	wantCode(t, "a's join", receive(t, "a's join", joinA).ErrorCode, nil)
}

func TestManyMembersConcurrently(t *testing.T) {
	// Many members joining at once through the shell, on the real clock
	// path of goroutines and channels (time still virtual).
	e := newEnv(t)
	ctx := context.Background()
	c := e.coordinator()
	const n = 20
	members := make([]*testMember, n)
	joins := make([]<-chan *kmsg.JoinGroupResponse, n)
	for i := range members {
		members[i] = &testMember{t: t, c: c, group: "many"}
		members[i].getID(ctx)
	}
	for i, m := range members {
		joins[i] = m.join(ctx)
	}
	waitBlocked(t, c, "many", n)
	e.clock.Advance(100 * time.Millisecond)
	e.clock.Advance(100 * time.Millisecond) // the delay extends once while members arrive
	leaders := 0
	for i := range members {
		r := receive(t, "join", joins[i])
		wantCode(t, "join", r.ErrorCode, nil)
		if len(r.Members) == n {
			leaders++
		}
		members[i].generation = r.Generation
	}
	if leaders != 1 {
		t.Fatalf("%d leaders", leaders)
	}
}

func TestOffsetsExpireFromTheStore(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	a := e.coordinator()
	a.OffsetCommit(ctx, commitReq("old", "", -1, map[int32]int64{0: 1}))
	a.Close()
	// A fresh coordinator has not loaded the group; the expiry pass finds
	// it in the store (DefaultOffsetsRetentionCheckPeriod after start).
	b := e.coordinator()
	e.clock.Advance(DefaultOffsetsRetention - time.Millisecond)
	if _, err := e.server.NewClient().Get(ctx, DefaultKeyPrefix+"old"); err != nil {
		t.Fatalf("expired before retention: %v", err)
	}
	e.clock.Advance(DefaultOffsetsRetentionCheckPeriod)
	if _, err := e.server.NewClient().Get(ctx, DefaultKeyPrefix+"old"); err == nil {
		t.Fatal("offsets not expired from the store")
	}
	if got := fetchAll(t, b, "old"); len(got) != 0 {
		t.Fatalf("offsets after expiry: %v", got)
	}
}
