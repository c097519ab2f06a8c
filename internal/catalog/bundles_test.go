package catalog

import (
	"fmt"
	"testing"
)

func TestEqualBoundaries(t *testing.T) {
	tests := []struct {
		n     int
		names []string
	}{
		{1, []string{"0x00000000_0xffffffff"}},
		{2, []string{"0x00000000_0x80000000", "0x80000000_0xffffffff"}},
		{4, []string{"0x00000000_0x40000000", "0x40000000_0x80000000", "0x80000000_0xc0000000", "0xc0000000_0xffffffff"}},
		{3, []string{"0x00000000_0x55555555", "0x55555555_0xaaaaaaaa", "0xaaaaaaaa_0xffffffff"}},
	}
	for _, tt := range tests {
		bounds := EqualBoundaries(tt.n)
		if err := ValidateBoundaries(bounds); err != nil {
			t.Fatalf("n=%d: %v", tt.n, err)
		}
		bundles := BundlesOf("t/n", bounds)
		if len(bundles) != len(tt.names) {
			t.Fatalf("n=%d: %d bundles", tt.n, len(bundles))
		}
		for i, b := range bundles {
			if b.Range() != tt.names[i] {
				t.Errorf("n=%d bundle %d = %s, want %s", tt.n, i, b.Range(), tt.names[i])
			}
			back, err := ParseBundle("t/n", b.Range())
			if err != nil || back != b {
				t.Errorf("ParseBundle(%s) = %v %v", b.Range(), back, err)
			}
		}
	}
	for _, n := range []int{5, 7, 64, 1000} {
		if err := ValidateBoundaries(EqualBoundaries(n)); err != nil {
			t.Errorf("n=%d: %v", n, err)
		}
	}
}

// TestBundleForCoversHashSpace: every hash, the edges included, falls in
// exactly one bundle, and BundleFor picks that one.
func TestBundleForCoversHashSpace(t *testing.T) {
	for _, bounds := range [][]uint32{EqualBoundaries(1), EqualBoundaries(4), EqualBoundaries(7), {0, 1, 2, 0x80000000, FullUpperBound - 1, FullUpperBound}} {
		bundles := BundlesOf("t/n", bounds)
		hashes := []uint32{0, 1, 2, 0x3fffffff, 0x40000000, 0x7fffffff, 0x80000000, FullUpperBound - 1, FullUpperBound}
		for _, b := range bounds {
			hashes = append(hashes, b, b-1, b+1)
		}
		for i := range 2000 {
			hashes = append(hashes, HashTopicName(fmt.Sprintf("persistent://t/n/topic-%d-partition-%d", i/10, i%10)))
		}
		for _, h := range hashes {
			containing := 0
			for _, b := range bundles {
				if b.Contains(h) {
					containing++
				}
			}
			got := bundleForHash("t/n", bounds, h)
			if containing != 1 || !got.Contains(h) {
				t.Fatalf("bounds %x hash %#x: in %d bundles, BundleFor gave %s", bounds, h, containing, got)
			}
		}
	}
}

// TestBundleForStable pins the hash: it is part of the persistent layout, so
// a change here moves every topic to another bundle.
func TestBundleForStable(t *testing.T) {
	bounds := EqualBoundaries(4)
	tests := []struct {
		name string
		hash uint32
	}{
		{"", 0},
		{"123456789", fmix32(0xe3069283)}, // the CRC-32C check value, mixed
	}
	for _, tt := range tests {
		if got := HashTopicName(tt.name); got != tt.hash {
			t.Errorf("HashTopicName(%q) = %#x, want %#x", tt.name, got, tt.hash)
		}
	}
	name := PartitionName("public/default", "orders", 0)
	first := BundleFor("public/default", bounds, name)
	for range 3 {
		if again := BundleFor("public/default", bounds, name); again != first {
			t.Fatalf("unstable: %s then %s", first, again)
		}
	}
	// Partitions of one topic spread over bundles.
	seen := map[Bundle]bool{}
	for i := range int32(64) {
		seen[BundleFor("public/default", bounds, PartitionName("public/default", "orders", i))] = true
	}
	if len(seen) != 4 {
		t.Fatalf("64 partitions landed in %d of 4 bundles", len(seen))
	}
	// The 8 partitions of 100 topics spread evenly (a plain CRC put 8
	// partitions of one topic in 2 of 4 bundles).
	count := map[Bundle]int{}
	for i := range 100 {
		for p := range int32(8) {
			count[BundleFor("public/default", bounds, PartitionName("public/default", fmt.Sprintf("topic-%d", i), p))]++
		}
	}
	for b, n := range count {
		if n < 150 || n > 250 {
			t.Errorf("bundle %s holds %d of 800 partitions, want 200 ± 50", b, n)
		}
	}
	clustered := 0
	for i := range 100 {
		in := map[Bundle]bool{}
		for p := range int32(8) {
			in[BundleFor("public/default", bounds, PartitionName("public/default", fmt.Sprintf("t%d", i), p))] = true
		}
		if len(in) <= 2 {
			clustered++
		}
	}
	// Independent uniform hashes put a topic's 8 partitions in ≤ 2 of 4
	// bundles about 2% of the time.
	if clustered > 10 {
		t.Errorf("%d of 100 topics have their 8 partitions in at most 2 of 4 bundles", clustered)
	}
}

func TestSplitBoundaries(t *testing.T) {
	bounds := EqualBoundaries(2)
	next, ok := splitBoundaries(bounds, Bundle{Namespace: "t/n", Lower: 0x80000000, Upper: FullUpperBound})
	if !ok || len(next) != 4 || next[2] != 0xc0000000 || !refines(bounds, next) || refines(next, bounds) {
		t.Fatalf("split: %x %v", next, ok)
	}
	if _, ok := splitBoundaries([]uint32{0, 1, FullUpperBound}, Bundle{Namespace: "t/n", Lower: 0, Upper: 1}); ok {
		t.Fatal("split a bundle of one hash")
	}
}
