package auth_test

import (
	"errors"
	"net/netip"
	"testing"

	"quire/internal/auth"
)

func allow(rtype auth.ResourceType, pattern auth.PatternType, name, principal string, op auth.Operation) auth.ACL {
	p, err := auth.ParsePrincipal(principal)
	if err != nil {
		panic(err)
	}
	return auth.ACL{ResourceType: rtype, PatternType: pattern, ResourceName: name, Principal: p, Host: "*", Operation: op, Permission: auth.PermissionAllow}
}

func deny(rtype auth.ResourceType, pattern auth.PatternType, name, principal string, op auth.Operation) auth.ACL {
	a := allow(rtype, pattern, name, principal, op)
	a.Permission = auth.PermissionDeny
	return a
}

func onHost(a auth.ACL, host string) auth.ACL { a.Host = host; return a }

const (
	topic   = auth.ResourceTopic
	group   = auth.ResourceGroup
	cluster = auth.ResourceCluster
	literal = auth.PatternLiteral
	prefix  = auth.PatternPrefixed
)

func TestAuthorize(t *testing.T) {
	alice := auth.Requester{Principal: auth.User("alice"), Host: netip.MustParseAddr("10.0.0.1")}
	bob := auth.Requester{Principal: auth.User("bob"), Host: netip.MustParseAddr("10.0.0.2")}
	root := auth.Requester{Principal: auth.User("root"), Host: netip.MustParseAddr("10.0.0.3")}
	for _, tc := range []struct {
		name         string
		acls         []auth.ACL
		allowNoACL   bool
		who          auth.Requester
		op           auth.Operation
		rtype        auth.ResourceType
		resource     string
		want         bool
		wantAnyTopic *bool // AuthorizeAny(who, op, rtype) when set
	}{
		{name: "no ACL denies", who: alice, op: auth.OpRead, rtype: topic, resource: "t", want: false},
		{name: "no ACL with allow.everyone allows", allowNoACL: true, who: alice, op: auth.OpRead, rtype: topic, resource: "t", want: true},
		{name: "an ACL of another principal counts as found", allowNoACL: true,
			acls: []auth.ACL{allow(topic, literal, "t", "User:bob", auth.OpRead)}, who: alice, op: auth.OpRead, rtype: topic, resource: "t", want: false},
		{name: "literal allow", acls: []auth.ACL{allow(topic, literal, "t", "User:alice", auth.OpRead)}, who: alice, op: auth.OpRead, rtype: topic, resource: "t", want: true},
		{name: "literal is not a prefix", acls: []auth.ACL{allow(topic, literal, "t", "User:alice", auth.OpRead)}, who: alice, op: auth.OpRead, rtype: topic, resource: "t2", want: false},
		{name: "other resource type", acls: []auth.ACL{allow(group, literal, "t", "User:alice", auth.OpRead)}, who: alice, op: auth.OpRead, rtype: topic, resource: "t", want: false},
		{name: "prefixed allow", acls: []auth.ACL{allow(topic, prefix, "app-", "User:alice", auth.OpWrite)}, who: alice, op: auth.OpWrite, rtype: topic, resource: "app-orders", want: true},
		{name: "prefixed does not match shorter", acls: []auth.ACL{allow(topic, prefix, "app-", "User:alice", auth.OpWrite)}, who: alice, op: auth.OpWrite, rtype: topic, resource: "app", want: false},
		{name: "literal wildcard resource", acls: []auth.ACL{allow(topic, literal, "*", "User:alice", auth.OpRead)}, who: alice, op: auth.OpRead, rtype: topic, resource: "anything", want: true},
		{name: "prefixed * is a prefix, not a wildcard", acls: []auth.ACL{allow(topic, prefix, "*", "User:alice", auth.OpRead)}, who: alice, op: auth.OpRead, rtype: topic, resource: "anything", want: false},
		{name: "wildcard principal", acls: []auth.ACL{allow(topic, literal, "t", "User:*", auth.OpRead)}, who: bob, op: auth.OpRead, rtype: topic, resource: "t", want: true},
		{name: "other principal", acls: []auth.ACL{allow(topic, literal, "t", "User:alice", auth.OpRead)}, who: bob, op: auth.OpRead, rtype: topic, resource: "t", want: false},
		{name: "ALL allows every operation", acls: []auth.ACL{allow(topic, literal, "t", "User:alice", auth.OpAll)}, who: alice, op: auth.OpDelete, rtype: topic, resource: "t", want: true},
		{name: "READ implies DESCRIBE", acls: []auth.ACL{allow(topic, literal, "t", "User:alice", auth.OpRead)}, who: alice, op: auth.OpDescribe, rtype: topic, resource: "t", want: true},
		{name: "WRITE implies DESCRIBE", acls: []auth.ACL{allow(topic, literal, "t", "User:alice", auth.OpWrite)}, who: alice, op: auth.OpDescribe, rtype: topic, resource: "t", want: true},
		{name: "DELETE implies DESCRIBE", acls: []auth.ACL{allow(topic, literal, "t", "User:alice", auth.OpDelete)}, who: alice, op: auth.OpDescribe, rtype: topic, resource: "t", want: true},
		{name: "ALTER implies DESCRIBE", acls: []auth.ACL{allow(topic, literal, "t", "User:alice", auth.OpAlter)}, who: alice, op: auth.OpDescribe, rtype: topic, resource: "t", want: true},
		{name: "CREATE does not imply DESCRIBE", acls: []auth.ACL{allow(topic, literal, "t", "User:alice", auth.OpCreate)}, who: alice, op: auth.OpDescribe, rtype: topic, resource: "t", want: false},
		{name: "READ does not imply WRITE", acls: []auth.ACL{allow(topic, literal, "t", "User:alice", auth.OpRead)}, who: alice, op: auth.OpWrite, rtype: topic, resource: "t", want: false},
		{name: "DESCRIBE does not imply READ", acls: []auth.ACL{allow(topic, literal, "t", "User:alice", auth.OpDescribe)}, who: alice, op: auth.OpRead, rtype: topic, resource: "t", want: false},
		{name: "ALTER_CONFIGS implies DESCRIBE_CONFIGS", acls: []auth.ACL{allow(topic, literal, "t", "User:alice", auth.OpAlterConfigs)}, who: alice, op: auth.OpDescribeConfigs, rtype: topic, resource: "t", want: true},
		{name: "DESCRIBE_CONFIGS does not imply ALTER_CONFIGS", acls: []auth.ACL{allow(topic, literal, "t", "User:alice", auth.OpDescribeConfigs)}, who: alice, op: auth.OpAlterConfigs, rtype: topic, resource: "t", want: false},
		{name: "deny wins over allow", acls: []auth.ACL{
			allow(topic, literal, "t", "User:alice", auth.OpRead), deny(topic, literal, "t", "User:alice", auth.OpRead),
		}, who: alice, op: auth.OpRead, rtype: topic, resource: "t", want: false},
		{name: "prefixed deny wins over literal allow", acls: []auth.ACL{
			allow(topic, literal, "app-x", "User:alice", auth.OpWrite), deny(topic, prefix, "app-", "User:*", auth.OpWrite),
		}, who: alice, op: auth.OpWrite, rtype: topic, resource: "app-x", want: false},
		{name: "deny ALL wins over allow READ", acls: []auth.ACL{
			allow(topic, literal, "t", "User:alice", auth.OpRead), deny(topic, literal, "*", "User:alice", auth.OpAll),
		}, who: alice, op: auth.OpRead, rtype: topic, resource: "t", want: false},
		{name: "deny READ does not deny DESCRIBE", acls: []auth.ACL{
			allow(topic, literal, "t", "User:alice", auth.OpDescribe), deny(topic, literal, "t", "User:alice", auth.OpRead),
		}, who: alice, op: auth.OpDescribe, rtype: topic, resource: "t", want: true},
		{name: "deny of another principal does not apply", acls: []auth.ACL{
			allow(topic, literal, "t", "User:*", auth.OpRead), deny(topic, literal, "t", "User:bob", auth.OpRead),
		}, who: alice, op: auth.OpRead, rtype: topic, resource: "t", want: true},
		{name: "host matches", acls: []auth.ACL{onHost(allow(topic, literal, "t", "User:alice", auth.OpRead), "10.0.0.1")}, who: alice, op: auth.OpRead, rtype: topic, resource: "t", want: true},
		{name: "host does not match", acls: []auth.ACL{onHost(allow(topic, literal, "t", "User:bob", auth.OpRead), "10.0.0.1")}, who: bob, op: auth.OpRead, rtype: topic, resource: "t", want: false},
		{name: "IPv4-mapped IPv6 client is its IPv4 host", acls: []auth.ACL{onHost(allow(topic, literal, "t", "User:alice", auth.OpRead), "10.0.0.1")},
			who: auth.Requester{Principal: auth.User("alice"), Host: netip.MustParseAddr("::ffff:10.0.0.1")}, op: auth.OpRead, rtype: topic, resource: "t", want: true},
		{name: "deny from one host", acls: []auth.ACL{
			allow(topic, literal, "t", "User:*", auth.OpRead), onHost(deny(topic, literal, "t", "User:*", auth.OpRead), "10.0.0.2"),
		}, who: bob, op: auth.OpRead, rtype: topic, resource: "t", want: false},
		{name: "super user without ACLs", who: root, op: auth.OpAlter, rtype: cluster, resource: auth.ClusterName, want: true},
		{name: "super user despite a deny", acls: []auth.ACL{deny(topic, literal, "t", "User:root", auth.OpAll)}, who: root, op: auth.OpRead, rtype: topic, resource: "t", want: true},
		{name: "cluster ALTER", acls: []auth.ACL{allow(cluster, literal, auth.ClusterName, "User:alice", auth.OpAlter)}, who: alice, op: auth.OpAlter, rtype: cluster, resource: auth.ClusterName, want: true},
		{name: "WRITE on some topic makes idempotent", acls: []auth.ACL{allow(topic, prefix, "app-", "User:alice", auth.OpWrite)},
			who: alice, op: auth.OpWrite, rtype: topic, resource: "other", want: false, wantAnyTopic: ptr(true)},
		{name: "WRITE on some topic, all denied", acls: []auth.ACL{allow(topic, literal, "a", "User:alice", auth.OpWrite), deny(topic, literal, "*", "User:alice", auth.OpWrite)},
			who: alice, op: auth.OpWrite, rtype: topic, resource: "a", want: false, wantAnyTopic: ptr(false)},
		{name: "WRITE on a prefix denied by a shorter prefix", acls: []auth.ACL{allow(topic, prefix, "app-x", "User:alice", auth.OpWrite), deny(topic, prefix, "app-", "User:alice", auth.OpWrite)},
			who: alice, op: auth.OpWrite, rtype: topic, resource: "app-x1", want: false, wantAnyTopic: ptr(false)},
		{name: "READ only is not WRITE on some topic", acls: []auth.ACL{allow(topic, literal, "a", "User:alice", auth.OpRead)},
			who: alice, op: auth.OpWrite, rtype: topic, resource: "a", want: false, wantAnyTopic: ptr(false)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, a := range tc.acls {
				if err := a.Validate(); err != nil {
					t.Fatalf("test ACL %v: %v", a, err)
				}
			}
			az := auth.NewStaticAuthorizer(tc.acls, auth.AuthorizerConfig{SuperUsers: []auth.Principal{auth.User("root")}, AllowEveryoneIfNoACLFound: tc.allowNoACL})
			if got := az.Authorize(tc.who, tc.op, tc.rtype, tc.resource); got != tc.want {
				t.Errorf("Authorize(%v, %s, %s %q) = %v, want %v", tc.who.Principal, tc.op, tc.rtype, tc.resource, got, tc.want)
			}
			if tc.wantAnyTopic != nil {
				if got := az.AuthorizeAny(tc.who, tc.op, tc.rtype); got != *tc.wantAnyTopic {
					t.Errorf("AuthorizeAny(%v, %s, %s) = %v, want %v", tc.who.Principal, tc.op, tc.rtype, got, *tc.wantAnyTopic)
				}
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }

func TestACLValidate(t *testing.T) {
	good := allow(topic, literal, "t", "User:alice", auth.OpRead)
	for _, tc := range []struct {
		name   string
		change func(*auth.ACL)
	}{
		{"ANY resource type", func(a *auth.ACL) { a.ResourceType = auth.ResourceAny }},
		{"unknown resource type", func(a *auth.ACL) { a.ResourceType = 9 }},
		{"MATCH pattern", func(a *auth.ACL) { a.PatternType = auth.PatternMatch }},
		{"ANY pattern", func(a *auth.ACL) { a.PatternType = auth.PatternAny }},
		{"empty name", func(a *auth.ACL) { a.ResourceName = "" }},
		{"cluster named otherwise", func(a *auth.ACL) { a.ResourceType, a.ResourceName = cluster, "c" }},
		{"ANY operation", func(a *auth.ACL) { a.Operation = auth.OpAny }},
		{"unknown operation", func(a *auth.ACL) { a.Operation = 42 }},
		{"ANY permission", func(a *auth.ACL) { a.Permission = auth.PermissionAny }},
		{"no principal", func(a *auth.ACL) { a.Principal = auth.Principal{} }},
		{"empty host", func(a *auth.ACL) { a.Host = "" }},
	} {
		a := good
		tc.change(&a)
		if err := a.Validate(); !errors.Is(err, auth.ErrInvalidACL) {
			t.Errorf("%s: Validate = %v, want ErrInvalidACL", tc.name, err)
		}
	}
	if err := good.Validate(); err != nil {
		t.Errorf("valid ACL refused: %v", err)
	}
}

func TestACLFilterMatches(t *testing.T) {
	lit := allow(topic, literal, "orders", "User:alice", auth.OpRead)
	star := allow(topic, literal, "*", "User:alice", auth.OpRead)
	pre := allow(topic, prefix, "ord", "User:alice", auth.OpRead)
	other := allow(group, literal, "orders", "User:bob", auth.OpRead)
	name := func(s string) *string { return &s }
	anyFilter := auth.ACLFilter{ResourceType: auth.ResourceAny, PatternType: auth.PatternAny, Operation: auth.OpAny, Permission: auth.PermissionAny}
	for _, tc := range []struct {
		name   string
		change func(*auth.ACLFilter)
		want   []bool // lit, star, pre, other
	}{
		{"everything", func(*auth.ACLFilter) {}, []bool{true, true, true, true}},
		{"topics", func(f *auth.ACLFilter) { f.ResourceType = topic }, []bool{true, true, true, false}},
		{"ANY pattern is the exact name", func(f *auth.ACLFilter) { f.ResourceName = name("orders") }, []bool{true, false, false, true}},
		{"MATCH is what applies to the name", func(f *auth.ACLFilter) { f.ResourceName, f.PatternType = name("orders"), auth.PatternMatch }, []bool{true, true, true, true}},
		{"MATCH of another name", func(f *auth.ACLFilter) { f.ResourceName, f.PatternType = name("x"), auth.PatternMatch }, []bool{false, true, false, false}},
		{"PREFIXED only", func(f *auth.ACLFilter) { f.PatternType = prefix }, []bool{false, false, true, false}},
		{"principal", func(f *auth.ACLFilter) { f.Principal = name("User:bob") }, []bool{false, false, false, true}},
		{"host", func(f *auth.ACLFilter) { f.Host = name("10.0.0.1") }, []bool{false, false, false, false}},
		{"operation", func(f *auth.ACLFilter) { f.Operation = auth.OpWrite }, []bool{false, false, false, false}},
		{"permission", func(f *auth.ACLFilter) { f.Permission = auth.PermissionAllow }, []bool{true, true, true, true}},
	} {
		f := anyFilter
		tc.change(&f)
		for i, a := range []auth.ACL{lit, star, pre, other} {
			if got := f.Matches(a); got != tc.want[i] {
				t.Errorf("%s: Matches(%v) = %v, want %v", tc.name, a, got, tc.want[i])
			}
		}
	}
}
