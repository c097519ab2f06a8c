package kafka

// Authorization: Kafka's ACLs (internal/auth's Authorizer) enforced on every
// API this package serves, on a listener whose Security has an Authorizer;
// without one nothing here runs and every request is served as before.
//
// The checks sit in front of the handlers instead of inside them: an API's
// authorize function (authorizeAPIs) takes the decoded request, answers
// what the principal may not do with Kafka's codes (TOPIC_ (29), GROUP_
// (30), CLUSTER_ (31) and TRANSACTIONAL_ID_AUTHORIZATION_FAILED (53)),
// hands the authorized rest of the request to the API's own handler and
// merges the two answers, as Kafka's KafkaApis does (unauthorized topics
// are answered beside the others, never instead of them). A request with
// nothing authorized never reaches its handler or the Backend.
//
// What each API needs is Kafka's (KafkaApis, 3.x/4.x):
//
//	Produce                 WRITE topic; transactional: WRITE transactional id
//	Fetch                   READ topic; from a replica: CLUSTER_ACTION cluster
//	ListOffsets             DESCRIBE topic
//	Metadata                DESCRIBE topic (others left out of an all-topics
//	                        answer); auto-creation: CREATE cluster or topic
//	OffsetCommit            READ group, READ topic
//	OffsetFetch             DESCRIBE group; DESCRIBE topic (an all-topics
//	                        answer leaves the others out)
//	OffsetDelete            DELETE group, READ topic
//	FindCoordinator         DESCRIBE group / transactional id
//	Join/Sync/Heartbeat/LeaveGroup  READ group
//	DescribeGroups          DESCRIBE group
//	ListGroups              DESCRIBE cluster, or the groups it may DESCRIBE
//	DeleteGroups            DELETE group
//	CreateTopics            CREATE cluster or topic (configs in the answer:
//	                        DESCRIBE_CONFIGS topic)
//	DeleteTopics            DELETE topic
//	CreatePartitions        ALTER topic
//	DescribeConfigs         DESCRIBE_CONFIGS topic / cluster (broker)
//	IncrementalAlterConfigs ALTER_CONFIGS topic / cluster (broker)
//	InitProducerId          WRITE transactional id; idempotent:
//	                        IDEMPOTENT_WRITE cluster or WRITE on some topic
//	AddPartitionsToTxn      WRITE transactional id, WRITE topic
//	AddOffsetsToTxn         WRITE transactional id, READ group
//	EndTxn                  WRITE transactional id
//	TxnOffsetCommit         WRITE transactional id, READ group, READ topic
//	DescribeTransactions    DESCRIBE transactional id
//	ListTransactions        the ids it may DESCRIBE
//	WriteTxnMarkers         CLUSTER_ACTION cluster
//	Describe/AlterUserScramCredentials  DESCRIBE / ALTER cluster
//	                        (scram_credentials.go)
//	Create/DeleteAcls, DescribeAcls     ALTER / DESCRIBE cluster (acls.go)
//	Describe/AlterClientQuotas          DESCRIBE_CONFIGS / ALTER_CONFIGS
//	                        cluster (quotas.go)
//	OffsetForLeaderEpoch    CLUSTER_ACTION cluster, else DESCRIBE topic
//	ElectLeaders            ALTER cluster
//	DescribeLogDirs         DESCRIBE cluster (refused: no directories, and
//	                        from v3 CLUSTER_AUTHORIZATION_FAILED)
//	AlterPartitionReassignments  ALTER cluster (reassignments.go)
//	ListPartitionReassignments   DESCRIBE cluster (reassignments.go)
//	DescribeCluster, ApiVersions, SASL  nothing
//
// Deviations: topics addressed by an ID this broker does not know go to
// the handler (which answers UNKNOWN_TOPIC_ID) unchecked. Brokers talk to
// each other over the Kafka protocol (ISR followers' Fetch, transaction
// markers) as whatever principal their listener gives them: with an
// authorizer on, that principal needs CLUSTER_ACTION on the cluster.

import (
	"context"
	"net/netip"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"quire/internal/auth"
)

// authorizeFunc checks rq and runs the authorized part through h.
type authorizeFunc func(s *Server, ctx context.Context, rq *request, h handler) finishFunc

// authorizeAPIs is each API's check; an API not listed needs none.
var authorizeAPIs map[kmsg.Key]authorizeFunc

func init() {
	authorizeAPIs = map[kmsg.Key]authorizeFunc{
		kmsg.Produce:                 authorizeProduce,
		kmsg.Fetch:                   authorizeFetch,
		kmsg.ListOffsets:             authorizeListOffsets,
		kmsg.Metadata:                authorizeMetadata,
		kmsg.CreateTopics:            authorizeCreateTopics,
		kmsg.DeleteTopics:            authorizeDeleteTopics,
		kmsg.CreatePartitions:        authorizeCreatePartitions,
		kmsg.DescribeConfigs:         authorizeDescribeConfigs,
		kmsg.IncrementalAlterConfigs: authorizeIncrementalAlterConfigs,
		kmsg.InitProducerID:          authorizeInitProducerID,
		kmsg.OffsetCommit:            authorizeOffsetCommit,
		kmsg.OffsetFetch:             authorizeOffsetFetch,
		kmsg.OffsetDelete:            authorizeOffsetDelete,
		kmsg.FindCoordinator:         authorizeFindCoordinator,
		kmsg.JoinGroup:               authorizeGroupMember,
		kmsg.SyncGroup:               authorizeGroupMember,
		kmsg.Heartbeat:               authorizeGroupMember,
		kmsg.LeaveGroup:              authorizeGroupMember,
		kmsg.DescribeGroups:          authorizeDescribeGroups,
		kmsg.ListGroups:              authorizeListGroups,
		kmsg.DeleteGroups:            authorizeDeleteGroups,
		kmsg.AddPartitionsToTxn:      authorizeAddPartitionsToTxn,
		kmsg.AddOffsetsToTxn:         authorizeAddOffsetsToTxn,
		kmsg.EndTxn:                  authorizeEndTxn,
		kmsg.TxnOffsetCommit:         authorizeTxnOffsetCommit,
		kmsg.DescribeTransactions:    authorizeDescribeTransactions,
		kmsg.ListTransactions:        authorizeListTransactions,
		kmsg.WriteTxnMarkers:         authorizeWriteTxnMarkers,
		kmsg.OffsetForLeaderEpoch:    authorizeOffsetForLeaderEpoch,
		kmsg.ElectLeaders:            authorizeElectLeaders,
		kmsg.DescribeLogDirs:         authorizeDescribeLogDirs,
		// reassignments.go
		kmsg.AlterPartitionAssignments:  authorizeAlterPartitionReassignments,
		kmsg.ListPartitionReassignments: authorizeListPartitionReassignments,
	}
}

// authorizer is the authorizer of rq's listener, or nil.
func (rq *request) authorizer() *auth.Authorizer {
	if rq.conn == nil || rq.conn.sec == nil {
		return nil
	}
	return rq.conn.sec.Authorizer
}

// handle runs a request's handler, behind its authorization when its
// listener has an authorizer.
func (s *Server) handle(h handler, ctx context.Context, rq *request) finishFunc {
	if rq.authorizer() == nil {
		return h(s, ctx, rq)
	}
	if check := authorizeAPIs[kmsg.Key(rq.key)]; check != nil {
		return check(s, ctx, rq, h)
	}
	return h(s, ctx, rq)
}

// requester is who sent rq: its principal and the client's address.
func requester(rq *request) auth.Requester {
	who := auth.Requester{Principal: rq.principal}
	if ap, err := netip.ParseAddrPort(rq.conn.remote); err == nil {
		who.Host = ap.Addr()
	}
	return who
}

// allowed decides one operation on one resource. Without an authorizer
// everything is allowed.
func (s *Server) allowed(rq *request, op auth.Operation, rtype auth.ResourceType, name string) bool {
	az := rq.authorizer()
	return az == nil || az.Authorize(requester(rq), op, rtype, name)
}

func (s *Server) allowedTopic(rq *request, op auth.Operation, topic string) bool {
	return s.allowed(rq, op, auth.ResourceTopic, topic)
}

func (s *Server) allowedGroup(rq *request, op auth.Operation, group string) bool {
	return s.allowed(rq, op, auth.ResourceGroup, group)
}

func (s *Server) allowedCluster(rq *request, op auth.Operation) bool {
	return s.allowed(rq, op, auth.ResourceCluster, auth.ClusterName)
}

func (s *Server) allowedTxn(rq *request, op auth.Operation, id string) bool {
	return s.allowed(rq, op, auth.ResourceTransactionalID, id)
}

// authorizedOperations is Kafka's bit set of the operations the principal
// may do on a resource (Metadata's and DescribeGroups' authorized
// operations): bit n for operation code n, of the operations that apply to
// the resource type.
func (s *Server) authorizedOperations(rq *request, rtype auth.ResourceType, name string) int32 {
	var ops []auth.Operation
	switch rtype {
	case auth.ResourceTopic:
		ops = []auth.Operation{auth.OpRead, auth.OpWrite, auth.OpCreate, auth.OpDescribe, auth.OpDelete, auth.OpAlter, auth.OpDescribeConfigs, auth.OpAlterConfigs}
	case auth.ResourceGroup:
		ops = []auth.Operation{auth.OpRead, auth.OpDescribe, auth.OpDelete}
	case auth.ResourceCluster:
		ops = []auth.Operation{auth.OpCreate, auth.OpClusterAction, auth.OpDescribeConfigs, auth.OpAlterConfigs, auth.OpIdempotentWrite, auth.OpAlter, auth.OpDescribe}
	}
	var bits int32
	for _, op := range ops {
		if s.allowed(rq, op, rtype, name) {
			bits |= 1 << op
		}
	}
	return bits
}

// topicName is the name of a topic addressed by name or (when byID) by id;
// false when the id is unknown here.
func (s *Server) topicName(ctx context.Context, name string, id [16]byte, byID bool) (string, bool) {
	if !byID {
		return name, true
	}
	return s.topicIDs.name(ctx, id)
}

// through runs h on rq with its request replaced by req (the authorized
// part) and gives the response to merge in the finish phase.
func through[Resp kmsg.Response](s *Server, ctx context.Context, rq *request, h handler, req kmsg.Request, merge func(Resp)) finishFunc {
	rq.kreq = req
	finish := h(s, ctx, rq)
	return func(ctx context.Context) kmsg.Response {
		resp := finish(ctx)
		if r, ok := resp.(Resp); ok && merge != nil {
			merge(r)
		}
		return resp
	}
}

// answer is a finish that returns resp without running any handler.
func answer(resp kmsg.Response) finishFunc {
	return func(context.Context) kmsg.Response { return resp }
}

func authorizeProduce(s *Server, ctx context.Context, rq *request, h handler) finishFunc {
	req := rq.kreq.(*kmsg.ProduceRequest)
	txnDenied := req.TransactionID != nil && s.withTxns && !s.allowedTxn(rq, auth.OpWrite, *req.TransactionID)
	var kept []kmsg.ProduceRequestTopic
	var denied []kmsg.ProduceResponseTopic
	for _, t := range req.Topics {
		code := kerr.TransactionalIDAuthorizationFailed.Code
		if !txnDenied {
			name, known := s.topicName(ctx, t.Topic, t.TopicID, req.Version >= 13)
			if !known || s.allowedTopic(rq, auth.OpWrite, name) {
				kept = append(kept, t)
				continue
			}
			code = kerr.TopicAuthorizationFailed.Code
		}
		rt := kmsg.NewProduceResponseTopic()
		rt.Topic, rt.TopicID = t.Topic, t.TopicID
		for _, p := range t.Partitions {
			rp := kmsg.NewProduceResponseTopicPartition()
			rp.Partition, rp.ErrorCode = p.Partition, rq.note(code)
			rp.BaseOffset, rp.LogAppendTime, rp.LogStartOffset = -1, -1, -1
			rt.Partitions = append(rt.Partitions, rp)
		}
		denied = append(denied, rt)
	}
	if len(denied) == 0 {
		return h(s, ctx, rq)
	}
	if len(kept) == 0 {
		if req.Acks == 0 {
			// Kafka closes an acks=0 producer's connection on any error.
			return func(context.Context) kmsg.Response { rq.closeAfter = true; return nil }
		}
		resp := req.ResponseKind().(*kmsg.ProduceResponse)
		resp.Topics = denied
		return answer(resp)
	}
	// The handler sees rq's error code noted, so an acks=0 request closes
	// its connection after the authorized appends.
	authorized := *req
	authorized.Topics = kept
	return through(s, ctx, rq, h, &authorized, func(resp *kmsg.ProduceResponse) {
		resp.Topics = append(resp.Topics, denied...)
	})
}

func authorizeFetch(s *Server, ctx context.Context, rq *request, h handler) finishFunc {
	req := rq.kreq.(*kmsg.FetchRequest)
	fromReplica := req.ReplicaID >= 0 || req.ReplicaState.ID >= 0
	replicaDenied := fromReplica && !s.allowedCluster(rq, auth.OpClusterAction)
	var kept []kmsg.FetchRequestTopic
	var denied []kmsg.FetchResponseTopic
	for _, t := range req.Topics {
		if !replicaDenied {
			name, known := s.topicName(ctx, t.Topic, t.TopicID, req.Version >= 13)
			if fromReplica || !known || s.allowedTopic(rq, auth.OpRead, name) {
				kept = append(kept, t)
				continue
			}
		}
		rt := kmsg.NewFetchResponseTopic()
		rt.Topic, rt.TopicID = t.Topic, t.TopicID
		for _, p := range t.Partitions {
			rp := kmsg.NewFetchResponseTopicPartition()
			rp.Partition, rp.ErrorCode = p.Partition, rq.note(kerr.TopicAuthorizationFailed.Code)
			rp.HighWatermark, rp.LastStableOffset, rp.LogStartOffset, rp.RecordBatches = -1, -1, -1, noRecords
			rt.Partitions = append(rt.Partitions, rp)
		}
		denied = append(denied, rt)
	}
	if len(denied) == 0 {
		return h(s, ctx, rq)
	}
	authorized := *req
	authorized.Topics = kept
	rq.kreq = &authorized
	finish := h(s, ctx, rq)
	return func(ctx context.Context) kmsg.Response {
		resp := finish(ctx)
		switch r := resp.(type) {
		case *fetchAnswer:
			// Appended after the answered partitions, whose held record
			// batches are indexed by position.
			r.Topics = append(r.Topics, denied...)
		case *kmsg.FetchResponse:
			r.Topics = append(r.Topics, denied...)
		}
		return resp
	}
}

func authorizeListOffsets(s *Server, ctx context.Context, rq *request, h handler) finishFunc {
	req := rq.kreq.(*kmsg.ListOffsetsRequest)
	var kept []kmsg.ListOffsetsRequestTopic
	var denied []kmsg.ListOffsetsResponseTopic
	for _, t := range req.Topics {
		if s.allowedTopic(rq, auth.OpDescribe, t.Topic) {
			kept = append(kept, t)
			continue
		}
		rt := kmsg.NewListOffsetsResponseTopic()
		rt.Topic = t.Topic
		for _, p := range t.Partitions {
			rp := kmsg.NewListOffsetsResponseTopicPartition()
			rp.Partition, rp.ErrorCode = p.Partition, rq.note(kerr.TopicAuthorizationFailed.Code)
			rp.Offset, rp.Timestamp, rp.LeaderEpoch = -1, -1, -1
			rt.Partitions = append(rt.Partitions, rp)
		}
		denied = append(denied, rt)
	}
	if len(denied) == 0 {
		return h(s, ctx, rq)
	}
	authorized := *req
	authorized.Topics = kept
	return through(s, ctx, rq, h, &authorized, func(resp *kmsg.ListOffsetsResponse) {
		resp.Topics = append(resp.Topics, denied...)
	})
}

// authorizeMetadata runs everything in the finish phase, as Metadata
// does: telling which topics exist (for auto-creation) asks the Backend.
func authorizeMetadata(s *Server, _ context.Context, rq *request, h handler) finishFunc {
	req := rq.kreq.(*kmsg.MetadataRequest)
	all := req.Topics == nil || (req.Version == 0 && len(req.Topics) == 0)
	return func(ctx context.Context) kmsg.Response {
		authorized := *req
		var denied []kmsg.MetadataResponseTopic
		if !all {
			authorized.Topics, denied = s.authorizeMetadataTopics(ctx, rq, req)
			if len(authorized.Topics) == 0 {
				// An empty list means every topic to a v0 request: ask as
				// v1 does for none (only the request's version changes;
				// the answer keeps the client's).
				authorized.Topics = []kmsg.MetadataRequestTopic{}
				authorized.Version = max(authorized.Version, 1)
			}
		}
		rq.kreq = &authorized
		resp := h(s, ctx, rq)(ctx).(*kmsg.MetadataResponse)
		resp.SetVersion(req.Version)
		if all {
			// Topics it may not describe are left out, without a word.
			kept := resp.Topics[:0]
			for _, t := range resp.Topics {
				if t.Topic == nil || s.allowedTopic(rq, auth.OpDescribe, *t.Topic) {
					kept = append(kept, t)
				}
			}
			resp.Topics = kept
		}
		resp.Topics = append(resp.Topics, denied...)
		if req.IncludeClusterAuthorizedOperations && req.Version >= 8 && req.Version <= 10 {
			resp.AuthorizedOperations = s.authorizedOperations(rq, auth.ResourceCluster, auth.ClusterName)
		}
		if req.IncludeTopicAuthorizedOperations && req.Version >= 8 {
			for i := range resp.Topics {
				if t := &resp.Topics[i]; t.ErrorCode == 0 && t.Topic != nil {
					t.AuthorizedOperations = s.authorizedOperations(rq, auth.ResourceTopic, *t.Topic)
				}
			}
		}
		return resp
	}
}

// authorizeMetadataTopics splits a Metadata request's topics into those it
// may see and the answers to the others: TOPIC_AUTHORIZATION_FAILED for a
// topic it may not DESCRIBE, and for one that does not exist and that
// auto-creation would create without CREATE on the cluster or the topic.
func (s *Server) authorizeMetadataTopics(ctx context.Context, rq *request, req *kmsg.MetadataRequest) ([]kmsg.MetadataRequestTopic, []kmsg.MetadataResponseTopic) {
	autoCreate := req.Version < 4 || req.AllowAutoTopicCreation
	mayCreateAll := autoCreate && s.allowedCluster(rq, auth.OpCreate)
	var kept []kmsg.MetadataRequestTopic
	var denied []kmsg.MetadataResponseTopic
	var noCreate []string
	for _, t := range req.Topics {
		name, known := s.topicName(ctx, deref(t.Topic), t.TopicID, t.Topic == nil)
		switch {
		case !known:
			kept = append(kept, t)
		case !s.allowedTopic(rq, auth.OpDescribe, name):
			shown := name
			if t.Topic == nil {
				shown = "" // asked by ID: the name is not told
			}
			denied = append(denied, metadataTopicError(shown, t.TopicID, t.Topic == nil, rq.note(kerr.TopicAuthorizationFailed.Code)))
		default:
			if autoCreate && !mayCreateAll && t.Topic != nil && !s.allowedTopic(rq, auth.OpCreate, name) {
				noCreate = append(noCreate, name)
			}
			kept = append(kept, t)
		}
	}
	if len(noCreate) == 0 {
		return kept, denied
	}
	// Topics it may not create are asked for without auto-creation; those
	// that do not exist are answered here.
	existing, err := s.backend.Topics(ctx, noCreate, false)
	exists := make(map[string]bool, len(existing))
	for _, t := range existing {
		exists[t.Name] = true
	}
	code := kerr.TopicAuthorizationFailed.Code
	if err != nil {
		code = s.errorCode(err, "metadata: topics", "topics", noCreate)
	}
	missing := make(map[string]bool)
	for _, name := range noCreate {
		if !exists[name] {
			missing[name] = true
		}
	}
	filtered := kept[:0]
	for _, t := range kept {
		if t.Topic != nil && missing[*t.Topic] {
			denied = append(denied, metadataTopicError(*t.Topic, t.TopicID, false, rq.note(code)))
			delete(missing, *t.Topic) // a name asked twice is answered once
			continue
		}
		filtered = append(filtered, t)
	}
	return filtered, denied
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

func authorizeCreateTopics(s *Server, ctx context.Context, rq *request, h handler) finishFunc {
	req := rq.kreq.(*kmsg.CreateTopicsRequest)
	mayCreateAll := s.allowedCluster(rq, auth.OpCreate)
	var kept []kmsg.CreateTopicsRequestTopic
	var denied []kmsg.CreateTopicsResponseTopic
	for _, t := range req.Topics {
		if mayCreateAll || s.allowedTopic(rq, auth.OpCreate, t.Topic) {
			kept = append(kept, t)
			continue
		}
		rt := kmsg.NewCreateTopicsResponseTopic()
		rt.Topic, rt.ErrorCode = t.Topic, rq.note(kerr.TopicAuthorizationFailed.Code)
		rt.ErrorMessage = errorMessage(rt.ErrorCode)
		rt.NumPartitions, rt.ReplicationFactor = -1, -1
		denied = append(denied, rt)
	}
	authorized := *req
	authorized.Topics = kept
	return through(s, ctx, rq, h, &authorized, func(resp *kmsg.CreateTopicsResponse) {
		// Created topics' configs are shown only to who may describe them.
		for i := range resp.Topics {
			if t := &resp.Topics[i]; t.ErrorCode == 0 && len(t.Configs) > 0 && !s.allowedTopic(rq, auth.OpDescribeConfigs, t.Topic) {
				t.Configs, t.ConfigErrorCode = nil, kerr.TopicAuthorizationFailed.Code
			}
		}
		resp.Topics = append(resp.Topics, denied...)
	})
}

func authorizeDeleteTopics(s *Server, ctx context.Context, rq *request, h handler) finishFunc {
	req := rq.kreq.(*kmsg.DeleteTopicsRequest)
	authorized := *req
	authorized.TopicNames, authorized.Topics = nil, nil
	var denied []kmsg.DeleteTopicsResponseTopic
	deny := func(name *string, id [16]byte) {
		rt := kmsg.NewDeleteTopicsResponseTopic()
		rt.Topic, rt.TopicID, rt.ErrorCode = name, id, rq.note(kerr.TopicAuthorizationFailed.Code)
		rt.ErrorMessage = errorMessage(rt.ErrorCode)
		denied = append(denied, rt)
	}
	if req.Version < 6 {
		for _, name := range req.TopicNames {
			if s.allowedTopic(rq, auth.OpDelete, name) {
				authorized.TopicNames = append(authorized.TopicNames, name)
			} else {
				deny(kmsg.StringPtr(name), [16]byte{})
			}
		}
		if authorized.TopicNames == nil {
			authorized.TopicNames = []string{}
		}
	} else {
		for _, t := range req.Topics {
			name, known := s.topicName(ctx, deref(t.Topic), t.TopicID, t.Topic == nil)
			if !known || s.allowedTopic(rq, auth.OpDelete, name) {
				authorized.Topics = append(authorized.Topics, t)
			} else {
				deny(t.Topic, t.TopicID)
			}
		}
		if authorized.Topics == nil {
			authorized.Topics = []kmsg.DeleteTopicsRequestTopic{}
		}
	}
	return through(s, ctx, rq, h, &authorized, func(resp *kmsg.DeleteTopicsResponse) {
		resp.Topics = append(resp.Topics, denied...)
	})
}

func authorizeCreatePartitions(s *Server, ctx context.Context, rq *request, h handler) finishFunc {
	req := rq.kreq.(*kmsg.CreatePartitionsRequest)
	var kept []kmsg.CreatePartitionsRequestTopic
	var denied []kmsg.CreatePartitionsResponseTopic
	for _, t := range req.Topics {
		if s.allowedTopic(rq, auth.OpAlter, t.Topic) {
			kept = append(kept, t)
			continue
		}
		rt := kmsg.NewCreatePartitionsResponseTopic()
		rt.Topic, rt.ErrorCode = t.Topic, rq.note(kerr.TopicAuthorizationFailed.Code)
		rt.ErrorMessage = errorMessage(rt.ErrorCode)
		denied = append(denied, rt)
	}
	authorized := *req
	authorized.Topics = kept
	return through(s, ctx, rq, h, &authorized, func(resp *kmsg.CreatePartitionsResponse) {
		resp.Topics = append(resp.Topics, denied...)
	})
}

// configResourceDenied is the code that refuses op on a config resource,
// or 0. Broker (and broker logger) configs are the cluster's.
func (s *Server) configResourceDenied(rq *request, op auth.Operation, rtype kmsg.ConfigResourceType, name string) int16 {
	switch rtype {
	case kmsg.ConfigResourceTypeTopic:
		if !s.allowedTopic(rq, op, name) {
			return kerr.TopicAuthorizationFailed.Code
		}
	case kmsg.ConfigResourceTypeBroker, kmsg.ConfigResourceTypeBrokerLogger:
		if !s.allowedCluster(rq, op) {
			return kerr.ClusterAuthorizationFailed.Code
		}
	}
	return 0
}

func authorizeDescribeConfigs(s *Server, ctx context.Context, rq *request, h handler) finishFunc {
	req := rq.kreq.(*kmsg.DescribeConfigsRequest)
	var kept []kmsg.DescribeConfigsRequestResource
	var denied []kmsg.DescribeConfigsResponseResource
	for _, r := range req.Resources {
		code := s.configResourceDenied(rq, auth.OpDescribeConfigs, r.ResourceType, r.ResourceName)
		if code == 0 {
			kept = append(kept, r)
			continue
		}
		rr := kmsg.NewDescribeConfigsResponseResource()
		rr.ResourceType, rr.ResourceName, rr.ErrorCode = r.ResourceType, r.ResourceName, rq.note(code)
		rr.ErrorMessage = errorMessage(code)
		denied = append(denied, rr)
	}
	authorized := *req
	authorized.Resources = kept
	return through(s, ctx, rq, h, &authorized, func(resp *kmsg.DescribeConfigsResponse) {
		resp.Resources = append(resp.Resources, denied...)
	})
}

func authorizeIncrementalAlterConfigs(s *Server, ctx context.Context, rq *request, h handler) finishFunc {
	req := rq.kreq.(*kmsg.IncrementalAlterConfigsRequest)
	var kept []kmsg.IncrementalAlterConfigsRequestResource
	var denied []kmsg.IncrementalAlterConfigsResponseResource
	for _, r := range req.Resources {
		code := s.configResourceDenied(rq, auth.OpAlterConfigs, r.ResourceType, r.ResourceName)
		if code == 0 {
			kept = append(kept, r)
			continue
		}
		rr := kmsg.NewIncrementalAlterConfigsResponseResource()
		rr.ResourceType, rr.ResourceName, rr.ErrorCode = r.ResourceType, r.ResourceName, rq.note(code)
		rr.ErrorMessage = errorMessage(code)
		denied = append(denied, rr)
	}
	authorized := *req
	authorized.Resources = kept
	return through(s, ctx, rq, h, &authorized, func(resp *kmsg.IncrementalAlterConfigsResponse) {
		resp.Resources = append(resp.Resources, denied...)
	})
}

func authorizeInitProducerID(s *Server, ctx context.Context, rq *request, h handler) finishFunc {
	req := rq.kreq.(*kmsg.InitProducerIDRequest)
	var code int16
	switch {
	case req.TransactionalID != nil:
		if !s.allowedTxn(rq, auth.OpWrite, *req.TransactionalID) {
			code = kerr.TransactionalIDAuthorizationFailed.Code
		}
	case !s.allowedCluster(rq, auth.OpIdempotentWrite) && !rq.authorizer().AuthorizeAny(requester(rq), auth.OpWrite, auth.ResourceTopic):
		// Kafka 3+: WRITE on any topic is enough to be idempotent.
		code = kerr.ClusterAuthorizationFailed.Code
	}
	if code == 0 {
		return h(s, ctx, rq)
	}
	resp := req.ResponseKind().(*kmsg.InitProducerIDResponse)
	resp.ProducerID, resp.ProducerEpoch, resp.ErrorCode = -1, -1, rq.note(code)
	return answer(resp)
}

func authorizeOffsetForLeaderEpoch(s *Server, ctx context.Context, rq *request, h handler) finishFunc {
	req := rq.kreq.(*kmsg.OffsetForLeaderEpochRequest)
	if s.allowedCluster(rq, auth.OpClusterAction) {
		return h(s, ctx, rq)
	}
	var kept []kmsg.OffsetForLeaderEpochRequestTopic
	var denied []kmsg.OffsetForLeaderEpochResponseTopic
	for _, t := range req.Topics {
		if s.allowedTopic(rq, auth.OpDescribe, t.Topic) {
			kept = append(kept, t)
			continue
		}
		rt := kmsg.NewOffsetForLeaderEpochResponseTopic()
		rt.Topic = t.Topic
		for _, p := range t.Partitions {
			rp := kmsg.NewOffsetForLeaderEpochResponseTopicPartition()
			rp.Partition, rp.ErrorCode = p.Partition, rq.note(kerr.TopicAuthorizationFailed.Code)
			rp.LeaderEpoch, rp.EndOffset = -1, -1
			rt.Partitions = append(rt.Partitions, rp)
		}
		denied = append(denied, rt)
	}
	if len(denied) == 0 {
		return h(s, ctx, rq)
	}
	authorized := *req
	authorized.Topics = kept
	return through(s, ctx, rq, h, &authorized, func(resp *kmsg.OffsetForLeaderEpochResponse) {
		resp.Topics = append(resp.Topics, denied...)
	})
}

func authorizeElectLeaders(s *Server, ctx context.Context, rq *request, h handler) finishFunc {
	req := rq.kreq.(*kmsg.ElectLeadersRequest)
	if s.allowedCluster(rq, auth.OpAlter) {
		return h(s, ctx, rq)
	}
	code := rq.note(kerr.ClusterAuthorizationFailed.Code)
	resp := req.ResponseKind().(*kmsg.ElectLeadersResponse)
	resp.ErrorCode = code
	for _, t := range req.Topics {
		rt := kmsg.NewElectLeadersResponseTopic()
		rt.Topic = t.Topic
		for _, p := range t.Partitions {
			rt.Partitions = append(rt.Partitions, electionAnswer(p, code, errorMessage(code)))
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return answer(resp)
}

func authorizeDescribeLogDirs(s *Server, ctx context.Context, rq *request, h handler) finishFunc {
	req := rq.kreq.(*kmsg.DescribeLogDirsRequest)
	if s.allowedCluster(rq, auth.OpDescribe) {
		return h(s, ctx, rq)
	}
	resp := req.ResponseKind().(*kmsg.DescribeLogDirsResponse)
	resp.Dirs = []kmsg.DescribeLogDirsResponseDir{}
	resp.ErrorCode = rq.note(kerr.ClusterAuthorizationFailed.Code)
	return answer(resp)
}
