#!/usr/bin/env bash
# run.sh — run a local Apache Kafka cluster (KRaft, combined broker+controller
# nodes) on loopback, for the peer benchmark and for interop tests of clients.
#
# Interface:
#   bench/kafka/run.sh start N DIR   # N = 1 or 3 nodes; state, logs and pids under DIR
#   bench/kafka/run.sh stop [N] DIR  # stops every node started under DIR (N is ignored)
#   bench/kafka/run.sh bootstrap N   # prints the bootstrap list without starting anything
#
# `start` installs Kafka if needed (bench/kafka/install.sh), formats each node's
# storage on first use (a later start on the same DIR keeps the data), starts
# the nodes, waits until every node has logged that it started and accepts
# connections (bounded by KAFKA_START_TIMEOUT, default 90 s), and prints the
# bootstrap list on stdout, e.g. 127.0.0.1:19092,127.0.0.1:19094,127.0.0.1:19096.
# On failure it stops what it started, prints the tail of the logs on stderr
# and exits non-zero. `stop` sends SIGTERM, waits up to 30 s, then SIGKILLs.
#
# Node i (1-based) listens for clients on 127.0.0.1:(PORT_BASE + 2(i-1)) and for
# the controller quorum on the port after it: 19092/19093, 19094/19095,
# 19096/19097 by default. Files: DIR/node-i/{server.properties,data/,server.log,
# stdout.log,pid}.
#
# Environment:
#   KAFKA_HOME            an install (dir with libs/); default: install.sh's output
#   KAFKA_PORT_BASE       client port of node 1 (default 19092)
#   KAFKA_HEAP_OPTS       JVM heap (default -Xms1g -Xmx1g)
#   KAFKA_EXTRA_PROPS     extra server.properties lines, newline-separated
#   KAFKA_START_TIMEOUT   seconds to wait for readiness (default 90)
#
# Defaults are the broker's own, except what a small local cluster needs:
# internal topics replicated min(N,3) times with min ISR min(N,2),
# default.replication.factor=N, no initial rebalance delay for groups.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
port_base=${KAFKA_PORT_BASE:-19092}

usage() { echo "usage: $0 start 1|3 DIR | stop [N] DIR | bootstrap N" >&2; exit 2; }

bootstrap() {
	local n=$1 i list=""
	for ((i = 1; i <= n; i++)); do
		list+="${list:+,}127.0.0.1:$((port_base + 2 * (i - 1)))"
	done
	echo "$list"
}

voters() {
	local n=$1 i list=""
	for ((i = 1; i <= n; i++)); do
		list+="${list:+,}$i@127.0.0.1:$((port_base + 2 * (i - 1) + 1))"
	done
	echo "$list"
}

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

stop_all() {
	local dir=$1 pidfile pid deadline
	for pidfile in "$dir"/node-*/pid; do
		[[ -f $pidfile ]] || continue
		pid=$(cat "$pidfile")
		kill -TERM "$pid" 2>/dev/null || true
	done
	for pidfile in "$dir"/node-*/pid; do
		[[ -f $pidfile ]] || continue
		pid=$(cat "$pidfile")
		deadline=$((SECONDS + 30))
		while kill -0 "$pid" 2>/dev/null && ((SECONDS < deadline)); do sleep 0.2; done
		if kill -0 "$pid" 2>/dev/null; then
			echo "run.sh: node pid $pid did not stop in 30 s; SIGKILL" >&2
			kill -KILL "$pid" 2>/dev/null || true
		fi
		rm -f "$pidfile"
	done
}

start() {
	local n=$1 dir=$2 home java_opts cluster_id i node port cport pid deadline ok
	[[ $n == 1 || $n == 3 ]] || usage
	home=${KAFKA_HOME:-$("$here/install.sh")}
	[[ -d $home/libs ]] || { echo "run.sh: no libs/ under $home" >&2; exit 1; }
	mkdir -p "$dir"
	dir=$(cd "$dir" && pwd)
	for pidfile in "$dir"/node-*/pid; do
		if [[ -f $pidfile ]] && kill -0 "$(cat "$pidfile")" 2>/dev/null; then
			echo "run.sh: a node is already running under $dir (pid $(cat "$pidfile")); stop it first" >&2
			exit 1
		fi
	done
	for ((i = 1; i <= n; i++)); do
		port=$((port_base + 2 * (i - 1)))
		for p in $port $((port + 1)); do
			if port_open "$p"; then
				echo "run.sh: port $p is already in use" >&2
				exit 1
			fi
		done
	done

	local cp="$home/libs/*"
	local -a jvm=(java ${KAFKA_HEAP_OPTS:--Xms1g -Xmx1g} -server -XX:+UseG1GC -XX:MaxGCPauseMillis=20
		-XX:InitiatingHeapOccupancyPercent=35 -XX:+ExplicitGCInvokesConcurrent -Djava.awt.headless=true)

	# One cluster id for every node of DIR, kept so that restarts reuse it.
	if [[ ! -f $dir/cluster-id ]]; then
		java -cp "$cp" -Dlog4j2.configurationFile=/dev/null kafka.tools.StorageTool random-uuid 2>/dev/null |
			tail -1 >"$dir/cluster-id.tmp"
		mv "$dir/cluster-id.tmp" "$dir/cluster-id"
	fi
	cluster_id=$(cat "$dir/cluster-id")
	[[ -n $cluster_id ]] || { echo "run.sh: could not generate a cluster id" >&2; exit 1; }

	local rf=$n min_isr=$((n < 2 ? n : 2))
	for ((i = 1; i <= n; i++)); do
		node=$dir/node-$i
		port=$((port_base + 2 * (i - 1)))
		cport=$((port + 1))
		mkdir -p "$node/data"
		cat >"$node/server.properties" <<PROPS
process.roles=broker,controller
node.id=$i
controller.quorum.voters=$(voters "$n")
listeners=PLAINTEXT://127.0.0.1:$port,CONTROLLER://127.0.0.1:$cport
advertised.listeners=PLAINTEXT://127.0.0.1:$port
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
log.dirs=$node/data
offsets.topic.replication.factor=$rf
transaction.state.log.replication.factor=$rf
transaction.state.log.min.isr=$min_isr
default.replication.factor=$rf
group.initial.rebalance.delay.ms=0
${KAFKA_EXTRA_PROPS:-}
PROPS
		cat >"$node/log4j2.properties" <<LOG
status = warn
appender.file.type = File
appender.file.name = file
appender.file.fileName = $node/server.log
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = info
rootLogger.appenderRef.file.ref = file
logger.state.name = state.change.logger
logger.state.level = warn
logger.request.name = kafka.request.logger
logger.request.level = warn
LOG
		if [[ ! -f $node/data/meta.properties ]]; then
			if ! timeout 60 java -cp "$cp" -Dlog4j2.configurationFile="$node/log4j2.properties" \
				kafka.tools.StorageTool format -t "$cluster_id" -c "$node/server.properties" \
				>"$node/format.log" 2>&1; then
				echo "run.sh: formatting node $i failed:" >&2
				tail -20 "$node/format.log" >&2
				exit 1
			fi
		fi
		: >"$node/server.log"
		# setsid: the node outlives a terminal's Ctrl-C to the caller; callers
		# stop it with `run.sh stop`.
		setsid "${jvm[@]}" -cp "$cp" -Dlog4j2.configurationFile="$node/log4j2.properties" \
			-Dkafka.logs.dir="$node" kafka.Kafka "$node/server.properties" \
			>"$node/stdout.log" 2>&1 </dev/null &
		echo $! >"$node/pid"
	done

	deadline=$((SECONDS + ${KAFKA_START_TIMEOUT:-90}))
	while ((SECONDS < deadline)); do
		ok=1
		for ((i = 1; i <= n; i++)); do
			node=$dir/node-$i
			pid=$(cat "$node/pid")
			if ! kill -0 "$pid" 2>/dev/null; then
				echo "run.sh: node $i (pid $pid) exited during start:" >&2
				tail -30 "$node/stdout.log" "$node/server.log" >&2
				stop_all "$dir"
				exit 1
			fi
			if ! grep -q 'Kafka Server started' "$node/server.log" ||
				! port_open $((port_base + 2 * (i - 1))); then
				ok=0
			fi
		done
		if ((ok)); then
			bootstrap "$n"
			return 0
		fi
		sleep 0.5
	done
	echo "run.sh: the cluster under $dir was not ready in ${KAFKA_START_TIMEOUT:-90} s:" >&2
	for ((i = 1; i <= n; i++)); do tail -20 "$dir/node-$i/server.log" >&2; done
	stop_all "$dir"
	exit 1
}

case ${1:-} in
start) [[ $# == 3 ]] || usage; start "$2" "$3" ;;
stop)
	[[ $# == 2 || $# == 3 ]] || usage
	dir=${!#}
	[[ -d $dir ]] || exit 0
	stop_all "$dir"
	;;
bootstrap) [[ $# == 2 ]] || usage; bootstrap "$2" ;;
*) usage ;;
esac
