// Package server is the bookie's TCP front end: it accepts connections, decodes pipelined
// requests (package wire), hands them to the storage Engine and writes the responses back,
// in whatever order the engine completes them.
//
// It owns connections, per-connection limits, long-poll timers and request metrics. It must
// never store anything itself, decide a request's outcome (the Engine does), or let one
// connection's bad input or slowness affect another connection.
package server

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"quire/internal/bookie/wire"
)

// AddRequest is one entry to make durable.
type AddRequest struct {
	LedgerID         int64
	EntryID          int64
	LastAddConfirmed int64
	Recovery         bool
	// Payload is valid only until Add returns (it may alias the connection's read buffer):
	// an engine that keeps it copies it first.
	Payload []byte
	// Arrived is when the request's bytes were read: where its latency starts.
	Arrived time.Time
}

// Entry is a stored entry, or with EntryID -1 only a ledger's LAC.
type Entry struct {
	LedgerID         int64
	EntryID          int64
	LastAddConfirmed int64
	Payload          []byte
}

// Engine is what the server needs from the storage engine (package internal/bookie).
// Errors are mapped to a wire.Status by Config.StatusOf.
type Engine interface {
	// Add makes an entry durable and then calls done exactly once, from any goroutine, or
	// even before Add returns. done never blocks. Adds reach the engine in the order they
	// arrived on a connection, from that connection's reader goroutine: an Add that blocks
	// (a full journal queue) pushes back on that one connection.
	Add(req AddRequest, done func(error))
	// Read returns one entry, or with entryID -1 the ledger's LAC (Entry.LastAddConfirmed).
	Read(ledgerID, entryID int64) (Entry, error)
	// ReadRange returns consecutive entries from firstEntryID, at most maxEntries and about
	// maxBytes of payload. release, if not nil, is called once the server no longer uses
	// the payloads (they are written to the network, or the connection dropped them): the
	// engine may reuse their memory then. The server may also never call it.
	ReadRange(ledgerID, firstEntryID int64, maxEntries, maxBytes int) (entries []Entry, release func(), err error)
	// Fence makes the ledger reject later non-recovery adds (durably) and returns its LAC.
	Fence(ledgerID int64) (lastAddConfirmed int64, err error)
	// WatchLAC calls notify once, with the new LAC, when the ledger's LAC exceeds
	// previousLAC — possibly before WatchLAC returns. notify must not block and is not
	// allowed to call back into the engine. cancel drops the watch; it is a no-op after
	// notify was called, and must not be called from within notify.
	WatchLAC(ledgerID, previousLAC int64, notify func(lac int64)) (cancel func(), err error)
	// WriteLAC raises the ledger's LAC to lac without an entry (an idle writer's explicit
	// LAC; never lowered), notifies the watches it satisfies, and returns the LAC afterwards.
	// A fenced ledger fails with the engine's fenced error, a ledger it holds nothing of
	// with its no-such-ledger error. It is called on the connection's reader goroutine, in
	// arrival order with the connection's adds: it must not block.
	WriteLAC(ledgerID, lac int64) (lastAddConfirmed int64, err error)
	DeleteLedger(ledgerID int64) error
	// Info is called on the connection's reader goroutine: it must not block.
	Info() (free, total uint64, readOnly bool)
}

// Defaults for Config's zero fields.
const (
	DefaultMaxInFlightPerConn      = 10_000
	DefaultMaxLongPollTimeout      = 60 * time.Second
	DefaultMaxBatchReadEntries     = 10_000
	DefaultMaxConcurrentRangeReads = 2
	DefaultMaxConnections          = 4096
	DefaultWriteTimeout            = 30 * time.Second
	DefaultHandshakeTimeout        = 10 * time.Second
)

// Config configures a Server. The zero value is usable: every zero field takes its default.
type Config struct {
	Logger *slog.Logger
	// Registerer receives the server's metrics; nil keeps them unregistered. Two servers
	// need two registerers (or prometheus.WrapRegistererWith a distinguishing label).
	Registerer prometheus.Registerer
	// MaxFrameBytes bounds request and response frames (default wire.DefaultMaxFrameBytes).
	// A larger request frame closes its connection.
	MaxFrameBytes int
	// MaxInFlightPerConn bounds requests of one connection that the engine has not completed
	// yet. Requests beyond it are answered TOO_MANY_REQUESTS at once. Responses waiting to
	// be written are bounded by the same number: when that many are queued the server stops
	// reading the connection until the client reads its responses.
	MaxInFlightPerConn int
	// MaxLongPollTimeout caps a long poll's timeout_ms.
	MaxLongPollTimeout time.Duration
	// MaxBatchReadEntries caps (and replaces a zero) max_entries of a batch read.
	MaxBatchReadEntries int
	// MaxConcurrentRangeReads bounds the batch reads the engine serves at
	// once over every connection (default DefaultMaxConcurrentRangeReads);
	// more wait their turn. A few sequential reads keep the disk busy; more
	// only add runnable goroutines that delay the journal's.
	MaxConcurrentRangeReads int
	// MaxConnections bounds open connections; further ones are closed when accepted.
	MaxConnections int
	// WriteTimeout bounds one write of responses to a connection; a client that does not
	// read its responses for that long is disconnected. Negative disables it.
	WriteTimeout time.Duration
	// StatusOf maps an engine error to a status (default wire.StatusOf, which knows the
	// sentinels of package wire).
	StatusOf func(error) wire.Status
	// TLS, when set, makes every listener speak TLS: a connection serves requests only
	// after its handshake, and with TLS.ClientAuth requiring certificates (tlsconf.Server
	// with a client CA) only clients presenting one the CA signed get that far (mutual
	// TLS: how brokers and autorecovery authenticate to bookies). nil: plaintext.
	TLS *tls.Config
	// HandshakeTimeout bounds a TLS handshake; a client that does not finish it in time is
	// disconnected (default DefaultHandshakeTimeout).
	HandshakeTimeout time.Duration
}

func (cfg Config) withDefaults() Config {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.MaxFrameBytes <= 0 {
		cfg.MaxFrameBytes = wire.DefaultMaxFrameBytes
	}
	if cfg.MaxInFlightPerConn <= 0 {
		cfg.MaxInFlightPerConn = DefaultMaxInFlightPerConn
	}
	if cfg.MaxLongPollTimeout <= 0 {
		cfg.MaxLongPollTimeout = DefaultMaxLongPollTimeout
	}
	if cfg.MaxBatchReadEntries <= 0 {
		cfg.MaxBatchReadEntries = DefaultMaxBatchReadEntries
	}
	if cfg.MaxConcurrentRangeReads <= 0 {
		cfg.MaxConcurrentRangeReads = DefaultMaxConcurrentRangeReads
	}
	if cfg.MaxConnections <= 0 {
		cfg.MaxConnections = DefaultMaxConnections
	}
	if cfg.WriteTimeout == 0 {
		cfg.WriteTimeout = DefaultWriteTimeout
	}
	if cfg.StatusOf == nil {
		cfg.StatusOf = wire.StatusOf
	}
	if cfg.HandshakeTimeout <= 0 {
		cfg.HandshakeTimeout = DefaultHandshakeTimeout
	}
	return cfg
}

// Server serves the bookie protocol on any number of listeners.
type Server struct {
	cfg     Config
	engine  Engine
	log     *slog.Logger
	metrics *metrics

	done chan struct{} // closed by Close
	// rangeReads holds a token per batch read being served by the engine.
	rangeReads chan struct{}

	mu        sync.Mutex
	closed    bool
	listeners map[net.Listener]struct{}
	conns     map[*conn]struct{}
	// wg counts Serve loops and connection goroutines. Invariant: wg.Add happens only
	// under mu with closed false, so Close's Wait never races an Add.
	wg sync.WaitGroup
}

// New returns a server that is not serving yet.
func New(cfg Config, engine Engine) *Server {
	cfg = cfg.withDefaults()
	return &Server{
		cfg:        cfg,
		engine:     engine,
		log:        cfg.Logger.With("component", "bookie-server"),
		metrics:    newMetrics(cfg.Registerer),
		done:       make(chan struct{}),
		rangeReads: make(chan struct{}, cfg.MaxConcurrentRangeReads),
		listeners:  make(map[net.Listener]struct{}),
		conns:      make(map[*conn]struct{}),
	}
}

// ErrServerClosed is returned by Serve after Close.
var ErrServerClosed = errors.New("bookie server closed")

// Serve accepts connections on ln until Close, then returns ErrServerClosed; any other
// accept failure is returned as is. Serve closes ln. With Config.TLS, ln's connections
// are served over TLS.
func (s *Server) Serve(ln net.Listener) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		ln.Close()
		return ErrServerClosed
	}
	s.listeners[ln] = struct{}{}
	s.wg.Add(1)
	s.mu.Unlock()
	defer s.wg.Done()
	defer func() {
		s.mu.Lock()
		delete(s.listeners, ln)
		s.mu.Unlock()
		ln.Close()
	}()

	var backoff time.Duration
	for {
		nc, err := ln.Accept()
		if err != nil {
			if s.isClosed() {
				return ErrServerClosed
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				// Out of file descriptors and similar: back off rather than spin.
				backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
				s.log.Warn("accept failed; retrying", "err", err, "backoff", backoff)
				if !s.pause(backoff) {
					return ErrServerClosed
				}
				continue
			}
			return fmt.Errorf("bookie server: accept on %v: %w", ln.Addr(), err)
		}
		backoff = 0
		s.startConn(nc)
	}
}

// pause waits d unless the server closes first; it reports whether the server is open.
func (s *Server) pause(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-s.done:
		return false
	}
}

func (s *Server) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

func (s *Server) startConn(nc net.Conn) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		nc.Close()
		return
	}
	if len(s.conns) >= s.cfg.MaxConnections {
		s.mu.Unlock()
		s.metrics.connectionsRejected.Inc()
		s.log.Warn("connection limit reached; closing new connection",
			"remote", nc.RemoteAddr(), "max_connections", s.cfg.MaxConnections)
		nc.Close()
		return
	}
	if s.cfg.TLS != nil {
		nc = tls.Server(nc, s.cfg.TLS)
	}
	c := newConn(s, nc)
	s.conns[c] = struct{}{}
	s.wg.Add(1)
	s.mu.Unlock()
	s.metrics.connections.Inc()
	go func() {
		defer s.wg.Done()
		if c.handshake() {
			c.serve()
		}
		s.mu.Lock()
		delete(s.conns, c)
		s.mu.Unlock()
		s.metrics.connections.Dec()
	}()
}

// Close stops accepting, closes every connection (requests in progress get no response),
// and waits for the server's goroutines. Engine completions that arrive later are dropped.
func (s *Server) Close() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		s.wg.Wait()
		return
	}
	s.closed = true
	close(s.done)
	for ln := range s.listeners {
		ln.Close()
	}
	conns := make([]*conn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	for _, c := range conns {
		c.close()
	}
	s.wg.Wait()
}
