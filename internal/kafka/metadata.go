package kafka

// Metadata (key 3), versions 0–13.
//
// Brokers come from Backend.Brokers, topics and partitions from
// Backend.Topics. Topics are auto-created (by the Backend, if it allows) for
// versions below 4 and when allow_auto_topic_creation is set from v4 on. A
// partition whose Leader is −1 gets LEADER_NOT_AVAILABLE so clients retry.
// v10+ topics requested by ID only are resolved through the topic-ID cache
// (UNKNOWN_TOPIC_ID when unknown).
//
// Authorization (a listener with an authorizer) is authorize.go's: topics
// the principal may not describe are left out, or answered
// TOPIC_AUTHORIZATION_FAILED when named, and authorized operations are
// filled in when asked for.
//
// Deviations: without an authorizer, topic (v8+) and cluster (v8–v10)
// authorized operations are always −2147483648 ("not provided"), also when
// asked for. Leader epochs, replicas, ISR and offline replicas are the
// Backend's: ISR mode's partition records; ledger mode gives epoch −1 (so
// clients validate nothing with OffsetForLeaderEpoch), the owner as the
// only replica and no offline one.

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

const authorizedOperationsOmitted = -2147483648

func handleMetadata(s *Server, ctx context.Context, rq *request) finishFunc {
	req := rq.kreq.(*kmsg.MetadataRequest)
	resp := req.ResponseKind().(*kmsg.MetadataResponse)
	return func(ctx context.Context) kmsg.Response {
		s.metadata(ctx, rq, req, resp)
		return resp
	}
}

func (s *Server) metadata(ctx context.Context, rq *request, req *kmsg.MetadataRequest, resp *kmsg.MetadataResponse) {
	brokers, err := s.backend.Brokers(ctx)
	if err != nil {
		s.errorCode(err, "brokers")
		brokers = []Node{s.backend.Self()}
	}
	for _, b := range brokers {
		e, ok := b.Endpoint(rq.listener())
		if !ok {
			continue // no listener of this connection's name there
		}
		rb := kmsg.NewMetadataResponseBroker()
		rb.NodeID, rb.Host, rb.Port, rb.Rack = b.ID, e.Host, e.Port, b.Rack
		resp.Brokers = append(resp.Brokers, rb)
	}
	clusterID := s.backend.ClusterID()
	resp.ClusterID = &clusterID
	resp.ControllerID = s.backend.ControllerID()
	resp.AuthorizedOperations = authorizedOperationsOmitted

	// Which topics: all when the list is null (v1+) or empty (v0).
	all := req.Topics == nil || (req.Version == 0 && len(req.Topics) == 0)
	autoCreate := req.Version < 4 || req.AllowAutoTopicCreation

	type wanted struct {
		name string
		id   [16]byte
		// idOnly: asked by ID; an unknown one answers UNKNOWN_TOPIC_ID.
		idOnly bool
		known  bool
	}
	var want []wanted
	var names []string
	if !all {
		for _, t := range req.Topics {
			w := wanted{id: t.TopicID}
			switch {
			case t.Topic != nil:
				w.name, w.known = *t.Topic, true
			default:
				w.idOnly = true
				w.name, w.known = s.topicIDs.name(ctx, t.TopicID)
			}
			want = append(want, w)
			if w.known {
				names = append(names, w.name)
			}
		}
	}
	var topics []TopicInfo
	if all || len(names) > 0 {
		if all {
			names = nil
		}
		topics, err = s.backend.Topics(ctx, names, autoCreate && !all)
		if err != nil {
			code := rq.note(s.errorCode(err, "topics"))
			if all {
				// No topic to hang the error on: Kafka would time out;
				// answer the brokers and no topics so the client retries.
				return
			}
			for _, w := range want {
				resp.Topics = append(resp.Topics, metadataTopicError(w.name, w.id, w.idOnly, code))
			}
			return
		}
		s.topicIDs.remember(topics)
	}
	byName := make(map[string]*TopicInfo, len(topics))
	for i := range topics {
		byName[topics[i].Name] = &topics[i]
	}
	if all {
		for i := range topics {
			resp.Topics = append(resp.Topics, metadataTopic(&topics[i]))
		}
		return
	}
	for _, w := range want {
		t := byName[w.name]
		switch {
		case !w.known:
			resp.Topics = append(resp.Topics, metadataTopicError("", w.id, true, rq.note(kerr.UnknownTopicID.Code)))
		case t == nil:
			code := kerr.UnknownTopicOrPartition.Code
			if w.idOnly {
				code = kerr.UnknownTopicID.Code
			}
			resp.Topics = append(resp.Topics, metadataTopicError(w.name, w.id, w.idOnly, rq.note(code)))
		default:
			resp.Topics = append(resp.Topics, metadataTopic(t))
		}
	}
}

func metadataTopic(t *TopicInfo) kmsg.MetadataResponseTopic {
	rt := kmsg.NewMetadataResponseTopic()
	name := t.Name
	rt.Topic, rt.TopicID, rt.IsInternal = &name, t.ID, t.Internal
	rt.AuthorizedOperations = authorizedOperationsOmitted
	for _, p := range t.Partitions {
		rp := kmsg.NewMetadataResponseTopicPartition()
		rp.Partition, rp.Leader, rp.LeaderEpoch = p.Partition, p.Leader, p.LeaderEpoch
		rp.Replicas, rp.ISR, rp.OfflineReplicas = nonNil(p.Replicas), nonNil(p.ISR), nonNil(p.OfflineReplicas)
		if p.Leader < 0 {
			rp.ErrorCode = kerr.LeaderNotAvailable.Code
		}
		rt.Partitions = append(rt.Partitions, rp)
	}
	if rt.Partitions == nil {
		rt.Partitions = []kmsg.MetadataResponseTopicPartition{}
	}
	return rt
}

func metadataTopicError(name string, id [16]byte, idOnly bool, code int16) kmsg.MetadataResponseTopic {
	rt := kmsg.NewMetadataResponseTopic()
	if !idOnly || name != "" {
		rt.Topic = &name
	}
	rt.TopicID, rt.ErrorCode = id, code
	rt.AuthorizedOperations = authorizedOperationsOmitted
	rt.Partitions = []kmsg.MetadataResponseTopicPartition{}
	return rt
}

func nonNil(s []int32) []int32 {
	if s == nil {
		return []int32{}
	}
	return s
}
