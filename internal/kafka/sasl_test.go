package kafka_test

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"net"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"quire/internal/auth"
	"quire/internal/kafka"
	"quire/internal/meta"
	"quire/internal/testutil"
	"quire/internal/tlsconf"
)

// saslSetup is a credential store with alice (a super user) and bob, and
// a clock tests move forward.
type saslSetup struct {
	creds  *auth.Credentials
	offset atomic.Int64 // added to the wall clock, in nanoseconds
}

func newSASLSetup(t testing.TB) *saslSetup {
	t.Helper()
	srv := meta.NewMemServer(meta.MemConfig{})
	store := srv.NewClient()
	t.Cleanup(func() { store.Close() })
	s := &saslSetup{creds: auth.NewCredentials(store)}
	for user, password := range map[string]string{"alice": "alice-secret", "bob": "bob-secret"} {
		if _, err := s.creds.AddIfAbsent(context.Background(), user, password); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

func (s *saslSetup) now() time.Time          { return time.Now().Add(time.Duration(s.offset.Load())) }
func (s *saslSetup) advance(d time.Duration) { s.offset.Add(int64(d)) }

func (s *saslSetup) security(tweak ...func(*kafka.Security)) kafka.Security {
	sec := kafka.Security{
		Mechanisms:                auth.Mechanisms,
		Credentials:               s.creds,
		SuperUsers:                []auth.Principal{auth.User("alice")},
		FailedAuthenticationDelay: -1, // tests need not wait
		Now:                       s.now,
	}
	for _, f := range tweak {
		f(&sec)
	}
	return sec
}

// saslCluster serves on a listener with sec, over TLS when tlsConfig is set.
func saslCluster(t *testing.T, sec kafka.Security, tlsConfig *tls.Config) *cluster {
	return newClusterOn(t, func(ln net.Listener) net.Listener {
		if tlsConfig != nil {
			ln = tls.NewListener(ln, tlsConfig)
		}
		return &kafka.Listener{Listener: ln, Security: sec}
	})
}

func advertised(t *testing.T, r *rawConn) []int16 {
	t.Helper()
	resp := r.request(kmsg.NewPtrApiVersionsRequest()).(*kmsg.ApiVersionsResponse)
	var keys []int16
	for _, k := range resp.ApiKeys {
		keys = append(keys, k.ApiKey)
	}
	return keys
}

func TestSASLAdvertisedOnlyOnSASLListeners(t *testing.T) {
	s := newSASLSetup(t)
	saslKeys := []int16{int16(kmsg.SASLHandshake), int16(kmsg.SASLAuthenticate)}
	credKeys := []int16{int16(kmsg.DescribeUserSCRAMCredentials), int16(kmsg.AlterUserSCRAMCredentials)}
	for _, tc := range []struct {
		name       string
		c          *cluster
		sasl, cred bool
	}{
		{"plain listener", newCluster(t), false, false},
		{"credentials without SASL", saslCluster(t, kafka.Security{Credentials: s.creds}, nil), false, true},
		{"SASL", saslCluster(t, s.security(), nil), true, true},
	} {
		keys := advertised(t, tc.c.raw())
		for _, k := range saslKeys {
			if slices.Contains(keys, k) != tc.sasl {
				t.Errorf("%s: key %d advertised %v, want %v", tc.name, k, !tc.sasl, tc.sasl)
			}
		}
		for _, k := range credKeys {
			if slices.Contains(keys, k) != tc.cred {
				t.Errorf("%s: key %d advertised %v, want %v", tc.name, k, !tc.cred, tc.cred)
			}
		}
	}
}

func handshake(mechanism string, version int16) *kmsg.SASLHandshakeRequest {
	req := kmsg.NewPtrSASLHandshakeRequest()
	req.Version, req.Mechanism = version, mechanism
	return req
}

func authenticate(token string, version int16) *kmsg.SASLAuthenticateRequest {
	req := kmsg.NewPtrSASLAuthenticateRequest()
	req.Version, req.SASLAuthBytes = version, []byte(token)
	return req
}

func metadata() *kmsg.MetadataRequest {
	req := kmsg.NewPtrMetadataRequest()
	req.Version = 12
	return req
}

// login authenticates r with PLAIN through SaslAuthenticate v2 and returns
// the answer.
func login(t *testing.T, r *rawConn, user, password string) *kmsg.SASLAuthenticateResponse {
	t.Helper()
	if resp := r.request(handshake(auth.MechanismPlain, 1)).(*kmsg.SASLHandshakeResponse); resp.ErrorCode != 0 {
		t.Fatalf("handshake: %v", kerr.ErrorForCode(resp.ErrorCode))
	}
	return r.request(authenticate("\x00"+user+"\x00"+password, 2)).(*kmsg.SASLAuthenticateResponse)
}

// noError stands for error code 0 in expectCode.
var noError = &kerr.Error{Message: "NONE", Code: 0}

func expectCode(t *testing.T, what string, got int16, want *kerr.Error) {
	t.Helper()
	if got != want.Code {
		t.Fatalf("%s: %v, want %v", what, kerr.ErrorForCode(got), want)
	}
}

// TestSASLHandshakeStates walks Kafka's SaslServerAuthenticator states by
// hand: what is answered, what closes the connection.
func TestSASLHandshakeStates(t *testing.T) {
	s := newSASLSetup(t)
	c := saslCluster(t, s.security(func(sec *kafka.Security) { sec.MaxReceiveBytes = 4096 }), nil)
	for _, tc := range []struct {
		name string
		run  func(t *testing.T, r *rawConn)
	}{
		{"a request before the handshake closes", func(t *testing.T, r *rawConn) {
			r.send(metadata())
			r.expectClosed()
		}},
		{"ApiVersions, then anything but the handshake closes", func(t *testing.T, r *rawConn) {
			advertised(t, r)
			r.send(metadata())
			r.expectClosed()
		}},
		{"a second ApiVersions before the handshake closes", func(t *testing.T, r *rawConn) {
			advertised(t, r)
			r.send(kmsg.NewPtrApiVersionsRequest())
			r.expectClosed()
		}},
		{"an unknown mechanism is answered, then closes", func(t *testing.T, r *rawConn) {
			resp := r.request(handshake("GSSAPI", 1)).(*kmsg.SASLHandshakeResponse)
			expectCode(t, "handshake", resp.ErrorCode, kerr.UnsupportedSaslMechanism)
			if !slices.Equal(resp.SupportedMechanisms, auth.Mechanisms) {
				t.Fatalf("mechanisms %v", resp.SupportedMechanisms)
			}
			r.expectClosed()
		}},
		{"after the handshake only SaslAuthenticate", func(t *testing.T, r *rawConn) {
			r.request(handshake(auth.MechanismPlain, 1))
			r.send(metadata())
			r.expectClosed()
		}},
		{"ApiVersions during authentication: ILLEGAL_SASL_STATE, then closed", func(t *testing.T, r *rawConn) {
			r.request(handshake(auth.MechanismPlain, 1))
			resp := r.request(kmsg.NewPtrApiVersionsRequest()).(*kmsg.ApiVersionsResponse)
			expectCode(t, "ApiVersions", resp.ErrorCode, kerr.IllegalSaslState)
			r.expectClosed()
		}},
		{"wrong password: SASL_AUTHENTICATION_FAILED with Kafka's message, then closed", func(t *testing.T, r *rawConn) {
			resp := login(t, r, "alice", "guess")
			expectCode(t, "authenticate", resp.ErrorCode, kerr.SaslAuthenticationFailed)
			if resp.ErrorMessage == nil || *resp.ErrorMessage != "Authentication failed: Invalid username or password" {
				t.Fatalf("message %v", resp.ErrorMessage)
			}
			r.expectClosed()
		}},
		{"unknown user: the same answer", func(t *testing.T, r *rawConn) {
			resp := login(t, r, "mallory", "guess")
			expectCode(t, "authenticate", resp.ErrorCode, kerr.SaslAuthenticationFailed)
			r.expectClosed()
		}},
		{"authenticated: requests served, SASL requests refused", func(t *testing.T, r *rawConn) {
			resp := login(t, r, "alice", "alice-secret")
			expectCode(t, "authenticate", resp.ErrorCode, noError)
			if resp.SessionLifetimeMillis != 0 {
				t.Fatalf("session lifetime %d without one configured", resp.SessionLifetimeMillis)
			}
			r.request(metadata())
			again := r.request(authenticate("\x00alice\x00alice-secret", 2)).(*kmsg.SASLAuthenticateResponse)
			expectCode(t, "second SaslAuthenticate", again.ErrorCode, kerr.IllegalSaslState)
			hs := r.request(handshake(auth.MechanismPlain, 1)).(*kmsg.SASLHandshakeResponse)
			expectCode(t, "handshake without re-authentication", hs.ErrorCode, kerr.IllegalSaslState)
			advertised(t, r)
			r.request(metadata()) // still open
		}},
		{"v0 handshake: raw tokens", func(t *testing.T, r *rawConn) {
			expectCode(t, "handshake", r.request(handshake(auth.MechanismPlain, 0)).(*kmsg.SASLHandshakeResponse).ErrorCode, noError)
			r.sendRaw([]byte("\x00alice\x00alice-secret"))
			if token, err := r.readFrame(); err != nil || len(token) != 0 {
				t.Fatalf("raw answer %q, %v; want an empty token", token, err)
			}
			r.request(metadata())
		}},
		{"v0 handshake: a wrong raw token closes", func(t *testing.T, r *rawConn) {
			r.request(handshake(auth.MechanismPlain, 0))
			r.sendRaw([]byte("\x00alice\x00guess"))
			r.expectClosed()
		}},
		{"a frame above the pre-authentication bound closes", func(t *testing.T, r *rawConn) {
			r.sendRaw(make([]byte, 8192))
			r.expectClosed()
		}},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.run(t, c.raw()) })
	}
}

// sendRaw writes a size-prefixed frame with no request header.
func (r *rawConn) sendRaw(payload []byte) {
	r.t.Helper()
	if _, err := r.nc.Write(append(binary.BigEndian.AppendUint32(nil, uint32(len(payload))), payload...)); err != nil {
		r.t.Fatalf("write: %v", err)
	}
}

// TestSASLReauthentication: KIP-368 on a clock the test moves.
func TestSASLReauthentication(t *testing.T) {
	s := newSASLSetup(t)
	const lifetime = 10 * time.Minute
	c := saslCluster(t, s.security(func(sec *kafka.Security) { sec.SessionLifetime = lifetime }), nil)
	reauth := func(t *testing.T, r *rawConn, mechanism, user string) *kmsg.SASLAuthenticateResponse {
		t.Helper()
		expectCode(t, "re-authentication handshake", r.request(handshake(mechanism, 1)).(*kmsg.SASLHandshakeResponse).ErrorCode, noError)
		return r.request(authenticate("\x00"+user+"\x00"+user+"-secret", 2)).(*kmsg.SASLAuthenticateResponse)
	}

	t.Run("expired without re-authentication", func(t *testing.T) {
		r := c.raw()
		resp := login(t, r, "alice", "alice-secret")
		if resp.SessionLifetimeMillis != lifetime.Milliseconds() {
			t.Fatalf("session_lifetime_ms %d, want %d", resp.SessionLifetimeMillis, lifetime.Milliseconds())
		}
		r.request(metadata())
		s.advance(lifetime + time.Second)
		r.send(metadata())
		r.expectClosed()
	})
	t.Run("v0 SaslAuthenticate gets no lifetime but still expires", func(t *testing.T) {
		r := c.raw()
		r.request(handshake(auth.MechanismPlain, 1))
		resp := r.request(authenticate("\x00alice\x00alice-secret", 0)).(*kmsg.SASLAuthenticateResponse)
		expectCode(t, "authenticate", resp.ErrorCode, noError)
		s.advance(lifetime)
		r.send(metadata())
		r.expectClosed()
	})
	t.Run("re-authenticated sessions go on", func(t *testing.T) {
		r := c.raw()
		login(t, r, "alice", "alice-secret")
		for range 3 {
			s.advance(lifetime - time.Minute)
			resp := reauth(t, r, auth.MechanismPlain, "alice")
			expectCode(t, "re-authenticate", resp.ErrorCode, noError)
			if resp.SessionLifetimeMillis != lifetime.Milliseconds() {
				t.Fatalf("session_lifetime_ms %d after re-authentication", resp.SessionLifetimeMillis)
			}
			r.request(metadata())
		}
		// Again within a second of the last: the handshake is refused.
		hs := r.request(handshake(auth.MechanismPlain, 1)).(*kmsg.SASLHandshakeResponse)
		expectCode(t, "handshake within a second", hs.ErrorCode, kerr.IllegalSaslState)
		r.request(metadata())
	})
	t.Run("another principal fails", func(t *testing.T) {
		r := c.raw()
		login(t, r, "alice", "alice-secret")
		resp := reauth(t, r, auth.MechanismPlain, "bob")
		expectCode(t, "re-authenticate as bob", resp.ErrorCode, kerr.SaslAuthenticationFailed)
		if resp.ErrorMessage == nil || !strings.Contains(*resp.ErrorMessage, "Cannot change principals") {
			t.Fatalf("message %v", resp.ErrorMessage)
		}
		r.expectClosed()
	})
	t.Run("another mechanism closes the connection", func(t *testing.T) {
		r := c.raw()
		login(t, r, "alice", "alice-secret")
		// Kafka accepts the handshake, then closes without answering the
		// SaslAuthenticate.
		expectCode(t, "handshake", r.request(handshake(auth.MechanismSCRAMSHA256, 1)).(*kmsg.SASLHandshakeResponse).ErrorCode, noError)
		r.send(authenticate("n,,n=alice,r=nonce", 2))
		r.expectClosed()
	})
}

func testTLS(t *testing.T) (server, client *tls.Config) {
	t.Helper()
	dir := t.TempDir()
	if err := tlsconf.MakeTestPKI(dir, []string{"127.0.0.1"}, "client", time.Hour); err != nil {
		t.Fatal(err)
	}
	server, err := tlsconf.Server(tlsconf.Files{Cert: filepath.Join(dir, "server.pem"), Key: filepath.Join(dir, "server-key.pem")})
	if err != nil {
		t.Fatal(err)
	}
	pool, err := tlsconf.Pool(filepath.Join(dir, "ca.pem"))
	if err != nil {
		t.Fatal(err)
	}
	return server, &tls.Config{RootCAs: pool}
}

// TestSASLClients: franz-go's PLAIN and SCRAM mechanisms produce and
// consume over SASL_PLAINTEXT and SASL_SSL (and PLAIN over a v0
// handshake); a wrong password is SASL_AUTHENTICATION_FAILED.
func TestSASLClients(t *testing.T) {
	s := newSASLSetup(t)
	serverTLS, clientTLS := testTLS(t)
	v0 := kversion.Stable()
	v0.SetMaxKeyVersion(int16(kmsg.SASLHandshake), 0)
	for _, listener := range []struct {
		name string
		tls  bool
	}{{"SASL_PLAINTEXT", false}, {"SASL_SSL", true}} {
		t.Run(listener.name, func(t *testing.T) {
			var c *cluster
			var dial []kgo.Opt
			if listener.tls {
				c = saslCluster(t, s.security(), serverTLS)
				dial = []kgo.Opt{kgo.DialTLSConfig(clientTLS.Clone())}
			} else {
				c = saslCluster(t, s.security(), nil)
			}
			for _, tc := range []struct {
				name  string
				mech  sasl.Mechanism
				extra []kgo.Opt
				ok    bool
			}{
				{"PLAIN", plain.Auth{User: "bob", Pass: "bob-secret"}.AsMechanism(), nil, true},
				{"PLAIN v0 handshake", plain.Auth{User: "bob", Pass: "bob-secret"}.AsMechanism(), []kgo.Opt{kgo.MaxVersions(v0)}, true},
				{"SCRAM-SHA-256", scram.Auth{User: "bob", Pass: "bob-secret"}.AsSha256Mechanism(), nil, true},
				{"SCRAM-SHA-512", scram.Auth{User: "bob", Pass: "bob-secret"}.AsSha512Mechanism(), nil, true},
				{"SCRAM-SHA-512 v0 handshake", scram.Auth{User: "bob", Pass: "bob-secret"}.AsSha512Mechanism(), []kgo.Opt{kgo.MaxVersions(v0)}, true},
				{"PLAIN wrong password", plain.Auth{User: "bob", Pass: "guess"}.AsMechanism(), nil, false},
				{"SCRAM-SHA-512 wrong password", scram.Auth{User: "bob", Pass: "guess"}.AsSha512Mechanism(), nil, false},
			} {
				t.Run(tc.name, func(t *testing.T) {
					ctx := testContext(t)
					topic := strings.NewReplacer(" ", "-").Replace(listener.name + "-" + tc.name)
					opts := append(append(slices.Clone(dial), kgo.SASL(tc.mech), kgo.RequestRetries(0)), tc.extra...)
					if !tc.ok {
						err := c.client(opts...).Ping(ctx)
						if !errors.Is(err, kerr.SaslAuthenticationFailed) {
							t.Fatalf("ping with a wrong password: %v", err)
						}
						return
					}
					cl := c.client(append(opts, kgo.DefaultProduceTopic(topic), kgo.AllowAutoTopicCreation(),
						kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))...)
					if err := cl.ProduceSync(ctx, &kgo.Record{Value: []byte(tc.name)}).FirstErr(); err != nil {
						t.Fatalf("produce: %v", err)
					}
					fetches := cl.PollRecords(ctx, 1)
					if errs := fetches.Errors(); len(errs) > 0 || fetches.NumRecords() != 1 {
						t.Fatalf("consume: %d records, %v", fetches.NumRecords(), errs)
					}
				})
			}
		})
	}
}

// authentications is quire_kafka_sasl_authentications_total of outcome.
func authentications(t *testing.T, c *cluster, outcome string) float64 {
	return counterSum(t, c, "quire_kafka_sasl_authentications_total", "outcome", outcome)
}

func closedConnections(t *testing.T, c *cluster, reason string) float64 {
	return counterSum(t, c, "quire_kafka_connections_closed_on_error_total", "reason", reason)
}

func counterSum(t *testing.T, c *cluster, name, labelName, value string) float64 {
	t.Helper()
	families, err := c.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			if label(m, labelName) == value {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return sum
}

// TestSASLReauthenticationWithClient: kgo re-authenticates within the
// session lifetime the broker gives it, on the same connection, while it
// keeps producing.
func TestSASLReauthenticationWithClient(t *testing.T) {
	s := newSASLSetup(t)
	c := saslCluster(t, s.security(func(sec *kafka.Security) {
		sec.SessionLifetime = 2 * time.Second
		sec.Now = nil // kgo re-authenticates on the wall clock
	}), nil)
	cl := c.client(kgo.SASL(scram.Auth{User: "bob", Pass: "bob-secret"}.AsSha256Mechanism()),
		kgo.DefaultProduceTopic("reauth"), kgo.AllowAutoTopicCreation())
	ctx := testContext(t)
	testutil.WaitFor(t, "kgo re-authenticated twice", func() bool {
		if err := cl.ProduceSync(ctx, &kgo.Record{Value: []byte("x")}).FirstErr(); err != nil {
			t.Fatalf("produce across re-authentications: %v", err)
		}
		return authentications(t, c, "reauthenticated") >= 2
	})
	if n := closedConnections(t, c, "sasl_session_expired"); n != 0 {
		t.Fatalf("%v connections closed as expired while the client re-authenticates", n)
	}
}

// TestSCRAMCredentialsAdmin: kadm (what kafka-configs does) adds, describes
// and deletes users; the new user logs in; only super users may do it.
func TestSCRAMCredentialsAdmin(t *testing.T) {
	s := newSASLSetup(t)
	c := saslCluster(t, s.security(), nil)
	ctx := testContext(t)
	aliceClient := c.client(kgo.SASL(scram.Auth{User: "alice", Pass: "alice-secret"}.AsSha512Mechanism()))
	admin := kadm.NewClient(aliceClient)

	altered, err := admin.AlterUserSCRAMs(ctx, nil, []kadm.UpsertSCRAM{
		{User: "carol", Mechanism: kadm.ScramSha512, Iterations: 8192, Password: "carol-secret"},
	})
	if err != nil || altered["carol"].Err != nil {
		t.Fatalf("add carol: %v, %v", altered, err)
	}
	// What kadm refuses to send, sent by hand: the broker checks too.
	req := kmsg.NewPtrAlterUserSCRAMCredentialsRequest()
	for _, u := range []struct {
		name       string
		mechanism  int8
		iterations int32
	}{{"dave", 1, 1000}, {"erin", 2, 20000}, {"", 1, 4096}, {"frank", 7, 4096}} {
		up := kmsg.NewAlterUserSCRAMCredentialsRequestUpsertion()
		up.Name, up.Mechanism, up.Iterations, up.Salt, up.SaltedPassword = u.name, u.mechanism, u.iterations, []byte("salt"), make([]byte, 32)
		req.Upsertions = append(req.Upsertions, up)
	}
	raw, err := req.RequestWith(ctx, aliceClient)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"dave": "Too few iterations", "erin": "Too many iterations", "": "Username must not be empty", "frank": "Unknown SCRAM mechanism"}
	for _, r := range raw.Results {
		if r.ErrorCode == 0 || r.ErrorMessage == nil || *r.ErrorMessage != want[r.User] {
			t.Errorf("alter %q: %v %v, want %q", r.User, kerr.ErrorForCode(r.ErrorCode), r.ErrorMessage, want[r.User])
		}
	}
	if len(raw.Results) != len(want) {
		t.Errorf("%d results, want %d", len(raw.Results), len(want))
	}
	described, err := admin.DescribeUserSCRAMs(ctx, "carol", "nobody")
	if err != nil {
		t.Fatal(err)
	}
	if d := described["carol"]; d.Err != nil || len(d.CredInfos) != 1 || d.CredInfos[0].Mechanism != kadm.ScramSha512 || d.CredInfos[0].Iterations != 8192 {
		t.Fatalf("carol: %+v", d)
	}
	if d := described["nobody"]; !errors.Is(d.Err, kerr.ResourceNotFound) {
		t.Fatalf("nobody: %+v", d)
	}
	all, err := admin.DescribeUserSCRAMs(ctx)
	if err != nil || len(all) != 3 {
		t.Fatalf("all users: %v, %v", all, err)
	}

	// carol logs in with the password kadm salted; she is no super user.
	carol := kadm.NewClient(c.client(kgo.SASL(scram.Auth{User: "carol", Pass: "carol-secret"}.AsSha512Mechanism())))
	if _, err := carol.DescribeUserSCRAMs(ctx); !errors.Is(err, kerr.ClusterAuthorizationFailed) {
		t.Fatalf("carol describes users: %v", err)
	}
	res, err := carol.AlterUserSCRAMs(ctx, []kadm.DeleteSCRAM{{User: "alice", Mechanism: kadm.ScramSha512}}, nil)
	if !errors.Is(err, kerr.ClusterAuthorizationFailed) && !errors.Is(res["alice"].Err, kerr.ClusterAuthorizationFailed) {
		t.Fatalf("carol deletes alice: %v, %v", res, err)
	}

	// The same user twice in one request; deleting what is not there.
	res, err = admin.AlterUserSCRAMs(ctx, []kadm.DeleteSCRAM{{User: "carol", Mechanism: kadm.ScramSha256}, {User: "bob", Mechanism: kadm.ScramSha256}},
		[]kadm.UpsertSCRAM{{User: "bob", Mechanism: kadm.ScramSha512, Iterations: 4096, Password: "y"}})
	if err != nil {
		t.Fatal(err)
	}
	if !errors.Is(res["carol"].Err, kerr.ResourceNotFound) || !errors.Is(res["bob"].Err, kerr.DuplicateResource) {
		t.Fatalf("carol %v, bob %v", res["carol"].Err, res["bob"].Err)
	}
	res, err = admin.AlterUserSCRAMs(ctx, []kadm.DeleteSCRAM{{User: "carol", Mechanism: kadm.ScramSha512}}, nil)
	if err != nil || res["carol"].Err != nil {
		t.Fatalf("delete carol: %v, %v", res, err)
	}
	bad := c.client(kgo.SASL(scram.Auth{User: "carol", Pass: "carol-secret"}.AsSha512Mechanism()), kgo.RequestRetries(0))
	if err := bad.Ping(ctx); err == nil {
		t.Fatal("carol logs in after her credential was deleted")
	}
}
