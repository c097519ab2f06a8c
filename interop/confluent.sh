#!/usr/bin/env bash
# confluent.sh — the Python client confluent-kafka (librdkafka) against a
# Kafka-protocol server. Checks (confluent/*.py): a compacted topic ends
# with only the latest value per key, at unchanged offsets; a transactional
# producer's aborted records are invisible to read_committed and visible to
# read_uncommitted, and a second producer with its transactional.id fences it.
#
# Usage: interop/confluent.sh [bootstrap]      (default 127.0.0.1:9092)
#   CONFLUENT_COMPACT_TIMEOUT  seconds compaction may take (default 120)
#
# Installs confluent-kafka with pip if missing. Exits 0 only if every check
# passed.
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
bootstrap=${1:-127.0.0.1:9092}
if ! python3 -c 'import confluent_kafka' 2>/dev/null; then
	timeout 300 python3 -m pip install -q confluent-kafka >&2 || { echo "confluent.sh: could not install confluent-kafka" >&2; exit 2; }
fi
status=0
timeout 600 python3 "$here/confluent/compact_check.py" "$bootstrap" "${CONFLUENT_COMPACT_TIMEOUT:-120}" || status=1
timeout 300 python3 "$here/confluent/txn_check.py" "$bootstrap" || status=1
exit $status
