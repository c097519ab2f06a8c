package quota

import (
	"errors"
	"testing"
)

// TestQuotaPrecedence: Kafka's eight levels, each winning over the ones
// below it, with the bucket Kafka's metric tags would name.
func TestQuotaPrecedence(t *testing.T) {
	u, c, d := Name("alice"), Name("app"), DefaultPart
	levels := []struct {
		e    Entity
		want Bucket
	}{
		{Entity{User: u, ClientID: c}, Bucket{"alice", "app"}},
		{Entity{User: u, ClientID: d}, Bucket{"alice", "app"}},
		{Entity{User: u}, Bucket{"alice", ""}},
		{Entity{User: d, ClientID: c}, Bucket{"alice", "app"}},
		{Entity{User: d, ClientID: d}, Bucket{"alice", "app"}},
		{Entity{User: d}, Bucket{"alice", ""}},
		{Entity{ClientID: c}, Bucket{"", "app"}},
		{Entity{ClientID: d}, Bucket{"", "app"}},
	}
	for top := range levels {
		quotas := map[Entity]Values{}
		for i := top; i < len(levels); i++ {
			quotas[levels[i].e] = Values{ProducerByteRate: float64(1000 + i)}
		}
		// A quota of another key never governs this one.
		quotas[Entity{User: u, ClientID: c}] = Values{ConsumerByteRate: 1, ProducerByteRate: quotas[Entity{User: u, ClientID: c}][ProducerByteRate]}
		if top > 0 {
			delete(quotas[Entity{User: u, ClientID: c}], ProducerByteRate)
		}
		snap := NewSnapshot(quotas)
		b, limit, ok := snap.Client("alice", "app", ProducerByteRate)
		if !ok || limit != float64(1000+top) || b != levels[top].want {
			t.Errorf("level %d (%v): got %v %v %v, want %v %v", top, levels[top].e, b, limit, ok, levels[top].want, 1000+top)
		}
	}
	snap := NewSnapshot(map[Entity]Values{{User: Name("bob")}: {ProducerByteRate: 5}})
	if _, _, ok := snap.Client("alice", "app", ProducerByteRate); ok {
		t.Error("bob's quota governs alice")
	}
	if !NewSnapshot(nil).Empty() {
		t.Error("no quotas is not empty")
	}
	ips := NewSnapshot(map[Entity]Values{{IP: d}: {ConnectionCreationRate: 10}, {IP: Name("10.0.0.1")}: {ConnectionCreationRate: 2}})
	if l, ok := ips.IP("10.0.0.1"); !ok || l != 2 {
		t.Errorf("named IP: %v %v", l, ok)
	}
	if l, ok := ips.IP("::ffff:10.0.0.2"); !ok || l != 10 {
		t.Errorf("default IP: %v %v", l, ok)
	}
	if !ips.Empty() {
		t.Error("IP quotas count as client quotas")
	}
}

// TestQuotaValidation: Kafka's INVALID_REQUEST cases of an alteration.
func TestQuotaValidation(t *testing.T) {
	user := Entity{User: Name("alice")}
	for _, tc := range []struct {
		name string
		e    Entity
		ops  []Op
		ok   bool
	}{
		{"valid", user, []Op{{Key: ProducerByteRate, Value: 1024}, {Key: RequestPercentage, Value: 12.5}}, true},
		{"remove unknown key", user, []Op{{Key: "nope", Remove: true}}, true},
		{"empty entity", Entity{}, []Op{{Key: ProducerByteRate, Value: 1}}, false},
		{"empty name", Entity{User: Name("")}, []Op{{Key: ProducerByteRate, Value: 1}}, false},
		{"unknown key", user, []Op{{Key: "bogus", Value: 1}}, false},
		{"ip key on user", user, []Op{{Key: ConnectionCreationRate, Value: 1}}, false},
		{"zero", user, []Op{{Key: ProducerByteRate, Value: 0}}, false},
		{"fractional long", user, []Op{{Key: ProducerByteRate, Value: 1.5}}, false},
		{"duplicate key", user, []Op{{Key: ProducerByteRate, Value: 1}, {Key: ProducerByteRate, Value: 2}}, false},
		{"ip with user", Entity{User: Name("a"), IP: Name("1.2.3.4")}, []Op{{Key: ConnectionCreationRate, Value: 1}}, false},
		{"bad ip", Entity{IP: Name("not-an-ip")}, []Op{{Key: ConnectionCreationRate, Value: 1}}, false},
		{"ip rate", Entity{IP: DefaultPart}, []Op{{Key: ConnectionCreationRate, Value: 10}}, true},
		{"ip rate too large", Entity{IP: DefaultPart}, []Op{{Key: ConnectionCreationRate, Value: 1 << 40}}, false},
	} {
		err := ValidateOps(tc.e, tc.ops)
		if tc.ok != (err == nil) || err != nil && !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %v", tc.name, err)
		}
	}
}

// TestQuotaFilters: exact, default and specified components, strict or
// not, and the invalid filters.
func TestQuotaFilters(t *testing.T) {
	name := func(s string) *string { return &s }
	alice := Entity{User: Name("alice")}
	aliceApp := Entity{User: Name("alice"), ClientID: Name("app")}
	defUser := Entity{User: DefaultPart}
	app := Entity{ClientID: Name("app")}
	all := []Entity{alice, aliceApp, defUser, app}
	for _, tc := range []struct {
		f    Filter
		want []Entity
	}{
		{Filter{Components: []FilterComponent{{Type: EntityUser, Match: MatchExact, Name: name("alice")}}, Strict: true}, []Entity{alice}},
		{Filter{Components: []FilterComponent{{Type: EntityUser, Match: MatchExact, Name: name("alice")}}}, []Entity{alice, aliceApp}},
		{Filter{Components: []FilterComponent{{Type: EntityUser, Match: MatchDefault}}}, []Entity{defUser}},
		{Filter{Components: []FilterComponent{{Type: EntityUser, Match: MatchSpecified}}, Strict: true}, []Entity{alice, defUser}},
		{Filter{Components: []FilterComponent{{Type: EntityClientID, Match: MatchSpecified}}, Strict: true}, []Entity{app}},
		{Filter{}, all},
		{Filter{Strict: true}, nil},
	} {
		var got []Entity
		for _, e := range all {
			if tc.f.Matches(e) {
				got = append(got, e)
			}
		}
		if len(got) != len(tc.want) {
			t.Errorf("%+v: matched %v, want %v", tc.f, got, tc.want)
			continue
		}
		for i := range got {
			if got[i] != tc.want[i] {
				t.Errorf("%+v: matched %v, want %v", tc.f, got, tc.want)
			}
		}
	}
	for _, f := range []Filter{
		{Components: []FilterComponent{{Type: "", Match: MatchSpecified}}},
		{Components: []FilterComponent{{Type: EntityUser, Match: MatchExact}}},
		{Components: []FilterComponent{{Type: EntityUser, Match: MatchDefault, Name: name("x")}}},
		{Components: []FilterComponent{{Type: EntityUser, Match: MatchSpecified}, {Type: EntityUser, Match: MatchDefault}}},
		{Components: []FilterComponent{{Type: EntityUser, Match: MatchSpecified}, {Type: EntityIP, Match: MatchDefault}}},
	} {
		if err := f.Validate(); !errors.Is(err, ErrInvalid) {
			t.Errorf("%+v: %v, want ErrInvalid", f, err)
		}
	}
	if err := (Filter{Components: []FilterComponent{{Type: "topic", Match: MatchSpecified}}}).Validate(); !errors.Is(err, ErrUnsupportedEntityType) {
		t.Errorf("unknown type: %v", err)
	}
}
