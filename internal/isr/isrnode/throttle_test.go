package isrnode

import (
	"testing"
	"time"
)

// TestReplicationQuota: the rate is Kafka's sampled one (bytes over at
// least samples−1 windows): within the bound until the bytes recorded
// exceed it, then held with a wait of at most a window, and free again once
// the samples expired; a Fetch's share of a throttled partition is a
// quarter window's worth; without a bound nothing is held.
func TestReplicationQuota(t *testing.T) {
	t0 := time.Unix(1000, 0)
	q := newReplicationQuota(ThrottleWindow{Samples: 11, Size: 100 * time.Millisecond})
	if over, _ := q.exceeded(t0); over {
		t.Fatal("exceeded without a bound")
	}
	q.record(1<<20, t0)
	if over, _ := q.exceeded(t0); over {
		t.Fatal("exceeded without a bound, after 1 MiB")
	}
	q.setRate(1000) // bytes/s
	if over, wait := q.exceeded(t0); !over || wait <= 0 || wait > 100*time.Millisecond {
		t.Fatalf("1 MiB against 1000 bytes/s: exceeded %v, wait %v; want held, at most a window", over, wait)
	}
	later := t0.Add(1200 * time.Millisecond) // every sample expired
	if over, _ := q.exceeded(later); over {
		t.Fatal("still held once the samples expired")
	}
	q.record(500, later) // 500 bytes over the minimum span of 1 s: within
	if over, _ := q.exceeded(later); over {
		t.Fatal("500 bytes against 1000 bytes/s held")
	}
	q.record(1000, later) // 1500 over 1 s: above
	if over, _ := q.exceeded(later); !over {
		t.Fatal("1500 bytes in a second against 1000 bytes/s not held")
	}
	if got := q.share(1 << 20); got != 25 {
		t.Fatalf("share %d, want a quarter window's worth: 25", got)
	}
	if got := q.share(10); got != 10 {
		t.Fatalf("share %d, want the fetch's own limit 10", got)
	}
	q.setRate(0)
	if over, _ := q.exceeded(later); over || q.share(77) != 77 {
		t.Fatal("held after the bound was removed")
	}
}

// TestThrottledReplicas: a partition is throttled when listed with this
// broker's id or its topic is "*", and only while a rate is set.
func TestThrottledReplicas(t *testing.T) {
	th := newThrottles(ThrottleWindow{})
	th.set(Throttle{
		LeaderRate: 100, Leader: ThrottledReplicas{Partitions: map[string]bool{"a-0": true}},
		Follower: ThrottledReplicas{Topics: map[string]bool{"b": true}},
	})
	for _, tc := range []struct {
		topic string
		idx   int32
		want  Throttled
	}{
		{"a", 0, Throttled{Leader: true}},
		{"a", 1, Throttled{}},
		{"b", 3, Throttled{}}, // no follower rate set
	} {
		if got := th.of(tc.topic, PartitionName(tc.topic, tc.idx)); got != tc.want {
			t.Errorf("%s-%d: %+v, want %+v", tc.topic, tc.idx, got, tc.want)
		}
	}
	th.set(Throttle{FollowerRate: 100, Follower: ThrottledReplicas{Topics: map[string]bool{"b": true}}})
	if got := th.of("b", PartitionName("b", 3)); got != (Throttled{Follower: true}) {
		t.Errorf("b-3 with the follower rate set: %+v", got)
	}
}
