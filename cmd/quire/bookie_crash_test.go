package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"quire/internal/bookie/client"
	"quire/internal/meta"
)

// startTestMeta runs an embedded etcd for tests on free loopback ports.
func startTestMeta(t *testing.T) string {
	t.Helper()
	e, err := meta.StartEmbedded(meta.EmbedConfig{
		DataDir: filepath.Join(t.TempDir(), "meta"), ClientURL: "http://" + freeAddr(t), PeerURL: "http://" + freeAddr(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	return e.Endpoint()
}

// crashPayload is the one value entry (ledger, entry) ever has, so any read
// can be checked against it.
func crashPayload(ledger, entry int64) []byte {
	r := rand.New(rand.NewPCG(uint64(ledger), uint64(entry)))
	b := make([]byte, 64+r.IntN(2000))
	binary.BigEndian.PutUint64(b, uint64(ledger))
	binary.BigEndian.PutUint64(b[8:], uint64(entry))
	for i := 16; i < len(b); i++ {
		b[i] = byte(r.Uint32())
	}
	return b
}

// TestBookieProcessCrashSafety runs `quire bookie` as a child process, adds
// with many requests in flight, SIGKILLs it at random moments, restarts it,
// and verifies that every acknowledged entry reads back byte-identical and
// that a fence survives.
func TestBookieProcessCrashSafety(t *testing.T) {
	if testing.Short() {
		t.Skip("runs and kills quire bookie processes")
	}
	rounds := 20
	if s := os.Getenv("QUIRE_CRASH_ROUNDS"); s != "" {
		rounds, _ = strconv.Atoi(s)
	}
	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(uint64(seed), 1))
	endpoint := startTestMeta(t)
	dataDir, addr := t.TempDir(), freeAddr(t)
	args := []string{"bookie", "--data-dir", dataDir, "--listen", addr, "--meta-endpoints", endpoint, "--http-addr", "",
		"--session-ttl", "3s", "--checkpoint-interval", "150ms", "--journal-file-mb", "4", "--write-cache-mb", "8"}

	c := client.New(client.Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), MaxInFlightPerConn: 512, RedialBackoffMin: 10 * time.Millisecond, RedialBackoffMax: 100 * time.Millisecond})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	const ledgers = 4
	const fencedLedger = 99
	acked := map[int64]map[int64]bool{} // ledger → acknowledged entries
	next := map[int64]int64{}           // ledger → next entry id to add
	fenced := false

	waitUp := func(p *quireProcess) {
		deadline := time.Now().Add(30 * time.Second)
		for {
			ictx, icancel := context.WithTimeout(ctx, time.Second)
			_, _, _, err := c.Info(ictx, addr)
			icancel()
			if err == nil {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("bookie not up after restart: %v\n%s", err, p.output)
			}
			select {
			case err := <-p.exited:
				t.Fatalf("bookie exited: %v\n%s", err, p.output)
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
	verify := func(which map[int64][]int64) int {
		type item struct{ l, e int64 }
		work := make(chan item)
		failures := make(chan string, 1)
		var wg sync.WaitGroup
		for w := 0; w < 32; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for it := range work {
					got, err := c.Read(ctx, addr, it.l, it.e, false)
					msg := ""
					switch {
					case err != nil:
						msg = fmt.Sprintf("seed %d: acknowledged entry %d/%d unreadable after restart: %v", seed, it.l, it.e, err)
					case !bytes.Equal(got.Payload, crashPayload(it.l, it.e)):
						msg = fmt.Sprintf("seed %d: entry %d/%d differs after restart", seed, it.l, it.e)
					}
					if msg != "" {
						select {
						case failures <- msg:
						default:
						}
					}
				}
			}()
		}
		n := 0
		for l, entries := range which {
			for _, e := range entries {
				work <- item{l, e}
				n++
			}
		}
		close(work)
		wg.Wait()
		select {
		case msg := <-failures:
			t.Fatal(msg)
		default:
		}
		return n
	}

	var lastRound map[int64][]int64
	for round := 0; round <= rounds; round++ {
		p := startQuire(t, args...)
		waitUp(p)
		verified := verify(lastRound)
		if fenced {
			err := c.Add(ctx, addr, client.AddRequest{LedgerID: fencedLedger, EntryID: 1, LastAddConfirmed: 0, Payload: crashPayload(fencedLedger, 1)})
			if !errors.Is(err, client.ErrFenced) {
				t.Fatalf("seed %d round %d: add to a fenced ledger after restart: %v", seed, round, err)
			}
		}
		if round == rounds {
			break
		}
		if round == 2 {
			if err := c.Add(ctx, addr, client.AddRequest{LedgerID: fencedLedger, EntryID: 0, LastAddConfirmed: -1, Payload: crashPayload(fencedLedger, 0)}); err != nil {
				t.Fatal(err)
			}
			if _, err := c.Read(ctx, addr, fencedLedger, -1, true); err != nil {
				t.Fatal(err)
			}
			fenced = true // the fence response came back: it must be durable
		}

		// Add with many in flight until the kill.
		var mu sync.Mutex
		thisRound := map[int64][]int64{}
		killAt := time.Duration(50+rng.IntN(400)) * time.Millisecond
		stop := make(chan struct{})
		var wg sync.WaitGroup
		slots := make(chan struct{}, 256)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int64(0); ; i++ {
				select {
				case <-stop:
					return
				case slots <- struct{}{}:
				}
				l := 1 + i%ledgers
				e := next[l]
				next[l]++
				wg.Add(1)
				c.AddAsync(addr, client.AddRequest{LedgerID: l, EntryID: e, LastAddConfirmed: e - 1, Payload: crashPayload(l, e)}, func(err error) {
					if err == nil {
						mu.Lock()
						thisRound[l] = append(thisRound[l], e)
						mu.Unlock()
					}
					<-slots
					wg.Done()
				})
			}
		}()
		time.Sleep(killAt) // the random moment of the crash: a schedule, not a wait for a condition
		p.cmd.Process.Signal(syscall.SIGKILL)
		err := <-p.exited
		p.exited <- err
		close(stop)
		wg.Wait()
		n := 0
		for l, es := range thisRound {
			sort.Slice(es, func(i, j int) bool { return es[i] < es[j] })
			if acked[l] == nil {
				acked[l] = map[int64]bool{}
			}
			for _, e := range es {
				acked[l][e] = true
			}
			n += len(es)
		}
		t.Logf("round %d: killed after %v with %d adds acknowledged (verified %d from the previous round)", round, killAt, n, verified)
		lastRound = thisRound
	}
	// Everything acknowledged in every round, after the final restart.
	all := map[int64][]int64{}
	total := 0
	for l, es := range acked {
		for e := range es {
			all[l] = append(all[l], e)
			total++
		}
	}
	if total == 0 {
		t.Fatal("no add was ever acknowledged")
	}
	verify(all)
	t.Logf("%d crashes, %d acknowledged entries all read back", rounds, total)
}
