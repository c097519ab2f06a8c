package isrnode

import (
	"context"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"slices"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"quire/internal/isr"
	"quire/internal/isr/disklog"
	"quire/internal/testutil"
)

// idempotentBatch is a batch of values from producer pid at epoch, its
// first record numbered seq.
func idempotentBatch(pid int64, epoch int16, seq int32, values ...string) []byte {
	var vs [][]byte
	for _, v := range values {
		vs = append(vs, []byte(v))
	}
	raw := encodeValues(vs, time.Now().UnixMilli())
	binary.BigEndian.PutUint64(raw[batchProducerIDOffset:], uint64(pid))
	binary.BigEndian.PutUint16(raw[batchProducerEpochOffset:], uint16(epoch))
	binary.BigEndian.PutUint32(raw[batchBaseSequenceOffset:], uint32(seq))
	binary.BigEndian.PutUint32(raw[batchCRCOffset:], crc32.Checksum(raw[batchAttributesStart:], crc32c))
	return raw
}

// TestIdempotentProducerDedup: a retried batch of an idempotent producer
// is answered with the offset it got the first time and stored once, by
// the leader that appended it and by the one elected after it (whose table
// came from replication); a sequence that skips ahead is
// OUT_OF_ORDER_SEQUENCE_NUMBER, an older producer epoch
// INVALID_PRODUCER_EPOCH, and a new epoch starts again at sequence 0.
func TestIdempotentProducerDedup(t *testing.T) {
	c := newCluster(t, 1, 2, 3)
	leader := c.waitLeader("a leader").id
	appendRaw := func(on isr.BrokerID, raw []byte) (int64, error) {
		ctx, cancel := context.WithTimeout(c.ctx, 10*time.Second)
		defer cancel()
		return c.node(on).m.AppendBatch(ctx, partition, raw, isr.AcksAll)
	}
	first, err := appendRaw(leader, idempotentBatch(7, 0, 0, "a", "b"))
	if err != nil {
		t.Fatal(err)
	}
	second, err := appendRaw(leader, idempotentBatch(7, 0, 2, "c"))
	if err != nil {
		t.Fatal(err)
	}
	if again, err := appendRaw(leader, idempotentBatch(7, 0, 0, "a", "b")); err != nil || again != first {
		t.Fatalf("the first batch again: %d, %v; want its offset %d", again, err, first)
	}
	if _, err := appendRaw(leader, idempotentBatch(7, 0, 9, "gap")); !errors.Is(err, ErrOutOfOrderSequence) {
		t.Fatalf("a sequence gap: %v", err)
	}
	c.waitInSync(leader)
	c.stop(leader)
	next := c.waitLeader("a new leader").id
	if again, err := appendRaw(next, idempotentBatch(7, 0, 2, "c")); err != nil || again != second {
		t.Fatalf("the second batch again, on the new leader: %d, %v; want its offset %d", again, err, second)
	}
	if _, err := appendRaw(next, idempotentBatch(7, 1, 5, "d")); !errors.Is(err, ErrOutOfOrderSequence) {
		t.Fatalf("a new epoch not at sequence 0: %v", err)
	}
	if _, err := appendRaw(next, idempotentBatch(7, 1, 0, "d")); err != nil {
		t.Fatal(err)
	}
	if _, err := appendRaw(next, idempotentBatch(7, 0, 3, "e")); !errors.Is(err, ErrProducerFenced) {
		t.Fatalf("the old epoch after the new one: %v", err)
	}
	testutil.WaitFor(t, "the new leader's HW at its log end", func() bool {
		st := c.status(next)
		return st.HighWatermark == st.LogEndOffset
	})
	if got := c.readAll(next); !slices.Equal(got, []string{"a", "b", "c", "d"}) {
		t.Fatalf("the log holds %v, want each batch once", got)
	}
}

// TestProducerTableRebuild: a replica opened again rebuilds its producer
// table from its log's tail, and a truncation forgets the batches it cut.
func TestProducerTableRebuild(t *testing.T) {
	fs := vfs.NewMem()
	open := func() *disklog.Log {
		l, err := disklog.Open(disklog.Config{FS: fs, Dir: "/p"})
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	disk := open()
	var table producerTable
	log := producerLog{disklog.NewRawISRLog(disk, stampBatch), &table, &deferredSync{}}
	next := int64(0)
	for seq := int32(0); seq < 8; seq += 2 {
		b := isr.Batch{BaseOffset: next, LeaderEpoch: 0, Raw: idempotentBatch(3, 0, seq, "x", "y"), Count: 2}
		if err := log.Append(b); err != nil {
			t.Fatal(err)
		}
		next += 2
	}
	if err := disk.Close(); err != nil {
		t.Fatal(err)
	}
	disk = open()
	defer disk.Close()
	var rebuilt producerTable
	if err := rebuilt.rebuild(disk); err != nil {
		t.Fatal(err)
	}
	if dup, err := rebuilt.check(idempotence{producerID: 3, firstSeq: 6, lastSeq: 7}); err != nil || dup == nil || dup.base != 6 {
		t.Fatalf("the last batch after a reopen: %+v, %v; want the duplicate at 6", dup, err)
	}
	if _, err := rebuilt.check(idempotence{producerID: 3, firstSeq: 9, lastSeq: 9}); !errors.Is(err, ErrOutOfOrderSequence) {
		t.Fatalf("a gap after a reopen: %v", err)
	}
	rebuilt.truncate(4)
	if dup, err := rebuilt.check(idempotence{producerID: 3, firstSeq: 4, lastSeq: 5}); err != nil || dup != nil {
		t.Fatalf("a batch the truncation cut, sent again: %+v, %v; want it appended", dup, err)
	}
}
