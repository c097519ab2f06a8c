package mlogclient

import (
	"context"
	"testing"
	"time"

	"quire/internal/mlog"
)

// BenchmarkTopicReads measures, in one run on the same bookies:
//
//   - tail: a consumer reading each entry right after it was produced — it
//     should be served from the owner's cache (bookie reads per entry ≈ 0);
//
//   - catch-up: a consumer reading the whole backlog from the bookies with a
//     cold cache, against the baseline of the bare ledger reads of the same
//     entries (what the topic layer adds on top of the ledger client).
//
//     go test ./internal/mlog/mlogclient -run '^$' -bench TopicReads -benchtime 1x
func BenchmarkTopicReads(b *testing.B) {
	const entries, size = 20_000, 1024
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	srv := startCluster(b)
	cfg := config(b, srv, "bench", mlog.Config{Rollover: mlog.RolloverPolicy{MaxEntries: 5000}, Retention: keepAll})
	cfg.CacheEntries = 1024
	tp, err := Open(ctx, "bench/ns/topic", cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer tp.Close(context.Background())
	data := make([]byte, size)

	// Tail: produce and read each entry at once.
	next := mlog.Position{}
	start := time.Now()
	for i := 0; i < entries; i++ {
		if _, err := tp.Append(ctx, data); err != nil {
			b.Fatal(err)
		}
		got, err := tp.Read(ctx, next, 16)
		if err != nil || len(got) == 0 {
			b.Fatalf("tail read: %v", err)
		}
		last := got[len(got)-1].Pos
		next = mlog.Position{LedgerID: last.LedgerID, EntryID: last.EntryID + 1}
	}
	tailElapsed := time.Since(start)
	st, _ := tp.Stats(ctx)
	b.ReportMetric(float64(st.CacheMisses)/float64(entries), "tail-bookie-reads/entry")
	b.Logf("tail: %d entries produced and read in %v; cache hits %d, bookie reads %d (%.4f per entry)",
		entries, tailElapsed.Round(time.Millisecond), st.CacheHits, st.CacheMisses, float64(st.CacheMisses)/entries)

	// Baseline: the bare ledger reads of every entry.
	ledgers, _ := tp.Ledgers(ctx)
	start = time.Now()
	var n int
	for _, l := range ledgers {
		if l.Entries == 0 {
			continue
		}
		md, _, err := cfg.Ledgers.ReadMetadata(ctx, l.ID)
		if err != nil {
			b.Fatal(err)
		}
		for first := int64(0); first < l.Entries; first += 500 {
			last := min(first+499, l.Entries-1)
			got, err := cfg.Ledgers.Read(ctx, md, first, last)
			if err != nil {
				b.Fatal(err)
			}
			n += len(got)
		}
	}
	baseline := time.Since(start)

	// Catch-up through the topic, from the start, with a cold cache (the
	// cache holds only the newest 1,024 entries).
	start = time.Now()
	from, read := mlog.Position{}, 0
	for read < entries {
		got, err := tp.Read(ctx, from, 500)
		if err != nil || len(got) == 0 {
			b.Fatalf("catch-up read after %d: %v", read, err)
		}
		read += len(got)
		last := got[len(got)-1].Pos
		from = mlog.Position{LedgerID: last.LedgerID, EntryID: last.EntryID + 1}
	}
	catchUp := time.Since(start)
	mb := float64(entries*size) / 1e6
	b.ReportMetric(mb/catchUp.Seconds(), "catchup-MB/s")
	b.ReportMetric(mb/baseline.Seconds(), "ledger-read-MB/s")
	b.ReportMetric(baseline.Seconds()/catchUp.Seconds(), "catchup/ledger-ratio")
	b.Logf("catch-up: %d entries in %v = %.1f MB/s; bare ledger reads of the same %d entries: %v = %.1f MB/s; ratio %.2f",
		read, catchUp.Round(time.Millisecond), mb/catchUp.Seconds(), n, baseline.Round(time.Millisecond), mb/baseline.Seconds(), baseline.Seconds()/catchUp.Seconds())
}
