package kafka_test

import (
	"testing"

	dto "github.com/prometheus/client_model/go"
)

// requestCount sums quire_kafka_requests_total for api over error codes.
func requestCount(t *testing.T, c *cluster, api string) float64 {
	return requestCountWithError(t, c, api, "")
}

// requestCountWithError counts api's requests answered with the error
// (named as kerr names it); "" counts all.
func requestCountWithError(t *testing.T, c *cluster, api, errName string) float64 {
	t.Helper()
	families, err := c.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var n float64
	for _, f := range families {
		if f.GetName() != "quire_kafka_requests_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			if label(m, "api") == api && (errName == "" || label(m, "error") == errName) {
				n += m.GetCounter().GetValue()
			}
		}
	}
	return n
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

func TestMetrics(t *testing.T) {
	c := newCluster(t)
	conn := c.raw()
	conn.request(produceRequest(9, "nope", 0, recordBatch(t, 1, "v")))
	if n := requestCountWithError(t, c, "Produce", "UNKNOWN_TOPIC_OR_PARTITION"); n != 1 {
		t.Fatalf("produce errors counted %v", n)
	}
	families, err := c.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, f := range families {
		seen[f.GetName()] = true
		if f.GetName() == "quire_kafka_connections" && f.GetMetric()[0].GetGauge().GetValue() != 1 {
			t.Errorf("connections %v", f.GetMetric()[0].GetGauge().GetValue())
		}
	}
	for _, name := range []string{"quire_kafka_requests_total", "quire_kafka_request_duration_seconds", "quire_kafka_connections"} {
		if !seen[name] {
			t.Errorf("metric %s not registered", name)
		}
	}
}
