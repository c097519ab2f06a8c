package isr

import "testing"

func TestMemLog(t *testing.T) {
	l := NewMemLog()
	if got := l.EndOffsetForEpoch(3); got != (EpochEndOffset{Epoch: NoEpoch, EndOffset: -1}) {
		t.Fatalf("empty log: %+v", got)
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(l.Append(Batch{BaseOffset: 0, LeaderEpoch: 2, Records: [][]byte{[]byte("a"), []byte("b")}}))
	must(l.Append(Batch{BaseOffset: 2, LeaderEpoch: 2, Records: [][]byte{[]byte("c")}}))
	l.AssignEpochStart(4, 3) // a new leader, nothing appended yet
	must(l.Append(Batch{BaseOffset: 3, LeaderEpoch: 4, Records: [][]byte{[]byte("d"), []byte("e")}}))
	if err := l.Append(Batch{BaseOffset: 9, LeaderEpoch: 4, Records: [][]byte{[]byte("x")}}); err == nil {
		t.Fatal("append with a gap accepted")
	}
	for _, tc := range []struct {
		epoch int32
		want  EpochEndOffset
	}{
		{1, EpochEndOffset{1, 0}}, // older than every epoch: itself, ending where the first starts
		{2, EpochEndOffset{2, 3}},
		{3, EpochEndOffset{2, 3}}, // the largest epoch <= 3 is 2
		{4, EpochEndOffset{4, 5}},
		{7, EpochEndOffset{4, 5}},
		{NoEpoch, EpochEndOffset{NoEpoch, -1}},
	} {
		if got := l.EndOffsetForEpoch(tc.epoch); got != tc.want {
			t.Errorf("EndOffsetForEpoch(%d) = %+v, want %+v", tc.epoch, got, tc.want)
		}
	}
	// Read cuts the first batch at from and keeps batch boundaries.
	got := l.Read(1, 10)
	if len(got) != 3 || got[0].BaseOffset != 1 || len(got[0].Records) != 1 || got[1].BaseOffset != 2 || got[2].NextOffset() != 5 {
		t.Fatalf("Read(1) = %+v", got)
	}
	if got := l.Read(1, 1); len(got) != 1 {
		t.Fatalf("maxBatches ignored: %+v", got)
	}
	if got := l.Read(5, 10); got != nil {
		t.Fatalf("read at the end: %+v", got)
	}
	// Flushed prefix survives a crash; the epoch cache follows the log.
	l.Flush()
	must(l.Append(Batch{BaseOffset: 5, LeaderEpoch: 6, Records: [][]byte{[]byte("f")}}))
	if l.Unflushed() != 1 || l.LatestEpoch() != 6 {
		t.Fatalf("unflushed %d latest epoch %d", l.Unflushed(), l.LatestEpoch())
	}
	l.Crash()
	if l.EndOffset() != 5 || l.LatestEpoch() != 4 {
		t.Fatalf("after a crash: LEO %d latest epoch %d", l.EndOffset(), l.LatestEpoch())
	}
	// Truncating into epoch 4's start drops its entry; truncating at the
	// end drops an entry starting there (a leader that never appended).
	l.TruncateTo(3)
	if l.LatestEpoch() != 2 || l.FlushedOffset() != 3 {
		t.Fatalf("after truncation to 3: latest epoch %d flushed %d", l.LatestEpoch(), l.FlushedOffset())
	}
	l.AssignEpochStart(5, 3)
	l.TruncateTo(3)
	if l.LatestEpoch() != 2 {
		t.Fatalf("an epoch entry at the LEO survived a truncation there: %v", l.Epochs())
	}
	l.AssignEpochStart(1, 3) // older: ignored
	if l.LatestEpoch() != 2 {
		t.Fatal("an older epoch start was recorded")
	}
	o := NewMemLog()
	must(o.Append(Batch{BaseOffset: 0, LeaderEpoch: 2, Records: [][]byte{[]byte("a"), []byte("x")}}))
	if n := l.CommonPrefix(o, 10); n != 1 {
		t.Fatalf("common prefix %d, want 1", n)
	}
}
