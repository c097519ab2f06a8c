package auth

import (
	"reflect"
	"testing"
)

// FuzzDecodeACL feeds arbitrary bytes to the decoder of the ACL store's
// values (anyone who can write to the metadata store can put them there).
// It must never panic; what it accepts is a valid ACL, which encodes to a
// value that decodes to the same ACL under the same key.
func FuzzDecodeACL(f *testing.F) {
	for _, a := range []ACL{
		{ResourceType: ResourceTopic, PatternType: PatternLiteral, ResourceName: "orders", Principal: User("alice"), Host: "*", Operation: OpRead, Permission: PermissionAllow},
		{ResourceType: ResourceCluster, PatternType: PatternLiteral, ResourceName: ClusterName, Principal: User("*"), Host: "10.0.0.1", Operation: OpAlter, Permission: PermissionDeny},
		{ResourceType: ResourceGroup, PatternType: PatternPrefixed, ResourceName: "app/%x", Principal: Principal{Type: "User", Name: "a:b"}, Host: "::1", Operation: OpAll, Permission: PermissionAllow},
	} {
		f.Add(encodeACL(a))
	}
	f.Add([]byte(`{"resource_type":2,"pattern_type":2,"resource_name":"t","principal":"User:a","host":"*","operation":3,"permission":3}`))
	f.Add([]byte(`{"resource_type":200}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, value []byte) {
		a, err := decodeACL(value)
		if err != nil {
			return
		}
		if verr := a.Validate(); verr != nil {
			t.Fatalf("decoded an invalid ACL %v: %v", a, verr)
		}
		again, err := decodeACL(encodeACL(a))
		if err != nil {
			t.Fatalf("re-encoded %v does not decode: %v", a, err)
		}
		if !reflect.DeepEqual(a, again) || aclKey(a) != aclKey(again) {
			t.Fatalf("round trip changed %v into %v", a, again)
		}
	})
}
