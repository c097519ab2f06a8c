package pulsar

import "testing"

func TestCanonicalTopic(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"t", "persistent://public/default/t"},
		{"t-partition-3", "persistent://public/default/t-partition-3"},
		{"acme/ns/t", "persistent://acme/ns/t"},
		{"persistent://acme/ns/t", "persistent://acme/ns/t"},
		{"non-persistent://acme/ns/t", "non-persistent://acme/ns/t"},
		{"ns/t", "ns/t"}, // invalid: left for the Backend to refuse
		{"acme/cluster/ns/t", "acme/cluster/ns/t"}, // v1 names are not supported
	} {
		if got := CanonicalTopic(tc.in); got != tc.want {
			t.Errorf("CanonicalTopic(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
	for _, tc := range []struct {
		name string
		want int
	}{{"persistent://a/b/t-partition-7", 7}, {"persistent://a/b/t", -1}, {"persistent://a/b/t-partition-x", -1}} {
		if got := partitionIndexOf(tc.name); got != tc.want {
			t.Errorf("partitionIndexOf(%q) = %d, want %d", tc.name, got, tc.want)
		}
	}
}
