package group

// OffsetCommit v0–v9, OffsetFetch v0–v9, OffsetDelete v0, DeleteGroups v0–v2
// on the state machine. Committed offsets change only through an OffsetWrite
// that the shell makes durable first (ApplyWrite after the store write,
// AbortWrite when the store write fails).
//
// Deviations from Kafka:
//   - Topic ids (OffsetCommit v10+, OffsetFetch v10+) are not resolved: the
//     front end must not advertise those versions.
//   - Topics are not checked for existence (Kafka answers
//     UNKNOWN_TOPIC_OR_PARTITION for unknown ones); offsets for any name are kept.
//   - Offset expiry (offsets.retention.minutes, KIP-211) counts from when the
//     group became Empty only while this coordinator has seen it so; after
//     a load it counts from each offset's commit time (Kafka's rule for
//     groups without a state timestamp).
//   - RequireStable answers UNSTABLE_OFFSET_COMMIT for partitions with a
//     transaction's offsets pending (txnoffsets.go).

import (
	"encoding/json"
	"fmt"
	"sort"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"quire/internal/invariants"
)

// TopicPartition names one partition of one topic.
type TopicPartition struct {
	Topic     string
	Partition int32
}

// Offset is one committed offset.
type Offset struct {
	Offset      int64
	LeaderEpoch int32 // -1: unknown
	Metadata    string
	// CommitMillis is when it was committed (Unix ms); ExpireMillis the
	// client's requested expiry (OffsetCommit v1–v4), -1 when none.
	CommitMillis int64
	ExpireMillis int64
}

// OffsetWrite is a change to a group's committed offsets, to be made durable
// before ApplyWrite and before the request it came from is answered.
type OffsetWrite struct {
	Set    map[TopicPartition]Offset
	Delete []TopicPartition
	// DeleteGroup removes the group with all its offsets (DeleteGroups).
	DeleteGroup bool
	// TxnSet holds offsets a transactional producer (TxnProducer)
	// committed with TxnOffsetCommit: pending until its transaction ends.
	// Resolve ends one: its pending offsets become committed or are
	// dropped (txnoffsets.go).
	TxnProducer int64
	TxnSet      map[TopicPartition]Offset
	Resolve     *TxnResolve

	// commitIndexes locate the accepted partitions in the OffsetCommit
	// response, to fail them if the write fails.
	commitIndexes [][2]int
	// deleteIndexes likewise for OffsetDelete, txnIndexes for
	// TxnOffsetCommit.
	deleteIndexes [][2]int
	txnIndexes    [][2]int
}

// ValidateCommit checks an OffsetCommit. The response carries the error of
// every rejected partition; the accepted ones are in the write (nil when
// none), answered with no error once it is durable, or failed with FailCommit.
func (g *Group) ValidateCommit(now time.Time, req *kmsg.OffsetCommitRequest) (*kmsg.OffsetCommitResponse, *OffsetWrite) {
	resp := kmsg.NewPtrOffsetCommitResponse()
	resp.Version = req.Version
	for _, t := range req.Topics {
		rt := kmsg.OffsetCommitResponseTopic{Topic: t.Topic, TopicID: t.TopicID}
		for _, p := range t.Partitions {
			rt.Partitions = append(rt.Partitions, kmsg.OffsetCommitResponseTopicPartition{Partition: p.Partition})
		}
		resp.Topics = append(resp.Topics, rt)
	}
	generation, memberID, instanceID := req.Generation, req.MemberID, req.InstanceID
	if req.Version == 0 {
		generation, memberID, instanceID = -1, "", nil
	}
	if err := g.validateCommit(now, generation, memberID, instanceID); err != nil {
		FailCommit(resp, nil, err)
		return resp, nil
	}
	w := &OffsetWrite{Set: map[TopicPartition]Offset{}}
	nowMillis := now.UnixMilli()
	for ti, t := range req.Topics {
		for pi, p := range t.Partitions {
			o, ok := g.newOffset(p.Offset, p.Metadata, nowMillis)
			if !ok {
				resp.Topics[ti].Partitions[pi].ErrorCode = kerr.OffsetMetadataTooLarge.Code
				continue
			}
			if req.Version >= 6 {
				o.LeaderEpoch = p.LeaderEpoch
			}
			if req.Version == 1 && p.Timestamp >= 0 {
				o.CommitMillis = p.Timestamp
			}
			if req.Version >= 2 && req.Version <= 4 && req.RetentionTimeMillis >= 0 {
				o.ExpireMillis = nowMillis + req.RetentionTimeMillis
			}
			w.Set[TopicPartition{t.Topic, p.Partition}] = o
			w.commitIndexes = append(w.commitIndexes, [2]int{ti, pi})
		}
	}
	if len(w.Set) == 0 {
		return resp, nil
	}
	return resp, w
}

// newOffset is a committed offset as a commit request gives it, committed
// at nowMillis; false when its metadata is too large.
func (g *Group) newOffset(offset int64, metadata *string, nowMillis int64) (Offset, bool) {
	md := ""
	if metadata != nil {
		md = *metadata
	}
	if len(md) > g.cfg.MaxMetadataBytes {
		return Offset{}, false
	}
	return Offset{Offset: offset, LeaderEpoch: -1, Metadata: md, CommitMillis: nowMillis, ExpireMillis: -1}, true
}

// validateCommit is Kafka's validateOffsetCommit plus the state checks.
func (g *Group) validateCommit(now time.Time, generation int32, memberID string, instanceID *string) *kerr.Error {
	if !g.exists {
		if generation < 0 {
			return nil // a simple (standalone) commit creates the group
		}
		return kerr.IllegalGeneration
	}
	if g.state == Dead {
		return kerr.CoordinatorNotAvailable
	}
	if generation >= 0 || memberID != "" || instanceID != nil {
		if err := g.validateMember(memberID, instanceID); err != nil {
			return err
		}
		if generation != g.generation {
			return kerr.IllegalGeneration
		}
	} else if len(g.members) > 0 {
		// Only members commit for a group that has members.
		return kerr.UnknownMemberID
	}
	switch g.state {
	case CompletingRebalance:
		// The member has the new generation but no assignment yet.
		return kerr.RebalanceInProgress
	case Stable, PreparingRebalance:
		if m := g.byID[memberID]; m != nil {
			m.sessionDeadline = now.Add(m.sessionTimeout)
		}
	}
	return nil
}

// FailCommit sets err on the partitions of the write (every partition when w is nil).
func FailCommit(resp *kmsg.OffsetCommitResponse, w *OffsetWrite, err *kerr.Error) {
	if w == nil {
		for ti := range resp.Topics {
			for pi := range resp.Topics[ti].Partitions {
				resp.Topics[ti].Partitions[pi].ErrorCode = err.Code
			}
		}
		return
	}
	for _, ix := range w.commitIndexes {
		resp.Topics[ix[0]].Partitions[ix[1]].ErrorCode = err.Code
	}
}

// ApplyWrite applies a write that is now durable.
func (g *Group) ApplyWrite(w *OffsetWrite) {
	if invariants.Enabled {
		defer g.checkInvariants()
	}
	if w.DeleteGroup {
		// The group has been Dead since DeleteGroup (or Unload), so no
		// member can have joined while the delete was being stored.
		clear(g.offsets)
		g.exists = false
		g.state = Dead
		g.deleting = false
		return
	}
	for tp, o := range w.Set {
		g.offsets[tp] = o
	}
	for _, tp := range w.Delete {
		delete(g.offsets, tp)
	}
	if len(w.Set) > 0 {
		g.exists = true
	}
	g.applyTxn(w)
	if len(w.Delete) > 0 && g.state == Empty && len(g.offsets) == 0 && len(g.members) == 0 {
		// Kafka removes an empty group whose last offsets were deleted.
		g.exists = false
	}
}

// AbortWrite undoes what preparing w did, when w could not be made durable:
// a group whose delete failed is Empty again (unless it was unloaded
// meanwhile). Other writes prepare nothing.
func (g *Group) AbortWrite(w *OffsetWrite) {
	if invariants.Enabled {
		defer g.checkInvariants()
	}
	if w.DeleteGroup && g.deleting {
		g.state = Empty
		g.deleting = false
		g.note("delete failed: group is Empty again")
	}
}

// LoadOffsets replaces the committed offsets with what the store holds.
func (g *Group) LoadOffsets(offsets map[TopicPartition]Offset, protocolType string) {
	g.offsets = offsets
	if len(offsets) > 0 && !g.exists {
		g.exists = true
		if g.protocolType == "" {
			g.protocolType = protocolType
		}
	}
}

// Committed returns the committed offset of one partition.
func (g *Group) Committed(tp TopicPartition) (Offset, bool) {
	o, ok := g.offsets[tp]
	return o, ok
}

// ExpireOffsets returns the write that removes the offsets whose retention
// has passed at now (nil when none), by Kafka's rules: an Empty consumer group
// loses all its offsets retention after it became Empty; a Stable consumer
// group loses those of topics it no longer subscribes to, retention after
// their commit; a standalone group (no protocol type) loses each offset
// retention after its commit. Offsets committed with an explicit retention
// (OffsetCommit v2–v4) expire at their own expiry time instead.
func (g *Group) ExpireOffsets(now time.Time, retention time.Duration) *OffsetWrite {
	if !g.Exists() || len(g.offsets) == 0 {
		return nil
	}
	nowMillis := now.UnixMilli()
	retentionMillis := retention.Milliseconds()
	var base func(o Offset) int64
	subscribed := map[string]bool{}
	switch {
	case g.protocolType == "":
		base = func(o Offset) int64 { return o.CommitMillis }
	case g.state == Empty:
		base = func(o Offset) int64 { return o.CommitMillis }
		if !g.emptySince.IsZero() {
			base = func(Offset) int64 { return g.emptySince.UnixMilli() }
		}
	case g.protocolType == "consumer" && g.state == Stable && g.subscribedKnown:
		base = func(o Offset) int64 { return o.CommitMillis }
		subscribed = g.subscribed
	default:
		return nil
	}
	w := &OffsetWrite{}
	for tp, o := range g.offsets {
		if subscribed[tp.Topic] {
			continue
		}
		expired := nowMillis-base(o) >= retentionMillis
		if o.ExpireMillis >= 0 {
			expired = nowMillis >= o.ExpireMillis
		}
		if expired {
			w.Delete = append(w.Delete, tp)
		}
	}
	if len(w.Delete) == 0 {
		return nil
	}
	sort.Slice(w.Delete, func(i, j int) bool {
		if w.Delete[i].Topic != w.Delete[j].Topic {
			return w.Delete[i].Topic < w.Delete[j].Topic
		}
		return w.Delete[i].Partition < w.Delete[j].Partition
	})
	return w
}

// FetchTopic is one topic of an OffsetFetch: partitions nil means all the
// group has for the topic.
type FetchTopic struct {
	Topic      string
	Partitions []int32
}

// FetchedPartition is one answered partition; Offset -1 when none is committed.
type FetchedPartition struct {
	Partition   int32
	Offset      int64
	LeaderEpoch int32
	Metadata    string
	// Unstable: a transaction's offset for the partition is pending
	// (require_stable fetches get UNSTABLE_OFFSET_COMMIT).
	Unstable bool
}

// FetchedTopic is one answered topic.
type FetchedTopic struct {
	Topic      string
	Partitions []FetchedPartition
}

// Fetch answers OffsetFetch for the named topics (all committed offsets when
// topics is nil). Unknown groups and partitions get offset -1 with no error,
// as in Kafka.
func (g *Group) Fetch(topics []FetchTopic) []FetchedTopic {
	known := g.Exists()
	if topics == nil {
		if !known {
			return nil
		}
		byTopic := map[string][]FetchedPartition{}
		for tp, o := range g.offsets {
			byTopic[tp.Topic] = append(byTopic[tp.Topic], FetchedPartition{tp.Partition, o.Offset, o.LeaderEpoch, o.Metadata, g.Unstable(tp)})
		}
		names := make([]string, 0, len(byTopic))
		for name := range byTopic {
			names = append(names, name)
		}
		sort.Strings(names)
		out := make([]FetchedTopic, 0, len(names))
		for _, name := range names {
			ps := byTopic[name]
			sort.Slice(ps, func(i, j int) bool { return ps[i].Partition < ps[j].Partition })
			out = append(out, FetchedTopic{name, ps})
		}
		return out
	}
	out := make([]FetchedTopic, 0, len(topics))
	for _, t := range topics {
		ft := FetchedTopic{Topic: t.Topic, Partitions: []FetchedPartition{}}
		for _, p := range t.Partitions {
			fp := FetchedPartition{Partition: p, Offset: -1, LeaderEpoch: -1, Unstable: g.Unstable(TopicPartition{t.Topic, p})}
			if o, ok := g.offsets[TopicPartition{t.Topic, p}]; ok && known {
				fp.Offset, fp.LeaderEpoch, fp.Metadata = o.Offset, o.LeaderEpoch, o.Metadata
			}
			ft.Partitions = append(ft.Partitions, fp)
		}
		out = append(out, ft)
	}
	return out
}

// DeleteOffsets handles OffsetDelete: only offsets of topics no member is
// subscribed to may go (GROUP_SUBSCRIBED_TO_TOPIC otherwise).
func (g *Group) DeleteOffsets(req *kmsg.OffsetDeleteRequest) (*kmsg.OffsetDeleteResponse, *OffsetWrite) {
	resp := kmsg.NewPtrOffsetDeleteResponse()
	resp.Version = req.Version
	if !g.Exists() {
		resp.ErrorCode = kerr.GroupIDNotFound.Code
		return resp, nil
	}
	subscribed := func(string) bool { return false }
	switch g.state {
	case Empty:
	case PreparingRebalance, CompletingRebalance, Stable:
		if g.protocolType != "consumer" {
			resp.ErrorCode = kerr.NonEmptyGroup.Code
			return resp, nil
		}
		subscribed = func(topic string) bool { return !g.subscribedKnown || g.subscribed[topic] }
	}
	w := &OffsetWrite{}
	for ti, t := range req.Topics {
		rt := kmsg.OffsetDeleteResponseTopic{Topic: t.Topic}
		for pi, p := range t.Partitions {
			rp := kmsg.OffsetDeleteResponseTopicPartition{Partition: p.Partition}
			if subscribed(t.Topic) {
				rp.ErrorCode = kerr.GroupSubscribedToTopic.Code
			} else {
				w.Delete = append(w.Delete, TopicPartition{t.Topic, p.Partition})
				w.deleteIndexes = append(w.deleteIndexes, [2]int{ti, pi})
			}
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	if len(w.Delete) == 0 {
		return resp, nil
	}
	return resp, w
}

// FailDelete sets err on the partitions of an OffsetDelete write.
func FailDelete(resp *kmsg.OffsetDeleteResponse, w *OffsetWrite, err *kerr.Error) {
	for _, ix := range w.deleteIndexes {
		resp.Topics[ix[0]].Partitions[ix[1]].ErrorCode = err.Code
	}
}

// DeleteGroup handles one group of DeleteGroups: only empty groups go. As in
// Kafka, the group is Dead from here on, before the delete is durable, so
// that nothing joins it meanwhile (a join gets COORDINATOR_NOT_AVAILABLE and
// retries): the write's ApplyWrite then removes an Empty group, and its
// AbortWrite brings the group back.
func (g *Group) DeleteGroup() (*OffsetWrite, *kerr.Error) {
	if invariants.Enabled {
		defer g.checkInvariants()
	}
	if !g.Exists() {
		return nil, kerr.GroupIDNotFound
	}
	if g.state != Empty {
		return nil, kerr.NonEmptyGroup
	}
	g.state = Dead
	g.deleting = true
	return &OffsetWrite{DeleteGroup: true}, nil
}

// storedGroup is the value of a group's key in the metadata store.
type storedGroup struct {
	// Format is 1.
	Format       int            `json:"format"`
	ProtocolType string         `json:"protocolType,omitempty"`
	Offsets      []storedOffset `json:"offsets"`
	// Pending are transactional producers' offsets not yet committed.
	Pending []storedPending `json:"pending,omitempty"`
}

type storedPending struct {
	ProducerID int64          `json:"producerId"`
	Offsets    []storedOffset `json:"offsets"`
}

type storedOffset struct {
	Topic        string `json:"topic"`
	Partition    int32  `json:"partition"`
	Offset       int64  `json:"offset"`
	LeaderEpoch  int32  `json:"leaderEpoch"`
	Metadata     string `json:"metadata,omitempty"`
	CommitMillis int64  `json:"commitMs"`
	ExpireMillis int64  `json:"expireMs,omitempty"`
}

// EncodeWith is the store value the group's offsets have once w is applied,
// or nil when none remain (the key is then deleted).
func (g *Group) EncodeWith(w *OffsetWrite) ([]byte, error) {
	if w.DeleteGroup {
		return nil, nil
	}
	next := make(map[TopicPartition]Offset, len(g.offsets)+len(w.Set))
	for tp, o := range g.offsets {
		next[tp] = o
	}
	for tp, o := range w.Set {
		next[tp] = o
	}
	for _, tp := range w.Delete {
		delete(next, tp)
	}
	pending := g.pendingWith(w, next)
	if len(next) == 0 && len(pending) == 0 {
		return nil, nil
	}
	return encodeGroup(next, pending, g.protocolType)
}

func encodeOffsets(offsets map[TopicPartition]Offset, protocolType string) ([]byte, error) {
	return encodeGroup(offsets, nil, protocolType)
}

func encodeGroup(offsets map[TopicPartition]Offset, pending map[int64]map[TopicPartition]Offset, protocolType string) ([]byte, error) {
	doc := storedGroup{Format: 1, ProtocolType: protocolType, Offsets: storedOffsets(offsets)}
	for pid, os := range pending {
		doc.Pending = append(doc.Pending, storedPending{ProducerID: pid, Offsets: storedOffsets(os)})
	}
	sort.Slice(doc.Pending, func(i, j int) bool { return doc.Pending[i].ProducerID < doc.Pending[j].ProducerID })
	return json.Marshal(doc)
}

// storedOffsets is offsets as stored: sorted by topic and partition.
func storedOffsets(offsets map[TopicPartition]Offset) []storedOffset {
	out := make([]storedOffset, 0, len(offsets))
	for tp, o := range offsets {
		out = append(out, storedOffset{tp.Topic, tp.Partition, o.Offset, o.LeaderEpoch, o.Metadata, o.CommitMillis, o.ExpireMillis})
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Topic != b.Topic {
			return a.Topic < b.Topic
		}
		return a.Partition < b.Partition
	})
	return out
}

// decodeOffsets parses a store value.
func decodeOffsets(value []byte) (map[TopicPartition]Offset, string, error) {
	var doc storedGroup
	if err := json.Unmarshal(value, &doc); err != nil {
		return nil, "", fmt.Errorf("decode group offsets: %w", err)
	}
	if doc.Format != 1 {
		return nil, "", fmt.Errorf("decode group offsets: unknown format %d", doc.Format)
	}
	return offsetsOf(doc.Offsets), doc.ProtocolType, nil
}

// offsetsOf is stored offsets as a map.
func offsetsOf(stored []storedOffset) map[TopicPartition]Offset {
	out := make(map[TopicPartition]Offset, len(stored))
	for _, o := range stored {
		expire := o.ExpireMillis
		if expire == 0 {
			expire = -1
		}
		out[TopicPartition{o.Topic, o.Partition}] = Offset{o.Offset, o.LeaderEpoch, o.Metadata, o.CommitMillis, expire}
	}
	return out
}

// decodePending parses the pending transactional offsets of a store value.
func decodePending(value []byte) (map[int64]map[TopicPartition]Offset, error) {
	var doc storedGroup
	if err := json.Unmarshal(value, &doc); err != nil {
		return nil, fmt.Errorf("decode group offsets: %w", err)
	}
	out := map[int64]map[TopicPartition]Offset{}
	for _, p := range doc.Pending {
		out[p.ProducerID] = offsetsOf(p.Offsets)
	}
	return out, nil
}
