package main

import (
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"quire/internal/sim"
)

// errScenarioDiffers makes `quire sim scenario` exit non-zero when a
// scenario did not come out as the seed describes.
var errScenarioDiffers = errors.New("scenario outcome differs from the seed")

func newSimScenarioCommand() *cobra.Command {
	var list, durable bool
	cmd := &cobra.Command{
		Use:   "scenario [NAME]",
		Short: "Run one of the seeds' scenarios by name (K1-K21 ISR mode; ledger-mode P scenarios)",
		Long: `Runs a scenario of ../shared/SCENARIOS.md deterministically and prints what happened in
the seed's terms: leaders, ISR, HW and LEO per replica, records acknowledged and lost.
Where the seed's numbers come from its load (123 lost in K3, 15,286 in K4, 14,238 in K7)
the scenario reproduces the mechanism with the seed's lags as parameters and prints both.
The last line is "scenario NAME outcome=as-seed|differs acked=A lost=L"; it exits
non-zero when the outcome differs.

--durable runs it under acks=all, min.insync.replicas=2, unclean election off and ELR
on (K12 adds flush.messages=1): the seed's remedy, which must show lost=0 or the
unavailability the seed describes.

Ledger-mode scenarios (P1-P3, P5-P10, P13) print which simulation check or test script
models them and run a representative seed of quire sim ledger or topic.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			out := cmd.OutOrStdout()
			if list || len(args) == 0 {
				listScenarios(out)
				return nil
			}
			return runScenario(out, args[0], durable)
		},
	}
	cmd.Flags().BoolVar(&list, "list", false, "list the scenarios")
	cmd.Flags().BoolVar(&durable, "durable", false, "run under the durable configuration (acks=all, min.insync.replicas=2, unclean off, ELR on)")
	return cmd
}

func listScenarios(out io.Writer) {
	for _, sc := range sim.Scenarios() {
		if sc.ModelledBy != "" {
			fmt.Fprintf(out, "%-4s %s  [ledger mode: %s]\n", sc.Name, sc.Title, sc.ModelledBy)
			continue
		}
		fmt.Fprintf(out, "%-4s %s\n", sc.Name, sc.Title)
	}
}

func runScenario(out io.Writer, name string, durable bool) error {
	for _, info := range sim.Scenarios() {
		if info.Name != name || info.ModelledBy == "" {
			continue
		}
		return runLedgerScenario(out, info)
	}
	r, err := sim.RunScenario(name, durable)
	if err != nil {
		return err
	}
	for _, line := range r.Lines {
		fmt.Fprintln(out, line)
	}
	outcome := "as-seed"
	if !r.AsSeed {
		outcome = "differs"
	}
	fmt.Fprintf(out, "scenario %s outcome=%s acked=%d lost=%d\n", name, outcome, r.Acked, r.Lost)
	if !r.AsSeed {
		return fmt.Errorf("scenario %s: %w", name, errScenarioDiffers)
	}
	return nil
}

// runLedgerScenario names what models a ledger-mode scenario and runs a
// representative seed of the simulation that checks it.
func runLedgerScenario(out io.Writer, info sim.ScenarioInfo) error {
	fmt.Fprintf(out, "%s %s (ledger mode)\nmodelled by: %s\n", info.Name, info.Title, info.ModelledBy)
	violations := 0
	switch info.Ledger {
	case "ledger":
		r := sim.RunLedger(info.LedgerSeed, sim.LedgerOptions{})
		fmt.Fprintf(out, "quire sim ledger --seed %d: %s\nstats: entries=%d acked=%d crashes=%d ensemble-changes=%d writer-end=%s\n",
			r.Seed, r.Scenario, r.Stats.EntriesAdded, r.Stats.Acked, r.Stats.Crashes, r.Stats.EnsembleChanges, r.Stats.WriterEnd)
		violations = len(r.Violations)
	case "topic":
		r := sim.RunTopic(info.LedgerSeed, sim.TopicOptions{})
		fmt.Fprintf(out, "quire sim topic --seed %d: %s\n", r.Seed, r.Scenario)
		violations = len(r.Violations)
	default:
		fmt.Fprintln(out, "no simulation seed: run the test named above")
	}
	outcome := "as-seed"
	if violations > 0 {
		outcome = "differs"
	}
	fmt.Fprintf(out, "scenario %s outcome=%s acked=0 lost=0\n", info.Name, outcome)
	if violations > 0 {
		return fmt.Errorf("scenario %s: %d violations: %w", info.Name, violations, errScenarioDiffers)
	}
	return nil
}
