package chaos

import (
	"fmt"
	"hash/fnv"
	"math"
	"sort"
	"time"

	"github.com/anishathalye/porcupine"
)

// Linearizability of each partition, checked with porcupine against a log
// model: an append returns the offset it was given, and the final read
// returns the whole log. The model's state is the log's length and a hash
// of its values in order, so a step costs O(1) and a read compares the
// whole prefix at once.
//
// Appends with an unknown outcome are resolved by the final read, which
// covers the whole log: one the log holds is an append that returned the
// offset it was read at, at an unknown time (its return is +∞); one it does
// not hold never took effect and is left out. Any linearization of the
// original history has to place them that way, because the read pins the
// log's content, so this loses nothing and keeps the search free of
// branching. What the check adds to the offset checks in check.go is real
// time: a record acknowledged before another was sent must sit at a lower
// offset, and nothing acknowledged may be missing from a read that started
// after the acknowledgement.

const (
	linearizableOK      = "ok"
	linearizableIllegal = "illegal"
	linearizableTimeout = "unknown (timed out)"
	linearizableDirect  = "ok (direct check)"
	// linearizableIllegalDirect: missingAck found an acknowledged append
	// the final read does not hold where it was acknowledged.
	linearizableIllegalDirect = "illegal (an acknowledged append missing from the read)"
	// maxLinearizableOps bounds a partition's history for porcupine, which
	// caches a bitset of the linearized operations per step, O(n²) bits in
	// all. Larger histories get the direct check.
	maxLinearizableOps = 20000
	// linearizableTimeout bounds the search per partition.
	linearizableCheckTimeout = 30 * time.Second
)

// logState is the model's state: how many values the log holds and a hash
// of them in order.
type logState struct {
	length int64
	hash   uint64
}

func (s logState) append(value string) logState {
	h := fnv.New64a()
	h.Write([]byte(value))
	return logState{length: s.length + 1, hash: (s.hash^h.Sum64())*1099511628211 + uint64(s.length)}
}

// appendInput / appendOutput and readOutput are the operations' values.
type appendInput struct{ value string }
type appendOutput struct{ offset int64 }
type readInput struct{}
type readOutput struct{ log logState }

var logModel = porcupine.Model{
	Init: func() any { return logState{} },
	Step: func(state, input, output any) (bool, any) {
		s := state.(logState)
		switch in := input.(type) {
		case appendInput:
			if output.(appendOutput).offset != s.length {
				return false, s
			}
			return true, s.append(in.value)
		case readInput:
			return output.(readOutput).log == s, s
		}
		return false, s
	},
	Hash: func(state any) uint64 { s := state.(logState); return s.hash ^ uint64(s.length) },
	DescribeOperation: func(input, output any) string {
		if in, ok := input.(appendInput); ok {
			return fmt.Sprintf("append(%s) -> %d", in.value, output.(appendOutput).offset)
		}
		return fmt.Sprintf("read() -> %d records", output.(readOutput).log.length)
	},
}

// checkLinearizable runs the log model over each partition's operations.
func checkLinearizable(ops []*produceOp, readAt map[string]readRecord, reads []readRecord, windows map[int32][2]time.Time) map[int32]string {
	byPartition := map[int32][]porcupine.Operation{}
	for _, op := range ops {
		call := op.call.UnixNano()
		switch {
		case op.outcome == KindOK:
			byPartition[op.partition] = append(byPartition[op.partition], porcupine.Operation{
				ClientId: op.producer, Input: appendInput{op.value}, Call: call,
				Output: appendOutput{op.offset}, Return: op.ret.UnixNano()})
		case op.outcome == KindInfo:
			if rec, ok := readAt[op.value]; ok && rec.partition == op.partition {
				byPartition[op.partition] = append(byPartition[op.partition], porcupine.Operation{
					ClientId: op.producer, Input: appendInput{op.value}, Call: call,
					Output: appendOutput{rec.offset}, Return: math.MaxInt64})
			}
		}
		// A definite failure never took effect; if the log holds it anyway,
		// check.go reports it as failed-but-present.
	}
	logs := map[int32][]readRecord{}
	for _, rec := range reads {
		logs[rec.partition] = append(logs[rec.partition], rec)
	}
	out := map[int32]string{}
	for p, w := range windows {
		recs := logs[p]
		sort.Slice(recs, func(i, j int) bool { return recs[i].offset < recs[j].offset })
		var s logState
		for _, rec := range recs {
			s = s.append(rec.value)
		}
		if w[1].IsZero() {
			continue // the read did not finish: nothing to check against
		}
		history := append(byPartition[p], porcupine.Operation{
			ClientId: 0, Input: readInput{}, Call: w[0].UnixNano(), Output: readOutput{s}, Return: w[1].UnixNano()})
		if missingAck(ops, readAt, p, w[0]) {
			out[p] = linearizableIllegalDirect
			continue
		}
		if len(history) > maxLinearizableOps {
			out[p] = directCheck(byPartition[p])
			continue
		}
		switch porcupine.CheckOperationsTimeout(logModel, history, linearizableCheckTimeout) {
		case porcupine.Ok:
			out[p] = linearizableOK
		case porcupine.Illegal:
			out[p] = linearizableIllegal
		default:
			out[p] = linearizableTimeout
		}
	}
	return out
}

// missingAck reports whether an append to partition acknowledged before
// the final read started (at readStart) is absent from that read, or read
// at another offset than it was acknowledged at. That alone makes the
// history illegal under the log model — the read linearizes after the
// append and returns the whole log — so no search is needed, and
// porcupine's search of such a history (a broken build's) only times out.
func missingAck(ops []*produceOp, readAt map[string]readRecord, partition int32, readStart time.Time) bool {
	for _, op := range ops {
		if op.outcome != KindOK || op.partition != partition || !op.ret.Before(readStart) {
			continue
		}
		if rec, ok := readAt[op.value]; !ok || rec.partition != partition || rec.offset != op.offset {
			return true
		}
	}
	return false
}

// directCheck decides the same question as the log model without a search,
// for histories too large for porcupine. Every append here has a known
// offset (unknown ones were resolved by the read, or left out), and an
// append's offset is its position in any linearization, so the only order
// to check is real time against offsets: no append may have returned before
// another with a lower offset was called. Sorted by offset, each append's
// return must not precede the latest call among those before it. The read
// returns the whole log and starts after everything returned, so it
// linearizes last; its content is what the offset checks in check.go
// compare.
func directCheck(appends []porcupine.Operation) string {
	sorted := append([]porcupine.Operation(nil), appends...)
	sort.Slice(sorted, func(i, j int) bool {
		return sorted[i].Output.(appendOutput).offset < sorted[j].Output.(appendOutput).offset
	})
	latestCall := int64(math.MinInt64)
	for i, op := range sorted {
		if op.Output.(appendOutput).offset != int64(i) {
			return linearizableIllegal // a gap or two appends at one offset
		}
		if op.Return < latestCall {
			return linearizableIllegal
		}
		latestCall = max(latestCall, op.Call)
	}
	return linearizableDirect
}
