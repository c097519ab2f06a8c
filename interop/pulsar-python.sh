#!/usr/bin/env bash
# pulsar-python.sh — does Pulsar's Python client (pulsar-client from PyPI)
# work against a Pulsar-protocol server?
#
# Usage: interop/pulsar-python.sh [service URL]   (default pulsar://127.0.0.1:6650)
#
# The checks (interop/pulsar-python/checks.py, one "ok"/"FAIL" line each):
# Exclusive in order and a second Exclusive consumer refused, Shared
# delivering each message once, Failover with one active consumer, Key_Shared
# keeping each key on one consumer in order, nack redelivery with its
# redelivery count, a dead-letter topic after max redeliveries, a reader from
# the earliest message, seek by message id and by publish time. The same
# checks run against Apache Pulsar (bench/pulsar/start.sh) to show they
# are right. Installs pulsar-client with pip if missing. Exits 0 only if
# every check passes.
set -uo pipefail

url=${1:-pulsar://127.0.0.1:6650}
here=$(cd "$(dirname "$0")" && pwd)
if ! python3 -c "import pulsar" 2>/dev/null; then
	echo "pulsar-python.sh: installing pulsar-client" >&2
	timeout 300 python3 -m pip install -q pulsar-client >&2 || { echo "pulsar-python.sh: could not install pulsar-client" >&2; exit 2; }
fi
timeout 300 python3 "$here/pulsar-python/checks.py" "$url"
