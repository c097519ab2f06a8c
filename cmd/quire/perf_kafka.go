package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"quire/internal/perf"
)

// The Kafka load generators speak only the Kafka protocol, so the same run
// measures Apache Kafka and Quire; bench/peer.sh compares them.

func newPerfProduceCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "produce",
		Short: "Produce records to a Kafka-protocol topic and measure throughput and send-to-ack latency",
		Long: `Produces random (incompressible) records of --record-size bytes to --topic,
creating it with --partitions, --replication-factor and --topic-config if it
is absent, for --duration or --records, at --rate records/s or as fast as
--in-flight unacknowledged records allow. Each payload starts with its send
time (8 bytes, Unix nanoseconds) for 'quire perf consume' to measure
end-to-end latency.

A progress line per second goes to stderr; the summary (totals, throughput,
latency histogram and percentiles, errors) to stdout, ending with
  perf produce records=N errors=E records_s=R mb_s=X p50_ms=A p99_ms=B
It exits non-zero if any record failed.`,
		Args: cobra.NoArgs,
	}
	build := perf.RegisterProduceFlags(cmd.Flags())
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		cfg, err := build()
		if err != nil {
			return err
		}
		cfg.Out, cfg.Progress = cmd.OutOrStdout(), cmd.ErrOrStderr()
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		_, err = perf.Produce(ctx, cfg)
		return err
	}
	return cmd
}

func newPerfConsumeCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "consume",
		Short: "Consume a Kafka-protocol topic and measure throughput and end-to-end latency",
		Long: `Consumes --topic, reading every partition directly or, with --group, as a
member of a consumer group that commits its offsets, starting --from earliest
or latest, for --duration or --records. Payloads written by 'quire perf
produce' carry their send time, which gives end-to-end latency.

A progress line per second goes to stderr; the summary to stdout, ending with
  perf consume records=N records_s=R mb_s=X
preceded, when payloads carried send times, by
  perf consume e2e_p50_ms=A e2e_p99_ms=B`,
		Args: cobra.NoArgs,
	}
	build := perf.RegisterConsumeFlags(cmd.Flags())
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		cfg, err := build()
		if err != nil {
			return err
		}
		cfg.Out, cfg.Progress = cmd.OutOrStdout(), cmd.ErrOrStderr()
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		_, err = perf.Consume(ctx, cfg)
		return err
	}
	return cmd
}
