#!/usr/bin/env bash
# kgo-tests.sh — run franz-go's own kgo integration tests against a
# Kafka-protocol server.
#
# Usage: interop/kgo-tests.sh [bootstrap]     (default 127.0.0.1:9092)
#   KGO_RUN           go test -run regex (default: every test of pkg/kgo)
#   KGO_TIMEOUT       go test -timeout (default 20m)
#   KGO_TEST_RECORDS  records TestGroupETL/TestTxnEtl produce (franz-go's
#                     default, 500000, which we keep: TestGroupETL takes ~40 s)
#   KGO_TEST_RF       replication factor of the test topics (default 1)
#   KGO_SKIP_FILE     tests to skip, one "TestName reason" a line
#                     (default interop/kgo-skip.txt next to this script)
#   KGO_NO_SKIP=1     ignore the skip file (to validate against real Kafka)
#   KGO_LOG_LEVEL     the tests' client log level: info (default), debug, none
#   KGO_KEEP=1        keep the work directory (the full go test log)
#   KGO_STANDALONE    when set, the script builds quire, starts
#                     `quire standalone $KGO_STANDALONE` itself on spare ports
#                     (Kafka from 127.0.0.1:29392, no Pulsar listener, its data in the work
#                     directory), runs the tests against it and stops it; e.g.
#                     KGO_STANDALONE="--mode isr --brokers 3" KGO_TEST_RF=3
#                     for ISR mode (the bootstrap argument is then ignored)
#
# The franz-go version is the one this repository's go.mod requires. Its source comes
# from the Go module cache (go mod download) and is copied to
# ~/.cache/quire-interop/franz-go@VERSION (KGO_COPY_DIR), since the module
# cache is read-only and the tests run inside the module; nothing of it is
# written into this repository.
#
# Besides the tests that talk to a broker (they find it through KGO_SEEDS), the
# package has unit tests that need no broker; they run too and should always
# pass. The tests skip themselves when the broker does not advertise a feature:
# KIP-848 groups (ConsumerGroupHeartbeat v1), share groups (ShareFetch v2) and
# static membership (JoinGroup v5). Transactions are not detected: TestTxnEtl
# is in the skip file.
#
# Prints one PASS/FAIL/SKIP line per test (subtests indented) and exits non-zero
# if any test that was not skipped failed, or go test itself failed (a build
# error or the timeout).
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
bootstrap=${1:-127.0.0.1:9092}
run_regex=${KGO_RUN:-}
timeout=${KGO_TIMEOUT:-20m}
skip_file=${KGO_SKIP_FILE:-$here/kgo-skip.txt}

version=$(awk '$1 == "github.com/twmb/franz-go" { print $2 }' "$repo/go.mod")
[[ -n $version ]] || { echo "kgo-tests.sh: no github.com/twmb/franz-go in $repo/go.mod" >&2; exit 2; }

work=$(mktemp -d)
if [[ ${KGO_KEEP:-} == 1 ]]; then
	echo "kgo-tests.sh: keeping $work"
else
	trap 'rm -rf "$work"' EXIT
fi

if [[ -n ${KGO_STANDALONE:-} ]]; then
	go build -o "$work/quire" "$repo/cmd/quire" || { echo "kgo-tests.sh: could not build quire" >&2; exit 2; }
	# shellcheck disable=SC2086 # the options are words
	"$work/quire" standalone --data-dir "$work/data" --kafka-addr 127.0.0.1:29392 --http-addr 127.0.0.1:29380 \
		--bookie-addrs 127.0.0.1:29381,127.0.0.1:29382,127.0.0.1:29383 --meta-client-addr 127.0.0.1:29379 \
		--meta-peer-addr 127.0.0.1:29378 --pulsar-addr "" $KGO_STANDALONE >"$work/standalone.log" 2>&1 &
	standalone_pid=$!
	trap 'kill $standalone_pid 2>/dev/null; wait $standalone_pid 2>/dev/null; [[ ${KGO_KEEP:-} == 1 ]] || rm -rf "$work"' EXIT
	for _ in $(seq 1 120); do
		curl -sf 127.0.0.1:29380/readyz >/dev/null && break
		kill -0 $standalone_pid 2>/dev/null || { echo "kgo-tests.sh: quire standalone exited" >&2; tail -20 "$work/standalone.log" >&2; exit 2; }
		sleep 0.5
	done
	bootstrap=127.0.0.1:29392
	echo "kgo-tests.sh: quire standalone $KGO_STANDALONE (log: $work/standalone.log)"
fi

# Outside any module and workspace, so that neither our go.mod nor a go.work
# is consulted or changed.
export GOWORK=off GOFLAGS=-mod=readonly
src=$(cd "$work" && go mod download -json "github.com/twmb/franz-go@$version" |
	awk -F'"' '$2 == "Dir" { print $4 }')
[[ -d $src/pkg/kgo ]] || { echo "kgo-tests.sh: could not download franz-go $version" >&2; exit 2; }
# A fixed location, reused across runs: go test's build cache is keyed on the
# package directory, so a fresh copy each run would recompile kgo (a minute
# on two cores).
copy=${KGO_COPY_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/quire-interop/franz-go@$version}
if [[ ! -f $copy/.complete ]]; then
	rm -rf "$copy"
	mkdir -p "$(dirname "$copy")"
	cp -r "$src" "$copy"
	chmod -R u+w "$copy"
	touch "$copy/.complete"
fi

# Top-level test names only: go test's -skip matches subtests level by level,
# so one pattern cannot mix a whole test with another test's subtest.
skip_regex=""
declare -A skip_reason=()
if [[ ${KGO_NO_SKIP:-} != 1 && -f $skip_file ]]; then
	while read -r name reason; do
		[[ -z $name || $name == \#* ]] && continue
		skip_reason[$name]=$reason
		skip_regex+="${skip_regex:+|}$name"
	done <"$skip_file"
fi

args=(-count=1 -v -timeout "$timeout")
[[ -n $run_regex ]] && args+=(-run "$run_regex")
[[ -n $skip_regex ]] && args+=(-skip "^($skip_regex)\$")

echo "kgo-tests.sh: franz-go $version, KGO_SEEDS=$bootstrap, go test ${args[*]}"
for name in "${!skip_reason[@]}"; do
	printf 'SKIP %s (skip file: %s)\n' "$name" "${skip_reason[$name]}"
done
log=$work/go-test.log
start=$SECONDS
(
	cd "$copy/pkg/kgo" &&
		KGO_SEEDS=$bootstrap KGO_TEST_RF=${KGO_TEST_RF:-1} \
			KGO_TEST_RECORDS=${KGO_TEST_RECORDS:-500000} KGO_LOG_LEVEL=${KGO_LOG_LEVEL:-info} \
			go test "${args[@]}" . >"$log" 2>&1
)
rc=$?
elapsed=$((SECONDS - start))

# "--- PASS: TestX/sub (1.23s)", indented four spaces per subtest level. go test
# -v names the test that logs ("=== RUN|CONT|NAME  TestX"), so each test's
# t.Log/t.Skip/t.Error lines ("    file_test.go:12: text") are kept to show
# why it skipped (the last line) or failed (the last five).
awk '
	/^=== (RUN|CONT|NAME) / { current = $3; next }
	/^ +[A-Za-z0-9_]+_test\.go:[0-9]+: / {
		msg = $0; sub(/^ +/, "", msg)
		n = ++count[current]; said[current, n] = msg
		# A skip reason is the last line that is not test bookkeeping
		# (TestGroupETL logs its duration after t.Skip).
		if (msg !~ /completed in|deleting (topic|group)|NOT DELETING/) why[current] = msg
		next
	}
	match($0, /^ *--- (PASS|FAIL|SKIP): [^ ]+ \([0-9.]+s\)/) {
		line = substr($0, RSTART, RLENGTH)
		indent = line; sub(/---.*/, "", indent)
		split(substr(line, length(indent) + 5), f, " ")
		result = f[1]; sub(/:$/, "", result); name = f[2]
		printf "%s%s %s %s\n", indent, result, name, f[3]
		n = count[name]
		if (result == "SKIP" && why[name] != "")
			printf "%s    reason: %s\n", indent, why[name]
		if (result == "FAIL")
			for (i = (n > 5 ? n - 4 : 1); i <= n; i++)
				printf "%s    | %s\n", indent, said[name, i]
	}
' "$log"

npass=$(grep -cE '^--- PASS' "$log")
nfail=$(grep -cE '^--- FAIL' "$log")
nskip=$(grep -cE '^--- SKIP' "$log")
if grep -q '^panic: test timed out' "$log"; then
	echo "TIMEOUT after $timeout; still running:"
	sed -n '/^panic: test timed out/,/^goroutine/p' "$log" | grep -E '^\s+Test' | sed 's/^/    /'
fi
if ((rc != 0)); then
	echo "---- last 60 lines of the go test log ----"
	tail -n 60 "$log"
	if [[ ${KGO_KEEP:-} != 1 ]]; then
		cp "$log" "${TMPDIR:-/tmp}/kgo-tests-$(date +%s).log" &&
			echo "kgo-tests.sh: full log kept in ${TMPDIR:-/tmp}/kgo-tests-*.log"
	fi
fi
echo "kgo-tests.sh: top-level tests: $npass passed, $nfail failed, $nskip skipped by the tests, ${#skip_reason[@]} skipped by the skip file; ${elapsed}s"
if ((rc != 0)); then
	echo "kgo-tests.sh: FAIL (go test exited $rc)"
	exit 1
fi
echo "kgo-tests.sh: PASS"
