package pulsar_test

import (
	"testing"

	"google.golang.org/protobuf/proto"

	pb "quire/internal/pulsar/pulsarpb"
	"quire/internal/pulsar/pulsartest"
)

// The error codes of Key_Shared subscribes, on the wire: STICKY ranges
// that overlap another consumer's or are invalid are ConsumerAssignError,
// another mode or type is ConsumerBusy; a Key_Shared SUBSCRIBE without
// KeySharedMeta is AUTO_SPLIT.
func TestKeySharedSubscribeErrors(t *testing.T) {
	b := newBroker(t, &pulsartest.Backend{})
	r := b.dial()
	r.connect(20)
	subscribe := func(sub string, id uint64, subType pb.CommandSubscribe_SubType, meta *pb.KeySharedMeta) *pb.BaseCommand {
		r.send(&pb.BaseCommand{Type: pb.BaseCommand_SUBSCRIBE.Enum(), Subscribe: &pb.CommandSubscribe{
			Topic: proto.String("persistent://public/default/ks"), Subscription: proto.String(sub), SubType: subType.Enum(),
			ConsumerId: proto.Uint64(id), RequestId: proto.Uint64(id), ConsumerName: proto.String("c"),
			KeySharedMeta: meta,
		}})
		return r.read().Cmd
	}
	sticky := func(ranges ...int32) *pb.KeySharedMeta {
		m := &pb.KeySharedMeta{KeySharedMode: pb.KeySharedMode_STICKY.Enum()}
		for i := 0; i < len(ranges); i += 2 {
			m.HashRanges = append(m.HashRanges, &pb.IntRange{Start: proto.Int32(ranges[i]), End: proto.Int32(ranges[i+1])})
		}
		return m
	}
	ok := func(cmd *pb.BaseCommand, id uint64) {
		t.Helper()
		if cmd.GetSuccess().GetRequestId() != id {
			t.Fatalf("got %v, want SUCCESS for request %d", cmd, id)
		}
	}
	refused := func(cmd *pb.BaseCommand, want pb.ServerError, id uint64) {
		t.Helper()
		if e := cmd.GetError(); cmd.GetType() != pb.BaseCommand_ERROR || e.GetError() != want || e.GetRequestId() != id {
			t.Fatalf("got %v, want ERROR %v for request %d", cmd, want, id)
		}
	}
	ok(subscribe("auto", 1, pb.CommandSubscribe_Key_Shared, nil), 1)
	ok(subscribe("auto", 2, pb.CommandSubscribe_Key_Shared, nil), 2)
	refused(subscribe("auto", 3, pb.CommandSubscribe_Key_Shared, sticky(0, 10)), pb.ServerError_ConsumerBusy, 3)
	refused(subscribe("auto", 4, pb.CommandSubscribe_Shared, nil), pb.ServerError_ConsumerBusy, 4)
	refused(subscribe("auto", 5, pb.CommandSubscribe_Key_Shared,
		&pb.KeySharedMeta{KeySharedMode: pb.KeySharedMode_AUTO_SPLIT.Enum(), AllowOutOfOrderDelivery: proto.Bool(true)}),
		pb.ServerError_ConsumerBusy, 5)

	ok(subscribe("sticky", 6, pb.CommandSubscribe_Key_Shared, sticky(0, 999)), 6)
	refused(subscribe("sticky", 7, pb.CommandSubscribe_Key_Shared, sticky(999, 2000)), pb.ServerError_ConsumerAssignError, 7)
	refused(subscribe("sticky", 8, pb.CommandSubscribe_Key_Shared, sticky(5000, 70000)), pb.ServerError_ConsumerAssignError, 8)
	refused(subscribe("sticky", 9, pb.CommandSubscribe_Key_Shared, sticky()), pb.ServerError_ConsumerAssignError, 9)
	ok(subscribe("sticky", 10, pb.CommandSubscribe_Key_Shared, sticky(1000, 65535)), 10)
}
