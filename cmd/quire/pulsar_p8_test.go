package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	pulsarlog "github.com/apache/pulsar-client-go/pulsar/log"

	"quire/internal/testutil"
)

// TestPulsarOneUnackedMessage is the seed's P8 on a real standalone: among
// 100,000 messages (in three ledgers: the topic is unloaded twice while
// they are produced) one is never acknowledged. The storage keeps every
// ledger, the backlog is that one entry, the mark-delete position stays
// just before it, and the stats and metrics show it. Then the consumer
// negatively acknowledges it until, after its dead-letter policy's
// deliveries, the client moves it to the dead-letter topic: the mark-delete
// position reaches the end and the ledgers before the current one are
// trimmed.
func TestPulsarOneUnackedMessage(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a quire standalone")
	}
	dir := t.TempDir()
	pulsarAddr, httpAddr := freeAddr(t), freeAddr(t)
	proc := startQuire(t, "standalone", "--data-dir", dir, "--http-addr", httpAddr, "--kafka-addr", freeAddr(t),
		"--pulsar-addr", pulsarAddr, "--meta-client-addr", freeAddr(t), "--meta-peer-addr", freeAddr(t),
		"--bookie-addrs", strings.Join([]string{freeAddr(t), freeAddr(t), freeAddr(t)}, ","))
	waitHTTP(t, proc, "http://"+httpAddr+"/readyz", 30*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	client, err := pulsar.NewClient(pulsar.ClientOptions{URL: "pulsar://" + pulsarAddr, OperationTimeout: 30 * time.Second,
		Logger: pulsarlog.NewLoggerWithSlog(slog.New(slog.NewTextHandler(io.Discard, nil)))})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	const topic, sub, total, poison = "persistent://public/default/p8", "s", 100_000, "m-500"
	const maxDeliveries = 3
	dlq := topic + "-" + sub + "-DLQ"
	admin := "http://" + httpAddr + "/admin/v2/persistent/public/default/p8"

	// One message an entry, so that the unacknowledged one is alone.
	producer, err := client.CreateProducer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true, SendTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer producer.Close()
	consumer, err := client.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: sub, Type: pulsar.Shared,
		SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest, NackRedeliveryDelay: 100 * time.Millisecond,
		DLQ: &pulsar.DLQPolicy{MaxDeliveries: maxDeliveries, DeadLetterTopic: dlq}})
	if err != nil {
		t.Fatal(err)
	}
	defer consumer.Close()

	// The consumer acknowledges everything but the poison message, which it
	// holds until nack is set, and from then on negatively acknowledges.
	var mu sync.Mutex
	received := map[string]bool{}
	var held pulsar.Message
	nack := make(chan struct{})
	go func() {
		for {
			msg, err := consumer.Receive(ctx)
			if err != nil {
				return
			}
			p := string(msg.Payload())
			mu.Lock()
			received[p] = true
			mu.Unlock()
			if p != poison {
				consumer.Ack(msg)
				continue
			}
			select {
			case <-nack:
				consumer.Nack(msg)
			default:
				mu.Lock()
				held = msg
				mu.Unlock()
			}
		}
	}()

	send := func(from, to int) {
		t.Helper()
		var wg sync.WaitGroup
		var failed error
		for i := from; i < to; i++ {
			wg.Add(1)
			producer.SendAsync(ctx, &pulsar.ProducerMessage{Payload: []byte("m-" + strconv.Itoa(i))},
				func(_ pulsar.MessageID, _ *pulsar.ProducerMessage, err error) {
					defer wg.Done()
					if err != nil {
						mu.Lock()
						failed = err
						mu.Unlock()
					}
				})
		}
		wg.Wait()
		if failed != nil {
			t.Fatalf("send: %v", failed)
		}
	}
	// Three ledgers: an unload closes the current one; the producer and
	// the consumer follow the topic to its next load.
	send(0, 40_000)
	httpDo(t, ctx, http.MethodPut, admin+"/unload", nil)
	send(40_000, 70_000)
	httpDo(t, ctx, http.MethodPut, admin+"/unload", nil)
	send(70_000, total)
	testutil.WaitForWithin(t, 60*time.Second, "every message received", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(received) == total && held != nil
	})

	var internal struct {
		TotalSize          int64  `json:"totalSize"`
		LastConfirmedEntry string `json:"lastConfirmedEntry"`
		Ledgers            []struct {
			LedgerID int64 `json:"ledgerId"`
			Entries  int64 `json:"entries"`
		} `json:"ledgers"`
		Cursors map[string]struct {
			MarkDeletePosition string `json:"markDeletePosition"`
		} `json:"cursors"`
	}
	var stats struct {
		StorageSize   int64 `json:"storageSize"`
		Subscriptions map[string]struct {
			MsgBacklog int64 `json:"msgBacklog"`
		} `json:"subscriptions"`
	}
	poisonID := held.ID()
	stuckAt := fmt.Sprintf("%d:%d", poisonID.LedgerID(), poisonID.EntryID()-1)
	// Acknowledgements travel asynchronously: wait until all but the
	// poison's are in.
	testutil.WaitForWithin(t, 30*time.Second, "the backlog to be the one unacknowledged entry", func() bool {
		httpJSON(t, ctx, admin+"/stats", &stats)
		return stats.Subscriptions[sub].MsgBacklog == 1
	})
	httpJSON(t, ctx, admin+"/internalStats", &internal)
	if len(internal.Ledgers) < 3 {
		t.Fatalf("%d ledgers, want 3 or more (two unloads): %+v", len(internal.Ledgers), internal.Ledgers)
	}
	if md := internal.Cursors[sub].MarkDeletePosition; md != stuckAt {
		t.Fatalf("mark-delete position %s, want %s (just before the unacknowledged %v)", md, stuckAt, poisonID)
	}
	storageStuck := stats.StorageSize
	metrics := httpText(t, ctx, "http://"+httpAddr+"/metrics")
	for series, want := range map[string]float64{
		`pulsar_subscription_back_log{subscription="s",topic="` + topic + `"}`: 1,
		`pulsar_storage_size{topic="` + topic + `"}`:                           float64(storageStuck),
	} {
		if got, ok := metricValue(metrics, series); !ok || got != want {
			t.Errorf("metric %s = %v (found %v), want %v", series, got, ok, want)
		}
	}
	t.Logf("stuck: %d ledgers, %d bytes stored, backlog 1 entry, mark-delete %s", len(internal.Ledgers), storageStuck, stuckAt)

	// Negative acknowledgements until the dead-letter topic takes it.
	close(nack)
	mu.Lock()
	consumer.Nack(held)
	mu.Unlock()
	dlqConsumer, err := client.Subscribe(pulsar.ConsumerOptions{Topic: dlq, SubscriptionName: "check",
		SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest})
	if err != nil {
		t.Fatal(err)
	}
	defer dlqConsumer.Close()
	msg, err := dlqConsumer.Receive(ctx)
	if err != nil {
		t.Fatalf("the dead-letter topic: %v", err)
	}
	if string(msg.Payload()) != poison {
		t.Fatalf("the dead-letter topic holds %q, want %q", msg.Payload(), poison)
	}
	testutil.WaitForWithin(t, 60*time.Second, "the mark-delete position to reach the end and old ledgers to be trimmed", func() bool {
		httpJSON(t, ctx, admin+"/internalStats", &internal)
		return internal.Cursors[sub].MarkDeletePosition == internal.LastConfirmedEntry && len(internal.Ledgers) == 1
	})
	httpJSON(t, ctx, admin+"/stats", &stats)
	if b := stats.Subscriptions[sub].MsgBacklog; b != 0 {
		t.Errorf("backlog %d after the dead-letter move, want 0", b)
	}
	if stats.StorageSize >= storageStuck {
		t.Errorf("storage %d bytes after trimming, not below the %d held before", stats.StorageSize, storageStuck)
	}
	t.Logf("after %d deliveries the message is in %s; mark-delete %s, %d ledger, %d bytes stored",
		maxDeliveries, dlq, internal.LastConfirmedEntry, len(internal.Ledgers), stats.StorageSize)
}

func httpDo(t *testing.T, ctx context.Context, method, url string, body io.Reader) []byte {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, method, url, body)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	if resp.StatusCode/100 != 2 {
		t.Fatalf("%s %s: %s %s", method, url, resp.Status, out)
	}
	return out
}

func httpJSON(t *testing.T, ctx context.Context, url string, v any) {
	t.Helper()
	if err := json.Unmarshal(httpDo(t, ctx, http.MethodGet, url, nil), v); err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
}

func httpText(t *testing.T, ctx context.Context, url string) string {
	t.Helper()
	return string(httpDo(t, ctx, http.MethodGet, url, nil))
}

// metricValue finds one series (name and labels as Prometheus prints them)
// in a /metrics page.
func metricValue(page, series string) (float64, bool) {
	for _, line := range strings.Split(page, "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return f, err == nil
		}
	}
	return 0, false
}
