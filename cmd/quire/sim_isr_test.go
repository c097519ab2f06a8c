package main

import (
	"errors"
	"strings"
	"testing"
)

func TestSimISRRange(t *testing.T) {
	out, err := runQuire(t, "sim", "isr", "--seeds", "1-20")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if got := lastLine(out); got != "sim isr seeds=20 violations=0" {
		t.Fatalf("last line %q\n%s", got, out)
	}
	if !strings.Contains(out, "fault shapes reached (seeds):") || !strings.Contains(out, "permitted loss") {
		t.Fatalf("no summary of fault shapes and permitted loss:\n%s", out)
	}
}

func TestSimISRMutantExitsNonZero(t *testing.T) {
	out, err := runQuire(t, "sim", "isr", "--seeds", "4-7", "--mutant", "hw-ignores-min-isr")
	if !errors.Is(err, errSafetyViolations) {
		t.Fatalf("err %v, want a safety violation\n%s", err, out)
	}
	if got := lastLine(out); !strings.HasPrefix(got, "sim isr seeds=4 violations=") || got == "sim isr seeds=4 violations=0" {
		t.Fatalf("last line %q", got)
	}
}

func TestSimISRReplay(t *testing.T) {
	out, err := runQuire(t, "sim", "isr", "--seed", "3")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if got := lastLine(out); got != "sim isr seeds=1 violations=0" || !strings.Contains(out, "became-leader") {
		t.Fatalf("last line %q or no trace", got)
	}
}

func TestSimScenarioK3(t *testing.T) {
	out, err := runQuire(t, "sim", "scenario", "K3")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if got := lastLine(out); got != "scenario K3 outcome=as-seed acked=9556 lost=123" {
		t.Fatalf("last line %q\n%s", got, out)
	}
	out, err = runQuire(t, "sim", "scenario", "K3", "--durable")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if got := lastLine(out); !strings.HasPrefix(got, "scenario K3 outcome=as-seed") || !strings.HasSuffix(got, " lost=0") {
		t.Fatalf("durable last line %q", got)
	}
}

func TestSimScenarioList(t *testing.T) {
	out, err := runQuire(t, "sim", "scenario", "--list")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"K1 ", "K21 ", "P1 ", "P13 "} {
		if !strings.Contains(out, "\n"+name) && !strings.HasPrefix(out, name) {
			t.Errorf("--list lacks %s:\n%s", name, out)
		}
	}
}
