package isrnode

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"quire/internal/isr"
	"quire/internal/isr/disklog"
	"quire/internal/loop"
)

// Status is what a replica shows of itself: its role and epoch, the ISR of
// the record it applied, and its offsets.
type Status struct {
	Partition      string
	Role           isr.Role
	Leader         isr.BrokerID
	LeaderEpoch    int32
	ISR            []isr.BrokerID
	HighWatermark  int64
	LogEndOffset   int64
	LogStartOffset int64
	// LeaderHighWatermark is the leader's HW as this replica knows it (its
	// own as leader, the last the leader sent as follower; -1: not known).
	LeaderHighWatermark int64
	// Truncations counts the times the replica cut its log (DivergingEpoch)
	// since it was opened.
	Truncations int64
}

func (s Status) same(o Status) bool {
	return s.Role == o.Role && s.Leader == o.Leader && s.LeaderEpoch == o.LeaderEpoch &&
		slices.Equal(s.ISR, o.ISR) && s.HighWatermark == o.HighWatermark && s.LogEndOffset == o.LogEndOffset &&
		s.LogStartOffset == o.LogStartOffset && s.Truncations == o.Truncations && s.LeaderHighWatermark == o.LeaderHighWatermark
}

// replica is one partition's replica on this broker: its disk log, its core
// and the goroutine (loop) that drives the core. Everything that touches the
// core or the log runs on the loop.
type replica struct {
	m     *Manager
	name  string
	disk  *disklog.Log
	log   *disklog.ISRLog
	core  *isr.Replica
	loop  *loop.Loop
	topic string
	index int32

	// Owned by the loop goroutine.
	lastID      uint64
	produces    map[uint64]chan isr.ProduceResponse
	fetches     map[uint64]chan isr.FetchResponse
	truncations int64
	logFailed   bool
	producers   producerTable // idempotent producers' last batches (producers.go)
	sync        deferredSync  // the core's Flush not done yet (producers.go)

	// mu guards status and changed, which other goroutines read.
	mu     sync.Mutex
	status Status
	// changed is closed, and replaced, whenever status changes: a
	// long-polling fetch waits on it. hwChanged likewise when the HW, the
	// role or the leader epoch changes, or the loop ends: a consumer's
	// long-poll waits on it.
	changed   chan struct{}
	hwChanged chan struct{}
	stopping  bool // the loop ended: waits end at once
}

// openReplica opens (or creates) the log of partition name and starts its
// core, with no partition record yet.
func (m *Manager) openReplica(name string, brokerEpoch int64) (*replica, error) {
	topic, index, ok := SplitPartitionName(name)
	if !ok {
		return nil, fmt.Errorf("partition %q: not a topic-partition name", name)
	}
	lcfg := m.cfg.Log
	lcfg.FS, lcfg.Dir = m.cfg.FS, m.cfg.FS.PathJoin(m.cfg.Dir, name)
	disk, err := disklog.Open(lcfg)
	if err != nil {
		return nil, fmt.Errorf("open the log of %s: %w", name, err)
	}
	r := &replica{m: m, name: name, disk: disk, log: disklog.NewRawISRLog(disk, stampBatch), topic: topic, index: index,
		produces: map[uint64]chan isr.ProduceResponse{}, fetches: map[uint64]chan isr.FetchResponse{},
		changed: make(chan struct{}), hwChanged: make(chan struct{})}
	rcfg := m.cfg.Replica
	if err := r.producers.rebuild(disk); err != nil {
		m.log.Warn("isr replica: rebuild the producer table", "partition", name, "err", err)
	}
	rcfg.Broker, rcfg.Partition, rcfg.BrokerEpoch, rcfg.Log = m.cfg.Broker, name, brokerEpoch, producerLog{r.log, &r.producers, &r.sync}
	// The fetcher long-polls at the leader (Fetch's max_wait_ms), so a
	// follower fetches again as soon as an answer is in: the core's backoff
	// after an empty answer, which stands in for the long-poll, is the
	// shortest there is. Errors are backed off by the fetcher.
	rcfg.FetchBackoff = time.Nanosecond
	r.core = isr.NewReplica(rcfg, time.Now())
	r.loop = loop.New(loop.Config{
		Tick:    m.cfg.Tick,
		OnTick:  func(now time.Time) { r.core.Tick(now) },
		Ready:   r.process,
		Stopped: r.stopped,
	})
	r.status = r.snapshot()
	go r.loop.Run()
	return r, nil
}

func (r *replica) nextID() uint64 {
	r.lastID++
	return r.lastID
}

// process carries out the core's Ready (loop goroutine).
//
// Fetch answers go out first, then the log syncs if the core flushed, then
// everything that counts on the sync: produce answers, the status, this
// replica's own fetches (see deferredSync).
func (r *replica) process() {
	var fetches []isr.FetchRequest
	var produces []isr.ProduceResponse
	for rd := r.core.Ready(); !rd.Empty(); rd = r.core.Ready() {
		fetches = append(fetches, rd.Fetches...)
		for _, f := range rd.FetchResponses {
			if ch, ok := r.fetches[f.ID]; ok {
				delete(r.fetches, f.ID)
				ch <- f
			}
		}
		produces = append(produces, rd.ProduceResponses...)
		for _, a := range rd.AlterPartitions {
			expand := len(a.NewISR) > len(r.core.State().ISR)
			go r.alterPartition(a, expand)
		}
		for _, ev := range rd.Events {
			if ev.Kind == isr.EventTruncated {
				r.truncations++
			}
			if ev.Kind != isr.EventHighWatermark && ev.Kind != isr.EventAckedAll && ev.Kind != isr.EventFlushed {
				r.m.log.Info("isr replica: "+ev.String(), "partition", r.name)
			}
		}
	}
	synced := r.syncLog()
	for _, p := range produces {
		if ch, ok := r.produces[p.ID]; ok {
			delete(r.produces, p.ID)
			if p.Err == nil && !synced {
				// What it answers for may not be on disk.
				p.Err, p.BaseOffset = ErrLogFailed, -1
			}
			ch <- p
		}
	}
	if err := r.log.Err(); err != nil && !r.logFailed {
		// The log refuses further appends; a later step reopens it (as
		// Kafka takes a failed log directory offline).
		r.logFailed = true
		r.m.log.Error("isr replica: log failed", "partition", r.name, "err", err)
	}
	// The status first: a fetch tells the leader this replica's LEO, and
	// once the leader acknowledges on it the LEO must already show here.
	r.publish()
	for _, f := range fetches {
		r.m.submitFetch(r, f)
	}
}

// snapshot reads the status off the core (loop goroutine).
func (r *replica) snapshot() Status {
	st := r.core.State()
	return Status{Partition: r.name, Role: r.core.Role(), Leader: st.Leader, LeaderEpoch: r.core.LeaderEpoch(),
		ISR: st.ISRIDs(), HighWatermark: r.core.HighWatermark(), LogEndOffset: r.core.LogEndOffset(),
		LogStartOffset: r.disk.LogStartOffset(), LeaderHighWatermark: r.core.LeaderHighWatermark(), Truncations: r.truncations}
}

// publish makes the status visible and wakes long-polls if it changed.
func (r *replica) publish() {
	st := r.snapshot()
	r.mu.Lock()
	defer r.mu.Unlock()
	if st.same(r.status) {
		return
	}
	if st.HighWatermark != r.status.HighWatermark || st.Role != r.status.Role || st.LeaderEpoch != r.status.LeaderEpoch {
		close(r.hwChanged)
		r.hwChanged = make(chan struct{})
	}
	r.status = st
	close(r.changed)
	r.changed = make(chan struct{})
}

// Status returns the replica's last published status.
func (r *replica) Status() Status {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.status
}

// stopped answers every caller still waiting when the loop ends.
func (r *replica) stopped() {
	for id, ch := range r.produces {
		delete(r.produces, id)
		ch <- isr.ProduceResponse{ID: id, Partition: r.name, Err: isr.ErrNotLeaderOrFollower, BaseOffset: -1}
	}
	for id, ch := range r.fetches {
		delete(r.fetches, id)
		ch <- isr.FetchResponse{ID: id, Partition: r.name, Err: isr.ErrNotLeaderOrFollower}
	}
	r.mu.Lock()
	close(r.changed)
	r.changed = make(chan struct{})
	close(r.hwChanged)
	r.hwChanged = make(chan struct{})
	r.stopping = true
	r.mu.Unlock()
}

// ErrLogFailed: the replica's log failed (a write or sync error; see
// disklog) and takes no more records until it is opened again: Kafka's
// KAFKA_STORAGE_ERROR.
var ErrLogFailed = errors.New("isrnode: replica log failed")

// errStopped: the replica's loop ended (the manager closed).
var errStopped = fmt.Errorf("isrnode: replica stopped: %w", isr.ErrNotLeaderOrFollower)

// run runs f on the loop and waits for it.
func (r *replica) run(ctx context.Context, f func()) error {
	ran := make(chan struct{})
	if err := r.loop.Post(ctx, func() { f(); close(ran) }); err != nil {
		if errors.Is(err, loop.ErrStopped) {
			return errStopped
		}
		return err
	}
	select {
	case <-ran:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// produce appends one raw record batch of count offsets through the core
// and waits for its answer.
func (r *replica) produce(ctx context.Context, raw []byte, count int32, acks int8) (int64, error) {
	answer, err := r.submit(ctx, raw, count, acks)
	if err != nil {
		return -1, err
	}
	select {
	case a := <-answer:
		return a.BaseOffset, a.Err
	case <-ctx.Done():
		return -1, fmt.Errorf("append to %s: %w", r.name, ctx.Err())
	}
}

// Appended answers a submitted batch: its base offset, or why not.
type Appended struct {
	BaseOffset int64
	Err        error
}

// submit hands one raw batch to the core (so batches submitted one after
// another are appended in that order) and returns the channel its answer
// arrives on: acks=1 once appended, acks=all once the HW passed it (or the
// core's timeout, ctx's deadline, ran out), acks=0 at once. The loop's end
// answers it too.
func (r *replica) submit(ctx context.Context, raw []byte, count int32, acks int8) (<-chan Appended, error) {
	ch := make(chan isr.ProduceResponse, 1)
	var timeout time.Duration
	if d, ok := ctx.Deadline(); ok {
		timeout = max(time.Until(d), time.Millisecond)
	}
	base := int64(-1)
	var dup *producedBatch
	var refused error
	err := r.run(ctx, func() {
		if r.core.Role() == isr.RoleLeader {
			if idem, ok := idempotenceOf(raw); ok {
				if dup, refused = r.producers.check(idem); dup != nil || refused != nil {
					// A retry of a batch in the log (answered only once
					// the log holds it durably, as its first attempt
					// is), or refused.
					if dup != nil && !r.syncLog() {
						dup, refused = nil, ErrLogFailed
					}
					return
				}
			}
		}
		id := r.nextID()
		if acks != isr.AcksNone {
			r.produces[id] = ch
		} else if r.core.Role() == isr.RoleLeader {
			base = r.core.LogEndOffset()
		}
		if r.log.Err() != nil {
			// The core treats its log as infallible (an append error
			// is a panic there): a failed log gets nothing more.
			ch <- isr.ProduceResponse{ID: id, Partition: r.name, Err: ErrLogFailed, BaseOffset: -1}
			delete(r.produces, id)
			base = -1
			return
		}
		r.core.Produce(isr.ProduceRequest{ID: id, Partition: r.name, Acks: acks, Raw: raw, Count: count, Timeout: timeout}, time.Now())
	})
	if err != nil {
		return nil, fmt.Errorf("append to %s: %w", r.name, err)
	}
	out := make(chan Appended, 1)
	switch {
	case refused != nil:
		out <- Appended{BaseOffset: -1, Err: fmt.Errorf("append to %s: %w", r.name, refused)}
		return out, nil
	case dup != nil:
		go r.answerDuplicate(ctx, *dup, acks, out)
		return out, nil
	}
	if acks == isr.AcksNone {
		out <- Appended{BaseOffset: base}
		return out, nil
	}
	go func() {
		resp := <-ch
		if resp.Err != nil {
			out <- Appended{BaseOffset: -1, Err: fmt.Errorf("append to %s: %w", r.name, resp.Err)}
			return
		}
		out <- Appended{BaseOffset: resp.BaseOffset}
	}()
	return out, nil
}

// answerDuplicate answers a retried batch with the first offset it has in
// the log: at once for acks 0 and 1; for acks=all once the HW passed it
// (the first attempt may not be committed yet), or NOT_LEADER_OR_FOLLOWER
// if this replica stops leading first, or REQUEST_TIMED_OUT at ctx's end.
func (r *replica) answerDuplicate(ctx context.Context, dup producedBatch, acks int8, out chan<- Appended) {
	if acks != isr.AcksAll {
		out <- Appended{BaseOffset: dup.base}
		return
	}
	for {
		r.mu.Lock()
		st, changed, stopping := r.status, r.hwChanged, r.stopping
		r.mu.Unlock()
		switch {
		case st.HighWatermark >= dup.next:
			out <- Appended{BaseOffset: dup.base}
			return
		case st.Role != isr.RoleLeader || stopping:
			out <- Appended{BaseOffset: -1, Err: fmt.Errorf("append to %s: %w", r.name, isr.ErrNotLeaderOrFollower)}
			return
		}
		select {
		case <-changed:
		case <-ctx.Done():
			out <- Appended{BaseOffset: -1, Err: fmt.Errorf("append to %s: %w", r.name, isr.ErrRequestTimedOut)}
			return
		}
	}
}

// fetch feeds a Fetch for this partition to the core and returns its
// answer, the log start, and the channel closed at the next status change
// (taken with the answer, so a change after it is never missed).
// syncLog does the core's pending Flush (see deferredSync) and reports
// whether the log is sound: false once it has failed.
func (r *replica) syncLog() bool {
	if r.sync.pending {
		r.sync.pending = false
		r.log.Flush()
	}
	return r.log.Err() == nil
}

func (r *replica) fetch(ctx context.Context, req isr.FetchRequest) (isr.FetchResponse, int64, <-chan struct{}, error) {
	ch := make(chan isr.FetchResponse, 1)
	var logStart int64
	var changed <-chan struct{}
	err := r.run(ctx, func() {
		req.ID = r.nextID()
		r.fetches[req.ID] = ch
		r.core.Fetch(req, time.Now())
		logStart = r.disk.LogStartOffset()
		r.mu.Lock()
		changed = r.changed
		r.mu.Unlock()
	})
	if err != nil {
		return isr.FetchResponse{}, 0, nil, err
	}
	select {
	case resp := <-ch:
		return resp, logStart, changed, nil
	case <-ctx.Done():
		return isr.FetchResponse{}, 0, nil, ctx.Err()
	}
}

// read returns up to maxBatches whole batches from the one holding offset
// from, none past the HW: a
// consumer's read, on the leader or a follower (which serves up to its own
// HW, as KIP-392's follower fetching does).
func (r *replica) read(ctx context.Context, from int64, maxBatches int) ([]isr.Batch, Status, error) {
	var out []isr.Batch
	var st Status
	var rerr error
	err := r.run(ctx, func() {
		st = r.snapshot()
		switch {
		case st.Role == isr.RoleNone:
			rerr = isr.ErrNotLeaderOrFollower
		case from < st.LogStartOffset || from > st.HighWatermark:
			rerr = fmt.Errorf("%w: %d not in [%d, %d]", isr.ErrOffsetOutOfRange, from, st.LogStartOffset, st.HighWatermark)
		default:
			out = cutBatches(r.log.Read(from, maxBatches), st.HighWatermark)
		}
	})
	if err == nil {
		err = rerr
	}
	if err != nil {
		return nil, st, fmt.Errorf("read %s at %d: %w", r.name, from, err)
	}
	return out, st, nil
}

// cutBatches drops every batch that ends past limit (the HW: a batch
// boundary, as followers fetch whole batches; a batch is never cut).
func cutBatches(batches []isr.Batch, limit int64) []isr.Batch {
	out := batches[:0]
	for _, b := range batches {
		if b.NextOffset() > limit {
			break
		}
		out = append(out, b)
	}
	return out
}

// alterPartition sends an ISR proposal to the controller and feeds the
// answer back (its own goroutine: the store's CAS takes a round trip).
func (r *replica) alterPartition(req isr.AlterPartitionRequest, expand bool) {
	ctx, cancel := context.WithTimeout(r.m.ctx, r.m.cfg.AlterPartitionTimeout)
	defer cancel()
	resp, err := r.m.cfg.Controller.AlterPartition(ctx, req)
	if err != nil && resp.Err == nil {
		resp.Err = fmt.Errorf("alter partition %s: %w", req.Partition, err)
	}
	switch {
	case resp.Err != nil:
	case expand:
		r.m.isrExpands.Add(1)
	default:
		r.m.isrShrinks.Add(1)
	}
	// The controller numbers requests its own way; the core matches its own.
	resp.ID, resp.Partition, resp.To = req.ID, req.Partition, req.Broker
	r.loop.Complete(func() { r.core.StepAlterPartition(resp, time.Now()) })
}

// stepFetchResponse feeds a fetch answer from the fetcher (loop
// goroutine). The core fetches again at once unless the answer was empty
// and its (nanosecond) backoff has not passed: the Tick after it gives it
// the time that has.
func (r *replica) stepFetchResponse(resp isr.FetchResponse) {
	if r.log.Err() != nil {
		return // a failed log takes no more batches (see produce)
	}
	r.core.StepFetchResponse(resp, time.Now())
	r.core.Tick(time.Now())
}

// close flushes the log and stops the loop; then closes the log.
func (r *replica) close() error {
	// Flush runs before the loop ends (every accepted function runs).
	_ = r.loop.Post(context.Background(), func() { r.core.Flush(time.Now()) })
	r.loop.Stop()
	<-r.loop.Done()
	closeErr := r.disk.Close()
	if err := r.log.Err(); err != nil {
		// Not a clean shutdown: what the log held may not be on disk.
		return fmt.Errorf("the log of %s failed: %w", r.name, err)
	}
	if closeErr != nil {
		return fmt.Errorf("close the log of %s: %w", r.name, closeErr)
	}
	return nil
}
