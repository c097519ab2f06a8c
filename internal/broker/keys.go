package broker

import (
	"strconv"
	"strings"
)

// Every key this package reads or writes. Values are JSON.
//
//	/quire/brokers/<id>                            BrokerInfo, ephemeral (the broker's session)
//	/quire/admin/tenants/<tenant>                  TenantInfo
//	/quire/admin/namespaces/<tenant>/<ns>          Policies
//	/quire/admin/topics/<tenant>/<ns>/<topic>      TopicRecord
//	/quire/ownership/<tenant>/<ns>/<0xlo_0xhi>     owner {brokerID, kafkaAddr, httpAddr}, ephemeral (the owner's session)
//
// Broker ids are allocated from the meta sequence "broker" when not configured.
const (
	BrokersPrefix    = "/quire/brokers/"
	TenantsPrefix    = "/quire/admin/tenants/"
	NamespacesPrefix = "/quire/admin/namespaces/"
	TopicsPrefix     = "/quire/admin/topics/"
	OwnershipPrefix  = "/quire/ownership/"

	// BrokerIDSequence is the meta.Store.AllocateID sequence for broker ids.
	BrokerIDSequence = "broker"
)

func brokerKey(id int32) string { return BrokersPrefix + strconv.FormatInt(int64(id), 10) }

func tenantKey(tenant string) string { return TenantsPrefix + tenant }

// namespaceKey takes a validated "tenant/ns".
func namespaceKey(ns string) string { return NamespacesPrefix + ns }

func tenantNamespacesPrefix(tenant string) string { return NamespacesPrefix + tenant + "/" }

func topicKey(ns, topic string) string { return TopicsPrefix + ns + "/" + topic }

func namespaceTopicsPrefix(ns string) string { return TopicsPrefix + ns + "/" }

func ownershipKey(b Bundle) string { return OwnershipPrefix + b.Namespace + "/" + b.Range() }

// parseNamespaceKey returns "tenant/ns" for a namespace key.
func parseNamespaceKey(key string) (string, bool) {
	rest, ok := strings.CutPrefix(key, NamespacesPrefix)
	if !ok {
		return "", false
	}
	if _, _, err := ParseNamespace(rest); err != nil {
		return "", false
	}
	return rest, true
}

func parseBrokerKey(key string) (int32, bool) {
	rest, ok := strings.CutPrefix(key, BrokersPrefix)
	if !ok {
		return 0, false
	}
	id, err := strconv.ParseInt(rest, 10, 32)
	if err != nil {
		return 0, false
	}
	return int32(id), true
}

func parseOwnershipKey(key string) (Bundle, bool) {
	rest, ok := strings.CutPrefix(key, OwnershipPrefix)
	if !ok {
		return Bundle{}, false
	}
	i := strings.LastIndexByte(rest, '/')
	if i < 0 {
		return Bundle{}, false
	}
	b, err := ParseBundle(rest[:i], rest[i+1:])
	if err != nil {
		return Bundle{}, false
	}
	return b, true
}
