package wire

import (
	"bufio"
	"bytes"
	"testing"

	"google.golang.org/protobuf/proto"
)

// TestBatchReadResponseKeepsItsPayloads: a batch-read response larger than the reader's
// buffer decodes to what protobuf decodes, and its payloads stay intact after later frames
// are read (they alias a buffer the reader gave up, not the one it reuses).
func TestBatchReadResponseKeepsItsPayloads(t *testing.T) {
	batch := func(id uint64, fill byte) *Response {
		br := &BatchReadResponse{}
		for i := range 40 {
			br.Entries = append(br.Entries, &Entry{LedgerId: 9, EntryId: int64(i), LastAddConfirmed: -1,
				Payload: bytes.Repeat([]byte{fill + byte(i)}, 1000)})
		}
		return &Response{RequestId: id, Status: Status_OK, Body: &Response_BatchRead{BatchRead: br}}
	}
	first, second := batch(1, 'a'), batch(2, 'A')
	var stream []byte
	for _, m := range []*Response{first, second, {RequestId: 3, Status: Status_NO_SUCH_ENTRY}} {
		var err error
		if stream, err = AppendFrame(stream, m); err != nil {
			t.Fatal(err)
		}
	}
	fr := NewFrameReader(bufio.NewReaderSize(bytes.NewReader(stream), 4096), 0)
	var add AddResponseFrame
	var got []*Response
	for range 2 {
		resp, isAdd, err := fr.ReadResponseOrAdd(&add)
		if err != nil || isAdd {
			t.Fatalf("read: %v (add %v)", err, isAdd)
		}
		got = append(got, resp)
	}
	// A status without body takes the add fast path, into the reused buffer's neighbourhood.
	if _, isAdd, err := fr.ReadResponseOrAdd(&add); err != nil || !isAdd || add.Status != Status_NO_SUCH_ENTRY {
		t.Fatalf("third response: %v, add %v %v", err, isAdd, add.Status)
	}
	for i, want := range []*Response{first, second} {
		if !proto.Equal(got[i], want) {
			t.Fatalf("response %d (request %d) differs from what was sent", i, got[i].GetRequestId())
		}
	}
}
