#!/usr/bin/env bash
# peer.sh — the peer benchmark: one produce workload, measured by the same
# tool (`quire perf produce`, a Kafka-protocol client) against Apache Kafka and
# against Quire, on this machine, in one run; then a table and Quire/Kafka
# ratios. After each configuration's produce phase, a read phase on the same
# topic (`quire perf consume`), with a second table and its ratios.
#
# Usage: bench/peer.sh                      # from the repository root
#        DURATION=10s bench/peer.sh         # a quick run
#        READ=0 bench/peer.sh               # the produce phase only
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
#   quire-isr     `quire standalone --mode isr --brokers 3`: Kafka's design in Quire,
#                 partitions replicated on three brokers, RF 3, min.insync.replicas=2,
#                 default flush (page cache): the peer of kafka3
#   quire-isr-flush  the same standalone with flush.messages=1: the peer of kafka3-flush
#   quire-secure  `quire standalone` as quire, with TLS, SASL/SCRAM-SHA-512 and the Kafka
#                 authorizer on (SASL_SSL; the client is the admin, a super user): compared
#                 with the quire row, the cost of security; produce phase only (the read
#                 phase's offsets probe speaks plaintext)
# The equal-durability peers of Quire are the 3-node rows; kafka3-flush is the
# one that, like Quire, fsyncs before acknowledging. The quire-isr rows are
# compared with the Kafka row of the same flush policy.
#
# Read phase (READ=1, the default), right after each configuration's produce
# phase, on its topic peer-<config>, whose whole backlog (the produce phase's
# records, warm-up included, counted with ListOffsets by bench/offsets.go) is
# read by fresh consumers from earliest, reading every partition directly (no
# group):
#   1. catch-up, cold: for Quire the standalone process is restarted on the
#      same data dir first (its broker's entry cache starts empty) and the
#      topic probed until every partition answers ListOffsets; then, for every
#      system, the page cache is dropped (sync; echo 3 > /proc/sys/vm/drop_caches,
#      as root; if the machine refuses, the table says so; it is the whole
#      machine's cache, so it disturbs anything else measuring on the machine)
#      and the backlog read: MB/s.
#   2. catch-up, warm: the same again at once (page cache warm; Quire's entry
#      cache partly).
#   3. tailing: after TAIL_WARMUP of the producer unmeasured, a consumer from
#      latest while `perf produce` writes TAIL_RATE records/s for TAIL_DURATION:
#      end-to-end p50/p99 (send time in the payload to fetch) and the
#      producer's p99.
#   4. produce with a catch-up reader: the page cache is dropped again, then
#      step 3's tailing consumer and producer run together with a consumer
#      reading the backlog from earliest (stopped when the producer is done):
#      the producer's records/s and p99 and the tailing consumer's end-to-end
#      p50/p99, beside step 3's without the reader; the reader's MB/s.
#   5. produce beside idle-priority load: step 3's tailing consumer and
#      producer beside one busy loop per core at the lowest CPU priority
#      (SCHED_IDLE), no reader: the p99s printed beside step 3's. On a machine
#      whose cores the clients share with the broker, this is what any reader
#      does to them at least, however it is served.
#   With SINGLE=1, also: RECORDS_SINGLE records produced (max rate) to a
#   1-partition topic peer-<config>-1p and read cold as in step 1.
#   Quire's peak RSS (VmHWM of the restarted standalone process, read at the
#   end of steps 1-5) is printed too.
#
# Environment (defaults in brackets):
#   DURATION [60s]  WARMUP [10s]  RATE [0 = max]  IN_FLIGHT [16384]  RECORD_SIZE [1024]
#   PARTITIONS [16]  CONFIGS [kafka1 kafka3 kafka3-flush quire]
#   READ [1; 0 skips the read phase]  TAIL_RATE [20000 records/s]  TAIL_DURATION [20s]
#   TAIL_WARMUP [5s: the tail producer first runs this long unmeasured; 0s: not]
#   SINGLE [0; 1 adds the single-partition catch-up]  RECORDS_SINGLE [1000000: 1 GB of
#   1 KiB records, a read of about 2 s; 200,000 read in 0.4 s, of which a
#   consumer's start (metadata, the first fetch) was a visible share]
#   WORK [a new /tmp/quire-peer.XXXXXX; removed at exit unless KEEP=1]
#   QUIRE_BIN [built from ./cmd/quire into WORK]  QUIRE_ARGS [extra standalone flags]
#   QUIRE_BROKERS [1; N > 1 adds N-1 `quire broker` processes beside the standalone,
#   on the same etcd and bookies, so that the partitions' bundles spread over N
#   brokers as Kafka's partitions spread over its nodes: a Kafka client keeps one
#   fetch in flight per broker, so a consumer's catch-up gets N pipelines. Their
#   Kafka ports are QUIRE_PORT_BASE+10+i, HTTP +20+i; all restart together]
#   KAFKA_PORT_BASE [19092]  QUIRE_PORT_BASE [19190: Kafka port; +1 HTTP,
#   +2/+3 etcd, +4..+6 bookies; the quire-isr brokers' Kafka ports +30..+32]
#   PRODUCE_ARGS [extra `perf produce` flags for every configuration; in the read
#   phase's producers too, before their own --rate and --duration]
#
# Every step is bounded in time (cluster start 90 s, each produce WARMUP +
# DURATION + 150 s, a catch-up read max(120 s, backlog bytes / 5 MB/s) + 90 s,
# a Quire restart 60 s + 90 s for the topic to answer (tried at most twice,
# as the standalone exits if its broker loses its metadata session while
# loading the partitions on a loaded machine), a tailing step
# TAIL_DURATION + 150 s); every process started here is stopped on exit, also
# on Ctrl-C. A configuration that fails (e.g. Quire not serving Kafka yet) is
# reported as failed and the others still run. Output: each run's summary in
# WORK/<config>.out (read phase: WORK/<config>-<step>.out), then the tables on
# stdout. Exit status 0 if every configuration produced a result (and, with
# READ=1, a complete read phase).
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
read_phase_on=${READ:-1}
tail_rate=${TAIL_RATE:-20000}
tail_duration=${TAIL_DURATION:-20s}
single=${SINGLE:-0}
records_single=${RECORDS_SINGLE:-1000000}
work=${WORK:-$(mktemp -d /tmp/quire-peer.XXXXXX)}
mkdir -p "$work"
work=$(cd "$work" && pwd)

kafka_dirs=()
bootstrap=""
quire_pid=""
quire_brokers=${QUIRE_BROKERS:-1}
extra_pids=()
bg_pids=() # processes started in the background by bg_start, not yet waited for

# stop_quire: SIGTERM, up to 10 s, then SIGKILL.
stop_quire() {
	local p
	for p in "${extra_pids[@]}"; do
		kill -TERM "$p" 2>/dev/null
	done
	for p in "${extra_pids[@]}"; do
		for _ in $(seq 100); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
		kill -KILL "$p" 2>/dev/null || true
		wait "$p" 2>/dev/null
	done
	extra_pids=()
	if [[ -n $quire_pid ]] && kill -0 "$quire_pid" 2>/dev/null; then
		kill -TERM "$quire_pid" 2>/dev/null
		for _ in $(seq 100); do kill -0 "$quire_pid" 2>/dev/null || break; sleep 0.1; done
		kill -KILL "$quire_pid" 2>/dev/null || true
		wait "$quire_pid" 2>/dev/null
	fi
	quire_pid=""
}

# shellcheck disable=SC2317 # called by the EXIT trap
cleanup() {
	local d p
	for p in "${bg_pids[@]}"; do
		bg_stop "$p" 5
	done
	for d in "${kafka_dirs[@]}"; do
		KAFKA_PORT_BASE=$kafka_port_base "$root/bench/kafka/run.sh" stop "$d" || true
	done
	stop_quire
	if [[ ${KEEP:-0} != 1 ]]; then
		rm -rf "$work"
	else
		echo "peer.sh: kept $work" >&2
	fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

log() { echo "peer.sh: $*" >&2; }

# bg_start BOUND OUT ERR CMD...: starts CMD in the background under
# `timeout BOUND` (seconds) with its output in OUT and ERR, and sets bg_pid.
# Waiting for it with bg_wait (not in the foreground) lets Ctrl-C stop the
# script at once: bash runs the INT trap as soon as `wait` is interrupted, and
# cleanup stops what is still running.
bg_start() {
	local bound=$1 out=$2 err=$3
	shift 3
	timeout -k 10 "$bound" "$@" >"$out" 2>"$err" &
	bg_pid=$!
	bg_pids+=("$bg_pid")
}

# bg_forget PID: PID is no longer to be stopped by cleanup.
bg_forget() {
	local p keep=()
	for p in "${bg_pids[@]}"; do
		[[ $p == "$1" ]] || keep+=("$p")
	done
	bg_pids=("${keep[@]}")
}

# bg_wait PID: waits for a process of bg_start; returns its exit status.
bg_wait() {
	local rc
	wait "$1"
	rc=$?
	bg_forget "$1"
	return $rc
}

# bg_stop PID GRACE: sends SIGTERM to a process of bg_start (timeout passes it
# on; the perf commands then print their summary and exit), waits up to GRACE
# seconds, then SIGKILLs its child (timeout then exits, having reaped it) and,
# if it is still there 2 s later, timeout itself; returns its exit status.
bg_stop() {
	local pid=$1 grace=$2 rc
	kill -TERM "$pid" 2>/dev/null
	for _ in $(seq $((grace * 10))); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
	if kill -0 "$pid" 2>/dev/null; then
		pkill -KILL -P "$pid" 2>/dev/null
		for _ in $(seq 20); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
		kill -KILL "$pid" 2>/dev/null
	fi
	wait "$pid" 2>/dev/null
	rc=$?
	bg_forget "$pid"
	return $rc
}

# stop_or_wait PID: stops a process of bg_start if it still runs (bg_stop,
# 10 s grace), else collects its exit status.
stop_or_wait() {
	if kill -0 "$1" 2>/dev/null; then
		bg_stop "$1" 10
	else
		bg_wait "$1"
	fi
}

# bounded BOUND OUT ERR CMD...: runs CMD as bg_start does and waits for it.
bounded() {
	bg_start "$@"
	bg_wait "$bg_pid"
}

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
	[[ -z $d ]] || { log "cannot parse duration $1"; return 2; }
	echo "$total"
}
duration_s=$(seconds "$duration") || exit 2
warmup_s=$(seconds "$warmup") || exit 2
tail_s=$(seconds "$tail_duration") || exit 2
tail_warmup_s=$(seconds "${TAIL_WARMUP:-5s}") || exit 2
run_bound=$((duration_s + warmup_s + 150))
[[ $read_phase_on =~ ^[01]$ && $single =~ ^[01]$ ]] || { log "READ and SINGLE are 0 or 1"; exit 2; }
[[ $tail_rate =~ ^[0-9]+(\.[0-9]+)?$ && $records_single =~ ^[0-9]+$ ]] ||
	{ log "TAIL_RATE must be a positive number and RECORDS_SINGLE a count"; exit 2; }
if ((read_phase_on)) && { ((tail_s == 0)) || awk -v r="$tail_rate" 'BEGIN { exit !(r <= 0) }'; }; then
	log "TAIL_RATE and TAIL_DURATION must be positive"
	exit 2
fi

quire=${QUIRE_BIN:-}
if [[ -z $quire ]]; then
	quire=$work/quire
	log "building quire"
	(cd "$root" && CGO_ENABLED=0 go build -o "$quire" ./cmd/quire) || { log "go build failed"; exit 1; }
fi
offsets=$work/offsets
# The read phase's step 5 runs busy loops at the lowest CPU priority there is:
# SCHED_IDLE, or nice 19 where chrt is missing or refused.
idle_prio=(chrt -i 0)
"${idle_prio[@]}" true 2>/dev/null || idle_prio=(nice -n 19)
if ((read_phase_on)); then
	(cd "$root" && CGO_ENABLED=0 go build -o "$offsets" bench/offsets.go) || { log "go build bench/offsets.go failed"; exit 1; }
fi

declare -A label result reason
label[kafka1]="Kafka 1 node, RF 1, acks=all (1 copy)"
label[kafka3]="Kafka 3 nodes, RF 3, minISR 2, acks=all"
label[kafka3-flush]="Kafka 3 nodes, RF 3, minISR 2, acks=all, flush.messages=1"
label[quire]="Quire standalone, E3 Qw3 Qa2, acks=all"
((quire_brokers > 1)) && label[quire]="Quire $quire_brokers brokers + 3 bookies, E3 Qw3 Qa2, acks=all"
label[quire-isr]="Quire ISR mode, 3 brokers, RF 3, minISR 2, acks=all"
label[quire-isr-flush]="Quire ISR mode, 3 brokers, RF 3, minISR 2, acks=all, flush.messages=1"
label[quire-secure]="Quire standalone, E3 Qw3 Qa2, acks=all, TLS + SCRAM-SHA-512 + ACLs"

# The Quire configuration running now (quire, quire-isr or quire-isr-flush),
# its standalone's mode and its Kafka bootstrap address.
qcfg=quire
quire_mode=""
quire_kafka=127.0.0.1:$quire_port_base

# is_quire NAME: NAME is one of Quire's configurations.
is_quire() { [[ $1 == quire || $1 == quire-* ]]; }

# peer_of NAME: the Kafka configuration a Quire configuration is compared with
# in the ratios ("" for every Kafka row).
peer_of() {
	case $1 in
	quire-isr) echo kafka3 ;;
	quire-isr-flush) echo kafka3-flush ;;
	esac
}

# produce NAME BROKERS [perf produce flags...]: runs the workload; on success
# result[NAME] holds "records_s mb_s p50_ms p99_ms errors".
produce() {
	local name=$1 brokers=$2 line
	shift 2
	log "$name: producing for $duration to $brokers"
	# shellcheck disable=SC2086 # PRODUCE_ARGS is a list of flags
	bounded "$run_bound" "$work/$name.out" "$work/$name.err" "$quire" perf produce --brokers "$brokers" --topic "peer-$name" \
		--partitions "$partitions" --record-size "$record_size" --rate "$rate" --duration "$duration" --warm-up "$warmup" \
		--in-flight "$in_flight" --acks all --connect-timeout 60s "$@" ${PRODUCE_ARGS:-}
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

# start_quire: starts `quire standalone` (in quire_mode) on WORK/quire-data
# or WORK/quire-isr-data (a restart keeps the data) and waits up to 60 s until
# it accepts Kafka connections; on failure reason[$qcfg] says why.
start_quire() {
	local dir=$work/quire-data kafka=$quire_kafka p=$quire_port_base
	local handoff=()
	if [[ $quire_mode == isr ]]; then
		dir=$work/quire-isr-data
		handoff=(--mode isr --brokers 3)
	elif [[ $quire_mode == secure ]]; then
		dir=$work/quire-secure-data
		"$quire" certs --dir "$work/certs" --hosts 127.0.0.1,localhost >/dev/null || { reason[$qcfg]="quire certs failed"; return 1; }
		handoff=(--kafka-tls-cert "$work/certs/server.pem" --kafka-tls-key "$work/certs/server-key.pem"
			--kafka-sasl-mechanisms SCRAM-SHA-512 --kafka-sasl-admin-user admin --kafka-authorizer)
		export QUIRE_KAFKA_SASL_ADMIN_PASSWORD=peer-secret QUIRE_PERF_SASL_PASSWORD=peer-secret
	elif ((quire_brokers > 1)); then
		handoff=(--bundle-handoff-after 1s)
	fi
	mkdir -p "$dir"
	log "quire: starting standalone ${handoff[*]} (Kafka on $kafka)"
	# shellcheck disable=SC2086 # QUIRE_ARGS is a list of flags
	"$quire" standalone --data-dir "$dir" --kafka-addr "$kafka" --http-addr "127.0.0.1:$((p + 1))" \
		--meta-client-addr "127.0.0.1:$((p + 2))" --meta-peer-addr "127.0.0.1:$((p + 3))" \
		--bookie-addrs "127.0.0.1:$((p + 4)),127.0.0.1:$((p + 5)),127.0.0.1:$((p + 6))" --pulsar-addr "127.0.0.1:$((p + 7))" \
		"${handoff[@]}" ${QUIRE_ARGS:-} >>"$work/quire-standalone.log" 2>&1 &
	quire_pid=$!
	local deadline=$((SECONDS + 60))
	while ((SECONDS < deadline)); do
		if ! kill -0 "$quire_pid" 2>/dev/null; then
			reason[$qcfg]="standalone exited: $(tail -1 "$work/quire-standalone.log" | cut -c1-120)"
			quire_pid=""
			return 1
		fi
		if (exec 3<>"/dev/tcp/127.0.0.1/${kafka##*:}") 2>/dev/null; then
			break
		fi
		sleep 0.2
	done
	if ((SECONDS >= deadline)); then
		reason[$qcfg]="not serving Kafka on $kafka within 60 s"
		return 1
	fi
	[[ $quire_mode == isr || $quire_mode == secure ]] && return 0
	start_extra_brokers && settle_bundles
}

# settle_bundles: with QUIRE_BROKERS > 1, waits until every bundle is owned
# and the owners (`quire admin namespaces bundles public/default`) have not
# changed for 3 s, starting 2 s after the last broker was ready (a joining
# broker gets its bundles 1 s after it is live: --bundle-handoff-after),
# bounded by 30 s: the restarted standalone takes every bundle first and
# hands some over once the other brokers are live, and a read that raced
# the handoff measured the handoff, not the read path.
settle_bundles() {
	((quire_brokers > 1)) || return 0
	local prev="" cur same=0 deadline=$((SECONDS + 30))
	sleep 2
	while ((SECONDS < deadline)); do
		cur=$("$quire" admin namespaces bundles public/default --meta-endpoints "127.0.0.1:$((quire_port_base + 2))" 2>/dev/null)
		if [[ -n $cur && $cur == "$prev" && $cur != *unowned* ]]; then
			((++same >= 6)) && return 0
		else
			same=0
		fi
		prev=$cur
		sleep 0.5
	done
	log "quire: bundle owners still moving after 30 s; going on"
}

# start_extra_brokers: the QUIRE_BROKERS-1 `quire broker` processes beside
# the standalone, waited for until each answers /readyz (its bundles then
# move to it within --bundle-handoff-after).
start_extra_brokers() {
	local p=$quire_port_base i pid
	for ((i = 2; i <= quire_brokers; i++)); do
		"$quire" broker --meta-endpoints "127.0.0.1:$((p + 2))" --kafka-addr "127.0.0.1:$((p + 10 + i))" \
			--http-addr "127.0.0.1:$((p + 20 + i))" --bundle-handoff-after 1s \
			>>"$work/quire-broker-$i.log" 2>&1 &
		extra_pids+=($!)
	done
	for ((i = 2; i <= quire_brokers; i++)); do
		pid=${extra_pids[i - 2]}
		local deadline=$((SECONDS + 60))
		until curl -sf "127.0.0.1:$((p + 20 + i))/readyz" >/dev/null 2>&1; do
			if ! kill -0 "$pid" 2>/dev/null || ((SECONDS >= deadline)); then
				reason[$qcfg]="broker $i not ready: $(tail -1 "$work/quire-broker-$i.log" | cut -c1-120)"
				return 1
			fi
			sleep 0.2
		done
	done
}

# run_quire NAME MODE [topic creation flags]: the produce phase of a Quire
# configuration, on a standalone in MODE ("" ledger, isr) started unless
# one in that mode already runs (quire-isr and quire-isr-flush share it).
run_quire() {
	local name=$1 mode=$2 p=$quire_port_base
	shift 2
	qcfg=$name
	if [[ -n $quire_pid && $quire_mode == "$mode" ]] && kill -0 "$quire_pid" 2>/dev/null; then
		produce "$name" "$quire_kafka" "$@"
		return
	fi
	stop_kafka
	stop_quire
	quire_mode=$mode
	quire_kafka=127.0.0.1:$p
	[[ $mode == isr ]] && quire_kafka=127.0.0.1:$((p + 30))
	if (exec 3<>"/dev/tcp/${quire_kafka/://}") 2>/dev/null; then
		reason[$name]="port ${quire_kafka#*:} already in use"
		return 1
	fi
	start_quire || return 1
	produce "$name" "$quire_kafka" "$@"
}

# ---- read phase ----

declare -A rlabel rd_backlog rd_cold rd_warm rd_tail rd_with rd_idle rd_single rd_rss rd_rss1 rd_notes
rlabel[kafka1]="Kafka 1 node, RF 1"
rlabel[kafka3]="Kafka 3 nodes, RF 3"
rlabel[kafka3-flush]="Kafka 3 nodes, RF 3, flush.messages=1"
rlabel[quire]="Quire standalone, E3 Qw3 Qa2"
((quire_brokers > 1)) && rlabel[quire]="Quire $quire_brokers brokers + 3 bookies"
rlabel[quire-isr]="Quire ISR mode, 3 brokers, RF 3"
rlabel[quire-isr-flush]="Quire ISR mode, RF 3, flush.messages=1"
rlabel[quire-secure]="Quire, TLS + SCRAM + ACLs"
caches_dropped=yes # until the machine refuses once
read_failed=0

# note NAME TEXT: a remark on NAME's read phase, printed under the table.
note() {
	rd_notes[$1]+="${rd_notes[$1]:+; }$2"
	log "$1: $2"
}

# drop_caches: writes dirty pages back and drops the page cache (and dentries
# and inodes), so that what a consumer reads next comes from the disk.
drop_caches() {
	timeout 120 sync
	if ! (echo 3 >/proc/sys/vm/drop_caches) 2>/dev/null; then
		[[ $caches_dropped == yes ]] && log "could not drop the page cache (echo 3 > /proc/sys/vm/drop_caches refused); going on with it warm"
		caches_dropped=no
		return 1
	fi
}

# backlog BROKERS TOPIC OUT: sets bl_n to the number of records in TOPIC
# (every partition's latest - earliest offset), once every partition has a
# leader and answers ListOffsets (bounded by 90 s; for Quire, it gives up as
# soon as the standalone process is gone). Like every function here that
# starts a process, it returns its result in a variable: in a $(...)
# subshell, Ctrl-C would not stop what it started.
backlog() {
	local pid
	bl_n=""
	bg_start 120 "$3" "$3.err" "$offsets" -brokers "$1" -topic "$2" -timeout 90s
	pid=$bg_pid
	while kill -0 "$pid" 2>/dev/null; do
		if [[ $1 == "$quire_kafka" ]] && { [[ -z $quire_pid ]] || ! kill -0 "$quire_pid" 2>/dev/null; }; then
			bg_stop "$pid" 1
			return 1
		fi
		sleep 0.2
	done
	bg_wait "$pid" || return 1
	bl_n=$(sed -nE 's/^offsets partitions=[0-9]+ records=([0-9]+)$/\1/p' "$3")
	[[ -n $bl_n ]]
}

# catchup_bound RECORDS: seconds a catch-up read of RECORDS may take:
# max(120, bytes / 5 MB/s).
catchup_bound() {
	local s=$(($1 * record_size / 5000000))
	echo $((s > 120 ? s : 120))
}

# parse_consume FILE: sets c_records c_rs c_mbs c_secs c_e2e50 c_e2e99 from a
# `perf consume` summary (c_records empty if there is none).
parse_consume() {
	local line
	c_records="" c_rs="" c_mbs="" c_secs="" c_e2e50=- c_e2e99=-
	line=$(grep '^perf consume records=' "$1" | tail -1)
	[[ -n $line ]] || return 1
	c_records=$(sed -E 's/.* records=([0-9]+).*/\1/' <<<"$line")
	c_rs=$(sed -E 's/.* records_s=([0-9.]+).*/\1/' <<<"$line")
	c_mbs=$(sed -E 's/.* mb_s=([0-9.]+).*/\1/' <<<"$line")
	c_secs=$(sed -nE 's/^records: [0-9]+, [0-9.]+ MB in ([0-9.]+) s.*/\1/p' "$1" | tail -1)
	line=$(grep '^perf consume e2e_p50_ms=' "$1" | tail -1)
	if [[ -n $line ]]; then
		c_e2e50=$(sed -E 's/.* e2e_p50_ms=([0-9.]+).*/\1/' <<<"$line")
		c_e2e99=$(sed -E 's/.* e2e_p99_ms=([0-9.]+).*/\1/' <<<"$line")
	fi
}

# parse_produce FILE: sets p_records p_errors p_rs p_p99 from a `perf produce`
# summary (p_records empty if there is none).
parse_produce() {
	local line
	p_records="" p_errors="" p_rs="" p_p99=""
	line=$(grep '^perf produce records=' "$1" | tail -1)
	[[ -n $line ]] || return 1
	p_records=$(sed -E 's/.* records=([0-9]+).*/\1/' <<<"$line")
	p_errors=$(sed -E 's/.* errors=([0-9]+).*/\1/' <<<"$line")
	p_rs=$(sed -E 's/.* records_s=([0-9.]+).*/\1/' <<<"$line")
	p_p99=$(sed -E 's/.* p99_ms=([0-9.]+).*/\1/' <<<"$line")
}

# catchup NAME STEP BROKERS TOPIC RECORDS: a fresh consumer reads RECORDS
# records of TOPIC from earliest; sets cu to "MB/s records/s seconds", the
# MB/s marked with * if it did not read all of them within the bound, or to
# "fail".
catchup() {
	local name=$1 step=$2 brokers=$3 topic=$4 n=$5 bound out
	bound=$(catchup_bound "$n")
	out=$work/$name-$step
	log "$name: $step: reading $n records of $topic from earliest (bound ${bound}s)"
	bounded $((bound + 90)) "$out.out" "$out.err" "$quire" perf consume --brokers "$brokers" --topic "$topic" \
		--from earliest --records "$n" --duration "${bound}s" --connect-timeout 60s
	local rc=$?
	if ! parse_consume "$out.out"; then
		note "$name" "$step failed (exit $rc): $(tail -1 "$out.err" | cut -c1-100)"
		cu=fail
		return 1
	fi
	log "$name: $step: $(tail -1 "$out.out")"
	is_quire "$name" && log "quire: standalone VmHWM so far $(vmhwm) MiB"
	if ((c_records < n)); then
		note "$name" "$step read $c_records of $n records within ${bound}s"
		cu="$c_mbs* $c_rs $c_secs"
		return 1
	fi
	cu="$c_mbs $c_rs $c_secs"
}

# rate_produce NAME STEP BROKERS TOPIC [DURATION]: `perf produce` at TAIL_RATE
# for DURATION (default TAIL_DURATION), started in the background (bg_pid).
rate_produce() {
	local name=$1 step=$2 brokers=$3 topic=$4 d=${5:-$tail_duration}
	# shellcheck disable=SC2086 # PRODUCE_ARGS is a list of flags
	bg_start $((tail_s + 150)) "$work/$name-$step-produce.out" "$work/$name-$step-produce.err" \
		"$quire" perf produce --brokers "$brokers" --topic "$topic" --partitions "$partitions" \
		--record-size "$record_size" --in-flight "$in_flight" --acks all --connect-timeout 60s ${PRODUCE_ARGS:-} \
		--rate "$tail_rate" --duration "$d" --warm-up 0s
}

# produce_outcome NAME STEP WHAT RC: parses the output of step STEP's
# rate_produce (parse_produce: p_rs, p_p99, p_errors), noting WHAT's errors,
# or its failure with exit status RC; returns 1 if it gave no result.
produce_outcome() {
	local name=$1 step=$2 what=$3 rc=$4
	if parse_produce "$work/$name-$step-produce.out"; then
		((p_errors == 0)) || note "$name" "$what: $p_errors errors"
		return 0
	fi
	note "$name" "$what failed (exit $rc): $(tail -1 "$work/$name-$step-produce.err" | cut -c1-100)"
	return 1
}

# vmhwm: the standalone process's peak resident set (VmHWM), in MiB.
vmhwm() {
	local kb
	kb=$(awk '/^VmHWM:/ { print $2 }' "/proc/$quire_pid/status" 2>/dev/null)
	[[ -n $kb ]] && echo $((kb / 1024)) || echo -
}

# restart_quire TOPIC OUT [OTHER...]: restarts the standalone process on the
# same data (its caches start empty) and waits until TOPIC answers (backlog,
# which sets bl_n), and then each OTHER topic: the brokers load every
# partition of the bundles they take, and a catch-up measured while another
# topic's partitions still load measures the loads too (Kafka is not
# restarted). If the standalone does not come back, or exits before TOPIC
# answers (as it does when its broker loses its metadata session while
# loading the partitions on a loaded machine), it tries once more; each
# failure is noted.
restart_quire() {
	local topic=$1 out=$2 try other n
	shift 2
	for try in 1 2; do
		log "quire: restarting standalone (empty caches)"
		stop_quire
		if ! start_quire; then
			note "$qcfg" "restart $try: ${reason[$qcfg]}"
			continue
		fi
		if backlog "$quire_kafka" "$topic" "$out"; then
			n=$bl_n
			for other; do
				backlog "$quire_kafka" "$other" "$out.$other" || note "$qcfg" "restart $try: $other did not answer ListOffsets"
			done
			bl_n=$n
			log "quire: standalone VmHWM after restart and probe $(vmhwm) MiB"
			return 0
		fi
		if [[ -n $quire_pid ]] && kill -0 "$quire_pid" 2>/dev/null; then
			note "$qcfg" "restart $try: $topic did not answer ListOffsets: $(tail -1 "$out.err" | cut -c1-100)"
		else
			wait "$quire_pid" 2>/dev/null
			note "$qcfg" "restart $try: standalone exited (status $?): $(tail -1 "$work/quire-standalone.log" | cut -c1-100)"
		fi
	done
	return 1
}

# tail_consumer_start NAME STEP BROKERS TOPIC: a consumer from latest that
# stops after TAIL_RATE x TAIL_DURATION records (output WORK/NAME-STEP-consume.*),
# started in the background (t_pid); returns once it has found the topic and
# listed its start offsets, plus a second.
tail_consumer_start() {
	local name=$1 step=$2 brokers=$3 topic=$4
	t_expected=$(awk -v r="$tail_rate" -v s="$tail_s" 'BEGIN { printf "%d", r * s }')
	bg_start $((tail_s + 150)) "$work/$name-$step-consume.out" "$work/$name-$step-consume.err" \
		"$quire" perf consume --brokers "$brokers" --topic "$topic" --from latest \
		--records "$t_expected" --duration "$((tail_s + 60))s" --connect-timeout 60s
	t_pid=$bg_pid
	# The consumer prints its first line once it found the topic; its start
	# offsets are listed right then.
	for _ in $(seq 700); do
		grep -q '^perf consume: topic' "$work/$name-$step-consume.out" 2>/dev/null && break
		kill -0 "$t_pid" 2>/dev/null || break
		sleep 0.1
	done
	sleep 1
}

# tail_consumer_result NAME STEP: once the producer is done (parse_produce
# read its output), up to 10 s more for tail_consumer_start's consumer to
# read the last records, then it is stopped (it prints its summary on
# SIGTERM); t_e2e is its end-to-end "p50/p99" in ms, or fail (1 returned).
tail_consumer_result() {
	local name=$1 step=$2
	for _ in $(seq 100); do kill -0 "$t_pid" 2>/dev/null || break; sleep 0.1; done
	stop_or_wait "$t_pid"
	t_e2e=fail
	if ! parse_consume "$work/$name-$step-consume.out" || [[ $c_e2e50 == - ]]; then
		note "$name" "$step consumer failed: $(tail -1 "$work/$name-$step-consume.err" | cut -c1-100)"
		return 1
	fi
	t_e2e="$c_e2e50/$c_e2e99"
	# It stops at TAIL_RATE x TAIL_DURATION records; the producer may send a
	# few more (or, falling behind, fewer).
	if [[ -n $p_records ]] && ((c_records < (p_records < t_expected ? p_records : t_expected))); then
		note "$name" "$step consumer read $c_records of $p_records records"
	fi
}

# read_phase NAME BROKERS [topic creation flags of the produce phase]: steps
# 1-5 on peer-NAME and, with SINGLE=1, the single-partition catch-up; fills
# the rd_* entries of NAME.
read_phase() {
	local name=$1 brokers=$2 topic=peer-$1 n r cpid rc
	shift 2
	local ok=1
	# 1. Cold catch-up.
	if is_quire "$name"; then
		restart_quire "$topic" "$work/$name-backlog.out" || return 1
	elif ! backlog "$brokers" "$topic" "$work/$name-backlog.out"; then
		note "$name" "$topic did not answer ListOffsets: $(tail -1 "$work/$name-backlog.out.err" | cut -c1-100)"
		return 1
	fi
	n=$bl_n
	rd_backlog[$name]=$n
	drop_caches
	catchup "$name" catchup-cold "$brokers" "$topic" "$n" || ok=0
	rd_cold[$name]=$cu
	# 2. Warm catch-up, at once.
	catchup "$name" catchup-warm "$brokers" "$topic" "$n" || ok=0
	rd_warm[$name]=$cu

	# 3. Tailing: a consumer from latest, then the producer at TAIL_RATE.
	# First TAIL_WARMUP of the same producer, unmeasured: the first writes
	# after Quire's restart open new ledgers, which is not what a tailing
	# producer sees in steady state (and is not repeated in step 4).
	if [[ $tail_warmup_s -gt 0 ]]; then
		rate_produce "$name" tail-warm-up "$brokers" "$topic" "${tail_warmup_s}s"
		bg_wait "$bg_pid" || note "$name" "tail warm-up producer failed: $(tail -1 "$work/$name-tail-warm-up-produce.err" | cut -c1-100)"
	fi
	log "$name: tail: consumer from latest, producing $tail_rate records/s for $tail_duration"
	tail_consumer_start "$name" tail "$brokers" "$topic"
	rate_produce "$name" tail "$brokers" "$topic"
	bg_wait "$bg_pid"
	rc=$?
	local tail_p99=fail tail_e2e="fail"
	if produce_outcome "$name" tail "tail producer" "$rc"; then
		tail_p99=$p_p99
	else
		ok=0
	fi
	tail_consumer_result "$name" tail || ok=0
	tail_e2e=$t_e2e
	log "$name: tail: e2e p50/p99 $tail_e2e ms, producer p99 $tail_p99 ms"
	is_quire "$name" && log "quire: standalone VmHWM so far $(vmhwm) MiB"
	rd_tail[$name]="$tail_e2e $tail_p99"

	# 4. The same producer with a catch-up reader from earliest (page cache
	# dropped again), both started together; the reader is stopped when the
	# producer is done.
	local with_rs=fail with_p99=fail reader=fail with_e2e=fail
	if backlog "$brokers" "$topic" "$work/$name-backlog2.out"; then
		n=$bl_n
		drop_caches
		r=$(catchup_bound "$n")
		log "$name: produce with catch-up: reading $n records from earliest, producing $tail_rate records/s for $tail_duration, a tailing consumer beside"
		tail_consumer_start "$name" with-tail "$brokers" "$topic"
		bg_start $((r + 90)) "$work/$name-with-consume.out" "$work/$name-with-consume.err" \
			"$quire" perf consume --brokers "$brokers" --topic "$topic" --from earliest \
			--records "$n" --duration "${r}s" --connect-timeout 60s
		cpid=$bg_pid
		rate_produce "$name" with "$brokers" "$topic"
		bg_wait "$bg_pid"
		rc=$?
		stop_or_wait "$cpid"
		if produce_outcome "$name" with "producer with catch-up" "$rc"; then
			with_rs=$p_rs with_p99=$p_p99
		else
			ok=0
		fi
		if parse_consume "$work/$name-with-consume.out"; then
			# The reader's MB/s and how long it read (all of the backlog: "done").
			reader="$c_mbs/$(awk -v s="$c_secs" 'BEGIN { printf "%.1f", s }')s"
			((c_records >= n)) && reader+=",done"
		else
			note "$name" "catch-up reader failed: $(tail -1 "$work/$name-with-consume.err" | cut -c1-100)"
			ok=0
		fi
		tail_consumer_result "$name" with-tail || ok=0
		with_e2e=$t_e2e
		log "$name: produce with catch-up: records/s $with_rs, p99 $with_p99 ms; tail e2e p50/p99 $with_e2e ms; reader $reader"
	else
		note "$name" "$topic did not answer ListOffsets before step 4"
		ok=0
	fi
	rd_with[$name]="$with_rs $with_p99 $reader $with_e2e"

	# 5. What step 4's ratio is to be read against: the same producer and
	# tailing consumer beside one busy loop per core at idle priority
	# (idle_prio), no reader. A reader cannot do its work without keeping the
	# cores busy, nor yield them sooner than an idle-priority task does, so
	# what this does to the p99 on this machine, any reader does at least.
	local idle_p99=fail idle_e2e=fail loops=() l
	log "$name: produce beside $(nproc) idle-priority busy loops (${idle_prio[*]}): producing $tail_rate records/s for $tail_duration, a tailing consumer beside"
	tail_consumer_start "$name" idle-tail "$brokers" "$topic"
	for _ in $(seq "$(nproc)"); do
		bg_start $((tail_s + 150)) /dev/null /dev/null "${idle_prio[@]}" sh -c 'while :; do :; done'
		loops+=("$bg_pid")
	done
	rate_produce "$name" idle "$brokers" "$topic"
	bg_wait "$bg_pid"
	rc=$?
	for l in "${loops[@]}"; do bg_stop "$l" 1; done
	if produce_outcome "$name" idle "producer beside idle-priority load" "$rc"; then
		idle_p99=$p_p99
	else
		ok=0
	fi
	tail_consumer_result "$name" idle-tail || ok=0
	idle_e2e=$t_e2e
	log "$name: beside idle-priority load: producer p99 $idle_p99 ms; tail e2e p50/p99 $idle_e2e ms"
	rd_idle[$name]="$idle_p99 $idle_e2e"
	is_quire "$name" && rd_rss[$name]=$(vmhwm)

	# Single partition: RECORDS_SINGLE records at max rate, then a cold catch-up.
	if ((single)); then
		local t1=$topic-1p
		log "$name: producing $records_single records to $t1 (1 partition)"
		# shellcheck disable=SC2086 # PRODUCE_ARGS is a list of flags
		bounded $((records_single * record_size / 1000000 + 300)) "$work/$name-1p-produce.out" "$work/$name-1p-produce.err" \
			"$quire" perf produce --brokers "$brokers" --topic "$t1" --partitions 1 "$@" \
			--record-size "$record_size" --in-flight "$in_flight" --acks all --connect-timeout 60s ${PRODUCE_ARGS:-} \
			--rate 0 --records "$records_single" --warm-up 0s
		rc=$?
		parse_produce "$work/$name-1p-produce.out"
		((rc == 0)) || note "$name" "single-partition produce: exit $rc, ${p_records:-no} records acknowledged"
		rd_single[$name]=fail
		if is_quire "$name" && ! restart_quire "$t1" "$work/$name-1p-backlog.out" "$topic"; then
			ok=0
		elif ! is_quire "$name" && ! backlog "$brokers" "$t1" "$work/$name-1p-backlog.out"; then
			note "$name" "$t1 did not answer ListOffsets: $(tail -1 "$work/$name-1p-backlog.out.err" | cut -c1-100)"
			ok=0
		else
			n=$bl_n
			drop_caches
			catchup "$name" catchup-1p "$brokers" "$t1" "$n" || ok=0
			rd_single[$name]="$n $cu"
			is_quire "$name" && rd_rss1[$name]=$(vmhwm)
		fi
	fi
	((ok))
}

# measure NAME BROKERS [topic creation flags]: the produce phase and, unless
# READ=0, the read phase.
measure() {
	produce "$@" || return 1
	if ((read_phase_on)); then
		read_phase "$@" || read_failed=1
	fi
	return 0
}

for c in $configs; do
	case $c in
	kafka1)
		if kafka_cluster 1; then
			measure kafka1 "$bootstrap" --replication-factor 1
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
		measure "$c" "$bootstrap" --replication-factor 3 "${extra[@]}"
		;;
	quire)
		# Replication is the bookies' (E3 Qw3 Qa2), so the topic asks for the
		# server's default replication factor.
		if run_quire quire "" --replication-factor -1 && ((read_phase_on)); then
			read_phase quire "$quire_kafka" --replication-factor -1 || read_failed=1
		fi
		;;
	quire-secure)
		run_quire quire-secure secure --replication-factor -1 --tls-ca "$work/certs/ca.pem" --sasl-mechanism SCRAM-SHA-512 --sasl-user admin
		;;
	quire-isr | quire-isr-flush)
		extra=(--replication-factor 3 --topic-config min.insync.replicas=2)
		[[ $c == quire-isr-flush ]] && extra+=(--topic-config flush.messages=1)
		if run_quire "$c" isr "${extra[@]}" && ((read_phase_on)); then
			read_phase "$c" "$quire_kafka" "${extra[@]}" || read_failed=1
		fi
		;;
	*) log "unknown configuration $c"; exit 2 ;;
	esac
done
stop_kafka
stop_quire

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
# produce_ratios Q HEADER: Q's throughput and p99 against each Kafka row it is
# compared with (every one for quire, the peer of the same flush policy for
# the ISR rows).
produce_ratios() {
	local q=$1 c qrs qp99 rs p99 peer printed=0
	[[ -n ${result[$q]:-} ]] || return 0
	peer=$(peer_of "$q")
	read -r qrs _ _ qp99 _ <<<"${result[$q]}"
	for c in $configs; do
		is_quire "$c" && continue
		[[ -z ${result[$c]:-} || (-n $peer && $c != "$peer") ]] && continue
		if ((!printed)); then
			echo
			echo "$2"
			printed=1
		fi
		read -r rs _ _ p99 _ <<<"${result[$c]}"
		awk -v l="${label[$c]}" -v q="$qrs" -v k="$rs" -v qp="$qp99" -v kp="$p99" \
			'BEGIN { printf "  vs %-56s records/s %.2fx  p99 %.2fx\n", l, (k > 0 ? q / k : 0), (kp > 0 ? qp / kp : 0) }'
	done
}
produce_ratios quire "Quire / Kafka (throughput ratio: higher is better for Quire; p99 ratio: lower is better):"
if [[ -n ${result[quire-secure]:-} && -n ${result[quire]:-} ]]; then
	echo
	echo "The cost of security: Quire with TLS + SASL/SCRAM-SHA-512 + ACLs / Quire plaintext, same run (throughput: higher is better; p99: lower):"
	read -r srs _ _ sp99 _ <<<"${result[quire-secure]}"
	read -r prs _ _ pp99 _ <<<"${result[quire]}"
	awk -v s="$srs" -v p="$prs" -v sp="$sp99" -v pp="$pp99" \
		'BEGIN { printf "  records/s %.2fx  p99 %.2fx\n", (p > 0 ? s / p : 0), (pp > 0 ? sp / pp : 0) }'
fi
produce_ratios quire-isr "Quire ISR mode / Kafka, default flush (throughput ratio: higher is better for Quire; p99 ratio: lower is better):"
produce_ratios quire-isr-flush "Quire ISR mode / Kafka, flush.messages=1 (throughput ratio: higher is better for Quire; p99 ratio: lower is better):"

# ratio Q K: Q / K to 2 decimals, or - if either is not a positive number
# (a * mark of an incomplete read is kept).
ratio() {
	awk -v q="$1" -v k="$2" 'BEGIN {
		m = (q ~ /\*$/ || k ~ /\*$/) ? "*" : ""; sub(/\*$/, "", q); sub(/\*$/, "", k)
		if (q ~ /^[0-9.]+$/ && k ~ /^[0-9.]+$/ && k > 0) printf "%.2fx%s", q / k, m; else printf "-" }'
}

if ((read_phase_on)); then
	echo
	echo "Read phase: each configuration's topic after its produce phase (backlog: its records, warm-up included) of $record_size B in $partitions partitions, read from earliest by a fresh consumer without group; page cache dropped: $caches_dropped"
	echo "  tail: consumer from latest while producing $tail_rate records/s for $tail_duration; with catch-up: the same producer and tailing consumer while a reader reads the backlog from earliest (page cache dropped first; reader MB/s over the seconds it read, done = whole backlog); idle-priority busy loops: the same beside $(nproc) busy loops (${idle_prio[*]}), no reader"
	printf '%-38s %9s %10s %10s %19s %19s %25s %15s %16s\n' "system / config" "backlog" "cold MB/s" "warm MB/s" \
		"tail e2e p50/p99 ms" "same, with catch-up" "produce p99 ms alone/with" "rec/s with" "reader MB/s"
	for c in $configs; do
		if [[ -z ${rd_backlog[$c]:-} ]]; then
			if [[ $c == quire-secure ]]; then
				printf '%-38s not run (produce phase only)\n' "${rlabel[$c]:-$c}"
			elif [[ -n ${result[$c]:-} ]]; then
				printf '%-38s FAILED: %s\n' "${rlabel[$c]}" "${rd_notes[$c]:-unknown}"
				status=1
			else
				printf '%-38s not run (no produce result)\n' "${rlabel[$c]}"
			fi
			continue
		fi
		read -r cold _ <<<"${rd_cold[$c]:-fail}"
		read -r warm _ <<<"${rd_warm[$c]:-fail}"
		read -r e2e tp99 <<<"${rd_tail[$c]:-fail fail}"
		read -r wrs wp99 reader we2e <<<"${rd_with[$c]:-fail fail fail fail}"
		printf '%-38s %9s %10s %10s %19s %19s %25s %15s %16s\n' "${rlabel[$c]}" "${rd_backlog[$c]}" "$cold" "$warm" \
			"$e2e" "$we2e" "$tp99/$wp99" "$wrs" "$reader"
	done
	for c in $configs; do
		[[ -n ${rd_backlog[$c]:-} ]] || continue
		read -r e2e tp99 <<<"${rd_tail[$c]:-fail fail}"
		read -r _ wp99 _ we2e <<<"${rd_with[$c]:-fail fail fail fail}"
		read -r ip99 ie2e <<<"${rd_idle[$c]:-fail fail}"
		echo "${rlabel[$c]}: with a catch-up reader / without (lower is better): produce p99 $(ratio "$wp99" "$tp99"), tailing e2e p99 $(ratio "${we2e#*/}" "${e2e#*/}"); beside idle-priority busy loops / without (any reader's floor here): produce p99 $(ratio "$ip99" "$tp99"), tailing e2e p99 $(ratio "${ie2e#*/}" "${e2e#*/}")"
	done
	for c in $configs; do
		[[ -n ${rd_rss[$c]:-} ]] && echo "Quire standalone peak RSS (VmHWM) over the read phase of $c, steps 1-5 after its restart: ${rd_rss[$c]} MiB"
	done
	if ((single)); then
		echo
		echo "Single partition: $records_single records of $record_size B produced at max rate to a 1-partition topic, then read cold (page cache dropped: $caches_dropped)"
		printf '%-38s %9s %10s %11s\n' "system / config" "records" "cold MB/s" "records/s"
		for c in $configs; do
			[[ -n ${rd_single[$c]:-} ]] || continue
			read -r n1 mbs1 rs1 _ <<<"${rd_single[$c]}"
			printf '%-38s %9s %10s %11s\n' "${rlabel[$c]}" "$n1" "${mbs1:-fail}" "${rs1:--}"
		done
		for c in $configs; do
			[[ -n ${rd_rss1[$c]:-} ]] && echo "Quire standalone peak RSS (VmHWM) over the single-partition catch-up after its restart: ${rd_rss1[$c]} MiB"
		done
	fi
	for q in $configs; do
		is_quire "$q" && [[ -n ${rd_backlog[$q]:-} ]] || continue
		peer=$(peer_of "$q")
		header="Quire / Kafka"
		[[ $q != quire ]] && header="${rlabel[$q]} / Kafka"
		printed=0
		read -r qcold _ <<<"${rd_cold[$q]:-fail}"
		read -r qwarm _ <<<"${rd_warm[$q]:-fail}"
		read -r _ q1 _ <<<"${rd_single[$q]:-- fail}"
		for c in $configs; do
			is_quire "$c" && continue
			[[ -z ${rd_backlog[$c]:-} || (-n $peer && $c != "$peer") ]] && continue
			if ((!printed)); then
				echo
				echo "$header (catch-up MB/s ratio: higher is better for Quire; * = a read that did not finish within its bound):"
				printed=1
			fi
			read -r kcold _ <<<"${rd_cold[$c]:-fail}"
			read -r kwarm _ <<<"${rd_warm[$c]:-fail}"
			line=$(printf '  vs %-38s catch-up cold %s, warm %s' "${rlabel[$c]}" "$(ratio "$qcold" "$kcold")" "$(ratio "$qwarm" "$kwarm")")
			if ((single)); then
				read -r _ k1 _ <<<"${rd_single[$c]:-- fail}"
				line+=", single partition cold $(ratio "$q1" "$k1")"
			fi
			echo "$line"
		done
	done
	for c in $configs; do
		[[ -n ${rd_notes[$c]:-} ]] && echo "note: ${rlabel[$c]}: ${rd_notes[$c]}"
	done
	((read_failed)) && status=1
fi
exit $status
