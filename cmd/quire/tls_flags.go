package main

import (
	"crypto/tls"
	"fmt"
	"strings"

	"github.com/spf13/pflag"

	"quire/internal/meta"
	"quire/internal/tlsconf"
)

// TLS between Quire's own components (issue 18): the bookie protocol
// (--bookie-tls-*), etcd (--meta-tls-* on its clients; the member's flags
// are in meta.go) and ISR replication (--isr-tls-*, broker.go). Every flag
// is off by default: without them everything is plaintext as before.

// registerBookieServerTLS adds the flags of a bookie's listener (`quire
// bookie`, and the standalone's bookies).
func registerBookieServerTLS(f *pflag.FlagSet, files *tlsconf.Files) {
	f.StringVar(&files.Cert, "bookie-tls-cert", "", "PEM certificate: the bookie protocol listener speaks TLS (reloaded when the file changes); every client then needs --bookie-tls-ca")
	f.StringVar(&files.Key, "bookie-tls-key", "", "PEM private key of --bookie-tls-cert")
	f.StringVar(&files.ClientCA, "bookie-tls-client-ca", "", "PEM CA certificates: the bookie requires client certificates signed by them (mutual TLS: brokers and autorecovery authenticate to bookies)")
}

// registerBookieClientTLS adds the flags of a bookie client (brokers,
// autorecovery). The client's configuration decides for every bookie it
// talks to: registrations do not say whether a bookie speaks TLS.
func registerBookieClientTLS(f *pflag.FlagSet, files *tlsconf.ClientFiles) {
	f.StringVar(&files.CA, "bookie-tls-ca", "", "PEM CA certificates: connect to every bookie over TLS, trusting these (all bookies of the cluster must serve TLS)")
	f.StringVar(&files.Cert, "bookie-tls-client-cert", "", "PEM certificate presented to bookies that require client certificates (--bookie-tls-client-ca); reloaded when the file changes")
	f.StringVar(&files.Key, "bookie-tls-client-key", "", "PEM private key of --bookie-tls-client-cert")
}

// registerMetaClientTLS adds the flags of an etcd client (`quire broker`,
// `quire bookie`).
func registerMetaClientTLS(f *pflag.FlagSet, files *tlsconf.ClientFiles) {
	f.StringVar(&files.CA, "meta-tls-ca", "", "PEM CA certificates: connect to etcd over TLS (https:// endpoints), trusting these")
	f.StringVar(&files.Cert, "meta-tls-cert", "", "PEM certificate presented to etcd members that require client certificates (--tls-client-ca of quire meta, etcd's --client-cert-auth)")
	f.StringVar(&files.Key, "meta-tls-key", "", "PEM private key of --meta-tls-cert")
}

// serverTLS is files' server configuration, or nil when they are not set.
func serverTLS(what string, files tlsconf.Files) (*tls.Config, error) {
	if !files.Enabled() {
		if files.ClientCA != "" {
			return nil, fmt.Errorf("%s: a client CA needs a certificate and key to serve TLS with", what)
		}
		return nil, nil
	}
	cfg, err := tlsconf.Server(files)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return cfg, nil
}

// clientTLS is files' client configuration, or nil when they are not set.
func clientTLS(what string, files tlsconf.ClientFiles) (*tls.Config, error) {
	if !files.Enabled() {
		return nil, nil
	}
	cfg, err := tlsconf.Client(files)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return cfg, nil
}

// openMeta connects to etcd at endpoints (host:port or URLs), over TLS when
// files say so: host:port endpoints then become https://.
func openMeta(endpoints []string, files tlsconf.ClientFiles) (*meta.Etcd, error) {
	cfg, err := clientTLS("meta", files)
	if err != nil {
		return nil, err
	}
	return meta.NewEtcd(meta.EtcdConfig{Endpoints: withSchemeTLS(endpoints, cfg != nil), TLS: cfg})
}

// withSchemeTLS is withScheme with https:// for TLS.
func withSchemeTLS(endpoints []string, tls bool) []string {
	if !tls {
		return withScheme(endpoints)
	}
	out := make([]string, len(endpoints))
	for i, e := range endpoints {
		if !strings.Contains(e, "://") {
			e = "https://" + e
		}
		out[i] = e
	}
	return out
}
