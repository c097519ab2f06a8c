package broker

// Pulsar's security model on the binary protocol and the admin REST API:
// who a client is (authentication, by the front end's Authenticator: a token
// or a TLS client certificate) and what its role may do (authorization).
//
// Authorization follows Apache Pulsar's PulsarAuthorizationProvider:
//   - a super-user role (superUserRoles) may do everything;
//   - a tenant's admin roles (the tenant's adminRoles) may do everything in
//     the tenant's namespaces: produce, consume, and administer them;
//   - any other role may do in a namespace what the namespace's permissions
//     grant it: produce (PRODUCER), consume (SUBSCRIBE, subscription
//     administration), and lookup (LOOKUP, PARTITIONED_METADATA, topic
//     listing and stats) when it may produce or consume. "functions",
//     "sources", "sinks" and "packages" are stored but grant nothing here.
//
// On the admin REST API the credentials are a token in "Authorization:
// Bearer <token>" or the client certificate of an HTTPS connection; none
// gives the anonymous role when there is one. Without credentials it
// answers 401, without permission 403, as Pulsar does; a role that is
// neither super user nor the tenant's admin is told 403 also for tenants
// and namespaces that do not exist, so that it cannot probe for them.
// Tenant creation, deletion, update and listing need a super user;
// namespace administration (policies, permissions, bundles, topic creation
// and deletion, unload, terminate) a tenant admin.
//
// Deviations from Apache Pulsar: permissions are per namespace (no topic
// grants, no subscription_auth_roles, no wildcard roles); an operation a
// broker forwards to another carries the client's Authorization header, so
// one authenticated by a client certificate alone cannot reach partitions
// owned by other brokers (they answer 401).

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"quire/internal/catalog"
	"quire/internal/pulsar"
)

// PulsarSecurity configures authentication and authorization of Pulsar
// clients and of the admin REST API.
type PulsarSecurity struct {
	// Authenticator, when set, turns authentication on (Pulsar's
	// authenticationEnabled) for the binary protocol and the admin REST
	// API; its methods are the providers ("token", "tls").
	Authenticator pulsar.Authenticator
	// AnonymousRole is the role of clients without credentials (Pulsar's
	// anonymousUserRole); empty: they are refused.
	AnonymousRole string
	// Authorization turns authorization on (authorizationEnabled); it
	// needs an Authenticator. Off, an authenticated client may do
	// everything.
	Authorization bool
	// SuperUserRoles may do everything (superUserRoles).
	SuperUserRoles []string
}

func (s PulsarSecurity) validate() error {
	if s.Authenticator == nil && (s.Authorization || s.AnonymousRole != "" || len(s.SuperUserRoles) > 0) {
		return errors.New("Pulsar authorization, anonymous role and super users need authentication (an Authenticator)")
	}
	return nil
}

// access is what an operation needs of a role.
type access uint8

const (
	// accessAuthenticated: any role (the operation checks nothing more).
	accessAuthenticated access = iota
	// accessSuperUser: a super user.
	accessSuperUser
	// accessTenantAdmin: a super user or an admin of the tenant.
	accessTenantAdmin
	// accessLookup: a tenant admin, or a role that may produce or consume
	// in the namespace.
	accessLookup
	// accessProduce, accessConsume: a tenant admin, or a role with that
	// namespace permission.
	accessProduce
	accessConsume
)

func (a access) String() string {
	return [...]string{"authenticated", "super user", "tenant admin", "lookup", "produce", "consume"}[a]
}

// errNotPermitted is a role's lack of permission, before it is told as the
// protocol's error.
var errNotPermitted = errors.New("not permitted")

// pulsarAllowed checks that role may do what need says in namespace ns
// ("tenant/ns"; for accessSuperUser and accessTenantAdmin the namespace part
// may be empty). It returns nil, an error wrapping errNotPermitted, or the
// metadata store's error.
func (b *Broker) pulsarAllowed(ctx context.Context, role, ns string, need access) error {
	sec := b.cfg.PulsarSecurity
	if !sec.Authorization || need == accessAuthenticated {
		return nil
	}
	if slices.Contains(sec.SuperUserRoles, role) {
		return nil
	}
	refuse := func() error {
		if ns == "" { // the cluster's tenants
			return fmt.Errorf("%w: role %q needs %s access", errNotPermitted, role, need)
		}
		return fmt.Errorf("%w: role %q needs %s access to %s", errNotPermitted, role, need, ns)
	}
	if need == accessSuperUser {
		return refuse()
	}
	tenant, _, _ := strings.Cut(ns, "/")
	info, err := b.admin.GetTenant(ctx, tenant)
	switch {
	case errors.Is(err, catalog.ErrTenantNotFound), errors.Is(err, catalog.ErrInvalidName):
		return refuse()
	case err != nil:
		return err
	case slices.Contains(info.AdminRoles, role):
		return nil
	case need == accessTenantAdmin:
		return refuse()
	}
	policies, err := b.admin.GetPolicies(ctx, ns)
	switch {
	case errors.Is(err, catalog.ErrNamespaceNotFound), errors.Is(err, catalog.ErrInvalidName):
		return refuse()
	case err != nil:
		return err
	}
	produce, consume := policies.Allows(role, catalog.ActionProduce), policies.Allows(role, catalog.ActionConsume)
	if (need == accessProduce && produce) || (need == accessConsume && consume) || (need == accessLookup && (produce || consume)) {
		return nil
	}
	return refuse()
}

// pulsarAuthorizer is the front end's Authorizer over pulsarAllowed.
type pulsarAuthorizer struct{ b *Broker }

func (z *pulsarAuthorizer) Authorize(ctx context.Context, role, ns string, action pulsar.Action) error {
	need := accessLookup
	switch action {
	case pulsar.ActionProduce:
		need = accessProduce
	case pulsar.ActionConsume:
		need = accessConsume
	}
	err := z.b.pulsarAllowed(ctx, role, ns, need)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, errNotPermitted):
		return fmt.Errorf("%w: %v", pulsar.ErrAuthorization, err)
	}
	return pulsarErr(err, pulsar.ErrMetadata)
}

// authorizationKey is the context key of the Authorization header an admin
// request came with, which calls forwarded to other brokers carry.
type authorizationKey struct{}

// adminRole authenticates an admin REST request: its role, or a 401.
// Without authentication every request is let through with no role.
func (a *pulsarAdmin) adminRole(r *http.Request) (string, error) {
	sec := a.b.cfg.PulsarSecurity
	if sec.Authenticator == nil {
		return "", nil
	}
	if h := r.Header.Get("Authorization"); h != "" {
		token, ok := strings.CutPrefix(h, "Bearer ")
		if !ok || !sec.Authenticator.Supports("token") {
			return "", restErrorf(http.StatusUnauthorized, "Authentication required: the Authorization header is not a bearer token")
		}
		role, _, err := sec.Authenticator.Authenticate("token", []byte(strings.TrimSpace(token)), nil)
		if err != nil || role == "" {
			return "", restErrorf(http.StatusUnauthorized, "Authentication required: %v", err)
		}
		return role, nil
	}
	if r.TLS != nil && len(r.TLS.VerifiedChains) > 0 && sec.Authenticator.Supports("tls") {
		var chain []*x509.Certificate = r.TLS.VerifiedChains[0]
		role, _, err := sec.Authenticator.Authenticate("tls", nil, chain)
		if err != nil || role == "" {
			return "", restErrorf(http.StatusUnauthorized, "Authentication required: %v", err)
		}
		return role, nil
	}
	if sec.AnonymousRole != "" {
		return sec.AnonymousRole, nil
	}
	return "", restErrorf(http.StatusUnauthorized, "Authentication required")
}

// authorizeAdmin authenticates r and checks that its role has the access
// need to the path's tenant or namespace; the error is a 401, a 403 or the
// store's.
func (a *pulsarAdmin) authorizeAdmin(r *http.Request, need access) (*http.Request, error) {
	role, err := a.adminRole(r)
	if err != nil {
		return r, err
	}
	if h := r.Header.Get("Authorization"); h != "" {
		r = r.WithContext(context.WithValue(r.Context(), authorizationKey{}, h))
	}
	ns := r.PathValue("tenant")
	if n := r.PathValue("ns"); n != "" {
		ns += "/" + n
	}
	if err := a.b.pulsarAllowed(r.Context(), role, ns, need); err != nil {
		if errors.Is(err, errNotPermitted) {
			return r, restErrorf(http.StatusForbidden, "Don't have permission to administrate resources on this tenant or namespace: %v", err)
		}
		return r, err
	}
	return r, nil
}

// --- namespace permissions (Pulsar's /permissions endpoints) ---

// getPermissions answers the namespace's grants: {"role": ["produce", ...]}.
func (a *pulsarAdmin) getPermissions(w http.ResponseWriter, r *http.Request) error {
	p, err := a.b.admin.GetPolicies(r.Context(), namespaceOf(r))
	if err != nil {
		return err
	}
	out := map[string][]catalog.AuthAction{}
	for role, actions := range p.Permissions {
		out[role] = nonNil(actions)
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// grantPermission sets a role's actions: the body is a JSON array of
// actions (pulsar-admin namespaces grant-permission --actions).
func (a *pulsarAdmin) grantPermission(w http.ResponseWriter, r *http.Request) error {
	var actions []catalog.AuthAction
	if err := decodeBody(w, r, &actions, true); err != nil {
		return err
	}
	if err := a.b.admin.GrantPermission(r.Context(), namespaceOf(r), r.PathValue("role"), actions); err != nil {
		return err
	}
	return noContent(w)
}

func (a *pulsarAdmin) revokePermission(w http.ResponseWriter, r *http.Request) error {
	if err := a.b.admin.RevokePermission(r.Context(), namespaceOf(r), r.PathValue("role")); err != nil {
		return err
	}
	return noContent(w)
}
