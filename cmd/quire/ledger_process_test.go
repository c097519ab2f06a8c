package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"quire/internal/bookie/client"
	"quire/internal/ledger"
	"quire/internal/ledger/ledgerclient"
	"quire/internal/meta"
)

// ledgerWriterEnv makes the test binary a ledger writer process: it creates
// a ledger, appends continuously and prints every acknowledgement.
const ledgerWriterEnv = "QUIRE_TEST_LEDGER_WRITER"

func ledgerPayload(ledgerID, entry int64) []byte {
	return []byte(fmt.Sprintf("ledger %d entry %d %s", ledgerID, entry, strings.Repeat("q", int(entry%97))))
}

func newLedgerClient(endpoint string, name string) (*ledgerclient.Client, func(), error) {
	store, err := meta.NewEtcd(meta.EtcdConfig{Endpoints: []string{endpoint}})
	if err != nil {
		return nil, nil, err
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	bc := client.New(client.Config{Logger: quiet, RedialBackoffMin: 10 * time.Millisecond, RedialBackoffMax: 100 * time.Millisecond})
	lc := ledgerclient.New(ledgerclient.Config{Store: store, Bookies: bc, Tick: 20 * time.Millisecond, RequestTimeoutTicks: 50, Name: name, Logger: quiet})
	return lc, func() { bc.Close(); store.Close() }, nil
}

// runLedgerWriter is the child process. Output lines: "ledger ID", "ack N",
// "fenced". Bounded to one minute.
func runLedgerWriter(endpoint string) int {
	lc, closeAll, err := newLedgerClient(endpoint, "writer-process")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer closeAll()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	w, err := lc.Create(ctx, 3, 3, 2)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	var mu sync.Mutex
	out := bufio.NewWriter(os.Stdout)
	emit := func(line string) {
		mu.Lock()
		fmt.Fprintln(out, line)
		out.Flush()
		mu.Unlock()
	}
	emit(fmt.Sprintf("ledger %d", w.ID()))
	slots := make(chan struct{}, 64)
	fenced := make(chan struct{})
	var once sync.Once
	for entry := int64(0); ctx.Err() == nil; entry++ {
		select {
		case slots <- struct{}{}:
		case <-fenced:
			return 0
		case <-ctx.Done():
			return 2
		}
		w.AppendAsync(ledgerPayload(w.ID(), entry), func(id int64, err error) {
			<-slots
			switch {
			case err == nil:
				emit(fmt.Sprintf("ack %d", id))
			case errors.Is(err, ledger.ErrFenced):
				once.Do(func() { emit("fenced"); close(fenced) })
			}
		})
	}
	return 2
}

// writerProcess is a running writer child and the acknowledgements it printed.
type writerProcess struct {
	*quireProcess
	mu       sync.Mutex
	ledgerID int64
	acks     []int64
	fenced   bool
	lines    chan struct{}
}

func startWriterProcess(t *testing.T, endpoint string) *writerProcess {
	t.Helper()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), ledgerWriterEnv+"="+endpoint)
	stderr := &bytes.Buffer{}
	cmd.Stderr = stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	wp := &writerProcess{quireProcess: &quireProcess{cmd: cmd, output: stderr, exited: make(chan error, 1)}, ledgerID: -1, lines: make(chan struct{}, 1)}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			wp.mu.Lock()
			switch {
			case len(f) == 2 && f[0] == "ledger":
				wp.ledgerID, _ = strconv.ParseInt(f[1], 10, 64)
			case len(f) == 2 && f[0] == "ack":
				n, _ := strconv.ParseInt(f[1], 10, 64)
				wp.acks = append(wp.acks, n)
			case len(f) == 1 && f[0] == "fenced":
				wp.fenced = true
			}
			wp.mu.Unlock()
			select {
			case wp.lines <- struct{}{}:
			default:
			}
		}
		wp.exited <- cmd.Wait()
	}()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGCONT)
		cmd.Process.Kill()
	})
	return wp
}

// waitFor waits until cond holds on the writer's output.
func (wp *writerProcess) waitFor(t *testing.T, what string, limit time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.NewTimer(limit)
	defer deadline.Stop()
	for {
		wp.mu.Lock()
		ok := cond()
		wp.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-wp.lines:
		case <-deadline.C:
			t.Fatalf("writer: no %s within %v\nstderr:\n%s", what, limit, wp.output)
		}
	}
}

func startBookieProcesses(t *testing.T, endpoint string, zones ...string) []*quireProcess {
	t.Helper()
	var procs []*quireProcess
	var addrs []string
	for i, z := range zones {
		addr := freeAddr(t)
		addrs = append(addrs, addr)
		procs = append(procs, startQuire(t, "bookie", "--data-dir", t.TempDir(), "--listen", addr, "--id", fmt.Sprintf("b%d", i+1),
			"--zone", z, "--meta-endpoints", endpoint, "--http-addr", "", "--session-ttl", "3s"))
	}
	// Wait until all are registered.
	store, err := meta.NewEtcd(meta.EtcdConfig{Endpoints: []string{endpoint}})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	deadline := time.Now().Add(30 * time.Second)
	for {
		res, err := store.List(context.Background(), "/quire/bookies/", meta.ListOptions{})
		if err == nil && len(res.KVs) == len(zones) {
			return procs
		}
		if time.Now().After(deadline) {
			t.Fatalf("bookies not registered: %v %d", err, len(res.KVs))
		}
		select {
		case err := <-procs[0].exited:
			t.Fatalf("bookie exited: %v\n%s", err, procs[0].output)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func verifyRecovered(t *testing.T, lc *ledgerclient.Client, md ledger.Metadata, acks []int64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if len(acks) == 0 {
		t.Fatal("the writer acknowledged nothing")
	}
	maxAck := acks[len(acks)-1]
	if md.State != ledger.StateClosed || md.LastEntryID < maxAck {
		t.Fatalf("recovered %s up to %d, but entry %d was acknowledged", md.State, md.LastEntryID, maxAck)
	}
	entries, err := lc.Read(ctx, md, 0, md.LastEntryID)
	if err != nil {
		t.Fatal(err)
	}
	for i, p := range entries {
		if !bytes.Equal(p, ledgerPayload(md.ID, int64(i))) {
			t.Fatalf("entry %d of ledger %d differs", i, md.ID)
		}
	}
}

// TestLedgerWriterKilledAndRecovered: 3 bookie processes, a writer process
// SIGKILLed mid-stream, a second client recovers the ledger with every
// acknowledged entry present.
func TestLedgerWriterKilledAndRecovered(t *testing.T) {
	if testing.Short() {
		t.Skip("runs quire processes")
	}
	endpoint := startTestMeta(t)
	startBookieProcesses(t, endpoint, "a", "b", "c")
	wp := startWriterProcess(t, endpoint)
	wp.waitFor(t, "500 acknowledgements", 30*time.Second, func() bool { return len(wp.acks) >= 500 })
	wp.cmd.Process.Signal(syscall.SIGKILL)
	<-wp.exited
	wp.mu.Lock()
	acks, id := append([]int64(nil), wp.acks...), wp.ledgerID
	wp.mu.Unlock()

	lc, closeAll, err := newLedgerClient(endpoint, "recoverer")
	if err != nil {
		t.Fatal(err)
	}
	defer closeAll()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	md, err := lc.Recover(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	verifyRecovered(t, lc, md, acks)
	t.Logf("writer killed after %d acknowledgements; recovery closed ledger %d at entry %d", len(acks), id, md.LastEntryID)
}

// TestLedgerWriterPausedIsFenced: the writer is stopped (SIGSTOP) during the
// recovery and resumed (SIGCONT) afterwards: it gets fenced errors and no
// acknowledgement beyond what the recovery closed the ledger at.
func TestLedgerWriterPausedIsFenced(t *testing.T) {
	if testing.Short() {
		t.Skip("runs quire processes")
	}
	endpoint := startTestMeta(t)
	startBookieProcesses(t, endpoint, "a", "b", "c")
	wp := startWriterProcess(t, endpoint)
	wp.waitFor(t, "300 acknowledgements", 30*time.Second, func() bool { return len(wp.acks) >= 300 })
	if err := wp.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	wp.mu.Lock()
	id := wp.ledgerID
	wp.mu.Unlock()

	lc, closeAll, err := newLedgerClient(endpoint, "new-owner")
	if err != nil {
		t.Fatal(err)
	}
	defer closeAll()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	md, err := lc.Recover(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if err := wp.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	wp.waitFor(t, "fenced error", 30*time.Second, func() bool { return wp.fenced })
	wp.mu.Lock()
	acks := append([]int64(nil), wp.acks...)
	wp.mu.Unlock()
	for _, a := range acks {
		if a > md.LastEntryID {
			t.Fatalf("zombie writer got entry %d acknowledged after recovery closed the ledger at %d", a, md.LastEntryID)
		}
	}
	verifyRecovered(t, lc, md, acks)
	t.Logf("paused writer had %d acknowledgements; ledger closed at %d; after SIGCONT it was fenced", len(acks), md.LastEntryID)
}
