package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"

	"quire/internal/broker"
	"quire/internal/catalog"
	"quire/internal/isr"
	"quire/internal/meta"
)

// quire standalone --mode isr: the one-command way to try ISR mode, like a
// local three-node Kafka: --brokers brokers in the one process (Kafka on
// --kafka-addr and the next ports: 9092, 9093, 9094 by default), broker N
// with id N, zone zN (so replicas spread as over racks, and with
// --kafka-replica-selector rack-aware a consumer with client.rack zN reads
// from broker N's replicas) and its replicas under DATA-DIR/broker-N/isr;
// the Kafka namespace in ISR mode with a replication factor of
// min(3, brokers) and min.insync.replicas of min(2, brokers). The first broker serves Pulsar, owns the bundles (the
// ledger-mode topics and consumer groups; no handoff unless
// --bundle-handoff-after says) and is the one the HTTP server reports on. Without --mode the standalone is one ledger-mode
// broker, as before.

type standaloneISRFlags struct {
	mode     string
	brokers  int
	recovery string
}

func (f *standaloneISRFlags) register(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.mode, "mode", "", `"isr": run --brokers brokers with the Kafka namespace in ISR mode (partitions replicated on the brokers, Kafka's design); empty: one ledger-mode broker`)
	cmd.Flags().IntVar(&f.brokers, "brokers", 3, "with --mode isr: how many brokers to run (Kafka on --kafka-addr's port and the ones after it)")
	cmd.Flags().StringVar(&f.recovery, "isr-unclean-recovery", "balanced", "with --mode isr: unclean.recovery.strategy (KIP-966) for partitions whose every eligible replica came back from an unclean shutdown (a SIGKILL of this process): balanced (once all are back, elect the longest log), aggressive (at once, among those back) or none (stay offline)")
}

// startBrokers starts the standalone's broker(s): the first is returned
// (health, Pulsar admin), close stops them all.
func (o standaloneOptions) startBrokers(ctx context.Context, store meta.Store, log *slog.Logger) (*broker.Broker, func(), error) {
	switch o.isr.mode {
	case "":
		return o.broker.start(ctx, store, o.httpAddr, log)
	case string(catalog.ModeISR):
	default:
		return nil, nil, fmt.Errorf("--mode %q: want isr or nothing", o.isr.mode)
	}
	n := o.isr.brokers
	if n < 1 || n > 9 {
		return nil, nil, fmt.Errorf("--brokers %d: want 1 to 9", n)
	}
	recovery, err := isr.ParseRecoveryStrategy(o.isr.recovery)
	if err != nil {
		return nil, nil, fmt.Errorf("--isr-unclean-recovery: %w", err)
	}
	cat := catalog.New(store)
	if err := cat.EnsureDefaults(ctx); err != nil {
		return nil, nil, err
	}
	ns := o.broker.namespace
	if _, err := cat.GetPolicies(ctx, ns); errors.Is(err, catalog.ErrNamespaceNotFound) {
		if err := cat.CreateNamespace(ctx, ns, nil); err != nil && !errors.Is(err, catalog.ErrNamespaceExists) {
			return nil, nil, err
		}
	}
	repl := catalog.Replication{Mode: catalog.ModeISR, Factor: int32(min(3, n)), MinInSyncReplicas: int32(min(2, n))}
	if _, err := cat.SetReplication(ctx, ns, repl); err != nil {
		return nil, nil, err
	}
	if len(o.broker.kafkaListeners.listeners) > 0 && n > 1 {
		// Each broker's listeners would need addresses of their own.
		return nil, nil, errors.New("--kafka-listeners: not with --brokers above 1 (run quire broker processes for several listeners per broker)")
	}
	host, port, err := net.SplitHostPort(o.broker.kafkaAddr)
	if err != nil {
		return nil, nil, fmt.Errorf("--kafka-addr: %w", err)
	}
	first, err := strconv.Atoi(port)
	if err != nil {
		return nil, nil, fmt.Errorf("--kafka-addr port %q: %w", port, err)
	}
	var started []*broker.Broker
	var closers []func()
	closeAll := func() {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
	}
	for i := range n {
		f := o.broker
		id := int32(i + 1)
		f.id = id
		f.kafkaAddr = net.JoinHostPort(host, strconv.Itoa(first+i))
		if i > 0 {
			f.pulsarAddr, f.kafkaAdvertised, f.pulsarAdvertised = "", "", ""
			f.pulsarSecurity.tlsAddr = ""
		}
		// Each broker's metrics under its own label: the names are the same.
		f.registerer = prometheus.WrapRegistererWith(prometheus.Labels{"broker": strconv.Itoa(int(id))}, prometheus.DefaultRegisterer)
		if f.zone == "" {
			f.zone = fmt.Sprintf("z%d", id)
		}
		if f.handoffAfter == broker.DefaultConfig().HandoffAfter {
			// The brokers start together: broker 1 takes every bundle (the
			// ledger-mode topics and the consumer groups) and keeps them.
			// Handing them over a minute later would move the groups'
			// coordinators under their members (UNKNOWN_MEMBER_ID).
			f.handoffAfter = 0
		}
		f.isr = broker.ISRConfig{Dir: filepath.Join(o.dataDir, fmt.Sprintf("broker-%d", id), "isr"), MinISR: int(repl.MinInSyncReplicas),
			UncleanRecovery: recovery}
		br, closeBroker, err := f.start(ctx, store, o.httpAddr, log)
		if err != nil {
			closeAll()
			return nil, nil, fmt.Errorf("broker %d: %w", id, err)
		}
		started, closers = append(started, br), append(closers, closeBroker)
		log.Info("isr-mode broker started", "id", id, "kafka", f.kafkaAddr, "zone", f.zone)
	}
	waitAllSeen(ctx, started, log)
	return started[0], closeAll, nil
}

// allSeenWait bounds how long the standalone waits for its brokers to see
// one another before it reports ready anyway.
const allSeenWait = 30 * time.Second

// waitAllSeen returns once every broker sees all of them registered
// (broker.SeeOneAnother): otherwise an ISR topic created the moment the
// standalone said it was ready could be refused (INVALID_REPLICATION_FACTOR).
// Past allSeenWait it logs and goes on: the brokers serve, and the check is
// the client's to retry.
func waitAllSeen(ctx context.Context, brokers []*broker.Broker, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(ctx, allSeenWait)
	defer cancel()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !broker.SeeOneAnother(brokers) {
		select {
		case <-ctx.Done():
			log.Warn("isr-mode brokers do not all see one another yet; reporting ready anyway", "brokers", len(brokers), "waited", allSeenWait)
			return
		case <-tick.C:
		}
	}
}
