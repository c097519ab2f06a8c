package admin

import (
	"context"
	"crypto/tls"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"quire/internal/tlsconf"
)

// With TLS files the HTTP listener serves HTTPS only: a client trusting the
// CA reads /healthz, a plain HTTP request gets no answer; with a client CA,
// only clients with a certificate it signed get in.
func TestHTTPS(t *testing.T) {
	dir := t.TempDir()
	if err := tlsconf.MakeTestPKI(dir, []string{"127.0.0.1"}, "alice", time.Hour); err != nil {
		t.Fatal(err)
	}
	pool, err := tlsconf.Pool(filepath.Join(dir, "ca.pem"))
	if err != nil {
		t.Fatal(err)
	}
	files := tlsconf.Files{Cert: filepath.Join(dir, "server.pem"), Key: filepath.Join(dir, "server-key.pem")}
	get := func(s *Server, scheme string, cfg *tls.Config) (int, error) {
		cl := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg}}
		resp, err := cl.Get(scheme + "://" + s.Addr() + "/healthz")
		if err != nil {
			return 0, err
		}
		resp.Body.Close()
		return resp.StatusCode, nil
	}

	s, err := Listen(Config{Addr: "127.0.0.1:0", Health: NewHealth(), TLS: files})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Shutdown(context.Background())
	if code, err := get(s, "https", &tls.Config{RootCAs: pool}); err != nil || code != 200 {
		t.Fatalf("https /healthz: %d, %v", code, err)
	}
	if code, err := get(s, "http", nil); err == nil && code == 200 {
		t.Fatal("plain http answered on an HTTPS listener")
	}

	files.ClientCA = filepath.Join(dir, "ca.pem")
	m, err := Listen(Config{Addr: "127.0.0.1:0", Health: NewHealth(), TLS: files})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Shutdown(context.Background())
	if _, err := get(m, "https", &tls.Config{RootCAs: pool}); err == nil {
		t.Fatal("a client without a certificate got in with mutual TLS on")
	}
	cert, err := tls.LoadX509KeyPair(filepath.Join(dir, "client.pem"), filepath.Join(dir, "client-key.pem"))
	if err != nil {
		t.Fatal(err)
	}
	if code, err := get(m, "https", &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}}); err != nil || code != 200 {
		t.Fatalf("mutual TLS /healthz: %d, %v", code, err)
	}
}
