package tlsconf

import (
	"crypto/tls"
	"crypto/x509"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// serve accepts TLS connections on a loopback listener and completes their
// handshakes; it returns the address.
func serve(t *testing.T, cfg *tls.Config) string {
	t.Helper()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_ = c.(*tls.Conn).Handshake()
				_, _ = c.Write([]byte("x")) // the client reads a byte: the server accepted it
			}()
		}
	}()
	return ln.Addr().String()
}

// dial connects and reads a byte; it returns the peer's leaf certificate.
func dial(addr string, cfg *tls.Config) (*x509.Certificate, error) {
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, cfg)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err != nil {
		return nil, err
	}
	return c.ConnectionState().PeerCertificates[0], nil
}

// TestServerTLSAndMutualTLS: a client trusting the test CA connects; with a
// client CA set, one without a client certificate is refused and one with
// the test client certificate is accepted.
func TestServerTLSAndMutualTLS(t *testing.T) {
	dir := t.TempDir()
	if err := MakeTestPKI(dir, []string{"127.0.0.1", "localhost"}, "alice", time.Hour); err != nil {
		t.Fatal(err)
	}
	pool, err := Pool(filepath.Join(dir, "ca.pem"))
	if err != nil {
		t.Fatal(err)
	}
	files := Files{Cert: filepath.Join(dir, "server.pem"), Key: filepath.Join(dir, "server-key.pem")}
	cfg, err := Server(files)
	if err != nil {
		t.Fatal(err)
	}
	addr := serve(t, cfg)
	if _, err := dial(addr, &tls.Config{RootCAs: pool}); err != nil {
		t.Fatalf("a client trusting the CA: %v", err)
	}
	if _, err := dial(addr, &tls.Config{RootCAs: x509.NewCertPool()}); err == nil {
		t.Fatal("a client that does not trust the CA connected")
	}

	files.ClientCA = filepath.Join(dir, "ca.pem")
	mcfg, err := Server(files)
	if err != nil {
		t.Fatal(err)
	}
	maddr := serve(t, mcfg)
	if _, err := dial(maddr, &tls.Config{RootCAs: pool}); err == nil {
		t.Fatal("mutual TLS: a client without a certificate was accepted")
	}
	client, err := tls.LoadX509KeyPair(filepath.Join(dir, "client.pem"), filepath.Join(dir, "client-key.pem"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := dial(maddr, &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{client}}); err != nil {
		t.Fatalf("mutual TLS with the client certificate: %v", err)
	}
}

// TestCertificateReloaded: replacing the certificate files is picked up at
// the next handshake without a restart; a half-written replacement keeps
// the last good certificate.
func TestCertificateReloaded(t *testing.T) {
	dir, next := t.TempDir(), t.TempDir()
	for _, d := range []string{dir, next} {
		if err := MakeTestPKI(d, []string{"127.0.0.1"}, "c", time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	files := Files{Cert: filepath.Join(dir, "server.pem"), Key: filepath.Join(dir, "server-key.pem")}
	cfg, err := Server(files)
	if err != nil {
		t.Fatal(err)
	}
	addr := serve(t, cfg)
	first, err := dial(addr, &tls.Config{InsecureSkipVerify: true})
	if err != nil {
		t.Fatal(err)
	}
	// Renew: the other PKI's server certificate, with a later mtime.
	for _, name := range []string{"server.pem", "server-key.pem"} {
		b, err := os.ReadFile(filepath.Join(next, name))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
		later := time.Now().Add(time.Minute)
		if err := os.Chtimes(filepath.Join(dir, name), later, later); err != nil {
			t.Fatal(err)
		}
	}
	second, err := dial(addr, &tls.Config{InsecureSkipVerify: true})
	if err != nil {
		t.Fatal(err)
	}
	if first.SerialNumber.Cmp(second.SerialNumber) == 0 {
		t.Fatal("the renewed certificate was not served")
	}
	// A broken key file (a renewal caught half-written) keeps the last good one.
	if err := os.WriteFile(files.Key, []byte("garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	later := time.Now().Add(2 * time.Minute)
	if err := os.Chtimes(files.Key, later, later); err != nil {
		t.Fatal(err)
	}
	third, err := dial(addr, &tls.Config{InsecureSkipVerify: true})
	if err != nil {
		t.Fatalf("a broken renewal took the listener down: %v", err)
	}
	if third.SerialNumber.Cmp(second.SerialNumber) != 0 {
		t.Fatal("a broken renewal replaced the last good certificate")
	}
}

// TestMutualTLSRefusals: with a client CA set, a client certificate from
// another CA, and an expired one from the right CA, are refused at the
// handshake; a server certificate from another CA is refused by the
// client.
func TestMutualTLSRefusals(t *testing.T) {
	dir, other := t.TempDir(), t.TempDir()
	for _, d := range []string{dir, other} {
		if err := MakeTestPKI(d, []string{"127.0.0.1"}, "alice", time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	cfg, err := Server(Files{Cert: filepath.Join(dir, "server.pem"), Key: filepath.Join(dir, "server-key.pem"), ClientCA: filepath.Join(dir, "ca.pem")})
	if err != nil {
		t.Fatal(err)
	}
	addr := serve(t, cfg)
	pool, err := Pool(filepath.Join(dir, "ca.pem"))
	if err != nil {
		t.Fatal(err)
	}
	foreign, err := tls.LoadX509KeyPair(filepath.Join(other, "client.pem"), filepath.Join(other, "client-key.pem"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := dial(addr, &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{foreign}}); err == nil {
		t.Error("a client certificate of another CA was accepted")
	}
	if _, err := dial(addr, &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{expiredClient(t, dir)}}); err == nil {
		t.Error("an expired client certificate was accepted")
	}
	good, err := tls.LoadX509KeyPair(filepath.Join(dir, "client.pem"), filepath.Join(dir, "client-key.pem"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := dial(addr, &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{good}}); err != nil {
		t.Fatalf("the valid client certificate: %v", err)
	}
	otherPool, err := Pool(filepath.Join(other, "ca.pem"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := dial(addr, &tls.Config{RootCAs: otherPool, Certificates: []tls.Certificate{good}}); err == nil {
		t.Error("a client trusting another CA accepted the server")
	}
}

// expiredClient is tlsconf's expired client certificate for "alice".
func expiredClient(t *testing.T, dir string) tls.Certificate {
	t.Helper()
	c, err := ExpiredTestClientCert(dir, "alice")
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestClientConfig: Client's configuration trusts its CA and presents its
// certificate to a listener requiring one; without the certificate, or
// trusting another CA, it gets nothing through; a certificate without its
// key is refused when the configuration is built. The server certificate
// also serves as a client identity (a node's, towards the other nodes).
func TestClientConfig(t *testing.T) {
	dir, other := t.TempDir(), t.TempDir()
	for _, d := range []string{dir, other} {
		if err := MakeTestPKI(d, []string{"127.0.0.1"}, "alice", time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	cfg, err := Server(Files{Cert: filepath.Join(dir, "server.pem"), Key: filepath.Join(dir, "server-key.pem"), ClientCA: filepath.Join(dir, "ca.pem")})
	if err != nil {
		t.Fatal(err)
	}
	addr := serve(t, cfg)
	for _, c := range []struct {
		name  string
		files ClientFiles
		ok    bool
	}{
		{"client certificate", ClientFiles{CA: filepath.Join(dir, "ca.pem"), Cert: filepath.Join(dir, "client.pem"), Key: filepath.Join(dir, "client-key.pem")}, true},
		{"node certificate", ClientFiles{CA: filepath.Join(dir, "ca.pem"), Cert: filepath.Join(dir, "server.pem"), Key: filepath.Join(dir, "server-key.pem")}, true},
		{"no certificate", ClientFiles{CA: filepath.Join(dir, "ca.pem")}, false},
		{"certificate of another CA", ClientFiles{CA: filepath.Join(dir, "ca.pem"), Cert: filepath.Join(other, "client.pem"), Key: filepath.Join(other, "client-key.pem")}, false},
		{"trusting another CA", ClientFiles{CA: filepath.Join(other, "ca.pem"), Cert: filepath.Join(dir, "client.pem"), Key: filepath.Join(dir, "client-key.pem")}, false},
	} {
		ccfg, err := Client(c.files)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		ccfg.ServerName = "127.0.0.1"
		_, err = dial(addr, ccfg)
		if c.ok && err != nil {
			t.Errorf("%s: %v", c.name, err)
		}
		if !c.ok && err == nil {
			t.Errorf("%s: connected", c.name)
		}
	}
	if _, err := Client(ClientFiles{CA: filepath.Join(dir, "ca.pem"), Cert: filepath.Join(dir, "client.pem")}); err == nil {
		t.Error("a client certificate without its key was accepted")
	}
	if !(ClientFiles{CA: "x"}).Enabled() || (ClientFiles{}).Enabled() {
		t.Error("ClientFiles.Enabled")
	}
}
