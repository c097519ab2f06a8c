// Package quota is Kafka's client quotas: the quota configs of users,
// client ids and IPs (entities, keys and Kafka's validation: this file),
// which configured entity governs a request (Kafka's precedence order:
// Snapshot.Client), the rates measured over Kafka's sampled windows and the
// throttle time they give (rate.go: deterministic, the time comes in as an
// argument) and the configs in the metadata store (store.go: one key per
// entity, CAS updates, listed then watched into an in-memory copy).
//
// It owns no connection and no clock: internal/kafka records what its
// clients send and receive here and mutes their connections for the
// throttle times this package computes.
package quota

import (
	"errors"
	"fmt"
	"math"
	"net/netip"
	"sort"
	"strings"
)

// Entity types (Kafka's ClientQuotaEntity).
const (
	EntityUser     = "user"
	EntityClientID = "client-id"
	EntityIP       = "ip"
)

// Quota keys (Kafka's QuotaConfigs).
const (
	ProducerByteRate       = "producer_byte_rate"
	ConsumerByteRate       = "consumer_byte_rate"
	RequestPercentage      = "request_percentage"
	ControllerMutationRate = "controller_mutation_rate"
	ConnectionCreationRate = "connection_creation_rate"
)

// ErrInvalid marks an entity, key or value Kafka refuses with
// INVALID_REQUEST.
var ErrInvalid = errors.New("invalid client quota")

// Invalid is an ErrInvalid with Kafka's message msg.
func Invalid(msg string) error { return invalidf("%s", msg) }

func invalidf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, args...))
}

// PartKind says how an entity names one of its components.
type PartKind uint8

const (
	Absent  PartKind = iota // the entity has no component of this type
	Default                 // <default>: the entity type's default
	Named                   // a name
)

// Part is one component of an entity.
type Part struct {
	Kind PartKind
	Name string // when Named
}

// Name returns a Named part.
func Name(n string) Part { return Part{Kind: Named, Name: n} }

// DefaultPart is the <default> part.
var DefaultPart = Part{Kind: Default}

// Present says whether the entity has the component.
func (p Part) Present() bool { return p.Kind != Absent }

// NamePtr is the part's name as Kafka's wire carries it (nil: default).
func (p Part) NamePtr() *string {
	if p.Kind != Named {
		return nil
	}
	n := p.Name
	return &n
}

func (p Part) String() string {
	if p.Kind == Default {
		return "<default>"
	}
	return p.Name
}

// Entity is a quota entity: some of user, client id and IP, each named or
// the default. It is comparable, so it keys maps.
type Entity struct {
	User, ClientID, IP Part
}

// Set sets the component of type typ; false for an unknown type.
func (e *Entity) Set(typ string, p Part) bool {
	switch typ {
	case EntityUser:
		e.User = p
	case EntityClientID:
		e.ClientID = p
	case EntityIP:
		e.IP = p
	default:
		return false
	}
	return true
}

// Get is the component of type typ.
func (e Entity) Get(typ string) Part {
	switch typ {
	case EntityUser:
		return e.User
	case EntityClientID:
		return e.ClientID
	case EntityIP:
		return e.IP
	}
	return Part{}
}

// Types are the entity's component types, in a fixed order.
func (e Entity) Types() []string {
	var out []string
	for _, t := range []string{EntityUser, EntityClientID, EntityIP} {
		if e.Get(t).Present() {
			out = append(out, t)
		}
	}
	return out
}

func (e Entity) String() string {
	var parts []string
	for _, t := range e.Types() {
		parts = append(parts, t+"="+e.Get(t).String())
	}
	return "{" + strings.Join(parts, ", ") + "}"
}

// keyType is how Kafka's ConfigDef types a quota key.
type keyType uint8

const (
	typeLong keyType = iota
	typeInt
	typeDouble
)

var (
	clientKeys = map[string]keyType{ProducerByteRate: typeLong, ConsumerByteRate: typeLong, RequestPercentage: typeDouble, ControllerMutationRate: typeDouble}
	ipKeys     = map[string]keyType{ConnectionCreationRate: typeInt}
)

// Validate checks an entity as Kafka's ClientQuotaControlManager does:
// not empty, IP never combined with user or client id, no empty names, an
// IP name an address.
func (e Entity) Validate() error {
	_, err := e.keys()
	return err
}

func (e Entity) keys() (map[string]keyType, error) {
	types := e.Types()
	if len(types) == 0 {
		return nil, invalidf("Invalid empty client quota entity")
	}
	for _, t := range types {
		if p := e.Get(t); p.Kind == Named && p.Name == "" {
			return nil, invalidf("Empty %s not supported", t)
		}
	}
	if e.IP.Present() {
		if e.User.Present() || e.ClientID.Present() {
			return nil, invalidf("Invalid quota entity combination, IP entity should not be combined with User or ClientId")
		}
		if e.IP.Kind == Named {
			if _, err := netip.ParseAddr(e.IP.Name); err != nil {
				return nil, invalidf("%s is not a valid IP or resolvable host.", e.IP.Name)
			}
		}
		return ipKeys, nil
	}
	return clientKeys, nil
}

// CanonicalIP is an IP entity's name as stored (netip's form, so
// "::ffff:1.2.3.4" and "1.2.3.4" do not make two entities).
func CanonicalIP(name string) string {
	if a, err := netip.ParseAddr(name); err == nil {
		return a.Unmap().String()
	}
	return name
}

// ValidateValue checks one key's value for the entity as Kafka's
// validateQuotaKeyValue does.
func (e Entity) ValidateValue(key string, value float64) error {
	keys, err := e.keys()
	if err != nil {
		return err
	}
	typ, ok := keys[key]
	if !ok {
		return invalidf("Invalid configuration key %s", key)
	}
	if !(value > 0) || math.IsInf(value, 0) {
		return invalidf("Quota %s must be greater than 0", key)
	}
	switch typ {
	case typeInt:
		if value > math.MaxInt32 {
			return invalidf("Proposed value for %s is too large for an INT.", key)
		}
	case typeLong:
		if value > math.MaxInt64 {
			return invalidf("Proposed value for %s is too large for a LONG.", key)
		}
	}
	if typ != typeDouble && value != math.Floor(value) {
		return invalidf("%s cannot be a fractional value.", key)
	}
	return nil
}

// Values are an entity's quotas by key.
type Values map[string]float64

// Op is one change of an alteration: set Key to Value, or remove it.
type Op struct {
	Key    string
	Value  float64
	Remove bool
}

// Apply returns v changed by ops (v is not modified). Ops must have been
// validated.
func (v Values) Apply(ops []Op) Values {
	out := make(Values, len(v)+len(ops))
	for k, x := range v {
		out[k] = x
	}
	for _, op := range ops {
		if op.Remove {
			delete(out, op.Key)
		} else {
			out[op.Key] = op.Value
		}
	}
	return out
}

// Keys are v's keys, sorted.
func (v Values) Keys() []string {
	keys := make([]string, 0, len(v))
	for k := range v {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// ValidateOps checks an alteration of e as Kafka does: the entity, each
// key named once, each value set valid for the entity (removals of any
// known or unknown key are accepted, as Kafka ignores them).
func ValidateOps(e Entity, ops []Op) error {
	if err := e.Validate(); err != nil {
		return err
	}
	seen := make(map[string]bool, len(ops))
	for _, op := range ops {
		if seen[op.Key] {
			return invalidf("Duplicate quota key %s not updating quota for this entity %v", op.Key, e)
		}
		seen[op.Key] = true
		if !op.Remove {
			if err := e.ValidateValue(op.Key, op.Value); err != nil {
				return err
			}
		}
	}
	return nil
}

// Snapshot is an immutable copy of every entity's quotas.
type Snapshot struct {
	entities map[Entity]Values
	// clients: some user or client-id entity has a quota; ips: some IP
	// entity has one. A request's lookup stops at these when false.
	clients, ips bool
}

// NewSnapshot makes a snapshot of quotas (which it keeps; entities with
// no values are left out).
func NewSnapshot(quotas map[Entity]Values) *Snapshot {
	s := &Snapshot{entities: make(map[Entity]Values, len(quotas))}
	for e, v := range quotas {
		if len(v) == 0 {
			continue
		}
		s.entities[e] = v
		if e.IP.Present() {
			s.ips = true
		} else {
			s.clients = true
		}
	}
	return s
}

// Empty says whether no user or client-id entity has a quota.
func (s *Snapshot) Empty() bool { return s == nil || !s.clients }

// HasIPQuotas says whether some IP entity has a quota.
func (s *Snapshot) HasIPQuotas() bool { return s != nil && s.ips }

// Get is an entity's quotas (nil: none).
func (s *Snapshot) Get(e Entity) Values {
	if s == nil {
		return nil
	}
	return s.entities[e]
}

// Entities are the entities with quotas, in a stable order.
func (s *Snapshot) Entities() []Entity {
	if s == nil {
		return nil
	}
	out := make([]Entity, 0, len(s.entities))
	for e := range s.entities {
		out = append(out, e)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].String() < out[j].String() })
	return out
}

// Bucket is who a quota's usage is counted for: Kafka's quota metric tags
// (user, client-id), empty where the governing entity has no such part.
// Every user under a <default> user quota has a bucket of its own.
type Bucket struct {
	User, ClientID string
}

// Client finds the quota of key that governs a request from user (a
// principal's name) with clientID, in Kafka's precedence order
// (DefaultQuotaCallback): user and client id, user and default client id,
// user, default user and client id, default user and default client id,
// default user, client id, default client id. ok is false when none does.
func (s *Snapshot) Client(user, clientID, key string) (b Bucket, limit float64, ok bool) {
	if s.Empty() {
		return Bucket{}, 0, false
	}
	u, c, d := Name(user), Name(clientID), DefaultPart
	levels := [...]struct {
		e        Entity
		withUser bool
		withID   bool
	}{
		{Entity{User: u, ClientID: c}, true, true},
		{Entity{User: u, ClientID: d}, true, true},
		{Entity{User: u}, true, false},
		{Entity{User: d, ClientID: c}, true, true},
		{Entity{User: d, ClientID: d}, true, true},
		{Entity{User: d}, true, false},
		{Entity{ClientID: c}, false, true},
		{Entity{ClientID: d}, false, true},
	}
	for _, l := range levels {
		v, found := s.entities[l.e][key]
		if !found {
			continue
		}
		if l.withUser {
			b.User = user
		}
		if l.withID {
			b.ClientID = clientID
		}
		return b, v, true
	}
	return Bucket{}, 0, false
}

// IP is the connection_creation_rate governing connections from ip: the
// IP's own, else the default IP's.
func (s *Snapshot) IP(ip string) (limit float64, ok bool) {
	if !s.HasIPQuotas() {
		return 0, false
	}
	if v, found := s.entities[Entity{IP: Name(CanonicalIP(ip))}][ConnectionCreationRate]; found {
		return v, true
	}
	v, found := s.entities[Entity{IP: DefaultPart}][ConnectionCreationRate]
	return v, found
}

// MatchType is a DescribeClientQuotas filter component's match type.
type MatchType int8

const (
	MatchExact     MatchType = 0 // the named entity
	MatchDefault   MatchType = 1 // the type's default
	MatchSpecified MatchType = 2 // any entity with the type, named or default
)

// FilterComponent is one component of a describe filter.
type FilterComponent struct {
	Type  string
	Match MatchType
	Name  *string // MatchExact only
}

// Filter is a DescribeClientQuotas filter.
type Filter struct {
	Components []FilterComponent
	// Strict: only entities with exactly the filter's types match.
	Strict bool
}

// ErrUnsupportedEntityType marks a filter naming an entity type Kafka
// does not know (UNSUPPORTED_VERSION in Kafka's ClientQuotasImage).
var ErrUnsupportedEntityType = errors.New("unsupported entity type")

// Validate checks a filter as Kafka's ClientQuotasImage.describe does.
func (f Filter) Validate() error {
	seen := make(map[string]bool)
	for _, c := range f.Components {
		if c.Type == "" {
			return invalidf("Invalid empty entity type.")
		}
		if seen[c.Type] {
			return invalidf("Entity type %s cannot appear more than once in the filter.", c.Type)
		}
		seen[c.Type] = true
		if c.Type != EntityUser && c.Type != EntityClientID && c.Type != EntityIP {
			return fmt.Errorf("%w %s", ErrUnsupportedEntityType, c.Type)
		}
		switch c.Match {
		case MatchExact:
			if c.Name == nil {
				return invalidf("Request specified MATCH_TYPE_EXACT, but set match string to null.")
			}
		case MatchDefault:
			if c.Name != nil {
				return invalidf("Request specified MATCH_TYPE_DEFAULT, but also specified a match string.")
			}
		case MatchSpecified:
			if c.Name != nil {
				return invalidf("Request specified MATCH_TYPE_SPECIFIED, but also specified a match string.")
			}
		default:
			return invalidf("Unsupported match type %d", c.Match)
		}
	}
	if seen[EntityIP] && (seen[EntityUser] || seen[EntityClientID]) {
		return invalidf("Invalid entity filter component combination. IP filter component should not be used with user or clientId filter component.")
	}
	return nil
}

// Matches says whether the (valid) filter selects e.
func (f Filter) Matches(e Entity) bool {
	if f.Strict && len(e.Types()) != len(f.Components) {
		return false
	}
	for _, c := range f.Components {
		p := e.Get(c.Type)
		switch c.Match {
		case MatchExact:
			want := *c.Name
			if c.Type == EntityIP {
				want = CanonicalIP(want)
			}
			if p.Kind != Named || p.Name != want {
				return false
			}
		case MatchDefault:
			if p.Kind != Default {
				return false
			}
		case MatchSpecified:
			if !p.Present() {
				return false
			}
		}
	}
	return true
}
