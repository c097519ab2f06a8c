package pulsar

// Key_Shared: which consumer of a subscription a message's key belongs to.
//
// The sticky key of an entry is its first message's key: the ordering_key
// if set, else the partition_key (base64-decoded when the producer flagged
// it so), else a fixed key that every keyless message shares ("NONE_KEY",
// as in Pulsar). The entry's MessageMetadata is looked at first; for a
// batch whose MessageMetadata names no key the first SingleMessageMetadata
// is (when the batch is neither compressed nor encrypted). An entry goes
// whole to one consumer, so a batch mixing keys goes to its first
// message's consumer: Pulsar's clients use key-based batching for
// Key_Shared producers (a batch then holds one key), and Pulsar's broker
// does the same with a mixed batch. Deviation: Pulsar reads only the
// MessageMetadata, so a key-based batch of ordering-keyed messages from
// pulsar-client-go (which puts the ordering key only in the
// SingleMessageMetadata) is routed there by its partition key; here by its
// ordering key, which is what its consumer sees.
//
// The key hashes to a slot in Pulsar's range of 2^16 (StickyKeyConsumer-
// Selector.DEFAULT_RANGE_SIZE): Murmur3_32 (x86, seed 0) of the key bytes,
// its sign bit cleared as Java's Murmur3_32Hash does, modulo 65536; slot 0
// is reserved (Pulsar 4 uses it for "not set") and becomes 1. A STICKY
// consumer that declares a range therefore gets the keys it would get from
// Apache Pulsar.
//
// AUTO_SPLIT places 100 points per consumer on a ring of those slots
// (Pulsar's subscriptionKeySharedConsistentHashingReplicaPoints default),
// the slot of "<consumer name>\0<name index>\0<point>"; the name index
// tells apart consumers that share a name. A key belongs to the first point
// at or after its slot, wrapping around. When two points collide the
// consumer that joined first keeps it, and the next one in join order takes
// it over when that one leaves (Pulsar 4's rule). Deviation: Pulsar 4.0
// places points with (hash mod 65535) + 1, so which consumer owns which key
// differs in detail; no client can observe that beyond the admin stats.
//
// With Config.KeySharedAutoSplitHalves (Pulsar's
// subscriptionKeySharedUseConsistentHashing=false) AUTO_SPLIT instead
// splits ranges as Pulsar's HashRangeAutoSplitStickyKeyConsumerSelector
// does: the first consumer owns every slot (its point is 65536); each next
// one takes the lower half of the widest range (the lowest of equally wide
// ones); a leaving consumer's range goes to the consumer above it, or,
// when it held the top range, to the one below. Two consumers therefore
// always own a half each. A consumer that finds no range of two slots
// left is refused with ConsumerAssignError, as in Pulsar.
//
// STICKY consumers declare inclusive ranges of slots in KeySharedMeta; a
// range out of [0, 65535], empty, overlapping the consumer's own or another
// consumer's is refused with ConsumerAssignError. A key in no declared
// range is delivered to nobody until a consumer declares it (Pulsar's
// documentation: the ranges should cover the whole space).
//
// Every consumer of a Key_Shared subscription must use the same mode and
// allowOutOfOrderDelivery as those attached (ConsumerBusy otherwise), as in
// Pulsar, which keeps one selector per subscription.

import (
	"encoding/base64"
	"encoding/binary"
	"errors"
	"math/bits"
	"slices"
	"sort"
	"strconv"

	"google.golang.org/protobuf/proto"

	pb "quire/internal/pulsar/pulsarpb"
)

// ErrConsumerAssign refuses a consumer the Key_Shared selector cannot take
// (STICKY ranges that are invalid or overlap): ServerError
// ConsumerAssignError.
var ErrConsumerAssign = errors.New("pulsar: consumer assign")

const (
	// hashRangeSize is the number of Key_Shared hash slots (Pulsar's
	// DEFAULT_RANGE_SIZE, 2 << 15).
	hashRangeSize = 1 << 16
	// ringPointsPerConsumer is how many points an AUTO_SPLIT consumer puts
	// on the ring (Pulsar's default replica points).
	ringPointsPerConsumer = 100
)

// noneKey is the sticky key of messages without one (Pulsar's NONE_KEY).
var noneKey = []byte("NONE_KEY")

// keyHash is a Key_Shared slot, in [1, 65535]; 0 means "not known".
type keyHash int32

// hashRange is an inclusive range of slots.
type hashRange struct{ start, end keyHash }

// murmur3Sum32 is MurmurHash3's x86 32-bit hash (Austin Appleby's
// reference, public domain), the function Pulsar's Murmur3_32Hash computes
// before clearing the sign bit.
func murmur3Sum32(data []byte, seed uint32) uint32 {
	const c1, c2 = 0xcc9e2d51, 0x1b873593
	h := seed
	blocks := len(data) / 4
	for i := range blocks {
		k := binary.LittleEndian.Uint32(data[4*i:])
		k *= c1
		k = bits.RotateLeft32(k, 15)
		k *= c2
		h ^= k
		h = bits.RotateLeft32(h, 13)
		h = h*5 + 0xe6546b64
	}
	var k uint32
	tail := data[4*blocks:]
	switch len(tail) {
	case 3:
		k ^= uint32(tail[2]) << 16
		fallthrough
	case 2:
		k ^= uint32(tail[1]) << 8
		fallthrough
	case 1:
		k ^= uint32(tail[0])
		k *= c1
		k = bits.RotateLeft32(k, 15)
		k *= c2
		h ^= k
	}
	h ^= uint32(len(data))
	h ^= h >> 16
	h *= 0x85ebca6b
	h ^= h >> 13
	h *= 0xc2b2ae35
	h ^= h >> 16
	return h
}

// stickyKeyHash is the slot of a sticky key.
func stickyKeyHash(key []byte) keyHash {
	h := keyHash((murmur3Sum32(key, 0) & 0x7fffffff) % hashRangeSize)
	if h == 0 {
		h = 1 // 0 is "not set", as in Pulsar 4
	}
	return h
}

// KeyHashSlot is the Key_Shared hash slot of a sticky key (a message's
// ordering key, else its partition key), as Apache Pulsar computes it: what
// the hash ranges a STICKY consumer declares are matched against, for tools
// and tests that want to know where a key goes.
func KeyHashSlot(key []byte) int32 { return int32(stickyKeyHash(key)) }

// entryMeta is what dispatch needs from an entry's metadata.
type entryMeta struct {
	messages int32
	// deliverAt is deliver_at_time (milliseconds since the epoch), 0 when
	// none.
	deliverAt int64
	// hash is the sticky key's slot; 0 unless asked for.
	hash keyHash
}

// parseEntryMeta decodes an entry's metadata: its message count (1 when
// the metadata does not decode: the consumer sees the entry as corrupt and
// says so), its delivery time, and, when withKey, its sticky key's slot.
func parseEntryMeta(data []byte, withKey bool) entryMeta {
	f := &Frame{}
	// The CRC was checked when the entry was sent; dispatch only reads.
	if err := f.parsePayload(data); err != nil {
		m := entryMeta{messages: 1}
		if withKey {
			m.hash = stickyKeyHash(noneKey)
		}
		return m
	}
	meta := f.Metadata
	m := entryMeta{messages: 1, deliverAt: meta.GetDeliverAtTime()}
	if meta.NumMessagesInBatch != nil {
		m.messages = max(meta.GetNumMessagesInBatch(), 1)
	}
	if withKey {
		m.hash = stickyKeyHash(stickyKeyOf(meta, f.Payload))
	}
	return m
}

// stickyKeyOf is the sticky key of an entry: see the file's header.
func stickyKeyOf(meta *pb.MessageMetadata, payload []byte) []byte {
	if meta.OrderingKey != nil {
		return meta.OrderingKey
	}
	var first *pb.SingleMessageMetadata
	if meta.NumMessagesInBatch != nil && meta.GetCompression() == pb.CompressionType_NONE && len(meta.GetEncryptionKeys()) == 0 {
		first = firstBatchMetadata(payload)
	}
	if first != nil && first.OrderingKey != nil {
		return first.OrderingKey
	}
	if meta.PartitionKey != nil {
		return partitionKeyBytes(meta.GetPartitionKey(), meta.GetPartitionKeyB64Encoded())
	}
	if first != nil && first.PartitionKey != nil {
		return partitionKeyBytes(first.GetPartitionKey(), first.GetPartitionKeyB64Encoded())
	}
	return noneKey
}

func partitionKeyBytes(key string, b64 bool) []byte {
	if b64 {
		if b, err := base64.StdEncoding.DecodeString(key); err == nil {
			return b
		}
	}
	return []byte(key)
}

// firstBatchMetadata decodes the SingleMessageMetadata of a batch's first
// message, nil when it does not decode.
func firstBatchMetadata(payload []byte) *pb.SingleMessageMetadata {
	if len(payload) < 4 {
		return nil
	}
	size := binary.BigEndian.Uint32(payload)
	if uint64(size) > uint64(len(payload)-4) {
		return nil
	}
	smm := &pb.SingleMessageMetadata{}
	if err := (proto.UnmarshalOptions{AllowPartial: true}).Unmarshal(payload[4:4+size], smm); err != nil {
		return nil
	}
	return smm
}

// keySharedPolicy is what every consumer of a Key_Shared subscription
// agrees on.
type keySharedPolicy struct {
	mode pb.KeySharedMode
	// allowOutOfOrder turns off the wait for a key's messages on another
	// consumer to be acknowledged before the key's new owner gets more.
	allowOutOfOrder bool
}

func keySharedPolicyOf(meta *pb.KeySharedMeta) keySharedPolicy {
	return keySharedPolicy{mode: meta.GetKeySharedMode(), allowOutOfOrder: meta.GetAllowOutOfOrderDelivery()}
}

// ringPoint is one AUTO_SPLIT point: the slots up to it (from the previous
// point) belong to c.
type ringPoint struct {
	slot keyHash
	c    *consumer
}

// stickyRange is one STICKY consumer's declared range.
type stickyRange struct {
	hashRange
	c *consumer
}

// keySelector maps slots to the consumers of one Key_Shared subscription.
// It is not safe for concurrent use: the subscription's lock guards it.
type keySelector struct {
	policy keySharedPolicy
	// members are the consumers in the order they joined.
	members []*consumer
	// ring (AUTO_SPLIT) is sorted by slot, one point per slot.
	ring []ringPoint
	// ranges (STICKY) are sorted by start and never overlap.
	ranges []stickyRange
	// halves: AUTO_SPLIT splits ranges in halves as consumers join
	// (Config.KeySharedAutoSplitHalves; see the header) instead of placing
	// points on a consistent-hashing ring. The ring then holds one point per
	// consumer, the last at hashRangeSize, and changes only by addHalf and
	// removeHalf.
	halves bool
}

func newKeySelector(policy keySharedPolicy) *keySelector {
	return &keySelector{policy: policy}
}

// add attaches c with the key-shared settings it subscribed with.
func (k *keySelector) add(c *consumer, meta *pb.KeySharedMeta) error {
	if p := keySharedPolicyOf(meta); p != k.policy {
		return errorf(ErrConsumerBusy, "Key_Shared subscription is in mode %s (allowOutOfOrderDelivery %v); the consumer asks for %s (%v)",
			k.policy.mode, k.policy.allowOutOfOrder, p.mode, p.allowOutOfOrder)
	}
	switch {
	case k.policy.mode == pb.KeySharedMode_STICKY:
		ranges, err := k.checkRanges(meta.GetHashRanges())
		if err != nil {
			return err
		}
		c.hashRanges = ranges
		for _, r := range ranges {
			k.ranges = append(k.ranges, stickyRange{hashRange: r, c: c})
		}
		sort.Slice(k.ranges, func(i, j int) bool { return k.ranges[i].start < k.ranges[j].start })
		k.members = append(k.members, c)
	case k.halves:
		if err := k.addHalf(c); err != nil {
			return err
		}
		k.members = append(k.members, c)
	default:
		c.nameIndex = k.freeNameIndex(c.name)
		k.members = append(k.members, c)
		k.buildRing()
	}
	return nil
}

// addHalf gives c half of the widest range (the lowest of equally wide
// ones): the first consumer gets every slot, point hashRangeSize; each
// next one takes the lower half of the range it splits (Pulsar's
// HashRangeAutoSplitStickyKeyConsumerSelector). ErrConsumerAssign when no
// range has two slots left to split.
func (k *keySelector) addHalf(c *consumer) error {
	if len(k.ring) == 0 {
		k.ring = append(k.ring, ringPoint{slot: hashRangeSize, c: c})
		return nil
	}
	widest, at := keyHash(0), 0
	lower := keyHash(0)
	for i, p := range k.ring {
		if p.slot-lower > widest {
			widest, at = p.slot-lower, i
		}
		lower = p.slot
	}
	if widest <= 1 {
		return errorf(ErrConsumerAssign, "no hash range left to split for a new consumer (%d consumers)", len(k.ring))
	}
	split := k.ring[at].slot - widest>>1
	k.ring = slices.Insert(k.ring, at, ringPoint{slot: split, c: c})
	return nil
}

// removeHalf gives c's range to its neighbour above, or, when c held the
// top range, to its neighbour below (which then holds the top point), as
// Pulsar does.
func (k *keySelector) removeHalf(c *consumer) {
	i := slices.IndexFunc(k.ring, func(p ringPoint) bool { return p.c == c })
	switch {
	case i < 0:
	case i == len(k.ring)-1 && i > 0:
		k.ring[i].c = k.ring[i-1].c
		k.ring = slices.Delete(k.ring, i-1, i)
	default:
		k.ring = slices.Delete(k.ring, i, i+1)
	}
}

// checkRanges validates a STICKY consumer's ranges against themselves and
// the attached consumers'.
func (k *keySelector) checkRanges(declared []*pb.IntRange) ([]hashRange, error) {
	if len(declared) == 0 {
		return nil, errorf(ErrConsumerAssign, "a STICKY Key_Shared consumer must declare hash ranges")
	}
	ranges := make([]hashRange, 0, len(declared))
	for _, r := range declared {
		start, end := r.GetStart(), r.GetEnd()
		if start < 0 || end >= hashRangeSize || start > end {
			return nil, errorf(ErrConsumerAssign, "hash range [%d, %d] is not within [0, %d]", start, end, hashRangeSize-1)
		}
		ranges = append(ranges, hashRange{keyHash(start), keyHash(end)})
	}
	sort.Slice(ranges, func(i, j int) bool { return ranges[i].start < ranges[j].start })
	for i := 1; i < len(ranges); i++ {
		if ranges[i].start <= ranges[i-1].end {
			return nil, errorf(ErrConsumerAssign, "the consumer's own ranges [%d, %d] and [%d, %d] overlap",
				ranges[i-1].start, ranges[i-1].end, ranges[i].start, ranges[i].end)
		}
	}
	for _, r := range ranges {
		for _, o := range k.ranges {
			if max(r.start, o.start) <= min(r.end, o.end) {
				return nil, errorf(ErrConsumerAssign, "hash range [%d, %d] overlaps [%d, %d] of consumer %q",
					r.start, r.end, o.start, o.end, o.c.name)
			}
		}
	}
	return ranges, nil
}

// freeNameIndex is the lowest index no member with that name uses.
func (k *keySelector) freeNameIndex(name string) int {
	used := map[int]bool{}
	for _, m := range k.members {
		if m.name == name {
			used[m.nameIndex] = true
		}
	}
	i := 0
	for used[i] {
		i++
	}
	return i
}

// remove detaches c.
func (k *keySelector) remove(c *consumer) {
	i := slices.Index(k.members, c)
	if i < 0 {
		return
	}
	k.members = slices.Delete(k.members, i, i+1)
	k.ranges = slices.DeleteFunc(k.ranges, func(r stickyRange) bool { return r.c == c })
	switch {
	case k.policy.mode == pb.KeySharedMode_STICKY:
	case k.halves:
		k.removeHalf(c)
	default:
		k.buildRing()
	}
}

// buildRing places every member's points, in join order, so that the
// earliest member keeps a contested slot.
func (k *keySelector) buildRing() {
	k.ring = k.ring[:0]
	taken := make(map[keyHash]bool, len(k.members)*ringPointsPerConsumer)
	for _, c := range k.members {
		prefix := c.name + "\x00" + strconv.Itoa(c.nameIndex) + "\x00"
		for i := range ringPointsPerConsumer {
			slot := stickyKeyHash([]byte(prefix + strconv.Itoa(i)))
			if taken[slot] {
				continue
			}
			taken[slot] = true
			k.ring = append(k.ring, ringPoint{slot: slot, c: c})
		}
	}
	sort.Slice(k.ring, func(i, j int) bool { return k.ring[i].slot < k.ring[j].slot })
}

// pick is the consumer a slot belongs to, nil when none.
func (k *keySelector) pick(h keyHash) *consumer {
	if k.policy.mode == pb.KeySharedMode_STICKY {
		i := sort.Search(len(k.ranges), func(i int) bool { return k.ranges[i].start > h }) - 1
		if i >= 0 && h <= k.ranges[i].end {
			return k.ranges[i].c
		}
		return nil
	}
	if len(k.ring) == 0 {
		return nil
	}
	i := sort.Search(len(k.ring), func(i int) bool { return k.ring[i].slot >= h })
	if i == len(k.ring) {
		i = 0 // past the last point: the ring wraps around
	}
	return k.ring[i].c
}

// rangesOf is the slots c owns, as inclusive ranges in slot order (for
// stats: Pulsar's keyHashRanges).
func (k *keySelector) rangesOf(c *consumer) []hashRange {
	if k.policy.mode == pb.KeySharedMode_STICKY {
		return slices.Clone(c.hashRanges)
	}
	var out []hashRange
	add := func(start, end keyHash) {
		end = min(end, hashRangeSize-1) // the halves' top point is hashRangeSize
		if start > end {
			return
		}
		if n := len(out); n > 0 && out[n-1].end+1 == start {
			out[n-1].end = end
			return
		}
		out = append(out, hashRange{start, end})
	}
	if len(k.ring) == 0 {
		return nil
	}
	// The slots after the last point wrap around to the first.
	first := k.ring[0]
	if first.c == c {
		add(0, first.slot)
	}
	for i := 1; i < len(k.ring); i++ {
		if k.ring[i].c == c {
			add(k.ring[i-1].slot+1, k.ring[i].slot)
		}
	}
	if first.c == c {
		add(k.ring[len(k.ring)-1].slot+1, hashRangeSize-1)
	}
	return out
}

// keyConsumerLocked is the Key_Shared consumer an entry of slot h may go to
// now, nil when it must wait: an earlier entry of the slot waits in the
// redelivery set (newEntry) or was held back this round (held), no
// consumer owns the slot, its owner cannot take more, or the slot still
// drains on another consumer.
func (sub *subscription) keyConsumerLocked(h keyHash, newEntry bool, held map[keyHash]bool) *consumer {
	if held[h] || (newEntry && sub.replayHashes[h] > 0) {
		return nil
	}
	c := sub.keys.pick(h)
	if c == nil || !sub.canReceiveLocked(c) {
		return nil
	}
	if holder, ok := sub.pendingHashes[h]; ok && holder.c != c && !sub.keys.policy.allowOutOfOrder {
		return nil
	}
	return c
}

// keySharedReplayLocked keeps, of the redelivery set's entries in position
// order, the first maxEntries that may go out now: a slot's entries are
// taken in order, up to its first that must wait; an entry whose slot is
// not known yet is taken (reading it teaches its slot).
func (sub *subscription) keySharedReplayLocked(ids []MessageID, maxEntries int) []MessageID {
	out := ids[:0]
	held := map[keyHash]bool{}
	for _, id := range ids {
		if len(out) == maxEntries {
			break
		}
		h := sub.replay[id]
		if h != 0 && sub.keyConsumerLocked(h, false, held) == nil {
			held[h] = true
			continue
		}
		out = append(out, id)
	}
	return out
}
