package kafka_test

import (
	"context"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"quire/internal/auth"
	"quire/internal/kafka"
	"quire/internal/meta"
	"quire/internal/quota"
	"quire/internal/testutil"
)

// newQuotaCluster is a cluster whose server enforces the quotas of a
// store on an in-memory metadata store.
func newQuotaCluster(t *testing.T, tweak ...func(*kafka.Config)) (*cluster, *quota.Store) {
	t.Helper()
	srv := meta.NewMemServer(meta.MemConfig{})
	store := srv.NewClient()
	t.Cleanup(func() { store.Close() })
	quotas, err := quota.Open(context.Background(), store, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(quotas.Close)
	c := newCluster(t, append([]func(*kafka.Config){func(cfg *kafka.Config) { cfg.Quotas = quotas }}, tweak...)...)
	return c, quotas
}

func strp(s string) *string { return &s }

func alterQuota(entity map[string]*string, key string, value float64, remove bool) *kmsg.AlterClientQuotasRequest {
	req := kmsg.NewPtrAlterClientQuotasRequest()
	req.SetVersion(1)
	e := kmsg.NewAlterClientQuotasRequestEntry()
	for _, typ := range []string{quota.EntityUser, quota.EntityClientID, quota.EntityIP, "topic"} {
		if name, ok := entity[typ]; ok {
			c := kmsg.NewAlterClientQuotasRequestEntryEntity()
			c.Type, c.Name = typ, name
			e.Entity = append(e.Entity, c)
		}
	}
	op := kmsg.NewAlterClientQuotasRequestEntryOp()
	op.Key, op.Value, op.Remove = key, value, remove
	e.Ops = append(e.Ops, op)
	req.Entries = append(req.Entries, e)
	return req
}

func describeQuotas(strict bool, components ...kmsg.DescribeClientQuotasRequestComponent) *kmsg.DescribeClientQuotasRequest {
	req := kmsg.NewPtrDescribeClientQuotasRequest()
	req.SetVersion(1)
	req.Components, req.Strict = components, strict
	return req
}

func component(typ string, match kmsg.QuotasMatchType, name *string) kmsg.DescribeClientQuotasRequestComponent {
	c := kmsg.NewDescribeClientQuotasRequestComponent()
	c.EntityType, c.MatchType, c.Match = typ, match, name
	return c
}

// described is a describe answer as "type=name,…: key=value,…" lines.
func described(resp *kmsg.DescribeClientQuotasResponse) []string {
	var out []string
	for _, e := range resp.Entries {
		var parts, values []string
		for _, c := range e.Entity {
			name := "<default>"
			if c.Name != nil {
				name = *c.Name
			}
			parts = append(parts, c.Type+"="+name)
		}
		for _, v := range e.Values {
			values = append(values, v.Key+"="+strconv.FormatFloat(v.Value, 'f', -1, 64))
		}
		out = append(out, strings.Join(parts, ",")+": "+strings.Join(values, ","))
	}
	return out
}

// metricSeries counts the series of a metric family.
func metricSeries(t *testing.T, c *cluster, name string) int {
	t.Helper()
	families, err := c.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() == name {
			return len(f.GetMetric())
		}
	}
	return 0
}

// TestQuotaDescribeAlterRoundTrip: AlterClientQuotas stores, validates
// (INVALID_REQUEST per entry, validate_only) and removes; DescribeClientQuotas
// filters exact, default and specified, strict or not.
func TestQuotaDescribeAlterRoundTrip(t *testing.T) {
	c, _ := newQuotaCluster(t)
	raw := c.raw()
	ok := func(req *kmsg.AlterClientQuotasRequest) {
		t.Helper()
		resp := raw.request(req).(*kmsg.AlterClientQuotasResponse)
		if len(resp.Entries) != 1 || resp.Entries[0].ErrorCode != 0 {
			t.Fatalf("alter: %+v", resp.Entries)
		}
	}
	ok(alterQuota(map[string]*string{"user": strp("alice")}, quota.ProducerByteRate, 1048576, false))
	ok(alterQuota(map[string]*string{"user": strp("alice"), "client-id": strp("app")}, quota.ConsumerByteRate, 2048, false))
	ok(alterQuota(map[string]*string{"user": nil}, quota.RequestPercentage, 12.5, false))
	ok(alterQuota(map[string]*string{"client-id": strp("app")}, quota.ProducerByteRate, 4096, false))
	ok(alterQuota(map[string]*string{"ip": nil}, quota.ConnectionCreationRate, 100, false))
	validateOnly := alterQuota(map[string]*string{"client-id": strp("other")}, quota.ProducerByteRate, 1, false)
	validateOnly.ValidateOnly = true
	ok(validateOnly)

	for _, tc := range []struct {
		name   string
		filter *kmsg.DescribeClientQuotasRequest
		want   []string
	}{
		{"everything", describeQuotas(false), []string{"client-id=app: producer_byte_rate=4096", "ip=<default>: connection_creation_rate=100",
			"user=<default>: request_percentage=12.5", "user=alice,client-id=app: consumer_byte_rate=2048", "user=alice: producer_byte_rate=1048576"}},
		{"user alice strict", describeQuotas(true, component("user", 0, strp("alice"))), []string{"user=alice: producer_byte_rate=1048576"}},
		{"user alice", describeQuotas(false, component("user", 0, strp("alice"))), []string{"user=alice,client-id=app: consumer_byte_rate=2048", "user=alice: producer_byte_rate=1048576"}},
		{"default user", describeQuotas(true, component("user", 1, nil)), []string{"user=<default>: request_percentage=12.5"}},
		{"clients", describeQuotas(true, component("client-id", 2, nil)), []string{"client-id=app: producer_byte_rate=4096"}},
		{"users", describeQuotas(true, component("user", 2, nil)), []string{"user=<default>: request_percentage=12.5", "user=alice: producer_byte_rate=1048576"}},
	} {
		resp := raw.request(tc.filter).(*kmsg.DescribeClientQuotasResponse)
		if resp.ErrorCode != 0 {
			t.Fatalf("%s: %v", tc.name, kerr.ErrorForCode(resp.ErrorCode))
		}
		got := described(resp)
		if strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
			t.Errorf("%s:\n got %q\nwant %q", tc.name, got, tc.want)
		}
	}

	// Kafka's validation, entry by entry.
	for _, tc := range []struct {
		name string
		req  *kmsg.AlterClientQuotasRequest
	}{
		{"unknown key", alterQuota(map[string]*string{"user": strp("bob")}, "bogus_rate", 1, false)},
		{"unknown entity type", alterQuota(map[string]*string{"topic": strp("t")}, quota.ProducerByteRate, 1, false)},
		{"ip key on a user", alterQuota(map[string]*string{"user": strp("bob")}, quota.ConnectionCreationRate, 1, false)},
		{"negative", alterQuota(map[string]*string{"user": strp("bob")}, quota.ProducerByteRate, -5, false)},
		{"fractional bytes", alterQuota(map[string]*string{"user": strp("bob")}, quota.ProducerByteRate, 1.5, false)},
		{"ip with user", alterQuota(map[string]*string{"user": strp("bob"), "ip": strp("1.2.3.4")}, quota.ConnectionCreationRate, 1, false)},
		{"empty entity", alterQuota(map[string]*string{}, quota.ProducerByteRate, 1, false)},
	} {
		resp := raw.request(tc.req).(*kmsg.AlterClientQuotasResponse)
		if len(resp.Entries) != 1 || resp.Entries[0].ErrorCode != kerr.InvalidRequest.Code || resp.Entries[0].ErrorMessage == nil {
			t.Errorf("%s: %+v, want INVALID_REQUEST with a message", tc.name, resp.Entries)
		}
	}
	for _, tc := range []struct {
		name string
		req  *kmsg.DescribeClientQuotasRequest
		code int16
	}{
		{"exact without a name", describeQuotas(true, component("user", 0, nil)), kerr.InvalidRequest.Code},
		{"default with a name", describeQuotas(true, component("user", 1, strp("x"))), kerr.InvalidRequest.Code},
		{"type twice", describeQuotas(true, component("user", 2, nil), component("user", 1, nil)), kerr.InvalidRequest.Code},
		{"ip with user", describeQuotas(true, component("user", 2, nil), component("ip", 2, nil)), kerr.InvalidRequest.Code},
		{"unknown type", describeQuotas(true, component("topic", 2, nil)), kerr.UnsupportedVersion.Code},
	} {
		resp := raw.request(tc.req).(*kmsg.DescribeClientQuotasResponse)
		if resp.ErrorCode != tc.code || resp.ErrorMessage == nil {
			t.Errorf("%s: code %d (%v), want %d", tc.name, resp.ErrorCode, resp.ErrorMessage, tc.code)
		}
	}

	// Removing the last key removes the entity.
	ok(alterQuota(map[string]*string{"user": strp("alice")}, quota.ProducerByteRate, 0, true))
	resp := raw.request(describeQuotas(true, component("user", 0, strp("alice")))).(*kmsg.DescribeClientQuotasResponse)
	if len(resp.Entries) != 0 {
		t.Fatalf("alice still described after removal: %q", described(resp))
	}
}

// TestQuotaAPIsAdvertisedOnlyWithAStore: without a quota store the
// server does not advertise DescribeClientQuotas or AlterClientQuotas.
func TestQuotaAPIsAdvertisedOnlyWithAStore(t *testing.T) {
	for _, withStore := range []bool{false, true} {
		var c *cluster
		if withStore {
			c, _ = newQuotaCluster(t)
		} else {
			c = newCluster(t)
		}
		resp := c.raw().request(kmsg.NewPtrApiVersionsRequest()).(*kmsg.ApiVersionsResponse)
		found := 0
		for _, k := range resp.ApiKeys {
			if k.ApiKey == int16(kmsg.DescribeClientQuotas) || k.ApiKey == int16(kmsg.AlterClientQuotas) {
				found++
				if k.MinVersion != 0 || k.MaxVersion != 1 {
					t.Errorf("key %d advertised v%d–%d, want v0–1", k.ApiKey, k.MinVersion, k.MaxVersion)
				}
			}
		}
		if want := map[bool]int{false: 0, true: 2}[withStore]; found != want {
			t.Errorf("with store %v: %d quota APIs advertised, want %d", withStore, found, want)
		}
	}
}

func quotaProduce(t *testing.T, topic string, size int) *kmsg.ProduceRequest {
	req := kmsg.NewPtrProduceRequest()
	req.SetVersion(9)
	req.Acks, req.TimeoutMillis = -1, 30_000
	rt := kmsg.NewProduceRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewProduceRequestTopicPartition()
	rp.Records = recordBatch(t, 1, strings.Repeat("q", size))
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	return req
}

// TestQuotaProduceThrottled: a produce over its client id's
// producer_byte_rate is answered at once with throttle_time_ms > 0, and
// the connection's next request is read only once the throttle is over;
// a client without a quota is not throttled; the byte rate and throttle
// time metrics name only the quota'd client.
func TestQuotaProduceThrottled(t *testing.T) {
	c, quotas := newQuotaCluster(t)
	ctx := testContext(t)
	if _, err := c.admin().CreateTopic(ctx, 1, -1, nil, "quota"); err != nil {
		t.Fatal(err)
	}
	raw := c.raw()
	// Unthrottled first: no quota yet.
	if resp := raw.request(quotaProduce(t, "quota", 20_000)).(*kmsg.ProduceResponse); resp.ThrottleMillis != 0 {
		t.Fatalf("throttled %d ms without a quota", resp.ThrottleMillis)
	}
	// The raw connection's client id is "raw": 20 KB over the first 10 s
	// windows is 2 KB/s, against a limit of 1.8 KB/s: (2000 − 1800) / 1800
	// × ~10 s ≈ 1.1 s.
	if err := quotas.Alter(ctx, quota.Entity{ClientID: quota.Name("raw")}, []quota.Op{{Key: quota.ProducerByteRate, Value: 1800}}, false); err != nil {
		t.Fatal(err)
	}
	raw = c.raw() // a fresh bucket's windows
	produce := quotaProduce(t, "quota", 20_000)
	sent := time.Now()
	id := raw.send(produce)
	meta := kmsg.NewPtrMetadataRequest()
	meta.SetVersion(9)
	metaID := raw.send(meta) // pipelined behind the produce
	resp := raw.recv(produce, id).(*kmsg.ProduceResponse)
	answered := time.Since(sent)
	if resp.ThrottleMillis <= 0 {
		t.Fatalf("produce over the quota answered with throttle_time_ms %d", resp.ThrottleMillis)
	}
	if code := resp.Topics[0].Partitions[0].ErrorCode; code != 0 {
		t.Fatalf("throttled produce failed: %v", kerr.ErrorForCode(code))
	}
	throttle := time.Duration(resp.ThrottleMillis) * time.Millisecond
	if answered >= throttle {
		t.Fatalf("the throttled produce was answered after %v, not at once (throttle %v)", answered, throttle)
	}
	raw.recv(meta, metaID)
	if waited := time.Since(sent); waited < throttle {
		t.Fatalf("the next request was answered %v after the produce, before its throttle of %v ended", waited, throttle)
	}
	if n := metricSum(t, c.reg, "quire_kafka_quota_throttled_requests_total"); n < 1 {
		t.Fatalf("throttled requests metric %v", n)
	}
	if rate := metricSum(t, c.reg, "kafka_server_produce_byte_rate"); rate <= 0 {
		t.Fatalf("produce byte rate metric %v", rate)
	}
	if n := metricSeries(t, c, "kafka_server_produce_byte_rate"); n != 1 {
		t.Fatalf("%d produce byte-rate series, want only the quota'd client's", n)
	}
	// Removing the quota forgets the bucket and its metrics.
	if err := quotas.Alter(ctx, quota.Entity{ClientID: quota.Name("raw")}, []quota.Op{{Key: quota.ProducerByteRate, Remove: true}}, false); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, "the removed quota's metrics to go", func() bool { return metricSeries(t, c, "kafka_server_produce_byte_rate") == 0 })
	if resp := raw.request(quotaProduce(t, "quota", 20_000)).(*kmsg.ProduceResponse); resp.ThrottleMillis != 0 {
		t.Fatalf("throttled %d ms after the quota was removed", resp.ThrottleMillis)
	}
}

// TestQuotaFetchThrottled: a consumer fetch over consumer_byte_rate is
// answered empty with throttle_time_ms, as Kafka's throttled fetch.
func TestQuotaFetchThrottled(t *testing.T) {
	c, quotas := newQuotaCluster(t)
	ctx := testContext(t)
	if _, err := c.admin().CreateTopic(ctx, 1, -1, nil, "fq"); err != nil {
		t.Fatal(err)
	}
	raw := c.raw()
	for range 3 {
		if resp := raw.request(quotaProduce(t, "fq", 10_000)).(*kmsg.ProduceResponse); resp.Topics[0].Partitions[0].ErrorCode != 0 {
			t.Fatal("produce failed")
		}
	}
	if err := quotas.Alter(ctx, quota.Entity{User: quota.DefaultPart}, []quota.Op{{Key: quota.ConsumerByteRate, Value: 500}}, false); err != nil {
		t.Fatal(err)
	}
	fetch := func() *kmsg.FetchResponse {
		req := kmsg.NewPtrFetchRequest()
		req.SetVersion(11)
		req.ReplicaID, req.MaxWaitMillis, req.MaxBytes = -1, 0, 1<<20
		ft := kmsg.NewFetchRequestTopic()
		ft.Topic = "fq"
		fp := kmsg.NewFetchRequestTopicPartition()
		fp.PartitionMaxBytes = 1 << 20
		ft.Partitions = append(ft.Partitions, fp)
		req.Topics = append(req.Topics, ft)
		return raw.request(req).(*kmsg.FetchResponse)
	}
	// max_bytes is cut to 5 KB (the window but one at 500 B/s), yet the
	// first 10 KB batch comes whole (KIP-74): 1 KB/s, twice the limit:
	// throttled, answered empty.
	resp := fetch()
	if resp.ThrottleMillis <= 0 || len(resp.Topics) != 0 {
		t.Fatalf("fetch over the quota: throttle %d ms, %d topics; want a throttle and an empty answer", resp.ThrottleMillis, len(resp.Topics))
	}
}

// TestQuotaConnectionsPerIP: MaxConnectionsPerIP refuses the connection
// above the count at once; a closed one frees its place.
func TestQuotaConnectionsPerIP(t *testing.T) {
	c := newCluster(t, func(cfg *kafka.Config) { cfg.MaxConnectionsPerIP = 2 })
	a, b := c.raw(), c.raw()
	a.request(kmsg.NewPtrApiVersionsRequest())
	b.request(kmsg.NewPtrApiVersionsRequest())
	third := c.raw()
	third.expectClosed()
	a.nc.Close()
	testutil.WaitFor(t, "a connection to be admitted once another closed", func() bool {
		r := c.raw()
		defer r.nc.Close()
		r.send(kmsg.NewPtrApiVersionsRequest())
		_, err := r.readFrame()
		return err == nil
	})
	if n := metricSum(t, c.reg, "quire_kafka_quota_connections_refused_total"); n < 1 {
		t.Fatalf("refused connections metric %v", n)
	}
}

// TestQuotaConnectionCreationRate: connections from an IP beyond its
// connection_creation_rate are closed without being served.
func TestQuotaConnectionCreationRate(t *testing.T) {
	c, quotas := newQuotaCluster(t)
	if err := quotas.Alter(testContext(t), quota.Entity{IP: quota.Name("127.0.0.1")}, []quota.Op{{Key: quota.ConnectionCreationRate, Value: 1}}, false); err != nil {
		t.Fatal(err)
	}
	// 1/s over the 10 s minimum window: the first ten are admitted.
	for i := range 10 {
		r := c.raw()
		if resp := r.request(kmsg.NewPtrApiVersionsRequest()).(*kmsg.ApiVersionsResponse); resp.ErrorCode != 0 {
			t.Fatalf("connection %d: %v", i, resp.ErrorCode)
		}
	}
	over := c.raw()
	over.send(kmsg.NewPtrApiVersionsRequest())
	over.expectClosed()
}

// TestQuotaRequestPercentage: a client over its request_percentage gets
// throttle_time_ms (capped at one quota window, as Kafka caps it) on the
// requests that count; ApiVersions is exempt, as in Kafka.
func TestQuotaRequestPercentage(t *testing.T) {
	c, quotas := newQuotaCluster(t)
	// A millionth of a percent: any request's handling time is over it.
	if err := quotas.Alter(testContext(t), quota.Entity{ClientID: quota.DefaultPart}, []quota.Op{{Key: quota.RequestPercentage, Value: 1e-6}}, false); err != nil {
		t.Fatal(err)
	}
	raw := c.raw()
	meta := kmsg.NewPtrMetadataRequest()
	meta.SetVersion(9)
	resp := raw.request(meta).(*kmsg.MetadataResponse)
	if resp.ThrottleMillis <= 0 || resp.ThrottleMillis > 1000 {
		t.Fatalf("metadata over request_percentage: throttle_time_ms %d, want 1–1000", resp.ThrottleMillis)
	}
	if resp := raw.request(kmsg.NewPtrApiVersionsRequest()).(*kmsg.ApiVersionsResponse); resp.ThrottleMillis != 0 {
		t.Fatalf("ApiVersions throttled %d ms", resp.ThrottleMillis)
	}
	if n := metricSeries(t, c, "kafka_server_request_request_time"); n != 1 {
		t.Fatalf("%d request-time series, want 1", n)
	}
}

// TestQuotaAPIsAuthorized: with an authorizer, describing needs
// DESCRIBE_CONFIGS and altering ALTER_CONFIGS on the cluster, as Kafka;
// refused, CLUSTER_AUTHORIZATION_FAILED and nothing changes.
func TestQuotaAPIsAuthorized(t *testing.T) {
	srv := meta.NewMemServer(meta.MemConfig{})
	store := srv.NewClient()
	t.Cleanup(func() { store.Close() })
	creds := auth.NewCredentials(store)
	for user, password := range aclPasswords {
		if _, err := creds.AddIfAbsent(context.Background(), user, password); err != nil {
			t.Fatal(err)
		}
	}
	acls, err := auth.OpenACLStore(context.Background(), store, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(acls.Close)
	quotas, err := quota.Open(context.Background(), store, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(quotas.Close)
	authorizer := auth.NewAuthorizer(acls, auth.AuthorizerConfig{SuperUsers: []auth.Principal{auth.User("admin")}})
	sec := kafka.Security{Mechanisms: auth.Mechanisms, Credentials: creds, FailedAuthenticationDelay: -1, Authorizer: authorizer}
	c := &aclCluster{cluster: newClusterOn(t, func(ln net.Listener) net.Listener { return &kafka.Listener{Listener: ln, Security: sec} },
		func(cfg *kafka.Config) { cfg.Quotas = quotas }), acls: acls}

	alice := c.rawAs("alice")
	alter := alterQuota(map[string]*string{"user": strp("bob")}, quota.ProducerByteRate, 1024, false)
	if resp := alice.request(alter).(*kmsg.AlterClientQuotasResponse); resp.Entries[0].ErrorCode != kerr.ClusterAuthorizationFailed.Code {
		t.Fatalf("alice altered quotas: %+v", resp.Entries)
	}
	if !quotas.Snapshot().Empty() {
		t.Fatal("a refused alteration was stored")
	}
	if resp := alice.request(describeQuotas(false)).(*kmsg.DescribeClientQuotasResponse); resp.ErrorCode != kerr.ClusterAuthorizationFailed.Code {
		t.Fatalf("alice described quotas: code %d", resp.ErrorCode)
	}
	admin := c.rawAs("admin")
	if resp := admin.request(alter).(*kmsg.AlterClientQuotasResponse); resp.Entries[0].ErrorCode != 0 {
		t.Fatalf("admin's alteration: %+v", resp.Entries)
	}
	c.grant(t, kadm.NewACLs().Allow("User:alice").AllowHosts("*").Clusters().Operations(kadm.OpDescribeConfigs).ResourcePatternType(kadm.ACLPatternLiteral))
	resp := alice.request(describeQuotas(false)).(*kmsg.DescribeClientQuotasResponse)
	if resp.ErrorCode != 0 || len(resp.Entries) != 1 {
		t.Fatalf("alice with DESCRIBE_CONFIGS: code %d, %d entries", resp.ErrorCode, len(resp.Entries))
	}
}
