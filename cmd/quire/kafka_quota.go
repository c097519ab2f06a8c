package main

import "github.com/spf13/pflag"

// quotaFlags bound what one client may take of the Kafka listener beside
// the client quotas (which are set with kafka-configs at run time and kept
// in the metadata store): Kafka's max.connections.per.ip.
type quotaFlags struct {
	maxConnectionsPerIP int
}

func (q *quotaFlags) register(f *pflag.FlagSet) {
	f.IntVar(&q.maxConnectionsPerIP, "kafka-max-connections-per-ip", 0, "refuse a Kafka connection from an IP that already has this many open (Kafka's max.connections.per.ip; 0: unlimited). Client quotas (producer_byte_rate, consumer_byte_rate, request_percentage, connection_creation_rate) are set with kafka-configs --alter --entity-type users/clients/ips")
}
