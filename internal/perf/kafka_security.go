package perf

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/pflag"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

// SASLPasswordEnv holds the perf clients' SASL password, so that it never
// shows in ps.
const SASLPasswordEnv = "QUIRE_PERF_SASL_PASSWORD"

// ClientSecurity is how the perf clients reach a secured listener: TLS
// (SSL, or SASL_SSL with a mechanism), optionally with a client
// certificate, and SASL PLAIN or SCRAM.
type ClientSecurity struct {
	TLSCA, TLSCert, TLSKey string
	SASLMechanism          string
	SASLUser               string
	// opts are the client options the fields stand for (resolve).
	opts []kgo.Opt
}

func (s *ClientSecurity) register(fs *pflag.FlagSet) {
	fs.StringVar(&s.TLSCA, "tls-ca", "", "PEM CA of the listener's certificate: connect with TLS")
	fs.StringVar(&s.TLSCert, "tls-cert", "", "PEM client certificate (mutual TLS), with --tls-key")
	fs.StringVar(&s.TLSKey, "tls-key", "", "PEM private key of --tls-cert")
	fs.StringVar(&s.SASLMechanism, "sasl-mechanism", "", "SASL mechanism: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 (password in $"+SASLPasswordEnv+")")
	fs.StringVar(&s.SASLUser, "sasl-user", "", "SASL user")
}

// resolve reads the files and builds the client options.
func (s *ClientSecurity) resolve() error {
	s.opts = nil
	if s.TLSCA != "" || s.TLSCert != "" {
		cfg := &tls.Config{MinVersion: tls.VersionTLS12}
		if s.TLSCA != "" {
			pem, err := os.ReadFile(s.TLSCA)
			if err != nil {
				return fmt.Errorf("--tls-ca: %w", err)
			}
			cfg.RootCAs = x509.NewCertPool()
			if !cfg.RootCAs.AppendCertsFromPEM(pem) {
				return fmt.Errorf("--tls-ca %s: no PEM certificate", s.TLSCA)
			}
		}
		if s.TLSCert != "" || s.TLSKey != "" {
			cert, err := tls.LoadX509KeyPair(s.TLSCert, s.TLSKey)
			if err != nil {
				return fmt.Errorf("--tls-cert/--tls-key: %w", err)
			}
			cfg.Certificates = []tls.Certificate{cert}
		}
		s.opts = append(s.opts, kgo.DialTLSConfig(cfg))
	}
	if s.SASLMechanism == "" {
		if s.SASLUser != "" {
			return errors.New("--sasl-user needs --sasl-mechanism")
		}
		return nil
	}
	password := os.Getenv(SASLPasswordEnv)
	if s.SASLUser == "" || password == "" {
		return fmt.Errorf("--sasl-mechanism needs --sasl-user and $%s", SASLPasswordEnv)
	}
	switch strings.ToUpper(s.SASLMechanism) {
	case "PLAIN":
		s.opts = append(s.opts, kgo.SASL(plain.Auth{User: s.SASLUser, Pass: password}.AsMechanism()))
	case "SCRAM-SHA-256":
		s.opts = append(s.opts, kgo.SASL(scram.Auth{User: s.SASLUser, Pass: password}.AsSha256Mechanism()))
	case "SCRAM-SHA-512":
		s.opts = append(s.opts, kgo.SASL(scram.Auth{User: s.SASLUser, Pass: password}.AsSha512Mechanism()))
	default:
		return fmt.Errorf("--sasl-mechanism %q: want PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512", s.SASLMechanism)
	}
	return nil
}
