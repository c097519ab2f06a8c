// Package broker is the cluster layer of a Quire broker: which brokers are
// alive, the tenants, namespaces and their policies, the Kafka topic records,
// the namespace bundles (hash ranges of topic names) and which broker owns
// each bundle, lookup of a topic's owner, and failover of ownership when a
// broker's metadata session ends.
//
// Everything it knows lives in the metadata store (internal/meta) under the
// keys listed in keys.go. Ownership is a claim, not a lock that keeps a stale
// owner from writing: a broker that stalls past its session TTL may still
// believe it owns a bundle. Safety against such a zombie comes from ledger
// fencing in the storage layer, never from this package.
//
// It must never serve topics, open ledgers or talk to clients: the topic layer
// above it loads and unloads the topics of a bundle when told through the
// Cluster's OnAcquire and OnRelease callbacks.
//
// Main types:
//   - Admin: tenants, namespaces (Policies) and topic records (TopicRecord),
//     each read-modify-write a compare-and-swap on the key's version.
//   - Cluster: one running broker's registration, its watch-based caches of
//     live brokers, namespaces and bundle owners, Lookup, and the failover
//     loop that acquires bundles by rendezvous hashing.
//   - Bundle: a namespace's hash range; BundleFor maps a topic name to one.
//
// How the layer above uses it:
//
//	c, err := broker.New(broker.Config{Store: store, Session: session, Self: self,
//		OnAcquire: loadBundle, OnRelease: unloadBundle})
//	err = c.Start(ctx) // registers; c.Close() releases everything
//	err = c.Admin().EnsureDefaults(ctx)
//
//	// Serving partition p of Kafka topic t:
//	name := broker.PartitionName(broker.DefaultNamespace, t, p)
//	owner, err := c.Lookup(ctx, name) // assigns an owner when there is none
//	if owner.ID != c.Self().ID { /* NOT_LEADER_FOR_PARTITION */ }
//
//	// Kafka Metadata (no assignment): o, ok := c.OwnerOf(name);
//	// leader = o.Owner.ID, leader epoch = int32(o.Version); -1 when !ok.
//
//	// loadBundle(b): for each rec in c.Admin().ListTopics(ctx, b.Namespace),
//	// load partition i when c.BundleOf(PartitionName(b.Namespace, rec.Name, i)) == b.
package broker

import "errors"

// Sentinel errors for the outcomes callers branch on; every returned error
// wraps one of these or a meta error with context. Test with errors.Is.
var (
	// ErrInvalidName: a tenant, namespace or topic name breaks the naming rules.
	ErrInvalidName = errors.New("broker: invalid name")
	// ErrInvalidTopicName: a Kafka topic name breaks Kafka's rules
	// ([a-zA-Z0-9._-], 1..249 characters, not "." or "..").
	ErrInvalidTopicName = errors.New("broker: invalid topic name")
	// ErrInvalidPolicies: namespace policies fail validation.
	ErrInvalidPolicies = errors.New("broker: invalid policies")
	// ErrTenantExists / ErrTenantNotFound: tenant record present / absent.
	ErrTenantExists   = errors.New("broker: tenant already exists")
	ErrTenantNotFound = errors.New("broker: tenant not found")
	// ErrNamespaceExists / ErrNamespaceNotFound: namespace present / absent.
	ErrNamespaceExists   = errors.New("broker: namespace already exists")
	ErrNamespaceNotFound = errors.New("broker: namespace not found")
	// ErrNotEmpty: a tenant still has namespaces, or a namespace still has topics.
	ErrNotEmpty = errors.New("broker: not empty")
	// ErrTopicExists / ErrTopicNotFound: topic record present / absent.
	ErrTopicExists   = errors.New("broker: topic already exists")
	ErrTopicNotFound = errors.New("broker: topic not found")
	// ErrInvalidPartitions: a partition count below 1, or an attempt to shrink.
	ErrInvalidPartitions = errors.New("broker: invalid partition count")
	// ErrConflict: a compare-and-swap lost against a concurrent writer (the
	// caller passed a version that is no longer current).
	ErrConflict = errors.New("broker: concurrent update")
	// ErrBrokerIDInUse: another live broker holds this broker id.
	ErrBrokerIDInUse = errors.New("broker: broker id in use")
	// ErrSessionLost: the Cluster's metadata session ended; it owns nothing
	// and claims nothing any more. Start a new Cluster with a new session.
	ErrSessionLost = errors.New("broker: metadata session lost")
	// ErrClosed: the Cluster was closed (or not started).
	ErrClosed = errors.New("broker: cluster closed")
	// ErrNotOwner: Unload of a bundle this broker does not own.
	ErrNotOwner = errors.New("broker: bundle not owned by this broker")
)
