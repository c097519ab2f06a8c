package perf

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/spf13/pflag"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// ConsumeConfig configures Consume. RegisterConsumeFlags builds one from the
// command line.
type ConsumeConfig struct {
	Brokers []string
	// Security: TLS and SASL, as the --tls-* and --sasl-* flags say.
	Security ClientSecurity
	Topic    string
	// Group, if set, consumes as a member of that consumer group and commits
	// its offsets; otherwise every partition is read directly, nothing
	// committed.
	Group          string
	From           string        // earliest or latest: where to start without a committed offset
	Duration       time.Duration // 0 = no time limit
	Records        int64         // 0 = no count limit
	ConnectTimeout time.Duration
	// FetchMaxBytes and MaxPartitionFetchBytes are the consumer's
	// fetch.max.bytes and max.partition.fetch.bytes (0: the client's
	// defaults, 50 MiB and 1 MiB, as the Java consumer's).
	FetchMaxBytes          int32
	MaxPartitionFetchBytes int32
	Progress               io.Writer
	Out                    io.Writer
}

// RegisterConsumeFlags registers the `quire perf consume` flags on fs and
// returns the function that turns them, once parsed, into a checked config.
func RegisterConsumeFlags(fs *pflag.FlagSet) func() (ConsumeConfig, error) {
	var c ConsumeConfig
	fs.StringSliceVar(&c.Brokers, "brokers", []string{"127.0.0.1:9092"}, "bootstrap brokers, host:port, comma-separated")
	c.Security.register(fs)
	fs.StringVar(&c.Topic, "topic", "", "topic to consume (required)")
	fs.StringVar(&c.Group, "group", "", "consumer group to join and commit in (default: read every partition directly, no group)")
	fs.StringVar(&c.From, "from", "earliest", "where to start without a committed offset: earliest or latest")
	fs.DurationVar(&c.Duration, "duration", 60*time.Second, "how long to consume (0: no limit); ignored with --records unless also given")
	fs.Int64Var(&c.Records, "records", 0, "stop after this many records (0: no limit)")
	fs.DurationVar(&c.ConnectTimeout, "connect-timeout", 30*time.Second, "bound on reaching the cluster and finding the topic")
	fs.Int32Var(&c.FetchMaxBytes, "fetch-max-bytes", 0, "the consumer's fetch.max.bytes: bytes a fetch asks for over all partitions (0: 50 MiB)")
	fs.Int32Var(&c.MaxPartitionFetchBytes, "max-partition-fetch-bytes", 0, "the consumer's max.partition.fetch.bytes: bytes a fetch asks for per partition (0: 1 MiB)")
	return func() (ConsumeConfig, error) {
		if c.Records > 0 && !fs.Changed("duration") {
			c.Duration = 0
		}
		if err := c.Security.resolve(); err != nil {
			return c, err
		}
		return c, c.Validate()
	}
}

// Validate checks the config's fields and their combinations.
func (c *ConsumeConfig) Validate() error {
	switch {
	case len(c.Brokers) == 0:
		return errors.New("--brokers is required")
	case c.Topic == "":
		return errors.New("--topic is required")
	case c.From != "earliest" && c.From != "latest":
		return fmt.Errorf("--from %q: want earliest or latest", c.From)
	case c.Duration < 0 || c.Records < 0:
		return errors.New("--duration and --records must not be negative")
	case c.Duration == 0 && c.Records == 0:
		return errors.New("one of --duration and --records must be set")
	case c.FetchMaxBytes < 0 || c.MaxPartitionFetchBytes < 0:
		return errors.New("--fetch-max-bytes and --max-partition-fetch-bytes must not be negative")
	}
	return nil
}

func (c *ConsumeConfig) clientOpts() []kgo.Opt {
	start := kgo.NewOffset().AtStart()
	if c.From == "latest" {
		start = kgo.NewOffset().AtEnd()
	}
	opts := append(seedClientOpts(c.Brokers, c.Security),
		kgo.ConsumeTopics(c.Topic),
		kgo.ConsumeResetOffset(start),
	)
	if c.Group != "" {
		opts = append(opts, kgo.ConsumerGroup(c.Group))
	}
	if c.FetchMaxBytes > 0 {
		opts = append(opts, kgo.FetchMaxBytes(c.FetchMaxBytes))
	}
	if c.MaxPartitionFetchBytes > 0 {
		opts = append(opts, kgo.FetchMaxPartitionBytes(c.MaxPartitionFetchBytes))
	}
	return opts
}

// ConsumeResult holds a consume run's figures.
type ConsumeResult struct {
	Records    int64
	Bytes      int64 // key and value bytes
	Elapsed    time.Duration
	RecordsSec float64
	MBSec      float64
	// EndToEnd is the time from the send timestamp a producer embedded in a
	// payload to the fetch that returned it; empty if no payload had one.
	EndToEnd Histogram
}

type consumeStats struct {
	mu            sync.Mutex
	records       int64
	bytes         int64
	intervalCount int64
	intervalBytes int64
	e2e, interval Histogram
	last          time.Time
}

// Consume reads c.Topic for c.Duration or c.Records, whichever ends first,
// and prints a progress line every second to c.Progress and a summary to
// c.Out whose last line is
//
//	perf consume records=N records_s=R mb_s=X
//
// Records whose first 8 bytes hold a send time (as `perf produce` writes)
// also give end-to-end latency, reported on the lines before it.
func Consume(ctx context.Context, c ConsumeConfig) (ConsumeResult, error) {
	if err := c.Validate(); err != nil {
		return ConsumeResult{}, err
	}
	if c.Progress == nil {
		c.Progress = io.Discard
	}
	if c.Out == nil {
		c.Out = io.Discard
	}
	cl, err := kgo.NewClient(c.clientOpts()...)
	if err != nil {
		return ConsumeResult{}, fmt.Errorf("perf consume: %w", err)
	}
	defer closeBounded(cl, 5*time.Second)

	setupCtx, cancelSetup := context.WithTimeout(ctx, c.ConnectTimeout)
	partitions, err := waitForLeaders(setupCtx, kadm.NewClient(cl), c.Topic)
	cancelSetup()
	if err != nil {
		return ConsumeResult{}, fmt.Errorf("perf consume: %w", err)
	}
	how := "direct partitions"
	if c.Group != "" {
		how = "group " + c.Group
	}
	fmt.Fprintf(c.Out, "perf consume: topic %s (%d partitions) at %s, %s, from %s\n",
		c.Topic, partitions, strings.Join(c.Brokers, ","), how, c.From)

	runCtx := ctx
	if c.Duration > 0 {
		var cancel context.CancelFunc
		runCtx, cancel = context.WithTimeout(ctx, c.Duration)
		defer cancel()
	}
	var st consumeStats
	start := time.Now()
	stopProgress := startProgress(c.Progress, start, func(elapsed, interval time.Duration) string {
		st.mu.Lock()
		n, b := st.intervalCount, st.intervalBytes
		st.intervalCount, st.intervalBytes = 0, 0
		line := fmt.Sprintf("perf consume %4.0fs: %9.0f records/s %8.2f MB/s (interval)",
			elapsed.Seconds(), perSecond(float64(n), interval), perSecond(float64(b)/1e6, interval))
		if st.interval.Count() > 0 {
			line += fmt.Sprintf(" e2e p50 %.3f ms p99 %.3f ms", millis(st.interval.Quantile(0.5)), millis(st.interval.Quantile(0.99)))
		}
		st.interval.Reset()
		st.mu.Unlock()
		return line
	})

	var fetchErrs errorCounts
poll:
	for c.Records == 0 || st.records < c.Records {
		fetches := cl.PollFetches(runCtx)
		if runCtx.Err() != nil && fetches.NumRecords() == 0 {
			break
		}
		now := time.Now()
		fetches.EachError(func(topic string, partition int32, err error) {
			if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
				return
			}
			fetchErrs.add(fmt.Errorf("%s[%d]: %w", topic, partition, err))
		})
		if errors.Is(fetches.Err0(), kgo.ErrClientClosed) {
			break
		}
		st.mu.Lock()
		for it := fetches.RecordIter(); !it.Done(); {
			r := it.Next()
			n := int64(len(r.Key) + len(r.Value))
			st.records++
			st.bytes += n
			st.intervalCount++
			st.intervalBytes += n
			if sent, ok := sendTime(r.Value, now); ok {
				lat := max(now.Sub(sent), 0)
				st.e2e.Record(lat)
				st.interval.Record(lat)
			}
			if c.Records > 0 && st.records >= c.Records {
				st.last = now
				st.mu.Unlock()
				break poll
			}
		}
		if fetches.NumRecords() > 0 {
			st.last = now
		}
		st.mu.Unlock()
	}
	stopped := time.Now()
	stopProgress()

	if c.Group != "" {
		commitCtx, cancel := context.WithTimeout(context.Background(), c.ConnectTimeout)
		if err := cl.CommitUncommittedOffsets(commitCtx); err != nil {
			fetchErrs.add(fmt.Errorf("commit: %w", err))
		}
		cancel()
	}

	st.mu.Lock()
	res := ConsumeResult{Records: st.records, Bytes: st.bytes, EndToEnd: st.e2e}
	end := st.last
	st.mu.Unlock()
	if end.IsZero() {
		end = stopped
	}
	res.Elapsed = end.Sub(start)
	res.RecordsSec = perSecond(float64(res.Records), res.Elapsed)
	res.MBSec = perSecond(float64(res.Bytes)/1e6, res.Elapsed)

	w := c.Out
	fmt.Fprintf(w, "records: %d, %.1f MB in %.3f s (start to last record)\n", res.Records, float64(res.Bytes)/1e6, res.Elapsed.Seconds())
	fmt.Fprintf(w, "throughput: %.1f records/s, %.2f MB/s\n", res.RecordsSec, res.MBSec)
	if fetchErrs.total > 0 {
		fmt.Fprintf(w, "errors: %d\n", fetchErrs.total)
		fetchErrs.write(w)
	}
	if res.EndToEnd.Count() > 0 {
		fmt.Fprintln(w, "end-to-end latency, send time in payload to fetch (power-of-two buckets: range, count, share, cumulative):")
		res.EndToEnd.WriteBuckets(w, "  ")
		writeQuantiles(w, "end-to-end latency ms:", &res.EndToEnd)
		fmt.Fprintf(w, "perf consume e2e_p50_ms=%.3f e2e_p99_ms=%.3f\n",
			millis(res.EndToEnd.Quantile(0.50)), millis(res.EndToEnd.Quantile(0.99)))
	}
	fmt.Fprintf(w, "perf consume records=%d records_s=%.1f mb_s=%.2f\n", res.Records, res.RecordsSec, res.MBSec)
	return res, nil
}
