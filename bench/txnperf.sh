#!/usr/bin/env bash
# txnperf.sh — transactional produce throughput against non-transactional, on
# each server given, measured in the same run with Kafka's own
# ProducerPerformance (the Kafka 4.1.1 tools bench/kafka/install.sh puts in
# ~/.cache/quire-bench). Transactions of 100 ms (--transaction-duration-ms)
# against plain idempotent acks=all produce, 1 KiB records.
#
# Usage: bench/txnperf.sh NAME=BOOTSTRAP...   e.g. quire=127.0.0.1:9092 kafka=127.0.0.1:19092
#   TXNPERF_RECORDS  records per run (default 300000)
# Prints each run's ProducerPerformance summary and, per server, a last line
#   txnperf NAME plain_rec_s=P txn_rec_s=T ratio=T/P
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
records=${TXNPERF_RECORDS:-300000}
libs=$HOME/.cache/quire-bench/kafka-4.1.1/libs
[[ -d $libs ]] || "$here/kafka/install.sh" >&2
for spec in "$@"; do
	name=${spec%%=*} bootstrap=${spec#*=}
	declare -A rate=()
	for mode in plain txn; do
		topic="txnperf-$mode-$(date +%s%N)"
		extra=()
		[[ $mode == txn ]] && extra=(--transactional-id "$topic" --transaction-duration-ms 100)
		line=$(java -Xmx1g -cp "$libs/*" org.apache.kafka.tools.ProducerPerformance --topic "$topic" --num-records "$records" \
			--record-size 1024 --throughput -1 --producer-props "bootstrap.servers=$bootstrap" acks=all linger.ms=5 batch.size=131072 \
			"${extra[@]}" 2>/dev/null | tail -1)
		echo "$name $mode: $line"
		rate[$mode]=$(sed -E 's/.*sent, ([0-9.]+) records\/sec.*/\1/' <<<"$line")
	done
	echo "txnperf $name plain_rec_s=${rate[plain]} txn_rec_s=${rate[txn]} ratio=$(awk -v t="${rate[txn]}" -v p="${rate[plain]}" 'BEGIN{printf "%.2f", t/p}')"
	unset rate
done
