// Package admin serves Quire's HTTP endpoints: health (/healthz, /readyz),
// Prometheus metrics (/metrics) and, in later issues, the admin REST API.
//
// It owns the health registry that components report into; it never owns
// component state itself and imports no component package.
package admin

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Check reports a component's health: nil when healthy.
type Check func(ctx context.Context) error

// Health is the registry of started components and their checks.
type Health struct {
	mu     sync.Mutex
	checks map[string]Check
	ready  bool
}

// NewHealth returns an empty registry; it is not ready until SetReady(true).
func NewHealth() *Health { return &Health{checks: map[string]Check{}} }

// Register adds a started component's check.
func (h *Health) Register(name string, c Check) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.checks[name] = c
}

// SetReady marks startup complete (or, with false, shutdown begun).
func (h *Health) SetReady(ready bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.ready = ready
}

// Status runs every check (each bounded by timeout) and returns a per-component
// report, sorted by name, and whether all are healthy.
func (h *Health) Status(ctx context.Context, timeout time.Duration) (report []string, healthy, ready bool) {
	h.mu.Lock()
	names := make([]string, 0, len(h.checks))
	for n := range h.checks {
		names = append(names, n)
	}
	checks := make(map[string]Check, len(h.checks))
	for n, c := range h.checks {
		checks[n] = c
	}
	ready = h.ready
	h.mu.Unlock()
	sort.Strings(names)
	healthy = true
	for _, n := range names {
		cctx, cancel := context.WithTimeout(ctx, timeout)
		err := checks[n](cctx)
		cancel()
		if err != nil {
			healthy = false
			report = append(report, fmt.Sprintf("%s: %v", n, err))
		} else {
			report = append(report, n+": ok")
		}
	}
	return report, healthy, ready && healthy
}

// Config configures the HTTP server.
type Config struct {
	Addr     string
	Health   *Health
	Gatherer prometheus.Gatherer // nil → prometheus.DefaultGatherer
	Logger   *slog.Logger
	// CheckTimeout bounds each health check; default 2s.
	CheckTimeout time.Duration
}

// Server is the running HTTP server.
type Server struct {
	srv *http.Server
	ln  net.Listener
	log *slog.Logger
}

// Mux returns the handler with /healthz, /readyz and /metrics, for embedding.
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
			report, healthy, ready := cfg.Health.Status(r.Context(), cfg.CheckTimeout)
			ok := healthy
			if needReady {
				ok = ready
				if !ready && healthy {
					report = append(report, "starting or stopping")
				}
			}
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			if !ok {
				w.WriteHeader(http.StatusServiceUnavailable)
			}
			fmt.Fprintln(w, strings.Join(report, "\n"))
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
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return nil, fmt.Errorf("admin: listen %s: %w", cfg.Addr, err)
	}
	s := &Server{
		srv: &http.Server{Handler: Mux(cfg), ReadHeaderTimeout: 10 * time.Second},
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

// Addr is the bound address.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Shutdown stops accepting and waits for in-flight requests.
func (s *Server) Shutdown(ctx context.Context) error { return s.srv.Shutdown(ctx) }
