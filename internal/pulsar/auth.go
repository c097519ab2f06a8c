package pulsar

// Authentication on CONNECT and authorization of LOOKUP,
// PARTITIONED_METADATA, GET_TOPICS_OF_NAMESPACE, PRODUCER, SUBSCRIBE and the
// schema commands, when Config.Authenticator is set; without it every client
// is accepted and may do everything, as before.
//
// The front end knows no keys, tokens or permissions: an Authenticator says
// who a client is from CONNECT's auth_method_name and auth_data (and the
// TLS client certificate the connection was verified with), an Authorizer
// whether that role may produce, consume or look up in a namespace.
//
// As Apache Pulsar (ServerCnx.handleConnect): a client whose method no
// provider serves (none, or one not configured) gets Config.AnonymousRole
// when there is one and is refused otherwise; a client whose credentials a
// provider refuses is refused, never demoted to anonymous. A refusal is ERROR
// AuthenticationError, after which the connection is closed. A command that
// is not authorized is answered AuthorizationError and the connection stays.
// The answers name only what the client asked for.
//
// When the credentials expire (a token's exp) the broker sends
// AUTH_CHALLENGE, as Pulsar does for clients that announce
// supports_auth_refresh, and the client answers AUTH_RESPONSE with fresh
// credentials; they must name the same role. A client that does not support
// the refresh, or does not answer within a keep-alive interval, is
// disconnected. The check runs on the writer's keep-alive tick, so expiry is
// noticed within one keep-alive interval (Pulsar's
// authenticationRefreshCheckSeconds).
//
// Deviations from Apache Pulsar:
//   - permissions are per namespace only (no topic-level grants, no
//     subscription_auth_roles, no wildcard roles);
//   - no proxy roles (original_principal is ignored), no multi-step
//     authentication methods (SASL, Athenz): a method answers in one step.

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"math"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"

	pb "quire/internal/pulsar/pulsarpb"
)

// Action is what a role asks to do in a namespace.
type Action uint8

const (
	// ActionProduce: PRODUCER (Pulsar's produce permission).
	ActionProduce Action = iota + 1
	// ActionConsume: SUBSCRIBE (the consume permission).
	ActionConsume
	// ActionLookup: LOOKUP, PARTITIONED_METADATA, GET_TOPICS_OF_NAMESPACE,
	// schemas: allowed to a role that may produce or consume.
	ActionLookup
)

func (a Action) String() string {
	switch a {
	case ActionProduce:
		return "produce"
	case ActionConsume:
		return "consume"
	case ActionLookup:
		return "lookup"
	}
	return "unknown"
}

// Authenticator says who a client is.
type Authenticator interface {
	// Supports reports whether a provider serves the method ("token",
	// "tls", ...).
	Supports(method string) bool
	// Authenticate returns the role of a client that gave data under
	// method on a connection whose verified TLS client certificate chain
	// is certs (leaf first; nil without TLS or without a client
	// certificate), and when those credentials expire (zero: never). The
	// error, any error, refuses the client; its text is sent to it.
	Authenticate(method string, data []byte, certs []*x509.Certificate) (role string, expiry time.Time, err error)
}

// Authorizer says what a role may do.
type Authorizer interface {
	// Authorize returns nil when role may do action in namespace
	// ("tenant/ns"), an error wrapping ErrAuthorization when it may not,
	// and another error when it cannot tell (the metadata store is down).
	Authorize(ctx context.Context, role, namespace string, action Action) error
}

// namespaceOf is the "tenant/ns" of a canonical topic name, "" when the
// name has none (the Backend refuses such names later).
func namespaceOf(topic string) string {
	_, rest, ok := strings.Cut(topic, "://")
	if !ok {
		return ""
	}
	parts := strings.SplitN(rest, "/", 3)
	if len(parts) != 3 || parts[0] == "" || parts[1] == "" {
		return ""
	}
	return parts[0] + "/" + parts[1]
}

// authorize checks that the connection's role may do action on topic (a
// canonical name) or, for ActionLookup with a namespace, in namespace.
func (c *conn) authorize(namespace string, action Action) error {
	if c.s.authorizer == nil {
		return nil
	}
	if namespace == "" {
		return errorf(ErrInvalidTopicName, "no namespace")
	}
	return c.s.authorizer.Authorize(c.ctx, c.role, namespace, action)
}

// authorizeTopic is authorize for a topic name as the client sent it.
func (c *conn) authorizeTopic(topic string, action Action) error {
	return c.authorize(namespaceOf(CanonicalTopic(topic)), action)
}

// peerCertificates is the verified client certificate chain of a TLS
// connection, nil otherwise. The handshake is over: the CONNECT frame has
// been read through it.
func (c *conn) peerCertificates() []*x509.Certificate {
	tc, ok := c.nc.(*tls.Conn)
	if !ok {
		return nil
	}
	st := tc.ConnectionState()
	if len(st.VerifiedChains) == 0 {
		return nil
	}
	return st.VerifiedChains[0]
}

// authenticate decides the role of a CONNECT; an error refuses it.
func (c *conn) authenticate(cmd *pb.CommandConnect) error {
	a := c.s.authenticator
	if a == nil {
		return nil
	}
	method := cmd.GetAuthMethodName()
	if !a.Supports(method) {
		if c.s.anonymousRole == "" {
			return errorf(ErrAuthentication, "no authentication provider for method %q, and no anonymous role", method)
		}
		c.role = c.s.anonymousRole
		return nil
	}
	role, expiry, err := a.Authenticate(method, cmd.GetAuthData(), c.peerCertificates())
	if err != nil {
		return errorf(ErrAuthentication, "%s: %v", method, err)
	}
	if role == "" {
		return errorf(ErrAuthentication, "%s: no role", method)
	}
	// Set before authExpiry, whose store publishes them to the writer
	// (checkAuthExpiry).
	c.role, c.authMethod = role, method
	c.authRefresh = cmd.GetFeatureFlags().GetSupportsAuthRefresh()
	c.authExpiry.Store(unixNanos(expiry))
	return nil
}

func unixNanos(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

// refuseConnect answers a refused CONNECT with ERROR AuthenticationError (a
// request id of -1, as Pulsar) and closes the connection once it is sent.
func (c *conn) refuseConnect(err error) error {
	c.s.log.Info("authentication failed", "remote", c.remote, "err", err)
	return c.sendAndClose(&pb.BaseCommand{Type: pb.BaseCommand_ERROR.Enum(), Error: &pb.CommandError{
		RequestId: proto.Uint64(math.MaxUint64),
		Error:     pb.ServerError_AuthenticationError.Enum(),
		Message:   proto.String(err.Error()),
	}})
}

// checkAuthExpiry runs on the writer's keep-alive tick: credentials past
// their expiry are challenged (once) or, for a client that cannot refresh
// them, end the connection; a challenge unanswered for a keep-alive interval
// ends it too. It reports whether the connection stays.
func (c *conn) checkAuthExpiry(now time.Time, write func([]byte) bool) bool {
	expiry := c.authExpiry.Load()
	if expiry == 0 || now.UnixNano() < expiry {
		return true
	}
	if !c.authRefresh {
		c.s.log.Info("credentials expired; closing connection", "remote", c.remote, "role", c.role)
		return false
	}
	sent := c.challengeSent.Load()
	if sent == 0 {
		c.challengeSent.Store(now.UnixNano())
		return write(AppendCommand(nil, &pb.BaseCommand{Type: pb.BaseCommand_AUTH_CHALLENGE.Enum(), AuthChallenge: &pb.CommandAuthChallenge{
			ServerVersion:   proto.String(ServerVersion),
			ProtocolVersion: proto.Int32(c.protocolVersion),
			Challenge:       &pb.AuthData{AuthMethodName: proto.String(c.authMethod), AuthData: []byte("refresh")},
		}}))
	}
	if now.UnixNano()-sent >= int64(c.s.keepAlive) {
		c.s.log.Info("credentials expired and not refreshed; closing connection", "remote", c.remote, "role", c.role)
		return false
	}
	return true
}

// handleAuthResponse takes the refreshed credentials of an AUTH_RESPONSE:
// they must be valid and name the role the connection has; anything else
// closes the connection.
func (c *conn) handleAuthResponse(cmd *pb.CommandAuthResponse) error {
	a := c.s.authenticator
	if a == nil || c.authMethod == "" {
		return errors.New("AUTH_RESPONSE without authentication")
	}
	data := cmd.GetResponse()
	method := data.GetAuthMethodName()
	if method != c.authMethod {
		return c.refuseConnect(errorf(ErrAuthentication, "refresh with method %q, connected with %q", method, c.authMethod))
	}
	role, expiry, err := a.Authenticate(method, data.GetAuthData(), c.peerCertificates())
	switch {
	case err != nil:
		return c.refuseConnect(errorf(ErrAuthentication, "refresh: %v", err))
	case role != c.role:
		return c.refuseConnect(errorf(ErrAuthentication, "refresh: credentials of another role"))
	}
	c.authExpiry.Store(unixNanos(expiry))
	c.challengeSent.Store(0)
	return nil
}
