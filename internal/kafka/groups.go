package kafka

// The classic consumer-group APIs, routed to Backend.Groups():
//
//	FindCoordinator (10)   v0–6  served here
//	OffsetCommit    (8)    v2–9  v10 addresses topics by ID; not advertised
//	OffsetFetch     (9)    v1–9  v10 addresses topics by ID; not advertised
//	JoinGroup       (11)   v2–9
//	Heartbeat       (12)   v0–4
//	LeaveGroup      (13)   v0–5
//	SyncGroup       (14)   v0–5
//	DescribeGroups  (15)   v0–5  v6 changes unknown-group answers (KIP-1043)
//	ListGroups      (16)   v0–5
//	DeleteGroups    (42)   v0–3
//	OffsetDelete    (47)   v0
//
// The GroupCoordinator fills each response completely; this file only
// routes, and runs the call in the finish phase so a JoinGroup waiting for
// a rebalance holds back only the responses behind it on its connection
// (which Kafka's per-connection order requires anyway). A coordinator that
// returns nil is a bug: the connection closes. The versions above are
// advertised only when Backend.Groups() is not nil.
//
// FindCoordinator: key type 0 (group) asks Backend.Coordinator. Type 1
// (transaction) and 2 (share) answer INVALID_REQUEST, as Kafka does for a
// key type it does not serve: transactions and share groups are not
// advertised, and a retriable code would have clients retry forever.

import (
	"context"
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// groupCall routes one request to the GroupCoordinator in the finish phase.
func groupCall[Req kmsg.Request, Resp kmsg.Response](call func(GroupCoordinator, context.Context, Req) Resp) handler {
	return func(s *Server, _ context.Context, rq *request) finishFunc {
		req := rq.kreq.(Req)
		return func(ctx context.Context) kmsg.Response {
			info, _ := ClientFrom(ctx)
			if rq.clientID != nil {
				info.ID = *rq.clientID
			}
			resp := call(s.backend.Groups(), withClient(ctx, info), req)
			if any(resp) == nil || isNilPointer(resp) {
				panic(fmt.Sprintf("GroupCoordinator answered %s with nil", apiName(rq.key)))
			}
			resp.SetVersion(rq.version)
			rq.note(groupErrorCode(resp))
			return resp
		}
	}
}

func isNilPointer(resp kmsg.Response) bool {
	switch r := resp.(type) {
	case *kmsg.JoinGroupResponse:
		return r == nil
	case *kmsg.SyncGroupResponse:
		return r == nil
	case *kmsg.HeartbeatResponse:
		return r == nil
	case *kmsg.LeaveGroupResponse:
		return r == nil
	case *kmsg.OffsetCommitResponse:
		return r == nil
	case *kmsg.OffsetFetchResponse:
		return r == nil
	case *kmsg.OffsetDeleteResponse:
		return r == nil
	case *kmsg.ListGroupsResponse:
		return r == nil
	case *kmsg.DescribeGroupsResponse:
		return r == nil
	case *kmsg.DeleteGroupsResponse:
		return r == nil
	}
	return false
}

// groupErrorCode is a group response's top-level error, for the requests
// metric (the per-partition and per-group ones are not counted).
func groupErrorCode(resp kmsg.Response) int16 {
	switch r := resp.(type) {
	case *kmsg.JoinGroupResponse:
		return r.ErrorCode
	case *kmsg.SyncGroupResponse:
		return r.ErrorCode
	case *kmsg.HeartbeatResponse:
		return r.ErrorCode
	case *kmsg.LeaveGroupResponse:
		return r.ErrorCode
	case *kmsg.OffsetDeleteResponse:
		return r.ErrorCode
	case *kmsg.ListGroupsResponse:
		return r.ErrorCode
	case *kmsg.OffsetFetchResponse:
		return r.ErrorCode
	}
	return 0
}

var (
	handleJoinGroup      = groupCall(GroupCoordinator.JoinGroup)
	handleSyncGroup      = groupCall(GroupCoordinator.SyncGroup)
	handleHeartbeat      = groupCall(GroupCoordinator.Heartbeat)
	handleLeaveGroup     = groupCall(GroupCoordinator.LeaveGroup)
	handleOffsetCommit   = groupCall(GroupCoordinator.OffsetCommit)
	handleOffsetFetch    = groupCall(GroupCoordinator.OffsetFetch)
	handleOffsetDelete   = groupCall(GroupCoordinator.OffsetDelete)
	handleListGroups     = groupCall(GroupCoordinator.ListGroups)
	handleDescribeGroups = groupCall(GroupCoordinator.DescribeGroups)
	handleDeleteGroups   = groupCall(GroupCoordinator.DeleteGroups)
)

const (
	coordinatorTypeGroup = 0
)

func handleFindCoordinator(s *Server, _ context.Context, rq *request) finishFunc {
	req := rq.kreq.(*kmsg.FindCoordinatorRequest)
	return func(ctx context.Context) kmsg.Response {
		resp := req.ResponseKind().(*kmsg.FindCoordinatorResponse)
		keys := req.CoordinatorKeys
		if req.Version < 4 {
			keys = []string{req.CoordinatorKey}
		}
		for _, key := range keys {
			c := kmsg.NewFindCoordinatorResponseCoordinator()
			c.Key, c.NodeID, c.Port = key, -1, -1
			var code int16
			switch tc := s.transactions(); {
			case req.CoordinatorType == coordinatorTypeTransaction && tc != nil:
				b, err := tc.Coordinator(ctx, key)
				code = s.errorCode(err, "find coordinator", "transactional id", key)
				if code == 0 {
					code = coordinatorAt(rq, b, &c)
				}
			case req.CoordinatorType != coordinatorTypeGroup:
				code = kerr.InvalidRequest.Code
			default:
				b, err := s.backend.Coordinator(ctx, key)
				code = s.errorCode(err, "find coordinator", "group", key)
				if code == 0 {
					code = coordinatorAt(rq, b, &c)
				}
			}
			c.ErrorCode = rq.note(code)
			c.ErrorMessage = errorMessage(code)
			resp.Coordinators = append(resp.Coordinators, c)
		}
		if req.Version < 4 && len(resp.Coordinators) == 1 {
			c := resp.Coordinators[0]
			resp.ErrorCode, resp.ErrorMessage, resp.NodeID, resp.Host, resp.Port = c.ErrorCode, c.ErrorMessage, c.NodeID, c.Host, c.Port
			resp.Coordinators = nil
		}
		return resp
	}
}

// coordinatorAt fills c with b's endpoint on the request's listener, or
// answers COORDINATOR_NOT_AVAILABLE when b has no listener of that name
// (clients ask again, as Kafka's do).
func coordinatorAt(rq *request, b Node, c *kmsg.FindCoordinatorResponseCoordinator) int16 {
	e, ok := b.Endpoint(rq.listener())
	if !ok {
		return kerr.CoordinatorNotAvailable.Code
	}
	c.NodeID, c.Host, c.Port = b.ID, e.Host, e.Port
	return 0
}
