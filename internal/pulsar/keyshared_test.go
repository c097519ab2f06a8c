package pulsar

// Unit tests of Key_Shared's pieces: the hash, the sticky key of an entry,
// the AUTO_SPLIT ring and STICKY ranges, and the delayed-delivery tracker.
// End-to-end tests with the real client are in pulsartest/keyshared_test.go.

import (
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"testing"

	"google.golang.org/protobuf/proto"

	pb "quire/internal/pulsar/pulsarpb"
)

func TestMurmur3Vectors(t *testing.T) {
	// The reference implementation's x86 32-bit vectors, and the Go
	// client's (pulsar-client-go internal/hash_test.go: "hello",
	// 0x248bfa47; "test", 0x3a6bd213 once the sign bit is cleared).
	for _, tc := range []struct {
		in   string
		seed uint32
		want uint32
	}{
		{"", 0, 0},
		{"", 1, 0x514e28b7},
		{"", 0xffffffff, 0x81f16f39},
		{"\x00\x00\x00\x00", 0, 0x2362f9de},
		{"a", 0x9747b28c, 0x7fa09ea6},
		{"ab", 0x9747b28c, 0x74875592},
		{"abc", 0x9747b28c, 0xc84a62dd},
		{"abcd", 0x9747b28c, 0xf0478627},
		{"aaaa", 0x9747b28c, 0x5a97808a},
		{"Hello, world!", 0x9747b28c, 0x24884cba},
		{"The quick brown fox jumps over the lazy dog", 0x9747b28c, 0x2fa826cd},
		{"hello", 0, 0x248bfa47},
		{"test", 0, 0xba6bd213},
	} {
		if got := murmur3Sum32([]byte(tc.in), tc.seed); got != tc.want {
			t.Errorf("murmur3(%q, %#x) = %#08x, want %#08x", tc.in, tc.seed, got, tc.want)
		}
	}
}

func TestStickyKeyHash(t *testing.T) {
	// Pulsar: (Murmur3_32 & 0x7fffffff) % 65536, 0 reserved.
	if got, want := stickyKeyHash([]byte("test")), keyHash(0x3a6bd213%65536); got != want {
		t.Errorf("slot of %q = %d, want %d", "test", got, want)
	}
	if got := stickyKeyHash(nil); got != 1 {
		t.Errorf("slot of the empty key (hash 0) = %d, want 1", got)
	}
	for i := range 10_000 {
		if h := stickyKeyHash([]byte(fmt.Sprint(i))); h < 1 || h >= hashRangeSize {
			t.Fatalf("slot %d out of [1, %d]", h, hashRangeSize-1)
		}
	}
}

func TestStickyKeyOf(t *testing.T) {
	batch := func(first *pb.SingleMessageMetadata) []byte {
		var p []byte
		p = AppendBatchMessage(p, first, []byte("x"))
		return AppendBatchMessage(p, &pb.SingleMessageMetadata{PartitionKey: proto.String("other")}, []byte("y"))
	}
	b64 := base64.StdEncoding.EncodeToString([]byte{0, 1, 2})
	for _, tc := range []struct {
		name    string
		meta    *pb.MessageMetadata
		payload []byte
		want    string
	}{
		{"keyless", &pb.MessageMetadata{}, nil, "NONE_KEY"},
		{"partition key", &pb.MessageMetadata{PartitionKey: proto.String("p")}, nil, "p"},
		{"ordering key first", &pb.MessageMetadata{PartitionKey: proto.String("p"), OrderingKey: []byte("o")}, nil, "o"},
		{"base64 partition key", &pb.MessageMetadata{PartitionKey: proto.String(b64), PartitionKeyB64Encoded: proto.Bool(true)}, nil, "\x00\x01\x02"},
		{"batch: entry's key", &pb.MessageMetadata{NumMessagesInBatch: proto.Int32(2), PartitionKey: proto.String("p")},
			batch(&pb.SingleMessageMetadata{PartitionKey: proto.String("p")}), "p"},
		{"batch: first message's ordering key", &pb.MessageMetadata{NumMessagesInBatch: proto.Int32(2), PartitionKey: proto.String("p")},
			batch(&pb.SingleMessageMetadata{PartitionKey: proto.String("p"), OrderingKey: []byte("o")}), "o"},
		{"batch: first message's partition key", &pb.MessageMetadata{NumMessagesInBatch: proto.Int32(2)},
			batch(&pb.SingleMessageMetadata{PartitionKey: proto.String("first")}), "first"},
		{"compressed batch: entry's metadata only", &pb.MessageMetadata{NumMessagesInBatch: proto.Int32(2), Compression: pb.CompressionType_LZ4.Enum()},
			batch(&pb.SingleMessageMetadata{PartitionKey: proto.String("first")}), "NONE_KEY"},
		{"batch that does not decode", &pb.MessageMetadata{NumMessagesInBatch: proto.Int32(2)}, []byte{0, 0, 0, 9, 1}, "NONE_KEY"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := string(stickyKeyOf(tc.meta, tc.payload)); got != tc.want {
				t.Errorf("sticky key %q, want %q", got, tc.want)
			}
			// The whole entry, as dispatch parses it.
			tc.meta.ProducerName = proto.String("p")
			tc.meta.SequenceId = proto.Uint64(0)
			tc.meta.PublishTime = proto.Uint64(0)
			m := parseEntryMeta(EncodePayload(tc.meta, tc.payload), true)
			if want := stickyKeyHash([]byte(tc.want)); m.hash != want {
				t.Errorf("entry's slot %d, want %d", m.hash, want)
			}
		})
	}
}

func autoSplit(t *testing.T, names ...string) (*keySelector, []*consumer) {
	t.Helper()
	k := newKeySelector(keySharedPolicy{})
	var cs []*consumer
	for i, name := range names {
		c := &consumer{id: uint64(i), name: name}
		if err := k.add(c, nil); err != nil {
			t.Fatal(err)
		}
		cs = append(cs, c)
	}
	return k, cs
}

// owners maps every slot to its consumer.
func owners(k *keySelector) []*consumer {
	out := make([]*consumer, hashRangeSize)
	for h := range out {
		out[h] = k.pick(keyHash(h))
	}
	return out
}

// checkRanges holds rangesOf against pick: every slot is in the ranges of
// exactly the consumer pick names.
func checkRanges(t *testing.T, k *keySelector, cs []*consumer) {
	t.Helper()
	own := owners(k)
	covered := make([]*consumer, hashRangeSize)
	for _, c := range cs {
		for _, r := range k.rangesOf(c) {
			for h := r.start; h <= r.end; h++ {
				if covered[h] != nil {
					t.Fatalf("slot %d in the ranges of %s and %s", h, covered[h].name, c.name)
				}
				covered[h] = c
			}
		}
	}
	for h := range own {
		if own[h] != covered[h] {
			t.Fatalf("slot %d: picked %v, ranges say %v", h, own[h], covered[h])
		}
	}
}

func TestAutoSplitRing(t *testing.T) {
	k, cs := autoSplit(t, "a", "b", "c")
	before := owners(k)
	counts := map[*consumer]int{}
	for _, c := range before {
		if c == nil {
			t.Fatal("a slot without a consumer")
		}
		counts[c]++
	}
	for _, c := range cs {
		// 100 points each: no consumer far from a third.
		if share := float64(counts[c]) / hashRangeSize; share < 0.15 || share > 0.55 {
			t.Errorf("consumer %s owns %.0f%% of the slots", c.name, 100*share)
		}
	}
	checkRanges(t, k, cs)

	// A consumer joining takes slots only for itself; leaving gives back
	// exactly what it took.
	d := &consumer{id: 9, name: "d"}
	if err := k.add(d, nil); err != nil {
		t.Fatal(err)
	}
	after := owners(k)
	moved := 0
	for h := range after {
		if after[h] != before[h] {
			if after[h] != d {
				t.Fatalf("slot %d moved from %s to %s", h, before[h].name, after[h].name)
			}
			moved++
		}
	}
	if moved == 0 {
		t.Fatal("the new consumer got no slot")
	}
	checkRanges(t, k, append(cs, d))
	k.remove(d)
	for h, c := range owners(k) {
		if c != before[h] {
			t.Fatalf("slot %d: %s after the consumer left, %s before it came", h, c.name, before[h].name)
		}
	}

	// Consumers sharing a name get points of their own.
	k2, twins := autoSplit(t, "same", "same")
	if twins[0].nameIndex == twins[1].nameIndex {
		t.Fatal("consumers with one name share a name index")
	}
	counts = map[*consumer]int{}
	for _, c := range owners(k2) {
		counts[c]++
	}
	if counts[twins[0]] == 0 || counts[twins[1]] == 0 {
		t.Fatalf("slots of consumers sharing a name: %d and %d", counts[twins[0]], counts[twins[1]])
	}
}

func sticky(ranges ...int32) *pb.KeySharedMeta {
	m := &pb.KeySharedMeta{KeySharedMode: pb.KeySharedMode_STICKY.Enum()}
	for i := 0; i < len(ranges); i += 2 {
		m.HashRanges = append(m.HashRanges, &pb.IntRange{Start: proto.Int32(ranges[i]), End: proto.Int32(ranges[i+1])})
	}
	return m
}

func TestStickyRanges(t *testing.T) {
	k := newKeySelector(keySharedPolicy{mode: pb.KeySharedMode_STICKY})
	a, b := &consumer{name: "a"}, &consumer{name: "b"}
	if err := k.add(a, sticky(0, 99, 200, 299)); err != nil {
		t.Fatal(err)
	}
	if err := k.add(b, sticky(100, 199)); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		slot keyHash
		want *consumer
	}{{0, a}, {99, a}, {100, b}, {199, b}, {200, a}, {299, a}, {300, nil}, {65535, nil}} {
		if got := k.pick(tc.slot); got != tc.want {
			t.Errorf("slot %d: %v, want %v", tc.slot, got, tc.want)
		}
	}
	checkRanges(t, k, []*consumer{a, b})
	for _, tc := range []struct {
		name string
		meta *pb.KeySharedMeta
		want error
	}{
		{"overlaps another consumer's", sticky(250, 400), ErrConsumerAssign},
		{"overlaps at one slot", sticky(299, 299), ErrConsumerAssign},
		{"overlaps itself", sticky(1000, 2000, 1500, 2500), ErrConsumerAssign},
		{"beyond the range", sticky(60000, 65536), ErrConsumerAssign},
		{"negative", sticky(-1, 5), ErrConsumerAssign},
		{"start after end", sticky(900, 800), ErrConsumerAssign},
		{"no ranges", sticky(), ErrConsumerAssign},
		{"another mode", nil, ErrConsumerBusy},
		{"out of order allowed", &pb.KeySharedMeta{KeySharedMode: pb.KeySharedMode_STICKY.Enum(), AllowOutOfOrderDelivery: proto.Bool(true),
			HashRanges: sticky(5000, 6000).HashRanges}, ErrConsumerBusy},
	} {
		if err := k.add(&consumer{name: "x"}, tc.meta); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
	if len(k.members) != 2 {
		t.Fatalf("%d members after refusals, want 2", len(k.members))
	}
	k.remove(b)
	if got := k.pick(150); got != nil {
		t.Errorf("slot 150 after its consumer left: %v", got)
	}
	if err := k.add(&consumer{name: "c"}, sticky(100, 199)); err != nil {
		t.Errorf("a freed range refused: %v", err)
	}
}

func TestDelayedTracker(t *testing.T) {
	d := newDelayedTracker()
	id := func(e int64) MessageID { return MessageID{LedgerID: 1, EntryID: e} }
	d.add(id(0), 300, 0)
	d.add(id(1), 100, 7)
	d.add(id(2), 200, 0)
	d.add(id(3), 100, 0)
	d.remove(id(2))
	if got := d.next(); got != 100 {
		t.Fatalf("next due %d, want 100", got)
	}
	if got := d.popDue(99); len(got) != 0 {
		t.Fatalf("due at 99: %v", got)
	}
	got := d.popDue(250)
	if len(got) != 2 || got[0].id != id(1) || got[0].hash != 7 || got[1].id != id(3) {
		t.Fatalf("due at 250: %v, want entries 1 (slot 7) and 3", got)
	}
	if d.len() != 1 || d.next() != 300 {
		t.Fatalf("left %d entries, next due %d; want 1, 300", d.len(), d.next())
	}
	d.reset()
	if d.len() != 0 || d.next() != 0 {
		t.Fatal("entries left after reset")
	}
}

// TestKeySelectorHalves: with Config.KeySharedAutoSplitHalves, consumers
// split the widest range in halves as they join (the lowest of equally
// wide ones, the newcomer taking the lower half) and a leaving consumer's
// range goes to its neighbour above, or below for the top range: Pulsar's
// HashRangeAutoSplitStickyKeyConsumerSelector.
func TestKeySelectorHalves(t *testing.T) {
	k := newKeySelector(keySharedPolicy{})
	k.halves = true
	var cs []*consumer
	join := func(name string) *consumer {
		c := &consumer{id: uint64(len(cs)), name: name}
		if err := k.add(c, nil); err != nil {
			t.Fatal(err)
		}
		cs = append(cs, c)
		return c
	}
	leave := func(c *consumer) {
		k.remove(c)
		cs = slices.DeleteFunc(cs, func(o *consumer) bool { return o == c })
	}
	expect := func(step string, want map[*consumer][]hashRange) {
		t.Helper()
		checkRanges(t, k, cs)
		for c, ranges := range want {
			if got := k.rangesOf(c); !slices.Equal(got, ranges) {
				t.Errorf("%s: %s owns %v, want %v", step, c.name, got, ranges)
			}
		}
	}
	a := join("a")
	expect("a joined", map[*consumer][]hashRange{a: {{0, 65535}}})
	b := join("a") // a name shared changes nothing here
	expect("b joined", map[*consumer][]hashRange{b: {{0, 32768}}, a: {{32769, 65535}}})
	c := join("c")
	expect("c joined", map[*consumer][]hashRange{c: {{0, 16384}}, b: {{16385, 32768}}, a: {{32769, 65535}}})
	d := join("d")
	expect("d joined", map[*consumer][]hashRange{c: {{0, 16384}}, b: {{16385, 32768}}, d: {{32769, 49152}}, a: {{49153, 65535}}})
	leave(a)
	expect("a left", map[*consumer][]hashRange{c: {{0, 16384}}, b: {{16385, 32768}}, d: {{32769, 65535}}})
	leave(c)
	expect("c left", map[*consumer][]hashRange{b: {{0, 32768}}, d: {{32769, 65535}}})
	if k.pick(1) != b || k.pick(65535) != d {
		t.Errorf("slots 1 and 65535 go to %s and %s, want b and d", k.pick(1).name, k.pick(65535).name)
	}
}
