package main

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"sigs.k8s.io/yaml"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

// globalOptions are the flags every subcommand shares.
type globalOptions struct {
	configFile string
	logLevel   string
	logFormat  string
}

func newRootCommand() *cobra.Command {
	var g globalOptions
	root := &cobra.Command{
		Use:   "quire",
		Short: "Quire: a durable, replicated log and message broker (ledger mode and ISR mode; Kafka and Pulsar protocols)",
		Long: `Quire is one binary with several roles and tools.

Configuration comes from, in order of precedence: command-line flags,
QUIRE_* environment variables (the flag name in upper case with - turned into _,
e.g. QUIRE_DATA_DIR), a YAML file given with --config (keys are flag names),
and the defaults shown in each command's --help.`,
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       version,
		PersistentPreRunE: func(cmd *cobra.Command, args []string) error {
			if err := applyConfig(cmd, g.configFile); err != nil {
				return err
			}
			logger, err := newLogger(os.Stderr, g.logLevel, g.logFormat)
			if err != nil {
				return err
			}
			slog.SetDefault(logger)
			return nil
		},
	}
	root.PersistentFlags().StringVar(&g.configFile, "config", "", "optional YAML configuration file (keys are flag names)")
	root.PersistentFlags().StringVar(&g.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	root.PersistentFlags().StringVar(&g.logFormat, "log-format", "text", "log format: text or json")

	root.AddCommand(
		newMetaCommand(),
		newStandaloneCommand(),
		newBookieCommand(),
		newBrokerCommand(),
		newAdminCommand(),
		newPerfCommand(),
		newSimCommand(),
		newPlanCommand(),
		newChaosCommand(),
		newCertsCommand(),
		newTokensCommand(),
	)
	return root
}

// applyConfig fills every flag the user did not set from QUIRE_* environment
// variables, then from the YAML file. Flags always win.
func applyConfig(cmd *cobra.Command, file string) error {
	var fromFile map[string]any
	if file != "" {
		data, err := os.ReadFile(file)
		if err != nil {
			return fmt.Errorf("config: %w", err)
		}
		if err := yaml.Unmarshal(data, &fromFile); err != nil {
			return fmt.Errorf("config %s: %w", file, err)
		}
	}
	known := map[string]bool{}
	var firstErr error
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		known[f.Name] = true
		if f.Changed || firstErr != nil {
			return
		}
		env := "QUIRE_" + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))
		if v, ok := os.LookupEnv(env); ok {
			if err := cmd.Flags().Set(f.Name, v); err != nil {
				firstErr = fmt.Errorf("%s=%q: %w", env, v, err)
			}
			return
		}
		if v, ok := fromFile[f.Name]; ok {
			if err := setFromYAML(cmd.Flags(), f, v); err != nil {
				firstErr = fmt.Errorf("config %s: %s: %w", file, f.Name, err)
			}
		}
	})
	if firstErr != nil {
		return firstErr
	}
	for k := range fromFile {
		if !known[k] {
			return fmt.Errorf("config %s: unknown key %q for %q", file, k, cmd.CommandPath())
		}
	}
	return nil
}

func setFromYAML(fs *pflag.FlagSet, f *pflag.Flag, v any) error {
	if list, ok := v.([]any); ok {
		parts := make([]string, len(list))
		for i, x := range list {
			parts[i] = fmt.Sprint(x)
		}
		return fs.Set(f.Name, strings.Join(parts, ","))
	}
	return fs.Set(f.Name, fmt.Sprint(v))
}

func newLogger(w io.Writer, level, format string) (*slog.Logger, error) {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level %q: %w", level, err)
	}
	opts := &slog.HandlerOptions{Level: lvl}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("--log-format %q: want text or json", format)
}
