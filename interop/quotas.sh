#!/usr/bin/env bash
# quotas.sh — do Kafka's own tools set and describe client quotas on a
# Kafka-protocol server, and is a producer held near its producer_byte_rate?
#
# Usage: interop/quotas.sh [bootstrap]   (default 127.0.0.1:9092)
#   The server's Kafka listener must be plaintext without SASL (every client
#   is User:ANONYMOUS there, as in Kafka) and no quota may apply to
#   ANONYMOUS or to the client id kgo beforehand.
#   QUOTA_TIMEOUT   seconds each tool command may take (default 60)
#   QUOTA_RATE      the producer_byte_rate set, bytes/s (default 1048576)
#   QUOTA_MEASURE   seconds the producer is measured (default 20), after a
#                   12 s warm-up that fills the quota window, so the burst a
#                   fresh window allows (quota.window.num × size) is not
#                   measured
#   QUIRE           the quire binary for `quire perf produce` (default: built
#                   from this checkout into a temporary directory)
#
# Kafka's tools (kafka-tools and the kafka_2.13 core for ConfigCommand,
# 4.1.1: the same jars as acls.sh) are fetched once into
# ~/.cache/quire-interop (bench/maven-libs.sh).
#
# Checks, each printed as one PASS/FAIL line:
#   alter-user       kafka-configs --alter --entity-type users --entity-name
#                    ANONYMOUS --add-config producer_byte_rate=…
#   describe-user    kafka-configs --describe --entity-type users
#                    --entity-name ANONYMOUS shows it
#   alter-client     kafka-configs --alter --entity-type clients
#                    --entity-name <run's client> and --entity-default
#   describe-clients kafka-configs --describe --entity-type clients lists both
#   user-client      --entity-type users --entity-name A --entity-type
#                    clients --entity-name B: set and described strictly
#   invalid          a fractional producer_byte_rate is refused by the
#                    server with INVALID_REQUEST (unknown keys never leave
#                    kafka-configs: it checks them itself)
#   ips              --entity-type ips: connection_creation_rate set,
#                    described and deleted
#   delete           --delete-config removes a client's quota and the
#                    describe no longer shows it
#   throttled        quire perf produce (franz-go: honours throttle_time_ms)
#                    as ANONYMOUS measured for QUOTA_MEASURE seconds: its
#                    byte rate within 0.5×–1.5× of producer_byte_rate (the
#                    ratio printed; never absolute times)
#   unthrottled      the user's quota removed: the same producer runs faster
#                    than the limit (ratio printed)
# The last line is "quotas.sh: PASS" or "quotas.sh: FAIL (n)".
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
bootstrap=${1:-127.0.0.1:9092}
step_timeout=${QUOTA_TIMEOUT:-60}
rate=${QUOTA_RATE:-1048576}
measure=${QUOTA_MEASURE:-20}
version=4.1.1
libs=${QUIRE_INTEROP_CACHE:-$HOME/.cache/quire-interop}/acls-$version
run_id=$(date +%s)-$$
topic=interop-quotas-$run_id
client=interop-quotas-client-$run_id
pair_user=interop-quotas-user-$run_id

echo "quotas.sh: bootstrap=$bootstrap topic=$topic producer_byte_rate=$rate"
command -v java >/dev/null || { echo "quotas.sh: java 17+ is required"; echo "quotas.sh: FAIL (setup)"; exit 2; }
"$here/../bench/maven-libs.sh" "$libs" quire-acls <<DEPS || { echo "quotas.sh: FAIL fetching kafka-tools $version from Maven Central"; exit 1; }
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka-tools</artifactId><version>$version</version></dependency>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka_2.13</artifactId><version>$version</version></dependency>
    <dependency><groupId>org.slf4j</groupId><artifactId>slf4j-reload4j</artifactId><version>1.7.36</version></dependency>
DEPS

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
quire=${QUIRE:-}
if [[ -z $quire ]]; then
	quire=$work/quire
	(cd "$here/.." && go build -o "$quire" ./cmd/quire) || { echo "quotas.sh: FAIL building quire"; exit 1; }
fi
failures=0
pass() { printf 'PASS %-16s %s\n' "$1" "$2"; }
fail() {
	printf 'FAIL %-16s %s\n' "$1" "$2"
	failures=$((failures + 1))
	for f in "$work/$1.err" "$work/$1.out"; do
		[[ -s $f ]] && awk '!seen[$0]++' "$f" | grep -v '^\s*at ' | tail -n 8 | sed 's/^/    | /'
	done
}
printf 'log4j.rootLogger=ERROR, stderr\nlog4j.appender.stderr=org.apache.log4j.ConsoleAppender\nlog4j.appender.stderr.Target=System.err\nlog4j.appender.stderr.layout=org.apache.log4j.PatternLayout\nlog4j.appender.stderr.layout.ConversionPattern=%%p %%c: %%m%%n\n' >"$work/log4j.properties"
configs() { # kafka-configs arguments...
	timeout --kill-after=5 "$step_timeout" java -Xmx512m -Dlog4j.configuration="file:$work/log4j.properties" -cp "$libs/*" \
		kafka.admin.ConfigCommand --bootstrap-server "$bootstrap" "$@"
}
# perf NAME [extra flags]: quire perf produce, 1 KiB records, acks=1, a
# 12 s warm-up then QUOTA_MEASURE seconds measured; prints the MB/s.
perf() {
	local name=$1
	shift
	timeout --kill-after=5 $((measure + 60)) "$quire" perf produce --brokers "$bootstrap" --topic "$topic" --partitions 4 \
		--record-size 1024 --acks 1 --idempotent=false --warm-up 12s --duration "${measure}s" "$@" >"$work/$name.out" 2>"$work/$name.err" || return 1
	sed -n 's/^perf produce records=.* mb_s=\([0-9.]*\) .*/\1/p' "$work/$name.out" | tail -n 1
}
# ratio A B: A/B with two decimals.
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; }
within() { awk -v r="$1" -v lo="$2" -v hi="$3" 'BEGIN { exit !(r >= lo && r <= hi) }'; }

name=alter-user
if configs --alter --entity-type users --entity-name ANONYMOUS --add-config "producer_byte_rate=$rate" >"$work/$name.out" 2>"$work/$name.err"; then
	pass "$name" "producer_byte_rate=$rate for User:ANONYMOUS"
else
	fail "$name" "kafka-configs --alter --entity-type users"
fi

name=describe-user
if configs --describe --entity-type users --entity-name ANONYMOUS >"$work/$name.out" 2>"$work/$name.err" &&
	grep -q "producer_byte_rate=$rate" "$work/$name.out"; then
	pass "$name" "$(grep -m1 producer_byte_rate "$work/$name.out")"
else
	fail "$name" "kafka-configs --describe --entity-type users does not show producer_byte_rate=$rate"
fi

name=alter-client
if configs --alter --entity-type clients --entity-name "$client" --add-config "producer_byte_rate=2048,consumer_byte_rate=4096" >"$work/$name.out" 2>"$work/$name.err" &&
	configs --alter --entity-type clients --entity-default --add-config "request_percentage=400" >>"$work/$name.out" 2>>"$work/$name.err"; then
	pass "$name" "$client and the default client id"
else
	fail "$name" "kafka-configs --alter --entity-type clients"
fi

name=describe-clients
if configs --describe --entity-type clients >"$work/$name.out" 2>"$work/$name.err" &&
	grep -q "client-id '$client'.*consumer_byte_rate=4096" "$work/$name.out" && grep -q "default client-id.*request_percentage=400" "$work/$name.out"; then
	pass "$name" "lists $client and the default"
else
	fail "$name" "kafka-configs --describe --entity-type clients misses $client or the default"
fi

name=user-client
if configs --alter --entity-type users --entity-name "$pair_user" --entity-type clients --entity-name "$client" --add-config "producer_byte_rate=8192" >"$work/$name.out" 2>"$work/$name.err" &&
	configs --describe --entity-type users --entity-name "$pair_user" --entity-type clients --entity-name "$client" >>"$work/$name.out" 2>>"$work/$name.err" &&
	grep -q "producer_byte_rate=8192" "$work/$name.out" &&
	configs --describe --entity-type users --entity-name "$pair_user" >"$work/$name.strict" 2>>"$work/$name.err" && ! grep -q "producer_byte_rate" "$work/$name.strict"; then
	pass "$name" "set for the pair; the user alone has none (strict match)"
else
	fail "$name" "user and client-id pair"
fi

name=invalid
if configs --alter --entity-type clients --entity-name "$client" --add-config "producer_byte_rate=1.5" >"$work/$name.out" 2>"$work/$name.err"; then
	fail "$name" "kafka-configs set a fractional producer_byte_rate"
elif grep -q "InvalidRequestException" "$work/$name.out" "$work/$name.err"; then
	pass "$name" "the server refused it: $(grep -h -m1 -o 'InvalidRequestException: .*' "$work/$name.out" "$work/$name.err" | head -n 1)"
else
	fail "$name" "refused, but not with INVALID_REQUEST from the server"
fi

name=ips
if configs --alter --entity-type ips --entity-name 192.0.2.7 --add-config connection_creation_rate=50 >"$work/$name.out" 2>"$work/$name.err" &&
	configs --describe --entity-type ips >>"$work/$name.out" 2>>"$work/$name.err" && grep -q "ip '192.0.2.7' are connection_creation_rate=50" "$work/$name.out" &&
	configs --alter --entity-type ips --entity-name 192.0.2.7 --delete-config connection_creation_rate >>"$work/$name.out" 2>>"$work/$name.err"; then
	pass "$name" "connection_creation_rate for an IP set, described, deleted (KIP-612)"
else
	fail "$name" "kafka-configs --entity-type ips"
fi

name=delete
if configs --alter --entity-type clients --entity-name "$client" --delete-config producer_byte_rate,consumer_byte_rate >"$work/$name.out" 2>"$work/$name.err" &&
	configs --alter --entity-type clients --entity-default --delete-config request_percentage >>"$work/$name.out" 2>>"$work/$name.err" &&
	configs --alter --entity-type users --entity-name "$pair_user" --entity-type clients --entity-name "$client" --delete-config producer_byte_rate >>"$work/$name.out" 2>>"$work/$name.err" &&
	configs --describe --entity-type clients >"$work/$name.desc" 2>>"$work/$name.err" && ! grep -q "$client" "$work/$name.desc"; then
	pass "$name" "--delete-config removed $client's quotas"
else
	fail "$name" "--delete-config"
fi

limit_mb=$(awk -v r="$rate" 'BEGIN { printf "%.3f", r / 1e6 }')
name=throttled
if mb=$(perf "$name") && [[ -n $mb ]]; then
	r=$(ratio "$mb" "$limit_mb")
	if within "$r" 0.5 1.5; then
		pass "$name" "producer at ${r}× producer_byte_rate over ${measure}s (within 0.5–1.5)"
	else
		fail "$name" "producer at ${r}× producer_byte_rate over ${measure}s (want 0.5–1.5)"
	fi
else
	fail "$name" "quire perf produce failed"
fi

name=unthrottled
if configs --alter --entity-type users --entity-name ANONYMOUS --delete-config producer_byte_rate >"$work/$name.cfg" 2>"$work/$name.err" &&
	mb=$(perf "$name" --rate 4096) && [[ -n $mb ]]; then
	# 4096 records/s of 1 KiB is 4× the default limit.
	r=$(ratio "$mb" "$limit_mb")
	if within "$r" 1.6 100; then
		pass "$name" "quota removed: producer at ${r}× the former limit"
	else
		fail "$name" "quota removed but the producer stays at ${r}× the former limit"
	fi
else
	fail "$name" "removing the quota or producing failed"
fi
# Leave no quota behind, whatever failed.
configs --alter --entity-type users --entity-name ANONYMOUS --delete-config producer_byte_rate >/dev/null 2>&1 || true

if ((failures == 0)); then
	echo "quotas.sh: PASS"
else
	echo "quotas.sh: FAIL ($failures)"
	exit 1
fi
