#!/usr/bin/env bash
# java.sh — the Java Kafka client (kafka-clients 4.x) against a Kafka-protocol
# server: idempotent acks=all produce, classic-group consume, commitSync,
# restart, resume at the committed offsets, no gaps. See
# java/src/main/java/quire/interop/ClientCheck.java.
#
# Usage: interop/java.sh [bootstrap] [key=value ...]    (default 127.0.0.1:9092)
#   keys: records (100000), partitions (4), rf (1), commitAfter (60% of records),
#         topic, group, phaseTimeoutSec (120), allowDuplicates, deleteTopic
#   JAVA_CHECK_TIMEOUT  seconds the whole check may take (default 600)
#   KAFKA_CLIENTS_VERSION  kafka-clients version to build with (default: the pom's)
#
# Builds with Maven on first use (needs Maven Central once; later runs build
# offline from the local repository) and exits with the check's status.
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
bootstrap=${1:-127.0.0.1:9092}
shift $(($# > 0 ? 1 : 0))
command -v mvn >/dev/null || { echo "java.sh: mvn is required (apt-get install maven)" >&2; exit 2; }
command -v java >/dev/null || { echo "java.sh: java 17+ is required" >&2; exit 2; }

mvn_args=(-B -q -Dstyle.color=never -f "$here/java/pom.xml")
[[ -n ${KAFKA_CLIENTS_VERSION:-} ]] && mvn_args+=("-Dkafka.version=$KAFKA_CLIENTS_VERSION")
# Offline first so a warm local repository needs no network; online if that
# fails. target/lib is rebuilt each time so no jar of an older pom lingers.
rm -rf "$here/java/target/lib"
if ! timeout 300 mvn "${mvn_args[@]}" -o package -DskipTests >/dev/null 2>&1; then
	echo "java.sh: building (first run downloads dependencies)" >&2
	timeout 600 mvn "${mvn_args[@]}" package -DskipTests >&2 || { echo "java.sh: FAIL (build)" >&2; exit 2; }
fi

# slf4j-simple: warnings from the client (retries, errors) on stderr.
exec timeout --kill-after=10 "${JAVA_CHECK_TIMEOUT:-600}" java -Xmx1g \
	-Dorg.slf4j.simpleLogger.defaultLogLevel=warn \
	-Dorg.slf4j.simpleLogger.showDateTime=true \
	-cp "$here/java/target/classes:$here/java/target/lib/*" \
	quire.interop.ClientCheck "bootstrap=$bootstrap" "$@"
