package kafka

// SASL authentication on a listener:
//
//	SaslHandshake    (17) v0–1
//	SaslAuthenticate (36) v0–2
//
// SaslHandshake v0 and its raw tokens are Kafka 3.x's: Kafka 4.0 dropped
// them (KIP-896), but clients still in use send them (kafka-python 2.0.2,
// Sarama up to 1.40), so Quire keeps serving them.
//
// Security is a property of the listener, as in Kafka's
// listener.security.protocol.map: Serve reads it from a *Listener (TLS, if
// any, is the listener's own wrapping), so one Server can serve a
// SASL_SSL and a PLAINTEXT listener at once (but Metadata names one address
// per broker, the Backend's, whatever listener a client came in on). The mechanisms (PLAIN, SCRAM-SHA-256,
// SCRAM-SHA-512) are internal/auth's; this file is the framing and the
// per-connection state, which belongs to the connection's reader: every
// step below runs in the submit phase, in request order, before the next
// frame is read.
//
// Before authentication completes, as Kafka's SaslServerAuthenticator:
//   - the first request may be ApiVersions (once; an unsupported version is
//     answered per KIP-511 and may be retried) or SaslHandshake; anything
//     else closes the connection without an answer;
//   - an unknown mechanism is answered UNSUPPORTED_SASL_MECHANISM with the
//     enabled list, then the connection closes;
//   - after a v1 handshake only SaslAuthenticate is accepted; after a v0
//     handshake the client sends raw tokens, each a size-prefixed frame
//     with no request header, answered the same way (a failure then closes
//     the connection without an answer, as there is no way to send one);
//   - a failed authentication is answered SASL_AUTHENTICATION_FAILED with
//     Kafka's message, after FailedAuthenticationDelay
//     (connection.failed.authentication.delay.ms), and the connection
//     closes; nothing sent after it is read;
//   - frames are bounded by MaxReceiveBytes (sasl.server.max.receive.size),
//     so an unauthenticated client cannot make the broker buffer 100 MiB.
//
// Re-authentication (KIP-368): with SessionLifetime set
// (connections.max.reauth.ms), a successful SaslAuthenticate v1+ answers
// session_lifetime_ms, and a SaslHandshake on the authenticated connection
// starts a re-authentication (at most one a second, else it is answered
// ILLEGAL_SASL_STATE, as is any SaslHandshake without a session lifetime
// and any SaslAuthenticate after success). It must keep the principal, or
// it fails like a first authentication ("Cannot change principals …"), and
// the mechanism: a handshake naming another one is accepted and the
// connection closed at its SaslAuthenticate, without an answer, as Kafka's
// REAUTH_BAD_MECHANISM state does. A request other
// than SaslHandshake that arrives after the session expired closes the
// connection (Kafka checks on receipt too; a v0 client, which cannot
// re-authenticate, is disconnected the same way).
//
// Deviations: Kafka advertises SaslHandshake and SaslAuthenticate on
// every listener; Quire only on SASL ones. Kafka answers a request other
// than SaslAuthenticate after a v1 handshake with that request's own error
// response (ILLEGAL_SASL_STATE) before closing; Quire does so for
// ApiVersions and SaslHandshake and closes without an answer for the rest.
// The GSSAPI fallback for 0.9 clients that send a Kerberos token first
// does not exist (no GSSAPI); such a frame fails to parse and closes the
// connection, as on a Kafka without GSSAPI.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"quire/internal/auth"
)

// Defaults of Security's zero values.
const (
	// DefaultFailedAuthenticationDelay is Kafka's
	// connection.failed.authentication.delay.ms.
	DefaultFailedAuthenticationDelay = 100 * time.Millisecond
	// DefaultMaxSASLReceiveBytes is Kafka's sasl.server.max.receive.size.
	DefaultMaxSASLReceiveBytes = 512 << 10
	// minReauthInterval: a client may start re-authenticating at most this
	// often (Kafka's one second).
	minReauthInterval = time.Second
)

// Security is what a listener asks of its clients.
type Security struct {
	// Mechanisms are the SASL mechanisms offered (auth.Mechanisms names
	// and auth.MechanismOAuthBearer). Empty: no SASL; every connection is
	// auth.Anonymous.
	Mechanisms []string
	// Credentials is the user database: SASL checks against it, and
	// DescribeUserScramCredentials and AlterUserScramCredentials serve it
	// (they are advertised only when it is set). Required with Mechanisms.
	Credentials *auth.Credentials
	// SSLPrincipalMapping maps a TLS client certificate's subject to the
	// principal of a connection on a listener without SASL (Kafka's
	// ssl.principal.mapping.rules; nil: DEFAULT, the whole DN).
	SSLPrincipalMapping *auth.SSLPrincipalMapper
	// Bearer checks OAUTHBEARER tokens; required with that mechanism. A
	// session authenticated with a token ends when the token expires, if
	// SessionLifetime is set and later (Kafka's rule for OAUTHBEARER).
	Bearer *auth.BearerValidator
	// SuperUsers, when not empty and without an Authorizer, are the only
	// principals that may describe or alter credentials (with one, its
	// own super users and ACLs decide).
	SuperUsers []auth.Principal
	// Authorizer, when set, enforces Kafka's ACLs on every request of the
	// listener's connections and serves the ACL APIs (authorize.go,
	// acls.go); nil: nothing is authorized.
	Authorizer *auth.Authorizer
	// SessionLifetime (connections.max.reauth.ms): an authenticated
	// session lasts this long and is then re-authenticated by the client
	// or its connection is closed. Zero: sessions last as long as their
	// connection, and re-authentication is refused.
	SessionLifetime time.Duration
	// FailedAuthenticationDelay holds back the answer to a failed
	// authentication (zero: DefaultFailedAuthenticationDelay; negative:
	// none).
	FailedAuthenticationDelay time.Duration
	// MaxReceiveBytes bounds frames before authentication completes
	// (zero: DefaultMaxSASLReceiveBytes).
	MaxReceiveBytes int32
	// Now reads the time sessions expire by (nil: time.Now); tests move it.
	Now func() time.Time
}

// SASL reports whether the listener requires SASL.
func (sec *Security) SASL() bool { return sec != nil && len(sec.Mechanisms) > 0 }

// Validate checks a Security before it is used.
func (sec *Security) Validate() error {
	for _, m := range sec.Mechanisms {
		switch {
		case m == auth.MechanismOAuthBearer:
			if sec.Bearer == nil {
				return errors.New("kafka: OAUTHBEARER needs a token validator (a JWKS)")
			}
		case !slices.Contains(auth.Mechanisms, m):
			return fmt.Errorf("kafka: unknown SASL mechanism %q (known: %v, %s)", m, auth.Mechanisms, auth.MechanismOAuthBearer)
		case sec.Credentials == nil:
			return errors.New("kafka: SASL needs a credential store")
		}
	}
	return nil
}

func (sec *Security) now() time.Time {
	if sec.Now != nil {
		return sec.Now()
	}
	return time.Now()
}

// Listener is a net.Listener with the Security the front end applies to
// the connections accepted from it; Serve reads it. A plain net.Listener
// serves without authentication.
type Listener struct {
	net.Listener
	Security Security
	// Name is the listener's name (Kafka's listener names, as in
	// listeners=EXTERNAL://…): Metadata, DescribeCluster and
	// FindCoordinator answer a connection of this listener with the
	// brokers' endpoints of the same name (Node.Listeners). Empty: the
	// brokers' own Host and Port.
	Name string
}

// saslPhase is where a connection is in Kafka's SASL state machine.
type saslPhase int

const (
	// phaseVersionsOrHandshake: nothing yet (HANDSHAKE_OR_VERSIONS_REQUEST).
	phaseVersionsOrHandshake saslPhase = iota
	// phaseHandshake: ApiVersions answered (HANDSHAKE_REQUEST).
	phaseHandshake
	// phaseAuthenticate: a v1 handshake accepted; SaslAuthenticate next.
	phaseAuthenticate
	// phaseRawTokens: a v0 handshake accepted; raw tokens next.
	phaseRawTokens
	// phaseComplete: authenticated.
	phaseComplete
)

// saslConn is one connection's authentication state. Only the
// connection's reader touches it (in submit).
type saslConn struct {
	sec       *Security
	phase     saslPhase
	mechanism string
	server    auth.Server
	// principal is the authenticated principal (phaseComplete, and during
	// a re-authentication, the one it must keep).
	principal auth.Principal
	// reauthenticating: a SaslHandshake on the authenticated connection
	// started this exchange.
	reauthenticating bool
	// wrongMechanism is set when a re-authentication asked for another
	// mechanism than the session's; its SaslAuthenticate then fails.
	wrongMechanism string
	// expiry is when the session ends (zero: never), lifetime how long it
	// was given when it began.
	expiry          time.Time
	lifetime        time.Duration
	lastReauthStart time.Time
	clientCanReauth bool // a SaslAuthenticate v1+ was seen
}

// allowsApiVersions: an ApiVersions may come now (before the handshake, or
// once authenticated).
func (c *saslConn) allowsApiVersions() bool {
	return c.phase == phaseVersionsOrHandshake || c.phase == phaseComplete
}

// maxFrame is the frame bound while the connection is in this state.
func (c *saslConn) maxFrame(serverMax int32) int32 {
	if c == nil || c.phase == phaseComplete {
		return serverMax
	}
	limit := c.sec.MaxReceiveBytes
	if limit <= 0 {
		limit = DefaultMaxSASLReceiveBytes
	}
	return min(limit, serverMax)
}

// saslGate runs before a request's body is decoded on a SASL connection.
// It returns handled=true with the item (or the error that closes the
// connection) for the requests SASL itself answers; handled=false lets the
// request through to its handler.
func (s *Server) saslGate(ctx context.Context, cs *connState, rq *request, body []byte, received time.Time) (item *inflight, handled bool, err error) {
	c := cs.sasl
	key := kmsg.Key(rq.key)
	switch c.phase {
	case phaseVersionsOrHandshake, phaseHandshake:
		switch {
		case key == kmsg.ApiVersions && c.phase == phaseVersionsOrHandshake:
			return nil, false, nil // apiVersionsAnswered moves the phase on
		case key == kmsg.SASLHandshake:
			return s.saslHandshake(cs, rq, body, received)
		}
		return nil, true, closeConnf("sasl_state", "unexpected %s request during SASL handshake", apiName(rq.key))
	case phaseAuthenticate:
		switch key {
		case kmsg.SASLAuthenticate:
			return s.saslAuthenticate(ctx, cs, rq, body, received)
		case kmsg.ApiVersions, kmsg.SASLHandshake:
			// Kafka answers ILLEGAL_SASL_STATE, then closes.
			item, err := s.saslIllegalState(cs, rq, body, received, "unexpected "+apiName(rq.key)+" request during SASL authentication")
			if item != nil {
				item.last = true
			}
			return item, true, err
		}
		return nil, true, closeConnf("sasl_state", "unexpected %s request during SASL authentication", apiName(rq.key))
	case phaseComplete:
		now := c.sec.now()
		switch key {
		case kmsg.SASLHandshake:
			if c.sec.SessionLifetime > 0 && rq.version >= 1 && (c.lastReauthStart.IsZero() || now.Sub(c.lastReauthStart) >= minReauthInterval) {
				c.lastReauthStart = now
				c.reauthenticating = true
				return s.saslHandshake(cs, rq, body, received)
			}
			item, err := s.saslIllegalState(cs, rq, body, received, "SaslHandshake request received after successful authentication")
			return item, true, err
		case kmsg.SASLAuthenticate:
			item, err := s.saslIllegalState(cs, rq, body, received, "SaslAuthenticate request received after successful authentication")
			return item, true, err
		}
		if !c.expiry.IsZero() && !now.Before(c.expiry) {
			return nil, true, closeConnf("sasl_session_expired", "SASL session of %s expired %v ago without re-authentication", c.principal, now.Sub(c.expiry))
		}
		return nil, false, nil
	}
	return nil, true, protocolErrorf("SASL state %d cannot take %s", c.phase, apiName(rq.key))
}

// apiVersionsAnswered moves a fresh SASL connection on after a successful
// ApiVersions (one is allowed before the handshake).
func (c *saslConn) apiVersionsAnswered() {
	if c != nil && c.phase == phaseVersionsOrHandshake {
		c.phase = phaseHandshake
	}
}

// decodeAs decodes body as a request of rq's key and version.
func decodeAs[T kmsg.Request](rq *request, body []byte, req T) (T, error) {
	req.SetVersion(rq.version)
	if err := req.ReadFrom(body); err != nil {
		return req, protocolErrorf("%s v%d: decode body of %d bytes: %v", apiName(rq.key), rq.version, len(body), err)
	}
	rq.kreq = req
	return req, nil
}

func answered(rq *request, received time.Time, resp kmsg.Response) *inflight {
	return &inflight{rq: rq, received: received, finish: func(context.Context) kmsg.Response { return resp },
		flexibleHeader: resp.IsFlexible()}
}

func (s *Server) saslHandshake(cs *connState, rq *request, body []byte, received time.Time) (*inflight, bool, error) {
	c := cs.sasl
	req, err := decodeAs(rq, body, kmsg.NewPtrSASLHandshakeRequest())
	if err != nil {
		return nil, true, err
	}
	resp := req.ResponseKind().(*kmsg.SASLHandshakeResponse)
	resp.SupportedMechanisms = slices.Clone(c.sec.Mechanisms)
	if !slices.Contains(c.sec.Mechanisms, req.Mechanism) {
		resp.ErrorCode = rq.note(kerr.UnsupportedSaslMechanism.Code)
		s.log.Info("SASL mechanism not enabled; closing connection", "remote", cs.remote, "mechanism", req.Mechanism)
		s.metrics.closed("sasl_mechanism")
		item := answered(rq, received, resp)
		item.last = true
		return item, true, nil
	}
	if c.reauthenticating && req.Mechanism != c.mechanism {
		// Kafka accepts the handshake and fails the SaslAuthenticate.
		c.wrongMechanism = req.Mechanism
	} else {
		var server auth.Server
		if req.Mechanism == auth.MechanismOAuthBearer {
			server = auth.NewOAuthBearerServer(c.sec.Bearer)
		} else if server, err = auth.NewServer(req.Mechanism, c.sec.Credentials); err != nil {
			return nil, true, protocolErrorf("SASL: %v", err)
		}
		c.server, c.mechanism = server, req.Mechanism
	}
	c.phase = phaseAuthenticate
	if rq.version == 0 {
		c.phase = phaseRawTokens
	}
	return answered(rq, received, resp), true, nil
}

func (s *Server) saslIllegalState(cs *connState, rq *request, body []byte, received time.Time, msg string) (*inflight, error) {
	code := rq.note(kerr.IllegalSaslState.Code)
	switch kmsg.Key(rq.key) {
	case kmsg.SASLHandshake:
		req, err := decodeAs(rq, body, kmsg.NewPtrSASLHandshakeRequest())
		if err != nil {
			return nil, err
		}
		resp := req.ResponseKind().(*kmsg.SASLHandshakeResponse)
		resp.ErrorCode = code
		resp.SupportedMechanisms = slices.Clone(cs.sasl.sec.Mechanisms)
		return answered(rq, received, resp), nil
	case kmsg.SASLAuthenticate:
		req, err := decodeAs(rq, body, kmsg.NewPtrSASLAuthenticateRequest())
		if err != nil {
			return nil, err
		}
		resp := req.ResponseKind().(*kmsg.SASLAuthenticateResponse)
		resp.ErrorCode, resp.ErrorMessage = code, &msg
		return answered(rq, received, resp), nil
	case kmsg.ApiVersions:
		resp := s.apiVersionsResponse(cs.versions, rq.version, code)
		item := answered(rq, received, resp)
		item.flexibleHeader = false // ApiVersions responses keep header v0
		return item, nil
	}
	return nil, protocolErrorf("%s", msg)
}

// saslAuthenticate runs one SaslAuthenticate (v1 handshake framing).
func (s *Server) saslAuthenticate(ctx context.Context, cs *connState, rq *request, body []byte, received time.Time) (*inflight, bool, error) {
	c := cs.sasl
	req, err := decodeAs(rq, body, kmsg.NewPtrSASLAuthenticateRequest())
	if err != nil {
		return nil, true, err
	}
	if rq.version >= 1 {
		c.clientCanReauth = true
	}
	resp := req.ResponseKind().(*kmsg.SASLAuthenticateResponse)
	challenge, done, err := s.saslStep(ctx, cs, req.SASLAuthBytes)
	var failure *auth.Failure
	switch {
	case errors.As(err, &failure):
		resp.ErrorCode = rq.note(kerr.SaslAuthenticationFailed.Code)
		resp.ErrorMessage = &failure.Message
		s.metrics.closed("sasl_failed")
		item := answered(rq, received, resp)
		item.last = true
		delay := c.sec.FailedAuthenticationDelay
		if delay == 0 {
			delay = DefaultFailedAuthenticationDelay
		}
		if delay > 0 {
			// Slow down password guessing: the answer, and the close, wait.
			item.finish = func(ctx context.Context) kmsg.Response {
				t := time.NewTimer(delay)
				defer t.Stop()
				select {
				case <-t.C:
				case <-ctx.Done():
				}
				return resp
			}
		}
		return item, true, nil
	case err != nil:
		return nil, true, err
	}
	resp.SASLAuthBytes = challenge
	if done && c.clientCanReauth && c.lifetime > 0 {
		resp.SessionLifetimeMillis = max(c.lifetime.Milliseconds(), 1)
	}
	return answered(rq, received, resp), true, nil
}

// saslRawToken serves one frame of a v0 handshake's raw-token exchange.
func (s *Server) saslRawToken(ctx context.Context, cs *connState, frame []byte, received time.Time) (*inflight, error) {
	rq := &request{key: int16(kmsg.SASLAuthenticate), conn: cs, principal: cs.principal()}
	challenge, _, err := s.saslStep(ctx, cs, frame)
	var failure *auth.Failure
	if errors.As(err, &failure) {
		s.metrics.request(apiName(rq.key), kerr.SaslAuthenticationFailed.Code, time.Since(received))
		// No raw frame can carry an error: close, as Kafka does.
		return nil, closeConnf("sasl_failed", "SASL v0 authentication failed: %v", err)
	}
	if err != nil {
		return nil, err
	}
	return &inflight{rq: rq, received: received, raw: challenge, isRaw: true}, nil
}

// saslStep hands a token to the mechanism and moves the state on. A
// failure returns an *auth.Failure (the client is told) or another error
// (the connection closes).
func (s *Server) saslStep(ctx context.Context, cs *connState, token []byte) ([]byte, bool, error) {
	c := cs.sasl
	if c.wrongMechanism != "" {
		// Kafka fails this before reading the token, so without an answer.
		s.metrics.authenticated(c.wrongMechanism, "failed")
		return nil, false, closeConnf("sasl_failed", "SASL mechanism '%s' requested by client is not supported for re-authentication of mechanism '%s'", c.wrongMechanism, c.mechanism)
	}
	challenge, done, err := c.server.Step(ctx, token)
	if err != nil {
		if errors.Is(err, auth.ErrAuthenticationFailed) {
			s.log.Info("SASL authentication failed", "remote", cs.remote, "mechanism", c.mechanism, "reauthentication", c.reauthenticating, "err", err)
			s.metrics.authenticated(c.mechanism, "failed")
			var failure *auth.Failure
			if c.reauthenticating && errors.As(err, &failure) {
				err = &auth.Failure{Message: strings.Replace(failure.Message, "during authentication", "during re-authentication", 1), Cause: failure.Cause}
			}
			return nil, false, err
		}
		s.log.Warn("SASL authentication could not be checked; closing connection", "remote", cs.remote, "err", err)
		return nil, false, closeConnf("sasl_unavailable", "SASL: %v", err)
	}
	if !done {
		return challenge, false, nil
	}
	principal := c.server.Principal()
	if c.reauthenticating && principal != c.principal {
		s.metrics.authenticated(c.mechanism, "failed")
		return nil, false, &auth.Failure{Message: fmt.Sprintf("Cannot change principals during re-authentication from %s.%s: %s.%s",
			c.principal.Type, c.principal.Name, principal.Type, principal.Name)}
	}
	outcome := "authenticated"
	if c.reauthenticating {
		outcome = "reauthenticated"
	}
	s.metrics.authenticated(c.mechanism, outcome)
	c.principal, c.phase, c.reauthenticating = principal, phaseComplete, false
	c.expiry, c.lifetime = time.Time{}, 0
	if c.sec.SessionLifetime > 0 {
		now := c.sec.now()
		c.lifetime = c.sec.SessionLifetime
		// A token's session ends with the token (Kafka's OAUTHBEARER rule).
		if t, ok := c.server.(interface{ Expiry() time.Time }); ok && !t.Expiry().IsZero() && t.Expiry().Sub(now) < c.lifetime {
			c.lifetime = t.Expiry().Sub(now)
		}
		c.expiry = now.Add(c.lifetime)
	}
	s.log.Debug("SASL authenticated", "remote", cs.remote, "principal", principal, "mechanism", c.mechanism)
	return challenge, true, nil
}
