package pulsar_test

import (
	"context"
	"testing"

	"google.golang.org/protobuf/proto"

	qpulsar "quire/internal/pulsar"
	pb "quire/internal/pulsar/pulsarpb"
)

// TestTerminateTopic: TerminateTopic answers the last entry's id, closes
// the topic's producer (CLOSE_PRODUCER), refuses a new one with
// TopicTerminatedError, and once the subscription has acknowledged every
// entry its consumer gets REACHED_END_OF_TOPIC.
func TestTerminateTopic(t *testing.T) {
	b := newBroker(t, nil)
	topic := "persistent://public/default/terminate"
	tp := b.backend.CreateTopic(topic)
	for i := range 2 {
		data := qpulsar.EncodePayload(testMetadata(0), []byte{byte(i)})
		if err := tp.Append(context.Background(), data, qpulsar.AppendInfo{}, func(qpulsar.AppendResult) {}); err != nil {
			t.Fatal(err)
		}
	}
	r := b.dial()
	r.connect(20)
	if f := r.createProducer(topic, "p", pb.ProducerAccessMode_Shared, 10); f.Cmd.GetType() != pb.BaseCommand_PRODUCER_SUCCESS {
		t.Fatalf("got %v, want PRODUCER_SUCCESS", f.Cmd)
	}
	r.send(&pb.BaseCommand{Type: pb.BaseCommand_SUBSCRIBE.Enum(), Subscribe: &pb.CommandSubscribe{
		Topic: proto.String(topic), Subscription: proto.String("s"), SubType: pb.CommandSubscribe_Exclusive.Enum(),
		ConsumerId: proto.Uint64(1), RequestId: proto.Uint64(1), InitialPosition: pb.CommandSubscribe_Earliest.Enum(),
	}})
	if f := r.read(); f.Cmd.GetSuccess().GetRequestId() != 1 {
		t.Fatalf("got %v, want SUCCESS", f.Cmd)
	}
	r.send(&pb.BaseCommand{Type: pb.BaseCommand_FLOW.Enum(), Flow: &pb.CommandFlow{ConsumerId: proto.Uint64(1), MessagePermits: proto.Uint32(100)}})
	var ids []*pb.MessageIdData
	for range 2 {
		f := r.read()
		if f.Cmd.GetMessage() == nil {
			t.Fatalf("got %v, want MESSAGE", f.Cmd)
		}
		ids = append(ids, f.Cmd.GetMessage().GetMessageId())
	}

	last, err := b.server.TerminateTopic(context.Background(), topic)
	if err != nil {
		t.Fatal(err)
	}
	if want := tp.LastMessageID(); last != want || uint64(last.EntryID) != ids[1].GetEntryId() {
		t.Fatalf("TerminateTopic answered %v, want %v", last, want)
	}
	if f := r.read(); f.Cmd.GetCloseProducer().GetProducerId() != 10 {
		t.Fatalf("got %v, want CLOSE_PRODUCER of producer 10", f.Cmd)
	}
	r.isError(r.createProducer(topic, "p", pb.ProducerAccessMode_Shared, 11), pb.ServerError_TopicTerminatedError, 11)
	if again, err := b.server.TerminateTopic(context.Background(), topic); err != nil || again != last {
		t.Fatalf("terminating again: %v, %v; want %v", again, err, last)
	}

	// One entry acknowledged: not the end yet (a REACHED_END_OF_TOPIC
	// here would fail the next reads).
	r.send(&pb.BaseCommand{Type: pb.BaseCommand_ACK.Enum(), Ack: &pb.CommandAck{
		ConsumerId: proto.Uint64(1), AckType: pb.CommandAck_Individual.Enum(), RequestId: proto.Uint64(2),
		MessageId: []*pb.MessageIdData{ids[0]},
	}})
	if f := r.read(); f.Cmd.GetAckResponse().GetRequestId() != 2 {
		t.Fatalf("got %v, want ACK_RESPONSE", f.Cmd)
	}
	r.send(&pb.BaseCommand{Type: pb.BaseCommand_ACK.Enum(), Ack: &pb.CommandAck{
		ConsumerId: proto.Uint64(1), AckType: pb.CommandAck_Individual.Enum(), RequestId: proto.Uint64(3),
		MessageId: []*pb.MessageIdData{ids[1]},
	}})
	var acked, ended bool
	for !acked || !ended {
		f := r.read()
		switch {
		case f.Cmd.GetAckResponse().GetRequestId() == 3:
			acked = true
		case f.Cmd.GetType() == pb.BaseCommand_REACHED_END_OF_TOPIC && f.Cmd.GetReachedEndOfTopic().GetConsumerId() == 1:
			ended = true
		default:
			t.Fatalf("got %v, want ACK_RESPONSE and REACHED_END_OF_TOPIC", f.Cmd)
		}
	}
}
