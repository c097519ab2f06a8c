package partition

import (
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"quire/internal/kafka"
	"quire/internal/meta"
	"quire/internal/testutil"
)

// memLog is an in-memory Log: segments of entries, acks at once (or held
// back), trimming and failure on demand.
type memLog struct {
	mu     sync.Mutex
	segs   []memSeg
	nextID int64
	done   chan struct{}
	hold   bool
	held   []func()
	reads  int
	// returned counts the entries Read returned; forgets the calls of
	// ForgetReaders.
	returned, forgets int
	failing           bool
	// segmentsGate, when set, holds every Segments call until closed;
	// segmentsBusy counts the calls held, segmentsMaxBusy the most at once.
	segmentsGate    chan struct{}
	segmentsBusy    int
	segmentsMaxBusy int
	// room, when set, bounds appends unanswered (a full log); nil: no bound.
	room chan struct{}
	// readErr, when set, fails every Read (the storage does not answer).
	readErr error
}

type memSeg struct {
	id        int64
	entries   [][]byte
	compacted bool
}

func newMemLog() *memLog {
	l := &memLog{done: make(chan struct{}), nextID: 10}
	l.roll()
	return l
}

func (l *memLog) roll() {
	l.segs = append(l.segs, memSeg{id: l.nextID})
	l.nextID += 3
}

func (l *memLog) Admit(ctx context.Context) (Permit, error) {
	if l.room == nil {
		return &memPermit{l: l}, nil
	}
	select {
	case l.room <- struct{}{}:
		return &memPermit{l: l, bounded: true}, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-l.done:
		return nil, ErrLogClosed
	}
}

// memPermit is room for one append of a memLog.
type memPermit struct {
	l       *memLog
	bounded bool
	used    bool
}

func (p *memPermit) spend() {
	if p.used {
		panic("permit used twice")
	}
	p.used = true
}

func (p *memPermit) Release() {
	p.spend()
	if p.bounded {
		<-p.l.room
	}
}

func (p *memPermit) Append(payload []byte) <-chan AppendAck {
	p.spend()
	l := p.l
	out := make(chan AppendAck, 1)
	ch := make(chan AppendAck, 1)
	go func() {
		a := <-ch
		if p.bounded {
			<-l.room
		}
		out <- a
	}()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.failing {
		ch <- AppendAck{Err: errors.New("fenced")}
		return out
	}
	s := &l.segs[len(l.segs)-1]
	s.entries = append(s.entries, payload)
	pos := Pos{Segment: s.id, Entry: int64(len(s.entries) - 1)}
	ack := func() { ch <- AppendAck{Pos: pos} }
	if l.hold {
		l.held = append(l.held, ack)
	} else {
		ack()
	}
	return out
}

func (l *memLog) release() {
	l.mu.Lock()
	h := l.held
	l.held, l.hold = nil, false
	l.mu.Unlock()
	for _, f := range h {
		f()
	}
}

func (l *memLog) Read(_ context.Context, from Pos, max int) ([]Entry, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.reads++
	if l.readErr != nil {
		return nil, l.readErr
	}
	var out []Entry
	for _, s := range l.segs {
		for e, p := range s.entries {
			pos := Pos{Segment: s.id, Entry: int64(e)}
			if pos.Less(from) {
				continue
			}
			if len(out) == max {
				l.returned += len(out)
				return out, nil
			}
			out = append(out, Entry{Pos: pos, Payload: p})
		}
	}
	l.returned += len(out)
	return out, nil
}

func (l *memLog) ForgetReaders() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.forgets++
}

func (l *memLog) Segments(ctx context.Context) ([]Segment, error) {
	l.mu.Lock()
	if gate := l.segmentsGate; gate != nil {
		l.segmentsBusy++
		l.segmentsMaxBusy = max(l.segmentsMaxBusy, l.segmentsBusy)
		l.mu.Unlock()
		select {
		case <-gate:
		case <-ctx.Done():
		}
		l.mu.Lock()
		l.segmentsBusy--
	}
	defer l.mu.Unlock()
	var out []Segment
	for _, s := range l.segs {
		if len(s.entries) > 0 {
			out = append(out, Segment{ID: s.id, Entries: int64(len(s.entries)), Compacted: s.compacted})
		}
	}
	return out, nil
}

func (l *memLog) Done() <-chan struct{} { return l.done }
func (l *memLog) Close(context.Context) error {
	return nil
}

// trim drops the first n segments (retention).
func (l *memLog) trim(n int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.segs = l.segs[n:]
	if len(l.segs) == 0 {
		l.roll()
	}
}

// mkBatch builds a v2 batch of n records with valid CRC.
func mkBatch(pid int64, epoch int16, seq int32, n int, ts int64) []byte {
	rb := kmsg.RecordBatch{
		PartitionLeaderEpoch: -1, Magic: 2, LastOffsetDelta: int32(n - 1),
		FirstTimestamp: ts, MaxTimestamp: ts + int64(n-1),
		ProducerID: pid, ProducerEpoch: epoch, FirstSequence: seq, NumRecords: int32(n),
	}
	var recs []byte
	for i := range n {
		r := kmsg.Record{TimestampDelta64: int64(i), OffsetDelta: int32(i), Value: fmt.Appendf(nil, "v%d-%d", seq, i)}
		r.Length = int32(len(r.AppendTo(nil)) - 1)
		recs = r.AppendTo(recs)
	}
	rb.Records = recs
	raw := rb.AppendTo(nil)
	// Length and CRC: AppendTo writes the struct as given.
	putU32(raw[offBatchLength:], uint32(len(raw)-12))
	putU32(raw[offCRC:], crc32.Checksum(raw[offAttributes:], castagnoli))
	return raw
}

func putU32(b []byte, v uint32) {
	b[0], b[1], b[2], b[3] = byte(v>>24), byte(v>>16), byte(v>>8), byte(v)
}

func openTest(t *testing.T, l Log, store meta.Store, mod func(*Config)) *Partition {
	t.Helper()
	cfg := Config{Name: "t-0", Log: l, Store: store, FloorKey: "/floor/t-0"}
	if mod != nil {
		mod(&cfg)
	}
	p, err := Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close(context.Background()) })
	return p
}

func appendOK(t *testing.T, p *Partition, raw []byte) int64 {
	t.Helper()
	r := <-p.Append(context.Background(), raw)
	if r.Err != nil {
		t.Fatalf("append: %v", r.Err)
	}
	return r.BaseOffset
}

// readAll reads every batch from offset to the HW and returns the base
// offsets of the batches read.
func readAll(t *testing.T, p *Partition, from int64, maxBytes int32) []int64 {
	t.Helper()
	var bases []int64
	for from < p.HighWatermark() {
		res, err := p.Read(context.Background(), from, maxBytes)
		if err != nil {
			t.Fatalf("read at %d: %v", from, err)
		}
		bs, err := SplitBatches(res.Bytes())
		if err != nil || len(bs) == 0 {
			t.Fatalf("read at %d: %d batches, %v", from, len(bs), err)
		}
		for _, raw := range bs {
			if err := CheckCRC(raw); err != nil {
				t.Fatal(err)
			}
			b, _ := ParseBatch(raw)
			bases = append(bases, b.BaseOffset)
			from = b.LastOffset() + 1
		}
	}
	return bases
}

func TestOffsetsAreDenseAndReadable(t *testing.T) {
	l := newMemLog()
	p := openTest(t, l, meta.NewMemServer(meta.MemConfig{}).NewClient(), nil)
	var want []int64
	next := int64(0)
	for i := range 50 {
		n := 1 + i%4
		if got := appendOK(t, p, mkBatch(-1, -1, -1, n, int64(1000+i))); got != next {
			t.Fatalf("batch %d at %d, want %d", i, got, next)
		}
		want = append(want, next)
		next += int64(n)
		if i%17 == 16 {
			l.roll()
		}
	}
	if hw := p.HighWatermark(); hw != next {
		t.Fatalf("hw %d, want %d", hw, next)
	}
	for _, maxBytes := range []int32{1, 200, 1 << 20} {
		got := readAll(t, p, 0, maxBytes)
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("maxBytes %d: read %v, want %v", maxBytes, got, want)
		}
	}
	// A fetch in the middle of a batch returns that whole batch.
	res, err := p.Read(context.Background(), want[3]+1, 1)
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := ParseBatch(res.Bytes()); b.BaseOffset != want[3] {
		t.Fatalf("mid-batch fetch returned batch at %d, want %d", b.BaseOffset, want[3])
	}
	if _, err := p.Read(context.Background(), next+1, 100); !errors.Is(err, kerr.OffsetOutOfRange) {
		t.Fatalf("read past the HW: %v", err)
	}
	if res, err := p.Read(context.Background(), next, 100); err != nil || res.Size() != 0 {
		t.Fatalf("read at the HW: %d bytes, %v", res.Size(), err)
	}
}

func TestHighWatermarkWaitsForTheLog(t *testing.T) {
	l := newMemLog()
	p := openTest(t, l, nil, nil)
	l.mu.Lock()
	l.hold = true
	l.mu.Unlock()
	ch := p.Append(context.Background(), mkBatch(-1, -1, -1, 3, 1))
	w := p.Wait(0)
	select {
	case <-w:
		t.Fatal("wait returned before the append was durable")
	case r := <-ch:
		t.Fatalf("append answered before the log acked: %+v", r)
	default:
	}
	if hw := p.HighWatermark(); hw != 0 {
		t.Fatalf("hw %d before the ack", hw)
	}
	l.release()
	<-w
	if r := <-ch; r.Err != nil || r.BaseOffset != 0 {
		t.Fatalf("append: %+v", r)
	}
	if hw := p.HighWatermark(); hw != 3 {
		t.Fatalf("hw %d, want 3", hw)
	}
}

func TestIdempotentProducerSequences(t *testing.T) {
	p := openTest(t, newMemLog(), nil, nil)
	const pid = 7
	if off := appendOK(t, p, mkBatch(pid, 0, 0, 2, 1)); off != 0 {
		t.Fatal(off)
	}
	if off := appendOK(t, p, mkBatch(pid, 0, 2, 3, 1)); off != 2 {
		t.Fatal(off)
	}
	// A retry of either batch gets its original offset and writes nothing.
	for _, c := range []struct {
		seq  int32
		n    int
		want int64
	}{{0, 2, 0}, {2, 3, 2}} {
		if off := appendOK(t, p, mkBatch(pid, 0, c.seq, c.n, 1)); off != c.want {
			t.Fatalf("retry of seq %d at %d, want %d", c.seq, off, c.want)
		}
	}
	if hw := p.HighWatermark(); hw != 5 {
		t.Fatalf("duplicates were written: hw %d", hw)
	}
	for _, c := range []struct {
		name  string
		batch []byte
		want  error
	}{
		{"gap", mkBatch(pid, 0, 9, 1, 1), kerr.OutOfOrderSequenceNumber},
		{"stale epoch", mkBatch(pid, -1+0, 5, 1, 1), kerr.InvalidProducerEpoch},
		{"new epoch not at 0", mkBatch(pid, 1, 5, 1, 1), kerr.OutOfOrderSequenceNumber},
	} {
		if c.name == "stale epoch" {
			// Bump the epoch first.
			appendOK(t, p, mkBatch(pid, 1, 0, 1, 1))
			c.batch = mkBatch(pid, 0, 5, 1, 1)
		}
		if r := <-p.Append(context.Background(), c.batch); !errors.Is(r.Err, c.want) {
			t.Fatalf("%s: %v, want %v", c.name, r.Err, c.want)
		}
	}
}

func TestDuplicateOfAnInFlightBatchWaitsForIt(t *testing.T) {
	l := newMemLog()
	p := openTest(t, l, nil, nil)
	l.mu.Lock()
	l.hold = true
	l.mu.Unlock()
	first := p.Append(context.Background(), mkBatch(3, 0, 0, 4, 1))
	retry := p.Append(context.Background(), mkBatch(3, 0, 0, 4, 1))
	select {
	case r := <-retry:
		t.Fatalf("the retry was answered before the original was durable: %+v", r)
	default:
	}
	l.release()
	a, b := <-first, <-retry
	if a.Err != nil || b.Err != nil || a.BaseOffset != b.BaseOffset {
		t.Fatalf("original %+v, retry %+v", a, b)
	}
	if hw := p.HighWatermark(); hw != 4 {
		t.Fatalf("hw %d", hw)
	}
}

// A new owner rebuilds the next offset and the producer table from the log:
// a retry of a batch the old owner wrote (whose answer was lost) is not
// written twice, and old offsets are found by binary search over the log.
func TestReloadContinuesOffsetsAndDedup(t *testing.T) {
	l := newMemLog()
	store := meta.NewMemServer(meta.MemConfig{}).NewClient()
	p := openTest(t, l, store, nil)
	off := int64(0)
	for i := range 300 {
		appendOK(t, p, mkBatch(42, 0, int32(off), 2, int64(i)))
		off += 2
		if i%40 == 39 {
			l.roll()
		}
	}
	p.Close(context.Background())
	l.roll()

	q := openTest(t, l, store, func(c *Config) { c.ScanBack = 50 })
	if hw := q.HighWatermark(); hw != off {
		t.Fatalf("reloaded hw %d, want %d", hw, off)
	}
	// The last batch again (a retry after the failover): same offset.
	if got := appendOK(t, q, mkBatch(42, 0, int32(off-2), 2, 1)); got != off-2 {
		t.Fatalf("retry after reload at %d, want %d", got, off-2)
	}
	if got := appendOK(t, q, mkBatch(42, 0, int32(off), 2, 1)); got != off {
		t.Fatalf("next batch at %d, want %d", got, off)
	}
	// Old offsets, outside the rebuilt index, by binary search.
	l.mu.Lock()
	before := l.reads
	l.mu.Unlock()
	res, err := q.Read(context.Background(), 123, 1)
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := ParseBatch(res.Bytes()); b.BaseOffset != 122 {
		t.Fatalf("offset 123 in batch %d, want 122", b.BaseOffset)
	}
	l.mu.Lock()
	probes := l.reads - before
	l.mu.Unlock()
	if probes > 20 {
		t.Fatalf("%d reads to find one offset: not a binary search", probes)
	}
	if got := readAll(t, q, 0, 1<<20); len(got) != 301 {
		t.Fatalf("read %d batches after reload, want 301", len(got))
	}
}

// Offsets never go back, even when retention deleted every ledger.
func TestOffsetFloorSurvivesTrimming(t *testing.T) {
	l := newMemLog()
	store := meta.NewMemServer(meta.MemConfig{}).NewClient()
	p := openTest(t, l, store, nil)
	for range 5 {
		appendOK(t, p, mkBatch(-1, -1, -1, 10, 1))
	}
	p.Close(context.Background())
	l.roll()
	// A second owner loads (writing the floor), then everything is trimmed.
	q := openTest(t, l, store, nil)
	q.Close(context.Background())
	l.trim(len(l.segs))
	r := openTest(t, l, store, nil)
	if r.HighWatermark() != 50 || r.LogStartOffset() != 50 {
		t.Fatalf("after trimming everything: hw %d start %d, want 50 50", r.HighWatermark(), r.LogStartOffset())
	}
	if got := appendOK(t, r, mkBatch(-1, -1, -1, 1, 1)); got != 50 {
		t.Fatalf("next offset %d, want 50", got)
	}
}

func TestOffsetForTimestamp(t *testing.T) {
	l := newMemLog()
	p := openTest(t, l, nil, nil)
	// Batches of 5 records at timestamps 100.., 200.., …
	for i := range 10 {
		appendOK(t, p, mkBatch(-1, -1, -1, 5, int64(100*(i+1))))
		if i == 4 {
			l.roll()
		}
	}
	ctx := context.Background()
	for _, c := range []struct{ ts, off, at int64 }{
		{0, 0, 100}, {100, 0, 100}, {102, 2, 102}, {105, 5, 200}, {450, 20, 500}, {1004, 49, 1004}, {1005, -1, -1},
	} {
		off, at, err := p.OffsetForTimestamp(ctx, c.ts)
		if err != nil || off != c.off || at != c.at {
			t.Fatalf("ts %d: (%d, %d, %v), want (%d, %d)", c.ts, off, at, err, c.off, c.at)
		}
	}
	// The same answers from a reloaded partition that must search the log.
	p.Close(ctx)
	q := openTest(t, l, nil, func(c *Config) { c.ScanBack = 2 })
	for _, c := range []struct{ ts, off, at int64 }{{102, 2, 102}, {450, 20, 500}, {1004, 49, 1004}} {
		off, at, err := q.OffsetForTimestamp(ctx, c.ts)
		if err != nil || off != c.off || at != c.at {
			t.Fatalf("reloaded, ts %d: (%d, %d, %v), want (%d, %d)", c.ts, off, at, err, c.off, c.at)
		}
	}
	if off, ts, _ := q.MaxTimestamp(ctx); off != 49 || ts != 1004 {
		t.Fatalf("max timestamp (%d, %d)", off, ts)
	}
}

func TestFencedLogStopsThePartition(t *testing.T) {
	l := newMemLog()
	failed := make(chan error, 1)
	p := openTest(t, l, nil, func(c *Config) { c.OnFail = func(err error) { failed <- err } })
	appendOK(t, p, mkBatch(-1, -1, -1, 1, 1))
	l.mu.Lock()
	l.failing = true
	l.mu.Unlock()
	if r := <-p.Append(context.Background(), mkBatch(-1, -1, -1, 1, 1)); !errors.Is(r.Err, kerr.NotLeaderForPartition) {
		t.Fatalf("append to a fenced log: %v", r.Err)
	}
	select {
	case <-failed:
	case <-time.After(10 * time.Second):
		t.Fatal("OnFail was not called")
	}
	if _, err := p.Read(context.Background(), 0, 100); !errors.Is(err, kerr.NotLeaderForPartition) {
		t.Fatalf("read from a failed partition: %v", err)
	}
	<-p.Wait(100) // never blocks once failed
	if r := <-p.Append(context.Background(), mkBatch(-1, -1, -1, 1, 1)); !errors.Is(r.Err, kerr.NotLeaderForPartition) {
		t.Fatalf("append after failing: %v", r.Err)
	}
}

func TestBadBatchesAreRejected(t *testing.T) {
	p := openTest(t, newMemLog(), nil, nil)
	good := mkBatch(-1, -1, -1, 1, 1)
	v1 := append([]byte(nil), good...)
	v1[offMagic] = 1
	short := good[:30]
	txn := mkBatch(5, 0, 0, 1, 1)
	txn[offAttributes+1] |= attrTransactional
	for _, c := range []struct {
		name string
		raw  []byte
		want error
	}{
		{"magic 1", v1, kerr.UnsupportedForMessageFormat},
		{"short", short, kerr.CorruptMessage},
		{"transactional", txn, kerr.InvalidRecord},
	} {
		if r := <-p.Append(context.Background(), c.raw); !errors.Is(r.Err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, r.Err, c.want)
		}
	}
	if p.HighWatermark() != 0 {
		t.Fatal("a bad batch was written")
	}
}

var _ kafka.Partition = (*Partition)(nil)

func TestBatchLargerThanAnEntryIsRefused(t *testing.T) {
	p := openTest(t, newMemLog(), nil, func(c *Config) { c.MaxBatchBytes = 200 })
	if r := <-p.Append(context.Background(), mkBatch(-1, -1, -1, 40, 1)); !errors.Is(r.Err, kerr.MessageTooLarge) {
		t.Fatalf("a %d-byte batch with a 200-byte limit: %v", len(mkBatch(-1, -1, -1, 40, 1)), r.Err)
	}
	appendOK(t, p, mkBatch(-1, -1, -1, 1, 1))
}

// A fetch of an offset whose ledger retention deleted (before the log start
// was refreshed) is OFFSET_OUT_OF_RANGE, never a silent skip to later
// records.
func TestFetchOfATrimmedOffsetIsOutOfRange(t *testing.T) {
	l := newMemLog()
	p := openTest(t, l, nil, func(c *Config) { c.MaxIndexed = 2 })
	for i := range 6 {
		appendOK(t, p, mkBatch(-1, -1, -1, 2, int64(i)))
		l.roll()
	}
	// A sequential reader leaves a hint: offset 2 is at the entry after 0's.
	if _, err := p.Read(context.Background(), 0, 1); err != nil {
		t.Fatal(err)
	}
	l.trim(3) // offsets 0..5 gone; the partition still thinks the log starts at 0
	if _, err := p.Read(context.Background(), 2, 1<<20); !errors.Is(err, kerr.OffsetOutOfRange) {
		t.Fatalf("fetch of a trimmed offset: %v", err)
	}
	if err := p.RefreshStart(context.Background()); err != nil {
		t.Fatal(err)
	}
	if s := p.LogStartOffset(); s != 6 {
		t.Fatalf("log start %d after the refresh, want 6", s)
	}
	if got := readAll(t, p, 6, 1<<20); len(got) != 3 || got[0] != 6 {
		t.Fatalf("read from the new start: %v", got)
	}
}

// TestOutOfRangeReadsShareOneRefresh: every consumer of a trimmed partition
// reads out of range at once; they start one refresh of the log start
// between them, not one each.
func TestOutOfRangeReadsShareOneRefresh(t *testing.T) {
	l := newMemLog()
	p := openTest(t, l, nil, func(c *Config) { c.MaxIndexed = 2 })
	for i := range 6 {
		appendOK(t, p, mkBatch(-1, -1, -1, 2, int64(i)))
		l.roll()
	}
	if _, err := p.Read(context.Background(), 0, 1); err != nil {
		t.Fatal(err)
	}
	l.mu.Lock()
	l.segmentsGate = make(chan struct{})
	l.mu.Unlock()
	l.trim(3)
	var wg sync.WaitGroup
	for range 100 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := p.Read(context.Background(), 2, 1<<20); !errors.Is(err, kerr.OffsetOutOfRange) {
				t.Errorf("fetch of a trimmed offset: %v", err)
			}
		}()
	}
	wg.Wait()
	p.mu.Lock()
	started := p.refreshes
	p.mu.Unlock()
	if started != 1 {
		t.Fatalf("%d background refreshes for 100 out-of-range reads, want 1", started)
	}
	close(l.segmentsGate)
	testutil.WaitFor(t, "the refresh to move the log start", func() bool { return p.LogStartOffset() == 6 })
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.segmentsMaxBusy != 1 {
		t.Fatalf("%d Segments calls at once, want 1", l.segmentsMaxBusy)
	}
}

// TestFullLogIsBackpressure: with room for two unanswered appends, a third
// waits; when its produce's deadline passes it is answered
// REQUEST_TIMED_OUT without taking an offset, and the partition keeps
// serving. Once the log answers, appends go on at the next offset.
func TestFullLogIsBackpressure(t *testing.T) {
	l := newMemLog()
	l.room = make(chan struct{}, 2)
	p := openTest(t, l, nil, nil)
	l.mu.Lock()
	l.hold = true
	l.mu.Unlock()
	first := p.Append(context.Background(), mkBatch(-1, -1, -1, 2, 1))
	second := p.Append(context.Background(), mkBatch(-1, -1, -1, 2, 1))
	// The log stays full, so the third waits for room until its deadline.
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if r := <-p.Append(ctx, mkBatch(-1, -1, -1, 2, 1)); !errors.Is(r.Err, kerr.RequestTimedOut) {
		t.Fatalf("append into a full log: %+v, want REQUEST_TIMED_OUT", r)
	}
	if p.Failed() != nil || p.AdmitTimeouts() != 1 {
		t.Fatalf("after a full log: failed %v, admit timeouts %d", p.Failed(), p.AdmitTimeouts())
	}
	l.release()
	for i, ch := range []<-chan kafka.AppendResult{first, second} {
		if r := <-ch; r.Err != nil || r.BaseOffset != int64(2*i) {
			t.Fatalf("append %d: %+v", i, r)
		}
	}
	if r := <-p.Append(context.Background(), mkBatch(-1, -1, -1, 2, 1)); r.Err != nil || r.BaseOffset != 4 {
		t.Fatalf("append after the log drained: %+v, want offset 4 (the timed-out one took none)", r)
	}
}

// TestConcurrentAppendsThroughASmallLog: 2,000 appends from 40 goroutines
// through a log with room for 16: every one is answered, offsets are
// dense and unique, and the partition never fails.
func TestConcurrentAppendsThroughASmallLog(t *testing.T) {
	l := newMemLog()
	l.room = make(chan struct{}, 16)
	p := openTest(t, l, nil, nil)
	const goroutines, each = 40, 50
	offsets := make(chan int64, goroutines*each)
	var wg sync.WaitGroup
	for range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				r := <-p.Append(context.Background(), mkBatch(-1, -1, -1, 1, 1))
				if r.Err != nil {
					t.Errorf("append: %v", r.Err)
					return
				}
				offsets <- r.BaseOffset
			}
		}()
	}
	wg.Wait()
	close(offsets)
	seen := make([]bool, goroutines*each)
	for o := range offsets {
		if o < 0 || o >= int64(len(seen)) || seen[o] {
			t.Fatalf("offset %d out of range or given twice", o)
		}
		seen[o] = true
	}
	if p.Failed() != nil || p.HighWatermark() != goroutines*each {
		t.Fatalf("failed %v, high watermark %d", p.Failed(), p.HighWatermark())
	}
}

// TestStorageReadFailureIsRetriable: when the log cannot be read (every
// replica slow or down) a fetch gets KAFKA_STORAGE_ERROR, which clients
// retry, and the partition keeps serving.
func TestStorageReadFailureIsRetriable(t *testing.T) {
	l := newMemLog()
	p := openTest(t, l, nil, func(c *Config) { c.MaxIndexed = 1 })
	for range 3 {
		appendOK(t, p, mkBatch(-1, -1, -1, 1, 1))
	}
	l.mu.Lock()
	l.readErr = errors.New("ledger 10 entry 0: no replica answered")
	l.mu.Unlock()
	if _, err := p.Read(context.Background(), 0, 1<<20); !errors.Is(err, kerr.KafkaStorageError) {
		t.Fatalf("read from a log that does not answer: %v, want KAFKA_STORAGE_ERROR", err)
	}
	l.mu.Lock()
	l.readErr = nil
	l.mu.Unlock()
	if p.Failed() != nil {
		t.Fatalf("partition failed: %v", p.Failed())
	}
	if got := readAll(t, p, 0, 1<<20); len(got) != 3 {
		t.Fatalf("read after the storage came back: %v", got)
	}
}

// TestTailStartBoundedByBytes: the scan on load starts ScanBack entries
// before the end, or later where the entries after it would hold more than
// ScanBackBytes by their segments' average sizes.
func TestTailStartBoundedByBytes(t *testing.T) {
	segs := []Segment{{ID: 3, Entries: 100, Bytes: 100 << 10}, {ID: 6, Entries: 50, Bytes: 50 << 20}}
	for _, c := range []struct {
		n     int
		bytes int64
		want  Pos
	}{
		{n: 20, bytes: 1 << 40, want: Pos{Segment: 6, Entry: 30}},    // by entries
		{n: 120, bytes: 1 << 40, want: Pos{Segment: 3, Entry: 30}},   // into the older segment
		{n: 500, bytes: 1 << 40, want: Pos{Segment: 3, Entry: 0}},    // the whole log
		{n: 2000, bytes: 10 << 20, want: Pos{Segment: 6, Entry: 40}}, // 10 entries of 1 MiB
		{n: 2000, bytes: 51 << 20, want: Pos{Segment: 3, Entry: 0}},  // 50 MiB, then 1 MiB of 1 KiB entries
		{n: 2000, bytes: 1, want: Pos{Segment: 6, Entry: 49}},        // at least one entry
	} {
		got, ok := tailStart(segs, c.n, c.bytes)
		if !ok || got != c.want {
			t.Errorf("tailStart(n=%d, bytes=%d) = %v, %v; want %v", c.n, c.bytes, got, ok, c.want)
		}
	}
}

// batchRuns opens a partition on a memLog and appends runs of batches,
// each run {how many batches, records per batch}.
func batchRuns(t *testing.T, runs ...[2]int) (*memLog, *Partition) {
	t.Helper()
	l := newMemLog()
	p := openTest(t, l, meta.NewMemServer(meta.MemConfig{}).NewClient(), nil)
	seq := int64(0)
	for _, r := range runs {
		for range r[0] {
			appendOK(t, p, mkBatch(-1, -1, -1, r[1], seq))
			seq++
		}
	}
	return l, p
}

// batchBytes is the size of the batch holding offset.
func batchBytes(t *testing.T, p *Partition, offset int64) int32 {
	t.Helper()
	res, err := p.Read(context.Background(), offset, 1)
	if err != nil {
		t.Fatal(err)
	}
	return int32(len(res.Bytes()))
}

// measuredRead reads from offset up to limit bytes and returns how many
// entries it asked the log for, how many batches it returned, and the
// offset after them.
func measuredRead(t *testing.T, l *memLog, p *Partition, from int64, limit int32) (asked, used int, next int64) {
	t.Helper()
	l.mu.Lock()
	before := l.returned
	l.mu.Unlock()
	res, err := p.Read(context.Background(), from, limit)
	if err != nil {
		t.Fatal(err)
	}
	l.mu.Lock()
	asked = l.returned - before
	l.mu.Unlock()
	bs, err := SplitBatches(res.Bytes())
	if err != nil || len(bs) == 0 {
		t.Fatalf("read at %d: %d batches, %v", from, len(bs), err)
	}
	b, _ := ParseBatch(bs[len(bs)-1])
	return asked, len(bs), b.LastOffset() + 1
}

// replayLarge appends large batches and then small ones, and reads the
// large ones from the first, four batches' bytes at a time, with a tailing
// reader's read of the last small ones before each read if tail is set,
// and fails unless the replay asked the log for about as many entries as
// it used (at most two more a read).
func replayLarge(t *testing.T, tail bool) {
	t.Helper()
	const large, small = 40, 400 // batches of 500 records, then of 1
	l, p := batchRuns(t, [2]int{large, 500}, [2]int{small, 1})
	batch := batchBytes(t, p, 0) // one large batch
	asked, used, reads := 0, 0, 0
	for from := int64(0); from < large*500; reads++ {
		if tail {
			// It reads the last small batches, with room for many more.
			if _, err := p.Read(context.Background(), large*500+small-4, 4*batch); err != nil {
				t.Fatal(err)
			}
		}
		a, u, next := measuredRead(t, l, p, from, 4*batch)
		asked, used, from = asked+a, used+u, next
	}
	t.Logf("%d reads used %d entries and asked the log for %d", reads, used, asked)
	if asked > used+2*reads {
		t.Fatalf("asked the log for %d entries to use %d in %d reads", asked, used, reads)
	}
}

// TestCatchUpReadsAskForWhatTheyUse: a reader replaying a backlog of large
// batches while a producer appends small ones asks the log for about as
// many entries as its byte limit takes — every entry asked for and in no
// cache is read from the bookies. Sizing reads by the appends' average
// asked for hundreds of entries per read here (60× what each used).
func TestCatchUpReadsAskForWhatTheyUse(t *testing.T) { replayLarge(t, false) }

// TestCatchUpReadsBesideATailingReader: the same beside a reader tailing
// the small batches. Sized by the partition's last read, which was the
// tailing reader's, the catch-up reads asked for 89 entries here to use 40
// (on the standalone, a catch-up reader beside a tailing consumer had the
// bookies read 8.8 GB in 14 s to return 0.5 GB).
func TestCatchUpReadsBesideATailingReader(t *testing.T) { replayLarge(t, true) }

// TestReadIntoLargerBatchesAsksForFew: a reader going from a stretch of
// small batches (a producer's trickle) into large ones (its flood) sizes
// its first request by the small ones it read last; that request asks for
// at most firstRequestEntries, so no read asks the log for many more
// entries than it uses. Without the bound the read that crossed asked for
// 128 it did not use here (with batches of a megabyte, 128 MiB read from
// the bookies and dropped).
func TestReadIntoLargerBatchesAsksForFew(t *testing.T) {
	const small, large = 1000, 200 // batches of 1 record, then of 2,000
	l, p := batchRuns(t, [2]int{small, 1}, [2]int{large, 2000})
	limit := 4 * batchBytes(t, p, small) // four large batches
	worst := 0
	for from := int64(0); from < small+large*2000; {
		asked, used, next := measuredRead(t, l, p, from, limit)
		worst, from = max(worst, asked-used), next
	}
	t.Logf("the most entries one read asked for and did not use: %d", worst)
	if worst > firstRequestEntries {
		t.Fatalf("a read asked the log for %d entries it did not use", worst)
	}
}

// TestLoadScanForgetsItsReadAhead: the scan of the tail when a partition
// is loaded reads like a consumer behind the tail; it tells the log to
// drop what it read ahead for it, which would otherwise hold the broker's
// read-ahead budget for a reader that never returns.
func TestLoadScanForgetsItsReadAhead(t *testing.T) {
	l := newMemLog()
	store := meta.NewMemServer(meta.MemConfig{}).NewClient()
	p := openTest(t, l, store, nil)
	for i := range 20 {
		appendOK(t, p, mkBatch(-1, -1, -1, 2, int64(i)))
	}
	p.Close(context.Background())
	l.mu.Lock()
	before := l.forgets
	l.mu.Unlock()
	openTest(t, l, store, nil)
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.forgets != before+1 {
		t.Fatalf("load scan called ForgetReaders %d times, want 1", l.forgets-before)
	}
}

// TestReadFromTheStartSearchesNoEntries: a consumer from the earliest
// offset of a reloaded partition (its index covers only the tail) finds
// the first batch without a binary search through the segment's entries,
// each a read of an entry from the bookies in no cache.
func TestReadFromTheStartSearchesNoEntries(t *testing.T) {
	l := newMemLog()
	store := meta.NewMemServer(meta.MemConfig{}).NewClient()
	p := openTest(t, l, store, nil)
	for i := range 1000 {
		appendOK(t, p, mkBatch(-1, -1, -1, 1, int64(i)))
	}
	p.Close(context.Background())
	q := openTest(t, l, store, func(c *Config) { c.ScanBack = 50 })
	l.mu.Lock()
	before := l.reads
	l.mu.Unlock()
	res, err := q.Read(context.Background(), 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := ParseBatch(res.Bytes()); b.BaseOffset != 0 {
		t.Fatalf("read from 0 returned the batch at %d", b.BaseOffset)
	}
	l.mu.Lock()
	reads := l.reads - before
	l.mu.Unlock()
	if reads > 2 { // the segment's first batch, then the read itself
		t.Fatalf("%d log reads to read from the start of a 1,000-entry segment", reads)
	}
}
