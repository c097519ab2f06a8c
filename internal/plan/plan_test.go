package plan

import (
	"encoding/json"
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"
)

// figures is the plan's figures by their JSON path ("recovery.bookie_rebuild"),
// read back through the JSON so the tests see the names scripts see.
func figures(t *testing.T, p Plan) map[string]Figure {
	t.Helper()
	data, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	var sections map[string]map[string]json.RawMessage
	if err := json.Unmarshal(data, &sections); err != nil {
		t.Fatal(err)
	}
	out := map[string]Figure{}
	for section, fields := range sections {
		if section == "workload" {
			continue
		}
		for name, raw := range fields {
			var f Figure
			if err := json.Unmarshal(raw, &f); err != nil {
				t.Fatalf("%s.%s: %v", section, name, err)
			}
			out[section+"."+name] = f
		}
	}
	return out
}

func compute(t *testing.T, w Workload) map[string]Figure {
	t.Helper()
	p, err := Compute(w)
	if err != nil {
		t.Fatal(err)
	}
	return figures(t, p)
}

// TestSeedFigures holds the defaults to every figure of the seed's
// numerical example, within 2%.
func TestSeedFigures(t *testing.T) {
	got := compute(t, SeedExample())
	for _, tc := range []struct {
		figure string
		want   float64
		unit   Unit
		seed   string // the seed's words
	}{
		{"storage.unique", 5.18, TB, "5.18 TB unique"},
		{"storage.with_copies", 15.6, TB, "15.6 TB with copies"},
		{"cross_zone.kafka_leader_reads", 233, MBPerSec, "233 MB/s, consumers read leaders"},
		{"cross_zone.kafka_follower_fetching", 133, MBPerSec, "133 MB/s, follower fetching"},
		{"cross_zone.ledger", 233, MBPerSec, "≈ 233 MB/s for Pulsar"},
		{"cross_zone.ledger_over_follower_fetching", 75, Percent, "≈ 75% more than follower fetching"},
		{"recovery.kafka_broker_data", 1.73, TB, "15.6 / 9 = 1.73 TB per broker"},
		{"recovery.kafka_broker_rebuild", 11500, Seconds, "≈ 11,500 s at a 150 MB/s throttle"},
		{"recovery.bookie_data", 1.73, TB, "a bookie also holds 1.73 TB"},
		{"recovery.bookie_rebuild", 8650, Seconds, "≈ 8,650 s (2.4 h)"},
		{"recovery.large_bookie_data", 0.52, TB, "30 bookies: 0.52 TB each"},
		{"recovery.large_bookie_rebuild", 578, Seconds, "30 bookies: < 10 min (≈ 578 s)"},
		{"recovery.large_kafka_broker_data", 0.52, TB, "30 brokers: 0.52 TB each"},
		{"recovery.large_kafka_broker_rebuild", 3467, Seconds, "30-broker Kafka: ≈ 1 h (≈ 3,467 s)"},
		{"metadata.ledger_broker_failover_writes", 12000, Writes, "4,000 topics × 3 = 12,000 writes"},
		{"metadata.ledger_broker_failover_data", 0, TB, "a Pulsar broker failure copies no data"},
	} {
		f, ok := got[tc.figure]
		if !ok {
			t.Errorf("%s: no such figure", tc.figure)
			continue
		}
		if f.Unit != tc.unit {
			t.Errorf("%s: unit %q, want %q", tc.figure, f.Unit, tc.unit)
		}
		if !within(f.Value, tc.want, 0.02) {
			t.Errorf("%s = %v, the seed says %v (%s)", tc.figure, f.Value, tc.want, tc.seed)
		}
	}
	if v := got["recovery.large_bookie_rebuild"].Value; v >= 600 {
		t.Errorf("30 bookies rebuild in %v s, the seed says under 10 min", v)
	}
	// The seed's "5.18 TB = 20 MB/s × 259,200 s" is exact in decimal units.
	if v := got["storage.unique"].Value; v != 5.184 {
		t.Errorf("unique data %v TB, want exactly 5.184 (MB = 10^6, TB = 10^12)", v)
	}
}

func within(got, want, tolerance float64) bool {
	if want == 0 {
		return got == 0
	}
	return math.Abs(got-want) <= tolerance*math.Abs(want)
}

// TestSeedFormulas checks the formulas carry the seed's reasoning, not only
// its results.
func TestSeedFormulas(t *testing.T) {
	got := compute(t, SeedExample())
	for figure, want := range map[string]string{
		"storage.unique":                           "20 MB/s average × 259,200 s retention",
		"storage.with_copies":                      "× 3 copies",
		"cross_zone.kafka_leader_reads":            "producers 50 × 2/3 + replication 2 × 50 + consumers 3 × 50 × 2/3",
		"cross_zone.kafka_follower_fetching":       "consumers 3 × 50 × 0/3",
		"cross_zone.ledger":                        "bookie writes 2 × 50",
		"recovery.kafka_broker_data":               "/ 9 brokers",
		"recovery.kafka_broker_rebuild":            "1.728 TB / 150 MB/s throttle",
		"recovery.kafka_broker_window":             "1,800 s operator delay + 11,520 s rebuild",
		"recovery.bookie_rebuild":                  "1.728 TB / (2 same-zone survivors × 100 MB/s)",
		"recovery.large_bookie_rebuild":            "0.5184 TB / (9 same-zone survivors × 100 MB/s)",
		"recovery.large_kafka_broker_rebuild":      "0.5184 TB / 150 MB/s throttle",
		"metadata.ledger_broker_failover_writes":   "4,000 topics × 3 writes",
		"metadata.topics_per_surviving_broker":     "4,000 topics / 5 surviving brokers",
		"cross_zone.ledger_over_follower_fetching": "(233.3 / 133.3 − 1) × 100",
	} {
		if f := got[figure].Formula; !strings.Contains(f, want) {
			t.Errorf("%s formula %q, want it to contain %q", figure, f, want)
		}
	}
	if !got["cross_zone.ledger"].AtLeast {
		t.Error("ledger-mode cross-zone traffic is a lower bound (≤ 1 copy in the owner's zone) but not marked so")
	}
}

// TestFiguresFollowTheirFormulas changes one input at a time and checks that
// each figure moves as its formula says, and that the others do not move.
func TestFiguresFollowTheirFormulas(t *testing.T) {
	base := compute(t, SeedExample())
	const oneGroupCrossing = 50.0 * 2 / 3 // a consumer group at peak, 2/3 of it from another zone
	for _, tc := range []struct {
		name   string
		change func(*Workload)
		ratio  map[string]float64 // changed / base
		delta  map[string]float64 // changed − base
	}{
		{
			name:   "double bookies per zone",
			change: func(w *Workload) { w.BookiesPerZone = 6 },
			ratio: map[string]float64{
				"recovery.bookie_data": 0.5,
				// Half the data each, received by 5 survivors instead of 2.
				"recovery.bookie_rebuild":       0.5 * 2.0 / 5.0,
				"recovery.kafka_broker_rebuild": 1,
				"recovery.large_bookie_rebuild": 1,
				"cross_zone.ledger":             1,
			},
		},
		{
			name:   "double the re-replication rate",
			change: func(w *Workload) { w.RereplicationMBPerSecPerBookie = 200 },
			ratio: map[string]float64{
				"recovery.bookie_rebuild":       0.5,
				"recovery.large_bookie_rebuild": 0.5,
				"recovery.bookie_data":          1,
				"recovery.kafka_broker_rebuild": 1,
			},
		},
		{
			name:   "double the Kafka throttle",
			change: func(w *Workload) { w.KafkaThrottleMBPerSec = 300 },
			ratio: map[string]float64{
				"recovery.kafka_broker_rebuild":       0.5,
				"recovery.large_kafka_broker_rebuild": 0.5,
				"recovery.kafka_broker_data":          1,
				"recovery.bookie_rebuild":             1,
			},
		},
		{
			name:   "double the Kafka brokers",
			change: func(w *Workload) { w.KafkaBrokers = 18 },
			ratio: map[string]float64{
				"recovery.kafka_broker_data":          0.5,
				"recovery.kafka_broker_rebuild":       0.5,
				"recovery.large_kafka_broker_rebuild": 1,
				"recovery.bookie_rebuild":             1,
			},
		},
		{
			name:   "double the retention",
			change: func(w *Workload) { w.Retention = 6 * 24 * time.Hour },
			ratio: map[string]float64{
				"storage.unique":                      2,
				"storage.with_copies":                 2,
				"recovery.kafka_broker_rebuild":       2,
				"recovery.bookie_rebuild":             2,
				"recovery.large_kafka_broker_rebuild": 2,
				"recovery.large_bookie_rebuild":       2,
				"cross_zone.kafka_leader_reads":       1,
			},
		},
		{
			name:   "double the average produce rate",
			change: func(w *Workload) { w.AverageMBPerSec = 40 },
			ratio: map[string]float64{
				"storage.unique":                2,
				"storage.with_copies":           2,
				"recovery.bookie_rebuild":       2,
				"cross_zone.kafka_leader_reads": 1, // traffic follows the peak
			},
		},
		{
			name:   "double the peak produce rate",
			change: func(w *Workload) { w.PeakMBPerSec = 100 },
			ratio: map[string]float64{
				"cross_zone.kafka_leader_reads":            2,
				"cross_zone.kafka_follower_fetching":       2,
				"cross_zone.ledger":                        2,
				"cross_zone.ledger_over_follower_fetching": 1,
				"storage.unique":                           1,
			},
		},
		{
			name:   "a larger cluster of 60",
			change: func(w *Workload) { w.LargeClusterNodes = 60 },
			ratio: map[string]float64{
				"recovery.large_bookie_data":          0.5,
				"recovery.large_kafka_broker_rebuild": 0.5,
				// Half the data each, received by 19 survivors instead of 9.
				"recovery.large_bookie_rebuild": 0.5 * 9.0 / 19.0,
				"recovery.bookie_rebuild":       1,
			},
		},
		{
			name:   "double the topics on the failed broker",
			change: func(w *Workload) { w.TopicsPerBroker = 8000 },
			ratio: map[string]float64{
				"metadata.ledger_broker_failover_writes": 2,
				"metadata.topics_per_surviving_broker":   2,
			},
		},
		{
			name:   "one more consumer group",
			change: func(w *Workload) { w.ConsumerGroups = 4 },
			delta: map[string]float64{
				"cross_zone.kafka_leader_reads":      oneGroupCrossing,
				"cross_zone.ledger":                  oneGroupCrossing,
				"cross_zone.kafka_follower_fetching": 0, // it reads in its own zone
			},
		},
		{
			name:   "an operator twice as slow",
			change: func(w *Workload) { w.OperatorDelay = time.Hour },
			delta: map[string]float64{
				"recovery.kafka_broker_window":  1800,
				"recovery.kafka_broker_rebuild": 0,
				"recovery.bookie_rebuild":       0, // autorecovery has no operator
			},
		},
		{
			name:   "two copies in three zones",
			change: func(w *Workload) { w.Copies = 2 },
			ratio: map[string]float64{
				"storage.with_copies":           2.0 / 3.0,
				"recovery.kafka_broker_rebuild": 2.0 / 3.0,
				"recovery.bookie_rebuild":       2.0 / 3.0,
			},
			delta: map[string]float64{
				"cross_zone.kafka_leader_reads": -50, // one replica fewer to send
				"cross_zone.ledger":             -50,
				// One replica fewer, but a third of the consumers now find no
				// replica in their zone: 3 groups × 50 × 1/3 = +50.
				"cross_zone.kafka_follower_fetching": 0,
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := SeedExample()
			tc.change(&w)
			got := compute(t, w)
			for figure, want := range tc.ratio {
				b, c := base[figure], got[figure]
				if b.Value == 0 {
					t.Fatalf("%s: base value 0", figure)
				}
				if r := c.Value / b.Value; !within(r, want, 1e-9) {
					t.Errorf("%s: %v → %v, ratio %v, want %v", figure, b.Value, c.Value, r, want)
				}
			}
			for figure, want := range tc.delta {
				b, c := base[figure], got[figure]
				if d := c.Value - b.Value; math.Abs(d-want) > 1e-9 {
					t.Errorf("%s: %v → %v, change %v, want %v", figure, b.Value, c.Value, d, want)
				}
			}
		})
	}
}

// TestJSONNames pins the JSON field names: scripts read them, and `quire plan
// --help` lists them.
func TestJSONNames(t *testing.T) {
	p, err := Compute(SeedExample())
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for name, f := range figures(t, p) {
		got = append(got, name)
		if f.Label == "" || f.Formula == "" || f.Unit == "" {
			t.Errorf("%s: label %q, formula %q, unit %q: none may be empty", name, f.Label, f.Formula, f.Unit)
		}
	}
	slices.Sort(got)
	want := []string{
		"cross_zone.kafka_follower_fetching", "cross_zone.kafka_leader_reads", "cross_zone.ledger",
		"cross_zone.ledger_over_follower_fetching",
		"metadata.ledger_broker_failover_data", "metadata.ledger_broker_failover_writes",
		"metadata.topics_per_surviving_broker",
		"recovery.bookie_data", "recovery.bookie_rebuild", "recovery.kafka_broker_data",
		"recovery.kafka_broker_rebuild", "recovery.kafka_broker_window", "recovery.large_bookie_data",
		"recovery.large_bookie_rebuild", "recovery.large_kafka_broker_data", "recovery.large_kafka_broker_rebuild",
		"storage.unique", "storage.with_copies",
	}
	if !slices.Equal(got, want) {
		t.Errorf("figures %v\nwant %v", got, want)
	}

	data, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Workload map[string]float64 `json:"workload"`
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	wantWorkload := map[string]float64{
		"peak_mb_per_s": 50, "average_mb_per_s": 20, "retention_s": 259200, "consumer_groups": 3,
		"zones": 3, "copies": 3, "kafka_brokers": 9, "kafka_throttle_mb_per_s": 150, "ledger_brokers": 6,
		"bookies_per_zone": 3, "rereplication_mb_per_s_per_bookie": 100, "large_cluster_nodes": 30,
		"topics_per_broker": 4000, "metadata_writes_per_topic": 3, "operator_delay_s": 1800,
	}
	if len(doc.Workload) != len(wantWorkload) {
		t.Errorf("workload %v\nwant %v", doc.Workload, wantWorkload)
	}
	for k, v := range wantWorkload {
		if got, ok := doc.Workload[k]; !ok || got != v {
			t.Errorf("workload.%s = %v (present %v), want %v", k, got, ok, v)
		}
	}
}

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(*Workload)
	}{
		{"no peak", func(w *Workload) { w.PeakMBPerSec = 0 }},
		{"average above peak", func(w *Workload) { w.AverageMBPerSec = 60 }},
		{"infinite average", func(w *Workload) { w.AverageMBPerSec = math.Inf(1) }},
		{"no retention", func(w *Workload) { w.Retention = 0 }},
		{"negative consumer groups", func(w *Workload) { w.ConsumerGroups = -1 }},
		{"no zones", func(w *Workload) { w.Zones = 0 }},
		{"more copies than zones", func(w *Workload) { w.Copies = 4 }},
		{"fewer Kafka brokers than copies", func(w *Workload) { w.KafkaBrokers = 2 }},
		{"no throttle", func(w *Workload) { w.KafkaThrottleMBPerSec = 0 }},
		{"one ledger broker", func(w *Workload) { w.LedgerBrokers = 1 }},
		{"one bookie per zone", func(w *Workload) { w.BookiesPerZone = 1 }},
		{"no re-replication", func(w *Workload) { w.RereplicationMBPerSecPerBookie = 0 }},
		{"large cluster not a multiple of zones", func(w *Workload) { w.LargeClusterNodes = 31 }},
		{"large cluster of one per zone", func(w *Workload) { w.LargeClusterNodes = 3 }},
		{"negative topics", func(w *Workload) { w.TopicsPerBroker = -1 }},
		{"negative writes per topic", func(w *Workload) { w.MetadataWritesPerTopic = -1 }},
		{"negative operator delay", func(w *Workload) { w.OperatorDelay = -time.Second }},
	} {
		w := SeedExample()
		tc.change(&w)
		if _, err := Compute(w); !errors.Is(err, ErrInvalidWorkload) {
			t.Errorf("%s: Compute error %v, want ErrInvalidWorkload", tc.name, err)
		}
	}
	if err := SeedExample().Validate(); err != nil {
		t.Errorf("the seed's workload: %v", err)
	}
}

// TestRandomWorkloads checks, over many valid workloads, what must hold
// whatever the numbers: every figure finite and non-negative, follower
// fetching never costing more than reading leaders, ledger mode's cross-zone
// traffic equal to Kafka's with leader reads, the larger cluster never slower
// to rebuild, and the rebuild times equal to data over rate.
func TestRandomWorkloads(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 2000 {
		zones := 1 + rng.IntN(5)
		copies := 1 + rng.IntN(zones)
		w := Workload{
			PeakMBPerSec:                   1 + 1000*rng.Float64(),
			Retention:                      time.Duration(1+rng.IntN(30*24)) * time.Hour,
			ConsumerGroups:                 rng.IntN(20),
			Zones:                          zones,
			Copies:                         copies,
			KafkaBrokers:                   copies + rng.IntN(100),
			KafkaThrottleMBPerSec:          1 + 500*rng.Float64(),
			LedgerBrokers:                  2 + rng.IntN(50),
			BookiesPerZone:                 2 + rng.IntN(20),
			RereplicationMBPerSecPerBookie: 1 + 500*rng.Float64(),
			TopicsPerBroker:                rng.IntN(100000),
			MetadataWritesPerTopic:         rng.IntN(10),
			OperatorDelay:                  time.Duration(rng.IntN(7200)) * time.Second,
		}
		w.AverageMBPerSec = w.PeakMBPerSec * (0.01 + 0.99*rng.Float64())
		// At least as many nodes per zone as the cluster under test.
		w.LargeClusterNodes = zones * max(w.BookiesPerZone, w.KafkaBrokers/zones+1)
		got := compute(t, w)
		for name, f := range got {
			if math.IsNaN(f.Value) || math.IsInf(f.Value, 0) || f.Value < 0 {
				t.Fatalf("workload %d %+v: %s = %v", i, w, name, f.Value)
			}
		}
		if got["cross_zone.kafka_follower_fetching"].Value > got["cross_zone.kafka_leader_reads"].Value+1e-9 {
			t.Fatalf("workload %d %+v: follower fetching costs more than leader reads", i, w)
		}
		if !within(got["cross_zone.ledger"].Value, got["cross_zone.kafka_leader_reads"].Value, 1e-12) {
			t.Fatalf("workload %d %+v: ledger mode %v ≠ Kafka leader reads %v", i, w,
				got["cross_zone.ledger"].Value, got["cross_zone.kafka_leader_reads"].Value)
		}
		if got["recovery.large_bookie_rebuild"].Value > got["recovery.bookie_rebuild"].Value*(1+1e-12) ||
			got["recovery.large_kafka_broker_rebuild"].Value > got["recovery.kafka_broker_rebuild"].Value*(1+1e-12) {
			t.Fatalf("workload %d %+v: the larger cluster rebuilds more slowly", i, w)
		}
		// The slow oracle: bytes over bytes per second, from the inputs alone.
		storedBytes := w.AverageMBPerSec * 1e6 * w.Retention.Seconds() * float64(w.Copies)
		bookieSeconds := storedBytes / float64(zones*w.BookiesPerZone) / (float64(w.BookiesPerZone-1) * w.RereplicationMBPerSecPerBookie * 1e6)
		kafkaSeconds := storedBytes / float64(w.KafkaBrokers) / (w.KafkaThrottleMBPerSec * 1e6)
		if !within(got["recovery.bookie_rebuild"].Value, bookieSeconds, 1e-9) ||
			!within(got["recovery.kafka_broker_rebuild"].Value, kafkaSeconds, 1e-9) {
			t.Fatalf("workload %d %+v: rebuild %v s / %v s, oracle %v s / %v s", i, w,
				got["recovery.bookie_rebuild"].Value, got["recovery.kafka_broker_rebuild"].Value, bookieSeconds, kafkaSeconds)
		}
	}
}

func TestFormat(t *testing.T) {
	for _, tc := range []struct {
		f    Figure
		want string
	}{
		{Figure{Value: 5.184, Unit: TB}, "5.18 TB"},
		{Figure{Value: 15.552, Unit: TB}, "15.6 TB"},
		{Figure{Value: 0.5184, Unit: TB}, "0.518 TB"},
		{Figure{Value: 0, Unit: TB}, "0 TB"},
		{Figure{Value: 700.0 / 3, Unit: MBPerSec, AtLeast: true}, "≥ 233 MB/s"},
		{Figure{Value: 75.03, Unit: Percent, AtLeast: true}, "≥ 75%"},
		{Figure{Value: 11520, Unit: Seconds}, "11,520 s (3.2 h)"},
		{Figure{Value: 576, Unit: Seconds}, "576 s (9.6 min)"},
		{Figure{Value: 42, Unit: Seconds}, "42 s"},
		{Figure{Value: 1234567, Unit: Writes}, "1,234,567 writes"},
	} {
		if got := tc.f.String(); got != tc.want {
			t.Errorf("%+v: %q, want %q", tc.f, got, tc.want)
		}
	}
	for x, want := range map[float64]string{5.184: "5.184", 15.552: "15.55", 100.0 / 3: "33.33", 259200: "259,200", 100: "100"} {
		if got := num(x); got != want {
			t.Errorf("num(%v) = %q, want %q", x, got, want)
		}
	}
}
