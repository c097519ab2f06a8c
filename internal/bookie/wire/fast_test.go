package wire

import (
	"bufio"
	"bytes"
	"math"
	"math/rand/v2"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

var edgeInt64s = []int64{0, 1, -1, 127, 128, 1 << 40, math.MaxInt64, math.MinInt64}

func randomAddFields(rng *rand.Rand) AddFields {
	pick := func() int64 {
		if rng.IntN(2) == 0 {
			return edgeInt64s[rng.IntN(len(edgeInt64s))]
		}
		return rng.Int64() >> rng.IntN(64)
	}
	a := AddFields{LedgerID: pick(), EntryID: pick(), LastAddConfirmed: pick(), Recovery: rng.IntN(2) == 0}
	if n := rng.IntN(4); n > 0 {
		a.Payload = make([]byte, []int{0, 1, 300, 70_000}[n])
		for i := range a.Payload {
			a.Payload[i] = byte(rng.Uint32())
		}
	}
	return a
}

func addRequestMessage(id uint64, a AddFields) *Request {
	return &Request{RequestId: id, Body: &Request_Add{Add: &AddRequest{
		LedgerId: a.LedgerID, EntryId: a.EntryID, LastAddConfirmed: a.LastAddConfirmed, Recovery: a.Recovery, Payload: a.Payload,
	}}}
}

// The fast encoders produce the generated code's bytes, field for field.
func TestFastEncodersMatchProto(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 2000 {
		id := []uint64{0, 1, math.MaxUint64, rng.Uint64()}[i%4]
		a := randomAddFields(rng)
		got, err := AppendAddRequestFrame([]byte("prefix"), id, &a)
		if err != nil {
			t.Fatal(err)
		}
		want, err := AppendFrame([]byte("prefix"), addRequestMessage(id, a))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("add request %d %+v: fast encoding\n%x\nwant\n%x", id, a, got, want)
		}
		got = AppendAddOKResponseFrame([]byte("p"), id, a.LedgerID, a.EntryID)
		want, err = AppendFrame([]byte("p"), &Response{RequestId: id, Status: Status_OK,
			Body: &Response_Add{Add: &AddResponse{LedgerId: a.LedgerID, EntryId: a.EntryID}}})
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("add response %d %+v: fast encoding\n%x\nwant\n%x", id, a, got, want)
		}
	}
}

// Frames of every request type, read with ReadRequestOrAdd: adds come out of the fast path
// with the sent fields, everything else as ReadRequest gives it.
func TestReadRequestOrAdd(t *testing.T) {
	var stream []byte
	for _, req := range sampleRequests() {
		var err error
		if stream, err = AppendFrame(stream, req); err != nil {
			t.Fatal(err)
		}
	}
	// 4 KiB of buffer: small frames are read in place, the 70 KB one through fr.buf.
	fr := NewFrameReader(bufio.NewReaderSize(bytes.NewReader(stream), 4096), 0)
	for i, want := range sampleRequests() {
		var add AddRequestFrame
		req, isAdd, err := fr.ReadRequestOrAdd(&add)
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		if isAdd {
			if req != nil {
				t.Fatalf("request %d: both a request and an add", i)
			}
			req = addRequestMessage(add.RequestID, add.AddFields)
		}
		if wantAdd := want.GetAdd() != nil; isAdd != wantAdd {
			t.Fatalf("request %d: isAdd=%v, want %v", i, isAdd, wantAdd)
		}
		if !proto.Equal(req, want) {
			t.Fatalf("request %d: got %v, want %v", i, req, want)
		}
	}
}

func TestReadResponseOrAdd(t *testing.T) {
	var stream []byte
	for _, resp := range sampleResponses() {
		var err error
		if stream, err = AppendFrame(stream, resp); err != nil {
			t.Fatal(err)
		}
	}
	fr := NewFrameReader(bufio.NewReader(bytes.NewReader(stream)), 0)
	for i, want := range sampleResponses() {
		var add AddResponseFrame
		resp, isAdd, err := fr.ReadResponseOrAdd(&add)
		if err != nil {
			t.Fatalf("response %d: %v", i, err)
		}
		if isAdd {
			resp = &Response{RequestId: add.RequestID, Status: add.Status}
			if add.HasAdd {
				resp.Body = &Response_Add{Add: &AddResponse{LedgerId: add.LedgerID, EntryId: add.EntryID}}
			}
		}
		if !proto.Equal(resp, want) {
			t.Fatalf("response %d: got %v, want %v (fast path %v)", i, resp, want, isAdd)
		}
	}
}

// Encodings that proto.Marshal never produces but a peer may send: the fast path either
// decodes them as protobuf would or leaves them to the generic decoder.
func TestFastDecodeUnusualEncodings(t *testing.T) {
	addBody := func(fields ...[]byte) []byte { return bytes.Join(fields, nil) }
	varint := func(num protowire.Number, v uint64) []byte {
		return protowire.AppendVarint(protowire.AppendTag(nil, num, protowire.VarintType), v)
	}
	bytesField := func(num protowire.Number, b []byte) []byte {
		return protowire.AppendBytes(protowire.AppendTag(nil, num, protowire.BytesType), b)
	}
	cases := map[string]struct {
		body     []byte
		wantFast bool
	}{
		"reversed field order": {addBody(
			bytesField(2, addBody(bytesField(5, []byte("p")), varint(3, 9), varint(1, 7))),
			varint(1, 42)), true},
		"add without request id": {bytesField(2, varint(1, 7)), true},
		"empty add":              {bytesField(2, nil), true},
		"repeated ledger id":     {bytesField(2, addBody(varint(1, 7), varint(1, 8))), false},
		"add twice":              {addBody(bytesField(2, varint(1, 7)), bytesField(2, varint(2, 8))), false},
		"unknown field":          {addBody(varint(1, 42), bytesField(2, varint(1, 7)), varint(99, 1)), false},
		"unknown add field":      {bytesField(2, addBody(varint(1, 7), varint(6, 1))), false},
		"ledger id as bytes":     {bytesField(2, bytesField(1, []byte{7})), false},
		"read then add":          {addBody(bytesField(3, varint(1, 7)), bytesField(2, varint(1, 8))), false},
		"non-minimal varint":     {addBody([]byte{0x08, 0x81, 0x80, 0x00}, bytesField(2, nil)), true},
		"recovery 2 means true":  {bytesField(2, varint(4, 2)), true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var add AddRequestFrame
			if got := decodeAddRequest(tc.body, &add); got != tc.wantFast {
				t.Fatalf("fast path taken = %v, want %v", got, tc.wantFast)
			}
			checkFastAddAgrees(t, tc.body)
		})
	}
}

// checkFastAddAgrees fails if the fast decoders accept body and disagree with protobuf.
func checkFastAddAgrees(t *testing.T, body []byte) {
	t.Helper()
	var add AddRequestFrame
	if decodeAddRequest(body, &add) {
		var req Request
		if err := proto.Unmarshal(body, &req); err != nil {
			t.Fatalf("fast path accepted a request that protobuf rejects: %v", err)
		}
		if want := addRequestMessage(add.RequestID, add.AddFields); !proto.Equal(&req, want) {
			t.Fatalf("fast path decoded %v, protobuf %v", want, &req)
		}
	}
	var resp AddResponseFrame
	if decodeAddResponse(body, &resp) {
		var want Response
		if err := proto.Unmarshal(body, &want); err != nil {
			t.Fatalf("fast path accepted a response that protobuf rejects: %v", err)
		}
		if ValidateResponse(&want) != nil {
			t.Fatalf("fast path accepted a response without status: %v", &want)
		}
		got := &Response{RequestId: resp.RequestID, Status: resp.Status}
		if resp.HasAdd {
			got.Body = &Response_Add{Add: &AddResponse{LedgerId: resp.LedgerID, EntryId: resp.EntryID}}
		}
		if !proto.Equal(got, &want) {
			t.Fatalf("fast path decoded %v, protobuf %v", got, &want)
		}
	}
	if got, ok := decodeBatchReadResponse(body); ok {
		var want Response
		if err := proto.Unmarshal(body, &want); err != nil {
			t.Fatalf("batch-read fast path accepted a response that protobuf rejects: %v", err)
		}
		if ValidateResponse(&want) != nil {
			t.Fatalf("batch-read fast path accepted a response without status: %v", &want)
		}
		if !proto.Equal(got, &want) {
			t.Fatalf("batch-read fast path decoded %v, protobuf %v", got, &want)
		}
	}
}

// FuzzFastDecode: whatever the bytes, a frame body that a fast decoder accepts decodes
// with the generated code to the same message (and never panics either way).
func FuzzFastDecode(f *testing.F) {
	for _, req := range sampleRequests() {
		if b, err := proto.Marshal(req); err == nil && len(b) < fuzzMaxFrameBytes {
			f.Add(b)
		}
	}
	for _, resp := range sampleResponses() {
		if b, err := proto.Marshal(resp); err == nil {
			f.Add(b)
		}
	}
	f.Add([]byte{0x12, 0x00})
	f.Fuzz(func(t *testing.T, body []byte) {
		checkFastAddAgrees(t, body)
	})
}
