// Package isrnode is ISR mode's replication shell on one broker: it runs the
// broker's partition replicas (isr.Replica cores over disklog logs) and
// replicates them between brokers with Kafka's own Fetch.
//
// A Manager registers the broker in the metadata store (an ephemeral
// isr.BrokerKey; its version is the broker epoch, and its end is how the
// controller, isrctl, learns the broker is gone), watches the partition
// records and, for every partition a record assigns here, opens the
// replica's log and drives its core on one goroutine (internal/loop): the
// records, ticks, produce and fetch requests go in, the core's Ready comes
// out and is carried out here. A record that no longer names this broker
// (a reassignment removed it) stops its replica and deletes the log; a log
// on disk of such a partition, left by a broker that was down meanwhile,
// goes when the record is read. A leader's ISR proposals go to the
// controller (Controller, a CAS on the record there) and the answer back to
// the core. The front end calls AppendBatch or SubmitBatch with one Kafka
// record batch as the producer sent it (acks 0, 1 or all, answered when
// the core answers; the batch is stored as it came, but for its base
// offset and leader epoch, which the log stamps outside the CRC), Read
// (whole batches, from the one holding the offset asked for, up to the
// replica's HW, leader or follower), Status (role, epochs, ISR, log start,
// HW and LEO), WaitHighWatermark (a consumer's long-poll),
// OffsetForTimestamp (the log's time index), EpochForOffset (the epoch
// cache's epoch of an offset: ListOffsets' leader_epoch) and Followers and
// Leading (what a leader knows of its followers' LEOs and catch-ups:
// KIP-392's replica selector chooses from it where a consumer reads, and
// the broker's replica-lag metrics compare it with the leader's LEO).
//
// Replication (fetcher.go, serve.go): a follower's core asks for fetches;
// one fetcher per source (leader) broker gathers those of every partition
// it follows there into one kmsg.FetchRequest (replica id and broker epoch
// in replica_state, current leader epoch, last fetched epoch, fetch offset)
// and sends it over a kgo connection to the leader's Kafka listener, where
// the front end hands it to HandleReplicaFetch (kafka.ReplicaFetchBackend).
// The leader's core answers each partition (records, HW, or a diverging
// epoch from its leader-epoch cache, or FENCED_LEADER_EPOCH), and the
// follower's core appends, truncates, or waits for a newer record. The
// leader holds a fetch with nothing new until its partition changes or
// max_wait_ms passes (long-poll); a failed fetch backs off. The
// replication throttle (throttle.go, Kafka's replication quotas, set by
// the broker with SetThrottle) holds a throttled replica's traffic to its
// rate while the replica is out of the ISR, on the follower's side and the
// leader's, by fetching and answering it later, never by dropping it.
//
// Files: manager.go (the Manager: registration, the record watch, the API),
// replica.go (one replica: its loop and the Ready it carries out),
// fetcher.go (the follower side), serve.go (the leader side of Fetch),
// partition.go (what a Kafka partition over a replica needs),
// producers.go (idempotent producers' retries and sequences),
// codec.go (raw Kafka record batches: checks, stamping, splitting fetched
// bytes; error codes, names), throttle.go (the replication throttle).
//
// What it must never do: decide anything the core decides (leadership,
// HW, ISR membership, truncation points), touch a core or its log off that
// replica's goroutine, or make a loop wait on another loop (answers come
// back through loop.Complete).
package isrnode
