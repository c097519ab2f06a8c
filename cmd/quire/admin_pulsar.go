package main

// Pulsar-style topic verbs for `quire admin topics`, through a broker's
// admin REST API (/admin/v2, the broker's HTTP port): the same answers
// pulsar-admin gets. Redirects to a topic's owner are followed.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
)

// addPulsarTopicVerbs adds stats, internal-stats, partitioned-stats,
// subscriptions, skip, reset-cursor and expire-messages to the topics
// command.
func addPulsarTopicVerbs(o *adminOptions, topics *cobra.Command) {
	var adminURL, adminToken string
	topics.PersistentFlags().StringVar(&adminURL, "admin-url", "http://127.0.0.1:8080", "a broker's HTTP address, for the Pulsar verbs (its admin REST API)")
	topics.PersistentFlags().StringVar(&adminToken, "admin-token", "", "the Pulsar verbs' token (Authorization: Bearer) for a broker with --pulsar-auth token: the token, or file:///path of a file holding it")
	const topicArg = " persistent://TENANT/NAMESPACE/TOPIC"
	call := func(cmd *cobra.Command, method, topic, suffix string) error {
		token, err := readAdminToken(adminToken)
		if err != nil {
			return err
		}
		return pulsarAdminCall(cmd, o.timeout, adminURL, token, method, topic, suffix)
	}
	get := func(use, short, suffix string) *cobra.Command {
		return &cobra.Command{Use: use + topicArg, Short: short, Args: cobra.ExactArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error { return call(cmd, http.MethodGet, args[0], suffix) }}
	}
	var ago time.Duration
	reset := &cobra.Command{Use: "reset-cursor" + topicArg + " SUBSCRIPTION", Short: "Move a subscription back (or forward) to the messages published since --time ago",
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			at := time.Now().Add(-ago).UnixMilli()
			return call(cmd, http.MethodPost, args[0], "/subscription/"+args[1]+"/resetcursor/"+strconv.FormatInt(at, 10))
		}}
	reset.Flags().DurationVar(&ago, "time", 0, "how far back (0: now, the end of the topic)")
	topics.AddCommand(
		get("stats", "A Pulsar topic's stats (Pulsar's JSON)", "/stats"),
		get("internal-stats", "A Pulsar topic's ledgers and cursors (Pulsar's JSON)", "/internalStats"),
		get("partitioned-stats", "A partitioned Pulsar topic's stats, summed over its partitions", "/partitioned-stats"),
		get("subscriptions", "A Pulsar topic's subscriptions", "/subscriptions"),
		&cobra.Command{Use: "skip" + topicArg + " SUBSCRIPTION N", Short: "Acknowledge a subscription's next N unacknowledged entries", Args: cobra.ExactArgs(3),
			RunE: func(cmd *cobra.Command, args []string) error {
				return call(cmd, http.MethodPost, args[0], "/subscription/"+args[1]+"/skip/"+args[2])
			}},
		&cobra.Command{Use: "expire-messages" + topicArg + " SUBSCRIPTION SECONDS", Short: "Acknowledge a subscription's messages older than SECONDS", Args: cobra.ExactArgs(3),
			RunE: func(cmd *cobra.Command, args []string) error {
				return call(cmd, http.MethodPost, args[0], "/subscription/"+args[1]+"/expireMessages/"+args[2])
			}},
		reset,
	)
}

// readAdminToken reads --admin-token: "" (none), file:///path, or the
// token itself.
func readAdminToken(flag string) (string, error) {
	path, ok := strings.CutPrefix(flag, "file://")
	if !ok {
		return flag, nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("--admin-token: %w", err)
	}
	return strings.TrimSpace(string(b)), nil
}

// pulsarAdminCall sends one request for a topic, with token as its bearer
// credentials when not empty, and prints the answer (indented JSON), or
// returns the broker's reason.
func pulsarAdminCall(cmd *cobra.Command, timeout time.Duration, adminURL, token, method, topic, suffix string) error {
	local, ok := strings.CutPrefix(topic, "persistent://")
	if !ok || strings.Count(local, "/") != 2 {
		return fmt.Errorf("topic %q: want persistent://TENANT/NAMESPACE/TOPIC", topic)
	}
	ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
	defer cancel()
	url := strings.TrimSuffix(adminURL, "/") + "/admin/v2/persistent/" + local + suffix
	req, err := http.NewRequestWithContext(ctx, method, url, nil)
	if err != nil {
		return err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode >= 300 {
		var reason struct {
			Reason string `json:"reason"`
		}
		if json.Unmarshal(body, &reason) != nil || reason.Reason == "" {
			reason.Reason = strings.TrimSpace(string(body))
		}
		return fmt.Errorf("%s %s: %s: %s", method, url, resp.Status, reason.Reason)
	}
	if len(bytes.TrimSpace(body)) == 0 {
		return nil // 204: done
	}
	var out bytes.Buffer
	if json.Indent(&out, body, "", "  ") != nil {
		out.Reset()
		out.Write(body)
	}
	out.WriteByte('\n')
	_, err = cmd.OutOrStdout().Write(out.Bytes())
	return err
}
