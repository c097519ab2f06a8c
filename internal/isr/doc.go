// Package isr is Kafka's ISR-mode replication as deterministic state
// machines: the partition replica (Replica: leader and follower roles), the
// controller (Controller) and the replica's log seam (Log, with MemLog, an
// in-memory log that keeps page cache and flushed state apart).
//
// A Replica takes produce requests, follower and consumer fetches, fetch
// responses, partition states from the controller and AlterPartition answers,
// each with the time as an argument, and returns what to send in Ready. It
// appends, truncates and flushes through its Log. The leader tracks each
// follower's log end offset (LEO) and last caught-up time, keeps the in-sync
// replica set (ISR) by proposing changes to the controller with the partition
// epoch it saw (AlterPartition), advances the high watermark (HW) over the
// ISR plus any pending expansion, never while |ISR| < min.insync.replicas,
// and answers acks=0/1/all. Every batch carries the leader epoch that
// appended it; a follower fetches with the epoch of its last batch and
// truncates to the end of the last epoch it shares with the leader (KIP-101,
// KIP-279, DivergingEpoch in Fetch), never to its own HW; requests of another
// leader epoch are refused (KIP-320).
//
// The Controller owns the partition records (replicas, leader, leader epoch,
// ISR, ELR, partition epoch) that live in the metadata store, one key per
// partition, and changes them only by compare-and-swap, as MetaOps its shell
// performs. It fences brokers whose session ended, elects leaders (ISR, then
// eligible leader replicas (KIP-966), then unclean recovery (KIP-966's
// unclean.recovery.strategy: when the ISR and ELR emptied because their
// members came back from unclean shutdowns, the longest log of the record's
// LastKnownELR, by the log ends the brokers registered with), then, only with
// unclean election on, any live replica), applies AlterPartition proposals whose partition epoch is
// current, moves leadership back to preferred replicas, and reassigns
// partitions (KIP-455: the replicas grow to the target plus the leaving
// ones, the new ones join the ISR through the leader's proposals and are
// never elected before, then the controller completes: the target, a new
// leader epoch, the leaving replicas told to delete their logs; or a
// cancel restores the original replicas). Its controller
// epoch is written into every record it writes, and a new controller first
// writes every record again under its own epoch (Load), so a deposed
// controller's writes fail their CAS, and the record it then reads tells it
// that it was deposed.
//
// Files: replica.go (the Replica, its config, inputs that change its role,
// produce, Tick), leader.go (fetch handling, HW, ISR proposals), follower.go
// (fetching, truncation), controller.go (the Controller, its inputs and
// store operations), election.go (reconciling records with broker liveness,
// elections, ELR, rebalance), reassign.go (partition reassignment),
// invariants.go (the checks), state.go (the records in the store),
// types.go (messages, errors, events, mutants).
//
// What the package must never do: read a clock, start a goroutine, touch a
// socket or a file (the Log is an interface; MemLog is memory), or let map
// iteration order reach its outputs. Invariants are checked after every input
// under `-tags invariants` (checkInvariants). Mutants (MutantNames:
// truncate-to-hw, hw-ignores-min-isr, elect-out-of-sync, no-epoch-fencing,
// isr-change-without-cas) switch deliberately broken variants on for the
// simulator's checkers to catch.
package isr
