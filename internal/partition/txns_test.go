package partition

import (
	"context"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"quire/internal/kafka"
	"slices"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// A marker as ControlBatch writes it is what Kafka's clients read as one:
// a valid v2 batch (franz-go decodes it, the CRC holds), transactional and
// control, one record with key (0, type) and value (0, coordinator epoch).
func TestControlBatch(t *testing.T) {
	for _, commit := range []bool{true, false} {
		raw := ControlBatch(42, 3, commit, 7, 1_700_000_000_000)
		var rb kmsg.RecordBatch
		if err := rb.ReadFrom(raw); err != nil {
			t.Fatal(err)
		}
		if rb.Magic != 2 || rb.ProducerID != 42 || rb.ProducerEpoch != 3 || rb.NumRecords != 1 || rb.Attributes != 0x30 || rb.LastOffsetDelta != 0 {
			t.Fatalf("batch %+v", rb)
		}
		if got := crc32.Checksum(raw[21:], crc32.MakeTable(crc32.Castagnoli)); uint32(rb.CRC) != got {
			t.Fatalf("crc %08x, want %08x", uint32(rb.CRC), got)
		}
		var r kmsg.Record
		if err := r.ReadFrom(rb.Records); err != nil {
			t.Fatal(err)
		}
		wantType := uint16(0)
		if commit {
			wantType = 1
		}
		if len(r.Key) != 4 || binary.BigEndian.Uint16(r.Key[2:]) != wantType || len(r.Value) != 6 || binary.BigEndian.Uint32(r.Value[2:]) != 7 {
			t.Fatalf("record key %x value %x", r.Key, r.Value)
		}
		b, err := ParseBatch(raw)
		if err != nil || !b.Control() || !b.Transactional() {
			t.Fatalf("ParseBatch = %+v, %v", b, err)
		}
		if got, ce, err := ParseControl(raw); err != nil || got != commit || ce != 7 {
			t.Fatalf("ParseControl = %v, %d, %v; want %v and coordinator epoch 7", got, ce, err, commit)
		}
	}
	if _, _, err := ParseControl(ControlBatch(1, 0, true, 0, 0)[:BatchHeaderSize+2]); err == nil {
		t.Fatal("a cut control batch parsed")
	}
}

func txnBatch(pid int64, base int64, n int32) Batch {
	return Batch{BaseOffset: base, LastOffsetDelta: n - 1, ProducerID: pid, Attributes: attrTransactional, Records: n}
}

func marker(pid int64, at int64) Batch {
	return Batch{BaseOffset: at, ProducerID: pid, Attributes: attrTransactional | attrControl, Records: 1}
}

// Two producers' transactions interleaved: the LSO stays at the oldest
// open transaction's first offset; aborted ones are named to fetches that
// overlap them, committed ones never.
func TestTxnTracker(t *testing.T) {
	tr := newTxnTracker()
	tr.observe(Batch{BaseOffset: 0, LastOffsetDelta: 4, ProducerID: -1, Records: 5}, false, 0) // not transactional
	if got := tr.lso(5); got != 5 {
		t.Fatalf("LSO %d with nothing open, want the HW 5", got)
	}
	tr.observe(txnBatch(1, 5, 3), false, 0)  // 5..7
	tr.observe(txnBatch(2, 8, 2), false, 0)  // 8..9
	tr.observe(txnBatch(1, 10, 2), false, 0) // 10..11
	if got := tr.lso(12); got != 5 {
		t.Fatalf("LSO %d, want 5 (producer 1 open since 5)", got)
	}
	tr.observe(marker(1, 12), true, 0) // commit
	if got := tr.lso(13); got != 8 {
		t.Fatalf("LSO %d after producer 1 committed, want 8", got)
	}
	tr.observe(txnBatch(2, 13, 1), false, 0)
	tr.observe(marker(2, 14), false, 0) // abort 8..14
	tr.observe(marker(3, 15), false, 0) // a marker with no records here
	if got := tr.lso(16); got != 16 {
		t.Fatalf("LSO %d with nothing open, want 16", got)
	}
	tr.observe(txnBatch(1, 16, 1), false, 0)
	tr.observe(marker(1, 17), false, 0) // abort 16..17
	want := []AbortedTxn{{2, 8, 14}, {1, 16, 17}}
	for _, c := range []struct {
		from, to int64
		want     []AbortedTxn
	}{
		{0, 8, nil}, {0, 9, want[:1]}, {14, 15, want[:1]}, {15, 16, nil}, {0, 18, want}, {16, 17, want[1:]}, {18, 30, nil},
	} {
		if got := tr.abortedIn(c.from, c.to); !slices.Equal(got, c.want) {
			t.Errorf("abortedIn(%d, %d) = %v, want %v", c.from, c.to, got, c.want)
		}
	}
	tr.trim(15)
	if got := tr.abortedIn(0, 30); !slices.Equal(got, want[1:]) {
		t.Fatalf("after trim(15): %v, want %v", got, want[1:])
	}
}

// FuzzParseControl: a stored batch that claims to be a marker never panics
// the parser; a marker ControlBatch wrote always parses to its outcome.
func FuzzParseControl(f *testing.F) {
	f.Add(ControlBatch(1, 0, true, 0, 0), true)
	f.Add(ControlBatch(9, 3, false, 2, 5)[:70], false)
	f.Add(mkBatch(-1, -1, -1, 1, 0), false)
	f.Fuzz(func(t *testing.T, raw []byte, commit bool) {
		_, _, _ = ParseControl(raw)
		if got, _, err := ParseControl(ControlBatch(int64(len(raw)), 1, commit, 0, 0)); err != nil || got != commit {
			t.Fatalf("ParseControl(ControlBatch(commit=%v)) = %v, %v", commit, got, err)
		}
	})
}

// txnBatchRaw is mkBatch marked transactional.
func txnBatchRaw(pid int64, epoch int16, seq int32, n int) []byte {
	raw := mkBatch(pid, epoch, seq, n, 1000)
	raw[offAttributes+1] |= attrTransactional
	putU32(raw[offCRC:], crc32.Checksum(raw[offAttributes:], castagnoli))
	return raw
}

// A partition with transactions: transactional batches are taken only when
// the partition is configured for them; the LSO holds at the oldest open
// transaction; markers end transactions, fence older epochs, and the
// aborted ones are named; a takeover rebuilds it all from the log's tail.
func TestPartitionTransactions(t *testing.T) {
	log := newMemLog()
	plain := openTest(t, newMemLog(), nil, nil)
	if r := <-plain.Append(context.Background(), txnBatchRaw(7, 0, 0, 1)); !errors.Is(r.Err, kerr.InvalidRecord) {
		t.Fatalf("transactional batch without Transactions: %v, want INVALID_RECORD", r.Err)
	}
	p := openTest(t, log, nil, func(c *Config) { c.Transactions = true })
	if r := <-p.Append(context.Background(), ControlBatch(7, 0, true, 0, 0)); !errors.Is(r.Err, kerr.InvalidRecord) {
		t.Fatalf("a client's control batch: %v, want INVALID_RECORD", r.Err)
	}
	appendOK(t, p, mkBatch(-1, -1, -1, 2, 1000)) // 0..1
	appendOK(t, p, txnBatchRaw(7, 0, 0, 3))      // 2..4, producer 7
	appendOK(t, p, txnBatchRaw(8, 0, 0, 1))      // 5, producer 8
	if lso := p.LastStableOffset(); lso != 2 || p.HighWatermark() != 6 {
		t.Fatalf("LSO %d HW %d, want 2 and 6", lso, p.HighWatermark())
	}
	marker := func(pid int64, epoch int16, commit bool, decision int32) kafka.AppendResult {
		return <-p.AppendMarker(context.Background(), pid, epoch, commit, decision)
	}
	if r := marker(7, 0, false, 1); r.Err != nil || r.BaseOffset != 6 { // abort 2..6
		t.Fatalf("abort marker: %+v", r)
	}
	if lso := p.LastStableOffset(); lso != 5 {
		t.Fatalf("LSO %d after producer 7 aborted, want 5", lso)
	}
	if r := marker(8, 1, true, 1); r.Err != nil { // commit under a bumped epoch
		t.Fatalf("commit marker: %+v", r)
	}
	if lso, hw := p.LastStableOffset(), p.HighWatermark(); lso != hw || hw != 8 {
		t.Fatalf("LSO %d HW %d with nothing open, want both 8", lso, hw)
	}
	if r := marker(8, 0, false, 2); !errors.Is(r.Err, kerr.InvalidProducerEpoch) {
		t.Fatalf("a marker of an older epoch: %v, want INVALID_PRODUCER_EPOCH", r.Err)
	}
	if r := <-p.Append(context.Background(), txnBatchRaw(8, 0, 1, 1)); r.Err == nil {
		t.Fatal("a batch of a fenced epoch was taken")
	}
	want := []kafka.AbortedTransaction{{ProducerID: 7, FirstOffset: 2}}
	if got := p.AbortedTransactions(0, 8); !slices.Equal(got, want) {
		t.Fatalf("aborted %v, want %v", got, want)
	}
	appendOK(t, p, txnBatchRaw(7, 0, 3, 1)) // 8: producer 7's next transaction
	// A late copy of producer 7's first marker (decision 1, applied at 6)
	// must not end this transaction: it is answered and written nowhere.
	if r := marker(7, 0, false, 1); r.Err != nil || r.BaseOffset != -1 {
		t.Fatalf("a late copy of an applied marker: %+v, want success without an offset", r)
	}
	if lso, hw := p.LastStableOffset(), p.HighWatermark(); lso != 8 || hw != 9 {
		t.Fatalf("LSO %d HW %d after a late marker copy, want 8 and 9 (producer 7's transaction still open)", lso, hw)
	}
	p.Close(context.Background())

	// A new owner: the same from the tail.
	q := openTest(t, log, nil, func(c *Config) { c.Transactions = true })
	if lso := q.LastStableOffset(); lso != 8 {
		t.Fatalf("LSO %d after a takeover, want 8 (producer 7 open)", lso)
	}
	if got := q.AbortedTransactions(0, 9); !slices.Equal(got, want) {
		t.Fatalf("aborted after a takeover %v, want %v", got, want)
	}
	if r := <-q.AppendMarker(context.Background(), 8, 0, true, 5); !errors.Is(r.Err, kerr.InvalidProducerEpoch) {
		t.Fatalf("after a takeover, a marker of a fenced epoch: %v", r.Err)
	}
	if r := <-q.AppendMarker(context.Background(), 7, 0, true, 1); r.Err != nil || r.BaseOffset != -1 || q.LastStableOffset() != 8 {
		t.Fatalf("after a takeover, a late marker copy: %+v, LSO %d; want ignored and LSO 8", r, q.LastStableOffset())
	}
}
