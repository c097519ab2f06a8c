package kafka

// The ACL APIs, served from the authorizer's ACL store (internal/auth):
//
//	DescribeAcls (29) v1–3
//	CreateAcls   (30) v1–3
//	DeleteAcls   (31) v1–3
//
// Advertised only on a listener with an authorizer. v0 (no pattern type)
// is not served, as in Kafka 4.0 (KIP-896). Creating needs ALTER on the
// cluster, deleting ALTER, describing DESCRIBE (super users may always);
// refused, every creation or filter (or the describe) answers
// CLUSTER_AUTHORIZATION_FAILED. An invalid ACL or filter (UNKNOWN or ANY
// codes where a concrete one is needed, MATCH or ANY patterns in a
// creation, an empty resource name, a CLUSTER resource not named
// kafka-cluster, a principal not in Type:name form) answers INVALID_REQUEST
// with the reason, as Kafka's AclControlManager. Creating an ACL that
// exists succeeds and changes nothing. Each change is on this broker's
// copy of the ACLs when its answer is sent, so the client's next request
// here is decided by it; other brokers follow within their watch's delay.
//
// Deviations: Kafka applies a request's creations (or deletions) in one
// metadata batch; Quire writes one key per ACL, one after another, so a
// failure part-way leaves the earlier ones done (each result says which).
// Throttle is always 0.

import (
	"context"
	"errors"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"quire/internal/auth"
)

// aclErrorCode maps an ACL store error to a code and message.
func (s *Server) aclErrorCode(err error, what string) (int16, *string) {
	if errors.Is(err, auth.ErrInvalidACL) {
		msg := err.Error()
		return kerr.InvalidRequest.Code, &msg
	}
	code := s.errorCode(err, what)
	return code, errorMessage(code)
}

// aclStore is where the ACLs are changed, or nil (a static authorizer).
func aclStore(rq *request) *auth.ACLStore {
	if az := rq.authorizer(); az != nil {
		return az.Store
	}
	return nil
}

func handleCreateACLs(s *Server, _ context.Context, rq *request) finishFunc {
	req := rq.kreq.(*kmsg.CreateACLsRequest)
	return func(ctx context.Context) kmsg.Response {
		resp := req.ResponseKind().(*kmsg.CreateACLsResponse)
		allowed := s.allowedCluster(rq, auth.OpAlter)
		store := aclStore(rq)
		for _, c := range req.Creations {
			r := kmsg.NewCreateACLsResponseResult()
			switch {
			case !allowed:
				r.ErrorCode = kerr.ClusterAuthorizationFailed.Code
				r.ErrorMessage = errorMessage(r.ErrorCode)
			case store == nil:
				r.ErrorCode = kerr.SecurityDisabled.Code
				r.ErrorMessage = errorMessage(r.ErrorCode)
			default:
				acl, err := aclFromCreation(c)
				if err == nil {
					err = store.Create(ctx, acl)
				}
				if err != nil {
					r.ErrorCode, r.ErrorMessage = s.aclErrorCode(err, "create ACL")
				} else {
					s.log.Info("ACL created", "acl", acl.String(), "by", rq.principal.String())
				}
			}
			rq.note(r.ErrorCode)
			resp.Results = append(resp.Results, r)
		}
		return resp
	}
}

func aclFromCreation(c kmsg.CreateACLsRequestCreation) (auth.ACL, error) {
	p, err := auth.ParsePrincipal(c.Principal)
	if err != nil {
		return auth.ACL{}, err
	}
	acl := auth.ACL{
		ResourceType: auth.ResourceType(c.ResourceType), ResourceName: c.ResourceName,
		PatternType: auth.PatternType(c.ResourcePatternType), Principal: p, Host: c.Host,
		Operation: auth.Operation(c.Operation), Permission: auth.Permission(c.PermissionType),
	}
	return acl, acl.Validate()
}

// aclFilter is a DescribeAcls or DeleteAcls filter in auth's terms.
func aclFilter(rtype kmsg.ACLResourceType, name *string, pattern kmsg.ACLResourcePatternType, principal, host *string, op kmsg.ACLOperation, perm kmsg.ACLPermissionType) (auth.ACLFilter, error) {
	f := auth.ACLFilter{
		ResourceType: auth.ResourceType(rtype), ResourceName: name, PatternType: auth.PatternType(pattern),
		Principal: principal, Host: host, Operation: auth.Operation(op), Permission: auth.Permission(perm),
	}
	return f, f.Validate()
}

func handleDescribeACLs(s *Server, _ context.Context, rq *request) finishFunc {
	req := rq.kreq.(*kmsg.DescribeACLsRequest)
	return func(ctx context.Context) kmsg.Response {
		resp := req.ResponseKind().(*kmsg.DescribeACLsResponse)
		fail := func(code int16, msg *string) kmsg.Response {
			resp.ErrorCode, resp.ErrorMessage = rq.note(code), msg
			return resp
		}
		if !s.allowedCluster(rq, auth.OpDescribe) {
			return fail(kerr.ClusterAuthorizationFailed.Code, errorMessage(kerr.ClusterAuthorizationFailed.Code))
		}
		store := aclStore(rq)
		if store == nil {
			return fail(kerr.SecurityDisabled.Code, errorMessage(kerr.SecurityDisabled.Code))
		}
		f, err := aclFilter(req.ResourceType, req.ResourceName, req.ResourcePatternType, req.Principal, req.Host, req.Operation, req.PermissionType)
		if err != nil {
			return fail(s.aclErrorCode(err, "describe ACLs"))
		}
		// One resource per pattern, in the order the store lists them.
		type resourceKey struct {
			rtype   auth.ResourceType
			name    string
			pattern auth.PatternType
		}
		index := make(map[resourceKey]int)
		for _, a := range store.List(f) {
			k := resourceKey{a.ResourceType, a.ResourceName, a.PatternType}
			i, ok := index[k]
			if !ok {
				r := kmsg.NewDescribeACLsResponseResource()
				r.ResourceType, r.ResourceName = kmsg.ACLResourceType(a.ResourceType), a.ResourceName
				r.ResourcePatternType = kmsg.ACLResourcePatternType(a.PatternType)
				i = len(resp.Resources)
				index[k] = i
				resp.Resources = append(resp.Resources, r)
			}
			e := kmsg.NewDescribeACLsResponseResourceACL()
			e.Principal, e.Host = a.Principal.String(), a.Host
			e.Operation, e.PermissionType = kmsg.ACLOperation(a.Operation), kmsg.ACLPermissionType(a.Permission)
			resp.Resources[i].ACLs = append(resp.Resources[i].ACLs, e)
		}
		return resp
	}
}

func handleDeleteACLs(s *Server, _ context.Context, rq *request) finishFunc {
	req := rq.kreq.(*kmsg.DeleteACLsRequest)
	return func(ctx context.Context) kmsg.Response {
		resp := req.ResponseKind().(*kmsg.DeleteACLsResponse)
		allowed := s.allowedCluster(rq, auth.OpAlter)
		store := aclStore(rq)
		for _, fr := range req.Filters {
			r := kmsg.NewDeleteACLsResponseResult()
			switch {
			case !allowed:
				r.ErrorCode = kerr.ClusterAuthorizationFailed.Code
				r.ErrorMessage = errorMessage(r.ErrorCode)
			case store == nil:
				r.ErrorCode = kerr.SecurityDisabled.Code
				r.ErrorMessage = errorMessage(r.ErrorCode)
			default:
				f, err := aclFilter(fr.ResourceType, fr.ResourceName, fr.ResourcePatternType, fr.Principal, fr.Host, fr.Operation, fr.PermissionType)
				var deleted []auth.ACL
				if err == nil {
					deleted, err = store.Delete(ctx, f)
				}
				if err != nil {
					r.ErrorCode, r.ErrorMessage = s.aclErrorCode(err, "delete ACLs")
				}
				for _, a := range deleted {
					m := kmsg.NewDeleteACLsResponseResultMatchingACL()
					m.ResourceType, m.ResourceName = kmsg.ACLResourceType(a.ResourceType), a.ResourceName
					m.ResourcePatternType = kmsg.ACLResourcePatternType(a.PatternType)
					m.Principal, m.Host = a.Principal.String(), a.Host
					m.Operation, m.PermissionType = kmsg.ACLOperation(a.Operation), kmsg.ACLPermissionType(a.Permission)
					r.MatchingACLs = append(r.MatchingACLs, m)
					s.log.Info("ACL deleted", "acl", a.String(), "by", rq.principal.String())
				}
			}
			rq.note(r.ErrorCode)
			resp.Results = append(resp.Results, r)
		}
		return resp
	}
}
