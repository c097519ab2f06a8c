package main

import (
	"context"
	"slices"
	"testing"

	"quire/internal/auth"
)

func TestParseSuperUsers(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []auth.Principal
		ok   bool
	}{
		{"", nil, true},
		{"User:alice", []auth.Principal{auth.User("alice")}, true},
		{"User:alice; User:bob ;", []auth.Principal{auth.User("alice"), auth.User("bob")}, true},
		{"User:a:b", []auth.Principal{auth.User("a:b")}, true},
		{"alice", nil, false},
		{"User:", nil, false},
	} {
		got, err := parseSuperUsers(tc.in)
		if (err == nil) != tc.ok || !slices.Equal(got, tc.want) {
			t.Errorf("parseSuperUsers(%q) = %v, %v; want %v (ok %v)", tc.in, got, err, tc.want, tc.ok)
		}
	}
}

// TestACLFlagsNeedTheAuthorizer: the ACL options without --kafka-authorizer
// are a mistake, refused before anything starts.
func TestACLFlagsNeedTheAuthorizer(t *testing.T) {
	for _, flags := range []aclFlags{{superUsers: "User:a"}, {allowIfNoACLFound: true}} {
		if az, err := flags.authorizer(context.Background(), nil, nil, nil); err == nil || az != nil {
			t.Errorf("%+v without --kafka-authorizer: %v, %v", flags, az, err)
		}
	}
	if az, err := (&aclFlags{}).authorizer(context.Background(), nil, nil, nil); err != nil || az != nil {
		t.Errorf("no ACL flags: %v, %v; want no authorizer", az, err)
	}
}
