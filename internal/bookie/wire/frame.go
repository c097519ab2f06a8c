// Package wire is the bookie wire protocol: the protobuf messages of wire.proto, the
// length-prefixed framing that carries them over TCP, and the sentinel errors that the
// server and the client map to and from Status codes.
//
// A frame is a 4-byte big-endian length N followed by N bytes of one protobuf message
// (a Request from client to bookie, a Response from bookie to client). 0 < N ≤ the reader's
// maximum frame size. There is no other header: the request_id inside the message matches a
// response to its request.
//
// This package owns encoding and validation only. It must never do I/O beyond the reader
// or writer it is handed, keep state across frames other than a reusable buffer, or panic on
// any input.
package wire

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"

	"google.golang.org/protobuf/proto"
)

// DefaultMaxFrameBytes bounds a frame's length (not counting the 4-byte prefix) unless a
// reader is configured otherwise. It is also the largest entry a bookie accepts, so it bounds
// what a ledger writer may put in one entry. BookKeeper's nettyMaxFrameSizeBytes defaults to
// 5 MB; Quire takes 16 MiB so a Kafka topic's max.message.bytes can be raised past 5 MB (one
// record batch is one entry).
const DefaultMaxFrameBytes = 16 << 20

// FrameHeaderBytes is the size of the length prefix.
const FrameHeaderBytes = 4

// FrameOverheadBytes is a generous bound on what a response adds around an entry's payload
// (request id, status, ids, LAC, field tags). A sender keeps its request frames at most
// MaxFrameBytes-FrameOverheadBytes so that the response that echoes the payload back (a read
// of that entry) still fits in a frame.
const FrameOverheadBytes = 128

var (
	// ErrFrameTooLarge reports a frame whose length prefix exceeds the maximum frame size,
	// or a message too large to encode in one frame.
	ErrFrameTooLarge = errors.New("bookie wire: frame too large")
	// ErrMalformed reports a frame that cannot be a valid message: zero length, truncated,
	// undecodable protobuf, or a message that lacks its body.
	ErrMalformed = errors.New("bookie wire: malformed frame")
)

// retainBufferBytes is the largest read buffer a FrameReader keeps between frames; a reader
// that once saw a 5 MiB frame should not pin 5 MiB per idle connection.
const retainBufferBytes = 256 << 10

// growChunkBytes is the first step by which a FrameReader grows its buffer for a large
// frame. It grows as bytes actually arrive, so a lying length prefix followed by a short
// write costs memory in proportion to the bytes sent, not to the length claimed.
const growChunkBytes = 64 << 10

// AppendFrame appends m as one frame (length prefix and encoded message) to dst. On error
// dst is returned unchanged in length.
func AppendFrame(dst []byte, m proto.Message) ([]byte, error) {
	start := len(dst)
	dst = append(dst, 0, 0, 0, 0)
	out, err := proto.MarshalOptions{}.MarshalAppend(dst, m)
	if err != nil {
		return dst[:start], fmt.Errorf("bookie wire: encode %T: %w", m, err)
	}
	bodyLen := len(out) - start - FrameHeaderBytes
	switch {
	case bodyLen == 0:
		// A reader rejects zero-length frames, so never produce one.
		return out[:start], fmt.Errorf("%w: %T encodes to zero bytes", ErrMalformed, m)
	case uint64(bodyLen) > math.MaxUint32:
		return out[:start], fmt.Errorf("%w: %T encodes to %d bytes", ErrFrameTooLarge, m, bodyLen)
	}
	binary.BigEndian.PutUint32(out[start:], uint32(bodyLen))
	return out, nil
}

// WriteFrame writes m as one frame to w. For many messages, prefer AppendFrame into one
// buffer and a single write.
func WriteFrame(w io.Writer, m proto.Message) error {
	buf, err := AppendFrame(nil, m)
	if err != nil {
		return err
	}
	_, err = w.Write(buf)
	return err
}

// FrameReader reads frames from a buffered reader. It is not safe for concurrent use.
type FrameReader struct {
	r             *bufio.Reader
	maxFrameBytes int
	// buf is reused between frames that do not fit in r's buffer (smaller ones are read in
	// place, from r's buffer). Messages decoded by protobuf never alias either: unmarshalling
	// copies bytes fields; only the fast paths' AddRequestFrame.Payload does, and a large
	// batch-read response's payloads, whose buffer the reader then gives up.
	buf []byte
	// header holds a length prefix being read (a field, so reading it allocates nothing).
	header [FrameHeaderBytes]byte
}

// NewFrameReader returns a reader of frames of at most maxFrameBytes bytes (after the
// prefix); maxFrameBytes <= 0 means DefaultMaxFrameBytes.
func NewFrameReader(r *bufio.Reader, maxFrameBytes int) *FrameReader {
	if maxFrameBytes <= 0 {
		maxFrameBytes = DefaultMaxFrameBytes
	}
	return &FrameReader{r: r, maxFrameBytes: maxFrameBytes}
}

// ReadRequest reads and validates one Request frame. It returns io.EOF when the stream ends
// cleanly between frames, an error wrapping ErrFrameTooLarge or ErrMalformed for a frame
// that breaks the protocol (after which the stream cannot be resynchronised: close it), and
// any other error from the underlying reader as is (wrapped).
func (fr *FrameReader) ReadRequest() (*Request, error) {
	body, err := fr.readFrame(false)
	if err != nil {
		return nil, err
	}
	return fr.unmarshalRequest(body)
}

func (fr *FrameReader) unmarshalRequest(body []byte) (*Request, error) {
	req := &Request{}
	err := proto.Unmarshal(body, req)
	fr.release()
	if err != nil {
		return nil, fmt.Errorf("%w: request: %w", ErrMalformed, err)
	}
	if err := ValidateRequest(req); err != nil {
		return nil, err
	}
	return req, nil
}

// ReadResponse reads and validates one Response frame; errors as for ReadRequest.
func (fr *FrameReader) ReadResponse() (*Response, error) {
	body, err := fr.readFrame(false)
	if err != nil {
		return nil, err
	}
	return fr.unmarshalResponse(body)
}

func (fr *FrameReader) unmarshalResponse(body []byte) (*Response, error) {
	resp := &Response{}
	err := proto.Unmarshal(body, resp)
	fr.release()
	if err != nil {
		return nil, fmt.Errorf("%w: response: %w", ErrMalformed, err)
	}
	if err := ValidateResponse(resp); err != nil {
		return nil, err
	}
	return resp, nil
}

// ValidateRequest checks what the protobuf decoder cannot: that the request has a body of
// a known type. (A body with a field number this build does not know decodes as an unknown
// field, leaving Body nil.) Semantic checks (ids in range) are the server's, answered with
// BAD_REQUEST rather than by closing the connection.
func ValidateRequest(req *Request) error {
	switch req.GetBody().(type) {
	case *Request_Add, *Request_Read, *Request_LongPollRead, *Request_BatchRead,
		*Request_DeleteLedger, *Request_Info, *Request_WriteLac:
		return nil
	case nil:
		return fmt.Errorf("%w: request %d has no body of a known type", ErrMalformed, req.GetRequestId())
	default:
		return fmt.Errorf("%w: request %d has body of unexpected type %T", ErrMalformed, req.GetRequestId(), req.GetBody())
	}
}

// ValidateResponse checks that a response carries a status. A body is optional: error
// responses may omit it, and which body an OK response needs depends on the request, which
// only the client knows.
func ValidateResponse(resp *Response) error {
	if resp.GetStatus() == Status_STATUS_UNSPECIFIED {
		return fmt.Errorf("%w: response %d has no status", ErrMalformed, resp.GetRequestId())
	}
	return nil
}

// readFrame returns the next frame's body, valid until the next call (it may alias the
// buffered reader's buffer). exact: a frame larger than the buffered reader's buffer is read
// into a buffer of its claimed length at once, not grown as bytes arrive (for frames from a
// peer trusted not to lie about lengths: a bookie's responses).
func (fr *FrameReader) readFrame(exact bool) ([]byte, error) {
	header := fr.header[:]
	n, err := io.ReadFull(fr.r, header)
	if n == 0 && errors.Is(err, io.EOF) {
		return nil, io.EOF // clean end between frames
	}
	switch {
	case errors.Is(err, io.ErrUnexpectedEOF):
		return nil, fmt.Errorf("%w: truncated length prefix (%d of %d bytes)", ErrMalformed, n, FrameHeaderBytes)
	case err != nil:
		return nil, fmt.Errorf("bookie wire: read frame header: %w", err)
	}
	length := binary.BigEndian.Uint32(header)
	if length == 0 {
		return nil, fmt.Errorf("%w: zero-length frame", ErrMalformed)
	}
	if uint64(length) > uint64(fr.maxFrameBytes) {
		return nil, fmt.Errorf("%w: %d bytes, max %d", ErrFrameTooLarge, length, fr.maxFrameBytes)
	}
	if exact && int(length) > fr.r.Size() && cap(fr.buf) < int(length) {
		fr.buf = make([]byte, 0, length)
	}
	body, err := fr.readBody(int(length))
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return nil, fmt.Errorf("%w: truncated frame body (%d of %d bytes)", ErrMalformed, len(body), length)
	}
	if err != nil {
		return nil, fmt.Errorf("bookie wire: read frame body: %w", err)
	}
	return body, nil
}

// readBody reads exactly n bytes. On error it returns the bytes it did read. A body that
// fits in the buffered reader is returned in place, without a copy.
func (fr *FrameReader) readBody(n int) ([]byte, error) {
	if n <= fr.r.Size() {
		body, err := fr.r.Peek(n)
		if err != nil {
			return body, err
		}
		_, err = fr.r.Discard(n)
		return body, err
	}
	if cap(fr.buf) >= n {
		fr.buf = fr.buf[:n]
		read, err := io.ReadFull(fr.r, fr.buf)
		return fr.buf[:read], err
	}
	buf := fr.buf[:0]
	for len(buf) < n {
		step := min(n-len(buf), max(len(buf), growChunkBytes))
		if cap(buf)-len(buf) < step {
			grown := make([]byte, len(buf), len(buf)+step)
			copy(grown, buf)
			buf = grown
		}
		read, err := io.ReadFull(fr.r, buf[len(buf):len(buf)+step])
		buf = buf[:len(buf)+read]
		if err != nil {
			fr.buf = buf
			return buf, err
		}
	}
	fr.buf = buf
	return buf, nil
}

// release drops the read buffer if it grew beyond what is worth keeping between frames.
func (fr *FrameReader) release() {
	if cap(fr.buf) > retainBufferBytes {
		fr.buf = nil
	}
}
