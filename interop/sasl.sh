#!/usr/bin/env bash
# sasl.sh — do real clients authenticate with SASL against a Kafka-protocol
# server, and get refused with a wrong password?
#
# Usage: SASL_USER=alice SASL_PASSWORD=... interop/sasl.sh [bootstrap]   (default 127.0.0.1:9092)
#   SASL_USER, SASL_PASSWORD  a user with SCRAM-SHA-256 and SCRAM-SHA-512
#                   credentials (quire admin users set, or kafka-configs);
#                   the server must enable PLAIN, SCRAM-SHA-256 and -512
#   SASL_CA         PEM CA of the listener's certificate: SASL_SSL (empty:
#                   SASL_PLAINTEXT)
#   KAFKA_LIBS      a Kafka distribution's libs/ (bench/kafka/install.sh puts
#                   one in ~/.cache/quire-bench/kafka-4.1.1/libs): the Java
#                   client checks run from it, skipped when it is absent
#   SASL_TIMEOUT    seconds each client command may take (default 60)
#
# Checks, each printed as one PASS/FAIL/SKIP line:
#   kcat-MECH           librdkafka produces 20 messages and reads them back
#                       (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512)
#   kcat-wrong-password librdkafka with a wrong password gets no metadata
#   java-MECH           the Java client (Kafka's own perf producer and
#                       console consumer) produces 200 and reads them back
#                       (SCRAM-SHA-512, PLAIN)
#   java-wrong-password the Java client is told SaslAuthenticationException
#   kgo-scram-ALG       franz-go's own TestSCRAMAuth and
#                       TestSCRAMAuthBadCredentials (interop/kgo-tests.sh);
#                       SASL_PLAINTEXT only, as those tests dial in plaintext
# Exits 0 only if no check failed.
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
bootstrap=${1:-127.0.0.1:9092}
user=${SASL_USER:?SASL_USER is required}
password=${SASL_PASSWORD:?SASL_PASSWORD is required}
ca=${SASL_CA:-}
libs=${KAFKA_LIBS:-$HOME/.cache/quire-bench/kafka-4.1.1/libs}
step_timeout=${SASL_TIMEOUT:-60}
run_id=$(date +%s)-$$

protocol=SASL_PLAINTEXT
[[ -n $ca ]] && protocol=SASL_SSL
command -v kcat >/dev/null || { echo "sasl.sh: kcat is required (apt-get install kcat)" >&2; exit 2; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failures=0
pass() { printf 'PASS %-22s %s\n' "$1" "$2"; }
fail() {
	printf 'FAIL %-22s %s\n' "$1" "$2"
	failures=$((failures + 1))
	[[ -f $work/$1.err ]] && awk '!seen[$0]++' "$work/$1.err" | tail -n 8 | sed 's/^/    | /'
}
skip() { printf 'SKIP %-22s %s\n' "$1" "$2"; }

echo "sasl.sh: bootstrap=$bootstrap protocol=$protocol user=$user"

kcat_sasl() { # MECH PASSWORD kcat-args...
	local mech=$1 pw=$2
	shift 2
	local opts=(-b "$bootstrap" -m 15 -X "security.protocol=$protocol" -X "sasl.mechanisms=$mech"
		-X "sasl.username=$user" -X "sasl.password=$pw")
	[[ -n $ca ]] && opts+=(-X "ssl.ca.location=$ca")
	timeout --kill-after=5 "$step_timeout" kcat "${opts[@]}" "$@"
}

for mech in PLAIN SCRAM-SHA-256 SCRAM-SHA-512; do
	name=kcat-$mech topic=interop-sasl-kcat-$mech-$run_id
	seq 1 20 | sed 's/^/m-/' >"$work/sent"
	: >"$work/got"
	if kcat_sasl "$mech" "$password" -P -t "$topic" -l "$work/sent" 2>"$work/$name.err" &&
		kcat_sasl "$mech" "$password" -C -t "$topic" -o beginning -c 20 -e >"$work/got" 2>>"$work/$name.err" &&
		cmp -s <(sort "$work/sent") <(sort "$work/got"); then
		pass "$name" "20 produced and read back"
	else
		fail "$name" "produce or read back failed ($(wc -l <"$work/got") read)"
	fi
done

name=kcat-wrong-password
if kcat_sasl SCRAM-SHA-512 "not-$password" -L >/dev/null 2>"$work/$name.err"; then
	fail "$name" "metadata answered"
elif grep -qi 'authentication' "$work/$name.err"; then
	pass "$name" "$(grep -o -m1 'Authentication failed[^(]*' "$work/$name.err")"
else
	fail "$name" "refused, but not as an authentication failure"
fi

# The Java client: Kafka's own tools from its libs. PEM trust stores need
# kafka-clients 2.7+.
if [[ -d $libs ]] && command -v java >/dev/null; then
	java_props() { # MECH PASSWORD FILE
		local module=org.apache.kafka.common.security.scram.ScramLoginModule
		[[ $1 == PLAIN ]] && module=org.apache.kafka.common.security.plain.PlainLoginModule
		{
			echo "security.protocol=$protocol"
			echo "sasl.mechanism=$1"
			echo "sasl.jaas.config=$module required username=\"$user\" password=\"$2\";"
			if [[ -n $ca ]]; then
				echo "ssl.truststore.type=PEM"
				echo "ssl.truststore.location=$ca"
			fi
		} >"$3"
	}
	java_tool() { timeout --kill-after=5 "$step_timeout" java -Xmx512m -cp "$libs/*" "$@"; }
	for mech in SCRAM-SHA-512 PLAIN; do
		name=java-$mech topic=interop-sasl-java-$mech-$run_id
		java_props "$mech" "$password" "$work/client.properties"
		if java_tool org.apache.kafka.tools.ProducerPerformance --topic "$topic" --num-records 200 --record-size 64 \
			--throughput -1 --producer-props "bootstrap.servers=$bootstrap" acks=all \
			--producer.config "$work/client.properties" >"$work/$name.out" 2>"$work/$name.err" &&
			grep -q '^200 records sent' "$work/$name.out" &&
			java_tool org.apache.kafka.tools.consumer.ConsoleConsumer --bootstrap-server "$bootstrap" --topic "$topic" \
				--from-beginning --max-messages 200 --timeout-ms 30000 \
				--consumer.config "$work/client.properties" >"$work/$name.got" 2>>"$work/$name.err" &&
			[[ $(wc -l <"$work/$name.got") -eq 200 ]]; then
			pass "$name" "200 produced and read back"
		else
			fail "$name" "produce or read back failed"
		fi
	done
	name=java-wrong-password
	java_props SCRAM-SHA-512 "not-$password" "$work/bad.properties"
	java_tool org.apache.kafka.tools.ProducerPerformance --topic "interop-sasl-java-bad-$run_id" --num-records 1 \
		--record-size 8 --throughput -1 --producer-props "bootstrap.servers=$bootstrap" max.block.ms=10000 \
		--producer.config "$work/bad.properties" >"$work/$name.out" 2>"$work/$name.err"
	if grep -q 'SaslAuthenticationException' "$work/$name.out" "$work/$name.err"; then
		pass "$name" "$(grep -h -o -m1 'SaslAuthenticationException: [^.]*' "$work/$name.out" "$work/$name.err" | head -1)"
	else
		fail "$name" "no SaslAuthenticationException"
	fi
else
	skip java "no Kafka libs at $libs (bench/kafka/install.sh) or no java"
fi

if [[ -z $ca ]]; then
	for alg in 256 512; do
		name=kgo-scram-$alg
		if KGO_RUN='^TestSCRAM' KGO_TEST_SCRAM_SEEDS=$bootstrap KGO_TEST_SCRAM=$user:$password:$alg \
			"$here/kgo-tests.sh" "$bootstrap" >"$work/$name.out" 2>"$work/$name.err" &&
			[[ $(grep -c '^PASS TestSCRAM' "$work/$name.out") -eq 2 ]]; then
			pass "$name" "TestSCRAMAuth, TestSCRAMAuthBadCredentials"
		else
			cat "$work/$name.out" >>"$work/$name.err"
			fail "$name" "franz-go's SCRAM tests"
		fi
	done
else
	skip kgo-scram "franz-go's SCRAM tests dial in plaintext; run against a SASL_PLAINTEXT listener"
fi

if ((failures > 0)); then
	echo "sasl.sh: FAIL ($failures)"
	exit 1
fi
echo "sasl.sh: PASS"
