package admin

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

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
}
