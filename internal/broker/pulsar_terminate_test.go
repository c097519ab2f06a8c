package broker

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	pulsarlog "github.com/apache/pulsar-client-go/pulsar/log"
)

// TestPulsarTopicTermination: POST .../terminate answers the last message
// id; the topic's producer is closed and fails its next send with
// ErrTopicTerminated; a new producer is refused; the consumer still gets
// everything written before; and after a takeover the new owner refuses
// producers too (the termination is durable). Terminating again answers the
// same id; deleting the topic forgets the termination.
func TestPulsarTopicTermination(t *testing.T) {
	c := newTestCluster(t)
	b1, _ := c.startPulsarBroker(func(cfg *Config) { cfg.ID = 1 })
	ctx := pulsarContext(t)
	const topic = "persistent://public/default/terminated"
	const path = "/admin/v2/persistent/public/default/terminated/terminate"
	// The client's log tells when it has closed the producer after the
	// termination (its reconnection refused): see the late send below.
	closing := make(chan struct{}, 1)
	client1, err := pulsar.NewClient(pulsar.ClientOptions{URL: b1.PulsarURL(), OperationTimeout: pulsarTestTimeout,
		ConnectionTimeout: 10 * time.Second, Logger: pulsarlog.NewLoggerWithSlog(slog.New(producerClosingHandler{closing}))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(client1.Close)
	cons := newConsumer(t, client1, pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "s"})
	p := newProducer(t, client1, pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
	ids := sendAll(ctx, t, p, 0, 5)

	api1 := startAdmin(t, b1)
	var last messageIDJSON
	api1.expect(http.MethodPost, path, nil, http.StatusOK, &last)
	if want := ids[len(ids)-1]; last.LedgerID != want.LedgerID() || last.EntryID != want.EntryID() || last.PartitionIndex != -1 {
		t.Fatalf("terminate answered %+v, want the last message id %v", last, want)
	}
	// The producer was closed (CLOSE_PRODUCER, as Pulsar's terminate does)
	// and its reconnection refused with TopicTerminatedError, upon which
	// the client closes the producer: a send after that fails with
	// ErrProducerClosed (one the client still held, with
	// ErrTopicTerminated). The send waits for the client's close: a send
	// racing it is a data race inside pulsar-client-go v0.21.0 (Send checks
	// the producer's state, then writes to a channel that the close may
	// have closed meanwhile; the race detector caught it in CI, and the
	// send then hung). Either way nothing is written (the consumer below
	// gets the five messages and nothing else).
	select {
	case <-closing:
	case <-ctx.Done():
		t.Fatal("the client never closed the producer of the terminated topic")
	}
	if _, err := p.Send(ctx, &pulsar.ProducerMessage{Payload: []byte("late")}); !errors.Is(err, pulsar.ErrTopicTerminated) && !errors.Is(err, pulsar.ErrProducerClosed) {
		t.Fatalf("send after termination: %v, want ErrTopicTerminated or ErrProducerClosed", err)
	}
	if _, err := client1.CreateProducer(pulsar.ProducerOptions{Topic: topic}); err == nil || !strings.Contains(err.Error(), "TopicTerminated") {
		t.Fatalf("new producer on a terminated topic: %v, want TopicTerminatedError", err)
	}
	for i := range 5 {
		msg := receiveOne(ctx, t, cons)
		if got := string(msg.Payload()); got != string(rune('0'+i)) {
			t.Fatalf("received %q, want %d", got, i)
		}
		if err := cons.Ack(msg); err != nil {
			t.Fatal(err)
		}
	}
	// The late send was not written: nothing but redeliveries of the five
	// (acknowledgements are asynchronous) within half a second.
	shortCtx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	for {
		msg, err := cons.Receive(shortCtx)
		if err != nil {
			break
		}
		if string(msg.Payload()) == "late" {
			t.Fatal("the send after the termination was written")
		}
	}
	cancel()
	var again messageIDJSON
	api1.expect(http.MethodPost, path, nil, http.StatusOK, &again)
	if again != last {
		t.Fatalf("terminating again answered %+v, want %+v", again, last)
	}
	cons.Close()
	client1.Close()
	if err := b1.Close(); err != nil {
		t.Logf("close broker 1: %v", err)
	}

	b2, _ := c.startPulsarBroker(func(cfg *Config) { cfg.ID = 2 })
	client2 := pulsarClient(t, b2)
	if _, err := client2.CreateProducer(pulsar.ProducerOptions{Topic: topic}); err == nil || !strings.Contains(err.Error(), "TopicTerminated") {
		t.Fatalf("new producer after the takeover: %v, want TopicTerminatedError", err)
	}
	api2 := startAdmin(t, b2)
	api2.expect(http.MethodPost, path, nil, http.StatusOK, &again)
	if again != last {
		t.Fatalf("the new owner's terminate answered %+v, want %+v", again, last)
	}
	api2.expect(http.MethodDelete, "/admin/v2/persistent/public/default/terminated?force=true", nil, http.StatusNoContent, nil)
	p2 := newProducer(t, client2, pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
	sendAll(ctx, t, p2, 0, 1)
}

// producerClosingHandler signals closing when pulsar-client-go logs that it
// is closing a producer (and drops every record).
type producerClosingHandler struct{ closing chan struct{} }

func (h producerClosingHandler) Enabled(context.Context, slog.Level) bool { return true }

func (h producerClosingHandler) Handle(_ context.Context, r slog.Record) error {
	if r.Message == "Closing producer" {
		select {
		case h.closing <- struct{}{}:
		default:
		}
	}
	return nil
}

func (h producerClosingHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h producerClosingHandler) WithGroup(string) slog.Handler      { return h }
