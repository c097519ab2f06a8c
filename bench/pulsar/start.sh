#!/usr/bin/env bash
# start.sh DIR PORT — starts Apache Pulsar's standalone (installed by
# install.sh) in DIR with the Pulsar protocol on 127.0.0.1:PORT and the admin
# REST API on PORT+1, journal fsynced before acknowledging (as Quire), one
# bookie (E1/Qw1/Qa1); waits until public/default exists (bounded by 240 s)
# and prints its PID. The caller stops it (kill PID).
set -euo pipefail
dir=$1
p=$2
heap=${PULSAR_HEAP:-1g}
home=$("$(dirname "$0")/install.sh")
mkdir -p "$dir/conf" "$dir/logs"
cat >"$dir/conf/standalone.conf" <<CONF
clusterName=standalone
metadataStoreUrl=
configurationMetadataStoreUrl=
brokerServicePort=$p
webServicePort=$((p + 1))
bindAddress=127.0.0.1
advertisedAddress=127.0.0.1
loadManagerClassName=org.apache.pulsar.broker.loadbalance.NoopLoadManager
loadBalancerEnabled=false
managedLedgerDefaultEnsembleSize=1
managedLedgerDefaultWriteQuorum=1
managedLedgerDefaultAckQuorum=1
bookkeeperUseV2WireProtocol=true
allowAutoTopicCreation=true
allowAutoTopicCreationType=non-partitioned
transactionCoordinatorEnabled=false
webSocketServiceEnabled=false
functionsWorkerEnabled=false
authenticationEnabled=false
authorizationEnabled=false
statusFilePath=
ledgerStorageClass=org.apache.bookkeeper.bookie.storage.ldb.DbLedgerStorage
nettyMaxFrameSizeBytes=5253120
dbStorage_writeCacheMaxSizeMb=64
dbStorage_readAheadCacheMaxSizeMb=64
journalMaxGroupWaitMSec=1
journalSyncData=true
allowLoopback=true
listeningInterface=lo
diskUsageThreshold=0.99
diskUsageWarnThreshold=0.99
CONF
(cd "$dir" && exec java -Xms256m -Xmx"$heap" -XX:MaxDirectMemorySize="$heap" -XX:+UseG1GC \
	-Dpulsar.log.dir=logs -Djava.net.preferIPv4Stack=true -Dio.netty.tryReflectionSetAccessible=true \
	--add-opens java.base/java.io=ALL-UNNAMED --add-opens java.base/java.util.zip=ALL-UNNAMED \
	--add-opens java.base/java.nio=ALL-UNNAMED --add-opens java.base/jdk.internal.misc=ALL-UNNAMED \
	--add-opens java.base/sun.net=ALL-UNNAMED --add-opens java.management/sun.management=ALL-UNNAMED \
	-Dbookkeeper.metadata.bookie.drivers=org.apache.pulsar.metadata.bookkeeper.PulsarMetadataBookieDriver \
	-Dbookkeeper.metadata.client.drivers=org.apache.pulsar.metadata.bookkeeper.PulsarMetadataClientDriver \
	-cp "$home/libs/*" org.apache.pulsar.PulsarStandaloneStarter \
	--config conf/standalone.conf --no-functions-worker --no-stream-storage) >"$dir/logs/stdout.log" 2>&1 &
pid=$!
deadline=$((SECONDS + 240))
until curl -sf "127.0.0.1:$((p + 1))/admin/v2/namespaces/public" 2>/dev/null | grep -q public/default; do
	kill -0 "$pid" 2>/dev/null || { echo "start.sh: Pulsar exited; see $dir/logs" >&2; exit 1; }
	((SECONDS < deadline)) || { echo "start.sh: Pulsar not ready within 240 s" >&2; kill "$pid"; exit 1; }
	sleep 0.5
done
echo "$pid"
