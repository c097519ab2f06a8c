package auth

import (
	"crypto/x509"
	"errors"
	"fmt"
	"time"
)

// Pulsar's authentication method names (auth_method_name on CONNECT).
const (
	PulsarMethodToken = "token"
	PulsarMethodTLS   = "tls"
)

// PulsarProviders are the authentication providers of a Pulsar listener
// and of the admin REST API (Pulsar's authenticationProviders): "token"
// with Tokens (AuthenticationProviderToken: the role is the token's sub),
// and "tls" when TLS is set (AuthenticationProviderTls: the role is the
// common name of the client certificate the TLS handshake verified).
// Methods are given by name, so that a front end can serve them without
// importing this package.
type PulsarProviders struct {
	Tokens *TokenValidator // nil: no token provider
	TLS    bool
}

// Enabled reports whether any provider is configured.
func (p *PulsarProviders) Enabled() bool { return p != nil && (p.Tokens != nil || p.TLS) }

// Supports reports whether a provider serves method.
func (p *PulsarProviders) Supports(method string) bool {
	switch method {
	case PulsarMethodToken:
		return p.Tokens != nil
	case PulsarMethodTLS:
		return p.TLS
	}
	return false
}

// Authenticate returns the role data proves under method, and when the
// proof expires (zero: never; a certificate's validity is the TLS
// handshake's business). certs is the verified chain, leaf first.
func (p *PulsarProviders) Authenticate(method string, data []byte, certs []*x509.Certificate) (string, time.Time, error) {
	switch {
	case method == PulsarMethodToken && p.Tokens != nil:
		claims, err := p.Tokens.Validate(string(data))
		if err != nil {
			return "", time.Time{}, err
		}
		return claims.Role, claims.Expiry, nil
	case method == PulsarMethodTLS && p.TLS:
		if len(certs) == 0 {
			return "", time.Time{}, errors.New("no verified client certificate")
		}
		cn := certs[0].Subject.CommonName
		if cn == "" {
			return "", time.Time{}, errors.New("the client certificate has no common name")
		}
		return cn, time.Time{}, nil
	}
	return "", time.Time{}, fmt.Errorf("no provider for authentication method %q", method)
}
