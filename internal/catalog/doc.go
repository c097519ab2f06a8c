// Package catalog is the cluster's catalogue: tenants, namespaces with their
// policies (persistence, retention, backlog quota, TTL, deduplication,
// bundle boundaries) and the Kafka topic records (partition count, configs,
// topic id). It also holds the naming rules and the pure bundle arithmetic
// (hash ranges of topic names) that the ownership layer builds on.
//
// Everything it knows lives in the metadata store (internal/meta) under the
// keys listed in keys.go; every read-modify-write is a compare-and-swap on
// the key's version, so concurrent admins never lose an update.
//
// It must never decide who owns what (package ownership does), serve topics
// or talk to clients.
//
// Main types:
//   - Catalog: tenants, namespaces (Policies) and topic records (Topic).
//   - Bundle: a namespace's hash range; BundleFor maps a topic name to one.
//
// Example:
//
//	cat := catalog.New(store)
//	err := cat.EnsureDefaults(ctx) // tenant public, namespace public/default
//	rec, err := cat.CreateTopic(ctx, catalog.DefaultNamespace, "orders", 8, nil)
//	name := catalog.PartitionName(catalog.DefaultNamespace, "orders", 3)
package catalog

import "errors"

// Sentinel errors for the outcomes callers branch on; every returned error
// wraps one of these or a meta error with context. Test with errors.Is.
var (
	// ErrInvalidName: a tenant, namespace or topic name breaks the naming rules.
	ErrInvalidName = errors.New("catalog: invalid name")
	// ErrInvalidTopicName: a Kafka topic name breaks Kafka's rules
	// ([a-zA-Z0-9._-], 1..249 characters, not "." or "..").
	ErrInvalidTopicName = errors.New("catalog: invalid topic name")
	// ErrInvalidPolicies: namespace policies fail validation.
	ErrInvalidPolicies = errors.New("catalog: invalid policies")
	// ErrTenantExists / ErrTenantNotFound: tenant record present / absent.
	ErrTenantExists   = errors.New("catalog: tenant already exists")
	ErrTenantNotFound = errors.New("catalog: tenant not found")
	// ErrNamespaceExists / ErrNamespaceNotFound: namespace present / absent.
	ErrNamespaceExists   = errors.New("catalog: namespace already exists")
	ErrNamespaceNotFound = errors.New("catalog: namespace not found")
	// ErrNotEmpty: a tenant still has namespaces, or a namespace still has topics.
	ErrNotEmpty = errors.New("catalog: not empty")
	// ErrTopicExists / ErrTopicNotFound: topic record present / absent.
	ErrTopicExists   = errors.New("catalog: topic already exists")
	ErrTopicNotFound = errors.New("catalog: topic not found")
	// ErrInvalidPartitions: a partition count below 1, or an attempt to shrink.
	ErrInvalidPartitions = errors.New("catalog: invalid partition count")
	// ErrConflict: a compare-and-swap lost against a concurrent writer (the
	// caller passed a version that is no longer current).
	ErrConflict = errors.New("catalog: concurrent update")
)
