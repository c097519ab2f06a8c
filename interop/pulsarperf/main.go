// Command pulsarperf is Pulsar-protocol load through the real Pulsar Go
// client (pulsar-client-go, which the server binary never imports), against
// Quire or Apache Pulsar alike:
//
//	go run ./interop/pulsarperf produce --topic t --records 100000
//	go run ./interop/pulsarperf consume --topic t --records 100000
//
// produce sends records of --record-size random bytes (the first 8: the send
// time, Unix nanoseconds) at --rate records/s, or as fast as --max-pending
// unacknowledged ones allow, for --duration or --records. consume reads
// from the earliest message (a reader, or a durable Exclusive subscription
// with --subscription) until --records arrived or --idle passed without one.
// A progress line per second goes to stderr; the summary to stdout, ending
// with a fixed last line:
//
//	perf pulsar-produce records=N errors=E records_s=R mb_s=X p50_ms=A p99_ms=B
//	perf pulsar-consume records=N records_s=R mb_s=X e2e_p50_ms=A e2e_p99_ms=B
//
// It exits non-zero when a send failed or fewer records were consumed than
// asked for.
package main

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	plog "github.com/apache/pulsar-client-go/pulsar/log"

	"quire/internal/perf"
)

func main() {
	if len(os.Args) < 2 || (os.Args[1] != "produce" && os.Args[1] != "consume") {
		fmt.Fprintln(os.Stderr, "usage: pulsarperf produce|consume [flags] (-h for the flags)")
		os.Exit(2)
	}
	mode := os.Args[1]
	fs := flag.NewFlagSet(mode, flag.ExitOnError)
	url := fs.String("service-url", "pulsar://127.0.0.1:6650", "Pulsar service URL")
	topic := fs.String("topic", "", "topic (required), e.g. persistent://public/default/t")
	records := fs.Int("records", 0, "records to produce or consume (0: produce for --duration)")
	duration := fs.Duration("duration", time.Minute, "how long to produce when --records is 0")
	rate := fs.Float64("rate", 0, "records per second (0: as fast as --max-pending allows)")
	size := fs.Int("record-size", 1024, "record size in bytes (at least 8)")
	pending := fs.Int("max-pending", 4096, "records sent and not yet acknowledged")
	batchDelay := fs.Duration("batch-delay", time.Millisecond, "how long a batch waits to fill (0: no batching)")
	sub := fs.String("subscription", "", "consume through this durable Exclusive subscription (default: a reader)")
	idle := fs.Duration("idle", 10*time.Second, "consume: give up after this long without a message")
	_ = fs.Parse(os.Args[2:])
	if *topic == "" || *size < 8 {
		fmt.Fprintln(os.Stderr, "pulsarperf: --topic is required and --record-size at least 8")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	client, err := pulsar.NewClient(pulsar.ClientOptions{URL: *url, OperationTimeout: 30 * time.Second,
		Logger: plog.NewLoggerWithSlog(slog.New(slog.NewTextHandler(io.Discard, nil)))})
	if err != nil {
		fmt.Fprintln(os.Stderr, "pulsarperf:", err)
		os.Exit(1)
	}
	defer client.Close()
	var ok bool
	if mode == "produce" {
		ok = produce(ctx, client, *topic, *records, *duration, *rate, *size, *pending, *batchDelay)
	} else {
		ok = consume(ctx, client, *topic, *records, *sub, *idle, *size)
	}
	if !ok {
		os.Exit(1)
	}
}

// stats counts what completed, for the progress line and the summary.
type stats struct {
	mu       sync.Mutex
	total    perf.Histogram
	interval perf.Histogram
	n        atomic.Int64
	bytes    atomic.Int64
	errs     atomic.Int64
}

func (s *stats) record(d time.Duration, n int) {
	s.mu.Lock()
	s.total.Record(d)
	s.interval.Record(d)
	s.mu.Unlock()
	s.n.Add(1)
	s.bytes.Add(int64(n))
}

// progress prints a line per second to stderr until stop is called.
func (s *stats) progress(name string) (stop func()) {
	done := make(chan struct{})
	start, last := time.Now(), int64(0)
	go func() {
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case now := <-t.C:
				s.mu.Lock()
				p50, p99 := s.interval.Quantile(0.5), s.interval.Quantile(0.99)
				s.interval.Reset()
				s.mu.Unlock()
				n := s.n.Load()
				fmt.Fprintf(os.Stderr, "perf %s %4.0fs: %9d records/s p50 %8.3f ms p99 %8.3f ms (interval) errors %d\n",
					name, now.Sub(start).Seconds(), n-last, ms(p50), ms(p99), s.errs.Load())
				last = n
			}
		}
	}()
	return func() { close(done) }
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func produce(ctx context.Context, client pulsar.Client, topic string, records int, duration time.Duration,
	rate float64, size, pending int, batchDelay time.Duration) bool {
	opts := pulsar.ProducerOptions{Topic: topic, MaxPendingMessages: pending, SendTimeout: 60 * time.Second}
	if batchDelay <= 0 {
		opts.DisableBatching = true
	} else {
		opts.BatchingMaxPublishDelay = batchDelay
	}
	p, err := client.CreateProducer(opts)
	if err != nil {
		fmt.Fprintln(os.Stderr, "pulsarperf: create producer:", err)
		return false
	}
	defer p.Close()
	payload := make([]byte, size)
	_, _ = rand.Read(payload)
	var s stats
	stop := s.progress("pulsar-produce")
	start := time.Now()
	end := start.Add(duration)
	var wg sync.WaitGroup
	firstErr := atomic.Value{}
	for i := 0; records == 0 || i < records; i++ {
		if ctx.Err() != nil || records == 0 && time.Now().After(end) {
			break
		}
		if rate > 0 {
			if wait := time.Until(start.Add(time.Duration(float64(i) / rate * float64(time.Second)))); wait > 0 {
				time.Sleep(wait) // pacing the load, not waiting for a condition
			}
		}
		msg := make([]byte, size)
		copy(msg, payload)
		sent := time.Now()
		binary.BigEndian.PutUint64(msg, uint64(sent.UnixNano()))
		wg.Add(1)
		p.SendAsync(ctx, &pulsar.ProducerMessage{Payload: msg}, func(_ pulsar.MessageID, _ *pulsar.ProducerMessage, err error) {
			defer wg.Done()
			if err != nil {
				s.errs.Add(1)
				firstErr.CompareAndSwap(nil, err.Error())
				return
			}
			s.record(time.Since(sent), size)
		})
	}
	if err := p.Flush(); err != nil && ctx.Err() == nil {
		fmt.Fprintln(os.Stderr, "pulsarperf: flush:", err)
	}
	wg.Wait()
	stop()
	elapsed := time.Since(start).Seconds()
	n, errs := s.n.Load(), s.errs.Load()
	fmt.Printf("%d records of %d B acknowledged in %.1f s, %d errors", n, size, elapsed, errs)
	if e := firstErr.Load(); e != nil {
		fmt.Printf(" (first: %v)", e)
	}
	fmt.Println()
	fmt.Printf("send latency: p50 %.3f ms, p99 %.3f ms, p99.9 %.3f ms, max %.3f ms\n",
		ms(s.total.Quantile(0.5)), ms(s.total.Quantile(0.99)), ms(s.total.Quantile(0.999)), ms(s.total.Max()))
	fmt.Printf("perf pulsar-produce records=%d errors=%d records_s=%.1f mb_s=%.2f p50_ms=%.3f p99_ms=%.3f\n",
		n, errs, float64(n)/elapsed, float64(s.bytes.Load())/1e6/elapsed, ms(s.total.Quantile(0.5)), ms(s.total.Quantile(0.99)))
	return errs == 0
}

func consume(ctx context.Context, client pulsar.Client, topic string, records int, sub string, idle time.Duration, size int) bool {
	var next func(context.Context) (pulsar.Message, error)
	if sub == "" {
		r, err := client.CreateReader(pulsar.ReaderOptions{Topic: topic, StartMessageID: pulsar.EarliestMessageID(), ReceiverQueueSize: 10_000})
		if err != nil {
			fmt.Fprintln(os.Stderr, "pulsarperf: create reader:", err)
			return false
		}
		defer r.Close()
		next = r.Next
	} else {
		c, err := client.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: sub, Type: pulsar.Exclusive,
			SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest, ReceiverQueueSize: 10_000})
		if err != nil {
			fmt.Fprintln(os.Stderr, "pulsarperf: subscribe:", err)
			return false
		}
		defer c.Close()
		next = func(ctx context.Context) (pulsar.Message, error) {
			m, err := c.Receive(ctx)
			if err == nil {
				_ = c.Ack(m)
			}
			return m, err
		}
	}
	var s stats
	stop := s.progress("pulsar-consume")
	start := time.Now()
	for records == 0 || int(s.n.Load()) < records {
		rctx, cancel := context.WithTimeout(ctx, idle)
		m, err := next(rctx)
		cancel()
		if err != nil {
			break
		}
		p := m.Payload()
		var e2e time.Duration
		if len(p) >= 8 {
			e2e = time.Since(time.Unix(0, int64(binary.BigEndian.Uint64(p))))
		}
		s.record(e2e, len(p))
	}
	stop()
	elapsed := time.Since(start).Seconds()
	n := s.n.Load()
	fmt.Printf("%d records consumed in %.1f s\n", n, elapsed)
	fmt.Printf("perf pulsar-consume records=%d records_s=%.1f mb_s=%.2f e2e_p50_ms=%.3f e2e_p99_ms=%.3f\n",
		n, float64(n)/elapsed, float64(s.bytes.Load())/1e6/elapsed, ms(s.total.Quantile(0.5)), ms(s.total.Quantile(0.99)))
	return records == 0 || int(n) >= records
}
