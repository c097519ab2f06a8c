package chaos

import (
	"fmt"
	"sort"
	"time"
)

// maxListed bounds how many examples of each anomaly a Result keeps; the
// counts are always complete.
const maxListed = 20

// Result is the checker's verdict over one history.
type Result struct {
	Invoked, Acked, Failed, Unknown int
	// Read is the number of records the final read returned.
	Read int
	// Lost: acknowledged values the final read did not return.
	Lost int
	// Duplicated: values the final read returned more than once.
	Duplicated int
	// Reordered: pairs of one producer's acknowledged records on one
	// partition whose offsets are not in the order the producer sent them.
	Reordered int
	// OffsetConflicts: acknowledgements of an offset that the log holds a
	// different value at (or that two acknowledgements share).
	OffsetConflicts int
	// FailedPresent: values whose produce failed definitely but that the log
	// holds anyway.
	FailedPresent int
	// Phantoms: values read that no producer ever sent.
	Phantoms int
	// UnknownPresent: values with an unknown outcome that the log holds
	// (allowed: reported for information).
	UnknownPresent int
	// Unread: acknowledged values on partitions whose final read did not
	// finish (an interrupted run): neither lost nor found.
	Unread int
	// Linearizable is porcupine's verdict per partition (see linearizable.go).
	Linearizable map[int32]string
	// Examples holds up to maxListed descriptions of each anomaly.
	Examples []string
	// Unavailable is the time, from the first acknowledgement to the end of
	// the produce phase, spent in whole seconds without any acknowledgement.
	Unavailable time.Duration
	// CommitsAcked and CommitsObserved count the group workload's
	// acknowledged offset commits (per partition) and the committed
	// offsets the coordinator answered (groups.go).
	CommitsAcked, CommitsObserved int
	// CommitsBackwards: answers of a committed offset lower than a commit
	// of that partition acknowledged before the answer was asked for.
	// Never permitted.
	CommitsBackwards int
	// Consumed counts the records the group member polled during the run;
	// ConsumedVanished those the final read does not hold at the offset
	// they were polled at (absent, or another value there): a read of a
	// record that later vanished. Never permitted: consumers read only
	// committed records (below the high watermark in ISR mode, the last
	// add-confirmed entry in ledger mode), which no loss the harness
	// permits takes away (acks=1 loses only what was never replicated;
	// unclean election, which could, is not run).
	Consumed, ConsumedVanished int
	// Permits: what the run's configuration allows; those anomalies are
	// counted as always but do not make the result invalid.
	Permits Permits
}

// Permits lists the anomalies a configuration allows by design, so that
// the checker measures and reports them instead of failing (issue 16: "for
// configurations that permit loss, the loss is measured").
type Permits struct {
	// Loss: acknowledged records may vanish (acks=1; unclean election).
	// Loss brings offset conflicts with it (the new leader writes other
	// records at the lost records' offsets) and makes the partition's
	// history non-linearizable, so those are permitted too.
	Loss bool
	// Duplicates: producers that cannot be idempotent (acks=1) may write a
	// record twice when they retry.
	Duplicates bool
	// Why names the configuration, for the summary ("acks=1").
	Why string
}

// Valid reports whether the history shows no anomaly the configuration
// does not permit: nothing lost, duplicated, reordered, overwritten,
// resurrected or invented, and every partition linearizable (or too large
// to check, which Linearizable says). Reordering, resurrection and
// phantoms are never permitted.
func (r Result) Valid() bool {
	if r.Reordered+r.FailedPresent+r.Phantoms+r.CommitsBackwards+r.ConsumedVanished > 0 {
		return false
	}
	if !r.Permits.Loss && r.Lost+r.OffsetConflicts > 0 {
		return false
	}
	if !r.Permits.Duplicates && r.Duplicated > 0 {
		return false
	}
	if r.Permits.Loss {
		return true
	}
	for _, v := range r.Linearizable {
		if v == linearizableIllegal || v == linearizableIllegalDirect {
			return false
		}
	}
	return true
}

// produceOp is one produce operation assembled from its events.
type produceOp struct {
	producer  int
	seq       int64
	value     string
	partition int32
	call      time.Time
	ret       time.Time // zero while the outcome is unknown
	outcome   Kind      // KindOK, KindFail or KindInfo (also for no outcome at all)
	offset    int64     // KindOK: the acknowledged offset
}

// readRecord is one record the final read returned.
type readRecord struct {
	partition int32
	offset    int64
	value     string
}

// Check runs every check over a history. It assumes the final read of each
// partition covers the whole log (from offset 0 to the end offset at the
// time of the read), which the workload guarantees.
func Check(events []Event) Result {
	var r Result
	ops, reads, readWindows := assemble(events)
	note := func(format string, args ...any) {
		if len(r.Examples) < maxListed*4 {
			r.Examples = append(r.Examples, fmt.Sprintf(format, args...))
		}
	}

	// What the log holds: value → where it was read (first occurrence),
	// and (partition, offset) → value.
	readAt := map[string]readRecord{}
	readCount := map[string]int{}
	type position struct {
		partition int32
		offset    int64
	}
	logAt := map[position]string{}
	for _, rec := range reads {
		r.Read++
		readCount[rec.value]++
		if readCount[rec.value] == 1 {
			readAt[rec.value] = rec
		} else if readCount[rec.value] == 2 {
			r.Duplicated++
			first := readAt[rec.value]
			note("duplicated: %s at partition %d offsets %d and %d", rec.value, rec.partition, first.offset, rec.offset)
		}
		logAt[position{rec.partition, rec.offset}] = rec.value
	}

	byValue := map[string]*produceOp{}
	ackedAt := map[position]string{}
	for _, op := range ops {
		byValue[op.value] = op
		r.Invoked++
		_, present := readAt[op.value]
		switch op.outcome {
		case KindOK:
			r.Acked++
			if !present && !readDone(readWindows, op.partition) {
				r.Unread++
			} else if !present {
				r.Lost++
				note("lost: %s acknowledged at partition %d offset %d, not read back", op.value, op.partition, op.offset)
			}
			pos := position{op.partition, op.offset}
			if other, ok := ackedAt[pos]; ok {
				r.OffsetConflicts++
				note("offset reused: partition %d offset %d acknowledged for %s and %s", op.partition, op.offset, other, op.value)
			}
			ackedAt[pos] = op.value
			if v, ok := logAt[pos]; ok && v != op.value {
				r.OffsetConflicts++
				note("offset reused: %s acknowledged at partition %d offset %d, which holds %s", op.value, op.partition, op.offset, v)
			}
		case KindFail:
			r.Failed++
			if present {
				r.FailedPresent++
				note("failed but present: %s (%s) read at partition %d offset %d", op.value, "definite failure", readAt[op.value].partition, readAt[op.value].offset)
			}
		default:
			r.Unknown++
			if present {
				r.UnknownPresent++
			}
		}
	}
	for _, rec := range reads {
		if byValue[rec.value] == nil {
			r.Phantoms++
			note("phantom: %s at partition %d offset %d was never produced", rec.value, rec.partition, rec.offset)
		}
	}

	// Per producer and partition, acknowledged records must sit in the log
	// in the order the producer sent them (sequence order).
	type stream struct {
		producer  int
		partition int32
	}
	streams := map[stream][]*produceOp{}
	for _, op := range ops {
		if op.outcome == KindOK {
			if _, ok := readAt[op.value]; ok {
				s := stream{op.producer, op.partition}
				streams[s] = append(streams[s], op)
			}
		}
	}
	for s, list := range streams {
		sort.Slice(list, func(i, j int) bool { return list[i].seq < list[j].seq })
		for i := 1; i < len(list); i++ {
			prev, cur := readAt[list[i-1].value], readAt[list[i].value]
			if cur.offset <= prev.offset {
				r.Reordered++
				note("reordered: producer %d partition %d: %s at offset %d after %s at offset %d",
					s.producer, s.partition, list[i].value, cur.offset, list[i-1].value, prev.offset)
			}
		}
	}

	r.Linearizable = checkLinearizable(ops, readAt, reads, readWindows)
	r.Unavailable = unavailable(ops)
	checkCommits(&r, events, note)
	for _, e := range events {
		if e.Kind != KindConsumed {
			continue
		}
		r.Consumed++
		if !readDone(readWindows, e.Partition) {
			continue
		}
		if v, ok := logAt[position{e.Partition, e.Offset}]; !ok || v != e.Value {
			r.ConsumedVanished++
			if !ok {
				v = "nothing"
			}
			note("read then vanished: %s consumed at partition %d offset %d, where the final read has %s", e.Value, e.Partition, e.Offset, v)
		}
	}
	return r
}

// checkCommits holds every committed-offset answer to the commits
// acknowledged before it was asked for: it must not be lower than any of
// them (a committed offset never goes backwards).
func checkCommits(r *Result, events []Event, note func(string, ...any)) {
	type ack struct {
		at     time.Time
		offset int64
	}
	acks := map[int32][]ack{}
	var observed []Event
	for _, e := range events {
		switch e.Kind {
		case KindCommitOK:
			r.CommitsAcked++
			acks[e.Partition] = append(acks[e.Partition], ack{e.Time, e.Offset})
		case KindCommitted:
			r.CommitsObserved++
			observed = append(observed, e)
		}
	}
	for _, list := range acks {
		sort.Slice(list, func(i, j int) bool { return list[i].at.Before(list[j].at) })
	}
	for _, o := range observed {
		list := acks[o.Partition]
		// The highest offset acknowledged before the observation started.
		floor, floorAt := int64(-1), time.Time{}
		for _, a := range list {
			if !a.at.Before(o.Time) {
				break
			}
			if a.offset > floor {
				floor, floorAt = a.offset, a.at
			}
		}
		if o.Offset < floor {
			r.CommitsBackwards++
			note("commit went back: partition %d committed offset %d acknowledged at %s, a fetch started at %s answered %d",
				o.Partition, floor, floorAt.Format("15:04:05.000"), o.Time.Format("15:04:05.000"), o.Offset)
		}
	}
}

// readDone reports whether the final read of partition finished.
func readDone(windows map[int32][2]time.Time, partition int32) bool {
	return !windows[partition][1].IsZero()
}

// assemble pairs invokes with their outcomes and collects the final read.
func assemble(events []Event) ([]*produceOp, []readRecord, map[int32][2]time.Time) {
	var ops []*produceOp
	open := map[string]*produceOp{}
	var reads []readRecord
	windows := map[int32][2]time.Time{}
	for _, e := range events {
		switch e.Kind {
		case KindInvoke:
			op := &produceOp{producer: e.Producer, seq: e.Seq, value: e.Value, partition: e.Partition, call: e.Time, outcome: KindInfo}
			ops = append(ops, op)
			open[e.Value] = op
		case KindOK, KindFail, KindInfo:
			op := open[e.Value]
			if op == nil {
				continue // an outcome without its invoke: ignore rather than guess
			}
			delete(open, e.Value)
			op.outcome = e.Kind
			if e.Kind != KindInfo {
				op.ret = e.Time
			}
			if e.Kind == KindOK {
				op.offset = e.Offset
			}
		case KindRead:
			reads = append(reads, readRecord{partition: e.Partition, offset: e.Offset, value: e.Value})
		case KindReadStart:
			w := windows[e.Partition]
			w[0] = e.Time
			windows[e.Partition] = w
		case KindReadEnd:
			w := windows[e.Partition]
			w[1] = e.Time
			windows[e.Partition] = w
		}
	}
	return ops, reads, windows
}

// unavailable counts whole seconds, between the first acknowledgement and
// the last produce event, in which nothing was acknowledged.
func unavailable(ops []*produceOp) time.Duration {
	var first, last time.Time
	acks := map[int64]bool{}
	for _, op := range ops {
		if op.call.After(last) {
			last = op.call
		}
		if op.ret.After(last) {
			last = op.ret
		}
		if op.outcome != KindOK {
			continue
		}
		if first.IsZero() || op.ret.Before(first) {
			first = op.ret
		}
	}
	if first.IsZero() {
		return 0
	}
	for _, op := range ops {
		if op.outcome == KindOK {
			acks[int64(op.ret.Sub(first)/time.Second)] = true
		}
	}
	var idle time.Duration
	for s := int64(0); s < int64(last.Sub(first)/time.Second); s++ {
		if !acks[s] {
			idle += time.Second
		}
	}
	return idle
}
