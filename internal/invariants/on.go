//go:build invariants

package invariants

// Enabled is true: this binary checks invariants (built with -tags invariants).
const Enabled = true
