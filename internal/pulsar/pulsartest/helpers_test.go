package pulsartest_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	pulsarlog "github.com/apache/pulsar-client-go/pulsar/log"

	qpulsar "quire/internal/pulsar"
	"quire/internal/pulsar/pulsartest"
)

// testTimeout bounds each test's client operations.
const testTimeout = 60 * time.Second

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

// client returns a pulsar-client-go client of the broker, closed with the
// test.
func (b *broker) client() pulsar.Client {
	b.t.Helper()
	c, err := pulsar.NewClient(pulsar.ClientOptions{
		URL:               b.url,
		OperationTimeout:  testTimeout,
		ConnectionTimeout: 10 * time.Second,
		Logger:            pulsarlog.NewLoggerWithSlog(slog.New(slog.NewTextHandler(io.Discard, nil))),
	})
	if err != nil {
		b.t.Fatal(err)
	}
	b.t.Cleanup(c.Close)
	return c
}

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	t.Cleanup(cancel)
	return ctx
}

func producer(t *testing.T, c pulsar.Client, opts pulsar.ProducerOptions) pulsar.Producer {
	t.Helper()
	p, err := c.CreateProducer(opts)
	if err != nil {
		t.Fatalf("create producer: %v", err)
	}
	t.Cleanup(p.Close)
	return p
}

func subscribe(t *testing.T, c pulsar.Client, opts pulsar.ConsumerOptions) pulsar.Consumer {
	t.Helper()
	cons, err := c.Subscribe(opts)
	if err != nil {
		t.Fatalf("subscribe: %v", err)
	}
	t.Cleanup(cons.Close)
	return cons
}

// receive receives one message within the test's deadline.
func receive(ctx context.Context, t *testing.T, cons pulsar.Consumer) pulsar.Message {
	t.Helper()
	msg, err := cons.Receive(ctx)
	if err != nil {
		t.Fatalf("receive: %v", err)
	}
	return msg
}
