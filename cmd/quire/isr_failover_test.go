package main

import (
	"context"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"quire/internal/isr"
	"quire/internal/meta"
	"quire/internal/testutil"
)

// TestISRBrokerFailover is issue 14's acceptance on real processes: etcd and
// three `quire broker` processes, the namespace in ISR mode (RF 3,
// min.insync.replicas 2), an idempotent acks=all producer. The leader of
// partition 0 is SIGKILLed under load: every acknowledged record is consumed
// exactly once and in order per partition, and the test records how long
// partition 0 did not acknowledge (the session TTL, 3 s here, plus the
// client's metadata refresh).
func TestISRBrokerFailover(t *testing.T) {
	runISRDisruption(t, "killed", func(t *testing.T, c *isrCluster, victim int32) {
		if err := c.brokers[victim].cmd.Process.Kill(); err != nil {
			t.Fatal(err)
		}
	})
}

// TestISRZombieLeaderFenced: the leader of partition 0 is SIGSTOPped past
// its session TTL; the controller elects another replica under a new leader
// epoch; the paused broker is then resumed. Its old-epoch state is fenced:
// it learns the new record, becomes a follower, truncates whatever it had
// appended that the new leader lacks, and rejoins the ISR; nothing
// acknowledged is lost or duplicated.
func TestISRZombieLeaderFenced(t *testing.T) {
	runISRDisruption(t, "paused past its session", func(t *testing.T, c *isrCluster, victim int32) {
		p := c.brokers[victim]
		if err := p.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		testutil.WaitForWithin(t, 30*time.Second, "another leader for partition 0", func() bool {
			md, err := c.survivorAdmin(victim).Metadata(context.Background(), c.topic)
			if err != nil {
				return false
			}
			pd := md.Topics[c.topic].Partitions[0]
			return pd.Leader >= 0 && pd.Leader != victim
		})
		if err := p.cmd.Process.Signal(syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
	})
}

// isrCluster is etcd (in the test process) and broker processes serving
// an ISR-mode namespace.
type isrCluster struct {
	endpoint   string
	store      meta.Store // the test's own client of etcd: partition records
	kafkaAddrs map[int32]string
	brokers    map[int32]*quireProcess
	isrDirs    map[int32]string // each broker's --isr-data-dir
	admins     map[int32]*kadm.Client
	topic      string
}

// isrClusterSpec is what startISRClusterWith builds: brokers broker
// processes (ids 1..brokers, one zone each), the namespace in ISR mode with
// replication factor brokers and minISR, and topic created with partitions
// and configs.
type isrClusterSpec struct {
	brokers, minISR int
	topic           string
	partitions      int
	configs         map[string]*string
}

// survivorAdmin is an admin client of a broker other than victim.
func (c *isrCluster) survivorAdmin(victim int32) *kadm.Client {
	for id := int32(1); int(id) <= len(c.brokers); id++ {
		if id != victim {
			return c.admins[id]
		}
	}
	return nil
}

// kill SIGKILLs broker id and waits until it is gone.
func (c *isrCluster) kill(t *testing.T, id int32) {
	t.Helper()
	p := c.brokers[id]
	if err := p.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-p.exited
	p.exited <- nil // for the cleanup
}

// restart starts broker id again with the arguments (and so the data
// directory and addresses) it had.
func (c *isrCluster) restart(t *testing.T, id int32) {
	t.Helper()
	c.brokers[id] = startQuire(t, c.brokers[id].cmd.Args[1:]...)
}

// record reads partition's record from the metadata store, as the
// controller last wrote it.
func (c *isrCluster) record(t *testing.T, ctx context.Context, partition string) isr.PartitionState {
	t.Helper()
	kv, err := c.store.Get(ctx, isr.PartitionKey(partition))
	if err != nil {
		t.Fatalf("partition record %s: %v", partition, err)
	}
	st, err := isr.UnmarshalState(kv.Value)
	if err != nil {
		t.Fatalf("partition record %s: %v", partition, err)
	}
	return st
}

func startISRCluster(t *testing.T, topic string, partitions int) *isrCluster {
	t.Helper()
	return startISRClusterWith(t, isrClusterSpec{brokers: 3, minISR: 2, topic: topic, partitions: partitions})
}

func startISRClusterWith(t *testing.T, spec isrClusterSpec) *isrCluster {
	t.Helper()
	topic, partitions := spec.topic, spec.partitions
	c := &isrCluster{endpoint: startTestMeta(t), kafkaAddrs: map[int32]string{}, brokers: map[int32]*quireProcess{},
		isrDirs: map[int32]string{}, admins: map[int32]*kadm.Client{}, topic: topic}
	dir := t.TempDir()
	for id := int32(1); int(id) <= spec.brokers; id++ {
		c.kafkaAddrs[id] = freeAddr(t)
		c.isrDirs[id] = filepath.Join(dir, "broker-"+strconv.Itoa(int(id)))
		c.brokers[id] = startQuire(t, "broker", "--meta-endpoints", c.endpoint, "--broker-id", strconv.Itoa(int(id)),
			"--kafka-addr", c.kafkaAddrs[id], "--http-addr", freeAddr(t), "--pulsar-addr", "", "--broker-session-ttl", "3s",
			"--zone", "z"+strconv.Itoa(int(id)), "--isr-data-dir", c.isrDirs[id])
	}
	waitBrokers(t, c.endpoint, spec.brokers, c.brokers)
	store, err := meta.NewEtcd(meta.EtcdConfig{Endpoints: []string{c.endpoint}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	c.store = store
	testutil.WaitForWithin(t, 30*time.Second, "the ISR broker registrations", func() bool {
		res, err := store.List(context.Background(), isr.BrokerPrefix, meta.ListOptions{})
		return err == nil && len(res.KVs) == spec.brokers
	})
	runAdmin(t, "namespaces", "set-replication", "public/default", "--mode", "isr", "--replication-factor", strconv.Itoa(spec.brokers),
		"--min-insync-replicas", strconv.Itoa(spec.minISR), "--meta-endpoints="+strings.TrimPrefix(c.endpoint, "http://"))
	for id, addr := range c.kafkaAddrs {
		cl, err := kgo.NewClient(kgo.SeedBrokers(addr))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(cl.Close)
		c.admins[id] = kadm.NewClient(cl)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// CreateTopics checks the replication factor against the brokers the
	// receiving broker sees live, which it learns by a watch. Each broker
	// is asked directly: a kgo client's Metadata may be answered from its
	// cache and lag behind the brokers' own view for many seconds.
	testutil.WaitForWithin(t, 30*time.Second, "every broker to see every broker", func() bool {
		for _, addr := range c.kafkaAddrs {
			md := rawRequest(t, ctx, addr, kmsg.NewPtrMetadataRequest()).(*kmsg.MetadataResponse)
			if len(md.Brokers) != spec.brokers {
				return false
			}
		}
		return true
	})
	if _, err := c.admins[1].CreateTopic(ctx, int32(partitions), int16(spec.brokers), spec.configs, topic); err != nil {
		t.Fatal(err)
	}
	testutil.WaitForWithin(t, 30*time.Second, "every partition led with a full ISR", func() bool {
		return isrOnline(ctx, c.admins[1], topic, partitions, spec.brokers, nil)
	})
	return c
}

// runISRDisruption: an idempotent acks=all producer keeps producing while
// disrupt acts on the leader of partition 0. Production must resume, every
// acknowledged record must then be consumed exactly once and in order per
// partition, and the victim, if it still runs, must be back in the ISR.
func runISRDisruption(t *testing.T, what string, disrupt func(t *testing.T, c *isrCluster, victim int32)) {
	if testing.Short() {
		t.Skip("runs three broker processes")
	}
	const topic, partitions = "isr-failover", 3
	c := startISRCluster(t, topic, partitions)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	md, err := c.admins[1].Metadata(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	victim := md.Topics[topic].Partitions[0].Leader
	if c.brokers[victim] == nil {
		t.Fatalf("partition 0 has leader %d", victim)
	}
	seeds := []string{c.kafkaAddrs[1], c.kafkaAddrs[2], c.kafkaAddrs[3]}
	prod, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.DefaultProduceTopic(topic),
		kgo.RequiredAcks(kgo.AllISRAcks()), kgo.RecordDeliveryTimeout(90*time.Second), kgo.MaxBufferedRecords(2000))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()

	var mu sync.Mutex
	acked := map[string]time.Time{}
	var failed int
	errs := map[string]int{}
	var disruptedAt time.Time
	var lastBefore time.Time // the last ack of partition 0 before the disruption
	var firstAfter time.Duration
	stop, produced := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(produced)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			rec := &kgo.Record{Key: []byte("k" + strconv.Itoa(i%16)), Value: []byte("seq-" + strconv.Itoa(i))}
			mu.Lock()
			after := !disruptedAt.IsZero()
			mu.Unlock()
			prod.Produce(ctx, rec, func(r *kgo.Record, err error) {
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					failed++
					errs[err.Error()]++
					return
				}
				now := time.Now()
				acked[string(r.Value)] = now
				if r.Partition != 0 {
					return
				}
				if disruptedAt.IsZero() {
					lastBefore = now
				} else if after && firstAfter == 0 {
					firstAfter = now.Sub(disruptedAt)
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
	disruptedAt = time.Now()
	mu.Unlock()
	disrupt(t, c, victim)
	before := count()
	testutil.WaitForWithin(t, 90*time.Second, "production to resume", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return firstAfter > 0 && len(acked) >= before+2000
	})
	close(stop)
	<-produced
	if err := prod.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	resume, total, nFailed := firstAfter, len(acked), failed
	gap := "no ack of partition 0 before"
	if !lastBefore.IsZero() {
		gap = (firstAfter + disruptedAt.Sub(lastBefore)).Round(time.Millisecond).String() + " since its last ack before"
	}
	mu.Unlock()
	t.Logf("leader %d of partition 0 %s after %d acks; partition 0 acknowledged a record produced after that %v later (%s); %d acks in all, %d failed",
		victim, what, before, resume.Round(time.Millisecond), gap, total, nFailed)
	if nFailed > 0 {
		mu.Lock()
		t.Errorf("%d records failed (the producer should retry through the failover): %v", nFailed, errs)
		mu.Unlock()
	}
	survivor := c.survivorAdmin(victim)
	backInISR := func() bool {
		md, err := survivor.Metadata(ctx, topic)
		if err != nil {
			return false
		}
		pd := md.Topics[topic].Partitions[0]
		return len(pd.ISR) == 3 && pd.Leader != victim
	}
	if what != "killed" {
		// The resumed broker either rejoins as a follower (its stale
		// leadership fenced by the new leader epoch, its divergent tail
		// truncated), or finds its broker session gone and stops, as a
		// zombie ledger-mode broker does; then it is started again on the
		// same data directory and must rejoin, truncating the same way.
		exited := false
		testutil.WaitForWithin(t, 60*time.Second, "the resumed broker to rejoin the ISR or stop", func() bool {
			select {
			case <-c.brokers[victim].exited:
				c.brokers[victim].exited <- nil // for the cleanup
				exited = true
				return true
			default:
			}
			return backInISR()
		})
		if exited {
			t.Logf("the resumed broker %d stopped (its session was gone); starting it again on its data directory", victim)
			c.restart(t, victim)
			testutil.WaitForWithin(t, 60*time.Second, "the restarted broker back in the ISR of partition 0", backInISR)
		}
	}
	for _, id := range []int32{1, 2, 3} {
		if id != victim {
			mu.Lock()
			checkReadBack(t, ctx, c.kafkaAddrs[id], topic, acked)
			mu.Unlock()
			break
		}
	}
}
