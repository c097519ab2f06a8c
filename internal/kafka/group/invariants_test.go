//go:build invariants

package group

import (
	"fmt"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestInvariantsFire corrupts a stable group the way a bug would and checks
// that its next input stops at once, naming the invariant and the values.
func TestInvariantsFire(t *testing.T) {
	stable := func(t *testing.T) (*harness, string) {
		h := newHarness(t, 0)
		_, resp := h.join(joinReq("", nil), "c")
		id := resp.MemberID // MEMBER_ID_REQUIRED hands out the id
		w, _ := h.join(joinReq(id, nil), "c")
		if d := h.answered[w]; d.Join == nil || d.Join.ErrorCode != 0 {
			t.Fatalf("join: %+v", d)
		}
		sync := kmsg.NewPtrSyncGroupRequest()
		sync.Version, sync.Group, sync.MemberID, sync.Generation = 5, "g", id, 1
		h.waiter++
		h.g.Sync(h.now, h.waiter, sync)
		h.drain()
		if h.g.State() != Stable {
			t.Fatalf("group %s, want Stable", h.g.State())
		}
		return h, id
	}
	heartbeat := func(h *harness, id string) func() {
		return func() {
			req := kmsg.NewPtrHeartbeatRequest()
			req.Version, req.Group, req.MemberID, req.Generation = 4, "g", id, h.g.Generation()
			h.g.Heartbeat(h.now, req)
		}
	}
	for _, tc := range []struct {
		name    string
		corrupt func(g *Group)
		want    string
	}{
		{"leader gone", func(g *Group) { g.leader = "c-9" }, `the leader is a member: leader "c-9", members [c-1]`},
		{"generation back", func(g *Group) { g.generation = 0 }, "the generation never decreases: 0 after 1"},
		{"stable without assignment", func(g *Group) { g.members[0].assignment = nil }, "in Stable every member has its assignment: c-1 has none"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, id := stable(t)
			heartbeat(h, id)() // the uncorrupted group passes its checks
			tc.corrupt(h.g)
			msg := func() (msg string) {
				defer func() {
					if p := recover(); p != nil {
						msg = fmt.Sprint(p)
					}
				}()
				heartbeat(h, id)()
				return ""
			}()
			if !strings.Contains(msg, "invariant violated: "+tc.want) {
				t.Fatalf("panic %q, want invariant %q violated", msg, tc.want)
			}
			t.Log(msg)
		})
	}
}
