package server_test

import (
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"quire/internal/bookie/server"
	"quire/internal/bookie/server/memengine"
	"quire/internal/tlsconf"
)

// TestTLSHandshakeBounded: a TLS bookie drops a connection that never
// completes its handshake after HandshakeTimeout, and one that sends
// plaintext frames at once, counting both, and answers neither.
func TestTLSHandshakeBounded(t *testing.T) {
	dir := t.TempDir()
	if err := tlsconf.MakeTestPKI(dir, []string{"127.0.0.1"}, "broker", time.Hour); err != nil {
		t.Fatal(err)
	}
	cfg, err := tlsconf.Server(tlsconf.Files{Cert: filepath.Join(dir, "server.pem"), Key: filepath.Join(dir, "server-key.pem")})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	eng := memengine.New()
	addr, _ := startServer(t, server.Config{TLS: cfg, HandshakeTimeout: 200 * time.Millisecond, Registerer: reg}, eng)

	silent, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	// The deadline is the test's bound, far above HandshakeTimeout: the
	// server's close ends the read first.
	_ = silent.SetReadDeadline(time.Now().Add(testDeadline))
	if n, err := silent.Read(make([]byte, 1)); err == nil || isTimeout(err) {
		t.Fatalf("a silent connection: read %d bytes, %v; want it closed by the server", n, err)
	}

	plain := dialRaw(t, addr)
	plain.send(addReq(1, 1, 0, -1, "plaintext"))
	plain.expectClosed()
	if n := eng.EntryCount(1); n != 0 {
		t.Fatalf("a plaintext add was stored: %d entries", n)
	}
	if got := counterValue(t, reg, "quire_bookie_tls_handshakes_failed_total"); got != 2 {
		t.Fatalf("handshakes failed: %v, want 2", got)
	}
}

func isTimeout(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}

// counterValue reads a registered counter without labels.
func counterValue(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	t.Fatalf("no counter %s", name)
	return 0
}
