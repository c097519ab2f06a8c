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
}

func (o *metaOptions) embedConfig(dataDir string) meta.EmbedConfig {
	return meta.EmbedConfig{
		Name:           o.name,
		DataDir:        dataDir,
		ClientURL:      "http://" + o.clientAddr,
		PeerURL:        "http://" + o.peerAddr,
		InitialCluster: o.initialCluster,
		ClusterState:   o.initialClusterState,
		LogLevel:       o.etcdLogLevel,
		Headroom:       meta.Headroom{BallastBytes: int64(o.ballastMB) << 20},
		// 0 keeps etcd's default (2 GiB).
		QuotaBackendBytes: int64(o.quotaBackendMB) << 20,
		Logger:            slog.Default(),
	}
}

func newMetaCommand() *cobra.Command {
	var o metaOptions
	cmd := &cobra.Command{
		Use:   "meta",
		Short: "Run a metadata store member (embedded etcd); other roles reach it with --meta-endpoints",
		Long: `Run one etcd member, embedded in Quire. Alone it is a single-node cluster;
with --initial-cluster name1=http://host1:2380,name2=... it forms a cluster with its peers.
Every other role takes --meta-endpoints to use it, or any external etcd cluster.`,
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
			slog.Info("quire meta ready", "name", o.name, "client", e.Endpoint(), "peer", "http://"+o.peerAddr, "data-dir", dir)
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
}
