package kafka_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kversion"
)

// TestClientVersions produces, consumes and commits with kgo capped at the
// protocol versions of several Kafka releases, so the older request
// versions we advertise (Produce v3+, Fetch v4+, Metadata v4+, …) and the
// newest (topic IDs in Produce and Fetch) are all exercised.
func TestClientVersions(t *testing.T) {
	for _, tc := range []struct {
		name     string
		versions *kversion.Versions
	}{
		{"1.1", kversion.V1_1_0()},
		{"2.4", kversion.V2_4_0()},
		{"2.8", kversion.V2_8_0()},
		{"3.5", kversion.V3_5_0()},
		{"4.0", kversion.V4_0_0()},
		{"latest", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(t)
			ctx := testContext(t)
			var opts []kgo.Opt
			if tc.versions != nil {
				opts = append(opts, kgo.MaxVersions(tc.versions))
			}
			if _, err := kadm.NewClient(c.client(opts...)).CreateTopic(ctx, 1, -1, nil, "v"); err != nil {
				t.Fatalf("create topic: %v", err)
			}
			producer := c.client(append(opts, kgo.DefaultProduceTopic("v"), kgo.ProducerLinger(0))...)
			for i := range 5 {
				if err := producer.ProduceSync(ctx, &kgo.Record{Value: fmt.Appendf(nil, "%d", i)}).FirstErr(); err != nil {
					t.Fatalf("produce: %v", err)
				}
			}
			consumer := c.client(append(opts,
				kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{"v": {0: kgo.NewOffset().AtStart()}}),
				kgo.FetchMaxWait(100*time.Millisecond))...)
			for n := 0; n < 5; {
				fetches := consumer.PollFetches(ctx)
				if err := fetches.Err(); err != nil {
					t.Fatalf("poll: %v", err)
				}
				fetches.EachRecord(func(r *kgo.Record) {
					if want := fmt.Sprint(n); string(r.Value) != want || r.Offset != int64(n) {
						t.Fatalf("record %d: %q at %d", n, r.Value, r.Offset)
					}
					n++
				})
			}
			adm := kadm.NewClient(c.client(opts...))
			commit := kadm.Offsets{}
			commit.Add(kadm.Offset{Topic: "v", Partition: 0, At: 5, LeaderEpoch: -1})
			if _, err := adm.CommitOffsets(ctx, "g", commit); err != nil {
				t.Fatalf("commit: %v", err)
			}
			fetched, err := adm.FetchOffsets(ctx, "g")
			if err != nil {
				t.Fatalf("fetch offsets: %v", err)
			}
			if o, ok := fetched.Lookup("v", 0); !ok || o.At != 5 {
				t.Fatalf("fetched %+v", o)
			}
		})
	}
}
