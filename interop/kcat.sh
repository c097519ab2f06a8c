#!/usr/bin/env bash
# kcat.sh — does a librdkafka client (kcat) work against a Kafka-protocol server?
#
# Usage: interop/kcat.sh [bootstrap]          (default 127.0.0.1:9092)
#   KCAT_MESSAGES   messages to produce (default 1000)
#   KCAT_TOPIC      topic to use (default: a fresh name, created by the first
#                   produce through broker-side auto-creation)
#   KCAT_TIMEOUT    seconds each kcat command may take (default 60)
#
# Checks, each printed as one PASS/FAIL line:
#   metadata        kcat -L answers and lists at least one broker
#   produce         kcat -P sends N keyed messages (acks=all) without error
#   metadata-topic  kcat -L -t lists the new topic with its partitions
#   consume         kcat -C -e reads back exactly the N key:value pairs
#   group-consume   kcat -G reads all N in a fresh group and commits on exit
#   group-resume    the same group, run again, reads nothing (offsets committed)
#   group-new       after 10 more messages, the group reads exactly those 10
# Exits 0 only if every check passes. Needs kcat (installed with apt-get if
# missing). librdkafka is a different client from franz-go and the Java
# client, with its own choices of API versions and request shapes.
set -uo pipefail

bootstrap=${1:-127.0.0.1:9092}
messages=${KCAT_MESSAGES:-1000}
step_timeout=${KCAT_TIMEOUT:-60}
topic=${KCAT_TOPIC:-interop-kcat-$(date +%s)-$$}
group=interop-kcat-group-$(date +%s)-$$

if ! command -v kcat >/dev/null; then
	echo "kcat.sh: installing kcat" >&2
	sudo=""
	[[ $(id -u) -eq 0 ]] || sudo=sudo
	$sudo apt-get update -qq >&2 && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq kcat >&2 ||
		{ echo "kcat.sh: could not install kcat" >&2; exit 2; }
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

failures=0
pass() { printf 'PASS %-15s %s\n' "$1" "$2"; }
fail() { printf 'FAIL %-15s %s\n' "$1" "$2"; failures=$((failures + 1)); }
# run NAME CMD...: runs CMD bounded by step_timeout; stderr goes to $work/NAME.err
# and is shown on failure.
run() {
	local name=$1
	shift
	timeout --kill-after=5 "$step_timeout" "$@" 2>"$work/$name.err"
}
# librdkafka repeats an error on every retry: show each distinct message once
# (its timestamp dropped), the last ten.
show_err() {
	[[ -f $work/$1.err ]] || return 0
	sed -E 's/^%([0-9])\|[0-9.]+\|/%\1|/' "$work/$1.err" | awk '!seen[$0]++' | tail -n 10 | sed 's/^/    | /'
}

# kcat's group consumer (-G) exits at the end only with -e; enable.partition.eof
# makes librdkafka report the end of each partition so -e can fire. The
# librdkafka default auto-commit also commits the final position on close.
common=(-b "$bootstrap" -m 15 -X "socket.timeout.ms=15000")

echo "kcat.sh: bootstrap=$bootstrap topic=$topic group=$group messages=$messages"

# 1. Metadata for the whole cluster.
if run metadata kcat "${common[@]}" -L >"$work/metadata.out" && grep -q 'broker' "$work/metadata.out"; then
	pass metadata "$(grep -m1 -o '[0-9]* brokers:' "$work/metadata.out" || true)"
else
	fail metadata "kcat -L failed (exit $?; 124/137: timed out)"
	show_err metadata
	# Nothing else can work without metadata: stop here rather than time out
	# six more times.
	echo "kcat.sh: FAIL (no metadata from $bootstrap; other checks not run)"
	exit 1
fi

# 2. Produce N keyed messages: key-i:value-i.
for ((i = 0; i < messages; i++)); do
	printf 'key-%d:value-%d\n' "$i" "$i"
done >"$work/sent"
if run produce kcat "${common[@]}" -P -t "$topic" -K: -X acks=all -l "$work/sent"; then
	pass produce "$messages messages to $topic"
else
	fail produce "kcat -P exited $?"
	show_err produce
fi

# 3. The topic is now in metadata with its partitions.
if run metadata-topic kcat "${common[@]}" -L -t "$topic" >"$work/metadata-topic.out" &&
	grep -q "topic \"$topic\" with [1-9][0-9]* partitions" "$work/metadata-topic.out"; then
	pass metadata-topic "$(grep -o 'with [0-9]* partitions' "$work/metadata-topic.out")"
else
	fail metadata-topic "topic $topic not listed"
	cat "$work/metadata-topic.out" 2>/dev/null | sed 's/^/    | /' | head -n 20
	show_err metadata-topic
fi

# 4. Consume everything from the beginning and compare the content.
sort "$work/sent" >"$work/sent.sorted"
if run consume kcat "${common[@]}" -C -t "$topic" -o beginning -e -f '%k:%s\n' >"$work/consumed"; then
	sort "$work/consumed" >"$work/consumed.sorted"
	if cmp -s "$work/sent.sorted" "$work/consumed.sorted"; then
		pass consume "$(wc -l <"$work/consumed") messages, content identical"
	else
		fail consume "content differs: got $(wc -l <"$work/consumed") lines, want $messages"
		diff "$work/sent.sorted" "$work/consumed.sorted" | head -n 10 | sed 's/^/    | /'
	fi
else
	rc=$?
	fail consume "kcat -C exited $rc (124/137: timed out) having read $(wc -l <"$work/consumed")/$messages messages"
	show_err consume
fi

# group_consume NAME OUT: one balanced-consumer run of the group to the end of
# every assigned partition.
group_consume() {
	run "$1" kcat "${common[@]}" -G "$group" -X auto.offset.reset=earliest \
		-X enable.partition.eof=true -e -f '%k:%s\n' "$topic" >"$2"
}

# 5. The balanced consumer reads everything and commits on close.
if group_consume group-consume "$work/group1"; then
	sort "$work/group1" >"$work/group1.sorted"
	if cmp -s "$work/sent.sorted" "$work/group1.sorted"; then
		pass group-consume "$(wc -l <"$work/group1") messages in group $group"
	else
		fail group-consume "got $(wc -l <"$work/group1") lines, want $messages (or content differs)"
	fi
else
	rc=$?
	fail group-consume "kcat -G exited $rc (124/137: timed out) having read $(wc -l <"$work/group1")/$messages messages"
	show_err group-consume
fi

# 6. The same group again: its committed offsets are at the end, so nothing.
if group_consume group-resume "$work/group2"; then
	if [[ ! -s $work/group2 ]]; then
		pass group-resume "resumed at committed offsets, 0 messages"
	else
		fail group-resume "re-read $(wc -l <"$work/group2") messages: offsets were not committed"
	fi
else
	rc=$?
	fail group-resume "kcat -G exited $rc (124/137: timed out) having read $(wc -l <"$work/group2") messages, want 0"
	show_err group-resume
fi

# 7. Ten more messages: the group reads exactly those.
for ((i = messages; i < messages + 10; i++)); do
	printf 'key-%d:value-%d\n' "$i" "$i"
done >"$work/sent2"
if run produce2 kcat "${common[@]}" -P -t "$topic" -K: -X acks=all -l "$work/sent2" &&
	group_consume group-new "$work/group3"; then
	if cmp -s <(sort "$work/sent2") <(sort "$work/group3"); then
		pass group-new "read exactly the 10 new messages"
	else
		fail group-new "got $(wc -l <"$work/group3") lines, want the 10 new ones"
		head -n 5 "$work/group3" | sed 's/^/    | /'
	fi
else
	fail group-new "produce or kcat -G failed (timed out?) having read $(wc -l <"$work/group3" 2>/dev/null || echo 0) messages, want the 10 new ones"
	show_err produce2
	show_err group-new
fi

if ((failures > 0)); then
	echo "kcat.sh: FAIL ($failures checks failed)"
	exit 1
fi
echo "kcat.sh: PASS (all checks)"
