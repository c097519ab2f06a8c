package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	pulsarlog "github.com/apache/pulsar-client-go/pulsar/log"

	"quire/internal/testutil"
)

// TestPulsarBrokerFailover runs etcd, three bookie processes and two broker
// processes serving Pulsar. A pulsar-client-go producer with a name, in a
// namespace with deduplication on, keeps sending while a consumer receives
// and acknowledges; the broker that owns the topic is SIGKILLed. Both
// clients must look the topic up again and continue on the survivor; every
// message the producer got a receipt for must be consumed, and no message
// may be stored twice (deduplication drops the producer's resends of what
// the dead broker had already written).
func TestPulsarBrokerFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("runs six processes")
	}
	endpoint := startTestMeta(t)
	startBookieProcesses(t, endpoint, "a", "b", "c")
	brokers := map[int32]*quireProcess{}
	pulsarAddrs := map[int32]string{}
	httpAddrs := map[int32]string{}
	for _, id := range []int32{1, 2} {
		pulsarAddrs[id], httpAddrs[id] = freeAddr(t), freeAddr(t)
		brokers[id] = startQuire(t, "broker", "--meta-endpoints", endpoint, "--broker-id", strconv.Itoa(int(id)),
			"--kafka-addr", freeAddr(t), "--http-addr", httpAddrs[id], "--pulsar-addr", pulsarAddrs[id],
			"--broker-session-ttl", "3s")
	}
	waitBrokers(t, endpoint, 2, brokers)
	for id, p := range brokers {
		waitHTTP(t, p, "http://"+httpAddrs[id]+"/readyz", 30*time.Second)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	// Namespace policies apply to topics loaded after they are set:
	// deduplication, and retention so that the log can be read back in full
	// after the consumer acknowledged it.
	adminPost(t, ctx, "http://"+httpAddrs[1]+"/admin/v2/namespaces/public/default/deduplication", "true")
	adminPost(t, ctx, "http://"+httpAddrs[1]+"/admin/v2/namespaces/public/default/retention",
		`{"retentionTimeInMinutes": 60, "retentionSizeInMB": 1024}`)

	client, err := pulsar.NewClient(pulsar.ClientOptions{
		URL:              "pulsar://" + pulsarAddrs[1] + "," + pulsarAddrs[2],
		OperationTimeout: 30 * time.Second, ConnectionTimeout: 5 * time.Second,
		Logger: pulsarlog.NewLoggerWithSlog(slog.New(slog.NewTextHandler(io.Discard, nil))),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	const topic = "persistent://public/default/pulsar-failover"
	producer, err := client.CreateProducer(pulsar.ProducerOptions{Topic: topic, Name: "failover-producer",
		SendTimeout: 90 * time.Second, BatchingMaxPublishDelay: 2 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer producer.Close()
	consumer, err := client.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "s",
		Type: pulsar.Exclusive, SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest})
	if err != nil {
		t.Fatal(err)
	}
	defer consumer.Close()

	owner := pulsarOwner(t, ctx, httpAddrs[1], topic, pulsarAddrs)
	victim := brokers[owner]

	var mu sync.Mutex
	acked := map[string]bool{}               // payloads with a receipt
	received := map[string]map[string]bool{} // payload → the message ids it came with
	var failed int
	var firstErr error
	var killed bool
	var ackedAfterKill int
	// dropped counts receipts for -1:-1, the answer to a resend that
	// deduplication recognised: the dead broker had stored it already.
	var dropped int
	stop := make(chan struct{})
	produced := make(chan struct{})
	go func() {
		defer close(produced)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			mu.Lock()
			afterKill := killed
			mu.Unlock()
			// SendAsync blocks while MaxPendingMessages are in flight:
			// backpressure, also while the topic moves.
			producer.SendAsync(ctx, &pulsar.ProducerMessage{Payload: []byte("seq-" + strconv.Itoa(i))},
				func(id pulsar.MessageID, m *pulsar.ProducerMessage, err error) {
					mu.Lock()
					defer mu.Unlock()
					if err != nil {
						failed++
						if firstErr == nil {
							firstErr = err
						}
						return
					}
					acked[string(m.Payload)] = true
					if id != nil && id.LedgerID() < 0 {
						dropped++
					}
					if afterKill {
						ackedAfterKill++
					}
				})
		}
	}()
	consumed := make(chan struct{})
	go func() {
		defer close(consumed)
		for {
			msg, err := consumer.Receive(ctx)
			if err != nil {
				return // the test's context ended
			}
			mu.Lock()
			ids := received[string(msg.Payload())]
			if ids == nil {
				ids = map[string]bool{}
				received[string(msg.Payload())] = ids
			}
			ids[msg.ID().String()] = true
			mu.Unlock()
			// A redelivery after the failover may repeat a message whose
			// acknowledgement died with the broker: that is the same id
			// again, never a second copy.
			_ = consumer.Ack(msg)
		}
	}()
	counts := func() (int, int) {
		mu.Lock()
		defer mu.Unlock()
		return len(acked), len(received)
	}
	testutil.WaitForWithin(t, 60*time.Second, "2,000 receipts and 1,000 messages consumed before the kill", func() bool {
		a, r := counts()
		return a >= 2000 && r >= 1000
	})
	mu.Lock()
	killed = true
	mu.Unlock()
	if err := victim.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	killedAt := time.Now()
	before, _ := counts()
	testutil.WaitForWithin(t, 60*time.Second, "2,000 receipts for messages sent after the kill", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return ackedAfterKill >= 2000
	})
	resumedAfter := time.Since(killedAt)
	close(stop)
	<-produced
	if err := producer.Flush(); err != nil {
		t.Fatalf("flush: %v", err)
	}
	survivor := 3 - owner
	if got := pulsarOwner(t, ctx, httpAddrs[survivor], topic, pulsarAddrs); got != survivor {
		t.Errorf("after the kill the topic is owned by broker %d, want %d", got, survivor)
	}
	testutil.WaitForWithin(t, 60*time.Second, "the consumer to receive every acknowledged message", func() bool {
		mu.Lock()
		defer mu.Unlock()
		for p := range acked {
			if received[p] == nil {
				return false
			}
		}
		return true
	})
	mu.Lock()
	total, nFailed, err1, nDropped := len(acked), failed, firstErr, dropped
	var twice []string
	for p, ids := range received {
		if len(ids) > 1 {
			twice = append(twice, fmt.Sprintf("%s at %d ids", p, len(ids)))
		}
	}
	mu.Unlock()
	t.Logf("broker %d killed after %d receipts; 2,000 receipts for later sends %v after the kill; %d receipts in all, %d of them for resends deduplication dropped",
		owner, before, resumedAfter.Round(time.Millisecond), total, nDropped)
	if nFailed > 0 {
		t.Errorf("%d sends failed (the producer should resend through the failover), the first: %v", nFailed, err1)
	}
	if len(twice) > 0 {
		sort.Strings(twice)
		t.Errorf("%d messages consumed under two message ids (stored twice), the first: %v", len(twice), twice[:min(10, len(twice))])
	}

	// The log itself, read from the start on the survivor: every
	// acknowledged message once, in the order sent.
	reader, err := client.CreateReader(pulsar.ReaderOptions{Topic: topic, StartMessageID: pulsar.EarliestMessageID()})
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Close()
	stored := map[string]int{}
	last := -1
	for reader.HasNext() {
		msg, err := reader.Next(ctx)
		if err != nil {
			t.Fatalf("read back after %d messages: %v", len(stored), err)
		}
		p := string(msg.Payload())
		stored[p]++
		seq, _ := strconv.Atoi(strings.TrimPrefix(p, "seq-"))
		if seq <= last {
			t.Errorf("stored out of order or twice: %s after seq-%d at %v", p, last, msg.ID())
		}
		last = seq
	}
	mu.Lock()
	defer mu.Unlock()
	var missing []string
	for p := range acked {
		if stored[p] == 0 {
			missing = append(missing, p)
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Errorf("%d acknowledged messages not in the log (%d read), the first: %v", len(missing), len(stored), missing[:min(10, len(missing))])
	}
}

// adminPost posts a JSON body to a broker's admin API and wants 2xx.
func adminPost(t *testing.T, ctx context.Context, url, body string) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		out, _ := io.ReadAll(resp.Body)
		t.Fatalf("POST %s: %s %s", url, resp.Status, out)
	}
}

// pulsarOwner asks a broker's HTTP lookup which broker serves topic.
func pulsarOwner(t *testing.T, ctx context.Context, httpAddr, topic string, pulsarAddrs map[int32]string) int32 {
	t.Helper()
	url := "http://" + httpAddr + "/lookup/v2/topic/" + strings.Replace(topic, "://", "/", 1)
	var owner int32
	testutil.WaitForWithin(t, 30*time.Second, "the topic's lookup", func() bool {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		var out struct {
			BrokerURL string `json:"brokerUrl"`
		}
		if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&out) != nil {
			return false
		}
		for id, addr := range pulsarAddrs {
			if out.BrokerURL == "pulsar://"+addr {
				owner = id
				return true
			}
		}
		return false
	})
	return owner
}
