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
// order, a modelled ledger service and metadata outages).
//
// What the package owns: virtual time, the event queue, the models (network,
// bookie journal and fencing, metadata latency and faults), the scenario
// generator and the checkers. What it must never do: start goroutines, read
// the wall clock, or let Go's map iteration order reach the event order
// (every map that is iterated is iterated in sorted key order).
package sim
