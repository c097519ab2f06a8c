// Package invariants switches on the checks that are too costly for
// production but must run in tests, the simulator and the fuzzers: a protocol
// core (ledger.Writer, mlog.ManagedLedger, group.Group, ...) re-checks its
// whole state against its stated invariants after every input, and panics
// with the violated values at the step that broke them, rather than leaving
// a checker to notice the consequence much later, or never.
//
// Build with `-tags invariants` to enable them:
//
//	go test -tags invariants ./internal/ledger/
//	go build -tags invariants -o /tmp/quire-inv ./cmd/quire
//
// Enabled is a constant, so `if invariants.Enabled { x.checkInvariants() }`
// compiles away in a production build. The model is Pebble's
// internal/invariants. This package must never import anything of Quire's.
package invariants
