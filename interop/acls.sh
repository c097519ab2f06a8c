#!/usr/bin/env bash
# acls.sh — do Kafka's own tools manage ACLs on a Kafka-protocol server, and
# do real clients get refused with TOPIC_AUTHORIZATION_FAILED when an ACL
# does not allow them?
#
# Usage: ACL_ADMIN_USER=admin ACL_ADMIN_PASSWORD=... interop/acls.sh [bootstrap]   (default 127.0.0.1:9092)
#   ACL_ADMIN_USER, ACL_ADMIN_PASSWORD  a super user (quire --kafka-sasl-admin-user
#                   or --kafka-super-users) with a SCRAM-SHA-512 credential;
#                   the server must require SASL (PLAIN and SCRAM-SHA-512,
#                   SASL_PLAINTEXT) and enforce ACLs (--kafka-authorizer,
#                   allow.everyone.if.no.acl.found off)
#   ACL_TIMEOUT     seconds each client command may take (default 60)
#   ACL_KCAT_MECHANISM  kcat's SASL mechanism (default SCRAM-SHA-512). Apache
#                   Kafka 4.x refuses the SCRAM of librdkafka 2.0.2 (Debian's
#                   kcat; see internal/auth/scram.go), so against it use PLAIN
#                   with the two users in the listener's JAAS config
#                   (user_acl-reader="acl-reader-secret"
#                   user_acl-outsider="acl-outsider-secret"); Quire checks
#                   PLAIN against the SCRAM credential kafka-configs sets.
#
# Kafka's tools (kafka-tools and the kafka_2.13 core for ConfigCommand,
# 4.1.1) are fetched once into ~/.cache/quire-interop (bench/maven-libs.sh).
#
# Checks, each printed as one PASS/FAIL line:
#   users            kafka-configs --alter --add-config SCRAM-SHA-512=[...]
#                    sets two users, acl-reader and acl-outsider (the same
#                    names every run; topic and group are new each run)
#   topic            kafka-topics --create as the admin
#   acl-add          kafka-acls --add: the reader may Write, Read (and so
#                    Describe) the topic and Read its consumer group
#   acl-list         kafka-acls --list shows those ACLs
#   allowed-kcat     librdkafka as the reader produces 20 and reads them back
#   allowed-java     the Java console consumer as the reader, in the group,
#                    reads the 20 back
#   denied-kcat      librdkafka as the outsider: "Topic authorization failed"
#   denied-java      the Java producer as the outsider: TopicAuthorizationException
#   hidden           the outsider's metadata of all topics does not list it
#   acl-remove       kafka-acls --remove (the group's ACL too); then the
#                    reader is refused
# The last line is "acls.sh: PASS" or "acls.sh: FAIL (n)".
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
bootstrap=${1:-127.0.0.1:9092}
admin=${ACL_ADMIN_USER:?ACL_ADMIN_USER is required}
admin_password=${ACL_ADMIN_PASSWORD:?ACL_ADMIN_PASSWORD is required}
step_timeout=${ACL_TIMEOUT:-60}
version=4.1.1
libs=${QUIRE_INTEROP_CACHE:-$HOME/.cache/quire-interop}/acls-$version
run_id=$(date +%s)-$$
topic=interop-acls-$run_id
group=interop-acls-group-$run_id
kcat_mechanism=${ACL_KCAT_MECHANISM:-SCRAM-SHA-512}
reader=acl-reader outsider=acl-outsider
reader_password=$reader-secret outsider_password=$outsider-secret

echo "acls.sh: bootstrap=$bootstrap admin=$admin topic=$topic"
command -v kcat >/dev/null || { echo "acls.sh: kcat is required (apt-get install kcat)"; echo "acls.sh: FAIL (setup)"; exit 2; }
command -v java >/dev/null || { echo "acls.sh: java 17+ is required"; echo "acls.sh: FAIL (setup)"; exit 2; }
"$here/../bench/maven-libs.sh" "$libs" quire-acls <<DEPS || { echo "acls.sh: FAIL fetching kafka-tools $version from Maven Central"; exit 1; }
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka-tools</artifactId><version>$version</version></dependency>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka_2.13</artifactId><version>$version</version></dependency>
    <dependency><groupId>org.slf4j</groupId><artifactId>slf4j-reload4j</artifactId><version>1.7.36</version></dependency>
DEPS

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failures=0
pass() { printf 'PASS %-14s %s\n' "$1" "$2"; }
fail() {
	printf 'FAIL %-14s %s\n' "$1" "$2"
	failures=$((failures + 1))
	for f in "$work/$1.err" "$work/$1.out"; do
		[[ -s $f ]] && awk '!seen[$0]++' "$f" | grep -v '^\s*at ' | tail -n 8 | sed 's/^/    | /'
	done
}

props() { # USER PASSWORD FILE
	{
		echo "security.protocol=SASL_PLAINTEXT"
		echo "sasl.mechanism=SCRAM-SHA-512"
		echo "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username=\"$1\" password=\"$2\";"
	} >"$3"
}
props "$admin" "$admin_password" "$work/admin.properties"
props "$reader" "$reader_password" "$work/reader.properties"
props "$outsider" "$outsider_password" "$work/outsider.properties"
printf 'log4j.rootLogger=ERROR, stderr\nlog4j.appender.stderr=org.apache.log4j.ConsoleAppender\nlog4j.appender.stderr.Target=System.err\nlog4j.appender.stderr.layout=org.apache.log4j.PatternLayout\nlog4j.appender.stderr.layout.ConversionPattern=%%p %%c: %%m%%n\n' >"$work/log4j.properties"
java_tool() { timeout --kill-after=5 "$step_timeout" java -Xmx512m -Dlog4j.configuration="file:$work/log4j.properties" -cp "$libs/*" "$@"; }
acls_tool() { java_tool org.apache.kafka.tools.AclCommand --bootstrap-server "$bootstrap" --command-config "$work/admin.properties" "$@"; }
kcat_as() { # USER PASSWORD kcat-args...
	local user=$1 pw=$2
	shift 2
	timeout --kill-after=5 "$step_timeout" kcat -b "$bootstrap" -m 15 -X security.protocol=SASL_PLAINTEXT \
		-X "sasl.mechanisms=$kcat_mechanism" -X "sasl.username=$user" -X "sasl.password=$pw" "$@"
}

name=users
if java_tool kafka.admin.ConfigCommand --bootstrap-server "$bootstrap" --command-config "$work/admin.properties" --alter \
	--add-config "SCRAM-SHA-512=[iterations=4096,password=$reader_password]" --entity-type users --entity-name "$reader" >"$work/$name.out" 2>"$work/$name.err" &&
	java_tool kafka.admin.ConfigCommand --bootstrap-server "$bootstrap" --command-config "$work/admin.properties" --alter \
		--add-config "SCRAM-SHA-512=[iterations=4096,password=$outsider_password]" --entity-type users --entity-name "$outsider" >>"$work/$name.out" 2>>"$work/$name.err"; then
	pass "$name" "kafka-configs set $reader and $outsider"
else
	fail "$name" "kafka-configs --add-config SCRAM-SHA-512"
fi

name=topic
if java_tool org.apache.kafka.tools.TopicCommand --bootstrap-server "$bootstrap" --command-config "$work/admin.properties" \
	--create --topic "$topic" --partitions 1 >"$work/$name.out" 2>"$work/$name.err"; then
	pass "$name" "kafka-topics created $topic"
else
	fail "$name" "kafka-topics --create"
fi

name=acl-add
if acls_tool --add --allow-principal "User:$reader" --operation Write --operation Read --topic "$topic" >"$work/$name.out" 2>"$work/$name.err" &&
	acls_tool --add --allow-principal "User:$reader" --operation Read --group "$group" >>"$work/$name.out" 2>>"$work/$name.err"; then
	pass "$name" "User:$reader may Write and Read $topic, Read group $group"
else
	fail "$name" "kafka-acls --add"
fi

name=acl-list
if acls_tool --list --topic "$topic" >"$work/$name.out" 2>"$work/$name.err" &&
	grep -q "principal=User:$reader, host=\*, operation=WRITE, permissionType=ALLOW" "$work/$name.out" &&
	grep -q "principal=User:$reader, host=\*, operation=READ, permissionType=ALLOW" "$work/$name.out"; then
	pass "$name" "kafka-acls --list shows the reader's WRITE and READ"
else
	fail "$name" "kafka-acls --list does not show the ACLs"
fi

name=allowed-kcat
seq 1 20 | sed 's/^/m-/' >"$work/sent"
: >"$work/got"
if kcat_as "$reader" "$reader_password" -P -t "$topic" -l "$work/sent" 2>"$work/$name.err" &&
	kcat_as "$reader" "$reader_password" -C -t "$topic" -o beginning -c 20 -e >"$work/got" 2>>"$work/$name.err" &&
	cmp -s <(sort "$work/sent") <(sort "$work/got"); then
	pass "$name" "the reader produced 20 and read them back"
else
	fail "$name" "the reader's produce or read back failed ($(wc -l <"$work/got") read)"
fi

name=allowed-java
if java_tool org.apache.kafka.tools.consumer.ConsoleConsumer --bootstrap-server "$bootstrap" --topic "$topic" --group "$group" \
	--from-beginning --max-messages 20 --timeout-ms 30000 --consumer.config "$work/reader.properties" >"$work/$name.out" 2>"$work/$name.err" &&
	[[ $(wc -l <"$work/$name.out") -eq 20 ]]; then
	pass "$name" "the reader's console consumer read 20 in group $group"
else
	fail "$name" "the reader's console consumer ($(wc -l <"$work/$name.out") read)"
fi

name=denied-kcat
if echo denied | kcat_as "$outsider" "$outsider_password" -P -t "$topic" >"$work/$name.out" 2>"$work/$name.err"; then
	fail "$name" "the outsider's produce succeeded"
elif grep -qi 'authorization failed' "$work/$name.err"; then
	pass "$name" "$(grep -o -i -m1 '[a-z ]*authorization failed' "$work/$name.err" | head -1 | sed 's/^ *//')"
else
	fail "$name" "refused, but not with an authorization failure"
fi

name=denied-java
java_tool org.apache.kafka.tools.ProducerPerformance --topic "$topic" --num-records 1 --record-size 8 --throughput -1 \
	--producer-props "bootstrap.servers=$bootstrap" max.block.ms=15000 delivery.timeout.ms=15000 request.timeout.ms=10000 \
	--producer.config "$work/outsider.properties" >"$work/$name.out" 2>"$work/$name.err"
if grep -q 'TopicAuthorizationException' "$work/$name.out" "$work/$name.err"; then
	pass "$name" "$(grep -h -o -m1 'TopicAuthorizationException: [^]]*]' "$work/$name.out" "$work/$name.err" | head -1)"
else
	fail "$name" "no TopicAuthorizationException"
fi

name=hidden
if kcat_as "$outsider" "$outsider_password" -L >"$work/$name.out" 2>"$work/$name.err" && ! grep -q "\"$topic\"" "$work/$name.out"; then
	pass "$name" "the outsider's metadata does not list $topic"
else
	fail "$name" "the outsider's metadata lists $topic (or failed)"
fi

name=acl-remove
if acls_tool --remove --force --allow-principal "User:$reader" --operation Write --operation Read --topic "$topic" >"$work/$name.out" 2>"$work/$name.err" &&
	acls_tool --remove --force --allow-principal "User:$reader" --operation Read --group "$group" >>"$work/$name.out" 2>>"$work/$name.err" &&
	! echo after | kcat_as "$reader" "$reader_password" -P -t "$topic" >>"$work/$name.out" 2>>"$work/$name.err" &&
	grep -qi 'authorization failed' "$work/$name.err"; then
	pass "$name" "after kafka-acls --remove the reader is refused"
else
	fail "$name" "kafka-acls --remove, or the reader still allowed"
fi

if ((failures > 0)); then
	echo "acls.sh: FAIL ($failures)"
	exit 1
fi
echo "acls.sh: PASS"
