package kafka_test

import (
	"context"
	"io"
	"log/slog"
	"net"
	"strconv"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"quire/internal/kafka"
	"quire/internal/kafka/kafkatest"
)

// listenersBackend is kafkatest's backend with two brokers whose endpoints
// differ per listener: broker 1 (this one) has INSIDE and OUTSIDE, broker 2
// only INSIDE, and broker 2 coordinates every group.
type listenersBackend struct {
	*kafkatest.Backend
	nodes []kafka.Node
}

func (b *listenersBackend) Self() kafka.Node                              { return b.nodes[0] }
func (b *listenersBackend) Brokers(context.Context) ([]kafka.Node, error) { return b.nodes, nil }
func (b *listenersBackend) Coordinator(context.Context, string) (kafka.Node, error) {
	return b.nodes[1], nil
}

// TestNamedListeners: a client is told the brokers' endpoints of the
// listener it came in on (Kafka's advertised.listeners); a broker without
// that listener is left out of Metadata and DescribeCluster, and as a
// group's coordinator answers COORDINATOR_NOT_AVAILABLE.
func TestNamedListeners(t *testing.T) {
	listen := func() (net.Listener, kafka.Endpoint) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		host, port, _ := net.SplitHostPort(ln.Addr().String())
		p, _ := strconv.Atoi(port)
		return ln, kafka.Endpoint{Host: host, Port: int32(p)}
	}
	inside, insideAt := listen()
	outside, outsideAt := listen()
	other := map[string]kafka.Endpoint{"INSIDE": {Host: "10.0.0.2", Port: 19092}}
	self := kafka.Node{ID: 1, Host: insideAt.Host, Port: insideAt.Port,
		Listeners: map[string]kafka.Endpoint{"INSIDE": insideAt, "OUTSIDE": outsideAt}}
	backend := &listenersBackend{Backend: kafkatest.New(self),
		nodes: []kafka.Node{self, {ID: 2, Host: "10.0.0.2", Port: 19092, Listeners: other}}}
	server, err := kafka.New(kafka.Config{Backend: backend, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer server.Close()
	go server.Serve(&kafka.Listener{Listener: inside, Name: "INSIDE"})
	go server.Serve(&kafka.Listener{Listener: outside, Name: "OUTSIDE"})

	ctx := testContext(t)
	ask := func(at kafka.Endpoint, req kmsg.Request) kmsg.Response {
		t.Helper()
		cl, err := kgo.NewClient(kgo.SeedBrokers(net.JoinHostPort(at.Host, strconv.Itoa(int(at.Port)))))
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		resp, err := cl.SeedBrokers()[0].Request(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	brokers := func(at kafka.Endpoint) map[int32]kafka.Endpoint {
		out := map[int32]kafka.Endpoint{}
		for _, b := range ask(at, kmsg.NewPtrMetadataRequest()).(*kmsg.MetadataResponse).Brokers {
			out[b.NodeID] = kafka.Endpoint{Host: b.Host, Port: b.Port}
		}
		dc := ask(at, kmsg.NewPtrDescribeClusterRequest()).(*kmsg.DescribeClusterResponse)
		if len(dc.Brokers) != len(out) {
			t.Fatalf("DescribeCluster through %v lists %d brokers, Metadata %d", at, len(dc.Brokers), len(out))
		}
		for _, b := range dc.Brokers {
			if out[b.NodeID] != (kafka.Endpoint{Host: b.Host, Port: b.Port}) {
				t.Fatalf("DescribeCluster through %v: broker %d at %s:%d, Metadata says %v", at, b.NodeID, b.Host, b.Port, out[b.NodeID])
			}
		}
		return out
	}
	if got := brokers(insideAt); len(got) != 2 || got[1] != insideAt || got[2] != other["INSIDE"] {
		t.Fatalf("through INSIDE: brokers %v, want 1 at %v and 2 at %v", got, insideAt, other["INSIDE"])
	}
	if got := brokers(outsideAt); len(got) != 1 || got[1] != outsideAt {
		t.Fatalf("through OUTSIDE: brokers %v, want only 1 at %v", got, outsideAt)
	}

	coordinator := func(at kafka.Endpoint) kmsg.FindCoordinatorResponseCoordinator {
		find := kmsg.NewPtrFindCoordinatorRequest()
		find.CoordinatorKeys = []string{"g"}
		r := ask(at, find).(*kmsg.FindCoordinatorResponse)
		if len(r.Coordinators) != 1 {
			t.Fatalf("FindCoordinator through %v: %d answers", at, len(r.Coordinators))
		}
		return r.Coordinators[0]
	}
	if c := coordinator(insideAt); c.ErrorCode != 0 || c.NodeID != 2 || c.Host != "10.0.0.2" || c.Port != 19092 {
		t.Fatalf("FindCoordinator through INSIDE: %+v, want broker 2 at 10.0.0.2:19092", c)
	}
	if c := coordinator(outsideAt); c.ErrorCode != kerr.CoordinatorNotAvailable.Code {
		t.Fatalf("FindCoordinator through OUTSIDE (broker 2 has no such listener): %v, want COORDINATOR_NOT_AVAILABLE", kerr.ErrorForCode(c.ErrorCode))
	}
}
