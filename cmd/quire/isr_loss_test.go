package main

import (
	"context"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"quire/internal/isr"
	"quire/internal/testutil"
)

// Issue 14's remaining acceptance of ISR mode on real processes (etcd in
// the test process, `quire broker` processes with --isr-data-dir): what an
// ISR cluster loses, and when it refuses instead, under SIGKILL.

// TestISRAllReplicasDownStaysOffline is K4's durable half: RF 3,
// min.insync.replicas 2, unclean election off, every replica of a
// partition SIGKILLed in turn:
//
//   - follower "behind" first: the ISR shrinks to {leader, last}, still
//     min.insync.replicas, so behind joins no ELR; acks=all records are
//     then committed without it;
//   - follower "last": the ISR shrinks to {leader}, below
//     min.insync.replicas, so last joins the ELR (KIP-966: no acks=all
//     write commits from now on, so it holds every committed record) and
//     the leader refuses acks=all writes (K8);
//   - the leader, the last ISR member.
//
// Every broker runs a controller candidate, so with all three down the
// record stays as the last controller left it. Then:
//
//   - behind returns (not the last ISR member, and missing committed
//     records): it becomes the controller, the dead leader leaves the ISR
//     for the ELR, nobody is elected;
//   - the leader returns: from an unclean shutdown (a SIGKILL), which by the
//     core's rules takes it out of the ELR into the last known ELR (it may
//     have lost unflushed records); last is an ELR member still down, so
//     the controller waits for it;
//   - last returns, also unclean: the ELR is empty and every member of the
//     last known ELR is back, so unclean recovery (Balanced, the default)
//     elects the longer log of the two.
//
// While offline, every live broker answers Metadata with no leader, an
// acks=all Produce with a retriable error (nothing stored), a Fetch with an
// error and no records; raw kmsg requests, since a kgo producer or consumer
// would retry through the errors and hide them. Once online every
// acknowledged record is there, once and in order, the ones behind lacked
// included.
func TestISRAllReplicasDownStaysOffline(t *testing.T) {
	if testing.Short() {
		t.Skip("runs three broker processes")
	}
	const topic = "isr-offline"
	name := topic + "-0" // the partition's record (isrnode.PartitionName)
	c := startISRCluster(t, topic, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	st := c.record(t, ctx, name)
	defer func() {
		if t.Failed() {
			t.Logf("the partition's last record read: %s", st)
		}
	}()
	leader := int32(st.Leader)
	var followers []int32
	for _, r := range st.Replicas {
		if int32(r) != leader {
			followers = append(followers, int32(r))
		}
	}
	behind, last := followers[0], followers[1]
	seeds := []string{c.kafkaAddrs[1], c.kafkaAddrs[2], c.kafkaAddrs[3]}
	acked := produceSeq(t, ctx, seeds, topic, 0, 1000)
	// Every probe's record is the next seq-N too, so whatever a probe
	// stored keeps the read-back's order check meaningful.
	next := len(acked)
	probe := func(addr string) int16 {
		next++
		return probeProduce(t, ctx, addr, topic, []byte("seq-"+strconv.Itoa(next-1)))
	}
	shrunk := func(what string, isrSize int, inELR int32) {
		t.Helper()
		killed := time.Now()
		testutil.WaitForWithin(t, 60*time.Second, what, func() bool {
			st = c.record(t, ctx, name)
			return st.Leader == isr.BrokerID(leader) && len(st.ISR) == isrSize && (inELR == 0 || st.InELR(isr.BrokerID(inELR)))
		})
		t.Logf("%s: %v after the kill: %s", what, time.Since(killed).Round(time.Millisecond), st)
	}

	c.kill(t, behind)
	shrunk("the ISR to shrink to two, no ELR", 2, 0)
	if len(st.ELR) != 0 {
		t.Fatalf("broker %d left an ISR of min.insync.replicas into the ELR: %s", behind, st)
	}
	for v, at := range produceSeq(t, ctx, seeds, topic, next, 1000) {
		acked[v] = at // committed on the leader and last only
	}
	next += 1000
	c.kill(t, last)
	shrunk("the ISR to shrink to the leader, the last follower in the ELR", 1, last)
	// K8: below min.insync.replicas the leader takes no acks=all write.
	if code := probe(c.kafkaAddrs[leader]); code != kerr.NotEnoughReplicas.Code {
		t.Fatalf("acks=all produce with ISR %v: error %v, want NOT_ENOUGH_REPLICAS", st.ISR, kerr.ErrorForCode(code))
	}
	c.kill(t, leader)

	c.restart(t, behind)
	testutil.WaitForWithin(t, 60*time.Second, "the controller on broker "+strconv.Itoa(int(behind))+" to take the dead leader out of the ISR", func() bool {
		st = c.record(t, ctx, name)
		return st.Leader == isr.NoLeader && len(st.ISR) == 0 && st.InELR(isr.BrokerID(leader)) && st.InELR(isr.BrokerID(last))
	})
	t.Logf("the follower that left first back: %s", st)
	checkOffline(t, ctx, c, topic, probe, behind)

	c.restart(t, leader)
	testutil.WaitForWithin(t, 60*time.Second, "the controller to see the last ISR member "+strconv.Itoa(int(leader))+" back from an unclean shutdown", func() bool {
		st = c.record(t, ctx, name)
		return st.Leader == isr.NoLeader && slices.Contains(st.LastKnownELR, isr.BrokerID(leader)) && st.InELR(isr.BrokerID(last))
	})
	t.Logf("the last ISR member back too: %s", st)
	checkOffline(t, ctx, c, topic, probe, behind, leader)

	restarted := time.Now()
	c.restart(t, last)
	var resumed time.Duration
	testutil.WaitForWithin(t, 60*time.Second, "the partition led and taking acks=all writes again", func() bool {
		st = c.record(t, ctx, name)
		if st.Leader == isr.NoLeader {
			return false
		}
		v := "seq-" + strconv.Itoa(next)
		if probe(c.kafkaAddrs[int32(st.Leader)]) != 0 {
			return false
		}
		acked[v] = time.Now()
		resumed = time.Since(restarted)
		st = c.record(t, ctx, name) // the ISR grew for that ack
		return true
	})
	t.Logf("back online, taking acks=all writes, %v after the ELR member was started: %s", resumed.Round(time.Millisecond), st)
	if l := int32(st.Leader); l != leader && l != last {
		t.Fatalf("broker %d, which missed committed records, was elected: %s", l, st)
	}
	for v, at := range produceSeq(t, ctx, seeds, topic, next, 500) {
		acked[v] = at
	}
	read := checkReadBack(t, ctx, c.kafkaAddrs[int32(st.Leader)], topic, acked)
	t.Logf("%d acknowledged records (1,000 with three in sync, 1,000 with two, 501 after the outage), %d records read back", len(acked), read)
}

// TestISRAcks1LeaderLossMeasured is K3 on real processes: RF 3,
// min.insync.replicas 2, unclean election off. A producer with acks=1
// (idempotence off, as acks=1 requires) writes partition 0 as fast as it
// can; an idempotent acks=all producer writes another partition led by the
// same broker. Both followers of partition 0 are paused (SIGSTOP, well
// within their session) while the leader keeps acknowledging acks=1
// records, so the leader has a tail nobody else has; then it is SIGKILLed
// and the followers resumed. The controller elects a follower (both are
// still in the ISR), and acks=1 records the old leader acknowledged past
// the new leader's log end are gone: when the old leader returns it
// truncates to the new leader's log.
//
// The bound comes from two observable facts that must agree: the new
// leader's leader-epoch checkpoint on its disk (its epoch starts at its
// log end when it became leader, KIP-101) and the first record of the
// final log written under a leader epoch newer than the killed leader's.
// Below the bound every acknowledged record is at its acknowledged offset;
// every lost one was acknowledged at or above it. Nothing acknowledged
// with acks=all is lost.
func TestISRAcks1LeaderLossMeasured(t *testing.T) {
	if testing.Short() {
		t.Skip("runs three broker processes")
	}
	const topic, partitions = "isr-acks1", 4
	c := startISRCluster(t, topic, partitions)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	name := topic + "-0" // partition 0's record (isrnode.PartitionName)
	before := c.record(t, ctx, name)
	victim := int32(before.Leader)
	var followers []int32
	for _, r := range before.Replicas {
		if int32(r) != victim {
			followers = append(followers, int32(r))
		}
	}
	// The acks=all partition: one led by the victim too, if any (the
	// assignment repeats every three partitions), so the kill hits it.
	allPart := int32(1)
	for p := int32(1); p < partitions; p++ {
		if st := c.record(t, ctx, topic+"-"+strconv.Itoa(int(p))); int32(st.Leader) == victim {
			allPart = p
			break
		}
	}
	seeds := []string{c.kafkaAddrs[1], c.kafkaAddrs[2], c.kafkaAddrs[3]}
	acks1, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.DefaultProduceTopic(topic), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.RequiredAcks(kgo.LeaderAck()), kgo.DisableIdempotentWrite(), kgo.RecordDeliveryTimeout(90*time.Second),
		// Small batches: acknowledgements come often, so the tail the
		// kill cuts is many batches, not one buffer's worth.
		kgo.MaxBufferedRecords(5000), kgo.ProducerBatchMaxBytes(16<<10))
	if err != nil {
		t.Fatal(err)
	}
	defer acks1.Close()
	acksAll, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.DefaultProduceTopic(topic), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.RequiredAcks(kgo.AllISRAcks()), kgo.RecordDeliveryTimeout(90*time.Second), kgo.MaxBufferedRecords(2000))
	if err != nil {
		t.Fatal(err)
	}
	defer acksAll.Close()

	var mu sync.Mutex
	ackedAt := map[string]int64{} // acks=1 value -> the offset it was acknowledged at
	ackedAll := map[string]bool{}
	failed := map[string]int{}
	failure := func(prefix string) func(error) { return func(err error) { failed[prefix+err.Error()]++ } }
	stop1 := keepProducing(ctx, acks1, 0, "a1-", &mu, func(r *kgo.Record) { ackedAt[string(r.Value)] = r.Offset }, failure("acks=1: "))
	stopAll := keepProducing(ctx, acksAll, allPart, "seq-", &mu, func(r *kgo.Record) { ackedAll[string(r.Value)] = true }, failure("acks=all: "))
	counts := func() (int, int) {
		mu.Lock()
		defer mu.Unlock()
		return len(ackedAt), len(ackedAll)
	}
	testutil.WaitForWithin(t, 60*time.Second, "3,000 acks=1 and 500 acks=all acknowledgements", func() bool {
		n1, nAll := counts()
		return n1 >= 3000 && nAll >= 500
	})

	// The followers have replicated a prefix (the HW is past it), so
	// the bound below is not trivially 0.
	replicated, _ := counts()
	waitedHW := time.Now()
	testutil.WaitForWithin(t, 30*time.Second, "partition 0's HW past the records acknowledged so far", func() bool {
		return probeHighWatermark(t, ctx, c.kafkaAddrs[victim], topic) >= int64(replicated)
	})
	// The followers stop fetching; the leader keeps acknowledging acks=1
	// records. The pause stays well inside the 3 s session, so both stay
	// registered and in the ISR, and one of them is elected.
	for _, f := range followers {
		if err := c.brokers[f].cmd.Process.Signal(syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
	}
	paused, _ := counts()
	pausedAt := time.Now()
	tail := waitUntil(time.Second, func() bool { n, _ := counts(); return n >= paused+1000 })
	c.kill(t, victim)
	for _, f := range followers {
		if err := c.brokers[f].cmd.Process.Signal(syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
	}
	atKill, _ := counts()
	t.Logf("partition 0's HW passed %d %v after that many acks=1 acknowledgements; followers %v paused after %d; leader %d killed after %d (tail of 1,000 reached: %v)",
		replicated, pausedAt.Sub(waitedHW).Round(time.Millisecond), followers, paused, victim, atKill, tail)

	var after isr.PartitionState
	testutil.WaitForWithin(t, 60*time.Second, "a follower elected leader of partition 0", func() bool {
		after = c.record(t, ctx, name)
		return after.Leader != isr.NoLeader && int32(after.Leader) != victim && after.LeaderEpoch > before.LeaderEpoch
	})
	newLeader := int32(after.Leader)
	if after.Unclean {
		t.Fatalf("an unclean election with unclean election off: %s", after)
	}
	// The new leader's epoch starts at its log end when it became leader.
	var electedEnd int64 = -1
	checkpoint := filepath.Join(c.isrDirs[newLeader], name, "leader-epoch-checkpoint")
	testutil.WaitForWithin(t, 30*time.Second, "the new leader's epoch in its leader-epoch checkpoint", func() bool {
		electedEnd = epochStart(checkpoint, after.LeaderEpoch)
		return electedEnd >= 0
	})
	t.Logf("broker %d elected under epoch %d (the killed leader's was %d); its log ended at %d", newLeader, after.LeaderEpoch, before.LeaderEpoch, electedEnd)

	// The killed broker returns, truncates to the new leader's log and
	// catches up into the ISR.
	c.restart(t, victim)
	testutil.WaitForWithin(t, 90*time.Second, "the restarted broker back in the ISR of partition 0", func() bool {
		st := c.record(t, ctx, name)
		return len(st.ISR) == 3 && st.InISR(isr.BrokerID(victim))
	})
	stop1()
	stopAll()
	for _, cl := range []*kgo.Client{acks1, acksAll} {
		if err := cl.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}

	var final isr.PartitionState
	final = c.record(t, ctx, name)
	records := consumeAll(t, ctx, c.kafkaAddrs[int32(final.Leader)], topic)
	at := map[int64]*kgo.Record{}
	boundary := int64(-1) // the first offset written under a newer epoch
	seenAll := map[string]int{}
	for _, r := range records {
		switch r.Partition {
		case 0:
			at[r.Offset] = r
			if r.LeaderEpoch > before.LeaderEpoch && boundary < 0 {
				boundary = r.Offset
			}
		case allPart:
			seenAll[string(r.Value)]++
		}
	}
	if electedEnd < int64(replicated) {
		t.Fatalf("the new leader's log ended at %d, below the HW %d reached before the pause", electedEnd, replicated)
	}
	if boundary != electedEnd {
		t.Fatalf("the final log's first record of a newer epoch is at %d; the new leader's epoch started at %d", boundary, electedEnd)
	}
	mu.Lock()
	defer mu.Unlock()
	var lost, ackedBelow, ackedAbove int
	lowestLost, highestLost := int64(-1), int64(-1)
	for v, off := range ackedAt {
		present := at[off] != nil && string(at[off].Value) == v
		if off < electedEnd {
			ackedBelow++
			if !present {
				t.Errorf("acks=1 record %s acknowledged at %d, below the new leader's log end %d at election, is not there", v, off, electedEnd)
			}
			continue
		}
		ackedAbove++
		if present {
			continue // acknowledged by the new leader
		}
		lost++
		if lowestLost < 0 || off < lowestLost {
			lowestLost = off
		}
		highestLost = max(highestLost, off)
	}
	t.Logf("acks=1: acknowledged %d, lost %d (acknowledged at offsets %d..%d by leader %d, which had not replicated them: the new leader's log ended at %d); %d acknowledged below that, all there; %d acknowledged at or above it, by the new leader, all there",
		len(ackedAt), lost, lowestLost, highestLost, victim, electedEnd, ackedBelow, ackedAbove-lost)
	if lost == 0 {
		t.Fatalf("the killed leader had no unreplicated acknowledged tail: the test did not reach its fault (%d acks=1 acknowledgements while the followers were paused)", atKill-paused)
	}
	if n := highestLost - lowestLost + 1; int64(lost) != n {
		t.Errorf("lost %d acks=1 records, not the whole unreplicated run of %d offsets %d..%d", lost, n, lowestLost, highestLost)
	}
	if lowestLost != electedEnd {
		t.Errorf("the first lost record was acknowledged at %d, not at the new leader's log end %d", lowestLost, electedEnd)
	}
	var missing []string
	for v := range ackedAll {
		if seenAll[v] != 1 {
			missing = append(missing, fmt.Sprintf("%s×%d", v, seenAll[v]))
		}
	}
	if len(missing) > 0 {
		t.Fatalf("acks=all partition %d: %d of %d acknowledged records not there exactly once: %v", allPart, len(missing), len(ackedAll), missing[:min(10, len(missing))])
	}
	t.Logf("acks=all: %d acknowledged records on partition %d (led by %d too), all there once; failures: %v", len(ackedAll), allPart, victim, failed)
}

// keepProducing produces records prefix+"0", prefix+"1", ... to partition
// through cl, as fast as the client takes them, until the returned stop is
// called (which does not flush); each outcome is handed to acked or failed
// under mu.
func keepProducing(ctx context.Context, cl *kgo.Client, partition int32, prefix string, mu *sync.Mutex, acked func(*kgo.Record), failed func(error)) (stop func()) {
	quit, finished := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(finished)
		for i := 0; ; i++ {
			select {
			case <-quit:
				return
			default:
			}
			cl.Produce(ctx, &kgo.Record{Partition: partition, Value: []byte(prefix + strconv.Itoa(i))}, func(r *kgo.Record, err error) {
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					failed(err)
					return
				}
				acked(r)
			})
		}
	}()
	return func() {
		close(quit)
		<-finished
	}
}

// epochStart is the start offset of epoch in a leader-epoch checkpoint
// file (Kafka's format: version, count, then "epoch startOffset" lines),
// or -1 when the file or the entry is not there.
func epochStart(path string, epoch int32) int64 {
	data, err := os.ReadFile(path)
	if err != nil {
		return -1
	}
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	for _, line := range lines[min(2, len(lines)):] {
		var e int32
		var start int64
		if _, err := fmt.Sscanf(line, "%d %d", &e, &start); err == nil && e == epoch {
			return start
		}
	}
	return -1
}

// TestISRFlushMessagesSurvivesKill: a topic created with flush.messages=1
// on a one-broker ISR namespace (RF 1): the config reaches the partition
// record (whose PartitionConfig every replica flushes by, leader or
// follower) and DescribeConfigs; an idempotent acks=all producer writes
// both partitions, the broker is SIGKILLed under load and started again on
// its data directory (it comes back by unclean recovery, its own log the
// only one); every acknowledged record is read back, once and in order.
//
// What a process kill cannot show: the log writes each batch to its
// segment file before acknowledging it and the page cache outlives the
// process, so a SIGKILL loses nothing with the default policy either (no
// forced flush, as Kafka's; TestStandaloneISRKilledRecovers is that run).
// The forced flush matters on a power loss or kernel crash, which
// internal/isr/disklog tests on a crashable file system that keeps only
// synced data: TestReplicaOverDiskLog (the replica core over the disk log
// with flush.messages=1 keeps every acknowledged record through the crash)
// against TestReplicaOverDiskLogUnflushedCrash (without it they are gone),
// and internal/isr's TestFlushPoliciesFromRecord (the record's policy
// drives the core's flushes). This test pins the wiring from CreateTopics
// to the record and the end-to-end kill.
func TestISRFlushMessagesSurvivesKill(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a broker process")
	}
	const topic, partitions = "isr-flush", 2
	one := "1"
	c := startISRClusterWith(t, isrClusterSpec{brokers: 1, minISR: 1, topic: topic, partitions: partitions,
		configs: map[string]*string{"flush.messages": &one}})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	epochsBefore := map[int32]int32{}
	for p := range int32(partitions) {
		st := c.record(t, ctx, topic+"-"+strconv.Itoa(int(p)))
		if st.Config.FlushMessages != 1 {
			t.Fatalf("partition %d's record carries flush.messages %d, want the topic's 1: %s", p, st.Config.FlushMessages, st)
		}
		epochsBefore[p] = st.LeaderEpoch
	}
	described, err := c.admins[1].DescribeTopicConfigs(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	if v, err := described.On(topic, nil); err != nil {
		t.Fatal(err)
	} else if e, ok := findConfig(v.Configs, "flush.messages"); !ok || e.Value == nil || *e.Value != "1" {
		t.Fatalf("DescribeConfigs shows flush.messages %+v", e)
	}

	prod, err := kgo.NewClient(kgo.SeedBrokers(c.kafkaAddrs[1]), kgo.DefaultProduceTopic(topic), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.RequiredAcks(kgo.AllISRAcks()), kgo.RecordDeliveryTimeout(20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	var mu sync.Mutex
	acked := map[string]bool{}
	failures := 0
	var stops []func()
	for p := range int32(partitions) {
		// Partition p's values are seq-<p>00000000<i>: distinct across
		// partitions and growing within one, as checkReadBack wants.
		stops = append(stops, keepProducing(ctx, prod, p, "seq-"+strconv.Itoa(int(p))+"00000000", &mu,
			func(r *kgo.Record) { acked[string(r.Value)] = true }, func(error) { failures++ }))
	}
	count := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(acked)
	}
	testutil.WaitForWithin(t, 60*time.Second, "3,000 acks", func() bool { return count() >= 3000 })
	c.kill(t, 1)
	prod.Close() // what was in flight can no longer be acknowledged
	for _, stop := range stops {
		stop()
	}
	n := count()
	restarted := time.Now()
	c.restart(t, 1)
	probe, err := kgo.NewClient(kgo.SeedBrokers(c.kafkaAddrs[1]))
	if err != nil {
		t.Fatal(err)
	}
	defer probe.Close()
	defer func() {
		if t.Failed() {
			for p := range int32(partitions) {
				t.Logf("partition %d: %s", p, c.record(t, ctx, topic+"-"+strconv.Itoa(int(p))))
			}
			t.Logf("the broker's output ends:\n%s", tail(c.brokers[1].output.String(), 4000))
		}
	}()
	testutil.WaitForWithin(t, 90*time.Second, "every partition led again after the restart", func() bool {
		return isrOnline(ctx, kadm.NewClient(probe), topic, partitions, 1, epochsBefore)
	})
	online := time.Since(restarted)
	mu.Lock()
	defer mu.Unlock()
	read := checkReadBack(t, ctx, c.kafkaAddrs[1], topic, acked)
	t.Logf("flush.messages=1: killed after %d acks (%d produce calls failed as the client was closed after the kill); online %v after the restart; %d records read back, every acknowledged one among them",
		n, failures, online.Round(time.Millisecond), read)
}

// findConfig is the config named name among configs.
func findConfig(configs []kadm.Config, name string) (kadm.Config, bool) {
	for _, c := range configs {
		if c.Key == name {
			return c, true
		}
	}
	return kadm.Config{}, false
}

// produceSeq produces n records "seq-<first>".."seq-<first+n-1>" to
// partition of topic with an idempotent acks=all producer and returns them
// with the time each was acknowledged; any failure fails the test.
func produceSeq(t *testing.T, ctx context.Context, seeds []string, topic string, first, n int) map[string]time.Time {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.DefaultProduceTopic(topic), kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.RecordDeliveryTimeout(60*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	acked := map[string]time.Time{}
	const batch = 100
	for i := 0; i < n; i += batch {
		var recs []*kgo.Record
		for j := i; j < min(i+batch, n); j++ {
			recs = append(recs, &kgo.Record{Value: []byte("seq-" + strconv.Itoa(first+j))})
		}
		if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Fatalf("produce: %v", err)
		}
		for _, r := range recs {
			acked[string(r.Value)] = time.Now()
		}
	}
	return acked
}

// checkOffline checks, at each of the brokers ids, that partition 0 of
// topic is served by nobody: Metadata names no leader, an acks=all
// Produce gets a retriable error and stores nothing, a Fetch from offset 0
// gets an error and no records.
func checkOffline(t *testing.T, ctx context.Context, c *isrCluster, topic string, probe func(addr string) int16, ids ...int32) {
	t.Helper()
	for _, id := range ids {
		addr := c.kafkaAddrs[id]
		if leader := probeLeader(t, ctx, addr, topic); leader != -1 {
			t.Fatalf("broker %d: Metadata names leader %d of a partition whose every ISR and ELR member came back unclean", id, leader)
		}
		produceErr := kerr.ErrorForCode(probe(addr))
		if produceErr == nil || !kerr.IsRetriable(produceErr) {
			t.Fatalf("broker %d: produce to the offline partition answered %v, want a retriable error", id, produceErr)
		}
		code, batches := probeFetch(t, ctx, addr, topic)
		if code == 0 || batches > 0 {
			t.Fatalf("broker %d: fetch of the offline partition answered %v with %d batches", id, kerr.ErrorForCode(code), batches)
		}
		t.Logf("broker %d: no leader in Metadata, produce refused (%v), fetch refused (%v)", id, produceErr, kerr.ErrorForCode(code))
	}
}

// rawRequest sends req to the broker at addr itself (a kgo client would
// route a Produce or Fetch to the leader it believes in, and retry).
func rawRequest(t *testing.T, ctx context.Context, addr string, req kmsg.Request) kmsg.Response {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	resp, err := cl.SeedBrokers()[0].Request(ctx, req)
	if err != nil {
		t.Fatalf("%s to %s: %v", kmsg.NameForKey(req.Key()), addr, err)
	}
	return resp
}

// probeLeader is partition 0's leader in the Metadata the broker at addr
// answers (-1: none).
func probeLeader(t *testing.T, ctx context.Context, addr, topic string) int32 {
	t.Helper()
	req := kmsg.NewPtrMetadataRequest()
	rt := kmsg.NewMetadataRequestTopic()
	rt.Topic = kmsg.StringPtr(topic)
	req.Topics = append(req.Topics, rt)
	resp := rawRequest(t, ctx, addr, req).(*kmsg.MetadataResponse)
	for _, td := range resp.Topics {
		for _, p := range td.Partitions {
			if td.Topic != nil && *td.Topic == topic && p.Partition == 0 {
				return p.Leader
			}
		}
	}
	t.Fatalf("Metadata from %s lacks %s partition 0", addr, topic)
	return 0
}

// topicID is topic's id in the Metadata the broker at addr answers
// (Produce v13 and Fetch v13+ name topics by id).
func topicID(t *testing.T, ctx context.Context, addr, topic string) [16]byte {
	t.Helper()
	req := kmsg.NewPtrMetadataRequest()
	rt := kmsg.NewMetadataRequestTopic()
	rt.Topic = kmsg.StringPtr(topic)
	req.Topics = append(req.Topics, rt)
	for _, td := range rawRequest(t, ctx, addr, req).(*kmsg.MetadataResponse).Topics {
		if td.Topic != nil && *td.Topic == topic {
			return td.TopicID
		}
	}
	t.Fatalf("Metadata from %s lacks %s", addr, topic)
	return [16]byte{}
}

// probeProduce sends one acks=all record holding value to partition 0 of
// topic at the broker at addr and returns the partition's error code.
func probeProduce(t *testing.T, ctx context.Context, addr, topic string, value []byte) int16 {
	t.Helper()
	req := kmsg.NewPtrProduceRequest()
	req.Acks, req.TimeoutMillis = -1, 5000
	rt := kmsg.NewProduceRequestTopic()
	rt.Topic, rt.TopicID = topic, topicID(t, ctx, addr, topic)
	rp := kmsg.NewProduceRequestTopicPartition()
	rp.Partition, rp.Records = 0, rawBatch(value)
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	for _, t := range rawRequest(t, ctx, addr, req).(*kmsg.ProduceResponse).Topics {
		for _, p := range t.Partitions {
			return p.ErrorCode
		}
	}
	t.Fatalf("Produce to %s answered no partition", addr)
	return 0
}

// probeFetch fetches partition 0 of topic from offset 0 as a consumer at
// the broker at addr and returns the error code and how many batches came.
func probeFetch(t *testing.T, ctx context.Context, addr, topic string) (int16, int) {
	t.Helper()
	req := kmsg.NewPtrFetchRequest()
	req.MaxWaitMillis, req.MinBytes, req.MaxBytes = 0, 1, 1<<20
	rt := kmsg.NewFetchRequestTopic()
	rt.Topic, rt.TopicID = topic, topicID(t, ctx, addr, topic)
	rp := kmsg.NewFetchRequestTopicPartition()
	rp.Partition, rp.FetchOffset, rp.PartitionMaxBytes = 0, 0, 1<<20
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp := rawRequest(t, ctx, addr, req).(*kmsg.FetchResponse)
	if resp.ErrorCode != 0 {
		return resp.ErrorCode, 0
	}
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			batches := 0
			for rest := p.RecordBatches; len(rest) >= 12; batches++ {
				n := 12 + int(binary.BigEndian.Uint32(rest[8:12]))
				if n > len(rest) {
					break
				}
				rest = rest[n:]
			}
			return p.ErrorCode, batches
		}
	}
	t.Fatalf("Fetch from %s answered no partition", addr)
	return 0, 0
}

// probeHighWatermark is partition 0's latest offset (its HW) as the
// broker at addr answers ListOffsets; -1 on an error.
func probeHighWatermark(t *testing.T, ctx context.Context, addr, topic string) int64 {
	t.Helper()
	req := kmsg.NewPtrListOffsetsRequest()
	rt := kmsg.NewListOffsetsRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewListOffsetsRequestTopicPartition()
	rp.Partition, rp.Timestamp = 0, -1
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	for _, t := range rawRequest(t, ctx, addr, req).(*kmsg.ListOffsetsResponse).Topics {
		for _, p := range t.Partitions {
			if p.ErrorCode != 0 {
				return -1
			}
			return p.Offset
		}
	}
	return -1
}

// rawBatch is one uncompressed v2 record batch, without a producer id,
// holding values.
func rawBatch(values ...[]byte) []byte {
	var records []byte
	for i, v := range values {
		r := kmsg.Record{OffsetDelta: int32(i), Value: v}
		r.Length = int32(len(r.AppendTo(nil)) - 1)
		records = r.AppendTo(records)
	}
	now := time.Now().UnixMilli()
	rb := kmsg.RecordBatch{Magic: 2, PartitionLeaderEpoch: -1, ProducerID: -1, ProducerEpoch: -1, FirstSequence: -1,
		LastOffsetDelta: int32(len(values) - 1), NumRecords: int32(len(values)), Records: records, FirstTimestamp: now, MaxTimestamp: now}
	raw := rb.AppendTo(nil)
	binary.BigEndian.PutUint32(raw[8:], uint32(len(raw)-12))
	binary.BigEndian.PutUint32(raw[17:], crc32.Checksum(raw[21:], crc32.MakeTable(crc32.Castagnoli)))
	return raw
}
