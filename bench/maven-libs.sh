#!/usr/bin/env bash
# maven-libs.sh — copy Maven artifacts and their runtime dependencies from
# Maven Central into a directory, once.
#
# Usage: bench/maven-libs.sh LIBS NAME < dependencies
#   LIBS          target directory; marked complete with LIBS/.complete, and
#                 left alone (no network) when already complete
#   NAME          the artifactId of the throwaway POM (shows in Maven's output)
#   dependencies  <dependency> elements on standard input
set -euo pipefail

libs=$1
name=$2
if [[ -f $libs/.complete ]]; then
	exit 0
fi
command -v mvn >/dev/null || { echo "maven-libs.sh: mvn is required (apt-get install maven)" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
{
	cat <<POM
<?xml version="1.0" encoding="UTF-8"?>
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>quire.bench</groupId>
  <artifactId>$name</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <dependencies>
POM
	cat
	echo '  </dependencies>'
	echo '</project>'
} >"$work/pom.xml"
mkdir -p "$(dirname "$libs")"
rm -rf "$libs.tmp"
# -B: no progress bars; the timeout bounds a stuck download.
timeout 900 mvn -B -q -f "$work/pom.xml" dependency:copy-dependencies \
	-DincludeScope=runtime -DoutputDirectory="$libs.tmp" >&2
rm -rf "$libs"
mv "$libs.tmp" "$libs"
touch "$libs/.complete"
