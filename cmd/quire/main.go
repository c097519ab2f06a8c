// Command quire is the one Quire binary: every role (meta, bookie, broker,
// standalone) and every tool (admin, perf, plan, sim) is a subcommand.
package main

import (
	"fmt"
	"os"
)

func main() {
	if err := newRootCommand().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "quire:", err)
		os.Exit(1)
	}
}
