package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"quire/internal/meta"
)

// runMainEnv makes the test binary behave as the quire binary, so tests can
// run real `quire` processes without a separate build step.
const runMainEnv = "QUIRE_TEST_RUN_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(runMainEnv) == "1" {
		main()
		os.Exit(0)
	}
	if endpoint := os.Getenv(ledgerWriterEnv); endpoint != "" {
		os.Exit(runLedgerWriter(endpoint))
	}
	os.Exit(m.Run())
}

var (
	portsMu    sync.Mutex
	portsGiven = map[int]bool{}
)

// freeAddr returns a loopback address with a free port below the kernel's
// ephemeral range (32768–60999 here), so that a process restarted on the
// same ports (a standalone after a kill) does not find one taken by some
// other test's outgoing connection in between.
func freeAddr(t *testing.T) string {
	t.Helper()
	portsMu.Lock()
	defer portsMu.Unlock()
	for range 1000 {
		port := 20000 + rand.IntN(12000)
		if portsGiven[port] {
			continue
		}
		ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			continue
		}
		addr := ln.Addr().String()
		ln.Close()
		portsGiven[port] = true // never hand the same port out twice
		return addr
	}
	t.Fatal("no free port in 20000-32000")
	return ""
}

// quireProcess is a running `quire` child process.
type quireProcess struct {
	cmd    *exec.Cmd
	output *bytes.Buffer
	exited chan error
}

func startQuire(t *testing.T, args ...string) *quireProcess {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), runMainEnv+"=1")
	out := &bytes.Buffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &quireProcess{cmd: cmd, output: out, exited: make(chan error, 1)}
	go func() { p.exited <- cmd.Wait() }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-p.exited
		if t.Failed() {
			// The process is gone, so its output is complete.
			t.Logf("output of quire %s (its end):\n%s", strings.Join(args, " "), tail(out.String(), 16<<10))
		}
	})
	return p
}

// waitHTTP waits until url answers 200, failing after limit.
func waitHTTP(t *testing.T, p *quireProcess, url string, limit time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	client := &http.Client{Timeout: time.Second}
	for {
		resp, err := client.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return time.Since(start)
			}
		}
		if time.Since(start) > limit {
			t.Fatalf("%s not 200 within %v (last: %v)\noutput:\n%s", url, limit, err, p.output)
		}
		select {
		case err := <-p.exited:
			t.Fatalf("quire exited: %v\noutput:\n%s", err, p.output)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func TestStandaloneHealthAndRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("runs quire processes")
	}
	dir := t.TempDir()
	httpAddr, clientAddr, peerAddr, kafkaAddr := freeAddr(t), freeAddr(t), freeAddr(t), freeAddr(t)
	bookies := []string{freeAddr(t), freeAddr(t), freeAddr(t)}
	args := []string{"standalone", "--data-dir", dir, "--http-addr", httpAddr, "--kafka-addr", kafkaAddr,
		"--meta-client-addr", clientAddr, "--meta-peer-addr", peerAddr, "--bookie-addrs", strings.Join(bookies, ","),
		"--pulsar-addr", freeAddr(t)}

	p := startQuire(t, args...)
	took := waitHTTP(t, p, "http://"+httpAddr+"/healthz", 5*time.Second)
	t.Logf("fresh data dir: /healthz 200 after %v", took)
	waitHTTP(t, p, "http://"+httpAddr+"/readyz", 5*time.Second)
	metrics := get(t, "http://"+httpAddr+"/metrics")
	if !strings.Contains(metrics, "go_goroutines") {
		t.Fatalf("/metrics lacks go_goroutines:\n%.500s", metrics)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	store, err := meta.NewEtcd(meta.EtcdConfig{Endpoints: []string{"http://" + clientAddr}})
	if err != nil {
		t.Fatal(err)
	}
	v, err := store.Create(ctx, "/test/kept", []byte("across restarts"))
	if res, lerr := store.List(ctx, "/quire/bookies/", meta.ListOptions{}); lerr != nil || len(res.KVs) != 3 {
		t.Fatalf("standalone registered %d bookies, want 3 (%v)", len(res.KVs), lerr)
	}
	if health := get(t, "http://"+httpAddr+"/healthz"); !strings.Contains(health, "bookie-3: ok") {
		t.Fatalf("/healthz lacks the bookies:\n%s", health)
	}
	store.Close()
	if err != nil {
		t.Fatal(err)
	}
	// A ledger written to the standalone bookies must survive the restart.
	lc, closeLedgers, err := newLedgerClient("http://"+clientAddr, "standalone-test")
	if err != nil {
		t.Fatal(err)
	}
	w, err := lc.Create(ctx, 3, 3, 2)
	if err != nil {
		t.Fatal(err)
	}
	for i := int64(0); i < 100; i++ {
		if _, err := w.Append(ctx, ledgerPayload(w.ID(), i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(ctx); err != nil {
		t.Fatal(err)
	}
	closeLedgers()
	// So must Kafka records and a group's committed offset.
	produceAndCommit(t, ctx, kafkaAddr, "kept", 1000, "g", 600)

	// Graceful shutdown on SIGTERM.
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-p.exited:
		p.exited <- err // for the cleanup
		if err != nil {
			t.Fatalf("exit after SIGTERM: %v\noutput:\n%s", err, p.output)
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("no exit 20s after SIGTERM\noutput:\n%s", p.output)
	}
	if !strings.Contains(p.output.String(), "quire standalone stopping") {
		t.Fatalf("no graceful stop logged:\n%s", p.output)
	}

	p2 := startQuire(t, args...)
	took = waitHTTP(t, p2, "http://"+httpAddr+"/healthz", 5*time.Second)
	t.Logf("restart: /healthz 200 after %v", took)
	store, err = meta.NewEtcd(meta.EtcdConfig{Endpoints: []string{"http://" + clientAddr}})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	kv, err := store.Get(ctx, "/test/kept")
	if err != nil || string(kv.Value) != "across restarts" || kv.Version != v {
		t.Fatalf("after restart: %+v %v", kv, err)
	}
	lc, closeLedgers, err = newLedgerClient("http://"+clientAddr, "standalone-test")
	if err != nil {
		t.Fatal(err)
	}
	defer closeLedgers()
	md, _, err := lc.ReadMetadata(ctx, w.ID())
	if err != nil || md.LastEntryID != 99 {
		t.Fatalf("ledger after restart: %+v %v", md, err)
	}
	entries, err := lc.Read(ctx, md, 0, 99)
	if err != nil {
		t.Fatal(err)
	}
	for i, e := range entries {
		if !bytes.Equal(e, ledgerPayload(md.ID, int64(i))) {
			t.Fatalf("entry %d changed across the restart", i)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "meta")); err != nil {
		t.Fatal(err)
	}
	checkKept(t, ctx, kafkaAddr, "kept", 1000, "g", 600)
}

func get(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%s: %d %s", url, resp.StatusCode, body)
	}
	return string(body)
}

// TestConfigPrecedence: flag > QUIRE_* env > YAML file > default.
func TestConfigPrecedence(t *testing.T) {
	file := filepath.Join(t.TempDir(), "quire.yaml")
	if err := os.WriteFile(file, []byte("data-dir: /from/yaml\nhttp-addr: 127.0.0.1:1\nlog-format: json\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	run := func(env map[string]string, args ...string) (dataDir, httpAddr, metaName string) {
		t.Helper()
		for k, v := range env {
			t.Setenv(k, v)
		}
		var o standaloneOptions
		cmd := &cobra.Command{Use: "x", RunE: func(cmd *cobra.Command, _ []string) error {
			return applyConfig(cmd, file)
		}}
		cmd.Flags().StringVar(&o.dataDir, "data-dir", "./quire-data", "")
		cmd.Flags().StringVar(&o.httpAddr, "http-addr", "127.0.0.1:8080", "")
		cmd.Flags().String("log-format", "text", "")
		addMetaMemberFlags(cmd, &o.meta, "meta-")
		cmd.SetArgs(args)
		if err := cmd.Execute(); err != nil {
			t.Fatal(err)
		}
		return o.dataDir, o.httpAddr, o.meta.name
	}
	d, h, n := run(nil)
	if d != "/from/yaml" || h != "127.0.0.1:1" || n != "quire" {
		t.Fatalf("yaml: %s %s %s", d, h, n)
	}
	d, h, n = run(map[string]string{"QUIRE_DATA_DIR": "/from/env", "QUIRE_META_NAME": "m1"})
	if d != "/from/env" || h != "127.0.0.1:1" || n != "m1" {
		t.Fatalf("env over yaml: %s %s %s", d, h, n)
	}
	d, _, _ = run(map[string]string{"QUIRE_DATA_DIR": "/from/env"}, "--data-dir", "/from/flag")
	if d != "/from/flag" {
		t.Fatalf("flag over env: %s", d)
	}

	// Unknown YAML keys are an error, not silently ignored.
	if err := os.WriteFile(file, []byte("no-such-flag: 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := &cobra.Command{Use: "x", RunE: func(cmd *cobra.Command, _ []string) error { return applyConfig(cmd, file) }}
	cmd.SetArgs(nil)
	if err := cmd.Execute(); err == nil || !strings.Contains(err.Error(), "no-such-flag") {
		t.Fatalf("unknown key: %v", err)
	}
}

func TestLogFormats(t *testing.T) {
	for _, format := range []string{"text", "json"} {
		var buf bytes.Buffer
		l, err := newLogger(&buf, "info", format)
		if err != nil {
			t.Fatal(err)
		}
		l.Info("hello", "k", 1)
		out := buf.String()
		if format == "json" && !strings.HasPrefix(out, "{") || format == "text" && !strings.Contains(out, "msg=hello") {
			t.Fatalf("%s: %q", format, out)
		}
	}
	if _, err := newLogger(io.Discard, "info", "xml"); err == nil {
		t.Fatal("xml accepted")
	}
	if _, err := newLogger(io.Discard, "loud", "text"); err == nil {
		t.Fatal(fmt.Sprint("bad level accepted"))
	}
}
