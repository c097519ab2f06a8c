package chaos

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// workload drives real Kafka clients (franz-go) against the cluster and
// records every operation in the history.
type workload struct {
	brokers    []string
	dial       func(ctx context.Context, network, addr string) (net.Conn, error)
	topic      string
	partitions int32
	// replicationFactor is CreateTopics' replication_factor: 1 in ledger
	// mode (which ignores it), the ISR namespace's factor in ISR mode.
	replicationFactor int16
	producers         int
	rate              int // records per second per producer
	acks              int // -1 (all) or 1 (the leader's)
	idempotent        bool
	history           *History
	logf              func(string, ...any)
}

// deliveryTimeout bounds how long a producer retries a record before its
// outcome becomes unknown. Longer than any one fault, so a record is rarely
// left unknown by a fault the harness heals.
const deliveryTimeout = 40 * time.Second

// maxBuffered bounds each producer's records buffered in the client.
const maxBuffered = 1000

func (w *workload) client(opts ...kgo.Opt) (*kgo.Client, error) {
	return kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(w.brokers...), kgo.Dialer(w.dial)}, opts...)...)
}

// createTopic creates the topic, retrying while the cluster settles.
func (w *workload) createTopic(ctx context.Context) error {
	cl, err := w.client()
	if err != nil {
		return err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	for {
		resp, err := adm.CreateTopic(ctx, w.partitions, w.replicationFactor, nil, w.topic)
		if err == nil && (resp.Err == nil || errors.Is(resp.Err, kerr.TopicAlreadyExists)) {
			return nil
		}
		if err == nil {
			err = resp.Err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("create topic %s: %w (last: %v)", w.topic, ctx.Err(), err)
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// produce runs the producers until stop is closed, then waits (at most
// drain, less if ctx ends) for the outcome of every record in flight. Every
// invoke in the history gets exactly one outcome. It reports whether every
// record got its outcome from the cluster within drain (false: the workload
// stalled, and records the client gave up on are unknown).
func (w *workload) produce(ctx context.Context, stop <-chan struct{}, drain time.Duration) (drained bool) {
	var wg sync.WaitGroup
	errs := make(chan error, w.producers)
	for p := 1; p <= w.producers; p++ {
		acks := kgo.AllISRAcks()
		if w.acks == 1 {
			acks = kgo.LeaderAck()
		}
		opts := []kgo.Opt{kgo.RequiredAcks(acks), kgo.RecordPartitioner(kgo.ManualPartitioner()),
			kgo.DefaultProduceTopic(w.topic), kgo.RecordDeliveryTimeout(deliveryTimeout), kgo.MaxBufferedRecords(maxBuffered),
			kgo.ProducerLinger(5 * time.Millisecond)}
		if !w.idempotent {
			opts = append(opts, kgo.DisableIdempotentWrite())
		}
		cl, err := w.client(opts...)
		if err != nil {
			w.logf("producer %d: %v", p, err)
			return false
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer cl.Close() // fails what is still buffered: recorded as unknown
			w.runProducer(cl, p, stop)
			ctx, cancel := context.WithTimeout(ctx, drain)
			defer cancel()
			if err := cl.Flush(ctx); err != nil {
				errs <- fmt.Errorf("producer %d: flush: %w", p, err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	drained = true
	for err := range errs {
		w.logf("%v (its records in flight are unknown)", err)
		drained = false
	}
	return drained
}

func (w *workload) runProducer(cl *kgo.Client, p int, stop <-chan struct{}) {
	tick := time.NewTicker(time.Second / time.Duration(w.rate))
	defer tick.Stop()
	for seq := int64(1); ; seq++ {
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			// Produce blocks while the buffer is full, and franz-go
			// times buffered records out only once a partition has a
			// leader to send them to: with every partition offline it
			// would block past stop for good. A full buffer skips the
			// tick instead (backpressure: nothing is invoked).
			if cl.BufferedProduceRecords() < maxBuffered {
				break
			}
		}
		value := fmt.Sprintf("p%d-%d", p, seq)
		partition := int32((seq + int64(p)) % int64(w.partitions))
		w.history.Add(Event{Kind: KindInvoke, Producer: p, Seq: seq, Value: value, Partition: partition})
		rec := &kgo.Record{Value: []byte(value), Partition: partition}
		// A background context: cancelling a record's context fails it,
		// and the workload must never be what fails a record.
		cl.Produce(context.Background(), rec, func(r *kgo.Record, err error) {
			e := Event{Kind: classify(err), Producer: p, Seq: seq, Value: value, Partition: partition}
			if err == nil {
				e.Offset = r.Offset
			} else {
				e.Err = err.Error()
			}
			w.history.Add(e)
		})
	}
}

// classify maps a produce outcome to ok, fail (the broker refused the
// record for good) or info (unknown: it may have been written).
func classify(err error) Kind {
	if err == nil {
		return KindOK
	}
	var ke *kerr.Error
	if errors.As(err, &ke) && !ke.Retriable {
		return KindFail
	}
	return KindInfo
}

// readAll reads every partition from offset 0 to its end offset (taken when
// the read starts) and records each record.
func (w *workload) readAll(ctx context.Context) error {
	cl, err := w.client()
	if err != nil {
		return err
	}
	adm := kadm.NewClient(cl)
	start := time.Now()
	var ends kadm.ListedOffsets
	for {
		ends, err = adm.ListEndOffsets(ctx, w.topic)
		if err == nil {
			err = ends.Error()
		}
		if err == nil && len(ends[w.topic]) == int(w.partitions) {
			break
		}
		select {
		case <-ctx.Done():
			cl.Close()
			return fmt.Errorf("list end offsets: %w (last: %v)", ctx.Err(), err)
		case <-time.After(500 * time.Millisecond):
		}
		start = time.Now()
	}
	cl.Close()

	want := map[int32]int64{}
	from := map[int32]kgo.Offset{}
	for p, o := range ends[w.topic] {
		want[p] = o.Offset
		from[p] = kgo.NewOffset().At(0)
		w.history.Add(Event{Time: start, Kind: KindReadStart, Partition: p, Offset: o.Offset})
	}
	cons, err := w.client(kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{w.topic: from}))
	if err != nil {
		return err
	}
	defer cons.Close()
	next := map[int32]int64{}
	for p, end := range want {
		if end == 0 {
			w.history.Add(Event{Kind: KindReadEnd, Partition: p})
		}
	}
	remaining := func() int {
		n := 0
		for p, end := range want {
			if next[p] < end {
				n++
			}
		}
		return n
	}
	for remaining() > 0 {
		fs := cons.PollFetches(ctx)
		if ctx.Err() != nil {
			return fmt.Errorf("read: %w (at %v of %v)", ctx.Err(), next, want)
		}
		fs.EachError(func(topic string, p int32, err error) { w.logf("read partition %d: %v", p, err) })
		fs.EachRecord(func(r *kgo.Record) {
			if r.Offset >= want[r.Partition] {
				return // past the end taken at the start: not part of this read
			}
			w.history.Add(Event{Kind: KindRead, Partition: r.Partition, Offset: r.Offset, Value: string(r.Value)})
			next[r.Partition] = r.Offset + 1
			if next[r.Partition] == want[r.Partition] {
				w.history.Add(Event{Kind: KindReadEnd, Partition: r.Partition, Offset: want[r.Partition]})
			}
		})
	}
	return nil
}
