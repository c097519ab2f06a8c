package testutil

import "testing"

// TestFreePortNeverRepeats: a thousand ports are a thousand ports. Probing
// with a listener that closes repeats a port about every thousand calls
// here (the birthday bound over the ephemeral range), which is how two
// etcd members once got the same peer URL.
func TestFreePortNeverRepeats(t *testing.T) {
	seen := map[int]int{}
	for i := range 1000 {
		p := FreePort(t)
		if j, ok := seen[p]; ok {
			t.Fatalf("call %d returned port %d again (first at call %d)", i, p, j)
		}
		seen[p] = i
	}
}
