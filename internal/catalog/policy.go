package catalog

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"quire/internal/meta"
)

// Persistence is how a namespace's ledgers replicate: each entry goes to
// WriteQuorum of Ensemble bookies and is acknowledged after AckQuorum of them.
type Persistence struct {
	Ensemble    int `json:"ensemble"`
	WriteQuorum int `json:"writeQuorum"`
	AckQuorum   int `json:"ackQuorum"`
}

// Retention keeps acknowledged data for replay: up to TimeMinutes and SizeMB
// per topic. 0 keeps nothing acknowledged (Pulsar's default); -1 is unlimited.
type Retention struct {
	TimeMinutes int64 `json:"timeMinutes"`
	SizeMB      int64 `json:"sizeMB"`
}

// BacklogQuotaPolicy is what happens when a topic's unacknowledged backlog
// reaches its quota.
type BacklogQuotaPolicy string

const (
	// ProducerRequestHold holds producers until the backlog shrinks.
	ProducerRequestHold BacklogQuotaPolicy = "producer_request_hold"
	// ProducerException fails produce requests.
	ProducerException BacklogQuotaPolicy = "producer_exception"
	// ConsumerBacklogEviction drops the oldest backlog.
	ConsumerBacklogEviction BacklogQuotaPolicy = "consumer_backlog_eviction"
)

// BacklogQuota caps the unacknowledged backlog by size and by age; -1 is unlimited.
type BacklogQuota struct {
	LimitBytes       int64              `json:"limitBytes"`
	LimitTimeSeconds int64              `json:"limitTimeSeconds"`
	Policy           BacklogQuotaPolicy `json:"policy"`
}

// BundlesPolicy is the namespace's split of the hash space (see bundles.go).
// Invariant (after validation): len(Boundaries) == NumBundles+1.
type BundlesPolicy struct {
	NumBundles int      `json:"numBundles"`
	Boundaries []uint32 `json:"boundaries"`
}

// Policies are a namespace's settings, the value of its key.
type Policies struct {
	Persistence  Persistence  `json:"persistence"`
	Retention    Retention    `json:"retention"`
	BacklogQuota BacklogQuota `json:"backlogQuota"`
	// MessageTTLSeconds auto-acknowledges older messages; 0 disables.
	MessageTTLSeconds int64         `json:"messageTTLSeconds"`
	Deduplication     bool          `json:"deduplication"`
	Bundles           BundlesPolicy `json:"bundles"`
	// Replication chooses ledger or ISR mode for new topics (replication.go).
	Replication Replication `json:"replication,omitzero"`
	// Permissions are the actions each role may take in the namespace
	// (Pulsar's auth_policies.namespace_auth; permissions.go).
	Permissions map[string][]AuthAction `json:"permissions,omitempty"`
}

// DefaultPolicies: E=3 Qw=3 Qa=2, no retention of acknowledged data, no
// backlog limit (held producers when one is set), no TTL, no deduplication,
// DefaultNumBundles equal bundles.
func DefaultPolicies() Policies {
	return Policies{
		Persistence:  Persistence{Ensemble: 3, WriteQuorum: 3, AckQuorum: 2},
		Retention:    Retention{TimeMinutes: 0, SizeMB: 0},
		BacklogQuota: BacklogQuota{LimitBytes: -1, LimitTimeSeconds: -1, Policy: ProducerRequestHold},
		Bundles:      BundlesPolicy{NumBundles: DefaultNumBundles, Boundaries: EqualBoundaries(DefaultNumBundles)},
	}
}

// Normalize fills Bundles.Boundaries with equal ranges when only NumBundles
// is set (DefaultNumBundles when both are empty) and NumBundles from
// Boundaries when only those are set.
func (p *Policies) Normalize() {
	switch {
	case len(p.Bundles.Boundaries) == 0:
		if p.Bundles.NumBundles == 0 {
			p.Bundles.NumBundles = DefaultNumBundles
		}
		if p.Bundles.NumBundles > 0 && p.Bundles.NumBundles <= MaxNumBundles {
			p.Bundles.Boundaries = EqualBoundaries(p.Bundles.NumBundles)
		}
	case p.Bundles.NumBundles == 0:
		p.Bundles.NumBundles = len(p.Bundles.Boundaries) - 1
	}
}

// Validate checks the policies; errors wrap ErrInvalidPolicies.
func (p Policies) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%s: %w", fmt.Sprintf(format, args...), ErrInvalidPolicies)
	}
	ps := p.Persistence
	if !(ps.Ensemble >= ps.WriteQuorum && ps.WriteQuorum >= ps.AckQuorum && ps.AckQuorum >= 1) {
		return bad("persistence E=%d Qw=%d Qa=%d: want E >= Qw >= Qa >= 1", ps.Ensemble, ps.WriteQuorum, ps.AckQuorum)
	}
	if p.Retention.TimeMinutes < -1 || p.Retention.SizeMB < -1 {
		return bad("retention %+v: values must be >= -1 (-1 = unlimited)", p.Retention)
	}
	bq := p.BacklogQuota
	if bq.LimitBytes < -1 || bq.LimitTimeSeconds < -1 {
		return bad("backlog quota %+v: limits must be >= -1 (-1 = unlimited)", bq)
	}
	switch bq.Policy {
	case ProducerRequestHold, ProducerException, ConsumerBacklogEviction:
	default:
		return bad("backlog quota policy %q: want %s, %s or %s", bq.Policy, ProducerRequestHold, ProducerException, ConsumerBacklogEviction)
	}
	if p.MessageTTLSeconds < 0 {
		return bad("message TTL %ds: must be >= 0", p.MessageTTLSeconds)
	}
	if err := p.Replication.Validate(); err != nil {
		return err
	}
	if err := validatePermissions(p.Permissions); err != nil {
		return bad("permissions: %v", err)
	}
	if err := ValidateBoundaries(p.Bundles.Boundaries); err != nil {
		return bad("bundles: %v", err)
	}
	if p.Bundles.NumBundles != len(p.Bundles.Boundaries)-1 {
		return bad("bundles: numBundles %d but %d boundaries", p.Bundles.NumBundles, len(p.Bundles.Boundaries))
	}
	return nil
}

// TenantInfo is a tenant's record.
type TenantInfo struct {
	AdminRoles []string  `json:"adminRoles,omitempty"`
	Created    time.Time `json:"created"`
}

// Catalog reads and writes tenants, namespaces and topic records. It holds no
// state of its own: every method is a store round trip (or a CAS loop), so
// any number of brokers may use it concurrently. Safe for concurrent use.
type Catalog struct {
	store meta.Store
}

// New returns an Admin on store.
func New(store meta.Store) *Catalog { return &Catalog{store: store} }

// CreateTenant creates a tenant (ErrTenantExists if present).
func (a *Catalog) CreateTenant(ctx context.Context, tenant string, info TenantInfo) error {
	if err := ValidateTenant(tenant); err != nil {
		return fmt.Errorf("create tenant: %w", err)
	}
	if info.Created.IsZero() {
		info.Created = time.Now().UTC()
	}
	value, err := json.Marshal(info)
	if err != nil {
		return fmt.Errorf("create tenant %s: %w", tenant, err)
	}
	if _, err := a.store.Create(ctx, tenantKey(tenant), value); err != nil {
		if errors.Is(err, meta.ErrExists) {
			return fmt.Errorf("create tenant %s: %w", tenant, ErrTenantExists)
		}
		return fmt.Errorf("create tenant %s: %w", tenant, err)
	}
	return nil
}

// GetTenant returns a tenant's record (ErrTenantNotFound).
func (a *Catalog) GetTenant(ctx context.Context, tenant string) (TenantInfo, error) {
	if err := ValidateTenant(tenant); err != nil {
		return TenantInfo{}, fmt.Errorf("get tenant: %w", err)
	}
	var info TenantInfo
	if _, err := meta.GetJSON(ctx, a.store, tenantKey(tenant), &info); err != nil {
		if errors.Is(err, meta.ErrNotFound) {
			return TenantInfo{}, fmt.Errorf("get tenant %s: %w", tenant, ErrTenantNotFound)
		}
		return TenantInfo{}, fmt.Errorf("get tenant %s: %w", tenant, err)
	}
	return info, nil
}

// ListTenants returns the tenant names, sorted.
func (a *Catalog) ListTenants(ctx context.Context) ([]string, error) {
	kvs, _, err := meta.ListAll(ctx, a.store, TenantsPrefix)
	if err != nil {
		return nil, fmt.Errorf("list tenants: %w", err)
	}
	out := make([]string, 0, len(kvs))
	for _, kv := range kvs {
		out = append(out, strings.TrimPrefix(kv.Key, TenantsPrefix))
	}
	return out, nil
}

// DeleteTenant deletes a tenant without namespaces (ErrNotEmpty otherwise).
// The emptiness check and the delete are two steps: a namespace created in
// between is left without its tenant record (Admin refuses to create one
// under a missing tenant, so this needs two admins racing).
func (a *Catalog) DeleteTenant(ctx context.Context, tenant string) error {
	if err := ValidateTenant(tenant); err != nil {
		return fmt.Errorf("delete tenant: %w", err)
	}
	kv, err := a.store.Get(ctx, tenantKey(tenant))
	if err != nil {
		if errors.Is(err, meta.ErrNotFound) {
			return fmt.Errorf("delete tenant %s: %w", tenant, ErrTenantNotFound)
		}
		return fmt.Errorf("delete tenant %s: %w", tenant, err)
	}
	res, err := a.store.List(ctx, tenantNamespacesPrefix(tenant), meta.ListOptions{Limit: 1})
	if err != nil {
		return fmt.Errorf("delete tenant %s: %w", tenant, err)
	}
	if len(res.KVs) > 0 {
		return fmt.Errorf("delete tenant %s: has namespaces: %w", tenant, ErrNotEmpty)
	}
	if err := a.store.Delete(ctx, kv.Key, kv.Version); err != nil {
		return fmt.Errorf("delete tenant %s: %w", tenant, casErr(err, ErrTenantNotFound))
	}
	return nil
}

// CreateNamespace creates namespace ns ("tenant/ns") with policies p (nil:
// DefaultPolicies). p is normalized, then validated. Fails with
// ErrTenantNotFound, ErrNamespaceExists or ErrInvalidPolicies.
func (a *Catalog) CreateNamespace(ctx context.Context, ns string, p *Policies) error {
	tenant, _, err := ParseNamespace(ns)
	if err != nil {
		return fmt.Errorf("create namespace: %w", err)
	}
	policies := DefaultPolicies()
	if p != nil {
		policies = *p
		policies.Bundles.Boundaries = slices.Clone(p.Bundles.Boundaries)
		policies.Normalize()
	}
	if err := policies.Validate(); err != nil {
		return fmt.Errorf("create namespace %s: %w", ns, err)
	}
	if _, err := a.store.Get(ctx, tenantKey(tenant)); err != nil {
		if errors.Is(err, meta.ErrNotFound) {
			return fmt.Errorf("create namespace %s: %w", ns, ErrTenantNotFound)
		}
		return fmt.Errorf("create namespace %s: %w", ns, err)
	}
	value, err := json.Marshal(policies)
	if err != nil {
		return fmt.Errorf("create namespace %s: %w", ns, err)
	}
	if _, err := a.store.Create(ctx, namespaceKey(ns), value); err != nil {
		if errors.Is(err, meta.ErrExists) {
			return fmt.Errorf("create namespace %s: %w", ns, ErrNamespaceExists)
		}
		return fmt.Errorf("create namespace %s: %w", ns, err)
	}
	return nil
}

// GetPolicies returns a namespace's policies (ErrNamespaceNotFound).
func (a *Catalog) GetPolicies(ctx context.Context, ns string) (Policies, error) {
	p, _, err := a.getPolicies(ctx, ns)
	return p, err
}

func (a *Catalog) getPolicies(ctx context.Context, ns string) (Policies, meta.Version, error) {
	if _, _, err := ParseNamespace(ns); err != nil {
		return Policies{}, 0, fmt.Errorf("get policies: %w", err)
	}
	var p Policies
	v, err := meta.GetJSON(ctx, a.store, namespaceKey(ns), &p)
	if err != nil {
		if errors.Is(err, meta.ErrNotFound) {
			return Policies{}, 0, fmt.Errorf("get policies of %s: %w", ns, ErrNamespaceNotFound)
		}
		return Policies{}, 0, fmt.Errorf("get policies of %s: %w", ns, err)
	}
	return p, v, nil
}

// UpdatePolicies applies change to the namespace's current policies and
// writes them back with compare-and-swap, retrying on concurrent updates
// (change may run more than once). The result must validate, and its bundle
// boundaries must refine the current ones: bundles split, never merge.
// If change returns an error, nothing is written and that error is returned.
func (a *Catalog) UpdatePolicies(ctx context.Context, ns string, change func(*Policies) error) (Policies, error) {
	for {
		cur, version, err := a.getPolicies(ctx, ns)
		if err != nil {
			return Policies{}, fmt.Errorf("update policies: %w", err)
		}
		next := cur
		next.Bundles.Boundaries = slices.Clone(cur.Bundles.Boundaries)
		if err := change(&next); err != nil {
			return Policies{}, fmt.Errorf("update policies of %s: %w", ns, err)
		}
		next.Bundles.NumBundles = len(next.Bundles.Boundaries) - 1
		if err := next.Validate(); err != nil {
			return Policies{}, fmt.Errorf("update policies of %s: %w", ns, err)
		}
		if !refines(cur.Bundles.Boundaries, next.Bundles.Boundaries) {
			return Policies{}, fmt.Errorf("update policies of %s: bundle boundaries may only be added (split): %w", ns, ErrInvalidPolicies)
		}
		value, err := json.Marshal(next)
		if err != nil {
			return Policies{}, fmt.Errorf("update policies of %s: %w", ns, err)
		}
		_, err = a.store.Put(ctx, namespaceKey(ns), value, version)
		switch {
		case err == nil:
			return next, nil
		case errors.Is(err, meta.ErrBadVersion):
			continue // lost a race: re-read and re-apply
		case errors.Is(err, meta.ErrNotFound):
			return Policies{}, fmt.Errorf("update policies of %s: %w", ns, ErrNamespaceNotFound)
		default:
			return Policies{}, fmt.Errorf("update policies of %s: %w", ns, err)
		}
	}
}

// SplitBundle splits bundle b of its namespace at the middle of its range,
// durably (in the namespace policies). The owner of b releases it once it
// sees the new boundaries, and the two halves are placed like any unowned
// bundle. Fails with ErrInvalidPolicies when b is not a current bundle or
// cannot be split further.
func (a *Catalog) SplitBundle(ctx context.Context, b Bundle) ([]Bundle, error) {
	p, err := a.UpdatePolicies(ctx, b.Namespace, func(p *Policies) error {
		next, ok := splitBoundaries(p.Bundles.Boundaries, b)
		if !ok {
			return fmt.Errorf("bundle %s is not a splittable bundle: %w", b, ErrInvalidPolicies)
		}
		p.Bundles.Boundaries = next
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("split bundle %s: %w", b, err)
	}
	mid := bundleForHash(b.Namespace, p.Bundles.Boundaries, b.Lower)
	return []Bundle{mid, {Namespace: b.Namespace, Lower: mid.Upper, Upper: b.Upper}}, nil
}

// ListNamespaces returns the namespaces ("tenant/ns") of tenant, sorted;
// tenant "" lists every namespace.
func (a *Catalog) ListNamespaces(ctx context.Context, tenant string) ([]string, error) {
	prefix := NamespacesPrefix
	if tenant != "" {
		if err := ValidateTenant(tenant); err != nil {
			return nil, fmt.Errorf("list namespaces: %w", err)
		}
		prefix = tenantNamespacesPrefix(tenant)
	}
	kvs, _, err := meta.ListAll(ctx, a.store, prefix)
	if err != nil {
		return nil, fmt.Errorf("list namespaces of %q: %w", tenant, err)
	}
	out := make([]string, 0, len(kvs))
	for _, kv := range kvs {
		if ns, ok := ParseNamespaceKey(kv.Key); ok {
			out = append(out, ns)
		}
	}
	return out, nil
}

// DeleteNamespace deletes a namespace without topics (ErrNotEmpty otherwise).
func (a *Catalog) DeleteNamespace(ctx context.Context, ns string) error {
	_, version, err := a.getPolicies(ctx, ns)
	if err != nil {
		return fmt.Errorf("delete namespace: %w", err)
	}
	res, err := a.store.List(ctx, NamespaceTopicsPrefix(ns), meta.ListOptions{Limit: 1})
	if err != nil {
		return fmt.Errorf("delete namespace %s: %w", ns, err)
	}
	if len(res.KVs) > 0 {
		return fmt.Errorf("delete namespace %s: has topics: %w", ns, ErrNotEmpty)
	}
	if err := a.store.Delete(ctx, namespaceKey(ns), version); err != nil {
		return fmt.Errorf("delete namespace %s: %w", ns, casErr(err, ErrNamespaceNotFound))
	}
	return nil
}

// EnsureDefaults creates tenant DefaultTenant and namespace DefaultNamespace
// (DefaultPolicies) if absent. Idempotent, and safe when several brokers run
// it at once: creation is create-if-absent, and losing that race is success.
func (a *Catalog) EnsureDefaults(ctx context.Context) error {
	if err := a.CreateTenant(ctx, DefaultTenant, TenantInfo{}); err != nil && !errors.Is(err, ErrTenantExists) {
		return fmt.Errorf("ensure defaults: %w", err)
	}
	if err := a.CreateNamespace(ctx, DefaultNamespace, nil); err != nil && !errors.Is(err, ErrNamespaceExists) {
		return fmt.Errorf("ensure defaults: %w", err)
	}
	return nil
}

// casErr maps the store's compare-and-swap outcomes: a changed version is
// ErrConflict, a vanished key is notFound.
func casErr(err, notFound error) error {
	switch {
	case errors.Is(err, meta.ErrBadVersion):
		return fmt.Errorf("%w: %w", ErrConflict, err)
	case errors.Is(err, meta.ErrNotFound):
		return fmt.Errorf("%w: %w", notFound, err)
	}
	return err
}
