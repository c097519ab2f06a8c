package ownership

import (
	"testing"

	"quire/internal/catalog"
)

func TestRendezvousSpread(t *testing.T) {
	bundles := catalog.BundlesOf("public/default", catalog.EqualBoundaries(64))
	brokers := []int32{1, 2, 3}
	count := map[int32]int{}
	for _, b := range bundles {
		choice := rendezvousChoice(b, brokers)
		if again := rendezvousChoice(b, []int32{3, 1, 2}); again != choice {
			t.Fatalf("choice depends on order: %d vs %d", choice, again)
		}
		count[choice]++
	}
	for _, id := range brokers {
		if count[id] < 10 {
			t.Fatalf("broker %d got %d of 64 bundles: %v", id, count[id], count)
		}
	}
	// Removing a broker moves only its bundles.
	for _, b := range bundles {
		before := rendezvousChoice(b, brokers)
		after := rendezvousChoice(b, []int32{1, 3})
		if before != 2 && after != before {
			t.Fatalf("%s moved from %d to %d though 2 left", b, before, after)
		}
	}
	if rendezvousChoice(bundles[0], nil) != -1 {
		t.Fatal("choice among no brokers")
	}
}
