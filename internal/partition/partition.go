package partition

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"quire/internal/kafka"
	"quire/internal/meta"
)

// Config configures one partition.
type Config struct {
	// Name is the partition's full name (for logs and errors).
	Name string
	Log  Log
	// Store and FloorKey keep the partition's offset floor: the next offset
	// as of the last load, so offsets never go back even when retention has
	// deleted every ledger that held them.
	Store    meta.Store
	FloorKey string
	// ScanBack is how many entries at the log's tail are read on load to
	// rebuild the producer table and the in-memory index (default 2,000),
	// and ScanBackBytes how many bytes at most (default 64 MiB; by the
	// segments' sizes): a takeover reads this much before it serves.
	ScanBack      int
	ScanBackBytes int64
	// MaxIndexed bounds the in-memory index of recent batches (default
	// 50,000); older offsets are found by binary search over the log.
	MaxIndexed int
	// MaxBatchBytes is the largest batch the log can store as one entry
	// (0: no limit); larger ones get MESSAGE_TOO_LARGE.
	MaxBatchBytes int
	// ProducerExpiry is how long an idempotent producer that appends
	// nothing stays in the dedup table (Kafka's producer.id.expiration.ms,
	// default 24h); ExpireProducers applies it.
	ProducerExpiry time.Duration
	// Compacted, when set and true, says the topic is compacted
	// (cleanup.policy has compact): records without a key are refused
	// with INVALID_RECORD, as Kafka does, and the log may have gaps — a
	// read of an offset compaction removed returns the next batch that
	// survived. It is read on every append and read (a config change
	// applies at once).
	Compacted func() bool
	// Transactions accepts transactional batches (from producers with a
	// transactional id, which only a transaction coordinator hands out)
	// and AppendMarker's markers; without it they are refused with
	// INVALID_RECORD. Control batches from clients are always refused.
	Transactions bool
	// OnFail is called (once, without locks held) when the partition stops
	// serving because its log failed or was fenced by a new owner; never
	// after Close.
	OnFail func(error)
	Logger *slog.Logger
}

// indexed is one batch of the in-memory index.
type indexed struct {
	base, last int64
	maxTs      int64 // the batch's max timestamp
	maxSoFar   int64 // the largest max timestamp up to and including it
	pos        Pos
	size       int32
}

type pending struct {
	batch  Batch
	ack    <-chan AppendAck
	rec    *batchRecord // nil for non-idempotent batches
	result chan kafka.AppendResult
	size   int32
}

// Partition is one Kafka partition served from a Log. It implements
// kafka.Partition.
type Partition struct {
	cfg Config
	log *slog.Logger

	mu        sync.Mutex
	next      int64 // next offset to assign
	hw        int64 // one past the last durable offset
	logStart  int64
	index     []indexed
	producers producers
	txns      *txnTracker
	hwCh      chan struct{} // closed when hw advances or the partition fails
	failed    error
	queue     []*pending
	wake      chan struct{}
	firsts    map[int64]int64    // segment → base offset of its first batch
	hints     map[int64]readHint // next offset → where it is, after sequential reads
	// rewrites: the log's Rewrites when index and hints were built; they
	// are dropped when it changes (a compaction renumbered positions).
	rewrites uint64
	// compactedSegs: the segments compaction rewrote, as the log listed
	// them last: a gap in one is compaction's, not retention's.
	compactedSegs map[int64]bool
	maxTs         int64
	maxTsOff      int64
	// readAvg is the average size of the entries the last read returned:
	// it bounds the first request of the next read (see readAt).
	readAvg int64
	closing bool
	// refreshing: a background RefreshStart is running (at most one).
	refreshing bool
	// refreshes counts background refreshes started (tests).
	refreshes int
	// admitTimeouts counts appends that found no room in the log before
	// their produce's deadline (answered REQUEST_TIMED_OUT, not written).
	admitTimeouts atomic.Int64

	stop     chan struct{}
	stopped  chan struct{}
	failOnce sync.Once
	stopOnce sync.Once
}

var (
	_ kafka.Partition              = (*Partition)(nil)
	_ kafka.TransactionalPartition = (*Partition)(nil)
)

// Open loads a partition from its log: the next offset from the last batch
// (or the stored floor), the log start from the first, and the producer
// table and index from the last ScanBack entries.
func Open(ctx context.Context, cfg Config) (*Partition, error) {
	if cfg.ScanBack <= 0 {
		cfg.ScanBack = 2000
	}
	if cfg.ScanBackBytes <= 0 {
		cfg.ScanBackBytes = 64 << 20
	}
	if cfg.MaxIndexed <= 0 {
		cfg.MaxIndexed = 50_000
	}
	if cfg.ProducerExpiry <= 0 {
		cfg.ProducerExpiry = DefaultProducerExpiry
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	p := &Partition{
		cfg: cfg, log: cfg.Logger.With("partition", cfg.Name),
		producers: newProducers(), txns: newTxnTracker(), hwCh: make(chan struct{}), wake: make(chan struct{}, 1),
		firsts: map[int64]int64{}, hints: map[int64]readHint{}, maxTs: -1, maxTsOff: -1,
		stop: make(chan struct{}), stopped: make(chan struct{}),
	}
	if err := p.load(ctx); err != nil {
		return nil, fmt.Errorf("load partition %s: %w", cfg.Name, err)
	}
	go p.acker()
	return p, nil
}

type floorRecord struct {
	Next int64 `json:"next"`
}

func (p *Partition) load(ctx context.Context) error {
	segs, err := p.segments(ctx)
	if err != nil {
		return err
	}
	var next, start int64
	if len(segs) > 0 {
		last := segs[len(segs)-1]
		b, _, err := p.readBatch(ctx, Pos{Segment: last.ID, Entry: last.Entries - 1})
		if err != nil {
			return fmt.Errorf("read the last batch: %w", err)
		}
		next = b.LastOffset() + 1
		start, err = p.firstOffset(ctx, segs[0])
		if err != nil {
			return err
		}
	}
	floor, version, err := p.readFloor(ctx)
	if err != nil {
		return err
	}
	if floor > next {
		if len(segs) > 0 {
			return fmt.Errorf("log ends at offset %d below the stored floor %d", next, floor)
		}
		next = floor
	}
	if len(segs) == 0 {
		start = next
	}
	if err := p.writeFloor(ctx, next, version); err != nil {
		return err
	}
	p.next, p.hw, p.logStart = next, next, start

	// Rebuild the producer table and the index from the tail.
	from, ok := tailStart(segs, p.cfg.ScanBack, p.cfg.ScanBackBytes)
	if !ok {
		return nil
	}
	for {
		// A few entries at a time: they are parsed and dropped, so what
		// the scan holds stays small however large the entries are.
		es, err := p.cfg.Log.Read(ctx, from, 16)
		if err != nil {
			return fmt.Errorf("scan the tail: %w", err)
		}
		if len(es) == 0 {
			break
		}
		for _, e := range es {
			b, err := ParseBatch(e.Payload)
			if err != nil {
				p.log.Warn("skipping an entry that is not a record batch", "pos", e.Pos, "err", err)
				continue
			}
			p.indexBatch(b, e.Pos, int32(len(e.Payload)))
			switch {
			case b.Control():
				commit, coordinatorEpoch, err := ParseControl(e.Payload)
				if err != nil {
					p.log.Warn("skipping a control batch that is not a marker", "pos", e.Pos, "err", err)
					continue
				}
				_ = p.producers.fence(b.ProducerID, b.ProducerEpoch, time.Now())
				p.txns.observe(b, commit, coordinatorEpoch)
			case b.Idempotent():
				p.producers.record(b, doneRecord(), time.Now())
				p.txns.observe(b, false, 0)
			}
		}
		last := es[len(es)-1].Pos
		from = Pos{Segment: last.Segment, Entry: last.Entry + 1}
	}
	// The scan read like a consumer behind the tail and started the
	// log's read-ahead, which would hold its share of the broker's
	// read-ahead budget for a reader that never comes back.
	if f, ok := p.cfg.Log.(ReadAheadForgetter); ok {
		f.ForgetReaders()
	}
	return nil
}

// tailStart is the position n entries before the end of segs, or later so
// that the entries after it hold about maxBytes at most (by each segment's
// average entry size, where its size is known).
func tailStart(segs []Segment, n int, maxBytes int64) (Pos, bool) {
	if len(segs) == 0 {
		return Pos{}, false
	}
	left, bytesLeft := int64(n), maxBytes
	for i := len(segs) - 1; i >= 0; i-- {
		take := min(left, segs[i].Entries)
		if s := segs[i]; s.Bytes > 0 && s.Entries > 0 {
			avg := max(s.Bytes/s.Entries, 1)
			take = min(take, max(bytesLeft/avg, 1))
			bytesLeft -= take * avg
		}
		left -= take
		if left <= 0 || bytesLeft <= 0 || i == 0 {
			return Pos{Segment: segs[i].ID, Entry: segs[i].Entries - take}, true
		}
	}
	return Pos{}, false
}

func (p *Partition) readFloor(ctx context.Context) (int64, meta.Version, error) {
	if p.cfg.Store == nil {
		return 0, 0, nil
	}
	kv, err := p.cfg.Store.Get(ctx, p.cfg.FloorKey)
	if errors.Is(err, meta.ErrNotFound) {
		return 0, 0, nil
	}
	if err != nil {
		return 0, 0, fmt.Errorf("read the offset floor: %w", err)
	}
	var f floorRecord
	if err := json.Unmarshal(kv.Value, &f); err != nil {
		return 0, 0, fmt.Errorf("decode the offset floor: %w", err)
	}
	return f.Next, kv.Version, nil
}

func (p *Partition) writeFloor(ctx context.Context, next int64, version meta.Version) error {
	if p.cfg.Store == nil {
		return nil
	}
	v, _ := json.Marshal(floorRecord{Next: next})
	var err error
	if version == 0 {
		_, err = p.cfg.Store.Create(ctx, p.cfg.FloorKey, v)
	} else {
		_, err = p.cfg.Store.Put(ctx, p.cfg.FloorKey, v, version)
	}
	if err != nil {
		// Another owner wrote it: we were fenced or raced a takeover.
		return fmt.Errorf("write the offset floor: %w", err)
	}
	return nil
}

// readBatch reads and parses the entry at pos exactly.
func (p *Partition) readBatch(ctx context.Context, pos Pos) (Batch, []byte, error) {
	es, err := p.cfg.Log.Read(ctx, pos, 1)
	if err != nil {
		return Batch{}, nil, err
	}
	if len(es) == 0 || es[0].Pos != pos {
		return Batch{}, nil, fmt.Errorf("entry %s is not readable", pos)
	}
	b, err := ParseBatch(es[0].Payload)
	return b, es[0].Payload, err
}

func (p *Partition) firstOffset(ctx context.Context, s Segment) (int64, error) {
	p.mu.Lock()
	f, ok := p.firsts[s.ID]
	p.mu.Unlock()
	if ok {
		return f, nil
	}
	b, _, err := p.readBatch(ctx, Pos{Segment: s.ID, Entry: 0})
	if err != nil {
		return 0, fmt.Errorf("read the first batch of segment %d: %w", s.ID, err)
	}
	p.mu.Lock()
	p.firsts[s.ID] = b.BaseOffset
	p.mu.Unlock()
	return b.BaseOffset, nil
}

// indexBatch appends a durable batch to the in-memory index. Called with
// mu held (or before the partition is shared).
func (p *Partition) indexBatch(b Batch, pos Pos, size int32) {
	so := b.MaxTimestamp
	if n := len(p.index); n > 0 && p.index[n-1].maxSoFar > so {
		so = p.index[n-1].maxSoFar
	}
	p.index = append(p.index, indexed{base: b.BaseOffset, last: b.LastOffset(), maxTs: b.MaxTimestamp, maxSoFar: so, pos: pos, size: size})
	if len(p.index) > p.cfg.MaxIndexed {
		drop := len(p.index) - p.cfg.MaxIndexed/2
		p.index = append([]indexed(nil), p.index[drop:]...)
	}
	if b.MaxTimestamp >= p.maxTs {
		p.maxTs, p.maxTsOff = b.MaxTimestamp, b.LastOffset()
	}
	if _, ok := p.firsts[pos.Segment]; !ok && pos.Entry == 0 {
		p.firsts[pos.Segment] = b.BaseOffset
	}
}

// Append implements kafka.Partition.
func (p *Partition) Append(ctx context.Context, raw []byte) <-chan kafka.AppendResult {
	out := make(chan kafka.AppendResult, 1)
	if p.cfg.MaxBatchBytes > 0 && len(raw) > p.cfg.MaxBatchBytes {
		out <- kafka.AppendResult{Err: kerr.MessageTooLarge}
		return out
	}
	b, err := ParseBatch(raw)
	if err != nil {
		out <- kafka.AppendResult{Err: batchErr(err)}
		return out
	}
	if b.Control() || b.Transactional() && (!p.cfg.Transactions || !b.Idempotent()) {
		out <- kafka.AppendResult{Err: kerr.InvalidRecord}
		return out
	}
	if p.compacted() {
		// Kafka: "Compacted topic cannot accept message without key".
		keyless, err := HasKeylessRecord(b, raw)
		if err != nil {
			out <- kafka.AppendResult{Err: kerr.CorruptMessage}
			return out
		}
		if keyless {
			out <- kafka.AppendResult{Err: kerr.InvalidRecord}
			return out
		}
	}
	// Room in the log first, without the lock: a full log makes this
	// produce wait, and nothing else.
	permit, err := p.admitLocked(ctx)
	if err != nil {
		out <- kafka.AppendResult{Err: err}
		return out
	}
	defer p.mu.Unlock()
	var rec *batchRecord
	if b.Idempotent() {
		dup, err := p.producers.check(b)
		if err != nil || dup != nil {
			permit.Release()
		}
		switch {
		case err != nil:
			out <- kafka.AppendResult{Err: seqErr(err)}
			return out
		case dup != nil:
			go func() {
				<-dup.done
				if dup.err != nil {
					out <- kafka.AppendResult{Err: kerr.NotLeaderForPartition}
					return
				}
				p.mu.Lock()
				ls := p.logStart
				p.mu.Unlock()
				out <- kafka.AppendResult{BaseOffset: dup.base, LogAppendTime: -1, LogStartOffset: ls}
			}()
			return out
		}
		rec = &batchRecord{done: make(chan struct{})}
	}
	payload := make([]byte, len(raw))
	copy(payload, raw)
	b.BaseOffset = p.next
	setOffsets(payload, b.BaseOffset, b.LeaderEpoch)
	p.next = b.LastOffset() + 1
	if rec != nil {
		p.producers.record(b, rec, time.Now())
	}
	p.txns.observe(b, false, 0)
	p.enqueue(&pending{batch: b, ack: permit.Append(payload), rec: rec, result: out, size: int32(len(payload))})
	return out
}

// admitLocked waits for room in the log and then takes mu. On success the
// caller holds mu and the permit; otherwise nothing is held and the error
// (a kerr error) answers the append: REQUEST_TIMED_OUT when the produce's
// deadline passed waiting (a full log), NOT_LEADER_OR_FOLLOWER when the
// partition stopped serving.
func (p *Partition) admitLocked(ctx context.Context) (Permit, error) {
	permit, err := p.cfg.Log.Admit(ctx)
	if err != nil {
		if ctx.Err() != nil {
			p.admitTimeouts.Add(1)
			return nil, kerr.RequestTimedOut
		}
		return nil, kerr.NotLeaderForPartition
	}
	p.mu.Lock()
	if p.failed != nil || p.closing {
		p.mu.Unlock()
		permit.Release()
		return nil, kerr.NotLeaderForPartition
	}
	return permit, nil
}

// enqueue hands an append whose offsets are assigned to the acker; the
// caller holds mu.
func (p *Partition) enqueue(pd *pending) {
	p.queue = append(p.queue, pd)
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// AppendMarker appends a transaction marker (a control batch: commit or
// abort of producer pid's open transaction, written by the transaction
// coordinator of coordinatorEpoch). A marker of an epoch older than the
// producer's is refused with PRODUCER_FENCED; one of a newer epoch fences
// the producer's older epochs.
func (p *Partition) AppendMarker(ctx context.Context, pid int64, epoch int16, commit bool, coordinatorEpoch int32) <-chan kafka.AppendResult {
	out := make(chan kafka.AppendResult, 1)
	if !p.cfg.Transactions {
		out <- kafka.AppendResult{Err: kerr.InvalidRecord}
		return out
	}
	raw := ControlBatch(pid, epoch, commit, coordinatorEpoch, time.Now().UnixMilli())
	permit, err := p.admitLocked(ctx)
	if err != nil {
		out <- kafka.AppendResult{Err: err}
		return out
	}
	defer p.mu.Unlock()
	if p.txns.stale(pid, coordinatorEpoch) {
		// A late copy of a marker applied here already (the coordinator
		// that sent it has not learnt it was superseded): done, and
		// nothing written.
		permit.Release()
		out <- kafka.AppendResult{BaseOffset: -1, LogAppendTime: -1, LogStartOffset: p.logStart}
		return out
	}
	if err := p.producers.fence(pid, epoch, time.Now()); err != nil {
		permit.Release()
		out <- kafka.AppendResult{Err: kerr.InvalidProducerEpoch}
		return out
	}
	b, _ := ParseBatch(raw)
	b.BaseOffset = p.next
	setOffsets(raw, b.BaseOffset, b.LeaderEpoch)
	p.next = b.LastOffset() + 1
	p.txns.observe(b, commit, coordinatorEpoch)
	p.enqueue(&pending{batch: b, ack: permit.Append(raw), result: out, size: int32(len(raw))})
	return out
}

// LastStableOffset is the offset below which every transaction is decided
// (the high watermark when none is open): where a read_committed fetch
// stops.
func (p *Partition) LastStableOffset() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.txns.lso(p.hw)
}

// AbortedTransactions returns the aborted transactions with records in
// [from, to), for a read_committed fetch of that range.
func (p *Partition) AbortedTransactions(from, to int64) []kafka.AbortedTransaction {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []kafka.AbortedTransaction
	for _, a := range p.txns.abortedIn(from, to) {
		out = append(out, kafka.AbortedTransaction{ProducerID: a.ProducerID, FirstOffset: a.FirstOffset})
	}
	return out
}

// acker completes appends in order as the log acknowledges them.
func (p *Partition) acker() {
	defer close(p.stopped)
	for {
		p.mu.Lock()
		if len(p.queue) == 0 {
			p.mu.Unlock()
			select {
			case <-p.wake:
				continue
			case <-p.stop:
				p.failAll(kerr.NotLeaderForPartition)
				return
			}
		}
		pd := p.queue[0]
		p.queue = p.queue[1:]
		p.mu.Unlock()

		var ack AppendAck
		select {
		case ack = <-pd.ack:
		case <-p.cfg.Log.Done():
			select {
			case ack = <-pd.ack:
			default:
				ack.Err = ErrLogClosed
			}
		}
		p.mu.Lock()
		if ack.Err != nil || p.failed != nil {
			err := ack.Err
			if err == nil {
				err = p.failed
			}
			p.fail(err)
			p.mu.Unlock()
			finish(pd, kafka.AppendResult{Err: kerr.NotLeaderForPartition}, err)
			continue
		}
		p.hw = pd.batch.LastOffset() + 1
		p.indexBatch(pd.batch, ack.Pos, pd.size)
		close(p.hwCh)
		p.hwCh = make(chan struct{})
		ls := p.logStart
		p.mu.Unlock()
		finish(pd, kafka.AppendResult{BaseOffset: pd.batch.BaseOffset, LogAppendTime: -1, LogStartOffset: ls}, nil)
	}
}

func finish(pd *pending, r kafka.AppendResult, err error) {
	if pd.rec != nil {
		pd.rec.err = err
		close(pd.rec.done)
	}
	pd.result <- r
}

// fail marks the partition failed; called with mu held.
func (p *Partition) fail(err error) {
	if p.failed != nil {
		return
	}
	p.failed = err
	if !p.closing {
		p.log.Warn("partition stops serving", "err", err)
	}
	close(p.hwCh)
	p.hwCh = make(chan struct{})
	if p.cfg.OnFail != nil && !p.closing {
		go p.failOnce.Do(func() { p.cfg.OnFail(err) })
	}
}

// failAll answers everything queued with err (on stop).
func (p *Partition) failAll(err error) {
	p.mu.Lock()
	q := p.queue
	p.queue = nil
	p.fail(ErrLogClosed)
	p.mu.Unlock()
	for _, pd := range q {
		finish(pd, kafka.AppendResult{Err: err}, ErrLogClosed)
	}
}

// HighWatermark implements kafka.Partition.
func (p *Partition) HighWatermark() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.hw
}

// LogStartOffset implements kafka.Partition.
func (p *Partition) LogStartOffset() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.logStart
}

// Wait implements kafka.Partition.
func (p *Partition) Wait(offset int64) <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.hw > offset || p.failed != nil {
		c := make(chan struct{})
		close(c)
		return c
	}
	return p.hwCh
}

// Read implements kafka.Partition.
func (p *Partition) Read(ctx context.Context, offset int64, maxBytes int32) (kafka.ReadResult, error) {
	p.mu.Lock()
	if p.failed != nil {
		p.mu.Unlock()
		return kafka.ReadResult{}, kerr.NotLeaderForPartition
	}
	res := kafka.ReadResult{HighWatermark: p.hw, LastStableOffset: p.hw, LogStartOffset: p.logStart}
	if offset < p.logStart || offset > p.hw {
		p.mu.Unlock()
		return res, kerr.OffsetOutOfRange
	}
	if offset == p.hw {
		p.mu.Unlock()
		return res, nil
	}
	p.mu.Unlock()
	for attempt := 0; ; attempt++ {
		rewritten, err := p.readAt(ctx, offset, maxBytes, &res)
		if !rewritten || attempt == maxRewriteRetries {
			return res, err
		}
		// A compaction swap renumbered positions while we read: nothing
		// read is kept; locate again in the new version.
		res.Batches = nil
	}
}

// maxRewriteRetries bounds how often a read starts over because a
// compaction swap happened during it (a swap takes minutes to prepare, so
// more than one in a row is not expected).
const maxRewriteRetries = 3

// logRewrites is the log's count of compaction swaps (0 for a log that is
// never compacted).
func (p *Partition) logRewrites() uint64 {
	if r, ok := p.cfg.Log.(Rewriter); ok {
		return r.Rewrites()
	}
	return 0
}

func (p *Partition) compacted() bool { return p.cfg.Compacted != nil && p.cfg.Compacted() }

// segments lists the log's segments and notes which ones compaction
// rewrote.
func (p *Partition) segments(ctx context.Context) ([]Segment, error) {
	segs, err := p.cfg.Log.Segments(ctx)
	if err != nil {
		return nil, err
	}
	compacted := map[int64]bool{}
	for _, s := range segs {
		if s.Compacted {
			compacted[s.ID] = true
		}
	}
	p.mu.Lock()
	p.compactedSegs = compacted
	p.mu.Unlock()
	return segs, nil
}

// inCompactedSegment reports whether segment was rewritten by compaction
// (when the log was last listed): a topic compacted once keeps its gaps
// after its cleanup.policy went back to delete, and a read of one returns
// the next batch, as Kafka's does.
func (p *Partition) inCompactedSegment(segment int64) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.compactedSegs[segment]
}

// readAt is Read from offset (logStart <= offset < hw) into res. It
// reports rewritten, with nothing in res, when a compaction swap happened
// before its first batch was taken; a swap after it ends the read early
// with what was read before it.
func (p *Partition) readAt(ctx context.Context, offset int64, maxBytes int32, res *kafka.ReadResult) (rewritten bool, _ error) {
	gen := p.logRewrites()
	p.mu.Lock()
	if gen != p.rewrites {
		// Positions in the index and the hints name entries of ledgers a
		// swap replaced: forget them (the index refills from new appends).
		p.rewrites = gen
		p.index = nil
		clear(p.hints)
		clear(p.firsts)
	}
	pos, hinted, found := p.locateIndexed(offset)
	lastAvg := p.readAvg
	p.mu.Unlock()
	if !found {
		var err error
		if pos, err = p.locateLog(ctx, offset); err != nil {
			if p.logRewrites() != gen {
				return true, nil
			}
			return false, p.readErr(ctx, pos, err)
		}
	}
	var total int32
	var lastBatch Batch
	var lastPos Pos
	// Every entry asked for that is in no cache is read from the bookies,
	// wanted or not, so each request asks for as many entries as the bytes
	// still wanted hold at the size of the entries found there: those this
	// read has returned so far, or, for its first request, those the read
	// this one goes on from returned (a sequential reader's previous read:
	// its hint). Without one, the first request asks for at most
	// unknownSizeEntries. The partition's last read (readAvg) only lowers
	// that: it may have been another reader's at another place in the log —
	// a tailing consumer's small batches while this one replays a backlog
	// of large ones. Sized by it, a catch-up read of 1 MiB asked the bookies
	// for 27 MiB beside a tailing consumer. Even the reader's own batches
	// may have grown since its last read (a producer that went from a
	// trickle to a flood), so a first request asks for at most
	// firstRequestEntries: what it can read and not use is bounded.
	n := unknownSizeEntries
	switch {
	case hinted > 0:
		n = min(entriesFor(int64(maxBytes), hinted), firstRequestEntries)
	case lastAvg > 0:
		n = min(entriesFor(int64(maxBytes), lastAvg), unknownSizeEntries)
	}
	var readBytes, readEntries int64
	for total < maxBytes || total == 0 {
		es, err := p.cfg.Log.Read(ctx, pos, n)
		if p.logRewrites() != gen {
			// Read (or located) before a compaction swap and perhaps
			// after it: the entries may mix versions.
			if total == 0 {
				return true, nil
			}
			break
		}
		if err != nil {
			if total > 0 {
				break // answer with what was read; the client asks again
			}
			return false, p.readErr(ctx, pos, err)
		}
		if len(es) == 0 {
			break
		}
		for _, e := range es {
			readBytes += int64(len(e.Payload))
		}
		readEntries += int64(len(es))
		p.mu.Lock()
		p.readAvg = readBytes / readEntries
		p.mu.Unlock()
		full := false
		for _, e := range es {
			b, err := ParseBatch(e.Payload)
			if err != nil || b.LastOffset() < offset {
				continue
			}
			if b.BaseOffset >= res.HighWatermark {
				full = true
				break
			}
			if total == 0 && b.BaseOffset > offset && !p.compacted() && !p.inCompactedSegment(e.Pos.Segment) {
				// The entry that held offset is gone: retention deleted its
				// ledger after we last looked at where the log starts.
				// Never skip records silently; the client resets. (On a
				// compacted topic this is a gap compaction left: the batch
				// is the next survivor, which is what Kafka answers.)
				p.refreshStartInBackground()
				return false, kerr.OffsetOutOfRange
			}
			if total > 0 && total+int32(len(e.Payload)) > maxBytes {
				full = true
				break
			}
			res.Batches = append(res.Batches, e.Payload) // as stored: never modified
			total += int32(len(e.Payload))
			lastBatch, lastPos = b, e.Pos
		}
		if full || len(es) < n {
			break
		}
		last := es[len(es)-1].Pos
		pos = Pos{Segment: last.Segment, Entry: last.Entry + 1}
		n = entriesFor(int64(maxBytes-total), readBytes/readEntries)
	}
	if total > 0 {
		p.mu.Lock()
		if len(p.hints) > 4096 {
			clear(p.hints)
		}
		if p.rewrites == gen {
			p.hints[lastBatch.LastOffset()+1] = readHint{Pos{Segment: lastPos.Segment, Entry: lastPos.Entry + 1}, readBytes / readEntries}
		}
		p.mu.Unlock()
	}
	return false, nil
}

// unknownSizeEntries is how many entries a read asks for before it knows
// how large the entries it reads are.
const unknownSizeEntries = 8

// firstRequestEntries bounds the first request of a read that has a hint.
const firstRequestEntries = 64

// entriesFor is how many entries of avg bytes a request asks for to
// return bytes: one more than fit, so that the request reaches the bytes
// wanted (at least one entry, at most 1024).
func entriesFor(bytes, avg int64) int {
	return int(min(max(bytes/max(avg, 64)+1, 1), 1024))
}

// locateIndexed finds the entry holding offset from the in-memory index or
// the hints of sequential readers (with a hint, avg is the average size of
// the entries that reader's last read returned; else 0); mu held.
func (p *Partition) locateIndexed(offset int64) (pos Pos, avg int64, ok bool) {
	if h, ok := p.hints[offset]; ok {
		return h.pos, h.avg, true
	}
	if len(p.index) == 0 || offset < p.index[0].base {
		return Pos{}, 0, false
	}
	i := sort.Search(len(p.index), func(i int) bool { return p.index[i].last >= offset })
	if i == len(p.index) {
		return Pos{}, 0, false
	}
	return p.index[i].pos, 0, true
}

// readHint is where a sequential reader's next read starts, and the
// average size of the entries its last read returned.
type readHint struct {
	pos Pos
	avg int64
}

// locateLog finds the entry holding offset by binary search over the log:
// first over segments by their first batch's base offset, then over the
// segment's entries. O(log segments + log entries) reads.
func (p *Partition) locateLog(ctx context.Context, offset int64) (Pos, error) {
	segs, err := p.segments(ctx)
	if err != nil {
		return Pos{}, err
	}
	var searchErr error
	i := sort.Search(len(segs), func(i int) bool {
		if searchErr != nil {
			return true
		}
		f, err := p.firstOffset(ctx, segs[i])
		if err != nil {
			searchErr = err
			return true
		}
		return f > offset
	}) - 1
	if searchErr != nil {
		return Pos{}, searchErr
	}
	if i < 0 {
		return Pos{}, kerr.OffsetOutOfRange
	}
	s := segs[i]
	// A consumer from the earliest offset (or any segment's first) asks
	// for the first batch: no search through the entries, each a read
	// from the bookies in no cache yet.
	if f, err := p.firstOffset(ctx, s); err == nil && f == offset {
		return Pos{Segment: s.ID}, nil
	}
	e := sort.Search(int(s.Entries), func(e int) bool {
		if searchErr != nil {
			return true
		}
		b, _, err := p.readBatch(ctx, Pos{Segment: s.ID, Entry: int64(e)})
		if err != nil {
			searchErr = err
			return true
		}
		return b.LastOffset() >= offset
	})
	if searchErr != nil {
		return Pos{}, searchErr
	}
	return Pos{Segment: s.ID, Entry: int64(e)}, nil
}

// OffsetForTimestamp implements kafka.Partition: the first batch whose max
// timestamp is ≥ ts, narrowed to the first record at or after ts when the
// batch is uncompressed. Over the in-memory index the search uses the
// running maximum (exact); over older data it assumes timestamps grow
// with offsets (the usual case with CreateTime), as a binary search must.
func (p *Partition) OffsetForTimestamp(ctx context.Context, ts int64) (int64, int64, error) {
	p.mu.Lock()
	if p.failed != nil {
		p.mu.Unlock()
		return -1, -1, kerr.NotLeaderForPartition
	}
	// When the index covers the whole log, it alone answers.
	covers := len(p.index) > 0 && p.index[0].base <= p.logStart
	p.mu.Unlock()
	found := false
	var pos Pos
	if !covers {
		var err error
		if pos, found, err = p.searchTimeLog(ctx, ts); err != nil {
			return -1, -1, err
		}
	}
	if !found {
		if pos, found = p.indexedAtTime(ts); !found {
			return -1, -1, nil
		}
	}
	b, raw, err := p.readBatch(ctx, pos)
	if err != nil {
		return -1, -1, err
	}
	off, t := firstRecordAtOrAfter(b, raw, ts)
	return off, t, nil
}

// indexedAtTime is the first indexed batch whose running max timestamp is
// ≥ ts.
func (p *Partition) indexedAtTime(ts int64) (Pos, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	i := sort.Search(len(p.index), func(i int) bool { return p.index[i].maxSoFar >= ts })
	if i == len(p.index) {
		return Pos{}, false
	}
	return p.index[i].pos, true
}

// searchTimeLog binary-searches the log for the first batch with max
// timestamp ≥ ts.
func (p *Partition) searchTimeLog(ctx context.Context, ts int64) (Pos, bool, error) {
	segs, err := p.segments(ctx)
	if err != nil {
		return Pos{}, false, err
	}
	var searchErr error
	probe := func(pos Pos) bool {
		if searchErr != nil {
			return true
		}
		b, _, err := p.readBatch(ctx, pos)
		if err != nil {
			searchErr = err
			return true
		}
		return b.MaxTimestamp >= ts
	}
	i := sort.Search(len(segs), func(i int) bool {
		return probe(Pos{Segment: segs[i].ID, Entry: segs[i].Entries - 1})
	})
	if searchErr != nil {
		return Pos{}, false, searchErr
	}
	if i == len(segs) {
		return Pos{}, false, nil
	}
	s := segs[i]
	e := sort.Search(int(s.Entries), func(e int) bool { return probe(Pos{Segment: s.ID, Entry: int64(e)}) })
	if searchErr != nil {
		return Pos{}, false, searchErr
	}
	return Pos{Segment: s.ID, Entry: int64(e)}, true, nil
}

// MaxTimestamp implements kafka.Partition: the largest timestamp seen in
// the batches indexed since this broker loaded the partition (which
// include the last ScanBack entries before that).
func (p *Partition) MaxTimestamp(ctx context.Context) (int64, int64, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.failed != nil {
		return -1, -1, kerr.NotLeaderForPartition
	}
	return p.maxTsOff, p.maxTs, nil
}

// RefreshStart re-reads where the log starts (after retention deleted
// segments) and forgets the index below it.
func (p *Partition) RefreshStart(ctx context.Context) error {
	segs, err := p.segments(ctx)
	if err != nil {
		return err
	}
	if len(segs) == 0 {
		return nil
	}
	f, err := p.firstOffset(ctx, segs[0])
	if err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if f > p.logStart {
		p.logStart = f
		i := sort.Search(len(p.index), func(i int) bool { return p.index[i].base >= f })
		p.index = p.index[i:]
		p.txns.trim(f)
	}
	return nil
}

// DefaultProducerExpiry is Config.ProducerExpiry's default.
const DefaultProducerExpiry = 24 * time.Hour

// ExpireProducers forgets the idempotent producers that appended nothing
// for ProducerExpiry before now, so the table does not grow with every
// producer that ever wrote; it returns how many it forgot and how many
// remain. The broker calls it from its maintenance loop.
func (p *Partition) ExpireProducers(now time.Time) (expired, remaining int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	expired = p.producers.expire(now.Add(-p.cfg.ProducerExpiry))
	return expired, len(p.producers.m)
}

// refreshStartInBackground starts RefreshStart unless one started here is
// still running: every consumer of a trimmed partition may read out of
// range at once, and they all need the same answer.
func (p *Partition) refreshStartInBackground() {
	p.mu.Lock()
	if p.refreshing {
		p.mu.Unlock()
		return
	}
	p.refreshing = true
	p.refreshes++
	p.mu.Unlock()
	go func() {
		defer func() {
			p.mu.Lock()
			p.refreshing = false
			p.mu.Unlock()
		}()
		ctx, cancel := context.WithTimeout(context.Background(), refreshStartTimeout)
		defer cancel()
		go func() { // a closing partition stops waiting at once
			select {
			case <-p.stop:
				cancel()
			case <-ctx.Done():
			}
		}()
		if err := p.RefreshStart(ctx); err != nil {
			p.log.Debug("refresh log start", "err", err)
		}
	}()
}

// refreshStartTimeout bounds a background RefreshStart.
const refreshStartTimeout = 10 * time.Second

// readErr maps a failed read of the log: Kafka errors and the caller's own
// cancellation stay as they are; anything else (the storage did not answer:
// every replica slow or down) is logged and answered KAFKA_STORAGE_ERROR,
// which clients retry, instead of UNKNOWN_SERVER_ERROR, which they give up on.
func (p *Partition) readErr(ctx context.Context, pos Pos, err error) error {
	var ke *kerr.Error
	if errors.As(err, &ke) || ctx.Err() != nil {
		return err
	}
	p.log.Warn("read from the log failed; answering KAFKA_STORAGE_ERROR", "pos", pos, "err", err)
	return kerr.KafkaStorageError
}

// AdmitTimeouts counts appends answered REQUEST_TIMED_OUT because the log
// had no room for them before their produce's deadline.
func (p *Partition) AdmitTimeouts() int64 { return p.admitTimeouts.Load() }

// Failed reports why the partition stopped serving, or nil.
func (p *Partition) Failed() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.failed
}

// Close stops the partition and closes its log (persisting and closing the
// current segment). Appends still queued are answered NOT_LEADER.
func (p *Partition) Close(ctx context.Context) error {
	p.mu.Lock()
	p.closing = true
	p.mu.Unlock()
	p.stopOnce.Do(func() { close(p.stop) })
	// The acker answers what is queued, then stops.
	select {
	case <-p.stopped:
	case <-ctx.Done():
	}
	return p.cfg.Log.Close(ctx)
}

func batchErr(err error) error {
	if errors.Is(err, ErrUnsupportedMagic) {
		return kerr.UnsupportedForMessageFormat
	}
	return kerr.CorruptMessage
}

func seqErr(err error) error {
	if errors.Is(err, ErrProducerFenced) {
		return kerr.InvalidProducerEpoch
	}
	return kerr.OutOfOrderSequenceNumber
}
