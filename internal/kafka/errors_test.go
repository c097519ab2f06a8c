package kafka_test

import (
	"context"
	"encoding/binary"
	"errors"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"quire/internal/kafka"
	"quire/internal/testutil"
)

func produceRequest(version int16, topic string, partition int32, records []byte) *kmsg.ProduceRequest {
	req := kmsg.NewPtrProduceRequest()
	req.Version, req.Acks, req.TimeoutMillis = version, -1, 5000
	rt := kmsg.NewProduceRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewProduceRequestTopicPartition()
	rp.Partition, rp.Records = partition, records
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	return req
}

func produceCode(t *testing.T, resp kmsg.Response) (int16, int64) {
	t.Helper()
	r := resp.(*kmsg.ProduceResponse)
	if len(r.Topics) != 1 || len(r.Topics[0].Partitions) != 1 {
		t.Fatalf("produce response shape: %+v", r)
	}
	p := r.Topics[0].Partitions[0]
	return p.ErrorCode, p.BaseOffset
}

func TestProduceErrors(t *testing.T) {
	c := newCluster(t)
	ctx := testContext(t)
	if err := c.backend.CreateTopic(ctx, "t", 2, nil, false); err != nil {
		t.Fatal(err)
	}
	good := recordBatch(t, 3, "v")
	corrupt := append([]byte(nil), good...)
	corrupt[len(corrupt)-1] ^= 0xff
	magic1 := append([]byte(nil), good...)
	magic1[16] = 1
	c.backend.PartitionFor("t", 1).SetNotLeader(true)

	tests := []struct {
		name  string
		setup func(*kmsg.ProduceRequest)
		want  *kerr.Error
	}{
		{"ok", func(*kmsg.ProduceRequest) {}, nil},
		{"unknown topic", func(r *kmsg.ProduceRequest) { r.Topics[0].Topic = "nope" }, kerr.UnknownTopicOrPartition},
		{"unknown partition", func(r *kmsg.ProduceRequest) { r.Topics[0].Partitions[0].Partition = 7 }, kerr.UnknownTopicOrPartition},
		{"not leader", func(r *kmsg.ProduceRequest) { r.Topics[0].Partitions[0].Partition = 1 }, kerr.NotLeaderForPartition},
		{"bad acks", func(r *kmsg.ProduceRequest) { r.Acks = 2 }, kerr.InvalidRequiredAcks},
		{"transactional", func(r *kmsg.ProduceRequest) { r.TransactionID = kmsg.StringPtr("txn") }, kerr.TransactionalIDAuthorizationFailed},
		{"corrupt crc", func(r *kmsg.ProduceRequest) { r.Topics[0].Partitions[0].Records = corrupt }, kerr.CorruptMessage},
		{"magic 1", func(r *kmsg.ProduceRequest) { r.Topics[0].Partitions[0].Records = magic1 }, kerr.UnsupportedForMessageFormat},
		{"truncated", func(r *kmsg.ProduceRequest) { r.Topics[0].Partitions[0].Records = good[:len(good)-1] }, kerr.CorruptMessage},
		{"short", func(r *kmsg.ProduceRequest) { r.Topics[0].Partitions[0].Records = good[:20] }, kerr.CorruptMessage},
		{"empty", func(r *kmsg.ProduceRequest) { r.Topics[0].Partitions[0].Records = nil }, kerr.CorruptMessage},
		{"too large", func(r *kmsg.ProduceRequest) {
			r.Topics[0].Partitions[0].Records = recordBatch(t, 1, string(make([]byte, 2000)))
		}, kerr.MessageTooLarge},
		{"trailing garbage", func(r *kmsg.ProduceRequest) {
			r.Topics[0].Partitions[0].Records = append(append([]byte(nil), good...), 1, 2, 3)
		}, kerr.CorruptMessage},
	}
	c.backend.SetMaxMessageBytes(1000)
	conn := c.raw()
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			req := produceRequest(9, "t", 0, good)
			tc.setup(req)
			code, _ := produceCode(t, conn.request(req))
			if got := kerr.ErrorForCode(code); got != error(tc.want) && !(tc.want == nil && code == 0) {
				t.Fatalf("error %v, want %v", got, tc.want)
			}
		})
	}

	t.Run("append fails with a non-Kafka error", func(t *testing.T) {
		p := c.backend.PartitionFor("t", 0)
		p.FailAppends(errors.New("disk on fire"))
		defer p.FailAppends(nil)
		code, _ := produceCode(t, conn.request(produceRequest(9, "t", 0, good)))
		if code != kerr.UnknownServerError.Code {
			t.Fatalf("code %d", code)
		}
	})

	t.Run("several batches for one partition", func(t *testing.T) {
		hw := c.backend.PartitionFor("t", 0).HighWatermark()
		two := append(recordBatch(t, 2, "a"), recordBatch(t, 3, "b")...)
		code, base := produceCode(t, conn.request(produceRequest(9, "t", 0, two)))
		if code != 0 || base != hw {
			t.Fatalf("code %d base %d, want 0 %d", code, base, hw)
		}
		if got := c.backend.PartitionFor("t", 0).HighWatermark(); got != hw+5 {
			t.Fatalf("high watermark %d, want %d", got, hw+5)
		}
	})

	t.Run("v13 by topic id", func(t *testing.T) {
		infos, _ := c.backend.Topics(ctx, []string{"t"}, false)
		req := produceRequest(13, "", 0, good)
		req.Topics[0].TopicID = infos[0].ID
		if code, _ := produceCode(t, conn.request(req)); code != 0 {
			t.Fatalf("by id: %v", kerr.ErrorForCode(code))
		}
		req.Topics[0].TopicID = [16]byte{1, 2, 3}
		if code, _ := produceCode(t, conn.request(req)); code != kerr.UnknownTopicID.Code {
			t.Fatalf("unknown id: %v", kerr.ErrorForCode(code))
		}
	})
}

// TestProduceAcksZero: acks=0 gets no response (the next request's response
// comes next); a failing acks=0 produce closes the connection.
func TestProduceAcksZero(t *testing.T) {
	c := newCluster(t)
	if err := c.backend.CreateTopic(testContext(t), "t", 1, nil, false); err != nil {
		t.Fatal(err)
	}
	conn := c.raw()
	req := produceRequest(9, "t", 0, recordBatch(t, 1, "v"))
	req.Acks = 0
	conn.send(req)
	meta := kmsg.NewPtrMetadataRequest()
	meta.Version = 9
	conn.request(meta) // checks the correlation id: no produce response came first
	if hw := c.backend.PartitionFor("t", 0).HighWatermark(); hw != 1 {
		t.Fatalf("high watermark %d", hw)
	}
	bad := produceRequest(9, "nope", 0, recordBatch(t, 1, "v"))
	bad.Acks = 0
	conn.send(bad)
	conn.expectClosed()
}

// TestPipelining: a produce waiting for durability does not stop the
// produces behind it from being appended, and responses keep request order.
func TestPipelining(t *testing.T) {
	c := newCluster(t)
	ctx := testContext(t)
	if err := c.backend.CreateTopic(ctx, "t", 1, nil, false); err != nil {
		t.Fatal(err)
	}
	part := c.backend.PartitionFor("t", 0)
	release := part.HoldAppends()
	defer release()
	conn := c.raw()
	first := produceRequest(9, "t", 0, recordBatch(t, 2, "first"))
	second := produceRequest(9, "t", 0, recordBatch(t, 3, "second"))
	meta := kmsg.NewPtrMetadataRequest()
	meta.Version = 12
	c1, c2, c3 := conn.send(first), conn.send(second), conn.send(meta)
	testutil.WaitFor(t, "both produces appended while the first is unanswered", func() bool { return part.HighWatermark() == 5 })
	release()
	if code, base := produceCode(t, conn.recv(first, c1)); code != 0 || base != 0 {
		t.Fatalf("first: code %d base %d", code, base)
	}
	if code, base := produceCode(t, conn.recv(second, c2)); code != 0 || base != 2 {
		t.Fatalf("second: code %d base %d", code, base)
	}
	conn.recv(meta, c3)
}

func TestProduceTimeout(t *testing.T) {
	c := newCluster(t)
	if err := c.backend.CreateTopic(testContext(t), "t", 1, nil, false); err != nil {
		t.Fatal(err)
	}
	release := c.backend.PartitionFor("t", 0).HoldAppends()
	defer release()
	req := produceRequest(9, "t", 0, recordBatch(t, 1, "v"))
	req.TimeoutMillis = 20
	if code, _ := produceCode(t, c.raw().request(req)); code != kerr.RequestTimedOut.Code {
		t.Fatalf("code %v", kerr.ErrorForCode(code))
	}
}

func fetchRequest(version int16, topic string, partition int32, offset int64) *kmsg.FetchRequest {
	req := kmsg.NewPtrFetchRequest()
	req.Version, req.MaxWaitMillis, req.MinBytes, req.MaxBytes, req.SessionEpoch = version, 0, 1, 1<<20, -1
	rt := kmsg.NewFetchRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewFetchRequestTopicPartition()
	rp.Partition, rp.FetchOffset, rp.PartitionMaxBytes = partition, offset, 1<<20
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	return req
}

func TestFetchErrors(t *testing.T) {
	c := newCluster(t)
	ctx := testContext(t)
	if err := c.backend.CreateTopic(ctx, "t", 2, nil, false); err != nil {
		t.Fatal(err)
	}
	conn := c.raw()
	for range 3 {
		if code, _ := produceCode(t, conn.request(produceRequest(9, "t", 0, recordBatch(t, 2, "v")))); code != 0 {
			t.Fatal(kerr.ErrorForCode(code))
		}
	}
	c.backend.PartitionFor("t", 1).SetNotLeader(true)
	infos, _ := c.backend.Topics(ctx, []string{"t"}, false)

	tests := []struct {
		name  string
		req   *kmsg.FetchRequest
		top   *kerr.Error // top-level error
		want  *kerr.Error // partition error
		bytes bool        // records expected
	}{
		{name: "ok", req: fetchRequest(11, "t", 0, 0), bytes: true},
		{name: "at high watermark", req: fetchRequest(11, "t", 0, 6)},
		{name: "out of range", req: fetchRequest(11, "t", 0, 7), want: kerr.OffsetOutOfRange},
		{name: "negative offset", req: fetchRequest(11, "t", 0, -1), want: kerr.OffsetOutOfRange},
		{name: "unknown topic", req: fetchRequest(11, "nope", 0, 0), want: kerr.UnknownTopicOrPartition},
		{name: "not leader", req: fetchRequest(11, "t", 1, 0), want: kerr.NotLeaderForPartition},
		{name: "v13 unknown topic id", req: fetchRequest(13, "", 0, 0), want: kerr.UnknownTopicID},
		{name: "v13 by id", req: func() *kmsg.FetchRequest {
			r := fetchRequest(13, "", 0, 0)
			r.Topics[0].TopicID = infos[0].ID
			return r
		}(), bytes: true},
		{name: "unknown session", req: func() *kmsg.FetchRequest {
			r := fetchRequest(11, "t", 0, 0)
			r.SessionID, r.SessionEpoch = 42, 1
			return r
		}(), top: kerr.FetchSessionIDNotFound},
		{name: "incremental without session", req: func() *kmsg.FetchRequest {
			r := fetchRequest(11, "t", 0, 0)
			r.SessionEpoch = 3
			return r
		}(), top: kerr.InvalidFetchSessionEpoch},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp := conn.request(tc.req).(*kmsg.FetchResponse)
			if resp.SessionID != 0 {
				t.Fatalf("session id %d", resp.SessionID)
			}
			if got := kerr.ErrorForCode(resp.ErrorCode); got != nil || tc.top != nil {
				if got != error(tc.top) {
					t.Fatalf("top-level error %v, want %v", got, tc.top)
				}
				return
			}
			p := resp.Topics[0].Partitions[0]
			if got := kerr.ErrorForCode(p.ErrorCode); got != error(tc.want) && !(tc.want == nil && got == nil) {
				t.Fatalf("error %v, want %v", got, tc.want)
			}
			if tc.bytes != (len(p.RecordBatches) > 0) {
				t.Fatalf("records %d bytes, want some: %v", len(p.RecordBatches), tc.bytes)
			}
			if tc.want == kerr.OffsetOutOfRange && (p.HighWatermark != 6 || p.LogStartOffset != 0) {
				t.Fatalf("out of range: high watermark %d log start %d", p.HighWatermark, p.LogStartOffset)
			}
			if p.PreferredReadReplica != -1 {
				t.Fatalf("preferred read replica %d", p.PreferredReadReplica)
			}
		})
	}

	t.Run("max bytes", func(t *testing.T) {
		if err := c.backend.CreateTopic(ctx, "two", 2, nil, false); err != nil {
			t.Fatal(err)
		}
		for p := range int32(2) {
			for range 2 {
				conn.request(produceRequest(9, "two", p, recordBatch(t, 1, "v")))
			}
		}
		batch := len(recordBatch(t, 1, "v"))
		req := fetchRequest(11, "two", 0, 0)
		rp := req.Topics[0].Partitions[0]
		rp.Partition = 1
		req.Topics[0].Partitions = append(req.Topics[0].Partitions, rp)
		req.MaxBytes = 1 // the first batch comes anyway; nothing else fits
		resp := conn.request(req).(*kmsg.FetchResponse)
		p0, p1 := resp.Topics[0].Partitions[0], resp.Topics[0].Partitions[1]
		if len(p0.RecordBatches) != batch || len(p1.RecordBatches) != 0 || p1.HighWatermark != 2 {
			t.Fatalf("max bytes 1: %d and %d bytes (batch %d), hw %d", len(p0.RecordBatches), len(p1.RecordBatches), batch, p1.HighWatermark)
		}
		req.MaxBytes = int32(3 * batch)
		resp = conn.request(req).(*kmsg.FetchResponse)
		p0, p1 = resp.Topics[0].Partitions[0], resp.Topics[0].Partitions[1]
		if len(p0.RecordBatches) != 2*batch || len(p1.RecordBatches) != batch {
			t.Fatalf("max bytes 3 batches: %d and %d bytes (batch %d)", len(p0.RecordBatches), len(p1.RecordBatches), batch)
		}
	})
}

func TestApiVersions(t *testing.T) {
	c := newCluster(t)
	conn := c.raw()

	req := kmsg.NewPtrApiVersionsRequest()
	req.Version, req.ClientSoftwareName, req.ClientSoftwareVersion = 3, "raw", "1"
	resp := conn.request(req).(*kmsg.ApiVersionsResponse)
	if resp.ErrorCode != 0 {
		t.Fatalf("error %d", resp.ErrorCode)
	}
	got := map[int16][2]int16{}
	for _, k := range resp.ApiKeys {
		got[k.ApiKey] = [2]int16{k.MinVersion, k.MaxVersion}
	}
	if got[0] != [2]int16{3, 13} || got[1] != [2]int16{4, 18} || got[18] != [2]int16{0, 4} {
		t.Fatalf("produce %v fetch %v api versions %v", got[0], got[1], got[18])
	}
	for _, key := range []int16{24, 25, 26, 17, 36, 21, 33, 68} {
		if _, ok := got[key]; ok {
			t.Errorf("advertises %s", kmsg.NameForKey(key))
		}
	}

	// KIP-511: an ApiVersions version from the future gets a v0 answer.
	future := kmsg.NewPtrApiVersionsRequest()
	future.Version = 99
	corr := conn.send(future)
	v0 := kmsg.NewPtrApiVersionsRequest()
	v0.Version = 0
	old := conn.recv(v0, corr).(*kmsg.ApiVersionsResponse)
	if old.ErrorCode != kerr.UnsupportedVersion.Code || len(old.ApiKeys) != len(resp.ApiKeys) {
		t.Fatalf("future version: error %d, %d keys", old.ErrorCode, len(old.ApiKeys))
	}
}

func TestUnsupportedRequestsCloseTheConnection(t *testing.T) {
	c := newCluster(t)
	tests := []struct {
		name string
		req  kmsg.Request
	}{
		{"transactions", func() kmsg.Request { r := kmsg.NewPtrAddPartitionsToTxnRequest(); r.Version = 3; return r }()},
		{"produce v2", func() kmsg.Request { r := produceRequest(2, "t", 0, nil); return r }()},
		{"sasl", func() kmsg.Request { r := kmsg.NewPtrSASLHandshakeRequest(); r.Version = 1; return r }()},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			conn := c.raw()
			conn.send(tc.req)
			conn.expectClosed()
		})
	}
}

func TestMetadata(t *testing.T) {
	c := newCluster(t)
	ctx := testContext(t)
	conn := c.raw()
	c.backend.SetAutoCreate(true)

	// v0 auto-creates; v4+ only when allowed.
	for _, tc := range []struct {
		version int16
		allow   bool
		topic   string
		want    *kerr.Error
	}{
		{0, false, "auto0", nil},
		{12, false, "noauto", kerr.UnknownTopicOrPartition},
		{12, true, "auto12", nil},
		{12, true, "bad/name", kerr.UnknownTopicOrPartition},
	} {
		req := kmsg.NewPtrMetadataRequest()
		req.Version, req.AllowAutoTopicCreation = tc.version, tc.allow
		rt := kmsg.NewMetadataRequestTopic()
		rt.Topic = kmsg.StringPtr(tc.topic)
		req.Topics = append(req.Topics, rt)
		resp := conn.request(req).(*kmsg.MetadataResponse)
		if len(resp.Topics) != 1 {
			t.Fatalf("%+v", resp)
		}
		if got := kerr.ErrorForCode(resp.Topics[0].ErrorCode); got != error(tc.want) && !(got == nil && tc.want == nil) {
			t.Fatalf("v%d %s: %v, want %v", tc.version, tc.topic, got, tc.want)
		}
		if tc.want == nil && (len(resp.Topics[0].Partitions) != 3 || resp.Brokers[0].NodeID != 1) {
			t.Fatalf("v%d %s: %+v", tc.version, tc.topic, resp)
		}
	}

	infos, _ := c.backend.Topics(ctx, []string{"auto12"}, false)
	req := kmsg.NewPtrMetadataRequest()
	req.Version = 12
	for _, id := range [][16]byte{infos[0].ID, {9}} {
		rt := kmsg.NewMetadataRequestTopic()
		rt.TopicID = id
		req.Topics = append(req.Topics, rt)
	}
	resp := conn.request(req).(*kmsg.MetadataResponse)
	if resp.Topics[0].ErrorCode != 0 || *resp.Topics[0].Topic != "auto12" || resp.Topics[1].ErrorCode != kerr.UnknownTopicID.Code {
		t.Fatalf("by id: %+v", resp.Topics)
	}
	if resp.Topics[0].AuthorizedOperations != -2147483648 {
		t.Fatalf("authorized operations %d", resp.Topics[0].AuthorizedOperations)
	}

	all := kmsg.NewPtrMetadataRequest()
	all.Version = 1
	all.Topics = nil
	if n := len(conn.request(all).(*kmsg.MetadataResponse).Topics); n != 2 {
		t.Fatalf("all topics: %d", n)
	}
}

func TestCoordinatorAndProducerID(t *testing.T) {
	c := newCluster(t)
	conn := c.raw()

	v3 := kmsg.NewPtrFindCoordinatorRequest()
	v3.Version, v3.CoordinatorKey = 3, "g"
	r3 := conn.request(v3).(*kmsg.FindCoordinatorResponse)
	if r3.ErrorCode != 0 || r3.NodeID != 1 {
		t.Fatalf("v3: %+v", r3)
	}
	v4 := kmsg.NewPtrFindCoordinatorRequest()
	v4.Version, v4.CoordinatorKeys = 4, []string{"g1", "g2"}
	r4 := conn.request(v4).(*kmsg.FindCoordinatorResponse)
	if len(r4.Coordinators) != 2 || r4.Coordinators[1].Key != "g2" || r4.Coordinators[1].NodeID != 1 {
		t.Fatalf("v4: %+v", r4)
	}
	txn := kmsg.NewPtrFindCoordinatorRequest()
	txn.Version, txn.CoordinatorType, txn.CoordinatorKeys = 6, 1, []string{"t"}
	if r := conn.request(txn).(*kmsg.FindCoordinatorResponse); r.Coordinators[0].ErrorCode != kerr.InvalidRequest.Code {
		t.Fatalf("transaction coordinator: %+v", r)
	}

	pid := kmsg.NewPtrInitProducerIDRequest()
	pid.Version = 4
	if r := conn.request(pid).(*kmsg.InitProducerIDResponse); r.ErrorCode != 0 || r.ProducerID < 0 {
		t.Fatalf("init producer id: %+v", r)
	}
	pid.TransactionalID = kmsg.StringPtr("txn")
	if r := conn.request(pid).(*kmsg.InitProducerIDResponse); r.ErrorCode != kerr.TransactionalIDAuthorizationFailed.Code {
		t.Fatalf("transactional init producer id: %+v", r)
	}

	dc := kmsg.NewPtrDescribeClusterRequest()
	dc.Version = 2
	if r := conn.request(dc).(*kmsg.DescribeClusterResponse); r.ErrorCode != 0 || len(r.Brokers) != 1 || r.ClusterID != "kafkatest-cluster" {
		t.Fatalf("describe cluster: %+v", r)
	}
	dc.EndpointType = 2
	if r := conn.request(dc).(*kmsg.DescribeClusterResponse); r.ErrorCode != kerr.UnsupportedEndpointType.Code {
		t.Fatalf("describe controllers: %+v", r)
	}
}

// panicBackend panics where a buggy Backend might.
type panicBackend struct{ kafka.Backend }

func (panicBackend) Partition(context.Context, string, int32) (kafka.Partition, error) {
	panic("backend bug")
}

func TestHandlerPanicClosesOnlyThatConnection(t *testing.T) {
	c := newCluster(t, func(cfg *kafka.Config) { cfg.Backend = panicBackend{cfg.Backend} })
	bad := c.raw()
	bad.send(produceRequest(9, "t", 0, recordBatch(t, 1, "v")))
	bad.expectClosed()
	meta := kmsg.NewPtrMetadataRequest()
	meta.Version = 9
	c.raw().request(meta)
}

func TestMaxConnections(t *testing.T) {
	c := newCluster(t, func(cfg *kafka.Config) { cfg.MaxConnections = 1 })
	first := c.raw()
	meta := kmsg.NewPtrMetadataRequest()
	meta.Version = 9
	first.request(meta) // the first is surely registered
	second := c.raw()
	second.send(meta)
	second.expectClosed()
	first.request(meta)
}

func TestFrameLimits(t *testing.T) {
	c := newCluster(t, func(cfg *kafka.Config) { cfg.MaxFrameBytes = 1 << 10 })
	for _, size := range []uint32{1<<10 + 1, 0x80000000, 0xffffffff} {
		conn := c.raw()
		var prefix [4]byte
		binary.BigEndian.PutUint32(prefix[:], size)
		conn.nc.Write(prefix[:])
		conn.expectClosed()
	}
}

// TestResponseNotHeldBehindLongPoll: a response is on the wire before the
// long-polling fetch queued behind it on the same connection finishes.
func TestResponseNotHeldBehindLongPoll(t *testing.T) {
	c := newCluster(t)
	if err := c.backend.CreateTopic(testContext(t), "t", 1, nil, false); err != nil {
		t.Fatal(err)
	}
	conn := c.raw()
	meta := kmsg.NewPtrMetadataRequest()
	meta.Version = 12
	fetch := fetchRequest(12, "t", 0, 0)
	fetch.MaxWaitMillis = 60_000
	c1, c2 := conn.send(meta), conn.send(fetch)
	conn.recv(meta, c1) // fails after 10 s if held behind the 60 s fetch
	if code, _ := produceCode(t, c.raw().request(produceRequest(9, "t", 0, recordBatch(t, 1, "v")))); code != 0 {
		t.Fatal(kerr.ErrorForCode(code))
	}
	resp := conn.recv(fetch, c2).(*kmsg.FetchResponse)
	if len(resp.Topics[0].Partitions[0].RecordBatches) == 0 {
		t.Fatal("woken fetch returned no records")
	}
}

// TestIdleTimeout: an idle connection is closed; one waiting for a
// long-poll is not idle.
func TestIdleTimeout(t *testing.T) {
	c := newCluster(t, func(cfg *kafka.Config) { cfg.IdleTimeout = 50 * time.Millisecond })
	if err := c.backend.CreateTopic(testContext(t), "t", 1, nil, false); err != nil {
		t.Fatal(err)
	}
	waiting := c.raw()
	fetch := fetchRequest(12, "t", 0, 0)
	fetch.MaxWaitMillis = 300 // six idle timeouts
	corr := waiting.send(fetch)
	c.raw().expectClosed() // idle from the start
	waiting.recv(fetch, corr)
	waiting.expectClosed() // idle once answered
}

func TestAdminErrors(t *testing.T) {
	c := newCluster(t)
	ctx := testContext(t)
	conn := c.raw()
	if err := c.backend.CreateTopic(ctx, "t", 1, nil, false); err != nil {
		t.Fatal(err)
	}

	create := kmsg.NewPtrCreateTopicsRequest()
	create.Version = 7
	for _, spec := range []struct {
		name       string
		partitions int32
		rf         int16
		assign     bool
	}{{"dup", 1, -1, false}, {"dup", 1, -1, false}, {"assigned", -1, -1, true}, {"rf3", 2, 3, false}} {
		rt := kmsg.NewCreateTopicsRequestTopic()
		rt.Topic, rt.NumPartitions, rt.ReplicationFactor = spec.name, spec.partitions, spec.rf
		if spec.assign {
			a := kmsg.NewCreateTopicsRequestTopicReplicaAssignment()
			a.Replicas = []int32{1}
			rt.ReplicaAssignment = append(rt.ReplicaAssignment, a)
		}
		create.Topics = append(create.Topics, rt)
	}
	cr := conn.request(create).(*kmsg.CreateTopicsResponse)
	want := []int16{kerr.InvalidRequest.Code, kerr.InvalidRequest.Code, kerr.InvalidReplicaAssignment.Code, 0}
	for i, rt := range cr.Topics {
		if rt.ErrorCode != want[i] {
			t.Errorf("create %s: %v, want %v", rt.Topic, kerr.ErrorForCode(rt.ErrorCode), kerr.ErrorForCode(want[i]))
		}
	}
	if rf3 := cr.Topics[3]; rf3.NumPartitions != 2 || rf3.ReplicationFactor != 1 || len(rf3.Configs) == 0 || rf3.TopicID == [16]byte{} {
		t.Errorf("create rf3: %+v", rf3)
	}

	cp := kmsg.NewPtrCreatePartitionsRequest()
	cp.Version = 3
	for _, name := range []string{"t", "nope"} {
		rt := kmsg.NewCreatePartitionsRequestTopic()
		rt.Topic, rt.Count = name, 2
		cp.Topics = append(cp.Topics, rt)
	}
	cp.Topics[0].Assignment = []kmsg.CreatePartitionsRequestTopicAssignment{{Replicas: []int32{1}}}
	cpr := conn.request(cp).(*kmsg.CreatePartitionsResponse)
	if cpr.Topics[0].ErrorCode != kerr.InvalidReplicaAssignment.Code || cpr.Topics[1].ErrorCode != kerr.UnknownTopicOrPartition.Code {
		t.Errorf("create partitions: %+v", cpr.Topics)
	}

	dc := kmsg.NewPtrDescribeConfigsRequest()
	dc.Version = 4
	for _, r := range []struct {
		typ  kmsg.ConfigResourceType
		name string
	}{{kmsg.ConfigResourceTypeBroker, "2"}, {kmsg.ConfigResourceTypeBrokerLogger, "1"}, {kmsg.ConfigResourceTypeTopic, "nope"}, {kmsg.ConfigResourceTypeBroker, ""}} {
		rr := kmsg.NewDescribeConfigsRequestResource()
		rr.ResourceType, rr.ResourceName = r.typ, r.name
		dc.Resources = append(dc.Resources, rr)
	}
	dcr := conn.request(dc).(*kmsg.DescribeConfigsResponse)
	wantDC := []int16{kerr.InvalidRequest.Code, kerr.InvalidRequest.Code, kerr.UnknownTopicOrPartition.Code, 0}
	for i, rr := range dcr.Resources {
		if rr.ErrorCode != wantDC[i] {
			t.Errorf("describe configs %v %q: %v", rr.ResourceType, rr.ResourceName, kerr.ErrorForCode(rr.ErrorCode))
		}
	}

	infos, _ := c.backend.Topics(ctx, []string{"t"}, false)
	del := kmsg.NewPtrDeleteTopicsRequest()
	del.Version = 6
	for _, id := range [][16]byte{infos[0].ID, {7}} {
		rt := kmsg.NewDeleteTopicsRequestTopic()
		rt.TopicID = id
		del.Topics = append(del.Topics, rt)
	}
	dr := conn.request(del).(*kmsg.DeleteTopicsResponse)
	if dr.Topics[0].ErrorCode != 0 || *dr.Topics[0].Topic != "t" || dr.Topics[1].ErrorCode != kerr.UnknownTopicID.Code {
		t.Errorf("delete by id: %+v", dr.Topics)
	}
	if c.backend.PartitionFor("t", 0) != nil {
		t.Error("topic t still exists")
	}
}

// TestTopicMaxMessageBytes: a topic's own max.message.bytes is the limit,
// below or above the broker's, and a change made through this broker
// applies at once.
func TestTopicMaxMessageBytes(t *testing.T) {
	c := newCluster(t)
	ctx := testContext(t)
	c.backend.SetMaxMessageBytes(1000)
	for name, limit := range map[string]string{"small": "50", "large": "5000"} {
		if err := c.backend.CreateTopic(ctx, name, 1, map[string]*string{"max.message.bytes": &limit}, false); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.backend.CreateTopic(ctx, "default", 1, nil, false); err != nil {
		t.Fatal(err)
	}
	batch := recordBatch(t, 1, string(make([]byte, 2000))) // over the broker's limit
	small := recordBatch(t, 1, "x")                        // under all
	conn := c.raw()
	for _, tc := range []struct {
		topic   string
		records []byte
		want    int16
	}{
		{"small", small, kerr.MessageTooLarge.Code},
		{"large", batch, 0},
		{"default", batch, kerr.MessageTooLarge.Code},
		{"default", small, 0},
	} {
		if code, _ := produceCode(t, conn.request(produceRequest(9, tc.topic, 0, tc.records))); code != tc.want {
			t.Errorf("%s, %d bytes: %v, want %v", tc.topic, len(tc.records), kerr.ErrorForCode(code), kerr.ErrorForCode(tc.want))
		}
	}
	alter := kmsg.NewPtrIncrementalAlterConfigsRequest()
	alter.Version = 1
	rr := kmsg.NewIncrementalAlterConfigsRequestResource()
	rr.ResourceType, rr.ResourceName = kmsg.ConfigResourceTypeTopic, "default"
	rc := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
	rc.Name, rc.Op, rc.Value = "max.message.bytes", kmsg.IncrementalAlterConfigOpSet, kmsg.StringPtr("10000")
	rr.Configs = append(rr.Configs, rc)
	alter.Resources = append(alter.Resources, rr)
	if r := conn.request(alter).(*kmsg.IncrementalAlterConfigsResponse); r.Resources[0].ErrorCode != 0 {
		t.Fatalf("alter: %v", kerr.ErrorForCode(r.Resources[0].ErrorCode))
	}
	if code, _ := produceCode(t, conn.request(produceRequest(9, "default", 0, batch))); code != 0 {
		t.Errorf("after raising the topic's limit: %v", kerr.ErrorForCode(code))
	}
}

// TestFetchEmptyRecordsNotNull: a partition with nothing to return sends an
// empty records field, never null (librdkafka rejects null).
func TestFetchEmptyRecordsNotNull(t *testing.T) {
	c := newCluster(t)
	if err := c.backend.CreateTopic(testContext(t), "t", 1, nil, false); err != nil {
		t.Fatal(err)
	}
	conn := c.raw()
	for _, version := range []int16{4, 11, 12, 16} {
		for _, tc := range []struct {
			topic  string
			offset int64
		}{{"t", 0}, {"t", 5}, {"nope", 0}} {
			req := fetchRequest(version, tc.topic, 0, tc.offset)
			if version >= 13 {
				req.Topics[0].TopicID = [16]byte{1}
			}
			resp := conn.request(req).(*kmsg.FetchResponse)
			if p := resp.Topics[0].Partitions[0]; p.RecordBatches == nil {
				t.Errorf("v%d %s@%d: null records (error %v)", version, tc.topic, tc.offset, kerr.ErrorForCode(p.ErrorCode))
			}
		}
	}
}

// TestLargeFrame: a frame over the 1 MiB read chunk arrives whole.
func TestLargeFrame(t *testing.T) {
	c := newCluster(t)
	limit := "10000000"
	if err := c.backend.CreateTopic(testContext(t), "big", 1, map[string]*string{"max.message.bytes": &limit}, false); err != nil {
		t.Fatal(err)
	}
	batch := recordBatch(t, 1, string(make([]byte, 3<<20)))
	conn := c.raw()
	if code, _ := produceCode(t, conn.request(produceRequest(9, "big", 0, batch))); code != 0 {
		t.Fatal(kerr.ErrorForCode(code))
	}
	resp := conn.request(fetchRequest(12, "big", 0, 0)).(*kmsg.FetchResponse)
	if got := resp.Topics[0].Partitions[0].RecordBatches; len(got) != len(batch) {
		t.Fatalf("fetched %d bytes, want %d", len(got), len(batch))
	}
}
