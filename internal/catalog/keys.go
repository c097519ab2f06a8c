package catalog

import "strings"

// Every key this package reads or writes. Values are JSON.
//
//	/quire/admin/tenants/<tenant>                  TenantInfo
//	/quire/admin/namespaces/<tenant>/<ns>          Policies
//	/quire/admin/topics/<tenant>/<ns>/<topic>      Topic
const (
	TenantsPrefix    = "/quire/admin/tenants/"
	NamespacesPrefix = "/quire/admin/namespaces/"
	TopicsPrefix     = "/quire/admin/topics/"
)

func tenantKey(tenant string) string { return TenantsPrefix + tenant }

// namespaceKey takes a validated "tenant/ns".
func namespaceKey(ns string) string { return NamespacesPrefix + ns }

func tenantNamespacesPrefix(tenant string) string { return NamespacesPrefix + tenant + "/" }

func topicKey(ns, topic string) string { return TopicsPrefix + ns + "/" + topic }

// NamespaceTopicsPrefix is the prefix of every topic record of namespace ns.
func NamespaceTopicsPrefix(ns string) string { return TopicsPrefix + ns + "/" }

// ParseNamespaceKey returns "tenant/ns" for a namespace key.
func ParseNamespaceKey(key string) (string, bool) {
	rest, ok := strings.CutPrefix(key, NamespacesPrefix)
	if !ok {
		return "", false
	}
	if _, _, err := ParseNamespace(rest); err != nil {
		return "", false
	}
	return rest, true
}
