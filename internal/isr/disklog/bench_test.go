package disklog

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// BenchmarkAppendFlush measures AppendRaw+Flush of one batch on the real file
// system against a baseline measured in the same run, in the same directory,
// in alternating rounds: the same bytes appended to a plain file with an
// fdatasync after each write. It reports the log's MB/s, the baseline's, and the ratio of the
// log's time to the baseline's (1.0: the log costs nothing over the fsync'd
// write loop).
func BenchmarkAppendFlush(b *testing.B) {
	for _, size := range []int{1 << 10, 16 << 10, 256 << 10} {
		b.Run(fmt.Sprintf("batch=%dKiB", size>>10), func(b *testing.B) {
			dir := b.TempDir()
			rng := rand.New(rand.NewPCG(1, 2))
			payload := make([]byte, size)
			for i := range payload {
				payload[i] = byte(rng.Uint32())
			}
			stored := int64(batchHeaderLen + size)

			raw, err := vfs.Default.Create(dir+"/baseline", vfs.WriteCategoryUnspecified)
			if err != nil {
				b.Fatal(err)
			}
			defer raw.Close()
			buf := make([]byte, stored)
			l, err := Open(Config{FS: vfs.Default, Dir: dir + "/log", SegmentBytes: 256 << 20})
			if err != nil {
				b.Fatal(err)
			}
			defer l.Close()
			b.SetBytes(stored)
			b.ResetTimer()
			// The two loops alternate in rounds, so that drift in the
			// disk's speed (other load, the page cache filling) falls on
			// both alike.
			var baseline, logTime time.Duration
			const rounds = 10
			done := 0
			for round := range rounds {
				n := (b.N*(round+1))/rounds - done
				b.StopTimer()
				start := time.Now()
				for range n {
					copy(buf[batchHeaderLen:], payload)
					if _, err := raw.Write(buf); err != nil {
						b.Fatal(err)
					}
					if err := raw.SyncData(); err != nil {
						b.Fatal(err)
					}
				}
				baseline += time.Since(start)
				b.StartTimer()
				start = time.Now()
				for i := done; i < done+n; i++ {
					if err := l.AppendRaw(int64(i), 1, 1, int64(i), payload); err != nil {
						b.Fatal(err)
					}
					if err := l.Flush(); err != nil {
						b.Fatal(err)
					}
				}
				logTime += time.Since(start)
				done += n
			}
			b.StopTimer()
			mb := func(d time.Duration) float64 { return float64(stored) * float64(b.N) / d.Seconds() / 1e6 }
			b.ReportMetric(mb(baseline), "baseline-MB/s")
			b.ReportMetric(logTime.Seconds()/baseline.Seconds(), "ratio")
			b.Logf("N=%d: log %.1f MB/s (%v/op), baseline write+fdatasync %.1f MB/s (%v/op), ratio %.2f",
				b.N, mb(logTime), logTime/time.Duration(b.N), mb(baseline), baseline/time.Duration(b.N), logTime.Seconds()/baseline.Seconds())
		})
	}
}
