package kafka

// Client quotas (KIP-546), served from the server's quota store
// (Config.Quotas, internal/quota on the metadata store):
//
//	DescribeClientQuotas (48) v0–1
//	AlterClientQuotas    (49) v0–1
//
// Advertised only when the server has a quota store. Entities are user,
// client-id and ip, each named or the default (a null name); keys are
// producer_byte_rate, consumer_byte_rate, request_percentage and
// controller_mutation_rate for users and client ids, and
// connection_creation_rate for IPs (KIP-612). Validation and errors are
// Kafka's (ClientQuotasImage.describe, ClientQuotaControlManager):
//   - Describe: an empty entity type, a type named twice, MATCH_TYPE_EXACT
//     without a name, DEFAULT or SPECIFIED with one, IP combined with user
//     or client-id answer INVALID_REQUEST with Kafka's message; an unknown
//     entity type UNSUPPORTED_VERSION ("Unsupported entity type x"), as
//     Kafka. strict=true selects only entities with exactly the filter's
//     types (kafka-configs --describe uses it), false any that match every
//     component.
//   - Alter: an empty entity, an unknown or repeated entity type, an empty
//     name, IP with user or client-id, an IP that is not an address, a key
//     unknown for the entity, a key set twice, a value ≤ 0, fractional for
//     an integer key or too large answer INVALID_REQUEST for that entry
//     only; validate_only checks and changes nothing. Removing a key that
//     is not set succeeds.
//
// Authorization as Kafka: DESCRIBE_CONFIGS (describe) or ALTER_CONFIGS
// (alter) on the cluster when the listener has an authorizer; refused, the
// describe or every entry answers CLUSTER_AUTHORIZATION_FAILED. Without an
// authorizer anyone may, as in Kafka.
//
// Deviations: Kafka applies one request's alterations in one metadata
// batch; Quire applies each entity's by CAS on its key, one after another,
// so a failure part-way leaves the earlier ones done (each entry says
// which). An entity altered twice in one request: the first alteration is
// applied and the second answers INVALID_REQUEST ("Ignoring duplicate
// entity"; Kafka answers the entity once, with that error). IP names must
// be addresses (Kafka also resolves host names). controller_mutation_rate
// is stored and described but not enforced (Quire's topic creations and
// deletions are not rate-limited).

import (
	"context"
	"errors"
	"strings"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"quire/internal/auth"
	"quire/internal/quota"
)

// quotaErrorCode maps a quota error to a code and message.
func (s *Server) quotaErrorCode(err error, what string) (int16, *string) {
	switch {
	case errors.Is(err, quota.ErrInvalid):
		msg := strings.TrimPrefix(err.Error(), quota.ErrInvalid.Error()+": ")
		return kerr.InvalidRequest.Code, &msg
	case errors.Is(err, quota.ErrUnsupportedEntityType):
		msg := "Unsupported entity type" + strings.TrimPrefix(err.Error(), quota.ErrUnsupportedEntityType.Error())
		return kerr.UnsupportedVersion.Code, &msg
	case errors.Is(err, quota.ErrStatic):
		msg := err.Error()
		return kerr.InvalidRequest.Code, &msg
	}
	code := s.errorCode(err, what)
	return code, errorMessage(code)
}

func handleDescribeClientQuotas(s *Server, _ context.Context, rq *request) finishFunc {
	req := rq.kreq.(*kmsg.DescribeClientQuotasRequest)
	return func(context.Context) kmsg.Response {
		resp := req.ResponseKind().(*kmsg.DescribeClientQuotasResponse)
		if !s.allowedCluster(rq, auth.OpDescribeConfigs) {
			resp.ErrorCode = rq.note(kerr.ClusterAuthorizationFailed.Code)
			resp.ErrorMessage = errorMessage(resp.ErrorCode)
			return resp
		}
		f := quota.Filter{Strict: req.Strict}
		for _, c := range req.Components {
			f.Components = append(f.Components, quota.FilterComponent{Type: c.EntityType, Match: quota.MatchType(c.MatchType), Name: c.Match})
		}
		if err := f.Validate(); err != nil {
			resp.ErrorCode, resp.ErrorMessage = s.quotaErrorCode(err, "describe client quotas")
			rq.note(resp.ErrorCode)
			return resp
		}
		var snap *quota.Snapshot
		if s.quotaStore != nil {
			snap = s.quotaStore.Snapshot()
		}
		resp.Entries = []kmsg.DescribeClientQuotasResponseEntry{}
		for _, e := range snap.Entities() {
			if !f.Matches(e) {
				continue
			}
			entry := kmsg.NewDescribeClientQuotasResponseEntry()
			for _, t := range e.Types() {
				ent := kmsg.NewDescribeClientQuotasResponseEntryEntity()
				ent.Type, ent.Name = t, e.Get(t).NamePtr()
				entry.Entity = append(entry.Entity, ent)
			}
			values := snap.Get(e)
			for _, k := range values.Keys() {
				v := kmsg.NewDescribeClientQuotasResponseEntryValue()
				v.Key, v.Value = k, values[k]
				entry.Values = append(entry.Values, v)
			}
			resp.Entries = append(resp.Entries, entry)
		}
		return resp
	}
}

// quotaEntity reads a request's entity components (Kafka's validateEntity
// for their types; the rest is quota.ValidateOps').
func quotaEntity(components []kmsg.AlterClientQuotasRequestEntryEntity) (quota.Entity, error) {
	var e quota.Entity
	seen := make(map[string]bool)
	for _, c := range components {
		if seen[c.Type] {
			return e, quota.Invalid("Invalid empty client quota entity, duplicate entity entry " + c.Type)
		}
		seen[c.Type] = true
		p := quota.DefaultPart
		if c.Name != nil {
			p = quota.Name(*c.Name)
		}
		if !e.Set(c.Type, p) {
			return e, quota.Invalid("Unhandled client quota entity type: " + c.Type)
		}
	}
	return e, nil
}

func handleAlterClientQuotas(s *Server, _ context.Context, rq *request) finishFunc {
	req := rq.kreq.(*kmsg.AlterClientQuotasRequest)
	return func(ctx context.Context) kmsg.Response {
		resp := req.ResponseKind().(*kmsg.AlterClientQuotasResponse)
		allowed := s.allowedCluster(rq, auth.OpAlterConfigs)
		done := make(map[quota.Entity]bool)
		for _, entry := range req.Entries {
			r := kmsg.NewAlterClientQuotasResponseEntry()
			for _, c := range entry.Entity {
				ent := kmsg.NewAlterClientQuotasResponseEntryEntity()
				ent.Type, ent.Name = c.Type, c.Name
				r.Entity = append(r.Entity, ent)
			}
			err := s.alterClientQuota(ctx, rq, entry, req.ValidateOnly, allowed, done)
			if err != nil {
				r.ErrorCode, r.ErrorMessage = s.quotaErrorCode(err, "alter client quotas")
				rq.note(r.ErrorCode)
			}
			resp.Entries = append(resp.Entries, r)
		}
		return resp
	}
}

var errClusterAuthorization = kerr.ClusterAuthorizationFailed

func (s *Server) alterClientQuota(ctx context.Context, rq *request, entry kmsg.AlterClientQuotasRequestEntry, validateOnly, allowed bool, done map[quota.Entity]bool) error {
	if !allowed {
		return errClusterAuthorization
	}
	e, err := quotaEntity(entry.Entity)
	if err != nil {
		return err
	}
	ops := make([]quota.Op, 0, len(entry.Ops))
	for _, op := range entry.Ops {
		ops = append(ops, quota.Op{Key: op.Key, Value: op.Value, Remove: op.Remove})
	}
	if err := quota.ValidateOps(e, ops); err != nil {
		return err
	}
	if done[e] {
		return quota.Invalid("Ignoring duplicate entity " + e.String())
	}
	done[e] = true
	if s.quotaStore == nil {
		return quota.ErrStatic
	}
	if err := s.quotaStore.Alter(ctx, e, ops, validateOnly); err != nil {
		return err
	}
	if !validateOnly {
		s.log.Info("client quotas altered", "entity", e.String(), "ops", len(ops), "by", rq.principal.String())
	}
	return nil
}
