package disklog

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"quire/internal/isr"
)

// TestRawISRLog: a raw ISRLog stores batches as given (stamped by its
// RawStamp with their base offset and epoch), reads them whole from the one
// holding the offset asked for, survives a reopen, and truncates a batch
// holding the offset whole, as Kafka does; a batch of values is refused.
func TestRawISRLog(t *testing.T) {
	fs := vfs.NewMem()
	// A stand-in format: 8 bytes of base offset, 4 of epoch, 8 of max
	// timestamp, then anything.
	stamp := func(raw []byte, base int64, epoch int32) (int64, error) {
		if len(raw) < 20 {
			return 0, errors.New("short")
		}
		binary.BigEndian.PutUint64(raw, uint64(base))
		binary.BigEndian.PutUint32(raw[8:], uint32(epoch))
		return int64(binary.BigEndian.Uint64(raw[12:])), nil
	}
	batch := func(ts int64, body string) []byte {
		b := make([]byte, 20, 20+len(body))
		binary.BigEndian.PutUint64(b[12:], uint64(ts))
		return append(b, body...)
	}
	l := NewRawISRLog(openLog(t, Config{FS: fs, Dir: "/p"}), stamp)
	mustNil(t, l.Append(isr.Batch{BaseOffset: 0, LeaderEpoch: 1, Raw: batch(100, "abc"), Count: 3}))
	mustNil(t, l.Append(isr.Batch{BaseOffset: 3, LeaderEpoch: 2, Raw: batch(200, "de"), Count: 2}))
	if err := l.Append(isr.Batch{BaseOffset: 5, LeaderEpoch: 2, Records: [][]byte{[]byte("x")}}); !errors.Is(err, ErrInvalidAppend) {
		t.Fatalf("a batch of values in a raw log: %v", err)
	}
	if err := l.Append(isr.Batch{BaseOffset: 5, LeaderEpoch: 2, Raw: []byte("short"), Count: 1}); !errors.Is(err, ErrInvalidAppend) {
		t.Fatalf("a batch its stamp refuses: %v", err)
	}
	got := l.Read(4, 10)
	if len(got) != 1 || got[0].BaseOffset != 3 || got[0].Count != 2 || got[0].LeaderEpoch != 2 ||
		binary.BigEndian.Uint64(got[0].Raw) != 3 || binary.BigEndian.Uint32(got[0].Raw[8:]) != 2 || !bytes.HasSuffix(got[0].Raw, []byte("de")) {
		t.Fatalf("read from 4: %+v; want the whole batch at 3, stamped", got)
	}
	if off, ok, err := l.Log().OffsetForTimestamp(150); err != nil || !ok || off != 3 {
		t.Fatalf("offset for timestamp 150: %d, %v, %v; want 3 (the max timestamps the stamp returned)", off, ok, err)
	}
	l.TruncateTo(4)
	if l.EndOffset() != 3 || l.Err() != nil {
		t.Fatalf("truncate to 4 inside the batch at 3: LEO %d, %v; want 3 (the batch gone whole)", l.EndOffset(), l.Err())
	}
	mustNil(t, l.Log().Close())
	l = NewRawISRLog(openLog(t, Config{FS: fs, Dir: "/p"}), stamp)
	if got := l.Read(0, 10); len(got) != 1 || got[0].Count != 3 || !bytes.HasSuffix(got[0].Raw, []byte("abc")) {
		t.Fatalf("after a reopen: %+v", got)
	}
}
