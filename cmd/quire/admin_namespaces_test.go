package main

import (
	"bytes"
	"strings"
	"testing"
)

func TestAdminTenantsNamespacesPolicies(t *testing.T) {
	ep := strings.TrimPrefix(startTestMeta(t), "http://")
	m := "--meta-endpoints=" + ep
	runAdmin(t, "tenants", "create", "acme", m)
	if out := runAdmin(t, "tenants", m); !strings.Contains(out, "acme") {
		t.Fatalf("tenants: %q", out)
	}
	runAdmin(t, "namespaces", "create", "acme/orders", m)
	if out := runAdmin(t, "namespaces", "acme", m); strings.TrimSpace(out) != "acme/orders" {
		t.Fatalf("namespaces: %q", out)
	}
	out := runAdmin(t, "namespaces", "set-persistence", "acme/orders", "--ensemble", "5", "--write-quorum", "3", "--ack-quorum", "2", m)
	if !strings.Contains(out, `"ensemble": 5`) {
		t.Fatalf("set-persistence: %q", out)
	}
	runAdmin(t, "namespaces", "set-retention", "acme/orders", "--time-minutes", "60", "--size-mb", "-1", m)
	runAdmin(t, "namespaces", "set-backlog-quota", "acme/orders", "--limit-bytes", "1000000", "--policy", "producer_exception", m)
	out = runAdmin(t, "namespaces", "policies", "acme/orders", m)
	for _, want := range []string{`"ensemble": 5`, `"timeMinutes": 60`, `"policy": "producer_exception"`} {
		if !strings.Contains(out, want) {
			t.Fatalf("policies lack %s:\n%s", want, out)
		}
	}
	// Invalid quorums are refused and change nothing.
	root := newRootCommand()
	var buf bytes.Buffer
	root.SetOut(&buf)
	root.SetErr(&buf)
	root.SetArgs([]string{"admin", "namespaces", "set-persistence", "acme/orders", "--ensemble", "2", "--write-quorum", "3", "--ack-quorum", "2", m})
	if err := root.Execute(); err == nil {
		t.Fatal("E=2 < Qw=3 accepted")
	}
	if out := runAdmin(t, "namespaces", "policies", "acme/orders", m); !strings.Contains(out, `"ensemble": 5`) {
		t.Fatalf("a refused change changed the policies:\n%s", out)
	}
	if out := runAdmin(t, "namespaces", "bundles", "acme/orders", m); strings.Count(out, "(unowned)") != 4 {
		t.Fatalf("bundles of a namespace no broker serves:\n%s", out)
	}
}
