#!/usr/bin/env bash
# run.sh — Quire's bookie and Apache BookKeeper's, side by side, against one
# baseline, in one run: `quire perf bookie` measures the raw group-commit loop
# with fdatasync and Quire's bookie; then a real BookKeeper bookie (with a
# ZooKeeper to register in) runs on the same disk, under the same load
# (LoadGen.java: IN_FLIGHT adds of ENTRY_BYTES over 4 ledgers, E=Qw=Qa=1).
#
# Usage: bench/bookkeeper/run.sh [DIR]     # DIR on the disk under test (default /tmp)
# Environment (defaults in brackets):
#   DURATION [10] WARMUP [5] seconds   IN_FLIGHT [256]   ENTRY_BYTES [1024]
#   BK_CONF_EXTRA  extra bookie settings, one key=value per line (e.g.
#                  journalFlushWhenQueueEmpty=true); the rest are BookKeeper's defaults
#                  (DbLedgerStorage, journal and ledgers on DIR)
#   ZK_PORT [42181]  BOOKIE_PORT [43181]  QUIRE_BIN [built from ./cmd/quire]
# Last line: `bookkeeper-bench baseline_mb_s=X quire_mb_s=Y quire_ratio=R bookkeeper_mb_s=Z bookkeeper_ratio=S`.
set -euo pipefail

dir=${1:-/tmp}
duration=${DURATION:-10}
warmup=${WARMUP:-5}
inflight=${IN_FLIGHT:-256}
entry=${ENTRY_BYTES:-1024}
zkport=${ZK_PORT:-42181}
bkport=${BOOKIE_PORT:-43181}
root=$(cd "$(dirname "$0")/../.." && pwd)
home=$("$root/bench/bookkeeper/install.sh")
work=$(mktemp -d "$dir/quire-bkbench.XXXXXX")
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
	rm -rf "$work"
}
trap cleanup EXIT

quire=${QUIRE_BIN:-}
if [[ -z $quire ]]; then
	quire=$work/quire
	(cd "$root" && CGO_ENABLED=0 go build -o "$quire" ./cmd/quire)
fi

wait_port() { # port seconds
	for _ in $(seq 1 $(($2 * 4))); do
		(echo >/dev/tcp/127.0.0.1/"$1") 2>/dev/null && return 0
		sleep 0.25
	done
	echo "run.sh: nothing listens on 127.0.0.1:$1 after $2 s" >&2
	return 1
}

echo "== quire perf bookie (baseline and Quire's bookie)"
mkdir -p "$work/quire-data"
timeout $((4 * (duration + warmup) + 60)) "$quire" perf bookie --dir "$work/quire-data" \
	--duration "${duration}s" --warm-up "${warmup}s" --in-flight "$inflight" --entry-bytes "$entry" 2>/dev/null |
	tee "$work/quire.txt" | grep -E '^(baseline|bookie) '
read -r baseline quirembs < <(sed -n 's/.*baseline_mb_s=\([0-9.]*\) bookie_mb_s=\([0-9.]*\).*/\1 \2/p' "$work/quire.txt")

echo "== Apache BookKeeper $(basename "$home" | sed 's/bookkeeper-//'): ZooKeeper and one bookie on 127.0.0.1"
cp="$home/libs/*"
jvm=(java -Xmx1g -XX:MaxDirectMemorySize=1g -Dzookeeper.admin.enableServer=false -Dlog4j2.level=warn)
mkdir -p "$work/zk" "$work/bk"
cat >"$work/bk.conf" <<CONF
bookiePort=$bkport
advertisedAddress=127.0.0.1
allowLoopback=true
metadataServiceUri=zk+hierarchical://127.0.0.1:$zkport/ledgers
journalDirectories=$work/bk/journal
ledgerDirectories=$work/bk/ledgers
ledgerStorageClass=org.apache.bookkeeper.bookie.storage.ldb.DbLedgerStorage
httpServerEnabled=false
statsProviderClass=org.apache.bookkeeper.stats.NullStatsProvider
${BK_CONF_EXTRA:-}
CONF
"${jvm[@]}" -cp "$cp" org.apache.zookeeper.server.ZooKeeperServerMain "$zkport" "$work/zk" >"$work/zk.log" 2>&1 &
pids+=($!)
wait_port "$zkport" 30
timeout 60 "${jvm[@]}" -cp "$cp" org.apache.bookkeeper.bookie.BookieShell -conf "$work/bk.conf" initnewcluster >"$work/init.log" 2>&1
"${jvm[@]}" -cp "$cp" org.apache.bookkeeper.server.Main --conf "$work/bk.conf" >"$work/bookie.log" 2>&1 &
pids+=($!)
wait_port "$bkport" 60
timeout $((2 * (duration + warmup) + 60)) java -Xmx2g -cp "$cp:$home/classes" LoadGen "127.0.0.1:$zkport" \
	"$inflight" "$entry" "$warmup" "$duration" >"$work/loadgen.log" 2>&1 || true
grep '^bookkeeper ' "$work/loadgen.log" || true
bkmbs=$(sed -n 's/^bookkeeper .*mb_s=\([0-9.]*\).*/\1/p' "$work/loadgen.log")
if [[ -z $bkmbs ]]; then
	echo "run.sh: the BookKeeper load generator printed no result; its log:" >&2
	tail -20 "$work/loadgen.log" >&2
	exit 1
fi

awk -v b="$baseline" -v q="$quirembs" -v k="$bkmbs" 'BEGIN {
	printf "bookkeeper-bench baseline_mb_s=%.1f quire_mb_s=%.1f quire_ratio=%.3f bookkeeper_mb_s=%.1f bookkeeper_ratio=%.3f\n", b, q, q / b, k, k / b
}'
