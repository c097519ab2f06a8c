package meta

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"quire/internal/testutil"
	"quire/internal/tlsconf"
)

// testPKIs makes the cluster's test CA and a stranger's, with their
// certificates (server.pem is valid for server and client authentication).
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

func nodeFiles(dir string, mutual bool) tlsconf.Files {
	f := tlsconf.Files{Cert: filepath.Join(dir, "server.pem"), Key: filepath.Join(dir, "server-key.pem")}
	if mutual {
		f.ClientCA = filepath.Join(dir, "ca.pem")
	}
	return f
}

// tryStore connects with cfg and writes and reads a key.
func tryStore(cfg EtcdConfig) error {
	cfg.DialTimeout = time.Second
	s, err := NewEtcd(cfg)
	if err != nil {
		return err
	}
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	key := fmt.Sprintf("/tls-test/%d", time.Now().UnixNano())
	if _, err := s.Create(ctx, key, []byte("v")); err != nil {
		return err
	}
	kv, err := s.Get(ctx, key)
	if err == nil && string(kv.Value) != "v" {
		err = fmt.Errorf("read %q", kv.Value)
	}
	return err
}

func clientTLS(t *testing.T, f tlsconf.ClientFiles) *tls.Config {
	t.Helper()
	cfg, err := tlsconf.Client(f)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// TestEmbeddedClientTLS: a member serving client TLS with client
// certificates required (and peer TLS on) takes a client trusting its CA
// and presenting a certificate of it; a plaintext client, one without a
// certificate, one with a certificate of another CA and one trusting
// another CA get nothing through.
func TestEmbeddedClientTLS(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an embedded etcd; run without -short")
	}
	dir, other := testPKIs(t)
	clientURL := fmt.Sprintf("https://127.0.0.1:%d", testutil.FreePort(t))
	e, err := StartEmbedded(EmbedConfig{DataDir: t.TempDir(), ClientURL: clientURL,
		PeerURL: fmt.Sprintf("https://127.0.0.1:%d", testutil.FreePort(t)), ClientTLS: nodeFiles(dir, true), PeerTLS: nodeFiles(dir, true)})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if e.Endpoint() != clientURL {
		t.Fatalf("endpoint %s, want %s", e.Endpoint(), clientURL)
	}
	good := tlsconf.ClientFiles{CA: filepath.Join(dir, "ca.pem"), Cert: filepath.Join(dir, "client.pem"), Key: filepath.Join(dir, "client-key.pem")}
	if err := tryStore(EtcdConfig{Endpoints: []string{clientURL}, TLS: clientTLS(t, good)}); err != nil {
		t.Fatalf("a client with the cluster's certificate: %v", err)
	}
	hostPort := strings.TrimPrefix(clientURL, "https://")
	for _, c := range []struct {
		name string
		cfg  EtcdConfig
	}{
		{"plaintext", EtcdConfig{Endpoints: []string{"http://" + hostPort}}},
		{"no client certificate", EtcdConfig{Endpoints: []string{clientURL}, TLS: clientTLS(t, tlsconf.ClientFiles{CA: good.CA})}},
		{"client certificate of another CA", EtcdConfig{Endpoints: []string{clientURL}, TLS: clientTLS(t, tlsconf.ClientFiles{
			CA: good.CA, Cert: filepath.Join(other, "client.pem"), Key: filepath.Join(other, "client-key.pem")})}},
		{"trusting another CA", EtcdConfig{Endpoints: []string{clientURL}, TLS: clientTLS(t, tlsconf.ClientFiles{
			CA: filepath.Join(other, "ca.pem"), Cert: good.Cert, Key: good.Key})}},
	} {
		if err := tryStore(c.cfg); err == nil {
			t.Errorf("%s: the member answered", c.name)
		}
	}
	if _, err := NewEtcd(EtcdConfig{Endpoints: []string{"http://" + hostPort}, TLS: clientTLS(t, good)}); err == nil {
		t.Error("TLS with an http:// endpoint was accepted")
	}
}

// TestEmbeddedTLSConfigChecked: a URL's scheme must agree with its TLS
// setting, and peer TLS needs the members' CA.
func TestEmbeddedTLSConfigChecked(t *testing.T) {
	dir, _ := testPKIs(t)
	for name, cfg := range map[string]EmbedConfig{
		"client TLS on http":       {ClientURL: "http://127.0.0.1:1", ClientTLS: nodeFiles(dir, false)},
		"https without a cert":     {ClientURL: "https://127.0.0.1:1"},
		"peer TLS on http":         {PeerURL: "http://127.0.0.1:1", PeerTLS: nodeFiles(dir, true)},
		"peer TLS without the CA":  {PeerURL: "https://127.0.0.1:1", PeerTLS: nodeFiles(dir, false)},
		"client TLS without a key": {ClientURL: "https://127.0.0.1:1", ClientTLS: tlsconf.Files{Cert: filepath.Join(dir, "server.pem")}},
	} {
		cfg.DataDir = t.TempDir()
		if cfg.ClientURL == "" {
			cfg.ClientURL = "http://127.0.0.1:1"
		}
		if cfg.PeerURL == "" {
			cfg.PeerURL = "http://127.0.0.1:2"
		}
		if e, err := StartEmbedded(cfg); err == nil {
			e.Close()
			t.Errorf("%s: started", name)
		}
	}
}

// TestEmbeddedPeerTLS: three members with peer TLS (mutual, the test CA)
// form a cluster, and a key written through one is read through another;
// their peer listeners refuse a certificate of another CA, and none.
func TestEmbeddedPeerTLS(t *testing.T) {
	if testing.Short() {
		t.Skip("starts embedded etcd members; run without -short")
	}
	dir, other := testPKIs(t)
	var peerURLs []string
	start := func(t *testing.T, certs []string, timeout time.Duration) ([]*Embedded, []error) {
		n := len(certs)
		peers, clients := make([]string, n), make([]string, n)
		var initial []string
		for i := range n {
			peers[i] = fmt.Sprintf("https://127.0.0.1:%d", testutil.FreePort(t))
			clients[i] = fmt.Sprintf("http://127.0.0.1:%d", testutil.FreePort(t))
			initial = append(initial, fmt.Sprintf("m%d=%s", i, peers[i]))
		}
		members, errs := make([]*Embedded, n), make([]error, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				// Every member trusts the test CA; member i presents certs[i]'s certificate.
				peer := tlsconf.Files{Cert: filepath.Join(certs[i], "server.pem"), Key: filepath.Join(certs[i], "server-key.pem"), ClientCA: filepath.Join(dir, "ca.pem")}
				members[i], errs[i] = StartEmbedded(EmbedConfig{Name: fmt.Sprintf("m%d", i), DataDir: t.TempDir(), ClientURL: clients[i],
					PeerURL: peers[i], InitialCluster: strings.Join(initial, ","), PeerTLS: peer, StartTimeout: timeout})
			})
		}
		wg.Wait()
		peerURLs = peers
		t.Cleanup(func() {
			for _, m := range members {
				if m != nil {
					m.Close()
				}
			}
		})
		return members, errs
	}

	members, errs := start(t, []string{dir, dir, dir}, 60*time.Second)
	for i, err := range errs {
		if err != nil {
			t.Fatalf("member %d: %v", i, err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	w, err := NewEtcd(EtcdConfig{Endpoints: []string{members[0].Endpoint()}})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if _, err := w.Create(ctx, "/peer-tls", []byte("replicated")); err != nil {
		t.Fatal(err)
	}
	r, err := NewEtcd(EtcdConfig{Endpoints: []string{members[2].Endpoint()}})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if kv, err := r.Get(ctx, "/peer-tls"); err != nil || string(kv.Value) != "replicated" {
		t.Fatalf("read through another member: %q, %v", kv.Value, err)
	}

	// The peer listener takes only certificates of the members' CA: etcd's
	// peer API (/members) answers a client presenting the test CA's
	// certificate, and refuses one with another CA's, or none.
	get := func(cert string) error {
		files := tlsconf.ClientFiles{CA: filepath.Join(dir, "ca.pem")}
		if cert != "" {
			files.Cert, files.Key = filepath.Join(cert, "server.pem"), filepath.Join(cert, "server-key.pem")
		}
		c := clientTLS(t, files)
		hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: c}}
		defer hc.CloseIdleConnections()
		resp, err := hc.Get(peerURLs[0] + "/members")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("status %d", resp.StatusCode)
		}
		return nil
	}
	if err := get(dir); err != nil {
		t.Fatalf("the peer API with a member's certificate: %v", err)
	}
	if get(other) == nil {
		t.Error("the peer API answered a certificate of another CA")
	}
	if get("") == nil {
		t.Error("the peer API answered a client without a certificate")
	}
}
