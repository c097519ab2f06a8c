package isrnode

import (
	"errors"
	"reflect"
	"testing"

	"quire/internal/isr"
)

// TestBatchCodec: a producer's batch is stamped with its base offset and
// leader epoch without touching its CRC, and comes back whole from fetched
// bytes (empty and large records too); a trailing partial batch is dropped,
// a flipped bit is caught by the CRC.
func TestBatchCodec(t *testing.T) {
	values := [][][]byte{{[]byte("a"), {}, []byte("ccc")}, {make([]byte, 300)}}
	var raw []byte
	var want []isr.Batch
	base := int64(0)
	for i, v := range values {
		b := encodeValues(v, 1000+int64(i))
		count, err := checkBatch(b)
		if err != nil || count != int32(len(v)) {
			t.Fatalf("batch %d: %d records, %v", i, count, err)
		}
		ts, err := stampBatch(b, base, int32(i+1))
		if err != nil || ts != 1000+int64(i) {
			t.Fatalf("stamp batch %d: max timestamp %d, %v", i, ts, err)
		}
		if _, err := checkBatch(b); err != nil {
			t.Fatalf("stamped batch %d: %v", i, err)
		}
		want = append(want, isr.Batch{BaseOffset: base, LeaderEpoch: int32(i + 1), Raw: b, Count: count})
		raw = append(raw, b...)
		base += int64(count)
	}
	got, err := decodeBatches(raw)
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("round trip: %v, %+v; want %+v", err, got, want)
	}
	for i, b := range got {
		if v, err := batchValues(b); err != nil || !reflect.DeepEqual(v, values[i]) {
			t.Fatalf("batch %d values: %q, %v", i, v, err)
		}
	}
	got, err = decodeBatches(raw[:len(raw)-1])
	if err != nil || !reflect.DeepEqual(got, want[:1]) {
		t.Fatalf("with the last batch cut short: %v, %+v; want the first batch alone", err, got)
	}
	corrupt := append([]byte(nil), raw...)
	corrupt[len(corrupt)-5] ^= 1
	if _, err := decodeBatches(corrupt); !errors.Is(err, errCorruptBatch) {
		t.Fatalf("a flipped bit: %v, want errCorruptBatch", err)
	}
}

func TestPartitionName(t *testing.T) {
	for _, tc := range []struct {
		topic string
		p     int32
	}{{"t", 0}, {"a-b-c", 12}} {
		topic, p, ok := SplitPartitionName(PartitionName(tc.topic, tc.p))
		if !ok || topic != tc.topic || p != tc.p {
			t.Errorf("%s/%d came back as %s/%d (%v)", tc.topic, tc.p, topic, p, ok)
		}
	}
	for _, bad := range []string{"t", "-1", "t-x", "t-"} {
		if _, _, ok := SplitPartitionName(bad); ok {
			t.Errorf("%q split", bad)
		}
	}
}
