package perf

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// This file holds what `quire perf produce` and `quire perf consume` share:
// topic set-up through the admin API, the send timestamp a producer embeds in
// each payload, and the figures' formatting. Both tools speak only the Kafka
// protocol (through franz-go), so they measure Apache Kafka and Quire alike.

// timestampBytes is the size of the send timestamp (Unix nanoseconds,
// big-endian) that produce writes at the start of every payload of at least
// that size, for consume to measure end-to-end latency.
const timestampBytes = 8

// putSendTime writes t into the first timestampBytes of payload.
func putSendTime(payload []byte, t time.Time) {
	binary.BigEndian.PutUint64(payload, uint64(t.UnixNano()))
}

// sendTime reads the send timestamp from payload. It reports false when the
// payload is too short or its first bytes do not read as a time within a day
// before now (or a minute after, for clock steps): random bytes pass that
// test with probability about 5e-6, so records from other producers are
// ignored rather than turned into nonsense latencies.
func sendTime(payload []byte, now time.Time) (time.Time, bool) {
	if len(payload) < timestampBytes {
		return time.Time{}, false
	}
	ns := int64(binary.BigEndian.Uint64(payload))
	t := time.Unix(0, ns)
	if t.Before(now.Add(-24*time.Hour)) || t.After(now.Add(time.Minute)) {
		return time.Time{}, false
	}
	return t, true
}

// parseTopicConfigs turns k=v strings into the admin API's config map.
func parseTopicConfigs(kvs []string) (map[string]*string, error) {
	configs := map[string]*string{}
	for _, kv := range kvs {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("--topic-config %q: want key=value", kv)
		}
		configs[k] = &v
	}
	return configs, nil
}

// ensureTopic creates topic if it is absent and waits until every partition
// has a leader, within ctx. It returns the number of partitions and whether
// it created the topic. An existing topic is used as it is.
func ensureTopic(ctx context.Context, adm *kadm.Client, topic string, partitions int32, replicationFactor int16, configs map[string]*string) (int, bool, error) {
	created := false
	if partitions > 0 {
		_, err := adm.CreateTopic(ctx, partitions, replicationFactor, configs, topic)
		switch {
		case err == nil:
			created = true
		case errors.Is(err, kerr.TopicAlreadyExists):
		default:
			return 0, false, fmt.Errorf("create topic %q: %w", topic, err)
		}
	}
	n, err := waitForLeaders(ctx, adm, topic)
	return n, created, err
}

// waitForLeaders polls the topic's metadata until it exists and every
// partition has a leader, within ctx; it returns the partition count.
func waitForLeaders(ctx context.Context, adm *kadm.Client, topic string) (int, error) {
	var last error
	for {
		details, err := adm.ListTopics(ctx, topic)
		if err == nil {
			last = topicReady(details, topic)
			if last == nil {
				return len(details[topic].Partitions), nil
			}
		} else {
			last = err
		}
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("topic %q not ready: %w (%w)", topic, last, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func topicReady(details kadm.TopicDetails, topic string) error {
	d, ok := details[topic]
	if !ok {
		return fmt.Errorf("no metadata")
	}
	if d.Err != nil {
		return d.Err
	}
	if len(d.Partitions) == 0 {
		return fmt.Errorf("no partitions")
	}
	for _, p := range d.Partitions {
		if p.Err != nil {
			return fmt.Errorf("partition %d: %w", p.Partition, p.Err)
		}
		if p.Leader < 0 {
			return fmt.Errorf("partition %d has no leader", p.Partition)
		}
	}
	return nil
}

// errorCounts counts failures by message, keeping at most maxErrorKinds kinds.
type errorCounts struct {
	total int64
	kinds map[string]int64
	other int64 // failures of kinds past maxErrorKinds
}

const maxErrorKinds = 8

func (e *errorCounts) add(err error) {
	e.total++
	if e.kinds == nil {
		e.kinds = map[string]int64{}
	}
	msg := err.Error()
	if _, ok := e.kinds[msg]; ok || len(e.kinds) < maxErrorKinds {
		e.kinds[msg]++
		return
	}
	e.other++
}

func (e *errorCounts) write(w io.Writer) {
	msgs := make([]string, 0, len(e.kinds))
	for m := range e.kinds {
		msgs = append(msgs, m)
	}
	sort.Slice(msgs, func(i, j int) bool { return e.kinds[msgs[i]] > e.kinds[msgs[j]] })
	for _, m := range msgs {
		fmt.Fprintf(w, "  %d × %s\n", e.kinds[m], m)
	}
	if e.other > 0 {
		fmt.Fprintf(w, "  %d × other errors\n", e.other)
	}
}

// perSecond divides n by d in seconds (0 for a zero duration).
func perSecond(n float64, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return n / d.Seconds()
}

// seedClientOpts are the options every perf client starts from.
func seedClientOpts(brokers []string, sec ClientSecurity) []kgo.Opt {
	return append([]kgo.Opt{
		kgo.SeedBrokers(brokers...),
		kgo.ClientID("quire-perf"),
	}, sec.opts...)
}

// closeBounded closes cl, giving up after timeout: a client stuck on a dead
// server must not hold the tool past its bounds.
func closeBounded(cl *kgo.Client, timeout time.Duration) {
	done := make(chan struct{})
	go func() {
		cl.Close()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(timeout):
	}
}
