package kafka_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"quire/internal/kafka"
	"quire/internal/kafka/kafkatest"
)

// epochBackend is the in-memory backend with what ISR mode adds: topic
// "isr"'s partitions have leader epochs (EpochPartition) over a fixed
// epoch cache, elections answer by partition, and one log directory
// holds some replicas. Topic "t" stays a ledger-mode one.
type epochBackend struct {
	*kafkatest.Backend

	mu          sync.Mutex
	leaderEpoch int32
	elections   []int8 // the election types asked, one per call
	timeouts    []time.Duration
}

// The epoch cache of every "isr" partition: epoch 0 from offset 0, 3 from
// 4, 5 from 6; the log ends at 10.
var testEpochs = []struct {
	epoch int32
	start int64
}{{0, 0}, {3, 4}, {5, 6}}

const testLogEnd = 10

func newEpochCluster(t *testing.T) (*cluster, *epochBackend) {
	t.Helper()
	var backend *epochBackend
	c := newCluster(t, func(cfg *kafka.Config) {
		backend = &epochBackend{Backend: cfg.Backend.(*kafkatest.Backend), leaderEpoch: 5}
		cfg.Backend = backend
	})
	ctx := testContext(t)
	for _, topic := range []string{"isr", "t"} {
		if err := backend.CreateTopic(ctx, topic, 3, nil, false); err != nil {
			t.Fatal(err)
		}
	}
	return c, backend
}

func (b *epochBackend) Partition(ctx context.Context, topic string, partition int32) (kafka.Partition, error) {
	p, err := b.Backend.Partition(ctx, topic, partition)
	if err != nil || topic != "isr" {
		return p, err
	}
	return &epochPartition{Partition: p, b: b}, nil
}

type epochPartition struct {
	kafka.Partition
	b *epochBackend
}

func (p *epochPartition) LeaderEpoch() int32 {
	p.b.mu.Lock()
	defer p.b.mu.Unlock()
	return p.b.leaderEpoch
}

func (p *epochPartition) EndOffsetForEpoch(_ context.Context, epoch int32) (int32, int64, int32, error) {
	leaderEpoch := p.LeaderEpoch()
	latest := testEpochs[len(testEpochs)-1].epoch
	if epoch < 0 || epoch > latest {
		return -1, -1, leaderEpoch, nil
	}
	for i := len(testEpochs) - 1; i >= 0; i-- {
		if testEpochs[i].epoch <= epoch {
			end := int64(testLogEnd)
			if i+1 < len(testEpochs) {
				end = testEpochs[i+1].start
			}
			return testEpochs[i].epoch, end, leaderEpoch, nil
		}
	}
	return epoch, testEpochs[0].start, leaderEpoch, nil
}

// EpochForOffset answers from the same epoch cache: the latest epoch
// starting at or before offset.
func (p *epochPartition) EpochForOffset(_ context.Context, offset int64) int32 {
	for i := len(testEpochs) - 1; i >= 0; i-- {
		if testEpochs[i].start <= offset {
			return testEpochs[i].epoch
		}
	}
	return -1
}

// ElectLeaders answers "isr" partition 0 with a new leader, 1 with its
// preferred replica out of the ISR, 2 as already led by it; unclean
// elections find no live replica; other topics need none.
func (b *epochBackend) ElectLeaders(_ context.Context, electionType int8, parts []kafka.TopicPartitions, timeout time.Duration) []kafka.ElectionResult {
	b.mu.Lock()
	b.elections, b.timeouts = append(b.elections, electionType), append(b.timeouts, timeout)
	b.mu.Unlock()
	var out []kafka.ElectionResult
	for _, tp := range parts {
		for _, p := range tp.Partitions {
			r := kafka.ElectionResult{Topic: tp.Topic, Partition: p}
			switch {
			case tp.Topic != "isr":
				r.Err = fmt.Errorf("%w: leadership follows bundle ownership", kerr.ElectionNotNeeded)
			case electionType == 1:
				r.Err = kerr.EligibleLeadersNotAvailable
			case p == 1:
				r.Err = kerr.PreferredLeaderNotAvailable
			case p == 2:
				r.Err = kerr.ElectionNotNeeded
			}
			out = append(out, r)
		}
	}
	return out
}

func (b *epochBackend) LogDirs(context.Context) ([]kafka.LogDir, error) {
	return []kafka.LogDir{{Dir: "/data/isr", TotalBytes: 1 << 30, UsableBytes: 1 << 29, Replicas: []kafka.LogDirReplica{
		{Topic: "isr", Partition: 0, Size: 100},
		{Topic: "isr", Partition: 1, Size: 50, OffsetLag: 3},
		{Topic: "other", Partition: 0, Size: 7},
	}}}, nil
}

var (
	_ kafka.LeaderElector   = (*epochBackend)(nil)
	_ kafka.LogDirDescriber = (*epochBackend)(nil)
	_ kafka.EpochPartition  = (*epochPartition)(nil)

	_ kafka.OffsetEpochPartition = (*epochPartition)(nil)
)

// TestLeaderEpochChecks: Fetch and ListOffsets refuse a current leader
// epoch other than an ISR partition's (KIP-320) and check nothing of a
// ledger-mode one.
func TestLeaderEpochChecks(t *testing.T) {
	c, _ := newEpochCluster(t)
	conn := c.raw()
	for _, topic := range []string{"isr", "t"} {
		if code, _ := produceCode(t, conn.request(produceRequest(9, topic, 0, recordBatch(t, 2, "v")))); code != 0 {
			t.Fatal(kerr.ErrorForCode(code))
		}
	}
	for _, tc := range []struct {
		name  string
		topic string
		epoch int32
		want  *kerr.Error
	}{
		{"same epoch", "isr", 5, nil},
		{"no epoch", "isr", -1, nil},
		{"older epoch", "isr", 4, kerr.FencedLeaderEpoch},
		{"newer epoch", "isr", 6, kerr.UnknownLeaderEpoch},
		{"ledger mode: not checked", "t", 99, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fetch := fetchRequest(12, tc.topic, 0, 0)
			fetch.Topics[0].Partitions[0].CurrentLeaderEpoch = tc.epoch
			fp := conn.request(fetch).(*kmsg.FetchResponse).Topics[0].Partitions[0]
			if got := kerr.ErrorForCode(fp.ErrorCode); got != errOrNil(tc.want) {
				t.Errorf("fetch: %v, want %v", got, tc.want)
			}
			if tc.want == nil && len(fp.RecordBatches) == 0 {
				t.Errorf("fetch: no records")
			}
			list := kmsg.NewPtrListOffsetsRequest()
			list.Version = 7
			lt := kmsg.NewListOffsetsRequestTopic()
			lt.Topic = tc.topic
			lp := kmsg.NewListOffsetsRequestTopicPartition()
			lp.Timestamp, lp.CurrentLeaderEpoch = -1, tc.epoch
			lt.Partitions = append(lt.Partitions, lp)
			list.Topics = append(list.Topics, lt)
			rp := conn.request(list).(*kmsg.ListOffsetsResponse).Topics[0].Partitions[0]
			if got := kerr.ErrorForCode(rp.ErrorCode); got != errOrNil(tc.want) {
				t.Errorf("list offsets: %v, want %v", got, tc.want)
			}
			if wantOffset := int64(-1); tc.want == nil && rp.Offset != 2 || tc.want != nil && rp.Offset != wantOffset {
				t.Errorf("list offsets: offset %d", rp.Offset)
			}
		})
	}
}

// TestListOffsetsLeaderEpoch: ListOffsets v4+ answers an ISR partition's
// offsets with their epochs from its epoch cache (0 from offset 0, 3 from
// 4, 5 from 6), as Kafka does: earliest the first batch's, latest the one
// the high watermark falls in, a timestamp's and the max timestamp's the
// found batch's; −1 when nothing is found and for every offset of a
// ledger-mode partition.
func TestListOffsetsLeaderEpoch(t *testing.T) {
	c, _ := newEpochCluster(t)
	conn := c.raw()
	// Five batches of two records, timestamps 1000, 2000, …, 5000:
	// offsets 0–9 in both topics.
	for _, topic := range []string{"isr", "t"} {
		for i := range 5 {
			if code, _ := produceCode(t, conn.request(produceRequest(9, topic, 0, buildBatch(2, "v", int64(1000*(i+1)))))); code != 0 {
				t.Fatal(kerr.ErrorForCode(code))
			}
		}
	}
	for _, tc := range []struct {
		name       string
		timestamp  int64
		wantOffset int64
		wantEpoch  int32 // of topic "isr"
	}{
		{"earliest", -2, 0, 0},
		{"earliest local", -4, 0, 0},
		{"latest", -1, 10, 5},
		{"max timestamp", -3, 9, 5},
		{"the first batch's time", 1000, 0, 0},
		{"between the second and the third", 2500, 4, 3},
		{"the third batch's time", 3000, 4, 3},
		{"the last batch's time", 5000, 8, 5},
		{"past every batch", 6000, -1, -1},
		{"earliest pending upload", -5, -1, -1},
	} {
		for _, topic := range []string{"isr", "t"} {
			list := kmsg.NewPtrListOffsetsRequest()
			list.Version = 7
			lt := kmsg.NewListOffsetsRequestTopic()
			lt.Topic = topic
			lp := kmsg.NewListOffsetsRequestTopicPartition()
			lp.Timestamp, lp.CurrentLeaderEpoch = tc.timestamp, -1
			lt.Partitions = append(lt.Partitions, lp)
			list.Topics = append(list.Topics, lt)
			rp := conn.request(list).(*kmsg.ListOffsetsResponse).Topics[0].Partitions[0]
			wantEpoch := tc.wantEpoch
			if topic == "t" {
				wantEpoch = -1 // ledger mode: no epochs
			}
			if rp.ErrorCode != 0 || rp.Offset != tc.wantOffset || rp.LeaderEpoch != wantEpoch {
				t.Errorf("%s of %q: %v, offset %d, epoch %d; want offset %d, epoch %d",
					tc.name, topic, kerr.ErrorForCode(rp.ErrorCode), rp.Offset, rp.LeaderEpoch, tc.wantOffset, wantEpoch)
			}
		}
	}
}

func errOrNil(e *kerr.Error) error {
	if e == nil {
		return nil
	}
	return e
}

func offsetForLeaderEpoch(version int16, topic string, partition, current, epoch int32) *kmsg.OffsetForLeaderEpochRequest {
	req := kmsg.NewPtrOffsetForLeaderEpochRequest()
	req.Version, req.ReplicaID = version, -1
	rt := kmsg.NewOffsetForLeaderEpochRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewOffsetForLeaderEpochRequestTopicPartition()
	rp.Partition, rp.CurrentLeaderEpoch, rp.LeaderEpoch = partition, current, epoch
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	return req
}

// TestOffsetForLeaderEpoch: a consumer's question answered from the epoch
// cache as Kafka does, each error path, and ledger-mode partitions
// answered with the epoch asked ending at their high watermark.
func TestOffsetForLeaderEpoch(t *testing.T) {
	c, backend := newEpochCluster(t)
	conn := c.raw()
	if code, _ := produceCode(t, conn.request(produceRequest(9, "t", 0, recordBatch(t, 3, "v")))); code != 0 {
		t.Fatal(kerr.ErrorForCode(code))
	}
	backend.PartitionFor("isr", 1).SetNotLeader(true)
	for _, tc := range []struct {
		name           string
		version        int16
		topic          string
		partition      int32
		current, epoch int32
		want           *kerr.Error
		endEpoch       int32
		endOffset      int64
	}{
		{"the latest epoch ends at the log end", 4, "isr", 0, 5, 5, nil, 5, testLogEnd},
		{"an earlier epoch ends where the next starts", 4, "isr", 0, 5, 3, nil, 3, 6},
		{"the largest epoch below", 3, "isr", 0, -1, 4, nil, 3, 6},
		{"v2", 2, "isr", 0, 5, 0, nil, 0, 4},
		{"newer than every epoch", 4, "isr", 0, -1, 9, nil, -1, -1},
		{"undefined epoch", 4, "isr", 0, 5, -1, nil, -1, -1},
		{"fenced", 4, "isr", 0, 4, 3, kerr.FencedLeaderEpoch, -1, -1},
		{"unknown epoch", 4, "isr", 0, 6, 3, kerr.UnknownLeaderEpoch, -1, -1},
		{"not the leader", 4, "isr", 1, 5, 3, kerr.NotLeaderForPartition, -1, -1},
		{"unknown topic", 4, "nope", 0, -1, 3, kerr.UnknownTopicOrPartition, -1, -1},
		{"unknown partition", 4, "isr", 7, -1, 3, kerr.UnknownTopicOrPartition, -1, -1},
		{"ledger mode: the epoch asked ends at the high watermark", 4, "t", 0, 8, 2, nil, 2, 3},
		{"ledger mode: undefined epoch", 4, "t", 0, -1, -1, nil, -1, -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp := conn.request(offsetForLeaderEpoch(tc.version, tc.topic, tc.partition, tc.current, tc.epoch)).(*kmsg.OffsetForLeaderEpochResponse)
			if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
				t.Fatalf("response shape: %+v", resp)
			}
			p := resp.Topics[0].Partitions[0]
			if got := kerr.ErrorForCode(p.ErrorCode); got != errOrNil(tc.want) || p.LeaderEpoch != tc.endEpoch || p.EndOffset != tc.endOffset {
				t.Fatalf("got %v epoch %d end %d, want %v epoch %d end %d", got, p.LeaderEpoch, p.EndOffset, tc.want, tc.endEpoch, tc.endOffset)
			}
		})
	}
}

func electLeaders(version int16, electionType int8, topics map[string][]int32) *kmsg.ElectLeadersRequest {
	req := kmsg.NewPtrElectLeadersRequest()
	req.Version, req.ElectionType, req.TimeoutMillis = version, electionType, 1500
	if topics == nil {
		req.Topics = nil
		return req
	}
	names := make([]string, 0, len(topics))
	for name := range topics {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		rt := kmsg.NewElectLeadersRequestTopic()
		rt.Topic, rt.Partitions = name, topics[name]
		req.Topics = append(req.Topics, rt)
	}
	return req
}

// electionCodes flattens an ElectLeaders answer to "topic-partition" → code.
func electionCodes(resp *kmsg.ElectLeadersResponse) map[string]int16 {
	out := map[string]int16{}
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			out[fmt.Sprintf("%s-%d", t.Topic, p.Partition)] = p.ErrorCode
		}
	}
	return out
}

// TestElectLeaders: each partition answered with the backend's election
// or the front end's own errors; null topics leave out the partitions
// that needed none; a bad election type refused; a backend without
// elections has nothing to elect.
func TestElectLeaders(t *testing.T) {
	c, backend := newEpochCluster(t)
	conn := c.raw()

	resp := conn.request(electLeaders(2, 0, map[string][]int32{"isr": {0, 1, 2, 5}, "t": {0}, "nope": {0}, "bad/name": {0}})).(*kmsg.ElectLeadersResponse)
	want := map[string]int16{
		"isr-0": 0, "isr-1": kerr.PreferredLeaderNotAvailable.Code, "isr-2": kerr.ElectionNotNeeded.Code,
		"isr-5": kerr.UnknownTopicOrPartition.Code, "t-0": kerr.ElectionNotNeeded.Code,
		"nope-0": kerr.UnknownTopicOrPartition.Code, "bad/name-0": kerr.InvalidTopicException.Code,
	}
	if got := electionCodes(resp); resp.ErrorCode != 0 || !mapsEqual(got, want) {
		t.Fatalf("preferred: top %d, %v, want %v", resp.ErrorCode, got, want)
	}
	for _, tp := range resp.Topics {
		for _, p := range tp.Partitions {
			if tp.Topic == "t" && (p.ErrorMessage == nil || !containsWord(*p.ErrorMessage, "bundle ownership")) {
				t.Errorf("ledger-mode partition's message %v", p.ErrorMessage)
			}
		}
	}
	backend.mu.Lock()
	if len(backend.timeouts) != 1 || backend.timeouts[0] != 1500*time.Millisecond || backend.elections[0] != 0 {
		t.Errorf("elections %v with timeouts %v", backend.elections, backend.timeouts)
	}
	backend.mu.Unlock()

	resp = conn.request(electLeaders(1, 1, map[string][]int32{"isr": {0}})).(*kmsg.ElectLeadersResponse)
	if got := electionCodes(resp); got["isr-0"] != kerr.EligibleLeadersNotAvailable.Code {
		t.Fatalf("unclean: %v", got)
	}
	// v0 has no election type: preferred.
	resp = conn.request(electLeaders(0, 1, map[string][]int32{"isr": {0}})).(*kmsg.ElectLeadersResponse)
	if got := electionCodes(resp); got["isr-0"] != 0 {
		t.Fatalf("v0: %v", got)
	}

	// Every partition: those that needed no election are left out.
	resp = conn.request(electLeaders(2, 0, nil)).(*kmsg.ElectLeadersResponse)
	want = map[string]int16{"isr-0": 0, "isr-1": kerr.PreferredLeaderNotAvailable.Code}
	if got := electionCodes(resp); !mapsEqual(got, want) || len(resp.Topics) != 2 {
		t.Fatalf("all partitions: %d topics, %v, want %v", len(resp.Topics), got, want)
	}

	resp = conn.request(electLeaders(2, 2, map[string][]int32{"isr": {0}})).(*kmsg.ElectLeadersResponse)
	if resp.ErrorCode != kerr.InvalidRequest.Code || electionCodes(resp)["isr-0"] != kerr.InvalidRequest.Code {
		t.Fatalf("election type 2: top %d, %v", resp.ErrorCode, electionCodes(resp))
	}

	plain := newCluster(t)
	if err := plain.backend.CreateTopic(testContext(t), "p", 1, nil, false); err != nil {
		t.Fatal(err)
	}
	resp = plain.raw().request(electLeaders(2, 0, map[string][]int32{"p": {0}})).(*kmsg.ElectLeadersResponse)
	if got := electionCodes(resp); got["p-0"] != kerr.ElectionNotNeeded.Code {
		t.Fatalf("a backend without elections: %v", got)
	}
}

func mapsEqual(a, b map[string]int16) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

func containsWord(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return true
		}
	}
	return false
}

// TestDescribeLogDirs: the backend's directories with their replicas,
// all or those asked for; the file system's sizes from v4; none from a
// backend without log directories.
func TestDescribeLogDirs(t *testing.T) {
	c, _ := newEpochCluster(t)
	conn := c.raw()
	req := kmsg.NewPtrDescribeLogDirsRequest()
	req.Version, req.Topics = 4, nil
	resp := conn.request(req).(*kmsg.DescribeLogDirsResponse)
	if resp.ErrorCode != 0 || len(resp.Dirs) != 1 {
		t.Fatalf("all: %+v", resp)
	}
	d := resp.Dirs[0]
	if d.Dir != "/data/isr" || d.TotalBytes != 1<<30 || d.UsableBytes != 1<<29 || len(d.Topics) != 2 ||
		d.Topics[0].Topic != "isr" || len(d.Topics[0].Partitions) != 2 || d.Topics[0].Partitions[1].Size != 50 ||
		d.Topics[0].Partitions[1].OffsetLag != 3 || d.Topics[0].Partitions[0].IsFuture {
		t.Fatalf("all: %+v", d)
	}

	rt := kmsg.NewDescribeLogDirsRequestTopic()
	rt.Topic, rt.Partitions = "isr", []int32{1, 2}
	req.Version, req.Topics = 1, []kmsg.DescribeLogDirsRequestTopic{rt}
	resp = conn.request(req).(*kmsg.DescribeLogDirsResponse)
	d = resp.Dirs[0]
	if len(d.Topics) != 1 || len(d.Topics[0].Partitions) != 1 || d.Topics[0].Partitions[0].Partition != 1 || d.TotalBytes != -1 {
		t.Fatalf("isr-1 and isr-2 at v1: %+v", d)
	}

	plain := newCluster(t).raw()
	req.Version, req.Topics = 4, nil
	if resp := plain.request(req).(*kmsg.DescribeLogDirsResponse); resp.ErrorCode != 0 || len(resp.Dirs) != 0 {
		t.Fatalf("a backend without log directories: %+v", resp)
	}
}

// TestISRAPIsAuthorization: ElectLeaders needs ALTER on the cluster,
// DescribeLogDirs DESCRIBE on it, OffsetForLeaderEpoch DESCRIBE on the
// topic (or CLUSTER_ACTION).
func TestISRAPIsAuthorization(t *testing.T) {
	c := newACLCluster(t)
	if err := c.backend.CreateTopic(testContext(t), "orders", 1, nil, false); err != nil {
		t.Fatal(err)
	}
	for _, user := range []string{"alice", "admin"} {
		conn := c.rawAs(user)
		denied := user == "alice" // no ACL; admin is a super user
		elect := conn.request(electLeaders(2, 0, map[string][]int32{"orders": {0}})).(*kmsg.ElectLeadersResponse)
		if code := electionCodes(elect)["orders-0"]; denied != (code == kerr.ClusterAuthorizationFailed.Code && elect.ErrorCode == code) {
			t.Errorf("%s: elect leaders: top %d, partition %d", user, elect.ErrorCode, code)
		}
		dirs := kmsg.NewPtrDescribeLogDirsRequest()
		dirs.Version = 4
		if resp := conn.request(dirs).(*kmsg.DescribeLogDirsResponse); denied != (resp.ErrorCode == kerr.ClusterAuthorizationFailed.Code) {
			t.Errorf("%s: describe log dirs: %d", user, resp.ErrorCode)
		}
		reassign := conn.request(alterReassignments(1, true, map[string]map[int32][]int32{"orders": {0: {1}}})).(*kmsg.AlterPartitionAssignmentsResponse)
		if code := reassignmentCodes(reassign)["orders-0"]; denied != (code == kerr.ClusterAuthorizationFailed.Code && reassign.ErrorCode == code) {
			t.Errorf("%s: alter partition reassignments: top %d, partition %d", user, reassign.ErrorCode, code)
		}
		listed := conn.request(kmsg.NewPtrListPartitionReassignmentsRequest()).(*kmsg.ListPartitionReassignmentsResponse)
		if denied != (listed.ErrorCode == kerr.ClusterAuthorizationFailed.Code) {
			t.Errorf("%s: list partition reassignments: %d", user, listed.ErrorCode)
		}
		epochs := conn.request(offsetForLeaderEpoch(4, "orders", 0, -1, 0)).(*kmsg.OffsetForLeaderEpochResponse)
		if code := epochs.Topics[0].Partitions[0].ErrorCode; denied != (code == kerr.TopicAuthorizationFailed.Code) {
			t.Errorf("%s: offset for leader epoch: %d", user, code)
		}
	}
}
