#!/usr/bin/env bash
# install.sh — install Apache Kafka (broker, KRaft controller and tools) from
# Maven Central into a cache directory, for the peer benchmark and interop tests.
#
# Usage: bench/kafka/install.sh            # prints the install directory
#   KAFKA_VERSION   Kafka version (default 4.1.1)
#   KAFKA_CACHE     cache root (default $HOME/.cache/quire-bench)
#
# The result is $KAFKA_CACHE/kafka-$KAFKA_VERSION/libs/*.jar: every jar a broker
# needs (kafka_2.13 and its dependencies, kafka-tools, kafka-storage and a
# log4j2 binding), so that `java -cp 'libs/*' kafka.Kafka server.properties`
# runs a broker. Idempotent: a completed install (marked by libs/.complete) is
# reused without touching the network. Maven Central is the only source this
# uses; apache.org download mirrors are not needed.
set -euo pipefail

version=${KAFKA_VERSION:-4.1.1}
log4j_version=${KAFKA_LOG4J_VERSION:-2.24.3}
slf4j_version=${KAFKA_SLF4J_VERSION:-2.0.17}
cache=${KAFKA_CACHE:-$HOME/.cache/quire-bench}
home=$cache/kafka-$version
libs=$home/libs

if [[ -f $libs/.complete ]]; then
	echo "$home"
	exit 0
fi
command -v java >/dev/null || { echo "install.sh: java (17+) is required" >&2; exit 1; }

"$(dirname "$0")/../maven-libs.sh" "$libs" kafka-libs <<DEPS
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka_2.13</artifactId><version>$version</version></dependency>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka-server</artifactId><version>$version</version></dependency>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka-storage</artifactId><version>$version</version></dependency>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka-tools</artifactId><version>$version</version></dependency>
    <!-- Pinned: Maven's nearest-wins would otherwise pick slf4j 1.7 from a
         transitive dependency, which the log4j2 slf4j2 binding cannot serve. -->
    <dependency><groupId>org.slf4j</groupId><artifactId>slf4j-api</artifactId><version>$slf4j_version</version></dependency>
    <dependency><groupId>org.apache.logging.log4j</groupId><artifactId>log4j-api</artifactId><version>$log4j_version</version></dependency>
    <dependency><groupId>org.apache.logging.log4j</groupId><artifactId>log4j-core</artifactId><version>$log4j_version</version></dependency>
    <dependency><groupId>org.apache.logging.log4j</groupId><artifactId>log4j-slf4j2-impl</artifactId><version>$log4j_version</version></dependency>
DEPS
echo "$home"
