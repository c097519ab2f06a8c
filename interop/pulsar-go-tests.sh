#!/usr/bin/env bash
# pulsar-go-tests.sh — run pulsar-client-go's own integration tests (its
# `pulsar` package) against a `quire standalone` this script starts.
#
# Usage: interop/pulsar-go-tests.sh
#   PULSAR_GO_RUN        go test -run regex (default: every test of the package)
#   PULSAR_GO_TIMEOUT    go test -timeout (default 30m; the whole run is also
#                        bounded by `timeout` at that plus five minutes)
#   PULSAR_GO_SKIP_FILE  tests to skip, one "TestName reason" a line (default
#                        interop/pulsar-go-skip.txt next to this script)
#   PULSAR_GO_NO_SKIP=1  ignore the skip file's individual tests (its
#                        "pattern" lines, TLS/authentication/transactions,
#                        still apply)
#   PULSAR_GO_EXTERNAL=1 start nothing: run against whatever serves
#                        localhost:6650 and :8080 (Apache Pulsar, to check a
#                        test or the skip file), after the same setup
#   QUIRE_BIN            a quire binary (default: built from this repository)
#   PULSAR_GO_KEEP=1     keep the work directory (standalone data and log,
#                        the go test -json output)
#
# The suite hard-codes its broker: pulsar://localhost:6650,
# pulsar+ssl://localhost:6651 and http://localhost:8080, so those ports must
# be free (it names https://localhost:8443 too, which is not served); the
# standalone's
# other listeners (Kafka, etcd, bookies) go to free ports picked here.
#
# Security as the suite's CI broker has it (integration-tests/conf/
# standalone.conf and scripts/pulsar-test-service-start.sh in the module):
# pulsar+ssl://localhost:6651 with the module's broker certificate and CA
# (integration-tests/certs, valid for "localhost": the broker advertises
# localhost, as Pulsar's standalone does), authentication by token (HS256 with
# integration-tests/tokens/secret.key) and by TLS client certificate,
# authorization on, super users localhost, superUser and admin, anonymous
# clients the role "anonymous". Through Quire's admin REST API (as the admin
# token's role) the script makes "anonymous" an admin of the tenant "public"
# with produce and consume on public/default, creates the tenant "private" and
# the namespace "private/auth", and grants produce and consume there to
# "token-principal" (the role of integration-tests/tokens/token.txt): what
# that CI script does with pulsar-admin.
#
# The standalone gets the two settings the suite's CI broker changes from
# Pulsar's defaults (its standalone.conf): maxMessageSize=1048576
# (--pulsar-max-message-size) and subscriptionKeySharedUseConsistentHashing=
# false (--pulsar-key-shared-consistent-hashing=false); some tests expect
# exactly those.
#
# pulsar-client-go's version is the one this repository's go.mod requires;
# its source comes from the Go module cache (go mod download) and is copied to
# ~/.cache/quire-interop/pulsar-client-go@VERSION (PULSAR_GO_COPY_DIR), since
# the module cache is read-only; a fixed place so that go test's build cache
# is reused between runs. Nothing of it is written into this repository.
#
# Prints one PASS/FAIL/SKIP line per top-level test (the last lines of a
# failure's output below it), the counts, and a last line
#   pulsar-go-tests passed=P failed=F skipped=S
# where skipped counts the skip file's tests and those that skipped
# themselves, and failed counts the tests that never ran because the test
# binary died (a panic or the timeout). Exits 0 only when failed=0 and go test
# succeeded.
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
run_regex=${PULSAR_GO_RUN:-}
timeout=${PULSAR_GO_TIMEOUT:-30m}
skip_file=${PULSAR_GO_SKIP_FILE:-$here/pulsar-go-skip.txt}

version=$(awk '$1 == "github.com/apache/pulsar-client-go" { print $2 }' "$repo/go.mod")
[[ -n $version ]] || { echo "pulsar-go-tests.sh: no github.com/apache/pulsar-client-go in $repo/go.mod" >&2; exit 2; }

work=$(mktemp -d)
quire_pid=""
test_pid=""
cleanup() {
	if [[ -n $test_pid ]]; then
		kill -TERM "$test_pid" 2>/dev/null # timeout passes it on to go test
		wait "$test_pid" 2>/dev/null
	fi
	if [[ -n $quire_pid ]] && kill -0 "$quire_pid" 2>/dev/null; then
		kill -TERM "$quire_pid" 2>/dev/null
		for _ in $(seq 100); do kill -0 "$quire_pid" 2>/dev/null || break; sleep 0.1; done
		kill -KILL "$quire_pid" 2>/dev/null
		wait "$quire_pid" 2>/dev/null
	fi
	if [[ ${PULSAR_GO_KEEP:-} == 1 ]]; then
		echo "pulsar-go-tests.sh: kept $work"
	else
		rm -rf "$work"
	fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# Outside any module and workspace, so that neither our go.mod nor a go.work
# is consulted or changed.
export GOWORK=off GOFLAGS=-mod=readonly
src=$(cd "$work" && go mod download -json "github.com/apache/pulsar-client-go@$version" |
	awk -F'"' '$2 == "Dir" { print $4 }')
[[ -d $src/pulsar ]] || { echo "pulsar-go-tests.sh: could not download pulsar-client-go $version" >&2; exit 2; }
copy=${PULSAR_GO_COPY_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/quire-interop/pulsar-client-go@$version}
if [[ ! -f $copy/.complete ]]; then
	rm -rf "$copy"
	mkdir -p "$(dirname "$copy")"
	cp -r "$src" "$copy"
	chmod -R u+w "$copy"
	touch "$copy/.complete"
fi

# The skip file: "pattern REGEX reason" lines are whole feature areas
# (matched against top-level test names anywhere); "TestName reason" lines
# are single tests (matched exactly).
patterns=()
declare -A skip_reason=()
declare -A pattern_reason=()
if [[ -f $skip_file ]]; then
	while read -r name rest; do
		[[ -z $name || $name == \#* ]] && continue
		if [[ $name == pattern ]]; then
			read -r regex reason <<<"$rest"
			patterns+=("$regex")
			pattern_reason[$regex]=$reason
		elif [[ ${PULSAR_GO_NO_SKIP:-} != 1 ]]; then
			skip_reason[$name]=$rest
		fi
	done <"$skip_file"
fi

# Every top-level test of the package, to name the skipped ones and those a
# crash left unrun.
cd "$copy/pulsar" || exit 2
if ! go test -list '.*' . >"$work/list" 2>"$work/list.err"; then
	echo "pulsar-go-tests.sh: go test -list failed:" >&2
	cat "$work/list.err" >&2
	exit 2
fi
all_tests=$(grep -E '^(Test|Example|Fuzz)' "$work/list")

skip_regex=""
declare -A skipped=()
for name in $all_tests; do
	why=""
	for re in "${patterns[@]}"; do
		if [[ $name =~ $re ]]; then why=${pattern_reason[$re]}; break; fi
	done
	[[ -z $why && -n ${skip_reason[$name]:-} ]] && why=${skip_reason[$name]}
	[[ -z $why ]] && continue
	skipped[$name]=$why
	skip_regex+="${skip_regex:+|}$name"
done
for name in "${!skip_reason[@]}"; do
	grep -qx "$name" <<<"$all_tests" || echo "pulsar-go-tests.sh: warning: skip file names $name, which the package does not have" >&2
done

# The standalone, on a fresh data directory.
if [[ ${PULSAR_GO_EXTERNAL:-} != 1 ]]; then
	for port in 6650 6651 8080; do
		if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
			echo "pulsar-go-tests.sh: something already listens on 127.0.0.1:$port, which the suite needs" >&2
			exit 2
		fi
	done
	bin=${QUIRE_BIN:-}
	if [[ -z $bin ]]; then
		bin=$work/quire
		echo "pulsar-go-tests.sh: building quire"
		(cd "$repo" && GOFLAGS= CGO_ENABLED=0 go build -o "$bin" ./cmd/quire) || exit 2
	fi
	read -r p1 p2 p3 p4 p5 p6 < <(python3 -c '
import socket
socks = [socket.socket() for _ in range(6)]
for s in socks: s.bind(("127.0.0.1", 0))
print(" ".join(str(s.getsockname()[1]) for s in socks))')
	"$bin" standalone --data-dir "$work/data" \
		--pulsar-addr 127.0.0.1:6650 --http-addr 127.0.0.1:8080 \
		--pulsar-max-message-size 1048576 --pulsar-key-shared-consistent-hashing=false \
		--pulsar-advertised-addr localhost:6650 --pulsar-tls-advertised-addr localhost:6651 \
		--pulsar-tls-addr 127.0.0.1:6651 --pulsar-tls-cert "$copy/integration-tests/certs/broker-cert.pem" \
		--pulsar-tls-key "$copy/integration-tests/certs/broker-key.pem" \
		--pulsar-tls-client-ca "$copy/integration-tests/certs/cacert.pem" \
		--pulsar-auth token,tls --pulsar-token-secret-key "file://$copy/integration-tests/tokens/secret.key" \
		--pulsar-authorization --pulsar-super-user-roles localhost,superUser,admin --pulsar-anonymous-role anonymous \
		--kafka-addr "127.0.0.1:$p1" --meta-client-addr "127.0.0.1:$p2" --meta-peer-addr "127.0.0.1:$p3" \
		--bookie-addrs "127.0.0.1:$p4,127.0.0.1:$p5,127.0.0.1:$p6" >"$work/quire.log" 2>&1 &
	quire_pid=$!
	ready=""
	for _ in $(seq 300); do
		curl -sf http://127.0.0.1:8080/readyz >/dev/null 2>&1 && { ready=1; break; }
		kill -0 "$quire_pid" 2>/dev/null || break
		sleep 0.1
	done
	if [[ -z $ready ]]; then
		echo "pulsar-go-tests.sh: the standalone did not become ready; its log:" >&2
		tail -n 40 "$work/quire.log" >&2
		exit 2
	fi
fi
# admin METHOD PATH BODY: one admin REST call as the super user "admin".
admin_token=$(cat "$copy/integration-tests/tokens/admin-token")
admin() {
	local code
	code=$(curl -s -o "$work/admin.out" -w '%{http_code}' -X "$1" -H 'Content-Type: application/json' \
		-H "Authorization: Bearer $admin_token" -d "$3" "http://127.0.0.1:8080/admin/v2/$2")
	case $code in
	2*|409) ;;
	*) echo "pulsar-go-tests.sh: $1 /admin/v2/$2: HTTP $code $(cat "$work/admin.out")" >&2; exit 2 ;;
	esac
}
admin POST tenants/public '{"adminRoles":["anonymous"],"allowedClusters":["standalone"]}'
admin POST namespaces/public/default/permissions/anonymous '["produce","consume"]'
admin PUT tenants/private '{"adminRoles":[],"allowedClusters":["standalone"]}'
admin PUT namespaces/private/auth '{}'
admin POST namespaces/private/auth/permissions/token-principal '["produce","consume"]'

args=(-p 1 -json -count=1 -timeout "$timeout")
[[ -n $run_regex ]] && args+=(-run "$run_regex")
[[ -n $skip_regex ]] && args+=(-skip "^($skip_regex)\$")
echo "pulsar-go-tests.sh: pulsar-client-go $version ($copy/pulsar), ${#skipped[@]} tests skipped by the skip file, go test ${args[*]:0:5}"
start=$SECONDS
# -timeout makes the test binary panic with the running tests' names; the
# outer timeout is for a hang outside any test (the build, TestMain).
timeout_s=$(( $(sed -E 's/m$/*60/; s/s$//; s/h$/*3600/' <<<"$timeout") ))
# In the background, so that a signal to this script runs its trap at once
# (which stops go test too) instead of after go test ends.
timeout --kill-after=10 $((timeout_s + 300)) go test "${args[@]}" . >"$work/test.json" 2>"$work/test.err" &
test_pid=$!
wait "$test_pid"
rc=$?
test_pid=""
elapsed=$((SECONDS - start))

# The results: top-level tests from the JSON events; a test's output is kept
# to show why it skipped (its last line) or failed (its last lines).
printf '%s\n' $all_tests >"$work/all"
for name in "${!skipped[@]}"; do printf '%s\t%s\n' "$name" "${skipped[$name]}"; done >"$work/skipped"
python3 - "$work/test.json" "$work/all" "$work/skipped" "$work/counts" "$run_regex" <<'EOF'
import json, re, sys
events, all_path, skipped_path, counts_path, run_regex = sys.argv[1:]
result, output, order = {}, {}, []
for line in open(events, errors="replace"):
    try:
        e = json.loads(line)
    except ValueError:
        continue
    name = e.get("Test")
    if not name or "/" in name:
        continue
    if e["Action"] == "run":
        order.append(name)
    elif e["Action"] == "output":
        output.setdefault(name, []).append(e["Output"].rstrip("\n"))
    elif e["Action"] in ("pass", "fail", "skip"):
        result[name] = e["Action"]
all_tests = [l.strip() for l in open(all_path) if l.strip()]
skipped = dict(l.rstrip("\n").split("\t", 1) for l in open(skipped_path) if "\t" in l)
noise = re.compile(r'^(=== |--- |\s*$)|level=(info|debug|warn)|^time="')
n = {"pass": 0, "fail": 0, "skip": 0, "notrun": 0}
for name in order:
    r = result.get(name)
    if r is None:
        # Running when the binary died: a panic or the timeout.
        print(f"FAIL {name} (the test binary died in it)")
        for l in (output.get(name) or [])[-15:]:
            print(f"    | {l}")
        n["fail"] += 1
        continue
    n[r] += 1
    if r == "pass":
        print(f"PASS {name}")
    elif r == "skip":
        why = [l.strip() for l in output.get(name, []) if not noise.search(l)]
        print(f"SKIP {name} (itself: {why[-1] if why else '?'})")
    else:
        lines = [l for l in output.get(name, []) if not noise.search(l)]
        print(f"FAIL {name}")
        for l in lines[-8:]:
            print(f"    | {l}")
# The skip file's tests: one line per reason (with PULSAR_GO_RUN, only
# those it selects).
if run_regex:
    skipped = {n: w for n, w in skipped.items() if re.search(run_regex, n)}
by_reason = {}
for name in sorted(skipped):
    by_reason.setdefault(skipped[name], []).append(name)
    n["skip"] += 1
for why, names in by_reason.items():
    print(f"SKIP {' '.join(names)} (skip file: {why})")
ran = set(order) | set(skipped)
notrun = [t for t in all_tests if t not in ran]
if notrun and not run_regex:
    # The test binary died (a panic, the timeout) before reaching them.
    print(f"NOT RUN ({len(notrun)}, counted as failed): " + " ".join(notrun))
    n["fail"] += len(notrun)
open(counts_path, "w").write(f'{n["pass"]} {n["fail"]} {n["skip"]}\n')
EOF
read -r npass nfail nskip <"$work/counts"
if ((rc != 0)); then
	if grep -q 'panic: test timed out' "$work/test.json"; then echo "pulsar-go-tests.sh: TIMEOUT after $timeout"; fi
	grep -h -m1 -A12 '"Output":"panic: ' "$work/test.json" | python3 -c '
import json, sys
for l in sys.stdin:
    try: print("    " + json.loads(l).get("Output", "").rstrip())
    except ValueError: pass' 2>/dev/null
	tail -n 20 "$work/test.err"
	if ((nfail == 0)); then nfail=1; fi
	if [[ ${PULSAR_GO_KEEP:-} != 1 ]]; then
		keep=${TMPDIR:-/tmp}/pulsar-go-tests-$(date +%s)
		mkdir -p "$keep" && cp "$work/test.json" "$work/test.err" "$keep/" &&
			{ [[ -f $work/quire.log ]] && cp "$work/quire.log" "$keep/"; true; } &&
			echo "pulsar-go-tests.sh: go test output and the standalone's log kept in $keep"
	fi
fi
echo "pulsar-go-tests.sh: ${elapsed}s; go test exited $rc"
echo "pulsar-go-tests passed=$npass failed=$nfail skipped=$nskip"
((rc == 0 && nfail == 0))
