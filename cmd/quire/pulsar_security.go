package main

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"slices"

	"github.com/spf13/pflag"

	"quire/internal/auth"
	"quire/internal/broker"
	"quire/internal/tlsconf"
)

// pulsarStandaloneTLSAddr is where `quire standalone` serves pulsar+ssl://
// when given --pulsar-tls-cert without --pulsar-tls-addr (Pulsar's
// brokerServicePortTls).
const pulsarStandaloneTLSAddr = "127.0.0.1:6651"

// pulsarSecurityFlags configure the Pulsar listener's TLS listener,
// authentication and authorization (`quire broker`, `quire standalone`),
// named after Apache Pulsar's broker.conf settings.
type pulsarSecurityFlags struct {
	tlsAddr          string
	tlsAdvertised    string
	tls              tlsconf.Files
	tlsRequireClient bool
	providers        []string
	tokenSecretKey   string
	tokenPublicKey   string
	anonymousRole    string
	authorization    bool
	superUserRoles   []string
}

func (p *pulsarSecurityFlags) register(f *pflag.FlagSet) {
	f.StringVar(&p.tlsAddr, "pulsar-tls-addr", "", "Pulsar over TLS (pulsar+ssl://) listen address, beside --pulsar-addr (brokerServicePortTls; quire standalone: "+pulsarStandaloneTLSAddr+" when --pulsar-tls-cert is given)")
	f.StringVar(&p.tlsAdvertised, "pulsar-tls-advertised-addr", "", "host:port in the pulsar+ssl:// URL lookups answer (default: the TLS listen address)")
	f.StringVar(&p.tls.Cert, "pulsar-tls-cert", "", "PEM certificate of the Pulsar TLS listener (tlsCertificateFilePath; reloaded when the file changes)")
	f.StringVar(&p.tls.Key, "pulsar-tls-key", "", "PEM private key of --pulsar-tls-cert (tlsKeyFilePath)")
	f.StringVar(&p.tls.ClientCA, "pulsar-tls-client-ca", "", "PEM CA certificates that client certificates are verified against (tlsTrustCertsFilePath); a verified certificate's CN is the role of --pulsar-auth tls")
	f.BoolVar(&p.tlsRequireClient, "pulsar-tls-require-client-cert", false, "refuse TLS clients without a certificate signed by --pulsar-tls-client-ca (tlsRequireTrustedClientCertOnConnect)")
	f.StringSliceVar(&p.providers, "pulsar-auth", nil, "authentication providers of Pulsar clients and the admin REST API, of token,tls (authenticationProviders; empty: no authentication)")
	f.StringVar(&p.tokenSecretKey, "pulsar-token-secret-key", "", "HS256 secret of the token provider: file:///path, a path, data:;base64,<key> or base64 (tokenSecretKey; quire tokens create-secret-key makes one)")
	f.StringVar(&p.tokenPublicKey, "pulsar-token-public-key", "", "RSA or EC public key (DER or PEM) of the token provider, for RS256/ES256 tokens; same forms as --pulsar-token-secret-key (tokenPublicKey)")
	f.StringVar(&p.anonymousRole, "pulsar-anonymous-role", "", "role of clients that bring no credentials (anonymousUserRole; empty: they are refused)")
	f.BoolVar(&p.authorization, "pulsar-authorization", false, "enforce super users, tenant admins and namespace permissions (authorizationEnabled); needs --pulsar-auth")
	f.StringSliceVar(&p.superUserRoles, "pulsar-super-user-roles", nil, "roles that may do everything (superUserRoles)")
}

// security builds the broker's PulsarSecurity from the flags.
func (p *pulsarSecurityFlags) security() (broker.PulsarSecurity, error) {
	var sec broker.PulsarSecurity
	if len(p.providers) == 0 {
		if p.tokenSecretKey != "" || p.tokenPublicKey != "" || p.anonymousRole != "" || p.authorization || len(p.superUserRoles) > 0 {
			return sec, errors.New("--pulsar-token-*, --pulsar-anonymous-role, --pulsar-authorization and --pulsar-super-user-roles need --pulsar-auth")
		}
		return sec, nil
	}
	providers := &auth.PulsarProviders{}
	for _, name := range p.providers {
		switch name {
		case auth.PulsarMethodToken:
			v, err := p.tokenValidator()
			if err != nil {
				return sec, err
			}
			providers.Tokens = v
		case auth.PulsarMethodTLS:
			providers.TLS = true
		default:
			return sec, fmt.Errorf("--pulsar-auth %q: want token or tls", name)
		}
	}
	if !slices.Contains(p.providers, auth.PulsarMethodToken) && (p.tokenSecretKey != "" || p.tokenPublicKey != "") {
		return sec, errors.New("--pulsar-token-* needs token in --pulsar-auth")
	}
	return broker.PulsarSecurity{Authenticator: providers, AnonymousRole: p.anonymousRole,
		Authorization: p.authorization, SuperUserRoles: p.superUserRoles}, nil
}

func (p *pulsarSecurityFlags) tokenValidator() (*auth.TokenValidator, error) {
	switch {
	case p.tokenSecretKey != "" && p.tokenPublicKey != "":
		return nil, errors.New("--pulsar-token-secret-key and --pulsar-token-public-key: give one")
	case p.tokenSecretKey != "":
		key, err := auth.ReadTokenKey(p.tokenSecretKey)
		if err != nil {
			return nil, fmt.Errorf("--pulsar-token-secret-key: %w", err)
		}
		return auth.NewSecretKeyValidator(key)
	case p.tokenPublicKey != "":
		key, err := auth.ReadTokenKey(p.tokenPublicKey)
		if err != nil {
			return nil, fmt.Errorf("--pulsar-token-public-key: %w", err)
		}
		return auth.NewPublicKeyValidator(key)
	}
	return nil, errors.New("--pulsar-auth token needs --pulsar-token-secret-key or --pulsar-token-public-key")
}

// listenTLS opens the pulsar+ssl:// listener ("" address: none). Client
// certificates are verified when given and required only with
// --pulsar-tls-require-client-cert, as in Pulsar (a client may bring a
// token over TLS instead).
func (p *pulsarSecurityFlags) listenTLS() (net.Listener, error) {
	if p.tlsAddr == "" {
		if p.tls.Enabled() || p.tls.ClientCA != "" {
			return nil, errors.New("--pulsar-tls-cert needs --pulsar-tls-addr")
		}
		return nil, nil
	}
	cfg, err := tlsconf.Server(p.tls)
	if err != nil {
		return nil, fmt.Errorf("pulsar TLS listener: %w", err)
	}
	switch {
	case p.tls.ClientCA != "" && !p.tlsRequireClient:
		cfg.ClientAuth = tls.VerifyClientCertIfGiven
	case p.tls.ClientCA == "" && p.tlsRequireClient:
		return nil, errors.New("--pulsar-tls-require-client-cert needs --pulsar-tls-client-ca")
	}
	ln, err := net.Listen("tcp", p.tlsAddr)
	if err != nil {
		return nil, fmt.Errorf("pulsar TLS listener: %w", err)
	}
	return tls.NewListener(ln, cfg), nil
}
