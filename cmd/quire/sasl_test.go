package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"quire/internal/tlsconf"
)

// TestKafkaSASLOverTLS: a standalone with SASL_SSL (SCRAM-SHA-512 and
// PLAIN over TLS), its admin user created from the environment. The admin
// adds a user as kafka-configs does (AlterUserScramCredentials); that user
// produces and consumes with SCRAM and with PLAIN; a wrong password, and a
// TLS client without SASL, get nothing through.
func TestKafkaSASLOverTLS(t *testing.T) {
	if testing.Short() {
		t.Skip("runs quire processes")
	}
	certs := t.TempDir()
	if out, err := runQuire(t, "certs", "--dir", certs, "--hosts", "127.0.0.1"); err != nil {
		t.Fatalf("quire certs: %v: %s", err, out)
	}
	t.Setenv(adminPasswordEnv, "admin-secret")
	httpAddr, kafkaAddr, metaAddr := freeAddr(t), freeAddr(t), freeAddr(t)
	p := startQuire(t, "standalone", "--data-dir", t.TempDir(), "--http-addr", httpAddr, "--kafka-addr", kafkaAddr,
		"--meta-client-addr", metaAddr, "--meta-peer-addr", freeAddr(t),
		"--bookie-addrs", strings.Join([]string{freeAddr(t), freeAddr(t), freeAddr(t)}, ","), "--pulsar-addr", freeAddr(t),
		"--kafka-tls-cert", filepath.Join(certs, "server.pem"), "--kafka-tls-key", filepath.Join(certs, "server-key.pem"),
		"--kafka-sasl-mechanisms", "SCRAM-SHA-512,PLAIN", "--kafka-sasl-admin-user", "admin")
	waitHTTP(t, p, "http://"+httpAddr+"/readyz", 60*time.Second)

	pool, err := tlsconf.Pool(filepath.Join(certs, "ca.pem"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	client := func(mech sasl.Mechanism, opts ...kgo.Opt) *kgo.Client {
		t.Helper()
		dialer := &tls.Dialer{NetDialer: &net.Dialer{Timeout: 5 * time.Second}, Config: &tls.Config{RootCAs: pool}}
		opts = append([]kgo.Opt{kgo.SeedBrokers(kafkaAddr), kgo.Dialer(dialer.DialContext)}, opts...)
		if mech != nil {
			opts = append(opts, kgo.SASL(mech))
		}
		cl, err := kgo.NewClient(opts...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(cl.Close)
		return cl
	}

	admin := kadm.NewClient(client(scram.Auth{User: "admin", Pass: "admin-secret"}.AsSha512Mechanism()))
	altered, err := admin.AlterUserSCRAMs(ctx, nil, []kadm.UpsertSCRAM{{User: "alice", Mechanism: kadm.ScramSha512, Iterations: 4096, Password: "alice-secret"}})
	if err != nil || altered["alice"].Err != nil {
		t.Fatalf("add alice: %v, %v", altered, err)
	}

	producer := client(scram.Auth{User: "alice", Pass: "alice-secret"}.AsSha512Mechanism(),
		kgo.DefaultProduceTopic("sasl"), kgo.AllowAutoTopicCreation())
	if err := producer.ProduceSync(ctx, &kgo.Record{Value: []byte("over SASL_SSL")}).FirstErr(); err != nil {
		t.Fatalf("produce as alice (SCRAM-SHA-512): %v", err)
	}
	consumer := client(plain.Auth{User: "alice", Pass: "alice-secret"}.AsMechanism(),
		kgo.ConsumeTopics("sasl"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	fetches := consumer.PollRecords(ctx, 1)
	if errs := fetches.Errors(); len(errs) > 0 || fetches.NumRecords() != 1 || string(fetches.Records()[0].Value) != "over SASL_SSL" {
		t.Fatalf("consume as alice (PLAIN): %d records, %v", fetches.NumRecords(), errs)
	}

	bctx, bcancel := context.WithTimeout(ctx, 10*time.Second)
	defer bcancel()
	if err := client(scram.Auth{User: "alice", Pass: "guess"}.AsSha512Mechanism(), kgo.RequestRetries(0)).Ping(bctx); !errors.Is(err, kerr.SaslAuthenticationFailed) {
		t.Errorf("wrong password: %v, want SASL_AUTHENTICATION_FAILED", err)
	}
	if err := client(nil, kgo.RequestRetries(0)).Ping(bctx); err == nil {
		t.Error("a client without SASL was answered")
	}
	// quire admin users writes the same user database through etcd: a user
	// set there logs in; the listing shows every user and no secret.
	t.Setenv(userPasswordEnv, "carol-secret")
	if out, err := runQuire(t, "admin", "users", "set", "carol", "--mechanism", "SCRAM-SHA-512", "--meta-endpoints", metaAddr); err != nil {
		t.Fatalf("admin users set: %v: %s", err, out)
	}
	if err := client(scram.Auth{User: "carol", Pass: "carol-secret"}.AsSha512Mechanism(), kgo.RequestRetries(0)).Ping(bctx); err != nil {
		t.Errorf("carol, set with quire admin users: %v", err)
	}
	out, err := runQuire(t, "admin", "users", "--meta-endpoints", metaAddr)
	if err != nil || !strings.Contains(out, "admin ") || !strings.Contains(out, "alice ") || !strings.Contains(out, "carol ") || strings.Contains(out, "secret") {
		t.Errorf("admin users: %v:\n%s", err, out)
	}

	// The admin's password came from the environment, never argv.
	if strings.Contains(strings.Join(p.cmd.Args, " "), "admin-secret") {
		t.Error("the admin password is on the command line")
	}
}

// TestKafkaListeners: one standalone, two Kafka listeners with different
// security (Kafka's listeners and listener.security.protocol.map): INSIDE
// plaintext, OUTSIDE SASL_SSL with SCRAM-SHA-512. A client inside produces
// without credentials; outside, the admin's SCRAM credential reads the same
// records over TLS, and a client without SASL gets nothing; Metadata
// through each listener names that listener's advertised endpoint.
func TestKafkaListeners(t *testing.T) {
	if testing.Short() {
		t.Skip("runs quire processes")
	}
	certs := t.TempDir()
	if out, err := runQuire(t, "certs", "--dir", certs, "--hosts", "127.0.0.1"); err != nil {
		t.Fatalf("quire certs: %v: %s", err, out)
	}
	t.Setenv(adminPasswordEnv, "admin-secret")
	httpAddr, inside, outside := freeAddr(t), freeAddr(t), freeAddr(t)
	p := startQuire(t, "standalone", "--data-dir", t.TempDir(), "--http-addr", httpAddr,
		"--kafka-listeners", "INSIDE://"+inside+",OUTSIDE://"+outside,
		"--kafka-listener-security-protocol-map", "INSIDE:PLAINTEXT,OUTSIDE:SASL_SSL",
		"--meta-client-addr", freeAddr(t), "--meta-peer-addr", freeAddr(t),
		"--bookie-addrs", strings.Join([]string{freeAddr(t), freeAddr(t), freeAddr(t)}, ","), "--pulsar-addr", "",
		"--kafka-tls-cert", filepath.Join(certs, "server.pem"), "--kafka-tls-key", filepath.Join(certs, "server-key.pem"),
		"--kafka-sasl-mechanisms", "SCRAM-SHA-512", "--kafka-sasl-admin-user", "admin")
	waitHTTP(t, p, "http://"+httpAddr+"/readyz", 60*time.Second)
	pool, err := tlsconf.Pool(filepath.Join(certs, "ca.pem"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	tlsDial := (&tls.Dialer{NetDialer: &net.Dialer{Timeout: 5 * time.Second}, Config: &tls.Config{RootCAs: pool}}).DialContext
	client := func(opts ...kgo.Opt) *kgo.Client {
		t.Helper()
		cl, err := kgo.NewClient(opts...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(cl.Close)
		return cl
	}
	const topic, n = "two-listeners", 100
	in := client(kgo.SeedBrokers(inside), kgo.DefaultProduceTopic(topic), kgo.AllowAutoTopicCreation())
	for i := range n {
		if err := in.ProduceSync(ctx, &kgo.Record{Value: fmt.Appendf(nil, "r%d", i)}).FirstErr(); err != nil {
			t.Fatalf("produce %d inside, without credentials: %v", i, err)
		}
	}
	out := client(kgo.SeedBrokers(outside), kgo.Dialer(tlsDial), kgo.SASL(scram.Auth{User: "admin", Pass: "admin-secret"}.AsSha512Mechanism()),
		kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	got := 0
	for got < n {
		fs := out.PollRecords(ctx, n)
		if errs := fs.Errors(); len(errs) > 0 {
			t.Fatalf("consume outside over SASL_SSL: %v", errs)
		}
		got += fs.NumRecords()
	}
	anonymous := client(kgo.SeedBrokers(outside), kgo.Dialer(tlsDial), kgo.RequestRetries(0))
	if err := anonymous.Ping(ctx); err == nil {
		t.Fatal("a TLS client without SASL was served on the SASL_SSL listener")
	}
	for _, tc := range []struct {
		name string
		cl   *kgo.Client
		want string
	}{{"INSIDE", in, inside}, {"OUTSIDE", out, outside}} {
		md, err := kadm.NewClient(tc.cl).BrokerMetadata(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(md.Brokers) != 1 || net.JoinHostPort(md.Brokers[0].Host, strconv.Itoa(int(md.Brokers[0].Port))) != tc.want {
			t.Fatalf("Metadata through %s: brokers %+v, want the one at %s", tc.name, md.Brokers, tc.want)
		}
	}
}
