"""confluent-kafka (librdkafka) against a Kafka-protocol server: transactions.

A transactional producer writes 100 records and aborts, then 100 more and
commits. A read_committed consumer reads exactly the committed 100; a
read_uncommitted one reads all 200. A second producer with the same
transactional.id fences the first: the first's next commit fails with a
fencing error. Prints one PASS/FAIL line; exits 0 only on PASS.

Usage: python3 txn_check.py BOOTSTRAP
"""
import sys
import time
import uuid

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

bootstrap = sys.argv[1] if len(sys.argv) > 1 else "127.0.0.1:9092"
topic = "txn-check-" + uuid.uuid4().hex[:8]
txn_id = "txn-check-" + uuid.uuid4().hex[:8]


def fail(why):
    print(f"confluent txn: FAIL {why}")
    sys.exit(1)


admin = AdminClient({"bootstrap.servers": bootstrap})
for f in admin.create_topics([NewTopic(topic, num_partitions=2, replication_factor=1)]).values():
    try:
        f.result(30)
    except Exception as e:  # noqa: BLE001
        fail(f"create topic: {e}")


def producer():
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id, "transaction.timeout.ms": 60000})
    p.init_transactions(30)
    return p


p = producer()
for label, commit in (("aborted", False), ("committed", True)):
    p.begin_transaction()
    for i in range(100):
        p.produce(topic, key=b"k%d" % (i % 10), value=b"%s-%d" % (label.encode(), i))
    p.flush(30)
    if commit:
        p.commit_transaction(30)
    else:
        p.abort_transaction(30)


def read(isolation, want):
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "txn-check-" + uuid.uuid4().hex[:8],
                  "enable.auto.commit": False, "auto.offset.reset": "earliest", "isolation.level": isolation})
    c.assign([TopicPartition(topic, 0, 0), TopicPartition(topic, 1, 0)])
    values = []
    end = time.time() + 30
    while time.time() < end and len(values) < want:
        m = c.poll(0.5)
        if m is None:
            continue
        if m.error():
            c.close()
            fail(f"consume ({isolation}): {m.error()}")
        values.append(m.value().decode())
    # A little more: anything beyond want would show here.
    extra_end = time.time() + 2
    while time.time() < extra_end:
        m = c.poll(0.2)
        if m is not None and not m.error():
            values.append(m.value().decode())
    c.close()
    return values


rc = read("read_committed", 100)
if len(rc) != 100 or any(not v.startswith("committed-") for v in rc):
    fail(f"read_committed read {len(rc)} records ({sum(v.startswith('aborted-') for v in rc)} aborted), want the 100 committed")
ru = read("read_uncommitted", 200)
if len(ru) != 200:
    fail(f"read_uncommitted read {len(ru)} records, want 200")

# Fencing: a new instance with the same transactional.id.
p.begin_transaction()
p.produce(topic, value=b"zombie")
p.flush(30)
p2 = producer()
try:
    p.commit_transaction(30)
    fail("the first producer committed after a second one with its transactional.id initialised")
except KafkaException as e:
    err = e.args[0]
    if not (err.txn_requires_abort() or err.fatal() or "fenced" in str(err).lower()):
        fail(f"the fenced producer's commit failed with {err}, not a fencing error")
p2.begin_transaction()
p2.produce(topic, value=b"new")
p2.commit_transaction(30)
print(f"confluent txn: PASS read_committed={len(rc)} read_uncommitted={len(ru)} fenced=yes")
