package client_test

import (
	"bytes"
	"crypto/tls"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"quire/internal/bookie/client"
	"quire/internal/bookie/server"
	"quire/internal/tlsconf"
)

// testPKIs makes two test CAs with their certificates: the cluster's and a stranger's.
func testPKIs(t *testing.T) (dir, other string) {
	t.Helper()
	dir, other = t.TempDir(), t.TempDir()
	for _, d := range []string{dir, other} {
		if err := tlsconf.MakeTestPKI(d, []string{"127.0.0.1"}, "broker", time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	return dir, other
}

func serverTLS(t *testing.T, dir string, mutual bool) *tls.Config {
	t.Helper()
	files := tlsconf.Files{Cert: filepath.Join(dir, "server.pem"), Key: filepath.Join(dir, "server-key.pem")}
	if mutual {
		files.ClientCA = filepath.Join(dir, "ca.pem")
	}
	cfg, err := tlsconf.Server(files)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func clientTLS(t *testing.T, files tlsconf.ClientFiles) *tls.Config {
	t.Helper()
	cfg, err := tlsconf.Client(files)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// TestTLS: a bookie serving TLS takes adds and reads from a client trusting its CA, and
// with client certificates required, from one presenting a certificate of its client CA.
func TestTLS(t *testing.T) {
	dir, _ := testPKIs(t)
	for _, mutual := range []bool{false, true} {
		b := startBookie(t, server.Config{TLS: serverTLS(t, dir, mutual)})
		files := tlsconf.ClientFiles{CA: filepath.Join(dir, "ca.pem")}
		if mutual {
			files.Cert, files.Key = filepath.Join(dir, "client.pem"), filepath.Join(dir, "client-key.pem")
		}
		c := newClient(t, client.Config{TLS: clientTLS(t, files)})
		ctx := testContext(t)
		for i := range int64(10) {
			if err := c.Add(ctx, b.addr, client.AddRequest{LedgerID: 1, EntryID: i, LastAddConfirmed: i - 1, Payload: payloadOf(1, i)}); err != nil {
				t.Fatalf("mutual %v: add %d over TLS: %v", mutual, i, err)
			}
		}
		for i := range int64(10) {
			e, err := c.Read(ctx, b.addr, 1, i, false)
			if err != nil || !bytes.Equal(e.Payload, payloadOf(1, i)) {
				t.Fatalf("mutual %v: read %d over TLS: %q, %v", mutual, i, e.Payload, err)
			}
		}
	}
}

// TestTLSRefusals: what a TLS bookie refuses. A plaintext client, a client that does not
// trust the bookie's CA, and (client certificates required) a client without a
// certificate or with one of another CA get no request through: each add fails with
// ErrConnection and the engine holds nothing. A TLS client of a plaintext bookie fails
// too (the two sides must agree: the client's configuration decides for every bookie).
func TestTLSRefusals(t *testing.T) {
	dir, other := testPKIs(t)
	mutual := startBookie(t, server.Config{TLS: serverTLS(t, dir, true)})
	plain := startBookie(t, server.Config{})
	for _, c := range []struct {
		name string
		b    *bookie
		cfg  client.Config
	}{
		{"plaintext client", mutual, client.Config{}},
		{"client not trusting the bookie's CA", mutual, client.Config{TLS: clientTLS(t, tlsconf.ClientFiles{
			CA: filepath.Join(other, "ca.pem"), Cert: filepath.Join(dir, "client.pem"), Key: filepath.Join(dir, "client-key.pem")})}},
		{"no client certificate", mutual, client.Config{TLS: clientTLS(t, tlsconf.ClientFiles{CA: filepath.Join(dir, "ca.pem")})}},
		{"client certificate of another CA", mutual, client.Config{TLS: clientTLS(t, tlsconf.ClientFiles{
			CA: filepath.Join(dir, "ca.pem"), Cert: filepath.Join(other, "client.pem"), Key: filepath.Join(other, "client-key.pem")})}},
		{"TLS client of a plaintext bookie", plain, client.Config{TLS: clientTLS(t, tlsconf.ClientFiles{CA: filepath.Join(dir, "ca.pem")})}},
	} {
		t.Run(c.name, func(t *testing.T) {
			c.cfg.DialTimeout = 2 * time.Second
			cl := newClient(t, c.cfg)
			ctx := testContext(t)
			err := cl.Add(ctx, c.b.addr, client.AddRequest{LedgerID: 7, EntryID: 0, LastAddConfirmed: -1, Payload: []byte("refused")})
			if !errors.Is(err, client.ErrConnection) {
				t.Fatalf("add: %v, want ErrConnection", err)
			}
			if n := c.b.eng.EntryCount(7); n != 0 {
				t.Fatalf("the bookie stored %d entries of a refused client", n)
			}
		})
	}
}
