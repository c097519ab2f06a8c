package broker

// Pulsar topics' metrics under the seed's names, and the rates of the
// admin API's stats.
//
// Metrics (labels topic, and subscription where named), read at scrape
// time from each loaded topic's managed ledger and the front end:
//   - pulsar_storage_size: bytes in every ledger of the topic (the same
//     descriptor as Kafka partitions', in metrics.go);
//   - pulsar_in_messages_total, pulsar_in_bytes_total: messages and bytes
//     appended since the topic was loaded here; pulsar_out_messages_total,
//     pulsar_out_bytes_total: delivered to consumers (every subscription);
//   - pulsar_subscription_back_log: entries after the mark-delete position
//     not acknowledged (Pulsar's msgBacklog, which counts entries);
//   - pulsar_subscription_unacked_messages: delivered, not acknowledged;
//   - pulsar_subscription_blocked_on_unacked_messages: 1 while every
//     consumer is at its bound of unacknowledged messages;
//   - pulsar_subscription_msg_rate_redeliver: messages redelivered per
//     second over the rate window;
//   - pulsar_subscription_ack_ranges: ranges of individual acknowledgements
//     (ack holes, P9), and pulsar_subscription_unacked_ranges_in_memory: those
//     beyond managedLedgerMaxUnackedRangesToPersist, kept only in memory (a
//     crash redelivers their messages);
//   - pulsar_subscription_mark_delete_age_seconds: how long the mark-delete
//     position has not moved while there is backlog (P8).
//
// Rates (msgRateIn, msgThroughputIn, msgRateOut, msgRateRedeliver, ...):
// every pulsarRateSampleInterval the sampler copies the front end's
// counters of each open topic; a rate is the difference between the
// counters now and the oldest copy within pulsarRateWindow, divided by
// the time between them; for a topic opened within the window, between
// now and its opening (its counters were zero then). So a rate covers the
// last 10 s (at least 100 ms: 0 before), and a counter that went
// backwards (the topic was reloaded) counts from zero.

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"quire/internal/pulsar"
)

const (
	pulsarRateSampleInterval = time.Second
	pulsarRateWindow         = 10 * time.Second
)

// counterSample is a copy of a topic's counters, flattened by key
// (rateKey*).
type counterSample struct {
	at time.Time
	c  map[string]int64
	// opened is when the topic was opened (its counters were zero).
	opened time.Time
}

func rateKeyIn() string                    { return "in" }
func rateKeyInBytes() string               { return "in.bytes" }
func rateKeyProducerIn(name string) string { return "p.in/" + name }
func rateKeyProducerBytes(n string) string { return "p.bytes/" + n }
func rateKeyOut(sub string) string         { return "s.out/" + sub }
func rateKeyOutBytes(sub string) string    { return "s.bytes/" + sub }
func rateKeyRedeliver(sub string) string   { return "s.redeliver/" + sub }

// flatten copies the counters of a topic's front-end stats.
func flatten(fe pulsar.TopicStats, at time.Time) counterSample {
	c := map[string]int64{rateKeyIn(): fe.MsgIn, rateKeyInBytes(): fe.BytesIn}
	for _, p := range fe.Producers {
		c[rateKeyProducerIn(p.Name)] = p.MsgIn
		c[rateKeyProducerBytes(p.Name)] = p.BytesIn
	}
	for name, s := range fe.Subscriptions {
		c[rateKeyOut(name)] = s.MsgOut
		c[rateKeyOutBytes(name)] = s.BytesOut
		c[rateKeyRedeliver(name)] = s.Redelivered
	}
	return counterSample{at: at, c: c, opened: fe.Opened}
}

// rateSampler keeps each open topic's recent counter samples.
type rateSampler struct {
	mu      sync.Mutex
	samples map[string][]counterSample // by topic, oldest first, within the window
}

func newRateSampler() *rateSampler { return &rateSampler{samples: map[string][]counterSample{}} }

// sampleRates copies the counters of every open topic once per interval
// until ctx ends.
func (pb *pulsarBackend) sampleRates(ctx context.Context) {
	tick := time.NewTicker(pulsarRateSampleInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-tick.C:
			pb.rates.sample(pb.server, now)
		}
	}
}

func (r *rateSampler) sample(s *pulsar.Server, now time.Time) {
	names := s.Topics()
	fresh := make(map[string]counterSample, len(names))
	for _, name := range names {
		if fe, ok := s.TopicStats(name); ok {
			fresh[name] = flatten(fe, now)
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for name := range r.samples {
		if _, ok := fresh[name]; !ok {
			delete(r.samples, name) // no longer open here
		}
	}
	for name, smp := range fresh {
		ss := append(r.samples[name], smp)
		for len(ss) > 1 && now.Sub(ss[0].at) > pulsarRateWindow {
			ss = ss[1:]
		}
		r.samples[name] = ss
	}
}

// rates returns the per-second rate of each counter of now over the
// window (see the file comment); a topic opened within the window counts
// from its opening, when its counters were zero.
func (r *rateSampler) rates(topic string, now counterSample) func(key string) float64 {
	r.mu.Lock()
	var oldest counterSample
	if ss := r.samples[topic]; len(ss) > 0 {
		oldest = ss[0]
	}
	r.mu.Unlock()
	if o := now.opened; !o.IsZero() && now.at.Sub(o) <= pulsarRateWindow && (oldest.c == nil || o.Before(oldest.at)) {
		// A topic opened within the window: its counters were zero then.
		oldest = counterSample{at: o, c: map[string]int64{}}
	}
	dt := now.at.Sub(oldest.at).Seconds()
	return func(key string) float64 {
		if oldest.c == nil || dt < 0.1 {
			return 0
		}
		prev, ok := oldest.c[key]
		if !ok || prev > now.c[key] {
			prev = 0 // new since, or the counter restarted
		}
		return float64(now.c[key]-prev) / dt
	}
}

// pulsarDescs are the Pulsar topics' metrics (pulsar_storage_size is the
// collector's own storage descriptor).
type pulsarDescs struct {
	inMessages, inBytes, outMessages, outBytes *prometheus.Desc
	backlog, unacked, blocked, redeliverRate   *prometheus.Desc
	ackRanges, rangesInMemory, markDeleteAge   *prometheus.Desc
}

func newPulsarDescs() pulsarDescs {
	t := []string{"topic"}
	s := []string{"topic", "subscription"}
	return pulsarDescs{
		inMessages:     prometheus.NewDesc("pulsar_in_messages_total", "Messages appended to the Pulsar topic since it was loaded here.", t, nil),
		inBytes:        prometheus.NewDesc("pulsar_in_bytes_total", "Bytes appended to the Pulsar topic since it was loaded here.", t, nil),
		outMessages:    prometheus.NewDesc("pulsar_out_messages_total", "Messages delivered to the topic's consumers (every subscription, redeliveries included) since it was loaded here.", t, nil),
		outBytes:       prometheus.NewDesc("pulsar_out_bytes_total", "Bytes delivered to the topic's consumers since it was loaded here.", t, nil),
		backlog:        prometheus.NewDesc("pulsar_subscription_back_log", "Entries after the subscription's mark-delete position not acknowledged (msgBacklog).", s, nil),
		unacked:        prometheus.NewDesc("pulsar_subscription_unacked_messages", "Messages delivered to the subscription's consumers and not acknowledged.", s, nil),
		blocked:        prometheus.NewDesc("pulsar_subscription_blocked_on_unacked_messages", "1 while every consumer of the subscription is at its bound of unacknowledged messages.", s, nil),
		redeliverRate:  prometheus.NewDesc("pulsar_subscription_msg_rate_redeliver", "Messages redelivered per second (over the last 10 s).", s, nil),
		ackRanges:      prometheus.NewDesc("pulsar_subscription_ack_ranges", "Ranges of individually acknowledged entries above the mark-delete position (ack holes).", s, nil),
		rangesInMemory: prometheus.NewDesc("pulsar_subscription_unacked_ranges_in_memory", "Ack ranges beyond the persisted limit (managedLedgerMaxUnackedRangesToPersist), held only in memory: a crash redelivers their messages.", s, nil),
		markDeleteAge:  prometheus.NewDesc("pulsar_subscription_mark_delete_age_seconds", "How long the mark-delete position has not moved while there is backlog (storage held by an unacknowledged message).", s, nil),
	}
}

func (d pulsarDescs) describe(ch chan<- *prometheus.Desc) {
	for _, desc := range []*prometheus.Desc{d.inMessages, d.inBytes, d.outMessages, d.outBytes, d.backlog, d.unacked,
		d.blocked, d.redeliverRate, d.ackRanges, d.rangesInMemory, d.markDeleteAge} {
		ch <- desc
	}
}

// loaded returns the topics loaded and serving.
func (pb *pulsarBackend) loaded() []*pulsarTopic {
	pb.mu.Lock()
	var ts []*pulsarTopic
	for _, t := range pb.topics {
		ts = append(ts, t)
	}
	pb.mu.Unlock()
	out := ts[:0]
	for _, t := range ts {
		select {
		case <-t.ready:
			if t.err == nil && t.ml != nil {
				out = append(out, t)
			}
		default: // still loading
		}
	}
	return out
}

// collectPulsar exports the loaded Pulsar topics.
func (c *collector) collectPulsar(ch chan<- prometheus.Metric) {
	pb := c.b.pulsar.Load()
	if pb == nil {
		return
	}
	d := c.pulsar
	now := time.Now()
	for _, t := range pb.loaded() {
		ctx, cancel := context.WithTimeout(context.Background(), c.b.cfg.Timeouts.Stats)
		st, err := t.ml.Stats(ctx)
		cancel()
		if err != nil {
			continue
		}
		fe, _ := pb.server.TopicStats(t.name)
		rate := pb.rates.rates(t.name, flatten(fe, now))
		topic := func(desc *prometheus.Desc, kind prometheus.ValueType, v float64) {
			ch <- prometheus.MustNewConstMetric(desc, kind, v, t.name)
		}
		topic(c.storage, prometheus.GaugeValue, float64(st.StorageSize))
		// The managed ledger's read path is the Kafka partitions': its
		// cache and read-ahead under the same names.
		topic(c.cacheHits, prometheus.CounterValue, float64(st.CacheHits))
		topic(c.cacheMisses, prometheus.CounterValue, float64(st.CacheMisses))
		topic(c.aheadHits, prometheus.CounterValue, float64(st.ReadAheadHits))
		topic(c.aheadFetched, prometheus.CounterValue, float64(st.ReadAheadFetched))
		topic(c.aheadSkipped, prometheus.CounterValue, float64(st.ReadAheadSkipped))
		topic(c.aheadBytes, prometheus.GaugeValue, float64(st.ReadAheadBytes))
		topic(d.inMessages, prometheus.CounterValue, float64(fe.MsgIn))
		topic(d.inBytes, prometheus.CounterValue, float64(fe.BytesIn))
		var out, outBytes int64
		for _, s := range fe.Subscriptions {
			out += s.MsgOut
			outBytes += s.BytesOut
		}
		topic(d.outMessages, prometheus.CounterValue, float64(out))
		topic(d.outBytes, prometheus.CounterValue, float64(outBytes))
		sub := func(desc *prometheus.Desc, name string, v float64) {
			ch <- prometheus.MustNewConstMetric(desc, prometheus.GaugeValue, v, t.name, name)
		}
		durable := map[string]bool{}
		for _, cs := range st.Cursors {
			durable[cs.Name] = true
			sub(d.backlog, cs.Name, float64(cs.BacklogEntries))
			sub(d.ackRanges, cs.Name, float64(cs.Holes))
			sub(d.rangesInMemory, cs.Name, float64(cs.HolesInMemoryOnly))
			sub(d.markDeleteAge, cs.Name, cs.MarkDeleteAge.Seconds())
		}
		for name, s := range fe.Subscriptions {
			if !durable[name] && s.Durable {
				continue // deleted meanwhile
			}
			sub(d.unacked, name, float64(s.Unacked))
			sub(d.blocked, name, boolGauge(s.Blocked))
			sub(d.redeliverRate, name, rate(rateKeyRedeliver(name)))
		}
		for name := range durable {
			if _, open := fe.Subscriptions[name]; !open {
				// No consumer since the topic was loaded here: nothing
				// delivered, nothing blocked.
				sub(d.unacked, name, 0)
				sub(d.blocked, name, 0)
				sub(d.redeliverRate, name, 0)
			}
		}
	}
}

func boolGauge(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
