package kafka_test

import (
	"testing"

	dto "github.com/prometheus/client_model/go"
)

// requestCount sums quire_kafka_requests_total for api over error codes.
func requestCount(t *testing.T, c *cluster, api string) float64 {
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
			if label(m, "api") == api {
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
