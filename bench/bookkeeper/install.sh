#!/usr/bin/env bash
# install.sh — install Apache BookKeeper (bookie server and client) and the
# ZooKeeper server it registers with, from Maven Central, into a cache
# directory, and compile the load generator (LoadGen.java) against them.
#
# Usage: bench/bookkeeper/install.sh      # prints the install directory
#   BOOKKEEPER_VERSION   default 4.17.2
#   BOOKKEEPER_CACHE     cache root (default $HOME/.cache/quire-bench)
#
# Result: $dir/libs/*.jar (bookkeeper-server with its dependencies, plus the
# two jars a ZooKeeper *server* needs that bookkeeper-server leaves out) and
# $dir/classes/LoadGen.class. Idempotent: a complete install is reused.
set -euo pipefail

version=${BOOKKEEPER_VERSION:-4.17.2}
cache=${BOOKKEEPER_CACHE:-$HOME/.cache/quire-bench}
home=$cache/bookkeeper-$version
libs=$home/libs
here=$(cd "$(dirname "$0")" && pwd)

if [[ -f $libs/.complete && $home/classes/LoadGen.class -nt $here/LoadGen.java ]]; then
	echo "$home"
	exit 0
fi
command -v java >/dev/null || { echo "install.sh: java (17+) is required" >&2; exit 1; }
command -v mvn >/dev/null || { echo "install.sh: mvn is required (apt-get install maven)" >&2; exit 1; }

mkdir -p "$home"
if [[ ! -f $libs/.complete ]]; then
	work=$(mktemp -d)
	trap 'rm -rf "$work"' EXIT
	cat >"$work/pom.xml" <<POM
<?xml version="1.0" encoding="UTF-8"?>
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>quire.bench</groupId>
  <artifactId>bookkeeper-libs</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency><groupId>org.apache.bookkeeper</groupId><artifactId>bookkeeper-server</artifactId><version>$version</version></dependency>
    <!-- Needed by ZooKeeperServerMain, excluded by bookkeeper-server. -->
    <dependency><groupId>io.dropwizard.metrics</groupId><artifactId>metrics-core</artifactId><version>4.1.12.1</version></dependency>
    <dependency><groupId>org.xerial.snappy</groupId><artifactId>snappy-java</artifactId><version>1.1.10.5</version></dependency>
  </dependencies>
</project>
POM
	rm -rf "$libs.tmp"
	timeout 900 mvn -B -q -f "$work/pom.xml" dependency:copy-dependencies \
		-DincludeScope=runtime -DoutputDirectory="$libs.tmp" >&2
	rm -rf "$libs"
	mv "$libs.tmp" "$libs"
	touch "$libs/.complete"
fi
rm -rf "$home/classes"
mkdir -p "$home/classes"
javac -nowarn -cp "$libs/*" -d "$home/classes" "$here/LoadGen.java" >&2
echo "$home"
