package meta

import (
	"errors"
	"fmt"
	"net/url"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
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
}

// Embedded is a running embedded etcd member.
type Embedded struct {
	etcd      *embed.Etcd
	clientURL string
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
	clientURL, err := url.Parse(cfg.ClientURL)
	if err != nil {
		return nil, fmt.Errorf("meta: client url %q: %w", cfg.ClientURL, err)
	}
	peerURL, err := url.Parse(cfg.PeerURL)
	if err != nil {
		return nil, fmt.Errorf("meta: peer url %q: %w", cfg.PeerURL, err)
	}
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
	// Keep an hour of history for watches to resume from, then compact.
	ec.AutoCompactionMode = "periodic"
	ec.AutoCompactionRetention = "1h"
	e, err := embed.StartEtcd(ec)
	if err != nil {
		return nil, fmt.Errorf("meta: start embedded etcd in %s: %w", cfg.DataDir, err)
	}
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		e.Close()
		return nil, fmt.Errorf("meta: embedded etcd failed: %w", err)
	case <-time.After(cfg.StartTimeout):
		e.Server.Stop()
		e.Close()
		return nil, fmt.Errorf("meta: embedded etcd not ready after %v", cfg.StartTimeout)
	}
	return &Embedded{etcd: e, clientURL: cfg.ClientURL}, nil
}

// Endpoint is the client URL to pass to NewEtcd.
func (e *Embedded) Endpoint() string { return e.clientURL }

// Err reports fatal errors of the running member.
func (e *Embedded) Err() <-chan error { return e.etcd.Err() }

// Healthy reports whether the member has a leader and is serving.
func (e *Embedded) Healthy() error {
	if e.etcd.Server.Leader() == 0 {
		return errors.New("etcd: no leader")
	}
	return nil
}

// Close stops the member gracefully.
func (e *Embedded) Close() { e.etcd.Close() }
