#!/usr/bin/env bash
# bench/soak.sh: does retention bound disk usage? (issue 20)
#
#   bench/soak.sh                       # 11 minutes at 20,000 records/s
#   RATE=30000 DURATION=11m bench/soak.sh
#
# Starts `quire standalone` on an empty data directory (E3 Qw3 Qa2 on three
# bookies), produces RATE records/s of RECORD_SIZE bytes for DURATION to one
# topic of PARTITIONS partitions created with retention.ms=RETENTION_MS and
# segment.ms=SEGMENT_MS (Kafka's names; a segment is a ledger), with no
# consumer: retention alone must free the disk. Every SAMPLE it records the
# data directory's size (du: journals, entry logs, indexes and the embedded
# etcd), the standalone's RSS and the records acknowledged so far, and
# prints the curve as a table. Disk usage is flat once retention has caught
# up when usage at 10 minutes is within 30% of usage at 5 minutes (the
# issue's acceptance): the last line is
#
#   soak records=N errors=E usage_5m_mb=A usage_10m_mb=B ratio=R flat=yes|no
#
# and the exit status is non-zero when flat=no or anything failed. Needs a
# DURATION of at least 10m for the two points (shorter runs print the curve
# and ratio=-).
#
# Environment: RATE [20000]  DURATION [11m]  PARTITIONS [8]  RECORD_SIZE [1024]
#   RETENTION_MS [60000]  SEGMENT_MS [30000]  SAMPLE [30, seconds]
#   WORK [/tmp/quire-soak: removed first]  QUIRE_PORT_BASE [39092]  QUIRE [a binary; built if unset]
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
rate=${RATE:-20000}
duration=${DURATION:-11m}
partitions=${PARTITIONS:-8}
record_size=${RECORD_SIZE:-1024}
retention_ms=${RETENTION_MS:-60000}
segment_ms=${SEGMENT_MS:-30000}
sample=${SAMPLE:-30}
work=${WORK:-/tmp/quire-soak}
p=${QUIRE_PORT_BASE:-39092}

log() { echo "soak.sh: $*" >&2; }

quire=${QUIRE:-}
if [[ -z $quire ]]; then
	log "building quire"
	(cd "$root" && CGO_ENABLED=0 go build -o "$work.bin" ./cmd/quire)
	quire=$work.bin
fi

rm -rf "$work"
mkdir -p "$work"
data=$work/data
pids=()
cleanup() {
	local pid
	for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
	for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
}
trap cleanup EXIT

"$quire" standalone --data-dir "$data" --kafka-addr "127.0.0.1:$p" --http-addr "127.0.0.1:$((p + 1))" \
	--meta-client-addr "127.0.0.1:$((p + 2))" --meta-peer-addr "127.0.0.1:$((p + 3))" \
	--bookie-addrs "127.0.0.1:$((p + 4)),127.0.0.1:$((p + 5)),127.0.0.1:$((p + 6))" --pulsar-addr "127.0.0.1:$((p + 7))" \
	>"$work/standalone.log" 2>&1 &
qpid=$!
pids+=("$qpid")
deadline=$((SECONDS + 60))
until curl -sf "127.0.0.1:$((p + 1))/readyz" >/dev/null 2>&1; do
	kill -0 "$qpid" 2>/dev/null || { log "standalone exited: $(tail -3 "$work/standalone.log")"; exit 1; }
	((SECONDS < deadline)) || { log "standalone not ready within 60 s"; exit 1; }
	sleep 0.2
done

log "producing $rate records/s of $record_size bytes for $duration (retention.ms=$retention_ms segment.ms=$segment_ms)"
"$quire" perf produce --brokers "127.0.0.1:$p" --topic soak --partitions "$partitions" --replication-factor -1 \
	--topic-config "retention.ms=$retention_ms" --topic-config "segment.ms=$segment_ms" \
	--record-size "$record_size" --rate "$rate" --duration "$duration" --warm-up 0s \
	>"$work/produce.out" 2>"$work/produce.err" &
ppid=$!
pids+=("$ppid")

# Samples until the producer ends: seconds since start, MB used, RSS MiB,
# and the producer's records/s and errors in its last progress line.
start=$SECONDS
echo "# t_s used_mb rss_mib records_s errors" >"$work/curve"
next=0
while kill -0 "$ppid" 2>/dev/null; do
	if ((SECONDS - start >= next)); then
		used=$(du -sm "$data" 2>/dev/null | awk '{ print $1 }')
		rss=$(awk '/^VmRSS:/ { print int($2 / 1024) }' "/proc/$qpid/status" 2>/dev/null || echo -)
		prog=$(tail -c 400 "$work/produce.err" 2>/dev/null | tr '\r' '\n' | grep 'perf produce' | tail -1 || true)
		rps=$(awk '{ for (i = 1; i < NF; i++) if ($(i + 1) == "records/s") print $i }' <<<"$prog")
		errs=$(awk '{ for (i = 1; i < NF; i++) if ($i == "errors") print $(i + 1) }' <<<"$prog")
		echo "$((SECONDS - start)) ${used:--} ${rss:--} ${rps:--} ${errs:--}" >>"$work/curve"
		next=$((next + sample))
	fi
	sleep 1
done
rc=0
wait "$ppid" || rc=$?
last=$(tail -1 "$work/produce.out" || true)
log "producer: $last (exit $rc)"

echo "| minute | disk used (MB) | standalone RSS (MiB) | records/s | errors so far |"
echo "|---|---|---|---|---|"
awk 'NR > 1 { printf "| %.1f | %s | %s | %s | %s |\n", $1 / 60, $2, $3, $4, $5 }' "$work/curve"

# usage at T: the first sample at or after T seconds.
usage_at() { awk -v t="$1" 'NR > 1 && $1 >= t { print $2; exit }' "$work/curve"; }
u5=$(usage_at 300)
u10=$(usage_at 600)
records=$(grep -o 'records=[0-9]*' <<<"$last" | cut -d= -f2)
errors=$(grep -o 'errors=[0-9]*' <<<"$last" | cut -d= -f2)
ratio=- flat=no
if [[ -n $u5 && -n $u10 ]]; then
	ratio=$(awk -v a="$u5" -v b="$u10" 'BEGIN { printf "%.2f", b / a }')
	flat=$(awk -v r="$ratio" 'BEGIN { print (r >= 0.7 && r <= 1.3) ? "yes" : "no" }')
fi
echo "soak records=${records:--} errors=${errors:--} usage_5m_mb=${u5:--} usage_10m_mb=${u10:--} ratio=$ratio flat=$flat"
[[ $flat == yes && $rc == 0 ]]
