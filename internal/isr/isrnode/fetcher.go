package isrnode

import (
	"context"
	"crypto/tls"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"quire/internal/isr"
)

// fetcher replicates every partition this broker follows whose leader is
// one source broker: the cores' fetch requests for it are gathered into one
// Kafka Fetch at a time (Kafka's replica fetcher thread, with
// num.replica.fetchers = 1), sent over a kgo connection to the source's
// Kafka listener, and each partition's answer goes back to its core. The
// leader holds the Fetch while it has nothing new (max_wait_ms), so a
// follower fetches again as soon as an answer is in; a failed Fetch, and a
// partition answered with an error, wait FetchBackoff first. A partition
// the follower throttle holds back (throttle.go) waits out of the Fetch
// until the rate allows it.
type fetcher struct {
	m      *Manager
	source isr.BrokerID
	ctx    context.Context
	cancel context.CancelFunc
	wake   chan struct{} // capacity 1: pending changed
	done   chan struct{}

	mu sync.Mutex
	// pending holds each partition's next fetch, as its core asked for it.
	pending map[string]pendingFetch
	// backoff holds partitions answered with an error: their next fetch
	// is not sent before the time given.
	backoff map[string]time.Time
	// awaiting holds partitions answered whose cores have not asked for
	// their next fetch yet; the next Fetch waits for them (until
	// awaitUntil), or partitions answered at different times would take
	// turns, one long-poll each, instead of sharing one Fetch.
	awaiting   map[string]bool
	awaitUntil time.Time

	// Owned by the fetcher goroutine.
	client *kgo.Client
}

type pendingFetch struct {
	r   *replica
	req isr.FetchRequest
}

// submitFetch hands a core's fetch to the fetcher of its leader (replica
// loop goroutine), dropping any older fetch of the partition that another
// fetcher holds: the partition's leader moved.
func (m *Manager) submitFetch(r *replica, req isr.FetchRequest) {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return
	}
	for id, f := range m.fetchers {
		if id != req.To {
			f.forget(r.name)
		}
	}
	f := m.fetchers[req.To]
	if f == nil {
		ctx, cancel := context.WithCancel(m.ctx)
		f = &fetcher{m: m, source: req.To, ctx: ctx, cancel: cancel, wake: make(chan struct{}, 1), done: make(chan struct{}),
			pending: map[string]pendingFetch{}, backoff: map[string]time.Time{}, awaiting: map[string]bool{}}
		m.fetchers[req.To] = f
		go f.run()
	}
	m.mu.Unlock()
	f.submit(r, req)
}

func (f *fetcher) submit(r *replica, req isr.FetchRequest) {
	f.mu.Lock()
	f.pending[r.name] = pendingFetch{r: r, req: req}
	delete(f.awaiting, r.name)
	f.mu.Unlock()
	select {
	case f.wake <- struct{}{}:
	default:
	}
}

func (f *fetcher) forget(partition string) {
	f.mu.Lock()
	delete(f.pending, partition)
	delete(f.awaiting, partition)
	f.mu.Unlock()
}

func (f *fetcher) close() {
	f.cancel()
	<-f.done
}

// take removes the fetches that may be sent now; when there are none it
// says how long until some may (0: none until a core asks).
func (f *fetcher) take() (map[string]pendingFetch, time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	now := time.Now()
	if len(f.awaiting) > 0 {
		if now.Before(f.awaitUntil) {
			return nil, f.awaitUntil.Sub(now)
		}
		clear(f.awaiting) // a core that changed its mind (it leads now, or follows nobody)
	}
	var batch map[string]pendingFetch
	var wait time.Duration
	for name, pf := range f.pending {
		if until, ok := f.backoff[name]; ok && now.Before(until) {
			if d := until.Sub(now); wait == 0 || d < wait {
				wait = d
			}
			continue
		}
		if f.held(pf.r) {
			// Throttled and out of sync while the follower rate is over
			// its bound: left out of this Fetch, and fetched from where
			// it is once the rate is back under (throttle.go).
			if over, d := f.m.throttle.follower.exceeded(now); over {
				if wait == 0 || d < wait {
					wait = d
				}
				continue
			}
		}
		delete(f.backoff, name)
		if batch == nil {
			batch = map[string]pendingFetch{}
		}
		batch[name] = pf
		delete(f.pending, name)
	}
	return batch, wait
}

func (f *fetcher) run() {
	defer close(f.done)
	defer func() {
		if f.client != nil {
			f.client.Close()
		}
	}()
	failures := 0
	for {
		batch, wait := f.take()
		if len(batch) == 0 {
			var timer *time.Timer
			var expired <-chan time.Time
			if wait > 0 {
				timer = time.NewTimer(wait)
				expired = timer.C
			}
			select {
			case <-f.ctx.Done():
			case <-f.wake:
			case <-expired:
			}
			if timer != nil {
				timer.Stop()
			}
			if f.ctx.Err() != nil {
				return
			}
			continue
		}
		resp, err := f.send(batch)
		if err != nil {
			if f.ctx.Err() != nil {
				return
			}
			failures++
			f.m.log.Warn("isr fetcher: fetch failed", "source", f.source, "partitions", len(batch), "err", err)
			for name, pf := range batch {
				f.deliver(pf, isr.FetchResponse{Err: err}, name, false)
			}
			// Back off before the cores' next fetches go out: from
			// FetchBackoff / 10 doubling to FetchBackoff (a leader that
			// restarted is found again quickly, a dead one not hammered).
			d := min(f.m.cfg.FetchBackoff/10<<min(failures-1, 4), f.m.cfg.FetchBackoff)
			select {
			case <-f.ctx.Done():
				return
			case <-time.After(d):
			}
			continue
		}
		failures = 0
		f.answer(batch, resp)
	}
}

// request builds one Fetch for the batch: partitions of a topic together,
// in name order.
func (f *fetcher) request(batch map[string]pendingFetch) *kmsg.FetchRequest {
	cfg := f.m.cfg
	req := kmsg.NewPtrFetchRequest()
	req.ReplicaID = int32(cfg.Broker)
	req.ReplicaState.ID = int32(cfg.Broker)
	req.MaxWaitMillis = int32(cfg.FetchMaxWait.Milliseconds())
	req.MinBytes = 1
	req.MaxBytes = cfg.FetchMaxBytes
	req.SessionID, req.SessionEpoch = 0, -1 // no fetch session: a full fetch every time
	names := make([]string, 0, len(batch))
	for name := range batch {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		pf := batch[name]
		req.ReplicaState.Epoch = pf.req.BrokerEpoch
		if n := len(req.Topics); n == 0 || req.Topics[n-1].Topic != pf.r.topic {
			t := kmsg.NewFetchRequestTopic()
			t.Topic, t.TopicID = pf.r.topic, cfg.TopicID(pf.r.topic)
			req.Topics = append(req.Topics, t)
		}
		p := kmsg.NewFetchRequestTopicPartition()
		p.Partition = pf.r.index
		p.CurrentLeaderEpoch = pf.req.CurrentLeaderEpoch
		p.FetchOffset = pf.req.FetchOffset
		p.LastFetchedEpoch = pf.req.LastFetchedEpoch
		p.LogStartOffset = -1
		p.PartitionMaxBytes = cfg.FetchPartitionMaxBytes
		if f.held(pf.r) {
			p.PartitionMaxBytes = f.m.throttle.follower.share(cfg.FetchPartitionMaxBytes)
		}
		t := &req.Topics[len(req.Topics)-1]
		t.Partitions = append(t.Partitions, p)
	}
	return req
}

// send issues the Fetch to the source broker, connecting first if need be;
// a failed connection is dropped, so the next send resolves the source's
// address again (a restarted broker may listen elsewhere).
func (f *fetcher) send(batch map[string]pendingFetch) (*kmsg.FetchResponse, error) {
	if f.client == nil {
		addr, err := f.m.cfg.Resolve(f.source)
		if err != nil {
			return nil, fmt.Errorf("resolve broker %d: %w", f.source, err)
		}
		cl, err := newReplicaClient(addr, f.m.cfg.Broker, f.m.fetchTLS())
		if err != nil {
			return nil, fmt.Errorf("client for broker %d at %s: %w", f.source, addr, err)
		}
		f.client = cl
	}
	ctx, cancel := context.WithTimeout(f.ctx, f.m.cfg.FetchMaxWait+30*time.Second)
	defer cancel()
	kresp, err := f.client.SeedBrokers()[0].Request(ctx, f.request(batch))
	if err == nil {
		resp := kresp.(*kmsg.FetchResponse)
		if resp.ErrorCode == 0 {
			return resp, nil
		}
		err = kerr.ErrorForCode(resp.ErrorCode)
	}
	f.client.Close()
	f.client = nil
	return nil, fmt.Errorf("fetch from broker %d: %w", f.source, err)
}

// fetchTLS is the TLS configuration this manager's fetchers dial leaders'
// Kafka listeners with (Config.FetchTLS); nil: plaintext.
func (m *Manager) fetchTLS() *tls.Config { return m.cfg.FetchTLS }

// newReplicaClient is the kgo client a follower fetches from a leader's
// Kafka listener at addr with, over TLS when tlsCfg is set: tlsCfg is the
// broker's own identity (tlsconf.Client: the CA of the leaders' listener
// certificates, and the client certificate a listener requiring mutual TLS
// asks for). Its subject is the follower's principal, so with
// --kafka-authorizer on it must be a super user (--kafka-super-users), as
// Kafka's inter-broker principal is: replica fetches are cluster actions.
// The leader's certificate is checked against addr's host. Without tlsCfg
// the client dials in plaintext, as before.
func newReplicaClient(addr string, broker isr.BrokerID, tlsCfg *tls.Config) (*kgo.Client, error) {
	opts := []kgo.Opt{kgo.SeedBrokers(addr), kgo.ClientID(fmt.Sprintf("quire-replica-fetcher-%d", broker))}
	if tlsCfg != nil {
		// kgo clones the configuration per dial and sets ServerName from addr.
		opts = append(opts, kgo.DialTLSConfig(tlsCfg))
	}
	return kgo.NewClient(opts...)
}

// answer hands each partition's answer to its core; a partition the
// response left out is answered with an error.
func (f *fetcher) answer(batch map[string]pendingFetch, resp *kmsg.FetchResponse) {
	byID := map[[16]byte]string{}
	for _, pf := range batch {
		byID[f.m.cfg.TopicID(pf.r.topic)] = pf.r.topic
	}
	answered := map[string]bool{}
	for _, t := range resp.Topics {
		topic := t.Topic
		if resp.Version >= 13 {
			topic = byID[t.TopicID]
		}
		for _, p := range t.Partitions {
			name := PartitionName(topic, p.Partition)
			pf, ok := batch[name]
			if !ok || answered[name] {
				continue
			}
			answered[name] = true
			out := isr.FetchResponse{HighWatermark: p.HighWatermark, Err: errorOf(p.ErrorCode), LeaderEpoch: pf.req.CurrentLeaderEpoch}
			if p.CurrentLeader.LeaderEpoch >= 0 {
				out.LeaderEpoch = p.CurrentLeader.LeaderEpoch
			}
			switch {
			case out.Err != nil:
			case p.DivergingEpoch.EndOffset >= 0:
				out.Diverging = &isr.EpochEndOffset{Epoch: p.DivergingEpoch.Epoch, EndOffset: p.DivergingEpoch.EndOffset}
			default:
				batches, err := decodeBatches(p.RecordBatches)
				if err != nil {
					out.Err = fmt.Errorf("fetch %s from broker %d: %w", name, f.source, err)
				}
				out.Batches = batches
				if f.m.throttle.followerThrottled(pf.r) {
					// Every byte of a throttled partition counts, in sync
					// or not, as Kafka's follower quota records them.
					f.m.throttle.recordFollower(len(p.RecordBatches), time.Now())
				}
			}
			f.deliver(pf, out, name, out.Err != nil)
		}
	}
	for name, pf := range batch {
		if !answered[name] {
			f.deliver(pf, isr.FetchResponse{Err: fmt.Errorf("fetch %s from broker %d: %w", name, f.source, isr.ErrUnknownPartition)}, name, true)
		}
	}
}

// held reports whether a partition's fetches are subject to the follower
// throttle: throttled here, and this replica not in its ISR (in-sync
// replication is never held back).
func (f *fetcher) held(r *replica) bool {
	return f.m.throttle.followerThrottled(r) && !inSync(r, f.m.cfg.Broker)
}

// resubmitGrace bounds how long a Fetch waits for the cores just answered
// to ask again: they do so at once unless their role changed.
const resubmitGrace = 20 * time.Millisecond

// deliver completes one partition's fetch on its replica's loop; backOff
// holds the partition's next fetch back (an error of its own: a failed
// Fetch as a whole backs off the fetcher instead).
func (f *fetcher) deliver(pf pendingFetch, out isr.FetchResponse, name string, backOff bool) {
	out.ID, out.Partition, out.From, out.ReplicaID, out.LogEndOffset = pf.req.ID, name, f.source, f.m.cfg.Broker, -1
	if out.Err != nil {
		out.Batches = nil
	}
	f.mu.Lock()
	if backOff {
		f.backoff[name] = time.Now().Add(f.m.cfg.FetchBackoff)
	}
	if _, asked := f.pending[name]; !asked {
		f.awaiting[name] = true
		f.awaitUntil = time.Now().Add(resubmitGrace)
	}
	f.mu.Unlock()
	r := pf.r
	r.loop.Complete(func() { r.stepFetchResponse(out) })
}
