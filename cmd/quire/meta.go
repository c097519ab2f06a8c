package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/spf13/cobra"

	"quire/internal/meta"
	"quire/internal/tlsconf"
)

// metaOptions configures an embedded etcd member.
type metaOptions struct {
	dataDir             string
	name                string
	clientAddr          string
	peerAddr            string
	initialCluster      string
	initialClusterState string
	etcdLogLevel        string
	ballastMB           int
	quotaBackendMB      int
	clientTLS           tlsconf.Files // the client listener (--tls-*; --meta-tls-* in standalone)
	peerTLS             tlsconf.Files // the peer listener and connections to peers (--peer-tls-*)
}

// clientURL and peerURL are the member's URLs: https:// when TLS is on.
func (o *metaOptions) clientURL() string { return schemeFor(o.clientTLS) + o.clientAddr }
func (o *metaOptions) peerURL() string   { return schemeFor(o.peerTLS) + o.peerAddr }

func schemeFor(files tlsconf.Files) string {
	if files.Enabled() {
		return "https://"
	}
	return "http://"
}

func (o *metaOptions) embedConfig(dataDir string) meta.EmbedConfig {
	return meta.EmbedConfig{
		Name:           o.name,
		DataDir:        dataDir,
		ClientURL:      o.clientURL(),
		PeerURL:        o.peerURL(),
		InitialCluster: o.initialCluster,
		ClusterState:   o.initialClusterState,
		LogLevel:       o.etcdLogLevel,
		Headroom:       meta.Headroom{BallastBytes: int64(o.ballastMB) << 20},
		// 0 keeps etcd's default (2 GiB).
		QuotaBackendBytes: int64(o.quotaBackendMB) << 20,
		Logger:            slog.Default(),
		ClientTLS:         o.clientTLS,
		PeerTLS:           o.peerTLS,
	}
}

func newMetaCommand() *cobra.Command {
	var o metaOptions
	cmd := &cobra.Command{
		Use:   "meta",
		Short: "Run a metadata store member (embedded etcd); other roles reach it with --meta-endpoints",
		Long: `Run one etcd member, embedded in Quire. Alone it is a single-node cluster;
with --initial-cluster name1=http://host1:2380,name2=... it forms a cluster with its peers.
Every other role takes --meta-endpoints to use it, or any external etcd cluster.

With --tls-cert/--tls-key clients connect over TLS (https://; their --meta-tls-ca
trusts the CA), with --tls-client-ca only clients presenting a certificate that CA
signed (their --meta-tls-cert/--meta-tls-key). With --peer-tls-cert/--peer-tls-key/
--peer-tls-ca members talk to each other over mutual TLS (https:// peer URLs in
--initial-cluster).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			dir := filepath.Join(o.dataDir, "meta")
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return err
			}
			e, err := meta.StartEmbedded(o.embedConfig(dir))
			if err != nil {
				return err
			}
			defer e.Close()
			slog.Info("quire meta ready", "name", o.name, "client", e.Endpoint(), "peer", o.peerURL(), "data-dir", dir)
			select {
			case <-ctx.Done():
				slog.Info("quire meta stopping")
				return nil
			case err := <-e.Err():
				// A member process has nothing else to serve: exit, so
				// that its supervisor restarts it (on a full disk its
				// ballast is released before etcd starts again).
				return fmt.Errorf("meta: %w", err)
			}
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.dataDir, "data-dir", "./quire-data", "data directory (etcd keeps its files in DIR/meta)")
	addMetaMemberFlags(cmd, &o, "")
	return cmd
}

// addMetaMemberFlags registers the etcd member flags; prefix distinguishes
// them inside standalone (e.g. --meta-client-addr).
func addMetaMemberFlags(cmd *cobra.Command, o *metaOptions, prefix string) {
	f := cmd.Flags()
	f.StringVar(&o.name, prefix+"name", "quire", "etcd member name")
	f.StringVar(&o.clientAddr, prefix+"client-addr", "127.0.0.1:2379", "etcd client listen address (host:port)")
	f.StringVar(&o.peerAddr, prefix+"peer-addr", "127.0.0.1:2380", "etcd peer listen address (host:port)")
	f.StringVar(&o.initialCluster, prefix+"initial-cluster", "", "etcd initial cluster, name=http://host:port,...; empty: this member alone")
	f.StringVar(&o.initialClusterState, prefix+"initial-cluster-state", "new", "etcd initial cluster state: new or existing")
	f.StringVar(&o.etcdLogLevel, prefix+"etcd-log-level", "fatal", "log level of etcd's own logger (debug, info, warn, error, fatal)")
	f.IntVar(&o.ballastMB, prefix+"ballast-mb", meta.DefaultBallastBytes>>20, "disk space (MiB, at most 1/16 of the file system) reserved for etcd by a ballast file beside its data dir, released when free space drops below it so that a full disk never stops etcd; 0: none")
	f.IntVar(&o.quotaBackendMB, prefix+"quota-backend-mb", 0, "etcd's database quota (MiB): past it etcd refuses writes (NOSPACE alarm) but keeps serving reads; 0: etcd's default, 2048")
	f.StringVar(&o.clientTLS.Cert, prefix+"tls-cert", "", "PEM certificate: etcd's client listener speaks TLS (https://); with --"+prefix+"tls-client-ca it must also be valid for client authentication (quire certs' server.pem is)")
	f.StringVar(&o.clientTLS.Key, prefix+"tls-key", "", "PEM private key of --"+prefix+"tls-cert")
	f.StringVar(&o.clientTLS.ClientCA, prefix+"tls-client-ca", "", "PEM CA certificates: etcd requires client certificates signed by them (etcd's --client-cert-auth): every quire process connecting presents one (--meta-tls-cert)")
	f.StringVar(&o.peerTLS.Cert, prefix+"peer-tls-cert", "", "PEM certificate: members talk to each other over mutual TLS with it (valid for server and client authentication); peer URLs become https://")
	f.StringVar(&o.peerTLS.Key, prefix+"peer-tls-key", "", "PEM private key of --"+prefix+"peer-tls-cert")
	f.StringVar(&o.peerTLS.ClientCA, prefix+"peer-tls-ca", "", "PEM CA certificates that signed every member's peer certificate (required with --"+prefix+"peer-tls-cert)")
}
