package auth_test

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/hmac"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"quire/internal/auth"
)

var testSecret = []byte("0123456789abcdef0123456789abcdef")

// unsignedToken builds header.payload. with the given header and claims and
// signature sig (base64url), for tokens no library would sign.
func unsignedToken(t testing.TB, header, claims map[string]any, sig string) string {
	t.Helper()
	enc := func(v any) string {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		return base64.RawURLEncoding.EncodeToString(b)
	}
	return enc(header) + "." + enc(claims) + "." + sig
}

func sign(t *testing.T, method jwt.SigningMethod, key any, claims jwt.MapClaims) string {
	t.Helper()
	s, err := jwt.NewWithClaims(method, claims).SignedString(key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestTokenValidation(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	hmacV, err := auth.NewSecretKeyValidator(testSecret)
	if err != nil {
		t.Fatal(err)
	}
	hmacV = hmacV.WithClock(func() time.Time { return now })

	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	rsaDER, err := x509.MarshalPKIXPublicKey(&rsaKey.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	rsaV, err := auth.NewPublicKeyValidator(rsaDER) // DER, as pulsar tokens create-key-pair writes
	if err != nil {
		t.Fatal(err)
	}
	ecKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	ecDER, err := x509.MarshalPKIXPublicKey(&ecKey.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	ecV, err := auth.NewPublicKeyValidator(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: ecDER})) // PEM
	if err != nil {
		t.Fatal(err)
	}
	rsaPEM := pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: rsaDER})

	sub := jwt.MapClaims{"sub": "token-principal"}
	for _, tc := range []struct {
		name      string
		validator *auth.TokenValidator
		token     string
		role      string // "" when refused
		expiry    time.Time
	}{
		{name: "HS256", validator: hmacV, token: sign(t, jwt.SigningMethodHS256, testSecret, sub), role: "token-principal"},
		{name: "HS512", validator: hmacV, token: sign(t, jwt.SigningMethodHS512, testSecret, sub), role: "token-principal"},
		{name: "trailing newline", validator: hmacV, token: sign(t, jwt.SigningMethodHS256, testSecret, sub) + "\n", role: "token-principal"},
		{name: "not yet expired", validator: hmacV, role: "alice", expiry: now.Add(time.Minute),
			token: sign(t, jwt.SigningMethodHS256, testSecret, jwt.MapClaims{"sub": "alice", "exp": now.Add(time.Minute).Unix()})},
		{name: "expired", validator: hmacV,
			token: sign(t, jwt.SigningMethodHS256, testSecret, jwt.MapClaims{"sub": "alice", "exp": now.Add(-time.Second).Unix()})},
		{name: "not valid before", validator: hmacV,
			token: sign(t, jwt.SigningMethodHS256, testSecret, jwt.MapClaims{"sub": "alice", "nbf": now.Add(time.Hour).Unix()})},
		{name: "forged: another secret", validator: hmacV,
			token: sign(t, jwt.SigningMethodHS256, []byte("another secret of thirty-two by!"), sub)},
		{name: "no role", validator: hmacV, token: sign(t, jwt.SigningMethodHS256, testSecret, jwt.MapClaims{"name": "x"})},
		{name: "role not a string", validator: hmacV, token: sign(t, jwt.SigningMethodHS256, testSecret, jwt.MapClaims{"sub": 7})},
		{name: "alg none", validator: hmacV, token: unsignedToken(t, map[string]any{"alg": "none", "typ": "JWT"}, map[string]any{"sub": "admin"}, "")},
		{name: "alg None", validator: hmacV, token: unsignedToken(t, map[string]any{"alg": "None"}, map[string]any{"sub": "admin"}, "")},
		{name: "RS256 to a secret key", validator: hmacV, token: sign(t, jwt.SigningMethodRS256, rsaKey, sub)},
		{name: "garbage", validator: hmacV, token: "not.a.token"},
		{name: "empty", validator: hmacV, token: ""},
		{name: "too long", validator: hmacV, token: strings.Repeat("a", auth.MaxTokenBytes+1)},
		{name: "RS256", validator: rsaV, token: sign(t, jwt.SigningMethodRS256, rsaKey, sub), role: "token-principal"},
		{name: "RS512", validator: rsaV, token: sign(t, jwt.SigningMethodRS512, rsaKey, sub), role: "token-principal"},
		// The classic confusion: the RSA public key (public, so anyone has
		// it) used as an HMAC secret, in either encoding.
		{name: "HS256 signed with the RSA public key DER", validator: rsaV, token: sign(t, jwt.SigningMethodHS256, rsaDER, sub)},
		{name: "HS256 signed with the RSA public key PEM", validator: rsaV, token: sign(t, jwt.SigningMethodHS256, rsaPEM, sub)},
		{name: "ES256 to an RSA key", validator: rsaV, token: sign(t, jwt.SigningMethodES256, ecKey, sub)},
		{name: "alg none to an RSA key", validator: rsaV, token: unsignedToken(t, map[string]any{"alg": "none"}, map[string]any{"sub": "admin"}, "")},
		{name: "ES256", validator: ecV, token: sign(t, jwt.SigningMethodES256, ecKey, sub), role: "token-principal"},
		{name: "HS256 signed with the EC public key", validator: ecV, token: sign(t, jwt.SigningMethodHS256, ecDER, sub)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			claims, err := tc.validator.Validate(tc.token)
			if tc.role == "" {
				if !errors.Is(err, auth.ErrInvalidToken) {
					t.Fatalf("Validate = %+v, %v; want ErrInvalidToken", claims, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Validate: %v", err)
			}
			if claims.Role != tc.role || !claims.Expiry.Equal(tc.expiry) {
				t.Fatalf("Validate = %+v, want role %q expiry %v", claims, tc.role, tc.expiry)
			}
		})
	}
}

func TestCreateToken(t *testing.T) {
	key, err := auth.NewTokenSecretKey()
	if err != nil {
		t.Fatal(err)
	}
	v, err := auth.NewSecretKeyValidator(key)
	if err != nil {
		t.Fatal(err)
	}
	expiry := time.Now().Add(time.Hour).Truncate(time.Second)
	token, err := auth.CreateToken(key, "alice", expiry)
	if err != nil {
		t.Fatal(err)
	}
	if claims, err := v.Validate(token); err != nil || claims.Role != "alice" || !claims.Expiry.Equal(expiry) {
		t.Fatalf("Validate = %+v, %v", claims, err)
	}
	if _, err := auth.CreateToken(key[:16], "alice", time.Time{}); err == nil {
		t.Fatal("CreateToken accepted a 16-byte secret")
	}
	if _, err := auth.NewSecretKeyValidator(key[:31]); err == nil {
		t.Fatal("NewSecretKeyValidator accepted a 31-byte secret")
	}
}

func TestReadTokenKey(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "secret.key")
	if err := os.WriteFile(path, testSecret, 0o600); err != nil {
		t.Fatal(err)
	}
	b64 := base64.StdEncoding.EncodeToString(testSecret)
	for _, spec := range []string{"file://" + path, path, "data:;base64," + b64, "data:application/octet-stream;base64," + b64, b64} {
		key, err := auth.ReadTokenKey(spec)
		if err != nil || string(key) != string(testSecret) {
			t.Errorf("ReadTokenKey(%q) = %q, %v", spec, key, err)
		}
	}
	for _, spec := range []string{"", "file://" + filepath.Join(dir, "missing"), "data:;base64,@@@", "data:nocomma", "not base64 and not a file!"} {
		if key, err := auth.ReadTokenKey(spec); err == nil {
			t.Errorf("ReadTokenKey(%q) = %q, want an error", spec, key)
		}
	}
}

// FuzzTokenValidate: whatever the input, Validate never panics, refuses with
// ErrInvalidToken, or accepts a token that really is signed with the secret
// (its signature is the HMAC of its first two parts, under an HS algorithm)
// and names a role.
func FuzzTokenValidate(f *testing.F) {
	v, err := auth.NewSecretKeyValidator(testSecret)
	if err != nil {
		f.Fatal(err)
	}
	good, err := auth.CreateToken(testSecret, "alice", time.Time{})
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good)
	f.Add(unsignedToken(f, map[string]any{"alg": "none"}, map[string]any{"sub": "admin"}, ""))
	f.Add(unsignedToken(f, map[string]any{"alg": "HS256", "crit": []string{"x"}}, map[string]any{"sub": "a", "exp": "soon"}, "AAAA"))
	f.Add("eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ0b2tlbi1wcmluY2lwYWwifQ.tSfgR8l7dKC6LoWCxQgNkuSB8our7xV_nAM7wpgCbG4")
	f.Add("..")
	f.Add("a.b.c.d")
	f.Fuzz(func(t *testing.T, token string) {
		claims, err := v.Validate(token)
		if err != nil {
			if !errors.Is(err, auth.ErrInvalidToken) {
				t.Fatalf("error %v does not wrap ErrInvalidToken", err)
			}
			return
		}
		if claims.Role == "" {
			t.Fatal("accepted a token without a role")
		}
		parts := strings.Split(strings.TrimSpace(token), ".")
		if len(parts) != 3 {
			t.Fatalf("accepted %q, not three parts", token)
		}
		header, err := base64.RawURLEncoding.DecodeString(parts[0])
		if err != nil {
			t.Fatalf("accepted a token whose header is not base64url: %v", err)
		}
		var h struct{ Alg string }
		if err := json.Unmarshal(header, &h); err != nil {
			t.Fatalf("accepted a token whose header is not JSON: %v", err)
		}
		hashes := map[string]crypto.Hash{"HS256": crypto.SHA256, "HS384": crypto.SHA384, "HS512": crypto.SHA512}
		hash, ok := hashes[h.Alg]
		if !ok {
			t.Fatalf("accepted alg %q with a secret key", h.Alg)
		}
		mac := hmac.New(hash.New, testSecret)
		mac.Write([]byte(parts[0] + "." + parts[1]))
		sig, err := base64.RawURLEncoding.DecodeString(parts[2])
		if err != nil || !hmac.Equal(sig, mac.Sum(nil)) {
			t.Fatalf("accepted %q without a valid signature", token)
		}
	})
}
