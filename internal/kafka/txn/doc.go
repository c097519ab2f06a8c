// Package txn is Quire's Kafka transaction coordinator core: the state of
// every transactional id a broker coordinates (producer id and epoch,
// timeout, the transaction's state and participants) and the rules of
// Kafka's transactions (KIP-98): InitProducerID with a transactional id
// (an epoch bump fences the previous instance and aborts what it left
// open), AddPartitionsToTxn and AddOffsetsToTxn, EndTxn (the decision made
// durable, answered, then a marker written to every participant, then the
// Complete state), transaction timeouts that abort under the next epoch,
// and recovery of decided transactions after a coordinator failover.
//
// Coordinator is a deterministic state machine (no goroutines, clocks or
// I/O; internal/lint checks it): inputs carry the time, outputs come out of
// Ready as responses, record writes (compare-and-swap on a version, made
// durable by the shell), marker operations (control batches appended to
// partitions, groups' pending offsets committed or dropped) and producer id
// requests. Service (service.go) is its shell over the metadata store; it
// is not yet wired into the broker and the Kafka front end (issue 17).
//
// Deviations from Apache Kafka: the transaction log is a record per id in
// the metadata store, not the __transaction_state topic; epochs are bumped
// per transaction only by InitProducerID, fencing and timeouts (the
// transaction protocol v1 rules; KIP-890's per-transaction bump is not
// implemented).
package txn
