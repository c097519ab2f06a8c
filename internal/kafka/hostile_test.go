package kafka_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"quire/internal/kafka"
	"quire/internal/kafka/kafkatest"
	"quire/internal/testutil"
)

// TestHostileConnections opens raw connections that send garbage, truncated
// and oversized frames and checks each is closed, while a kgo client on
// its own connections keeps producing and consuming.
func TestHostileConnections(t *testing.T) {
	c := newCluster(t, func(cfg *kafka.Config) { cfg.MaxFrameBytes = 1 << 20 })
	ctx := testContext(t)
	if _, err := c.admin().CreateTopic(ctx, 1, -1, nil, "steady"); err != nil {
		t.Fatal(err)
	}
	producer := c.client(kgo.DefaultProduceTopic("steady"), kgo.ProducerLinger(0))
	consumer := c.client(kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{"steady": {0: kgo.NewOffset().AtStart()}}),
		kgo.FetchMaxWait(100*time.Millisecond))

	frame := func(body []byte) []byte {
		return append(binary.BigEndian.AppendUint32(nil, uint32(len(body))), body...)
	}
	header := func(key, version int16) []byte {
		h := binary.BigEndian.AppendUint16(nil, uint16(key))
		h = binary.BigEndian.AppendUint16(h, uint16(version))
		h = binary.BigEndian.AppendUint32(h, 1)
		return binary.BigEndian.AppendUint16(h, 0xffff) // null client id
	}
	valid := kmsg.NewRequestFormatter().AppendRequest(nil, produceRequest(9, "steady", 0, recordBatch(t, 1, "v")), 1)
	rng := rand.New(rand.NewPCG(1, 2))
	garbage := make([]byte, 300)
	for i := range garbage {
		garbage[i] = byte(rng.UintN(256))
	}

	hostile := []struct {
		name string
		send []byte
		// halfClose closes the write side after sending (a frame cut short).
		halfClose bool
	}{
		{"random bytes", garbage, false},
		{"oversized frame", binary.BigEndian.AppendUint32(nil, 1<<20+1), false},
		{"negative frame size", binary.BigEndian.AppendUint32(nil, 0x80000001), false},
		{"frame shorter than a header", frame([]byte{0, 3}), false},
		{"unknown api key", frame(header(9999, 0)), false},
		{"garbage body", frame(append(header(3, 9), garbage...)), false},
		{"truncated body", frame(append(header(0, 9), valid[14:40]...)), false},
		{"frame cut short", valid[:len(valid)-10], true},
	}
	for round := range 3 {
		for _, h := range hostile {
			t.Run(fmt.Sprintf("%s/%d", h.name, round), func(t *testing.T) {
				conn := c.raw()
				if _, err := conn.nc.Write(h.send); err != nil {
					t.Fatal(err)
				}
				if h.halfClose {
					conn.nc.(interface{ CloseWrite() error }).CloseWrite()
				}
				conn.expectClosed()
			})
		}
		value := fmt.Sprintf("round-%d", round)
		if err := producer.ProduceSync(ctx, &kgo.Record{Value: []byte(value)}).FirstErr(); err != nil {
			t.Fatalf("produce beside hostile connections: %v", err)
		}
		fetches := consumer.PollRecords(ctx, 1)
		if err := fetches.Err(); err != nil {
			t.Fatal(err)
		}
		if recs := fetches.Records(); len(recs) != 1 || string(recs[0].Value) != value {
			t.Fatalf("consumed %v, want %s", recs, value)
		}
	}
}

// TestCloseWithLongPoll: Close returns promptly while a fetch long-polls.
func TestCloseWithLongPoll(t *testing.T) {
	c := newCluster(t)
	if err := c.backend.CreateTopic(testContext(t), "t", 1, nil, false); err != nil {
		t.Fatal(err)
	}
	conn := c.raw()
	req := fetchRequest(11, "t", 0, 0)
	req.MaxWaitMillis = 60_000
	conn.send(req)
	testutil.WaitFor(t, "the fetch to long-poll", func() bool { return c.backend.PartitionFor("t", 0).Waits() > 0 })
	start := time.Now()
	c.server.Close()
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("Close took %v", took)
	}
	conn.expectClosed()
}

// fuzzServer is one server (never listening) shared by fuzz iterations.
func fuzzServer(f *testing.F) (*kafka.Server, *kafkatest.Backend) {
	backend := kafkatest.New(kafka.Node{ID: 1, Host: "127.0.0.1", Port: 9092})
	s, err := kafka.New(kafka.Config{Backend: backend, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { s.Close() })
	ctx := context.Background()
	if err := backend.CreateTopic(ctx, "t", 2, nil, false); err != nil {
		f.Fatal(err)
	}
	// Something to fetch.
	<-backend.PartitionFor("t", 0).Append(context.Background(), buildBatch(2, "seed", 1))
	return s, backend
}

// FuzzRequest feeds arbitrary request frames (header and body, without the
// size prefix) through decode and dispatch. Invariants: no panic (a panic
// in a handler is recovered and turned into an error, which the fuzzer
// cannot tell from a decode error, so the test also fails on a recovered
// one: its message says "panic"); a response, when there is one, is a
// well-formed frame answering the request's correlation id.
func FuzzRequest(f *testing.F) {
	s, _ := fuzzServer(f)
	seeds := []kmsg.Request{
		func() kmsg.Request { r := kmsg.NewPtrApiVersionsRequest(); r.Version = 3; return r }(),
		func() kmsg.Request { r := kmsg.NewPtrMetadataRequest(); r.Version = 12; return r }(),
		produceRequest(9, "t", 0, buildBatch(2, "seed", 1)),
		produceRequest(3, "t", 1, buildBatch(2, "seed", 1)),
		fetchRequest(11, "t", 0, 0),
		fetchRequest(4, "t", 0, 0),
		func() kmsg.Request {
			r := kmsg.NewPtrListOffsetsRequest()
			r.Version = 7
			rt := kmsg.NewListOffsetsRequestTopic()
			rt.Topic = "t"
			rp := kmsg.NewListOffsetsRequestTopicPartition()
			rp.Timestamp = -1
			rt.Partitions = append(rt.Partitions, rp)
			r.Topics = append(r.Topics, rt)
			return r
		}(),
		func() kmsg.Request {
			r := kmsg.NewPtrCreateTopicsRequest()
			r.Version = 7
			rt := kmsg.NewCreateTopicsRequestTopic()
			rt.Topic, rt.NumPartitions = "x", 1
			r.Topics = append(r.Topics, rt)
			return r
		}(),
		func() kmsg.Request {
			r := kmsg.NewPtrDescribeConfigsRequest()
			r.Version = 4
			rr := kmsg.NewDescribeConfigsRequestResource()
			rr.ResourceType, rr.ResourceName = kmsg.ConfigResourceTypeTopic, "t"
			r.Resources = append(r.Resources, rr)
			return r
		}(),
		func() kmsg.Request {
			r := kmsg.NewPtrFindCoordinatorRequest()
			r.Version, r.CoordinatorKeys = 4, []string{"g"}
			return r
		}(),
		func() kmsg.Request { r := kmsg.NewPtrOffsetFetchRequest(); r.Version = 9; return r }(),
		offsetForLeaderEpoch(4, "t", 0, 0, 0),
		electLeaders(2, 0, map[string][]int32{"t": {0, 1}}),
		electLeaders(2, 1, nil),
		func() kmsg.Request { r := kmsg.NewPtrDescribeLogDirsRequest(); r.Version = 4; return r }(),
	}
	for i, req := range seeds {
		frame := kmsg.NewRequestFormatter(kmsg.FormatterClientID("fuzz")).AppendRequest(nil, req, int32(i))
		f.Add(frame[4:])
	}
	f.Fuzz(func(t *testing.T, frame []byte) {
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		resp, err := s.ServeFrame(ctx, frame)
		if err != nil {
			if bytes.Contains([]byte(err.Error()), []byte("panic")) {
				t.Fatalf("handler panicked: %v", err)
			}
			return
		}
		if len(resp) == 0 {
			return // acks=0
		}
		if len(resp) < 8 || int(binary.BigEndian.Uint32(resp)) != len(resp)-4 {
			t.Fatalf("malformed response frame of %d bytes", len(resp))
		}
		if !bytes.Equal(resp[4:8], frame[4:8]) {
			t.Fatalf("response correlation id %x, request %x", resp[4:8], frame[4:8])
		}
	})
}

// TestFuzzCorpusFilesExist keeps the committed corpus honest: every file
// under testdata/fuzz/FuzzRequest is a valid corpus entry (go test runs
// them as part of FuzzRequest).
func TestFuzzCorpusFilesExist(t *testing.T) {
	entries, err := os.ReadDir(filepath.Join("testdata", "fuzz", "FuzzRequest"))
	if errors.Is(err, os.ErrNotExist) {
		t.Skip("no committed corpus")
	}
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join("testdata", "fuzz", "FuzzRequest", e.Name()))
		if err != nil || !bytes.HasPrefix(b, []byte("go test fuzz v1")) {
			t.Errorf("%s: not a fuzz corpus file (%v)", e.Name(), err)
		}
	}
}
