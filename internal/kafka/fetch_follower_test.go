package kafka_test

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"quire/internal/kafka"
	"quire/internal/kafka/kafkatest"
)

// followerFetchBackend is the in-memory backend with followers (KIP-392):
// its partitions are ReadReplicaSelectors that send a consumer in rack
// "rack-b" to broker 3 for partition 0, and FetchPartition counts the
// fetches that asked for a partition through it.
type followerFetchBackend struct {
	*kafkatest.Backend
	fetchPartitions atomic.Int64
}

func (b *followerFetchBackend) Partition(ctx context.Context, topic string, partition int32) (kafka.Partition, error) {
	p, err := b.Backend.Partition(ctx, topic, partition)
	if err != nil {
		return nil, err
	}
	return selectingPartition{Partition: p, index: partition}, nil
}

func (b *followerFetchBackend) FetchPartition(ctx context.Context, topic string, partition int32) (kafka.Partition, error) {
	b.fetchPartitions.Add(1)
	return b.Partition(ctx, topic, partition)
}

type selectingPartition struct {
	kafka.Partition
	index int32
}

func (p selectingPartition) PreferredReadReplica(_ context.Context, rack string, _ int64) int32 {
	if rack == "rack-b" && p.index == 0 {
		return 3
	}
	return -1
}

// TestFetchFollowerFetching: a consumer's Fetch v11+ takes its partitions
// from FollowerFetchBackend, and a partition whose leader names a
// preferred read replica is answered with it, no records and where the
// partition is, at once (the other partition, empty, does not hold the
// answer for max_wait_ms); without a rack, below v11, or from a replica,
// records are served and preferred_read_replica is −1.
func TestFetchFollowerFetching(t *testing.T) {
	var backend *followerFetchBackend
	c := newCluster(t, func(cfg *kafka.Config) {
		backend = &followerFetchBackend{Backend: cfg.Backend.(*kafkatest.Backend)}
		cfg.Backend = backend
	})
	ctx := testContext(t)
	if err := backend.CreateTopic(ctx, "t", 2, nil, false); err != nil {
		t.Fatal(err)
	}
	prod := c.client(kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err := prod.ProduceSync(ctx, &kgo.Record{Topic: "t", Value: []byte("a")}, &kgo.Record{Topic: "t", Value: []byte("b")},
		&kgo.Record{Topic: "t", Value: []byte("c")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	infos, err := backend.Topics(ctx, []string{"t"}, false)
	if err != nil || len(infos) != 1 {
		t.Fatalf("topic t: %v %v", infos, err)
	}
	conn := c.raw()
	for _, tc := range []struct {
		name         string
		version      int16
		rack         string
		replica      int32
		preferred    int32 // partition 0's answer; −1: its records
		viaFollowers bool  // the partitions came from FetchPartition
	}{
		{"v11 in the follower's rack", 11, "rack-b", -1, 3, true},
		{"v17 in the follower's rack", 17, "rack-b", -1, 3, true},
		{"v11 without a rack", 11, "", -1, -1, true},
		{"v11 in another rack", 11, "rack-c", -1, -1, true},
		{"v10", 10, "rack-b", -1, -1, false},
		{"a replica's v11", 11, "rack-b", 2, -1, false},
	} {
		before := backend.fetchPartitions.Load()
		req := kmsg.NewPtrFetchRequest()
		req.SetVersion(tc.version)
		// min_bytes no answer reaches, so only an answer given at once
		// comes back before the raw connection's 10 s read deadline.
		req.ReplicaID, req.Rack, req.MaxWaitMillis, req.MinBytes, req.MaxBytes = tc.replica, tc.rack, 60_000, 1<<30, 1<<20
		rt := kmsg.NewFetchRequestTopic()
		rt.Topic = "t"
		if tc.version >= 13 {
			rt.TopicID = infos[0].ID
		}
		for _, p := range []int32{0, 1} {
			rp := kmsg.NewFetchRequestTopicPartition()
			rp.Partition, rp.PartitionMaxBytes = p, 1<<20
			rt.Partitions = append(rt.Partitions, rp)
		}
		req.Topics = append(req.Topics, rt)
		if tc.preferred < 0 {
			req.MinBytes = 1 // partition 0's records answer it
		}
		resp := conn.request(req).(*kmsg.FetchResponse)
		p0, p1 := resp.Topics[0].Partitions[0], resp.Topics[0].Partitions[1]
		if p0.ErrorCode != 0 || p1.ErrorCode != 0 || p1.PreferredReadReplica != -1 {
			t.Errorf("%s: errors %d and %d, partition 1's preferred replica %d", tc.name, p0.ErrorCode, p1.ErrorCode, p1.PreferredReadReplica)
		}
		if tc.preferred >= 0 {
			if p0.PreferredReadReplica != tc.preferred || len(p0.RecordBatches) != 0 || p0.HighWatermark != 3 || p0.LastStableOffset != 3 || p0.LogStartOffset != 0 {
				t.Errorf("%s: preferred replica %d, %d bytes of records, HW %d, LSO %d, log start %d; want replica %d, none, 3, 3, 0",
					tc.name, p0.PreferredReadReplica, len(p0.RecordBatches), p0.HighWatermark, p0.LastStableOffset, p0.LogStartOffset, tc.preferred)
			}
		} else if p0.PreferredReadReplica != -1 || len(p0.RecordBatches) == 0 {
			t.Errorf("%s: preferred replica %d, %d bytes of records; want -1 and the records", tc.name, p0.PreferredReadReplica, len(p0.RecordBatches))
		}
		if via := backend.fetchPartitions.Load() > before; via != tc.viaFollowers {
			t.Errorf("%s: partitions through FetchPartition %v, want %v", tc.name, via, tc.viaFollowers)
		}
	}
}
