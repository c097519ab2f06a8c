//go:build ignore

// offsets.go — a helper of bench/peer.sh, built with
// `go build -o OUT bench/offsets.go` (the build tag keeps it out of the
// module's packages): it waits until every partition of a topic has a leader
// and answers ListOffsets (earliest and latest) without error, then prints
//
//	offsets partitions=P records=N
//
// where N is the sum over partitions of latest - earliest: the backlog a
// reader from earliest has to read. peer.sh uses it to count the records a
// produce run left in a topic (warm-up included), and as the probe that a
// restarted `quire standalone` serves a topic's partitions again. It speaks
// only the Kafka protocol, so Apache Kafka and Quire are probed alike. Exit
// status 1 if the topic did not answer within -timeout.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

func main() {
	brokers := flag.String("brokers", "127.0.0.1:9092", "bootstrap brokers, comma-separated")
	topic := flag.String("topic", "", "topic (required)")
	timeout := flag.Duration("timeout", 60*time.Second, "give up after this long")
	flag.Parse()
	if *topic == "" {
		fmt.Fprintln(os.Stderr, "offsets: -topic is required")
		os.Exit(2)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(*brokers, ",")...),
		kgo.RetryTimeout(5*time.Second), kgo.RequestTimeoutOverhead(5*time.Second))
	if err != nil {
		fmt.Fprintln(os.Stderr, "offsets:", err)
		os.Exit(1)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	var last error
	for {
		partitions, records, err := probe(ctx, adm, *topic)
		if err == nil {
			fmt.Printf("offsets partitions=%d records=%d\n", partitions, records)
			return
		}
		last = err
		select {
		case <-ctx.Done():
			fmt.Fprintf(os.Stderr, "offsets: topic %s not answering within %s: %v\n", *topic, *timeout, last)
			os.Exit(1)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// probe returns the topic's partition count and backlog if every partition
// has a leader and both ListOffsets answer for all of them.
func probe(ctx context.Context, adm *kadm.Client, topic string) (int, int64, error) {
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	md, err := adm.Metadata(rctx, topic)
	if err != nil {
		return 0, 0, fmt.Errorf("metadata: %w", err)
	}
	td, ok := md.Topics[topic]
	switch {
	case !ok:
		return 0, 0, fmt.Errorf("metadata: no topic %s", topic)
	case td.Err != nil:
		return 0, 0, fmt.Errorf("metadata: %w", td.Err)
	case len(td.Partitions) == 0:
		return 0, 0, fmt.Errorf("metadata: topic %s has no partitions", topic)
	}
	for p, pd := range td.Partitions {
		if pd.Err != nil || pd.Leader < 0 {
			return 0, 0, fmt.Errorf("partition %d: leader %d, %v", p, pd.Leader, pd.Err)
		}
	}
	starts, err := adm.ListStartOffsets(rctx, topic)
	if err != nil {
		return 0, 0, fmt.Errorf("list earliest offsets: %w", err)
	}
	ends, err := adm.ListEndOffsets(rctx, topic)
	if err != nil {
		return 0, 0, fmt.Errorf("list latest offsets: %w", err)
	}
	var records int64
	for p := range td.Partitions {
		s, ok1 := starts.Lookup(topic, p)
		e, ok2 := ends.Lookup(topic, p)
		switch {
		case !ok1 || !ok2:
			return 0, 0, fmt.Errorf("partition %d: no offsets listed", p)
		case s.Err != nil:
			return 0, 0, fmt.Errorf("partition %d earliest: %w", p, s.Err)
		case e.Err != nil:
			return 0, 0, fmt.Errorf("partition %d latest: %w", p, e.Err)
		}
		records += e.Offset - s.Offset
	}
	return len(td.Partitions), records, nil
}
