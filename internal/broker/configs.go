package broker

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"quire/internal/catalog"
	"quire/internal/kafka"
	"quire/internal/mlog"
)

// Kafka topic configs that mean something on a ledger-mode topic. Each maps
// to a managed-ledger setting; changes apply when the partition is next
// loaded (a takeover or restart), except the compaction configs, which the
// owner's compactor reads before each round (compact.go). Everything else is rejected with
// INVALID_CONFIG, so a client never believes a setting took effect that did
// not.
type topicConfig struct {
	def      string
	readOnly bool
	doc      string
	typ      kmsg.ConfigType
	check    func(string) error
}

const defaultMaxMessageBytes = 1048588 // Kafka's message.max.bytes

var topicConfigs = map[string]topicConfig{
	"cleanup.policy": {def: "delete", typ: kmsg.ConfigTypeList, doc: "delete (retention), compact (latest record per key: closed ledgers rewritten by the owner's compactor, see compact.go) or compact,delete",
		check: cleanupPolicy},
	"delete.retention.ms": {def: "86400000", typ: kmsg.ConfigTypeLong, doc: "compacted topics: a tombstone is removed once the ledger holding it closed this long ago",
		check: intAtLeast(0)},
	"min.compaction.lag.ms": {def: "0", typ: kmsg.ConfigTypeLong, doc: "compacted topics: a ledger is compacted only once closed at least this long",
		check: intAtLeast(0)},
	"max.compaction.lag.ms": {def: "9223372036854775807", typ: kmsg.ConfigTypeLong, doc: "compacted topics: a ledger created this long ago is compacted whatever the dirty ratio",
		check: intAtLeast(1)},
	"min.cleanable.dirty.ratio": {def: "0.5", typ: kmsg.ConfigTypeDouble, doc: "compacted topics: compact when ledgers not compacted yet hold this share of the closed ledgers' bytes",
		check: ratio},
	"retention.ms": {def: "604800000", typ: kmsg.ConfigTypeLong, doc: "closed ledgers older than this are deleted (-1 keeps them)",
		check: intAtLeast(-1)},
	"retention.bytes": {def: "-1", typ: kmsg.ConfigTypeLong, doc: "closed ledgers beyond this size are deleted (-1 no limit)",
		check: intAtLeast(-1)},
	"max.message.bytes": {def: strconv.Itoa(defaultMaxMessageBytes), typ: kmsg.ConfigTypeInt, doc: "largest record batch a produce may carry (at most one ledger entry)",
		check: intBetween(0, maxEntryBatch)},
	"message.timestamp.type": {def: "CreateTime", typ: kmsg.ConfigTypeString, doc: "only CreateTime",
		check: oneOf("CreateTime")},
	"segment.ms": {def: strconv.FormatInt((240 * time.Minute).Milliseconds(), 10), typ: kmsg.ConfigTypeLong,
		doc: "a ledger rolls over at this age (managedLedgerMaxLedgerRolloverTimeMinutes)", check: intAtLeast(1)},
	"segment.bytes": {def: strconv.FormatInt(2<<30-1, 10), typ: kmsg.ConfigTypeInt,
		doc: "a ledger rolls over at this size (managedLedgerMaxSizePerLedgerMbytes)", check: intAtLeast(14)},
	"min.insync.replicas": {readOnly: true, typ: kmsg.ConfigTypeInt,
		doc: "ledger mode: the ack quorum Qa of the namespace's persistence policy"},
	"unclean.leader.election.enable": {def: "false", readOnly: true, typ: kmsg.ConfigTypeBoolean,
		doc: "ledger mode: never (no broker replicas; recovery fences the bookies)"},
}

func oneOf(vals ...string) func(string) error {
	return func(v string) error {
		for _, x := range vals {
			if v == x {
				return nil
			}
		}
		return fmt.Errorf("%q is not one of %v", v, vals)
	}
}

// cleanupPolicy accepts Kafka's values: delete, compact, or both (a list).
func cleanupPolicy(v string) error {
	if _, _, ok := parseCleanupPolicy(v); !ok {
		return fmt.Errorf("%q is not delete, compact or compact,delete", v)
	}
	return nil
}

// parseCleanupPolicy reads a cleanup.policy list.
func parseCleanupPolicy(v string) (compact, del bool, ok bool) {
	for _, p := range strings.Split(v, ",") {
		switch strings.TrimSpace(p) {
		case "compact":
			compact = true
		case "delete":
			del = true
		default:
			return false, false, false
		}
	}
	return compact, del, true
}

// isCompacted reports whether a topic's configs make it compacted.
func isCompacted(set map[string]string) bool {
	v, ok := set["cleanup.policy"]
	if !ok {
		return false
	}
	compact, _, _ := parseCleanupPolicy(v)
	return compact
}

func ratio(v string) error {
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || f < 0 || f > 1 {
		return fmt.Errorf("%q is not a number in [0, 1]", v)
	}
	return nil
}

func intBetween(lo, hi int64) func(string) error {
	return func(v string) error {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < lo || n > hi {
			return fmt.Errorf("%q is not an integer in [%d, %d]", v, lo, hi)
		}
		return nil
	}
}

func intAtLeast(lo int64) func(string) error {
	return func(v string) error {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < lo {
			return fmt.Errorf("%q is not an integer ≥ %d", v, lo)
		}
		return nil
	}
}

// validateConfigs checks configs a client wants to set on a topic.
func validateConfigs(cfgs map[string]string) error {
	for k, v := range cfgs {
		c, ok := topicConfigs[k]
		if !ok {
			return fmt.Errorf("%w: unknown or unsupported topic config %q", kerr.InvalidConfig, k)
		}
		if c.readOnly {
			return fmt.Errorf("%w: %q is read-only in ledger mode", kerr.InvalidConfig, k)
		}
		if err := c.check(v); err != nil {
			return fmt.Errorf("%w: %s: %v", kerr.InvalidConfig, k, err)
		}
	}
	return nil
}

// describeConfigs lists every supported config of a topic.
func describeConfigs(set map[string]string, pol catalog.Policies) []kafka.ConfigEntry {
	names := make([]string, 0, len(topicConfigs))
	for k := range topicConfigs {
		names = append(names, k)
	}
	sort.Strings(names)
	out := make([]kafka.ConfigEntry, 0, len(names))
	for _, k := range names {
		c := topicConfigs[k]
		def := c.def
		if k == "min.insync.replicas" {
			def = strconv.Itoa(pol.Persistence.AckQuorum)
		}
		e := kafka.ConfigEntry{Name: k, ReadOnly: c.readOnly, Type: c.typ, Doc: ptr(c.doc)}
		if v, ok := set[k]; ok {
			e.Value, e.Source = ptr(v), kmsg.ConfigSourceDynamicTopicConfig
		} else {
			e.Value, e.Default, e.Source = ptr(def), true, kmsg.ConfigSourceDefaultConfig
		}
		out = append(out, e)
	}
	return out
}

func ptr[T any](v T) *T { return &v }

// configString is a config's value on a topic, or its default.
func configString(set map[string]string, k string) string {
	if v, ok := set[k]; ok {
		return v
	}
	return topicConfigs[k].def
}

// configFloat is a numeric config's value as a float (a ratio).
func configFloat(set map[string]string, k string) float64 {
	f, _ := strconv.ParseFloat(configString(set, k), 64)
	return f
}

// configMillis is a config in milliseconds as a Duration, saturated at the
// largest Duration (max.compaction.lag.ms defaults to Long.MAX_VALUE ms).
func configMillis(set map[string]string, k string) time.Duration {
	ms := configValue(set, k)
	if ms > int64(math.MaxInt64/time.Millisecond) {
		return time.Duration(math.MaxInt64)
	}
	return time.Duration(ms) * time.Millisecond
}

// configValue is a config's value on a topic, or its default.
func configValue(set map[string]string, k string) int64 {
	v, ok := set[k]
	if !ok {
		v = topicConfigs[k].def
	}
	n, _ := strconv.ParseInt(v, 10, 64)
	return n
}

// topicSettings turns a topic's configs into managed-ledger settings.
// Kafka topics keep data by retention only: consumer groups do not hold
// it back (there are no cursors), so backlog quotas and TTL do not apply.
// A topic that is compacted only (cleanup.policy=compact) has no
// retention, as in Kafka: only compaction removes records.
func topicSettings(set map[string]string) mlog.Config {
	ret := mlog.RetentionPolicy{Time: -1, Size: -1}
	_, del, _ := parseCleanupPolicy(configString(set, "cleanup.policy"))
	if ms := configValue(set, "retention.ms"); ms >= 0 && del {
		ret.Time = time.Duration(ms) * time.Millisecond
	}
	if b := configValue(set, "retention.bytes"); b >= 0 && del {
		ret.Size = b
	}
	roll := mlog.DefaultRolloverPolicy()
	roll.MaxAge = time.Duration(configValue(set, "segment.ms")) * time.Millisecond
	roll.MaxSize = configValue(set, "segment.bytes")
	if roll.MinAge > roll.MaxAge {
		roll.MinAge = roll.MaxAge
	}
	return mlog.Config{Retention: ret, Rollover: roll}
}

// brokerConfigs is what DescribeConfigs shows for a broker resource.
func brokerConfigs(autoCreate bool, defaultPartitions int32, maxMessage int32, pol catalog.Policies) []kafka.ConfigEntry {
	ro := func(name, v, doc string, typ kmsg.ConfigType) kafka.ConfigEntry {
		return kafka.ConfigEntry{Name: name, Value: ptr(v), ReadOnly: true, Source: kmsg.ConfigSourceStaticBrokerConfig, Type: typ, Doc: ptr(doc)}
	}
	return []kafka.ConfigEntry{
		ro("auto.create.topics.enable", strconv.FormatBool(autoCreate), "create unknown topics on metadata requests", kmsg.ConfigTypeBoolean),
		ro("num.partitions", strconv.Itoa(int(defaultPartitions)), "partitions of auto-created topics", kmsg.ConfigTypeInt),
		ro("message.max.bytes", strconv.Itoa(int(maxMessage)), "largest record batch", kmsg.ConfigTypeInt),
		ro("default.replication.factor", "1", "ledger mode: broker replicas are not used; see the bookie quorums", kmsg.ConfigTypeShort),
		ro("min.insync.replicas", strconv.Itoa(pol.Persistence.AckQuorum), "ledger mode: the ack quorum Qa", kmsg.ConfigTypeInt),
		ro("quire.ledger.ensemble", strconv.Itoa(pol.Persistence.Ensemble), "E of new ledgers", kmsg.ConfigTypeInt),
		ro("quire.ledger.write.quorum", strconv.Itoa(pol.Persistence.WriteQuorum), "Qw of new ledgers", kmsg.ConfigTypeInt),
		ro("quire.ledger.ack.quorum", strconv.Itoa(pol.Persistence.AckQuorum), "Qa of new ledgers", kmsg.ConfigTypeInt),
	}
}
