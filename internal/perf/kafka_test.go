package perf

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
	"github.com/twmb/franz-go/pkg/kgo"
)

func parseProduce(args ...string) (ProduceConfig, error) {
	fs := pflag.NewFlagSet("produce", pflag.ContinueOnError)
	build := RegisterProduceFlags(fs)
	if err := fs.Parse(args); err != nil {
		return ProduceConfig{}, err
	}
	return build()
}

func parseConsume(args ...string) (ConsumeConfig, error) {
	fs := pflag.NewFlagSet("consume", pflag.ContinueOnError)
	build := RegisterConsumeFlags(fs)
	if err := fs.Parse(args); err != nil {
		return ConsumeConfig{}, err
	}
	return build()
}

func TestProduceFlags(t *testing.T) {
	c, err := parseProduce("--topic", "t")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(c.Brokers, []string{"127.0.0.1:9092"}) || c.Partitions != 16 || c.ReplicationFactor != 1 ||
		c.RecordBytes != 1024 || c.Rate != 0 || c.Duration != time.Minute || c.Records != 0 || c.Acks != "all" ||
		!c.Idempotent || c.Linger != 0 || c.Compression != "none" || c.BatchMaxBytes != 0 || len(c.TopicConfigs) != 0 {
		t.Errorf("defaults: %+v", c)
	}

	c, err = parseProduce("--brokers", "a:1,b:2", "--topic", "t", "--partitions", "3", "--replication-factor", "3",
		"--topic-config", "min.insync.replicas=2", "--topic-config", "flush.messages=1", "--record-size", "100",
		"--rate", "5000", "--in-flight", "64", "--acks", "1", "--linger", "5ms", "--compression", "zstd",
		"--batch-max-bytes", "65536", "--requests-in-flight", "2", "--warm-up", "3s")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(c.Brokers, []string{"a:1", "b:2"}) || c.Partitions != 3 || c.ReplicationFactor != 3 ||
		*c.TopicConfigs["min.insync.replicas"] != "2" || *c.TopicConfigs["flush.messages"] != "1" ||
		c.RecordBytes != 100 || c.Rate != 5000 || c.InFlight != 64 || c.Acks != "1" || c.Linger != 5*time.Millisecond ||
		c.Compression != "zstd" || c.BatchMaxBytes != 65536 || c.RequestsInFlight != 2 || c.WarmUp != 3*time.Second {
		t.Errorf("parsed: %+v", c)
	}
	if c.Idempotent {
		t.Error("--acks 1 should turn idempotence off by default")
	}

	// --records alone means exactly that many, with no time limit.
	c, err = parseProduce("--topic", "t", "--records", "1000")
	if err != nil || c.Records != 1000 || c.Duration != 0 {
		t.Errorf("--records alone: %v, records %d duration %s", err, c.Records, c.Duration)
	}
	c, err = parseProduce("--topic", "t", "--replication-factor", "-1")
	if err != nil || c.ReplicationFactor != -1 {
		t.Errorf("--replication-factor -1 (server default): %v, %d", err, c.ReplicationFactor)
	}
	c, err = parseProduce("--topic", "t", "--records", "1000", "--duration", "5s")
	if err != nil || c.Records != 1000 || c.Duration != 5*time.Second {
		t.Errorf("--records and --duration: %v, records %d duration %s", err, c.Records, c.Duration)
	}
}

func TestProduceFlagErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{}, "--topic is required"},
		{[]string{"--topic", "t", "--acks", "2"}, "--acks"},
		{[]string{"--topic", "t", "--acks", "1", "--idempotent"}, "--idempotent needs --acks all"},
		{[]string{"--topic", "t", "--compression", "gzip9"}, "--compression"},
		{[]string{"--topic", "t", "--topic-config", "novalue"}, "key=value"},
		{[]string{"--topic", "t", "--duration", "0"}, "one of --duration and --records"},
		{[]string{"--topic", "t", "--in-flight", "0"}, "--in-flight"},
		{[]string{"--topic", "t", "--record-size", "0"}, "--record-size"},
		{[]string{"--topic", "t", "--replication-factor", "0"}, "--replication-factor"},
		{[]string{"--topic", "t", "--rate", "-1"}, "--rate"},
		{[]string{"--topic", "t", "--warm-up", "-1s"}, "--warm-up"},
	} {
		_, err := parseProduce(tc.args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: got %v, want an error containing %q", tc.args, err, tc.want)
		}
	}
}

// The options a config stands for are accepted by the client, in each
// producer mode (franz-go rejects, for example, requests-in-flight with
// idempotence).
func TestProduceClientOptions(t *testing.T) {
	for _, args := range [][]string{
		{"--topic", "t"},
		{"--topic", "t", "--acks", "1", "--requests-in-flight", "3"},
		{"--topic", "t", "--acks", "0", "--compression", "lz4", "--batch-max-bytes", "16384"},
	} {
		c, err := parseProduce(args...)
		if err != nil {
			t.Fatal(err)
		}
		cl, err := newClientNoDial(c.clientOpts())
		if err != nil {
			t.Errorf("%q: %v", args, err)
			continue
		}
		cl.Close()
	}
}

func TestConsumeFlags(t *testing.T) {
	c, err := parseConsume("--topic", "t")
	if err != nil {
		t.Fatal(err)
	}
	if c.Group != "" || c.From != "earliest" || c.Duration != time.Minute || c.Records != 0 || c.FetchMaxBytes != 0 || c.MaxPartitionFetchBytes != 0 {
		t.Errorf("defaults: %+v", c)
	}
	c, err = parseConsume("--topic", "t", "--fetch-max-bytes", "1048576", "--max-partition-fetch-bytes", "65536")
	if err != nil || c.FetchMaxBytes != 1<<20 || c.MaxPartitionFetchBytes != 64<<10 {
		t.Errorf("fetch sizes: %v %+v", err, c)
	}
	if _, err := parseConsume("--topic", "t", "--max-partition-fetch-bytes", "-1"); err == nil {
		t.Error("a negative --max-partition-fetch-bytes accepted")
	}
	c, err = parseConsume("--brokers", "x:1", "--topic", "t", "--group", "g", "--from", "latest", "--records", "10")
	if err != nil || c.Group != "g" || c.From != "latest" || c.Records != 10 || c.Duration != 0 || c.Brokers[0] != "x:1" {
		t.Errorf("parsed: %v %+v", err, c)
	}
	if _, err := parseConsume("--topic", "t", "--from", "middle"); err == nil {
		t.Error("--from middle accepted")
	}
	for _, args := range [][]string{{"--topic", "t"}, {"--topic", "t", "--group", "g", "--from", "latest"}, {"--topic", "t", "--max-partition-fetch-bytes", "65536"}} {
		c, _ := parseConsume(args...)
		cl, err := newClientNoDial(c.clientOpts())
		if err != nil {
			t.Errorf("%q: %v", args, err)
			continue
		}
		cl.Close()
	}
}

func TestSendTime(t *testing.T) {
	now := time.Now()
	payload := make([]byte, 16)
	at := now.Add(-1500 * time.Millisecond)
	putSendTime(payload, at)
	got, ok := sendTime(payload, now)
	if !ok || !got.Equal(time.Unix(0, at.UnixNano())) {
		t.Errorf("round trip: %v %v, want %v", got, ok, at)
	}
	if _, ok := sendTime(payload[:7], now); ok {
		t.Error("short payload has a send time")
	}
	for _, far := range []time.Time{now.Add(-48 * time.Hour), now.Add(time.Hour), time.Unix(0, 0)} {
		putSendTime(payload, far)
		if _, ok := sendTime(payload, now); ok {
			t.Errorf("implausible send time %v accepted", far)
		}
	}
}

func TestErrorCounts(t *testing.T) {
	var e errorCounts
	for i := range maxErrorKinds + 3 {
		e.add(errors.New(strings.Repeat("x", i+1)))
	}
	e.add(errors.New("x"))
	if e.total != maxErrorKinds+4 || e.kinds["x"] != 2 || e.other != 3 {
		t.Errorf("total %d, x %d, other %d", e.total, e.kinds["x"], e.other)
	}
	var b strings.Builder
	e.write(&b)
	if !strings.HasPrefix(b.String(), "  2 × x\n") || !strings.Contains(b.String(), "3 × other errors") {
		t.Errorf("written:\n%s", b.String())
	}
}

// newClientNoDial builds a client from opts (franz-go validates the options
// here) without contacting any broker: clients dial lazily.
func newClientNoDial(opts []kgo.Opt) (*kgo.Client, error) { return kgo.NewClient(opts...) }
