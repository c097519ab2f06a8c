package isrnode

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"quire/internal/kafka"
	"quire/internal/kafka/kafkatest"
	"quire/internal/tlsconf"
)

// TestReplicaClientTLS: the client a follower fetches with reaches a
// leader's Kafka listener that requires mutual TLS when it is given the
// broker's identity (the test CA's node certificate), and gets no request
// through in plaintext, without a certificate, with a certificate of
// another CA, or trusting another CA.
func TestReplicaClientTLS(t *testing.T) {
	dir, other := t.TempDir(), t.TempDir()
	for _, d := range []string{dir, other} {
		if err := tlsconf.MakeTestPKI(d, []string{"127.0.0.1"}, "alice", time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	serverCfg, err := tlsconf.Server(tlsconf.Files{Cert: filepath.Join(dir, "server.pem"), Key: filepath.Join(dir, "server-key.pem"),
		ClientCA: filepath.Join(dir, "ca.pem")})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	host, portStr, _ := net.SplitHostPort(ln.Addr().String())
	port, _ := strconv.Atoi(portStr)
	quietLog := slog.New(slog.NewTextHandler(io.Discard, nil))
	srv, err := kafka.New(kafka.Config{Backend: kafkatest.New(kafka.Node{ID: 1, Host: host, Port: int32(port)}), Logger: quietLog})
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(tls.NewListener(ln, serverCfg)) }()
	t.Cleanup(func() {
		srv.Close()
		if err := <-served; !errors.Is(err, kafka.ErrServerClosed) {
			t.Errorf("Serve: %v", err)
		}
	})

	identity := func(ca, certDir string) *tls.Config {
		files := tlsconf.ClientFiles{CA: filepath.Join(ca, "ca.pem")}
		if certDir != "" {
			files.Cert, files.Key = filepath.Join(certDir, "server.pem"), filepath.Join(certDir, "server-key.pem")
		}
		cfg, err := tlsconf.Client(files)
		if err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	request := func(cfg *tls.Config) error {
		cl, err := newReplicaClient(ln.Addr().String(), 2, cfg)
		if err != nil {
			return err
		}
		defer cl.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err = cl.SeedBrokers()[0].Request(ctx, kmsg.NewPtrApiVersionsRequest())
		return err
	}
	if err := request(identity(dir, dir)); err != nil {
		t.Fatalf("with the broker's certificate: %v", err)
	}
	for name, cfg := range map[string]*tls.Config{
		"plaintext":                        nil,
		"no client certificate":            identity(dir, ""),
		"client certificate of another CA": identity(dir, other),
		"trusting another CA":              identity(other, dir),
	} {
		if err := request(cfg); err == nil {
			t.Errorf("%s: the leader answered", name)
		}
	}
}
