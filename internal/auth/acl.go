package auth

// Kafka's access control lists: the model (resource patterns, entries,
// filters, with Kafka's numeric codes so the front end copies them to and
// from the wire unchanged) and the decision (Authorizer), as Kafka's
// StandardAuthorizer makes it:
//
//   - a super user may do everything;
//   - the ACLs that apply to a resource are the LITERAL ones naming it, the
//     LITERAL ones naming "*" and the PREFIXED ones whose name starts it;
//   - of those, an entry applies to a request when its principal is the
//     request's or User:*, its host is the client's address or "*", and its
//     operation is the request's or ALL; an ALLOW entry also applies when
//     its operation implies the request's (READ, WRITE, DELETE and ALTER
//     imply DESCRIBE; ALTER_CONFIGS implies DESCRIBE_CONFIGS), a DENY entry
//     never by implication;
//   - any DENY that applies denies (DENY wins), else any ALLOW allows;
//   - with no ACL at all on the resource (of any principal or operation),
//     allow.everyone.if.no.acl.found decides (default: deny).
//
// The ACLs themselves live in the metadata store (acl_store.go); an
// Authorizer decides from the in-memory copy, so a decision never waits for
// the store.

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
)

// ResourceType is Kafka's ResourceType code.
type ResourceType int8

const (
	ResourceUnknown         ResourceType = 0
	ResourceAny             ResourceType = 1 // filters only
	ResourceTopic           ResourceType = 2
	ResourceGroup           ResourceType = 3
	ResourceCluster         ResourceType = 4
	ResourceTransactionalID ResourceType = 5
)

// ClusterName is the only name of the CLUSTER resource (Kafka's
// "kafka-cluster").
const ClusterName = "kafka-cluster"

// Wildcard is the LITERAL resource name that matches every resource of its
// type, and the host that matches every client.
const Wildcard = "*"

// WildcardPrincipal is the ACL principal that matches every user.
var WildcardPrincipal = Principal{Type: PrincipalTypeUser, Name: Wildcard}

func (t ResourceType) String() string {
	switch t {
	case ResourceAny:
		return "ANY"
	case ResourceTopic:
		return "TOPIC"
	case ResourceGroup:
		return "GROUP"
	case ResourceCluster:
		return "CLUSTER"
	case ResourceTransactionalID:
		return "TRANSACTIONAL_ID"
	}
	return fmt.Sprintf("UNKNOWN(%d)", int8(t))
}

// PatternType is Kafka's PatternType code.
type PatternType int8

const (
	PatternUnknown  PatternType = 0
	PatternAny      PatternType = 1 // filters only: any pattern type, exact name
	PatternMatch    PatternType = 2 // filters only: the patterns that would apply to the name
	PatternLiteral  PatternType = 3
	PatternPrefixed PatternType = 4
)

func (p PatternType) String() string {
	switch p {
	case PatternAny:
		return "ANY"
	case PatternMatch:
		return "MATCH"
	case PatternLiteral:
		return "LITERAL"
	case PatternPrefixed:
		return "PREFIXED"
	}
	return fmt.Sprintf("UNKNOWN(%d)", int8(p))
}

// Operation is Kafka's AclOperation code.
type Operation int8

const (
	OpUnknown         Operation = 0
	OpAny             Operation = 1 // filters only
	OpAll             Operation = 2
	OpRead            Operation = 3
	OpWrite           Operation = 4
	OpCreate          Operation = 5
	OpDelete          Operation = 6
	OpAlter           Operation = 7
	OpDescribe        Operation = 8
	OpClusterAction   Operation = 9
	OpDescribeConfigs Operation = 10
	OpAlterConfigs    Operation = 11
	OpIdempotentWrite Operation = 12
)

var operationNames = map[Operation]string{
	OpAny: "ANY", OpAll: "ALL", OpRead: "READ", OpWrite: "WRITE", OpCreate: "CREATE", OpDelete: "DELETE",
	OpAlter: "ALTER", OpDescribe: "DESCRIBE", OpClusterAction: "CLUSTER_ACTION",
	OpDescribeConfigs: "DESCRIBE_CONFIGS", OpAlterConfigs: "ALTER_CONFIGS", OpIdempotentWrite: "IDEMPOTENT_WRITE",
}

func (o Operation) String() string {
	if name, ok := operationNames[o]; ok {
		return name
	}
	return fmt.Sprintf("UNKNOWN(%d)", int8(o))
}

// Operations lists the operations an ACL may name, ALL first (the
// authorized-operations bit sets of Metadata and DescribeGroups).
var Operations = []Operation{OpAll, OpRead, OpWrite, OpCreate, OpDelete, OpAlter, OpDescribe,
	OpClusterAction, OpDescribeConfigs, OpAlterConfigs, OpIdempotentWrite}

// Permission is Kafka's AclPermissionType code.
type Permission int8

const (
	PermissionUnknown Permission = 0
	PermissionAny     Permission = 1 // filters only
	PermissionDeny    Permission = 2
	PermissionAllow   Permission = 3
)

func (p Permission) String() string {
	switch p {
	case PermissionAny:
		return "ANY"
	case PermissionDeny:
		return "DENY"
	case PermissionAllow:
		return "ALLOW"
	}
	return fmt.Sprintf("UNKNOWN(%d)", int8(p))
}

// ACL is one binding: who (principal, host) may or may not (permission) do
// what (operation) on which resources (type, name, pattern type).
type ACL struct {
	ResourceType ResourceType
	ResourceName string
	PatternType  PatternType
	Principal    Principal
	Host         string // an IP address or "*"
	Operation    Operation
	Permission   Permission
}

func (a ACL) String() string {
	return fmt.Sprintf("(%s %s %s) %s %s from %s on %s", a.ResourceType, a.PatternType, a.ResourceName,
		a.Permission, a.Principal, a.Host, a.Operation)
}

// ErrInvalidACL is wrapped by every reason Validate refuses an ACL; the
// front end answers INVALID_REQUEST with its message.
var ErrInvalidACL = errors.New("invalid ACL")

// Validate checks an ACL before it is stored, as Kafka's AclControlManager
// and CreateAcls do.
func (a ACL) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrInvalidACL}, args...)...)
	}
	switch {
	case a.ResourceType < ResourceTopic || a.ResourceType > ResourceTransactionalID:
		return bad("invalid resource type %s", a.ResourceType)
	case a.PatternType != PatternLiteral && a.PatternType != PatternPrefixed:
		return bad("invalid pattern type %s", a.PatternType)
	case a.ResourceName == "":
		return bad("resource name should not be empty")
	case a.ResourceType == ResourceCluster && a.ResourceName != ClusterName:
		return bad("the only valid name for the CLUSTER resource is %s", ClusterName)
	case a.ResourceType == ResourceCluster && a.PatternType != PatternLiteral:
		return bad("the CLUSTER resource takes LITERAL patterns only")
	case a.Operation < OpAll || a.Operation > OpIdempotentWrite:
		return bad("invalid operation %s", a.Operation)
	case a.Permission != PermissionAllow && a.Permission != PermissionDeny:
		return bad("invalid permission type %s", a.Permission)
	case a.Principal.Type == "" || a.Principal.Name == "":
		return bad("invalid principal %q (want Type:name, e.g. User:alice)", a.Principal.String())
	case a.Host == "":
		return bad("host should not be empty (use * for every host)")
	}
	return nil
}

// ParsePrincipal reads Kafka's Type:name form (the name may contain ':').
func ParsePrincipal(s string) (Principal, error) {
	typ, name, ok := strings.Cut(s, ":")
	if !ok || typ == "" || name == "" {
		return Principal{}, fmt.Errorf("%w: principal %q is not Type:name", ErrInvalidACL, s)
	}
	return Principal{Type: typ, Name: name}, nil
}

// ACLFilter selects ACLs (DescribeAcls, DeleteAcls). Nil strings and the
// ANY codes select everything; PatternMatch selects, for a name, the
// patterns that apply to it (literal name, literal "*", prefixes of it).
type ACLFilter struct {
	ResourceType ResourceType
	ResourceName *string
	PatternType  PatternType
	Principal    *string // Type:name, compared as a string
	Host         *string
	Operation    Operation
	Permission   Permission
}

// Validate refuses filters no ACL could ever match by mistake (UNKNOWN
// codes), as Kafka does.
func (f ACLFilter) Validate() error {
	switch {
	case f.ResourceType <= ResourceUnknown || f.ResourceType > ResourceTransactionalID:
		return fmt.Errorf("%w: filter resource type %s", ErrInvalidACL, f.ResourceType)
	case f.PatternType <= PatternUnknown || f.PatternType > PatternPrefixed:
		return fmt.Errorf("%w: filter pattern type %s", ErrInvalidACL, f.PatternType)
	case f.Operation <= OpUnknown || f.Operation > OpIdempotentWrite:
		return fmt.Errorf("%w: filter operation %s", ErrInvalidACL, f.Operation)
	case f.Permission <= PermissionUnknown || f.Permission > PermissionAllow:
		return fmt.Errorf("%w: filter permission type %s", ErrInvalidACL, f.Permission)
	}
	return nil
}

// Matches reports whether f selects a (Kafka's AclBindingFilter.matches).
func (f ACLFilter) Matches(a ACL) bool {
	if f.ResourceType != ResourceAny && f.ResourceType != a.ResourceType {
		return false
	}
	if f.PatternType != PatternAny && f.PatternType != PatternMatch && f.PatternType != a.PatternType {
		return false
	}
	if f.ResourceName != nil {
		name := *f.ResourceName
		switch {
		case f.PatternType != PatternMatch:
			if name != a.ResourceName {
				return false
			}
		case a.PatternType == PatternLiteral:
			if name != a.ResourceName && a.ResourceName != Wildcard {
				return false
			}
		case a.PatternType == PatternPrefixed:
			if !strings.HasPrefix(name, a.ResourceName) {
				return false
			}
		}
	}
	switch {
	case f.Principal != nil && *f.Principal != a.Principal.String():
		return false
	case f.Host != nil && *f.Host != a.Host:
		return false
	case f.Operation != OpAny && f.Operation != a.Operation:
		return false
	case f.Permission != PermissionAny && f.Permission != a.Permission:
		return false
	}
	return true
}

// implies reports whether an ALLOW of granted also allows op.
func implies(granted, op Operation) bool {
	switch {
	case granted == OpAll || granted == op:
		return true
	case op == OpDescribe:
		return granted == OpRead || granted == OpWrite || granted == OpDelete || granted == OpAlter
	case op == OpDescribeConfigs:
		return granted == OpAlterConfigs
	}
	return false
}

// Requester is who asks: the authenticated principal and the client's
// address (invalid when unknown: then only host "*" entries apply).
type Requester struct {
	Principal Principal
	Host      netip.Addr
}

// aclIndex is an immutable snapshot of the ACLs, indexed for decisions.
type aclIndex struct {
	// literal holds LITERAL ACLs by resource (the "*" name included).
	literal map[resourceKey][]indexedACL
	// prefixed holds PREFIXED ACLs by resource type. Decisions scan them;
	// prefixed ACLs are few in practice (one per application prefix).
	prefixed map[ResourceType][]indexedACL
	all      []ACL
}

type resourceKey struct {
	rtype ResourceType
	name  string
}

type indexedACL struct {
	ACL
	host    netip.Addr // parsed Host; invalid for "*" or an unparsable one
	anyHost bool
}

func newACLIndex(acls []ACL) *aclIndex {
	idx := &aclIndex{literal: make(map[resourceKey][]indexedACL), prefixed: make(map[ResourceType][]indexedACL), all: acls}
	for _, a := range acls {
		ia := indexACL(a)
		if a.PatternType == PatternPrefixed {
			idx.prefixed[a.ResourceType] = append(idx.prefixed[a.ResourceType], ia)
		} else {
			k := resourceKey{a.ResourceType, a.ResourceName}
			idx.literal[k] = append(idx.literal[k], ia)
		}
	}
	return idx
}

func indexACL(a ACL) indexedACL {
	ia := indexedACL{ACL: a, anyHost: a.Host == Wildcard}
	if !ia.anyHost {
		if addr, err := netip.ParseAddr(a.Host); err == nil {
			ia.host = addr.Unmap()
		}
	}
	return ia
}

// applies reports whether the entry of a covers who doing op.
func (a *indexedACL) applies(who Requester, op Operation) bool {
	if a.Principal != who.Principal && a.Principal != WildcardPrincipal {
		return false
	}
	if !a.anyHost && (!a.host.IsValid() || !who.Host.IsValid() || a.host != who.Host.Unmap()) {
		return false
	}
	if a.Permission == PermissionDeny {
		return a.Operation == OpAll || a.Operation == op
	}
	return implies(a.Operation, op)
}

// decide is the ACL part of a decision: found reports whether any ACL is on
// the resource at all.
func (idx *aclIndex) decide(who Requester, op Operation, rtype ResourceType, name string) (allowed, found bool) {
	allow, deny := false, false
	visit := func(acls []indexedACL) {
		for i := range acls {
			a := &acls[i]
			found = true
			if !a.applies(who, op) {
				continue
			}
			if a.Permission == PermissionDeny {
				deny = true
			} else {
				allow = true
			}
		}
	}
	visit(idx.literal[resourceKey{rtype, name}])
	if name != Wildcard {
		visit(idx.literal[resourceKey{rtype, Wildcard}])
	}
	for i := range idx.prefixed[rtype] {
		if a := &idx.prefixed[rtype][i]; strings.HasPrefix(name, a.ResourceName) {
			visit(idx.prefixed[rtype][i : i+1])
		}
	}
	return allow && !deny, found
}

// AuthorizerConfig configures an Authorizer.
type AuthorizerConfig struct {
	// SuperUsers may do everything (Kafka's super.users).
	SuperUsers []Principal
	// AllowEveryoneIfNoACLFound allows every request on a resource that
	// has no ACL at all (Kafka's allow.everyone.if.no.acl.found).
	AllowEveryoneIfNoACLFound bool
}

// Authorizer decides requests against an ACL source: an *ACLStore's copy,
// or a fixed list (NewStaticAuthorizer, for tests).
type Authorizer struct {
	cfg   AuthorizerConfig
	index func() *aclIndex
	// Store is where the ACLs are changed (CreateAcls, DeleteAcls); nil
	// for a static authorizer.
	Store *ACLStore
}

// NewAuthorizer decides from store's in-memory copy of the ACLs.
func NewAuthorizer(store *ACLStore, cfg AuthorizerConfig) *Authorizer {
	return &Authorizer{cfg: cfg, index: store.snapshot, Store: store}
}

// NewStaticAuthorizer decides from a fixed list of ACLs.
func NewStaticAuthorizer(acls []ACL, cfg AuthorizerConfig) *Authorizer {
	idx := newACLIndex(slices.Clone(acls))
	return &Authorizer{cfg: cfg, index: func() *aclIndex { return idx }}
}

// IsSuperUser reports whether p is one of the super users.
func (a *Authorizer) IsSuperUser(p Principal) bool { return slices.Contains(a.cfg.SuperUsers, p) }

// Authorize decides whether who may do op on the resource (rtype, name).
func (a *Authorizer) Authorize(who Requester, op Operation, rtype ResourceType, name string) bool {
	if a.IsSuperUser(who.Principal) {
		return true
	}
	allowed, found := a.index().decide(who, op, rtype, name)
	if !found {
		return a.cfg.AllowEveryoneIfNoACLFound
	}
	return allowed
}

// AuthorizeAny decides whether who may do op on some resource of type
// rtype (Kafka's authorizeByResourceType, which lets a producer with WRITE
// on any topic be idempotent): an ALLOW that applies, on a pattern no DENY
// that applies covers (a literal or prefixed DENY whose name starts the
// allowed one, or a literal "*" DENY).
func (a *Authorizer) AuthorizeAny(who Requester, op Operation, rtype ResourceType) bool {
	if a.IsSuperUser(who.Principal) {
		return true
	}
	idx := a.index()
	var allows, denies []indexedACL
	found := false
	for _, acl := range idx.all {
		if acl.ResourceType != rtype {
			continue
		}
		found = true
		entry := indexACL(acl)
		if !entry.applies(who, op) {
			continue
		}
		if acl.Permission == PermissionDeny {
			denies = append(denies, entry)
		} else {
			allows = append(allows, entry)
		}
	}
	if !found {
		return a.cfg.AllowEveryoneIfNoACLFound
	}
	denied := func(allow indexedACL) bool {
		for _, d := range denies {
			switch {
			case d.PatternType == PatternLiteral && d.ResourceName == Wildcard:
				return true
			case d.PatternType == PatternLiteral && allow.PatternType == PatternLiteral && d.ResourceName == allow.ResourceName:
				return true
			case d.PatternType == PatternPrefixed && strings.HasPrefix(allow.ResourceName, d.ResourceName):
				return true
			}
		}
		return false
	}
	for _, allow := range allows {
		if !denied(allow) {
			return true
		}
	}
	return false
}
