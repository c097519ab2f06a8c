package plan

import (
	"encoding/json"
	"math"
	"strconv"
	"strings"
)

// String is the figure in the seed's notation: "5.18 TB", "≥ 233 MB/s",
// "11,520 s (3.2 h)", "12,000 writes".
func (f Figure) String() string {
	var b strings.Builder
	if f.AtLeast {
		b.WriteString("≥ ")
	}
	b.WriteString(FormatNumber(f.Value))
	if f.Unit != Percent {
		b.WriteByte(' ')
	}
	b.WriteString(string(f.Unit))
	if f.Unit == Seconds {
		switch {
		case f.Value >= 3600:
			b.WriteString(" (" + trimZeros(strconv.FormatFloat(f.Value/3600, 'f', 1, 64)) + " h)")
		case f.Value >= 60:
			b.WriteString(" (" + trimZeros(strconv.FormatFloat(f.Value/60, 'f', 1, 64)) + " min)")
		}
	}
	return b.String()
}

// FormatNumber writes x as the seed does: three significant figures below
// 1,000 (5.18, 15.6, 233, 0.518) and whole numbers with thousands separators
// above (11,520).
func FormatNumber(x float64) string {
	ax := math.Abs(x)
	var s string
	switch {
	case ax == 0:
		return "0"
	case ax >= 1000:
		return group(int64(math.Round(x)))
	case ax >= 100:
		s = strconv.FormatFloat(x, 'f', 0, 64)
	case ax >= 10:
		s = strconv.FormatFloat(x, 'f', 1, 64)
	case ax >= 1:
		s = strconv.FormatFloat(x, 'f', 2, 64)
	default:
		s = strconv.FormatFloat(x, 'g', 3, 64)
	}
	return trimZeros(s)
}

// num writes a number inside a formula: one more significant figure than
// FormatNumber (5.184, 15.55, 1.728, 33.33), so that the formula, worked by
// hand, gives the printed value rather than one off by the rounding.
func num(x float64) string {
	if math.Abs(x) >= 1000 || x == 0 {
		return FormatNumber(x)
	}
	return trimZeros(strconv.FormatFloat(x, 'g', 4, 64))
}

func trimZeros(s string) string {
	if !strings.Contains(s, ".") || strings.ContainsAny(s, "eE") {
		return s
	}
	s = strings.TrimRight(s, "0")
	return strings.TrimSuffix(s, ".")
}

// group writes n with a comma every three digits.
func group(n int64) string {
	digits := strconv.FormatInt(n, 10)
	sign := ""
	if n < 0 {
		sign, digits = "-", digits[1:]
	}
	var b strings.Builder
	for i, d := range digits {
		if i > 0 && (len(digits)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(d)
	}
	return sign + b.String()
}

// workloadJSON is Workload's JSON form: stable names, units last, durations
// in seconds.
type workloadJSON struct {
	PeakMBPerSec                   float64 `json:"peak_mb_per_s"`
	AverageMBPerSec                float64 `json:"average_mb_per_s"`
	RetentionSeconds               float64 `json:"retention_s"`
	ConsumerGroups                 int     `json:"consumer_groups"`
	Zones                          int     `json:"zones"`
	Copies                         int     `json:"copies"`
	KafkaBrokers                   int     `json:"kafka_brokers"`
	KafkaThrottleMBPerSec          float64 `json:"kafka_throttle_mb_per_s"`
	LedgerBrokers                  int     `json:"ledger_brokers"`
	BookiesPerZone                 int     `json:"bookies_per_zone"`
	RereplicationMBPerSecPerBookie float64 `json:"rereplication_mb_per_s_per_bookie"`
	LargeClusterNodes              int     `json:"large_cluster_nodes"`
	TopicsPerBroker                int     `json:"topics_per_broker"`
	MetadataWritesPerTopic         int     `json:"metadata_writes_per_topic"`
	OperatorDelaySeconds           float64 `json:"operator_delay_s"`
}

// MarshalJSON writes the workload under the names `quire plan --json`
// documents.
func (w Workload) MarshalJSON() ([]byte, error) {
	return json.Marshal(workloadJSON{
		PeakMBPerSec:                   w.PeakMBPerSec,
		AverageMBPerSec:                w.AverageMBPerSec,
		RetentionSeconds:               w.Retention.Seconds(),
		ConsumerGroups:                 w.ConsumerGroups,
		Zones:                          w.Zones,
		Copies:                         w.Copies,
		KafkaBrokers:                   w.KafkaBrokers,
		KafkaThrottleMBPerSec:          w.KafkaThrottleMBPerSec,
		LedgerBrokers:                  w.LedgerBrokers,
		BookiesPerZone:                 w.BookiesPerZone,
		RereplicationMBPerSecPerBookie: w.RereplicationMBPerSecPerBookie,
		LargeClusterNodes:              w.LargeClusterNodes,
		TopicsPerBroker:                w.TopicsPerBroker,
		MetadataWritesPerTopic:         w.MetadataWritesPerTopic,
		OperatorDelaySeconds:           w.OperatorDelay.Seconds(),
	})
}
