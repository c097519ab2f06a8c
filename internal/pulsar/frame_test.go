package pulsar_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"testing"

	"google.golang.org/protobuf/proto"

	qpulsar "quire/internal/pulsar"
	pb "quire/internal/pulsar/pulsarpb"
)

func sendCommand(producerID, seq uint64) *pb.BaseCommand {
	return &pb.BaseCommand{Type: pb.BaseCommand_SEND.Enum(), Send: &pb.CommandSend{
		ProducerId: proto.Uint64(producerID),
		SequenceId: proto.Uint64(seq),
	}}
}

func testMetadata(n int32) *pb.MessageMetadata {
	m := &pb.MessageMetadata{
		ProducerName: proto.String("p"),
		SequenceId:   proto.Uint64(7),
		PublishTime:  proto.Uint64(1),
	}
	if n > 0 {
		m.NumMessagesInBatch = proto.Int32(n)
	}
	return m
}

func batchPayload(payloads ...string) []byte {
	var b []byte
	for i, p := range payloads {
		b = qpulsar.AppendBatchMessage(b, &pb.SingleMessageMetadata{SequenceId: proto.Uint64(uint64(i))}, []byte(p))
	}
	return b
}

func TestFrameRoundTrip(t *testing.T) {
	ping := qpulsar.AppendCommand(nil, &pb.BaseCommand{Type: pb.BaseCommand_PING.Enum(), Ping: &pb.CommandPing{}})
	f, err := qpulsar.ReadFrame(bytes.NewReader(ping), 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if f.Cmd.GetType() != pb.BaseCommand_PING || f.HeadersAndPayload != nil {
		t.Fatalf("got %v with payload %v", f.Cmd, f.HeadersAndPayload)
	}

	hp := qpulsar.EncodePayload(testMetadata(3), batchPayload("a", "bb", ""))
	frame := qpulsar.AppendPayloadCommand(nil, sendCommand(1, 7), hp)
	f, err = qpulsar.ReadFrame(bytes.NewReader(frame), 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if !f.ChecksumOK || !bytes.Equal(f.HeadersAndPayload, hp) || f.Metadata.GetProducerName() != "p" {
		t.Fatalf("payload frame decoded as %+v", f)
	}
	msgs, err := qpulsar.ParseBatch(f.Payload, int(f.Metadata.GetNumMessagesInBatch()))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, m := range msgs {
		got = append(got, string(m.Payload))
	}
	if len(got) != 3 || got[0] != "a" || got[1] != "bb" || got[2] != "" {
		t.Fatalf("batch decoded as %q", got)
	}
	meta, payload, err := qpulsar.ParseEntry(hp)
	if err != nil || meta.GetSequenceId() != 7 || !bytes.Equal(payload, f.Payload) {
		t.Fatalf("ParseEntry: %v %v", meta, err)
	}
}

func TestReadFrameRejects(t *testing.T) {
	hp := qpulsar.EncodePayload(testMetadata(0), []byte("payload"))
	good := qpulsar.AppendPayloadCommand(nil, sendCommand(1, 1), hp)
	mutate := func(f func(b []byte) []byte) []byte { return f(append([]byte(nil), good...)) }
	cmdEnd := 8 + int(binary.BigEndian.Uint32(good[4:]))

	tests := []struct {
		name    string
		frame   []byte
		max     int
		wantErr error // nil: any error
		badCRC  bool  // decodes, with ChecksumOK false
	}{
		{name: "bad crc", frame: mutate(func(b []byte) []byte { b[len(b)-1] ^= 1; return b }), badCRC: true},
		{name: "truncated size", frame: good[:3], wantErr: io.ErrUnexpectedEOF},
		{name: "truncated body", frame: good[:len(good)-1], wantErr: io.ErrUnexpectedEOF},
		{name: "oversize", frame: good, max: len(good) - 5, wantErr: qpulsar.ErrFrameTooLarge},
		{name: "huge size prefix", frame: []byte{0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0}, wantErr: qpulsar.ErrFrameTooLarge},
		{name: "command size beyond frame", frame: mutate(func(b []byte) []byte { binary.BigEndian.PutUint32(b[4:], 1<<20); return b })},
		{name: "garbage command", frame: []byte{0, 0, 0, 7, 0, 0, 0, 3, 0xff, 0xff, 0xff}},
		{name: "command without type", frame: []byte{0, 0, 0, 4, 0, 0, 0, 0}},
		{name: "bad magic", frame: mutate(func(b []byte) []byte { b[cmdEnd] = 0x0f; return b })},
		{name: "metadata size beyond frame", frame: mutate(func(b []byte) []byte { binary.BigEndian.PutUint32(b[cmdEnd+6:], 1<<20); return b })},
		{name: "headers too short", frame: mutate(func(b []byte) []byte {
			b = b[:cmdEnd+5]
			binary.BigEndian.PutUint32(b, uint32(len(b)-4))
			return b
		})},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			limit := tc.max
			if limit == 0 {
				limit = 1 << 20
			}
			f, err := qpulsar.ReadFrame(bytes.NewReader(tc.frame), limit)
			if tc.badCRC {
				if err != nil || f.ChecksumOK {
					t.Fatalf("got %v, ChecksumOK %v; want a frame with a bad checksum", err, f != nil && f.ChecksumOK)
				}
				if _, _, err := qpulsar.ParseEntry(f.HeadersAndPayload); !errors.Is(err, qpulsar.ErrChecksum) {
					t.Fatalf("ParseEntry: %v, want ErrChecksum", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("decoded %v", f.Cmd)
			}
			if tc.wantErr != nil && !errors.Is(err, tc.wantErr) {
				t.Fatalf("err %v, want %v", err, tc.wantErr)
			}
		})
	}
}

func TestParseBatchRejects(t *testing.T) {
	good := batchPayload("x", "yy")
	tests := []struct {
		name    string
		payload []byte
		n       int
	}{
		{"count too large for bytes", good, 1 << 30},
		{"negative count", good, -1},
		{"fewer messages than bytes", good, 1},
		{"more messages than present", good[:len(good)-2], 2},
		{"size beyond payload", []byte{0, 0, 1, 0, 1, 2, 3, 4}, 1},
		{"payload size beyond", qpulsar.AppendBatchMessage(nil, &pb.SingleMessageMetadata{}, []byte("abc"))[:8], 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if msgs, err := qpulsar.ParseBatch(tc.payload, tc.n); err == nil {
				t.Fatalf("parsed %d messages", len(msgs))
			}
		})
	}
}

// FuzzReadFrame: on any bytes ReadFrame returns a frame or an error, never
// panics, and never reports a frame larger than its limit; a frame it
// returns re-encodes to one that decodes to the same command and payload.
func FuzzReadFrame(f *testing.F) {
	f.Add(qpulsar.AppendCommand(nil, &pb.BaseCommand{Type: pb.BaseCommand_PING.Enum(), Ping: &pb.CommandPing{}}))
	f.Add(qpulsar.AppendPayloadCommand(nil, sendCommand(1, 2), qpulsar.EncodePayload(testMetadata(2), batchPayload("a", "b"))))
	f.Add(qpulsar.AppendPayloadCommand(nil, sendCommand(1, 2), qpulsar.EncodePayload(testMetadata(0), []byte("x"))))
	f.Add([]byte{0, 0, 0, 4, 0, 0, 0, 0})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff})
	const limit = 64 << 10
	f.Fuzz(func(t *testing.T, data []byte) {
		fr, err := qpulsar.ReadFrame(bytes.NewReader(data), limit)
		if err != nil {
			return
		}
		if binary.BigEndian.Uint32(data) > limit {
			t.Fatalf("accepted a frame of %d bytes over the limit %d", binary.BigEndian.Uint32(data), limit)
		}
		if fr.HeadersAndPayload != nil && fr.Metadata == nil {
			t.Fatal("payload without metadata")
		}
		var again []byte
		if fr.HeadersAndPayload == nil {
			again = qpulsar.AppendCommand(nil, fr.Cmd)
		} else {
			again = qpulsar.AppendPayloadCommand(nil, fr.Cmd, fr.HeadersAndPayload)
		}
		fr2, err := qpulsar.ReadFrame(bytes.NewReader(again), limit+len(again))
		if err != nil {
			t.Fatalf("re-encoded frame does not decode: %v", err)
		}
		if !proto.Equal(fr.Cmd, fr2.Cmd) || !bytes.Equal(fr.HeadersAndPayload, fr2.HeadersAndPayload) || fr.ChecksumOK != fr2.ChecksumOK {
			t.Fatal("re-encoded frame decodes differently")
		}
	})
}

// FuzzBatchPayload: ParseBatch never panics and, when it succeeds, its
// messages cover the payload exactly: re-encoding them yields as many
// messages with the same payloads.
func FuzzBatchPayload(f *testing.F) {
	f.Add(batchPayload("a", "bb", ""), 3)
	f.Add(batchPayload(), 0)
	f.Add([]byte{0, 0, 0, 2, 0x30, 0x01}, 1)
	f.Fuzz(func(t *testing.T, payload []byte, n int) {
		msgs, err := qpulsar.ParseBatch(payload, n)
		if err != nil {
			return
		}
		if len(msgs) != n {
			t.Fatalf("%d messages, asked for %d", len(msgs), n)
		}
		var again []byte
		for _, m := range msgs {
			again = qpulsar.AppendBatchMessage(again, proto.Clone(m.Metadata).(*pb.SingleMessageMetadata), m.Payload)
		}
		msgs2, err := qpulsar.ParseBatch(again, n)
		if err != nil {
			t.Fatalf("re-encoded batch does not parse: %v", err)
		}
		for i := range msgs {
			if !bytes.Equal(msgs[i].Payload, msgs2[i].Payload) {
				t.Fatalf("message %d: payload %q became %q", i, msgs[i].Payload, msgs2[i].Payload)
			}
		}
	})
}
