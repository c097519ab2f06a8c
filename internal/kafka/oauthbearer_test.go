package kafka_test

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"math/big"
	"slices"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl/oauth"

	"quire/internal/auth"
	"quire/internal/kafka"
)

// oauthSetup is a JWKS of one RSA key and a way to sign tokens with it.
type oauthSetup struct {
	*saslSetup
	key       *rsa.PrivateKey
	validator *auth.BearerValidator
}

func newOAuthSetup(t *testing.T) *oauthSetup {
	t.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	b64 := base64.RawURLEncoding.EncodeToString
	jwks, err := json.Marshal(map[string]any{"keys": []map[string]string{{
		"kty": "RSA", "kid": "k1", "n": b64(key.N.Bytes()), "e": b64(big.NewInt(int64(key.E)).Bytes()),
	}}})
	if err != nil {
		t.Fatal(err)
	}
	s := &oauthSetup{saslSetup: newSASLSetup(t), key: key}
	s.validator, err = auth.NewBearerValidator(auth.BearerConfig{JWKS: jwks, Issuer: "https://idp.test", Now: s.now})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func (s *oauthSetup) token(t *testing.T, key *rsa.PrivateKey, sub string, exp time.Time) string {
	t.Helper()
	tok := jwt.NewWithClaims(jwt.SigningMethodRS256, jwt.MapClaims{"sub": sub, "exp": exp.Unix(), "iss": "https://idp.test"})
	tok.Header["kid"] = "k1"
	signed, err := tok.SignedString(key)
	if err != nil {
		t.Fatal(err)
	}
	return signed
}

func (s *oauthSetup) security(tweak ...func(*kafka.Security)) kafka.Security {
	return s.saslSetup.security(append([]func(*kafka.Security){func(sec *kafka.Security) {
		sec.Mechanisms = append(slices.Clone(auth.Mechanisms), auth.MechanismOAuthBearer)
		sec.Bearer = s.validator
	}}, tweak...)...)
}

func bearerMessage(token string) string {
	return "n,,\x01auth=Bearer " + token + "\x01\x01"
}

// TestOAuthBearerKgo: franz-go's OAUTHBEARER client authenticates with a
// token signed by a key of the JWKS, produces and consumes; the principal
// is the token's subject (alice, a super user, may describe credentials).
func TestOAuthBearerKgo(t *testing.T) {
	s := newOAuthSetup(t)
	c := saslCluster(t, s.security(), nil)
	tok := s.token(t, s.key, "alice", s.now().Add(time.Hour))
	cl := c.client(kgo.SASL(oauth.Oauth(func(context.Context) (oauth.Auth, error) { return oauth.Auth{Token: tok}, nil })),
		kgo.DefaultProduceTopic("bearer"), kgo.ConsumeTopics("bearer"), kgo.AllowAutoTopicCreation())
	ctx := testContext(t)
	if err := cl.ProduceSync(ctx, &kgo.Record{Value: []byte("by token")}).FirstErr(); err != nil {
		t.Fatalf("produce: %v", err)
	}
	fs := cl.PollFetches(ctx)
	if err := fs.Err(); err != nil || fs.NumRecords() != 1 {
		t.Fatalf("consume: %d records, %v", fs.NumRecords(), err)
	}
	req := kmsg.NewPtrDescribeUserSCRAMCredentialsRequest()
	resp, err := req.RequestWith(ctx, cl)
	if err != nil || resp.ErrorCode != 0 {
		t.Fatalf("describe credentials as the token's principal alice: %v %v", err, kerr.ErrorForCode(resp.ErrorCode))
	}
}

// TestOAuthBearerRefused walks the exchange by hand: a bad token is
// answered with RFC 7628's error challenge, and the client's %x01 with
// SASL_AUTHENTICATION_FAILED.
func TestOAuthBearerRefused(t *testing.T) {
	s := newOAuthSetup(t)
	other, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	c := saslCluster(t, s.security(), nil)
	for name, tok := range map[string]string{
		"forged":  s.token(t, other, "alice", s.now().Add(time.Hour)),
		"expired": s.token(t, s.key, "alice", s.now().Add(-time.Hour)),
		"garbage": "not.a.jwt",
	} {
		t.Run(name, func(t *testing.T) {
			r := c.raw()
			expectCode(t, "handshake", r.request(handshake(auth.MechanismOAuthBearer, 1)).(*kmsg.SASLHandshakeResponse).ErrorCode, noError)
			resp := r.request(authenticate(bearerMessage(tok), 2)).(*kmsg.SASLAuthenticateResponse)
			expectCode(t, "token", resp.ErrorCode, noError)
			if string(resp.SASLAuthBytes) != `{"status":"invalid_token"}` {
				t.Fatalf("challenge %q, want the error challenge", resp.SASLAuthBytes)
			}
			resp = r.request(authenticate("\x01", 2)).(*kmsg.SASLAuthenticateResponse)
			expectCode(t, "acknowledgement", resp.ErrorCode, kerr.SaslAuthenticationFailed)
			r.expectClosed()
		})
	}
}

// TestOAuthBearerSessionEndsWithToken: with re-authentication on, a
// session authenticated by a token that expires sooner than
// connections.max.reauth.ms lasts until the token expires.
func TestOAuthBearerSessionEndsWithToken(t *testing.T) {
	s := newOAuthSetup(t)
	c := saslCluster(t, s.security(func(sec *kafka.Security) { sec.SessionLifetime = time.Hour }), nil)
	for _, tc := range []struct {
		exp  time.Duration
		want time.Duration
	}{{2 * time.Minute, 2 * time.Minute}, {3 * time.Hour, time.Hour}} {
		r := c.raw()
		expectCode(t, "handshake", r.request(handshake(auth.MechanismOAuthBearer, 1)).(*kmsg.SASLHandshakeResponse).ErrorCode, noError)
		// Whole seconds: a token's exp is.
		exp := s.now().Add(tc.exp).Truncate(time.Second)
		resp := r.request(authenticate(bearerMessage(s.token(t, s.key, "bob", exp)), 2)).(*kmsg.SASLAuthenticateResponse)
		expectCode(t, "authenticate", resp.ErrorCode, noError)
		got := time.Duration(resp.SessionLifetimeMillis) * time.Millisecond
		if got > tc.want || got < tc.want-2*time.Second {
			t.Fatalf("token valid for %v, reauth %v: session lifetime %v, want about %v", tc.exp, time.Hour, got, tc.want)
		}
	}
}
