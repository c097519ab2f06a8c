#!/usr/bin/env bash
# streams.sh — Kafka Streams (kafka-streams 4.1.1 from Maven Central) with
# processing.guarantee=exactly_once_v2 against a Kafka-protocol server: a word
# count with a state store over STREAMS_LINES input lines (default 1,000,000;
# 50 words). The Streams process is SIGKILLed twice while it works and started
# again; then the output topic, read with read_committed, must hold every
# word's exact count, and no word's count may ever repeat, go back or pass its
# number of lines (streams/WordCount.java). Needs transactions, compacted
# changelog topics, repartition topics and TxnOffsetCommit.
#
# Usage: interop/streams.sh [bootstrap]      (default 127.0.0.1:9092)
# The last line is "streams: PASS ..." or "streams: FAIL ...".
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
bootstrap=${1:-127.0.0.1:9092}
lines=${STREAMS_LINES:-1000000}
version=4.1.1
libs=${QUIRE_INTEROP_CACHE:-$HOME/.cache/quire-interop}/streams-$version

fail() {
	echo "streams: FAIL $*"
	exit 1
}
command -v javac >/dev/null || fail "a JDK 17+ is required"
"$here/../bench/maven-libs.sh" "$libs" quire-streams <<DEPS || fail "fetching kafka-streams $version from Maven Central"
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka-streams</artifactId><version>$version</version></dependency>
    <dependency><groupId>org.slf4j</groupId><artifactId>slf4j-simple</artifactId><version>1.7.36</version></dependency>
DEPS
work=$(mktemp -d)
app=
cleanup() {
	[[ -n $app ]] && kill -9 "$app" 2>/dev/null && wait "$app" 2>/dev/null
	[[ -n ${STREAMS_KEEP:-} ]] || rm -rf "$work"
}
trap cleanup EXIT
javac -d "$work/classes" -cp "$libs/*" "$here/streams/WordCount.java" || fail "compile"
java_cp="$work/classes:$libs/*"
run=$(date +%s)$$
# exec: a background jrun is then the JVM itself, so that $! names the
# process the kills below must reach (not a subshell whose JVM outlives it).
jrun() { exec java -Xmx512m -Dorg.slf4j.simpleLogger.defaultLogLevel=warn -Djava.io.tmpdir="$work" -cp "$java_cp" quire.interop.WordCount "$@"; }

timeout 300 bash -c "$(declare -f jrun); java_cp='$java_cp'; work='$work'; jrun produce '$bootstrap' '$run' '$lines'" || fail "producing the input"

start_app() {
	jrun run "$bootstrap" "$run" "$1" >>"$work/app.log" 2>&1 &
	app=$!
}
for kill_no in 1 2; do
	start_app "$kill_no"
	# Let it work for a while: long enough to commit some transactions,
	# short enough to be killed in the middle of the input.
	sleep $((2 + kill_no * 2))
	kill -0 "$app" 2>/dev/null || { tail -30 "$work/app.log" >&2; fail "the Streams process exited by itself"; }
	kill -9 "$app"
	wait "$app" 2>/dev/null
	app=
	echo "streams: SIGKILLed the application ($kill_no of 2)" >&2
done
start_app 3
# The last run finishes the input once the killed instances' sessions
# expired; verify waits (90 s) for the exact counts.
timeout 180 bash -c "$(declare -f jrun); java_cp='$java_cp'; work='$work'; jrun verify '$bootstrap' '$run' '$lines'"
status=$?
if ((status != 0)); then
	grep -i "exception\|error" "$work/app.log" | head -20 >&2
fi
exit $status
