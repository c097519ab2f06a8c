package broker

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"

	qpulsar "quire/internal/pulsar"
	"quire/internal/testutil"
)

// TestPulsarNonPersistentTopic: what is published before a subscription
// exists is dropped; a subscriber gets what follows, once; acknowledged
// messages leave the topic's memory.
func TestPulsarNonPersistentTopic(t *testing.T) {
	c := newTestCluster(t)
	b, _ := c.startPulsarBroker(nil)
	client := pulsarClient(t, b)
	ctx := pulsarContext(t)
	const topic = "non-persistent://public/default/np"

	p := newProducer(t, client, pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
	sendAll(ctx, t, p, 0, 3) // nobody subscribed: dropped
	cons := newConsumer(t, client, pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "s",
		SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest})
	sendAll(ctx, t, p, 3, 8)
	for want := 3; want < 8; want++ {
		msg := receiveOne(ctx, t, cons)
		if got := string(msg.Payload()); got != strconv.Itoa(want) {
			t.Fatalf("received %q, want %d", got, want)
		}
		if err := cons.Ack(msg); err != nil {
			t.Fatal(err)
		}
	}
	quiet, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	if msg, err := cons.Receive(quiet); err == nil {
		t.Fatalf("an extra message: %q", msg.Payload())
	}

	pb := b.pulsar.Load()
	pb.mu.Lock()
	mt := pb.memTopics[topic]
	pb.mu.Unlock()
	if mt == nil {
		t.Fatal("the non-persistent topic is not served")
	}
	testutil.WaitFor(t, "acknowledged messages to leave memory", func() bool {
		mt.mu.Lock()
		defer mt.mu.Unlock()
		return len(mt.entries) == 0 && mt.bytes == 0
	})
	if n, err := pb.PartitionedMetadata(ctx, topic); err != nil || n != 0 {
		t.Fatalf("partitioned metadata: %d, %v", n, err)
	}
}

// TestPulsarMemTopicBound: a subscription that never acknowledges keeps at
// most memTopicMaxEntries messages in memory; older ones are dropped for
// it, and its mark-delete position moves past them.
func TestPulsarMemTopicBound(t *testing.T) {
	mt := &pulsarMemTopic{name: "non-persistent://public/default/b", done: make(chan struct{}),
		grew: make(chan struct{}), subs: map[string]*memCursor{}}
	ctx := context.Background()
	cur, err := mt.Subscription(ctx, "slow", true, qpulsar.Latest)
	if err != nil {
		t.Fatal(err)
	}
	const total = memTopicMaxEntries + 500
	for i := range total {
		var got qpulsar.AppendResult
		if err := mt.Append(ctx, []byte("x"), qpulsar.AppendInfo{}, func(r qpulsar.AppendResult) { got = r }); err != nil {
			t.Fatal(err)
		}
		if got.Err != nil || got.ID != memID(int64(i)) {
			t.Fatalf("append %d: %+v", i, got)
		}
	}
	mt.mu.Lock()
	held, bytes, first := len(mt.entries), mt.bytes, mt.first
	mt.mu.Unlock()
	if held != memTopicMaxEntries || bytes != memTopicMaxEntries || first != total-memTopicMaxEntries {
		t.Fatalf("held %d entries (%d bytes) from %d, want %d from %d", held, bytes, first, memTopicMaxEntries, total-memTopicMaxEntries)
	}
	if md := cur.MarkDelete(); md != memID(first-1) {
		t.Fatalf("mark-delete %v, want %v", md, memID(first-1))
	}
	es, err := mt.Read(ctx, memID(0), 10)
	if err != nil || len(es) != 10 || es[0].ID != memID(first) {
		t.Fatalf("read from 0: %d entries from %v, %v", len(es), es[0].ID, err)
	}
	// Acknowledging everything frees it all.
	if err := cur.AckCumulative(ctx, qpulsar.Latest); err != nil {
		t.Fatal(err)
	}
	mt.mu.Lock()
	defer mt.mu.Unlock()
	if len(mt.entries) != 0 || mt.bytes != 0 {
		t.Fatalf("after acknowledging all: %d entries, %d bytes", len(mt.entries), mt.bytes)
	}
}
