package broker

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
	"net"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"quire/internal/ledger/ledgerclient"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// bigBatch is one uncompressed v2 batch of one record holding value.
func bigBatch(value []byte) []byte {
	r := kmsg.Record{Value: value}
	r.Length = int32(len(r.AppendTo(nil)) - 1)
	now := time.Now().UnixMilli()
	rb := kmsg.RecordBatch{Magic: 2, PartitionLeaderEpoch: -1, ProducerID: -1, ProducerEpoch: -1, FirstSequence: -1,
		NumRecords: 1, Records: r.AppendTo(nil), FirstTimestamp: now, MaxTimestamp: now}
	raw := rb.AppendTo(nil)
	binary.BigEndian.PutUint32(raw[8:], uint32(len(raw)-12))
	binary.BigEndian.PutUint32(raw[17:], crc32.Checksum(raw[21:], crc32.MakeTable(crc32.Castagnoli)))
	return raw
}

// produceRaw sends one acks=all Produce of batch to topic/partition on its
// own connection and returns the partition's answer.
func produceRaw(addr, topic string, partition int32, batch []byte) (kmsg.ProduceResponseTopicPartition, error) {
	var none kmsg.ProduceResponseTopicPartition
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		return none, err
	}
	defer nc.Close()
	req := kmsg.NewPtrProduceRequest()
	req.SetVersion(9)
	req.Acks, req.TimeoutMillis = -1, 60_000
	rt := kmsg.NewProduceRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewProduceRequestTopicPartition()
	rp.Partition, rp.Records = partition, batch
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	frame := kmsg.NewRequestFormatter(kmsg.FormatterClientID("budget")).AppendRequest(nil, req, 1)
	if _, err := nc.Write(frame); err != nil {
		return none, err
	}
	_ = nc.SetReadDeadline(time.Now().Add(2 * time.Minute))
	br := bufio.NewReader(nc)
	var size [4]byte
	if _, err := io.ReadFull(br, size[:]); err != nil {
		return none, fmt.Errorf("read response: %w", err)
	}
	body := make([]byte, binary.BigEndian.Uint32(size[:]))
	if _, err := io.ReadFull(br, body); err != nil {
		return none, fmt.Errorf("read response: %w", err)
	}
	resp := req.ResponseKind().(*kmsg.ProduceResponse)
	if err := resp.ReadFrom(body[5:]); err != nil { // correlation id, header tags
		return none, fmt.Errorf("decode response: %w", err)
	}
	if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
		return none, fmt.Errorf("response names %d topics", len(resp.Topics))
	}
	return resp.Topics[0].Partitions[0], nil
}

// peakRSS is the process's high-water mark of resident memory (VmHWM).
func peakRSS() string {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return "unknown"
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			return strings.TrimSpace(v)
		}
	}
	return "unknown"
}

func counterValue(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if matches(m, labels) {
				sum += m.GetCounter().GetValue() + m.GetGauge().GetValue()
			}
		}
	}
	return sum
}

func matches(m *dto.Metric, labels map[string]string) bool {
	for k, v := range labels {
		found := false
		for _, lp := range m.GetLabel() {
			if lp.GetName() == k && lp.GetValue() == v {
				found = true
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// TestProduceBudgetBoundsMemory: 200 connections each produce 1 MiB at once
// against an 8 MiB broker-wide budget (2 MiB per connection). The broker
// stops reading instead of buffering 200 MiB: every produce is answered,
// every record reads back, the budget was reached (reads paused) and no
// partition was reloaded on the way.
func TestProduceBudgetBoundsMemory(t *testing.T) {
	c := newTestCluster(t)
	reg := prometheus.NewRegistry()
	b, _ := c.startBroker(func(cfg *Config) {
		cfg.Registerer = reg
		cfg.KafkaMaxQueuedRequestBytes = 8 << 20
		cfg.KafkaMaxConnRequestBytes = 2 << 20
	})
	addr := b.cfg.KafkaAdvertised
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const (
		partitions = 4
		valueBytes = 1000 * 1000
	)
	conns := 200
	if raceEnabled {
		conns = 40 // still 5x the budget
	}
	if _, err := kadm.NewClient(newClient(t, addr)).CreateTopic(ctx, partitions, 1, nil, "big"); err != nil {
		t.Fatal(err)
	}
	before := runtime.MemStats{}
	runtime.ReadMemStats(&before)

	values := make([][]byte, conns)
	for i := range values {
		values[i] = make([]byte, valueBytes)
		rand.Read(values[i])
	}
	offsets := make([]int64, conns)
	var wg sync.WaitGroup
	errs := make(chan error, conns)
	for i := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p, err := produceRaw(addr, "big", int32(i%partitions), bigBatch(values[i]))
			if err == nil && p.ErrorCode != 0 {
				err = fmt.Errorf("produce %d: error code %d", i, p.ErrorCode)
			}
			if err != nil {
				errs <- err
				return
			}
			offsets[i] = p.BaseOffset
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	t.Logf("peak RSS %s (the whole test process: 3 bookies, the broker, %d MB of payload built up front); Go heap in use %d MiB after",
		peakRSS(), conns, after.HeapInuse>>20)

	paused := counterValue(t, reg, "quire_kafka_reads_paused_total", nil)
	if paused == 0 {
		t.Fatalf("%d MB against an 8 MiB budget never paused a read: the budget is not applied", conns)
	}
	t.Logf("reads paused %v times", paused)

	// Every record reads back once, at the offset its produce was told.
	seen := map[[2]int64]bool{}
	for i := range conns {
		key := [2]int64{int64(i % partitions), offsets[i]}
		if seen[key] {
			t.Fatalf("two produces were told partition %d offset %d", key[0], key[1])
		}
		seen[key] = true
	}
	cl := newClient(t, addr, kgo.ConsumeTopics("big"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxBytes(8<<20), kgo.FetchMaxPartitionBytes(2<<20))
	got := 0
	for got < conns {
		fs := cl.PollFetches(ctx)
		if err := fs.Err0(); err != nil {
			t.Fatalf("consume after %d records: %v", got, err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			i := -1
			for j := range conns {
				if int32(j%partitions) == r.Partition && offsets[j] == r.Offset {
					i = j
				}
			}
			if i < 0 || !bytes.Equal(r.Value, values[i]) {
				t.Fatalf("record at %d/%d is not the one produced there", r.Partition, r.Offset)
			}
			got++
		})
	}
	if loads := counterValue(t, reg, "quire_broker_partition_loads_total", nil); loads != partitions {
		t.Fatalf("%v partition loads for %d partitions: a full queue made a partition reload", loads, partitions)
	}
	if failures := counterValue(t, reg, "quire_broker_partition_failures_total", nil); failures != 0 {
		t.Fatalf("%v partitions failed", failures)
	}
}

// TestConcurrentAppendsToOnePartition: 2,000 produces at once to one
// partition whose ledger writer takes 16 entries at a time and whose queue
// holds 64. Producers wait for room instead of failing: every produce is
// answered at its own offset, and the partition neither reloads nor rolls
// its ledger over.
func TestConcurrentAppendsToOnePartition(t *testing.T) {
	c := newTestCluster(t)
	reg := prometheus.NewRegistry()
	b, _ := c.startBrokerWith(func(lc *ledgerclient.Config) { lc.MaxInFlight = 16 }, func(cfg *Config) {
		cfg.Registerer = reg
		cfg.MaxQueuedAppends = 64
	})
	addr := b.cfg.KafkaAdvertised
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if _, err := kadm.NewClient(newClient(t, addr)).CreateTopic(ctx, 1, 1, nil, "one"); err != nil {
		t.Fatal(err)
	}
	const goroutines, each = 100, 20
	offsets := make(chan int64, goroutines*each)
	errs := make(chan error, goroutines)
	var wg sync.WaitGroup
	for range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				p, err := produceRaw(addr, "one", 0, testBatch())
				if err == nil && p.ErrorCode != 0 {
					err = fmt.Errorf("error code %d", p.ErrorCode)
				}
				if err != nil {
					errs <- err
					return
				}
				offsets <- p.BaseOffset
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	close(offsets)
	seen := map[int64]bool{}
	for o := range offsets {
		if seen[o] || o < 0 || o >= goroutines*each {
			t.Fatalf("offset %d given twice or out of range", o)
		}
		seen[o] = true
	}
	if loads := counterValue(t, reg, "quire_broker_partition_loads_total", nil); loads != 1 {
		t.Fatalf("%v partition loads: the partition was reloaded", loads)
	}
	if failures := counterValue(t, reg, "quire_broker_partition_failures_total", nil); failures != 0 {
		t.Fatalf("%v partition failures", failures)
	}
	if rolls := counterValue(t, reg, "quire_topic_rollovers_total", nil); rolls != 0 {
		t.Fatalf("%v rollovers: a full queue rolled the ledger over", rolls)
	}
	if busy := counterValue(t, reg, "quire_topic_appends_queued_total", nil); busy == 0 {
		t.Fatal("no append ever waited in the queue: the test did not reach the writer's bound")
	}
}
