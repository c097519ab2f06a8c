// Package lint holds docs/ARCHITECTURE.md to the code. It has tests only.
//
//   - TestFileMap reads the package table of docs/ARCHITECTURE.md and fails
//     for any import that a package's row does not allow, any package without
//     a row, and any row that is not true (a package that does not exist, a
//     dependency name it does not know, an import pointing up the table).
//   - TestCoresStayDeterministic parses the core files of the protocol state
//     machines (internal/ledger, internal/mlog, the Group of
//     internal/kafka/group) and fails when one reads a clock, starts a
//     goroutine, waits on a channel, or imports a package that does I/O or
//     locks. Which files are cores is listed in the test, so a new file in
//     those packages is classified on purpose.
//   - TestCheckersCatchBreakage runs both checkers on deliberately broken
//     inputs, so a clean run cannot come from checking nothing.
//
// It must never be imported, and never be made to pass by widening a row
// without saying why.
package lint
