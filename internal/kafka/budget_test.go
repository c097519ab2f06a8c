package kafka_test

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kmsg"

	"quire/internal/kafka"
	"quire/internal/testutil"
)

// TestRequestBytesBudget: with a 32 KiB budget per connection (64 KiB for
// the server), four pipelined produces of 256 KiB each are read one at a
// time — each alone is larger than the whole budget, so it is read once
// nothing else holds it — and every one is answered and stored.
func TestRequestBytesBudget(t *testing.T) {
	c := newCluster(t, func(cfg *kafka.Config) {
		cfg.MaxQueuedRequestBytes = 64 << 10
		cfg.MaxConnRequestBytes = 32 << 10
	})
	ctx := testContext(t)
	if _, err := c.admin().CreateTopic(ctx, 1, -1, nil, "budget"); err != nil {
		t.Fatal(err)
	}
	// Appends are held, so the first request stays unanswered and the
	// next ones must wait to be read.
	release := c.backend.PartitionFor("budget", 0).HoldAppends()
	raw := c.raw()
	const n = 4
	reqs := make([]*kmsg.ProduceRequest, n)
	ids := make([]int32, n)
	for i := range n {
		req := kmsg.NewPtrProduceRequest()
		req.SetVersion(9)
		req.Acks, req.TimeoutMillis = -1, 30_000
		rt := kmsg.NewProduceRequestTopic()
		rt.Topic = "budget"
		rp := kmsg.NewProduceRequestTopicPartition()
		rp.Records = recordBatch(t, 1, strings.Repeat("q", 256<<10))
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		reqs[i], ids[i] = req, raw.send(req)
	}
	testutil.WaitFor(t, "a read to pause at the connection's budget", func() bool {
		return metricSum(t, c.reg, "quire_kafka_reads_paused_total") > 0
	})
	release()
	for i := range n {
		resp := raw.recv(reqs[i], ids[i]).(*kmsg.ProduceResponse)
		if code := resp.Topics[0].Partitions[0].ErrorCode; code != 0 {
			t.Fatalf("produce %d: error code %d", i, code)
		}
		if base := resp.Topics[0].Partitions[0].BaseOffset; base != int64(i) {
			t.Fatalf("produce %d stored at %d", i, base)
		}
	}
	if queued := metricSum(t, c.reg, "quire_kafka_queued_request_bytes"); queued != 0 {
		t.Fatalf("%v request bytes still counted as queued after every response", queued)
	}
}

// metricSum adds up every series of a counter or gauge.
func metricSum(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var n float64
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			n += m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}
	return n
}
