package main

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"quire/internal/tlsconf"
)

func newCertsCommand() *cobra.Command {
	var dir, clientCN string
	var hosts []string
	var validFor time.Duration
	cmd := &cobra.Command{
		Use:   "certs",
		Short: "Make a local CA and TLS certificates for a test cluster",
		Long: `Writes a CA (ca.pem, ca-key.pem), a server certificate for --hosts
(server.pem, server-key.pem) and a client certificate whose common name is
the client's principal (client.pem, client-key.pem) into --dir. The server
certificate is valid for client authentication too: it is what Quire's nodes
present to each other (--bookie-tls-client-cert, --meta-tls-cert, etcd peers).
For test clusters only: use your own CA for real data.

  quire certs --dir certs --hosts 127.0.0.1,localhost
  quire standalone --kafka-tls-cert certs/server.pem --kafka-tls-key certs/server-key.pem
  kcat -b 127.0.0.1:9092 -X security.protocol=ssl -X ssl.ca.location=certs/ca.pem -L`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := tlsconf.MakeTestPKI(dir, hosts, clientCN, validFor); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "wrote ca.pem, server.pem, client.pem and their keys to %s\n", dir)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&dir, "dir", "certs", "directory to write the files to")
	f.StringSliceVar(&hosts, "hosts", []string{"127.0.0.1", "localhost"}, "IP addresses and DNS names the server certificate is valid for")
	f.StringVar(&clientCN, "client", "client", "the client certificate's common name (its principal)")
	f.DurationVar(&validFor, "valid-for", 365*24*time.Hour, "how long the certificates are valid")
	return cmd
}
