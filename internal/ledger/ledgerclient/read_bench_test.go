package ledgerclient

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"quire/internal/bookie"
	"quire/internal/bookie/client"
	"quire/internal/bookie/node"
	"quire/internal/ledger"
	"quire/internal/meta"
)

// BenchmarkCatchUpRead measures a consumer catching up on a backlog: one
// ledger of 16 KiB entries (QUIRE_BENCH_READ_MB, default 200 MB) on three
// in-process bookies (E=3 Qw=3 Qa=2), read back in spans of 512 entries as
// the managed ledger's read-ahead asks for them (8 MiB). Every iteration
// starts cold: the bookies are restarted (empty write and read caches; the
// entries are in entry logs after the checkpoint of a clean close) and the
// page cache of their entry logs is dropped. It reports MB/s of payload.
//
//	go test ./internal/ledger/ledgerclient/ -run '^$' -bench CatchUpRead -benchtime 3x
func BenchmarkCatchUpRead(b *testing.B) {
	const entryBytes = 16 << 10
	const span = 512
	totalMB := 200
	if s := os.Getenv("QUIRE_BENCH_READ_MB"); s != "" {
		var err error
		if totalMB, err = strconv.Atoi(s); err != nil {
			b.Fatal(err)
		}
	}
	entries := totalMB << 20 / entryBytes
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()

	srv := meta.NewMemServer(meta.MemConfig{})
	type bookieDir struct{ id, dir, addr string }
	dirs := make([]bookieDir, 3)
	for i := range dirs {
		dirs[i] = bookieDir{id: fmt.Sprintf("b%d", i+1), dir: b.TempDir(), addr: "127.0.0.1:0"}
	}
	var nodes []*node.Node
	start := func() {
		nodes = nodes[:0]
		for i := range dirs {
			ecfg := bookie.DefaultConfig("", "")
			n, err := node.Start(ctx, node.Config{ID: dirs[i].id, DataDir: dirs[i].dir, ListenAddr: dirs[i].addr,
				Zone: string(rune('a' + i)), Store: srv.NewClient(), Engine: &ecfg, Logger: quiet})
			if err != nil {
				b.Fatal(err)
			}
			dirs[i].addr = n.Addr() // the same address after a restart
			nodes = append(nodes, n)
		}
	}
	stop := func() {
		for _, n := range nodes {
			if err := n.Close(); err != nil {
				b.Fatal(err)
			}
		}
	}
	newClient := func() *Client {
		bc := client.New(client.Config{Logger: quiet})
		b.Cleanup(bc.Close)
		return New(Config{Store: srv.NewClient(), Bookies: bc, Name: "bench", Logger: quiet})
	}

	start()
	w, err := newClient().Create(ctx, 3, 3, 2)
	if err != nil {
		b.Fatal(err)
	}
	payload := make([]byte, entryBytes)
	for i := range payload {
		payload[i] = byte(i * 7)
	}
	// At most the writer's in-flight bound unacknowledged at once.
	slots := make(chan struct{}, DefaultMaxInFlight)
	errs := make(chan error, entries)
	for range entries {
		slots <- struct{}{}
		w.AppendAsync(payload, func(_ int64, err error) { <-slots; errs <- err })
	}
	for range entries {
		if err := <-errs; err != nil {
			b.Fatal(err)
		}
	}
	if err := w.Close(ctx); err != nil {
		b.Fatal(err)
	}
	md := w.Metadata()
	if md.State != ledger.StateClosed || md.LastEntryID != int64(entries-1) {
		b.Fatalf("metadata %+v", md)
	}

	// QUIRE_BENCH_READ_PROFILE=file: a CPU profile of the first iteration's
	// reads alone (not the writes that set the ledger up, nor restarts).
	profile := os.Getenv("QUIRE_BENCH_READ_PROFILE")
	b.SetBytes(int64(entries) * entryBytes)
	b.ResetTimer()
	var cpu time.Duration // the process's CPU time (client and bookies) while reading
	var diskBytes int64   // bytes the process had read from storage meanwhile
	for range b.N {
		b.StopTimer()
		stop() // checkpoints: everything is in entry logs
		if os.Getenv("QUIRE_BENCH_READ_WARM") == "" {
			for _, d := range dirs {
				dropPageCache(b, d.dir)
			}
		}
		start()
		lc := newClient()
		if profile != "" {
			f, err := os.Create(profile)
			if err != nil {
				b.Fatal(err)
			}
			if err := pprof.StartCPUProfile(f); err != nil {
				b.Fatal(err)
			}
			defer f.Close()
		}
		cpuBefore, diskBefore := processCPU(b), storageReadBytes(b)
		b.StartTimer()
		for first := int64(0); first <= md.LastEntryID; first += span {
			got, err := lc.Read(ctx, md, first, min(first+span-1, md.LastEntryID))
			if err != nil {
				b.Fatal(err)
			}
			for _, p := range got {
				if len(p) != entryBytes {
					b.Fatalf("entry of %d bytes", len(p))
				}
			}
		}
		b.StopTimer()
		if profile != "" {
			pprof.StopCPUProfile()
			profile = ""
		}
		cpu += processCPU(b) - cpuBefore
		diskBytes += storageReadBytes(b) - diskBefore
		b.StartTimer()
	}
	b.StopTimer()
	// CPU per MB is what the machine's other work does not change much
	// (MB/s does, on a shared 2-core VM).
	b.ReportMetric(cpu.Seconds()*1e3/float64(b.N*totalMB), "cpu-ms/MB")
	// Bytes read from the disk per byte delivered: above 1, the kernel's
	// read-ahead or the bookies' read entries nobody asked for.
	b.ReportMetric(float64(diskBytes)/float64(int64(b.N)*int64(entries)*entryBytes), "disk-B/B")
	stop()
}

// storageReadBytes is what the process has caused to be read from storage
// (read_bytes of /proc/self/io: page-cache misses, read-ahead included).
func storageReadBytes(b *testing.B) int64 {
	data, err := os.ReadFile("/proc/self/io")
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "read_bytes: "); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				b.Fatal(err)
			}
			return n
		}
	}
	b.Fatal("no read_bytes in /proc/self/io")
	return 0
}

// processCPU is the CPU time (user and system) the process has used.
func processCPU(b *testing.B) time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// dropPageCache asks the kernel to drop the cached pages of the entry logs
// under dir, so that reads go to the disk.
func dropPageCache(b *testing.B, dir string) {
	names, err := filepath.Glob(filepath.Join(dir, "entrylog-*.log"))
	if err != nil || len(names) == 0 {
		b.Fatalf("no entry logs in %s: %v", dir, err)
	}
	for _, name := range names {
		f, err := os.Open(name)
		if err != nil {
			b.Fatal(err)
		}
		if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
			b.Fatal(err)
		}
		f.Close()
	}
}
