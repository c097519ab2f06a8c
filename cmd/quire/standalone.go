package main

import (
	"cmp"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/prometheus/client_golang/prometheus"

	"quire/internal/admin"
	"quire/internal/bookie"
	"quire/internal/bookie/client"
	"quire/internal/bookie/node"
	"quire/internal/lowprio"
	"quire/internal/meta"
	"quire/internal/tlsconf"
)

// clusterKey holds the cluster's identity, written once on first start.
const clusterKey = "/quire/cluster"

type standaloneOptions struct {
	dataDir     string
	metaDataDir string
	httpAddr    string
	bookieAddrs []string
	meta        metaOptions
	broker      brokerFlags
	engine      engineFlags
	isr         standaloneISRFlags // --mode isr --brokers N (standalone_isr.go)
	bookieTLS   tlsconf.Files      // the bookies' listeners (--bookie-tls-cert/-key/-client-ca)
	metaTLSCA   string             // --meta-tls-ca: what the process's own etcd client trusts
	bulkThreads int                // --bulk-threads
}

func newStandaloneCommand() *cobra.Command {
	var o standaloneOptions
	cmd := &cobra.Command{
		Use:   "standalone",
		Short: "Run everything in one process: embedded etcd, three bookies, a broker (Kafka on 127.0.0.1:9092) and the HTTP server",
		Long: `Run a single-process Quire with embedded defaults, keeping all data under --data-dir.
A restart on the same data dir keeps its data. Stops gracefully on SIGINT or SIGTERM.

It runs: the embedded metadata store (etcd), three bookies (one per
--bookie-addrs entry; topics use E=3, Qw=3, Qa=2), a broker serving the Kafka
protocol on --kafka-addr, and the HTTP server with /healthz, /readyz and /metrics.

A full disk never stops it: the bookies turn read-only (reads are served,
produces are refused with NOT_ENOUGH_REPLICAS), etcd keeps the space of its
ballast (--meta-ballast-mb), /healthz says "status: degraded" and why, and it
turns writable again by itself once space is freed (docs/operations.md).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return runStandalone(ctx, o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.dataDir, "data-dir", "./quire-data", "data directory for every component")
	f.StringVar(&o.metaDataDir, "meta-data-dir", "", "etcd's data directory, ideally on another file system than the bookies' (default DATA-DIR/meta)")
	f.StringVar(&o.httpAddr, "http-addr", "127.0.0.1:8080", "HTTP listen address for /healthz, /readyz and /metrics")
	f.StringSliceVar(&o.bookieAddrs, "bookie-addrs", []string{"127.0.0.1:3181", "127.0.0.1:3182", "127.0.0.1:3183"}, "listen addresses of the bookies to run, one bookie each (data in DATA-DIR/bookie-N)")
	addMetaMemberFlags(cmd, &o.meta, "meta-")
	f.StringVar(&o.metaTLSCA, "meta-tls-ca", "", "PEM CA certificates the standalone's own etcd client trusts when --meta-tls-cert is set (default --meta-tls-client-ca); it presents --meta-tls-cert itself")
	registerBookieServerTLS(f, &o.bookieTLS)
	f.IntVar(&o.bulkThreads, "bulk-threads", defaultBulkThreads, "low-priority (nice 19) threads for catch-up reads' bulk work: the bookies' entry-log reads while adds arrive and the broker's fetch responses of 1 MiB or more; 0 runs it at the process's priority")
	o.broker.register(cmd, "127.0.0.1:6650")
	o.engine.register(cmd)
	o.isr.register(cmd)
	return cmd
}

func runStandalone(ctx context.Context, o standaloneOptions) error {
	log := slog.Default()
	started := time.Now()
	health := admin.NewHealth()
	metaDir := o.metaDataDir
	if metaDir == "" {
		metaDir = filepath.Join(o.dataDir, "meta")
	}
	if err := os.MkdirAll(metaDir, 0o755); err != nil {
		return err
	}
	metaClientTLS, err := o.metaClientTLS()
	if err != nil {
		return err
	}
	bookieTLS, err := o.bookieTLSConfigs()
	if err != nil {
		return err
	}
	embedded, err := meta.StartEmbedded(o.meta.embedConfig(metaDir))
	if err != nil {
		return err
	}
	defer embedded.Close()
	store, err := meta.NewEtcd(meta.EtcdConfig{Endpoints: []string{embedded.Endpoint()}, TLS: metaClientTLS})
	if err != nil {
		return err
	}
	defer store.Close()
	health.RegisterReporter("meta", metaReporter(embedded, store))
	registerMetaMetrics(embedded)
	id, err := ensureCluster(ctx, store)
	if err != nil {
		return err
	}
	readGate := bookie.NewReadGate(0, 0) // the bookies share the CPUs: an add to any gates the reads of all
	if o.bulkThreads > 0 {
		bulk := newBulkPool(o.bulkThreads)
		defer bulk.Close()
		readGate.SetBulk(bulk)
		o.broker.bulk = bulk
	}
	for i, addr := range o.bookieAddrs {
		dir := filepath.Join(o.dataDir, fmt.Sprintf("bookie-%d", i+1))
		engine := o.engine.config()
		engine.DiskUsage = sharedDiskUsage(dir, metaDir, embedded)
		engine.ReadGate = readGate
		n, err := node.Start(ctx, node.Config{
			ID: fmt.Sprintf("bookie-%d", i+1), DataDir: dir, ListenAddr: addr,
			Store: store, Engine: engine, Registerer: prometheus.DefaultRegisterer, Logger: log, TLS: bookieTLS,
		})
		if err != nil {
			return err
		}
		defer n.Close()
		health.RegisterReporter(n.ID(), bookieReporter(n))
		if o.broker.localBookies == nil {
			o.broker.localBookies = map[string]client.LocalBookie{}
		}
		o.broker.localBookies[n.Addr()] = n.Local()
	}

	if ps := &o.broker.pulsarSecurity; ps.tlsAddr == "" && ps.tls.Enabled() {
		ps.tlsAddr = pulsarStandaloneTLSAddr
	}
	br, closeBroker, err := o.startBrokers(ctx, store, log) // one, or --brokers in ISR mode
	if err != nil {
		return err
	}
	defer closeBroker() // before the bookies close: close the ledgers cleanly first
	health.RegisterReporter("broker", brokerReporter(br))
	if err := prometheus.DefaultRegisterer.Register(health.Collector(2 * time.Second)); err != nil {
		log.Warn("health metrics not registered", "err", err)
	}

	httpServer, err := admin.Listen(admin.Config{Addr: o.httpAddr, Health: health, Logger: log, TLS: o.broker.httpTLS})
	if err != nil {
		return err
	}
	pulsarAdmin := br.PulsarAdmin() // Pulsar's admin REST API and its HTTP lookup
	httpServer.Handle("/admin/v2/", pulsarAdmin)
	httpServer.Handle("/lookup/v2/", pulsarAdmin)
	health.SetReady(true)
	log.Info("quire standalone ready", "cluster", id, "data-dir", o.dataDir, "http", "http://"+httpServer.Addr(),
		"meta", embedded.Endpoint(), "kafka", o.broker.kafkaAddr, "pulsar", o.broker.pulsarAddr, "startup", time.Since(started).Round(time.Millisecond))
	logDegraded(ctx, health, log)

	var runErr error
	lost := br.Lost()
	for runErr == nil && ctx.Err() == nil {
		select {
		case <-ctx.Done():
		case <-embedded.Failed():
			// The process stays up: the bookies keep serving reads of what
			// the broker has loaded, and /healthz says what stopped. The
			// broker will lose its session; that is no reason to exit then.
			log.Error("metadata store down; quire standalone keeps running: restart it once the cause is fixed", "err", embedded.Failure())
			lost = nil
			<-ctx.Done()
		case <-lost:
			if embedded.Failure() != nil {
				lost = nil
				continue
			}
			// As Pulsar's default zookeeperSessionExpiredPolicy=shutdown: the
			// broker's claims are gone, so stop rather than serve without them.
			runErr = fmt.Errorf("broker %d lost its metadata session", br.ID())
		}
	}
	if runErr == nil {
		log.Info("quire standalone stopping")
	}
	health.SetReady(false)
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := httpServer.Shutdown(shutdownCtx); err != nil {
		log.Warn("http shutdown", "err", err)
	}
	return runErr
}

// metaClientTLS is the configuration of the standalone's own etcd client:
// none without --meta-tls-cert; otherwise it presents the member's own
// certificate (so, with --meta-tls-client-ca, that certificate must be
// valid for client authentication too, as quire certs' server.pem is) and
// trusts --meta-tls-ca, by default --meta-tls-client-ca.
func (o *standaloneOptions) metaClientTLS() (*tls.Config, error) {
	m := o.meta.clientTLS
	if !m.Enabled() {
		return nil, nil
	}
	ca := cmp.Or(o.metaTLSCA, m.ClientCA)
	if ca == "" {
		return nil, errors.New("standalone: --meta-tls-cert needs --meta-tls-ca (or --meta-tls-client-ca): the CA the standalone's own etcd client trusts")
	}
	return clientTLS("meta client", tlsconf.ClientFiles{CA: ca, Cert: m.Cert, Key: m.Key})
}

// bookieTLSConfigs returns the bookies' listener configuration (nil: no
// TLS) and fills in what the embedded brokers' bookie client lacks: they
// trust --bookie-tls-client-ca unless --bookie-tls-ca says otherwise, and
// present the bookies' own certificate unless --bookie-tls-client-cert
// does (so, with --bookie-tls-client-ca, that certificate must be valid
// for client authentication too, as quire certs' server.pem is).
func (o *standaloneOptions) bookieTLSConfigs() (*tls.Config, error) {
	cfg, err := serverTLS("bookie", o.bookieTLS)
	if err != nil || cfg == nil {
		return nil, err
	}
	c := &o.broker.bookieTLS
	c.CA = cmp.Or(c.CA, o.bookieTLS.ClientCA)
	if c.CA == "" {
		return nil, errors.New("standalone: --bookie-tls-cert needs --bookie-tls-ca (or --bookie-tls-client-ca): the CA the brokers trust for the bookies")
	}
	if c.Cert == "" && c.Key == "" {
		c.Cert, c.Key = o.bookieTLS.Cert, o.bookieTLS.Key
	}
	return cfg, nil
}

// clusterInfo is the value at clusterKey.
type clusterInfo struct {
	ID      int64     `json:"id"`
	Created time.Time `json:"created"`
}

// ensureCluster reads the cluster identity, creating it on first start.
func ensureCluster(ctx context.Context, store meta.Store) (int64, error) {
	kv, err := store.Get(ctx, clusterKey)
	if err == nil {
		var info clusterInfo
		if err := json.Unmarshal(kv.Value, &info); err != nil {
			return 0, fmt.Errorf("cluster record %s: %w", clusterKey, err)
		}
		return info.ID, nil
	}
	if !errors.Is(err, meta.ErrNotFound) {
		return 0, err
	}
	id, err := store.AllocateID(ctx, "cluster")
	if err != nil {
		return 0, err
	}
	value, _ := json.Marshal(clusterInfo{ID: id, Created: time.Now().UTC()})
	if _, err := store.Create(ctx, clusterKey, value); err != nil && !errors.Is(err, meta.ErrExists) {
		return 0, err
	}
	return ensureCluster(ctx, store)
}

// defaultBulkThreads is --bulk-threads' default.
const defaultBulkThreads = 2

// newBulkPool starts a pool of low-priority threads for a catch-up reader's
// bulk work (internal/lowprio) and, unless GOMAXPROCS is set, gives the Go
// scheduler one more P per pool thread: a pool thread the kernel keeps
// waiting (its priority is that it waits) holds its P meanwhile, and the live
// path must still find a P per core. Measured on two cores, a 20k records/s
// producer beside a catch-up reader (docs/benchmarks.md, "Catch-up work at
// the lowest CPU priority"): p99 25-51 ms without the pool, 19-34 ms with
// only the Ps added, 11-28 ms with both; the reader reads slower for it.
func newBulkPool(threads int) *lowprio.Pool {
	if os.Getenv("GOMAXPROCS") == "" {
		runtime.GOMAXPROCS(runtime.GOMAXPROCS(0) + threads)
	}
	return lowprio.New(threads)
}
