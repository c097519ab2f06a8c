package main

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"quire/internal/meta"
	"quire/internal/testutil"
)

// TestBrokerFailover runs etcd, three bookie processes and two broker
// processes; an idempotent producer with acks=all keeps producing while the
// broker that owns the topic is SIGKILLed. Every acknowledged record must be
// consumed exactly once, in order per partition, and production must resume
// on the other broker within 10 s.
func TestBrokerFailover(t *testing.T) {
	runBrokerDisruption(t, "killed", 10*time.Second, func(t *testing.T, victim *quireProcess, endpoint string) {
		if err := victim.cmd.Process.Kill(); err != nil {
			t.Fatal(err)
		}
	})
}

// TestZombieBrokerIsFenced is the seed's "zombie broker after a pause": the
// owner is SIGSTOPped past its session TTL, the other broker takes its
// bundles over (fencing the ledgers), and then the paused broker resumes.
// Whatever it still had in flight, no acknowledged record is lost or
// duplicated and no two writers interleave; the zombie finds its session
// gone and stops.
func TestZombieBrokerIsFenced(t *testing.T) {
	runBrokerDisruption(t, "paused", 60*time.Second, func(t *testing.T, victim *quireProcess, endpoint string) {
		if err := victim.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		// Until the other broker owns every bundle (the victim's session
		// expired and its bundles moved).
		m := "--meta-endpoints=" + strings.TrimPrefix(endpoint, "http://")
		testutil.WaitForWithin(t, 30*time.Second, "the other broker to take every bundle", func() bool {
			out := runAdmin(t, "namespaces", "bundles", "public/default", m)
			return strings.Count(out, "broker ") == 4 && !strings.Contains(out, victimTag(victim))
		})
		if err := victim.cmd.Process.Signal(syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
		select {
		case <-victim.exited:
			victim.exited <- nil // for the cleanup
		case <-time.After(30 * time.Second):
			t.Errorf("the zombie broker did not stop after finding its session gone\n%s", victim.output)
		}
	})
}

// victimTag is how `quire admin namespaces bundles` names a broker process.
func victimTag(p *quireProcess) string {
	for i, a := range p.cmd.Args {
		if a == "--broker-id" && i+1 < len(p.cmd.Args) {
			return "broker " + p.cmd.Args[i+1] + " "
		}
	}
	return "?"
}

// runBrokerDisruption: etcd, three bookies and two brokers as processes;
// an idempotent acks=all producer keeps producing while disrupt acts on the
// broker that leads partition 0. Every acknowledged record must then be
// consumed exactly once and in order per partition, and a record produced
// after the disruption must be acknowledged within resumeLimit.
func runBrokerDisruption(t *testing.T, what string, resumeLimit time.Duration, disrupt func(t *testing.T, victim *quireProcess, endpoint string)) {
	if testing.Short() {
		t.Skip("runs seven processes")
	}
	endpoint := startTestMeta(t)
	startBookieProcesses(t, endpoint, "a", "b", "c")
	kafkaAddrs := map[int32]string{}
	brokers := map[int32]*quireProcess{}
	for _, id := range []int32{1, 2} {
		kafkaAddrs[id] = freeAddr(t)
		brokers[id] = startQuire(t, "broker", "--meta-endpoints", endpoint, "--broker-id", strconv.Itoa(int(id)),
			"--kafka-addr", kafkaAddrs[id], "--http-addr", freeAddr(t), "--broker-session-ttl", "3s")
	}
	waitBrokers(t, endpoint, 2, brokers)

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	seeds := []string{kafkaAddrs[1], kafkaAddrs[2]}
	adminClient, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	if err != nil {
		t.Fatal(err)
	}
	defer adminClient.Close()
	adm := kadm.NewClient(adminClient)
	const topic, partitions = "failover", 4
	if _, err := adm.CreateTopic(ctx, partitions, 1, nil, topic); err != nil {
		t.Fatal(err)
	}
	md, err := adm.Metadata(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	victim := md.Topics[topic].Partitions[0].Leader
	if brokers[victim] == nil {
		t.Fatalf("partition 0 has leader %d", victim)
	}

	prod, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.DefaultProduceTopic(topic),
		kgo.RequiredAcks(kgo.AllISRAcks()), kgo.RecordDeliveryTimeout(90*time.Second),
		kgo.MaxBufferedRecords(2000))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()

	var mu sync.Mutex
	acked := map[string]time.Time{}
	var failed int
	var killedAt time.Time
	var firstAfterKill time.Duration
	stop := make(chan struct{})
	produced := make(chan struct{})
	go func() {
		defer close(produced)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			rec := &kgo.Record{Key: []byte("k" + strconv.Itoa(i%16)), Value: []byte("seq-" + strconv.Itoa(i))}
			// Only a record produced after the kill proves that the
			// partition is served again: acks of earlier ones may still sit
			// in the socket when the old owner dies.
			mu.Lock()
			afterKill := !killedAt.IsZero()
			mu.Unlock()
			prod.Produce(ctx, rec, func(r *kgo.Record, err error) {
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					failed++
					return
				}
				now := time.Now()
				acked[string(r.Value)] = now
				if afterKill && firstAfterKill == 0 && r.Partition == 0 {
					firstAfterKill = now.Sub(killedAt)
				}
			})
		}
	}()
	count := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(acked)
	}
	testutil.WaitForWithin(t, 60*time.Second, "2,000 acks before the disruption", func() bool { return count() >= 2000 })
	mu.Lock()
	killedAt = time.Now()
	mu.Unlock()
	disrupt(t, brokers[victim], endpoint)
	before := count()
	testutil.WaitForWithin(t, 60*time.Second, "production to resume on the surviving broker", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return firstAfterKill > 0 && len(acked) >= before+2000
	})
	close(stop)
	<-produced
	if err := prod.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	resume, total, nFailed := firstAfterKill, len(acked), failed
	mu.Unlock()
	t.Logf("broker %d %s after %d acks; partition 0 acknowledged again %v after that; %d acks in all, %d failed",
		victim, what, before, resume.Round(time.Millisecond), total, nFailed)
	if resume > resumeLimit {
		t.Errorf("production resumed %v after the broker was %s, want within %v", resume, what, resumeLimit)
	}
	if nFailed > 0 {
		t.Errorf("%d records failed (the producer should retry through the failover)", nFailed)
	}

	// Consume everything from the start on the surviving broker.
	survivor := int32(3) - victim
	bundles := runAdmin(t, "namespaces", "bundles", "public/default", "--meta-endpoints="+strings.TrimPrefix(endpoint, "http://"))
	if n := strings.Count(bundles, fmt.Sprintf("broker %d ", survivor)); n != 4 {
		t.Errorf("after the failover the survivor owns %d of 4 bundles:\n%s", n, bundles)
	}
	mu.Lock()
	defer mu.Unlock()
	checkReadBack(t, ctx, kafkaAddrs[survivor], topic, acked)
}

// checkReadBack consumes topic from the start to its end offsets and checks
// that every acknowledged value ("seq-N") is there exactly once, that no
// value is there twice, and that sequence numbers grow in each partition.
func checkReadBack[V any](t *testing.T, ctx context.Context, addr, topic string, acked map[string]V) int {
	t.Helper()
	seen := map[string]int{}
	lastSeq := map[int32]int{}
	for _, r := range consumeAll(t, ctx, addr, topic) {
		seen[string(r.Value)]++
		seq, _ := strconv.Atoi(strings.TrimPrefix(string(r.Value), "seq-"))
		if last, ok := lastSeq[r.Partition]; ok && seq <= last {
			t.Errorf("partition %d: seq %d after %d (out of order or duplicated)", r.Partition, seq, last)
		}
		lastSeq[r.Partition] = seq
	}
	var missing, dups []string
	for v := range acked {
		if seen[v] == 0 {
			missing = append(missing, v)
		}
	}
	for v, n := range seen {
		if n > 1 {
			dups = append(dups, fmt.Sprintf("%s×%d", v, n))
		}
	}
	sort.Strings(missing)
	sort.Strings(dups)
	if len(missing) > 0 || len(dups) > 0 {
		t.Fatalf("%d acknowledged records missing (%v), %d duplicated (%v)", len(missing), missing[:min(10, len(missing))], len(dups), dups[:min(10, len(dups))])
	}
	return len(seen)
}

// consumeAll reads every partition of topic from its start to the end
// offsets it has when the read begins, through the broker at addr, and
// returns the records in each partition's offset order.
func consumeAll(t *testing.T, ctx context.Context, addr, topic string) []*kgo.Record {
	t.Helper()
	cons, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	testutil.WaitForWithin(t, 30*time.Second, "the broker to answer", func() bool { return cons.Ping(ctx) == nil })
	ends, err := kadm.NewClient(cons).ListEndOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	want := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) { want[o.Partition] = o.Offset })
	got := map[int32]int64{}
	done := func() bool {
		for p, end := range want {
			if got[p] < end {
				return false
			}
		}
		return true
	}
	var out []*kgo.Record
	for !done() {
		fs := cons.PollFetches(ctx)
		if err := fs.Err0(); err != nil {
			t.Fatalf("consume: %v (have %v of %v)", err, got, want)
		}
		fs.EachRecord(func(r *kgo.Record) {
			got[r.Partition] = r.Offset + 1
			out = append(out, r)
		})
	}
	return out
}

func waitBrokers(t *testing.T, endpoint string, n int, procs map[int32]*quireProcess) {
	t.Helper()
	store, err := meta.NewEtcd(meta.EtcdConfig{Endpoints: []string{endpoint}})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	testutil.WaitForWithin(t, 30*time.Second, "brokers to register", func() bool {
		for id, p := range procs {
			select {
			case err := <-p.exited:
				t.Fatalf("broker %d exited: %v\n%s", id, err, p.output)
			default:
			}
		}
		res, err := store.List(context.Background(), "/quire/brokers/", meta.ListOptions{})
		return err == nil && len(res.KVs) == n
	})
}

// produceAndCommit writes n records (values "r0".."r<n-1>") to a new
// one-partition topic and commits offset commit for group.
func produceAndCommit(t *testing.T, ctx context.Context, addr, topic string, n int, group string, commit int64) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.DefaultProduceTopic(topic))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	if _, err := adm.CreateTopic(ctx, 1, 1, nil, topic); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		cl.Produce(ctx, &kgo.Record{Value: []byte("r" + strconv.Itoa(i))}, nil)
	}
	if err := cl.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	offs := kadm.Offsets{}
	offs.Add(kadm.Offset{Topic: topic, Partition: 0, At: commit, LeaderEpoch: -1})
	if resp, err := adm.CommitOffsets(ctx, group, offs); err != nil || resp.Error() != nil {
		t.Fatalf("commit: %v %v", err, resp.Error())
	}
}

// checkKept reads the topic back in full and the group's committed offset.
func checkKept(t *testing.T, ctx context.Context, addr, topic string, n int, group string, commit int64) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for i := 0; i < n; {
		fs := cl.PollFetches(ctx)
		if err := fs.Err0(); err != nil {
			t.Fatalf("consume after %d records: %v", i, err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			if want := "r" + strconv.Itoa(i); string(r.Value) != want || r.Offset != int64(i) {
				t.Fatalf("record %d: %q at offset %d, want %q", i, r.Value, r.Offset, want)
			}
			i++
		})
	}
	got, err := kadm.NewClient(cl).FetchOffsets(ctx, group)
	if err != nil {
		t.Fatal(err)
	}
	if o, ok := got.Lookup(topic, 0); !ok || o.At != commit {
		t.Fatalf("committed offset %+v, want %d", o, commit)
	}
}

// TestStandaloneKilledKeepsAckedRecords SIGKILLs a whole standalone (etcd,
// bookies and broker in one process) under an acks=all producer, restarts
// it on the same data dir and reads back every acknowledged record, once
// each and in order: an acknowledgement means fsync'd on two bookies.
func TestStandaloneKilledKeepsAckedRecords(t *testing.T) {
	if testing.Short() {
		t.Skip("runs quire processes")
	}
	dir := t.TempDir()
	kafkaAddr := freeAddr(t)
	args := []string{"standalone", "--data-dir", dir, "--http-addr", freeAddr(t), "--kafka-addr", kafkaAddr,
		"--meta-client-addr", freeAddr(t), "--meta-peer-addr", freeAddr(t),
		"--bookie-addrs", strings.Join([]string{freeAddr(t), freeAddr(t), freeAddr(t)}, ","), "--pulsar-addr", freeAddr(t)}
	p := startQuire(t, args...)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	prod, err := kgo.NewClient(kgo.SeedBrokers(kafkaAddr), kgo.DefaultProduceTopic("durable"),
		kgo.RequiredAcks(kgo.AllISRAcks()), kgo.RecordDeliveryTimeout(20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	testutil.WaitForWithin(t, 30*time.Second, "the standalone to serve Kafka", func() bool {
		select {
		case err := <-p.exited:
			t.Fatalf("standalone exited: %v\n%s", err, p.output)
		default:
		}
		return prod.Ping(ctx) == nil
	})
	if _, err := kadm.NewClient(prod).CreateTopic(ctx, 4, 1, nil, "durable"); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	acked := map[string]bool{}
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			prod.Produce(ctx, &kgo.Record{Key: []byte("k" + strconv.Itoa(i%8)), Value: []byte("seq-" + strconv.Itoa(i))}, func(r *kgo.Record, err error) {
				if err == nil {
					mu.Lock()
					acked[string(r.Value)] = true
					mu.Unlock()
				}
			})
		}
	}()
	testutil.WaitForWithin(t, 60*time.Second, "3,000 acks", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(acked) >= 3000
	})
	if err := p.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-p.exited
	p.exited <- nil // for the cleanup
	close(stop)
	// Its records can no longer be acknowledged (the server is gone), and
	// closing it fails them: a Produce blocked on a full buffer returns
	// now instead of when ctx ends.
	prod.Close()
	<-done
	mu.Lock()
	n := len(acked)
	mu.Unlock()

	p2 := startQuire(t, args...)
	// The restart and the read back get a context of their own: the
	// first one's time went to the producer, however long a loaded
	// machine made that.
	ctx, cancel = context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	probe, err := kgo.NewClient(kgo.SeedBrokers(kafkaAddr))
	if err != nil {
		t.Fatal(err)
	}
	defer probe.Close()
	deadline := time.Now().Add(60 * time.Second)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		md, err := kadm.NewClient(probe).Metadata(ctx, "durable")
		if err == nil && md.Topics["durable"].Err == nil && len(md.Topics["durable"].Partitions) == 4 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the restarted standalone does not serve the topic after 60s: %v\n%s", err, p2.output)
		}
		select {
		case err := <-p2.exited:
			t.Fatalf("restarted standalone exited: %v\n%s", err, p2.output)
		case <-tick.C:
		}
	}
	read := checkReadBack(t, ctx, kafkaAddr, "durable", acked)
	t.Logf("killed after %d acks; %d records read back after the restart", n, read)
}
