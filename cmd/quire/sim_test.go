package main

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

func TestParseSeedRange(t *testing.T) {
	for _, tc := range []struct {
		in          string
		first, last int64
		ok          bool
	}{
		{"1-100", 1, 100, true},
		{"7", 7, 7, true},
		{" 3-3 ", 3, 3, true},
		{"5-4", 0, 0, false},
		{"a-b", 0, 0, false},
		{"-3", 0, 0, false},
		{"", 0, 0, false},
	} {
		first, last, err := parseSeedRange(tc.in)
		if (err == nil) != tc.ok || tc.ok && (first != tc.first || last != tc.last) {
			t.Errorf("parseSeedRange(%q) = %d, %d, %v", tc.in, first, last, err)
		}
	}
}

// runQuire runs the quire command line in-process and returns its output.
func runQuire(t *testing.T, args ...string) (string, error) {
	t.Helper()
	root := newRootCommand()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs(args)
	err := root.Execute()
	return out.String(), err
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return lines[len(lines)-1]
}

func TestSimLedgerCommand(t *testing.T) {
	out, err := runQuire(t, "sim", "ledger", "--seeds", "1-8", "--workers", "3")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if got := lastLine(out); got != "sim ledger seeds=8 violations=0" {
		t.Fatalf("last line %q\n%s", got, out)
	}

	// A mutant the checkers catch: non-zero exit, one line per violating
	// seed, the first one's trace, and the summary last.
	out, err = runQuire(t, "sim", "ledger", "--seeds", "1-6", "--mutant", "no-fence-recovery-read")
	if !errors.Is(err, errSafetyViolations) {
		t.Fatalf("err = %v, want safety violations\n%s", err, out)
	}
	if got := lastLine(out); got != "sim ledger seeds=6 violations=6" {
		t.Fatalf("last line %q\n%s", got, out)
	}
	if !strings.Contains(out, "seed 1: fence-incomplete:") || !strings.Contains(out, "trace of seed 1 (replay: quire sim ledger --seed 1 --mutant no-fence-recovery-read)") {
		t.Fatalf("missing violation line or trace header:\n%s", out)
	}

	// Replaying one seed prints its whole trace and the same summary.
	out, err = runQuire(t, "sim", "ledger", "--seed", "3")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if !strings.Contains(out, "RECOVERY") || lastLine(out) != "sim ledger seeds=1 violations=0" {
		t.Fatalf("replay output:\n%s", out)
	}

	if _, err := runQuire(t, "sim", "ledger", "--mutant", "nope"); err == nil {
		t.Fatal("unknown mutant accepted")
	}
}

func TestSimTopicCommand(t *testing.T) {
	out, err := runQuire(t, "sim", "topic", "--seeds", "1-20", "--workers", "2")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if got := lastLine(out); got != "sim topic seeds=20 violations=0" {
		t.Fatalf("last line %q\n%s", got, out)
	}

	// The smallest range that catches early-trim: seed 1.
	out, err = runQuire(t, "sim", "topic", "--seeds", "1-1", "--mutant", "early-trim")
	if !errors.Is(err, errSafetyViolations) {
		t.Fatalf("err = %v, want safety violations\n%s", err, out)
	}
	if got := lastLine(out); got != "sim topic seeds=1 violations=1" {
		t.Fatalf("last line %q\n%s", got, out)
	}
	if !strings.Contains(out, "seed 1: ledger-deleted-early:") || !strings.Contains(out, "trace of seed 1 (replay: quire sim topic --seed 1 --mutant early-trim)") {
		t.Fatalf("missing violation line or trace header:\n%s", out)
	}

	out, err = runQuire(t, "sim", "topic", "--seed", "5")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if !strings.Contains(out, "OPENED") || lastLine(out) != "sim topic seeds=1 violations=0" {
		t.Fatalf("replay output:\n%s", out)
	}

	if _, err := runQuire(t, "sim", "topic", "--mutant", "nope"); err == nil {
		t.Fatal("unknown mutant accepted")
	}
}

func TestSimListsSubcommands(t *testing.T) {
	out, err := runQuire(t, "sim")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "ledger") || !strings.Contains(out, "topic") {
		t.Fatalf("quire sim does not list ledger and topic:\n%s", out)
	}
}
