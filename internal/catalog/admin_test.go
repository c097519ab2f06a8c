package catalog

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"quire/internal/meta"
)

func newMemAdmin(t *testing.T) (*meta.MemServer, *Catalog) {
	t.Helper()
	srv := meta.NewMemServer(meta.MemConfig{})
	c := srv.NewClient()
	t.Cleanup(func() { c.Close() })
	return srv, New(c)
}

func TestPoliciesValidate(t *testing.T) {
	def := DefaultPolicies()
	if err := def.Validate(); err != nil {
		t.Fatalf("defaults invalid: %v", err)
	}
	if p := def.Persistence; p.Ensemble != 3 || p.WriteQuorum != 3 || p.AckQuorum != 2 {
		t.Fatalf("default persistence %+v", p)
	}
	if def.Bundles.NumBundles != 4 || len(def.Bundles.Boundaries) != 5 {
		t.Fatalf("default bundles %+v", def.Bundles)
	}
	tests := []struct {
		name   string
		change func(*Policies)
		ok     bool
	}{
		{"defaults", func(*Policies) {}, true},
		{"E5 Qw3 Qa2", func(p *Policies) { p.Persistence = Persistence{5, 3, 2} }, true},
		{"E1 Qw1 Qa1", func(p *Policies) { p.Persistence = Persistence{1, 1, 1} }, true},
		{"Qw > E", func(p *Policies) { p.Persistence = Persistence{2, 3, 2} }, false},
		{"Qa > Qw", func(p *Policies) { p.Persistence = Persistence{3, 2, 3} }, false},
		{"Qa 0", func(p *Policies) { p.Persistence = Persistence{3, 3, 0} }, false},
		{"zero persistence", func(p *Policies) { p.Persistence = Persistence{} }, false},
		{"infinite retention", func(p *Policies) { p.Retention = Retention{-1, -1} }, true},
		{"retention -2", func(p *Policies) { p.Retention = Retention{-2, 0} }, false},
		{"quota exception", func(p *Policies) { p.BacklogQuota = BacklogQuota{1 << 30, 3600, ProducerException} }, true},
		{"quota eviction", func(p *Policies) { p.BacklogQuota.Policy = ConsumerBacklogEviction }, true},
		{"quota bad policy", func(p *Policies) { p.BacklogQuota.Policy = "drop_everything" }, false},
		{"quota empty policy", func(p *Policies) { p.BacklogQuota.Policy = "" }, false},
		{"quota -2 bytes", func(p *Policies) { p.BacklogQuota.LimitBytes = -2 }, false},
		{"ttl", func(p *Policies) { p.MessageTTLSeconds = 60 }, true},
		{"ttl negative", func(p *Policies) { p.MessageTTLSeconds = -1 }, false},
		{"one bundle", func(p *Policies) { p.Bundles = BundlesPolicy{1, EqualBoundaries(1)} }, true},
		{"count mismatch", func(p *Policies) { p.Bundles.NumBundles = 3 }, false},
		{"boundaries not from 0", func(p *Policies) { p.Bundles = BundlesPolicy{1, []uint32{1, FullUpperBound}} }, false},
		{"boundaries not to max", func(p *Policies) { p.Bundles = BundlesPolicy{1, []uint32{0, 5}} }, false},
		{"boundaries unsorted", func(p *Policies) { p.Bundles = BundlesPolicy{3, []uint32{0, 9, 5, FullUpperBound}} }, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := DefaultPolicies()
			tt.change(&p)
			err := p.Validate()
			if tt.ok != (err == nil) {
				t.Fatalf("Validate = %v, want ok=%v", err, tt.ok)
			}
			if err != nil && !errors.Is(err, ErrInvalidPolicies) {
				t.Fatalf("error %v does not wrap ErrInvalidPolicies", err)
			}
		})
	}
}

func TestPoliciesNormalize(t *testing.T) {
	p := Policies{Bundles: BundlesPolicy{NumBundles: 16}}
	p.Normalize()
	if len(p.Bundles.Boundaries) != 17 || p.Bundles.Boundaries[1] != 0x10000000 {
		t.Fatalf("normalize 16: %v", p.Bundles.Boundaries)
	}
	p = Policies{Bundles: BundlesPolicy{Boundaries: []uint32{0, 7, FullUpperBound}}}
	p.Normalize()
	if p.Bundles.NumBundles != 2 {
		t.Fatalf("normalize boundaries: %+v", p.Bundles)
	}
}

func TestTenantsAndNamespaces(t *testing.T) {
	ctx := context.Background()
	_, a := newMemAdmin(t)
	if err := a.CreateNamespace(ctx, "acme/orders", nil); !errors.Is(err, ErrTenantNotFound) {
		t.Fatalf("namespace without tenant: %v", err)
	}
	if err := a.CreateTenant(ctx, "acme", TenantInfo{AdminRoles: []string{"ops"}}); err != nil {
		t.Fatal(err)
	}
	if err := a.CreateTenant(ctx, "acme", TenantInfo{}); !errors.Is(err, ErrTenantExists) {
		t.Fatalf("duplicate tenant: %v", err)
	}
	if info, err := a.GetTenant(ctx, "acme"); err != nil || info.AdminRoles[0] != "ops" || info.Created.IsZero() {
		t.Fatalf("get tenant: %+v %v", info, err)
	}
	for _, bad := range []string{"", ".", "a/b", "x y"} {
		if err := a.CreateTenant(ctx, bad, TenantInfo{}); !errors.Is(err, ErrInvalidName) {
			t.Errorf("tenant %q: %v", bad, err)
		}
	}
	for _, bad := range []string{"acme", "acme/", "/orders", "acme/a/b", "acme/.."} {
		if err := a.CreateNamespace(ctx, bad, nil); !errors.Is(err, ErrInvalidName) {
			t.Errorf("namespace %q: %v", bad, err)
		}
	}
	custom := Policies{
		Persistence:  Persistence{5, 3, 2},
		Retention:    Retention{TimeMinutes: 7 * 24 * 60, SizeMB: 2 << 20},
		BacklogQuota: BacklogQuota{LimitBytes: 500 << 30, LimitTimeSeconds: -1, Policy: ProducerRequestHold},
		Bundles:      BundlesPolicy{NumBundles: 8},
	}
	if err := a.CreateNamespace(ctx, "acme/orders", &custom); err != nil {
		t.Fatal(err)
	}
	if err := a.CreateNamespace(ctx, "acme/orders", nil); !errors.Is(err, ErrNamespaceExists) {
		t.Fatalf("duplicate namespace: %v", err)
	}
	bad := DefaultPolicies()
	bad.Persistence.AckQuorum = 4
	if err := a.CreateNamespace(ctx, "acme/bad", &bad); !errors.Is(err, ErrInvalidPolicies) {
		t.Fatalf("invalid policies: %v", err)
	}
	got, err := a.GetPolicies(ctx, "acme/orders")
	if err != nil || got.Persistence != custom.Persistence || got.Retention != custom.Retention || got.Bundles.NumBundles != 8 || len(got.Bundles.Boundaries) != 9 {
		t.Fatalf("get policies: %+v %v", got, err)
	}
	if _, err := a.GetPolicies(ctx, "acme/none"); !errors.Is(err, ErrNamespaceNotFound) {
		t.Fatalf("missing namespace: %v", err)
	}

	// Updates: CAS loop; invalid results and merges are refused.
	got, err = a.UpdatePolicies(ctx, "acme/orders", func(p *Policies) error { p.Deduplication = true; p.MessageTTLSeconds = 30; return nil })
	if err != nil || !got.Deduplication || got.MessageTTLSeconds != 30 {
		t.Fatalf("update: %+v %v", got, err)
	}
	if _, err := a.UpdatePolicies(ctx, "acme/orders", func(p *Policies) error { p.Persistence.Ensemble = 1; return nil }); !errors.Is(err, ErrInvalidPolicies) {
		t.Fatalf("invalid update: %v", err)
	}
	if _, err := a.UpdatePolicies(ctx, "acme/orders", func(p *Policies) error { p.Bundles.Boundaries = EqualBoundaries(4); return nil }); !errors.Is(err, ErrInvalidPolicies) {
		t.Fatalf("merging bundles: %v", err)
	}
	// A split is durable.
	halves, err := a.SplitBundle(ctx, Bundle{Namespace: "acme/orders", Lower: 0, Upper: 0x20000000})
	if err != nil || len(halves) != 2 || halves[0].Upper != 0x10000000 || halves[1].Lower != 0x10000000 || halves[1].Upper != 0x20000000 {
		t.Fatalf("split: %v %v", halves, err)
	}
	if got, _ := a.GetPolicies(ctx, "acme/orders"); got.Bundles.NumBundles != 9 || !got.Deduplication {
		t.Fatalf("after split: %+v", got.Bundles)
	}
	if _, err := a.SplitBundle(ctx, Bundle{Namespace: "acme/orders", Lower: 0, Upper: 0x20000000}); !errors.Is(err, ErrInvalidPolicies) {
		t.Fatalf("split of a bundle that no longer exists: %v", err)
	}

	if err := a.CreateTenant(ctx, "acme2", TenantInfo{}); err != nil {
		t.Fatal(err)
	}
	if err := a.CreateNamespace(ctx, "acme2/x", nil); err != nil {
		t.Fatal(err)
	}
	if ns, err := a.ListNamespaces(ctx, "acme"); err != nil || strings.Join(ns, ",") != "acme/orders" {
		t.Fatalf("list acme: %v %v", ns, err)
	}
	if ns, err := a.ListNamespaces(ctx, ""); err != nil || strings.Join(ns, ",") != "acme/orders,acme2/x" {
		t.Fatalf("list all: %v %v", ns, err)
	}
	if ts, err := a.ListTenants(ctx); err != nil || strings.Join(ts, ",") != "acme,acme2" {
		t.Fatalf("tenants: %v %v", ts, err)
	}

	// Deletes refuse non-empty parents.
	if _, err := a.CreateTopic(ctx, "acme/orders", "t", 1, nil); err != nil {
		t.Fatal(err)
	}
	if err := a.DeleteNamespace(ctx, "acme/orders"); !errors.Is(err, ErrNotEmpty) {
		t.Fatalf("delete non-empty namespace: %v", err)
	}
	if err := a.DeleteTenant(ctx, "acme"); !errors.Is(err, ErrNotEmpty) {
		t.Fatalf("delete non-empty tenant: %v", err)
	}
	if err := a.DeleteTopic(ctx, "acme/orders", "t"); err != nil {
		t.Fatal(err)
	}
	if err := a.DeleteNamespace(ctx, "acme/orders"); err != nil {
		t.Fatal(err)
	}
	if err := a.DeleteNamespace(ctx, "acme/orders"); !errors.Is(err, ErrNamespaceNotFound) {
		t.Fatalf("delete twice: %v", err)
	}
	if err := a.DeleteTenant(ctx, "acme"); err != nil {
		t.Fatal(err)
	}
	if _, err := a.GetTenant(ctx, "acme"); !errors.Is(err, ErrTenantNotFound) {
		t.Fatalf("deleted tenant: %v", err)
	}
}

func TestEnsureDefaultsRace(t *testing.T) {
	srv := meta.NewMemServer(meta.MemConfig{})
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make([]error, 8)
	for i := range errs {
		c := srv.NewClient()
		t.Cleanup(func() { c.Close() })
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = New(c).EnsureDefaults(ctx)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("broker %d: %v", i, err)
		}
	}
	a := New(srv.NewClient())
	p, err := a.GetPolicies(ctx, DefaultNamespace)
	if err != nil || p.Persistence != (Persistence{3, 3, 2}) || p.Bundles.NumBundles != DefaultNumBundles {
		t.Fatalf("public/default: %+v %v", p, err)
	}
	// Idempotent, and keeps changes made since.
	if _, err := a.UpdatePolicies(ctx, DefaultNamespace, func(p *Policies) error { p.MessageTTLSeconds = 9; return nil }); err != nil {
		t.Fatal(err)
	}
	if err := a.EnsureDefaults(ctx); err != nil {
		t.Fatal(err)
	}
	if p, _ := a.GetPolicies(ctx, DefaultNamespace); p.MessageTTLSeconds != 9 {
		t.Fatalf("EnsureDefaults overwrote policies: %+v", p)
	}
	if ns, _ := a.ListNamespaces(ctx, ""); len(ns) != 1 {
		t.Fatalf("namespaces: %v", ns)
	}
}

// TestUpdatePoliciesConcurrent: 8 writers each add one to the TTL; the CAS
// loop must not lose any increment.
func TestUpdatePoliciesConcurrent(t *testing.T) {
	srv, a := newMemAdmin(t)
	ctx := context.Background()
	if err := a.EnsureDefaults(ctx); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for range 8 {
		c := New(srv.NewClient())
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := c.UpdatePolicies(ctx, DefaultNamespace, func(p *Policies) error { p.MessageTTLSeconds++; return nil }); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if p, _ := a.GetPolicies(ctx, DefaultNamespace); p.MessageTTLSeconds != 8 {
		t.Fatalf("TTL %d after 8 increments", p.MessageTTLSeconds)
	}
}

func TestTopicNames(t *testing.T) {
	long := strings.Repeat("a", 249)
	tests := []struct {
		name string
		ok   bool
	}{
		{"orders", true},
		{"a.b_c-D9", true},
		{long, true},
		{long + "a", false},
		{"", false},
		{".", false},
		{"..", false},
		{"...", true},
		{"a/b", false},
		{"a b", false},
		{"ünï", false},
		{"a:b", false},
	}
	for _, tt := range tests {
		err := ValidateTopicName(tt.name)
		if tt.ok != (err == nil) || (err != nil && !errors.Is(err, ErrInvalidTopicName)) {
			t.Errorf("ValidateTopicName(%.20q) = %v, want ok=%v", tt.name, err, tt.ok)
		}
	}
}

func TestPartitionName(t *testing.T) {
	tests := []struct {
		ns, topic string
		partition int32
		want      string
	}{
		{"public/default", "orders", 0, "persistent://public/default/orders-partition-0"},
		{"acme/x", "a-partition-3", 12, "persistent://acme/x/a-partition-3-partition-12"},
		{"acme/x", "t", 1<<31 - 1, "persistent://acme/x/t-partition-2147483647"},
	}
	for _, tt := range tests {
		got := PartitionName(tt.ns, tt.topic, tt.partition)
		if got != tt.want {
			t.Errorf("PartitionName = %q, want %q", got, tt.want)
		}
		ns, topic, p, err := ParsePartitionName(got)
		if err != nil || ns != tt.ns || topic != tt.topic || p != tt.partition {
			t.Errorf("ParsePartitionName(%q) = %q %q %d %v", got, ns, topic, p, err)
		}
	}
	for _, bad := range []string{
		"orders-partition-0",
		"persistent://public/orders-partition-0",
		"persistent://public/default/orders",
		"persistent://public/default/orders-partition-",
		"persistent://public/default/orders-partition-01",
		"persistent://public/default/orders-partition--1",
		"persistent://public/default/orders-partition-99999999999",
		"persistent://public/default/-partition-1",
		"persistent://public/default/a b-partition-1",
		"non-persistent://public/default/orders-partition-0",
	} {
		if _, _, _, err := ParsePartitionName(bad); !errors.Is(err, ErrInvalidTopicName) && !errors.Is(err, ErrInvalidName) {
			t.Errorf("ParsePartitionName(%q) = %v", bad, err)
		}
	}
}

func TestTopicRecords(t *testing.T) {
	ctx := context.Background()
	_, a := newMemAdmin(t)
	if _, err := a.CreateTopic(ctx, DefaultNamespace, "orders", 3, nil); !errors.Is(err, ErrNamespaceNotFound) {
		t.Fatalf("create without namespace: %v", err)
	}
	if err := a.EnsureDefaults(ctx); err != nil {
		t.Fatal(err)
	}
	rec, err := a.CreateTopic(ctx, DefaultNamespace, "orders", 3, map[string]string{"retention.ms": "1000"})
	if err != nil {
		t.Fatal(err)
	}
	if rec.ID == (TopicID{}) || rec.Partitions != 3 || rec.Version == 0 || rec.Name != "orders" {
		t.Fatalf("created %+v", rec)
	}
	if _, err := a.CreateTopic(ctx, DefaultNamespace, "orders", 1, nil); !errors.Is(err, ErrTopicExists) {
		t.Fatalf("duplicate: %v", err)
	}
	for _, tt := range []struct {
		name       string
		partitions int32
		want       error
	}{
		{"..", 1, ErrInvalidTopicName},
		{"a/b", 1, ErrInvalidTopicName},
		{"zero", 0, ErrInvalidPartitions},
		{"negative", -1, ErrInvalidPartitions},
		{"huge", MaxPartitions + 1, ErrInvalidPartitions},
	} {
		if _, err := a.CreateTopic(ctx, DefaultNamespace, tt.name, tt.partitions, nil); !errors.Is(err, tt.want) {
			t.Errorf("create %q/%d: %v, want %v", tt.name, tt.partitions, err, tt.want)
		}
	}
	other, err := a.CreateTopic(ctx, DefaultNamespace, "clicks", 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	if other.ID == rec.ID {
		t.Fatal("two topics with one id")
	}

	got, err := a.GetTopic(ctx, DefaultNamespace, "orders")
	if err != nil || got.ID != rec.ID || got.Partitions != 3 || got.Configs["retention.ms"] != "1000" || !got.Created.Equal(rec.Created) {
		t.Fatalf("get: %+v %v (want %+v)", got, err, rec)
	}
	if _, err := a.GetTopic(ctx, DefaultNamespace, "none"); !errors.Is(err, ErrTopicNotFound) {
		t.Fatalf("get missing: %v", err)
	}
	list, err := a.ListTopics(ctx, DefaultNamespace)
	if err != nil || len(list) != 2 || list[0].Name != "clicks" || list[1].Name != "orders" || list[1].ID != rec.ID {
		t.Fatalf("list: %+v %v", list, err)
	}

	// Partitions only grow.
	if _, err := a.SetPartitions(ctx, DefaultNamespace, "orders", 2); !errors.Is(err, ErrInvalidPartitions) {
		t.Fatalf("shrink: %v", err)
	}
	if _, err := a.SetPartitions(ctx, DefaultNamespace, "orders", 3); !errors.Is(err, ErrInvalidPartitions) {
		t.Fatalf("same count: %v", err)
	}
	grown, err := a.SetPartitions(ctx, DefaultNamespace, "orders", 5)
	if err != nil || grown.Partitions != 5 || grown.ID != rec.ID {
		t.Fatalf("grow: %+v %v", grown, err)
	}
	if _, err := a.SetPartitions(ctx, DefaultNamespace, "none", 5); !errors.Is(err, ErrTopicNotFound) {
		t.Fatalf("grow missing: %v", err)
	}

	// SetConfigs is a CAS on the version from GetTopic.
	if _, err := a.SetConfigs(ctx, DefaultNamespace, "orders", map[string]string{"x": "1"}, rec.Version); !errors.Is(err, ErrConflict) {
		t.Fatalf("stale version: %v", err)
	}
	set, err := a.SetConfigs(ctx, DefaultNamespace, "orders", map[string]string{"x": "1"}, grown.Version)
	if err != nil || set.Configs["x"] != "1" || len(set.Configs) != 1 || set.Partitions != 5 {
		t.Fatalf("set configs: %+v %v", set, err)
	}
	upd, err := a.UpdateConfigs(ctx, DefaultNamespace, "orders", func(c map[string]string) error { c["y"] = "2"; delete(c, "x"); return nil })
	if err != nil || upd.Configs["y"] != "2" || len(upd.Configs) != 1 {
		t.Fatalf("update configs: %+v %v", upd, err)
	}
	refuse := fmt.Errorf("no")
	if _, err := a.UpdateConfigs(ctx, DefaultNamespace, "orders", func(map[string]string) error { return refuse }); !errors.Is(err, refuse) {
		t.Fatalf("refused update: %v", err)
	}

	if err := a.DeleteTopic(ctx, DefaultNamespace, "orders"); err != nil {
		t.Fatal(err)
	}
	if err := a.DeleteTopic(ctx, DefaultNamespace, "orders"); !errors.Is(err, ErrTopicNotFound) {
		t.Fatalf("delete twice: %v", err)
	}
	again, err := a.CreateTopic(ctx, DefaultNamespace, "orders", 1, nil)
	if err != nil || again.ID == rec.ID {
		t.Fatalf("recreate: %+v %v", again, err)
	}
}

func TestTopicIDText(t *testing.T) {
	id := newTopicID()
	text, _ := id.MarshalText()
	var back TopicID
	if err := back.UnmarshalText(text); err != nil || back != id || len(text) != 36 || text[14] != '4' {
		t.Fatalf("%s -> %v %v", text, back, err)
	}
}

func TestDeleteTopicRecreated(t *testing.T) {
	ctx := context.Background()
	_, a := newMemAdmin(t)
	if err := a.EnsureDefaults(ctx); err != nil {
		t.Fatal(err)
	}
	first, _ := a.CreateTopic(ctx, DefaultNamespace, "t", 1, nil)
	if err := a.DeleteTopic(ctx, DefaultNamespace, "t"); err != nil {
		t.Fatal(err)
	}
	second, _ := a.CreateTopic(ctx, DefaultNamespace, "t", 1, nil)
	if err := a.deleteTopicAgain(ctx, first); !errors.Is(err, ErrTopicNotFound) {
		t.Fatalf("delete of a recreated topic: %v", err)
	}
	if got, err := a.GetTopic(ctx, DefaultNamespace, "t"); err != nil || got.ID != second.ID {
		t.Fatalf("the new topic was deleted: %+v %v", got, err)
	}
}
