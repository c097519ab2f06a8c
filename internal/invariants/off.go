//go:build !invariants

package invariants

// Enabled is false: invariant checks compile away (build with -tags
// invariants to turn them on).
const Enabled = false
