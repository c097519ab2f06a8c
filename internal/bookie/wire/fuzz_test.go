package wire

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"testing"

	"google.golang.org/protobuf/proto"
)

// fuzzMaxFrameBytes keeps the fuzzer's frames small enough to explore quickly; the size
// checks behave the same at any maximum.
const fuzzMaxFrameBytes = 1 << 16

// FuzzReadFrame feeds arbitrary bytes to the request decoder, frame after frame, as a bookie
// reads them off a connection. Invariants:
//
//  1. It never panics, and every call ends: each frame either consumes bytes or stops the loop.
//  2. Each call returns exactly one of: a request, io.EOF (only at a frame boundary), or an
//     error wrapping ErrFrameTooLarge or ErrMalformed. No other error can come from an
//     in-memory reader.
//  3. A request that comes out has a body of a known type and re-encodes (AppendFrame) into
//     a frame that decodes to an equal request: the server can always answer what it accepted.
//  4. After an error the stream is abandoned (as the server closes the connection); nothing
//     is claimed about what follows.
//  5. The same bytes read as responses obey 1, 2 and 4 too (the client's side of the wire).
func FuzzReadFrame(f *testing.F) {
	var all []byte
	for _, req := range sampleRequests() {
		if proto.Size(req) > fuzzMaxFrameBytes {
			continue
		}
		frame, err := AppendFrame(nil, req)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(frame)
		all = append(all, frame...)
	}
	f.Add(all)
	for _, resp := range sampleResponses() {
		frame, err := AppendFrame(nil, resp)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(frame)
	}
	f.Add([]byte{})
	f.Add([]byte{0, 0, 0, 0})
	f.Add([]byte{0xFF, 0xFF, 0xFF, 0xFF})
	f.Add([]byte{0, 0, 0, 3, 0xFF, 0xFF, 0xFF})

	f.Fuzz(func(t *testing.T, data []byte) {
		fr := NewFrameReader(bufio.NewReader(bytes.NewReader(data)), fuzzMaxFrameBytes)
		for range len(data) + 1 { // each successful frame consumes ≥ 5 bytes (invariant 1)
			req, err := fr.ReadRequest()
			if err != nil {
				if req != nil {
					t.Fatalf("request %v returned with error %v", req, err)
				}
				if err != io.EOF && !errors.Is(err, ErrMalformed) && !errors.Is(err, ErrFrameTooLarge) {
					t.Fatalf("unexpected error class: %v", err) // invariant 2
				}
				break // invariant 4
			}
			if err := ValidateRequest(req); err != nil {
				t.Fatalf("accepted an invalid request: %v", err) // invariant 3
			}
			frame, err := AppendFrame(nil, req)
			if err != nil {
				t.Fatalf("accepted request %v does not re-encode: %v", req, err)
			}
			again, err := NewFrameReader(bufio.NewReader(bytes.NewReader(frame)), fuzzMaxFrameBytes).ReadRequest()
			if err != nil {
				t.Fatalf("re-encoded request does not decode: %v", err)
			}
			if !proto.Equal(req, again) {
				t.Fatalf("re-encoding changed the request: %v != %v", req, again)
			}
		}

		fr = NewFrameReader(bufio.NewReader(bytes.NewReader(data)), fuzzMaxFrameBytes)
		for range len(data) + 1 {
			resp, err := fr.ReadResponse()
			if err != nil {
				if resp != nil {
					t.Fatalf("response %v returned with error %v", resp, err)
				}
				if err != io.EOF && !errors.Is(err, ErrMalformed) && !errors.Is(err, ErrFrameTooLarge) {
					t.Fatalf("unexpected error class: %v", err) // invariant 5
				}
				break
			}
		}
	})
}
