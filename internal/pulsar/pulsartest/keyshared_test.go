package pulsartest_test

// Key_Shared, delayed delivery, dead-letter topics and the bound of
// unacknowledged messages per subscription, with the real Go client.

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"

	qpulsar "quire/internal/pulsar"
	"quire/internal/pulsar/pulsartest"
	"quire/internal/testutil"
)

// keyedPayload is "<key>/<n>": the n-th message of a key.
func keyedPayload(key string, n int) []byte { return []byte(key + "/" + strconv.Itoa(n)) }

func parseKeyed(t *testing.T, msg pulsar.Message) (key string, n int) {
	t.Helper()
	key, n, ok := splitKeyed(msg)
	if !ok {
		t.Fatalf("payload %q is not <key>/<n>", msg.Payload())
	}
	return key, n
}

func splitKeyed(msg pulsar.Message) (key string, n int, ok bool) {
	key, num, ok := strings.Cut(string(msg.Payload()), "/")
	n, err := strconv.Atoi(num)
	return key, n, ok && err == nil
}

// dispatchStats waits until the broker has the subscription open and
// returns its dispatch state.
func (b *broker) dispatchStats(topic, sub string) qpulsar.DispatchStats {
	b.t.Helper()
	var st qpulsar.DispatchStats
	testutil.WaitFor(b.t, "subscription "+sub+" open", func() bool {
		var ok bool
		st, ok = b.server.DispatchStats(topic, sub)
		return ok
	})
	return st
}

// consumerStats is the named consumer's part of st.
func consumerStats(t *testing.T, st qpulsar.DispatchStats, name string) qpulsar.ConsumerDispatchStats {
	t.Helper()
	for _, c := range st.Consumers {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("no consumer %q in %+v", name, st)
	return qpulsar.ConsumerDispatchStats{}
}

// owns reports whether a key's slot is in a consumer's ranges.
func owns(c qpulsar.ConsumerDispatchStats, key string) bool {
	slot := qpulsar.KeyHashSlot([]byte(key))
	for _, r := range c.KeyHashRanges {
		if r[0] <= slot && slot <= r[1] {
			return true
		}
	}
	return false
}

// Three AUTO_SPLIT consumers: every key goes to one consumer only, in its
// order, and every message arrives once; with key-based batches too.
func TestKeySharedKeysStayOnOneConsumer(t *testing.T) {
	for _, batched := range []bool{false, true} {
		t.Run(fmt.Sprintf("key-based batches=%v", batched), func(t *testing.T) {
			const keys, perKey = 24, 25
			b := newBroker(t, &pulsartest.Backend{EntriesPerLedger: 40})
			c := b.client()
			ctx := testContext(t)
			topic := fmt.Sprintf("persistent://public/default/key-shared-%v", batched)
			var consumers []pulsar.Consumer
			for i := range 3 {
				consumers = append(consumers, subscribe(t, c, pulsar.ConsumerOptions{
					Topic: topic, SubscriptionName: "s", Type: pulsar.KeyShared,
					Name: fmt.Sprintf("c%d", i), ReceiverQueueSize: 10,
				}))
			}
			opts := pulsar.ProducerOptions{Topic: topic, DisableBatching: true}
			if batched {
				opts = pulsar.ProducerOptions{Topic: topic, BatcherBuilderType: pulsar.KeyBasedBatchBuilder,
					BatchingMaxMessages: 8, BatchingMaxPublishDelay: 2 * time.Millisecond}
			}
			p := producer(t, c, opts)
			var sendWG sync.WaitGroup
			var sendMu sync.Mutex
			var sendErr error
			for n := range perKey {
				for k := range keys {
					key := fmt.Sprintf("key-%d", k)
					msg := &pulsar.ProducerMessage{Key: key, Payload: keyedPayload(key, n)}
					if k%2 == 1 {
						// Odd keys also carry an ordering key, which wins.
						msg.OrderingKey = "ordering-" + key
					}
					sendWG.Add(1)
					p.SendAsync(ctx, msg, func(_ pulsar.MessageID, _ *pulsar.ProducerMessage, err error) {
						defer sendWG.Done()
						if err != nil {
							sendMu.Lock()
							sendErr = err
							sendMu.Unlock()
						}
					})
				}
			}
			if err := p.Flush(); err != nil {
				t.Fatal(err)
			}
			sendWG.Wait()
			if sendErr != nil {
				t.Fatalf("send: %v", sendErr)
			}

			var mu sync.Mutex
			owner := map[string]int{}
			next := map[string]int{}
			total := 0
			var wg sync.WaitGroup
			for i, cons := range consumers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for {
						msg, err := cons.Receive(ctx)
						if err != nil {
							return // closed once everything arrived, or the deadline
						}
						key, n, ok := splitKeyed(msg)
						if !ok {
							t.Errorf("payload %q is not <key>/<n>", msg.Payload())
						}
						cons.Ack(msg)
						mu.Lock()
						if o, ok := owner[key]; ok && o != i {
							t.Errorf("%s went to consumers %d and %d", key, o, i)
						}
						owner[key] = i
						if n != next[key] {
							t.Errorf("%s: message %d, want %d", key, n, next[key])
						}
						next[key] = n + 1
						total++
						done := total == keys*perKey
						mu.Unlock()
						if done {
							ctxCancelAll(consumers)
							return
						}
					}
				}()
			}
			wg.Wait()
			if total != keys*perKey {
				t.Fatalf("received %d messages of %d", total, keys*perKey)
			}
			used := map[int]bool{}
			for _, o := range owner {
				used[o] = true
			}
			if len(used) < 2 {
				t.Errorf("%d keys all went to one consumer", keys)
			}
		})
	}
}

// A consumer that joins takes over some keys; it gets none of their new
// messages while their earlier ones are unacknowledged on the consumer
// that had them, and gets them once those are acknowledged. With
// allowOutOfOrderDelivery it gets them at once.
func TestKeySharedJoinWaitsForAcks(t *testing.T) {
	for _, outOfOrder := range []bool{false, true} {
		t.Run(fmt.Sprintf("allowOutOfOrderDelivery=%v", outOfOrder), func(t *testing.T) {
			const keys = 16
			b := newBroker(t, nil)
			c := b.client()
			ctx := testContext(t)
			topic := fmt.Sprintf("persistent://public/default/key-shared-join-%v", outOfOrder)
			var policy *pulsar.KeySharedPolicy
			if outOfOrder {
				policy = &pulsar.KeySharedPolicy{AllowOutOfOrderDelivery: true}
			}
			options := func(name string) pulsar.ConsumerOptions {
				return pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "s", Type: pulsar.KeyShared,
					Name: name, KeySharedPolicy: policy, ReceiverQueueSize: 100}
			}
			first := subscribe(t, c, options("a"))
			p := producer(t, c, pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
			send := func(n int) {
				for k := range keys {
					key := fmt.Sprintf("key-%d", k)
					if _, err := p.Send(ctx, &pulsar.ProducerMessage{Key: key, Payload: keyedPayload(key, n)}); err != nil {
						t.Fatal(err)
					}
				}
			}
			send(0)
			var unacked []pulsar.Message
			for range keys {
				unacked = append(unacked, receive(ctx, t, first))
			}

			joined := subscribe(t, c, options("b"))
			// The new consumer's FLOW has arrived: what it does not get
			// below is held back, not waiting for permits.
			testutil.WaitFor(t, "b attached with permits", func() bool {
				st, _ := b.server.DispatchStats(topic, "s")
				return len(st.Consumers) == 2 && consumerStats(t, st, "b").AvailablePermits > 0
			})
			send(1)
			st := b.dispatchStats(topic, "s")
			moved := 0
			for k := range keys {
				if owns(consumerStats(t, st, "b"), fmt.Sprintf("key-%d", k)) {
					moved++
				}
			}
			if moved == 0 || moved == keys {
				t.Fatalf("%d of %d keys moved to the new consumer: the test proves nothing", moved, keys)
			}

			if outOfOrder {
				for range moved {
					msg := receive(ctx, t, joined)
					if key, n := parseKeyed(t, msg); n != 1 || !owns(consumerStats(t, st, "b"), key) {
						t.Fatalf("new consumer got %s/%d", key, n)
					}
				}
				return
			}
			testutil.WaitFor(t, "every new message sent or held back", func() bool {
				st, _ = b.server.DispatchStats(topic, "s")
				return st.UnackedMessages+int64(st.WaitingForDelivery) == 2*keys
			})
			if got := consumerStats(t, st, "b").UnackedMessages; got != 0 {
				t.Fatalf("the new consumer was sent %d messages of keys whose earlier messages are unacknowledged", got)
			}
			if st.WaitingForDelivery != moved {
				t.Fatalf("%d entries held back, want the %d of the keys that moved", st.WaitingForDelivery, moved)
			}
			// The old consumer goes on with the keys it kept.
			for range keys - moved {
				msg := receive(ctx, t, first)
				if key, n := parseKeyed(t, msg); n != 1 || owns(consumerStats(t, st, "b"), key) {
					t.Fatalf("old consumer got %s/%d", key, n)
				}
				first.Ack(msg)
			}
			// Acknowledging the earlier messages releases the rest, each
			// key to the new consumer, in order.
			for _, msg := range unacked {
				if err := first.Ack(msg); err != nil {
					t.Fatal(err)
				}
			}
			for range moved {
				msg := receive(ctx, t, joined)
				if key, n := parseKeyed(t, msg); n != 1 || !owns(consumerStats(t, st, "b"), key) {
					t.Fatalf("new consumer got %s/%d", key, n)
				}
			}
		})
	}
}

// STICKY consumers get the keys whose slots they declared; keys of slots
// nobody declared wait for a consumer that does; overlapping ranges and
// another mode are refused.
func TestKeySharedStickyRanges(t *testing.T) {
	const keys = 40
	b := newBroker(t, nil)
	c := b.client()
	ctx := testContext(t)
	topic := "persistent://public/default/key-shared-sticky"
	stickyOptions := func(name string, ranges ...int) pulsar.ConsumerOptions {
		policy, err := pulsar.NewKeySharedPolicySticky(ranges)
		if err != nil {
			t.Fatal(err)
		}
		return pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "s", Type: pulsar.KeyShared, Name: name, KeySharedPolicy: policy}
	}
	low := subscribe(t, c, stickyOptions("low", 0, 32767))
	p := producer(t, c, pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
	lowKeys := 0
	for k := range keys {
		key := fmt.Sprintf("key-%d", k)
		if qpulsar.KeyHashSlot([]byte(key)) <= 32767 {
			lowKeys++
		}
		if _, err := p.Send(ctx, &pulsar.ProducerMessage{Key: key, Payload: keyedPayload(key, 0)}); err != nil {
			t.Fatal(err)
		}
	}
	if lowKeys == 0 || lowKeys == keys {
		t.Fatalf("%d of %d keys in the lower half: the test proves nothing", lowKeys, keys)
	}
	for range lowKeys {
		msg := receive(ctx, t, low)
		if slot := qpulsar.KeyHashSlot([]byte(msg.Key())); slot > 32767 {
			t.Fatalf("consumer of [0, 32767] got %s of slot %d", msg.Key(), slot)
		}
		low.Ack(msg)
	}
	testutil.WaitFor(t, "the upper half's keys held back", func() bool {
		st, _ := b.server.DispatchStats(topic, "s")
		return st.WaitingForDelivery == keys-lowKeys
	})

	for _, tc := range []struct {
		name string
		opts pulsar.ConsumerOptions
		want string
	}{
		{"overlapping range", stickyOptions("overlap", 30000, 40000), "ConsumerAssignError"},
		{"AUTO_SPLIT consumer", pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "s", Type: pulsar.KeyShared, Name: "auto"}, "ConsumerBusy"},
	} {
		cons, err := c.Subscribe(tc.opts)
		if err == nil {
			cons.Close()
			t.Fatalf("%s accepted", tc.name)
		}
		if !strings.Contains(err.Error(), tc.want) {
			t.Fatalf("%s: %v, want %s", tc.name, err, tc.want)
		}
	}

	high := subscribe(t, c, stickyOptions("high", 32768, 65535))
	for range keys - lowKeys {
		msg := receive(ctx, t, high)
		if slot := qpulsar.KeyHashSlot([]byte(msg.Key())); slot < 32768 {
			t.Fatalf("consumer of [32768, 65535] got %s of slot %d", msg.Key(), slot)
		}
		high.Ack(msg)
	}
	st := b.dispatchStats(topic, "s")
	if st.KeySharedMode != "STICKY" || len(st.Consumers) != 2 {
		t.Fatalf("stats %+v", st)
	}
	if got := consumerStats(t, st, "high").KeyHashRanges; len(got) != 1 || got[0] != [2]int32{32768, 65535} {
		t.Fatalf("high's ranges %v", got)
	}
}

// A consumer leaving hands its keys to the others, its unacknowledged
// messages first, so that each key stays in order.
func TestKeySharedConsumerLeavesKeepsOrder(t *testing.T) {
	const keys, perKey = 12, 10
	b := newBroker(t, nil)
	c := b.client()
	ctx := testContext(t)
	topic := "persistent://public/default/key-shared-leave"
	options := func(name string) pulsar.ConsumerOptions {
		return pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "s", Type: pulsar.KeyShared, Name: name, ReceiverQueueSize: 200}
	}
	leaving := subscribe(t, c, options("a"))
	staying := subscribe(t, c, options("b"))
	testutil.WaitFor(t, "both consumers with permits", func() bool {
		st, _ := b.server.DispatchStats(topic, "s")
		return len(st.Consumers) == 2 && st.Consumers[0].AvailablePermits > 0 && st.Consumers[1].AvailablePermits > 0
	})
	p := producer(t, c, pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
	for n := range perKey {
		for k := range keys {
			key := fmt.Sprintf("key-%d", k)
			if _, err := p.Send(ctx, &pulsar.ProducerMessage{Key: key, Payload: keyedPayload(key, n)}); err != nil {
				t.Fatal(err)
			}
		}
	}
	// "a" takes one message and leaves without acknowledging anything.
	testutil.WaitFor(t, "every message dispatched", func() bool {
		st, _ := b.server.DispatchStats(topic, "s")
		return st.UnackedMessages == keys*perKey
	})
	receive(ctx, t, leaving)
	leaving.Close()
	next := map[string]int{}
	for range keys * perKey {
		msg := receive(ctx, t, staying)
		key, n := parseKeyed(t, msg)
		if n != next[key] {
			t.Fatalf("%s: message %d, want %d", key, n, next[key])
		}
		next[key] = n + 1
		staying.Ack(msg)
	}
}

// On Shared, a message with deliver_at_time waits until then; the others
// go on meanwhile.
func TestDelayedDelivery(t *testing.T) {
	const delay = 300 * time.Millisecond
	b := newBroker(t, nil)
	c := b.client()
	ctx := testContext(t)
	topic := "persistent://public/default/delayed"
	cons := subscribe(t, c, pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "s", Type: pulsar.Shared})
	p := producer(t, c, pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
	start := time.Now()
	if _, err := p.Send(ctx, &pulsar.ProducerMessage{Payload: []byte("later"), DeliverAfter: delay}); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Send(ctx, &pulsar.ProducerMessage{Payload: []byte("now")}); err != nil {
		t.Fatal(err)
	}
	if msg := receive(ctx, t, cons); string(msg.Payload()) != "now" {
		t.Fatalf("got %q first, want \"now\"", msg.Payload())
	} else {
		cons.Ack(msg)
	}
	msg := receive(ctx, t, cons)
	if string(msg.Payload()) != "later" {
		t.Fatalf("got %q, want \"later\"", msg.Payload())
	}
	// deliver_at_time is in whole milliseconds: allow the one truncated.
	if elapsed := time.Since(start); elapsed < delay-time.Millisecond {
		t.Fatalf("delayed message delivered after %v, before its delay of %v", elapsed, delay)
	}
	cons.Ack(msg)
}

// The Go client's dead-letter policy: after its redeliveries (counted by
// the broker) the message goes to <topic>-<subscription>-DLQ, and the
// subscription moves past it.
func TestDeadLetterTopic(t *testing.T) {
	const maxDeliveries = 3
	b := newBroker(t, nil)
	c := b.client()
	ctx := testContext(t)
	topic := "persistent://public/default/poison"
	// The name the clients give it by default (the Go client wants it
	// spelled out unless retry topics are on).
	dlqTopic := topic + "-s-DLQ"
	dlq := subscribe(t, c, pulsar.ConsumerOptions{Topic: dlqTopic, SubscriptionName: "d",
		SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest})
	cons := subscribe(t, c, pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "s", Type: pulsar.Shared,
		NackRedeliveryDelay: 20 * time.Millisecond, DLQ: &pulsar.DLQPolicy{MaxDeliveries: maxDeliveries, DeadLetterTopic: dlqTopic}})
	p := producer(t, c, pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
	if _, err := p.Send(ctx, &pulsar.ProducerMessage{Payload: []byte("poison")}); err != nil {
		t.Fatal(err)
	}
	nackCtx, stopNacking := context.WithCancel(ctx)
	nacked := make(chan uint32, 2*maxDeliveries)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			msg, err := cons.Receive(nackCtx)
			if err != nil {
				return
			}
			select {
			case nacked <- msg.RedeliveryCount():
			case <-nackCtx.Done():
				return
			}
			cons.Nack(msg)
		}
	}()
	msg := receive(ctx, t, dlq)
	stopNacking()
	<-done
	if string(msg.Payload()) != "poison" {
		t.Fatalf("DLQ got %q", msg.Payload())
	}
	close(nacked)
	var counts []uint32
	for n := range nacked {
		counts = append(counts, n)
	}
	for i, n := range counts {
		if n != uint32(i) {
			t.Fatalf("redelivery counts %v, want 0, 1, 2, …", counts)
		}
	}
	// The client routes the message to the DLQ when it comes with a
	// redelivery count of maxDeliveries: after that many nacks.
	if len(counts) != maxDeliveries {
		t.Fatalf("delivered %d times before the DLQ, want %d", len(counts), maxDeliveries)
	}
	tp := b.backend.CreateTopic(topic)
	testutil.WaitFor(t, "the subscription past the dead letter", func() bool {
		return tp.Cursor("s").MarkDelete() == tp.LastMessageID()
	})
}

// A subscription at its bound of unacknowledged messages (4 × the
// per-consumer bound) is blocked until acknowledgements bring it to half.
func TestMaxUnackedPerSubscription(t *testing.T) {
	const perConsumer, consumers = 5, 5
	const perSubscription = 4 * perConsumer // 20, below 5 × 5
	b := newBroker(t, nil, func(c *qpulsar.Config) { c.MaxUnackedPerConsumer = perConsumer })
	c := b.client()
	ctx := testContext(t)
	topic := "persistent://public/default/unacked-subscription"
	received := make(chan pulsar.ConsumerMessage, 100)
	for i := range consumers {
		cons := subscribe(t, c, pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "s", Type: pulsar.Shared,
			Name: fmt.Sprintf("c%d", i), ReceiverQueueSize: 50})
		go func() {
			for {
				select {
				case m := <-cons.Chan():
					received <- m
				case <-ctx.Done():
					return
				}
			}
		}()
	}
	p := producer(t, c, pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
	for i := range 60 {
		if _, err := p.Send(ctx, &pulsar.ProducerMessage{Payload: []byte(strconv.Itoa(i))}); err != nil {
			t.Fatal(err)
		}
	}
	waitUnacked := func(want int64, blocked bool) {
		t.Helper()
		testutil.WaitFor(t, fmt.Sprintf("%d unacked, blocked %v", want, blocked), func() bool {
			st, _ := b.server.DispatchStats(topic, "s")
			return st.UnackedMessages == want && st.BlockedOnUnackedMessages == blocked
		})
	}
	waitUnacked(perSubscription, true)
	ack := func(n int) {
		for range n {
			select {
			case m := <-received:
				m.Consumer.Ack(m.Message)
			case <-ctx.Done():
				t.Fatal("no message to acknowledge")
			}
		}
	}
	// Above half: still blocked, nothing more delivered.
	ack(perSubscription/2 - 1)
	waitUnacked(perSubscription/2+1, true)
	// At half: unblocked, and delivering fills it up to the bound again.
	ack(1)
	waitUnacked(perSubscription, true)
	if st := b.dispatchStats(topic, "s"); st.MaxUnackedMessages != perSubscription {
		t.Fatalf("MaxUnackedMessages %d, want %d", st.MaxUnackedMessages, perSubscription)
	}
}

// The Go client's retry topic: ReconsumeLater produces the message to
// <topic>-<subscription>-RETRY with a delivery time, which the broker
// holds until then; the consumer, subscribed to both, gets it back with
// its reconsume count.
func TestRetryTopic(t *testing.T) {
	const delay = 200 * time.Millisecond
	b := newBroker(t, nil)
	c := b.client()
	ctx := testContext(t)
	topic := "persistent://public/default/retried"
	cons := subscribe(t, c, pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "s", Type: pulsar.Shared, RetryEnable: true})
	p := producer(t, c, pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
	if _, err := p.Send(ctx, &pulsar.ProducerMessage{Payload: []byte("again")}); err != nil {
		t.Fatal(err)
	}
	msg := receive(ctx, t, cons)
	start := time.Now()
	cons.ReconsumeLater(msg, delay)
	msg = receive(ctx, t, cons)
	// deliver_at_time is in whole milliseconds: allow the one truncated.
	if elapsed := time.Since(start); elapsed < delay-time.Millisecond {
		t.Fatalf("retried message back after %v, before its delay of %v", elapsed, delay)
	}
	if string(msg.Payload()) != "again" || msg.Properties()["RECONSUMETIMES"] != "1" {
		t.Fatalf("got %q with properties %v, want \"again\" reconsumed once", msg.Payload(), msg.Properties())
	}
	if err := cons.Ack(msg); err != nil {
		t.Fatal(err)
	}
	tp := b.backend.CreateTopic(topic)
	testutil.WaitFor(t, "the original acknowledged", func() bool {
		return tp.Cursor("s").MarkDelete() == tp.LastMessageID()
	})
}
