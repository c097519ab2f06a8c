package broker

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"

	"quire/internal/catalog"
)

// TestPulsarChunkedAtMaxSize: a chunking producer fills each chunk's
// metadata plus payload up to the advertised maxMessageSize; the broker
// takes such entries (the metadata rides in the frame padding, as in
// Pulsar) and the consumer gets the message back whole.
func TestPulsarChunkedAtMaxSize(t *testing.T) {
	c := newTestCluster(t)
	b, _ := c.startPulsarBroker(nil)
	client := pulsarClient(t, b)
	ctx := pulsarContext(t)
	const topic = "persistent://public/default/big"
	cons := newConsumer(t, client, pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "s"})
	p := newProducer(t, client, pulsar.ProducerOptions{Topic: topic, DisableBatching: true, EnableChunking: true,
		SendTimeout: 30 * time.Second})
	data := make([]byte, 5<<20+1000) // two chunks, the first at the limit
	for i := range data {
		data[i] = byte(rand.IntN(256))
	}
	if _, err := p.Send(ctx, &pulsar.ProducerMessage{Payload: data}); err != nil {
		t.Fatal(err)
	}
	msg := receiveOne(ctx, t, cons)
	if !bytes.Equal(msg.Payload(), data) {
		t.Fatalf("received %d bytes, not the %d sent", len(msg.Payload()), len(data))
	}
}

// TestPulsarBatchIndexAck: a consumer acknowledges half the messages of a
// batch one by one; the next consumer of the subscription gets the entry
// again with its ack_set and receives only the other half.
func TestPulsarBatchIndexAck(t *testing.T) {
	c := newTestCluster(t)
	b, _ := c.startPulsarBroker(nil)
	client := pulsarClient(t, b)
	ctx := pulsarContext(t)
	const topic = "persistent://public/default/batch-acks"
	subscribe := func() pulsar.Consumer {
		cons, err := client.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "s",
			EnableBatchIndexAcknowledgment: true, AckWithResponse: true})
		if err != nil {
			t.Fatal(err)
		}
		return cons
	}
	cons := subscribe()
	p := newProducer(t, client, pulsar.ProducerOptions{Topic: topic, BatchingMaxMessages: 10,
		BatchingMaxPublishDelay: time.Hour})
	sendAll(ctx, t, p, 0, 10) // one batch: the tenth message fills it
	for i := range 10 {
		msg := receiveOne(ctx, t, cons)
		if got := string(msg.Payload()); got != strconv.Itoa(i) {
			t.Fatalf("received %q, want %d", got, i)
		}
		if i%2 == 0 {
			if err := cons.Ack(msg); err != nil {
				t.Fatal(err)
			}
		}
	}
	cons.Close()
	cons = subscribe()
	defer cons.Close()
	for i := 1; i < 10; i += 2 {
		msg := receiveOne(ctx, t, cons)
		if got := string(msg.Payload()); got != strconv.Itoa(i) {
			t.Fatalf("after reconnecting received %q, want %d", got, i)
		}
	}
}

// TestPulsarQuotaBlocksProducers: with a producer_exception backlog quota,
// a send over the quota fails and a new producer is refused with
// ProducerBlockedQuotaExceededException while the backlog stays.
func TestPulsarQuotaBlocksProducers(t *testing.T) {
	c := newTestCluster(t)
	b, store := c.startPulsarBroker(nil)
	ctx := pulsarContext(t)
	if _, err := catalog.New(store).UpdatePolicies(ctx, "public/default", func(p *catalog.Policies) error {
		p.BacklogQuota = catalog.BacklogQuota{LimitBytes: 4 << 10, LimitTimeSeconds: -1, Policy: catalog.ProducerException}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	client := pulsarClient(t, b)
	const topic = "persistent://public/default/quota"
	newConsumer(t, client, pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "slow"}) // never acknowledges
	p := newProducer(t, client, pulsar.ProducerOptions{Topic: topic, DisableBatching: true, SendTimeout: 5 * time.Second})
	refused := false
	for i := 0; i < 100 && !refused; i++ {
		_, err := p.Send(ctx, &pulsar.ProducerMessage{Payload: make([]byte, 1<<10)})
		refused = err != nil
	}
	if !refused {
		t.Fatal("100 KiB sent over a 4 KiB producer_exception quota")
	}
	_, err := client.CreateProducer(pulsar.ProducerOptions{Topic: topic, MaxReconnectToBroker: new(uint)})
	if err == nil || !strings.Contains(err.Error(), "ProducerBlockedQuotaExceededException") {
		t.Fatalf("a new producer over the quota: %v, want ProducerBlockedQuotaExceededException", err)
	}
}

// TestPulsarReaderSeekByTimeSticks: a reader's SEEK closes its consumer so
// it reconnects; its subscription (the reset cursor) must still be there,
// not be created afresh at the reader's start id.
func TestPulsarReaderSeekByTimeSticks(t *testing.T) {
	c := newTestCluster(t)
	b, _ := c.startPulsarBroker(nil)
	client := pulsarClient(t, b)
	ctx := pulsarContext(t)
	const topic = "persistent://public/default/reader-seek"
	p := newProducer(t, client, pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
	sendAll(ctx, t, p, 0, 10)
	r, err := client.CreateReader(pulsar.ReaderOptions{Topic: topic, StartMessageID: pulsar.EarliestMessageID()})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if err := r.SeekByTime(time.Now().Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	if r.HasNext() {
		msg, _ := r.Next(ctx)
		t.Fatalf("after seeking past the last message the reader has more: %v", msg.Payload())
	}
}

// TestPulsarWaitForExclusive: a WaitForExclusive producer waits while an
// exclusive one holds the topic and gets it when that one closes.
func TestPulsarWaitForExclusive(t *testing.T) {
	c := newTestCluster(t)
	b, _ := c.startPulsarBroker(nil)
	client := pulsarClient(t, b)
	ctx := pulsarContext(t)
	const topic = "persistent://public/default/wait-exclusive"
	first, err := client.CreateProducer(pulsar.ProducerOptions{Topic: topic, ProducerAccessMode: pulsar.ProducerAccessModeExclusive})
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		p   pulsar.Producer
		err error
	}
	got := make(chan result, 1)
	go func() {
		p, err := client.CreateProducer(pulsar.ProducerOptions{Topic: topic, ProducerAccessMode: pulsar.ProducerAccessModeWaitForExclusive})
		got <- result{p, err}
	}()
	select {
	case r := <-got:
		t.Fatalf("the waiting producer was answered while the topic was held: %v", r.err)
	case <-time.After(200 * time.Millisecond): // an absence: nothing to wait on but time
	}
	first.Close()
	r := <-got
	if r.err != nil {
		t.Fatalf("the waiting producer after the holder closed: %v", r.err)
	}
	defer r.p.Close()
	if _, err := r.p.Send(ctx, &pulsar.ProducerMessage{Payload: []byte("x")}); err != nil {
		t.Fatal(err)
	}
}

// TestPulsarMaxMessageSizeSetting: Config.Pulsar.MaxMessageSize is what
// CONNECTED advertises: the client refuses a larger message itself, and a
// chunking producer cuts chunks at that size.
func TestPulsarMaxMessageSizeSetting(t *testing.T) {
	c := newTestCluster(t)
	b, _ := c.startPulsarBroker(func(cfg *Config) { cfg.Pulsar.MaxMessageSize = 1 << 20 })
	client := pulsarClient(t, b)
	ctx := pulsarContext(t)
	const topic = "persistent://public/default/max-size"
	cons := newConsumer(t, client, pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "s"})
	plain := newProducer(t, client, pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
	if _, err := plain.Send(ctx, &pulsar.ProducerMessage{Payload: make([]byte, 1<<20+1)}); !errors.Is(err, pulsar.ErrMessageTooLarge) {
		t.Fatalf("sending 1 MiB + 1 byte: %v, want ErrMessageTooLarge", err)
	}
	chunking := newProducer(t, client, pulsar.ProducerOptions{Topic: topic, DisableBatching: true, EnableChunking: true})
	id, err := chunking.Send(ctx, &pulsar.ProducerMessage{Payload: make([]byte, 1<<20+1000)})
	if err != nil {
		t.Fatal(err)
	}
	if id.String() == "" {
		t.Fatal("no message id")
	}
	if msg := receiveOne(ctx, t, cons); len(msg.Payload()) != 1<<20+1000 {
		t.Fatalf("received %d bytes, want %d", len(msg.Payload()), 1<<20+1000)
	}
}
