package broker

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/apache/pulsar-client-go/pulsar"
)

// TestPulsarSchemas: a producer's schema is stored and shared with later
// producers and consumers of the topic; another type is refused; a new
// definition of the same type becomes version 1.
func TestPulsarSchemas(t *testing.T) {
	c := newTestCluster(t)
	b, _ := c.startPulsarBroker(nil)
	client := pulsarClient(t, b)
	ctx := pulsarContext(t)
	const topic = "persistent://public/default/typed"

	p := newProducer(t, client, pulsar.ProducerOptions{Topic: topic, Schema: pulsar.NewStringSchema(nil), DisableBatching: true})
	cons := newConsumer(t, client, pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "s",
		Schema: pulsar.NewStringSchema(nil), SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest})
	if _, err := p.Send(ctx, &pulsar.ProducerMessage{Value: "hello"}); err != nil {
		t.Fatal(err)
	}
	msg := receiveOne(ctx, t, cons)
	var got *string // StringSchema decodes into a *string
	if err := msg.GetSchemaValue(&got); err != nil || got == nil || *got != "hello" {
		t.Fatalf("schema value %v, %v", got, err)
	}

	if p2, err := client.CreateProducer(pulsar.ProducerOptions{Topic: topic, Schema: pulsar.NewInt64Schema(nil)}); err == nil {
		p2.Close()
		t.Fatal("an Int64 producer was accepted on a String topic")
	} else if !errors.Is(err, pulsar.ErrSchema) && !strings.Contains(err.Error(), "IncompatibleSchema") {
		t.Fatalf("an Int64 producer on a String topic: %v, want IncompatibleSchema", err)
	}

	pb := b.pulsar.Load()
	vs, err := pb.Schemas(ctx, topic)
	if err != nil || len(vs) != 1 {
		t.Fatalf("stored versions %+v, %v; want one", vs, err)
	}
	// The REST view (what the HTTP lookup reads), then its deletion.
	rec := httptest.NewRecorder()
	b.PulsarAdmin().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/admin/v2/schemas/public/default/typed/schema", nil))
	if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), `"type":"STRING"`) || !strings.Contains(rec.Body.String(), `"version":0`) {
		t.Fatalf("GET schema: %d %s", rec.Code, rec.Body)
	}
	rec = httptest.NewRecorder()
	b.PulsarAdmin().ServeHTTP(rec, httptest.NewRequest(http.MethodDelete, "/admin/v2/schemas/public/default/typed/schema", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("DELETE schema: %d %s", rec.Code, rec.Body)
	}
	if vs, err := pb.Schemas(ctx, topic); err != nil || len(vs) != 0 {
		t.Fatalf("after DELETE: %d versions, %v", len(vs), err)
	}

	const def = `{"type":"record","name":"R","fields":[{"name":"a","type":"int"}]}`
	const def2 = `{"type":"record","name":"R","fields":[{"name":"a","type":"int"},{"name":"b","type":["null","int"],"default":null}]}`
	for i, d := range []string{def, def2, def} {
		p := newProducer(t, client, pulsar.ProducerOptions{Topic: topic + "-avro", Schema: pulsar.NewAvroSchema(d, nil)})
		type rec struct {
			A int32 `avro:"a"`
		}
		if _, err := p.Send(ctx, &pulsar.ProducerMessage{Value: &rec{A: int32(i)}}); err != nil {
			t.Fatalf("send with definition %d: %v", i, err)
		}
	}
	if vs, err := pb.Schemas(ctx, topic+"-avro"); err != nil || len(vs) != 2 {
		t.Fatalf("avro topic: %d versions, %v; want 2", len(vs), err)
	}
}
