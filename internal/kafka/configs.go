package kafka

// Configs:
//
//	DescribeConfigs         (32) v1–4
//	IncrementalAlterConfigs (44) v0–1
//
// DescribeConfigs serves topic resources (Backend.TopicConfigs) and broker
// resources (Backend.BrokerConfigs) named "" or this broker's id; config
// names filter (null: all). include_synonyms lists each config's own value
// as its only synonym; include_documentation passes ConfigEntry.Doc.
// Sensitive values are null. Other resource types (broker loggers, client
// metrics, groups) answer INVALID_REQUEST; a broker resource naming another
// broker answers INVALID_REQUEST too (clients send those to that broker).
//
// IncrementalAlterConfigs serves topic resources (Backend.AlterTopicConfigs,
// validate_only passed through) and, when the Backend has dynamic broker
// configs (BrokerConfigAlterer: ISR mode's replication throttle rates),
// broker resources: "" for the cluster-wide default, or a broker id (any
// broker's, at any broker: the configs live in the metadata store, where
// Kafka would send the request to that broker); the Backend's refusals
// come with its message. Without one, broker configs are static and
// broker resources answer INVALID_REQUEST, as do other types and unknown
// operations. The legacy AlterConfigs (33), which replaces a resource's
// whole config set, is not served (kadm and kafka-clients use the
// incremental API).

import (
	"context"
	"slices"
	"strconv"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func handleDescribeConfigs(s *Server, _ context.Context, rq *request) finishFunc {
	req := rq.kreq.(*kmsg.DescribeConfigsRequest)
	return func(ctx context.Context) kmsg.Response {
		resp := req.ResponseKind().(*kmsg.DescribeConfigsResponse)
		for _, r := range req.Resources {
			rr := kmsg.NewDescribeConfigsResponseResource()
			rr.ResourceType, rr.ResourceName = r.ResourceType, r.ResourceName
			entries, code := s.describeResource(ctx, r)
			if code != 0 {
				rr.ErrorCode = rq.note(code)
				rr.ErrorMessage = errorMessage(code)
				resp.Resources = append(resp.Resources, rr)
				continue
			}
			for _, e := range entries {
				if r.ConfigNames != nil && !slices.Contains(r.ConfigNames, e.Name) {
					continue
				}
				c := kmsg.NewDescribeConfigsResponseResourceConfig()
				c.Name, c.Value, c.ReadOnly, c.IsDefault = e.Name, e.Value, e.ReadOnly, e.Default
				c.Source, c.IsSensitive, c.ConfigType = e.Source, e.Sensitive, e.Type
				if e.Sensitive {
					c.Value = nil
				}
				if req.IncludeSynonyms {
					syn := kmsg.NewDescribeConfigsResponseResourceConfigConfigSynonym()
					syn.Name, syn.Value, syn.Source = c.Name, c.Value, c.Source
					c.ConfigSynonyms = append(c.ConfigSynonyms, syn)
				}
				if req.IncludeDocumentation {
					c.Documentation = e.Doc
				}
				rr.Configs = append(rr.Configs, c)
			}
			resp.Resources = append(resp.Resources, rr)
		}
		return resp
	}
}

func (s *Server) describeResource(ctx context.Context, r kmsg.DescribeConfigsRequestResource) ([]ConfigEntry, int16) {
	switch r.ResourceType {
	case kmsg.ConfigResourceTypeTopic:
		entries, err := s.backend.TopicConfigs(ctx, r.ResourceName)
		return entries, s.errorCode(err, "describe topic configs", "topic", r.ResourceName)
	case kmsg.ConfigResourceTypeBroker:
		if r.ResourceName != "" && r.ResourceName != strconv.Itoa(int(s.backend.Self().ID)) {
			return nil, kerr.InvalidRequest.Code
		}
		entries, err := s.backend.BrokerConfigs(ctx)
		return entries, s.errorCode(err, "describe broker configs")
	default:
		return nil, kerr.InvalidRequest.Code
	}
}

func handleIncrementalAlterConfigs(s *Server, _ context.Context, rq *request) finishFunc {
	req := rq.kreq.(*kmsg.IncrementalAlterConfigsRequest)
	return func(ctx context.Context) kmsg.Response {
		resp := req.ResponseKind().(*kmsg.IncrementalAlterConfigsResponse)
		for _, r := range req.Resources {
			rr := kmsg.NewIncrementalAlterConfigsResponseResource()
			rr.ResourceType, rr.ResourceName = r.ResourceType, r.ResourceName
			var code int16
			var msg *string
			ops := make([]ConfigOp, 0, len(r.Configs))
			for _, c := range r.Configs {
				if c.Op < kmsg.IncrementalAlterConfigOpSet || c.Op > kmsg.IncrementalAlterConfigOpSubtract {
					code = kerr.InvalidRequest.Code
				}
				ops = append(ops, ConfigOp{Name: c.Name, Op: c.Op, Value: c.Value})
			}
			alterer, dynamic := s.backend.(BrokerConfigAlterer)
			switch {
			case code != 0:
			case r.ResourceType == kmsg.ConfigResourceTypeTopic:
				code = s.errorCode(s.backend.AlterTopicConfigs(ctx, r.ResourceName, ops, req.ValidateOnly), "alter topic configs", "topic", r.ResourceName)
				s.topicLimits.forget(r.ResourceName)
			case r.ResourceType == kmsg.ConfigResourceTypeBroker && dynamic:
				err := alterer.AlterBrokerConfigs(ctx, r.ResourceName, ops, req.ValidateOnly)
				if code = s.errorCode(err, "alter broker configs", "broker", r.ResourceName); code != 0 {
					msg = electionMessage(err, code)
				}
			default:
				code = kerr.InvalidRequest.Code
			}
			rr.ErrorCode = rq.note(code)
			rr.ErrorMessage = errorMessage(code)
			if msg != nil {
				rr.ErrorMessage = msg
			}
			resp.Resources = append(resp.Resources, rr)
		}
		return resp
	}
}
