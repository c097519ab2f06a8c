package broker

// Every key this package writes. The catalogue, ownership, the managed
// ledgers and the group coordinator keep theirs in their own packages.
//
//	/quire/kafka/floors/<storage name>    a partition's offset floor (partition.Config.FloorKey)
//	/quire/kafka/broker-configs/<id>      a broker's dynamic configs (JSON; "default": the cluster's), isr_throttle.go
const (
	floorsPrefix        = "/quire/kafka/floors/"
	brokerConfigsPrefix = "/quire/kafka/broker-configs/"
)

// floorKey is the offset-floor key of a partition's storage.
func floorKey(storage string) string { return floorsPrefix + storage }
