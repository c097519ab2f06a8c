package broker

// The Pulsar admin REST API over net/http against a broker, with the real
// Go client producing and consuming: field names are checked on the JSON
// as decoded into maps, not through this package's own types.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/prometheus/client_golang/prometheus"

	"quire/internal/mlog"
	"quire/internal/testutil"
)

// restClient calls one broker's admin API.
type restClient struct {
	t    *testing.T
	base string
	http *http.Client
	// token, when set, goes in "Authorization: Bearer" (pulsar_auth_test.go).
	token string
}

func startAdmin(t *testing.T, b *Broker) restClient {
	t.Helper()
	srv := httptest.NewServer(b.PulsarAdmin())
	t.Cleanup(srv.Close)
	return restClient{t: t, base: srv.URL, http: &http.Client{Timeout: pulsarTestTimeout}}
}

// call sends a request (body as JSON unless nil) and returns the status
// and the answer's body.
func (c restClient) call(method, path string, body any) (int, []byte) {
	c.t.Helper()
	var rd io.Reader
	if body != nil {
		data, err := json.Marshal(body)
		if err != nil {
			c.t.Fatal(err)
		}
		rd = bytes.NewReader(data)
	}
	req, err := http.NewRequest(method, c.base+path, rd)
	if err != nil {
		c.t.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		c.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		c.t.Fatalf("%s %s: %v", method, path, err)
	}
	return resp.StatusCode, data
}

// expect calls and checks the status; a JSON answer is decoded into out
// (when not nil).
func (c restClient) expect(method, path string, body any, status int, out any) {
	c.t.Helper()
	code, data := c.call(method, path, body)
	if code != status {
		c.t.Fatalf("%s %s: status %d (%s), want %d", method, path, code, data, status)
	}
	if status >= 400 {
		var reason map[string]string
		if err := json.Unmarshal(data, &reason); err != nil || reason["reason"] == "" {
			c.t.Fatalf("%s %s: error body %q is not {\"reason\": ...}", method, path, data)
		}
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			c.t.Fatalf("%s %s: decode %q: %v", method, path, data, err)
		}
	}
}

// object returns the JSON object answered by GET path.
func (c restClient) object(path string) map[string]any {
	c.t.Helper()
	var m map[string]any
	c.expect(http.MethodGet, path, nil, http.StatusOK, &m)
	return m
}

// field walks nested JSON objects; nil when a key is missing.
func field(m map[string]any, keys ...string) any {
	var v any = m
	for _, k := range keys {
		obj, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		if v, ok = obj[k]; !ok {
			return nil
		}
	}
	return v
}

// number is a numeric field, -1 when missing or not a number.
func number(m map[string]any, keys ...string) float64 {
	if f, ok := field(m, keys...).(float64); ok {
		return f
	}
	return -1
}

func TestPulsarAdminTenantsAndNamespaces(t *testing.T) {
	c := newTestCluster(t)
	b, _ := c.startPulsarBroker(nil)
	api := startAdmin(t, b)

	var tenants []string
	api.expect("GET", "/admin/v2/tenants", nil, 200, &tenants)
	if !slices.Contains(tenants, "public") {
		t.Fatalf("tenants %v lack public", tenants)
	}
	api.expect("PUT", "/admin/v2/tenants/acme", map[string]any{"adminRoles": []string{"ops"}, "allowedClusters": []string{"quire"}}, 204, nil)
	api.expect("PUT", "/admin/v2/tenants/acme", nil, 409, nil)
	info := api.object("/admin/v2/tenants/acme")
	if roles, _ := field(info, "adminRoles").([]any); len(roles) != 1 || roles[0] != "ops" {
		t.Errorf("tenant info %v", info)
	}
	if _, ok := field(info, "allowedClusters").([]any); !ok {
		t.Errorf("tenant info %v lacks allowedClusters", info)
	}
	api.expect("GET", "/admin/v2/tenants/nobody", nil, 404, nil)
	api.expect("PUT", "/admin/v2/tenants/bad%20name", nil, 412, nil)

	const ns = "/admin/v2/namespaces/acme/ns1"
	api.expect("PUT", ns, map[string]any{"bundles": map[string]int{"numBundles": 2}}, 204, nil)
	api.expect("PUT", ns, nil, 409, nil)
	api.expect("PUT", "/admin/v2/namespaces/nobody/ns", nil, 404, nil)
	var nss []string
	api.expect("GET", "/admin/v2/namespaces/acme", nil, 200, &nss)
	if !slices.Equal(nss, []string{"acme/ns1"}) {
		t.Errorf("namespaces of acme: %v", nss)
	}
	bundles := api.object(ns + "/bundles")
	if number(bundles, "numBundles") != 2 || len(field(bundles, "boundaries").([]any)) != 3 {
		t.Errorf("bundles %v", bundles)
	}

	api.expect("POST", ns+"/retention", map[string]any{"retentionTimeInMinutes": 60, "retentionSizeInMB": 10}, 204, nil)
	if r := api.object(ns + "/retention"); number(r, "retentionTimeInMinutes") != 60 || number(r, "retentionSizeInMB") != 10 {
		t.Errorf("retention %v", r)
	}
	api.expect("POST", ns+"/persistence", map[string]any{"bookkeeperEnsemble": 3, "bookkeeperWriteQuorum": 2, "bookkeeperAckQuorum": 2}, 204, nil)
	if p := api.object(ns + "/persistence"); number(p, "bookkeeperEnsemble") != 3 || number(p, "bookkeeperWriteQuorum") != 2 || number(p, "bookkeeperAckQuorum") != 2 {
		t.Errorf("persistence %v", p)
	}
	api.expect("POST", ns+"/persistence", map[string]any{"bookkeeperEnsemble": 1, "bookkeeperWriteQuorum": 2, "bookkeeperAckQuorum": 2}, 412, nil)
	api.expect("POST", ns+"/backlogQuota?backlogQuotaType=destination_storage", map[string]any{"limitSize": 1 << 20, "policy": "producer_exception"}, 204, nil)
	api.expect("POST", ns+"/backlogQuota?backlogQuotaType=message_age", map[string]any{"limitTime": 600, "policy": "producer_exception"}, 204, nil)
	quota := api.object(ns + "/backlogQuotaMap")
	if number(quota, "destination_storage", "limitSize") != 1<<20 || field(quota, "destination_storage", "policy") != "producer_exception" ||
		number(quota, "message_age", "limitTime") != 600 {
		t.Errorf("backlog quota map %v", quota)
	}
	api.expect("POST", ns+"/backlogQuota", map[string]any{"limitSize": 10, "policy": "no_such_policy"}, 412, nil)
	api.expect("POST", ns+"/messageTTL", 120, 204, nil)
	var ttl int
	api.expect("GET", ns+"/messageTTL", nil, 200, &ttl)
	api.expect("POST", ns+"/deduplication", true, 204, nil)
	var dedup bool
	api.expect("GET", ns+"/deduplication", nil, 200, &dedup)
	if ttl != 120 || !dedup {
		t.Errorf("message TTL %d, deduplication %v", ttl, dedup)
	}
	pol := api.object(ns)
	if number(pol, "message_ttl_in_seconds") != 120 || field(pol, "deduplicationEnabled") != true || number(pol, "retention_policies", "retentionTimeInMinutes") != 60 {
		t.Errorf("policies %v", pol)
	}
	// Unloading bundles nobody or this broker owns.
	api.expect("PUT", ns+"/unload", nil, 204, nil)
	api.expect("PUT", ns+"/0x00000000_0x7fffffff/unload", nil, 404, nil)

	api.expect("DELETE", "/admin/v2/tenants/acme", nil, 409, nil) // it has a namespace
	api.expect("DELETE", ns, nil, 204, nil)
	api.expect("DELETE", ns, nil, 404, nil)
	api.expect("DELETE", "/admin/v2/tenants/acme", nil, 204, nil)
	api.expect("GET", "/admin/v2/namespaces/acme", nil, 404, nil)
}

// stats of a topic served here, with its producers and consumers; the
// cursor operations move the subscription as Pulsar's do.
func TestPulsarAdminTopicStatsAndCursors(t *testing.T) {
	c := newTestCluster(t)
	reg := prometheus.NewRegistry()
	b, _ := c.startPulsarBroker(func(cfg *Config) { cfg.Registerer = reg })
	api := startAdmin(t, b)
	client := pulsarClient(t, b)
	ctx := pulsarContext(t)
	const topic = "persistent://public/default/admin-stats"
	const path = "/admin/v2/persistent/public/default/admin-stats"

	api.expect("PUT", path, nil, 204, nil)
	api.expect("PUT", path, nil, 409, nil)
	var topics []string
	api.expect("GET", "/admin/v2/persistent/public/default", nil, 200, &topics)
	if !slices.Contains(topics, topic) {
		t.Fatalf("topics %v lack %s", topics, topic)
	}

	cons := newConsumer(t, client, pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "s", Type: pulsar.Shared})
	p := newProducer(t, client, pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
	const n = 20
	ids := sendAll(ctx, t, p, 0, n)
	for range n {
		msg := receiveOne(ctx, t, cons)
		if i, _ := strconv.Atoi(string(msg.Payload())); i == 3 || i == 7 {
			continue // two holes: entries 3 and 7 stay unacknowledged
		}
		if err := cons.Ack(msg); err != nil {
			t.Fatal(err)
		}
	}
	var st map[string]any
	testutil.WaitFor(t, "a backlog of the two unacknowledged entries", func() bool {
		st = api.object(path + "/stats")
		return number(st, "subscriptions", "s", "msgBacklog") == 2 && number(st, "subscriptions", "s", "unackedMessages") == 2
	})
	for _, k := range []string{"msgRateIn", "msgRateOut", "msgThroughputIn", "msgThroughputOut", "msgInCounter", "bytesInCounter",
		"storageSize", "backlogSize", "publishers", "subscriptions"} {
		if field(st, k) == nil {
			t.Errorf("stats lack %s: %v", k, st)
		}
	}
	sub := field(st, "subscriptions", "s").(map[string]any)
	for _, k := range []string{"msgBacklog", "unackedMessages", "msgRateRedeliver", "blockedSubscriptionOnUnackedMsgs", "type", "consumers", "nonContiguousDeletedMessagesRanges"} {
		if _, ok := sub[k]; !ok {
			t.Errorf("subscription stats lack %s: %v", k, sub)
		}
	}
	if number(st, "msgInCounter") != n || number(st, "subscriptions", "s", "unackedMessages") != 2 ||
		number(st, "subscriptions", "s", "nonContiguousDeletedMessagesRanges") != 2 || field(sub, "type") != "Shared" ||
		field(sub, "blockedSubscriptionOnUnackedMsgs") != false || len(field(sub, "consumers").([]any)) != 1 {
		t.Errorf("stats %v", st)
	}
	if pubs := field(st, "publishers").([]any); len(pubs) != 1 || number(pubs[0].(map[string]any), "msgInCounter") != n {
		t.Errorf("publishers %v", pubs)
	}
	// Rates cover at least 100 ms (and at most 10 s): wait for the first.
	testutil.WaitFor(t, "input and output rates", func() bool {
		rates := api.object(path + "/stats")
		return number(rates, "msgRateIn") > 0 && number(rates, "msgThroughputIn") > 0 && number(rates, "msgRateOut") > 0 &&
			number(rates, "msgThroughputOut") > 0
	})
	if number(st, "msgOutCounter") != n || number(st, "subscriptions", "s", "msgOutCounter") != n {
		t.Errorf("%d messages delivered, stats %v", n, st)
	}

	// internalStats: the ledgers, and the cursor with its two ack ranges,
	// each open below: (3..6] and (7..19].
	in := api.object(path + "/internalStats")
	pos := func(i int) string { return fmt.Sprintf("%d:%d", ids[i].LedgerID(), ids[i].EntryID()) }
	if number(in, "numberOfEntries") != n || number(in, "entriesAddedCounter") != n || len(field(in, "ledgers").([]any)) == 0 ||
		field(in, "cursors", "s", "markDeletePosition") != pos(2) {
		t.Errorf("internal stats %v", in)
	}
	if got, want := field(in, "cursors", "s", "individuallyDeletedMessages"), fmt.Sprintf("[(%s..%s], (%s..%s]]", pos(3), pos(6), pos(7), pos(n-1)); got != want {
		t.Errorf("individuallyDeletedMessages %v, want %s", got, want)
	}

	// The metrics say the same.
	m := gatherPulsar(t, reg)
	for _, want := range []struct {
		name   string
		labels string
		value  float64
	}{
		{"pulsar_in_messages_total", topic, n},
		{"pulsar_storage_size", topic, number(st, "storageSize")},
		{"pulsar_subscription_back_log", topic + ",s", 2},
		{"pulsar_subscription_unacked_messages", topic + ",s", 2},
		{"pulsar_subscription_blocked_on_unacked_messages", topic + ",s", 0},
		{"pulsar_subscription_msg_rate_redeliver", topic + ",s", 0},
		{"pulsar_subscription_ack_ranges", topic + ",s", 2},
		{"pulsar_subscription_unacked_ranges_in_memory", topic + ",s", 0},
		{"pulsar_out_messages_total", topic, n},
	} {
		got, ok := m[want.name][want.labels]
		if !ok || got != want.value {
			t.Errorf("%s{%s} = %v (present %v), want %v", want.name, want.labels, got, ok, want.value)
		}
	}

	// Cursor operations, with the consumer gone.
	cons.Close()
	subPath := path + "/subscription/s"
	backlog := func() float64 { return number(api.object(path+"/stats"), "subscriptions", "s", "msgBacklog") }
	api.expect("POST", subPath+"/skip/1", nil, 204, nil) // entry 3: the mark-delete position moves to 6
	if got := backlog(); got != 1 {
		t.Errorf("backlog %v after skipping one of two", got)
	}
	api.expect("POST", subPath+"/resetcursor", map[string]any{"ledgerId": ids[0].LedgerID(), "entryId": ids[0].EntryID()}, 204, nil)
	if got := backlog(); got != n {
		t.Errorf("backlog %v after a reset to the first message", got)
	}
	testutil.WaitFor(t, "the backlog expired", func() bool { // see TestPulsarAdminPartitionedTopic
		api.expect("POST", subPath+"/expireMessages/0", nil, 204, nil)
		return backlog() == 0
	})
	hourAgo := time.Now().Add(-time.Hour).UnixMilli()
	api.expect("POST", subPath+"/resetcursor/"+strconv.FormatInt(hourAgo, 10), nil, 204, nil)
	if got := backlog(); got != n {
		t.Errorf("backlog %v after a reset to an hour ago", got)
	}
	api.expect("POST", path+"/subscription/nobody/skip/1", nil, 404, nil)

	// Subscriptions: create (at the end by default, or at a message id),
	// list, delete.
	api.expect("PUT", path+"/subscription/late", nil, 204, nil)
	api.expect("PUT", path+"/subscription/early", map[string]any{"ledgerId": -1, "entryId": -1}, 204, nil)
	api.expect("PUT", path+"/subscription/early", nil, 409, nil)
	var subs []string
	api.expect("GET", path+"/subscriptions", nil, 200, &subs)
	if !slices.Equal(subs, []string{"early", "late", "s"}) {
		t.Errorf("subscriptions %v", subs)
	}
	st = api.object(path + "/stats")
	if number(st, "subscriptions", "late", "msgBacklog") != 0 || number(st, "subscriptions", "early", "msgBacklog") != n {
		t.Errorf("new subscriptions' backlogs: %v", field(st, "subscriptions"))
	}
	api.expect("DELETE", subPath, nil, 204, nil)
	api.expect("DELETE", subPath, nil, 404, nil)

	// Storage grows with what is written.
	size := number(st, "storageSize")
	sendAll(ctx, t, p, n, n+5)
	st = api.object(path + "/stats")
	if number(st, "storageSize") <= size || number(st, "msgInCounter") != n+5 {
		t.Errorf("after 5 more messages: storage %v (was %v), msgInCounter %v", number(st, "storageSize"), size, number(st, "msgInCounter"))
	}

	// A topic with a producer is not deleted (without force); once the
	// producer is gone it is. (With force, the producer's client would
	// reconnect and create the topic again.)
	api.expect("DELETE", path, nil, 412, nil)
	p.Close()
	api.expect("DELETE", path, nil, 204, nil)
	api.expect("GET", path+"/stats", nil, 404, nil)
	api.expect("DELETE", path, nil, 404, nil)
}

// gatherPulsar returns the registry's pulsar_* samples by name, then by
// "topic" or "topic,subscription".
func gatherPulsar(t *testing.T, reg *prometheus.Registry) map[string]map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]map[string]float64{}
	for _, mf := range mfs {
		if !strings.HasPrefix(mf.GetName(), "pulsar_") {
			continue
		}
		byLabels := map[string]float64{}
		for _, m := range mf.GetMetric() {
			var topic, sub string
			for _, l := range m.GetLabel() {
				switch l.GetName() {
				case "topic":
					topic = l.GetValue()
				case "subscription":
					sub = "," + l.GetValue()
				}
			}
			// A gauge or a counter: the other's getter answers 0.
			byLabels[topic+sub] = m.GetGauge().GetValue() + m.GetCounter().GetValue()
		}
		out[mf.GetName()] = byLabels
	}
	return out
}

// Consumers at their bound of unacknowledged messages (5 each here) fill
// the subscription's (4 times it): the stats and the metric say it is
// blocked.
func TestPulsarAdminBlockedSubscription(t *testing.T) {
	c := newTestCluster(t)
	reg := prometheus.NewRegistry()
	b, _ := c.startPulsarBroker(func(cfg *Config) {
		cfg.Registerer = reg
		cfg.PulsarMaxUnackedPerConsumer = 5
	})
	api := startAdmin(t, b)
	client := pulsarClient(t, b)
	ctx := pulsarContext(t)
	const topic = "persistent://public/default/blocked"
	for i := range 4 {
		newConsumer(t, client, pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "s", Type: pulsar.Shared, Name: fmt.Sprintf("c%d", i)})
	}
	p := newProducer(t, client, pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
	sendAll(ctx, t, p, 0, 30) // never acknowledged
	path := "/admin/v2/persistent/public/default/blocked/stats"
	testutil.WaitFor(t, "the subscription blocked on unacknowledged messages", func() bool {
		return field(api.object(path), "subscriptions", "s", "blockedSubscriptionOnUnackedMsgs") == true
	})
	st := api.object(path)
	consumers := field(st, "subscriptions", "s", "consumers").([]any)
	if number(st, "subscriptions", "s", "unackedMessages") != 20 || len(consumers) != 4 {
		t.Errorf("stats %v", st)
	}
	for _, c := range consumers {
		if cs := c.(map[string]any); field(cs, "blockedConsumerOnUnackedMsgs") != true || number(cs, "unackedMessages") != 5 {
			t.Errorf("consumer %v", cs)
		}
	}
	if got := gatherPulsar(t, reg)["pulsar_subscription_blocked_on_unacked_messages"][topic+",s"]; got != 1 {
		t.Errorf("pulsar_subscription_blocked_on_unacked_messages = %v, want 1", got)
	}
	if got := gatherPulsar(t, reg)["pulsar_subscription_unacked_messages"][topic+",s"]; got != 20 {
		t.Errorf("pulsar_subscription_unacked_messages = %v, want 20", got)
	}
}

// A partitioned topic through the API: create, grow, stats summed over its
// partitions, subscriptions on every partition, delete.
func TestPulsarAdminPartitionedTopic(t *testing.T) {
	c := newTestCluster(t)
	b, _ := c.startPulsarBroker(nil)
	api := startAdmin(t, b)
	client := pulsarClient(t, b)
	ctx := pulsarContext(t)
	const topic = "persistent://public/default/admin-parts"
	const path = "/admin/v2/persistent/public/default/admin-parts"

	api.expect("PUT", path+"/partitions", 2, 204, nil)
	api.expect("PUT", path+"/partitions", 2, 409, nil)
	api.expect("PUT", path, nil, 409, nil) // the name is taken
	api.expect("POST", path+"/partitions", 3, 204, nil)
	api.expect("POST", path+"/partitions", 1, 412, nil) // partitions only grow
	if got := number(api.object(path+"/partitions"), "partitions"); got != 3 {
		t.Fatalf("partitions %v, want 3", got)
	}
	var partitioned []string
	api.expect("GET", "/admin/v2/persistent/public/default/partitioned", nil, 200, &partitioned)
	if !slices.Equal(partitioned, []string{topic}) {
		t.Errorf("partitioned topics %v", partitioned)
	}
	api.expect("PUT", path+"/subscription/s", map[string]any{"ledgerId": -1, "entryId": -1}, 204, nil)

	p := newProducer(t, client, pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
	const n = 30
	for i := range n {
		if _, err := p.Send(ctx, &pulsar.ProducerMessage{Key: fmt.Sprintf("k%d", i), Payload: []byte(strconv.Itoa(i))}); err != nil {
			t.Fatal(err)
		}
	}
	st := api.object(path + "/partitioned-stats")
	parts, _ := field(st, "partitions").(map[string]any)
	var size float64
	for _, ps := range parts {
		size += number(ps.(map[string]any), "storageSize")
	}
	if number(st, "msgInCounter") != n || number(st, "subscriptions", "s", "msgBacklog") != n || len(parts) != 3 ||
		number(st, "metadata", "partitions") != 3 || size <= 0 || number(st, "storageSize") != size {
		t.Errorf("partitioned stats %v", st)
	}
	var subs []string
	api.expect("GET", path+"/subscriptions", nil, 200, &subs)
	if !slices.Equal(subs, []string{"s"}) {
		t.Errorf("subscriptions %v", subs)
	}
	// Expiring what is older than 0 s leaves what was published in the
	// current millisecond: expire again until that one is old too.
	testutil.WaitFor(t, "every partition's backlog expired", func() bool {
		api.expect("POST", path+"/subscription/s/expireMessages/0", nil, 204, nil)
		return number(api.object(path+"/partitioned-stats"), "subscriptions", "s", "msgBacklog") == 0
	})
	api.expect("GET", path+"/stats", nil, 404, nil) // a partitioned topic's stats are partitioned-stats

	api.expect("DELETE", path+"/partitions", nil, 412, nil) // a producer is attached
	p.Close()
	api.expect("DELETE", path+"/partitions", nil, 204, nil)
	if got := number(api.object(path+"/partitions"), "partitions"); got != 0 {
		t.Errorf("partitions %v after the delete", got)
	}
	var topics []string
	api.expect("GET", "/admin/v2/persistent/public/default", nil, 200, &topics)
	for _, name := range topics {
		if strings.HasPrefix(name, topic) {
			t.Errorf("%s listed after the delete", name)
		}
	}
}

// Two brokers, each with its admin API at the address it registers: a
// topic's data is served by its owner (the other answers 307 to it), and
// a partitioned topic's partitions on both are reached from either.
func TestPulsarAdminAcrossBrokers(t *testing.T) {
	c := newTestCluster(t)
	handlers := make([]http.Handler, 2)
	var servers []*httptest.Server
	for i := range 2 {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { handlers[i].ServeHTTP(w, r) }))
		t.Cleanup(srv.Close)
		servers = append(servers, srv)
	}
	var brokers []*Broker
	for i := range 2 {
		b, _ := c.startPulsarBroker(func(cfg *Config) {
			cfg.ID = int32(i + 1)
			cfg.HandoffAfter = 300 * time.Millisecond
			cfg.HTTPAddr = servers[i].Listener.Addr().String()
		})
		handlers[i] = b.PulsarAdmin()
		brokers = append(brokers, b)
	}
	b1, b2 := brokers[0], brokers[1]
	api1 := restClient{t: t, base: servers[0].URL, http: &http.Client{Timeout: pulsarTestTimeout}}
	const parts = 16
	const topic = "persistent://public/default/spread"
	partition := func(i int) string { return fmt.Sprintf("%s-partition-%d", topic, i) }
	testutil.WaitFor(t, "the partitions' bundles owned by both brokers", func() bool {
		var on1, on2 int
		for i := range parts {
			o1, o2 := b1.cluster.Owns(partition(i)), b2.cluster.Owns(partition(i))
			if o1 == o2 {
				return false // unowned, or moving
			}
			if o1 {
				on1++
			} else {
				on2++
			}
		}
		return on1 > 0 && on2 > 0
	})

	// A non-partitioned topic of broker 2's, asked of broker 1.
	var local string
	for i := 0; local == ""; i++ {
		if name := fmt.Sprintf("remote-%d", i); b2.cluster.Owns("persistent://public/default/" + name) {
			local = name
		}
	}
	path := "/admin/v2/persistent/public/default/" + local
	noFollow := &http.Client{Timeout: pulsarTestTimeout, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	req, _ := http.NewRequest(http.MethodPut, servers[0].URL+path, nil)
	resp, err := noFollow.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if want := servers[1].URL + path; resp.StatusCode != http.StatusTemporaryRedirect || resp.Header.Get("Location") != want {
		t.Fatalf("PUT on the broker that does not own the topic: %d to %q, want 307 to %s", resp.StatusCode, resp.Header.Get("Location"), want)
	}
	api1.expect("PUT", path, nil, 204, nil) // the redirect followed
	servedTopic(t, b2, "persistent://public/default/"+local)
	if st := api1.object(path + "/stats"); number(st, "storageSize") != 0 || field(st, "ownerBroker") != servers[1].Listener.Addr().String() {
		t.Errorf("stats through broker 1: %v", st)
	}

	// A partitioned topic spread over both.
	api1.expect("PUT", "/admin/v2/persistent/public/default/spread/partitions", parts, 204, nil)
	base := "/admin/v2/persistent/public/default/spread"
	api1.expect("PUT", base+"/subscription/s", map[string]any{"ledgerId": -1, "entryId": -1}, 204, nil)
	client := pulsarClient(t, b1)
	p := newProducer(t, client, pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
	ctx := pulsarContext(t)
	const n = 64
	for i := range n {
		if _, err := p.Send(ctx, &pulsar.ProducerMessage{Key: fmt.Sprintf("k%d", i), Payload: []byte(strconv.Itoa(i))}); err != nil {
			t.Fatal(err)
		}
	}
	st := api1.object(base + "/partitioned-stats")
	if number(st, "msgInCounter") != n || number(st, "subscriptions", "s", "msgBacklog") != n || len(field(st, "partitions").(map[string]any)) != parts {
		t.Errorf("partitioned stats through broker 1: msgInCounter %v, backlog %v", number(st, "msgInCounter"), number(st, "subscriptions", "s", "msgBacklog"))
	}
	var subs []string
	api1.expect("GET", base+"/subscriptions", nil, 200, &subs)
	if !slices.Equal(subs, []string{"s"}) {
		t.Errorf("subscriptions %v", subs)
	}
	api1.expect("POST", base+"/subscription/s/skip/1", nil, 204, nil) // one entry on every partition that has one
	p.Close()
	api1.expect("DELETE", base+"/partitions", nil, 204, nil)
	for i := range parts {
		if _, err := b1.cfg.Store.Get(ctx, mlogKeyOf(partition(i))); err == nil {
			t.Errorf("partition %d's storage is still there", i)
		}
	}
}

func mlogKeyOf(topic string) string { return mlog.Key(pulsarStorageName(topic)) }

// TestPulsarHTTPLookup: a client given the HTTP service URL (the admin
// port) looks topics up over HTTP (/lookup/v2/topic/...) and the
// partitioned metadata over the admin API, then produces and consumes over
// the binary protocol at the URL the lookup names.
func TestPulsarHTTPLookup(t *testing.T) {
	c := newTestCluster(t)
	b, _ := c.startPulsarBroker(nil)
	api := startAdmin(t, b)
	var lookup map[string]any
	api.expect(http.MethodGet, "/lookup/v2/topic/persistent/public/default/over-http", nil, http.StatusOK, &lookup)
	if lookup["brokerUrl"] != b.PulsarURL() {
		t.Fatalf("lookup answered %v, want brokerUrl %s", lookup, b.PulsarURL())
	}
	client, err := pulsar.NewClient(pulsar.ClientOptions{URL: api.base, OperationTimeout: pulsarTestTimeout})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	ctx := pulsarContext(t)
	const topic = "persistent://public/default/over-http"
	cons := newConsumer(t, client, pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "s"})
	p := newProducer(t, client, pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
	sendAll(ctx, t, p, 0, 5)
	for i := range 5 {
		m, err := cons.Receive(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if string(m.Payload()) != fmt.Sprint(i) {
			t.Fatalf("message %d: %q", i, m.Payload())
		}
		cons.Ack(m)
	}
}

// TestPulsarPatternConsumer: a regex consumer lists the namespace's topics
// (GET_TOPICS_OF_NAMESPACE) and reads every matching one, not the others.
func TestPulsarPatternConsumer(t *testing.T) {
	c := newTestCluster(t)
	b, _ := c.startPulsarBroker(nil)
	client := pulsarClient(t, b)
	ctx := pulsarContext(t)
	for _, topic := range []string{"pat-a", "pat-b", "other"} {
		p := newProducer(t, client, pulsar.ProducerOptions{Topic: "persistent://public/default/" + topic, DisableBatching: true})
		sendAll(ctx, t, p, 0, 3)
	}
	cons := newConsumer(t, client, pulsar.ConsumerOptions{TopicsPattern: "persistent://public/default/pat-.*",
		SubscriptionName: "s", SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest})
	got := map[string]int{}
	for range 6 {
		m, err := cons.Receive(ctx)
		if err != nil {
			t.Fatal(err)
		}
		got[m.Topic()]++
		cons.Ack(m)
	}
	if len(got) != 2 || got["persistent://public/default/pat-a"] != 3 || got["persistent://public/default/pat-b"] != 3 {
		t.Fatalf("pattern consumer read %v", got)
	}
}
