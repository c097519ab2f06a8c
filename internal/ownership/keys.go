package ownership

import (
	"strconv"
	"strings"

	"quire/internal/catalog"
)

// Every key this package writes. Values are JSON. It also watches the
// catalogue's namespace keys (catalog.NamespacesPrefix) for bundle
// boundaries.
//
//	/quire/brokers/<id>                            Registration, ephemeral (the broker's session)
//	/quire/ownership/<tenant>/<ns>/<0xlo_0xhi>     owner {brokerID, kafkaAddr, httpAddr}, ephemeral (the owner's session)
//
// Broker ids are allocated from the meta sequence "broker" when not configured.
const (
	BrokersPrefix   = "/quire/brokers/"
	OwnershipPrefix = "/quire/ownership/"

	// BrokerIDSequence is the meta.Store.AllocateID sequence for broker ids.
	BrokerIDSequence = "broker"
)

func brokerKey(id int32) string { return BrokersPrefix + strconv.FormatInt(int64(id), 10) }

func ownershipKey(b catalog.Bundle) string {
	return OwnershipPrefix + b.Namespace + "/" + b.Range()
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

func parseOwnershipKey(key string) (catalog.Bundle, bool) {
	rest, ok := strings.CutPrefix(key, OwnershipPrefix)
	if !ok {
		return catalog.Bundle{}, false
	}
	i := strings.LastIndexByte(rest, '/')
	if i < 0 {
		return catalog.Bundle{}, false
	}
	b, err := catalog.ParseBundle(rest[:i], rest[i+1:])
	if err != nil {
		return catalog.Bundle{}, false
	}
	return b, true
}
