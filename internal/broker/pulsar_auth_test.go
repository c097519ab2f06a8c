package broker

// Pulsar authentication and authorization on a broker: the admin REST API
// (401 without or with bad credentials, 403 without permission, nothing of
// other tenants in the answers) and the binary protocol through the real Go
// client (super user, tenant admin, namespace permissions, revocation).

import (
	"crypto/tls"
	"encoding/base64"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	pulsarlog "github.com/apache/pulsar-client-go/pulsar/log"

	"quire/internal/auth"
	"quire/internal/testutil"
	"quire/internal/tlsconf"
)

var testTokenSecret = []byte("the broker's token secret, 32 B!")

func testToken(t *testing.T, secret []byte, role string, expiry time.Time) string {
	t.Helper()
	token, err := auth.CreateToken(secret, role, expiry)
	if err != nil {
		t.Fatal(err)
	}
	return token
}

// startSecureBroker starts a broker with token authentication and
// authorization, "admin" its super user, and no anonymous role.
func startSecureBroker(t *testing.T) (*Broker, restClient) {
	t.Helper()
	v, err := auth.NewSecretKeyValidator(testTokenSecret)
	if err != nil {
		t.Fatal(err)
	}
	c := newTestCluster(t)
	b, _ := c.startPulsarBroker(func(cfg *Config) {
		cfg.PulsarSecurity = PulsarSecurity{Authenticator: &auth.PulsarProviders{Tokens: v},
			Authorization: true, SuperUserRoles: []string{"admin"}}
	})
	return b, startAdmin(t, b)
}

// as is the REST client with role's token.
func (c restClient) as(t *testing.T, role string) restClient {
	c.token = testToken(t, testTokenSecret, role, time.Time{})
	return c
}

// tokenClient is a Pulsar client with token's credentials ("" for none).
// A refused client retries its connection until the operation times out,
// as with Apache Pulsar: opTimeout bounds that.
func tokenClient(t *testing.T, b *Broker, token string, opTimeout time.Duration) pulsar.Client {
	t.Helper()
	opts := pulsar.ClientOptions{URL: b.PulsarURL(), OperationTimeout: opTimeout, ConnectionTimeout: 10 * time.Second,
		Logger: pulsarlog.NewLoggerWithSlog(slog.New(slog.NewTextHandler(io.Discard, nil)))}
	if token != "" {
		opts.Authentication = pulsar.NewAuthenticationToken(token)
	}
	c, err := pulsar.NewClient(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

func TestPulsarAdminAuthentication(t *testing.T) {
	_, api := startSecureBroker(t)
	admin := api.as(t, "admin")
	admin.expect("PUT", "/admin/v2/tenants/acme", map[string]any{"adminRoles": []string{"acme-admin"}}, 204, nil)
	admin.expect("PUT", "/admin/v2/namespaces/acme/app", nil, 204, nil)
	admin.expect("PUT", "/admin/v2/tenants/other", map[string]any{"adminRoles": []string{"other-admin"}}, 204, nil)
	admin.expect("PUT", "/admin/v2/namespaces/other/secret", nil, 204, nil)
	admin.expect("PUT", "/admin/v2/persistent/other/secret/payroll-2026", nil, 204, nil)

	unsigned := func(header, claims string) string {
		enc := func(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }
		return enc(header) + "." + enc(claims) + "."
	}
	for _, tc := range []struct {
		name, token string
	}{
		{"no token", ""},
		{"forged: another key", testToken(t, []byte("somebody else's secret, 32 bytes"), "admin", time.Time{})},
		{"expired", testToken(t, testTokenSecret, "admin", time.Now().Add(-time.Minute))},
		{"alg none", unsigned(`{"alg":"none"}`, `{"sub":"admin"}`)},
		{"garbage", "not-a-token"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := api
			c.t, c.token = t, tc.token
			for _, path := range []string{"/admin/v2/tenants", "/admin/v2/namespaces/other/secret", "/admin/v2/persistent/other/secret"} {
				status, body := c.call("GET", path, nil)
				if status != http.StatusUnauthorized {
					t.Fatalf("GET %s: status %d (%s), want 401", path, status, body)
				}
				if strings.Contains(string(body), "payroll") || strings.Contains(string(body), "acme") {
					t.Fatalf("GET %s: the refusal names a topic or tenant: %s", path, body)
				}
			}
		})
	}
	// Basic credentials are not a bearer token.
	req, _ := http.NewRequest("GET", api.base+"/admin/v2/tenants", nil)
	req.SetBasicAuth("admin", "admin")
	if resp, err := api.http.Do(req); err != nil || resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("basic credentials: %v, %v; want 401", resp, err)
	} else {
		resp.Body.Close()
	}

	// A tenant admin administers its tenant, and only it; tenants and
	// namespaces it may not see answer 403 whether they exist or not.
	acme := api.as(t, "acme-admin")
	acme.expect("PUT", "/admin/v2/namespaces/acme/app2", nil, 204, nil)
	acme.expect("POST", "/admin/v2/namespaces/acme/app/retention", map[string]any{"retentionTimeInMinutes": 10, "retentionSizeInMB": 10}, 204, nil)
	for _, tc := range []struct{ method, path string }{
		{"GET", "/admin/v2/tenants"},
		{"PUT", "/admin/v2/tenants/acme2"},
		{"DELETE", "/admin/v2/tenants/other"},
		{"POST", "/admin/v2/tenants/acme"}, // even its own: a super user's
		{"GET", "/admin/v2/namespaces/other"},
		{"GET", "/admin/v2/namespaces/ghost"},
		{"GET", "/admin/v2/namespaces/other/secret"},
		{"GET", "/admin/v2/namespaces/other/ghost"},
		{"GET", "/admin/v2/persistent/other/secret"},
		{"GET", "/admin/v2/persistent/other/secret/payroll-2026/stats"},
		{"PUT", "/admin/v2/namespaces/other/new"},
		{"POST", "/admin/v2/namespaces/other/secret/permissions/acme-admin"},
	} {
		status, body := acme.call(tc.method, tc.path, []string{"produce"})
		if status != http.StatusForbidden {
			t.Fatalf("acme-admin %s %s: status %d (%s), want 403", tc.method, tc.path, status, body)
		}
		if strings.Contains(string(body), "payroll") {
			t.Fatalf("acme-admin %s %s: the refusal names another tenant's topic: %s", tc.method, tc.path, body)
		}
	}

	// Namespace permissions: granted, listed, enforced, revoked.
	acme.expect("POST", "/admin/v2/namespaces/acme/app/permissions/reader", []string{"consume"}, 204, nil)
	acme.expect("POST", "/admin/v2/namespaces/acme/app/permissions/writer", []string{"produce", "functions"}, 204, nil)
	acme.expect("POST", "/admin/v2/namespaces/acme/app/permissions/bad", []string{"fly"}, 412, nil)
	var perms map[string][]string
	acme.expect("GET", "/admin/v2/namespaces/acme/app/permissions", nil, 200, &perms)
	if len(perms) != 2 || strings.Join(perms["reader"], ",") != "consume" || strings.Join(perms["writer"], ",") != "functions,produce" {
		t.Fatalf("permissions: %v", perms)
	}
	if field(acme.object("/admin/v2/namespaces/acme/app"), "auth_policies", "namespace_auth", "reader") == nil {
		t.Fatal("the namespace policies do not show the grants")
	}
	reader, writer := api.as(t, "reader"), api.as(t, "writer")
	reader.expect("GET", "/admin/v2/persistent/acme/app", nil, 200, nil)                                       // lookup: produce or consume
	reader.expect("GET", "/admin/v2/namespaces/acme/app/permissions", nil, 403, nil)                           // tenant admin's
	reader.expect("PUT", "/admin/v2/persistent/acme/app/t", nil, 403, nil)                                     // topic creation: tenant admin's
	writer.expect("GET", "/admin/v2/persistent/acme/app/t/subscriptions", nil, 403, nil)                       // consume's
	writer.expect("GET", "/admin/v2/persistent/other/secret", nil, 403, nil)                                   // another tenant's
	acme.expect("DELETE", "/admin/v2/namespaces/acme/app/permissions/reader", nil, 204, nil)                   // revoked
	reader.expect("GET", "/admin/v2/persistent/acme/app", nil, 403, nil)                                       // and refused
	admin.expect("POST", "/admin/v2/tenants/acme", map[string]any{"adminRoles": []string{"reader"}}, 204, nil) // made tenant admin
	reader.expect("GET", "/admin/v2/namespaces/acme/app/permissions", nil, 200, nil)
	acme.expect("GET", "/admin/v2/namespaces/acme", nil, 403, nil) // no longer one
}

func TestPulsarProtocolAuthorization(t *testing.T) {
	b, api := startSecureBroker(t)
	admin := api.as(t, "admin")
	admin.expect("PUT", "/admin/v2/tenants/acme", map[string]any{"adminRoles": []string{"acme-admin"}}, 204, nil)
	admin.expect("PUT", "/admin/v2/namespaces/acme/app", nil, 204, nil)
	admin.expect("POST", "/admin/v2/namespaces/acme/app/permissions/writer", []string{"produce"}, 204, nil)
	admin.expect("POST", "/admin/v2/namespaces/acme/app/permissions/reader", []string{"consume"}, 204, nil)
	topic := "persistent://acme/app/orders"

	// Refused at CONNECT: no credentials (no anonymous role), a forged
	// token, an expired one.
	for name, token := range map[string]string{
		"no token": "",
		"forged":   testToken(t, []byte("somebody else's secret, 32 bytes"), "writer", time.Time{}),
		"expired":  testToken(t, testTokenSecret, "writer", time.Now().Add(-time.Minute)),
	} {
		if p, err := tokenClient(t, b, token, 2*time.Second).CreateProducer(pulsar.ProducerOptions{Topic: topic}); err == nil {
			p.Close()
			t.Fatalf("%s: a producer was created", name)
		}
	}

	ctx := pulsarContext(t)
	writerClient := tokenClient(t, b, testToken(t, testTokenSecret, "writer", time.Time{}), pulsarTestTimeout)
	readerClient := tokenClient(t, b, testToken(t, testTokenSecret, "reader", time.Time{}), pulsarTestTimeout)
	// The reader subscribes first, so that it sees the message.
	cons, err := readerClient.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "s"})
	if err != nil {
		t.Fatalf("subscribe with consume permission: %v", err)
	}
	defer cons.Close()
	p, err := writerClient.CreateProducer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
	if err != nil {
		t.Fatalf("producer with produce permission: %v", err)
	}
	defer p.Close()
	if _, err := p.Send(ctx, &pulsar.ProducerMessage{Payload: []byte("order 1")}); err != nil {
		t.Fatal(err)
	}
	if msg := receiveOne(ctx, t, cons); string(msg.Payload()) != "order 1" {
		t.Fatalf("got %q", msg.Payload())
	}

	// A role without consume permission subscribing, without produce
	// permission producing, and anyone in a namespace it has no grant in:
	// AuthorizationError.
	for _, tc := range []struct {
		name string
		err  error
	}{
		{"writer subscribes", func() error {
			c, err := writerClient.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "w"})
			if err == nil {
				c.Close()
			}
			return err
		}()},
		{"reader produces", func() error {
			p, err := readerClient.CreateProducer(pulsar.ProducerOptions{Topic: topic})
			if err == nil {
				p.Close()
			}
			return err
		}()},
		{"writer produces elsewhere", func() error {
			p, err := writerClient.CreateProducer(pulsar.ProducerOptions{Topic: "persistent://public/default/x"})
			if err == nil {
				p.Close()
			}
			return err
		}()},
	} {
		if tc.err == nil || !strings.Contains(tc.err.Error(), "AuthorizationError") {
			t.Errorf("%s: %v, want AuthorizationError", tc.name, tc.err)
		}
	}

	// The tenant admin and the super user may do both.
	for _, role := range []string{"acme-admin", "admin"} {
		c := tokenClient(t, b, testToken(t, testTokenSecret, role, time.Time{}), pulsarTestTimeout)
		cons, err := c.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: role})
		if err != nil {
			t.Fatalf("%s subscribes: %v", role, err)
		}
		cons.Close()
		p, err := c.CreateProducer(pulsar.ProducerOptions{Topic: topic})
		if err != nil {
			t.Fatalf("%s produces: %v", role, err)
		}
		p.Close()
	}

	// Revoked: new producers are refused.
	admin.expect("DELETE", "/admin/v2/namespaces/acme/app/permissions/writer", nil, 204, nil)
	if p, err := writerClient.CreateProducer(pulsar.ProducerOptions{Topic: topic}); err == nil || !strings.Contains(err.Error(), "AuthorizationError") {
		if p != nil {
			p.Close()
		}
		t.Fatalf("producer after the revocation: %v, want AuthorizationError", err)
	}
}

// Two brokers with pulsar+ssl:// listeners: a lookup answered by one names
// the other's TLS URL, and a client of the TLS listener follows it with
// its client certificate (the "tls" provider: the role is the CN, a super
// user here).
func TestPulsarTLSLookupRedirects(t *testing.T) {
	pki := t.TempDir()
	if err := tlsconf.MakeTestPKI(pki, []string{"127.0.0.1"}, "admin", time.Hour); err != nil {
		t.Fatal(err)
	}
	serverTLS, err := tlsconf.Server(tlsconf.Files{Cert: filepath.Join(pki, "server.pem"), Key: filepath.Join(pki, "server-key.pem"),
		ClientCA: filepath.Join(pki, "ca.pem")})
	if err != nil {
		t.Fatal(err)
	}
	serverTLS.ClientAuth = tls.VerifyClientCertIfGiven
	c := newTestCluster(t)
	secure := func(id int32) func(*Config) {
		return func(cfg *Config) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			cfg.ID, cfg.HandoffAfter = id, 300*time.Millisecond
			cfg.PulsarTLSListener = tls.NewListener(ln, serverTLS)
			cfg.PulsarSecurity = PulsarSecurity{Authenticator: &auth.PulsarProviders{TLS: true}, Authorization: true, SuperUserRoles: []string{"admin"}}
		}
	}
	b1, _ := c.startPulsarBroker(secure(1))
	b2, _ := c.startPulsarBroker(secure(2))
	testutil.WaitFor(t, "broker 2 to own a bundle", func() bool { return len(b2.cluster.OwnedBundles()) > 0 })
	var topic string
	for i := 0; topic == ""; i++ {
		if i == 1000 {
			t.Fatal("broker 2 owns none of 1000 topics' bundles")
		}
		if name := fmt.Sprintf("persistent://public/default/tls-%d", i); b2.cluster.Owns(name) {
			topic = name
		}
	}
	ctx := pulsarContext(t)
	res, err := b1.pulsar.Load().Lookup(ctx, topic)
	if err != nil || res.OwnerURL != b2.PulsarURL() || res.OwnerTLSURL != b2.pulsar.Load().tlsURL || res.OwnerTLSURL == "" {
		t.Fatalf("lookup on broker 1: %+v, %v; want broker 2's URLs %s and %s", res, err, b2.PulsarURL(), b2.pulsar.Load().tlsURL)
	}
	client, err := pulsar.NewClient(pulsar.ClientOptions{URL: b1.pulsar.Load().tlsURL, OperationTimeout: pulsarTestTimeout,
		TLSTrustCertsFilePath: filepath.Join(pki, "ca.pem"),
		Authentication:        pulsar.NewAuthenticationTLS(filepath.Join(pki, "client.pem"), filepath.Join(pki, "client-key.pem")),
		Logger:                pulsarlog.NewLoggerWithSlog(slog.New(slog.NewTextHandler(io.Discard, nil)))})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	cons := newConsumer(t, client, pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "s"})
	p := newProducer(t, client, pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
	sendAll(ctx, t, p, 0, 3)
	for i := range 3 {
		if msg := receiveOne(ctx, t, cons); string(msg.Payload()) != strconv.Itoa(i) {
			t.Fatalf("message %d: got %q", i, msg.Payload())
		}
	}
	servedTopic(t, b2, topic)
}
