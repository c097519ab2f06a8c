package admin

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

func TestHealthEndpoints(t *testing.T) {
	h := NewHealth()
	var metaErr error
	h.Register("meta", func(context.Context) error { return metaErr })
	h.Register("bookie-1", func(context.Context) error { return nil })
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "quire_test_total", Help: "test"})
	reg.MustRegister(c)
	c.Add(3)
	srv := httptest.NewServer(Mux(Config{Health: h, Gatherer: reg}))
	defer srv.Close()

	check := func(path string, wantCode int, wantBody string) {
		t.Helper()
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != wantCode || !strings.Contains(string(body), wantBody) {
			t.Fatalf("%s = %d %q, want %d containing %q", path, resp.StatusCode, body, wantCode, wantBody)
		}
	}
	check("/healthz", 200, "bookie-1: ok\nmeta: ok")
	check("/readyz", 503, "starting or stopping") // healthy but not yet ready
	h.SetReady(true)
	check("/readyz", 200, "meta: ok")
	metaErr = errors.New("no leader")
	check("/healthz", 503, "meta: no leader")
	check("/readyz", 503, "meta: no leader")
	check("/metrics", 200, "quire_test_total 3")

	// Degraded (a read-only bookie) is healthy and ready: reads are served.
	metaErr = nil
	h.RegisterReporter("bookie-2", func(context.Context) Report {
		return Report{Status: StatusDegraded, Reason: "read-only: disk full", Detail: map[string]any{"used_percent": 97.5}}
	})
	check("/healthz", 200, "status: degraded\nbookie-1: ok\nbookie-2: degraded: read-only: disk full (used_percent=97.5)\nmeta: ok")
	check("/readyz", 200, "status: degraded")
	check("/healthz?format=json", 200, `{"name":"bookie-2","status":"degraded","reason":"read-only: disk full","detail":{"used_percent":97.5}}`)
	h.Register("meta", func(context.Context) error { return errors.New("etcd: no space left on device") })
	check("/healthz", 503, "status: down\n")
	check("/healthz?format=json", 503, `{"name":"meta","status":"down","reason":"etcd: no space left on device"}`)

	reg.MustRegister(h.Collector(time.Second))
	check("/metrics", 200, `quire_component_status{component="bookie-2"} 1`)
	check("/metrics", 200, `quire_component_status{component="meta"} 2`)
}

func TestDegradedCheck(t *testing.T) {
	if r := ReportOf(Degraded("read-only")); r.Status != StatusDegraded || r.Reason != "read-only" {
		t.Fatalf("Degraded: %+v", r)
	}
	if r := ReportOf(fmt.Errorf("wrapped: %w", Degraded("read-only"))); r.Status != StatusDegraded {
		t.Fatalf("wrapped Degraded: %+v", r)
	}
	if r := ReportOf(errors.New("gone")); r.Status != StatusDown || r.Reason != "gone" {
		t.Fatalf("error: %+v", r)
	}
}
