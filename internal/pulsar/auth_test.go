package pulsar_test

// Authentication on CONNECT and authorization of commands, over raw
// protocol connections: what a refused client is answered, and that the
// answers name nothing but what it asked for.

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"quire/internal/auth"
	qpulsar "quire/internal/pulsar"
	pb "quire/internal/pulsar/pulsarpb"
	"quire/internal/pulsar/pulsartest"
	"quire/internal/tlsconf"
)

var tokenSecret = []byte("a test secret of 32 bytes, or so")

func mustToken(t *testing.T, secret []byte, role string, expiry time.Time) string {
	t.Helper()
	token, err := auth.CreateToken(secret, role, expiry)
	if err != nil {
		t.Fatal(err)
	}
	return token
}

func tokenProviders(t *testing.T) *auth.PulsarProviders {
	t.Helper()
	v, err := auth.NewSecretKeyValidator(tokenSecret)
	if err != nil {
		t.Fatal(err)
	}
	return &auth.PulsarProviders{Tokens: v, TLS: true}
}

// grants is a test Authorizer: role → namespace → actions.
type grants map[string]map[string][]qpulsar.Action

func (g grants) Authorize(_ context.Context, role, namespace string, action qpulsar.Action) error {
	for _, a := range g[role][namespace] {
		if a == action || action == qpulsar.ActionLookup {
			return nil
		}
	}
	return qpulsar.ErrAuthorization
}

func (r *rawConn) connectWith(method string, data []byte, refresh bool) *qpulsar.Frame {
	r.t.Helper()
	r.send(&pb.BaseCommand{Type: pb.BaseCommand_CONNECT.Enum(), Connect: &pb.CommandConnect{
		ClientVersion: proto.String("raw"), ProtocolVersion: proto.Int32(20),
		AuthMethodName: proto.String(method), AuthData: data,
		FeatureFlags: &pb.FeatureFlags{SupportsAuthRefresh: proto.Bool(refresh)},
	}})
	return r.read()
}

// expectRefused checks that CONNECT was answered ERROR AuthenticationError
// and the connection closed.
func (r *rawConn) expectRefused(f *qpulsar.Frame) {
	r.t.Helper()
	if e := f.Cmd.GetError(); f.Cmd.GetType() != pb.BaseCommand_ERROR || e.GetError() != pb.ServerError_AuthenticationError {
		r.t.Fatalf("got %v, want ERROR AuthenticationError", f.Cmd)
	}
	r.expectClosed()
}

func TestConnectAuthentication(t *testing.T) {
	b := newBroker(t, nil, func(c *qpulsar.Config) { c.Authenticator = tokenProviders(t) })
	unsigned := func(header string) string {
		enc := base64.RawURLEncoding.EncodeToString
		return enc([]byte(header)) + "." + enc([]byte(`{"sub":"admin"}`)) + "."
	}
	for _, tc := range []struct {
		name, method, data string
		ok                 bool
	}{
		{name: "valid token", method: "token", data: mustToken(t, tokenSecret, "alice", time.Time{}), ok: true},
		{name: "valid token, not yet expired", method: "token", data: mustToken(t, tokenSecret, "alice", time.Now().Add(time.Hour)), ok: true},
		{name: "no credentials, no anonymous role", method: "", data: ""},
		{name: "a method nobody serves", method: "basic", data: "alice:secret"},
		{name: "empty token", method: "token", data: ""},
		{name: "forged: another key", method: "token", data: mustToken(t, []byte("not the broker's secret, 32 byte"), "admin", time.Time{})},
		{name: "expired", method: "token", data: mustToken(t, tokenSecret, "alice", time.Now().Add(-time.Minute))},
		{name: "alg none", method: "token", data: unsigned(`{"alg":"none"}`)},
		{name: "tls on a plaintext listener", method: "tls", data: ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := b.dial()
			f := r.connectWith(tc.method, []byte(tc.data), false)
			if !tc.ok {
				r.expectRefused(f)
				if msg := f.Cmd.GetError().GetMessage(); strings.Contains(msg, string(tokenSecret)) {
					t.Fatalf("the refusal names the secret: %q", msg)
				}
				return
			}
			if f.Cmd.GetType() != pb.BaseCommand_CONNECTED {
				t.Fatalf("got %v, want CONNECTED", f.Cmd)
			}
			// The connection serves requests.
			r.send(&pb.BaseCommand{Type: pb.BaseCommand_PING.Enum(), Ping: &pb.CommandPing{}})
			if f := r.read(); f.Cmd.GetType() != pb.BaseCommand_PONG {
				t.Fatalf("got %v, want PONG", f.Cmd)
			}
		})
	}
}

func TestAnonymousRole(t *testing.T) {
	b := newBroker(t, nil, func(c *qpulsar.Config) {
		c.Authenticator = tokenProviders(t)
		c.AnonymousRole = "anonymous"
		c.Authorizer = grants{"anonymous": {"public/default": {qpulsar.ActionProduce}}}
	})
	r := b.dial()
	if f := r.connectWith("", nil, false); f.Cmd.GetType() != pb.BaseCommand_CONNECTED {
		t.Fatalf("got %v, want CONNECTED as the anonymous role", f.Cmd)
	}
	if f := r.createProducer("persistent://public/default/t", "", pb.ProducerAccessMode_Shared, 1); f.Cmd.GetType() != pb.BaseCommand_PRODUCER_SUCCESS {
		t.Fatalf("anonymous producer: got %v", f.Cmd)
	}
	r.isError(r.createProducer("persistent://private/auth/t", "", pb.ProducerAccessMode_Shared, 2), pb.ServerError_AuthorizationError, 2)
	// Bad credentials are refused, never demoted to the anonymous role.
	r2 := b.dial()
	r2.expectRefused(r2.connectWith("token", []byte("garbage"), false))
}

func TestAuthorization(t *testing.T) {
	backend := &pulsartest.Backend{}
	secretTopic := "persistent://other/secret/payroll-2026"
	backend.CreateTopic(secretTopic)
	b := newBroker(t, backend, func(c *qpulsar.Config) {
		c.Authenticator = tokenProviders(t)
		c.Authorizer = grants{
			"writer": {"acme/app": {qpulsar.ActionProduce}},
			"reader": {"acme/app": {qpulsar.ActionConsume}},
		}
	})
	writer := b.dial()
	if f := writer.connectWith("token", []byte(mustToken(t, tokenSecret, "writer", time.Time{})), false); f.Cmd.GetType() != pb.BaseCommand_CONNECTED {
		t.Fatalf("got %v", f.Cmd)
	}
	topic := "persistent://acme/app/orders"
	if f := writer.createProducer(topic, "", pb.ProducerAccessMode_Shared, 1); f.Cmd.GetType() != pb.BaseCommand_PRODUCER_SUCCESS {
		t.Fatalf("producer with produce permission: got %v", f.Cmd)
	}
	subscribe := func(r *rawConn, topic string, id uint64) *qpulsar.Frame {
		r.send(&pb.BaseCommand{Type: pb.BaseCommand_SUBSCRIBE.Enum(), Subscribe: &pb.CommandSubscribe{
			Topic: proto.String(topic), Subscription: proto.String("s"), SubType: pb.CommandSubscribe_Shared.Enum(),
			ConsumerId: proto.Uint64(id), RequestId: proto.Uint64(id),
		}})
		return r.read()
	}
	// A role without consume permission subscribing.
	writer.isError(subscribe(writer, topic, 2), pb.ServerError_AuthorizationError, 2)

	reader := b.dial()
	if f := reader.connectWith("token", []byte(mustToken(t, tokenSecret, "reader", time.Time{})), false); f.Cmd.GetType() != pb.BaseCommand_CONNECTED {
		t.Fatalf("got %v", f.Cmd)
	}
	if f := subscribe(reader, topic, 1); f.Cmd.GetType() != pb.BaseCommand_SUCCESS {
		t.Fatalf("subscribe with consume permission: got %v", f.Cmd)
	}
	reader.isError(reader.createProducer(topic, "", pb.ProducerAccessMode_Shared, 3), pb.ServerError_AuthorizationError, 3)

	// Another tenant's namespace: refused, and the answers name no topic of
	// it but the one asked for.
	leaks := func(what, msg string) {
		t.Helper()
		if strings.Contains(msg, "payroll") {
			t.Fatalf("%s names another tenant's topic: %q", what, msg)
		}
	}
	reader.send(&pb.BaseCommand{Type: pb.BaseCommand_LOOKUP.Enum(), LookupTopic: &pb.CommandLookupTopic{
		Topic: proto.String("persistent://other/secret/x"), RequestId: proto.Uint64(10)}})
	f := reader.read()
	if l := f.Cmd.GetLookupTopicResponse(); l.GetResponse() != pb.CommandLookupTopicResponse_Failed || l.GetError() != pb.ServerError_AuthorizationError {
		t.Fatalf("lookup in another tenant: got %v", f.Cmd)
	}
	leaks("lookup", f.Cmd.String())
	reader.send(&pb.BaseCommand{Type: pb.BaseCommand_PARTITIONED_METADATA.Enum(), PartitionMetadata: &pb.CommandPartitionedTopicMetadata{
		Topic: proto.String("persistent://other/secret/x"), RequestId: proto.Uint64(11)}})
	f = reader.read()
	if m := f.Cmd.GetPartitionMetadataResponse(); m.GetResponse() != pb.CommandPartitionedTopicMetadataResponse_Failed || m.GetError() != pb.ServerError_AuthorizationError {
		t.Fatalf("partitioned metadata in another tenant: got %v", f.Cmd)
	}
	reader.send(&pb.BaseCommand{Type: pb.BaseCommand_GET_TOPICS_OF_NAMESPACE.Enum(), GetTopicsOfNamespace: &pb.CommandGetTopicsOfNamespace{
		Namespace: proto.String("other/secret"), RequestId: proto.Uint64(12)}})
	f = reader.read()
	reader.isError(f, pb.ServerError_AuthorizationError, 12)
	leaks("topics of namespace", f.Cmd.String())
	reader.isError(subscribe(reader, secretTopic, 13), pb.ServerError_AuthorizationError, 13)
	// The lookup a role may make still works.
	reader.send(&pb.BaseCommand{Type: pb.BaseCommand_LOOKUP.Enum(), LookupTopic: &pb.CommandLookupTopic{
		Topic: proto.String(topic), RequestId: proto.Uint64(14)}})
	if l := reader.read().Cmd.GetLookupTopicResponse(); l.GetResponse() != pb.CommandLookupTopicResponse_Connect {
		t.Fatalf("lookup with consume permission: got %v", l)
	}
}

// tlsBroker is a broker listening with TLS: the server certificate from a
// test CA, client certificates verified when given (Pulsar's default,
// tlsRequireTrustedClientCertOnConnect=false).
func tlsBroker(t *testing.T) (addr string, pki string) {
	t.Helper()
	pki = t.TempDir()
	if err := tlsconf.MakeTestPKI(pki, []string{"127.0.0.1"}, "admin", time.Hour); err != nil {
		t.Fatal(err)
	}
	cfg, err := tlsconf.Server(tlsconf.Files{Cert: filepath.Join(pki, "server.pem"), Key: filepath.Join(pki, "server-key.pem"), ClientCA: filepath.Join(pki, "ca.pem")})
	if err != nil {
		t.Fatal(err)
	}
	cfg.ClientAuth = tls.VerifyClientCertIfGiven
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	server, err := qpulsar.New(qpulsar.Config{Backend: &pulsartest.Backend{}, Logger: testLogger(t),
		AdvertisedURL: "pulsar://127.0.0.1:1", AdvertisedTLSURL: "pulsar+ssl://" + ln.Addr().String(),
		Authenticator: tokenProviders(t)})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		_ = server.Serve(tls.NewListener(ln, cfg))
	}()
	t.Cleanup(func() {
		server.Close()
		wg.Wait()
	})
	return ln.Addr().String(), pki
}

func dialTLS(t *testing.T, addr string, cfg *tls.Config) (*rawConn, error) {
	t.Helper()
	nc, err := tls.DialWithDialer(&net.Dialer{Timeout: 10 * time.Second}, "tcp", addr, cfg)
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() { nc.Close() })
	return &rawConn{t: t, nc: nc, br: bufio.NewReader(nc)}, nil
}

func TestTLSListener(t *testing.T) {
	addr, pki := tlsBroker(t)
	caPool, err := tlsconf.Pool(filepath.Join(pki, "ca.pem"))
	if err != nil {
		t.Fatal(err)
	}
	clientCert, err := tls.LoadX509KeyPair(filepath.Join(pki, "client.pem"), filepath.Join(pki, "client-key.pem"))
	if err != nil {
		t.Fatal(err)
	}

	// A client certificate of the CA: the "tls" method's role is its CN, and
	// lookups name the TLS URL.
	r, err := dialTLS(t, addr, &tls.Config{RootCAs: caPool, Certificates: []tls.Certificate{clientCert}})
	if err != nil {
		t.Fatal(err)
	}
	if f := r.connectWith("tls", nil, false); f.Cmd.GetType() != pb.BaseCommand_CONNECTED {
		t.Fatalf("tls authentication: got %v", f.Cmd)
	}
	r.send(&pb.BaseCommand{Type: pb.BaseCommand_LOOKUP.Enum(), LookupTopic: &pb.CommandLookupTopic{Topic: proto.String("t"), RequestId: proto.Uint64(1)}})
	if l := r.read().Cmd.GetLookupTopicResponse(); l.GetBrokerServiceUrlTls() != "pulsar+ssl://"+addr || l.GetBrokerServiceUrl() != "pulsar://127.0.0.1:1" {
		t.Fatalf("lookup: got %v, want both URLs", l)
	}

	// No client certificate: the TLS connection is fine, "tls"
	// authentication is not; a token is.
	r, err = dialTLS(t, addr, &tls.Config{RootCAs: caPool})
	if err != nil {
		t.Fatal(err)
	}
	r.expectRefused(r.connectWith("tls", nil, false))
	r, err = dialTLS(t, addr, &tls.Config{RootCAs: caPool})
	if err != nil {
		t.Fatal(err)
	}
	if f := r.connectWith("token", []byte(mustToken(t, tokenSecret, "alice", time.Time{})), false); f.Cmd.GetType() != pb.BaseCommand_CONNECTED {
		t.Fatalf("token over TLS: got %v", f.Cmd)
	}

	// A client certificate from another CA: the handshake fails.
	other := t.TempDir()
	if err := tlsconf.MakeTestPKI(other, []string{"127.0.0.1"}, "admin", time.Hour); err != nil {
		t.Fatal(err)
	}
	foreign, err := tls.LoadX509KeyPair(filepath.Join(other, "client.pem"), filepath.Join(other, "client-key.pem"))
	if err != nil {
		t.Fatal(err)
	}
	if r, err := dialTLS(t, addr, &tls.Config{RootCAs: caPool, Certificates: []tls.Certificate{foreign}}); err == nil {
		// TLS 1.3: the client learns of the refusal on its first read.
		r.send(&pb.BaseCommand{Type: pb.BaseCommand_CONNECT.Enum(), Connect: &pb.CommandConnect{
			ClientVersion: proto.String("raw"), ProtocolVersion: proto.Int32(20), AuthMethodName: proto.String("tls")}})
		if f, err := r.readErr(); err == nil {
			t.Fatalf("a certificate of another CA: got %v, want the handshake refused", f.Cmd)
		}
	}
	// An expired client certificate of the right CA: refused too.
	expired := expiredClientCert(t, pki)
	if r, err := dialTLS(t, addr, &tls.Config{RootCAs: caPool, Certificates: []tls.Certificate{expired}}); err == nil {
		r.send(&pb.BaseCommand{Type: pb.BaseCommand_CONNECT.Enum(), Connect: &pb.CommandConnect{
			ClientVersion: proto.String("raw"), ProtocolVersion: proto.Int32(20), AuthMethodName: proto.String("tls")}})
		if f, err := r.readErr(); err == nil {
			t.Fatalf("an expired certificate: got %v, want the handshake refused", f.Cmd)
		}
	}
	// A client that does not trust the broker's CA refuses it.
	if _, err := dialTLS(t, addr, &tls.Config{RootCAs: x509.NewCertPool()}); err == nil {
		t.Fatal("a client without the broker's CA connected")
	}
}

// expiredClientCert is a client certificate for "admin", signed by the CA
// of pki (tlsconf.MakeTestPKI's files), that expired an hour ago.
func expiredClientCert(t *testing.T, pki string) tls.Certificate {
	t.Helper()
	c, err := tlsconf.ExpiredTestClientCert(pki, "admin")
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestTokenRefresh(t *testing.T) {
	b := newBroker(t, nil, func(c *qpulsar.Config) {
		c.Authenticator = tokenProviders(t)
		c.KeepAliveInterval = 100 * time.Millisecond
	})
	// JWT times are whole seconds: one that expires within two.
	expiring := func(role string) string {
		return mustToken(t, tokenSecret, role, time.Now().Add(time.Second).Truncate(time.Second).Add(time.Second))
	}
	// readSkippingPings answers the broker's keep-alive pings and returns
	// the first other frame.
	readSkippingPings := func(r *rawConn) (*qpulsar.Frame, error) {
		for {
			f, err := r.readErr()
			if err != nil || f.Cmd.GetType() != pb.BaseCommand_PING {
				return f, err
			}
			r.send(&pb.BaseCommand{Type: pb.BaseCommand_PONG.Enum(), Pong: &pb.CommandPong{}})
		}
	}

	// Three clients whose tokens expire at once, each on its own
	// goroutine (a client must answer the broker's pings).
	connect := func(t *testing.T, refresh bool) *rawConn {
		r := b.dial()
		r.t = t
		if f := r.connectWith("token", []byte(expiring("alice")), refresh); f.Cmd.GetType() != pb.BaseCommand_CONNECTED {
			t.Fatalf("got %v", f.Cmd)
		}
		return r
	}
	t.Run("refreshed", func(t *testing.T) {
		t.Parallel()
		// Challenged once its token expires, the client answers with a
		// fresh one and stays connected.
		r := connect(t, true)
		f, err := readSkippingPings(r)
		if err != nil || f.Cmd.GetType() != pb.BaseCommand_AUTH_CHALLENGE || f.Cmd.GetAuthChallenge().GetChallenge().GetAuthMethodName() != "token" {
			t.Fatalf("got %v, %v; want AUTH_CHALLENGE", f, err)
		}
		fresh := mustToken(t, tokenSecret, "alice", time.Now().Add(time.Hour))
		r.send(&pb.BaseCommand{Type: pb.BaseCommand_AUTH_RESPONSE.Enum(), AuthResponse: &pb.CommandAuthResponse{
			Response: &pb.AuthData{AuthMethodName: proto.String("token"), AuthData: []byte(fresh)}}})
		// Still served several keep-alive intervals later.
		deadline := time.Now().Add(5 * 100 * time.Millisecond)
		for time.Now().Before(deadline) {
			r.send(&pb.BaseCommand{Type: pb.BaseCommand_LOOKUP.Enum(), LookupTopic: &pb.CommandLookupTopic{Topic: proto.String("t"), RequestId: proto.Uint64(1)}})
			if f, err := readSkippingPings(r); err != nil || f.Cmd.GetType() != pb.BaseCommand_LOOKUP_RESPONSE {
				t.Fatalf("after the refresh: got %v, %v", f, err)
			}
		}
	})
	t.Run("another role", func(t *testing.T) {
		t.Parallel()
		// A refresh naming another role closes the connection.
		r := connect(t, true)
		if f, err := readSkippingPings(r); err != nil || f.Cmd.GetType() != pb.BaseCommand_AUTH_CHALLENGE {
			t.Fatalf("got %v, %v; want AUTH_CHALLENGE", f, err)
		}
		r.send(&pb.BaseCommand{Type: pb.BaseCommand_AUTH_RESPONSE.Enum(), AuthResponse: &pb.CommandAuthResponse{
			Response: &pb.AuthData{AuthMethodName: proto.String("token"), AuthData: []byte(mustToken(t, tokenSecret, "admin", time.Time{}))}}})
		if f, err := readSkippingPings(r); err != nil || f.Cmd.GetError().GetError() != pb.ServerError_AuthenticationError {
			t.Fatalf("got %v, %v; want ERROR AuthenticationError", f, err)
		}
		r.expectClosed()
	})
	t.Run("no refresh", func(t *testing.T) {
		t.Parallel()
		// A client that cannot refresh is disconnected when its token
		// expires.
		r := connect(t, false)
		for {
			f, err := readSkippingPings(r)
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				t.Fatal("still connected long after the token expired")
			}
			if err != nil {
				break
			}
			if f.Cmd.GetType() == pb.BaseCommand_AUTH_CHALLENGE {
				t.Fatal("challenged a client that does not support refresh")
			}
		}
	})
}
