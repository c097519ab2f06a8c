#!/usr/bin/env bash
# bench/fetchsizes.sh: what a consumer's fetch sizes cost a catch-up read,
# and what one consumer's read-ahead leaves the next.
#
#   bench/fetchsizes.sh
#   RECORDS=5000000 SMALL=32768 bench/fetchsizes.sh
#
# Starts `quire standalone` on an empty data directory (E3 Qw3 Qa2 on three
# bookies), produces RECORDS records of RECORD_SIZE bytes to one topic of
# PARTITIONS partitions, and restarts the standalone, so no read comes from
# the broker's tail cache. Then, with the page cache dropped before each
# read (as root; otherwise the entry logs' pages stay warm and every read
# says so):
#
#   1. fresh: a consumer from the earliest offset with the default fetch
#      sizes (the baseline);
#   2. small: after a restart, one with max.partition.fetch.bytes = SMALL,
#      below a stored batch: a fetch keeps at most one partition's batch
#      (Kafka's rule) and the broker reads and drops the others';
#   3. after: in the same process, right after that one, another with the
#      default sizes: what the small one's read-ahead left it.
#
# Each read is bounded by READ_FOR and prints MB/s and the bytes the
# bookies read from their entry logs per byte consumed
# (bookie_entry_log_read_bytes_total). The last line is
#
#   fetchsizes fresh_mb_s=A small_mb_s=B after_mb_s=C small_ratio=B/A after_ratio=C/A small_amplification=X
#
# Environment: RECORDS [2500000]  PARTITIONS [16]  RECORD_SIZE [1024]
#   SMALL [65536]  READ_FOR [20s]  WORK [/tmp/quire-fetchsizes: removed first]
#   QUIRE_PORT_BASE [39192]  QUIRE [a binary; built if unset]
#   PERF [QUIRE: the binary whose `perf` commands load and read, so an older
#   standalone can be measured with the same client]
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
records=${RECORDS:-2500000}
partitions=${PARTITIONS:-16}
record_size=${RECORD_SIZE:-1024}
small=${SMALL:-65536}
read_for=${READ_FOR:-20s}
work=${WORK:-/tmp/quire-fetchsizes}
p=${QUIRE_PORT_BASE:-39192}

log() { echo "fetchsizes.sh: $*" >&2; }

quire=${QUIRE:-}
if [[ -z $quire ]]; then
	log "building quire"
	(cd "$root" && CGO_ENABLED=0 go build -o "$work.bin" ./cmd/quire)
	quire=$work.bin
fi

perf=${PERF:-$quire}

rm -rf "$work"
mkdir -p "$work"
data=$work/data
qpid=
cleanup() {
	[[ -n $qpid ]] && { kill "$qpid" 2>/dev/null || true; wait "$qpid" 2>/dev/null || true; }
	rm -rf "$data"
}
trap cleanup EXIT

start() {
	"$quire" standalone --data-dir "$data" --kafka-addr "127.0.0.1:$p" --http-addr "127.0.0.1:$((p + 1))" \
		--meta-client-addr "127.0.0.1:$((p + 2))" --meta-peer-addr "127.0.0.1:$((p + 3))" \
		--bookie-addrs "127.0.0.1:$((p + 4)),127.0.0.1:$((p + 5)),127.0.0.1:$((p + 6))" --pulsar-addr "127.0.0.1:$((p + 7))" \
		>>"$work/standalone.log" 2>&1 &
	qpid=$!
	local deadline=$((SECONDS + 60))
	until curl -sf "127.0.0.1:$((p + 1))/readyz" >/dev/null 2>&1; do
		kill -0 "$qpid" 2>/dev/null || { log "standalone exited: $(tail -3 "$work/standalone.log")"; exit 1; }
		((SECONDS < deadline)) || { log "standalone not ready within 60 s"; exit 1; }
		sleep 0.2
	done
}
stop() { kill "$qpid"; wait "$qpid" 2>/dev/null || true; qpid=; }
drop_caches() {
	sync
	echo 3 >/proc/sys/vm/drop_caches 2>/dev/null || log "cannot drop the page cache (not root): reads are warm"
}
entry_log_bytes() {
	curl -s "127.0.0.1:$((p + 1))/metrics" | awk '$1 ~ /^bookie_entry_log_read_bytes_total(\{|$)/ { s += $2 } END { printf "%.0f", s }'
}
# read NAME [consume flags]: one catch-up read; prints "MB/s amplification".
read_backlog() {
	local name=$1
	shift
	drop_caches
	local before after mbs
	before=$(entry_log_bytes)
	"$perf" perf consume --brokers "127.0.0.1:$p" --topic fetchsizes --from earliest --records "$records" \
		--duration "$read_for" "$@" >"$work/$name.out" 2>/dev/null
	after=$(entry_log_bytes)
	mbs=$(sed -nE 's/^perf consume records=.* mb_s=([0-9.]+).*/\1/p' "$work/$name.out" | tail -1)
	local consumed
	consumed=$(sed -nE 's/^perf consume records=([0-9]+) .*/\1/p' "$work/$name.out" | tail -1)
	awk -v m="$mbs" -v a="$before" -v b="$after" -v n="$consumed" -v s="$record_size" \
		'BEGIN { printf "%s %.2f\n", m, (n > 0 ? (b - a) / (n * s) : 0) }'
}

start
log "producing $records records of $record_size bytes to $partitions partitions"
"$perf" perf produce --brokers "127.0.0.1:$p" --topic fetchsizes --partitions "$partitions" --replication-factor -1 \
	--record-size "$record_size" --in-flight 16384 --acks all --records "$records" >"$work/produce.out" 2>/dev/null
log "producer: $(tail -1 "$work/produce.out")"
stop

start
read -r fresh fresh_amp < <(read_backlog fresh)
stop
start
read -r smallr small_amp < <(read_backlog small --max-partition-fetch-bytes "$small")
read -r afterr after_amp < <(read_backlog after)
stop

echo "| read | MB/s | entry-log bytes read per byte consumed |"
echo "|---|---|---|"
echo "| fresh: default fetch sizes, fresh process | $fresh | $fresh_amp |"
echo "| small: max.partition.fetch.bytes=$small, fresh process | $smallr | $small_amp |"
echo "| after: default fetch sizes, right after the small one | $afterr | $after_amp |"
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", (b > 0 ? a / b : 0) }'; }
echo "fetchsizes fresh_mb_s=$fresh small_mb_s=$smallr after_mb_s=$afterr small_ratio=$(ratio "$smallr" "$fresh") after_ratio=$(ratio "$afterr" "$fresh") small_amplification=$small_amp"
