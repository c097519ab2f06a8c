package main

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"quire/internal/testutil"
)

// freePortRun returns a host:port whose port and the n-1 after it are
// free (and not handed out before).
func freePortRun(t *testing.T, n int) string {
	t.Helper()
	portsMu.Lock()
	defer portsMu.Unlock()
	for range 1000 {
		base := 20000 + int(time.Now().UnixNano()%12000)
		ok := true
		for p := base; p < base+n && ok; p++ {
			ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
			if err != nil || portsGiven[p] {
				ok = false
			}
			if err == nil {
				ln.Close()
			}
		}
		if ok {
			for p := base; p < base+n; p++ {
				portsGiven[p] = true
			}
			return fmt.Sprintf("127.0.0.1:%d", base)
		}
	}
	t.Fatalf("no run of %d free ports", n)
	return ""
}

// TestStandaloneISRMode: `quire standalone --mode isr` runs three brokers
// (Kafka on three consecutive ports) with the Kafka namespace in ISR mode:
// a topic created with the default replication factor has three replicas
// on three zones, all in sync; acks=all records and a group's committed
// offset survive a stop (SIGTERM) and a restart on the same data
// directory. (A SIGKILL of the whole process, an unclean shutdown of every
// replica at once, is TestStandaloneISRKilledRecovers.)
func TestStandaloneISRMode(t *testing.T) {
	if testing.Short() {
		t.Skip("runs quire processes")
	}
	dir := t.TempDir()
	kafkaAddr := freePortRun(t, 3)
	httpAddr, clientAddr, peerAddr := freeAddr(t), freeAddr(t), freeAddr(t)
	bookies := []string{freeAddr(t), freeAddr(t), freeAddr(t)}
	args := []string{"standalone", "--mode", "isr", "--data-dir", dir, "--http-addr", httpAddr, "--kafka-addr", kafkaAddr,
		"--meta-client-addr", clientAddr, "--meta-peer-addr", peerAddr, "--bookie-addrs", strings.Join(bookies, ","),
		"--pulsar-addr", ""}
	p := startQuire(t, args...)
	waitHTTP(t, p, "http://"+httpAddr+"/readyz", 20*time.Second)

	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	host, port, _ := net.SplitHostPort(kafkaAddr)
	first, _ := strconv.Atoi(port)
	var seeds []string
	for i := range 3 {
		seeds = append(seeds, net.JoinHostPort(host, strconv.Itoa(first+i)))
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.DefaultProduceTopic("replicated"), kgo.RequiredAcks(kgo.AllISRAcks()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	if _, err := adm.CreateTopic(ctx, 1, -1, nil, "replicated"); err != nil {
		t.Fatal(err)
	}
	var md kadm.Metadata
	testutil.WaitForWithin(t, 30*time.Second, "three brokers and a partition with an ISR of 3", func() bool {
		md, err = adm.Metadata(ctx, "replicated")
		p := md.Topics["replicated"].Partitions[0]
		return err == nil && len(md.Brokers) == 3 && p.Leader >= 0 && len(p.Replicas) == 3 && len(p.ISR) == 3
	})
	racks := map[string]bool{}
	for _, b := range md.Brokers {
		if b.Rack != nil {
			racks[*b.Rack] = true
		}
	}
	if len(racks) != 3 {
		t.Fatalf("brokers %+v: want three racks", md.Brokers)
	}
	const n = 500
	for i := range n {
		cl.Produce(ctx, &kgo.Record{Value: []byte("r" + strconv.Itoa(i))}, func(_ *kgo.Record, err error) {
			if err != nil {
				t.Errorf("produce: %v", err)
			}
		})
	}
	if err := cl.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	offs := kadm.Offsets{}
	offs.Add(kadm.Offset{Topic: "replicated", Partition: 0, At: 300, LeaderEpoch: -1})
	if resp, err := adm.CommitOffsets(ctx, "g", offs); err != nil || resp.Error() != nil {
		t.Fatalf("commit: %v %v", err, resp.Error())
	}
	checkKept(t, ctx, seeds[0], "replicated", n, "g", 300)

	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-p.exited:
		p.exited <- err // for the cleanup
		if err != nil {
			t.Fatalf("exit after SIGTERM: %v\noutput:\n%s", err, p.output)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("no exit 30s after SIGTERM\noutput:\n%s", p.output)
	}
	p2 := startQuire(t, args...)
	waitHTTP(t, p2, "http://"+httpAddr+"/readyz", 30*time.Second)
	checkKept(t, ctx, seeds[1], "replicated", n, "g", 300)
}
