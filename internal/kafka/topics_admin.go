package kafka

// Topic administration:
//
//	CreateTopics     (19) v2–7
//	DeleteTopics     (20) v1–6 (v6: by name or by topic id)
//	CreatePartitions (37) v0–3
//
// Any broker serves them (Backend does the work; Metadata names a
// controller but ledger mode needs none).
//
// CreateTopics: num_partitions −1 is the Backend's default, 0 or < −1 is
// INVALID_PARTITIONS. replication_factor must be −1 or positive
// (INVALID_REPLICATION_FACTOR otherwise); the Backend reads it from the
// context (ReplicationFactorFrom). Ledger mode ignores it (a topic's
// durability is its ledgers' bookie write quorum, not broker replicas), so
// the response (v5+) reports the replicas Metadata lists: 1 there. Manual
// replica assignments answer INVALID_REPLICA_ASSIGNMENT; a topic named
// twice in one request answers INVALID_REQUEST for each. v5+ responses
// carry the partition count and the topic's configs (from
// Backend.TopicConfigs; none for validate_only); v7 the topic id. Throttle
// is always 0.
//
// CreatePartitions: assignments answer INVALID_REPLICA_ASSIGNMENT.

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func handleCreateTopics(s *Server, _ context.Context, rq *request) finishFunc {
	req := rq.kreq.(*kmsg.CreateTopicsRequest)
	return func(ctx context.Context) kmsg.Response {
		resp := req.ResponseKind().(*kmsg.CreateTopicsResponse)
		seen := make(map[string]int)
		for _, t := range req.Topics {
			seen[t.Topic]++
		}
		for _, t := range req.Topics {
			rt := kmsg.NewCreateTopicsResponseTopic()
			rt.Topic = t.Topic
			rt.NumPartitions, rt.ReplicationFactor = -1, -1
			code := s.createTopic(ctx, req, &t, seen[t.Topic] > 1, &rt)
			rt.ErrorCode = rq.note(code)
			rt.ErrorMessage = errorMessage(code)
			resp.Topics = append(resp.Topics, rt)
		}
		return resp
	}
}

func (s *Server) createTopic(ctx context.Context, req *kmsg.CreateTopicsRequest, t *kmsg.CreateTopicsRequestTopic, duplicate bool, rt *kmsg.CreateTopicsResponseTopic) int16 {
	switch {
	case duplicate:
		return kerr.InvalidRequest.Code
	case len(t.ReplicaAssignment) > 0:
		return kerr.InvalidReplicaAssignment.Code
	case t.NumPartitions == 0 || t.NumPartitions < -1:
		return kerr.InvalidPartitions.Code
	case t.ReplicationFactor == 0 || t.ReplicationFactor < -1:
		return kerr.InvalidReplicationFactor.Code
	}
	configs := make(map[string]*string, len(t.Configs))
	for _, c := range t.Configs {
		configs[c.Name] = c.Value
	}
	err := s.backend.CreateTopic(context.WithValue(ctx, replicationFactorKey{}, t.ReplicationFactor), t.Topic, t.NumPartitions, configs, req.ValidateOnly)
	s.topicLimits.forget(t.Topic)
	if code := s.errorCode(err, "create topic", "topic", t.Topic); code != 0 {
		return code
	}
	rt.ReplicationFactor = 1
	rt.NumPartitions = t.NumPartitions
	if req.ValidateOnly || req.Version < 5 {
		return 0
	}
	if infos, err := s.backend.Topics(ctx, []string{t.Topic}, false); err == nil && len(infos) == 1 {
		rt.TopicID = infos[0].ID
		rt.NumPartitions = int32(len(infos[0].Partitions))
		if ps := infos[0].Partitions; len(ps) > 0 && len(ps[0].Replicas) > 0 {
			rt.ReplicationFactor = int16(len(ps[0].Replicas))
		}
		s.topicIDs.remember(infos)
	}
	entries, err := s.backend.TopicConfigs(ctx, t.Topic)
	if err != nil {
		// The topic exists; only its configs could not be read.
		rt.ConfigErrorCode = s.errorCode(err, "create topic: configs", "topic", t.Topic)
		return 0
	}
	for _, e := range entries {
		c := kmsg.NewCreateTopicsResponseTopicConfig()
		c.Name, c.Value, c.ReadOnly, c.Source, c.IsSensitive = e.Name, e.Value, e.ReadOnly, int8(e.Source), e.Sensitive
		if e.Sensitive {
			c.Value = nil
		}
		rt.Configs = append(rt.Configs, c)
	}
	return 0
}

func handleDeleteTopics(s *Server, _ context.Context, rq *request) finishFunc {
	req := rq.kreq.(*kmsg.DeleteTopicsRequest)
	return func(ctx context.Context) kmsg.Response {
		resp := req.ResponseKind().(*kmsg.DeleteTopicsResponse)
		topics := req.Topics
		if req.Version < 6 {
			topics = nil
			for _, name := range req.TopicNames {
				topics = append(topics, kmsg.DeleteTopicsRequestTopic{Topic: &name})
			}
		}
		for _, t := range topics {
			rt := kmsg.NewDeleteTopicsResponseTopic()
			rt.Topic, rt.TopicID = t.Topic, t.TopicID
			var code int16
			var name string
			switch {
			case t.Topic != nil && t.TopicID != [16]byte{}:
				code = kerr.InvalidRequest.Code
			case t.Topic != nil:
				name = *t.Topic
			default:
				var ok bool
				if name, ok = s.topicIDs.name(ctx, t.TopicID); !ok {
					code = kerr.UnknownTopicID.Code
				} else {
					rt.Topic = &name
				}
			}
			if code == 0 {
				code = s.errorCode(s.backend.DeleteTopic(ctx, name), "delete topic", "topic", name)
				if code == 0 {
					s.topicIDs.forget(name)
					s.topicLimits.forget(name)
				}
			}
			rt.ErrorCode = rq.note(code)
			rt.ErrorMessage = errorMessage(code)
			resp.Topics = append(resp.Topics, rt)
		}
		return resp
	}
}

func handleCreatePartitions(s *Server, _ context.Context, rq *request) finishFunc {
	req := rq.kreq.(*kmsg.CreatePartitionsRequest)
	return func(ctx context.Context) kmsg.Response {
		resp := req.ResponseKind().(*kmsg.CreatePartitionsResponse)
		seen := make(map[string]int)
		for _, t := range req.Topics {
			seen[t.Topic]++
		}
		for _, t := range req.Topics {
			rt := kmsg.NewCreatePartitionsResponseTopic()
			rt.Topic = t.Topic
			var code int16
			switch {
			case seen[t.Topic] > 1:
				code = kerr.InvalidRequest.Code
			case t.Assignment != nil:
				code = kerr.InvalidReplicaAssignment.Code
			default:
				code = s.errorCode(s.backend.CreatePartitions(ctx, t.Topic, t.Count, req.ValidateOnly), "create partitions", "topic", t.Topic)
			}
			rt.ErrorCode = rq.note(code)
			rt.ErrorMessage = errorMessage(code)
			resp.Topics = append(resp.Topics, rt)
		}
		return resp
	}
}
