package pulsar_test

import (
	"errors"
	"io"
	"log/slog"
	"net"
	"testing"

	qpulsar "quire/internal/pulsar"
	"quire/internal/pulsar/pulsartest"
)

// broker is one Server over an in-memory Backend, listening on loopback.
type broker struct {
	t       *testing.T
	backend *pulsartest.Backend
	server  *qpulsar.Server
	url     string
}

func newBroker(t *testing.T, backend *pulsartest.Backend, tweak ...func(*qpulsar.Config)) *broker {
	t.Helper()
	if backend == nil {
		backend = &pulsartest.Backend{}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg := qpulsar.Config{Backend: backend, Logger: testLogger(t)}
	for _, f := range tweak {
		f(&cfg)
	}
	server, err := qpulsar.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- server.Serve(ln) }()
	t.Cleanup(func() {
		server.Close()
		if err := <-served; !errors.Is(err, qpulsar.ErrServerClosed) {
			t.Errorf("Serve: %v", err)
		}
	})
	return &broker{t: t, backend: backend, server: server, url: "pulsar://" + ln.Addr().String()}
}

func testLogger(t *testing.T) *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(string(p))
	return len(p), nil
}
