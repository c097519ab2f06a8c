package bookie

import (
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// BenchmarkAdd measures acknowledged (fsynced) 1 KiB adds on the real disk
// with many adds in flight, and reports the ratio to a baseline measured in
// the same run on the same disk: one 1 KiB write + fdatasync per entry into a
// preallocated file. The ratio is what group commit buys.
func BenchmarkAdd(b *testing.B) {
	for _, inFlight := range []int{1, 64, 512} {
		b.Run(fmt.Sprintf("inflight=%d", inFlight), func(b *testing.B) {
			dir := b.TempDir()
			baseline := rawFsyncBaseline(b, dir+"/baseline")
			cfg := DefaultConfig(dir+"/journal", dir+"/ledgers")
			cfg.Logger = slog.New(slog.DiscardHandler)
			cfg.JournalFileBytes = 16 << 20
			e, err := Open(cfg)
			if err != nil {
				b.Fatal(err)
			}
			defer e.Close()
			payload := make([]byte, 1024)
			for i := range payload {
				payload[i] = byte(i * 7)
			}
			sem := make(chan struct{}, inFlight)
			errs := make(chan error, 1)
			done := func(err error) {
				if err != nil {
					select {
					case errs <- err:
					default:
					}
				}
				<-sem
			}
			before := e.Stats()
			b.SetBytes(int64(len(payload)))
			b.ResetTimer()
			start := time.Now()
			for i := range b.N {
				sem <- struct{}{}
				e.Add(AddRequest{LedgerID: int64(i % 8), EntryID: int64(i / 8), LastAddConfirmed: int64(i/8) - 1, Payload: payload}, done)
			}
			for range inFlight {
				sem <- struct{}{}
			}
			elapsed := time.Since(start)
			b.StopTimer()
			select {
			case err := <-errs:
				b.Fatal(err)
			default:
			}
			after := e.Stats()
			rate := float64(b.N) / elapsed.Seconds()
			b.ReportMetric(rate, "entries/s")
			if syncs := after.JournalSyncs - before.JournalSyncs; syncs > 0 {
				b.ReportMetric(float64(b.N)/float64(syncs), "entries/fsync")
			}
			b.ReportMetric(rate/baseline, "x_raw_fsync")
		})
	}
}

// rawFsyncBaseline returns 1 KiB write+fdatasync operations per second into
// a preallocated file on the benchmark's disk.
func rawFsyncBaseline(b *testing.B, path string) float64 {
	b.Helper()
	fs := vfs.Default
	f, err := fs.Create(path, vfs.WriteCategoryUnspecified)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	const ops, size = 300, 1024
	if _, err := f.Write(make([]byte, ops*size)); err != nil {
		b.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		b.Fatal(err)
	}
	buf := make([]byte, size)
	start := time.Now()
	for i := range ops {
		if _, err := f.WriteAt(buf, int64(i*size)); err != nil {
			b.Fatal(err)
		}
		if err := f.SyncData(); err != nil {
			b.Fatal(err)
		}
	}
	return ops / time.Since(start).Seconds()
}
