package kafka_test

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"quire/internal/auth"
	"quire/internal/kafka"
	"quire/internal/meta"
	"quire/internal/tlsconf"
)

// TestTLSClientCertificatePrincipal: on a TLS listener without SASL, a
// client's verified certificate names its principal (the subject DN
// through ssl.principal.mapping.rules), which the authorizer then judges;
// a client without a certificate stays User:ANONYMOUS.
func TestTLSClientCertificatePrincipal(t *testing.T) {
	dir := t.TempDir()
	if err := tlsconf.MakeTestPKI(dir, []string{"127.0.0.1"}, "alice", time.Hour); err != nil {
		t.Fatal(err)
	}
	server, err := tlsconf.Server(tlsconf.Files{Cert: filepath.Join(dir, "server.pem"), Key: filepath.Join(dir, "server-key.pem"), ClientCA: filepath.Join(dir, "ca.pem")})
	if err != nil {
		t.Fatal(err)
	}
	server.ClientAuth = tls.VerifyClientCertIfGiven
	pool, err := tlsconf.Pool(filepath.Join(dir, "ca.pem"))
	if err != nil {
		t.Fatal(err)
	}
	clientCert, err := tls.LoadX509KeyPair(filepath.Join(dir, "client.pem"), filepath.Join(dir, "client-key.pem"))
	if err != nil {
		t.Fatal(err)
	}

	store := meta.NewMemServer(meta.MemConfig{}).NewClient()
	t.Cleanup(func() { store.Close() })
	acls, err := auth.OpenACLStore(context.Background(), store, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(acls.Close)
	mapping, err := auth.ParseSSLPrincipalMappingRules("RULE:^CN=([^,]*)(,.*)?$/$1/L,DEFAULT")
	if err != nil {
		t.Fatal(err)
	}
	sec := kafka.Security{
		Authorizer:          auth.NewAuthorizer(acls, auth.AuthorizerConfig{SuperUsers: []auth.Principal{auth.User("alice")}}),
		SSLPrincipalMapping: mapping,
	}
	c := newClusterOn(t, func(ln net.Listener) net.Listener {
		return &kafka.Listener{Listener: tls.NewListener(ln, server), Security: sec}
	})
	ctx := testContext(t)

	withCert := kadm.NewClient(c.client(kgo.DialTLSConfig(&tls.Config{RootCAs: pool, Certificates: []tls.Certificate{clientCert}})))
	resp, err := withCert.CreateTopic(ctx, 1, -1, nil, "by-certificate")
	if err != nil || resp.Err != nil {
		t.Fatalf("alice (by her certificate, a super user) creates a topic: %v %v", err, resp.Err)
	}

	anonymous := kadm.NewClient(c.client(kgo.DialTLSConfig(&tls.Config{RootCAs: pool}), kgo.RequestRetries(0)))
	resp, err = anonymous.CreateTopic(ctx, 1, -1, nil, "anonymous")
	if err == nil {
		err = resp.Err
	}
	if !errors.Is(err, kerr.TopicAuthorizationFailed) {
		t.Fatalf("a client without a certificate creates a topic: %v, want TOPIC_AUTHORIZATION_FAILED", err)
	}
}
