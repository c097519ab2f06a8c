package main

import (
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"quire/internal/testutil"
	"quire/internal/tlsconf"
)

// TestKafkaOverMutualTLS: `quire certs` makes a CA and certificates; a
// standalone serves Kafka over TLS requiring client certificates. A client
// with the client certificate produces and reads back; one without a
// certificate, and a plaintext one, get nothing through.
func TestKafkaOverMutualTLS(t *testing.T) {
	if testing.Short() {
		t.Skip("runs quire processes")
	}
	certs := t.TempDir()
	out, err := runQuire(t, "certs", "--dir", certs, "--hosts", "127.0.0.1", "--client", "alice")
	if err != nil || !strings.Contains(out, "wrote ca.pem") {
		t.Fatalf("quire certs: %v: %s", err, out)
	}
	httpAddr, kafkaAddr := freeAddr(t), freeAddr(t)
	args := []string{"standalone", "--data-dir", t.TempDir(), "--http-addr", httpAddr, "--kafka-addr", kafkaAddr,
		"--meta-client-addr", freeAddr(t), "--meta-peer-addr", freeAddr(t),
		"--bookie-addrs", strings.Join([]string{freeAddr(t), freeAddr(t), freeAddr(t)}, ","), "--pulsar-addr", freeAddr(t),
		"--kafka-tls-cert", filepath.Join(certs, "server.pem"), "--kafka-tls-key", filepath.Join(certs, "server-key.pem"),
		"--kafka-tls-client-ca", filepath.Join(certs, "ca.pem")}
	p := startQuire(t, args...)
	waitHTTP(t, p, "http://"+httpAddr+"/readyz", 60*time.Second)

	pool, err := tlsconf.Pool(filepath.Join(certs, "ca.pem"))
	if err != nil {
		t.Fatal(err)
	}
	cert, err := tls.LoadX509KeyPair(filepath.Join(certs, "client.pem"), filepath.Join(certs, "client-key.pem"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	dialer := &tls.Dialer{NetDialer: &net.Dialer{Timeout: 5 * time.Second}, Config: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}}}
	cl, err := kgo.NewClient(kgo.SeedBrokers(kafkaAddr), kgo.Dialer(dialer.DialContext), kgo.DefaultProduceTopic("secure"),
		kgo.AllowAutoTopicCreation(), kgo.ConsumeTopics("secure"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if err := cl.ProduceSync(ctx, &kgo.Record{Value: []byte("over tls")}).FirstErr(); err != nil {
		t.Fatalf("produce over mutual TLS: %v", err)
	}
	fetches := cl.PollRecords(ctx, 1)
	if errs := fetches.Errors(); len(errs) > 0 || fetches.NumRecords() != 1 || string(fetches.Records()[0].Value) != "over tls" {
		t.Fatalf("read back over mutual TLS: %d records, %v", fetches.NumRecords(), errs)
	}

	// Without a client certificate, and in plaintext: refused.
	for name, dial := range map[string]func(ctx context.Context, network, host string) (net.Conn, error){
		"no client certificate": (&tls.Dialer{Config: &tls.Config{RootCAs: pool}}).DialContext,
		"plaintext":             (&net.Dialer{}).DialContext,
	} {
		bad, err := kgo.NewClient(kgo.SeedBrokers(kafkaAddr), kgo.Dialer(dial), kgo.RequestRetries(0))
		if err != nil {
			t.Fatal(err)
		}
		bctx, bcancel := context.WithTimeout(ctx, 5*time.Second)
		if err := bad.Ping(bctx); err == nil {
			t.Errorf("%s: the broker answered", name)
		}
		bcancel()
		bad.Close()
	}
}

// --http-tls-*: the HTTP listener of a standalone (metrics, health, the
// admin REST API) serves HTTPS to clients trusting the CA, and only HTTPS.
func TestHTTPSAdminListener(t *testing.T) {
	if testing.Short() {
		t.Skip("runs quire processes")
	}
	certs := t.TempDir()
	if out, err := runQuire(t, "certs", "--dir", certs, "--hosts", "127.0.0.1", "--client", "alice"); err != nil {
		t.Fatalf("quire certs: %v: %s", err, out)
	}
	httpAddr := freeAddr(t)
	p := startQuire(t, "standalone", "--data-dir", t.TempDir(), "--http-addr", httpAddr, "--kafka-addr", freeAddr(t),
		"--meta-client-addr", freeAddr(t), "--meta-peer-addr", freeAddr(t),
		"--bookie-addrs", strings.Join([]string{freeAddr(t), freeAddr(t), freeAddr(t)}, ","), "--pulsar-addr", freeAddr(t),
		"--http-tls-cert", filepath.Join(certs, "server.pem"), "--http-tls-key", filepath.Join(certs, "server-key.pem"))
	pool, err := tlsconf.Pool(filepath.Join(certs, "ca.pem"))
	if err != nil {
		t.Fatal(err)
	}
	https := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	get := func(c *http.Client, url string) int {
		resp, err := c.Get(url)
		if err != nil {
			return 0
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	testutil.WaitForWithin(t, 60*time.Second, "/readyz over HTTPS", func() bool {
		select {
		case err := <-p.exited:
			p.exited <- err
			t.Fatalf("quire exited: %v\n%s", err, tail(p.output.String(), 3000))
		default:
		}
		return get(https, "https://"+httpAddr+"/readyz") == 200
	})
	if code := get(https, "https://"+httpAddr+"/metrics"); code != 200 {
		t.Fatalf("/metrics over HTTPS: %d", code)
	}
	if code := get(&http.Client{Timeout: 5 * time.Second}, "http://"+httpAddr+"/readyz"); code == 200 {
		t.Fatal("plain HTTP answered on the HTTPS listener")
	}
}
