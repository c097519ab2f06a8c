package main

import (
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"

	"quire/internal/auth"
)

// newTokensCommand mirrors `pulsar tokens`: secret keys and the tokens they
// sign, for --pulsar-auth token.
func newTokensCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "tokens",
		Short: "Make Pulsar authentication tokens (JWT) and their secret keys, as `pulsar tokens`",
		Long: `Make an HS256 secret key and sign tokens with it, for Pulsar clients and the
admin REST API of a broker started with --pulsar-auth token:

  quire tokens create-secret-key --output secret.key
  quire tokens create --secret-key file://secret.key --subject alice --expiry 720h
  quire standalone --pulsar-auth token --pulsar-token-secret-key file://secret.key ...

A token's role is its subject (the sub claim).`,
		Args: cobra.NoArgs,
	}
	cmd.AddCommand(newTokensSecretKeyCommand(), newTokensCreateCommand())
	return cmd
}

func newTokensSecretKeyCommand() *cobra.Command {
	var output string
	var asBase64 bool
	cmd := &cobra.Command{
		Use:   "create-secret-key",
		Short: "Make a random 256-bit HS256 secret key",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			key, err := auth.NewTokenSecretKey()
			if err != nil {
				return err
			}
			if asBase64 {
				key = []byte(base64.StdEncoding.EncodeToString(key) + "\n")
			}
			if output == "" {
				if !asBase64 {
					return errors.New("a raw key goes to a file (--output) or base64 to stdout (--base64)")
				}
				_, err := cmd.OutOrStdout().Write(key)
				return err
			}
			return os.WriteFile(output, key, 0o600)
		},
	}
	f := cmd.Flags()
	f.StringVarP(&output, "output", "o", "", "file to write the key to (mode 0600)")
	f.BoolVarP(&asBase64, "base64", "b", false, "write the key in base64 (then give it to the broker as data:;base64,<key>)")
	return cmd
}

func newTokensCreateCommand() *cobra.Command {
	var secretKey, subject string
	var expiry time.Duration
	cmd := &cobra.Command{
		Use:   "create",
		Short: "Sign an HS256 token whose role (sub) is --subject",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if secretKey == "" || subject == "" {
				return errors.New("--secret-key and --subject are required")
			}
			if expiry < 0 {
				return errors.New("--expiry must not be negative")
			}
			key, err := auth.ReadTokenKey(secretKey)
			if err != nil {
				return err
			}
			var expires time.Time
			if expiry > 0 {
				expires = time.Now().Add(expiry)
			}
			token, err := auth.CreateToken(key, subject, expires)
			if err != nil {
				return err
			}
			_, err = fmt.Fprintln(cmd.OutOrStdout(), token)
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&secretKey, "secret-key", "", "the secret key: file:///path, a path, data:;base64,<key> or base64")
	f.StringVarP(&subject, "subject", "s", "", "the token's role (sub claim)")
	f.DurationVar(&expiry, "expiry", 0, "how long the token is valid (0: it never expires)")
	return cmd
}
