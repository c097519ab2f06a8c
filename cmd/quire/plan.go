package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"quire/internal/plan"
)

// newPlanCommand is `quire plan`: the seed's numerical example as a
// calculator. The arithmetic is internal/plan's; this only parses and prints.
func newPlanCommand() *cobra.Command {
	w := plan.SeedExample()
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "plan",
		Short: "Size one workload for Kafka's ISR design and for ledger mode: storage, cross-zone traffic, recovery, metadata",
		Long: `Work out, for one workload, what Kafka's ISR design and the Pulsar/BookKeeper ledger
design cost: the data stored, the traffic between zones at peak, the time to rebuild a lost
storage node (in this cluster and in a larger one) and the metadata writes of a ledger-mode
broker failover. Every figure is printed with the formula that produced it. The defaults are
the seed's numerical example. Units are decimal: MB = 10^6 bytes, TB = 10^12 bytes.

The model: clients are spread evenly over the zones; each copy is in a different zone; a lost
Kafka broker is rebuilt by one replacement at the throttle; a lost bookie is rebuilt by the
other bookies of its zone in parallel, each receiving at the re-replication rate.

--json prints the same as one JSON object whose field names are stable:
  workload     the inputs: peak_mb_per_s, average_mb_per_s, retention_s, consumer_groups,
               zones, copies, kafka_brokers, kafka_throttle_mb_per_s, ledger_brokers,
               bookies_per_zone, rereplication_mb_per_s_per_bookie, large_cluster_nodes,
               topics_per_broker, metadata_writes_per_topic, operator_delay_s
  storage      unique, with_copies
  cross_zone   kafka_leader_reads, kafka_follower_fetching, ledger,
               ledger_over_follower_fetching
  recovery     kafka_broker_data, kafka_broker_rebuild, kafka_broker_window, bookie_data,
               bookie_rebuild, large_kafka_broker_data, large_kafka_broker_rebuild,
               large_bookie_data, large_bookie_rebuild
  metadata     ledger_broker_failover_data, ledger_broker_failover_writes,
               topics_per_surviving_broker
Each figure is {"label", "value", "unit", "formula"} with "at_least": true on a lower bound
and an optional "note"; unit is one of TB, MB/s, s, %, writes, topics.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			p, err := plan.Compute(w)
			if err != nil {
				return err
			}
			if asJSON {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(p)
			}
			return printPlan(cmd.OutOrStdout(), p)
		},
	}
	f := cmd.Flags()
	f.Float64Var(&w.PeakMBPerSec, "peak-mb-per-s", w.PeakMBPerSec, "produce rate at peak, MB/s (cross-zone traffic)")
	f.Float64Var(&w.AverageMBPerSec, "average-mb-per-s", w.AverageMBPerSec, "average produce rate, MB/s (stored data)")
	f.DurationVar(&w.Retention, "retention", w.Retention, "how long data is kept")
	f.IntVar(&w.ConsumerGroups, "consumer-groups", w.ConsumerGroups, "consumer groups, each reading everything")
	f.IntVar(&w.Zones, "zones", w.Zones, "availability zones")
	f.IntVar(&w.Copies, "copies", w.Copies, "copies of every byte, one per zone (Kafka's replication factor; ledger mode's E = Qw)")
	f.IntVar(&w.KafkaBrokers, "kafka-brokers", w.KafkaBrokers, "Kafka (ISR mode) brokers")
	f.Float64Var(&w.KafkaThrottleMBPerSec, "kafka-throttle-mb-per-s", w.KafkaThrottleMBPerSec, "Kafka replication throttle a replacement broker rebuilds at, MB/s")
	f.IntVar(&w.LedgerBrokers, "ledger-brokers", w.LedgerBrokers, "Pulsar (ledger mode) brokers")
	f.IntVar(&w.BookiesPerZone, "bookies-per-zone", w.BookiesPerZone, "bookies in each zone")
	f.Float64Var(&w.RereplicationMBPerSecPerBookie, "rereplication-mb-per-s", w.RereplicationMBPerSecPerBookie, "what one bookie receives while re-replicating, MB/s")
	f.IntVar(&w.LargeClusterNodes, "large-cluster", w.LargeClusterNodes, "size of the larger cluster the recovery figures are repeated for: that many Kafka brokers and that many bookies (a multiple of --zones)")
	f.IntVar(&w.TopicsPerBroker, "topics", w.TopicsPerBroker, "topics (or partitions) on a failed ledger-mode broker")
	f.IntVar(&w.MetadataWritesPerTopic, "metadata-writes-per-topic", w.MetadataWritesPerTopic, "metadata writes to move one topic (ledger into recovery, close it, add a new ledger)")
	f.DurationVar(&w.OperatorDelay, "operator-delay", w.OperatorDelay, "time before an operator starts Kafka's rebuild")
	f.BoolVar(&asJSON, "json", false, "print JSON (field names in --help)")
	return cmd
}

// printPlan writes a header naming the workload, then one block per section:
// label, value, and the formula behind it.
func printPlan(out io.Writer, p plan.Plan) error {
	w := p.Workload
	n := plan.FormatNumber
	fmt.Fprintf(out, "quire plan: %s MB/s peak, %s MB/s average produce; retention %s (%s s); %d consumer groups; %d zones, %d copies (one per zone)\n",
		n(w.PeakMBPerSec), n(w.AverageMBPerSec), humanDuration(w.Retention), n(w.Retention.Seconds()), w.ConsumerGroups, w.Zones, w.Copies)
	fmt.Fprintf(out, "  Kafka (ISR mode):      %d brokers; replication throttle %s MB/s; operator delay %s\n",
		w.KafkaBrokers, n(w.KafkaThrottleMBPerSec), humanDuration(w.OperatorDelay))
	fmt.Fprintf(out, "  Pulsar (ledger mode):  %d brokers, %d bookies (%d per zone), E = Qw = %d, zone-aware; re-replication %s MB/s per bookie\n",
		w.LedgerBrokers, w.Zones*w.BookiesPerZone, w.BookiesPerZone, w.Copies, n(w.RereplicationMBPerSecPerBookie))
	fmt.Fprintln(out, "  Units: MB = 10^6 bytes, TB = 10^12 bytes.")

	// One column width for every section, so the values line up down the page.
	labelWidth, valueWidth := 0, 0
	for _, s := range p.Sections() {
		for _, f := range s.Figures {
			labelWidth = max(labelWidth, utf8.RuneCountInString(f.Label))
			valueWidth = max(valueWidth, utf8.RuneCountInString(f.String()))
		}
	}
	pad := func(s string, width int) string { return s + strings.Repeat(" ", width-utf8.RuneCountInString(s)) }
	for _, s := range p.Sections() {
		fmt.Fprintf(out, "\n%s\n", s.Title)
		for _, f := range s.Figures {
			fmt.Fprintf(out, "  %s  %s  = %s\n", pad(f.Label, labelWidth), pad(f.String(), valueWidth), f.Formula)
			if f.Note != "" {
				fmt.Fprintf(out, "  %s  %s    (%s)\n", pad("", labelWidth), pad("", valueWidth), f.Note)
			}
		}
	}
	return nil
}

// humanDuration writes a duration in the largest whole unit that fits it
// ("3 days", "30 min"), and anything else as Go does.
func humanDuration(d time.Duration) string {
	for _, u := range []struct {
		size time.Duration
		name string
	}{{24 * time.Hour, "days"}, {time.Hour, "h"}, {time.Minute, "min"}, {time.Second, "s"}} {
		if d > 0 && d%u.size == 0 {
			if u.name == "days" && d == u.size {
				return "1 day"
			}
			return fmt.Sprintf("%d %s", d/u.size, u.name)
		}
	}
	return d.String()
}
