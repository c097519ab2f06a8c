package auth

// SASL/OAUTHBEARER (RFC 7628) with Kafka's rules (KIP-255, KIP-768): the
// client sends one message carrying a JWT access token; the server checks
// its signature against the keys of a JWKS file (RFC 7517), its exp (which
// must be there), nbf, issuer and audience when configured, and takes the
// principal from its subject claim (sasl.oauthbearer.sub.claim.name,
// "sub" by default).
//
// The client's message is
//
//	gs2-header %x01 *(key "=" value %x01) %x01
//	gs2-header = "n," ["a=" authzid] ","
//
// with "auth=Bearer <token>" among the pairs; other pairs are SASL
// extensions, which Kafka ignores unless a callback validates them, as
// here. An authzid other than the principal is refused, as in Kafka.
//
// A refused token is answered, as RFC 7628 §3.2.2 and Kafka do, with an
// error challenge {"status":"invalid_token"}; the client acknowledges it
// with a lone %x01 and only then is the exchange failed with the reason.
//
// A key is used only with the algorithms of its type (RS*, ES*; never
// HMAC, never "none"), and only for the token whose "kid" names it; a
// token without a kid is accepted only when the key set holds exactly one
// key.

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// MechanismOAuthBearer is SASL/OAUTHBEARER's name.
const MechanismOAuthBearer = "OAUTHBEARER"

const (
	// maxJWKSBytes bounds a key set read from a file.
	maxJWKSBytes = 1 << 20
	// maxBearerTokenBytes bounds a token: larger ones are refused unparsed.
	maxBearerTokenBytes = 16 << 10
)

// ErrInvalidBearerToken is the sentinel every refused OAUTHBEARER token
// wraps.
var ErrInvalidBearerToken = errors.New("auth: invalid OAUTHBEARER token")

// DefaultBearerClockSkew is how far exp and nbf may be off
// (sasl.oauthbearer.clock.skew.seconds, 30 by default in Kafka).
const DefaultBearerClockSkew = 30 * time.Second

// BearerConfig says which OAUTHBEARER tokens are accepted.
type BearerConfig struct {
	// JWKS is the key set (RFC 7517 JSON) the tokens' signatures are
	// checked against.
	JWKS []byte
	// Issuer and Audience, when not empty, must be the token's iss and
	// one of its aud (sasl.oauthbearer.expected.issuer/audience).
	Issuer   string
	Audience string
	// SubClaim names the claim the principal is taken from ("" = "sub").
	SubClaim string
	// ClockSkew is the leeway on exp and nbf (0 = DefaultBearerClockSkew;
	// negative: none).
	ClockSkew time.Duration
	// Now is the clock (nil: time.Now); tests move it.
	Now func() time.Time
}

// BearerValidator checks OAUTHBEARER tokens. Safe for concurrent use.
type BearerValidator struct {
	cfg  BearerConfig
	keys []jwk
}

type jwk struct {
	kid     string
	key     any // *rsa.PublicKey or *ecdsa.PublicKey
	methods []string
}

// ReadBearerConfig reads the JWKS file at path into a config.
func ReadBearerConfig(path string) (BearerConfig, error) {
	f, err := os.Open(path)
	if err != nil {
		return BearerConfig{}, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxJWKSBytes+1))
	if err != nil {
		return BearerConfig{}, err
	}
	if len(data) > maxJWKSBytes {
		return BearerConfig{}, fmt.Errorf("%s: more than %d bytes", path, maxJWKSBytes)
	}
	return BearerConfig{JWKS: data}, nil
}

// NewBearerValidator parses cfg's key set. Keys of other types than RSA
// and EC, and keys marked for another use than "sig", are skipped; a set
// with no usable key is an error.
func NewBearerValidator(cfg BearerConfig) (*BearerValidator, error) {
	var set struct {
		Keys []struct {
			Kty string `json:"kty"`
			Kid string `json:"kid"`
			Use string `json:"use"`
			Alg string `json:"alg"`
			N   string `json:"n"`
			E   string `json:"e"`
			Crv string `json:"crv"`
			X   string `json:"x"`
			Y   string `json:"y"`
		} `json:"keys"`
	}
	if err := json.Unmarshal(cfg.JWKS, &set); err != nil {
		return nil, fmt.Errorf("JWKS: %w", err)
	}
	v := &BearerValidator{cfg: cfg}
	for i, k := range set.Keys {
		if k.Use != "" && k.Use != "sig" {
			continue
		}
		var key jwk
		var err error
		switch k.Kty {
		case "RSA":
			key, err = rsaJWK(k.N, k.E)
		case "EC":
			key, err = ecJWK(k.Crv, k.X, k.Y)
		default:
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("JWKS key %d (kid %q): %w", i, k.Kid, err)
		}
		if k.Alg != "" {
			if !slices.Contains(key.methods, k.Alg) {
				return nil, fmt.Errorf("JWKS key %d (kid %q): alg %q does not fit a %s key", i, k.Kid, k.Alg, k.Kty)
			}
			key.methods = []string{k.Alg}
		}
		key.kid = k.Kid
		v.keys = append(v.keys, key)
	}
	if len(v.keys) == 0 {
		return nil, errors.New("JWKS: no RSA or EC signing key")
	}
	return v, nil
}

func b64int(s string) (*big.Int, error) {
	b, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(s, "="))
	if err != nil {
		return nil, err
	}
	if len(b) == 0 {
		return nil, errors.New("empty number")
	}
	return new(big.Int).SetBytes(b), nil
}

func rsaJWK(n, e string) (jwk, error) {
	nn, err := b64int(n)
	if err != nil {
		return jwk{}, fmt.Errorf("n: %w", err)
	}
	ee, err := b64int(e)
	if err != nil {
		return jwk{}, fmt.Errorf("e: %w", err)
	}
	if nn.BitLen() < 2048 {
		return jwk{}, fmt.Errorf("RSA modulus of %d bits, want at least 2048", nn.BitLen())
	}
	if !ee.IsInt64() || ee.Int64() < 3 || ee.Int64() > 1<<31-1 || ee.Bit(0) == 0 {
		return jwk{}, errors.New("RSA exponent out of range")
	}
	return jwk{key: &rsa.PublicKey{N: nn, E: int(ee.Int64())}, methods: []string{"RS256", "RS384", "RS512"}}, nil
}

func ecJWK(crv, x, y string) (jwk, error) {
	var curve elliptic.Curve
	var method string
	switch crv {
	case "P-256":
		curve, method = elliptic.P256(), "ES256"
	case "P-384":
		curve, method = elliptic.P384(), "ES384"
	case "P-521":
		curve, method = elliptic.P521(), "ES512"
	default:
		return jwk{}, fmt.Errorf("curve %q", crv)
	}
	xx, err := b64int(x)
	if err != nil {
		return jwk{}, fmt.Errorf("x: %w", err)
	}
	yy, err := b64int(y)
	if err != nil {
		return jwk{}, fmt.Errorf("y: %w", err)
	}
	// The uncompressed point: its parser checks it is on the curve.
	size := (curve.Params().BitSize + 7) / 8
	if len(xx.Bytes()) > size || len(yy.Bytes()) > size {
		return jwk{}, errors.New("coordinate longer than the curve's")
	}
	point := make([]byte, 1+2*size)
	point[0] = 4
	xx.FillBytes(point[1 : 1+size])
	yy.FillBytes(point[1+size:])
	pub, err := ecdsa.ParseUncompressedPublicKey(curve, point)
	if err != nil {
		return jwk{}, err
	}
	return jwk{key: pub, methods: []string{method}}, nil
}

// BearerToken is what a valid OAUTHBEARER token says.
type BearerToken struct {
	Principal string
	Expiry    time.Time
}

// Validate checks a token; errors wrap ErrInvalidBearerToken.
func (v *BearerValidator) Validate(token string) (BearerToken, error) {
	if len(token) > maxBearerTokenBytes {
		return BearerToken{}, fmt.Errorf("%w: %d bytes, more than %d", ErrInvalidBearerToken, len(token), maxBearerTokenBytes)
	}
	skew := v.cfg.ClockSkew
	if skew == 0 {
		skew = DefaultBearerClockSkew
	}
	opts := []jwt.ParserOption{jwt.WithExpirationRequired(), jwt.WithLeeway(max(skew, 0))}
	if v.cfg.Now != nil {
		opts = append(opts, jwt.WithTimeFunc(v.cfg.Now))
	}
	if v.cfg.Issuer != "" {
		opts = append(opts, jwt.WithIssuer(v.cfg.Issuer))
	}
	if v.cfg.Audience != "" {
		opts = append(opts, jwt.WithAudience(v.cfg.Audience))
	}
	claims := jwt.MapClaims{}
	_, err := jwt.NewParser(opts...).ParseWithClaims(token, claims, func(t *jwt.Token) (any, error) {
		k, err := v.keyFor(t)
		if err != nil {
			return nil, err
		}
		alg, _ := t.Header["alg"].(string)
		if !slices.Contains(k.methods, alg) {
			return nil, fmt.Errorf("algorithm %q not allowed for key %q", alg, k.kid)
		}
		return k.key, nil
	})
	if err != nil {
		return BearerToken{}, fmt.Errorf("%w: %v", ErrInvalidBearerToken, err)
	}
	subClaim := v.cfg.SubClaim
	if subClaim == "" {
		subClaim = "sub"
	}
	sub, _ := claims[subClaim].(string)
	if sub == "" {
		return BearerToken{}, fmt.Errorf("%w: no %q claim", ErrInvalidBearerToken, subClaim)
	}
	exp, err := claims.GetExpirationTime()
	if err != nil || exp == nil {
		return BearerToken{}, fmt.Errorf("%w: no exp", ErrInvalidBearerToken)
	}
	return BearerToken{Principal: sub, Expiry: exp.Time}, nil
}

func (v *BearerValidator) keyFor(t *jwt.Token) (jwk, error) {
	kid, hasKid := t.Header["kid"].(string)
	if !hasKid {
		if len(v.keys) == 1 {
			return v.keys[0], nil
		}
		return jwk{}, errors.New("token has no kid and the key set has several keys")
	}
	for _, k := range v.keys {
		if k.kid == kid {
			return k, nil
		}
	}
	return jwk{}, fmt.Errorf("no key with kid %.64q", kid)
}

// OAuthBearerMessage is the client's first OAUTHBEARER message, parsed.
type OAuthBearerMessage struct {
	AuthzID    string
	Token      string
	Extensions map[string]string
}

// ParseOAuthBearer parses the client's initial response (RFC 7628 §3.1).
func ParseOAuthBearer(msg []byte) (OAuthBearerMessage, error) {
	var out OAuthBearerMessage
	s := string(msg)
	// gs2-header: "n," or "y," then an optional "a=authzid", then ",".
	if len(s) < 3 || (s[0] != 'n' && s[0] != 'y') || s[1] != ',' {
		return out, errors.New("OAUTHBEARER: bad GS2 header")
	}
	end := strings.IndexByte(s[2:], ',')
	if end < 0 {
		return out, errors.New("OAUTHBEARER: bad GS2 header")
	}
	if a := s[2 : 2+end]; a != "" {
		if !strings.HasPrefix(a, "a=") || len(a) == 2 {
			return out, errors.New("OAUTHBEARER: bad authzid")
		}
		out.AuthzID = a[2:]
	}
	rest := s[2+end+1:]
	// %x01 *(kvpair) %x01, each kvpair ending in %x01.
	if !strings.HasPrefix(rest, "\x01") || !strings.HasSuffix(rest, "\x01\x01") {
		return out, errors.New("OAUTHBEARER: bad separators")
	}
	pairs := strings.Split(strings.TrimSuffix(rest[1:], "\x01\x01"), "\x01")
	for _, p := range pairs {
		k, val, ok := strings.Cut(p, "=")
		if !ok || k == "" {
			return out, errors.New("OAUTHBEARER: bad key=value pair")
		}
		for _, c := range k {
			if (c < 'a' || c > 'z') && (c < 'A' || c > 'Z') {
				return out, errors.New("OAUTHBEARER: bad key")
			}
		}
		if k == "auth" {
			if out.Token != "" {
				return out, errors.New("OAUTHBEARER: two auth values")
			}
			scheme, token, ok := strings.Cut(val, " ")
			if !ok || !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(token) == "" {
				return out, errors.New("OAUTHBEARER: auth is not a Bearer token")
			}
			out.Token = strings.TrimSpace(token)
			continue
		}
		if out.Extensions == nil {
			out.Extensions = map[string]string{}
		}
		out.Extensions[k] = val
	}
	if out.Token == "" {
		return out, errors.New("OAUTHBEARER: no auth value")
	}
	return out, nil
}

// oauthBearerFailed is Kafka's answer once the client acknowledged the
// error challenge.
const oauthBearerFailed = "Authentication failed during authentication due to invalid credentials with SASL mechanism OAUTHBEARER"

// invalidTokenChallenge is RFC 7628's error message (Kafka sends the same).
var invalidTokenChallenge = []byte(`{"status":"invalid_token"}`)

type oauthBearerServer struct {
	v         *BearerValidator
	principal Principal
	expiry    time.Time
	// failed is the reason of a refused token, told once the client has
	// acknowledged the error challenge.
	failed error
	done   bool
}

// NewOAuthBearerServer starts an OAUTHBEARER exchange against v.
func NewOAuthBearerServer(v *BearerValidator) Server {
	return &oauthBearerServer{v: v}
}

func (o *oauthBearerServer) Principal() Principal { return o.principal }

// Expiry is when the token the client authenticated with expires: its
// session must not outlive it.
func (o *oauthBearerServer) Expiry() time.Time { return o.expiry }

func (o *oauthBearerServer) Step(_ context.Context, token []byte) ([]byte, bool, error) {
	switch {
	case o.done:
		return nil, false, &Failure{Message: oauthBearerFailed, Cause: errors.New("OAUTHBEARER exchange already complete")}
	case o.failed != nil:
		o.done = true
		if len(token) == 1 && token[0] == 0x01 {
			return nil, false, &Failure{Message: oauthBearerFailed, Cause: o.failed}
		}
		return nil, false, &Failure{Message: oauthBearerFailed, Cause: fmt.Errorf("client did not acknowledge the error challenge: %w", o.failed)}
	}
	msg, err := ParseOAuthBearer(token)
	if err != nil {
		o.done = true
		return nil, false, &Failure{Message: oauthBearerFailed, Cause: err}
	}
	t, err := o.v.Validate(msg.Token)
	if err == nil && msg.AuthzID != "" && msg.AuthzID != t.Principal {
		err = fmt.Errorf("authorization id %q is not the token's principal %q", msg.AuthzID, t.Principal)
	}
	if err != nil {
		o.failed = err
		return invalidTokenChallenge, false, nil
	}
	o.done = true
	o.principal, o.expiry = User(t.Principal), t.Expiry
	return nil, true, nil
}
