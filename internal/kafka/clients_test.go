package kafka_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestProduceConsume drives the server with franz-go's client: produce
// with acks=all (idempotent and not), then consume every partition
// directly and check every record arrives once, in order.
func TestProduceConsume(t *testing.T) {
	for _, idempotent := range []bool{false, true} {
		t.Run(fmt.Sprintf("idempotent=%v", idempotent), func(t *testing.T) {
			c := newCluster(t)
			ctx := testContext(t)
			const topic, perPartition = "orders", 200
			if _, err := c.admin().CreateTopic(ctx, 2, -1, nil, topic); err != nil {
				t.Fatal(err)
			}
			opts := []kgo.Opt{kgo.RequiredAcks(kgo.AllISRAcks()), kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerLinger(0)}
			if !idempotent {
				opts = append(opts, kgo.DisableIdempotentWrite())
			}
			producer := c.client(opts...)
			var recs []*kgo.Record
			for i := range perPartition {
				for p := range int32(2) {
					recs = append(recs, &kgo.Record{Topic: topic, Partition: p, Value: fmt.Appendf(nil, "%d-%d", p, i)})
				}
			}
			if err := producer.ProduceSync(ctx, recs...).FirstErr(); err != nil {
				t.Fatalf("produce: %v", err)
			}

			consumer := c.client(kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{
				topic: {0: kgo.NewOffset().AtStart(), 1: kgo.NewOffset().AtStart()},
			}), kgo.FetchMaxWait(200*time.Millisecond))
			got := map[int32][]string{}
			for n := 0; n < 2*perPartition; {
				fetches := consumer.PollFetches(ctx)
				if err := fetches.Err(); err != nil {
					t.Fatalf("poll: %v", err)
				}
				fetches.EachRecord(func(r *kgo.Record) {
					if want := int64(len(got[r.Partition])); r.Offset != want {
						t.Errorf("partition %d: offset %d, want %d", r.Partition, r.Offset, want)
					}
					got[r.Partition] = append(got[r.Partition], string(r.Value))
					n++
				})
			}
			for p := range int32(2) {
				for i, v := range got[p] {
					if want := fmt.Sprintf("%d-%d", p, i); v != want {
						t.Fatalf("partition %d record %d = %q, want %q", p, i, v, want)
					}
				}
			}
		})
	}
}

// TestFetchLongPoll: a fetch waiting on an empty partition returns as soon
// as a record arrives, well before its max wait.
func TestFetchLongPoll(t *testing.T) {
	c := newCluster(t)
	ctx := testContext(t)
	if _, err := c.admin().CreateTopic(ctx, 1, -1, nil, "tail"); err != nil {
		t.Fatal(err)
	}
	consumer := c.client(kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{"tail": {0: kgo.NewOffset().AtStart()}}),
		kgo.FetchMaxWait(15*time.Second))
	polled := make(chan *kgo.Record, 1)
	go func() {
		fetches := consumer.PollFetches(ctx)
		fetches.EachRecord(func(r *kgo.Record) { polled <- r })
		close(polled)
	}()
	// Let the consumer's fetch reach the server and start waiting.
	part := c.backend.PartitionFor("tail", 0)
	deadline := time.Now().Add(5 * time.Second)
	for part.Waits() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no fetch long-polled the partition")
		}
		time.Sleep(time.Millisecond)
	}
	start := time.Now()
	producer := c.client(kgo.DisableIdempotentWrite(), kgo.DefaultProduceTopic("tail"))
	if err := producer.ProduceSync(ctx, &kgo.Record{Value: []byte("wake")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-polled:
		if r == nil || string(r.Value) != "wake" {
			t.Fatalf("polled %v", r)
		}
		if took := time.Since(start); took > 10*time.Second {
			t.Fatalf("long-poll answered after %v", took)
		}
	case <-ctx.Done():
		t.Fatal("fetch never returned the record")
	}
}

// TestAdmin drives the admin APIs through kadm.
func TestAdmin(t *testing.T) {
	c := newCluster(t)
	ctx := testContext(t)
	adm := c.admin()

	created, err := adm.CreateTopics(ctx, 3, 3, map[string]*string{"retention.ms": kadm.StringPtr("1000")}, "a", "b")
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range created.Sorted() {
		if r.Err != nil || r.NumPartitions != 3 || r.ID == ([16]byte{}) {
			t.Fatalf("create %s: %+v", r.Topic, r)
		}
	}
	again, _ := adm.CreateTopics(ctx, 1, -1, nil, "a")
	if err := again["a"].Err; err != kerr.TopicAlreadyExists {
		t.Fatalf("create again: %v", err)
	}
	bad, _ := adm.CreateTopics(ctx, 0, -1, nil, "c")
	if err := bad["c"].Err; err != kerr.InvalidPartitions {
		t.Fatalf("create 0 partitions: %v", err)
	}
	badRF, _ := adm.CreateTopics(ctx, 1, 0, nil, "c")
	if err := badRF["c"].Err; err != kerr.InvalidReplicationFactor {
		t.Fatalf("create rf 0: %v", err)
	}

	topics, err := adm.ListTopics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if names := topics.Names(); !slices.Equal(names, []string{"a", "b"}) {
		t.Fatalf("topics %v", names)
	}
	if td := topics["a"]; len(td.Partitions) != 3 || td.Partitions[0].Leader != 1 {
		t.Fatalf("topic a: %+v", td)
	}

	if _, err := adm.CreatePartitions(ctx, 2, "a"); err != nil {
		t.Fatal(err)
	}
	topics, _ = adm.ListTopics(ctx, "a")
	if n := len(topics["a"].Partitions); n != 5 {
		t.Fatalf("after CreatePartitions: %d partitions", n)
	}

	configs, err := adm.DescribeTopicConfigs(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	rc, err := configs.On("a", nil)
	if err != nil || rc.Err != nil {
		t.Fatalf("describe configs: %v %v", err, rc.Err)
	}
	var retention string
	for _, cfg := range rc.Configs {
		if cfg.Key == "retention.ms" {
			retention = cfg.MaybeValue()
		}
	}
	if retention != "1000" {
		t.Fatalf("retention.ms = %q", retention)
	}
	alter, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Op: kadm.SetConfig, Name: "retention.ms", Value: kadm.StringPtr("2000")}}, "a")
	if err != nil || alter[0].Err != nil {
		t.Fatalf("alter: %v %+v", err, alter)
	}
	alterBroker, err := adm.AlterBrokerConfigs(ctx, []kadm.AlterConfig{{Op: kadm.SetConfig, Name: "num.partitions", Value: kadm.StringPtr("2")}}, 1)
	if err == nil && alterBroker[0].Err != kerr.InvalidRequest {
		t.Fatalf("alter broker configs: %+v", alterBroker)
	}
	brokerConfigs, err := adm.DescribeBrokerConfigs(ctx, 1)
	if err != nil || len(brokerConfigs) != 1 || len(brokerConfigs[0].Configs) == 0 {
		t.Fatalf("describe broker configs: %v %+v", err, brokerConfigs)
	}

	// Offsets: produce two records, then list start, end and by time.
	producer := c.client(kgo.DisableIdempotentWrite(), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	early := time.Now().Add(-time.Hour)
	// Two produces, two batches: offsets by time are per batch.
	for _, r := range []*kgo.Record{
		{Topic: "a", Partition: 1, Value: []byte("x"), Timestamp: early},
		{Topic: "a", Partition: 1, Value: []byte("y"), Timestamp: time.Now()},
	} {
		if err := producer.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	ends, err := adm.ListEndOffsets(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	if o, _ := ends.Lookup("a", 1); o.Offset != 2 {
		t.Fatalf("end offset %+v", o)
	}
	starts, err := adm.ListStartOffsets(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	if o, _ := starts.Lookup("a", 1); o.Offset != 0 {
		t.Fatalf("start offset %+v", o)
	}
	after, err := adm.ListOffsetsAfterMilli(ctx, early.Add(time.Minute).UnixMilli(), "a")
	if err != nil {
		t.Fatal(err)
	}
	if o, _ := after.Lookup("a", 1); o.Offset != 1 {
		t.Fatalf("offset after time %+v", o)
	}

	// Committed offsets through the stub coordinator.
	commit := kadm.Offsets{}
	commit.Add(kadm.Offset{Topic: "a", Partition: 1, At: 2, LeaderEpoch: -1})
	if _, err := adm.CommitOffsets(ctx, "g", commit); err != nil {
		t.Fatal(err)
	}
	fetched, err := adm.FetchOffsets(ctx, "g")
	if err != nil {
		t.Fatal(err)
	}
	if o, ok := fetched.Lookup("a", 1); !ok || o.At != 2 {
		t.Fatalf("fetched offset %+v", o)
	}

	deleted, err := adm.DeleteTopics(ctx, "a", "nope")
	if err != nil {
		t.Fatal(err)
	}
	if deleted["a"].Err != nil || deleted["nope"].Err != kerr.UnknownTopicOrPartition {
		t.Fatalf("delete: %+v", deleted)
	}

	meta, err := adm.BrokerMetadata(ctx)
	if err != nil || meta.Cluster != "kafkatest-cluster" || meta.Controller != 1 || len(meta.Brokers) != 1 {
		t.Fatalf("metadata: %v %+v", err, meta)
	}
}
