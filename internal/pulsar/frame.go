package pulsar

// Pulsar's framing (big-endian throughout):
//
//	simple command:  [totalSize u32][commandSize u32][BaseCommand]
//	payload command: [totalSize u32][commandSize u32][BaseCommand]
//	                 [0x0e01 u16][CRC32C u32][metadataSize u32][MessageMetadata][payload]
//
// totalSize counts everything after itself. The CRC32C (Castagnoli) covers
// everything from metadataSize to the end of the frame. A MESSAGE may carry a
// broker-entry block ([0x0e02 u16][size u32][BrokerEntryMetadata]) before
// the magic; this server never sends one and skips one it receives.
//
// A batch (MessageMetadata.num_messages_in_batch set) has a payload of
// repeated [size u32][SingleMessageMetadata][payload_size bytes].
//
// Everything here decodes untrusted bytes: every length is checked against
// what is left before it is used, nothing allocates more than the frame's
// own size, and nothing panics (FuzzReadFrame, FuzzBatchPayload).

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"

	"google.golang.org/protobuf/proto"

	pb "quire/internal/pulsar/pulsarpb"
)

const (
	magicCRC32C              = 0x0e01
	magicBrokerEntryMetadata = 0x0e02
	// DefaultMaxMessageSize is Pulsar's maxMessageSize default (5 MiB),
	// advertised in CONNECTED.
	DefaultMaxMessageSize = 5 << 20
	// framePadding is what a frame may carry beyond the message size:
	// the command and the headers (Pulsar's MESSAGE_SIZE_FRAME_PADDING).
	framePadding = 10 << 10
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// ErrFrameTooLarge is returned for a frame whose size exceeds the limit.
var ErrFrameTooLarge = errors.New("pulsar: frame too large")

// errMalformed marks bytes that are not a valid frame.
var errMalformed = errors.New("pulsar: malformed frame")

func malformed(format string, args ...any) error {
	return fmt.Errorf("%w: %s", errMalformed, fmt.Sprintf(format, args...))
}

// Frame is one decoded frame.
type Frame struct {
	Cmd *pb.BaseCommand
	// HeadersAndPayload is everything after the command of a payload
	// command, from the magic on (a broker-entry block skipped): what a
	// Topic stores as an entry. Nil for a simple command.
	HeadersAndPayload []byte
	// Metadata and Payload are decoded from HeadersAndPayload (Payload
	// aliases it). ChecksumOK is false when the CRC32C did not match: the
	// frame is still returned so that SEND can answer ChecksumError.
	Metadata   *pb.MessageMetadata
	Payload    []byte
	ChecksumOK bool
}

// ReadFrame reads one frame from r. A size prefix above maxFrameBytes
// returns ErrFrameTooLarge before anything else is read; a frame that does
// not decode returns an error wrapping errMalformed. Either way the
// connection cannot continue (the stream is out of step or hostile).
func ReadFrame(r io.Reader, maxFrameBytes int) (*Frame, error) {
	var sizeBuf [4]byte
	if _, err := io.ReadFull(r, sizeBuf[:]); err != nil {
		return nil, err
	}
	size := binary.BigEndian.Uint32(sizeBuf[:])
	if uint64(size) > uint64(maxFrameBytes) {
		return nil, fmt.Errorf("%w: %d bytes, limit %d", ErrFrameTooLarge, size, maxFrameBytes)
	}
	buf, err := readN(r, int(size))
	if err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	return ParseFrame(buf)
}

// readN reads n bytes, growing the buffer as data arrives, so that a peer
// announcing a large frame and sending little holds little memory.
func readN(r io.Reader, n int) ([]byte, error) {
	const chunk = 256 << 10
	buf := make([]byte, 0, min(n, chunk))
	for len(buf) < n {
		m := min(n-len(buf), chunk)
		if cap(buf)-len(buf) < m {
			grown := make([]byte, len(buf), min(n, 2*cap(buf)+m))
			copy(grown, buf)
			buf = grown
		}
		if _, err := io.ReadFull(r, buf[len(buf):len(buf)+m]); err != nil {
			return nil, err
		}
		buf = buf[:len(buf)+m]
	}
	return buf, nil
}

// ParseFrame decodes a frame without its totalSize prefix.
func ParseFrame(buf []byte) (*Frame, error) {
	if len(buf) < 4 {
		return nil, malformed("frame of %d bytes has no command size", len(buf))
	}
	cmdSize := binary.BigEndian.Uint32(buf)
	rest := buf[4:]
	if uint64(cmdSize) > uint64(len(rest)) {
		return nil, malformed("command size %d beyond frame of %d bytes", cmdSize, len(buf))
	}
	cmd := &pb.BaseCommand{}
	if err := proto.Unmarshal(rest[:cmdSize], cmd); err != nil {
		return nil, malformed("command: %v", err)
	}
	f := &Frame{Cmd: cmd}
	rest = rest[cmdSize:]
	if len(rest) == 0 {
		return f, nil
	}
	if err := f.parsePayload(rest); err != nil {
		return nil, err
	}
	return f, nil
}

func (f *Frame) parsePayload(b []byte) error {
	if len(b) >= 2 && binary.BigEndian.Uint16(b) == magicBrokerEntryMetadata {
		if len(b) < 6 {
			return malformed("truncated broker-entry block")
		}
		n := binary.BigEndian.Uint32(b[2:])
		if uint64(n) > uint64(len(b)-6) {
			return malformed("broker-entry block of %d bytes beyond frame", n)
		}
		b = b[6+n:]
	}
	if len(b) < 10 {
		return malformed("payload headers of %d bytes", len(b))
	}
	if binary.BigEndian.Uint16(b) != magicCRC32C {
		return malformed("magic %#04x, want %#04x", binary.BigEndian.Uint16(b), magicCRC32C)
	}
	f.HeadersAndPayload = b
	want := binary.BigEndian.Uint32(b[2:])
	f.ChecksumOK = crc32.Checksum(b[6:], castagnoli) == want
	meta, payload, err := parseMetadata(b[6:])
	if err != nil {
		return err
	}
	f.Metadata, f.Payload = meta, payload
	return nil
}

// parseMetadata decodes [metadataSize][MessageMetadata][payload].
func parseMetadata(b []byte) (*pb.MessageMetadata, []byte, error) {
	if len(b) < 4 {
		return nil, nil, malformed("no metadata size")
	}
	n := binary.BigEndian.Uint32(b)
	if uint64(n) > uint64(len(b)-4) {
		return nil, nil, malformed("metadata size %d beyond frame", n)
	}
	meta := &pb.MessageMetadata{}
	if err := proto.Unmarshal(b[4:4+n], meta); err != nil {
		return nil, nil, malformed("metadata: %v", err)
	}
	return meta, b[4+n:], nil
}

// ParseEntry decodes a stored entry (HeadersAndPayload) into its metadata
// and payload, checking the CRC.
func ParseEntry(data []byte) (*pb.MessageMetadata, []byte, error) {
	f := &Frame{}
	if err := f.parsePayload(data); err != nil {
		return nil, nil, err
	}
	if !f.ChecksumOK {
		return nil, nil, ErrChecksum
	}
	return f.Metadata, f.Payload, nil
}

// BatchMessage is one message of a batch payload.
type BatchMessage struct {
	Metadata *pb.SingleMessageMetadata
	Payload  []byte
}

// ParseBatch splits an uncompressed batch payload of n messages. It fails
// on a count that does not fit the bytes, a size beyond them, or bytes left
// over.
func ParseBatch(payload []byte, n int) ([]BatchMessage, error) {
	if n < 0 || n > len(payload)/4 {
		return nil, malformed("batch of %d messages in %d bytes", n, len(payload))
	}
	out := make([]BatchMessage, 0, n)
	for i := range n {
		if len(payload) < 4 {
			return nil, malformed("batch message %d: no size", i)
		}
		size := binary.BigEndian.Uint32(payload)
		if uint64(size) > uint64(len(payload)-4) {
			return nil, malformed("batch message %d: metadata size %d beyond payload", i, size)
		}
		meta := &pb.SingleMessageMetadata{}
		if err := proto.Unmarshal(payload[4:4+size], meta); err != nil {
			return nil, malformed("batch message %d: metadata: %v", i, err)
		}
		payload = payload[4+size:]
		body := meta.GetPayloadSize()
		if body < 0 || int64(body) > int64(len(payload)) {
			return nil, malformed("batch message %d: payload size %d beyond payload", i, body)
		}
		out = append(out, BatchMessage{Metadata: meta, Payload: payload[:body]})
		payload = payload[body:]
	}
	if len(payload) != 0 {
		return nil, malformed("%d bytes after the batch's %d messages", len(payload), n)
	}
	return out, nil
}

// AppendBatchMessage appends one message in batch format to dst.
func AppendBatchMessage(dst []byte, meta *pb.SingleMessageMetadata, payload []byte) []byte {
	meta.PayloadSize = proto.Int32(int32(len(payload)))
	dst = appendSized(dst, meta)
	return append(dst, payload...)
}

// AppendCommand appends a simple-command frame to dst.
func AppendCommand(dst []byte, cmd *pb.BaseCommand) []byte {
	start := len(dst)
	dst = append(dst, 0, 0, 0, 0)
	dst = appendSized(dst, cmd)
	binary.BigEndian.PutUint32(dst[start:], uint32(len(dst)-start-4))
	return dst
}

// AppendPayloadCommand appends a payload-command frame to dst;
// headersAndPayload is an entry (magic, CRC and all), as EncodePayload
// makes it or a producer sent it.
func AppendPayloadCommand(dst []byte, cmd *pb.BaseCommand, headersAndPayload []byte) []byte {
	start := len(dst)
	dst = append(dst, 0, 0, 0, 0)
	dst = appendSized(dst, cmd)
	dst = append(dst, headersAndPayload...)
	binary.BigEndian.PutUint32(dst[start:], uint32(len(dst)-start-4))
	return dst
}

// EncodePayload builds [magic][CRC32C][metadataSize][metadata][payload].
func EncodePayload(meta *pb.MessageMetadata, payload []byte) []byte {
	b := make([]byte, 6, 6+4+proto.Size(meta)+len(payload))
	binary.BigEndian.PutUint16(b, magicCRC32C)
	b = appendSized(b, meta)
	b = append(b, payload...)
	binary.BigEndian.PutUint32(b[2:], crc32.Checksum(b[6:], castagnoli))
	return b
}

// appendSized appends [size u32][message].
func appendSized(dst []byte, m proto.Message) []byte {
	start := len(dst)
	dst = append(dst, 0, 0, 0, 0)
	dst, err := proto.MarshalOptions{}.MarshalAppend(dst, m)
	if err != nil {
		// Only a message missing a proto2 required field fails, and every
		// message built here sets them: a bug, not an input error.
		panic(fmt.Sprintf("pulsar: marshal %T: %v", m, err))
	}
	binary.BigEndian.PutUint32(dst[start:], uint32(len(dst)-start-4))
	return dst
}
