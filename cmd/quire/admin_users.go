package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"quire/internal/auth"
	"quire/internal/meta"
)

// This file is `quire admin users`: the SASL user database (SCRAM
// credentials in the metadata store) read and written directly, what
// Kafka's `kafka-storage format --add-scram` is for a cluster nobody can
// log in to yet, and the way back in when the admin password is lost. With
// a broker running, `kafka-configs --entity-type users` does the same over
// the Kafka protocol.

// userPasswordEnv gives `quire admin users set` the password instead of
// stdin.
const userPasswordEnv = "QUIRE_USER_PASSWORD"

func newAdminUsersCommand(o *adminOptions) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "users",
		Short: "SASL users: list, set (add or change a password), delete",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return o.withStore(cmd, func(ctx context.Context, store meta.Store) error {
				described, err := auth.NewCredentials(store).Describe(ctx, nil)
				if err != nil {
					return err
				}
				w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
				fmt.Fprintln(w, "USER\tMECHANISMS")
				for _, user := range auth.Users(described) {
					var mechs []string
					for _, info := range described[user] {
						mechs = append(mechs, fmt.Sprintf("%s (%d iterations)", info.Mechanism, info.Iterations))
					}
					fmt.Fprintf(w, "%s\t%s\n", user, strings.Join(mechs, ", "))
				}
				return w.Flush()
			})
		},
	}
	var mechanisms []string
	var iterations int
	set := &cobra.Command{
		Use:   "set USER",
		Short: "Give USER a password (read from $" + userPasswordEnv + " or the first line of stdin), for each SCRAM mechanism; PLAIN checks against it",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			password, err := readPassword(cmd.InOrStdin())
			if err != nil {
				return err
			}
			mechs, err := parseMechanisms(mechanisms)
			if err != nil {
				return err
			}
			return o.withStore(cmd, func(ctx context.Context, store meta.Store) error {
				creds := auth.NewCredentials(store)
				for _, m := range mechs {
					cred, err := auth.NewSCRAMCredential(m, password, iterations)
					if err != nil {
						return err
					}
					if err := creds.Upsert(ctx, args[0], cred); err != nil {
						return err
					}
				}
				fmt.Fprintf(cmd.OutOrStdout(), "set %s for %s\n", strings.Join(mechanisms, ","), args[0])
				return nil
			})
		},
	}
	set.Flags().StringSliceVar(&mechanisms, "mechanism", []string{auth.MechanismSCRAMSHA256, auth.MechanismSCRAMSHA512}, "SCRAM mechanisms to set")
	set.Flags().IntVar(&iterations, "iterations", auth.MinIterations, fmt.Sprintf("SCRAM iterations (%d to %d)", auth.MinIterations, auth.MaxIterations))
	var deleteMechanisms []string
	del := &cobra.Command{
		Use:   "delete USER",
		Short: "Delete USER's credentials (of the given mechanisms; all by default)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			mechs, err := parseMechanisms(deleteMechanisms)
			if err != nil {
				return err
			}
			return o.withStore(cmd, func(ctx context.Context, store meta.Store) error {
				creds := auth.NewCredentials(store)
				deleted := 0
				for _, m := range mechs {
					switch err := creds.Delete(ctx, args[0], m); {
					case err == nil:
						deleted++
					case !errors.Is(err, auth.ErrUnknownCredential) && !errors.Is(err, auth.ErrUnknownUser):
						return err
					}
				}
				if deleted == 0 {
					return fmt.Errorf("user %q has no such credential", args[0])
				}
				fmt.Fprintf(cmd.OutOrStdout(), "deleted %d credential(s) of %s\n", deleted, args[0])
				return nil
			})
		},
	}
	del.Flags().StringSliceVar(&deleteMechanisms, "mechanism", []string{auth.MechanismSCRAMSHA256, auth.MechanismSCRAMSHA512}, "SCRAM mechanisms to delete")
	cmd.AddCommand(set, del)
	return cmd
}

func parseMechanisms(names []string) ([]auth.Mechanism, error) {
	var out []auth.Mechanism
	for _, n := range names {
		m, ok := auth.ParseMechanism(n)
		if !ok {
			return nil, fmt.Errorf("unknown SCRAM mechanism %q (SCRAM-SHA-256 or SCRAM-SHA-512)", n)
		}
		out = append(out, m)
	}
	return out, nil
}

// readPassword takes the password from the environment, else the first
// line of in; never from a flag, which ps would show.
func readPassword(in io.Reader) (string, error) {
	if p := os.Getenv(userPasswordEnv); p != "" {
		return p, nil
	}
	line, err := bufio.NewReader(in).ReadString('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		return "", fmt.Errorf("read the password from stdin: %w", err)
	}
	password := strings.TrimRight(line, "\r\n")
	if password == "" {
		return "", fmt.Errorf("no password: set $%s or write it on stdin", userPasswordEnv)
	}
	return password, nil
}
