package mlog

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"math"
	"slices"
	"strings"
	"testing"
)

// snapshotCursors are cursors whose snapshots seed the fuzzer and the
// round-trip test.
func snapshotCursors(t testing.TB) []*Cursor {
	fresh := newTestCursor(t, BeforeLedger(0), CursorOptions{})
	moved := newTestCursor(t, p(12, 345), CursorOptions{})
	moved.AckRange(p(12, 347), p(12, 350))
	moved.Ack(p(12, 400))
	moved.AckRange(p(13, 0), p(13, 2))
	moved.AckRange(p(13, 9), p(20, 1)) // spans ledgers
	extreme, err := NewCursor(strings.Repeat("x", MaxCursorNameLen), p(math.MinInt64, math.MinInt64), CursorOptions{})
	if err != nil {
		t.Fatal(err)
	}
	extreme.Ack(p(math.MinInt64, math.MaxInt64))
	extreme.AckRange(p(0, -5), p(0, 5))
	extreme.Ack(p(math.MaxInt64, math.MaxInt64))
	return []*Cursor{fresh, moved, extreme}
}

func TestSnapshotRoundTrip(t *testing.T) {
	for _, c := range snapshotCursors(t) {
		data, info := c.Snapshot(math.MaxInt)
		if info.Persisted != c.Holes() || info.Dropped != 0 {
			t.Errorf("info %+v for %d ranges", info, c.Holes())
		}
		got, err := Restore(data, CursorOptions{})
		if err != nil {
			t.Fatalf("Restore: %v", err)
		}
		if got.Name() != c.Name() || got.MarkDelete() != c.MarkDelete() ||
			!slices.Equal(slices.Collect(got.AckedRanges()), slices.Collect(c.AckedRanges())) {
			t.Errorf("restored %q %v %v, want %q %v %v", got.Name(), got.MarkDelete(), slices.Collect(got.AckedRanges()),
				c.Name(), c.MarkDelete(), slices.Collect(c.AckedRanges()))
		}
	}
}

// TestSnapshotBeyondLimit is the seed's "ack holes beyond 10,000" (P9): a
// cursor with 25,000 holes persists the 10,000 ranges nearest mark-delete;
// after a crash exactly the other 15,000 are redelivered and nothing
// acknowledged-but-unpersisted is reported as acknowledged.
func TestSnapshotBeyondLimit(t *testing.T) {
	const holes, size = 25000, 50000
	ledgers := newLedgerList(4, size)
	c := newTestCursor(t, BeforeLedger(4), CursorOptions{Ledgers: ledgers})
	for e := int64(1); e < size; e += 2 { // every odd entry: holes at 0, 2, 4, ...
		c.Ack(p(4, e))
	}
	if c.Holes() != holes || c.MarkDelete() != BeforeLedger(4) {
		t.Fatalf("Holes() = %d, MarkDelete() = %v", c.Holes(), c.MarkDelete())
	}
	if !c.LimitCrossed() || c.LimitCrossed() {
		t.Error("LimitCrossed() should say true exactly once")
	}
	if got := c.RangesInMemoryOnly(); got != 15000 {
		t.Errorf("RangesInMemoryOnly() = %d, want 15000", got)
	}

	data, info := c.Snapshot(c.MaxRangesToPersist())
	if info != (SnapshotInfo{Persisted: 10000, Dropped: 15000}) {
		t.Errorf("SnapshotInfo %+v, want 10000 persisted, 15000 dropped", info)
	}
	if len(data) > 5*DefaultMaxUnackedRangesToPersist+64 {
		t.Errorf("snapshot of 10,000 single-entry ranges is %d bytes, want about 4 per range", len(data))
	}
	restored, err := Restore(data, CursorOptions{Ledgers: ledgers})
	if err != nil {
		t.Fatal(err)
	}
	if restored.MarkDelete() != c.MarkDelete() || restored.Holes() != 10000 {
		t.Errorf("restored mark-delete %v holes %d", restored.MarkDelete(), restored.Holes())
	}
	lastPersisted := slices.Collect(c.AckedRanges())[info.Persisted-1].Hi
	redelivered := 0
	for e := range int64(size) {
		q := p(4, e)
		switch {
		case !c.IsAcked(q) && restored.IsAcked(q):
			t.Fatalf("%v unacked before the crash, acked after", q)
		case c.IsAcked(q) && !restored.IsAcked(q):
			if !lastPersisted.Less(q) {
				t.Fatalf("%v within the persisted ranges lost its ack", q)
			}
			redelivered++
		}
	}
	if redelivered != 15000 {
		t.Errorf("%d acked entries redelivered, want the 15,000 of the dropped ranges", redelivered)
	}
}

func TestSnapshotZeroRanges(t *testing.T) {
	c := snapshotCursors(t)[1]
	for _, maxRanges := range []int{0, -1} {
		data, info := c.Snapshot(maxRanges)
		if info.Persisted != 0 || info.Dropped != c.Holes() {
			t.Errorf("Snapshot(%d) info %+v", maxRanges, info)
		}
		got, err := Restore(data, CursorOptions{})
		if err != nil || got.MarkDelete() != c.MarkDelete() || got.Holes() != 0 {
			t.Errorf("Snapshot(%d) restored %v, err %v", maxRanges, got, err)
		}
	}
}

// reseal replaces the CRC of a snapshot whose body a test changed.
func reseal(body []byte) []byte {
	return binary.BigEndian.AppendUint32(slices.Clone(body), crc32.Checksum(body, castagnoli))
}

func TestRestoreRejects(t *testing.T) {
	good, _ := snapshotCursors(t)[1].Snapshot(math.MaxInt)
	body := good[:len(good)-4]
	flipped := slices.Clone(good)
	flipped[len(flipped)/2] ^= 0x10

	// A fresh cursor named "" at 0:-1: version, name length, ledger, entry, count.
	minimal := []byte{1, 0, 0, 1, 0}
	// One range at 0:1 - lo.entry - md.entry - 2 = 0 for lo = 0:1.
	oneRange := append(slices.Clone(minimal[:4]), 1, 0, 0, 0, 0)
	tests := []struct {
		name    string
		data    []byte
		version bool
	}{
		{"empty", nil, false},
		{"too short", []byte{1, 0, 0}, false},
		{"unknown version", append([]byte{2}, good[1:]...), true},
		{"flipped bit", flipped, false},
		{"truncated", reseal(body[:len(body)-1]), false},
		{"trailing byte", reseal(append(slices.Clone(body), 0)), false},
		{"overlong varint", reseal([]byte{1, 0x80, 0x00, 0, 1, 0}), false},
		{"name longer than data", reseal([]byte{1, 5, 'a'}), false},
		{"name over limit", reseal(binary.AppendUvarint([]byte{1}, MaxCursorNameLen+1)), false},
		{"range count over data", reseal([]byte{1, 0, 0, 1, 100}), false},
		{"entry overflow", reseal(append(binary.AppendVarint([]byte{1, 0, 0}, math.MaxInt64-1), 1, 0, 0, 0, 0)), false},
		{"ledger overflow", reseal(append(binary.AppendVarint([]byte{1, 0}, math.MaxInt64), 1, 1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01, 0, 0, 0)), false},
	}
	if _, err := Restore(reseal(minimal), CursorOptions{}); err != nil {
		t.Fatalf("minimal snapshot: %v", err)
	}
	if _, err := Restore(reseal(oneRange), CursorOptions{}); err != nil {
		t.Fatalf("one-range snapshot: %v", err)
	}
	for _, tt := range tests {
		_, err := Restore(tt.data, CursorOptions{})
		want := ErrCorruptSnapshot
		if tt.version {
			want = ErrSnapshotVersion
		}
		if !errors.Is(err, want) {
			t.Errorf("%s: err = %v, want %v", tt.name, err, want)
		}
	}
}

// FuzzCursorDecode: Restore never panics on arbitrary bytes; it fails only
// with ErrCorruptSnapshot or ErrSnapshotVersion; whatever it accepts is a
// valid cursor that re-encodes to exactly the same bytes (one state, one
// encoding). Each input is also tried with a correct CRC appended, so the
// fuzzer explores the parser behind the checksum.
func FuzzCursorDecode(f *testing.F) {
	for _, c := range snapshotCursors(f) {
		for _, n := range []int{0, 1, math.MaxInt} {
			data, _ := c.Snapshot(n)
			f.Add(data)
			f.Add(data[:len(data)-4])
		}
	}
	f.Add([]byte{})
	f.Add([]byte{1, 0, 0, 1, 1, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		checkDecode(t, data)
		checkDecode(t, reseal(data))
	})
}

func checkDecode(t *testing.T, data []byte) {
	c, err := Restore(data, CursorOptions{})
	if err != nil {
		if !errors.Is(err, ErrCorruptSnapshot) && !errors.Is(err, ErrSnapshotVersion) {
			t.Fatalf("Restore error %v is neither ErrCorruptSnapshot nor ErrSnapshotVersion", err)
		}
		return
	}
	if err := checkCursor(c); err != nil {
		t.Fatalf("restored cursor breaks its invariant: %v", err)
	}
	again, info := c.Snapshot(c.Holes())
	if info.Dropped != 0 || !bytes.Equal(again, data) {
		t.Fatalf("re-encoded %x\nfrom        %x", again, data)
	}
}
