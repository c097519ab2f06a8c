// Package autorecovery rebuilds the copies a lost bookie held, BookKeeper
// style: an auditor, elected through the metadata store, notices bookies
// whose registration has been gone for LostBookieDelay and marks every
// ledger with a fragment on them as under-replicated; replication workers,
// one in every bookie process, claim marked ledgers and copy each missing
// entry from the surviving replicas to a replacement chosen by zone-aware
// placement, then swap the replacement into the ledger's metadata with a
// compare-and-swap. Many workers repair many ledgers at once and each copy
// reads from all surviving replicas, so recovery runs many sources to many
// targets. Open ledgers get a grace period for their writer to replace the
// bookie itself; after it they are fenced and closed first.
//
// It owns the keys under Prefix. It never changes a ledger's state, end or
// anything but the one ensemble slot it rebuilt (fencing and closing are
// ledgerclient.Recover's), and never writes to a bookie except with the
// recovery flag.
package autorecovery

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"quire/internal/bookie/client"
	"quire/internal/ledger/ledgerclient"
	"quire/internal/meta"
)

// Defaults for Config's zero fields.
const (
	DefaultLostBookieDelay       = 30 * time.Second
	DefaultOpenLedgerGracePeriod = 30 * time.Second
	DefaultAuditInterval         = 5 * time.Minute
	DefaultLedgersPerWorker      = 4
	DefaultEntriesInFlight       = 64
	DefaultSessionTTL            = 10 * time.Second
	DefaultRetryBackoff          = 2 * time.Second
	DefaultProgressInterval      = time.Second
	DefaultRequestTimeout        = 10 * time.Second
)

// Config configures a Service.
type Config struct {
	// ID names this process as auditor candidate and worker (the bookie id).
	ID    string
	Store meta.Store
	// Bookies talks to bookies; nil: the service makes (and closes) its own.
	Bookies *client.Client
	// Ledgers fences and closes open ledgers; nil: one over Store and Bookies.
	Ledgers *ledgerclient.Client

	// LostBookieDelay is how long a registration must stay gone before its
	// bookie counts as lost (a restart within it costs no copying).
	LostBookieDelay time.Duration
	// OpenLedgerGracePeriod is how long, from the mark, the writer of an open
	// ledger has to replace a lost bookie of its last fragment itself before
	// a worker fences the ledger to repair it.
	OpenLedgerGracePeriod time.Duration
	// AuditInterval is the period of the full check that also catches
	// bookies lost while no auditor ran.
	AuditInterval time.Duration
	// LedgersPerWorker bounds the ledgers this worker repairs at once.
	LedgersPerWorker int
	// EntriesInFlight bounds the entries one ledger's copy has in flight.
	EntriesInFlight int
	SessionTTL      time.Duration
	// RetryBackoff paces retries after store errors and failed repairs.
	RetryBackoff time.Duration
	// ProgressInterval is how often the worker republishes its progress.
	ProgressInterval time.Duration
	// RequestTimeout bounds one bookie read or add.
	RequestTimeout time.Duration

	// DisableAuditor and DisableWorker leave out one role (tests, tools).
	DisableAuditor bool
	DisableWorker  bool

	Registerer prometheus.Registerer
	Logger     *slog.Logger
}

func (cfg Config) withDefaults() Config {
	if cfg.LostBookieDelay <= 0 {
		cfg.LostBookieDelay = DefaultLostBookieDelay
	}
	if cfg.OpenLedgerGracePeriod <= 0 {
		cfg.OpenLedgerGracePeriod = DefaultOpenLedgerGracePeriod
	}
	if cfg.AuditInterval <= 0 {
		cfg.AuditInterval = DefaultAuditInterval
	}
	if cfg.LedgersPerWorker <= 0 {
		cfg.LedgersPerWorker = DefaultLedgersPerWorker
	}
	if cfg.EntriesInFlight <= 0 {
		cfg.EntriesInFlight = DefaultEntriesInFlight
	}
	if cfg.SessionTTL <= 0 {
		cfg.SessionTTL = DefaultSessionTTL
	}
	if cfg.RetryBackoff <= 0 {
		cfg.RetryBackoff = DefaultRetryBackoff
	}
	if cfg.ProgressInterval <= 0 {
		cfg.ProgressInterval = DefaultProgressInterval
	}
	if cfg.RequestTimeout <= 0 {
		cfg.RequestTimeout = DefaultRequestTimeout
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return cfg
}

// Service runs this process's auditor candidacy and replication worker.
type Service struct {
	cfg     Config
	log     *slog.Logger
	metrics *metrics
	ownBook *client.Client // closed by Close when the service made it

	progress *progressTracker

	cancel context.CancelFunc
	done   chan struct{}

	isAuditor atomic.Bool
	sessionID atomic.Int64
}

// Start validates cfg and starts the service in the background.
func Start(cfg Config) (*Service, error) {
	if cfg.ID == "" || cfg.Store == nil {
		return nil, errors.New("autorecovery: ID and Store are required")
	}
	cfg = cfg.withDefaults()
	m, err := newMetrics(cfg.Registerer)
	if err != nil {
		return nil, err
	}
	s := &Service{cfg: cfg, log: cfg.Logger.With("component", "autorecovery", "worker", cfg.ID), metrics: m, done: make(chan struct{})}
	if s.cfg.Bookies == nil {
		s.ownBook = client.New(client.Config{Logger: cfg.Logger})
		s.cfg.Bookies = s.ownBook
	}
	if s.cfg.Ledgers == nil {
		s.cfg.Ledgers = ledgerclient.New(ledgerclient.Config{Store: cfg.Store, Bookies: s.cfg.Bookies, Name: "autorecovery-" + cfg.ID, Logger: cfg.Logger})
	}
	s.progress = newProgressTracker(cfg.ID)
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	go s.run(ctx)
	return s, nil
}

// Close stops the service: repairs in progress are abandoned (their locks
// vanish with the session; another worker redoes them) and the auditor
// steps down.
func (s *Service) Close() {
	s.cancel()
	<-s.done
	if s.ownBook != nil {
		s.ownBook.Close()
	}
	s.metrics.unregister()
}

// IsAuditor reports whether this process currently is the auditor.
func (s *Service) IsAuditor() bool { return s.isAuditor.Load() }

// SessionID is the current metadata session's id (0 between sessions).
func (s *Service) SessionID() int64 { return s.sessionID.Load() }

// Progress returns the worker's counters.
func (s *Service) Progress() Progress { return s.progress.snapshot() }

// run keeps a session and, under it, the auditor candidacy and the worker.
// Losing the session ends both (their claims are gone with it) and starts
// them again under a new one.
func (s *Service) run(ctx context.Context) {
	defer close(s.done)
	for ctx.Err() == nil {
		sess, err := s.cfg.Store.NewSession(ctx, s.cfg.SessionTTL)
		if err != nil {
			s.log.Warn("autorecovery: session", "err", err)
			pause(ctx, s.cfg.RetryBackoff) // retry pacing: the store is unreachable
			continue
		}
		s.sessionID.Store(sess.ID())
		sctx, cancel := context.WithCancel(ctx)
		go func() {
			select {
			case <-sess.Done():
				cancel()
			case <-sctx.Done():
			}
		}()
		var wg sync.WaitGroup
		if !s.cfg.DisableAuditor {
			wg.Go(func() { s.campaign(sctx, sess) })
		}
		if !s.cfg.DisableWorker {
			w := newWorker(s, sess)
			wg.Go(func() { w.run(sctx) })
		}
		wg.Wait()
		cancel()
		s.sessionID.Store(0)
		if err := sess.Err(); err != nil && ctx.Err() == nil {
			s.log.Warn("autorecovery: session lost; starting again", "err", err)
		}
		sess.Close()
	}
}

// campaign runs for auditor until ctx ends: it holds AuditorKey while it is
// the auditor, and otherwise watches the key to try again when it vanishes.
func (s *Service) campaign(ctx context.Context, sess meta.Session) {
	for ctx.Err() == nil {
		info := mustJSON(AuditorInfo{ID: s.cfg.ID, Since: time.Now().UTC()})
		version, err := sess.CreateEphemeral(ctx, AuditorKey, info)
		if err == nil {
			s.serveAsAuditor(ctx, version)
			continue // the key vanished under a live session: campaign again
		}
		if !errors.Is(err, meta.ErrExists) {
			s.log.Debug("autorecovery: campaign", "err", err)
			pause(ctx, s.cfg.RetryBackoff) // retry pacing: the store is unreachable
			continue
		}
		kv, err := s.cfg.Store.Get(ctx, AuditorKey)
		if errors.Is(err, meta.ErrNotFound) {
			continue
		}
		if err != nil {
			pause(ctx, s.cfg.RetryBackoff) // retry pacing: the store is unreachable
			continue
		}
		var current AuditorInfo
		_ = json.Unmarshal(kv.Value, &current)
		s.log.Debug("autorecovery: following auditor", "auditor", current.ID)
		s.waitKeyGone(ctx, AuditorKey, kv.Version)
	}
}

// serveAsAuditor runs the auditor until ctx ends (the session is lost or the
// service closing) or the auditor key is deleted (an operator, say): either
// way another candidate may be auditing already, so this one stops.
func (s *Service) serveAsAuditor(ctx context.Context, version meta.Version) {
	actx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		s.waitKeyGone(actx, AuditorKey, version)
		cancel()
	}()
	s.log.Info("autorecovery: elected auditor")
	s.isAuditor.Store(true)
	s.metrics.auditor.Set(1)
	newAuditor(s).run(actx)
	s.isAuditor.Store(false)
	s.metrics.auditor.Set(0)
	s.metrics.underReplicated.Set(0)
	s.log.Info("autorecovery: no longer auditor")
}

// waitKeyGone returns when key no longer holds the write version (deleted
// or overwritten), or when ctx ends.
func (s *Service) waitKeyGone(ctx context.Context, key string, version meta.Version) {
	for ctx.Err() == nil {
		for resp := range s.cfg.Store.Watch(ctx, key, int64(version)+1) {
			if resp.Err != nil {
				break // look again below
			}
			for _, ev := range resp.Events {
				if ev.Key == key {
					return // deleted, or written by someone else
				}
			}
		}
		if ctx.Err() != nil {
			return
		}
		kv, err := s.cfg.Store.Get(ctx, key)
		if errors.Is(err, meta.ErrNotFound) || err == nil && kv.Version != version {
			return
		}
		if err != nil {
			pause(ctx, s.cfg.RetryBackoff) // retry pacing: the store is unreachable
		}
	}
}

// errorf wraps err with the ledger's id.
func errorf(ledgerID int64, format string, args ...any) error {
	return fmt.Errorf("autorecovery: ledger %d: "+format, append([]any{ledgerID}, args...)...)
}
