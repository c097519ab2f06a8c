package catalog

import (
	"fmt"
	"hash/crc32"
	"sort"
	"strconv"
	"strings"
)

// A namespace's topic names hash into the 32-bit space [0, 0xffffffff],
// which its policies split into bundles by a sorted list of boundaries
// b0=0 < b1 < … < bn=0xffffffff. Bundle i covers [b_i, b_{i+1}), except the
// last, which also includes 0xffffffff (as in Pulsar). A broker owns whole
// bundles; a topic belongs to the bundle containing HashTopicName(name).
//
// Splits add boundaries and are persisted in the namespace policies; bundles
// never merge, so a later boundary list always refines an earlier one.

// FullUpperBound is the last hash value (inclusive upper end of the last bundle).
const FullUpperBound = 0xffffffff

// DefaultNumBundles is the number of bundles of a new namespace.
const DefaultNumBundles = 4

// MaxNumBundles bounds a namespace's bundle count.
const MaxNumBundles = 1 << 16

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// HashTopicName is the bundle hash: CRC-32C (Castagnoli) of the full topic
// name, e.g. of PartitionName(ns, topic, i), then murmur3's 32-bit
// finalizer. CRC alone leaves the top bits of names that differ only in
// their last characters nearly equal — the 8 partitions of a topic landed
// in 2 of 4 bundles — and bundles are ranges of the top bits; the
// finalizer lets every input bit reach every output bit. It is part of the
// persistent contract: changing it would move every topic to another
// bundle.
func HashTopicName(name string) uint32 {
	return fmix32(crc32.Checksum([]byte(name), castagnoli))
}

// fmix32 is murmur3's finalizer (a bijection with full avalanche).
func fmix32(h uint32) uint32 {
	h ^= h >> 16
	h *= 0x85ebca6b
	h ^= h >> 13
	h *= 0xc2b2ae35
	h ^= h >> 16
	return h
}

// Bundle is one hash range of a namespace. It is comparable (a map key).
type Bundle struct {
	Namespace string // "tenant/ns"
	Lower     uint32 // inclusive
	Upper     uint32 // exclusive, except FullUpperBound which is inclusive
}

// Range is the Pulsar-style range name, "0x00000000_0x40000000".
func (b Bundle) Range() string {
	return fmt.Sprintf("0x%08x_0x%08x", b.Lower, b.Upper)
}

// String is "tenant/ns/0x00000000_0x40000000".
func (b Bundle) String() string { return b.Namespace + "/" + b.Range() }

// Contains reports whether hash h falls in the bundle.
func (b Bundle) Contains(h uint32) bool {
	return h >= b.Lower && (h < b.Upper || (b.Upper == FullUpperBound && h == FullUpperBound))
}

// ParseBundle parses a namespace ("tenant/ns") and a range name as produced by Range.
func ParseBundle(ns, rangeName string) (Bundle, error) {
	if _, _, err := ParseNamespace(ns); err != nil {
		return Bundle{}, fmt.Errorf("bundle %s/%s: %w", ns, rangeName, err)
	}
	lo, hi, ok := strings.Cut(rangeName, "_")
	lower, err1 := parseHex32(lo)
	upper, err2 := parseHex32(hi)
	if !ok || err1 != nil || err2 != nil || lower >= upper {
		return Bundle{}, fmt.Errorf("bundle %s/%s: want 0x%%08x_0x%%08x with lower < upper: %w", ns, rangeName, ErrInvalidName)
	}
	return Bundle{Namespace: ns, Lower: lower, Upper: upper}, nil
}

func parseHex32(s string) (uint32, error) {
	digits, ok := strings.CutPrefix(s, "0x")
	if !ok || len(digits) != 8 {
		return 0, fmt.Errorf("%q: not 0x + 8 hex digits", s)
	}
	v, err := strconv.ParseUint(digits, 16, 32)
	return uint32(v), err
}

// EqualBoundaries splits the hash space into n equal ranges:
// boundary i = i·2³²/n, the last one FullUpperBound. n=4 gives
// 0x00000000, 0x40000000, 0x80000000, 0xc0000000, 0xffffffff.
func EqualBoundaries(n int) []uint32 {
	out := make([]uint32, n+1)
	for i := 1; i < n; i++ {
		out[i] = uint32(uint64(i) << 32 / uint64(n))
	}
	out[n] = FullUpperBound
	return out
}

// validateBoundaries checks 0 = b0 < b1 < … < bn = FullUpperBound, n ≥ 1.
func ValidateBoundaries(bounds []uint32) error {
	if len(bounds) < 2 || len(bounds) > MaxNumBundles+1 {
		return fmt.Errorf("%d boundaries, want 2..%d", len(bounds), MaxNumBundles+1)
	}
	if bounds[0] != 0 || bounds[len(bounds)-1] != FullUpperBound {
		return fmt.Errorf("boundaries must start at 0x00000000 and end at 0xffffffff")
	}
	for i := 1; i < len(bounds); i++ {
		if bounds[i] <= bounds[i-1] {
			return fmt.Errorf("boundaries not strictly increasing at %d", i)
		}
	}
	return nil
}

// BundlesOf lists the bundles of namespace ns for the given boundaries.
func BundlesOf(ns string, bounds []uint32) []Bundle {
	if len(bounds) < 2 {
		return nil
	}
	out := make([]Bundle, len(bounds)-1)
	for i := range out {
		out[i] = Bundle{Namespace: ns, Lower: bounds[i], Upper: bounds[i+1]}
	}
	return out
}

// BundleFor returns the bundle of namespace ns (with the given boundaries)
// that contains topic name (the full persistent:// partition name).
func BundleFor(ns string, bounds []uint32, name string) Bundle {
	return bundleForHash(ns, bounds, HashTopicName(name))
}

func bundleForHash(ns string, bounds []uint32, h uint32) Bundle {
	// The first boundary greater than h ends h's bundle; FullUpperBound
	// itself belongs to the last bundle.
	i := sort.Search(len(bounds), func(i int) bool { return bounds[i] > h })
	if i >= len(bounds) {
		i = len(bounds) - 1
	}
	if i == 0 {
		i = 1 // unreachable with valid boundaries (b0 = 0)
	}
	return Bundle{Namespace: ns, Lower: bounds[i-1], Upper: bounds[i]}
}

// splitBoundaries returns bounds with b's range split at its midpoint;
// false when b is not one of the ranges or is too small to split.
func splitBoundaries(bounds []uint32, b Bundle) ([]uint32, bool) {
	for i := 0; i+1 < len(bounds); i++ {
		if bounds[i] == b.Lower && bounds[i+1] == b.Upper {
			mid := uint32((uint64(b.Lower) + uint64(b.Upper) + 1) / 2)
			if mid <= b.Lower || mid >= b.Upper {
				return nil, false
			}
			out := make([]uint32, 0, len(bounds)+1)
			out = append(out, bounds[:i+1]...)
			out = append(out, mid)
			out = append(out, bounds[i+1:]...)
			return out, true
		}
	}
	return nil, false
}

// refines reports whether next contains every boundary of prev (bundles
// only ever split).
func refines(prev, next []uint32) bool {
	j := 0
	for _, b := range prev {
		for j < len(next) && next[j] < b {
			j++
		}
		if j == len(next) || next[j] != b {
			return false
		}
	}
	return true
}
