package auth

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"math/big"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// bearerKeys is a key set of one RSA and one EC key, with the private
// halves to sign test tokens.
type bearerKeys struct {
	rsa  *rsa.PrivateKey
	ec   *ecdsa.PrivateKey
	jwks []byte
}

func b64(b []byte) string { return base64.RawURLEncoding.EncodeToString(b) }

func newBearerKeys(t testing.TB) bearerKeys {
	t.Helper()
	rk, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	ek, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	point, err := ek.PublicKey.Bytes()
	if err != nil {
		t.Fatal(err)
	}
	set := map[string]any{"keys": []map[string]string{
		{"kty": "RSA", "kid": "r1", "use": "sig", "n": b64(rk.N.Bytes()), "e": b64(big.NewInt(int64(rk.E)).Bytes())},
		{"kty": "EC", "kid": "e1", "crv": "P-256", "x": b64(point[1:33]), "y": b64(point[33:])},
		{"kty": "oct", "kid": "h1", "k": b64([]byte("a symmetric key is never used for OAUTHBEARER"))},
	}}
	data, err := json.Marshal(set)
	if err != nil {
		t.Fatal(err)
	}
	return bearerKeys{rsa: rk, ec: ek, jwks: data}
}

var bearerNow = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

func (k bearerKeys) validator(t testing.TB, mod func(*BearerConfig)) *BearerValidator {
	t.Helper()
	cfg := BearerConfig{JWKS: k.jwks, Now: func() time.Time { return bearerNow }}
	if mod != nil {
		mod(&cfg)
	}
	v, err := NewBearerValidator(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// sign makes a token: method and key as given, kid in the header unless
// empty, claims as given.
func sign(t testing.TB, method jwt.SigningMethod, key any, kid string, claims jwt.MapClaims) string {
	t.Helper()
	tok := jwt.NewWithClaims(method, claims)
	if kid != "" {
		tok.Header["kid"] = kid
	}
	s, err := tok.SignedString(key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func claimsFor(sub string, exp time.Time) jwt.MapClaims {
	return jwt.MapClaims{"sub": sub, "exp": exp.Unix(), "iat": bearerNow.Unix(), "iss": "https://idp.test", "aud": "quire"}
}

func bearerMessage(authzid, token string) []byte {
	h := "n,,"
	if authzid != "" {
		h = "n,a=" + authzid + ","
	}
	return []byte(h + "\x01host=localhost\x01port=9092\x01auth=Bearer " + token + "\x01\x01")
}

// exchange runs the server side as a Kafka client drives it: the message,
// and \x01 after an error challenge.
func exchange(v *BearerValidator, msg []byte) (Principal, error) {
	s := NewOAuthBearerServer(v)
	ch, done, err := s.Step(context.Background(), msg)
	if err != nil {
		return Principal{}, err
	}
	if done {
		return s.Principal(), nil
	}
	if string(ch) != `{"status":"invalid_token"}` {
		return Principal{}, errors.New("unexpected challenge " + string(ch))
	}
	_, done, err = s.Step(context.Background(), []byte{0x01})
	if err == nil || done {
		return Principal{}, errors.New("the exchange went on after the error challenge")
	}
	return Principal{}, err
}

func TestOAuthBearer(t *testing.T) {
	k := newBearerKeys(t)
	other := newBearerKeys(t)
	hour := bearerNow.Add(time.Hour)
	v := k.validator(t, nil)
	strict := k.validator(t, func(c *BearerConfig) { c.Issuer, c.Audience = "https://idp.test", "quire" })
	azp := k.validator(t, func(c *BearerConfig) { c.SubClaim = "azp" })
	noExp := claimsFor("alice", hour)
	delete(noExp, "exp")
	withAzp := claimsFor("alice", hour)
	withAzp["azp"] = "svc-1"

	rsaPub, err := x509.MarshalPKIXPublicKey(&k.rsa.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		v    *BearerValidator
		msg  []byte
		want string // principal name, "" = refused
	}{
		{"RS256 with kid", v, bearerMessage("", sign(t, jwt.SigningMethodRS256, k.rsa, "r1", claimsFor("alice", hour))), "alice"},
		{"ES256 with kid", v, bearerMessage("", sign(t, jwt.SigningMethodES256, k.ec, "e1", claimsFor("bob", hour))), "bob"},
		{"authzid equal to the principal", v, bearerMessage("alice", sign(t, jwt.SigningMethodRS256, k.rsa, "r1", claimsFor("alice", hour))), "alice"},
		{"expired within the clock skew", v, bearerMessage("", sign(t, jwt.SigningMethodRS256, k.rsa, "r1", claimsFor("alice", bearerNow.Add(-10*time.Second)))), "alice"},
		{"issuer and audience as expected", strict, bearerMessage("", sign(t, jwt.SigningMethodRS256, k.rsa, "r1", claimsFor("alice", hour))), "alice"},
		{"principal from another claim", azp, bearerMessage("", sign(t, jwt.SigningMethodRS256, k.rsa, "r1", withAzp)), "svc-1"},

		{"authzid of someone else", v, bearerMessage("admin", sign(t, jwt.SigningMethodRS256, k.rsa, "r1", claimsFor("alice", hour))), ""},
		{"expired", v, bearerMessage("", sign(t, jwt.SigningMethodRS256, k.rsa, "r1", claimsFor("alice", bearerNow.Add(-time.Minute)))), ""},
		{"no exp", v, bearerMessage("", sign(t, jwt.SigningMethodRS256, k.rsa, "r1", noExp)), ""},
		{"not yet valid", v, bearerMessage("", sign(t, jwt.SigningMethodRS256, k.rsa, "r1", jwt.MapClaims{"sub": "alice", "exp": hour.Unix(), "nbf": bearerNow.Add(10 * time.Minute).Unix()})), ""},
		{"signed by another key", v, bearerMessage("", sign(t, jwt.SigningMethodRS256, other.rsa, "r1", claimsFor("alice", hour))), ""},
		{"unknown kid", v, bearerMessage("", sign(t, jwt.SigningMethodRS256, k.rsa, "r9", claimsFor("alice", hour))), ""},
		{"no kid with two keys", v, bearerMessage("", sign(t, jwt.SigningMethodRS256, k.rsa, "", claimsFor("alice", hour))), ""},
		{"RSA key named for an EC token", v, bearerMessage("", sign(t, jwt.SigningMethodES256, k.ec, "r1", claimsFor("alice", hour))), ""},
		{"HS256 with the public key as secret", v, bearerMessage("", sign(t, jwt.SigningMethodHS256, rsaPub, "r1", claimsFor("alice", hour))), ""},
		{"symmetric key of the set", v, bearerMessage("", sign(t, jwt.SigningMethodHS256, []byte("a symmetric key is never used for OAUTHBEARER"), "h1", claimsFor("alice", hour))), ""},
		{"alg none", v, bearerMessage("", sign(t, jwt.SigningMethodNone, jwt.UnsafeAllowNoneSignatureType, "r1", claimsFor("alice", hour))), ""},
		{"no subject", v, bearerMessage("", sign(t, jwt.SigningMethodRS256, k.rsa, "r1", jwt.MapClaims{"exp": hour.Unix()})), ""},
		{"wrong issuer", strict, bearerMessage("", sign(t, jwt.SigningMethodRS256, k.rsa, "r1", jwt.MapClaims{"sub": "alice", "exp": hour.Unix(), "iss": "https://evil.test", "aud": "quire"})), ""},
		{"wrong audience", strict, bearerMessage("", sign(t, jwt.SigningMethodRS256, k.rsa, "r1", jwt.MapClaims{"sub": "alice", "exp": hour.Unix(), "iss": "https://idp.test", "aud": "other"})), ""},
		{"not a JWT", v, bearerMessage("", "abc.def.ghi"), ""},
		{"not a message", v, []byte("Bearer xyz"), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := exchange(tc.v, tc.msg)
			if tc.want == "" {
				if err == nil {
					t.Fatalf("authenticated as %v, want refused", p)
				}
				var f *Failure
				if !errors.As(err, &f) || !errors.Is(err, ErrAuthenticationFailed) || f.Message != oauthBearerFailed {
					t.Fatalf("error %v: want an authentication Failure with Kafka's message", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("refused: %v", err)
			}
			if p != User(tc.want) {
				t.Fatalf("principal %v, want User:%s", p, tc.want)
			}
		})
	}
}

func TestOAuthBearerSingleKeyWithoutKid(t *testing.T) {
	k := newBearerKeys(t)
	point, err := k.ec.PublicKey.Bytes()
	if err != nil {
		t.Fatal(err)
	}
	jwks := `{"keys":[{"kty":"EC","crv":"P-256","x":"` + b64(point[1:33]) + `","y":"` + b64(point[33:]) + `"}]}`
	v, err := NewBearerValidator(BearerConfig{JWKS: []byte(jwks), Now: func() time.Time { return bearerNow }})
	if err != nil {
		t.Fatal(err)
	}
	exp := bearerNow.Add(time.Hour).Truncate(time.Second)
	s := NewOAuthBearerServer(v)
	_, done, err := s.Step(context.Background(), bearerMessage("", sign(t, jwt.SigningMethodES256, k.ec, "", claimsFor("carol", exp))))
	if err != nil || !done {
		t.Fatalf("done %v, err %v", done, err)
	}
	if got := s.(interface{ Expiry() time.Time }).Expiry(); !got.Equal(exp) {
		t.Fatalf("expiry %v, want the token's %v", got, exp)
	}
}

func TestOAuthBearerChallengeNotAcknowledged(t *testing.T) {
	k := newBearerKeys(t)
	s := NewOAuthBearerServer(k.validator(t, nil))
	ch, done, err := s.Step(context.Background(), bearerMessage("", "abc.def.ghi"))
	if err != nil || done || len(ch) == 0 {
		t.Fatalf("challenge %q done %v err %v: want the error challenge", ch, done, err)
	}
	if _, _, err := s.Step(context.Background(), []byte("n,,\x01auth=Bearer again\x01\x01")); !errors.Is(err, ErrAuthenticationFailed) {
		t.Fatalf("a second attempt in the same exchange: %v, want refused", err)
	}
	if _, _, err := s.Step(context.Background(), []byte{0x01}); !errors.Is(err, ErrAuthenticationFailed) {
		t.Fatalf("a step after the end: %v, want refused", err)
	}
}

func TestNewBearerValidatorRefusesBadKeySets(t *testing.T) {
	k := newBearerKeys(t)
	small, err := rsa.GenerateKey(rand.Reader, 1024)
	if err != nil {
		t.Fatal(err)
	}
	for name, jwks := range map[string]string{
		"not JSON":         `{"keys":`,
		"no keys":          `{"keys":[]}`,
		"only a symmetric": `{"keys":[{"kty":"oct","k":"c2VjcmV0"}]}`,
		"1024-bit RSA":     `{"keys":[{"kty":"RSA","n":"` + b64(small.N.Bytes()) + `","e":"AQAB"}]}`,
		"point off curve":  `{"keys":[{"kty":"EC","crv":"P-256","x":"` + b64(make([]byte, 32)) + `","y":"` + b64(append(make([]byte, 31), 1)) + `"}]}`,
		"alg of another":   `{"keys":[{"kty":"RSA","alg":"HS256","n":"` + b64(k.rsa.N.Bytes()) + `","e":"AQAB"}]}`,
		"unknown curve":    `{"keys":[{"kty":"EC","crv":"P-192","x":"AA","y":"AA"}]}`,
	} {
		if _, err := NewBearerValidator(BearerConfig{JWKS: []byte(jwks)}); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestParseOAuthBearer(t *testing.T) {
	m, err := ParseOAuthBearer([]byte("n,a=alice,\x01auth=Bearer tok.en.x\x01traceId=42\x01\x01"))
	if err != nil {
		t.Fatal(err)
	}
	if m.AuthzID != "alice" || m.Token != "tok.en.x" || m.Extensions["traceId"] != "42" {
		t.Fatalf("%+v", m)
	}
	for _, bad := range []string{
		"", "n", "n,,", "p=tls,,\x01auth=Bearer t\x01\x01", "n,,auth=Bearer t\x01\x01",
		"n,,\x01auth=Bearer t\x01", "n,,\x01auth=Basic t\x01\x01", "n,,\x01auth=Bearer \x01\x01",
		"n,,\x01\x01", "n,,\x01x=1\x01\x01", "n,b=alice,\x01auth=Bearer t\x01\x01", "n,a=,\x01auth=Bearer t\x01\x01",
		"n,,\x01auth=Bearer t\x01auth=Bearer u\x01\x01", "n,,\x01=v\x01auth=Bearer t\x01\x01", "n,,\x01a-b=v\x01auth=Bearer t\x01\x01",
	} {
		if m, err := ParseOAuthBearer([]byte(bad)); err == nil {
			t.Errorf("%q parsed as %+v", bad, m)
		}
	}
}

func FuzzParseOAuthBearer(f *testing.F) {
	f.Add([]byte("n,,\x01auth=Bearer a.b.c\x01\x01"))
	f.Add([]byte("n,a=alice,\x01auth=Bearer a.b.c\x01host=x\x01\x01"))
	f.Add([]byte("y,,\x01\x01"))
	f.Fuzz(func(t *testing.T, msg []byte) {
		m, err := ParseOAuthBearer(msg)
		if err != nil {
			return
		}
		if m.Token == "" || strings.ContainsAny(m.Token, "\x01 ") {
			t.Fatalf("%q: token %q", msg, m.Token)
		}
	})
}

// FuzzBearerValidate: no token, however made, authenticates without a
// signature of the key set, and nothing panics.
func FuzzBearerValidate(f *testing.F) {
	k := newBearerKeys(f)
	v := k.validator(f, nil)
	f.Add(sign(f, jwt.SigningMethodHS256, []byte("0123456789abcdef0123456789abcdef"), "r1", claimsFor("x", bearerNow.Add(time.Hour))))
	f.Add("eyJhbGciOiJub25lIn0.eyJzdWIiOiJ4In0.")
	f.Fuzz(func(t *testing.T, token string) {
		if tok, err := v.Validate(token); err == nil {
			t.Fatalf("%q validated as %+v", token, tok)
		}
	})
}

// TestOAuthBearerKeyAlgPinned: a key whose JWKS entry names its alg
// verifies only that one, even where its type could verify others.
func TestOAuthBearerKeyAlgPinned(t *testing.T) {
	k := newBearerKeys(t)
	jwks := `{"keys":[{"kty":"RSA","kid":"r1","alg":"RS256","n":"` + b64(k.rsa.N.Bytes()) + `","e":"AQAB"}]}`
	v, err := NewBearerValidator(BearerConfig{JWKS: []byte(jwks), Now: func() time.Time { return bearerNow }})
	if err != nil {
		t.Fatal(err)
	}
	claims := claimsFor("alice", bearerNow.Add(time.Hour))
	if _, err := v.Validate(sign(t, jwt.SigningMethodRS256, k.rsa, "r1", claims)); err != nil {
		t.Fatalf("RS256: %v", err)
	}
	if _, err := v.Validate(sign(t, jwt.SigningMethodRS384, k.rsa, "r1", claims)); !errors.Is(err, ErrInvalidBearerToken) {
		t.Fatalf("RS384 with a key pinned to RS256: %v, want refused", err)
	}
}
