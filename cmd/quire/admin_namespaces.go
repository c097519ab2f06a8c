package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"quire/internal/catalog"
	"quire/internal/isr"
	"quire/internal/isr/isrctl"
	"quire/internal/meta"
	"quire/internal/ownership"
)

// This file is the command-line surface of tenants, namespaces, their
// policies, Kafka topics and bundle ownership: what `pulsar-admin tenants`,
// `pulsar-admin namespaces` and `kafka-topics --list` do for their systems.

// withAdmin runs f with a catalog.Admin on the metadata store.
func (o *adminOptions) withAdmin(cmd *cobra.Command, f func(ctx context.Context, a *catalog.Catalog, store meta.Store) error) error {
	return o.withStore(cmd, func(ctx context.Context, store meta.Store) error {
		return f(ctx, catalog.New(store), store)
	})
}

// withStore runs f with the metadata store and a context bounded by
// --timeout, and closes the store afterwards.
func (o *adminOptions) withStore(cmd *cobra.Command, f func(ctx context.Context, store meta.Store) error) error {
	store, err := o.store()
	if err != nil {
		return err
	}
	defer store.Close()
	ctx, cancel := context.WithTimeout(cmd.Context(), o.timeout)
	defer cancel()
	return f(ctx, store)
}

func newAdminTenantsCommand(o *adminOptions) *cobra.Command {
	cmd := &cobra.Command{Use: "tenants", Short: "List, create and delete tenants", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return o.withAdmin(cmd, func(ctx context.Context, a *catalog.Catalog, _ meta.Store) error {
				ts, err := a.ListTenants(ctx)
				if err != nil {
					return err
				}
				for _, t := range ts {
					fmt.Fprintln(cmd.OutOrStdout(), t)
				}
				return nil
			})
		}}
	cmd.AddCommand(
		&cobra.Command{Use: "create TENANT", Short: "Create a tenant", Args: cobra.ExactArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				return o.withAdmin(cmd, func(ctx context.Context, a *catalog.Catalog, _ meta.Store) error {
					return a.CreateTenant(ctx, args[0], catalog.TenantInfo{Created: time.Now().UTC()})
				})
			}},
		&cobra.Command{Use: "delete TENANT", Short: "Delete a tenant that has no namespaces", Args: cobra.ExactArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				return o.withAdmin(cmd, func(ctx context.Context, a *catalog.Catalog, _ meta.Store) error {
					return a.DeleteTenant(ctx, args[0])
				})
			}},
	)
	return cmd
}

func newAdminNamespacesCommand(o *adminOptions) *cobra.Command {
	cmd := &cobra.Command{Use: "namespaces TENANT", Short: "List a tenant's namespaces; create, delete and set their policies",
		Long: `Namespaces hold topics and the policies that apply to them:
persistence (E, Qw, Qa of new ledgers), retention, backlog quota, message TTL,
deduplication and the bundles that split the namespace's topics between
brokers. Policy changes apply when a topic is next loaded.

  quire admin namespaces public                     list public's namespaces
  quire admin namespaces policies public/default    show the policies (JSON)
  quire admin namespaces set-persistence public/default --ensemble 3 --write-quorum 3 --ack-quorum 2
  quire admin namespaces set-replication public/default --mode isr --replication-factor 3 --min-insync-replicas 2`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return o.withAdmin(cmd, func(ctx context.Context, a *catalog.Catalog, _ meta.Store) error {
				nss, err := a.ListNamespaces(ctx, args[0])
				if err != nil {
					return err
				}
				for _, ns := range nss {
					fmt.Fprintln(cmd.OutOrStdout(), ns)
				}
				return nil
			})
		}}
	update := func(use, short string, register func(*cobra.Command), change func(*catalog.Policies) error) *cobra.Command {
		c := &cobra.Command{Use: use + " TENANT/NAMESPACE", Short: short, Args: cobra.ExactArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				return o.withAdmin(cmd, func(ctx context.Context, a *catalog.Catalog, _ meta.Store) error {
					p, err := a.UpdatePolicies(ctx, args[0], change)
					if err != nil {
						return err
					}
					return printJSON(cmd.OutOrStdout(), p)
				})
			}}
		register(c)
		return c
	}
	var pers catalog.Persistence
	var ret catalog.Retention
	var quota catalog.BacklogQuota
	var ttl time.Duration
	var dedup bool
	var repl catalog.Replication
	var replMode string
	cmd.AddCommand(
		&cobra.Command{Use: "create TENANT/NAMESPACE", Short: "Create a namespace with the default policies", Args: cobra.ExactArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				return o.withAdmin(cmd, func(ctx context.Context, a *catalog.Catalog, _ meta.Store) error {
					return a.CreateNamespace(ctx, args[0], nil)
				})
			}},
		&cobra.Command{Use: "delete TENANT/NAMESPACE", Short: "Delete a namespace that has no topics", Args: cobra.ExactArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				return o.withAdmin(cmd, func(ctx context.Context, a *catalog.Catalog, _ meta.Store) error {
					return a.DeleteNamespace(ctx, args[0])
				})
			}},
		&cobra.Command{Use: "policies TENANT/NAMESPACE", Short: "Show a namespace's policies (JSON)", Args: cobra.ExactArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				return o.withAdmin(cmd, func(ctx context.Context, a *catalog.Catalog, _ meta.Store) error {
					p, err := a.GetPolicies(ctx, args[0])
					if err != nil {
						return err
					}
					return printJSON(cmd.OutOrStdout(), p)
				})
			}},
		update("set-persistence", "Set E, Qw and Qa of the namespace's new ledgers", func(c *cobra.Command) {
			c.Flags().IntVar(&pers.Ensemble, "ensemble", 3, "bookies per ledger (E)")
			c.Flags().IntVar(&pers.WriteQuorum, "write-quorum", 3, "copies of each entry (Qw)")
			c.Flags().IntVar(&pers.AckQuorum, "ack-quorum", 2, "copies fsync'd before an entry is acknowledged (Qa)")
		}, func(p *catalog.Policies) error { p.Persistence = pers; return nil }),
		update("set-retention", "Keep acknowledged data up to a time and a size (-1: unlimited)", func(c *cobra.Command) {
			c.Flags().Int64Var(&ret.TimeMinutes, "time-minutes", 0, "minutes (-1 unlimited)")
			c.Flags().Int64Var(&ret.SizeMB, "size-mb", 0, "MB per topic (-1 unlimited)")
		}, func(p *catalog.Policies) error { p.Retention = ret; return nil }),
		update("set-backlog-quota", "Cap the unacknowledged backlog by size and age", func(c *cobra.Command) {
			c.Flags().Int64Var(&quota.LimitBytes, "limit-bytes", -1, "bytes (-1 unlimited)")
			c.Flags().Int64Var(&quota.LimitTimeSeconds, "limit-time-seconds", -1, "seconds (-1 unlimited)")
			c.Flags().Var(newQuotaPolicyValue(&quota.Policy), "policy", "producer_request_hold, producer_exception or consumer_backlog_eviction")
		}, func(p *catalog.Policies) error { p.BacklogQuota = quota; return nil }),
		update("set-message-ttl", "Acknowledge messages older than the TTL (0 disables)", func(c *cobra.Command) {
			c.Flags().DurationVar(&ttl, "ttl", 0, "time to live, e.g. 1h")
		}, func(p *catalog.Policies) error { p.MessageTTLSeconds = int64(ttl / time.Second); return nil }),
		update("set-deduplication", "Turn broker-side deduplication on or off", func(c *cobra.Command) {
			c.Flags().BoolVar(&dedup, "enable", true, "deduplicate by producer and sequence")
		}, func(p *catalog.Policies) error { p.Deduplication = dedup; return nil }),
		update("set-replication", "Choose the architecture of the namespace's new topics: ledger (bookies) or isr (replicas on the brokers, Kafka's); existing topics keep theirs", func(c *cobra.Command) {
			c.Flags().StringVar(&replMode, "mode", string(catalog.ModeLedger), "ledger or isr")
			c.Flags().Int32Var(&repl.Factor, "replication-factor", 0, "isr: replicas per partition (default 3; a CreateTopics request's replication_factor overrides it)")
			c.Flags().Int32Var(&repl.MinInSyncReplicas, "min-insync-replicas", 0, "isr: min.insync.replicas (default 2; a topic config may override it)")
			c.Flags().BoolVar(&repl.UncleanLeaderElection, "unclean-leader-election", false, "isr: elect an out-of-sync replica when no in-sync one is left (loses records)")
		}, func(p *catalog.Policies) error {
			r := repl
			r.Mode = catalog.Mode(replMode)
			if r.Mode == catalog.ModeISR {
				r = r.WithDefaults()
			}
			if err := r.Validate(); err != nil {
				return err
			}
			p.Replication = r
			return nil
		}),
		&cobra.Command{Use: "bundles TENANT/NAMESPACE", Short: "List the namespace's bundles and the broker that owns each", Args: cobra.ExactArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				return o.withAdmin(cmd, func(ctx context.Context, a *catalog.Catalog, store meta.Store) error {
					return printBundles(ctx, cmd.OutOrStdout(), a, store, args[0])
				})
			}},
	)
	return cmd
}

type quotaPolicyValue struct{ p *catalog.BacklogQuotaPolicy }

func newQuotaPolicyValue(p *catalog.BacklogQuotaPolicy) *quotaPolicyValue {
	*p = catalog.ProducerRequestHold
	return &quotaPolicyValue{p}
}
func (v *quotaPolicyValue) String() string {
	if v.p == nil {
		return ""
	}
	return string(*v.p)
}
func (v *quotaPolicyValue) Set(s string) error {
	switch p := catalog.BacklogQuotaPolicy(s); p {
	case catalog.ProducerRequestHold, catalog.ProducerException, catalog.ConsumerBacklogEviction:
		*v.p = p
		return nil
	}
	return fmt.Errorf("unknown backlog quota policy %q", s)
}
func (v *quotaPolicyValue) Type() string { return "policy" }

func printJSON(w io.Writer, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(w, string(b))
	return err
}

// printBundles lists each bundle of ns with its owner, read from the
// ownership keys (their layout is in internal/broker/keys.go).
func printBundles(ctx context.Context, w io.Writer, a *catalog.Catalog, store meta.Store, ns string) error {
	p, err := a.GetPolicies(ctx, ns)
	if err != nil {
		return err
	}
	res, err := store.List(ctx, ownership.OwnershipPrefix+ns+"/", meta.ListOptions{Limit: 10_000})
	if err != nil {
		return err
	}
	owners := map[string]string{}
	for _, kv := range res.KVs {
		var v struct {
			BrokerID  int32  `json:"brokerID"`
			KafkaAddr string `json:"kafkaAddr"`
		}
		if json.Unmarshal(kv.Value, &v) == nil {
			owners[strings.TrimPrefix(kv.Key, ownership.OwnershipPrefix+ns+"/")] = fmt.Sprintf("broker %d (%s)", v.BrokerID, v.KafkaAddr)
		}
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "BUNDLE\tOWNER")
	for _, b := range catalog.BundlesOf(ns, p.Bundles.Boundaries) {
		owner, ok := owners[b.Range()]
		if !ok {
			owner = "(unowned)"
		}
		fmt.Fprintf(tw, "%s\t%s\n", b.Range(), owner)
	}
	return tw.Flush()
}

func newAdminTopicsCommand(o *adminOptions) *cobra.Command {
	cmd := &cobra.Command{Use: "topics TENANT/NAMESPACE", Short: "List a namespace's Kafka topics: partitions, id, configs", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return o.withAdmin(cmd, func(ctx context.Context, a *catalog.Catalog, _ meta.Store) error {
				ts, err := a.ListTopics(ctx, args[0])
				if err != nil {
					return err
				}
				tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "TOPIC\tMODE\tPARTITIONS\tID\tCONFIGS")
				for _, t := range ts {
					mode := t.Mode
					if mode == "" {
						mode = catalog.ModeLedger
					}
					fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%v\n", t.Name, mode, t.Partitions, t.ID, t.Configs)
				}
				return tw.Flush()
			})
		}}
	cmd.AddCommand(&cobra.Command{Use: "describe TENANT/NAMESPACE TOPIC",
		Short: "Describe a Kafka topic as kafka-topics --describe does: per partition (ISR mode) the leader, replicas, ISR, ELR, leader epoch, under-replicated",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			return o.withAdmin(cmd, func(ctx context.Context, a *catalog.Catalog, store meta.Store) error {
				t, err := a.GetTopic(ctx, args[0], args[1])
				if err != nil {
					return err
				}
				return describeTopic(ctx, cmd.OutOrStdout(), store, t)
			})
		}})
	cmd.AddCommand(newAdminTopicsReassignCommand(o))
	return cmd
}

// newAdminTopicsReassignCommand moves an ISR topic's partition to other
// brokers (KIP-455), as kafka-reassign-partitions --execute does for one
// partition: the controller adds the new replicas, waits for them to join
// the ISR, then drops the old ones; --cancel reverts one in progress. It
// returns once the partition's record shows the change and prints the
// topic as describe does. A throttle is set as Kafka's tool sets it (the
// dynamic broker configs leader/follower.replication.throttled.rate and
// the topic's *.replication.throttled.replicas), through the Kafka API.
func newAdminTopicsReassignCommand(o *adminOptions) *cobra.Command {
	var partition int32
	var replicas []int
	var cancelIt bool
	cmd := &cobra.Command{Use: "reassign TENANT/NAMESPACE TOPIC --partition N (--replicas IDS | --cancel)",
		Short: "Move an ISR topic's partition to other brokers (replicas[0] is the preferred leader), or cancel the move in progress",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if cancelIt == (len(replicas) > 0) {
				return errors.New("give either --replicas or --cancel")
			}
			return o.withAdmin(cmd, func(ctx context.Context, a *catalog.Catalog, store meta.Store) error {
				t, err := a.GetTopic(ctx, args[0], args[1])
				if err != nil {
					return err
				}
				if !t.IsISR() {
					return fmt.Errorf("topic %s is a ledger-mode topic: its partitions live in ledgers, not on brokers", t.Name)
				}
				if partition < 0 || partition >= t.Partitions {
					return fmt.Errorf("topic %s has no partition %d (%d partitions)", t.Name, partition, t.Partitions)
				}
				req := isr.ReassignRequest{Partition: t.Name + "-" + strconv.Itoa(int(partition))}
				for _, id := range replicas {
					req.Target = append(req.Target, isr.BrokerID(id))
				}
				if err := (isrctl.Client{Store: store}).Reassign(ctx, req); err != nil {
					return fmt.Errorf("reassign %s: %w", req.Partition, err)
				}
				if err := waitReassignmentShown(ctx, store, req); err != nil {
					return err
				}
				return describeTopic(ctx, cmd.OutOrStdout(), store, t)
			})
		}}
	f := cmd.Flags()
	f.Int32Var(&partition, "partition", 0, "the partition to move")
	f.IntSliceVar(&replicas, "replicas", nil, "the new replica list, comma-separated broker ids, the preferred leader first")
	f.BoolVar(&cancelIt, "cancel", false, "cancel the reassignment in progress (the partition keeps its original replicas)")
	return cmd
}

// waitReassignmentShown waits until the partition's record shows req: its
// target as the replicas the partition is headed for (in progress or done),
// or, for a cancel, no reassignment.
func waitReassignmentShown(ctx context.Context, store meta.Store, req isr.ReassignRequest) error {
	key := isr.PartitionKey(req.Partition)
	for {
		kv, err := store.Get(ctx, key)
		if err != nil {
			return fmt.Errorf("partition %s: %w", req.Partition, err)
		}
		st, err := isr.UnmarshalState(kv.Value)
		if err != nil {
			return fmt.Errorf("partition %s: %w", req.Partition, err)
		}
		if st.ShowsReassignment(req.Target) {
			return nil
		}
		wctx, cancel := context.WithCancel(ctx)
		for resp := range store.Watch(wctx, key, int64(kv.Version)+1) {
			if resp.Err != nil || len(resp.Events) > 0 {
				break
			}
		}
		cancel()
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("partition %s: the record does not show the reassignment yet: %w", req.Partition, err)
		}
	}
}

// describeTopic prints a topic as kafka-topics --describe does; an ISR
// topic's partitions from their records (isr.PartitionKey): leader ("none"
// without one, as Kafka prints it), replicas, ISR, ELR and last known ELR
// (KIP-966), leader epoch, under-replicated (ISR smaller than the
// replicas, or than a reassignment's target), the offline replicas (no
// live registration under isr.BrokerPrefix) and a reassignment's adding
// and removing replicas while one is in progress; a ledger-mode topic's from nothing more than its
// record (its partitions' owner is its bundle's: `quire admin namespaces
// bundles`).
func describeTopic(ctx context.Context, w io.Writer, store meta.Store, t catalog.Topic) error {
	mode := t.Mode
	if mode == "" {
		mode = catalog.ModeLedger
	}
	rf := max(t.ReplicationFactor, 1)
	fmt.Fprintf(w, "Topic: %s\tTopicId: %s\tPartitionCount: %d\tReplicationFactor: %d\tMode: %s\tConfigs: %v\n",
		t.Name, t.ID, t.Partitions, rf, mode, t.Configs)
	if !t.IsISR() {
		return nil
	}
	ids := func(ms []isr.BrokerID) string {
		var s []string
		for _, m := range ms {
			s = append(s, strconv.Itoa(int(m)))
		}
		return strings.Join(s, ",")
	}
	regs, _, err := meta.ListAll(ctx, store, isr.BrokerPrefix)
	if err != nil {
		return fmt.Errorf("broker registrations: %w", err)
	}
	live := map[isr.BrokerID]bool{}
	for _, kv := range regs {
		if id, err := strconv.Atoi(strings.TrimPrefix(kv.Key, isr.BrokerPrefix)); err == nil {
			live[isr.BrokerID(id)] = true
		}
	}
	for i := range t.Partitions {
		name := t.Name + "-" + strconv.Itoa(int(i))
		kv, err := store.Get(ctx, isr.PartitionKey(name))
		if errors.Is(err, meta.ErrNotFound) {
			fmt.Fprintf(w, "\tTopic: %s\tPartition: %d\t(no record yet)\n", t.Name, i)
			continue
		}
		if err != nil {
			return err
		}
		st, err := isr.UnmarshalState(kv.Value)
		if err != nil {
			return fmt.Errorf("partition %s: %w", name, err)
		}
		var elr, offline []isr.BrokerID
		for _, m := range st.ELR {
			elr = append(elr, m.ID)
		}
		for _, r := range st.Replicas {
			if !live[r] {
				offline = append(offline, r)
			}
		}
		leader := "none"
		if st.Leader != isr.NoLeader {
			leader = strconv.Itoa(int(st.Leader))
		}
		fmt.Fprintf(w, "\tTopic: %s\tPartition: %d\tLeader: %s\tReplicas: %s\tIsr: %s\tElr: %s\tLastKnownElr: %s\tLeaderEpoch: %d\tUnderReplicated: %v\tOffline: %s",
			t.Name, i, leader, ids(st.Replicas), ids(st.ISRIDs()), ids(elr), ids(st.LastKnownELR), st.LeaderEpoch, len(st.ISR) < len(st.TargetReplicas()), ids(offline))
		if st.Reassigning() {
			// As kafka-topics prints a reassignment in progress (KIP-455).
			fmt.Fprintf(w, "\tAdding Replicas: %s\tRemoving Replicas: %s", ids(st.AddingReplicas), ids(st.RemovingReplicas))
		}
		fmt.Fprintln(w)
	}
	return nil
}
