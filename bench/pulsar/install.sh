#!/usr/bin/env bash
# install.sh — Apache Pulsar's broker (standalone mode: the broker with an
# embedded bookie and a RocksDB metadata store) from Maven Central jars into
# a cache directory. No tarball or container: Maven resolves pulsar-broker
# and its runtime dependencies, with Pulsar's own POM imported as a BOM so
# the versions are the ones Pulsar ships (log4j otherwise mixes versions).
#
# Usage: bench/pulsar/install.sh      # prints the install directory
#   PULSAR_VERSION   default 4.0.7 (4.0.8's jetcd-core-shaded is not served here)
#   PULSAR_CACHE     cache root (default $HOME/.cache/quire-bench)
# Idempotent: a complete install is reused.
set -euo pipefail

version=${PULSAR_VERSION:-4.0.7}
cache=${PULSAR_CACHE:-$HOME/.cache/quire-bench}
home=$cache/pulsar-$version
libs=$home/libs
if [[ -f $libs/.complete ]]; then
	echo "$home"
	exit 0
fi
command -v mvn >/dev/null || { echo "install.sh: mvn is required (apt-get install maven)" >&2; exit 1; }
command -v java >/dev/null || { echo "install.sh: java (17+) is required" >&2; exit 1; }
mkdir -p "$home"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# Pulsar's parent POM names repositories this machine cannot reach: send
# every request to Maven Central, whose address Maven's own super POM holds.
central=$(unzip -p "$(ls /usr/share/maven/lib/maven-model-builder*.jar | head -n 1)" org/apache/maven/model/pom-4.0.0.xml |
	sed -n 's:.*<url>\(.*\)</url>.*:\1:p' | head -n 1)
[[ -n $central ]] || { echo "install.sh: Maven Central's address not found in Maven's super POM" >&2; exit 1; }
cat >"$work/settings.xml" <<XML
<settings><mirrors><mirror><id>central</id><mirrorOf>*</mirrorOf><url>$central</url></mirror></mirrors></settings>
XML
cat >"$work/pom.xml" <<XML
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>quire.bench</groupId><artifactId>pulsar-libs</artifactId><version>1</version><packaging>pom</packaging>
  <dependencyManagement><dependencies>
    <dependency><groupId>org.apache.pulsar</groupId><artifactId>pulsar</artifactId><version>$version</version><type>pom</type><scope>import</scope></dependency>
  </dependencies></dependencyManagement>
  <dependencies>
    <dependency><groupId>org.apache.pulsar</groupId><artifactId>pulsar-broker</artifactId><version>$version</version></dependency>
  </dependencies>
</project>
XML
rm -rf "$libs.tmp"
timeout 900 mvn -B -q -s "$work/settings.xml" -f "$work/pom.xml" dependency:copy-dependencies \
	-DincludeScope=runtime -DoutputDirectory="$libs.tmp" >&2
rm -rf "$libs"
mv "$libs.tmp" "$libs"
touch "$libs/.complete"
echo "$home"
