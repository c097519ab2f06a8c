package main

import (
	"bytes"
	"strings"
	"testing"

	"quire/internal/bookie/registry"
)

// `quire admin bookies` shows each bookie's disk: free, total, used %.
func TestPrintBookiesDiskUsage(t *testing.T) {
	var out bytes.Buffer
	printBookies(&out, []registry.Info{
		{ID: "bookie-1", Addr: "127.0.0.1:3181", ReadOnly: true, FreeBytes: 15 << 20, TotalBytes: 400 << 20},
		{ID: "bookie-2", Addr: "127.0.0.1:3182"},
	}, map[string]string{"bookie-9": "z1"})
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	want := [][]string{
		{"ID", "ADDRESS", "ZONE", "STATE", "FREE", "TOTAL", "USED"},
		{"bookie-1", "127.0.0.1:3181", "-", "read-only", "15.0", "MiB", "400.0", "MiB", "96.3%"},
		{"bookie-2", "127.0.0.1:3182", "-", "writable", "-", "-", "-"},
		{"bookie-9", "-", "z1", "unregistered", "-", "-", "-"},
	}
	for i, w := range want {
		if got := strings.Fields(lines[i]); strings.Join(got, " ") != strings.Join(w, " ") {
			t.Errorf("line %d = %q, want %q", i, got, w)
		}
	}
}

func TestUsedPercent(t *testing.T) {
	for _, c := range []struct {
		free, total uint64
		want        float64
	}{{0, 0, 0}, {0, 100, 100}, {100, 100, 0}, {5, 100, 95}, {200, 100, 0}, {1, 3, 66.7}} {
		if got := usedPercent(c.free, c.total); got != c.want {
			t.Errorf("usedPercent(%d, %d) = %v, want %v", c.free, c.total, got, c.want)
		}
	}
}
