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
command -v mvn >/dev/null || { echo "install.sh: mvn is required (apt-get install maven)" >&2; exit 1; }

mkdir -p "$home"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cat >"$work/pom.xml" <<POM
<?xml version="1.0" encoding="UTF-8"?>
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>quire.bench</groupId>
  <artifactId>kafka-libs</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <dependencies>
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
  </dependencies>
</project>
POM
rm -rf "$libs.tmp"
# -B: no progress bars; the timeout bounds a stuck download.
timeout 900 mvn -B -q -f "$work/pom.xml" dependency:copy-dependencies \
	-DincludeScope=runtime -DoutputDirectory="$libs.tmp" >&2
rm -rf "$libs"
mv "$libs.tmp" "$libs"
touch "$libs/.complete"
echo "$home"
