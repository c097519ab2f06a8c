// Package admin serves Quire's HTTP endpoints: health (/healthz, /readyz),
// Prometheus metrics (/metrics) and what components add with Server.Handle
// (the broker's Pulsar admin REST API).
//
// It owns the health registry that components report into; it never owns
// component state itself and imports no component package.
package admin

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"quire/internal/tlsconf"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Check reports a component's health: nil when healthy, an error made by
// Degraded when it works in part (a read-only bookie), any other error when
// it is down.
type Check func(ctx context.Context) error

// Status is a component's (or the process's) state, worst last.
type Status int

const (
	// StatusOK: everything the component does works.
	StatusOK Status = iota
	// StatusDegraded: it works in part, and says what does not (a bookie on a
	// full disk: reads served, writes refused). The process is still healthy:
	// /healthz and /readyz answer 200.
	StatusDegraded
	// StatusDown: the component does not work (the metadata store stopped).
	// /healthz and /readyz answer 503.
	StatusDown
)

func (s Status) String() string {
	switch s {
	case StatusOK:
		return "ok"
	case StatusDegraded:
		return "degraded"
	}
	return "down"
}

// MarshalText writes the status as its name in JSON.
func (s Status) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// Report is a component's state.
type Report struct {
	Status Status `json:"status"`
	// Reason says why the status is not ok; empty when it is.
	Reason string `json:"reason,omitempty"`
	// Detail carries figures worth showing (disk usage: free_bytes,
	// total_bytes, used_percent, read_only); shown in JSON and, sorted by
	// key, after the reason in text.
	Detail map[string]any `json:"detail,omitempty"`
}

// Reporter reports a component's state; it must return within ctx.
type Reporter func(ctx context.Context) Report

// degradedError marks a Check's error as degraded rather than down.
type degradedError struct{ reason string }

func (e degradedError) Error() string { return e.reason }

// Degraded is the error a Check returns when its component works in part.
func Degraded(reason string) error { return degradedError{reason} }

// ReportOf turns a Check's answer into a Report.
func ReportOf(err error) Report {
	var d degradedError
	switch {
	case err == nil:
		return Report{Status: StatusOK}
	case errors.As(err, &d):
		return Report{Status: StatusDegraded, Reason: d.reason}
	}
	return Report{Status: StatusDown, Reason: err.Error()}
}

// Health is the registry of started components and their reporters.
type Health struct {
	mu        sync.Mutex
	reporters map[string]Reporter
	ready     bool
}

// NewHealth returns an empty registry; it is not ready until SetReady(true).
func NewHealth() *Health { return &Health{reporters: map[string]Reporter{}} }

// Register adds a started component's check.
func (h *Health) Register(name string, c Check) {
	h.RegisterReporter(name, func(ctx context.Context) Report { return ReportOf(c(ctx)) })
}

// RegisterReporter adds a started component's reporter.
func (h *Health) RegisterReporter(name string, r Reporter) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.reporters[name] = r
}

// SetReady marks startup complete (or, with false, shutdown begun).
func (h *Health) SetReady(ready bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.ready = ready
}

// ComponentReport is one component's Report under its name.
type ComponentReport struct {
	Name string `json:"name"`
	Report
}

// ProcessReport is what /healthz and /readyz answer.
type ProcessReport struct {
	// Status is the worst of the components'.
	Status Status `json:"status"`
	// Ready: startup finished and shutdown not begun.
	Ready      bool              `json:"ready"`
	Components []ComponentReport `json:"components"`
}

// Healthy: no component is down. A degraded process is healthy: it serves
// what it can (reads from read-only bookies).
func (r ProcessReport) Healthy() bool { return r.Status < StatusDown }

// Report runs every reporter (each bounded by timeout) and returns the
// components' reports sorted by name.
func (h *Health) Report(ctx context.Context, timeout time.Duration) ProcessReport {
	h.mu.Lock()
	reporters := make(map[string]Reporter, len(h.reporters))
	for n, r := range h.reporters {
		reporters[n] = r
	}
	ready := h.ready
	h.mu.Unlock()
	names := make([]string, 0, len(reporters))
	for n := range reporters {
		names = append(names, n)
	}
	sort.Strings(names)
	pr := ProcessReport{Status: StatusOK, Ready: ready}
	for _, n := range names {
		cctx, cancel := context.WithTimeout(ctx, timeout)
		r := reporters[n](cctx)
		cancel()
		pr.Status = max(pr.Status, r.Status)
		pr.Components = append(pr.Components, ComponentReport{Name: n, Report: r})
	}
	return pr
}

// Status runs every check (each bounded by timeout) and returns a per-component
// report, sorted by name, and whether all are healthy (none down).
func (h *Health) Status(ctx context.Context, timeout time.Duration) (report []string, healthy, ready bool) {
	pr := h.Report(ctx, timeout)
	for _, c := range pr.Components {
		report = append(report, c.line())
	}
	return report, pr.Healthy(), pr.Ready && pr.Healthy()
}

// line is the component's line of the text report: "name: ok", "name:
// degraded: reason (k=v ...)", "name: reason" when down.
func (c ComponentReport) line() string {
	var b strings.Builder
	b.WriteString(c.Name)
	b.WriteString(": ")
	switch c.Status {
	case StatusOK:
		b.WriteString("ok")
	case StatusDegraded:
		b.WriteString("degraded: ")
		b.WriteString(c.Reason)
	default:
		b.WriteString(c.Reason)
	}
	if len(c.Detail) > 0 {
		keys := make([]string, 0, len(c.Detail))
		for k := range c.Detail {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		b.WriteString(" (")
		for i, k := range keys {
			if i > 0 {
				b.WriteByte(' ')
			}
			fmt.Fprintf(&b, "%s=%v", k, c.Detail[k])
		}
		b.WriteByte(')')
	}
	return b.String()
}

// Config configures the HTTP server.
type Config struct {
	Addr     string
	Health   *Health
	Gatherer prometheus.Gatherer // nil → prometheus.DefaultGatherer
	Logger   *slog.Logger
	// CheckTimeout bounds each health check; default 2s.
	CheckTimeout time.Duration
	// TLS, when its files are set, serves HTTPS (certificates reloaded when
	// the files change; with a client CA, clients must present a
	// certificate it signed).
	TLS tlsconf.Files
}

// Server is the running HTTP server.
type Server struct {
	srv *http.Server
	mux *http.ServeMux
	ln  net.Listener
	log *slog.Logger
}

// wantsJSON: ?format=json or an Accept header naming application/json.
func wantsJSON(r *http.Request) bool {
	return r.URL.Query().Get("format") == "json" || strings.Contains(r.Header.Get("Accept"), "application/json")
}

// Mux returns the handler with /healthz, /readyz and /metrics, for embedding.
//
// /healthz answers 200 while no component is down, so a degraded process
// (read-only bookies: reads served, writes refused) is healthy; /readyz
// answers 200 when, besides, startup has finished. Both list every
// component: as text, "status: ok|degraded|down" and then one line per
// component ("bookie-1: degraded: read-only: ... (free_bytes=... )"); as
// JSON (?format=json, or Accept: application/json) a ProcessReport.
func Mux(cfg Config) *http.ServeMux {
	if cfg.Gatherer == nil {
		cfg.Gatherer = prometheus.DefaultGatherer
	}
	if cfg.CheckTimeout == 0 {
		cfg.CheckTimeout = 2 * time.Second
	}
	mux := http.NewServeMux()
	health := func(needReady bool) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			pr := cfg.Health.Report(r.Context(), cfg.CheckTimeout)
			ok := pr.Healthy()
			if needReady {
				ok = ok && pr.Ready
			}
			if wantsJSON(r) {
				w.Header().Set("Content-Type", "application/json")
				if !ok {
					w.WriteHeader(http.StatusServiceUnavailable)
				}
				json.NewEncoder(w).Encode(pr)
				return
			}
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			if !ok {
				w.WriteHeader(http.StatusServiceUnavailable)
			}
			fmt.Fprintf(w, "status: %s\n", pr.Status)
			for _, c := range pr.Components {
				fmt.Fprintln(w, c.line())
			}
			if needReady && !pr.Ready {
				fmt.Fprintln(w, "starting or stopping")
			}
		}
	}
	mux.HandleFunc("/healthz", health(false))
	mux.HandleFunc("/readyz", health(true))
	mux.Handle("/metrics", promhttp.HandlerFor(cfg.Gatherer, promhttp.HandlerOpts{}))
	// Go's profiler, as etcd serves it: CPU and heap profiles of a live
	// process without a restart.
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return mux
}

// Listen binds the address and starts serving in the background.
func Listen(cfg Config) (*Server, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	var tlsCfg *tls.Config
	if cfg.TLS.Enabled() {
		var err error
		if tlsCfg, err = tlsconf.Server(cfg.TLS); err != nil {
			return nil, fmt.Errorf("admin: %w", err)
		}
	}
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return nil, fmt.Errorf("admin: listen %s: %w", cfg.Addr, err)
	}
	if tlsCfg != nil {
		ln = tls.NewListener(ln, tlsCfg)
	}
	mux := Mux(cfg)
	s := &Server{
		srv: &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second},
		mux: mux,
		ln:  ln,
		log: cfg.Logger,
	}
	go func() {
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Error("http server stopped", "err", err)
		}
	}()
	return s, nil
}

// Handle serves pattern with h beside the built-in endpoints (a
// component's API: the broker's Pulsar admin REST API under /admin/v2/).
func (s *Server) Handle(pattern string, h http.Handler) { s.mux.Handle(pattern, h) }

// Addr is the bound address.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Shutdown stops accepting and waits for in-flight requests.
func (s *Server) Shutdown(ctx context.Context) error { return s.srv.Shutdown(ctx) }

// Collector exports every component's status as the gauge
// quire_component_status{component} (0 ok, 1 degraded, 2 down), running the
// reporters on each scrape (each bounded by timeout).
func (h *Health) Collector(timeout time.Duration) prometheus.Collector {
	return healthCollector{h: h, timeout: timeout}
}

var componentStatusDesc = prometheus.NewDesc("quire_component_status",
	"Each component's health: 0 ok, 1 degraded (works in part, e.g. a read-only bookie), 2 down.", []string{"component"}, nil)

type healthCollector struct {
	h       *Health
	timeout time.Duration
}

func (c healthCollector) Describe(ch chan<- *prometheus.Desc) { ch <- componentStatusDesc }

func (c healthCollector) Collect(ch chan<- prometheus.Metric) {
	for _, r := range c.h.Report(context.Background(), c.timeout).Components {
		ch <- prometheus.MustNewConstMetric(componentStatusDesc, prometheus.GaugeValue, float64(r.Status), r.Name)
	}
}
