package partition

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"testing"
)

var quietLogger = slog.New(slog.NewTextHandler(io.Discard, nil))

// FuzzBatches feeds arbitrary produce payloads through what the broker does
// with them: split into batches, parse, check the CRC, append to a
// partition, find a record by timestamp, read back. Nothing may panic, and
// whatever is accepted reads back byte for byte (but for the assigned base
// offset).
func FuzzBatches(f *testing.F) {
	f.Add(mkBatch(-1, -1, -1, 3, 100))
	f.Add(append(mkBatch(7, 0, 0, 2, 5), mkBatch(7, 0, 2, 1, 6)...))
	f.Add(mkBatch(-1, -1, -1, 1, 0)[:40])
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 49, 0, 0, 0, 0, 2})
	f.Fuzz(func(t *testing.T, records []byte) {
		batches, err := SplitBatches(records)
		if err != nil {
			return
		}
		p, err := Open(context.Background(), Config{Name: "fuzz", Log: newMemLog(), MaxBatchBytes: 1 << 20, Logger: quietLogger})
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close(context.Background())
		type kept struct {
			base int64
			raw  []byte
		}
		var accepted []kept
		for _, raw := range batches {
			b, err := ParseBatch(raw)
			if err != nil {
				continue
			}
			_ = CheckCRC(raw)
			firstRecordAtOrAfter(b, raw, b.BaseTimestamp+1)
			r := <-p.Append(context.Background(), raw)
			// A retry of a remembered idempotent batch is answered with the
			// original's offset (as Kafka does), whatever its bytes.
			if r.Err == nil && (len(accepted) == 0 || r.BaseOffset > accepted[len(accepted)-1].base) {
				accepted = append(accepted, kept{r.BaseOffset, raw})
			}
		}
		for _, k := range accepted {
			res, err := p.Read(context.Background(), k.base, 1)
			if err != nil {
				t.Fatalf("read back offset %d: %v", k.base, err)
			}
			got, err := SplitBatches(res.Bytes())
			if err != nil || len(got) == 0 {
				t.Fatalf("read back offset %d: %d batches, %v", k.base, len(got), err)
			}
			if !bytes.Equal(got[0][8:], k.raw[8:]) {
				t.Fatalf("offset %d read back different bytes", k.base)
			}
		}
	})
}
