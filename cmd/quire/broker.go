package main

import (
	"cmp"
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"

	"quire/internal/admin"
	"quire/internal/bookie/client"
	"quire/internal/broker"
	"quire/internal/kafka"
	"quire/internal/ledger/ledgerclient"
	"quire/internal/lowprio"
	"quire/internal/meta"
	"quire/internal/partition"
	"quire/internal/pulsar"
	"quire/internal/sim"
	"quire/internal/tlsconf"
)

// brokerFlags configure a broker, shared by `quire broker` and
// `quire standalone`.
type brokerFlags struct {
	id                int32
	kafkaAddr         string
	kafkaAdvertised   string
	pulsarAddr        string
	ledgerMutant      string
	kafkaTLS          tlsconf.Files
	httpTLS           tlsconf.Files       // the HTTP listener (/metrics, /healthz, the admin REST API)
	bookieTLS         tlsconf.ClientFiles // connections to bookies (--bookie-tls-ca, --bookie-tls-client-*)
	isrTLS            tlsconf.ClientFiles // ISR followers' connections to leaders' Kafka listeners (--isr-tls-*)
	kafkaSASL         saslFlags
	kafkaListeners    kafkaListenerFlags  // kafka_listeners.go
	pulsarSecurity    pulsarSecurityFlags // pulsar_security.go
	pulsarAdvertised  string
	zone              string
	namespace         string
	autoCreateTopics  bool
	defaultPartitions int32
	maxMessageBytes   int32
	sessionTTL        time.Duration
	handoffAfter      time.Duration
	queuedBytes       int64
	producerExpiry    time.Duration
	connBytes         int64
	isr               broker.ISRConfig      // ISR mode (--isr-data-dir; standalone_isr.go)
	replicaSelector   string                // --kafka-replica-selector, into isr.ReplicaSelector
	registerer        prometheus.Registerer // nil: prometheus.DefaultRegisterer
	// localBookies are the bookies of this process (the standalone's), by
	// address: the broker's ranged reads go to them directly.
	localBookies map[string]client.LocalBookie
	// bulk is the standalone's pool of low-priority threads for catch-up
	// reads (nil: none).
	bulk             *lowprio.Pool
	pulsarMaxMessage int
	pulsarKeyRing    bool
}

// register adds the flags; pulsarAddr is --pulsar-addr's default ("": off).
func (b *brokerFlags) register(cmd *cobra.Command, pulsarAddr string) {
	d := broker.DefaultConfig()
	f := cmd.Flags()
	f.Int32Var(&b.id, "broker-id", 0, "broker id (0: allocate one from the metadata store)")
	f.StringVar(&b.kafkaAddr, "kafka-addr", "127.0.0.1:9092", "Kafka protocol listen address")
	f.StringVar(&b.kafkaAdvertised, "kafka-advertised-addr", "", "host:port clients are told to connect to (default: the listen address)")
	f.StringVar(&b.pulsarAddr, "pulsar-addr", pulsarAddr, "Pulsar binary protocol listen address (empty: no Pulsar listener)")
	f.StringVar(&b.pulsarAdvertised, "pulsar-advertised-addr", "", "host:port in the Pulsar service URL clients are told (default: the listen address)")
	f.IntVar(&b.pulsarMaxMessage, "pulsar-max-message-size", pulsar.DefaultMaxMessageSize, "largest Pulsar message or batch a producer may send, advertised in CONNECTED (maxMessageSize)")
	f.BoolVar(&b.pulsarKeyRing, "pulsar-key-shared-consistent-hashing", true, "Key_Shared AUTO_SPLIT on a consistent-hashing ring; false: consumers split the hash range in halves as they join (subscriptionKeySharedUseConsistentHashing)")
	f.StringVar(&b.ledgerMutant, "ledger-mutant", "", "TESTS ONLY: write ledgers with a deliberately broken protocol (a quire sim ledger --mutant name), for quire chaos to catch")
	_ = f.MarkHidden("ledger-mutant")
	f.StringVar(&b.zone, "zone", "", "zone/rack label (Kafka clients see it as the broker's rack)")
	f.StringVar(&b.namespace, "kafka-namespace", d.Namespace, "tenant/namespace that holds Kafka topics")
	f.BoolVar(&b.autoCreateTopics, "auto-create-topics", d.AutoCreateTopics, "create unknown topics on metadata requests (auto.create.topics.enable)")
	f.Int32Var(&b.defaultPartitions, "num-partitions", d.DefaultPartitions, "partitions of auto-created topics (num.partitions)")
	f.Int32Var(&b.maxMessageBytes, "message-max-bytes", d.MaxMessageBytes, "largest record batch a produce may carry (message.max.bytes)")
	f.DurationVar(&b.sessionTTL, "broker-session-ttl", d.SessionTTL, "metadata session TTL: how long a crashed broker's bundles stay unowned")
	f.DurationVar(&b.producerExpiry, "producer-id-expiration", partition.DefaultProducerExpiry, "how long an idempotent producer that writes nothing is remembered per partition (producer.id.expiration.ms)")
	f.Int64Var(&b.queuedBytes, "kafka-queued-max-request-bytes", kafka.DefaultMaxQueuedRequestBytes, "bytes of Kafka requests read and not yet answered, over all connections (queued.max.request.bytes); at the bound the broker stops reading until responses free room")
	f.Int64Var(&b.connBytes, "kafka-connection-max-request-bytes", kafka.DefaultMaxConnRequestBytes, "the same bound per connection, so one client cannot take the whole budget")
	f.DurationVar(&b.handoffAfter, "bundle-handoff-after", d.HandoffAfter, "hand bundles to a joining broker (their rendezvous choice) once it has been live this long; 0 keeps bundles where they are until their owner dies")
	f.StringVar(&b.kafkaTLS.Cert, "kafka-tls-cert", "", "PEM certificate: the Kafka listener speaks TLS, Kafka's SSL (reloaded when the file changes; quire certs makes test ones)")
	f.StringVar(&b.kafkaTLS.Key, "kafka-tls-key", "", "PEM private key of --kafka-tls-cert")
	f.StringVar(&b.kafkaTLS.ClientCA, "kafka-tls-client-ca", "", "PEM CA certificates: the Kafka listener requires client certificates signed by them (mutual TLS, ssl.client.auth=required)")
	f.StringVar(&b.httpTLS.Cert, "http-tls-cert", "", "PEM certificate: the HTTP listener (--http-addr: metrics, health, admin REST) serves HTTPS (reloaded when the file changes)")
	f.StringVar(&b.httpTLS.Key, "http-tls-key", "", "PEM private key of --http-tls-cert")
	f.StringVar(&b.httpTLS.ClientCA, "http-tls-client-ca", "", "PEM CA certificates: the HTTP listener requires client certificates signed by them (mutual TLS)")
	registerBookieClientTLS(f, &b.bookieTLS)
	b.kafkaSASL.register(f)
	b.kafkaListeners.register(f)
	b.pulsarSecurity.register(f)
	f.StringVar(&b.isr.Dir, "isr-data-dir", "", "ISR mode: the directory of this broker's partition replicas (empty: no ISR-mode topics served here)")
	f.StringVar(&b.isrTLS.CA, "isr-tls-ca", "", "ISR mode: PEM CA certificates: followers fetch from leaders' Kafka listeners over TLS, trusting these (for leaders with --kafka-tls-cert)")
	f.StringVar(&b.isrTLS.Cert, "isr-tls-client-cert", "", "ISR mode: PEM certificate followers present to leaders' Kafka listeners that require client certificates (--kafka-tls-client-ca); its principal must be a super user with --kafka-authorizer")
	f.StringVar(&b.isrTLS.Key, "isr-tls-client-key", "", "ISR mode: PEM private key of --isr-tls-client-cert")
	f.StringVar(&b.replicaSelector, "kafka-replica-selector", broker.SelectLeader.String(), "ISR mode: replica.selector.class (KIP-392 follower fetching): leader (Kafka's default: consumers read from partition leaders) or rack-aware (a consumer whose client.rack is not the leader's zone is sent to an in-sync follower in its zone, if any)")
}

// listen listens on addr, with TLS when files says so.
func listen(what, addr string, files tlsconf.Files) (net.Listener, error) {
	var cfg *tls.Config
	if files.Enabled() {
		var err error
		if cfg, err = tlsconf.Server(files); err != nil {
			return nil, fmt.Errorf("%s listener: %w", what, err)
		}
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("%s listener: %w", what, err)
	}
	if cfg != nil {
		ln = tls.NewListener(ln, cfg)
	}
	return ln, nil
}

// start listens and starts a broker on store.
func (b *brokerFlags) start(ctx context.Context, store meta.Store, httpAddr string, log *slog.Logger) (*broker.Broker, func(), error) {
	security, err := b.kafkaSASL.security(ctx, store, log)
	if err != nil {
		return nil, nil, err
	}
	if b.isr.FetchTLS, err = clientTLS("isr fetcher", b.isrTLS); err != nil {
		return nil, nil, err
	}
	if b.isr.ReplicaSelector, err = broker.ParseReplicaSelector(b.replicaSelector); err != nil {
		return nil, nil, fmt.Errorf("--kafka-replica-selector: %w", err)
	}
	ln, kafkaAdvertised, extraKafka, err := b.listenKafka(security)
	if err != nil {
		return nil, nil, err
	}
	var pulsarLn, pulsarTLSLn net.Listener
	closeListeners := func() {
		for _, l := range []net.Listener{ln, pulsarLn, pulsarTLSLn} {
			if l != nil {
				l.Close()
			}
		}
		for _, x := range extraKafka {
			x.Listener.Close()
		}
	}
	pulsarSec, err := b.pulsarSecurity.security()
	if err != nil {
		closeListeners()
		return nil, nil, err
	}
	if b.pulsarAddr != "" {
		if pulsarLn, err = listen("pulsar", b.pulsarAddr, tlsconf.Files{}); err != nil {
			closeListeners()
			return nil, nil, err
		}
		if pulsarTLSLn, err = b.pulsarSecurity.listenTLS(); err != nil {
			closeListeners()
			return nil, nil, err
		}
	}
	bookieTLS, err := clientTLS("bookie client", b.bookieTLS)
	if err != nil {
		closeListeners()
		return nil, nil, err
	}
	bookies := client.New(client.Config{Logger: log, TLS: bookieTLS, Local: b.localBookies})
	mutants, err := sim.ParseMutant(b.ledgerMutant)
	if err != nil {
		closeListeners()
		return nil, nil, err
	}
	if b.ledgerMutant != "" {
		log.Warn("ledgers are written with a deliberately broken protocol (tests only)", "mutant", b.ledgerMutant)
	}
	ledgers := ledgerclient.New(ledgerclient.Config{Store: store, Bookies: bookies, Name: "broker", Logger: log, Mutants: mutants})
	br, err := broker.Start(ctx, broker.Config{
		Store: store, Ledgers: ledgers, Bulk: b.bulk, ID: b.id, KafkaListener: ln, KafkaAdvertised: kafkaAdvertised,
		KafkaExtraListeners: extraKafka,
		HTTPAddr:            httpAddr, Zone: b.zone, Namespace: b.namespace, AutoCreateTopics: b.autoCreateTopics,
		DefaultPartitions: b.defaultPartitions, MaxMessageBytes: b.maxMessageBytes, SessionTTL: b.sessionTTL,
		HandoffAfter: b.handoffAfter, KafkaMaxQueuedRequestBytes: b.queuedBytes, KafkaMaxConnRequestBytes: b.connBytes,
		KafkaMaxConnectionsPerIP: b.kafkaSASL.quota.maxConnectionsPerIP, ProducerIDExpiration: b.producerExpiry,
		PulsarListener: pulsarLn, PulsarAdvertised: b.pulsarAdvertised,
		PulsarTLSListener: pulsarTLSLn, PulsarTLSAdvertised: b.pulsarSecurity.tlsAdvertised, PulsarSecurity: pulsarSec,
		Pulsar:     broker.PulsarOptions{MaxMessageSize: b.pulsarMaxMessage, KeySharedAutoSplitHalves: !b.pulsarKeyRing},
		Registerer: cmp.Or(b.registerer, prometheus.DefaultRegisterer), Logger: log, ISR: b.isr,
	})
	if err != nil {
		closeListeners()
		bookies.Close()
		return nil, nil, err
	}
	return br, func() {
		if err := br.Close(); err != nil {
			log.Warn("broker close", "err", err)
		}
		bookies.Close()
	}, nil
}

type brokerOptions struct {
	metaEndpoints []string
	metaTLS       tlsconf.ClientFiles // --meta-tls-*
	httpAddr      string
	broker        brokerFlags
}

func newBrokerCommand() *cobra.Command {
	var o brokerOptions
	cmd := &cobra.Command{
		Use:   "broker",
		Short: "Run a broker: topic owners and the Kafka protocol front end (ledger mode)",
		Long: `Run a broker. It keeps nothing durable: it joins the cluster through the metadata
store, owns namespace bundles through ephemeral keys, and serves the Kafka
protocol for the partitions of the bundles it owns, each a managed ledger on the
bookies. When a broker dies, another one takes its bundles over by fencing their
ledgers; no data is copied.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(o.metaEndpoints) == 0 {
				return fmt.Errorf("broker: --meta-endpoints is required")
			}
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			store, err := openMeta(o.metaEndpoints, o.metaTLS)
			if err != nil {
				return err
			}
			defer store.Close()
			log := slog.Default()
			br, closeBroker, err := o.broker.start(ctx, store, o.httpAddr, log)
			if err != nil {
				return err
			}
			defer closeBroker()
			health := admin.NewHealth()
			health.RegisterReporter("broker", brokerReporter(br))
			_ = prometheus.DefaultRegisterer.Register(health.Collector(2 * time.Second)) // quire_component_status
			httpServer, err := admin.Listen(admin.Config{Addr: o.httpAddr, Health: health, Logger: log, TLS: o.broker.httpTLS})
			if err != nil {
				return err
			}
			pulsarAdmin := br.PulsarAdmin() // Pulsar's admin REST API and its HTTP lookup
			httpServer.Handle("/admin/v2/", pulsarAdmin)
			httpServer.Handle("/lookup/v2/", pulsarAdmin)
			health.SetReady(true)
			var runErr error
			select {
			case <-ctx.Done():
				log.Info("broker stopping")
			case <-br.Lost():
				runErr = fmt.Errorf("broker %d lost its metadata session; restart it to rejoin", br.ID())
			}
			health.SetReady(false)
			sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_ = httpServer.Shutdown(sctx)
			return runErr
		},
	}
	f := cmd.Flags()
	f.StringSliceVar(&o.metaEndpoints, "meta-endpoints", nil, "etcd endpoints (host:port, comma separated)")
	f.StringVar(&o.httpAddr, "http-addr", "127.0.0.1:8080", "HTTP listen address for /healthz, /readyz and /metrics")
	registerMetaClientTLS(f, &o.metaTLS)
	o.broker.register(cmd, "")
	return cmd
}
