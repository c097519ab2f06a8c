#!/usr/bin/env bash
# connect.sh — a Kafka Connect distributed worker (connect-runtime 4.1.1 from
# Maven Central) against a Kafka-protocol server: Connect creates its three
# internal topics compacted (it refuses to start if they are not), a
# FileStreamSource connector copies a file into a topic and a FileStreamSink
# connector copies the topic into another file; then the worker is stopped
# and started again, more lines are appended, and the sink's file must end
# with every line exactly once — Connect resumed from the source offsets it
# had committed to its compacted offsets topic, and the sink from its
# consumer group's offsets.
#
# Usage: interop/connect.sh [bootstrap]     (default 127.0.0.1:9092)
#   CONNECT_TIMEOUT  seconds each wait may take (default 120)
#   CONNECT_PORT     the worker's REST port on 127.0.0.1 (default 18083)
#
# The jars are fetched once into ~/.cache/quire-interop (bench/maven-libs.sh).
# The last line is "connect: PASS lines=N" or "connect: FAIL <why>".
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
bootstrap=${1:-127.0.0.1:9092}
timeout_s=${CONNECT_TIMEOUT:-120}
port=${CONNECT_PORT:-18083}
version=4.1.1
libs=${QUIRE_INTEROP_CACHE:-$HOME/.cache/quire-interop}/connect-$version

fail() {
	echo "connect: FAIL $*"
	exit 1
}
command -v java >/dev/null || fail "java 17+ is required"
"$here/../bench/maven-libs.sh" "$libs" quire-connect <<DEPS || fail "fetching connect-runtime $version from Maven Central"
    <dependency><groupId>org.apache.kafka</groupId><artifactId>connect-runtime</artifactId><version>$version</version></dependency>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>connect-file</artifactId><version>$version</version></dependency>
    <dependency><groupId>org.slf4j</groupId><artifactId>slf4j-reload4j</artifactId><version>1.7.36</version></dependency>
DEPS

work=$(mktemp -d)
worker=
cleanup() {
	[[ -n $worker ]] && kill "$worker" 2>/dev/null && wait "$worker" 2>/dev/null
	rm -rf "$work"
}
trap cleanup EXIT

run=$(date +%s%N)
group=quire-connect-$run
topic=connect-lines-$run
cat >"$work/worker.properties" <<PROPS
bootstrap.servers=$bootstrap
group.id=$group
config.storage.topic=$group-configs
offset.storage.topic=$group-offsets
status.storage.topic=$group-status
config.storage.replication.factor=1
offset.storage.replication.factor=1
status.storage.replication.factor=1
offset.flush.interval.ms=500
key.converter=org.apache.kafka.connect.storage.StringConverter
value.converter=org.apache.kafka.connect.storage.StringConverter
listeners=http://127.0.0.1:$port
rest.advertised.host.name=127.0.0.1
plugin.discovery=only_scan
PROPS
cat >"$work/log4j.properties" <<'PROPS'
log4j.rootLogger=WARN, stderr
log4j.appender.stderr=org.apache.log4j.ConsoleAppender
log4j.appender.stderr.Target=System.err
log4j.appender.stderr.layout=org.apache.log4j.PatternLayout
log4j.appender.stderr.layout.ConversionPattern=[%d] %p %m (%c)%n
PROPS

start_worker() {
	java -Xmx512m -Dlog4j.configuration="file:$work/log4j.properties" -cp "$libs/*" \
		org.apache.kafka.connect.cli.ConnectDistributed "$work/worker.properties" >>"$work/worker.log" 2>&1 &
	worker=$!
}

stop_worker() {
	kill "$worker" 2>/dev/null
	wait "$worker" 2>/dev/null
	worker=
}

# wait_for DESCRIPTION COMMAND...: polls COMMAND until it succeeds, for at
# most CONNECT_TIMEOUT seconds.
wait_for() {
	local what=$1
	shift
	local deadline=$((SECONDS + timeout_s))
	until "$@" >/dev/null 2>&1; do
		if [[ -n $worker ]] && ! kill -0 "$worker" 2>/dev/null; then
			tail -30 "$work/worker.log" >&2
			fail "the worker exited while waiting for $what"
		fi
		if ((SECONDS >= deadline)); then
			tail -30 "$work/worker.log" >&2
			fail "$what: not within ${timeout_s}s"
		fi
		sleep 0.5
	done
}

rest() { curl -fsS -m 10 -H 'Content-Type: application/json' "$@"; }
running() { rest "http://127.0.0.1:$port/connectors/$1/status" | grep -q '"state":"RUNNING".*"tasks":\[{"id":0,"state":"RUNNING"'; }
lines_in() { [[ -f $2 ]] && [[ $(wc -l <"$2") -ge $1 ]]; }

seq 1 1000 | sed 's/^/line-/' >"$work/in.txt"
start_worker
wait_for "the worker's REST API" rest "http://127.0.0.1:$port/connectors"
rest -X POST "http://127.0.0.1:$port/connectors" -d "{\"name\":\"src\",\"config\":{\"connector.class\":\"org.apache.kafka.connect.file.FileStreamSourceConnector\",\"tasks.max\":\"1\",\"file\":\"$work/in.txt\",\"topic\":\"$topic\"}}" >/dev/null ||
	fail "creating the source connector"
rest -X POST "http://127.0.0.1:$port/connectors" -d "{\"name\":\"sink\",\"config\":{\"connector.class\":\"org.apache.kafka.connect.file.FileStreamSinkConnector\",\"tasks.max\":\"1\",\"file\":\"$work/out.txt\",\"topics\":\"$topic\"}}" >/dev/null ||
	fail "creating the sink connector"
wait_for "the source connector running" running src
wait_for "the sink connector running" running sink
wait_for "1000 lines copied" lines_in 1000 "$work/out.txt"
# A graceful stop (SIGTERM) commits the source's offsets and the sink's
# group offsets.
stop_worker
echo "connect: 1000 lines copied; worker stopped" >&2

seq 1001 1500 | sed 's/^/line-/' >>"$work/in.txt"
start_worker
wait_for "the worker's REST API after the restart" rest "http://127.0.0.1:$port/connectors"
wait_for "the source connector running after the restart" running src
wait_for "the sink connector running after the restart" running sink
# A source that lost its offsets copies line-1.. again: the file then
# reaches 1500 lines with duplicates, which the diff below shows.
wait_for "1500 lines copied" lines_in 1500 "$work/out.txt"
stop_worker

if ! diff -q "$work/in.txt" "$work/out.txt" >/dev/null; then
	echo "first differences (< in, > out):" >&2
	diff "$work/in.txt" "$work/out.txt" | head -10 >&2
	fail "the sink's file is not the source's ($(wc -l <"$work/out.txt") lines for 1500)"
fi
echo "connect: PASS lines=$(wc -l <"$work/out.txt")"
