package pulsartest_test

import (
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	pulsarlog "github.com/apache/pulsar-client-go/pulsar/log"

	"quire/internal/auth"
	qpulsar "quire/internal/pulsar"
	"quire/internal/testutil"
)

// The Go client's token refresh: tokens that expire within two seconds are
// challenged (AUTH_CHALLENGE) and replaced (AUTH_RESPONSE) on the same
// connection; the producer keeps its connection and goes on sending.
func TestTokenRefreshWithGoClient(t *testing.T) {
	secret := []byte("pulsartest's token secret: 32 B!")
	v, err := auth.NewSecretKeyValidator(secret)
	if err != nil {
		t.Fatal(err)
	}
	b := newBroker(t, nil, func(c *qpulsar.Config) {
		c.Authenticator = &auth.PulsarProviders{Tokens: v}
		c.KeepAliveInterval = 100 * time.Millisecond
	})
	var issued atomic.Int32
	supplier := func() (string, error) {
		issued.Add(1)
		// JWT times are whole seconds: a token that expires within two.
		return auth.CreateToken(secret, "alice", time.Now().Add(time.Second).Truncate(time.Second).Add(time.Second))
	}
	c, err := pulsar.NewClient(pulsar.ClientOptions{URL: b.url, OperationTimeout: testTimeout,
		Authentication: pulsar.NewAuthenticationTokenFromSupplier(supplier),
		Logger:         pulsarlog.NewLoggerWithSlog(slog.New(slog.NewTextHandler(io.Discard, nil)))})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	topic := "persistent://public/default/refresh"
	p := producer(t, c, pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
	ctx := testContext(t)
	producerAddress := func() string {
		st, ok := b.server.TopicStats(topic)
		if !ok || len(st.Producers) != 1 {
			return ""
		}
		return st.Producers[0].Address
	}
	before := producerAddress()
	if _, err := p.Send(ctx, &pulsar.ProducerMessage{Payload: []byte("before")}); err != nil {
		t.Fatal(err)
	}
	first := issued.Load()
	testutil.WaitFor(t, "two token refreshes", func() bool { return issued.Load() >= first+2 })
	if _, err := p.Send(ctx, &pulsar.ProducerMessage{Payload: []byte("after")}); err != nil {
		t.Fatal(err)
	}
	if after := producerAddress(); before == "" || after != before {
		t.Fatalf("producer connection %q before the refreshes, %q after: want the same", before, after)
	}
}
