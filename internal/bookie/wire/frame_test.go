package wire

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// sampleRequests has one request of every type, with field values at their edges.
func sampleRequests() []*Request {
	return []*Request{
		{RequestId: 1, Body: &Request_Add{Add: &AddRequest{
			LedgerId: 7, EntryId: 0, LastAddConfirmed: -1, Payload: []byte("hello"),
		}}},
		{RequestId: 2, Body: &Request_Add{Add: &AddRequest{
			LedgerId: 1<<62 + 3, EntryId: 1 << 40, LastAddConfirmed: 1<<40 - 1, Recovery: true,
			Payload: bytes.Repeat([]byte{0xAB}, 70_000),
		}}},
		{RequestId: 3, Body: &Request_Add{Add: &AddRequest{LedgerId: 1, EntryId: 2}}}, // empty payload
		{RequestId: 4, Body: &Request_Read{Read: &ReadRequest{LedgerId: 7, EntryId: -1, Fence: true}}},
		{RequestId: 5, Body: &Request_Read{Read: &ReadRequest{LedgerId: 7, EntryId: 12}}},
		{RequestId: 6, Body: &Request_LongPollRead{LongPollRead: &LongPollReadRequest{
			LedgerId: 7, PreviousLac: 11, TimeoutMs: 30_000,
		}}},
		{RequestId: 7, Body: &Request_BatchRead{BatchRead: &BatchReadRequest{
			LedgerId: 7, FirstEntryId: 3, MaxEntries: 100, MaxBytes: 1 << 20,
		}}},
		{RequestId: 8, Body: &Request_DeleteLedger{DeleteLedger: &DeleteLedgerRequest{LedgerId: 7}}},
		{RequestId: 0, Body: &Request_Info{Info: &InfoRequest{}}},
		{RequestId: 1<<64 - 1, Body: &Request_Info{Info: &InfoRequest{}}},
		{RequestId: 9, Body: &Request_WriteLac{WriteLac: &WriteLacRequest{LedgerId: 7, Lac: 12}}},
		{RequestId: 10, Body: &Request_WriteLac{WriteLac: &WriteLacRequest{LedgerId: 1<<62 + 3, Lac: -1}}},
	}
}

func sampleResponses() []*Response {
	return []*Response{
		{RequestId: 1, Status: Status_OK, Body: &Response_Add{Add: &AddResponse{LedgerId: 7, EntryId: 0}}},
		{RequestId: 2, Status: Status_FENCED, ErrorMessage: "ledger 7 is fenced"},
		{RequestId: 3, Status: Status_OK, Body: &Response_Read{Read: &ReadResponse{
			LedgerId: 7, EntryId: 3, LastAddConfirmed: 2, Payload: []byte("x"),
		}}},
		{RequestId: 4, Status: Status_OK, Body: &Response_LongPollRead{LongPollRead: &LongPollReadResponse{
			LastAddConfirmed: 12, HasEntry: true,
			Entry: &Entry{LedgerId: 7, EntryId: 12, LastAddConfirmed: 11, Payload: []byte("y")},
		}}},
		{RequestId: 5, Status: Status_OK, Body: &Response_BatchRead{BatchRead: &BatchReadResponse{
			Entries: []*Entry{{LedgerId: 7, EntryId: 1}, {LedgerId: 7, EntryId: 2, Payload: []byte("z")}},
		}}},
		{RequestId: 6, Status: Status_OK, Body: &Response_DeleteLedger{DeleteLedger: &DeleteLedgerResponse{}}},
		{RequestId: 7, Status: Status_OK, Body: &Response_Info{Info: &InfoResponse{
			FreeBytes: 1 << 40, TotalBytes: 1 << 41, ReadOnly: true,
		}}},
		{RequestId: 8, Status: Status(99)}, // a status from a newer bookie
		{RequestId: 9, Status: Status_OK, Body: &Response_WriteLac{WriteLac: &WriteLacResponse{LedgerId: 7, LastAddConfirmed: 12}}},
		{RequestId: 10, Status: Status_FENCED, ErrorMessage: "write LAC of ledger 7: fenced"},
	}
}

func TestRoundTripRequests(t *testing.T) {
	var stream []byte
	for _, req := range sampleRequests() {
		var err error
		stream, err = AppendFrame(stream, req)
		if err != nil {
			t.Fatalf("AppendFrame(%v): %v", req, err)
		}
	}
	fr := NewFrameReader(bufio.NewReader(bytes.NewReader(stream)), 0)
	for i, want := range sampleRequests() {
		got, err := fr.ReadRequest()
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		if !proto.Equal(got, want) {
			t.Fatalf("request %d: got %v, want %v", i, got, want)
		}
	}
	if _, err := fr.ReadRequest(); err != io.EOF {
		t.Fatalf("after last frame: got %v, want io.EOF", err)
	}
}

func TestRoundTripResponses(t *testing.T) {
	var stream bytes.Buffer
	for _, resp := range sampleResponses() {
		if err := WriteFrame(&stream, resp); err != nil {
			t.Fatalf("WriteFrame(%v): %v", resp, err)
		}
	}
	fr := NewFrameReader(bufio.NewReader(&stream), 0)
	for i, want := range sampleResponses() {
		got, err := fr.ReadResponse()
		if err != nil {
			t.Fatalf("response %d: %v", i, err)
		}
		if !proto.Equal(got, want) {
			t.Fatalf("response %d: got %v, want %v", i, got, want)
		}
	}
	if _, err := fr.ReadResponse(); err != io.EOF {
		t.Fatalf("after last frame: got %v, want io.EOF", err)
	}
}

// TestDecodedPayloadDoesNotAliasBuffer guards the FrameReader's buffer reuse: a payload
// handed to the engine must survive the next frame being read.
func TestDecodedPayloadDoesNotAliasBuffer(t *testing.T) {
	var stream []byte
	for i := range 2 {
		var err error
		stream, err = AppendFrame(stream, &Request{RequestId: uint64(i), Body: &Request_Add{Add: &AddRequest{
			LedgerId: 1, EntryId: int64(i), Payload: bytes.Repeat([]byte{byte('a' + i)}, 100),
		}}})
		if err != nil {
			t.Fatal(err)
		}
	}
	fr := NewFrameReader(bufio.NewReader(bytes.NewReader(stream)), 0)
	first, err := fr.ReadRequest()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fr.ReadRequest(); err != nil {
		t.Fatal(err)
	}
	if got := first.GetAdd().GetPayload(); !bytes.Equal(got, bytes.Repeat([]byte{'a'}, 100)) {
		t.Fatalf("first payload changed after reading the second frame: %q", got)
	}
}

func frameOf(body []byte) []byte {
	out := binary.BigEndian.AppendUint32(nil, uint32(len(body)))
	return append(out, body...)
}

func mustMarshal(t *testing.T, m proto.Message) []byte {
	t.Helper()
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestMalformedFrames(t *testing.T) {
	valid := mustMarshal(t, &Request{RequestId: 9, Body: &Request_Info{Info: &InfoRequest{}}})
	// A field number no request type uses (99), length-delimited and empty: the protobuf
	// decoder keeps it as an unknown field and leaves Body nil.
	unknownBody := protowire.AppendTag(protowire.AppendVarint(protowire.AppendTag(nil, 1, protowire.VarintType), 9), 99, protowire.BytesType)
	unknownBody = protowire.AppendBytes(unknownBody, nil)

	tests := []struct {
		name    string
		stream  []byte
		max     int
		wantErr error
	}{
		{"zero length", frameOf(nil), 0, ErrMalformed},
		{"length over max", frameOf(bytes.Repeat([]byte{1}, 101)), 100, ErrFrameTooLarge},
		{"length prefix 0xFFFFFFFF", []byte{0xFF, 0xFF, 0xFF, 0xFF, 1, 2, 3}, 0, ErrFrameTooLarge},
		{"truncated prefix", []byte{0, 0}, 0, ErrMalformed},
		{"truncated body", frameOf(valid)[:len(valid)], 0, ErrMalformed},
		{"large claim, short body", append([]byte{0, 0x40, 0, 0}, valid...), 0, ErrMalformed},
		{"not protobuf", frameOf([]byte{0xFF, 0xFF, 0xFF}), 0, ErrMalformed},
		{"wrong wire type for body", frameOf([]byte{2 << 3, 5}), 0, ErrMalformed},
		{"no body", frameOf(mustMarshal(t, &Request{RequestId: 3})), 0, ErrMalformed},
		{"unknown body type", frameOf(unknownBody), 0, ErrMalformed},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			fr := NewFrameReader(bufio.NewReader(bytes.NewReader(tc.stream)), tc.max)
			req, err := fr.ReadRequest()
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("got (%v, %v), want error %v", req, err, tc.wantErr)
			}
			if req != nil {
				t.Fatalf("got request %v together with error", req)
			}
		})
	}
}

func TestMalformedResponses(t *testing.T) {
	tests := []struct {
		name   string
		stream []byte
	}{
		{"no status", frameOf(mustMarshal(t, &Response{RequestId: 1, Body: &Response_Info{Info: &InfoResponse{}}}))},
		{"invalid UTF-8 error message", frameOf([]byte{1 << 3, 1, 2 << 3, 2, 3<<3 | 2, 1, 0xFF})},
		{"zero length", frameOf(nil)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			fr := NewFrameReader(bufio.NewReader(bytes.NewReader(tc.stream)), 0)
			if resp, err := fr.ReadResponse(); !errors.Is(err, ErrMalformed) {
				t.Fatalf("got (%v, %v), want ErrMalformed", resp, err)
			}
		})
	}
}

// errReader fails with a non-EOF error, as a reset connection would.
type errReader struct{ err error }

func (r errReader) Read([]byte) (int, error) { return 0, r.err }

func TestTransportErrorsAreNotMalformed(t *testing.T) {
	boom := errors.New("connection reset")
	fr := NewFrameReader(bufio.NewReader(errReader{boom}), 0)
	_, err := fr.ReadRequest()
	if !errors.Is(err, boom) || errors.Is(err, ErrMalformed) {
		t.Fatalf("got %v, want the transport error and not ErrMalformed", err)
	}
}

func TestAppendFrameRejectsEmptyMessage(t *testing.T) {
	prefix := []byte("keep")
	out, err := AppendFrame(prefix, &Request{})
	if !errors.Is(err, ErrMalformed) {
		t.Fatalf("got %v, want ErrMalformed", err)
	}
	if string(out) != "keep" {
		t.Fatalf("dst changed on error: %q", out)
	}
}

func TestLargeFrameGrowsBufferAndReleasesIt(t *testing.T) {
	big := &Request{RequestId: 1, Body: &Request_Add{Add: &AddRequest{
		LedgerId: 1, EntryId: 1, Payload: bytes.Repeat([]byte("q"), 3<<20),
	}}}
	small := &Request{RequestId: 2, Body: &Request_Info{Info: &InfoRequest{}}}
	stream, err := AppendFrame(nil, big)
	if err != nil {
		t.Fatal(err)
	}
	if stream, err = AppendFrame(stream, small); err != nil {
		t.Fatal(err)
	}
	fr := NewFrameReader(bufio.NewReaderSize(bytes.NewReader(stream), 4096), 0)
	got, err := fr.ReadRequest()
	if err != nil || !proto.Equal(got, big) {
		t.Fatalf("big frame: %v", err)
	}
	if cap(fr.buf) > retainBufferBytes {
		t.Fatalf("reader kept a %d-byte buffer after a large frame", cap(fr.buf))
	}
	if got, err := fr.ReadRequest(); err != nil || !proto.Equal(got, small) {
		t.Fatalf("small frame after big: %v %v", got, err)
	}
}

func TestStatusMapping(t *testing.T) {
	for s := Status_OK; s <= Status_UNKNOWN_ERROR; s++ {
		err := ErrorOf(s, "detail")
		if got := StatusOf(err); got != s {
			t.Errorf("StatusOf(ErrorOf(%v)) = %v", s, got)
		}
	}
	if got := StatusOf(errors.New("disk on fire")); got != Status_UNKNOWN_ERROR {
		t.Errorf("unmapped error: got %v", got)
	}
	var se *StatusError
	err := ErrorOf(Status(77), "from the future")
	if !errors.Is(err, ErrUnknown) || !errors.As(err, &se) || se.Message != "from the future" {
		t.Errorf("unknown status: got %v", err)
	}
}

func TestErrorMessageIsEncodable(t *testing.T) {
	msg := ErrorMessage(errors.New("bad path \xff\xfe" + strings.Repeat("é", 2000)))
	resp := &Response{RequestId: 1, Status: Status_IO_ERROR, ErrorMessage: msg}
	if _, err := AppendFrame(nil, resp); err != nil {
		t.Fatalf("sanitized message does not encode: %v", err)
	}
	if len(msg) > maxErrorMessageBytes+len("…") {
		t.Fatalf("message not bounded: %d bytes", len(msg))
	}
}
