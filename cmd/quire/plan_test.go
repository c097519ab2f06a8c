package main

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestPlanCommand(t *testing.T) {
	out, err := runQuire(t, "plan")
	if err != nil {
		t.Fatalf("quire plan: %v\n%s", err, out)
	}
	for _, want := range []string{
		"50 MB/s peak, 20 MB/s average produce", "Storage", "Cross-zone traffic", "Recovery", "Metadata",
		"5.18 TB", "15.6 TB", "233 MB/s", "133 MB/s", "11,520 s (3.2 h)", "8,640 s (2.4 h)",
		"576 s (9.6 min)", "3,456 s (57.6 min)", "12,000 writes", "= 4,000 topics × 3 writes",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}

	out, err = runQuire(t, "plan", "--bookies-per-zone", "10", "--retention", "24h")
	if err != nil {
		t.Fatalf("quire plan --bookies-per-zone 10: %v\n%s", err, out)
	}
	if !strings.Contains(out, "30 bookies (10 per zone)") || !strings.Contains(out, "retention 1 day") {
		t.Errorf("flags not applied:\n%s", out)
	}

	if out, err := runQuire(t, "plan", "--copies", "4"); err == nil {
		t.Errorf("quire plan --copies 4 (more than zones) succeeded:\n%s", out)
	}
}

// TestPlanJSON checks --json decodes and that --help documents every field
// name the JSON has.
func TestPlanJSON(t *testing.T) {
	out, err := runQuire(t, "plan", "--json")
	if err != nil {
		t.Fatalf("quire plan --json: %v\n%s", err, out)
	}
	var doc map[string]map[string]json.RawMessage
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("quire plan --json: %v\n%s", err, out)
	}
	var with struct {
		Storage struct {
			WithCopies struct {
				Value float64 `json:"value"`
				Unit  string  `json:"unit"`
			} `json:"with_copies"`
		} `json:"storage"`
	}
	if err := json.Unmarshal([]byte(out), &with); err != nil || with.Storage.WithCopies.Unit != "TB" ||
		with.Storage.WithCopies.Value < 15.5 || with.Storage.WithCopies.Value > 15.6 {
		t.Errorf("storage.with_copies = %+v (%v)", with.Storage.WithCopies, err)
	}

	help, err := runQuire(t, "plan", "--help")
	if err != nil {
		t.Fatal(err)
	}
	for section, fields := range doc {
		if !strings.Contains(help, section) {
			t.Errorf("--help does not name section %q", section)
		}
		for name := range fields {
			if !strings.Contains(help, name) {
				t.Errorf("--help does not name %s.%s", section, name)
			}
		}
	}
}
