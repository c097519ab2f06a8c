package auth

// Tokens: Pulsar's AuthenticationToken, a JWT whose `sub` claim is the
// client's role (Pulsar's default tokenAuthClaim), signed with a secret key
// (HMAC, Pulsar's tokenSecretKey) or a private key whose public half the
// broker holds (RSA or ECDSA, tokenPublicKey).
//
// The algorithms a key accepts are fixed by the key's type, never by the
// token: a secret key verifies only HS256/384/512, an RSA key only
// RS256/384/512, an EC key only ES256/384/512. So a token cannot choose
// "none", nor make the broker use an RSA public key (which is public) as an
// HMAC secret. `exp` and `nbf` are honoured when present; a token without
// `exp` never expires, as in Pulsar.
//
// Deviations from Apache Pulsar: no audience check (tokenAudienceClaim), no
// other role claim than `sub`, no RSA-PSS algorithms.

import (
	"crypto/ecdsa"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// ErrInvalidToken is the sentinel every refused token wraps: malformed, a
// signature that does not verify, an algorithm the key does not allow,
// expired or not yet valid, or without a role.
var ErrInvalidToken = errors.New("auth: invalid token")

const (
	// MaxTokenBytes bounds a token: larger ones are refused unparsed.
	MaxTokenBytes = 16 << 10
	// MinSecretKeyBytes is the shortest HMAC secret accepted: 256 bits,
	// what HS256 needs (and what Pulsar's JJWT insists on).
	MinSecretKeyBytes = 32
	// maxKeyFileBytes bounds a key read from a file.
	maxKeyFileBytes = 1 << 20
)

// TokenValidator checks tokens against one key. Safe for concurrent use.
type TokenValidator struct {
	key any // []byte (HMAC), *rsa.PublicKey or *ecdsa.PublicKey
	// methods are the "alg" values the key verifies (the pinning).
	methods []string
	// now is the clock exp and nbf are checked against; nil: time.Now.
	now func() time.Time
}

// TokenClaims is what a valid token says.
type TokenClaims struct {
	Role string
	// Expiry is when the token stops being valid; zero: never.
	Expiry time.Time
}

// ReadTokenKey reads a key given as Pulsar gives tokenSecretKey and
// tokenPublicKey: "data:;base64,<base64>" (the key inline),
// "file:///path" or a plain path (the file's bytes, as they are), or else
// the key itself in base64.
func ReadTokenKey(spec string) ([]byte, error) {
	switch {
	case spec == "":
		return nil, errors.New("token key: empty")
	case strings.HasPrefix(spec, "data:"):
		meta, data, ok := strings.Cut(strings.TrimPrefix(spec, "data:"), ",")
		if !ok {
			return nil, errors.New("token key: a data: URL needs a comma before its data")
		}
		if strings.HasSuffix(meta, ";base64") {
			key, err := base64.StdEncoding.DecodeString(data)
			if err != nil {
				return nil, fmt.Errorf("token key: data: URL: %w", err)
			}
			return key, nil
		}
		key, err := url.PathUnescape(data)
		if err != nil {
			return nil, fmt.Errorf("token key: data: URL: %w", err)
		}
		return []byte(key), nil
	case strings.HasPrefix(spec, "file:"):
		u, err := url.Parse(spec)
		if err != nil {
			return nil, fmt.Errorf("token key: %w", err)
		}
		path := u.Path
		if path == "" {
			path = u.Opaque // file:relative/path
		}
		return readKeyFile(path)
	}
	if _, err := os.Stat(spec); err == nil {
		return readKeyFile(spec)
	}
	key, err := base64.StdEncoding.DecodeString(spec)
	if err != nil {
		return nil, fmt.Errorf("token key %q: neither data:, file:, an existing file nor base64", shorten(spec))
	}
	return key, nil
}

func readKeyFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("token key: %w", err)
	}
	defer f.Close()
	key, err := io.ReadAll(io.LimitReader(f, maxKeyFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("token key %s: %w", path, err)
	}
	if len(key) > maxKeyFileBytes {
		return nil, fmt.Errorf("token key %s: larger than %d bytes", path, maxKeyFileBytes)
	}
	return key, nil
}

func shorten(s string) string {
	if len(s) > 16 {
		return s[:16] + "…"
	}
	return s
}

// NewSecretKeyValidator returns a validator of HMAC-signed tokens (HS256,
// HS384, HS512) with secret, which must be at least MinSecretKeyBytes long.
func NewSecretKeyValidator(secret []byte) (*TokenValidator, error) {
	if len(secret) < MinSecretKeyBytes {
		return nil, fmt.Errorf("token secret key: %d bytes, want at least %d", len(secret), MinSecretKeyBytes)
	}
	return &TokenValidator{key: append([]byte(nil), secret...), methods: []string{"HS256", "HS384", "HS512"}}, nil
}

// NewPublicKeyValidator returns a validator of tokens signed by the private
// half of key: an X.509 SubjectPublicKeyInfo, DER (what `pulsar tokens
// create-key-pair` writes) or PEM. An RSA key verifies RS256/384/512, an
// EC key ES256/384/512.
func NewPublicKeyValidator(key []byte) (*TokenValidator, error) {
	der := key
	if block, _ := pem.Decode(key); block != nil {
		der = block.Bytes
	}
	pub, err := x509.ParsePKIXPublicKey(der)
	if err != nil {
		return nil, fmt.Errorf("token public key: %w", err)
	}
	switch k := pub.(type) {
	case *rsa.PublicKey:
		if k.N.BitLen() < 2048 {
			return nil, fmt.Errorf("token public key: RSA key of %d bits, want at least 2048", k.N.BitLen())
		}
		return &TokenValidator{key: k, methods: []string{"RS256", "RS384", "RS512"}}, nil
	case *ecdsa.PublicKey:
		return &TokenValidator{key: k, methods: []string{"ES256", "ES384", "ES512"}}, nil
	}
	return nil, fmt.Errorf("token public key: %T keys are not supported (RSA or EC)", pub)
}

// WithClock returns a copy of v that checks exp and nbf against now (tests).
func (v *TokenValidator) WithClock(now func() time.Time) *TokenValidator {
	c := *v
	c.now = now
	return &c
}

// Validate checks a token and returns its claims; errors wrap
// ErrInvalidToken. Surrounding white space is ignored (token files often
// end with a newline).
func (v *TokenValidator) Validate(token string) (TokenClaims, error) {
	token = strings.TrimSpace(token)
	if len(token) > MaxTokenBytes {
		return TokenClaims{}, fmt.Errorf("%w: %d bytes, more than %d", ErrInvalidToken, len(token), MaxTokenBytes)
	}
	opts := []jwt.ParserOption{jwt.WithValidMethods(v.methods)}
	if v.now != nil {
		opts = append(opts, jwt.WithTimeFunc(v.now))
	}
	var claims jwt.RegisteredClaims
	_, err := jwt.NewParser(opts...).ParseWithClaims(token, &claims, func(t *jwt.Token) (any, error) {
		// WithValidMethods has checked alg against v.methods already; the
		// method's type is checked again so that a key is never handed to
		// another family's verifier.
		switch t.Method.(type) {
		case *jwt.SigningMethodHMAC:
			if _, ok := v.key.([]byte); ok {
				return v.key, nil
			}
		case *jwt.SigningMethodRSA:
			if _, ok := v.key.(*rsa.PublicKey); ok {
				return v.key, nil
			}
		case *jwt.SigningMethodECDSA:
			if _, ok := v.key.(*ecdsa.PublicKey); ok {
				return v.key, nil
			}
		}
		return nil, fmt.Errorf("algorithm %v not allowed for this key", t.Header["alg"])
	})
	if err != nil {
		return TokenClaims{}, fmt.Errorf("%w: %v", ErrInvalidToken, err)
	}
	if claims.Subject == "" {
		return TokenClaims{}, fmt.Errorf("%w: no role (sub claim)", ErrInvalidToken)
	}
	out := TokenClaims{Role: claims.Subject}
	if claims.ExpiresAt != nil {
		out.Expiry = claims.ExpiresAt.Time
	}
	return out, nil
}

// NewTokenSecretKey returns a random HS256 secret key of
// MinSecretKeyBytes (`pulsar tokens create-secret-key`).
func NewTokenSecretKey() ([]byte, error) {
	key := make([]byte, MinSecretKeyBytes)
	if _, err := rand.Read(key); err != nil {
		return nil, err
	}
	return key, nil
}

// CreateToken signs an HS256 token for role with secret (`pulsar tokens
// create --secret-key`); a zero expiry makes a token that never expires.
func CreateToken(secret []byte, role string, expiry time.Time) (string, error) {
	if len(secret) < MinSecretKeyBytes {
		return "", fmt.Errorf("token secret key: %d bytes, want at least %d", len(secret), MinSecretKeyBytes)
	}
	if role == "" {
		return "", errors.New("token: empty role (subject)")
	}
	claims := jwt.RegisteredClaims{Subject: role}
	if !expiry.IsZero() {
		claims.ExpiresAt = jwt.NewNumericDate(expiry)
	}
	return jwt.NewWithClaims(jwt.SigningMethodHS256, claims).SignedString(secret)
}
