package meta

import (
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"runtime"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"quire/internal/tlsconf"
)

// EmbedConfig configures an embedded etcd member (`quire meta` and `quire standalone`).
type EmbedConfig struct {
	Name    string // member name, default "quire"
	DataDir string
	// ClientURL is where clients connect, e.g. http://127.0.0.1:2379.
	ClientURL string
	// PeerURL is where other members connect, e.g. http://127.0.0.1:2380.
	PeerURL string
	// InitialCluster lists every member as name=peerURL,...; empty means a
	// single-member cluster of this node.
	InitialCluster string
	// ClusterState is "new" (default) or "existing" (joining a running cluster).
	ClusterState string
	// StartTimeout bounds the wait for the member to be ready; default 60s.
	StartTimeout time.Duration
	// LogLevel for etcd's own zap logger; default "fatal" (etcd logs routine
	// shutdown steps at error level, which would drown Quire's own log).
	LogLevel string
	// Headroom keeps disk space for the member so that a full data disk
	// (bookies on the same file system) never stops it; see headroom.go.
	Headroom Headroom
	// QuotaBackendBytes bounds etcd's database; past it etcd raises its
	// NOSPACE alarm and refuses writes but keeps serving reads. 0: etcd's
	// default, 2 GiB.
	QuotaBackendBytes int64
	// Logger receives the member's failures and headroom changes; nil:
	// slog.Default().
	Logger *slog.Logger
	// ClientTLS, when enabled, makes the client listener serve TLS (then
	// ClientURL is https://) with Cert and Key; with ClientCA it requires
	// client certificates that CA signed (etcd's --client-cert-auth and
	// --trusted-ca-file). The member's own gRPC gateway dials itself with
	// Cert, so with ClientCA that certificate must also be valid for client
	// authentication (tlsconf.MakeTestPKI's server certificate is).
	ClientTLS tlsconf.Files
	// PeerTLS, when enabled, makes the peer listener and the member's
	// connections to its peers TLS (then PeerURL and every peer URL of
	// InitialCluster are https://): Cert and Key are the member's identity
	// both ways, so valid for server and client authentication, and ClientCA
	// is required: the CA that signed every member's certificate, checked in
	// both directions (etcd's --peer-client-cert-auth).
	PeerTLS tlsconf.Files
}

// Embedded is a running embedded etcd member.
//
// etcd ends its process (zap's Fatal: os.Exit) when it cannot write its WAL
// or database, which on a full disk took every other component of the
// process down with it. An Embedded never does: etcd's fatal and panic logs
// end only the etcd goroutine that logged them (runtime.Goexit), and the
// member is then reported failed (Healthy, Status, Err) while the process
// goes on.
type Embedded struct {
	etcd      *embed.Etcd
	clientURL string
	log       *slog.Logger
	headroom  *headroom

	mu       sync.Mutex
	failure  error         // why the member stopped; nil while it runs
	failed   chan struct{} // closed when failure is set
	closing  bool
	errc     chan error // the failure, once, for Err
	stopOnce sync.Once
}

// StartEmbedded starts an etcd member and waits until it serves requests. A
// restart on the same DataDir keeps every key.
func StartEmbedded(cfg EmbedConfig) (*Embedded, error) {
	if cfg.DataDir == "" {
		return nil, errors.New("meta: embedded etcd needs a data dir")
	}
	if cfg.Name == "" {
		cfg.Name = "quire"
	}
	if cfg.ClientURL == "" {
		cfg.ClientURL = "http://127.0.0.1:2379"
	}
	if cfg.PeerURL == "" {
		cfg.PeerURL = "http://127.0.0.1:2380"
	}
	if cfg.InitialCluster == "" {
		cfg.InitialCluster = cfg.Name + "=" + cfg.PeerURL
	}
	if cfg.ClusterState == "" {
		cfg.ClusterState = embed.ClusterStateFlagNew
	}
	if cfg.StartTimeout == 0 {
		cfg.StartTimeout = 60 * time.Second
	}
	if cfg.LogLevel == "" {
		cfg.LogLevel = "fatal"
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	clientURL, err := url.Parse(cfg.ClientURL)
	if err != nil {
		return nil, fmt.Errorf("meta: client url %q: %w", cfg.ClientURL, err)
	}
	peerURL, err := url.Parse(cfg.PeerURL)
	if err != nil {
		return nil, fmt.Errorf("meta: peer url %q: %w", cfg.PeerURL, err)
	}
	if err := checkTLSURL("client", clientURL, cfg.ClientTLS); err != nil {
		return nil, err
	}
	if err := checkTLSURL("peer", peerURL, cfg.PeerTLS); err != nil {
		return nil, err
	}
	if cfg.PeerTLS.Enabled() && cfg.PeerTLS.ClientCA == "" {
		return nil, errors.New("meta: peer TLS needs the CA of the members' certificates (members authenticate each other)")
	}
	level, err := zapcore.ParseLevel(cfg.LogLevel)
	if err != nil {
		return nil, fmt.Errorf("meta: etcd log level %q: %w", cfg.LogLevel, err)
	}
	m := &Embedded{clientURL: cfg.ClientURL, log: cfg.Logger.With("component", "meta"),
		failed: make(chan struct{}), errc: make(chan error, 1)}
	// Before etcd starts: on a full disk the ballast is released now, so
	// that etcd finds the room to open its WAL (it preallocates segments).
	m.headroom = newHeadroom(cfg.Headroom, cfg.DataDir, m.log)

	ec := embed.NewConfig()
	ec.Name = cfg.Name
	ec.Dir = cfg.DataDir
	ec.ListenClientUrls = []url.URL{*clientURL}
	ec.AdvertiseClientUrls = []url.URL{*clientURL}
	ec.ListenPeerUrls = []url.URL{*peerURL}
	ec.AdvertisePeerUrls = []url.URL{*peerURL}
	ec.InitialCluster = cfg.InitialCluster
	ec.ClusterState = cfg.ClusterState
	ec.LogLevel = cfg.LogLevel
	ec.QuotaBackendBytes = cfg.QuotaBackendBytes
	if f := cfg.ClientTLS; f.Enabled() {
		ec.ClientTLSInfo.CertFile, ec.ClientTLSInfo.KeyFile = f.Cert, f.Key
		ec.ClientTLSInfo.TrustedCAFile, ec.ClientTLSInfo.ClientCertAuth = f.ClientCA, f.ClientCA != ""
	}
	if f := cfg.PeerTLS; f.Enabled() {
		ec.PeerTLSInfo.CertFile, ec.PeerTLSInfo.KeyFile = f.Cert, f.Key
		ec.PeerTLSInfo.TrustedCAFile, ec.PeerTLSInfo.ClientCertAuth = f.ClientCA, true
	}
	// etcd's fatal and panic logs end the goroutine that logged them, not
	// the process: see Embedded.
	lg := zap.New(zapcore.NewCore(zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig()), zapcore.Lock(os.Stderr), level),
		zap.WithFatalHook(goexitHook{m}), zap.WithPanicHook(goexitHook{m}))
	ec.ZapLoggerBuilder = embed.NewZapLoggerBuilder(lg)
	// Keep an hour of history for watches to resume from, then compact.
	ec.AutoCompactionMode = "periodic"
	ec.AutoCompactionRetention = "1h"

	// StartEtcd runs on its own goroutine: a fatal log during startup ends
	// that goroutine, never the caller's (which may be main's).
	started := make(chan struct{})
	var e *embed.Etcd
	var startErr error
	go func() {
		defer close(started)
		e, startErr = embed.StartEtcd(ec)
	}()
	timeout := time.NewTimer(cfg.StartTimeout)
	defer timeout.Stop()
	select {
	case <-started:
	case <-m.failed:
		m.headroom.stop()
		return nil, fmt.Errorf("meta: start embedded etcd in %s: %w", cfg.DataDir, m.Failure())
	case <-timeout.C:
		m.headroom.stop()
		return nil, fmt.Errorf("meta: embedded etcd not started after %v", cfg.StartTimeout)
	}
	if startErr != nil {
		m.headroom.stop()
		return nil, fmt.Errorf("meta: start embedded etcd in %s: %w", cfg.DataDir, startErr)
	}
	m.etcd = e
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		m.closeBounded()
		m.headroom.stop()
		return nil, fmt.Errorf("meta: embedded etcd failed: %w", err)
	case <-m.failed:
		m.closeBounded()
		m.headroom.stop()
		return nil, fmt.Errorf("meta: embedded etcd failed: %w", m.Failure())
	case <-timeout.C:
		m.closeBounded()
		m.headroom.stop()
		return nil, fmt.Errorf("meta: embedded etcd not ready after %v", cfg.StartTimeout)
	}
	go m.watch()
	return m, nil
}

// checkTLSURL refuses a listener URL whose scheme disagrees with its TLS
// setting: etcd would otherwise serve plaintext on an https URL or the
// reverse, and clients would fail with confusing errors.
func checkTLSURL(what string, u *url.URL, files tlsconf.Files) error {
	if files.Enabled() && (files.Cert == "" || files.Key == "") {
		return fmt.Errorf("meta: %s TLS needs a certificate and its key", what)
	}
	switch {
	case files.Enabled() && u.Scheme != "https":
		return fmt.Errorf("meta: %s TLS is on but the %s URL %s is not https://", what, what, u)
	case !files.Enabled() && u.Scheme == "https":
		return fmt.Errorf("meta: the %s URL %s is https:// but no %s certificate is set", what, u, what)
	}
	return nil
}

// goexitHook ends the goroutine that logged a fatal or panic message,
// recording the message as the member's failure.
type goexitHook struct{ m *Embedded }

func (h goexitHook) OnWrite(ce *zapcore.CheckedEntry, fields []zapcore.Field) {
	reason := ce.Message
	for _, f := range fields {
		if f.Type == zapcore.ErrorType {
			if err, ok := f.Interface.(error); ok {
				reason += ": " + err.Error()
			}
		}
	}
	h.m.fail(errors.New("etcd: " + reason))
	runtime.Goexit()
}

// watch turns the member's own errors and an unrequested stop into a
// failure.
func (m *Embedded) watch() {
	select {
	case err := <-m.etcd.Err():
		m.fail(fmt.Errorf("etcd: %w", err))
	case <-m.etcd.Server.StopNotify():
		m.fail(errors.New("etcd: server stopped"))
	case <-m.failed:
	}
}

// fail records the first failure (nothing while closing: a requested stop
// is no failure).
func (m *Embedded) fail(err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.failure != nil || m.closing {
		return
	}
	m.failure = err
	close(m.failed)
	m.errc <- err
	m.log.Error("embedded etcd stopped; the process keeps running without it (restart it to bring the metadata store back)", "err", err)
}

// Endpoint is the client URL to pass to NewEtcd.
func (e *Embedded) Endpoint() string { return e.clientURL }

// Err receives the member's failure, once.
func (e *Embedded) Err() <-chan error { return e.errc }

// Failed is closed when the member has stopped on its own.
func (e *Embedded) Failed() <-chan struct{} { return e.failed }

// Failure is why the member stopped; nil while it runs.
func (e *Embedded) Failure() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.failure
}

// Healthy reports whether the member has a leader and is serving.
func (e *Embedded) Healthy() error {
	if err := e.Failure(); err != nil {
		return err
	}
	if e.etcd.Server.Leader() == 0 {
		return errors.New("etcd: no leader")
	}
	for _, a := range e.etcd.Server.Alarms() {
		if a.Alarm == etcdserverpb.AlarmType_NOSPACE {
			return errors.New("etcd: database over its quota (NOSPACE alarm): writes refused")
		}
	}
	return nil
}

// EmbeddedStatus is the member's state for health reports and metrics.
type EmbeddedStatus struct {
	Err error // Healthy's answer
	// BallastBytes is the size of the ballast file on disk now; 0 once
	// released (or when there is none).
	BallastBytes int64
	// FreeBytes and TotalBytes: the data directory's file system, last
	// sampled; 0 when unknown.
	FreeBytes, TotalBytes uint64
}

// Status reports health, ballast and disk space.
func (e *Embedded) Status() EmbeddedStatus {
	s := EmbeddedStatus{Err: e.Healthy()}
	s.BallastBytes, s.FreeBytes, s.TotalBytes = e.headroom.state()
	return s
}

// ReleasedBallastBytes is how much of the ballast is not on disk now: space
// that other writers on the same file system must treat as taken, or they
// would fill what was released for etcd.
func (e *Embedded) ReleasedBallastBytes() int64 { return e.headroom.released() }

// Close stops the member gracefully. A member that failed may never finish
// stopping (its goroutine ended while holding etcd's locks): Close waits a
// bounded time, then leaves it.
func (e *Embedded) Close() {
	e.mu.Lock()
	e.closing = e.failure == nil
	e.mu.Unlock()
	e.closeBounded()
	e.headroom.stop()
}

func (e *Embedded) closeBounded() {
	e.stopOnce.Do(func() {
		done := make(chan struct{})
		go func() {
			defer close(done)
			e.etcd.Close()
		}()
		t := time.NewTimer(15 * time.Second)
		defer t.Stop()
		select {
		case <-done:
		case <-t.C:
			e.log.Warn("embedded etcd did not stop within 15s; leaving it")
		}
	})
}
