package kafka

// Authorization of the group and transaction APIs; authorize.go says what
// each needs and how the checks wrap the handlers.

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"quire/internal/auth"
)

// authorizeGroupMember checks READ on the group of JoinGroup, SyncGroup,
// Heartbeat and LeaveGroup; a refusal answers GROUP_AUTHORIZATION_FAILED
// without asking the coordinator.
func authorizeGroupMember(s *Server, ctx context.Context, rq *request, h handler) finishFunc {
	var group string
	switch req := rq.kreq.(type) {
	case *kmsg.JoinGroupRequest:
		group = req.Group
	case *kmsg.SyncGroupRequest:
		group = req.Group
	case *kmsg.HeartbeatRequest:
		group = req.Group
	case *kmsg.LeaveGroupRequest:
		group = req.Group
	}
	if s.allowedGroup(rq, auth.OpRead, group) {
		return h(s, ctx, rq)
	}
	code := rq.note(kerr.GroupAuthorizationFailed.Code)
	resp := rq.kreq.ResponseKind()
	switch r := resp.(type) {
	case *kmsg.JoinGroupResponse:
		r.ErrorCode, r.Generation = code, -1
	case *kmsg.SyncGroupResponse:
		r.ErrorCode = code
	case *kmsg.HeartbeatResponse:
		r.ErrorCode = code
	case *kmsg.LeaveGroupResponse:
		r.ErrorCode = code
	}
	return answer(resp)
}

func authorizeOffsetCommit(s *Server, ctx context.Context, rq *request, h handler) finishFunc {
	req := rq.kreq.(*kmsg.OffsetCommitRequest)
	groupAllowed := s.allowedGroup(rq, auth.OpRead, req.Group)
	var kept []kmsg.OffsetCommitRequestTopic
	var denied []kmsg.OffsetCommitResponseTopic
	for _, t := range req.Topics {
		code := kerr.GroupAuthorizationFailed.Code
		if groupAllowed {
			if s.allowedTopic(rq, auth.OpRead, t.Topic) {
				kept = append(kept, t)
				continue
			}
			code = kerr.TopicAuthorizationFailed.Code
		}
		rt := kmsg.NewOffsetCommitResponseTopic()
		rt.Topic = t.Topic
		for _, p := range t.Partitions {
			rp := kmsg.NewOffsetCommitResponseTopicPartition()
			rp.Partition, rp.ErrorCode = p.Partition, rq.note(code)
			rt.Partitions = append(rt.Partitions, rp)
		}
		denied = append(denied, rt)
	}
	if len(denied) == 0 {
		return h(s, ctx, rq)
	}
	if len(kept) == 0 {
		resp := req.ResponseKind().(*kmsg.OffsetCommitResponse)
		resp.Topics = denied
		return answer(resp)
	}
	authorized := *req
	authorized.Topics = kept
	return through(s, ctx, rq, h, &authorized, func(resp *kmsg.OffsetCommitResponse) {
		resp.Topics = append(resp.Topics, denied...)
	})
}

// authorizeOffsetFetch checks DESCRIBE on each group and on each topic
// asked for; an all-topics fetch (null topics) leaves the topics it may not
// describe out of the answer.
func authorizeOffsetFetch(s *Server, ctx context.Context, rq *request, h handler) finishFunc {
	req := rq.kreq.(*kmsg.OffsetFetchRequest)
	deniedPartitions := func(ps []int32) []kmsg.OffsetFetchResponseGroupTopicPartition {
		var out []kmsg.OffsetFetchResponseGroupTopicPartition
		for _, p := range ps {
			rp := kmsg.NewOffsetFetchResponseGroupTopicPartition()
			rp.Partition, rp.Offset, rp.LeaderEpoch = p, -1, -1
			rp.ErrorCode = rq.note(kerr.TopicAuthorizationFailed.Code)
			out = append(out, rp)
		}
		return out
	}
	if req.Version < 8 {
		if !s.allowedGroup(rq, auth.OpDescribe, req.Group) {
			resp := req.ResponseKind().(*kmsg.OffsetFetchResponse)
			resp.ErrorCode = rq.note(kerr.GroupAuthorizationFailed.Code)
			return answer(resp)
		}
		authorized := *req
		authorized.Topics = nil
		var denied []kmsg.OffsetFetchResponseTopic
		for _, t := range req.Topics {
			if s.allowedTopic(rq, auth.OpDescribe, t.Topic) {
				authorized.Topics = append(authorized.Topics, t)
				continue
			}
			rt := kmsg.NewOffsetFetchResponseTopic()
			rt.Topic = t.Topic
			for _, p := range deniedPartitions(t.Partitions) {
				rp := kmsg.NewOffsetFetchResponseTopicPartition()
				rp.Partition, rp.Offset, rp.LeaderEpoch, rp.ErrorCode = p.Partition, p.Offset, p.LeaderEpoch, p.ErrorCode
				rt.Partitions = append(rt.Partitions, rp)
			}
			denied = append(denied, rt)
		}
		if req.Topics != nil && authorized.Topics == nil {
			authorized.Topics = []kmsg.OffsetFetchRequestTopic{} // not null: that would mean all
		}
		return through(s, ctx, rq, h, &authorized, func(resp *kmsg.OffsetFetchResponse) {
			if req.Topics == nil {
				kept := resp.Topics[:0]
				for _, t := range resp.Topics {
					if s.allowedTopic(rq, auth.OpDescribe, t.Topic) {
						kept = append(kept, t)
					}
				}
				resp.Topics = kept
			}
			resp.Topics = append(resp.Topics, denied...)
		})
	}
	authorized := *req
	authorized.Groups = nil
	var denied []kmsg.OffsetFetchResponseGroup
	allTopics := make(map[string]bool) // the groups whose topics are null
	for _, g := range req.Groups {
		rg := kmsg.NewOffsetFetchResponseGroup()
		rg.Group = g.Group
		if !s.allowedGroup(rq, auth.OpDescribe, g.Group) {
			rg.ErrorCode = rq.note(kerr.GroupAuthorizationFailed.Code)
			denied = append(denied, rg)
			continue
		}
		if g.Topics == nil {
			allTopics[g.Group] = true
			authorized.Groups = append(authorized.Groups, g)
			continue
		}
		ag := g
		ag.Topics = []kmsg.OffsetFetchRequestGroupTopic{}
		for _, t := range g.Topics {
			if s.allowedTopic(rq, auth.OpDescribe, t.Topic) {
				ag.Topics = append(ag.Topics, t)
				continue
			}
			rt := kmsg.NewOffsetFetchResponseGroupTopic()
			rt.Topic, rt.Partitions = t.Topic, deniedPartitions(t.Partitions)
			rg.Topics = append(rg.Topics, rt)
		}
		authorized.Groups = append(authorized.Groups, ag)
		if len(rg.Topics) > 0 {
			denied = append(denied, rg) // merged into the group's answer below
		}
	}
	if len(authorized.Groups) == 0 {
		resp := req.ResponseKind().(*kmsg.OffsetFetchResponse)
		resp.Groups = denied
		return answer(resp)
	}
	return through(s, ctx, rq, h, &authorized, func(resp *kmsg.OffsetFetchResponse) {
		extra := make(map[string]*kmsg.OffsetFetchResponseGroup)
		var refused []kmsg.OffsetFetchResponseGroup
		for i := range denied {
			if denied[i].ErrorCode != 0 {
				refused = append(refused, denied[i])
			} else {
				extra[denied[i].Group] = &denied[i]
			}
		}
		for i := range resp.Groups {
			g := &resp.Groups[i]
			if allTopics[g.Group] {
				kept := g.Topics[:0]
				for _, t := range g.Topics {
					if s.allowedTopic(rq, auth.OpDescribe, t.Topic) {
						kept = append(kept, t)
					}
				}
				g.Topics = kept
			}
			if e := extra[g.Group]; e != nil {
				g.Topics = append(g.Topics, e.Topics...)
			}
		}
		resp.Groups = append(resp.Groups, refused...)
	})
}

func authorizeOffsetDelete(s *Server, ctx context.Context, rq *request, h handler) finishFunc {
	req := rq.kreq.(*kmsg.OffsetDeleteRequest)
	if !s.allowedGroup(rq, auth.OpDelete, req.Group) {
		resp := req.ResponseKind().(*kmsg.OffsetDeleteResponse)
		resp.ErrorCode = rq.note(kerr.GroupAuthorizationFailed.Code)
		return answer(resp)
	}
	var kept []kmsg.OffsetDeleteRequestTopic
	var denied []kmsg.OffsetDeleteResponseTopic
	for _, t := range req.Topics {
		if s.allowedTopic(rq, auth.OpRead, t.Topic) {
			kept = append(kept, t)
			continue
		}
		rt := kmsg.NewOffsetDeleteResponseTopic()
		rt.Topic = t.Topic
		for _, p := range t.Partitions {
			rp := kmsg.NewOffsetDeleteResponseTopicPartition()
			rp.Partition, rp.ErrorCode = p.Partition, rq.note(kerr.TopicAuthorizationFailed.Code)
			rt.Partitions = append(rt.Partitions, rp)
		}
		denied = append(denied, rt)
	}
	if len(denied) == 0 {
		return h(s, ctx, rq)
	}
	authorized := *req
	authorized.Topics = kept
	return through(s, ctx, rq, h, &authorized, func(resp *kmsg.OffsetDeleteResponse) {
		resp.Topics = append(resp.Topics, denied...)
	})
}

func authorizeFindCoordinator(s *Server, ctx context.Context, rq *request, h handler) finishFunc {
	req := rq.kreq.(*kmsg.FindCoordinatorRequest)
	deniedCode := func(key string) int16 {
		switch req.CoordinatorType {
		case coordinatorTypeGroup:
			if !s.allowedGroup(rq, auth.OpDescribe, key) {
				return kerr.GroupAuthorizationFailed.Code
			}
		case coordinatorTypeTransaction:
			if !s.allowedTxn(rq, auth.OpDescribe, key) {
				return kerr.TransactionalIDAuthorizationFailed.Code
			}
		}
		return 0
	}
	if req.Version < 4 {
		code := deniedCode(req.CoordinatorKey)
		if code == 0 {
			return h(s, ctx, rq)
		}
		resp := req.ResponseKind().(*kmsg.FindCoordinatorResponse)
		resp.ErrorCode, resp.ErrorMessage, resp.NodeID, resp.Port = rq.note(code), errorMessage(code), -1, -1
		return answer(resp)
	}
	authorized := *req
	authorized.CoordinatorKeys = nil
	var denied []kmsg.FindCoordinatorResponseCoordinator
	for _, key := range req.CoordinatorKeys {
		code := deniedCode(key)
		if code == 0 {
			authorized.CoordinatorKeys = append(authorized.CoordinatorKeys, key)
			continue
		}
		c := kmsg.NewFindCoordinatorResponseCoordinator()
		c.Key, c.NodeID, c.Port, c.ErrorCode, c.ErrorMessage = key, -1, -1, rq.note(code), errorMessage(code)
		denied = append(denied, c)
	}
	return through(s, ctx, rq, h, &authorized, func(resp *kmsg.FindCoordinatorResponse) {
		resp.Coordinators = append(resp.Coordinators, denied...)
	})
}

func authorizeDescribeGroups(s *Server, ctx context.Context, rq *request, h handler) finishFunc {
	req := rq.kreq.(*kmsg.DescribeGroupsRequest)
	authorized := *req
	authorized.Groups = nil
	var denied []kmsg.DescribeGroupsResponseGroup
	for _, g := range req.Groups {
		if s.allowedGroup(rq, auth.OpDescribe, g) {
			authorized.Groups = append(authorized.Groups, g)
			continue
		}
		rg := kmsg.NewDescribeGroupsResponseGroup()
		rg.Group, rg.ErrorCode = g, rq.note(kerr.GroupAuthorizationFailed.Code)
		rg.AuthorizedOperations = authorizedOperationsOmitted
		denied = append(denied, rg)
	}
	if len(authorized.Groups) == 0 {
		resp := req.ResponseKind().(*kmsg.DescribeGroupsResponse)
		resp.Groups = denied
		return answer(resp)
	}
	return through(s, ctx, rq, h, &authorized, func(resp *kmsg.DescribeGroupsResponse) {
		if req.IncludeAuthorizedOperations {
			for i := range resp.Groups {
				if g := &resp.Groups[i]; g.ErrorCode == 0 {
					g.AuthorizedOperations = s.authorizedOperations(rq, auth.ResourceGroup, g.Group)
				}
			}
		}
		resp.Groups = append(resp.Groups, denied...)
	})
}

func authorizeListGroups(s *Server, ctx context.Context, rq *request, h handler) finishFunc {
	if s.allowedCluster(rq, auth.OpDescribe) {
		return h(s, ctx, rq)
	}
	return through(s, ctx, rq, h, rq.kreq, func(resp *kmsg.ListGroupsResponse) {
		kept := resp.Groups[:0]
		for _, g := range resp.Groups {
			if s.allowedGroup(rq, auth.OpDescribe, g.Group) {
				kept = append(kept, g)
			}
		}
		resp.Groups = kept
	})
}

func authorizeDeleteGroups(s *Server, ctx context.Context, rq *request, h handler) finishFunc {
	req := rq.kreq.(*kmsg.DeleteGroupsRequest)
	authorized := *req
	authorized.Groups = nil
	var denied []kmsg.DeleteGroupsResponseGroup
	for _, g := range req.Groups {
		if s.allowedGroup(rq, auth.OpDelete, g) {
			authorized.Groups = append(authorized.Groups, g)
			continue
		}
		rg := kmsg.NewDeleteGroupsResponseGroup()
		rg.Group, rg.ErrorCode = g, rq.note(kerr.GroupAuthorizationFailed.Code)
		denied = append(denied, rg)
	}
	if len(authorized.Groups) == 0 {
		resp := req.ResponseKind().(*kmsg.DeleteGroupsResponse)
		resp.Groups = denied
		return answer(resp)
	}
	return through(s, ctx, rq, h, &authorized, func(resp *kmsg.DeleteGroupsResponse) {
		resp.Groups = append(resp.Groups, denied...)
	})
}

// authorizeAddPartitionsToTxn: WRITE on the transactional id, else every
// partition answers TRANSACTIONAL_ID_AUTHORIZATION_FAILED; WRITE on every
// topic, else those topics answer TOPIC_AUTHORIZATION_FAILED and the rest
// OPERATION_NOT_ATTEMPTED (Kafka adds none of them).
func authorizeAddPartitionsToTxn(s *Server, ctx context.Context, rq *request, h handler) finishFunc {
	req := rq.kreq.(*kmsg.AddPartitionsToTxnRequest)
	txnAllowed := s.allowedTxn(rq, auth.OpWrite, req.TransactionalID)
	topicDenied := make(map[string]bool)
	for _, t := range req.Topics {
		if txnAllowed && !s.allowedTopic(rq, auth.OpWrite, t.Topic) {
			topicDenied[t.Topic] = true
		}
	}
	if txnAllowed && len(topicDenied) == 0 {
		return h(s, ctx, rq)
	}
	resp := req.ResponseKind().(*kmsg.AddPartitionsToTxnResponse)
	for _, t := range req.Topics {
		code := kerr.TransactionalIDAuthorizationFailed.Code
		switch {
		case !txnAllowed:
		case topicDenied[t.Topic]:
			code = kerr.TopicAuthorizationFailed.Code
		default:
			code = kerr.OperationNotAttempted.Code
		}
		rt := kmsg.NewAddPartitionsToTxnResponseTopic()
		rt.Topic = t.Topic
		for _, p := range t.Partitions {
			rp := kmsg.NewAddPartitionsToTxnResponseTopicPartition()
			rp.Partition, rp.ErrorCode = p, rq.note(code)
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return answer(resp)
}

func authorizeAddOffsetsToTxn(s *Server, ctx context.Context, rq *request, h handler) finishFunc {
	req := rq.kreq.(*kmsg.AddOffsetsToTxnRequest)
	var code int16
	switch {
	case !s.allowedTxn(rq, auth.OpWrite, req.TransactionalID):
		code = kerr.TransactionalIDAuthorizationFailed.Code
	case !s.allowedGroup(rq, auth.OpRead, req.Group):
		code = kerr.GroupAuthorizationFailed.Code
	default:
		return h(s, ctx, rq)
	}
	resp := req.ResponseKind().(*kmsg.AddOffsetsToTxnResponse)
	resp.ErrorCode = rq.note(code)
	return answer(resp)
}

func authorizeEndTxn(s *Server, ctx context.Context, rq *request, h handler) finishFunc {
	req := rq.kreq.(*kmsg.EndTxnRequest)
	if s.allowedTxn(rq, auth.OpWrite, req.TransactionalID) {
		return h(s, ctx, rq)
	}
	resp := req.ResponseKind().(*kmsg.EndTxnResponse)
	resp.ErrorCode = rq.note(kerr.TransactionalIDAuthorizationFailed.Code)
	return answer(resp)
}

func authorizeTxnOffsetCommit(s *Server, ctx context.Context, rq *request, h handler) finishFunc {
	req := rq.kreq.(*kmsg.TxnOffsetCommitRequest)
	var whole int16
	switch {
	case !s.allowedTxn(rq, auth.OpWrite, req.TransactionalID):
		whole = kerr.TransactionalIDAuthorizationFailed.Code
	case !s.allowedGroup(rq, auth.OpRead, req.Group):
		whole = kerr.GroupAuthorizationFailed.Code
	}
	var kept []kmsg.TxnOffsetCommitRequestTopic
	var denied []kmsg.TxnOffsetCommitResponseTopic
	for _, t := range req.Topics {
		code := whole
		if code == 0 {
			if s.allowedTopic(rq, auth.OpRead, t.Topic) {
				kept = append(kept, t)
				continue
			}
			code = kerr.TopicAuthorizationFailed.Code
		}
		rt := kmsg.NewTxnOffsetCommitResponseTopic()
		rt.Topic = t.Topic
		for _, p := range t.Partitions {
			rp := kmsg.NewTxnOffsetCommitResponseTopicPartition()
			rp.Partition, rp.ErrorCode = p.Partition, rq.note(code)
			rt.Partitions = append(rt.Partitions, rp)
		}
		denied = append(denied, rt)
	}
	if len(denied) == 0 {
		return h(s, ctx, rq)
	}
	if len(kept) == 0 {
		resp := req.ResponseKind().(*kmsg.TxnOffsetCommitResponse)
		resp.Topics = denied
		return answer(resp)
	}
	authorized := *req
	authorized.Topics = kept
	return through(s, ctx, rq, h, &authorized, func(resp *kmsg.TxnOffsetCommitResponse) {
		resp.Topics = append(resp.Topics, denied...)
	})
}

func authorizeDescribeTransactions(s *Server, ctx context.Context, rq *request, h handler) finishFunc {
	req := rq.kreq.(*kmsg.DescribeTransactionsRequest)
	authorized := *req
	authorized.TransactionalIDs = []string{}
	var denied []kmsg.DescribeTransactionsResponseTransactionState
	for _, id := range req.TransactionalIDs {
		if s.allowedTxn(rq, auth.OpDescribe, id) {
			authorized.TransactionalIDs = append(authorized.TransactionalIDs, id)
			continue
		}
		st := kmsg.NewDescribeTransactionsResponseTransactionState()
		st.TransactionalID, st.ProducerID, st.ProducerEpoch = id, -1, -1
		st.ErrorCode = rq.note(kerr.TransactionalIDAuthorizationFailed.Code)
		denied = append(denied, st)
	}
	return through(s, ctx, rq, h, &authorized, func(resp *kmsg.DescribeTransactionsResponse) {
		resp.TransactionStates = append(resp.TransactionStates, denied...)
	})
}

func authorizeListTransactions(s *Server, ctx context.Context, rq *request, h handler) finishFunc {
	return through(s, ctx, rq, h, rq.kreq, func(resp *kmsg.ListTransactionsResponse) {
		kept := resp.TransactionStates[:0]
		for _, st := range resp.TransactionStates {
			if s.allowedTxn(rq, auth.OpDescribe, st.TransactionalID) {
				kept = append(kept, st)
			}
		}
		resp.TransactionStates = kept
	})
}

func authorizeWriteTxnMarkers(s *Server, ctx context.Context, rq *request, h handler) finishFunc {
	req := rq.kreq.(*kmsg.WriteTxnMarkersRequest)
	if s.allowedCluster(rq, auth.OpClusterAction) {
		return h(s, ctx, rq)
	}
	resp := req.ResponseKind().(*kmsg.WriteTxnMarkersResponse)
	for _, m := range req.Markers {
		rm := kmsg.NewWriteTxnMarkersResponseMarker()
		rm.ProducerID = m.ProducerID
		for _, t := range m.Topics {
			rt := kmsg.NewWriteTxnMarkersResponseMarkerTopic()
			rt.Topic = t.Topic
			for _, p := range t.Partitions {
				rp := kmsg.NewWriteTxnMarkersResponseMarkerTopicPartition()
				rp.Partition, rp.ErrorCode = p, rq.note(kerr.ClusterAuthorizationFailed.Code)
				rt.Partitions = append(rt.Partitions, rp)
			}
			rm.Topics = append(rm.Topics, rt)
		}
		resp.Markers = append(resp.Markers, rm)
	}
	return answer(resp)
}
