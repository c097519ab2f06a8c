package pulsar_test

// Tests that speak the protocol directly, for what a well-behaved client
// never sends: bad checksums, oversize frames, commands out of order,
// silence, and the error codes of refused requests.

import (
	"bufio"
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	qpulsar "quire/internal/pulsar"
	pb "quire/internal/pulsar/pulsarpb"
	"quire/internal/pulsar/pulsartest"
)

// rawConn is a hand-driven protocol connection.
type rawConn struct {
	t  *testing.T
	nc net.Conn
	br *bufio.Reader
}

func (b *broker) dial() *rawConn {
	b.t.Helper()
	nc, err := net.DialTimeout("tcp", strings.TrimPrefix(b.url, "pulsar://"), 10*time.Second)
	if err != nil {
		b.t.Fatal(err)
	}
	b.t.Cleanup(func() { nc.Close() })
	return &rawConn{t: b.t, nc: nc, br: bufio.NewReader(nc)}
}

func (r *rawConn) write(frame []byte) {
	r.t.Helper()
	if _, err := r.nc.Write(frame); err != nil {
		r.t.Fatalf("write: %v", err)
	}
}

func (r *rawConn) send(cmd *pb.BaseCommand) { r.write(qpulsar.AppendCommand(nil, cmd)) }

// read returns the next frame, failing the test after 10 s.
func (r *rawConn) read() *qpulsar.Frame {
	r.t.Helper()
	f, err := r.readErr()
	if err != nil {
		r.t.Fatalf("read: %v", err)
	}
	return f
}

func (r *rawConn) readErr() (*qpulsar.Frame, error) {
	_ = r.nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	return qpulsar.ReadFrame(r.br, 16<<20)
}

// expectClosed reads until the server closes the connection.
func (r *rawConn) expectClosed() {
	r.t.Helper()
	for {
		_, err := r.readErr()
		if err == nil {
			continue
		}
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			r.t.Fatal("connection still open")
		}
		return
	}
}

func (r *rawConn) connect(version int32) *pb.CommandConnected {
	r.t.Helper()
	r.send(&pb.BaseCommand{Type: pb.BaseCommand_CONNECT.Enum(), Connect: &pb.CommandConnect{
		ClientVersion:   proto.String("raw"),
		ProtocolVersion: proto.Int32(version),
	}})
	f := r.read()
	if f.Cmd.GetType() != pb.BaseCommand_CONNECTED {
		r.t.Fatalf("got %v, want CONNECTED", f.Cmd.GetType())
	}
	return f.Cmd.GetConnected()
}

func (r *rawConn) expectError(want pb.ServerError, reqID uint64) {
	r.t.Helper()
	r.isError(r.read(), want, reqID)
}

func (r *rawConn) isError(f *qpulsar.Frame, want pb.ServerError, reqID uint64) {
	r.t.Helper()
	if e := f.Cmd.GetError(); f.Cmd.GetType() != pb.BaseCommand_ERROR || e.GetError() != want || e.GetRequestId() != reqID {
		r.t.Fatalf("got %v, want ERROR %v for request %d", f.Cmd, want, reqID)
	}
}

func (r *rawConn) createProducer(topic, name string, mode pb.ProducerAccessMode, reqID uint64) *qpulsar.Frame {
	r.send(&pb.BaseCommand{Type: pb.BaseCommand_PRODUCER.Enum(), Producer: &pb.CommandProducer{
		Topic: proto.String(topic), ProducerId: proto.Uint64(reqID), RequestId: proto.Uint64(reqID),
		ProducerName: proto.String(name), ProducerAccessMode: mode.Enum(),
	}})
	return r.read()
}

func TestConnectNegotiatesVersion(t *testing.T) {
	b := newBroker(t, nil, func(c *qpulsar.Config) { c.MaxMessageSize = 1 << 20 })
	for _, tc := range []struct{ client, want int32 }{{25, 20}, {20, 20}, {10, 10}} {
		got := b.dial().connect(tc.client)
		if got.GetProtocolVersion() != tc.want || got.GetMaxMessageSize() != 1<<20 {
			t.Errorf("client v%d: got v%d max %d, want v%d max %d", tc.client, got.GetProtocolVersion(), got.GetMaxMessageSize(), tc.want, 1<<20)
		}
	}
}

func TestCommandBeforeConnectCloses(t *testing.T) {
	r := newBroker(t, nil).dial()
	r.send(&pb.BaseCommand{Type: pb.BaseCommand_PING.Enum(), Ping: &pb.CommandPing{}})
	r.expectClosed()
}

func TestOversizeFrameCloses(t *testing.T) {
	b := newBroker(t, nil, func(c *qpulsar.Config) { c.MaxMessageSize = 1 << 10 })
	r := b.dial()
	r.connect(20)
	// The size prefix alone closes it: the body is never read.
	r.write([]byte{0, 1, 0, 0})
	r.expectClosed()
}

func TestSendErrors(t *testing.T) {
	b := newBroker(t, nil, func(c *qpulsar.Config) { c.MaxMessageSize = 1 << 10 })
	r := b.dial()
	r.connect(20)
	if f := r.createProducer("persistent://public/default/t", "p", pb.ProducerAccessMode_Shared, 1); f.Cmd.GetType() != pb.BaseCommand_PRODUCER_SUCCESS {
		t.Fatalf("got %v", f.Cmd)
	}
	hp := qpulsar.EncodePayload(testMetadata(0), []byte("payload"))
	hp[len(hp)-1] ^= 1
	r.write(qpulsar.AppendPayloadCommand(nil, sendCommand(1, 0), hp))
	f := r.read()
	if e := f.Cmd.GetSendError(); e == nil || e.GetError() != pb.ServerError_ChecksumError || e.GetSequenceId() != 0 {
		t.Fatalf("bad checksum: got %v, want SEND_ERROR ChecksumError", f.Cmd)
	}
	// Metadata plus a payload of the full message size: within the frame
	// padding, taken (a chunking client sends such entries).
	full := qpulsar.EncodePayload(testMetadata(0), make([]byte, 1<<10))
	r.write(qpulsar.AppendPayloadCommand(nil, sendCommand(1, 1), full))
	f = r.read()
	if rc := f.Cmd.GetSendReceipt(); rc == nil || rc.GetSequenceId() != 1 || rc.GetMessageId().GetEntryId() != 0 {
		t.Fatalf("a message at the limit: got %v, want SEND_RECEIPT 1:0 for sequence 1", f.Cmd)
	}
	good := qpulsar.EncodePayload(testMetadata(0), []byte("payload"))
	r.write(qpulsar.AppendPayloadCommand(nil, sendCommand(1, 2), good))
	f = r.read()
	if rc := f.Cmd.GetSendReceipt(); rc == nil || rc.GetSequenceId() != 2 || rc.GetMessageId().GetLedgerId() != 1 || rc.GetMessageId().GetEntryId() != 1 {
		t.Fatalf("got %v, want SEND_RECEIPT 1:1 for sequence 2", f.Cmd)
	}
	// A SEND for a producer that does not exist: client and broker
	// disagree, so the connection closes (as in Pulsar).
	r.write(qpulsar.AppendPayloadCommand(nil, sendCommand(99, 3), good))
	r.expectClosed()
}

func TestProducerAccessModes(t *testing.T) {
	b := newBroker(t, nil)
	r := b.dial()
	r.connect(20)
	topic := "persistent://public/default/modes"
	f := r.createProducer(topic, "", pb.ProducerAccessMode_Exclusive, 1)
	if f.Cmd.GetType() != pb.BaseCommand_PRODUCER_SUCCESS || f.Cmd.GetProducerSuccess().GetProducerName() == "" {
		t.Fatalf("got %v, want PRODUCER_SUCCESS with a generated name", f.Cmd)
	}
	// As Pulsar: a shared producer beside an exclusive one is busy, a
	// second exclusive one fenced.
	r.isError(r.createProducer(topic, "", pb.ProducerAccessMode_Shared, 2), pb.ServerError_ProducerBusy, 2)
	r.isError(r.createProducer(topic, "", pb.ProducerAccessMode_Exclusive, 6), pb.ServerError_ProducerFenced, 6)
	name := f.Cmd.GetProducerSuccess().GetProducerName()
	r.isError(r.createProducer(topic, name, pb.ProducerAccessMode_Shared, 3), pb.ServerError_ProducerBusy, 3)
	r.send(&pb.BaseCommand{Type: pb.BaseCommand_CLOSE_PRODUCER.Enum(), CloseProducer: &pb.CommandCloseProducer{ProducerId: proto.Uint64(1), RequestId: proto.Uint64(4)}})
	if f := r.read(); f.Cmd.GetSuccess().GetRequestId() != 4 {
		t.Fatalf("got %v, want SUCCESS", f.Cmd)
	}
	if f := r.createProducer(topic, name, pb.ProducerAccessMode_Shared, 5); f.Cmd.GetType() != pb.BaseCommand_PRODUCER_SUCCESS {
		t.Fatalf("after close: got %v", f.Cmd)
	}
}

func TestSubscribeErrors(t *testing.T) {
	b := newBroker(t, &pulsartest.Backend{NoAutoCreate: true})
	b.backend.CreateTopic("persistent://public/default/exists")
	r := b.dial()
	r.connect(20)
	subscribe := func(topic string, subType pb.CommandSubscribe_SubType, id uint64) {
		r.send(&pb.BaseCommand{Type: pb.BaseCommand_SUBSCRIBE.Enum(), Subscribe: &pb.CommandSubscribe{
			Topic: proto.String(topic), Subscription: proto.String("s"), SubType: subType.Enum(),
			ConsumerId: proto.Uint64(id), RequestId: proto.Uint64(id),
		}})
	}
	subscribe("persistent://public/default/missing", pb.CommandSubscribe_Exclusive, 1)
	r.expectError(pb.ServerError_TopicNotFound, 1)
	subscribe("persistent://public/default/exists", pb.CommandSubscribe_Exclusive, 3)
	if f := r.read(); f.Cmd.GetSuccess().GetRequestId() != 3 {
		t.Fatalf("got %v, want SUCCESS", f.Cmd)
	}
	subscribe("persistent://public/default/exists", pb.CommandSubscribe_Exclusive, 4)
	r.expectError(pb.ServerError_ConsumerBusy, 4)
	subscribe("persistent://public/default/exists", pb.CommandSubscribe_Shared, 5)
	r.expectError(pb.ServerError_ConsumerBusy, 5)
	r.send(&pb.BaseCommand{Type: pb.BaseCommand_SEEK.Enum(), Seek: &pb.CommandSeek{
		ConsumerId: proto.Uint64(3), RequestId: proto.Uint64(6),
	}})
	r.expectError(pb.ServerError_NotAllowedError, 6)
	r.send(&pb.BaseCommand{Type: pb.BaseCommand_GET_LAST_MESSAGE_ID.Enum(), GetLastMessageId: &pb.CommandGetLastMessageId{
		ConsumerId: proto.Uint64(42), RequestId: proto.Uint64(7),
	}})
	r.expectError(pb.ServerError_ConsumerNotFound, 7)
	// A command this broker does not serve is refused by its request id.
	r.send(&pb.BaseCommand{Type: pb.BaseCommand_NEW_TXN.Enum(), NewTxn: &pb.CommandNewTxn{
		RequestId: proto.Uint64(8),
	}})
	r.expectError(pb.ServerError_NotAllowedError, 8)
	r.send(&pb.BaseCommand{Type: pb.BaseCommand_ACK.Enum(), Ack: &pb.CommandAck{
		ConsumerId: proto.Uint64(3), AckType: pb.CommandAck_Individual.Enum(), RequestId: proto.Uint64(9),
		MessageId: []*pb.MessageIdData{{LedgerId: proto.Uint64(1), EntryId: proto.Uint64(0)}},
	}})
	if f := r.read(); f.Cmd.GetAckResponse().GetRequestId() != 9 || f.Cmd.GetAckResponse().Error != nil {
		t.Fatalf("got %v, want ACK_RESPONSE", f.Cmd)
	}
}

func TestLookupAndPartitionedMetadata(t *testing.T) {
	b := newBroker(t, &pulsartest.Backend{
		Partitions: map[string]int{"persistent://public/default/p": 4},
		Owner: func(topic string) string {
			if strings.HasSuffix(topic, "elsewhere") {
				return "pulsar://10.0.0.2:6650"
			}
			return ""
		},
	})
	r := b.dial()
	r.connect(20)
	lookup := func(topic string, id uint64) *pb.CommandLookupTopicResponse {
		r.send(&pb.BaseCommand{Type: pb.BaseCommand_LOOKUP.Enum(), LookupTopic: &pb.CommandLookupTopic{
			Topic: proto.String(topic), RequestId: proto.Uint64(id),
		}})
		return r.read().Cmd.GetLookupTopicResponse()
	}
	if got := lookup("persistent://public/default/here", 1); got.GetResponse() != pb.CommandLookupTopicResponse_Connect ||
		got.GetBrokerServiceUrl() != b.url || !got.GetAuthoritative() || got.GetRequestId() != 1 {
		t.Errorf("own topic: %v", got)
	}
	if got := lookup("persistent://public/default/elsewhere", 2); got.GetResponse() != pb.CommandLookupTopicResponse_Redirect ||
		got.GetBrokerServiceUrl() != "pulsar://10.0.0.2:6650" {
		t.Errorf("other broker's topic: %v", got)
	}
	r.send(&pb.BaseCommand{Type: pb.BaseCommand_PARTITIONED_METADATA.Enum(), PartitionMetadata: &pb.CommandPartitionedTopicMetadata{
		Topic: proto.String("persistent://public/default/p"), RequestId: proto.Uint64(3),
	}})
	if got := r.read().Cmd.GetPartitionMetadataResponse(); got.GetPartitions() != 4 || got.GetRequestId() != 3 {
		t.Errorf("partitioned metadata: %v", got)
	}
}

func TestKeepAlive(t *testing.T) {
	// A client that answers pings stays connected past several intervals.
	// The interval leaves a loaded machine time to answer.
	b := newBroker(t, nil, func(c *qpulsar.Config) { c.KeepAliveInterval = 300 * time.Millisecond })
	alive := b.dial()
	alive.connect(20)
	for pings := 0; pings < 3; {
		f := alive.read()
		if f.Cmd.GetType() == pb.BaseCommand_PING {
			pings++
			alive.send(&pb.BaseCommand{Type: pb.BaseCommand_PONG.Enum(), Pong: &pb.CommandPong{}})
		}
	}
	// The broker answers a client's ping too.
	alive.send(&pb.BaseCommand{Type: pb.BaseCommand_PING.Enum(), Ping: &pb.CommandPing{}})
	for {
		f := alive.read()
		if f.Cmd.GetType() == pb.BaseCommand_PONG {
			break
		}
		alive.send(&pb.BaseCommand{Type: pb.BaseCommand_PONG.Enum(), Pong: &pb.CommandPong{}})
	}
	// One that stays silent is pinged, then closed.
	quick := newBroker(t, nil, func(c *qpulsar.Config) { c.KeepAliveInterval = 50 * time.Millisecond })
	silent := quick.dial()
	silent.connect(20)
	if f := silent.read(); f.Cmd.GetType() != pb.BaseCommand_PING {
		t.Fatalf("got %v, want PING", f.Cmd.GetType())
	}
	silent.expectClosed()
}

func TestMaxUnackedPerConsumer(t *testing.T) {
	b := newBroker(t, nil, func(c *qpulsar.Config) { c.MaxUnackedPerConsumer = 5 })
	topic := "persistent://public/default/unacked"
	tp := b.backend.CreateTopic(topic)
	for i := range 10 {
		data := qpulsar.EncodePayload(testMetadata(0), []byte{byte(i)})
		if err := tp.Append(context.Background(), data, qpulsar.AppendInfo{}, func(qpulsar.AppendResult) {}); err != nil {
			t.Fatal(err)
		}
	}
	r := b.dial()
	r.connect(20)
	r.send(&pb.BaseCommand{Type: pb.BaseCommand_SUBSCRIBE.Enum(), Subscribe: &pb.CommandSubscribe{
		Topic: proto.String(topic), Subscription: proto.String("s"), SubType: pb.CommandSubscribe_Shared.Enum(),
		ConsumerId: proto.Uint64(1), RequestId: proto.Uint64(1), InitialPosition: pb.CommandSubscribe_Earliest.Enum(),
	}})
	if f := r.read(); f.Cmd.GetSuccess().GetRequestId() != 1 {
		t.Fatalf("got %v, want SUCCESS", f.Cmd)
	}
	r.send(&pb.BaseCommand{Type: pb.BaseCommand_FLOW.Enum(), Flow: &pb.CommandFlow{ConsumerId: proto.Uint64(1), MessagePermits: proto.Uint32(100)}})
	for i := range 5 {
		f := r.read()
		if m := f.Cmd.GetMessage(); m == nil || m.GetMessageId().GetEntryId() != uint64(i) {
			t.Fatalf("got %v, want MESSAGE of entry %d", f.Cmd, i)
		}
	}
	// At the bound: only acknowledging makes room, for exactly one more.
	// Without the bound entries 5, 6, … would already be on their way,
	// ahead of the ACK_RESPONSE.
	r.send(&pb.BaseCommand{Type: pb.BaseCommand_ACK.Enum(), Ack: &pb.CommandAck{
		ConsumerId: proto.Uint64(1), AckType: pb.CommandAck_Individual.Enum(), RequestId: proto.Uint64(2),
		MessageId: []*pb.MessageIdData{{LedgerId: proto.Uint64(1), EntryId: proto.Uint64(0)}},
	}})
	var acked, next bool
	for range 2 {
		f := r.read()
		switch {
		case f.Cmd.GetAckResponse().GetRequestId() == 2:
			acked = true
		case f.Cmd.GetMessage().GetMessageId().GetEntryId() == 5:
			next = true
		default:
			t.Fatalf("got %v, want ACK_RESPONSE and MESSAGE of entry 5", f.Cmd)
		}
	}
	if !acked || !next {
		t.Fatalf("ACK_RESPONSE %v, MESSAGE of entry 5 %v", acked, next)
	}
}
