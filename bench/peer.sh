#!/usr/bin/env bash
# peer.sh — the peer benchmark: one produce workload, measured by the same
# tool (`quire perf produce`, a Kafka-protocol client) against Apache Kafka and
# against Quire, on this machine, in one run; then a table and Quire/Kafka
# ratios.
#
# Usage: bench/peer.sh                      # from the repository root
#        DURATION=10s bench/peer.sh         # a quick run
#
# Workload: 1 topic, 16 partitions, 1 KiB random records, max rate with
# IN_FLIGHT records unacknowledged, acks=all, idempotent producer, no linger, no
# compression, for DURATION after WARMUP of the same load (unmeasured: JIT, first
# segments, connections). Configurations (CONFIGS, space-separated, in order):
#   kafka1        Kafka, 1 node, RF 1 (NOT equal durability: one copy, no fsync)
#   kafka3        Kafka, 3 nodes, RF 3, min.insync.replicas=2, default flush (page cache)
#   kafka3-flush  the same with flush.messages=1 (fsync before acknowledging)
#   quire         `quire standalone` (three bookies, topics E=3 Qw=3 Qa=2: a write is
#                 acknowledged once fsync'd on 2 of 3 bookies)
# The equal-durability peers of Quire are the 3-node rows; kafka3-flush is the
# one that, like Quire, fsyncs before acknowledging.
#
# Environment (defaults in brackets):
#   DURATION [60s]  WARMUP [10s]  RATE [0 = max]  IN_FLIGHT [16384]  RECORD_SIZE [1024]
#   PARTITIONS [16]  CONFIGS [kafka1 kafka3 kafka3-flush quire]
#   WORK [a new /tmp/quire-peer.XXXXXX; removed at exit unless KEEP=1]
#   QUIRE_BIN [built from ./cmd/quire into WORK]  QUIRE_ARGS [extra standalone flags]
#   KAFKA_PORT_BASE [19092]  QUIRE_PORT_BASE [19190: Kafka port; +1 HTTP,
#   +2/+3 etcd, +4..+6 bookies]
#   PRODUCE_ARGS [extra `perf produce` flags for every configuration]
#
# Every step is bounded in time (cluster start 90 s, each produce WARMUP +
# DURATION + 150 s); every process started here is stopped on exit, also on Ctrl-C. A
# configuration that fails (e.g. Quire not serving Kafka yet) is reported as
# failed and the others still run. Output: each run's summary in
# WORK/<config>.out, then the table on stdout. Exit status 0 if every
# configuration produced a result.
set -uo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
duration=${DURATION:-60s}
warmup=${WARMUP:-10s}
rate=${RATE:-0}
in_flight=${IN_FLIGHT:-16384}
record_size=${RECORD_SIZE:-1024}
partitions=${PARTITIONS:-16}
configs=${CONFIGS:-kafka1 kafka3 kafka3-flush quire}
kafka_port_base=${KAFKA_PORT_BASE:-19092}
quire_port_base=${QUIRE_PORT_BASE:-19190}
work=${WORK:-$(mktemp -d /tmp/quire-peer.XXXXXX)}
mkdir -p "$work"
work=$(cd "$work" && pwd)

kafka_dirs=()
bootstrap=""
quire_pid=""
cleanup() {
	local d
	for d in "${kafka_dirs[@]}"; do
		KAFKA_PORT_BASE=$kafka_port_base "$root/bench/kafka/run.sh" stop "$d" || true
	done
	if [[ -n $quire_pid ]] && kill -0 "$quire_pid" 2>/dev/null; then
		kill -TERM "$quire_pid" 2>/dev/null
		for _ in $(seq 100); do kill -0 "$quire_pid" 2>/dev/null || break; sleep 0.1; done
		kill -KILL "$quire_pid" 2>/dev/null || true
	fi
	if [[ ${KEEP:-0} != 1 ]]; then
		rm -rf "$work"
	else
		echo "peer.sh: kept $work" >&2
	fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

log() { echo "peer.sh: $*" >&2; }

# Seconds in a Go duration like 90s, 2m or 1m30s (for the timeout bound).
seconds() {
	local d=$1 total=0 n
	[[ $d == 0 ]] && { echo 0; return; }
	while [[ $d =~ ^([0-9]+)(h|ms|m|s)(.*)$ ]]; do
		n=${BASH_REMATCH[1]}
		case ${BASH_REMATCH[2]} in
		h) total=$((total + n * 3600)) ;; m) total=$((total + n * 60)) ;;
		s) total=$((total + n)) ;; ms) total=$((total + 1)) ;;
		esac
		d=${BASH_REMATCH[3]}
	done
	[[ -z $d ]] || { log "cannot parse DURATION=$1"; exit 2; }
	echo "$total"
}
run_bound=$(($(seconds "$duration") + $(seconds "$warmup") + 150))

quire=${QUIRE_BIN:-}
if [[ -z $quire ]]; then
	quire=$work/quire
	log "building quire"
	(cd "$root" && CGO_ENABLED=0 go build -o "$quire" ./cmd/quire) || { log "go build failed"; exit 1; }
fi

declare -A label result reason
label[kafka1]="Kafka 1 node, RF 1, acks=all (1 copy)"
label[kafka3]="Kafka 3 nodes, RF 3, minISR 2, acks=all"
label[kafka3-flush]="Kafka 3 nodes, RF 3, minISR 2, acks=all, flush.messages=1"
label[quire]="Quire standalone, E3 Qw3 Qa2, acks=all"

# produce NAME BROKERS [perf produce flags...]: runs the workload; on success
# result[NAME] holds "records_s mb_s p50_ms p99_ms errors".
produce() {
	local name=$1 brokers=$2 line
	shift 2
	log "$name: producing for $duration to $brokers"
	timeout -k 10 "$run_bound" "$quire" perf produce --brokers "$brokers" --topic "peer-$name" \
		--partitions "$partitions" --record-size "$record_size" --rate "$rate" --duration "$duration" --warm-up "$warmup" \
		--in-flight "$in_flight" --acks all --connect-timeout 60s "$@" ${PRODUCE_ARGS:-} \
		>"$work/$name.out" 2>"$work/$name.err"
	local rc=$?
	line=$(grep '^perf produce records=' "$work/$name.out" | tail -1)
	if [[ -z $line ]]; then
		reason[$name]="no result (exit $rc): $(grep -v '^perf produce ' "$work/$name.err" | tail -1 | cut -c1-100)"
		return 1
	fi
	local records errors rs mbs p50 p99
	records=$(sed -E 's/.* records=([0-9]+).*/\1/' <<<"$line")
	errors=$(sed -E 's/.* errors=([0-9]+).*/\1/' <<<"$line")
	rs=$(sed -E 's/.* records_s=([0-9.]+).*/\1/' <<<"$line")
	mbs=$(sed -E 's/.* mb_s=([0-9.]+).*/\1/' <<<"$line")
	p50=$(sed -E 's/.* p50_ms=([0-9.]+).*/\1/' <<<"$line")
	p99=$(sed -E 's/.* p99_ms=([0-9.]+).*/\1/' <<<"$line")
	if [[ $records == 0 ]]; then
		reason[$name]="no record acknowledged ($errors errors): $(grep -A1 '^errors:' "$work/$name.out" | tail -1 | cut -c1-100)"
		return 1
	fi
	result[$name]="$rs $mbs $p50 $p99 $errors"
	log "$name: $line"
}

# kafka_cluster N: starts an N-node cluster in a fresh directory and sets
# bootstrap to its bootstrap list; the previous cluster is stopped and its data
# removed. (Not to be called in a subshell: kafka_dirs must survive.)
kafka_cluster() {
	local n=$1 dir=$work/kafka-$1
	stop_kafka
	kafka_dirs+=("$dir")
	log "starting Kafka, $n node(s)"
	bootstrap=$(KAFKA_PORT_BASE=$kafka_port_base "$root/bench/kafka/run.sh" start "$n" "$dir" 2>"$work/kafka-$n-start.err")
	local rc=$?
	((rc == 0)) || log "Kafka did not start: $(tail -3 "$work/kafka-$n-start.err")"
	return $rc
}

stop_kafka() {
	local d
	for d in "${kafka_dirs[@]}"; do
		KAFKA_PORT_BASE=$kafka_port_base "$root/bench/kafka/run.sh" stop "$d" || true
		rm -rf "$d"
	done
	kafka_dirs=()
}

run_quire() {
	local dir=$work/quire-data kafka=127.0.0.1:$quire_port_base p=$quire_port_base
	stop_kafka
	if (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
		reason[quire]="port $p already in use"
		return 1
	fi
	mkdir -p "$dir"
	log "quire: starting standalone (Kafka on $kafka)"
	# shellcheck disable=SC2086 # QUIRE_ARGS is a list of flags
	"$quire" standalone --data-dir "$dir" --kafka-addr "$kafka" --http-addr "127.0.0.1:$((p + 1))" \
		--meta-client-addr "127.0.0.1:$((p + 2))" --meta-peer-addr "127.0.0.1:$((p + 3))" \
		--bookie-addrs "127.0.0.1:$((p + 4)),127.0.0.1:$((p + 5)),127.0.0.1:$((p + 6))" \
		${QUIRE_ARGS:-} >"$work/quire-standalone.log" 2>&1 &
	quire_pid=$!
	local deadline=$((SECONDS + 60))
	while ((SECONDS < deadline)); do
		if ! kill -0 "$quire_pid" 2>/dev/null; then
			reason[quire]="standalone exited: $(tail -1 "$work/quire-standalone.log" | cut -c1-120)"
			quire_pid=""
			return 1
		fi
		if (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
			break
		fi
		sleep 0.2
	done
	if ((SECONDS >= deadline)); then
		reason[quire]="not serving Kafka on $kafka within 60 s"
		return 1
	fi
	# Replication is the bookies' (E3 Qw3 Qa2), so the topic asks for the
	# server's default replication factor.
	produce quire "$kafka" --replication-factor -1
}

for c in $configs; do
	case $c in
	kafka1)
		if kafka_cluster 1; then
			produce kafka1 "$bootstrap" --replication-factor 1
		else
			reason[kafka1]="Kafka did not start (see $work/kafka-1-start.err)"
		fi
		;;
	kafka3 | kafka3-flush)
		# Both 3-node configurations share one cluster, each with its topic.
		if [[ ${#kafka_dirs[@]} != 1 || ${kafka_dirs[0]} != "$work/kafka-3" ]] && ! kafka_cluster 3; then
			reason[$c]="Kafka did not start (see $work/kafka-3-start.err)"
			continue
		fi
		extra=(--topic-config min.insync.replicas=2)
		[[ $c == kafka3-flush ]] && extra+=(--topic-config flush.messages=1)
		produce "$c" "$bootstrap" --replication-factor 3 "${extra[@]}"
		;;
	quire) run_quire ;;
	*) log "unknown configuration $c"; exit 2 ;;
	esac
done
stop_kafka

echo
rate_label=$rate
[[ $rate == 0 ]] && rate_label=max
echo "Peer benchmark: $partitions partitions, $record_size-byte records, rate $rate_label, in-flight $in_flight, acks=all, idempotent, $duration per configuration after $warmup warm-up"
echo "$(date -u +%Y-%m-%dT%H:%MZ), $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg)"
printf '%-58s %11s %8s %9s %9s %7s\n' "system / config" "records/s" "MB/s" "p50 ms" "p99 ms" "errors"
status=0
for c in $configs; do
	if [[ -n ${result[$c]:-} ]]; then
		read -r rs mbs p50 p99 errs <<<"${result[$c]}"
		printf '%-58s %11s %8s %9s %9s %7s\n' "${label[$c]}" "$rs" "$mbs" "$p50" "$p99" "$errs"
	else
		printf '%-58s FAILED: %s\n' "${label[$c]}" "${reason[$c]:-unknown}"
		status=1
	fi
done
if [[ -n ${result[quire]:-} ]]; then
	echo
	echo "Quire / Kafka (throughput ratio: higher is better for Quire; p99 ratio: lower is better):"
	read -r qrs _ _ qp99 _ <<<"${result[quire]}"
	for c in $configs; do
		[[ $c == quire || -z ${result[$c]:-} ]] && continue
		read -r rs _ _ p99 _ <<<"${result[$c]}"
		awk -v l="${label[$c]}" -v q="$qrs" -v k="$rs" -v qp="$qp99" -v kp="$p99" \
			'BEGIN { printf "  vs %-56s records/s %.2fx  p99 %.2fx\n", l, (k > 0 ? q / k : 0), (kp > 0 ? qp / kp : 0) }'
	done
fi
exit $status
