package group

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// checkInvariants asserts what must hold after every input: the Group's own
// invariants (Group.checkInvariants, which also run inside the core under
// -tags invariants), reported as a test failure rather than a panic.
func checkInvariants(t *testing.T, h *harness) {
	t.Helper()
	defer func() {
		if p := recover(); p != nil {
			t.Fatal(p)
		}
	}()
	h.g.checkInvariants()
}

// TestRandomOperations drives a group with random inputs from several
// clients and checks the invariants after each, then that every blocked
// call is answered once the clients go away. A failure prints its seed.
func TestRandomOperations(t *testing.T) {
	for seed := uint64(1); seed <= 300; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { randomRun(t, seed) })
	}
}

type randomClient struct {
	id         string
	instance   *string
	generation int32
	blocked    WaiterID // a join or sync in flight
	lazy       bool     // slow to rejoin: rebalances time out on it
}

func randomRun(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, seed))
	h := newHarness(t, time.Duration(rng.IntN(2))*3*time.Second)
	clients := make([]*randomClient, 2+rng.IntN(5))
	for i := range clients {
		clients[i] = &randomClient{lazy: rng.IntN(3) == 0}
		if rng.IntN(3) == 0 {
			instance := fmt.Sprintf("instance-%d", i)
			clients[i].instance = &instance
		}
	}
	// settle applies answers that arrived for blocked calls.
	settle := func(c *randomClient) {
		if c.blocked == 0 {
			return
		}
		d, ok := h.answered[c.blocked]
		if !ok {
			return
		}
		c.blocked = 0
		if d.Join != nil && d.Join.ErrorCode == 0 {
			c.id, c.generation = d.Join.MemberID, d.Join.Generation
		} else if d.Join != nil && d.Join.MemberID != "" {
			c.id = d.Join.MemberID
		}
	}
	for step := 0; step < 200; step++ {
		c := clients[rng.IntN(len(clients))]
		settle(c)
		op := rng.IntN(100)
		if op < 20 && c.lazy && rng.IntN(10) != 0 {
			op = 50 // a lazy client mostly heartbeats instead of rejoining
		}
		switch {
		case op < 20 && c.blocked == 0: // join
			req := joinReq(c.id, c.instance, []string{"range", "cooperative-sticky"}[:1+rng.IntN(2)]...)
			if rng.IntN(4) == 0 {
				req.Protocols[0].Metadata = consumerMetadata("t1", "t2")
			}
			w, resp := h.join(req, "c")
			if resp == nil {
				c.blocked = w
			} else if resp.ErrorCode == 0 || resp.MemberID != "" {
				c.id = resp.MemberID
				if resp.ErrorCode == 0 {
					c.generation = resp.Generation
				}
			}
		case op < 35 && c.blocked == 0 && c.id != "": // sync
			req := kmsg.NewPtrSyncGroupRequest()
			req.Version, req.Group, req.MemberID, req.Generation, req.InstanceID = 5, "g", c.id, c.generation, c.instance
			for _, id := range h.g.MemberIDs() {
				req.GroupAssignment = append(req.GroupAssignment, kmsg.SyncGroupRequestGroupAssignment{MemberID: id, MemberAssignment: []byte("a-" + id)})
			}
			h.waiter++
			if resp := h.g.Sync(h.now, h.waiter, req); resp == nil {
				c.blocked = h.waiter
			}
			h.drain()
		case op < 70 && c.id != "": // heartbeat
			req := kmsg.NewPtrHeartbeatRequest()
			req.Version, req.Group, req.MemberID, req.Generation, req.InstanceID = 4, "g", c.id, c.generation, c.instance
			h.g.Heartbeat(h.now, req)
			h.drain()
		case op < 75 && c.id != "": // leave
			h.leave(c.id)
			c.id = ""
		case op < 80: // commit
			h.commit(c.id, c.generation, int64(step))
		case op < 85: // the client restarts: it forgets its member id and blocked call
			c.id, c.generation, c.blocked = "", 0, 0
		default: // time passes
			h.advance(time.Duration(rng.IntN(4000)) * time.Millisecond)
		}
		checkInvariants(t, h)
	}
	// Everyone goes away: every blocked call is answered, the group empties.
	h.advance(time.Hour)
	for w := WaiterID(1); w <= h.waiter; w++ {
		if blocked(h, w) {
			t.Fatalf("blocked call %d never answered (group %s)", w, h.g.State())
		}
	}
	if h.g.State() != Empty || len(h.g.pending) != 0 {
		t.Fatalf("after everyone left: %s, %d members, %d pending", h.g.State(), len(h.g.members), len(h.g.pending))
	}
	checkInvariants(t, h)
}

// blocked reports whether waiter w is still held by a member.
func blocked(h *harness, w WaiterID) bool {
	for _, m := range h.g.members {
		if m.joinWaiter == w || m.syncWaiter == w {
			return true
		}
	}
	return false
}
