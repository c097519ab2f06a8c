// Package ownership is the membership and ownership layer of the brokers:
// which brokers are alive (one ephemeral registration each), which broker
// owns each namespace bundle (one ephemeral ownership key each), lookup of a
// topic's owner, rendezvous-hash placement, failover of a dead broker's
// bundles and handoff to a broker that joins.
//
// Ownership is a claim, not a lock that keeps a stale owner from writing: a
// broker that stalls past its session TTL may still believe it owns a
// bundle. Safety against such a zombie comes from ledger fencing in the
// storage layer, never from this package.
//
// It must never serve topics, open ledgers or talk to clients: the broker
// above it loads and unloads the topics of a bundle when told through the
// Cluster's OnAcquire and OnRelease callbacks.
//
// Main types:
//   - Cluster: one running broker's registration, its watch-based caches of
//     live members, namespace bundles and bundle owners, Lookup, and the
//     failover loop that acquires bundles by rendezvous hashing.
//   - Member: what a live broker registers (id, listeners, zone).
//
// How the broker uses it:
//
//	c, err := ownership.New(ownership.Config{Store: store, Session: session, Self: self,
//		OnAcquire: loadBundle, OnRelease: unloadBundle})
//	err = c.Start(ctx) // registers; c.Close() releases everything
//	err = c.Catalog().EnsureDefaults(ctx)
//
//	// Serving partition p of Kafka topic t:
//	name := catalog.PartitionName(catalog.DefaultNamespace, t, p)
//	owner, err := c.Lookup(ctx, name) // assigns an owner when there is none
//	if owner.ID != c.Self().ID { /* NOT_LEADER_FOR_PARTITION */ }
//
//	// Kafka Metadata (no assignment): o, ok := c.OwnerOf(name);
//	// leader = o.Owner.ID, leader epoch = int32(o.Version); -1 when !ok.
//
//	// loadBundle(b): for each rec in c.Catalog().ListTopics(ctx, b.Namespace),
//	// load partition i when c.BundleOf(PartitionName(b.Namespace, rec.Name, i)) == b.
package ownership

import "errors"

// Sentinel errors for the outcomes callers branch on. Test with errors.Is.
var (
	// ErrBrokerIDInUse: another live broker holds this broker id.
	ErrBrokerIDInUse = errors.New("ownership: broker id in use")
	// ErrSessionLost: the Cluster's metadata session ended; it owns nothing
	// and claims nothing any more. Start a new Cluster with a new session.
	ErrSessionLost = errors.New("ownership: metadata session lost")
	// ErrClosed: the Cluster was closed (or not started).
	ErrClosed = errors.New("ownership: cluster closed")
	// ErrNotOwner: Unload of a bundle this broker does not own.
	ErrNotOwner = errors.New("ownership: bundle not owned by this broker")
)
