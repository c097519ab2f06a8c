#!/usr/bin/env bash
# run.sh — the same Pulsar-protocol load against Apache Pulsar's standalone
# and Quire's, one after the other in one run, with the ratios.
#
#   bench/pulsar/run.sh                     # defaults below
#   RECORDS=300000 RATE=20000 bench/pulsar/run.sh
#
# Load (interop/pulsarperf, the real Pulsar Go client against both): one
# non-partitioned topic, RECORDS records of RECORD_SIZE bytes produced as
# fast as MAX_PENDING in flight allow (batching, 1 ms delay), then read back
# from the earliest message; then RATE records/s for FIXED_SECONDS (latency
# at a fixed rate). Durability: Apache Pulsar's standalone has one bookie,
# so its ledgers are E1/Qw1/Qa1, with the journal fsynced before an
# acknowledgement (journalSyncData=true, as Quire; upstream's standalone.conf
# turns it off). Quire runs twice: its default E3/Qw3/Qa2 on three bookies
# (stronger: two fsynced copies before an ack) and E1/Qw1/Qa1 (the same as
# Pulsar's). Every process started here is stopped on exit.
#
# Environment: RECORDS [200000] RECORD_SIZE [1024] MAX_PENDING [4096]
#   RATE [10000] FIXED_SECONDS [20] PULSAR_HEAP [1g] WORK [/tmp/quire-pulsar-bench]
#   QUIRE_BIN [built from this checkout] PORT_BASE [36650]
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
records=${RECORDS:-200000}
size=${RECORD_SIZE:-1024}
pending=${MAX_PENDING:-4096}
rate=${RATE:-10000}
fixed=${FIXED_SECONDS:-20}
heap=${PULSAR_HEAP:-1g}
work=${WORK:-/tmp/quire-pulsar-bench}
p=${PORT_BASE:-36650}

log() { echo "run.sh: $*" >&2; }
pids=()
cleanup() {
	local pid
	for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
	for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
}
trap cleanup EXIT
rm -rf "$work"
mkdir -p "$work"

home=$("$root/bench/pulsar/install.sh")
log "building quire and pulsarperf"
quire=${QUIRE_BIN:-$work/quire}
[[ -n ${QUIRE_BIN:-} ]] || (cd "$root" && CGO_ENABLED=0 go build -o "$quire" ./cmd/quire)
(cd "$root" && go build -o "$work/pulsarperf" ./interop/pulsarperf)

# wait_http URL SECONDS PID: until URL answers 200 (and its body matches
# MATCH when set).
wait_http() {
	local deadline=$((SECONDS + $2))
	until curl -sf "$1" 2>/dev/null | grep -q "${MATCH:-}"; do
		kill -0 "$3" 2>/dev/null || { log "process $3 exited"; return 1; }
		((SECONDS < deadline)) || { log "$1 not ready within $2 s"; return 1; }
		sleep 0.5
	done
}

declare -A res
# load NAME URL: the three phases against URL, results in res[NAME.*].
load() {
	local name=$1 url=$2 out
	out=$("$work/pulsarperf" produce --service-url "$url" --topic "persistent://public/default/max-$name" \
		--records "$records" --record-size "$size" --max-pending "$pending" 2>"$work/$name-produce.err" | tail -1)
	log "$name: $out"
	res[$name.produce]=$out
	out=$("$work/pulsarperf" consume --service-url "$url" --topic "persistent://public/default/max-$name" \
		--records "$records" 2>"$work/$name-consume.err" | tail -1)
	log "$name: $out"
	res[$name.consume]=$out
	out=$("$work/pulsarperf" produce --service-url "$url" --topic "persistent://public/default/rate-$name" \
		--records $((rate * fixed)) --rate "$rate" --record-size "$size" --max-pending "$pending" 2>"$work/$name-rate.err" | tail -1)
	log "$name: $out"
	res[$name.rate]=$out
}

# 1. Apache Pulsar.
log "starting Apache Pulsar standalone"
ppid=$("$root/bench/pulsar/start.sh" "$work/pulsar" "$p")
pids+=("$ppid")
load pulsar "pulsar://127.0.0.1:$p"
kill "$ppid"
wait "$ppid" 2>/dev/null || true

# 2. Quire, default persistence (E3 Qw3 Qa2), then E1 Qw1 Qa1.
for shape in e3 e1; do
	"$quire" standalone --data-dir "$work/quire-$shape" --kafka-addr "127.0.0.1:$((p + 10))" --http-addr "127.0.0.1:$((p + 11))" \
		--meta-client-addr "127.0.0.1:$((p + 12))" --meta-peer-addr "127.0.0.1:$((p + 13))" \
		--bookie-addrs "127.0.0.1:$((p + 14)),127.0.0.1:$((p + 15)),127.0.0.1:$((p + 16))" --pulsar-addr "127.0.0.1:$((p + 17))" \
		>"$work/quire-$shape.log" 2>&1 &
	qpid=$!
	pids+=("$qpid")
	MATCH= wait_http "127.0.0.1:$((p + 11))/readyz" 60 "$qpid"
	if [[ $shape == e1 ]]; then
		"$quire" admin namespaces set-persistence public/default --ensemble 1 --write-quorum 1 --ack-quorum 1 \
			--meta-endpoints "127.0.0.1:$((p + 12))" >&2
	fi
	load "quire-$shape" "pulsar://127.0.0.1:$((p + 17))"
	kill "$qpid"
	wait "$qpid" 2>/dev/null || true
done

field() { grep -o "$2=[0-9.]*" <<<"${res[$1]}" | cut -d= -f2; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2fx", a / b; else print "-" }'; }
echo
echo "Pulsar-protocol benchmark: $records records of $size B (max rate, $pending in flight, batching 1 ms), read back; then $rate records/s for $fixed s"
echo "$(date -u +%Y-%m-%dT%H:%MZ), $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg)"
printf "%-52s %12s %10s %10s %12s %14s\n" "system" "produce r/s" "p99 ms" "read r/s" "fixed p50 ms" "fixed p99 ms"
for n in pulsar quire-e3 quire-e1; do
	label=${n/pulsar/Apache Pulsar 4.0.7 standalone, E1 Qw1 Qa1, fsync}
	label=${label/quire-e3/Quire standalone, E3 Qw3 Qa2, fsync}
	label=${label/quire-e1/Quire standalone, E1 Qw1 Qa1, fsync}
	printf "%-52s %12s %10s %10s %12s %14s\n" "$label" "$(field $n.produce records_s)" "$(field $n.produce p99_ms)" \
		"$(field $n.consume records_s)" "$(field $n.rate p50_ms)" "$(field $n.rate p99_ms)"
done
for n in quire-e3 quire-e1; do
	echo "$n / pulsar: produce $(ratio "$(field $n.produce records_s)" "$(field pulsar.produce records_s)"), p99 $(ratio "$(field $n.produce p99_ms)" "$(field pulsar.produce p99_ms)"), read $(ratio "$(field $n.consume records_s)" "$(field pulsar.consume records_s)"), fixed-rate p99 $(ratio "$(field $n.rate p99_ms)" "$(field pulsar.rate p99_ms)")"
done
