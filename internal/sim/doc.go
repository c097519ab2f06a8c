// Package sim is Quire's deterministic simulator. It runs the real protocol
// cores (internal/ledger's Writer, Recovery and Reader) against modelled
// bookies, a modelled network and the in-memory metadata store, under a
// virtual clock, with faults chosen at random from one int64 seed: message
// delay, loss and partitions, bookie crashes that lose unsynced data, metadata
// store outages and ambiguous results, a writer that freezes (a GC pause)
// and comes back as a zombie, and readers that read the closed ledger back in
// ranges (configured at random) while a bookie crashes or is cut off
// mid-read. Checkers run after every step and at the end of
// a run; a violation carries the seed and a trace of the last events, and the
// same seed replays the same run byte for byte.
//
// Two simulations share the engine: RunLedger (the ledger protocol) and
// RunTopic (the managed ledger, internal/mlog's Topic core, with owners that
// crash or pause and hand the topic over, consumers acknowledging out of
// order, a modelled ledger service and metadata outages; one seed in five
// runs a compacted topic instead, with a compactor and the compaction
// checker of topic_compact.go).
//
// A third, RunISR (isr.go, isr_faults.go, isr_reassign.go, isr_clients.go, isr_check.go;
// `quire sim isr`), runs Kafka's ISR mode: internal/isr's Replicas over
// MemLogs on 3-5 brokers and its Controller, whose records, broker sessions
// and own session live in a modelled metadata store (sessions expire when a
// broker or the controller is cut off; a controller that loses its session
// is replaced by one of a higher epoch). Producers (acks 0/1/all) and
// consumers go to the leader they last looked up. Per seed it draws RF,
// min.insync.replicas, acks, unclean election, ELR, flush policy and the
// lag bound, and faults: crashes keeping or losing the page cache
// (sometimes of every replica at once), pauses (zombie leaders), slow
// followers, the seed's network partitions NP1-NP8, and followers leaving
// the ISR before the leader crashes (K4/K7); about a third of the seeds also
// reassign a partition among the faults (isr_reassign.go: moves, growth,
// shrinks, cancels; brokers open and delete replicas as the records say). Its checkers: no acks=all
// record or consumed record lost unless the run permits it (an unclean
// election; at least min.insync.replicas brokers losing their page cache
// at once; with ELR off any power loss, the "last replica standing"),
// followers a prefix of the leader below their HW, one leader per epoch,
// no acks=all acknowledgement from a deposed leader of a record the new
// leader lacks, no deposed leader's records in a follower's log, and a
// leader's HW never going back within its epoch;
// permitted loss is counted. isr_script.go is a hand-driven cluster on
// the same cores, on which isr_scenarios.go and isr_catalogue.go run the
// seed's scenarios K1-K21 by name (`quire sim scenario`).
//
// What the package owns: virtual time, the event queue, the models (network,
// bookie journal and fencing, metadata latency and faults), the scenario
// generator and the checkers. What it must never do: start goroutines, read
// the wall clock, or let Go's map iteration order reach the event order
// (every map that is iterated is iterated in sorted key order).
package sim
