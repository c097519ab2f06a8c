// Package plan is the capacity arithmetic behind `quire plan`: the seed's
// numerical example ("Sayısal Örnek: Aynı İş Yükü, İki Mimari") as a pure
// function from a Workload to a Plan. For the same workload it sizes Kafka's
// ISR design and the Pulsar/BookKeeper ledger design: stored data, cross-zone
// traffic, the time to rebuild a lost storage node, and the metadata burst of
// a ledger-mode broker failover. Every figure carries its value, its unit and
// the formula (with the workload's numbers filled in) that produced it.
//
// It owns arithmetic only: no flags, no I/O, no clocks. The CLI parses flags
// into a Workload and prints the Plan.
//
// Units follow the seed and are decimal: MB = 10^6 bytes, TB = 10^12 bytes,
// so 20 MB/s × 259,200 s = 5.184e12 bytes = 5.18 TB.
//
// The model is the seed's, with its assumptions stated where they are used:
// producers and consumers are spread evenly over the zones and reach a
// partition's leader (Kafka) or a topic's owner (ledger mode) in a zone chosen
// uniformly; every copy sits in a different zone (so copies ≤ zones); a lost
// storage node is rebuilt completely, a Kafka broker by one replacement at
// the replication throttle, a bookie by the surviving bookies of its own zone
// in parallel (zone-aware placement keeps one copy per zone), each receiving
// at the re-replication rate.
package plan

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// Unit names the unit a Figure's value is in; the strings are part of the
// JSON output.
type Unit string

const (
	TB       Unit = "TB"     // 10^12 bytes
	MBPerSec Unit = "MB/s"   // 10^6 bytes per second
	Seconds  Unit = "s"      // seconds
	Percent  Unit = "%"      // percent
	Writes   Unit = "writes" // metadata-store writes
	Topics   Unit = "topics" // topics (or partitions)
)

// bytesPerMB and bytesPerTB are the seed's decimal units.
const (
	bytesPerMB = 1e6
	bytesPerTB = 1e12
)

// Figure is one number of the plan with the formula that produced it.
type Figure struct {
	// Label says what the figure is, for people.
	Label string  `json:"label"`
	Value float64 `json:"value"`
	Unit  Unit    `json:"unit"`
	// Formula is the arithmetic with the workload's numbers filled in.
	Formula string `json:"formula"`
	// AtLeast marks a lower bound: the real figure may be higher.
	AtLeast bool `json:"at_least,omitempty"`
	// Note is the reason behind the formula or what the figure implies.
	Note string `json:"note,omitempty"`
}

// Workload is what `quire plan` is asked about. SeedExample returns the
// seed's. Its JSON form (MarshalJSON, format.go) has stable names, units last.
type Workload struct {
	PeakMBPerSec    float64       // produce rate at peak
	AverageMBPerSec float64       // produce rate on average; what fills the disks
	Retention       time.Duration // how long data is kept
	ConsumerGroups  int           // each reads everything once, at the produce rate
	Zones           int           // availability zones
	Copies          int           // copies of every byte, one per zone (Kafka's replication factor; ledger mode's E = Qw)

	KafkaBrokers          int     // ISR mode: brokers, which also store the data
	KafkaThrottleMBPerSec float64 // ISR mode: replication throttle a replacement broker rebuilds at

	LedgerBrokers                  int     // ledger mode: brokers (stateless)
	BookiesPerZone                 int     // ledger mode: storage nodes per zone
	RereplicationMBPerSecPerBookie float64 // ledger mode: what one bookie receives while re-replicating

	// LargeClusterNodes is the size of the larger cluster the recovery
	// figures are repeated for: that many Kafka brokers, and that many bookies
	// spread evenly over the zones (the seed's 30).
	LargeClusterNodes int

	// TopicsPerBroker is how many topics (or partitions) the failed ledger-mode
	// broker owned; each costs MetadataWritesPerTopic metadata writes to move
	// (the seed's 3: mark the ledger in recovery, close it, add a new ledger
	// to the topic's list).
	TopicsPerBroker        int
	MetadataWritesPerTopic int

	// OperatorDelay is how long a person takes to start Kafka's rebuild;
	// ledger mode's autorecovery needs none.
	OperatorDelay time.Duration
}

// SeedExample is the seed's workload: 50 MB/s peak and 20 MB/s average
// produce, 3 days' retention, 3 consumer groups, 3 zones, 3 copies; Kafka with
// 9 brokers and a 150 MB/s throttle; Pulsar with 6 brokers and 9 bookies (3
// per zone) re-replicating at 100 MB/s each; a larger cluster of 30; 4,000
// topics on a failed broker at 3 metadata writes each; a 30-minute operator.
func SeedExample() Workload {
	return Workload{
		PeakMBPerSec:                   50,
		AverageMBPerSec:                20,
		Retention:                      72 * time.Hour,
		ConsumerGroups:                 3,
		Zones:                          3,
		Copies:                         3,
		KafkaBrokers:                   9,
		KafkaThrottleMBPerSec:          150,
		LedgerBrokers:                  6,
		BookiesPerZone:                 3,
		RereplicationMBPerSecPerBookie: 100,
		LargeClusterNodes:              30,
		TopicsPerBroker:                4000,
		MetadataWritesPerTopic:         3,
		OperatorDelay:                  30 * time.Minute,
	}
}

// ErrInvalidWorkload is wrapped by every error Validate returns.
var ErrInvalidWorkload = errors.New("invalid workload")

// Validate reports the first input the model cannot use.
func (w Workload) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalidWorkload, fmt.Sprintf(format, args...))
	}
	switch {
	case !positive(w.PeakMBPerSec):
		return bad("peak produce rate %v MB/s: want > 0", w.PeakMBPerSec)
	case !positive(w.AverageMBPerSec) || w.AverageMBPerSec > w.PeakMBPerSec:
		return bad("average produce rate %v MB/s: want > 0 and ≤ the peak (%v MB/s)", w.AverageMBPerSec, w.PeakMBPerSec)
	case w.Retention <= 0:
		return bad("retention %v: want > 0", w.Retention)
	case w.ConsumerGroups < 0:
		return bad("consumer groups %d: want ≥ 0", w.ConsumerGroups)
	case w.Zones < 1:
		return bad("zones %d: want ≥ 1", w.Zones)
	case w.Copies < 1 || w.Copies > w.Zones:
		return bad("copies %d: want 1 to %d (one copy per zone)", w.Copies, w.Zones)
	case w.KafkaBrokers < w.Copies:
		return bad("Kafka brokers %d: want ≥ copies (%d)", w.KafkaBrokers, w.Copies)
	case !positive(w.KafkaThrottleMBPerSec):
		return bad("Kafka throttle %v MB/s: want > 0", w.KafkaThrottleMBPerSec)
	case w.LedgerBrokers < 2:
		return bad("ledger-mode brokers %d: want ≥ 2 (a failover needs a survivor)", w.LedgerBrokers)
	case w.BookiesPerZone < 2:
		return bad("bookies per zone %d: want ≥ 2 (a lost bookie's copies are rebuilt in its own zone)", w.BookiesPerZone)
	case !positive(w.RereplicationMBPerSecPerBookie):
		return bad("re-replication rate %v MB/s per bookie: want > 0", w.RereplicationMBPerSecPerBookie)
	case w.LargeClusterNodes%w.Zones != 0 || w.LargeClusterNodes/w.Zones < 2:
		return bad("large cluster of %d nodes: want a multiple of the %d zones with ≥ 2 per zone", w.LargeClusterNodes, w.Zones)
	case w.TopicsPerBroker < 0:
		return bad("topics per broker %d: want ≥ 0", w.TopicsPerBroker)
	case w.MetadataWritesPerTopic < 0:
		return bad("metadata writes per topic %d: want ≥ 0", w.MetadataWritesPerTopic)
	case w.OperatorDelay < 0:
		return bad("operator delay %v: want ≥ 0", w.OperatorDelay)
	}
	return nil
}

func positive(x float64) bool { return x > 0 && !math.IsInf(x, 0) }

// Plan is every figure for one workload, in the sections `quire plan`
// prints. The JSON names are stable: scripts read them.
type Plan struct {
	Workload  Workload  `json:"workload"`
	Storage   Storage   `json:"storage"`
	CrossZone CrossZone `json:"cross_zone"`
	Recovery  Recovery  `json:"recovery"`
	Metadata  Metadata  `json:"metadata"`
}

// Storage is the data kept for the retention period; the same for both designs.
type Storage struct {
	Unique     Figure `json:"unique"`
	WithCopies Figure `json:"with_copies"`
}

// CrossZone is the traffic between zones at the peak produce rate.
type CrossZone struct {
	KafkaLeaderReads      Figure `json:"kafka_leader_reads"`
	KafkaFollowerFetching Figure `json:"kafka_follower_fetching"`
	Ledger                Figure `json:"ledger"`
	// LedgerOverFollowerFetching is how much more ledger mode sends across
	// zones than Kafka with follower fetching (the seed's ≈ 75%).
	LedgerOverFollowerFetching Figure `json:"ledger_over_follower_fetching"`
}

// Recovery is what losing one storage node costs, in the workload's cluster
// and in the larger one.
type Recovery struct {
	KafkaBrokerData    Figure `json:"kafka_broker_data"`
	KafkaBrokerRebuild Figure `json:"kafka_broker_rebuild"`
	// KafkaBrokerWindow adds the operator delay: the time partitions run
	// without their spare replica.
	KafkaBrokerWindow Figure `json:"kafka_broker_window"`
	BookieData        Figure `json:"bookie_data"`
	BookieRebuild     Figure `json:"bookie_rebuild"`

	LargeKafkaBrokerData    Figure `json:"large_kafka_broker_data"`
	LargeKafkaBrokerRebuild Figure `json:"large_kafka_broker_rebuild"`
	LargeBookieData         Figure `json:"large_bookie_data"`
	LargeBookieRebuild      Figure `json:"large_bookie_rebuild"`
}

// Metadata is what a ledger-mode broker failover costs: no data, a burst of
// metadata writes.
type Metadata struct {
	LedgerBrokerFailoverData   Figure `json:"ledger_broker_failover_data"`
	LedgerBrokerFailoverWrites Figure `json:"ledger_broker_failover_writes"`
	TopicsPerSurvivingBroker   Figure `json:"topics_per_surviving_broker"`
}

// Section is a titled group of figures, in print order.
type Section struct {
	Title   string
	Figures []Figure
}

// Sections lists the plan's figures in the order `quire plan` prints them.
func (p Plan) Sections() []Section {
	r := p.Recovery
	return []Section{
		{"Storage", []Figure{p.Storage.Unique, p.Storage.WithCopies}},
		{"Cross-zone traffic at peak", []Figure{p.CrossZone.KafkaLeaderReads, p.CrossZone.KafkaFollowerFetching,
			p.CrossZone.Ledger, p.CrossZone.LedgerOverFollowerFetching}},
		{"Recovery of a lost storage node", []Figure{r.KafkaBrokerData, r.KafkaBrokerRebuild, r.KafkaBrokerWindow,
			r.BookieData, r.BookieRebuild}},
		{fmt.Sprintf("Recovery in a cluster of %d", p.Workload.LargeClusterNodes), []Figure{r.LargeKafkaBrokerData,
			r.LargeKafkaBrokerRebuild, r.LargeBookieData, r.LargeBookieRebuild}},
		{"Metadata: a ledger-mode broker failover", []Figure{p.Metadata.LedgerBrokerFailoverData,
			p.Metadata.LedgerBrokerFailoverWrites, p.Metadata.TopicsPerSurvivingBroker}},
	}
}

// Compute works out the plan for w.
func Compute(w Workload) (Plan, error) {
	if err := w.Validate(); err != nil {
		return Plan{}, err
	}
	p := Plan{Workload: w}
	p.Storage = storage(w)
	p.CrossZone = crossZone(w)
	p.Recovery = recovery(w, p.Storage.WithCopies)
	p.Metadata = metadata(w)
	return p, nil
}

func storage(w Workload) Storage {
	retention := w.Retention.Seconds()
	unique := w.AverageMBPerSec * retention * bytesPerMB / bytesPerTB
	withCopies := unique * float64(w.Copies)
	return Storage{
		Unique: Figure{
			Label: "unique data", Value: unique, Unit: TB,
			Formula: fmt.Sprintf("%s MB/s average × %s s retention", num(w.AverageMBPerSec), num(retention)),
		},
		WithCopies: Figure{
			Label: "with copies", Value: withCopies, Unit: TB,
			Formula: fmt.Sprintf("%s TB × %d copies", num(unique), w.Copies),
		},
	}
}

func crossZone(w Workload) CrossZone {
	peak := w.PeakMBPerSec
	zones := float64(w.Zones)
	otherZones := fmt.Sprintf("%d/%d", w.Zones-1, w.Zones)
	// A client in a zone chosen uniformly reaches a leader (or owner) in
	// another zone with probability (zones-1)/zones.
	producers := peak * (zones - 1) / zones
	// Every copy but the leader's is in another zone.
	replication := float64(w.Copies-1) * peak
	consumers := float64(w.ConsumerGroups) * peak * (zones - 1) / zones
	// With follower fetching a consumer reads the replica in its own zone;
	// only consumers in zones without a replica cross.
	followerConsumers := float64(w.ConsumerGroups) * peak * float64(w.Zones-w.Copies) / zones

	leaderReads := producers + replication + consumers
	followerFetching := producers + replication + followerConsumers
	// Ledger mode: the owner writes every copy to a bookie and at most one
	// bookie of the ensemble is in its zone, so at least copies-1 of them
	// cross; only the owner serves reads, so follower fetching has no
	// counterpart.
	ledger := producers + replication + consumers

	return CrossZone{
		KafkaLeaderReads: Figure{
			Label: "Kafka, consumers read leaders", Value: leaderReads, Unit: MBPerSec,
			Formula: fmt.Sprintf("producers %s × %s + replication %d × %s + consumers %d × %s × %s = %s + %s + %s",
				num(peak), otherZones, w.Copies-1, num(peak), w.ConsumerGroups, num(peak), otherZones,
				num(producers), num(replication), num(consumers)),
		},
		KafkaFollowerFetching: Figure{
			Label: "Kafka, follower fetching", Value: followerFetching, Unit: MBPerSec,
			Formula: fmt.Sprintf("producers %s × %s + replication %d × %s + consumers %d × %s × %d/%d = %s + %s + %s",
				num(peak), otherZones, w.Copies-1, num(peak), w.ConsumerGroups, num(peak), w.Zones-w.Copies, w.Zones,
				num(producers), num(replication), num(followerConsumers)),
			Note: "consumers read a replica in their own zone",
		},
		Ledger: Figure{
			Label: "ledger mode (Pulsar)", Value: ledger, Unit: MBPerSec, AtLeast: true,
			Formula: fmt.Sprintf("producers %s × %s + bookie writes %d × %s + consumers %d × %s × %s = %s + %s + %s",
				num(peak), otherZones, w.Copies-1, num(peak), w.ConsumerGroups, num(peak), otherZones,
				num(producers), num(replication), num(consumers)),
			Note: fmt.Sprintf("≤ 1 of %d bookie copies in the owner's zone; only the owner serves reads", w.Copies),
		},
		LedgerOverFollowerFetching: percentMore("ledger mode over Kafka with follower fetching", ledger, followerFetching),
	}
}

// percentMore is how much more a is than b, a lower bound as a is.
func percentMore(label string, a, b float64) Figure {
	f := Figure{Label: label, Unit: Percent, AtLeast: true}
	if b == 0 { // one zone: nothing crosses either way
		f.Formula = "no cross-zone traffic to compare"
		return f
	}
	f.Value = 100 * (a/b - 1)
	f.Formula = fmt.Sprintf("(%s / %s − 1) × 100", num(a), num(b))
	return f
}

func recovery(w Workload, withCopies Figure) Recovery {
	stored := withCopies.Value
	bookies := w.Zones * w.BookiesPerZone
	large := w.LargeClusterNodes
	largePerZone := large / w.Zones

	kafkaData := stored / float64(w.KafkaBrokers)
	kafkaRebuild := kafkaData * bytesPerTB / bytesPerMB / w.KafkaThrottleMBPerSec
	bookieData := stored / float64(bookies)
	largeData := stored / float64(large)

	kafkaNote := fmt.Sprintf("one replacement broker pulls it all; its partitions run with %d in-sync replicas meanwhile", w.Copies-1)
	return Recovery{
		KafkaBrokerData: Figure{
			Label: "Kafka: data on one broker", Value: kafkaData, Unit: TB,
			Formula: fmt.Sprintf("%s TB / %d brokers", num(stored), w.KafkaBrokers),
		},
		KafkaBrokerRebuild: Figure{
			Label: "Kafka: rebuild a lost broker", Value: kafkaRebuild, Unit: Seconds,
			Formula: fmt.Sprintf("%s TB / %s MB/s throttle", num(kafkaData), num(w.KafkaThrottleMBPerSec)),
			Note:    kafkaNote,
		},
		KafkaBrokerWindow: Figure{
			Label: "Kafka: window without a spare replica", Value: w.OperatorDelay.Seconds() + kafkaRebuild, Unit: Seconds,
			Formula: fmt.Sprintf("%s s operator delay + %s s rebuild", num(w.OperatorDelay.Seconds()), num(kafkaRebuild)),
		},
		BookieData: Figure{
			Label: "ledger mode: data on one bookie", Value: bookieData, Unit: TB,
			Formula: fmt.Sprintf("%s TB / %d bookies (%d zones × %d)", num(stored), bookies, w.Zones, w.BookiesPerZone),
		},
		BookieRebuild: withNote(bookieRebuild("ledger mode: rebuild a lost bookie", bookieData, w.BookiesPerZone, w.RereplicationMBPerSecPerBookie),
			"autorecovery starts without an operator; new writes have all their copies at once"),

		LargeKafkaBrokerData: Figure{
			Label: fmt.Sprintf("%d-broker Kafka: data on one broker", large), Value: largeData, Unit: TB,
			Formula: fmt.Sprintf("%s TB / %d brokers", num(stored), large),
		},
		LargeKafkaBrokerRebuild: Figure{
			Label: fmt.Sprintf("%d-broker Kafka: rebuild a lost broker", large), Value: largeData * bytesPerTB / bytesPerMB / w.KafkaThrottleMBPerSec,
			Unit: Seconds, Formula: fmt.Sprintf("%s TB / %s MB/s throttle", num(largeData), num(w.KafkaThrottleMBPerSec)),
		},
		LargeBookieData: Figure{
			Label: fmt.Sprintf("%d bookies (%d per zone): data on one bookie", large, largePerZone), Value: largeData, Unit: TB,
			Formula: fmt.Sprintf("%s TB / %d bookies", num(stored), large),
		},
		LargeBookieRebuild: bookieRebuild(fmt.Sprintf("%d bookies: rebuild a lost bookie", large), largeData, largePerZone, w.RereplicationMBPerSecPerBookie),
	}
}

// bookieRebuild is the time the surviving bookies of the lost one's zone take
// to receive its data in parallel. Zone-aware placement keeps one copy per
// zone, so only they may take the lost copies; the sources (every other
// replica) are many and are not the bottleneck.
func bookieRebuild(label string, data float64, perZone int, rate float64) Figure {
	survivors := perZone - 1
	return Figure{
		Label: label, Value: data * bytesPerTB / bytesPerMB / (float64(survivors) * rate), Unit: Seconds,
		Formula: fmt.Sprintf("%s TB / (%d same-zone survivors × %s MB/s)", num(data), survivors, num(rate)),
	}
}

func withNote(f Figure, note string) Figure {
	f.Note = note
	return f
}

func metadata(w Workload) Metadata {
	survivors := w.LedgerBrokers - 1
	return Metadata{
		LedgerBrokerFailoverData: Figure{
			Label: "data copied", Value: 0, Unit: TB,
			Formula: "0 bytes: bundles are reassigned, the ledgers stay on the bookies",
		},
		LedgerBrokerFailoverWrites: Figure{
			Label: "metadata writes, in a burst", Value: float64(w.TopicsPerBroker * w.MetadataWritesPerTopic), Unit: Writes,
			Formula: fmt.Sprintf("%s topics × %d writes", num(float64(w.TopicsPerBroker)), w.MetadataWritesPerTopic),
			Note:    "the seed's 3 per topic: ledger into recovery, close it, add a new ledger; plus every reconnecting client's lookup",
		},
		TopicsPerSurvivingBroker: Figure{
			Label: "topics each surviving broker takes", Value: float64(w.TopicsPerBroker) / float64(survivors), Unit: Topics,
			Formula: fmt.Sprintf("%s topics / %d surviving brokers", num(float64(w.TopicsPerBroker)), survivors),
		},
	}
}
