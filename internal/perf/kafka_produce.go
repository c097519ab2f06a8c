package perf

import (
	"context"
	"crypto/rand"
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

// ProduceConfig configures Produce. RegisterProduceFlags builds one from the
// command line.
type ProduceConfig struct {
	Brokers []string
	// Security: TLS and SASL, as the --tls-* and --sasl-* flags say.
	Security ClientSecurity
	Topic    string
	// Partitions, ReplicationFactor and TopicConfigs are used only when the
	// topic does not exist yet and is created; Partitions 0 never creates.
	Partitions        int32
	ReplicationFactor int16
	TopicConfigs      map[string]*string
	RecordBytes       int
	Rate              float64       // records/s; 0 = as fast as InFlight allows
	Duration          time.Duration // 0 = no time limit (Records must be set)
	Records           int64         // 0 = no count limit (Duration must be set)
	// WarmUp runs the same load this long before Duration and Records start
	// counting; its records are not measured (JIT warm-up of a JVM server,
	// first segment files, connection set-up).
	WarmUp time.Duration
	// InFlight bounds the records produced but not yet acknowledged (the
	// client's buffer and its requests together).
	InFlight int
	// RequestsInFlight bounds produce requests in flight per broker when
	// Idempotent is false; idempotent producers always allow 5.
	RequestsInFlight int
	Acks             string // "all", "1" or "0"
	Idempotent       bool   // requires Acks "all"
	Linger           time.Duration
	Compression      string // none, snappy, lz4 or zstd
	BatchMaxBytes    int32  // 0 = the client's default (about 1 MB)
	ConnectTimeout   time.Duration
	DrainTimeout     time.Duration // bound on waiting for the last acks
	Progress         io.Writer     // one line per second (stderr)
	Out              io.Writer     // the summary (stdout)
}

// RegisterProduceFlags registers the `quire perf produce` flags on fs and
// returns the function that turns them, once parsed, into a checked config.
func RegisterProduceFlags(fs *pflag.FlagSet) func() (ProduceConfig, error) {
	var (
		c            ProduceConfig
		partitions   int
		rf           int
		topicConfigs []string
		batchMax     int
	)
	fs.StringSliceVar(&c.Brokers, "brokers", []string{"127.0.0.1:9092"}, "bootstrap brokers, host:port, comma-separated")
	c.Security.register(fs)
	fs.StringVar(&c.Topic, "topic", "", "topic to produce to (required); created if absent")
	fs.IntVar(&partitions, "partitions", 16, "partitions of the topic if it is created (0: never create)")
	fs.IntVar(&rf, "replication-factor", 1, "replication factor of the topic if it is created (-1: the server's default)")
	fs.StringArrayVar(&topicConfigs, "topic-config", nil, "topic config key=value if the topic is created (repeatable)")
	fs.IntVar(&c.RecordBytes, "record-size", 1024, "record value size in bytes (random, incompressible; first 8 bytes: send time)")
	fs.Float64Var(&c.Rate, "rate", 0, "records per second (0: as fast as --in-flight allows)")
	fs.DurationVar(&c.Duration, "duration", 60*time.Second, "how long to produce (0: no limit); ignored with --records unless also given")
	fs.Int64Var(&c.Records, "records", 0, "how many records to produce (0: no limit)")
	fs.DurationVar(&c.WarmUp, "warm-up", 0, "unmeasured load before the measurement starts")
	fs.IntVar(&c.InFlight, "in-flight", 4096, "max records produced and not yet acknowledged")
	fs.IntVar(&c.RequestsInFlight, "requests-in-flight", 5, "max produce requests in flight per broker without idempotence (idempotent: always 5)")
	fs.StringVar(&c.Acks, "acks", "all", "acks: all, 1 or 0")
	fs.BoolVar(&c.Idempotent, "idempotent", true, "idempotent producer (needs --acks all; false by default with other acks)")
	fs.DurationVar(&c.Linger, "linger", 0, "how long to wait for a batch to fill")
	fs.StringVar(&c.Compression, "compression", "none", "batch compression: none, snappy, lz4 or zstd")
	fs.IntVar(&batchMax, "batch-max-bytes", 0, "max bytes of a record batch (0: the client's default, about 1 MB)")
	fs.DurationVar(&c.ConnectTimeout, "connect-timeout", 30*time.Second, "bound on reaching the cluster and creating the topic")
	fs.DurationVar(&c.DrainTimeout, "drain-timeout", 30*time.Second, "bound on waiting for outstanding acks at the end")
	return func() (ProduceConfig, error) {
		if partitions < 0 || partitions > 1<<20 {
			return c, fmt.Errorf("--partitions %d out of range", partitions)
		}
		if (rf < 1 && rf != -1) || rf > 1<<15-1 {
			return c, fmt.Errorf("--replication-factor %d out of range", rf)
		}
		if batchMax < 0 || batchMax > 1<<30 {
			return c, fmt.Errorf("--batch-max-bytes %d out of range", batchMax)
		}
		c.Partitions, c.ReplicationFactor, c.BatchMaxBytes = int32(partitions), int16(rf), int32(batchMax)
		var err error
		if c.TopicConfigs, err = parseTopicConfigs(topicConfigs); err != nil {
			return c, err
		}
		if c.Records > 0 && !fs.Changed("duration") {
			c.Duration = 0 // --records alone: produce exactly that many
		}
		if c.Acks != "all" && !fs.Changed("idempotent") {
			c.Idempotent = false
		}
		if err := c.Security.resolve(); err != nil {
			return c, err
		}
		return c, c.Validate()
	}
}

// Validate checks the config's fields and their combinations.
func (c *ProduceConfig) Validate() error {
	switch {
	case len(c.Brokers) == 0:
		return errors.New("--brokers is required")
	case c.Topic == "":
		return errors.New("--topic is required")
	case c.RecordBytes < 1:
		return fmt.Errorf("--record-size %d: want at least 1", c.RecordBytes)
	case c.Rate < 0:
		return fmt.Errorf("--rate %g: want >= 0", c.Rate)
	case c.Duration < 0 || c.Records < 0 || c.WarmUp < 0:
		return errors.New("--duration, --records and --warm-up must not be negative")
	case c.Duration == 0 && c.Records == 0:
		return errors.New("one of --duration and --records must be set")
	case c.InFlight < 1:
		return fmt.Errorf("--in-flight %d: want at least 1", c.InFlight)
	case c.RequestsInFlight < 1:
		return fmt.Errorf("--requests-in-flight %d: want at least 1", c.RequestsInFlight)
	case c.Linger < 0:
		return fmt.Errorf("--linger %s: want >= 0", c.Linger)
	}
	if _, err := acksOpt(c.Acks); err != nil {
		return err
	}
	if c.Idempotent && c.Acks != "all" {
		return fmt.Errorf("--idempotent needs --acks all (got --acks %s)", c.Acks)
	}
	if _, err := compressionOpt(c.Compression); err != nil {
		return err
	}
	return nil
}

func acksOpt(acks string) (kgo.Acks, error) {
	switch acks {
	case "all", "-1":
		return kgo.AllISRAcks(), nil
	case "1":
		return kgo.LeaderAck(), nil
	case "0":
		return kgo.NoAck(), nil
	}
	return kgo.Acks{}, fmt.Errorf("--acks %q: want all, 1 or 0", acks)
}

func compressionOpt(name string) (kgo.CompressionCodec, error) {
	switch name {
	case "none":
		return kgo.NoCompression(), nil
	case "snappy":
		return kgo.SnappyCompression(), nil
	case "lz4":
		return kgo.Lz4Compression(), nil
	case "zstd":
		return kgo.ZstdCompression(), nil
	}
	return kgo.CompressionCodec{}, fmt.Errorf("--compression %q: want none, snappy, lz4 or zstd", name)
}

// clientOpts are the franz-go options that c stands for.
func (c *ProduceConfig) clientOpts() []kgo.Opt {
	acks, _ := acksOpt(c.Acks)
	codec, _ := compressionOpt(c.Compression)
	opts := append(seedClientOpts(c.Brokers, c.Security),
		kgo.DefaultProduceTopic(c.Topic),
		kgo.RequiredAcks(acks),
		kgo.ProducerLinger(c.Linger),
		kgo.ProducerBatchCompression(codec),
		// Our own semaphore bounds records in flight at InFlight; the
		// client's buffer is one larger so that Produce never blocks.
		kgo.MaxBufferedRecords(c.InFlight+1),
	)
	if !c.Idempotent {
		opts = append(opts, kgo.DisableIdempotentWrite(), kgo.MaxProduceRequestsInflightPerBroker(c.RequestsInFlight))
	}
	if c.BatchMaxBytes > 0 {
		opts = append(opts, kgo.ProducerBatchMaxBytes(c.BatchMaxBytes))
	}
	return opts
}

// ProduceResult holds a produce run's figures.
type ProduceResult struct {
	Records    int64 // acknowledged
	Errors     int64 // failed, or not acknowledged within DrainTimeout
	Bytes      int64 // acknowledged value bytes
	Elapsed    time.Duration
	RecordsSec float64
	MBSec      float64 // 10^6 bytes per second
	Latency    Histogram
}

// produceStats is shared by the producing loop, the promises and the
// progress reporter.
type produceStats struct {
	mu        sync.Mutex
	completed int64 // acknowledged or failed, warm-up included
	acked     int64 // acknowledged and measured
	errs      errorCounts
	total     Histogram
	interval  Histogram
	lastAck   time.Time
}

// Produce writes records to c.Topic for c.Duration or c.Records, whichever
// ends first, and prints a progress line every second to c.Progress and a
// summary to c.Out whose last line is
//
//	perf produce records=N errors=E records_s=R mb_s=X p50_ms=A p99_ms=B
//
// Latency is from send to acknowledgement of each record. "Send" is the call
// to the client, or with a --rate the time the schedule meant the record to
// be sent, so a stalled server is charged for the records it delayed (no
// coordinated omission). At full rate every record waits behind up to
// InFlight others, so latency there is mostly InFlight / throughput.
func Produce(ctx context.Context, c ProduceConfig) (ProduceResult, error) {
	if err := c.Validate(); err != nil {
		return ProduceResult{}, err
	}
	if c.Progress == nil {
		c.Progress = io.Discard
	}
	if c.Out == nil {
		c.Out = io.Discard
	}
	cl, err := kgo.NewClient(c.clientOpts()...)
	if err != nil {
		return ProduceResult{}, fmt.Errorf("perf produce: %w", err)
	}
	defer closeBounded(cl, 5*time.Second)

	setupCtx, cancelSetup := context.WithTimeout(ctx, c.ConnectTimeout)
	partitions, created, err := ensureTopic(setupCtx, kadm.NewClient(cl), c.Topic, c.Partitions, c.ReplicationFactor, c.TopicConfigs)
	cancelSetup()
	if err != nil {
		return ProduceResult{}, fmt.Errorf("perf produce: %w", err)
	}
	how := "existing"
	if created {
		how = "created"
	}
	fmt.Fprintf(c.Out, "perf produce: topic %s (%s, %d partitions) at %s\n", c.Topic, how, partitions, strings.Join(c.Brokers, ","))
	fmt.Fprintf(c.Out, "  record-size=%d rate=%s in-flight=%d acks=%s idempotent=%t linger=%s compression=%s batch-max-bytes=%d warm-up=%s\n",
		c.RecordBytes, rateString(c.Rate), c.InFlight, c.Acks, c.Idempotent, c.Linger, c.Compression, c.BatchMaxBytes, c.WarmUp)

	// Random bytes, generated once; each record copies a window at a
	// different offset so that batches stay incompressible.
	source := make([]byte, max(8<<20, 4*c.RecordBytes))
	if _, err := rand.Read(source); err != nil {
		return ProduceResult{}, err
	}
	buffers := sync.Pool{New: func() any { b := make([]byte, c.RecordBytes); return &b }}

	var st produceStats
	slots := make(chan struct{}, c.InFlight)
	start := time.Now()
	measureFrom := start.Add(c.WarmUp)
	finish := func(r *kgo.Record, at time.Time, err error) {
		now := time.Now()
		st.mu.Lock()
		st.completed++
		if err != nil {
			st.errs.add(err) // warm-up errors count too: they are the server's
		} else {
			lat := now.Sub(at)
			st.interval.Record(lat)
			if !at.Before(measureFrom) {
				st.acked++
				st.total.Record(lat)
				st.lastAck = now
			}
		}
		st.mu.Unlock()
		b := r.Value[:cap(r.Value)]
		buffers.Put(&b)
		<-slots
	}

	runCtx := ctx
	if c.Duration > 0 {
		var cancel context.CancelFunc
		runCtx, cancel = context.WithTimeout(ctx, c.WarmUp+c.Duration)
		defer cancel()
	}
	stopProgress := startProgress(c.Progress, start, func(elapsed, interval time.Duration) string {
		st.mu.Lock()
		n := float64(st.interval.Count())
		p50, p99 := st.interval.Quantile(0.50), st.interval.Quantile(0.99)
		st.interval.Reset()
		errs := st.errs.total
		st.mu.Unlock()
		warm := ""
		if elapsed <= c.WarmUp {
			warm = " (warm-up)"
		}
		return fmt.Sprintf("perf produce %4.0fs: %9.0f records/s %8.2f MB/s p50 %8.3f ms p99 %8.3f ms (interval) errors %d%s",
			elapsed.Seconds(), perSecond(n, interval), perSecond(n*float64(c.RecordBytes)/1e6, interval), millis(p50), millis(p99), errs, warm)
	})

	var sent, sentAll int64 // measured; all, warm-up included
	offset := 0
	interval := time.Duration(0)
	if c.Rate > 0 {
		interval = time.Duration(float64(time.Second) / c.Rate)
	}
produce:
	for c.Records == 0 || sent < c.Records {
		select {
		case slots <- struct{}{}:
		case <-runCtx.Done():
			break produce
		}
		now := time.Now()
		at := now
		if interval > 0 {
			at = start.Add(time.Duration(sentAll) * interval)
			if wait := at.Sub(now); wait > 0 {
				select {
				case <-time.After(wait):
				case <-runCtx.Done():
					<-slots
					break produce
				}
			}
		}
		if runCtx.Err() != nil {
			<-slots
			break
		}
		value := *buffers.Get().(*[]byte)
		copy(value, source[offset:offset+c.RecordBytes])
		offset += c.RecordBytes + 61 // a prime step: windows never line up
		if offset+c.RecordBytes > len(source) {
			offset %= len(source) - c.RecordBytes
		}
		if c.RecordBytes >= timestampBytes {
			putSendTime(value, at)
		}
		// The record's own Timestamp is truncated to milliseconds by the
		// client, so the promise carries the send time itself.
		cl.Produce(context.Background(), &kgo.Record{Value: value, Timestamp: at},
			func(r *kgo.Record, err error) { finish(r, at, err) })
		sentAll++
		if !at.Before(measureFrom) {
			sent++
		}
	}
	stopSending := time.Now()

	drainCtx, cancelDrain := context.WithTimeout(context.Background(), c.DrainTimeout)
	flushErr := cl.Flush(drainCtx)
	cancelDrain()
	stopProgress()

	st.mu.Lock()
	res := ProduceResult{Records: st.acked, Latency: st.total}
	errs := st.errs
	errs.kinds = make(map[string]int64, len(st.errs.kinds))
	for k, v := range st.errs.kinds {
		errs.kinds[k] = v
	}
	if flushErr != nil {
		// Records still outstanding after the drain timeout count as errors.
		outstanding := sentAll - st.completed
		for range outstanding {
			errs.add(fmt.Errorf("not acknowledged within --drain-timeout %s", c.DrainTimeout))
		}
	}
	end := st.lastAck
	st.mu.Unlock()
	if end.IsZero() {
		end = stopSending
	}
	res.Errors = errs.total
	res.Bytes = res.Records * int64(c.RecordBytes)
	res.Elapsed = max(end.Sub(measureFrom), 0)
	res.RecordsSec = perSecond(float64(res.Records), res.Elapsed)
	res.MBSec = perSecond(float64(res.Bytes)/1e6, res.Elapsed)

	w := c.Out
	measured := "records"
	if c.WarmUp > 0 {
		measured = "records after warm-up"
	}
	fmt.Fprintf(w, "%s: %d sent, %d acknowledged; %d errors in all; %.1f MB in %.3f s\n",
		measured, sent, res.Records, res.Errors, float64(res.Bytes)/1e6, res.Elapsed.Seconds())
	fmt.Fprintf(w, "throughput: %.1f records/s, %.2f MB/s\n", res.RecordsSec, res.MBSec)
	if errs.total > 0 {
		fmt.Fprintln(w, "errors:")
		errs.write(w)
	}
	fmt.Fprintln(w, "latency, send to ack (power-of-two buckets: range, count, share, cumulative):")
	res.Latency.WriteBuckets(w, "  ")
	writeQuantiles(w, "latency ms:", &res.Latency)
	fmt.Fprintf(w, "perf produce records=%d errors=%d records_s=%.1f mb_s=%.2f p50_ms=%.3f p99_ms=%.3f\n",
		res.Records, res.Errors, res.RecordsSec, res.MBSec, millis(res.Latency.Quantile(0.50)), millis(res.Latency.Quantile(0.99)))
	if res.Errors > 0 {
		return res, fmt.Errorf("perf produce: %d of %d records failed", res.Errors, sentAll)
	}
	return res, nil
}

func rateString(rate float64) string {
	if rate == 0 {
		return "max"
	}
	return fmt.Sprintf("%g/s", rate)
}

// writeQuantiles prints p50, p90, p99, p99.9 and max of h in milliseconds.
func writeQuantiles(w io.Writer, label string, h *Histogram) {
	fmt.Fprintf(w, "%s p50 %.3f p90 %.3f p99 %.3f p99.9 %.3f max %.3f (%d samples, mean %.3f)\n", label,
		millis(h.Quantile(0.50)), millis(h.Quantile(0.90)), millis(h.Quantile(0.99)),
		millis(h.Quantile(0.999)), millis(h.Max()), h.Count(), millis(h.Mean()))
}

// startProgress prints line(elapsed since start, time since the previous
// line) to w once a second until the returned function is called (which
// waits for the printer to stop).
func startProgress(w io.Writer, start time.Time, line func(elapsed, interval time.Duration) string) (stop func()) {
	done := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		last := start
		for {
			select {
			case <-done:
				return
			case now := <-tick.C:
				fmt.Fprintln(w, line(now.Sub(start), now.Sub(last)))
				last = now
			}
		}
	}()
	return func() {
		close(done)
		<-stopped
	}
}
