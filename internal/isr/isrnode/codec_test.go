package isrnode

import (
	"errors"
	"reflect"
	"testing"

	"quire/internal/isr"
)

// TestBatchCodec: isr.Batches survive the trip through Kafka record batches
// (empty and large records too); a trailing partial batch is dropped, a
// flipped bit is caught by the CRC.
func TestBatchCodec(t *testing.T) {
	batches := []isr.Batch{
		{BaseOffset: 0, LeaderEpoch: 1, Records: [][]byte{[]byte("a"), {}, []byte("ccc")}},
		{BaseOffset: 3, LeaderEpoch: 4, Records: [][]byte{make([]byte, 300)}},
	}
	raw := appendBatches(nil, batches)
	got, err := decodeBatches(raw)
	if err != nil || !reflect.DeepEqual(got, batches) {
		t.Fatalf("round trip: %v, %+v; want %+v", err, got, batches)
	}
	got, err = decodeBatches(raw[:len(raw)-1])
	if err != nil || !reflect.DeepEqual(got, batches[:1]) {
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
