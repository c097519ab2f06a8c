package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"

	"quire/internal/admin"
	"quire/internal/autorecovery"
	"quire/internal/bookie"
	"quire/internal/bookie/client"
	"quire/internal/bookie/node"
	"quire/internal/meta"
	"quire/internal/tlsconf"
)

// engineFlags are the storage engine's tunables, shared by `quire bookie`
// and `quire perf bookie`.
type engineFlags struct {
	journalMaxWait             time.Duration
	journalMaxBytes            int
	journalFlushWhenQueueEmpty bool
	journalSyncData            bool
	journalFileMB              int
	writeCacheMB               int
	readCacheMB                int
	entryLogBufferedIO         bool
	checkpointInterval         time.Duration
	gcInterval                 time.Duration
	gcThreshold                float64
	diskUsageWarn              float64
	diskUsageHigh              float64
	diskUsageLow               float64
	diskReserveMB              int
}

func (e *engineFlags) register(cmd *cobra.Command) {
	d := bookie.DefaultConfig("", "")
	f := cmd.Flags()
	f.DurationVar(&e.journalMaxWait, "journal-max-wait", d.JournalMaxWait, "group commit: longest wait to collect adds before a write+fsync (when not flushing on an empty queue)")
	f.IntVar(&e.journalMaxBytes, "journal-max-bytes", d.JournalMaxBytes, "group commit: most bytes written per fsync")
	f.BoolVar(&e.journalFlushWhenQueueEmpty, "journal-flush-when-queue-empty", d.JournalFlushWhenQueueEmpty, "group commit: write and fsync as soon as the queue is empty (the fsync forms the batch)")
	f.BoolVar(&e.journalSyncData, "journal-sync-data", d.JournalSyncData, "fsync the journal before acknowledging adds; false acknowledges after write(2) and LOSES acknowledged entries on power loss")
	f.IntVar(&e.journalFileMB, "journal-file-mb", int(d.JournalFileBytes>>20), "size of each preallocated, recycled journal file (MiB)")
	f.IntVar(&e.writeCacheMB, "write-cache-mb", d.WriteCacheBytes>>20, "write cache size (MiB), double-buffered")
	f.BoolVar(&e.entryLogBufferedIO, "entry-log-buffered-io", d.EntryLogBufferedIO, "write entry logs through the page cache instead of with direct I/O")
	f.IntVar(&e.readCacheMB, "read-cache-mb", d.ReadCacheBytes>>20, "read cache size (MiB)")
	f.DurationVar(&e.checkpointInterval, "checkpoint-interval", d.CheckpointInterval, "how often the write cache is flushed to entry logs and old journals recycled")
	f.DurationVar(&e.gcInterval, "gc-interval", d.GCInterval, "how often entry logs are compacted")
	f.Float64Var(&e.gcThreshold, "gc-threshold", d.GCThreshold, "compact entry logs whose live fraction is below this")
	f.Float64Var(&e.diskUsageWarn, "disk-usage-warn", d.DiskUsageWarn, "disk usage fraction (predicted) above which the bookie warns and compacts entry logs at once")
	f.Float64Var(&e.diskUsageHigh, "disk-usage-high", d.DiskUsageHigh, "disk usage fraction (predicted) above which the bookie turns read-only")
	f.Float64Var(&e.diskUsageLow, "disk-usage-low", d.DiskUsageLow, "disk usage fraction (predicted) below which a read-only bookie is writable again")
	f.IntVar(&e.diskReserveMB, "disk-reserve-mb", int(d.DiskReserveBytes>>20), "free space (MiB) the bookie never plans to use: with less predicted free it turns read-only, whatever the usage fraction")
}

func (e *engineFlags) config() *bookie.Config {
	c := bookie.DefaultConfig("", "")
	c.JournalMaxWait = e.journalMaxWait
	c.JournalMaxBytes = e.journalMaxBytes
	c.JournalFlushWhenQueueEmpty = e.journalFlushWhenQueueEmpty
	c.JournalSyncData = e.journalSyncData
	c.JournalFileBytes = int64(e.journalFileMB) << 20
	c.WriteCacheBytes = e.writeCacheMB << 20
	c.ReadCacheBytes = e.readCacheMB << 20
	c.EntryLogBufferedIO = e.entryLogBufferedIO
	c.CheckpointInterval = e.checkpointInterval
	c.GCInterval = e.gcInterval
	c.GCThreshold = e.gcThreshold
	c.DiskUsageWarn = e.diskUsageWarn
	c.DiskUsageHigh = e.diskUsageHigh
	c.DiskUsageLow = e.diskUsageLow
	c.DiskReserveBytes = int64(e.diskReserveMB) << 20
	return &c
}

type bookieOptions struct {
	id, dataDir, journalDir, listen, advertise, zone, httpAddr string
	metaEndpoints                                              []string
	sessionTTL                                                 time.Duration
	engine                                                     engineFlags
	autorecovery                                               autorecoveryFlags
	mutant                                                     string
	tls                                                        tlsconf.Files       // the bookie listener (--bookie-tls-*)
	clientTLS                                                  tlsconf.ClientFiles // autorecovery's connections to bookies
	metaTLS                                                    tlsconf.ClientFiles // --meta-tls-*
}

func newBookieCommand() *cobra.Command {
	var o bookieOptions
	cmd := &cobra.Command{
		Use:   "bookie",
		Short: "Run a bookie: the storage node of ledger mode",
		Long: `Run a bookie: a journal with group commit (an add is acknowledged only after the
fsync that covers it), entry logs with a Pebble entry-location index, fencing, and
read-only mode above a disk-usage threshold. It registers itself in the metadata
store (address, zone, writable or read-only) for as long as it runs.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(o.metaEndpoints) == 0 {
				return fmt.Errorf("bookie: --meta-endpoints is required")
			}
			mutant, err := node.ParseMutant(o.mutant)
			if err != nil {
				return err
			}
			if mutant != "" {
				slog.Warn("bookie runs deliberately broken (tests only)", "mutant", mutant)
			}
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			listenerTLS, err := serverTLS("bookie", o.tls)
			if err != nil {
				return err
			}
			bookieClientTLS, err := clientTLS("bookie client", o.clientTLS)
			if err != nil {
				return err
			}
			store, err := openMeta(o.metaEndpoints, o.metaTLS)
			if err != nil {
				return err
			}
			defer store.Close()
			n, err := node.Start(ctx, node.Config{
				ID: o.id, DataDir: o.dataDir, JournalDir: o.journalDir, ListenAddr: o.listen, AdvertiseAddr: o.advertise,
				Zone: o.zone, Store: store, SessionTTL: o.sessionTTL, Engine: o.engine.config(),
				Registerer: prometheus.DefaultRegisterer, Logger: slog.Default(), Mutant: mutant, TLS: listenerTLS,
			})
			if err != nil {
				return err
			}
			defer n.Close()
			closeAutorecovery, err := startAutorecovery(&o.autorecovery, n.ID(), store, o.sessionTTL, bookieClientTLS)
			if err != nil {
				return err
			}
			defer closeAutorecovery() // before the node closes: stop repairing first
			if o.httpAddr != "" {
				health := admin.NewHealth()
				health.RegisterReporter("bookie", bookieReporter(n))
				_ = prometheus.DefaultRegisterer.Register(health.Collector(2 * time.Second)) // quire_component_status
				health.SetReady(true)
				hs, err := admin.Listen(admin.Config{Addr: o.httpAddr, Health: health})
				if err != nil {
					return err
				}
				defer hs.Shutdown(context.Background())
			}
			<-ctx.Done()
			slog.Info("bookie stopping", "bookie", n.ID())
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.dataDir, "data-dir", "./quire-data/bookie", "ledger storage directory (entry logs, index)")
	f.StringVar(&o.journalDir, "journal-dir", "", "journal directory, ideally on its own low-latency device (default DATA-DIR/journal)")
	f.StringVar(&o.listen, "listen", "127.0.0.1:3181", "listen address for the bookie protocol")
	f.StringVar(&o.advertise, "advertise-addr", "", "address registered for clients (default: the bound listen address)")
	f.StringVar(&o.id, "id", "", "bookie id in the registry (default: the advertised address)")
	f.StringVar(&o.zone, "zone", "", "zone or rack label used by zone-aware placement")
	f.StringSliceVar(&o.metaEndpoints, "meta-endpoints", nil, "etcd endpoints (host:port or URL), comma-separated")
	f.StringVar(&o.httpAddr, "http-addr", "127.0.0.1:8000", "HTTP address for /healthz and /metrics (empty: none)")
	f.DurationVar(&o.sessionTTL, "session-ttl", 10*time.Second, "registration session TTL: a dead bookie disappears from the registry after this")
	f.StringVar(&o.mutant, "bookie-mutant", "", "TESTS ONLY: run a deliberately broken bookie (ack-before-write), for quire chaos to catch")
	_ = f.MarkHidden("bookie-mutant")
	registerBookieServerTLS(f, &o.tls)
	registerBookieClientTLS(f, &o.clientTLS)
	registerMetaClientTLS(f, &o.metaTLS)
	o.engine.register(cmd)
	o.autorecovery.register(cmd)
	return cmd
}

// startAutorecovery runs autorecoveryFlags.start's service, with the
// bookie client's TLS when set: the service's connections to bookies (reads
// of surviving copies, recovery adds to replacements) then present this
// process's client certificate. It returns what stops the service (a no-op
// when autorecovery is disabled).
func startAutorecovery(a *autorecoveryFlags, id string, store meta.Store, sessionTTL time.Duration, bookieTLS *tls.Config) (func(), error) {
	if !a.enabled {
		return func() {}, nil
	}
	if bookieTLS == nil {
		s, err := a.start(id, store, sessionTTL)
		if err != nil {
			return nil, err
		}
		return s.Close, nil
	}
	bookies := client.New(client.Config{Logger: slog.Default(), TLS: bookieTLS})
	s, err := autorecovery.Start(autorecovery.Config{
		ID: id, Store: store, Bookies: bookies, LostBookieDelay: a.lostBookieDelay, OpenLedgerGracePeriod: a.openLedgerGrace,
		AuditInterval: a.auditInterval, LedgersPerWorker: a.ledgersPerWorker, EntriesInFlight: a.entriesInFlight,
		SessionTTL: sessionTTL, Registerer: prometheus.DefaultRegisterer, Logger: slog.Default(),
	})
	if err != nil {
		bookies.Close()
		return nil, err
	}
	return func() {
		s.Close() // a service does not close a client it was given
		bookies.Close()
	}, nil
}

// withScheme accepts host:port or URLs.
func withScheme(endpoints []string) []string {
	out := make([]string, len(endpoints))
	for i, e := range endpoints {
		if !strings.Contains(e, "://") {
			e = "http://" + e
		}
		out[i] = e
	}
	return out
}
