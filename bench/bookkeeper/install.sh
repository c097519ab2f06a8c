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

mkdir -p "$home"
"$here/../maven-libs.sh" "$libs" bookkeeper-libs <<DEPS
    <dependency><groupId>org.apache.bookkeeper</groupId><artifactId>bookkeeper-server</artifactId><version>$version</version></dependency>
    <!-- Needed by ZooKeeperServerMain, excluded by bookkeeper-server. -->
    <dependency><groupId>io.dropwizard.metrics</groupId><artifactId>metrics-core</artifactId><version>4.1.12.1</version></dependency>
    <dependency><groupId>org.xerial.snappy</groupId><artifactId>snappy-java</artifactId><version>1.1.10.5</version></dependency>
DEPS
rm -rf "$home/classes"
mkdir -p "$home/classes"
javac -nowarn -cp "$libs/*" -d "$home/classes" "$here/LoadGen.java" >&2
echo "$home"
