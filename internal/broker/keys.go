package broker

// Every key this package writes. The catalogue, ownership, the managed
// ledgers and the group coordinator keep theirs in their own packages.
//
//	/quire/kafka/floors/<storage name>    a partition's offset floor (partition.Config.FloorKey)
const floorsPrefix = "/quire/kafka/floors/"

// floorKey is the offset-floor key of a partition's storage.
func floorKey(storage string) string { return floorsPrefix + storage }
