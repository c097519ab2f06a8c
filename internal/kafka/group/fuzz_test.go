package group

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"quire/internal/meta"
)

// FuzzGroupRequests decodes arbitrary bytes as a group API request (the
// first byte picks the API, the second its version) and hands it to a real
// Coordinator: member metadata, assignments and offsets metadata are
// untrusted bytes the coordinator parses or stores. Nothing may panic, and
// every call returns (blocking ones when their context ends).
func FuzzGroupRequests(f *testing.F) {
	keys := []int16{11, 14, 12, 13, 8, 9, 47, 16, 15, 42} // Join, Sync, Heartbeat, Leave, OffsetCommit, OffsetFetch, OffsetDelete, ListGroups, DescribeGroups, DeleteGroups
	for i := range keys {
		f.Add([]byte{byte(i), 0})
	}
	join := kmsg.NewPtrJoinGroupRequest()
	join.Group, join.ProtocolType, join.SessionTimeoutMillis, join.RebalanceTimeoutMillis = "g", "consumer", 10000, 10000
	join.Protocols = []kmsg.JoinGroupRequestProtocol{{Name: "range", Metadata: []byte{0, 1, 0, 0, 0, 1, 0, 1, 't'}}}
	join.SetVersion(5)
	f.Add(append([]byte{0, 5}, join.AppendTo(nil)...))

	store := meta.NewMemServer(meta.MemConfig{}).NewClient()
	c, err := New(Config{Store: store, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), InitialRebalanceDelay: -1})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(c.Close)
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) < 2 {
			return
		}
		key := keys[int(data[0])%len(keys)]
		req := kmsg.RequestForKey(key)
		req.SetVersion(int16(data[1]) % (req.MaxVersion() + 1))
		if err := req.ReadFrom(data[2:]); err != nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		defer cancel()
		var resp kmsg.Response
		switch r := req.(type) {
		case *kmsg.JoinGroupRequest:
			resp = c.JoinGroup(ctx, r)
		case *kmsg.SyncGroupRequest:
			resp = c.SyncGroup(ctx, r)
		case *kmsg.HeartbeatRequest:
			resp = c.Heartbeat(ctx, r)
		case *kmsg.LeaveGroupRequest:
			resp = c.LeaveGroup(ctx, r)
		case *kmsg.OffsetCommitRequest:
			resp = c.OffsetCommit(ctx, r)
		case *kmsg.OffsetFetchRequest:
			resp = c.OffsetFetch(ctx, r)
		case *kmsg.OffsetDeleteRequest:
			resp = c.OffsetDelete(ctx, r)
		case *kmsg.ListGroupsRequest:
			resp = c.ListGroups(ctx, r)
		case *kmsg.DescribeGroupsRequest:
			resp = c.DescribeGroups(ctx, r)
		case *kmsg.DeleteGroupsRequest:
			resp = c.DeleteGroups(ctx, r)
		}
		if resp == nil {
			t.Fatalf("no response to %T", req)
		}
		resp.SetVersion(req.GetVersion())
		resp.AppendTo(nil) // the answer must encode
	})
}
