package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"quire/internal/testutil"
)

// Issue 20: a full disk never bricks a node. These tests run `quire
// standalone` with its data (or one bookie's) on a small file system made
// for the test, produce at full speed with acks=all until the bookies refuse
// writes, and check what a user sees: the process stays up, /healthz says
// read-only, the producer is told promptly (not after its timeout), every
// acknowledged record is read back, and once a topic is deleted the node is
// writable again without a restart.

// diskFullProduceTimeout is the producer's request timeout: the refusal
// must come well within it.
const diskFullProduceTimeout = 30 * time.Second

// smallFileSystem mounts a file system of sizeMB at a new directory and
// unmounts it when the test ends: ext4 on a loop device (no blocks reserved
// for root, as root would otherwise write into them), else tmpfs. It skips
// the test when this process may not mount (not root).
func smallFileSystem(t *testing.T, sizeMB int) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("mounting a small file system needs root")
	}
	base := t.TempDir()
	dir := filepath.Join(base, "mnt")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	image := filepath.Join(base, "fs.img")
	run := func(name string, args ...string) error {
		out, err := exec.Command(name, args...).CombinedOutput()
		if err != nil {
			return fmt.Errorf("%s %s: %v: %s", name, strings.Join(args, " "), err, out)
		}
		return nil
	}
	var mountErr error
	f, err := os.Create(image)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	if err := os.Truncate(image, int64(sizeMB)<<20); err != nil {
		t.Fatal(err)
	}
	if mountErr = run("mkfs.ext4", "-q", "-F", "-m", "0", image); mountErr == nil {
		mountErr = run("mount", "-o", "loop", image, dir)
	}
	kind := "ext4 (loop)"
	if mountErr != nil {
		t.Logf("no loop-mounted ext4 (%v); trying tmpfs", mountErr)
		kind = "tmpfs"
		if err := run("mount", "-t", "tmpfs", "-o", fmt.Sprintf("size=%dm", sizeMB), "tmpfs", dir); err != nil {
			t.Skipf("mount not permitted here: %v", err)
		}
	}
	t.Cleanup(func() {
		// The processes are gone by now (their cleanups ran first); a
		// lazy unmount still frees the mount if something holds it.
		if err := run("umount", dir); err != nil {
			t.Logf("%v; unmounting lazily", err)
			_ = run("umount", "-l", dir)
		}
	})
	t.Logf("%d MB %s at %s", sizeMB, kind, dir)
	return dir
}

// standaloneArgs are the flags of a standalone on fresh loopback ports with
// its data in dataDir and small bookie files (a small disk).
func standaloneArgs(t *testing.T, dataDir string, bookies int) (args []string, kafkaAddr, httpAddr string) {
	kafkaAddr, httpAddr = freeAddr(t), freeAddr(t)
	addrs := make([]string, bookies)
	for i := range addrs {
		addrs[i] = freeAddr(t)
	}
	args = []string{"standalone", "--data-dir", dataDir, "--http-addr", httpAddr, "--kafka-addr", kafkaAddr,
		"--meta-client-addr", freeAddr(t), "--meta-peer-addr", freeAddr(t), "--bookie-addrs", strings.Join(addrs, ","),
		"--journal-file-mb", "16", "--write-cache-mb", "16", "--read-cache-mb", "8", "--pulsar-addr", freeAddr(t)}
	return args, kafkaAddr, httpAddr
}

// healthz returns /healthz's status code and body ("" when it does not
// answer).
func healthz(httpAddr string) (int, string) {
	c := &http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get("http://" + httpAddr + "/healthz")
	if err != nil {
		return 0, ""
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	b.ReadFrom(resp.Body)
	return resp.StatusCode, b.String()
}

// fillResult is what producing into a filling disk came to.
type fillResult struct {
	acked       map[string]bool
	ackedOther  map[string]bool // of the other topic, if any
	failed      int
	firstErr    error
	lastAckAt   time.Time // the last acknowledgement before the first error
	firstErrAt  time.Time
	errLatency  time.Duration // from a failed record's produce call to its error, the first one
	ackedAfter  int           // acknowledgements after the first error
	errorsByMsg map[string]int
}

// produceUntilRefused produces 1 KiB records ("seq-N" values) at full speed
// with acks=all until stopWhen says so, bounded by limit; one record in ten
// goes to other, when given.
func produceUntilRefused(t *testing.T, p *quireProcess, kafkaAddr, topic, other string, limit time.Duration, stopWhen func(r *fillResult) bool) *fillResult {
	t.Helper()
	prod, err := kgo.NewClient(kgo.SeedBrokers(kafkaAddr), kgo.DefaultProduceTopic(topic),
		kgo.RequiredAcks(kgo.AllISRAcks()), kgo.ProduceRequestTimeout(diskFullProduceTimeout),
		// One retry: a refusal reaches the test instead of being retried
		// for ever, and a transient error still gets its second chance.
		kgo.RecordRetries(1), kgo.MaxBufferedRecords(4000),
		// Incompressible 1 KiB records: the disk fills with what is produced.
		kgo.ProducerBatchCompression(kgo.NoCompression()))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	ctx, cancel := context.WithTimeout(context.Background(), limit+2*diskFullProduceTimeout)
	defer cancel()
	res := &fillResult{acked: map[string]bool{}, ackedOther: map[string]bool{}, errorsByMsg: map[string]int{}}
	var mu sync.Mutex
	rng := rand.New(rand.NewPCG(1, 2))
	start := time.Now()
	var wg sync.WaitGroup
	for i := 0; ; i++ {
		mu.Lock()
		stop := stopWhen(res)
		mu.Unlock()
		if stop {
			break
		}
		if time.Since(start) > limit {
			mu.Lock()
			defer mu.Unlock()
			t.Fatalf("after %v of producing: %d acked, %d failed (first error %v); the condition never came\n%s",
				limit, len(res.acked), res.failed, res.firstErr, tail(p.output.String(), 3000))
		}
		select {
		case err := <-p.exited:
			t.Fatalf("quire exited while producing: %v\n%s", err, tail(p.output.String(), 5000))
		default:
		}
		called := time.Now()
		pad := make([]byte, 1000)
		for j := 0; j < len(pad); j += 8 {
			binary.LittleEndian.PutUint64(pad[j:], rng.Uint64())
		}
		wg.Add(1)
		rec := &kgo.Record{Key: []byte("k" + strconv.Itoa(i%16)), Value: []byte("seq-" + strconv.Itoa(i)),
			Headers: []kgo.RecordHeader{{Key: "pad", Value: pad}}}
		if other != "" && i%10 == 0 {
			rec.Topic = other
		}
		prod.Produce(ctx, rec, func(r *kgo.Record, err error) {
			defer wg.Done()
			now := time.Now()
			mu.Lock()
			defer mu.Unlock()
			if err == nil && r.Topic == other {
				res.ackedOther[string(r.Value)] = true
				return
			}
			if err == nil {
				res.acked[string(r.Value)] = true
				if res.firstErr == nil {
					res.lastAckAt = now
				} else {
					res.ackedAfter++
				}
				return
			}
			res.failed++
			res.errorsByMsg[err.Error()]++
			if res.firstErr == nil {
				res.firstErr, res.firstErrAt, res.errLatency = err, now, now.Sub(called)
			}
		})
	}
	// What is still buffered or in flight ends within the produce timeout
	// (and its one retry): it is answered, or refused.
	flushCtx, flushCancel := context.WithTimeout(ctx, 2*diskFullProduceTimeout+10*time.Second)
	defer flushCancel()
	if err := prod.Flush(flushCtx); err != nil {
		t.Logf("flush: %v (records still unanswered are neither acked nor failed)", err)
	}
	prod.Close()
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	return res
}

// waitUntil polls cond until it holds (true) or within has passed (false):
// for conditions whose failure the test reports itself and goes on.
func waitUntil(within time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(within)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		<-tick.C
	}
	return true
}

func randomBytes(n int) []byte {
	b := make([]byte, n)
	rng := rand.New(rand.NewPCG(3, 4))
	for i := 0; i+8 <= n; i += 8 {
		binary.LittleEndian.PutUint64(b[i:], rng.Uint64())
	}
	return b
}

func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

// TestDiskFullStandalone: standalone on a 512 MB file system is produced
// into until the disk is full. The process stays up, /healthz reports the
// bookies read-only (200, degraded), the producer's error comes well within
// its timeout, every acknowledged record is read back, and after the topic
// is deleted the node turns writable again by itself and takes a produce.
func TestDiskFullStandalone(t *testing.T) {
	runDiskFull(t, false)
}

// TestDiskFullStandaloneRestart is the same with a restart while the disk
// is full: the process comes back (read-only) and serves every
// acknowledged record.
func TestDiskFullStandaloneRestart(t *testing.T) {
	runDiskFull(t, true)
}

func runDiskFull(t *testing.T, restart bool) {
	if testing.Short() {
		t.Skip("fills a file system through a quire process")
	}
	dataDir := smallFileSystem(t, 512)
	// Another writer's file on the same disk: deleting it frees space
	// without the bookies' help, should deleting the topic not. 32 MiB:
	// with 64 the disk stood at 87% once the topic was deleted, and a
	// bookie whose next 16 MiB journal file is counted in its predicted
	// usage stayed just above the 90% it must go below to take writes
	// again (twice in this test's runs under a loaded machine) — the
	// thresholds doing their job on a 512 MB disk, not space left behind.
	filler, fillerRemoved := filepath.Join(dataDir, "filler"), false
	if err := os.WriteFile(filler, randomBytes(32<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	args, kafkaAddr, httpAddr := standaloneArgs(t, dataDir, 3)
	p := startQuire(t, args...)
	defer func() {
		if t.Failed() {
			_, body := healthz(httpAddr)
			t.Logf("/healthz at the end:\n%s\noutput:\n%s", body, tail(p.output.String(), 6000))
		}
	}()
	waitHTTP(t, p, "http://"+httpAddr+"/readyz", 60*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	adm := newAdmin(t, kafkaAddr)
	// Both topics fill the disk; "other" is kept when "full" is deleted to
	// free space, and must take writes again.
	const topic, other = "full", "other"
	if _, err := adm.CreateTopics(ctx, 4, 1, nil, topic, other); err != nil {
		t.Fatal(err)
	}

	// Until the producer has seen refusals for 3 s on end.
	res := produceUntilRefused(t, p, kafkaAddr, topic, other, 4*time.Minute, func(r *fillResult) bool {
		return r.firstErr != nil && time.Since(r.firstErrAt) > 3*time.Second
	})
	t.Logf("%d acked, %d failed, %d acked after the first error; errors: %v", len(res.acked), res.failed, res.ackedAfter, res.errorsByMsg)
	t.Logf("first error %v after its produce call, %v after the last acknowledgement before it (produce timeout %v)",
		res.errLatency.Round(time.Millisecond), res.firstErrAt.Sub(res.lastAckAt).Round(time.Millisecond), diskFullProduceTimeout)
	if len(res.acked) == 0 {
		t.Fatalf("nothing acknowledged before the disk filled\n%s", tail(p.output.String(), 5000))
	}

	// The process is up, and says why it takes no writes.
	select {
	case err := <-p.exited:
		t.Fatalf("quire exited on a full disk: %v\n%s", err, tail(p.output.String(), 5000))
	default:
	}
	waitReadOnly(t, p, httpAddr)

	// The refusal came promptly: well within the produce timeout.
	gap := res.firstErrAt.Sub(res.lastAckAt)
	if gap > diskFullProduceTimeout/5 {
		t.Errorf("the first produce error came %v after the last acknowledgement: more than a fifth of the produce timeout %v (errors: %v)",
			gap.Round(time.Millisecond), diskFullProduceTimeout, res.errorsByMsg)
	}
	for msg := range res.errorsByMsg {
		if strings.Contains(msg, "REQUEST_TIMED_OUT") {
			t.Errorf("producers were told REQUEST_TIMED_OUT (after the whole timeout) instead of a prompt refusal: %v", res.errorsByMsg)
			break
		}
	}

	if restart {
		if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-p.exited:
			p.exited <- err // for the cleanup
			t.Logf("stopped on a full disk: %v", err)
		case <-time.After(60 * time.Second):
			t.Errorf("no exit 60s after SIGTERM on a full disk; killing it\n%s", tail(p.output.String(), 3000))
			p.cmd.Process.Kill()
		}
		p = startQuire(t, args...)
		took := waitHTTP(t, p, "http://"+httpAddr+"/healthz", 90*time.Second)
		t.Logf("restarted on a full disk: /healthz 200 after %v", took)
		waitReadOnly(t, p, httpAddr)
		// Nothing is freed: the bookies stopped "out of space until a
		// checkpoint succeeds", their last entries only in their journals,
		// and the read-back below must find every acknowledged record all
		// the same (replayed entries served from memory; recovery copies
		// of entries a bookie holds acknowledged without writing).
	}

	readCtx, readCancel := context.WithTimeout(ctx, 3*time.Minute)
	defer readCancel()
	read := checkReadBack(t, readCtx, kafkaAddr, topic, res.acked)
	t.Logf("all %d acknowledged records read back (%d records in the topic)", len(res.acked), read)
	read = checkReadBack(t, readCtx, kafkaAddr, other, res.ackedOther)
	t.Logf("all %d acknowledged records of %s read back (%d records in the topic)", len(res.ackedOther), other, read)

	// Deleting the topic frees its space; the bookies turn writable by
	// themselves, and both the kept topic and a new one take records.
	if _, err := adm.DeleteTopics(ctx, topic); err != nil {
		t.Fatal(err)
	}
	writable := func() bool {
		code, body := healthz(httpAddr)
		return code == 200 && !strings.Contains(body, "read-only") && strings.Contains(body, "broker: ok")
	}
	if !waitUntil(90*time.Second, writable) {
		_, body := healthz(httpAddr)
		t.Errorf("the node is not writable 90 s after the topic was deleted (space not reclaimed); /healthz:\n%s", body)
		// Free space another way, so that what follows is still tested.
		if fillerRemoved {
			t.Fatal("the filler file is gone already: nothing else to free")
		}
		if err := os.Remove(filler); err != nil {
			t.Fatal(err)
		}
		testutil.WaitForWithin(t, 90*time.Second, "the node to be writable again after the filler file was deleted", writable)
	}
	_, body := healthz(httpAddr)
	t.Logf("writable again: /healthz\n%s", body)
	prod, err := kgo.NewClient(kgo.SeedBrokers(kafkaAddr), kgo.DefaultProduceTopic("after"),
		kgo.RequiredAcks(kgo.AllISRAcks()), kgo.RecordDeliveryTimeout(60*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	if _, err := adm.CreateTopic(ctx, 1, 1, nil, "after"); err != nil {
		t.Fatalf("create a topic after the disk was freed: %v", err)
	}
	for _, to := range []string{"after", other} {
		if err := prod.ProduceSync(ctx, &kgo.Record{Topic: to, Value: []byte("seq-0")}).FirstErr(); err != nil {
			t.Errorf("produce to %s after the disk was freed: %v", to, err)
		}
	}
}

// waitReadOnly waits until /healthz answers 200 with the bookies read-only.
func waitReadOnly(t *testing.T, p *quireProcess, httpAddr string) {
	t.Helper()
	var code int
	var body string
	testutil.WaitForWithin(t, 60*time.Second, "/healthz to report read-only bookies", func() bool {
		select {
		case err := <-p.exited:
			p.exited <- err
			t.Fatalf("quire exited: %v\n%s", err, tail(p.output.String(), 5000))
		default:
		}
		code, body = healthz(httpAddr)
		return code == 200 && strings.Contains(body, "status: degraded") && strings.Contains(body, "read-only")
	})
	t.Logf("/healthz %d:\n%s", code, body)
}

// TestDiskFullOneBookie: four bookies, only the fourth on a small file
// system. When it fills, writers replace it in their ensembles: producing
// goes on and nothing acknowledged is lost.
func TestDiskFullOneBookie(t *testing.T) {
	if testing.Short() {
		t.Skip("fills a file system through a quire process")
	}
	dataDir := t.TempDir()
	// The fourth bookie's directory is the small file system.
	small := smallFileSystem(t, 160)
	if err := os.Symlink(small, filepath.Join(dataDir, "bookie-4")); err != nil {
		t.Fatal(err)
	}
	args, kafkaAddr, httpAddr := standaloneArgs(t, dataDir, 4)
	p := startQuire(t, args...)
	waitHTTP(t, p, "http://"+httpAddr+"/readyz", 60*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	const topic = "onefull"
	if _, err := newAdmin(t, kafkaAddr).CreateTopic(ctx, 4, 1, nil, topic); err != nil {
		t.Fatal(err)
	}
	var fullAt time.Time
	var acksAtFull int
	res := produceUntilRefused(t, p, kafkaAddr, topic, "", 4*time.Minute, func(r *fillResult) bool {
		if fullAt.IsZero() {
			if _, body := healthz(httpAddr); strings.Contains(body, "bookie-4: degraded") {
				fullAt, acksAtFull = time.Now(), len(r.acked)
			}
			return false
		}
		// Ten seconds of producing with the fourth bookie full.
		return time.Since(fullAt) > 10*time.Second
	})
	_, body := healthz(httpAddr)
	t.Logf("%d acked (%d when bookie-4 turned read-only), %d failed; errors %v\n/healthz:\n%s",
		len(res.acked), acksAtFull, res.failed, res.errorsByMsg, body)
	if res.failed > 0 {
		t.Errorf("%d records failed though three bookies stayed writable: %v", res.failed, res.errorsByMsg)
	}
	if len(res.acked)-acksAtFull < 1000 {
		t.Errorf("only %d records acknowledged in the 10 s after bookie-4 filled: writers did not move to the other bookies", len(res.acked)-acksAtFull)
	}
	// (bookie-4 may be writable again by now: once its write cache is
	// checkpointed and journals recycled, and with no ledger writing to it,
	// its usage falls below the low threshold.)
	if strings.Contains(body, "bookie-1: degraded") || strings.Contains(body, "status: down") {
		t.Errorf("only bookie-4 had a full disk:\n%s", body)
	}
	read := checkReadBack(t, ctx, kafkaAddr, topic, res.acked)
	t.Logf("all %d acknowledged records read back (%d in the topic)", len(res.acked), read)
}

func newAdmin(t *testing.T, kafkaAddr string) *kadm.Client {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(kafkaAddr))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return kadm.NewClient(cl)
}
