package kafka

import (
	"context"
	"slices"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"quire/internal/auth"
)

// TestAuthorizeTransactionAPIs drives the authorization of the transaction
// APIs (and acks=0 produce) around a stub handler, which a Backend without
// a transaction coordinator cannot reach over the wire: what is refused
// never reaches the handler, what is allowed does, without the refused
// part.
func TestAuthorizeTransactionAPIs(t *testing.T) {
	acl := func(rtype auth.ResourceType, name string, op auth.Operation) auth.ACL {
		return auth.ACL{ResourceType: rtype, PatternType: auth.PatternLiteral, ResourceName: name, Principal: auth.User("alice"),
			Host: "*", Operation: op, Permission: auth.PermissionAllow}
	}
	az := auth.NewStaticAuthorizer([]auth.ACL{
		acl(auth.ResourceTransactionalID, "tx-ok", auth.OpWrite),
		acl(auth.ResourceTopic, "t-ok", auth.OpAll),
		acl(auth.ResourceGroup, "g-ok", auth.OpRead),
	}, auth.AuthorizerConfig{})
	s := &Server{withTxns: true}
	topicPartitions := func(names ...string) []kmsg.TxnOffsetCommitRequestTopic {
		var out []kmsg.TxnOffsetCommitRequestTopic
		for _, n := range names {
			out = append(out, kmsg.TxnOffsetCommitRequestTopic{Topic: n, Partitions: []kmsg.TxnOffsetCommitRequestTopicPartition{{Partition: 0}}})
		}
		return out
	}
	produce := func(txn *string, acks int16) *kmsg.ProduceRequest {
		req := kmsg.NewPtrProduceRequest()
		req.Version, req.TransactionID, req.Acks = 9, txn, acks
		req.Topics = []kmsg.ProduceRequestTopic{{Topic: "t-no", Partitions: []kmsg.ProduceRequestTopicPartition{{Partition: 0}}}}
		return req
	}
	for _, tc := range []struct {
		name string
		req  kmsg.Request
		// handled: what the handler answers (nil: its request's empty response).
		handled kmsg.Response
		// reached: the handler ran; then seen checks the request it saw.
		reached bool
		seen    func(kmsg.Request) bool
		// codes are the answer's error codes in order (collected by codesOf).
		codes []int16
	}{
		{name: "EndTxn allowed", req: &kmsg.EndTxnRequest{Version: 3, TransactionalID: "tx-ok"}, reached: true, codes: []int16{0}},
		{name: "EndTxn refused", req: &kmsg.EndTxnRequest{Version: 3, TransactionalID: "tx-no"}, codes: []int16{kerr.TransactionalIDAuthorizationFailed.Code}},
		{name: "AddOffsetsToTxn without the group", req: &kmsg.AddOffsetsToTxnRequest{Version: 3, TransactionalID: "tx-ok", Group: "g-no"},
			codes: []int16{kerr.GroupAuthorizationFailed.Code}},
		{name: "AddPartitionsToTxn with a refused topic", req: &kmsg.AddPartitionsToTxnRequest{Version: 3, TransactionalID: "tx-ok",
			Topics: []kmsg.AddPartitionsToTxnRequestTopic{{Topic: "t-ok", Partitions: []int32{0}}, {Topic: "t-no", Partitions: []int32{0}}}},
			codes: []int16{kerr.OperationNotAttempted.Code, kerr.TopicAuthorizationFailed.Code}},
		{name: "TxnOffsetCommit refused id", req: &kmsg.TxnOffsetCommitRequest{Version: 3, TransactionalID: "tx-no", Group: "g-ok", Topics: topicPartitions("t-ok")},
			codes: []int16{kerr.TransactionalIDAuthorizationFailed.Code}},
		{name: "TxnOffsetCommit refused topic", req: &kmsg.TxnOffsetCommitRequest{Version: 3, TransactionalID: "tx-ok", Group: "g-ok", Topics: topicPartitions("t-ok", "t-no")},
			handled: &kmsg.TxnOffsetCommitResponse{Version: 3, Topics: []kmsg.TxnOffsetCommitResponseTopic{{Topic: "t-ok", Partitions: []kmsg.TxnOffsetCommitResponseTopicPartition{{}}}}},
			reached: true, seen: func(r kmsg.Request) bool {
				ts := r.(*kmsg.TxnOffsetCommitRequest).Topics
				return len(ts) == 1 && ts[0].Topic == "t-ok"
			},
			codes: []int16{0, kerr.TopicAuthorizationFailed.Code}},
		{name: "InitProducerId refused id", req: &kmsg.InitProducerIDRequest{Version: 4, TransactionalID: kmsg.StringPtr("tx-no")},
			codes: []int16{kerr.TransactionalIDAuthorizationFailed.Code}},
		{name: "InitProducerId idempotent with WRITE on a topic", req: &kmsg.InitProducerIDRequest{Version: 4}, reached: true, codes: []int16{0}},
		{name: "transactional Produce refused id", req: produce(kmsg.StringPtr("tx-no"), -1), codes: []int16{kerr.TransactionalIDAuthorizationFailed.Code}},
		{name: "FindCoordinator of a refused transactional id", req: &kmsg.FindCoordinatorRequest{Version: 3, CoordinatorType: coordinatorTypeTransaction, CoordinatorKey: "tx-no"},
			codes: []int16{kerr.TransactionalIDAuthorizationFailed.Code}},
		{name: "WriteTxnMarkers without CLUSTER_ACTION", req: &kmsg.WriteTxnMarkersRequest{Version: 1, Markers: []kmsg.WriteTxnMarkersRequestMarker{
			{ProducerID: 1, Topics: []kmsg.WriteTxnMarkersRequestMarkerTopic{{Topic: "t-ok", Partitions: []int32{0}}}}}},
			codes: []int16{kerr.ClusterAuthorizationFailed.Code}},
		{name: "ListTransactions filters", req: &kmsg.ListTransactionsRequest{Version: 1},
			handled: &kmsg.ListTransactionsResponse{Version: 1, TransactionStates: []kmsg.ListTransactionsResponseTransactionState{{TransactionalID: "tx-ok"}, {TransactionalID: "tx-no"}}},
			reached: true, codes: []int16{0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rq := &request{key: tc.req.Key(), version: tc.req.GetVersion(), kreq: tc.req, principal: auth.User("alice"),
				conn: &connState{remote: "127.0.0.1:40000", sec: &Security{Authorizer: az}}}
			var saw kmsg.Request
			h := func(_ *Server, _ context.Context, rq *request) finishFunc {
				saw = rq.kreq
				return func(context.Context) kmsg.Response {
					if tc.handled != nil {
						return tc.handled
					}
					return rq.kreq.ResponseKind()
				}
			}
			resp := s.handle(h, context.Background(), rq)(context.Background())
			if reached := saw != nil; reached != tc.reached {
				t.Fatalf("handler reached: %v, want %v", reached, tc.reached)
			}
			if tc.seen != nil && !tc.seen(saw) {
				t.Fatalf("handler saw %+v", saw)
			}
			if got := codesOf(resp); !slices.Equal(got, tc.codes) {
				t.Fatalf("codes %v, want %v (%+v)", got, tc.codes, resp)
			}
			if l, ok := resp.(*kmsg.ListTransactionsResponse); ok && (len(l.TransactionStates) != 1 || l.TransactionStates[0].TransactionalID != "tx-ok") {
				t.Fatalf("listed %+v, want tx-ok only", l.TransactionStates)
			}
		})
	}

	t.Run("acks=0 produce refused closes the connection", func(t *testing.T) {
		rq := &request{key: int16(kmsg.Produce), version: 9, kreq: produce(nil, 0), principal: auth.User("alice"),
			conn: &connState{remote: "127.0.0.1:40000", sec: &Security{Authorizer: az}}}
		h := func(*Server, context.Context, *request) finishFunc { t.Fatal("handler reached"); return nil }
		if resp := s.handle(h, context.Background(), rq)(context.Background()); resp != nil || !rq.closeAfter {
			t.Fatalf("answered %+v, closeAfter %v; want no answer and the connection closed", resp, rq.closeAfter)
		}
	})
}

// codesOf lists an answer's error codes: the top-level one, else every
// partition's (or coordinator's) in order.
func codesOf(resp kmsg.Response) []int16 {
	var codes []int16
	switch r := resp.(type) {
	case *kmsg.EndTxnResponse:
		codes = append(codes, r.ErrorCode)
	case *kmsg.AddOffsetsToTxnResponse:
		codes = append(codes, r.ErrorCode)
	case *kmsg.InitProducerIDResponse:
		codes = append(codes, r.ErrorCode)
	case *kmsg.FindCoordinatorResponse:
		codes = append(codes, r.ErrorCode)
	case *kmsg.ListTransactionsResponse:
		codes = append(codes, r.ErrorCode)
	case *kmsg.AddPartitionsToTxnResponse:
		for _, t := range r.Topics {
			for _, p := range t.Partitions {
				codes = append(codes, p.ErrorCode)
			}
		}
	case *kmsg.TxnOffsetCommitResponse:
		for _, t := range r.Topics {
			for _, p := range t.Partitions {
				codes = append(codes, p.ErrorCode)
			}
		}
	case *kmsg.ProduceResponse:
		for _, t := range r.Topics {
			for _, p := range t.Partitions {
				codes = append(codes, p.ErrorCode)
			}
		}
	case *kmsg.WriteTxnMarkersResponse:
		for _, m := range r.Markers {
			for _, t := range m.Topics {
				for _, p := range t.Partitions {
					codes = append(codes, p.ErrorCode)
				}
			}
		}
	}
	return codes
}
