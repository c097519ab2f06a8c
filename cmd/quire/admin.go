package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"

	"quire/internal/autorecovery"
	"quire/internal/bookie/registry"
	"quire/internal/meta"
	"quire/internal/tlsconf"
)

// This file is autorecovery's command-line surface: `quire admin` (bookies,
// autorecovery) and the flags of the autorecovery service that `quire
// bookie` runs.

type adminOptions struct {
	metaEndpoints []string
	metaTLS       tlsconf.ClientFiles // --meta-tls-*
	timeout       time.Duration
}

// store connects to the metadata store for one admin command.
func (o *adminOptions) store() (meta.Store, error) {
	if len(o.metaEndpoints) == 0 {
		return nil, fmt.Errorf("admin: --meta-endpoints is required")
	}
	return openMeta(o.metaEndpoints, o.metaTLS)
}

func newAdminCommand() *cobra.Command {
	var o adminOptions
	cmd := &cobra.Command{
		Use:   "admin",
		Short: "Administer a cluster from the command line",
		Long: `Inspect a running cluster through its metadata store.

  quire admin bookies       registered bookies: address, zone, writable or read-only, disk usage
  quire admin autorecovery  the auditor, under-replicated ledgers and the workers' progress
  quire admin tenants       tenants (create, delete)
  quire admin namespaces    a tenant's namespaces, their policies and bundle owners
  quire admin topics        a namespace's Kafka topics; Pulsar topics' stats,
                            internal-stats, partitioned-stats, subscriptions, skip,
                            reset-cursor and expire-messages (through a broker's
                            admin REST API, --admin-url)
  quire admin users         SASL users (SCRAM credentials): list, set, delete`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error { return cmd.Help() },
	}
	cmd.PersistentFlags().StringSliceVar(&o.metaEndpoints, "meta-endpoints", []string{"127.0.0.1:2379"}, "etcd endpoints (host:port or URL), comma-separated")
	cmd.PersistentFlags().DurationVar(&o.timeout, "timeout", 10*time.Second, "give up after this long")
	registerMetaClientTLS(cmd.PersistentFlags(), &o.metaTLS)
	topics := newAdminTopicsCommand(&o)
	addPulsarTopicVerbs(&o, topics) // admin_pulsar.go
	cmd.AddCommand(newAdminBookiesCommand(&o), newAdminAutorecoveryCommand(&o),
		newAdminTenantsCommand(&o), newAdminNamespacesCommand(&o), topics, newAdminUsersCommand(&o))
	return cmd
}

func newAdminBookiesCommand(o *adminOptions) *cobra.Command {
	return &cobra.Command{
		Use:   "bookies",
		Short: "List bookies: id, address, zone, writable or read-only, disk usage",
		Long: `List the registered bookies with their disk usage (free, total, used %, as the
bookie last published it: at registration and whenever it turns read-only or
writable). Bookies that autorecovery has seen registered but that are
registered no more are listed too, as "unregistered".`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return o.withStore(cmd, func(ctx context.Context, store meta.Store) error {
				infos, err := registry.List(ctx, store)
				if err != nil {
					return err
				}
				gone, err := unregisteredBookies(ctx, store, infos)
				if err != nil {
					return err
				}
				printBookies(cmd.OutOrStdout(), infos, gone)
				return nil
			})
		},
	}
}

// unregisteredBookies lists the bookies autorecovery recorded a zone for
// that are not registered now, with that zone.
func unregisteredBookies(ctx context.Context, store meta.Store, live []registry.Info) (map[string]string, error) {
	res := map[string]string{}
	registered := map[string]bool{}
	for _, i := range live {
		registered[i.ID] = true
	}
	after := ""
	for {
		page, err := store.List(ctx, autorecovery.ZonePrefix, meta.ListOptions{After: after})
		if err != nil {
			return nil, err
		}
		for _, kv := range page.KVs {
			id := strings.TrimPrefix(kv.Key, autorecovery.ZonePrefix)
			var zone string
			if !registered[id] && json.Unmarshal(kv.Value, &zone) == nil {
				res[id] = zone
			}
		}
		if !page.More || len(page.KVs) == 0 {
			return res, nil
		}
		after = page.KVs[len(page.KVs)-1].Key
	}
}

func printBookies(out io.Writer, infos []registry.Info, gone map[string]string) {
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tADDRESS\tZONE\tSTATE\tFREE\tTOTAL\tUSED")
	for _, i := range infos {
		state := "writable"
		if i.ReadOnly {
			state = "read-only"
		}
		used := "-"
		if i.TotalBytes > 0 {
			used = fmt.Sprintf("%.1f%%", usedPercent(i.FreeBytes, i.TotalBytes))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", i.ID, i.Addr, orDash(i.Zone), state, bytesOrDash(i.FreeBytes), bytesOrDash(i.TotalBytes), used)
	}
	for _, id := range slices.Sorted(maps.Keys(gone)) {
		fmt.Fprintf(tw, "%s\t-\t%s\tunregistered\t-\t-\t-\n", id, orDash(gone[id]))
	}
	tw.Flush()
	fmt.Fprintf(out, "%d registered, %d unregistered\n", len(infos), len(gone))
}

func newAdminAutorecoveryCommand(o *adminOptions) *cobra.Command {
	var limit int
	cmd := &cobra.Command{
		Use:   "autorecovery",
		Short: "Show the auditor, the under-replicated ledgers and the repairs in progress",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return o.withStore(cmd, func(ctx context.Context, store meta.Store) error {
				st, err := autorecovery.ReadStatus(ctx, store)
				if err != nil {
					return err
				}
				printAutorecovery(cmd.OutOrStdout(), st, limit, time.Now())
				return nil
			})
		},
	}
	cmd.Flags().IntVar(&limit, "limit", 50, "list at most this many under-replicated ledgers (the count is always complete)")
	return cmd
}

func printAutorecovery(out io.Writer, st autorecovery.Status, limit int, now time.Time) {
	if st.Auditor == nil {
		fmt.Fprintln(out, "Auditor: none elected")
	} else {
		fmt.Fprintf(out, "Auditor: %s (since %s)\n", st.Auditor.ID, st.Auditor.Since.Format(time.RFC3339))
	}
	claimed := 0
	for _, m := range st.UnderReplicated {
		if m.LockedBy != "" {
			claimed++
		}
	}
	fmt.Fprintf(out, "Under-replicated ledgers: %d (%d being repaired)\n", len(st.UnderReplicated), claimed)
	if len(st.UnderReplicated) > 0 {
		tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "  LEDGER\tLOST BOOKIES\tMARKED\tDEFERRED UNTIL\tWORKER")
		for i, m := range st.UnderReplicated {
			if i == limit {
				fmt.Fprintf(tw, "  …\t%d more\t\t\t\n", len(st.UnderReplicated)-limit)
				break
			}
			deferred := "-"
			if m.DeferredUntil.After(now) {
				deferred = m.DeferredUntil.Format(time.RFC3339)
			}
			fmt.Fprintf(tw, "  %d\t%s\t%s ago\t%s\t%s\n", m.LedgerID, strings.Join(m.LostBookies, ","),
				now.Sub(m.MarkedAt).Round(time.Second), deferred, orDash(m.LockedBy))
		}
		tw.Flush()
	}
	fmt.Fprintf(out, "Workers: %d\n", len(st.Workers))
	if len(st.Workers) == 0 {
		return
	}
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  WORKER\tACTIVE\tENTRIES COPIED\tBYTES COPIED\tLEDGERS REPAIRED\tFAILURES\tSOURCES")
	for _, w := range st.Workers {
		fmt.Fprintf(tw, "  %s\t%d\t%d\t%s\t%d\t%d\t%d\n", w.Worker, len(w.Active), w.EntriesCopied, bytesOrDash(uint64(w.BytesCopied)),
			w.LedgersRepaired, w.Failures, len(w.Sources))
		for _, a := range w.Active {
			fmt.Fprintf(tw, "    ledger %d\t\t%d/%d\t\t\t\t\n", a.LedgerID, a.EntriesCopied, a.EntriesTotal)
		}
	}
	tw.Flush()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func bytesOrDash(n uint64) string {
	switch {
	case n == 0:
		return "-"
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

// autorecoveryFlags configure the autorecovery service inside `quire bookie`.
type autorecoveryFlags struct {
	enabled          bool
	lostBookieDelay  time.Duration
	openLedgerGrace  time.Duration
	auditInterval    time.Duration
	ledgersPerWorker int
	entriesInFlight  int
}

func (a *autorecoveryFlags) register(cmd *cobra.Command) {
	f := cmd.Flags()
	f.BoolVar(&a.enabled, "autorecovery", true, "run autorecovery in this process: an auditor candidate and a replication worker that rebuild lost bookies' copies")
	f.DurationVar(&a.lostBookieDelay, "autorecovery-lost-bookie-delay", autorecovery.DefaultLostBookieDelay, "a bookie whose registration is gone this long is lost and its copies are rebuilt")
	f.DurationVar(&a.openLedgerGrace, "autorecovery-open-ledger-grace", autorecovery.DefaultOpenLedgerGracePeriod, "an open ledger's writer gets this long to replace a lost bookie itself before the ledger is fenced and repaired")
	f.DurationVar(&a.auditInterval, "autorecovery-audit-interval", autorecovery.DefaultAuditInterval, "period of the auditor's full check of every ledger")
	f.IntVar(&a.ledgersPerWorker, "autorecovery-ledgers-per-worker", autorecovery.DefaultLedgersPerWorker, "ledgers this worker repairs at once")
	f.IntVar(&a.entriesInFlight, "autorecovery-entries-in-flight", autorecovery.DefaultEntriesInFlight, "entries in flight per ledger being repaired")
}

// start runs autorecovery for the bookie id; nil when disabled.
func (a *autorecoveryFlags) start(id string, store meta.Store, sessionTTL time.Duration) (*autorecovery.Service, error) {
	if !a.enabled {
		return nil, nil
	}
	return autorecovery.Start(autorecovery.Config{
		ID: id, Store: store, LostBookieDelay: a.lostBookieDelay, OpenLedgerGracePeriod: a.openLedgerGrace,
		AuditInterval: a.auditInterval, LedgersPerWorker: a.ledgersPerWorker, EntriesInFlight: a.entriesInFlight,
		SessionTTL: sessionTTL, Registerer: prometheus.DefaultRegisterer, Logger: slog.Default(),
	})
}
