// Package node assembles one running bookie: the storage engine (package
// bookie), the TCP server (package server) and the registration in the
// metadata store (package registry). `quire bookie` runs one; `quire
// standalone` runs three in one process.
//
// It owns the wiring and the lifecycle, nothing else: no protocol decisions,
// no storage.
package node

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"quire/internal/bookie"
	"quire/internal/bookie/client"
	"quire/internal/bookie/registry"
	"quire/internal/bookie/server"
	"quire/internal/bookie/wire"
	"quire/internal/meta"
)

// Config configures a bookie node.
type Config struct {
	// ID is the bookie's identity in the registry; default: the listen address.
	ID         string
	DataDir    string // ledger storage (entry logs, index)
	JournalDir string // default DataDir/journal
	ListenAddr string // default 127.0.0.1:3181
	// AdvertiseAddr is what the registry tells clients; default: the bound address.
	AdvertiseAddr string
	Zone          string
	// Store registers the bookie; nil runs it unregistered (tests, perf).
	Store      meta.Store
	SessionTTL time.Duration // default 10s
	// Engine tunes the storage engine (nil: defaults); its directories,
	// metrics and logger are set from the fields above.
	Engine     *bookie.Config
	Registerer prometheus.Registerer
	Logger     *slog.Logger
	// Mutant breaks the bookie on purpose (mutant.go); "" in production.
	Mutant Mutant
	// TLS, when set, makes the bookie serve TLS (tlsconf.Server: with a client CA it
	// requires client certificates). The registration does not say: clients are
	// configured for TLS as a whole (client.Config.TLS).
	TLS *tls.Config
}

// Node is a running bookie.
type Node struct {
	cfg     Config
	engine  *bookie.Engine
	server  *server.Server
	ln      net.Listener
	session meta.Session
	reg     *registry.Registration
	log     *slog.Logger
	// served is the engine as the server serves it (Config.Mutant's
	// wrapper, if any): local adds go to it too.
	served server.Engine
	// stopMutant stops Config.Mutant's goroutine (a no-op without one).
	stopMutant func()

	serveErr chan error
	// localReads holds a token per ReadRangeLocal being served.
	localReads chan struct{}
	mu         sync.Mutex
	readOnly   bool
	closed     bool
}

// DefaultEngineConfig returns the engine defaults for a node.
func DefaultEngineConfig() bookie.Config { return bookie.DefaultConfig("", "") }

// Start opens the engine (replaying its journal), listens, and registers.
func Start(ctx context.Context, cfg Config) (*Node, error) {
	if cfg.DataDir == "" {
		return nil, errors.New("bookie: no data dir")
	}
	if cfg.JournalDir == "" {
		cfg.JournalDir = filepath.Join(cfg.DataDir, "journal")
	}
	if cfg.ListenAddr == "" {
		cfg.ListenAddr = "127.0.0.1:3181"
	}
	if cfg.SessionTTL == 0 {
		cfg.SessionTTL = 10 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	for _, dir := range []string{cfg.DataDir, cfg.JournalDir} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, fmt.Errorf("bookie: %w", err)
		}
	}
	ln, err := net.Listen("tcp", cfg.ListenAddr)
	if err != nil {
		return nil, fmt.Errorf("bookie: listen %s: %w", cfg.ListenAddr, err)
	}
	if cfg.AdvertiseAddr == "" {
		cfg.AdvertiseAddr = ln.Addr().String()
	}
	if cfg.ID == "" {
		cfg.ID = cfg.AdvertiseAddr
	}
	n := &Node{cfg: cfg, ln: ln, log: cfg.Logger.With("bookie", cfg.ID), serveErr: make(chan error, 1),
		localReads: make(chan struct{}, localRangeReads)}
	reg := cfg.Registerer
	if reg != nil {
		reg = prometheus.WrapRegistererWith(prometheus.Labels{"bookie": cfg.ID}, reg)
	}
	ecfg := DefaultEngineConfig()
	if cfg.Engine != nil {
		ecfg = *cfg.Engine
	}
	ecfg.JournalDir, ecfg.LedgerDir = cfg.JournalDir, cfg.DataDir
	ecfg.Registerer, ecfg.Logger = reg, n.log
	ecfg.OnReadOnlyChange = n.onReadOnlyChange
	n.engine, err = bookie.Open(ecfg)
	if err != nil {
		ln.Close()
		return nil, err
	}
	n.served, n.stopMutant = withMutant(cfg.Mutant, engineAdapter{n.engine})
	n.server = server.New(server.Config{Logger: n.log, Registerer: reg, StatusOf: statusOf, TLS: cfg.TLS}, n.served)
	go func() { n.serveErr <- n.server.Serve(ln) }()

	if cfg.Store != nil {
		if err := n.register(ctx); err != nil {
			n.Close()
			return nil, err
		}
		go n.keepRegistered()
	}
	n.log.Info("bookie ready", "addr", cfg.AdvertiseAddr, "tls", cfg.TLS != nil, "mutual_tls", cfg.TLS != nil && cfg.TLS.ClientAuth == tls.RequireAndVerifyClientCert, "zone", cfg.Zone, "data-dir", cfg.DataDir, "journal-dir", cfg.JournalDir)
	return n, nil
}

func (n *Node) register(ctx context.Context) error {
	session, err := n.cfg.Store.NewSession(ctx, n.cfg.SessionTTL)
	if err != nil {
		return fmt.Errorf("bookie %s: session: %w", n.cfg.ID, err)
	}
	free, total, readOnly := n.engine.Info()
	info := registry.Info{ID: n.cfg.ID, Addr: n.cfg.AdvertiseAddr, Zone: n.cfg.Zone, ReadOnly: readOnly, FreeBytes: free, TotalBytes: total}
	reg, err := registry.Register(ctx, session, info)
	if errors.Is(err, meta.ErrExists) {
		// A registration under our id whose session has not expired yet. If
		// it names our own address, it is this bookie's previous life (we
		// just bound that address, so that process is gone): replace it
		// instead of waiting out its TTL. Anything else is a real conflict.
		kv, gerr := n.cfg.Store.Get(ctx, registry.Key(n.cfg.ID))
		if gerr == nil {
			old, _ := registry.Get(ctx, n.cfg.Store, n.cfg.ID)
			if old.Addr == n.cfg.AdvertiseAddr && n.cfg.Store.Delete(ctx, kv.Key, kv.Version) == nil {
				n.log.Info("replaced the registration of this bookie's previous run")
				reg, err = registry.Register(ctx, session, info)
			}
		}
	}
	if err != nil {
		session.Close()
		return err
	}
	n.mu.Lock()
	if n.closed { // closed while registering: leave nothing behind
		n.mu.Unlock()
		session.Close()
		return errors.New("bookie: closed")
	}
	n.session, n.reg = session, reg
	n.mu.Unlock()
	return nil
}

// keepRegistered registers again whenever the session is lost (an etcd
// outage longer than the TTL, say): a live bookie must stay visible.
func (n *Node) keepRegistered() {
	backoff := 100 * time.Millisecond
	for {
		lost := n.SessionLost()
		<-lost
		n.mu.Lock()
		closed := n.closed
		n.mu.Unlock()
		if closed {
			return
		}
		n.log.Warn("registration lost; registering again")
		for {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			err := n.register(ctx)
			cancel()
			if err == nil {
				backoff = 100 * time.Millisecond
				break
			}
			n.mu.Lock()
			closed := n.closed
			n.mu.Unlock()
			if closed {
				return
			}
			n.log.Error("register", "err", err, "retry-in", backoff)
			time.Sleep(backoff) // retry pacing, not waiting for a condition
			backoff = min(2*backoff, 5*time.Second)
		}
	}
}

// onReadOnlyChange republishes the registration so placement stops (or
// resumes) choosing this bookie.
func (n *Node) onReadOnlyChange(readOnly bool) {
	n.mu.Lock()
	n.readOnly = readOnly
	reg := n.reg
	n.mu.Unlock()
	n.log.Warn("bookie writable state changed", "readOnly", readOnly)
	if reg == nil {
		return
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		free, total, _ := n.engine.Info()
		if err := reg.Update(ctx, func(i *registry.Info) { i.ReadOnly, i.FreeBytes, i.TotalBytes = readOnly, free, total }); err != nil {
			n.log.Error("update registration", "err", err)
		}
	}()
}

// ReadOnlyReason reports whether the bookie refuses adds and why ("" when
// writable): a disk past its threshold, or out of space until a checkpoint
// succeeds. Reads, fencing and recovery go on either way. For /healthz: a
// read-only bookie is healthy, just not a placement target.
func (n *Node) ReadOnlyReason() (readOnly bool, reason string) {
	return n.engine.ReadOnlyReason()
}

// ID is the bookie's registry id.
func (n *Node) ID() string { return n.cfg.ID }

// Addr is the address clients connect to.
func (n *Node) Addr() string { return n.cfg.AdvertiseAddr }

// Engine exposes the storage engine (tests, tools).
func (n *Node) Engine() *bookie.Engine { return n.engine }

// ReadRangeLocal is a batch read for a client in this process (the bookie
// client's local transport): the server's limits (maxEntries at most
// server.DefaultMaxBatchReadEntries, maxBytes at most a frame's payload, 0
// for either: the limit), the engine's errors as the wire carries them,
// at most localRangeReads at once (as the server bounds its own). The
// payloads are the caller's: their buffers are not recycled.
func (n *Node) ReadRangeLocal(ledgerID, first int64, maxEntries, maxBytes int) ([]bookie.Entry, error) {
	if maxEntries <= 0 || maxEntries > server.DefaultMaxBatchReadEntries {
		maxEntries = server.DefaultMaxBatchReadEntries
	}
	if limit := wire.DefaultMaxFrameBytes - wire.FrameOverheadBytes; maxBytes <= 0 || maxBytes > limit {
		maxBytes = limit
	}
	n.localReads <- struct{}{}
	defer func() { <-n.localReads }()
	es, err := n.engine.ReadRange(ledgerID, first, maxEntries, maxBytes)
	if err != nil {
		return nil, wire.ErrorOf(statusOf(err), wire.ErrorMessage(err))
	}
	return es, nil
}

// AddLocal is an add for a client in this process (the bookie client's
// local transport): the server's checks of the ids, then the engine the
// server serves (the same journal, fencing, read-only state and, in a
// mutant build, the same mutant), done called with the engine's error as
// the wire carries it — from any goroutine, possibly before AddLocal
// returns. Adds reach the engine in call order; a full journal queue
// blocks the caller, as it blocks a connection's reader.
func (n *Node) AddLocal(req client.AddRequest, done func(error)) {
	if reason := server.InvalidAdd(req.LedgerID, req.EntryID, req.LastAddConfirmed); reason != "" {
		done(wire.ErrorOf(wire.Status_BAD_REQUEST, reason))
		return
	}
	n.served.Add(server.AddRequest{LedgerID: req.LedgerID, EntryID: req.EntryID, LastAddConfirmed: req.LastAddConfirmed,
		Recovery: req.Recovery, Payload: req.Payload, Arrived: time.Now()}, func(err error) {
		if err != nil {
			err = wire.ErrorOf(statusOf(err), wire.ErrorMessage(err))
		}
		done(err)
	})
}

// Local is the node as the bookie client's local transport reaches it
// (client.Config.Local): ranged reads and adds by a broker in this process
// (the standalone's) without a connection, frame or copy — for reads most
// of what a catch-up reader costs the CPUs the broker and the bookies
// share, for adds a third of the write path's.
func (n *Node) Local() client.LocalBookie { return localBookie{n} }

type localBookie struct{ n *Node }

func (l localBookie) Add(req client.AddRequest, done func(error)) { l.n.AddLocal(req, done) }

func (l localBookie) ReadRange(ledgerID, first int64, maxEntries, maxBytes int) ([]client.Entry, error) {
	es, err := l.n.ReadRangeLocal(ledgerID, first, maxEntries, maxBytes)
	if err != nil {
		return nil, err
	}
	out := make([]client.Entry, len(es))
	for i, e := range es {
		out[i] = client.Entry(e)
	}
	return out, nil
}

// localRangeReads bounds the local batch reads served at once, as
// server.DefaultMaxConcurrentRangeReads bounds the server's.
const localRangeReads = server.DefaultMaxConcurrentRangeReads

// Healthy reports nil while the node serves and, if registered, holds its session.
func (n *Node) Healthy(ctx context.Context) error {
	n.mu.Lock()
	session, closed := n.session, n.closed
	n.mu.Unlock()
	if closed {
		return errors.New("closed")
	}
	select {
	case err := <-n.serveErr:
		n.serveErr <- err
		return fmt.Errorf("server stopped: %v", err)
	default:
	}
	if session != nil {
		if err := session.Err(); err != nil {
			return fmt.Errorf("registration lost: %w", err)
		}
	}
	return nil
}

// SessionLost is closed when the registration's session is lost (never, for
// an unregistered node).
func (n *Node) SessionLost() <-chan struct{} {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.session == nil {
		return nil
	}
	return n.session.Done()
}

// Close deregisters, stops serving and closes the engine (flushing it).
func (n *Node) Close() error {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return nil
	}
	n.closed = true
	session := n.session
	n.mu.Unlock()
	if session != nil {
		session.Close()
	}
	n.server.Close()
	n.stopMutant()
	return n.engine.Close()
}

// engineAdapter lets the server drive the engine (their request and entry
// types are declared separately so the packages stay independent).
type engineAdapter struct{ e *bookie.Engine }

func (a engineAdapter) Add(req server.AddRequest, done func(error)) {
	a.e.Add(bookie.AddRequest{LedgerID: req.LedgerID, EntryID: req.EntryID, LastAddConfirmed: req.LastAddConfirmed,
		Recovery: req.Recovery, Payload: req.Payload, Arrived: req.Arrived}, done)
}

func (a engineAdapter) Read(ledgerID, entryID int64) (server.Entry, error) {
	e, err := a.e.Read(ledgerID, entryID)
	return server.Entry(e), err
}

func (a engineAdapter) ReadRange(ledgerID, first int64, maxEntries, maxBytes int) ([]server.Entry, func(), error) {
	es, release, err := a.e.ReadRangeRecycled(ledgerID, first, maxEntries, maxBytes)
	out := make([]server.Entry, len(es))
	for i, e := range es {
		out[i] = server.Entry(e)
	}
	return out, release, err
}

func (a engineAdapter) Fence(ledgerID int64) (int64, error) { return a.e.Fence(ledgerID) }

func (a engineAdapter) WatchLAC(ledgerID, previousLAC int64, notify func(int64)) (func(), error) {
	return a.e.WatchLAC(ledgerID, previousLAC, notify)
}

func (a engineAdapter) WriteLAC(ledgerID, lac int64) (int64, error) {
	return a.e.WriteLAC(ledgerID, lac)
}

func (a engineAdapter) DeleteLedger(ledgerID int64) error { return a.e.DeleteLedger(ledgerID) }

func (a engineAdapter) Info() (uint64, uint64, bool) { return a.e.Info() }

// statusOf maps the engine's sentinel errors to wire statuses.
func statusOf(err error) wire.Status {
	switch {
	case err == nil:
		return wire.Status_OK
	case errors.Is(err, bookie.ErrNoSuchLedger):
		return wire.Status_NO_SUCH_LEDGER
	case errors.Is(err, bookie.ErrNoSuchEntry):
		return wire.Status_NO_SUCH_ENTRY
	case errors.Is(err, bookie.ErrFenced):
		return wire.Status_FENCED
	case errors.Is(err, bookie.ErrReadOnly):
		return wire.Status_READ_ONLY
	case errors.Is(err, bookie.ErrTooManyRequests):
		return wire.Status_TOO_MANY_REQUESTS
	case errors.Is(err, bookie.ErrInvalidRequest):
		return wire.Status_BAD_REQUEST
	case errors.Is(err, bookie.ErrIO), errors.Is(err, bookie.ErrClosed):
		return wire.Status_IO_ERROR
	}
	return wire.StatusOf(err)
}
